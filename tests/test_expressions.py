"""The safe expression language of mechanism YAML files (mbfg.expressions).

Expected values are computed here with Python's ``math`` module, independently of the parser.
"""
from __future__ import annotations

import builtins
import math

import pytest

import mbfg.expressions as ex
from mbfg.errors import (ExpressionError, ExpressionSyntaxError, MbfgError, MechanismError,
                         UndefinedVariableError)
from mbfg.expressions import FUNCTIONS, evaluate, parse


def approx(v):
    return pytest.approx(v, rel=1e-15, abs=1e-15)


# ----------------------------------------------------------------------------- hierarchy
def test_error_hierarchy():
    assert issubclass(ExpressionSyntaxError, ExpressionError)
    assert issubclass(UndefinedVariableError, ExpressionError)
    assert issubclass(ExpressionError, MechanismError)
    assert issubclass(MechanismError, MbfgError)


# ---------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("text, value", [
    ("0", 0.0), ("7", 7.0), ("1.", 1.0), (".5", 0.5), ("0.25", 0.25), ("1e-3", 0.001),
    ("2.5E+2", 250.0), ("3e2", 300.0), ("1.5e0", 1.5), ("007", 7.0),
])
def test_numbers(text, value):
    assert evaluate(text) == value


def test_pi():
    assert evaluate("pi") == math.pi
    assert evaluate("2*pi") == 2 * math.pi
    assert "pi" not in parse("2*pi").names


# ------------------------------------------------------------------------- precedence
@pytest.mark.parametrize("text, expected", [
    ("1+2*3", 1 + 2 * 3),
    ("(1+2)*3", (1 + 2) * 3),
    ("1-2-3", (1 - 2) - 3),                 # left associative
    ("8/2/2", (8 / 2) / 2),
    ("2*3/4*5", ((2 * 3) / 4) * 5),
    ("2^3^2", 2 ** (3 ** 2)),               # ^ is right associative
    ("(2^3)^2", (2 ** 3) ** 2),
    ("-3^2", -(3 ** 2)),                    # -x^2 == -(x^2)
    ("(-3)^2", (-3) ** 2),
    ("2^-1", 2 ** -1),
    ("2^-2^2", 2 ** -(2 ** 2)),
    ("-2^-2", -(2 ** -2)),
    ("--2", 2.0),
    ("+-+2", -2.0),
    ("2*-3", -6.0),
    ("1/3*3", (1 / 3) * 3),
    ("(1/3)*2*1.5^2", (1 / 3) * 2 * 1.5 ** 2),
    ("2^0.5^2", 2 ** (0.5 ** 2)),
    (" 1 +\t2\n", 3.0),
])
def test_precedence_and_associativity(text, expected):
    assert evaluate(text) == approx(expected)


def test_unary_minus_binds_looser_than_power_with_variables():
    x = 3.0
    assert evaluate("-x^2", {"x": x}) == -(x ** 2)
    assert evaluate("-x^2", {"x": x}) == evaluate("-(x^2)", {"x": x})
    assert evaluate("(-x)^2", {"x": x}) == x ** 2


# -------------------------------------------------------------------------- functions
ONE_ARG = {
    "sqrt": (2.0, math.sqrt(2.0)), "sin": (0.7, math.sin(0.7)), "cos": (0.7, math.cos(0.7)),
    "tan": (0.7, math.tan(0.7)), "asin": (0.3, math.asin(0.3)), "acos": (0.3, math.acos(0.3)),
    "atan": (2.0, math.atan(2.0)), "abs": (-2.5, 2.5), "exp": (1.5, math.exp(1.5)),
    "log": (10.0, math.log(10.0)), "deg2rad": (45.0, math.pi / 4),
    "rad2deg": (math.pi / 3, 60.0),
}


@pytest.mark.parametrize("name", sorted(ONE_ARG))
def test_one_argument_functions(name):
    arg, expected = ONE_ARG[name]
    assert evaluate(f"{name}({arg!r})") == approx(expected)
    assert evaluate(f"{name}(a)", {"a": arg}) == approx(expected)


@pytest.mark.parametrize("y, x", [(1.0, 1.0), (1.0, -1.0), (-1.0, -1.0), (0.0, -1.0), (2.0, 0.0)])
def test_atan2(y, x):
    assert evaluate(f"atan2({y!r}, {x!r})") == approx(math.atan2(y, x))
    assert evaluate("atan2(a, b)", {"a": y, "b": x}) == approx(math.atan2(y, x))


def test_every_function_is_tested():
    assert set(FUNCTIONS) == set(ONE_ARG) | {"atan2"}


def test_deg2rad_and_rad2deg():
    assert evaluate("deg2rad(180)") == approx(math.pi)
    assert evaluate("rad2deg(pi)") == approx(180.0)
    assert evaluate("rad2deg(deg2rad(30))") == approx(30.0)


def test_expressions_of_the_reference_files():
    # pendulum1 / pendulum2 / quick-return style expressions
    assert evaluate("2.0*cos(deg2rad(45.0))") == approx(2.0 * math.cos(math.radians(45.0)))
    assert evaluate("x1+5*cos(45*pi/180)", {"x1": 7.0}) == approx(7.0 + 5 * math.cos(45 * math.pi / 180))
    assert evaluate("(1/3)*mass*length^2", {"mass": 3.0, "length": 2.0}) == approx(4.0)
    assert evaluate("(1/2)*mass*length12^2", {"mass": 3.0, "length12": 5.0}) == approx(37.5)
    x1, y1, h, b = 0.1 * math.cos(math.pi / 6), 0.1 * math.sin(math.pi / 6), 0.3, 0.5
    assert evaluate("-h + b*(y1+h)/sqrt(x1^2 + (y1+h)^2)", {"x1": x1, "y1": y1, "h": h, "b": b}) \
        == approx(-h + b * (y1 + h) / math.sqrt(x1 ** 2 + (y1 + h) ** 2))


def test_parse_once_evaluate_many():
    e = parse("a*x + b")
    assert e.names == frozenset({"a", "x", "b"})
    assert e({"a": 2.0, "x": 3.0, "b": 1.0}) == 7.0
    assert e({"a": -1.0, "x": 3.0, "b": 0.5}) == -2.5
    assert isinstance(e({"a": 1, "x": 1, "b": 1}), float)


def test_long_flat_sums_do_not_exhaust_the_stack():
    assert evaluate("+".join(["1"] * 4000)) == 4000.0
    assert evaluate("*".join(["1"] * 4000)) == 1.0
    assert evaluate("-".join(["x"] * 3000), {"x": 1.0}) == 1.0 - 2999.0


# ---------------------------------------------------------------------- syntax errors
@pytest.mark.parametrize("text, column", [
    ("1 +", 4), ("(1+2", 5), ("1+2)", 4), ("2*(3+", 6), ("1 2", 3), ("*2", 1),
    ("sin(1", 6), ("sin 1", 5), ("1,2", 2), ("()", 2), ("1.2.3", 4),
])
def test_syntax_error_reports_the_column(text, column):
    with pytest.raises(ExpressionSyntaxError) as info:
        parse(text)
    msg = str(info.value)
    assert f"column {column}" in msg
    assert repr(text) in msg
    assert "expected" in msg


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_expression(text):
    with pytest.raises(ExpressionSyntaxError, match="empty expression"):
        parse(text)


@pytest.mark.parametrize("text", ["#", "1 % 2", "2 & 3", "1 < 2", "a == b", "@x", "$x", "x;y",
                                  "1\x00", "\u0663", "{1}", "x[0]", "`ls`", "!x", "a|b", "~1"])
def test_invalid_characters(text):
    with pytest.raises(ExpressionSyntaxError, match=r"invalid character .* at column \d+"):
        parse(text)


def test_unknown_function():
    with pytest.raises(ExpressionSyntaxError) as info:
        parse("2*foo(1)")
    msg = str(info.value)
    assert "unknown function 'foo'" in msg and "column 3" in msg
    for name in FUNCTIONS:
        assert name in msg  # lists what was expected


@pytest.mark.parametrize("text, name, arity, got", [
    ("sin(1, 2)", "sin", 1, 2), ("atan2(1)", "atan2", 2, 1), ("atan2(1, 2, 3)", "atan2", 2, 3),
    ("sqrt(1,1)", "sqrt", 1, 2),
])
def test_wrong_number_of_arguments(text, name, arity, got):
    with pytest.raises(ExpressionSyntaxError) as info:
        parse(text)
    assert f"{name}() takes {arity} argument" in str(info.value)
    assert f"got {got}" in str(info.value)


def test_function_name_without_call_and_constant_called():
    with pytest.raises(ExpressionSyntaxError, match=r"expected '\(' after function name 'sin'"):
        parse("sin + 1")
    with pytest.raises(ExpressionSyntaxError, match="unknown function 'pi'"):
        parse("pi(2)")


def test_double_star_is_not_power():
    with pytest.raises(ExpressionSyntaxError, match=r"'\*\*' is not an operator.*a\^b"):
        parse("x**2")


@pytest.mark.parametrize("text", ["1e999", "2*1e400"])
def test_number_too_large(text):
    with pytest.raises(ExpressionSyntaxError, match="too large"):
        parse(text)


def test_deep_nesting_is_a_syntax_error_not_a_recursion_error():
    for text in ["(" * 500 + "1" + ")" * 500, "-" * 1000 + "1", "2^" * 600 + "2",
                 "sin(" * 300 + "1" + ")" * 300]:
        with pytest.raises(ExpressionSyntaxError, match="nested more than"):
            parse(text)
    assert evaluate("(" * 20 + "1" + ")" * 20) == 1.0  # reasonable nesting is fine


def test_too_long_expression():
    with pytest.raises(ExpressionSyntaxError, match="longer than"):
        parse("1+" * 6000 + "1")


@pytest.mark.parametrize("value", [1.0, None, ["1"], {"a": 1}])
def test_non_string_input(value):
    with pytest.raises(ExpressionSyntaxError, match="expected an expression string"):
        parse(value)


# ------------------------------------------------------------- code execution attempts
CODE = [
    "__import__('os').system('x')",
    "x.__class__",
    "lambda: 1",
    "(lambda x: x)(1)",
    "open('f')",
    "[1,2]",
    "a=1",
    "1 if 1 else 2",
    "x**2",
    "__import__",
    "exec('1')",
    "eval('1')",
    "getattr(x, 'y')",
    "().__class__.__bases__[0].__subclasses__()",
    "globals()",
    "x.real",
    "1 and 2",
    "not 1",
    "f'{1}'",
    "b'1'",
    "x := 1",
    "1; 2",
    "import os",
    "{}",
    "print(1)",
]


@pytest.fixture
def no_evaluation(monkeypatch):
    """Fail the test if anything gets evaluated or a process would be started."""
    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"evaluation attempted: {args!r}")

    monkeypatch.setattr(ex, "_eval", forbidden)
    monkeypatch.setattr("os.system", forbidden)
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    return calls


@pytest.mark.parametrize("text", CODE)
def test_code_execution_attempts_are_syntax_errors(text, no_evaluation):
    env = {"x": 1.0, "a": 1.0, "f": 1.0, "__import__": 1.0, "print": 1.0}
    with pytest.raises(ExpressionSyntaxError) as info:
        evaluate(text, env)
    assert repr(text) in str(info.value) or "column" in str(info.value)
    assert no_evaluation == []


@pytest.mark.parametrize("text, hint", [
    ("x.__class__", "attribute access is not allowed"),
    ("open('f')", "strings are not allowed"),
    ("lambda: 1", "lambdas"),
    ("a=1", "assignments"),
    ("[1,2]", "lists"),
    ("__import__", "names starting with '__'"),
])
def test_code_execution_attempts_explain_what_is_not_allowed(text, hint):
    with pytest.raises(ExpressionSyntaxError, match=hint):
        parse(text)


def test_a_call_of_an_unknown_name_never_looks_it_up(no_evaluation):
    with pytest.raises(ExpressionSyntaxError, match="'__import__' .* not allowed"):
        parse("__import__(1)")
    with pytest.raises(ExpressionSyntaxError, match="unknown function 'system'"):
        parse("system(1)")
    with pytest.raises(ExpressionSyntaxError, match="unknown function 'eval'"):
        evaluate("eval(1)", {"eval": 1.0})


# ---------------------------------------------------------------- evaluation errors
def test_undefined_variable_lists_what_is_defined():
    with pytest.raises(UndefinedVariableError) as info:
        evaluate("mass*lenght^2", {"mass": 1.0, "length": 2.0})
    msg = str(info.value)
    assert "undefined variable lenght" in msg
    assert "did you mean 'length'?" in msg
    assert "length, mass" in msg  # the variables defined at this point, sorted


def test_several_undefined_variables():
    with pytest.raises(UndefinedVariableError, match="undefined variables a, b in expression"):
        evaluate("a + b + c", {"c": 1.0})
    with pytest.raises(UndefinedVariableError, match="defined here: none"):
        evaluate("q")


@pytest.mark.parametrize("text, what", [
    ("1/0", "division by zero"),
    ("x/(x-x)", "division by zero"),
    ("0^-1", "division by zero"),
    ("sqrt(-1)", "outside the function's domain"),
    ("log(0)", "outside the function's domain"),
    ("log(-1)", "outside the function's domain"),
    ("acos(2)", "outside the function's domain"),
    ("asin(-1.5)", "outside the function's domain"),
    ("(-8)^(1/3)", "fractional power"),
    ("(-1)^0.5", "fractional power"),
    ("exp(1000)", "overflow"),
    ("10^400", "overflow"),
    ("1e300*1e300", "overflow"),
    ("1/(1e300*1e300)", "overflow"),
    ("1e308+1e308-1e308", "overflow"),
])
def test_evaluation_errors(text, what):
    with pytest.raises(ExpressionError) as info:
        evaluate(text, {"x": 2.0})
    assert not isinstance(info.value, ExpressionSyntaxError)
    assert what in str(info.value)
    assert repr(text) in str(info.value)


def test_negative_base_with_integer_exponent_is_fine():
    assert evaluate("(-2)^3") == (-2.0) ** 3
    assert evaluate("(-2)^-2") == (-2.0) ** -2


def test_all_errors_are_mbfg_errors():
    for text in ["1/0", "foo(1)", "y", "'", "(" * 200]:
        with pytest.raises(MbfgError):
            evaluate(text)
