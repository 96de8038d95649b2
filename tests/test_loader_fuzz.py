"""Property-based robustness tests of the YAML loader and the expression parser.

Mutated versions of the bundled mechanism files (keys dropped or renamed, values replaced by
random text, numbers, lists and nested mappings, random expression strings, raw text edits)
are loaded and built.  Whatever happens, the only exception allowed to escape is the
library's own :class:`mbfg.errors.MbfgError`; anything else (KeyError, TypeError,
RecursionError, numpy errors, ...) is a bug.
"""
from __future__ import annotations

import math
import warnings

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import mbfg  # noqa: E402
from mbfg.errors import ExpressionError, MbfgError  # noqa: E402
from mbfg.expressions import FUNCTIONS, parse  # noqa: E402

from conftest import MECHANISMS  # noqa: E402

FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# The robot takes the longest to assemble; the small mechanisms cover every section type.
SOURCES = {name: (MECHANISMS / f"{name}.yaml").read_text(encoding="utf-8")
           for name in ("fourbar", "fourbar-crank-angle", "pendulum2", "pendulum3", "slider-crank",
                        "quick-return", "pick-and-place-robot")}
DOCUMENTS = {name: yaml.safe_load(text) for name, text in SOURCES.items()}

VALID_NAMES = ["parameters", "points", "planar_bodies", "relative_coordinates", "constraints",
               "gravity", "x", "y", "fixed", "length", "mass", "I0", "cog", "type", "point",
               "line", "line_points", "auto", "fixed_slider", "mobile_slider",
               "RelativeAngleAbsoluteDOF", "L", "xb", "length12", "x1", "y2", "pi"]

# -- strategies ---------------------------------------------------------------------------------
_TOKENS = (["x1", "y1", "x0", "L", "mass", "length", "length12", "auto", "pi", "foo", "_", "__import__",
            "os", "lambda", "if", "else", "1", "0", "2.5", ".5", "1e-3", "2.5E+2", "1e400", "0x1",
            "+", "-", "*", "/", "^", "**", "(", ")", ",", ".", ":", "=", "'", '"', "[", "]", " ",
            "\t", "\n", "#", "%", "!", "@", "\\", "\x00", "\u00e9", "\u0663"]
           + [f + "(" for f in FUNCTIONS])

expressions = st.one_of(
    st.lists(st.sampled_from(_TOKENS), max_size=12).map("".join),
    st.text(max_size=25),
    st.recursive(
        st.one_of(st.sampled_from(["x1", "L", "mass", "length", "pi", "auto"]),
                  st.floats(allow_nan=False, allow_infinity=False).map(repr),
                  st.integers(-10, 10).map(str)),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from("+-*/^"), inner).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
            st.tuples(st.sampled_from(sorted(FUNCTIONS)), st.lists(inner, min_size=1, max_size=3))
              .map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            inner.map(lambda e: "-" + e)),
        max_leaves=8),
)

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
    st.sampled_from([0, 1, 2, 3, 13, 14, -1, 10**400]),
    st.floats(), st.sampled_from([0.0, -0.0, 1e-300, 1e300, -1e300, math.inf, math.nan]),
    st.text(max_size=12), st.sampled_from(VALID_NAMES), expressions,
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(VALID_NAMES), st.text(max_size=8)),
                                            inner, max_size=3)),
    max_leaves=10)


def _paths(node, prefix=()):
    """Every path (tuple of keys/indices) inside a YAML document, the root excluded."""
    out = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return out
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(_paths(v, prefix + (k,)))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _copy(node):
    if isinstance(node, dict):
        return {k: _copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_copy(v) for v in node]
    return node


def _mutate(doc, data):
    """Apply one random mutation to ``doc`` in place."""
    paths = _paths(doc)
    path = data.draw(st.sampled_from(paths), label="path")
    parent, key = _get(doc, path[:-1]), path[-1]
    action = data.draw(st.sampled_from(["drop", "rename", "replace", "expression", "wrap", "duplicate",
                                        "number", "number", "number"]), label="action")
    if action == "number":  # a plausible number: keeps the document loadable more often
        parent[key] = data.draw(st.one_of(st.integers(-3, 15), st.floats(-20, 20),
                                          st.sampled_from([0.0, 1e-12, -1e-9, 1e6, 1e150])),
                                label="number")
    elif action == "drop":
        del parent[key]
    elif action == "rename" and isinstance(parent, dict):
        new = data.draw(st.one_of(st.sampled_from(VALID_NAMES), st.text(max_size=10),
                                  st.just(str(key) + "s"), st.just(str(key)[:-1] or "_")), label="new key")
        value = parent.pop(key)
        parent[new] = value
    elif action == "expression":
        parent[key] = data.draw(expressions, label="expression")
    elif action == "wrap":  # one more level of nesting
        as_list = data.draw(st.booleans(), label="wrap in a list")
        parent[key] = [parent[key]] if as_list else {"value": parent[key]}
    elif action == "duplicate" and isinstance(parent, list):
        parent.append(_copy(parent[key]))
    else:
        parent[key] = data.draw(values, label="value")


def _dump(doc) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def _load(text: str):
    """Load and build; returns the mechanism, or None if the library reported an MbfgError."""
    try:
        return mbfg.mechanism_from_yaml(text, source="fuzz.yaml")
    except MbfgError as e:
        assert str(e)  # every error says something; message content is checked in test_loader.py
        return None


# -- properties --------------------------------------------------------------------------------
@FUZZ
@given(name=st.sampled_from(sorted(SOURCES)), data=st.data(),
       n_mutations=st.integers(min_value=1, max_value=3))
def test_mutated_documents_raise_only_mbfg_errors(name, data, n_mutations):
    doc = _copy(DOCUMENTS[name])
    for _ in range(n_mutations):
        if not _paths(doc):
            break
        _mutate(doc, data)
    _load(_dump(doc))


@FUZZ
@given(name=st.sampled_from(sorted(SOURCES)), data=st.data())
def test_random_expressions_in_documents_raise_only_mbfg_errors(name, data):
    doc = _copy(DOCUMENTS[name])
    # Replace one scalar leaf (a number or an expression) by a random expression string.
    leaves_paths = [p for p in _paths(doc) if not isinstance(_get(doc, p), (dict, list))]
    path = data.draw(st.sampled_from(leaves_paths), label="leaf")
    _get(doc, path[:-1])[path[-1]] = data.draw(expressions, label="expression")
    _load(_dump(doc))


@FUZZ
@given(name=st.sampled_from(sorted(SOURCES)), data=st.data())
def test_raw_text_edits_raise_only_mbfg_errors(name, data):
    text = SOURCES[name]
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        i = data.draw(st.integers(0, len(text)), label="position")
        j = data.draw(st.integers(i, min(len(text), i + 8)), label="end")
        insert = data.draw(st.one_of(st.text(max_size=6), st.sampled_from(
            ["\n", "  ", "\t", ":", "- ", "[", "]", "{", "}", "&a ", "*a", "!!python/object:os.system ",
             "!!binary ", "? ", "---\n", "%YAML 1.1\n", "'", '"', "#", "|", ">", "2000-01-01"])),
            label="insert")
        text = text[:i] + insert + text[j:]
    _load(text)


@FUZZ
@given(text=expressions, env=st.dictionaries(
    st.sampled_from(["x", "x1", "L", "mass", "length", "pi"]),
    st.floats(allow_nan=False, allow_infinity=False), max_size=4))
def test_random_expression_strings_raise_only_expression_errors(text, env):
    try:
        value = parse(text)(env)
    except ExpressionError:
        return
    assert isinstance(value, float) and math.isfinite(value)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_arbitrary_yaml_values_raise_only_mbfg_errors(value):
    _load(_dump(value))
    _load(_dump({"points": value, "planar_bodies": value}))
