"""A small, safe arithmetic-expression language for mechanism YAML files.

User text is **never** handed to ``eval``: it is tokenized and parsed here into a tiny syntax
tree made of numbers, variables, the operators ``+ - * / ^`` (``^`` is power, right
associative, binding tighter than unary minus, so ``-x^2 == -(x^2)``), parentheses and calls of
a fixed set of functions.  Anything else — quotes, dots after names (attribute access), ``:``
(lambdas), ``=``, brackets, names starting with ``__``, unknown functions — is an
:class:`~mbfg.errors.ExpressionSyntaxError`.  Evaluation errors (``1/0``, ``sqrt(-1)``,
overflow) are :class:`~mbfg.errors.ExpressionError`; unknown names are
:class:`~mbfg.errors.UndefinedVariableError`.

Grammar (precedence climbing)::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/') unary)*
    unary   := ('+' | '-') unary | power
    power   := atom ('^' unary)?          (right associative: 2^3^2 == 2^9)
    atom    := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'

Examples
--------
>>> evaluate("(1/3)*mass*length^2", {"mass": 3.0, "length": 2.0})
4.0
>>> evaluate("x1 + 5*cos(45*pi/180)", {"x1": 0.0})  # doctest: +ELLIPSIS
3.535...
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Mapping

from mbfg.errors import ExpressionError, ExpressionSyntaxError, UndefinedVariableError

__all__ = ["FUNCTIONS", "CONSTANTS", "Expression", "parse", "evaluate", "RESERVED_NAMES"]

FUNCTIONS: dict = {
    "sqrt": (1, math.sqrt), "sin": (1, math.sin), "cos": (1, math.cos), "tan": (1, math.tan),
    "asin": (1, math.asin), "acos": (1, math.acos), "atan": (1, math.atan),
    "atan2": (2, math.atan2), "abs": (1, abs), "exp": (1, math.exp), "log": (1, math.log),
    "deg2rad": (1, math.radians), "rad2deg": (1, math.degrees),
}
"""Function name -> (number of arguments, implementation)."""

CONSTANTS: dict = {"pi": math.pi}
RESERVED_NAMES = frozenset(FUNCTIONS) | frozenset(CONSTANTS)

MAX_LENGTH = 10_000
MAX_DEPTH = 100

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>[-+*/^(),])
""", re.VERBOSE | re.ASCII)  # ASCII: no Unicode digits such as '\u0663' or exotic spaces


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    pos: int


def _tokenize(text: str) -> list[_Tok]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            hint = ""
            if ch == ".":
                hint = " (attribute access is not allowed)"
            elif ch in "'\"":
                hint = " (strings are not allowed)"
            elif ch == ":":
                hint = " (lambdas and slices are not allowed)"
            elif ch == "=":
                hint = " (assignments and comparisons are not allowed)"
            elif ch in "[]{}":
                hint = " (lists, indexing and sets are not allowed)"
            raise ExpressionSyntaxError(
                f"invalid character {ch!r} at column {pos + 1} in expression {text!r}{hint}; "
                f"expected numbers, names, + - * / ^ ( ) and function calls")
        if m.lastgroup != "space":
            tokens.append(_Tok(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(_Tok("end", "", len(text)))
    return tokens


# Syntax tree: tuples ("num", value) | ("var", name) | ("neg", node) | ("^", base, exponent)
# | ("call", name, args) | ("chain", first, ((op, node), ...)) for a left-associative run of
# ``+ -`` or ``* /`` operators.  Chains are flat, so the tree is never deeper than the
# nesting limit (a long sum such as ``1+1+...+1`` cannot exhaust the Python stack), and tuples
# keep the tree immutable and cheap.

class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def error(self, what: str, tok: _Tok) -> ExpressionSyntaxError:
        found = "end of expression" if tok.kind == "end" else repr(tok.text)
        return ExpressionSyntaxError(
            f"{what}, found {found} at column {tok.pos + 1} in expression {self.text!r}")

    @property
    def tok(self) -> _Tok:
        return self.tokens[self.i]

    def take(self, text: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == text:
            self.i += 1
            return True
        return False

    def nest(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionSyntaxError(
                f"expression nested more than {MAX_DEPTH} levels deep: {self.text[:60]!r}...")

    def parse(self):
        node = self.expr()
        if self.tok.kind != "end":
            raise self.error("expected an operator or the end of the expression", self.tok)
        return node

    def expr(self):
        self.nest()
        first, rest = self.term(), []
        while self.tok.kind == "op" and self.tok.text in "+-":
            op = self.tok.text
            self.i += 1
            rest.append((op, self.term()))
        self.depth -= 1
        return ("chain", first, tuple(rest)) if rest else first

    def term(self):
        first, rest = self.unary(), []
        while self.tok.kind == "op" and self.tok.text in "*/":
            op = self.tok.text
            self.i += 1
            if op == "*" and self.tok.kind == "op" and self.tok.text == "*":
                raise self.error("expected an operand after '*' ('**' is not an operator; "
                                 "write powers as a^b)", self.tok)
            rest.append((op, self.unary()))
        return ("chain", first, tuple(rest)) if rest else first

    def unary(self):
        self.nest()
        if self.take("-"):
            node = ("neg", self.unary())
        elif self.take("+"):
            node = self.unary()
        else:
            node = self.power()
        self.depth -= 1
        return node

    def power(self):
        node = self.atom()
        if self.take("^"):
            node = ("^", node, self.unary())
        return node

    def atom(self):
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            value = float(tok.text)
            if not math.isfinite(value):
                raise ExpressionSyntaxError(
                    f"number {tok.text} at column {tok.pos + 1} is too large in expression "
                    f"{self.text!r}; expected a finite number")
            return ("num", value)
        if tok.kind == "name":
            if tok.text.startswith("__"):
                raise ExpressionSyntaxError(
                    f"name {tok.text!r} at column {tok.pos + 1} in expression {self.text!r} is not "
                    "allowed (names starting with '__' are reserved); expected a parameter, a "
                    "variable or a function name")
            self.i += 1
            if self.take("("):
                if tok.text not in FUNCTIONS:
                    raise ExpressionSyntaxError(
                        f"unknown function {tok.text!r} at column {tok.pos + 1} in expression "
                        f"{self.text!r}; expected one of {', '.join(sorted(FUNCTIONS))}")
                args = [self.expr()]
                while self.take(","):
                    args.append(self.expr())
                if not self.take(")"):
                    raise self.error("expected ',' or ')' closing the argument list", self.tok)
                arity = FUNCTIONS[tok.text][0]
                if len(args) != arity:
                    raise ExpressionSyntaxError(
                        f"function {tok.text}() takes {arity} argument{'s' * (arity > 1)}, "
                        f"got {len(args)} in expression {self.text!r}")
                return ("call", tok.text, tuple(args))
            if tok.text in FUNCTIONS:
                raise self.error(f"expected '(' after function name {tok.text!r}", self.tok)
            return ("var", tok.text)
        if self.take("("):
            node = self.expr()
            if not self.take(")"):
                raise self.error("expected ')'", self.tok)
            return node
        raise self.error("expected a number, a name, '(' or a unary sign", tok)


def _names(node, out: set) -> set:
    kind = node[0]
    if kind == "var":
        out.add(node[1])
    elif kind == "neg":
        _names(node[1], out)
    elif kind == "call":
        for a in node[2]:
            _names(a, out)
    elif kind == "chain":
        _names(node[1], out)
        for _, b in node[2]:
            _names(b, out)
    elif kind == "^":
        _names(node[1], out)
        _names(node[2], out)
    return out


class _EvalError(Exception):
    """Internal: a math error, with a readable reason."""


def _power(a: float, b: float) -> float:
    if a == 0.0 and b < 0.0:
        raise _EvalError("0 raised to a negative power (division by zero)")
    if a < 0.0 and not b.is_integer():
        raise _EvalError(f"negative number {a:g} raised to the fractional power {b:g}")
    try:
        return a ** b
    except OverflowError:
        raise _EvalError(f"{a:g}^{b:g} is too large (overflow)") from None


def _call(name: str, args: list) -> float:
    try:
        return float(FUNCTIONS[name][1](*args))
    except OverflowError:
        raise _EvalError(f"{name}({', '.join(f'{a:g}' for a in args)}) is too large "
                         "(overflow)") from None
    except ValueError:
        raise _EvalError(f"{name}({', '.join(f'{a:g}' for a in args)}) is outside the "
                         "function's domain") from None


def _eval(node, env: Mapping[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        return float(env[node[1]])
    if kind == "neg":
        return -_eval(node[1], env)
    if kind == "call":
        return _call(node[1], [_eval(a, env) for a in node[2]])
    if kind == "^":
        return _power(_eval(node[1], env), _eval(node[2], env))
    value = _eval(node[1], env)  # "chain"
    for op, operand in node[2]:
        b = _eval(operand, env)
        if op == "+":
            value += b
        elif op == "-":
            value -= b
        elif op == "*":
            value *= b
        elif b == 0.0:
            raise _EvalError("division by zero")
        else:
            value /= b
        if not math.isfinite(value):
            raise _EvalError(f"an intermediate result is too large (overflow, {value})")
    return value


@dataclass(frozen=True)
class Expression:
    """A parsed expression: ``text`` and its syntax tree; evaluate with :meth:`__call__`."""
    text: str
    tree: tuple

    @property
    def names(self) -> frozenset:
        """Variable names the expression uses (constants such as ``pi`` excluded)."""
        return frozenset(_names(self.tree, set()) - set(CONSTANTS))

    def __call__(self, env: Mapping[str, float] | None = None) -> float:
        """Evaluate with the variables of ``env``.

        Raises
        ------
        UndefinedVariableError
            A name is neither a constant nor in ``env``.
        ExpressionError
            A math domain error (``sqrt(-1)``, ``1/0``, overflow) or a non-finite result.
        """
        env = dict(env or {})
        missing = sorted(n for n in self.names if n not in env)
        if missing:
            available = ", ".join(sorted(env)) or "none"
            hint = ""
            if len(missing) == 1:
                close = difflib.get_close_matches(missing[0], list(env) + list(CONSTANTS), n=1,
                                                  cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UndefinedVariableError(
                f"undefined variable{'s' * (len(missing) > 1)} {', '.join(missing)}{hint} in "
                f"expression {self.text!r}; expected one of the variables defined here: {available}")
        env.update(CONSTANTS)
        try:
            value = _eval(self.tree, env)
        except _EvalError as e:
            raise ExpressionError(f"cannot evaluate {self.text!r}: {e}; expected a finite "
                                  "real result") from None
        except (ArithmeticError, ValueError, TypeError) as e:  # defensive; _eval maps the usual ones
            raise ExpressionError(f"cannot evaluate {self.text!r}: {e}") from None
        if not math.isfinite(value):
            raise ExpressionError(f"expression {self.text!r} evaluates to {value}, expected a finite number")
        return value


def parse(text: str) -> Expression:
    """Parse ``text`` into an :class:`Expression` (raises ExpressionSyntaxError)."""
    if not isinstance(text, str):
        raise ExpressionSyntaxError(f"expected an expression string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExpressionSyntaxError(f"expression longer than {MAX_LENGTH} characters")
    if not text.strip():
        raise ExpressionSyntaxError("empty expression; expected a number or an expression")
    return Expression(text, _Parser(text).parse())


def evaluate(text: str, env: Mapping[str, float] | None = None) -> float:
    """Parse and evaluate ``text`` in one call."""
    return parse(text)(env)
