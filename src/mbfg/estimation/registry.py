"""The one registry of state estimators and :func:`estimate`, which runs one by name.

Every estimator is a function ``fn(model, sensors, readings, dt, n_steps, **options) ->
EstimationResult``; :func:`register` adds one under a name with fixed default options (so a
tuned variant, e.g. the online smoother with an unknown force, is one line).  The command
line (``mbfg estimate --method``), the review benchmark and :func:`mbfg.estimate` all read
:data:`ESTIMATORS`.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING

import numpy as np

from mbfg.errors import ConvergenceError, UsageError
from mbfg.estimation import kalman, particle
from mbfg.estimation.graph_estimators import (ONLINE_FORCE_SETTINGS, EstimatorSettings,
                                             estimate_batch, estimate_online)
from mbfg.model.nonconservative import with_inputs
from mbfg.model.sensors import finite_readings
from mbfg.results import EstimationResult

if TYPE_CHECKING:
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import SensorSet

__all__ = ["Estimator", "ESTIMATORS", "ALIASES", "register", "estimator", "estimate"]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator.

    Attributes
    ----------
    name : str
    function : callable(model, sensors, readings, dt, n_steps, **options) -> EstimationResult
    description : str
        One line for listings (``mbfg estimate --help``).
    defaults : Mapping
        Options passed unless the caller gives them (e.g. ``window=10``).
    online : bool
        True if the causal estimates ``q, qd, qdd`` use readings up to each step only.
    """
    name: str
    function: Callable[..., EstimationResult]
    description: str = ""
    defaults: Mapping = field(default_factory=dict)
    online: bool = True

    def accepts(self, option: str) -> bool:
        """Whether the function names the keyword ``option`` in its signature (options it
        only forwards through ``**options`` are not listed)."""
        return option in inspect.signature(self.function).parameters

    def __call__(self, model, sensors, readings, dt: float, n_steps: int,
                 **options: Any) -> EstimationResult:
        return self.function(model, sensors, readings, dt, n_steps,
                             **{**self.defaults, **options})


ESTIMATORS: dict[str, Estimator] = {}
"""name -> :class:`Estimator`; add with :func:`register`."""

ALIASES = {"smoother": "fg-online", "batch": "fg-batch"}
"""Older names accepted by :func:`estimator` (the command line's ``--method``)."""


def register(name: str, function: Callable[..., EstimationResult], description: str = "",
             *, online: bool = True, **defaults: Any) -> Estimator:
    """Add (or replace) an estimator under ``name``; ``defaults`` are its fixed options."""
    est = Estimator(str(name), function, description, dict(defaults), online)
    ESTIMATORS[est.name] = est
    return est


def estimator(name: str) -> Estimator:
    """The registered estimator ``name`` (or an alias); :class:`~mbfg.errors.UsageError`
    listing the names otherwise."""
    key = ALIASES.get(name, name)
    if key not in ESTIMATORS:
        raise UsageError(f"unknown estimator {name!r}; expected one of "
                         f"{', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[key]


def estimate(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    method: str = "fg-online",
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    invalid_readings: str = "raise",
    **options: Any,
) -> EstimationResult:
    """State estimates of ``model`` from sensor ``readings`` with the estimator ``method``.

    A pure function of (model, sensors, readings, dt, options, seed): the same arguments give
    the same result.

    Parameters
    ----------
    model : Mechanism
        The estimator's model (it may differ from the real system).
    sensors : SensorSet or sequence of sensors
    readings : list of (steps (R,), values (R, k)), one per sensor
        As :meth:`mbfg.model.sensors.SensorSet.synthesize` or :func:`mbfg.io.read_readings` return.
    dt : float
        Time step [s] of the grid ``t_k = k dt``, k = 0 .. n_steps - 1.
    n_steps : int
        Number of grid steps (including step 0).
    method : str
        A name in :data:`ESTIMATORS` (``"fg-online"``, ``"fg-batch"``, ``"ekf"``,
        ``"ekf_fe"``, ``"ukf"``, ``"dekf"``, ``"pf"``, ...).
    seed : int
        Seed of the estimators that draw random numbers (the particle filter).
    progress : callable(done, total), optional
        Passed to the estimators that report progress.
    invalid_readings : "raise" or "skip"
        A reading that is not a finite number raises :class:`~mbfg.errors.DataError` naming
        the sensor and step, or is skipped (that step then has no reading of that sensor);
        ``stats["skipped_readings"]`` counts them
        (:func:`mbfg.model.sensors.finite_readings`).
    **options
        The estimator's own options (``window``, ``settings``, ``covariance``, ``q0``,
        ``qd0``, ``forces``, ...; see its function); ``inputs`` (the motors' inputs, (k,) or
        a callable of t) become known forces for any estimator.

    Returns
    -------
    EstimationResult

    Raises
    ------
    DataError
        Invalid readings (non-finite with ``invalid_readings="raise"``, wrong shapes).
    ConvergenceError
        The estimator diverged (a non-finite estimate); ``partial`` holds the result up to
        the last finite step.
    """
    est = estimator(method)
    skipped = 0
    if readings is not None:  # (a registered estimator may take its readings otherwise)
        readings, skipped = finite_readings(sensors, readings, invalid_readings)
    if "inputs" in options:  # the motors' inputs become known forces for every estimator
        options["forces"] = with_inputs(model, options.get("forces"), options.pop("inputs"))
    if est.accepts("seed"):
        options["seed"] = seed
    if progress is not None and est.accepts("progress"):
        options["progress"] = progress
    result = est(model, sensors, readings, dt, n_steps, **options)
    if not isinstance(result, EstimationResult):
        return result
    return _checked(result.with_stats(skipped_readings=skipped) if skipped else result, model)


MANIFOLD_LIMIT = 1e-2
"""Largest distance of an estimate from the model's constraints, max_i |Phi_i| / scale_i
(:func:`mbfg.model.scales.constraint_scales`: a distance relative to the mechanism's length),
that :func:`estimate` returns as a result (dimensionless).  Every estimator keeps its
estimates assembled (the filters to the position problem's tolerance, the factor graphs to
their constraint sigmas, 3e-6 of the length); one this far off is a breakdown, such as a
filter's position problem failing and its linear fallback running away."""


def _checked(result: EstimationResult, model: Any) -> EstimationResult:
    """``result`` if its estimates are finite and on the model's constraints (within
    :data:`MANIFOLD_LIMIT`); otherwise :class:`ConvergenceError` naming the first step where
    they are not, with the part before it as ``partial``."""
    from mbfg.model import constraints as C
    from mbfg.model.scales import constraint_scales
    finite = np.all(np.isfinite(result.q), axis=1) & np.all(np.isfinite(result.qd), axis=1)
    bad = ~finite
    what = "is not finite"
    if not np.any(bad) and model.m and len(result.q):
        off = np.max(np.abs(C.position_constraints(model, result.q))
                     / constraint_scales(model, result.q), axis=1)
        bad = off > MANIFOLD_LIMIT
        if np.any(bad):
            what = (f"leaves the constraints ({float(off[np.argmax(bad)]):.3g} of the "
                    f"mechanism's length, more than {MANIFOLD_LIMIT:g})")
    if not np.any(bad):
        return result
    k = int(np.argmax(bad))
    failure = result.stats.extra.get("failure")
    exc = ConvergenceError(f"{result.name} diverged: its estimate {what} from step {k} "
                           f"(t = {result.t[k]:g} s) on" + (f" ({failure})" if failure else ""))
    exc.partial = result.truncated(k)
    raise exc


def _angle_forces(model):
    return EstimatorSettings(sigma_dynamics=2.0, sigma_force_walk=2.0,
                             force_coordinates=tuple(model.coordinate_names[j]
                                                     for j in model.angle_coords))


def _batch_with_angle_forces(model, sensors, readings, dt, n_steps, **options):
    """The batch smoother that also estimates an unknown generalized force on each relative
    angle (a random walk, like errorEKF_FE): a wrong gravity in the model then no longer
    biases the position seen through rate sensors."""
    return estimate_batch(model, sensors, readings, dt, n_steps,
                          **{"settings": _angle_forces(model), **options})


register("fg-online", estimate_online,
         "factor graph, fixed-lag smoother (causal + smoothed); noise and priors from the "
         "mechanism's scales, with an unknown weight error", window=10)
register("fg-online-plain", estimate_online,
         "fixed-lag smoother with the constant EstimatorSettings() (no force state)",
         window=10, settings=EstimatorSettings())
register("fg-batch", estimate_batch,
         "factor graph, whole recording (offline); noise and priors from the mechanism's "
         "scales, with an unknown weight error", online=False)
register("fg-batch-plain", estimate_batch,
         "whole-recording smoother with the constant EstimatorSettings() (no force state)",
         online=False, settings=EstimatorSettings())
register("fg-online+force", estimate_online,
         "fixed-lag smoother with an unknown slowly varying force on every point coordinate "
         "(settings tuned on seeds 0-3 of the review benchmark)",
         window=10, settings=ONLINE_FORCE_SETTINGS)
register("fg-batch+force", _batch_with_angle_forces,
         "batch smoother with an unknown force on every relative angle", online=False)
register("ekf", kalman.ekf, "errorEKF (Kalman-filter review, Sect. 7.1)")
register("ekf_fe", kalman.ekf_fe, "errorEKF with force estimation (review, Sect. 7.3)")
register("ukf", kalman.ukf, "unscented Kalman filter (review, Sects. 4.1, 4.4)")
register("dekf", kalman.dekf, "discrete extended Kalman filter (review, Sect. 5)")
register("pf", particle.particle_filter, "particle filter with branch tracking")
