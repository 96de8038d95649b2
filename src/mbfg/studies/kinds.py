"""What a study runs for each case: the registry of run kinds.

A *run kind* is a named, pure function of one case (mechanism text, overrides, settings,
seed) returning a dict of metrics (plain numbers) and, optionally, the arrays worth keeping.
Each kind declares its settings (with defaults and a checker that turns a YAML value into
a plain value or says what was expected) and the metrics it returns, so a study file is
checked completely before any case runs and the result table has fixed columns.

Built in: ``simulate`` (forward dynamics, optionally against a tight reference), ``inverse``
(inverse dynamics along a prescribed trajectory), ``estimate``
(the three-simulation set-up: an accurate prototype, synthesized sensor readings with the
case's seed, an estimator on a model that may differ), ``identify`` (true motions of the
case's mechanism, recordings synthesized with the case's seed, :func:`mbfg.identify` of named
parameters from a perturbed start; one error and one standard deviation column per
parameter).  Adding a kind is one call of :func:`register_kind`; e.g.::

    register_kind("settle", _settle_case, settings={"t_end": Setting(10.0, positive)},
                  metrics=("settling_time", "ms_per_step"), timing=("ms_per_step",))
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mbfg.errors import SolverError, UsageError
from mbfg.graphs import DEFAULT_INTEGRATOR, INTEGRATORS

if TYPE_CHECKING:
    from mbfg.studies.spec import Case

__all__ = ["Setting", "RunKind", "KINDS", "register_kind", "run_kind", "CaseOutput",
           "positive", "non_negative", "integer_at_least", "one_of", "boolean", "text",
           "label", "number_mapping", "warm_up", "SIMULATE_METRICS", "ESTIMATE_METRICS",
           "INVERSE_METRICS", "IDENTIFY_METRICS"]


# ------------------------------------------------------------------------- setting checkers
def positive(value: Any) -> float:
    """A positive finite number (raises ValueError saying what was expected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a positive number, got {value!r}")
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"expected a positive finite number, got {value!r}")
    return value


def non_negative(value: Any) -> float:
    """A finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number >= 0, got {value!r}")
    value = float(value)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"expected a finite number >= 0, got {value!r}")
    return value


def integer_at_least(low: int) -> Callable[[Any], int]:
    """Checker of an integer >= ``low``."""
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"expected an integer >= {low}, got {value!r}")
        return int(value)
    check.__doc__ = f"an integer >= {low}"
    return check


def one_of(*options: str) -> Callable[[Any], str]:
    """Checker of one of the strings ``options``."""
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return str(value)
    check.__doc__ = f"one of {', '.join(options)}"
    return check


def boolean(value: Any) -> bool:
    """true or false."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def text(value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty text, got {value!r}")
    return value


def label(value: Any) -> str:
    """A string, possibly empty (a name for the table)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a text, got {value!r}")
    return value


def number_mapping(value: Any) -> dict:
    """A mapping of names to numbers or safe expressions (``pi/16``), evaluated to floats."""
    from mbfg.expressions import evaluate
    from mbfg.errors import ExpressionError
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of names to numbers, got {value!r}")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, str, list, tuple)):
            raise ValueError(f"{k}: expected a number or an expression, got {v!r}")
        try:
            if isinstance(v, str):
                v = evaluate(v)
            elif isinstance(v, (list, tuple)):
                v = [evaluate(x) if isinstance(x, str) else float(x) for x in v]
            else:
                v = float(v)
        except (ExpressionError, TypeError, ValueError) as e:
            raise ValueError(f"{k}: {e}") from None
        out[str(k)] = v
    return out


# ------------------------------------------------------------------------------ registry
@dataclass(frozen=True)
class Setting:
    """One setting of a run kind: its default and the checker of a given value.

    ``default`` of ``None`` with ``required=True`` means the study must give it.  The
    checker takes the YAML value and returns the plain value (JSON-able) or raises
    ValueError whose message says what was expected.
    """
    default: Any
    check: Callable[[Any], Any]
    doc: str = ""
    required: bool = False


@dataclass(frozen=True)
class CaseOutput:
    """What a kind's function returns: ``metrics`` (name -> number) and ``arrays`` (name
    -> numpy array, kept with ``--keep-arrays``)."""
    metrics: Mapping
    arrays: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class RunKind:
    """A registered run kind.

    Attributes
    ----------
    name : str
    function : callable(case) -> CaseOutput
        Pure: the same case gives the same metrics (except the ``timing`` ones).
    settings : Mapping[str, Setting]
    metrics : tuple of str
        Every metric the function may return, in table order (a missing one is blank).
    timing : tuple of str
        The metrics that are wall-clock measurements (they differ between runs).
    prepare : callable(settings, context) -> settings, optional
        Resolves settings that name files or shared definitions into their text (so a case
        is self-contained) and checks them against the mechanism; raises ValueError (a
        message that starts with ``"<setting>: "`` is reported at that setting's line).
    description : str
    metrics_of : callable(settings) -> tuple of str, optional
        Metrics that depend on the (prepared) settings, after ``metrics`` in the table
        (``identify``: one error and one standard deviation per identified parameter).
    cost : callable(settings) -> float, optional
        The expected relative cost of a case with these (prepared) settings, e.g. its steps:
        a sweep on Dask submits the expensive cases first (a shorter tail); it never changes
        a row.
    """
    name: str
    function: Callable[[Case], CaseOutput]
    settings: Mapping
    metrics: tuple
    timing: tuple = ()
    prepare: Callable[[dict, Any], dict] | None = None
    description: str = ""
    metrics_of: Callable[[dict], tuple] | None = None
    cost: Callable[[dict], float] | None = None


KINDS: dict[str, RunKind] = {}
"""name -> :class:`RunKind`; add with :func:`register_kind`."""


def register_kind(
    name: str,
    function: Callable[[Case], CaseOutput],
    *,
    settings: Mapping,
    metrics: tuple,
    timing: tuple = (),
    prepare: Callable[[dict, Any], dict] | None = None,
    description: str = "",
    metrics_of: Callable[[dict], tuple] | None = None,
    cost: Callable[[dict], float] | None = None,
) -> RunKind:
    """Add (or replace) the run kind ``name`` (see :class:`RunKind`)."""
    kind = RunKind(str(name), function, dict(settings), tuple(metrics), tuple(timing), prepare,
                   description, metrics_of, cost)
    KINDS[kind.name] = kind
    return kind


def run_kind(name: str) -> RunKind:
    """The registered kind ``name``; :class:`~mbfg.errors.UsageError` listing them
    otherwise."""
    if name not in KINDS:
        raise UsageError(f"unknown run kind {name!r}; expected one of {', '.join(sorted(KINDS))}")
    return KINDS[name]


_WARM_MODULES = ("gtsam", "scipy.integrate", "mbfg.loader", "mbfg.model.integrate",
                 "mbfg.drivers.forward_dynamics", "mbfg.drivers.inverse_dynamics",
                 "mbfg.drivers.identification", "mbfg.estimation.registry",
                 "mbfg.benchmarking.estimation_review")
"""What the built-in kinds import (lazily, so that reading a study stays quick)."""


def warm_up() -> None:
    """Import what the built-in kinds' cases import: a Dask worker does it once as it starts
    (the preload ``mbfg.studies.warmup``) rather than in its first case."""
    import importlib
    for name in _WARM_MODULES:
        importlib.import_module(name)


def _steps(settings: dict) -> float:
    """Expected cost of a case: its time steps."""
    return settings["t_end"] / settings["dt"]


# ------------------------------------------------------------------------ shared helpers
_CACHE: dict = {}
_CACHE_SIZE = 64


def _cached(key: tuple, compute: Callable[[], Any]) -> Any:
    """Per-process cache of deterministic intermediate results (a prototype's reference
    motion shared by the cases of one mechanism); bounded, oldest dropped first."""
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = compute()
    return _CACHE[key]


def _finite(what: str, **arrays: Any) -> None:
    for name, a in arrays.items():
        if a is not None and not np.all(np.isfinite(a)):
            raise SolverError(f"{what} produced non-finite values ({name})")


def _arrays(result: Any) -> dict:
    import dataclasses
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
            if isinstance(getattr(result, f.name), np.ndarray)}


def _rmse(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if np.size(x) else float("nan")


# ------------------------------------------------------------------------------ simulate
SIMULATE_METRICS = ("steps", "iterations", "max_phi", "max_phi_scaled", "energy_drift",
                    "energy_drift_rel", "rmse_points", "floor_rmse", "projected_floor_rmse",
                    "error_ratio", "error_ratio_projected", "seconds", "ms_per_step")
"""Metrics of ``simulate``: steps and solver iterations; max |Phi| [m] and max |Phi_i| /
scale_i; max |E - E(0)| [J] and relative to the peak kinetic energy; with ``reference: true``
the RMSE of the point coordinates against a DOP853 run at rtol = atol = 1e-12 [m], that of the
trapezoidal rule at the same step without (floor) and with projection (projected floor), and
the ratios; wall time [s] and ms per step (timing)."""


def _reference_motion(text: str, overrides: tuple, t_end: float, dt: float) -> tuple:
    from mbfg.studies.spec import build_case_mechanism
    from mbfg.model.integrate import integrate_reference, integrate_trapezoidal

    def compute():
        mech = build_case_mechanism(text, None, overrides)
        ref = integrate_reference(mech, t_end, dt, rtol=1e-12, atol=1e-12).q
        floor = integrate_trapezoidal(mech, t_end, dt).q
        projected = integrate_trapezoidal(mech, t_end, dt, project=True).q
        return ref, floor, projected
    return _cached(("reference", text, overrides, t_end, dt), compute)


def _simulate_case(case: Case) -> CaseOutput:
    from mbfg.drivers.forward_dynamics import simulate_batch, simulate_smoother
    from mbfg.model import constraints as C
    from mbfg.model.inertia import kinetic_energy, mechanical_energy
    from mbfg.model.scales import mechanism_scales

    s = case.settings_dict
    mech = case.mechanism()
    t0 = time.perf_counter()
    if s["solver"] == "smoother":
        res = simulate_smoother(mech, s["t_end"], s["dt"], coords=s["coords"],
                                integrator=s["integrator"], window=s["window"])
    else:
        res = simulate_batch(mech, s["t_end"], s["dt"], coords=s["coords"],
                             integrator=s["integrator"])
    seconds = time.perf_counter() - t0
    _finite("the simulation", q=res.q, qd=res.qd, qdd=res.qdd)
    phi = np.abs(C.position_constraints(mech, res.q))
    energy = mechanical_energy(mech, res.q, res.qd)
    drift = float(np.max(np.abs(energy - energy[0])))
    peak = float(np.max(kinetic_energy(mech, res.qd)))
    steps = len(res.t) - 1
    m = dict(steps=steps, iterations=int(res.stats.iterations), max_phi=float(np.max(phi)),
             max_phi_scaled=float(np.max(phi / mechanism_scales(mech).constraints)),
             energy_drift=drift, energy_drift_rel=drift / peak if peak > 0 else float("nan"),
             seconds=seconds, ms_per_step=1e3 * seconds / max(steps, 1))
    if s["reference"]:
        ref, floor, projected = _reference_motion(case.mechanism_text, case.overrides,
                                                  s["t_end"], s["dt"])
        pts = [i for i, c in enumerate(mech.coordinate_names) if not c.startswith("theta")]

        def rmse(q):
            return _rmse(q[:, pts] - ref[:, pts])
        err, f, p = rmse(res.q), rmse(floor), rmse(projected)
        m.update(rmse_points=err, floor_rmse=f, projected_floor_rmse=p,
                 error_ratio=err / f if f > 0 else float("nan"),
                 error_ratio_projected=err / p if p > 0 else float("nan"))
    return CaseOutput(m, {**_arrays(res), "coords": np.array(mech.coordinate_names)})


register_kind(
    "simulate", _simulate_case,
    settings={
        "t_end": Setting(1.0, positive, "duration [s]"),
        "dt": Setting(1e-3, positive, "time step [s]"),
        "solver": Setting("smoother", one_of("smoother", "batch"), "forward-dynamics solver"),
        "coords": Setting("dependent", one_of("dependent", "independent"), "coordinates"),
        "integrator": Setting(DEFAULT_INTEGRATOR, one_of(*INTEGRATORS), "integrator"),
        "window": Setting(2, integer_at_least(1), "fixed-lag window of the smoother"),
        "reference": Setting(False, boolean, "also compare with a DOP853 reference and the "
                             "trapezoidal floors (rmse_points, error_ratio, ...)"),
    },
    metrics=SIMULATE_METRICS, timing=("seconds", "ms_per_step"), cost=_steps,
    description="forward dynamics from the assembled q0 at rest (mbfg.simulate)")


# ------------------------------------------------------------------------------ estimate
ESTIMATE_METRICS = ("pos_rmse", "pos_rmse_after", "vel_rmse", "vel_rmse_after", "acc_rmse",
                    "acc_rmse_after", "smoothed_pos_rmse", "smoothed_pos_rmse_after",
                    "smoothed_vel_rmse", "smoothed_vel_rmse_after", "smoothed_acc_rmse",
                    "smoothed_acc_rmse_after", "coverage_2sigma", "reading_residual",
                    "ms_per_step")
"""Metrics of ``estimate``: RMSE of the ``coordinate`` (position, rate, acceleration; whole run
and after ``after`` seconds) of the causal estimate and, for estimators that smooth, of the
smoothed one; ``coverage_2sigma``, the fraction of the steps after
:data:`~mbfg.benchmarking.estimation_review.COVERAGE_AFTER` at which the estimator's reported
2-sigma band of the coordinate holds the truth (NaN without a reported standard deviation: the
factor-graph estimators report one with ``covariance: true``); ``reading_residual``, the RMS of
the readings' residuals against the causal estimate after that time, in units of each sensor's
sigma (:func:`~mbfg.benchmarking.estimation_review.reading_residual`: a check that needs no
truth); CPU ms per step (timing)."""


def _prepare_estimate(settings: dict, context: Any) -> dict:
    """Resolve the sensor set into its YAML text; check the estimator, the coordinate and the
    model's and prototype's overrides against the mechanism."""
    from mbfg.estimation.registry import estimator
    from mbfg.model.parameters import apply_overrides
    s = dict(settings)
    try:
        s["method"] = estimator(s["method"]).name
    except UsageError as e:
        raise ValueError(f"method: {e}") from None
    mech = context.base_mechanism()
    s["sensors_yaml"], _ = _sensor_set(s["sensors"], context)
    names = mech.coordinate_names
    if s["coordinate"] not in names:
        raise ValueError(f"coordinate: {s['coordinate']!r} is not a coordinate of the mechanism; "
                         f"expected one of {', '.join(names)}")
    for k in s["initial_offset"]:
        if k not in names:
            raise ValueError(f"initial_offset: {k!r} is not a coordinate of the mechanism; "
                             f"expected one of {', '.join(names)}")
    for name in ("model_overrides", "prototype_overrides"):
        try:
            apply_overrides(mech.spec, s[name])
        except UsageError as e:
            raise ValueError(f"{name}: {e}") from None
    return s


def _sensor_set(name: str, context: Any) -> tuple:
    """(YAML text, SensorSet on the first mechanism) of the study's sensor set ``name`` (or a
    sensors YAML file); ValueError naming the setting ``sensors`` otherwise."""
    from mbfg.errors import MbfgError
    from mbfg.loader import parse_sensors
    yaml_text, source = context.sensor_set(name)
    try:
        sensors = parse_sensors(yaml_text, context.base_mechanism(), source=source)
    except MbfgError as e:
        raise ValueError(f"sensors: sensor set {name!r}: {e}") from None
    return yaml_text, sensors


def _prototype_motion(text: str, overrides: tuple, t_end: float, dt: float) -> tuple:
    from mbfg.studies.spec import build_case_mechanism
    from mbfg.model.integrate import integrate_reference

    def compute():
        proto = build_case_mechanism(text, None, overrides)
        ref = integrate_reference(proto, t_end, dt, rtol=1e-11, atol=1e-11)
        return proto, (ref.t, ref.q, ref.qd, ref.qdd)
    return _cached(("prototype", text, overrides, t_end, dt), compute)


def _estimate_case(case: Case) -> CaseOutput:
    import dataclasses

    from mbfg.benchmarking.estimation_review import all_metrics, reading_residual, thin_readings
    from mbfg.estimation.registry import estimate, estimator
    from mbfg.loader import parse_sensors
    from mbfg.model import kinematics as K
    from mbfg.model.sensors import SensorSet

    s = case.settings_dict
    proto, truth = _prototype_motion(case.mechanism_text,
                                     tuple(case.overrides) + tuple(s["prototype_overrides"].items()),
                                     s["t_end"], s["dt"])
    t, q, qd, qdd = truth
    sensors = parse_sensors(s["sensors_yaml"], proto)
    if s["sensor_noise"] != 1.0:  # every sigma, the one the estimator assumes included
        sensors = SensorSet([dataclasses.replace(x, sigma=s["sensor_noise"] * x.sigma)
                             for x in sensors])
    readings = sensors.synthesize(proto, t, q, qd, qdd, rng=np.random.default_rng(case.seed))
    readings = thin_readings(readings, s["reading_stride"])  # a slower sensor on the same grid
    model = case.mechanism(extra=tuple(s["model_overrides"].items()))
    q0 = np.asarray(model.q0, float)
    if s["initial_offset"]:
        idx = [model.coordinate_index(k) for k in s["initial_offset"]]
        values = [q0[i] + v for i, v in zip(idx, s["initial_offset"].values())]
        q0 = np.asarray(K.solve_finite_displacement(model, q0, idx, values), float)
    options = {} if s["window"] is None else {"window": s["window"]}
    if s["covariance"] and estimator(s["method"]).accepts("covariance"):
        options["covariance"] = True  # the filters always report their standard deviations
    res = estimate(model, sensors, readings, s["dt"], len(t), method=s["method"],
                   seed=case.seed, q0=q0, qd0=np.zeros(model.n), **options)
    # (estimate() refuses non-finite estimates itself)
    k = model.coordinate_index(s["coordinate"])
    m = all_metrics(res, truth, k, s["dt"], s["after"], angle=k in set(model.angle_coords))
    m["reading_residual"] = reading_residual(res, model, sensors, readings, s["dt"])
    arrays = {**_arrays(res), "truth_q": q, "truth_qd": qd, "truth_qdd": qdd,
              "coords": np.array(model.coordinate_names)}
    return CaseOutput(m, arrays)


_SENSORS_SETTING = Setting(None, text, "a name in sensor_sets, or a sensors YAML file",
                          required=True)
"""The ``sensors`` setting of the kinds that synthesize readings (estimate, identify)."""


def _optional_window(value: Any) -> int | None:
    return None if value is None else integer_at_least(1)(value)


register_kind(
    "estimate", _estimate_case,
    settings={
        "t_end": Setting(10.0, positive, "duration of the prototype's run [s]"),
        "dt": Setting(0.005, positive, "time step of the readings and the estimator [s]"),
        "sensors": _SENSORS_SETTING,
        "method": Setting("fg-online", text, "estimator name (mbfg.estimation.ESTIMATORS)"),
        "window": Setting(None, _optional_window, "smoother window (default: the estimator's)"),
        "model_overrides": Setting({}, number_mapping, "overrides applied to the estimator's "
                                   "model only (the prototype keeps the case's values)"),
        "initial_offset": Setting({}, number_mapping, "coordinate -> offset added to the "
                                  "model's initial value (reassembled), e.g. theta0: pi/16"),
        "coordinate": Setting("theta0", text, "coordinate whose errors are the metrics"),
        "after": Setting(2.0, non_negative, "the *_after metrics skip the first seconds"),
        "prototype_overrides": Setting({}, number_mapping, "overrides applied to the prototype "
                                       "only (after the case's), e.g. a heavier coupler than "
                                       "the model's"),
        "sensor_noise": Setting(1.0, positive, "factor on every sensor's sigma: the readings' "
                                "noise and the sigma the estimator assumes"),
        "reading_stride": Setting(1, integer_at_least(1), "keep every n-th reading of each "
                                  "sensor (a slower sensor on the estimator's time grid)"),
        "covariance": Setting(False, boolean, "ask the factor-graph estimators for their "
                              "covariances, so that coverage_2sigma is measured (the filters "
                              "always report theirs)"),
        "label": Setting("", label, "a free name of the case's condition, for the table; "
                         "not used by the run"),
    },
    metrics=ESTIMATE_METRICS, timing=("ms_per_step",), prepare=_prepare_estimate, cost=_steps,
    description="three-simulation estimation: accurate prototype, synthesized readings "
                "(case seed), an estimator on the model")


# ------------------------------------------------------------------------------- inverse
INVERSE_METRICS = ("iterations", "max_following_error", "max_phi", "force_rms", "force_max",
                   "seconds", "ms_per_step")
"""Metrics of ``inverse``: Gauss-Newton iterations of all stages; the largest following error
of the imposed coordinates and max |Phi|; RMS and max |Q| of the forces on the actuated
coordinates [N, N m]; wall time and ms per step (timing)."""


def _names(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    return text(value)


def _optional_names(value: Any) -> str | None:
    return None if value is None else _names(value)


def _prepare_inverse(settings: dict, context: Any) -> dict:
    """Read the trajectory file (relative to the study, or a bundled one by name) into the
    settings; check the coordinates against the mechanism."""
    from mbfg import resources
    from mbfg.errors import MbfgError
    from mbfg.io import read_trajectory
    from mbfg.trajectories import uniform_step
    s = dict(settings)
    mech = context.base_mechanism()
    for key in ("imposed", "actuated"):
        if s[key] is None:
            continue
        for name in s[key].split(","):
            if name.strip() not in mech.coordinate_names:
                raise ValueError(f"{key}: {name.strip()!r} is not a coordinate of the mechanism; "
                                 f"expected some of {', '.join(mech.coordinate_names)}")
    path = context.base_dir / s["trajectory"]
    if not path.is_file():
        path = resources.resolve_trajectory(s["trajectory"])
        if not Path(path).is_file():
            raise ValueError(f"trajectory: no file {context.base_dir / s['trajectory']} and no "
                             f"bundled trajectory {s['trajectory']!r}; expected rows 't value...' "
                             f"in a file next to the study, or a bundled trajectory's name")
    k = len(s["imposed"].split(","))
    try:
        t, values = read_trajectory(path, columns=k, min_rows=3,
                                    why="velocities and accelerations are differences")
        uniform_step(t, str(path))
    except (MbfgError, OSError) as e:
        raise ValueError(f"trajectory: {e}") from None
    s["trajectory_t"] = [float(x) for x in t]
    s["trajectory_values"] = [[float(x) for x in row] for row in values]
    return s


def _inverse_case(case: Case) -> CaseOutput:
    from mbfg.drivers.inverse_dynamics import solve_inverse_dynamics

    s = case.settings_dict
    mech = case.mechanism()
    imposed = tuple(mech.coordinate_index(n.strip()) for n in s["imposed"].split(","))
    actuated = (imposed if s["actuated"] is None else
                tuple(mech.coordinate_index(n.strip()) for n in s["actuated"].split(",")))
    t = np.asarray(s["trajectory_t"], float)
    desired = np.asarray(s["trajectory_values"], float)
    t0 = time.perf_counter()
    res = solve_inverse_dynamics(mech, t, desired, imposed, actuated, coords=s["coords"],
                                 integrator=s["integrator"])
    seconds = time.perf_counter() - t0
    _finite("inverse dynamics", q=res.q, Q=res.Q)
    st = res.stats
    Q = res.Q[:, list(actuated)]
    m = dict(iterations=int(sum(stage["iterations"] for stage in st["stages"])),
             max_following_error=float(st["max_following_error"]),
             max_phi=float(np.max(res.position_residual)),
             force_rms=_rmse(Q), force_max=float(np.max(np.abs(Q))), seconds=seconds,
             ms_per_step=1e3 * seconds / max(len(t) - 1, 1))
    return CaseOutput(m, {**_arrays(res), "coords": np.array(mech.coordinate_names)})


register_kind(
    "inverse", _inverse_case,
    settings={
        "trajectory": Setting(None, text, "rows 't value...' of the imposed coordinates: a file "
                              "next to the study or a bundled trajectory", required=True),
        "imposed": Setting(None, _names, "coordinates with a prescribed motion (theta0 or "
                           "[theta0, theta1])", required=True),
        "actuated": Setting(None, _optional_names, "coordinates with an unknown force "
                            "(default: imposed)"),
        "coords": Setting("dependent", one_of("dependent", "independent"), "coordinates"),
        "integrator": Setting("trapezoidal", one_of("trapezoidal", "euler"), "integrator"),
    },
    metrics=INVERSE_METRICS, timing=("seconds", "ms_per_step"), prepare=_prepare_inverse,
    cost=lambda settings: float(len(settings["trajectory_t"])),
    description="inverse dynamics: forces that make the imposed coordinates follow a trajectory")


# ------------------------------------------------------------------------------ identify
IDENTIFY_METRICS = ("converged", "iterations", "final_iterations", "max_rel_error",
                    "max_rel_std", "max_z", "max_z_sampling", "base_max_error", "base_max_z",
                    "cost", "null_directions", "seconds")
"""Metrics of ``identify``: whether Levenberg-Marquardt converged; its iterations (all stages
of the continuation, and the final stage); over the identified parameters the largest
|value - true| / |true|, std / |true| and |value - true| / std (parameters whose true value is
0 count in ``max_z`` only), and |value - true| / sampling std (the readings' noise alone:
the study's recordings come from the exact model); over the identified inertial base
parameters (``IdentificationResult.base_parameters``) the largest |v . (phi - phi_true)|
(dimensionless: phi scaled by the YAML values, so 0.005 is 0.5 %) and that over its std;
the training cost per reading (about 1 when the model fits the
noise); the number of null directions (combinations the data do not see); the wall time of
``mbfg.identify`` [s] (timing).  Then, per identified parameter p (canonical name), the
columns ``rel_error(p)`` = (value - true) / |true| (signed) and ``rel_std(p)`` = std / |true|
(blank when the true value is 0)."""

EXCITATION_AMPLITUDES = (2.0, 1.5, 0.8, 0.4)
"""Default amplitudes of the motors' multi-harmonic input [the motor's input unit, e.g. V]
(those of benchmarks/identification.py)."""
EXCITATION_FREQUENCIES_HZ = (0.2, 0.7, 1.6, 3.1)
"""Default frequencies of the motors' multi-harmonic input [Hz]."""
TRUTH_TOLERANCE = 1e-10
"""rtol = atol of the DOP853 run of the true motion (dimensionless: the integrator's relative
and absolute tolerances on the states in the mechanism's units)."""
_PHASE_STEP = (np.sqrt(5.0) - 1.0) / 2.0
"""Golden-ratio step of the excitation phases (in turns): every recording, motor and
harmonic gets its own phase, the same in every run."""


def _excitation(value: Any) -> dict:
    """{amplitudes: [...], frequencies: [...]} of equal lengths (frequencies > 0, in Hz)."""
    if not isinstance(value, Mapping) or set(value) != {"amplitudes", "frequencies"}:
        raise ValueError(f"expected {{amplitudes: [a1, ...], frequencies: [f1, ...] (Hz)}}, got "
                         f"{value!r}")
    amps, freqs = value["amplitudes"], value["frequencies"]
    ok = (isinstance(amps, (list, tuple)) and isinstance(freqs, (list, tuple)) and amps
          and len(amps) == len(freqs))
    if not ok:
        raise ValueError(f"expected amplitudes and frequencies as two non-empty lists of equal "
                         f"length, got {value!r}")
    amps = [float(non_negative(a)) for a in amps]
    freqs = [float(positive(f)) for f in freqs]
    return {"amplitudes": amps, "frequencies": freqs}


def _payload(value: Any) -> list:
    """A list of {body, mass, cog, I_G}: [[body, mass, [c_x, c_y], I_G], ...]."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"expected a list of {{body, mass, cog, I_G}}, got {value!r}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or set(item) != {"body", "mass", "cog", "I_G"}:
            raise ValueError(f"payload[{i}]: expected {{body, mass, cog: [c_x, c_y], I_G}}, got "
                             f"{item!r}")
        cog = item["cog"]
        if not isinstance(cog, (list, tuple)) or len(cog) != 2:
            raise ValueError(f"payload[{i}].cog: expected a pair [c_x, c_y], got {cog!r}")
        try:
            body = integer_at_least(0)(item["body"])
            mass, IG = positive(item["mass"]), non_negative(item["I_G"])
            c = [float(x) for x in number_mapping({"x": cog[0], "y": cog[1]}).values()]
        except ValueError as e:
            raise ValueError(f"payload[{i}]: {e}") from None
        out.append([body, mass, c, IG])
    return out


def _optional_iterations(value: Any) -> int | None:
    return None if value is None else integer_at_least(1)(value)


def _prepare_identify(settings: dict, context: Any) -> dict:
    """Resolve the sensor set into its YAML text; expand the parameter names (canonical,
    comma-separated) and check them, and the payload, against the first mechanism."""
    from mbfg.graphs.identification import payload_vector
    from mbfg.model.identification import parameter_set
    s = dict(settings)
    mech = context.base_mechanism()
    s["sensors_yaml"], sensors = _sensor_set(s["sensors"], context)
    try:
        s["parameters"] = ",".join(parameter_set(mech, s["parameters"], sensors).names)
    except UsageError as e:
        raise ValueError(f"parameters: {e}") from None
    if s["payload"] and s["recordings"] < 2:
        raise ValueError("payload: the payload is carried in the recordings after the first, "
                         "so it needs recordings >= 2 (one recording cannot separate the "
                         "common scale it reveals); expected recordings: 2 or no payload")
    try:
        payload_vector(mech, tuple(tuple(p) for p in s["payload"]))
    except UsageError as e:
        raise ValueError(f"payload: {e}") from None
    return s


def _identify_metrics(settings: dict) -> tuple:
    names = settings["parameters"].split(",")
    return tuple(f"{m}({n})" for n in names for m in ("rel_error", "rel_std"))


def _motor_inputs(n_motors: int, excitation: dict, recording: int) -> Callable | None:
    """u(t) (k,) of recording ``recording``: per motor a sum of sines, phases distinct per
    recording, motor and harmonic; None without motors."""
    if not n_motors:
        return None
    amps = np.asarray(excitation["amplitudes"], float)
    omega = 2.0 * np.pi * np.asarray(excitation["frequencies"], float)
    h = len(amps)
    index = np.arange(n_motors * h).reshape(n_motors, h) + n_motors * h * recording + 1
    phases = 2.0 * np.pi * np.mod(index * _PHASE_STEP, 1.0)

    def u(t):
        return np.sum(amps * np.sin(omega * t + phases), axis=1)
    return u


def _true_motion(text: str, overrides: tuple, t_end: float, dt: float, excitation: dict,
                 payload: tuple, recording: int) -> tuple:
    """(mechanism, t, q, qd, qdd, inputs) of the true motion of one recording (the case's
    mechanism carrying ``payload``), cached per process by these inputs."""
    from mbfg.graphs.identification import payload_vector
    from mbfg.model.integrate import integrate_reference
    from mbfg.model.parameters import parameter_vector
    from mbfg.studies.spec import build_case_mechanism

    def compute():
        mech = build_case_mechanism(text, None, overrides)
        if payload:
            mech = mech.with_parameters(parameter_vector(mech) + payload_vector(mech, payload))
        u = _motor_inputs(len(mech.spec.motors), excitation, recording)
        ref = integrate_reference(mech, t_end, dt, inputs=u, rtol=TRUTH_TOLERANCE,
                                  atol=TRUTH_TOLERANCE)
        U = None if u is None else np.stack([u(t) for t in ref.t])
        return mech, ref.t, ref.q, ref.qd, ref.qdd, U
    key = ("identify", text, overrides, t_end, dt, tuple(excitation["amplitudes"]),
           tuple(excitation["frequencies"]), payload, recording)
    return _cached(key, compute)


def _identify_case(case: Case) -> CaseOutput:
    from mbfg.drivers.identification import identify
    from mbfg.graphs.identification import IdentificationSettings, Recording
    from mbfg.loader import parse_sensors
    from mbfg.model.identification import parameter_set

    s = case.settings_dict
    truth = case.mechanism()
    sensors = parse_sensors(s["sensors_yaml"], truth)
    rng = np.random.default_rng(case.seed)
    payload = tuple((b, m, tuple(c), IG) for b, m, c, IG in s["payload"])
    recordings = []
    for r in range(s["recordings"]):
        carried = payload if r > 0 else ()
        mech, t, q, qd, qdd, U = _true_motion(case.mechanism_text, case.overrides, s["t_end"],
                                              s["dt"], s["excitation"], carried, r)
        readings = sensors.synthesize(mech, t, q, qd, qdd, rng=rng)
        recordings.append(Recording(tuple(readings), len(t), s["dt"], U,
                                    name=f"recording {r}", payload=carried))
    names = s["parameters"]
    params = parameter_set(truth, names, sensors)
    true = params.nominal
    signs = np.where(np.arange(params.size) % 2 == 0, 1.0, -1.0)
    start, start_sensors = params.apply(s["perturbation"] * signs)
    t0 = time.perf_counter()
    settings = IdentificationSettings()
    if s["max_iterations"] is not None:
        settings = IdentificationSettings(max_iterations=s["max_iterations"])
    res = identify(start, start_sensors, recordings, names, settings=settings)
    seconds = time.perf_counter() - t0
    values, std = np.asarray(res.values, float), np.asarray(res.std, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(true != 0, np.abs(true), np.nan)
        rel_error, rel_std = (values - true) / scale, std / scale
        z = np.abs(values - true) / std
        z_sampling = np.abs(values - true) / np.asarray(res.sampling_std, float)

    def largest(x):
        x = x[np.isfinite(x)]
        return float(np.max(np.abs(x))) if x.size else float("nan")
    b = res.base_parameters  # against the true phi in the result's scales (the start's)
    base_error = b.errors(params.linear_values(np.zeros(params.size),
                                               scales=res.combination_scales))
    m = dict(converged=bool(res.converged), iterations=int(res.stats.iterations),
             final_iterations=int(res.stats["final_iterations"]),
             max_rel_error=largest(rel_error), max_rel_std=largest(rel_std), max_z=largest(z),
             max_z_sampling=largest(z_sampling), base_max_error=largest(base_error),
             base_max_z=largest(base_error / b.std[b.identifiable]),
             cost=float(np.mean(res.costs)),
             null_directions=int(np.sum(~np.asarray(res.identifiable, bool))), seconds=seconds)
    for n, e, d in zip(res.names, rel_error, rel_std):
        m[f"rel_error({n})"] = float(e) if np.isfinite(e) else None
        m[f"rel_std({n})"] = float(d) if np.isfinite(d) else None
    arrays = {"names": np.array(res.names), "values": values, "std": std,
              "sampling_std": np.asarray(res.sampling_std, float), "true": true,
              "start": params.values(s["perturbation"] * signs),
              "theta": np.asarray(res.theta, float), "correlation": np.asarray(res.correlation),
              "spectrum": np.asarray(res.spectrum), "identifiable": np.asarray(res.identifiable),
              "costs": np.asarray(res.costs, float)}
    return CaseOutput(m, arrays)


register_kind(
    "identify", _identify_case,
    settings={
        "t_end": Setting(4.0, positive, "duration of each recording [s]"),
        "dt": Setting(0.005, positive, "time step of the readings and the identification [s]"),
        "sensors": _SENSORS_SETTING,
        "parameters": Setting(None, _names, "parameter names (docs/identification.md), e.g. "
                              "[planar_bodies[1].mass, sensors[1].bias]", required=True),
        "perturbation": Setting(0.2, non_negative, "start of the identification: the true "
                                "values moved by this much in the unit-free chart, alternating "
                                "signs (0.2: masses x1.22 / x0.82, centres 0.2 body lengths)"),
        "recordings": Setting(1, integer_at_least(1), "recordings (each its own noise and, "
                              "with motors, its own input phases)"),
        "excitation": Setting({"amplitudes": list(EXCITATION_AMPLITUDES),
                               "frequencies": list(EXCITATION_FREQUENCIES_HZ)}, _excitation,
                              "the motors' inputs: {amplitudes: [...] (input units), "
                              "frequencies: [...] (Hz)}, a sum of sines per motor"),
        "payload": Setting([], _payload, "known masses carried in the recordings after the "
                           "first: [{body, mass, cog: [c_x, c_y], I_G}]"),
        "max_iterations": Setting(None, _optional_iterations, "Levenberg-Marquardt "
                                  "iterations per stage at most (default: "
                                  "IdentificationSettings')"),
    },
    metrics=IDENTIFY_METRICS, timing=("seconds",), prepare=_prepare_identify,
    metrics_of=_identify_metrics, cost=lambda settings: settings["recordings"] * _steps(settings),
    description="identification: true motions of the case's mechanism, recordings synthesized "
                "(case seed), mbfg.identify from a perturbed start")
