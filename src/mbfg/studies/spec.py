"""Study files: parsing, checking and expanding them into self-contained cases.

A study is YAML (format in ``docs/studies.md``)::

    study: mass-sweep                     # a name (optional)
    mechanism: fourbar                    # bundled name or file (relative to the study file)
    run:                                  # what each case runs: a kind and its settings
      kind: simulate
      t_end: 2.0
    vary:
      grid:    {planar_bodies[1].mass: [1.0, 2.0], run.solver: [smoother, batch]}
      zip:     {planar_bodies[0].mass: [1, 2], planar_bodies[0].I0: [0.5, 1]}
      random:  {count: 10, seed: 7, values: {gravity[1]: {normal: [-9.81, 0.05]}}}
    seeds: 3                              # case seeds 0, 1, 2 (or a list)
    metrics: [max_phi, energy_drift]      # default: every metric of the kind

Every case is a :class:`Case`: the mechanism's YAML text, the overrides, the settings (with
every file they name inlined) and the seed, so it is a pure function of its inputs that any
worker can run without a shared file system; :attr:`Case.key` is a hash of those inputs
(the resume key).  Every problem of a study file is a :class:`~mbfg.errors.SchemaError` (or
:class:`~mbfg.errors.YamlSyntaxError`) naming the file, the YAML path, the line and what was
expected, raised before any case runs.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from mbfg.errors import MbfgError, SchemaError, UsageError
from mbfg.resources import bundled_studies, resolve_study
from mbfg.studies.kinds import RunKind, run_kind
from mbfg.yaml_document import YamlDocument, YamlFields, closest

if TYPE_CHECKING:
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.spec import MechanismSpec

__all__ = ["Case", "Study", "load_study", "resolve_study", "bundled_studies", "parse_study", "study_from_dict",
           "build_case_mechanism", "case_key", "TOP_LEVEL_KEYS", "FIXED_COLUMNS", "DISTRIBUTIONS"]

TOP_LEVEL_KEYS = ("study", "description", "mechanism", "mechanisms", "run", "vary", "seeds",
                  "metrics", "sensor_sets")
FIXED_COLUMNS = ("case", "mechanism", "seed", "status", "error", "wall_s", "worker")
"""Columns of every result table besides the varied values and the metrics."""
VARY_KEYS = ("grid", "zip", "random")
DISTRIBUTIONS = ("uniform", "loguniform", "normal", "integers", "choice")
"""Random distributions of ``vary.random.values``: uniform [a, b], loguniform [a, b] (a > 0),
normal [mean, std], integers [low, high] (inclusive), choice [v1, v2, ...]."""
KEY_LENGTH = 16
"""Hex digits of a case key (64 bits of SHA-256)."""


def build_case_mechanism(text: str, source: str | None, overrides: tuple) -> Mechanism:
    """The assembled mechanism of YAML ``text`` with ``overrides`` ((YAML path, value)
    pairs; :func:`mbfg.model.parameters.apply_overrides`)."""
    from mbfg.loader import build_checked, parse_spec
    from mbfg.model.parameters import apply_overrides
    spec = parse_spec(text, source)
    if overrides:
        spec = apply_overrides(spec, dict(overrides))
    return build_checked(spec)


@dataclass(frozen=True, eq=True)
class Case:
    """One case of a study: everything its run depends on.

    Attributes
    ----------
    index : int
        Position in the study (the row order of the result table).
    key : str
        Hash of (kind, mechanism text, overrides, settings, seed): the same inputs give the
        same key, in any study.
    kind : str
        The run kind (:data:`mbfg.studies.kinds.KINDS`).
    mechanism_label : str
        The mechanism's name in the table (bundled name, file stem or generated name).
    mechanism_text : str
        The mechanism's YAML text.
    overrides : tuple of (str, float or tuple)
        Values replaced by YAML path before the model is built.
    settings : tuple of (str, value)
        The kind's settings, sorted by name, files inlined.
    seed : int
    labels : tuple of (str, value)
        The varied values by column name (overrides by YAML path, settings by name).
    """
    index: int
    key: str
    kind: str
    mechanism_label: str
    mechanism_text: str
    overrides: tuple
    settings: tuple
    seed: int
    labels: tuple

    @property
    def settings_dict(self) -> dict:
        """The settings as a dict."""
        return dict(self.settings)

    def mechanism(self, extra: tuple = ()) -> Mechanism:
        """Build the case's mechanism (its overrides, then ``extra`` ones)."""
        return build_case_mechanism(self.mechanism_text, self.mechanism_label,
                                    tuple(self.overrides) + tuple(extra))


@dataclass(frozen=True)
class Study:
    """A parsed study: its cases and the columns of its result table.

    Attributes
    ----------
    name : str
    source : str or None
        The study file.
    kind : RunKind
    cases : tuple of Case
    label_columns : tuple of str
        The varied values (overrides and settings), in table order.
    metrics : tuple of str
        The kept metrics, in table order.
    """
    name: str
    source: str | None
    kind: RunKind
    cases: tuple
    label_columns: tuple
    metrics: tuple

    @property
    def columns(self) -> tuple:
        """Every column of the result table, in order."""
        return (("case", "mechanism") + self.label_columns + ("seed",) + self.metrics
                + ("status", "error", "wall_s", "worker"))

    @property
    def timing_columns(self) -> tuple:
        """Columns that measure time or place (``wall_s``, ``worker`` and the kind's timing
        metrics): they differ between runs of the same case; every other column is
        bit-identical whatever the scheduler and the number of workers."""
        return tuple(m for m in self.metrics if m in self.kind.timing) + ("wall_s", "worker")


def _canonical(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def case_key(kind: str, text: str, overrides: tuple, settings: tuple, seed: int) -> str:
    """Hash of a case's inputs (:attr:`Case.key`)."""
    blob = json.dumps(_canonical({"kind": kind, "mechanism": text, "overrides": overrides,
                                  "settings": dict(settings), "seed": seed}),
                      sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:KEY_LENGTH]


# ---------------------------------------------------------------------------------- parser
class _Context:
    """What a kind's ``prepare`` may look up: named sensor sets, files next to the study, the
    first mechanism."""

    def __init__(self, sensor_sets: dict, base_dir: Path, first: tuple):
        self.sensor_sets = sensor_sets
        self.base_dir = base_dir
        self._first = first
        self._mech = None

    def base_mechanism(self) -> Mechanism:
        if self._mech is None:
            self._mech = build_case_mechanism(*self._first, ())
        return self._mech

    def sensor_set(self, name: str) -> tuple:
        """(YAML text, source) of the sensor set ``name`` (or a sensors YAML file)."""
        if name in self.sensor_sets:
            return self.sensor_sets[name]
        path = self.base_dir / name
        if name.lower().endswith((".yaml", ".yml")) and path.is_file():
            from mbfg.loader import read_yaml_text
            return read_yaml_text(path, "sensors"), str(path)
        known = ", ".join(self.sensor_sets) or "none defined"
        raise ValueError(f"sensors: no sensor set {name!r} (sensor_sets: {known}) and no "
                         f"sensors YAML file {path}; expected a name in sensor_sets or a file")


class _StudyParser:
    def __init__(self, text: str, source: str | None, base_dir: Path):
        self.r = YamlDocument(text, source, expected="a study: a YAML mapping of "
                              + ", ".join(TOP_LEVEL_KEYS))
        self.L = YamlFields(self.r)
        self.source = source
        self.base_dir = base_dir

    def err(self, message: str, path: str) -> SchemaError:
        return self.r.error(SchemaError, message, path)

    def _unknown(self, mapping: dict, allowed: tuple, path: str, what: str) -> None:
        for key in mapping:
            if key not in allowed:
                raise self.err(f"unknown key {key!r} in {what}{closest(key, allowed)}; valid "
                               f"keys: {', '.join(allowed)}", f"{path}.{key}" if path else key)

    # -- mechanisms ----------------------------------------------------------------------
    def _mechanism_file(self, value: Any, path: str) -> tuple:
        """(label, text, spec) of a bundled name or a file relative to the study."""
        from mbfg.loader import parse_spec, read_yaml_text
        from mbfg.resources import resolve_mechanism
        if not isinstance(value, str) or not value.strip():
            raise self.err(f"expected a mechanism file or the name of a bundled mechanism, got "
                           f"{value!r}", path)
        p = self.base_dir / value
        if not p.is_file():
            p = resolve_mechanism(value)
        if not Path(p).is_file():
            raise self.err(f"no mechanism file {self.base_dir / value} and no bundled "
                           f"mechanism {value!r} (see: mbfg mechanisms); expected a mechanism "
                           f"YAML file or a bundled name", path)
        text = read_yaml_text(p)
        label = Path(p).stem
        return label, text, parse_spec(text, str(p))

    def mechanisms(self, data: dict) -> list:
        one, many = data.get("mechanism"), data.get("mechanisms")
        if (one is None) == (many is None):
            raise self.err("expected exactly one of 'mechanism' (a file or bundled name) or "
                           "'mechanisms' (a list, or {random: {count, seed}})",
                           "mechanism" if one is None else "mechanisms")
        if one is not None:
            return [self._mechanism_file(one, "mechanism")]
        if isinstance(many, dict):
            return self._generated(many)
        items = self.L.sequence(many, "mechanisms", "mechanism files or bundled names")
        if not items:
            raise self.err("expected at least one mechanism", "mechanisms")
        out = [self._mechanism_file(v, f"mechanisms[{i}]") for i, v in enumerate(items)]
        labels = [o[0] for o in out]
        if len(set(labels)) != len(labels):
            out = [(f"{lab}#{i}", t, s) for i, (lab, t, s) in enumerate(out)]
        return out

    def _generated(self, many: dict) -> list:
        from mbfg.loader import parse_spec
        from mbfg.testing import FAMILIES, random_mechanisms
        self._unknown(many, ("random",), "mechanisms", "mechanisms")
        spec = self.L.mapping(many.get("random"), "mechanisms.random",
                              "{count, seed, families}")
        self._unknown(spec, ("count", "seed", "families"), "mechanisms.random",
                      "mechanisms.random")
        count = self._int(self.L.require(spec, "count", "mechanisms.random", "an integer >= 1"),
                          "mechanisms.random.count", 1)
        seed = self._int(spec.get("seed", 0), "mechanisms.random.seed", 0)
        families = FAMILIES
        if "families" in spec:
            families = tuple(self.L.sequence(spec["families"], "mechanisms.random.families",
                                             "family names"))
            for i, f in enumerate(families):
                if f not in FAMILIES:
                    raise self.err(f"unknown family {f!r}; expected some of {', '.join(FAMILIES)}",
                                   f"mechanisms.random.families[{i}]")
            if not families:
                raise self.err("expected at least one family", "mechanisms.random.families")
        gens = random_mechanisms(count, seed, families)
        return [(g.name, g.yaml, parse_spec(g.yaml, g.name)) for g in gens]

    def _int(self, value: Any, path: str, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.err(f"expected an integer >= {low}, got {value!r}", path)
        return value

    # -- settings and overrides ------------------------------------------------------------
    def setting(self, kind: RunKind, name: str, value: Any, path: str) -> Any:
        try:
            return kind.settings[name].check(value)
        except ValueError as e:
            raise self.err(str(e), path) from None

    def override_value(self, key: str, value: Any, specs: list, path: str) -> Any:
        """A number (or pair) for the override ``key``, its key checked on every mechanism."""
        from mbfg.expressions import evaluate
        from mbfg.errors import ExpressionError

        def number(v, where):
            if isinstance(v, str):
                try:
                    return evaluate(v)
                except ExpressionError as e:
                    raise self.err(str(e), where) from None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise self.err(f"{key}: expected a finite number or an expression, got {v!r}",
                               where)
            return float(v)
        pair = isinstance(_current(specs[0], key), tuple)
        if pair:
            if not isinstance(value, list) or len(value) != 2:
                raise self.err(f"{key}: expected a pair [x, y], got {value!r}", path)
            return tuple(number(v, f"{path}[{i}]") for i, v in enumerate(value))
        return number(value, path)

    def check_key(self, key: str, specs: list, path: str) -> None:
        from mbfg.model.parameters import apply_overrides
        for label, spec in specs:
            try:
                apply_overrides(spec, {key: _current(spec, key)})
            except UsageError as e:
                raise self.err(f"{e} (mechanism {label}); keys that are not overrides name run "
                               f"settings as run.<setting>", path) from None

    # -- the study ---------------------------------------------------------------------------
    def parse(self) -> Study:
        data = self.L.mapping(self.r.data, "", "a study")
        self._unknown(data, TOP_LEVEL_KEYS, "", "a study")
        name = data.get("study") or (Path(self.source).stem if self.source else "study")
        if not isinstance(name, str):
            raise self.err(f"expected a name, got {name!r}", "study")
        mechs = self.mechanisms(data)
        specs = [(label, spec) for label, _, spec in mechs]

        run = self.L.mapping(self.L.require(data, "run", "", "the run: {kind, settings...}"),
                             "run", "the run")
        kind_name = self.L.require(run, "kind", "run", "a run kind")
        from mbfg.studies.kinds import KINDS
        if kind_name not in KINDS:
            raise self.err(f"unknown run kind {kind_name!r}{closest(str(kind_name), KINDS)}; "
                           f"expected one of {', '.join(KINDS)}", "run.kind")
        kind = run_kind(kind_name)
        self._unknown(run, ("kind",) + tuple(kind.settings), "run", f"run (kind {kind.name})")
        settings = {}
        for sname, setting in kind.settings.items():
            if sname in run:
                settings[sname] = self.setting(kind, sname, run[sname], f"run.{sname}")
            else:
                settings[sname] = setting.default

        sensor_sets = self.sensor_sets(data.get("sensor_sets"))
        axes, labels = self.vary(data.get("vary"), kind, specs)
        for sname, setting in kind.settings.items():
            if setting.required and sname not in run and sname not in labels:
                raise self.err(f"missing required setting {sname!r} of run kind {kind.name} "
                               f"(expected {setting.doc}, in run or varied as run.{sname})",
                               f"run.{sname}")
        seeds = self.seeds(data.get("seeds", 1))

        context = _Context(sensor_sets, self.base_dir, (mechs[0][1], mechs[0][0]))
        prepared: dict = {}
        cases = []
        for (label, text, _), combo in itertools.product(mechs, itertools.product(*axes)):
            overrides, values, case_settings = [], {}, dict(settings)
            for part in combo:
                for column, (is_setting, value) in part.items():
                    values[column] = value
                    if is_setting:
                        case_settings[column] = value
                    else:
                        overrides.append((column, value))
            skey = json.dumps(_canonical(case_settings), sort_keys=True)
            if skey not in prepared:
                if kind.prepare is not None:
                    try:
                        prepared[skey] = kind.prepare(dict(case_settings), context)
                    except (ValueError, MbfgError) as e:
                        raise self.err(*_prepare_error(str(e), run, labels)) from None
                else:
                    prepared[skey] = case_settings
            ready = tuple(sorted(prepared[skey].items()))
            for seed in seeds:
                cases.append(Case(len(cases), case_key(kind.name, text, tuple(overrides), ready,
                                                       seed), kind.name, label, text,
                                  tuple(overrides), ready, seed,
                                  tuple((c, values[c]) for c in labels)))
        extra: dict = {}
        if kind.metrics_of is not None:
            for ready in prepared.values():
                extra.update(dict.fromkeys(kind.metrics_of(ready)))
        metrics = self.metrics(data.get("metrics"), kind, labels, tuple(extra))
        keys = [c.key for c in cases]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise self.err(f"two cases have the same inputs (key {dup}): a value is repeated in "
                           f"vary or seeds; expected distinct cases", "vary")
        return Study(name, self.source, kind, tuple(cases), tuple(labels), tuple(metrics))

    def sensor_sets(self, value: Any) -> dict:
        if value is None:
            return {}
        sets = self.L.mapping(value, "sensor_sets", "named sensor sets")
        out = {}
        for name, item in sets.items():
            path = f"sensor_sets.{name}"
            if isinstance(item, str):
                from mbfg.loader import read_yaml_text
                p = self.base_dir / item
                out[name] = (read_yaml_text(p, "sensors"), str(p))
            elif isinstance(item, list):
                out[name] = (yaml.safe_dump({"sensors": item}, sort_keys=False),
                             f"{self.source or 'study'}: {path}")
            else:
                raise self.err(f"expected a list of sensors (docs/sensors.md) or a sensors YAML "
                               f"file, got {item!r}", path)
        return out

    def vary(self, value: Any, kind: RunKind, specs: list) -> tuple:
        """(axes, label columns): each axis a list of {column: (is_setting, value)}."""
        if value is None:
            return [[{}]], []
        vary = self.L.mapping(value, "vary", "the varied values: grid, zip, random")
        self._unknown(vary, VARY_KEYS, "vary", "vary")
        axes, labels = [], []

        def column(key, path):
            if not isinstance(key, str):
                raise self.err(f"expected a YAML path or run.<setting>, got {key!r}", path)
            if key.startswith("run."):
                sname = key[4:]
                if sname not in kind.settings:
                    raise self.err(f"unknown setting {sname!r} of run kind {kind.name}"
                                   f"{closest(sname, kind.settings)}; expected one of "
                                   f"{', '.join(kind.settings)}", path)
                column_name, is_setting = sname, True
            else:
                self.check_key(key, specs, path)
                column_name, is_setting = key, False
            if column_name in labels or column_name in FIXED_COLUMNS:
                raise self.err(f"{key!r} is varied twice (or names a fixed column); expected "
                               f"each value in one of grid, zip, random", path)
            labels.append(column_name)
            return column_name, is_setting

        def value_of(is_setting, key, v, path):
            if is_setting:
                return self.setting(kind, key, v, path)
            return self.override_value(key, v, [s for _, s in specs], path)

        if "grid" in vary:
            grid = self.L.mapping(vary["grid"], "vary.grid", "key: [values] to combine")
            for key, values in grid.items():
                path = f"vary.grid.{key}"
                col, is_setting = column(key, path)
                values = self.L.sequence(values, path, "the values")
                if not values:
                    raise self.err("expected at least one value", path)
                axes.append([{col: (is_setting, value_of(is_setting, col, v, f"{path}[{i}]"))}
                             for i, v in enumerate(values)])
        if "zip" in vary:
            zipped = self.L.mapping(vary["zip"], "vary.zip", "key: [values] taken together")
            rows, length = None, None
            for key, values in zipped.items():
                path = f"vary.zip.{key}"
                col, is_setting = column(key, path)
                values = self.L.sequence(values, path, "the values")
                if length is None:
                    length = len(values)
                    rows = [{} for _ in values]
                if len(values) != length or not values:
                    raise self.err(f"expected {length or 'at least one'} values (zip lists are "
                                   f"taken together, so they have equal lengths), got "
                                   f"{len(values)}", path)
                for i, v in enumerate(values):
                    rows[i][col] = (is_setting, value_of(is_setting, col, v, f"{path}[{i}]"))
            if rows:
                axes.append(rows)
        if "random" in vary:
            axes.append(self.random(vary["random"], kind, specs, column, value_of))
        return (axes or [[{}]]), labels

    def random(self, value, kind, specs, column, value_of) -> list:
        path = "vary.random"
        spec = self.L.mapping(value, path, "{count, seed, values}")
        self._unknown(spec, ("count", "seed", "values"), path, "vary.random")
        count = self._int(self.L.require(spec, "count", path, "an integer >= 1"), f"{path}.count", 1)
        seed = self._int(self.L.require(spec, "seed", path, "an integer >= 0"), f"{path}.seed", 0)
        values = self.L.mapping(self.L.require(spec, "values", path, "key: {distribution}"),
                                f"{path}.values", "key: {distribution: parameters}")
        draws = []
        for key, dist in values.items():
            where = f"{path}.values.{key}"
            col, is_setting = column(key, where)
            d = self.L.mapping(dist, where, f"one distribution ({', '.join(DISTRIBUTIONS)})")
            if len(d) != 1 or next(iter(d)) not in DISTRIBUTIONS:
                raise self.err(f"expected one distribution of {', '.join(DISTRIBUTIONS)}, got "
                               f"{', '.join(map(str, d)) or 'none'}", where)
            name, params = next(iter(d.items()))
            params = self.L.sequence(params, f"{where}.{name}", "the parameters")
            if name != "choice":
                ok = (len(params) == 2 and all(isinstance(p, (int, float))
                                               and not isinstance(p, bool)
                                               and math.isfinite(p) for p in params))
                if ok and name in ("uniform", "loguniform", "integers"):
                    ok = params[0] <= params[1] and (name != "loguniform" or params[0] > 0)
                if ok and name == "normal":
                    ok = params[1] >= 0
                if ok and name == "integers":
                    ok = all(isinstance(p, int) for p in params)
                if not ok:
                    need = {"uniform": "[low, high] with low <= high",
                            "loguniform": "[low, high] with 0 < low <= high",
                            "normal": "[mean, std] with std >= 0",
                            "integers": "[low, high] integers, low <= high"}[name]
                    raise self.err(f"{name}: expected {need}, got {params!r}", f"{where}.{name}")
            elif not params:
                raise self.err("choice: expected at least one value", f"{where}.{name}")
            draws.append((col, is_setting, name, params, f"{where}.{name}"))
        rng = np.random.default_rng(seed)
        rows = []
        for _ in range(count):
            row = {}
            for col, is_setting, name, params, where in draws:
                if name == "uniform":
                    v = float(rng.uniform(params[0], params[1]))
                elif name == "loguniform":
                    v = float(np.exp(rng.uniform(np.log(params[0]), np.log(params[1]))))
                elif name == "normal":
                    v = float(rng.normal(params[0], params[1]))
                elif name == "integers":
                    v = int(rng.integers(params[0], params[1], endpoint=True))
                else:
                    v = params[int(rng.integers(len(params)))]
                row[col] = (is_setting, value_of(is_setting, col, v, where))
            rows.append(row)
        return rows

    def seeds(self, value: Any) -> list:
        if isinstance(value, bool):
            raise self.err(f"expected a count or a list of seeds, got {value!r}", "seeds")
        if isinstance(value, int):
            if value < 1:
                raise self.err(f"expected a count >= 1 (seeds 0 .. count - 1), got {value}",
                               "seeds")
            return list(range(value))
        items = self.L.sequence(value, "seeds", "a count or a list of non-negative integers")
        for i, s in enumerate(items):
            self._int(s, f"seeds[{i}]", 0)
        if not items or len(set(items)) != len(items):
            raise self.err("expected a non-empty list of distinct seeds", "seeds")
        return list(items)

    def metrics(self, value: Any, kind: RunKind, labels: list, extra: tuple = ()) -> list:
        """The kept metrics: ``value`` checked against the kind's (and ``extra``, the ones
        that depend on the settings), or all of them."""
        known = tuple(kind.metrics) + tuple(m for m in extra if m not in kind.metrics)
        if value is None:
            out = list(known)
        else:
            out = self.L.sequence(value, "metrics", "metric names")
            for i, m in enumerate(out):
                if m not in known:
                    raise self.err(f"unknown metric {m!r} of run kind {kind.name}"
                                   f"{closest(str(m), known)}; expected some of "
                                   f"{', '.join(known)}", f"metrics[{i}]")
            if not out or len(set(out)) != len(out):
                raise self.err("expected a non-empty list of distinct metrics", "metrics")
        clash = [m for m in out if m in labels]
        if clash:
            raise self.err(f"metric {clash[0]!r} has the name of a varied value", "metrics")
        return out


def _prepare_error(message: str, run: dict, labels: list) -> tuple:
    """(message, YAML path) of a ``prepare`` error: a message ``"<setting>: ..."`` is reported
    at ``run.<setting>`` (without the prefix) when the setting is given in ``run``, at
    ``vary`` when it is varied; any other at ``run``."""
    name, _, rest = message.partition(":")
    name = name.strip()
    if rest and name in run and name != "kind":
        return rest.strip(), f"run.{name}"
    return message, "vary" if rest and name in labels else "run"


def _current(spec: MechanismSpec, key: str) -> Any:
    """The spec's value at override ``key`` (0.0 when the key is not valid, so that
    apply_overrides reports it)."""
    m = re.fullmatch(r"planar_bodies\[(\d+)\]\.(\w+)", str(key))
    if m and int(m.group(1)) < len(spec.bodies) and m.group(2) in ("mass", "I0", "cog"):
        v = getattr(spec.bodies[int(m.group(1))], m.group(2))
        return tuple(float(x) for x in v) if m.group(2) == "cog" else float(v)
    g = re.fullmatch(r"gravity(?:\[([01])\])?", str(key))
    if g:
        return (tuple(float(x) for x in spec.gravity) if g.group(1) is None
                else float(spec.gravity[int(g.group(1))]))
    return 0.0


def parse_study(text: str, source: str | None = None,
                base_dir: str | os.PathLike | None = None) -> Study:
    """Parse study YAML ``text`` (``source`` names it in errors; relative files are read
    from ``base_dir``, default the source's directory or the working directory)."""
    if not isinstance(text, str):
        raise SchemaError(f"expected YAML text, got {type(text).__name__}", file=source)
    if base_dir is None:
        base_dir = Path(source).parent if source else Path(".")
    return _StudyParser(text, source, Path(base_dir)).parse()


def load_study(path: str | os.PathLike) -> Study:
    """Read and check the study file ``path`` (or a bundled study by name)."""
    from mbfg.loader import read_yaml_text
    path = resolve_study(path)
    return parse_study(read_yaml_text(path, "study"), str(path))


def study_from_dict(data: dict, base_dir: str | os.PathLike | None = None,
                    source: str | None = None) -> Study:
    """A study from the same structure as the YAML file, built in Python."""
    if not isinstance(data, dict):
        raise SchemaError(f"expected a study mapping, got {type(data).__name__}", file=source)
    text = yaml.safe_dump(data, sort_keys=False)
    return parse_study(text, source or "<study>", base_dir or Path("."))
