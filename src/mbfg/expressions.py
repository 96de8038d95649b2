"""A small, safe arithmetic-expression language for mechanism YAML files.

User text is **never** handed to ``eval``: it is tokenized and parsed here into a tiny syntax
tree made of numbers, variables, the operators ``+ - * / ^`` (``^`` is power, right
associative, binding tighter than unary minus, so ``-x^2 == -(x^2)``), parentheses and calls of
a fixed set of functions.  Anything else — quotes, dots after names (attribute access), ``:``
(lambdas), ``=``, brackets, unknown functions — is an :class:`~mbfg.errors.ExpressionSyntaxError`.

Grammar (precedence climbing)::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/') unary)*
    unary   := ('+' | '-') unary | power
    power   := atom ('^' unary)?
    atom    := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'

Examples
--------
>>> evaluate("(1/3)*mass*length^2", {"mass": 3.0, "length": 2.0})
4.0
>>> evaluate("x1 + 5*cos(45*pi/180)", {"x1": 0.0})  # doctest: +ELLIPSIS
3.535...
"""
from __future__ import annotations

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
""", re.VERBOSE)


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
            elif ch == "*" or ch == "=":
                hint = ""
            raise ExpressionSyntaxError(
                f"invalid character {ch!r} at column {pos + 1} in expression {text!r}{hint}; "
                f"expected numbers, names, + - * / ^ ( ) and function calls")
        if m.lastgroup != "space":
            tokens.append(_Tok(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(_Tok("end", "", len(text)))
    return tokens


# Syntax tree: tuples ("num", value) | ("var", name) | ("neg", node) | (op, left, right)
# | ("call", name, args).  Tuples keep the tree immutable and cheap.

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
        node = self.term()
        while self.tok.kind == "op" and self.tok.text in "+-":
            op = self.tok.text
            self.i += 1
            node = (op, node, self.term())
        self.depth -= 1
        return node

    def term(self):
        node = self.unary()
        while self.tok.kind == "op" and self.tok.text in "*/":
            op = self.tok.text
            self.i += 1
            node = (op, node, self.unary())
        return node

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
            return ("num", float(tok.text))
        if tok.kind == "name":
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
    elif kind != "num":
        _names(node[1], out)
        _names(node[2], out)
    return out


def _eval(node, env: Mapping[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        return env[node[1]]
    if kind == "neg":
        return -_eval(node[1], env)
    if kind == "call":
        return float(FUNCTIONS[node[1]][1](*(_eval(a, env) for a in node[2])))
    a, b = _eval(node[1], env), _eval(node[2], env)
    if kind == "+":
        return a + b
    if kind == "-":
        return a - b
    if kind == "*":
        return a * b
    if kind == "/":
        return a / b
    result = a ** b  # "^"
    if isinstance(result, complex):
        raise ValueError("negative number raised to a fractional power")
    return result


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
            raise UndefinedVariableError(
                f"undefined variable{'s' * (len(missing) > 1)} {', '.join(missing)} in expression "
                f"{self.text!r}; defined here: {available}")
        env.update(CONSTANTS)
        try:
            value = _eval(self.tree, env)
        except (ValueError, ZeroDivisionError, OverflowError, TypeError) as e:
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
