"""Located YAML documents: a YAML text parsed strictly, with the line of every node, and typed
accessors whose errors name the file, the YAML path, the line and what was expected.

The mechanism and sensor loaders (:mod:`mbfg.loader`) and the study files
(:mod:`mbfg.studies.spec`) read their files with these.  Nothing here knows a file format:
:class:`YamlFields` checks mappings, lists, required keys, typed entries and numbers or
expressions (:mod:`mbfg.expressions`, never ``eval``); the loaders add their own checks.
"""
from __future__ import annotations

import difflib
import math
import re

from typing import TYPE_CHECKING, Any

import yaml

from mbfg.errors import (ExpressionError, MechanismError, SchemaError, UndefinedVariableError,
                         YamlSyntaxError)
from mbfg.expressions import parse

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["YamlDocument", "YamlFields", "closest", "type_name"]


def closest(word: str, options: Iterable) -> str:
    """" (did you mean 'x'?)" for the option closest to ``word``, or "" if none is close."""
    match = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def type_name(value: Any) -> str:
    """What a YAML value is, for error messages ("a list", "str 'abc'", ...)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {value!r}"[:80]


class _DuplicateKey(Exception):
    """Raised by :class:`_StrictLoader` for a key given twice in one mapping."""

    def __init__(self, key, first, again):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping (YAML requires unique keys; plain
    PyYAML silently keeps the last value).  Merge keys (``<<``) may still be overridden."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # unhashable: the base class reports it
                    continue
                if first is not key_node.start_mark:
                    raise _DuplicateKey(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


class YamlDocument:
    """A YAML text parsed strictly (safe loader, unique keys) into ``data``, with the line of
    every node remembered for error messages (``line(path)``, ``error(cls, message, path)``)."""

    def __init__(self, text: str, source: str | None, expected: str):
        """``source``: the file name errors name (None for text); ``expected``: what a syntax
        error message says the file should be."""
        self.source = source
        self.lines: dict[str, int] = {}
        try:
            loader = _StrictLoader(text)
            try:
                node = loader.get_single_node()
                self.data = loader.construct_document(node) if node is not None else None
            finally:
                loader.dispose()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark is not None else None
            what = " ".join(str(x) for x in (e.context, e.problem) if x)
            column = f" (column {mark.column + 1})" if mark is not None else ""
            raise YamlSyntaxError(f"malformed YAML: {what}{column}; expected {expected}",
                                  file=source, line=line) from None
        except _DuplicateKey as e:
            raise YamlSyntaxError(f"duplicate key {e.key!r} (column {e.again.column + 1}; first "
                                  f"given on line {e.first.line + 1}): YAML keys must be unique "
                                  f"and the last value would silently win; expected each key "
                                  f"once per mapping", file=source, line=e.again.line + 1) from None
        except yaml.YAMLError as e:
            raise YamlSyntaxError(f"malformed YAML: {' '.join(str(e).split())}", file=source) from None
        except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
            # e.g. unhashable keys, deep nesting, out-of-range timestamps
            raise YamlSyntaxError(f"malformed YAML: {e or type(e).__name__}", file=source) from None
        if node is not None:
            self._record(node, "", node.start_mark.line + 1, set())

    def _record(self, node, path: str, line: int, seen: set, depth: int = 0):
        """Remember the line of every YAML path: the key's line for mapping entries, the item's
        line for sequence items.  Each node is visited once (aliases could otherwise make the
        walk exponential or infinite)."""
        self.lines.setdefault(path, line)
        if depth > 50 or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                k = key.value if isinstance(key, yaml.ScalarNode) else "?"
                self._record(value, f"{path}.{k}" if path else str(k), key.start_mark.line + 1,
                             seen, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                self._record(value, f"{path}[{i}]", value.start_mark.line + 1, seen, depth + 1)

    def line(self, path: str) -> int | None:
        """Line of ``path``, or of its nearest enclosing node that has one."""
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            parent = re.sub(r"(\.[^.\[]*|\[\d+\])\Z", "", path)
            path = "" if parent == path else parent

    def error(self, cls: type[MechanismError], message: str, path: str) -> MechanismError:
        """An error of class ``cls`` at YAML ``path``: names the file, the path and its line."""
        return cls(message, file=self.source, path=path or None, line=self.line(path))


class YamlFields:
    """Typed accessors on the values of a :class:`YamlDocument` (``self.r``): each returns the
    value checked, or raises a :class:`~mbfg.errors.SchemaError` (an expression's own error
    for a bad expression) at the value's YAML path."""

    def __init__(self, document: YamlDocument):
        self.r = document

    def mapping(self, value: Any, path: str, what: str) -> dict:
        """``value`` as a mapping with text keys (``what`` names it in the error)."""
        if not isinstance(value, dict):
            raise self.r.error(SchemaError, f"expected {what} (a mapping), got {type_name(value)}", path)
        for key in value:
            if not isinstance(key, str):
                raise self.r.error(SchemaError, f"expected text keys in {what}, got key {key!r}", path)
        return value

    def sequence(self, value: Any, path: str, what: str) -> list:
        """``value`` as a list (``what`` names it in the error)."""
        if not isinstance(value, list):
            raise self.r.error(SchemaError, f"expected {what} (a list), got {type_name(value)}", path)
        return value

    def require(self, mapping: dict, key: str, path: str, what: str) -> Any:
        """``mapping[key]``, or an error at ``path.key`` saying what was expected."""
        if key not in mapping:
            raise self.r.error(SchemaError, f"missing required key {key!r} (expected {what})",
                               f"{path}.{key}" if path else key)
        return mapping[key]

    def expression(self, value: Any, path: str, env: dict, what: str) -> float:
        """Evaluate a number or an expression string at YAML path ``path``."""
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.r.error(SchemaError, f"expected {what} (a number or an expression), got "
                               f"{type_name(value)}", path)
        if not isinstance(value, str):
            try:
                value = float(value)
            except OverflowError:
                value = math.inf if value > 0 else -math.inf
            if not math.isfinite(value):
                raise self.r.error(SchemaError, f"expected {what} as a finite number, got {value}", path)
            return value
        try:
            return parse(value)(env)
        except UndefinedVariableError as e:
            hint = self.undefined_hint(parse(value).names - set(env), path)
            raise self.r.error(type(e), e.reason + hint, path) from None
        except ExpressionError as e:
            raise self.r.error(type(e), e.reason, path) from None

    def typed_entry(self, item: Any, path: str, what: str, types: Iterable,
                    type_what: str) -> tuple[dict, str]:
        """A mapping with a ``type`` key naming one of ``types``: returns (mapping, type)."""
        types = tuple(types)
        entry = self.mapping(item, path, what)
        kind = self.require(entry, "type", path, f"one of {', '.join(types)}")
        if not isinstance(kind, str) or kind not in types:
            raise self.r.error(SchemaError, f"unknown {type_what} {kind!r}{closest(kind, types)}; "
                               f"expected one of {', '.join(types)}", f"{path}.type")
        return entry, kind

    def undefined_hint(self, names: set, path: str) -> str:
        """Text appended to the error of an expression at ``path`` that uses the undefined
        ``names`` (none here; a file format may explain its variables)."""
        return ""
