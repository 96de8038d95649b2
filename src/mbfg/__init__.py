"""mbfg: planar multibody dynamics, kinematics and estimation as factor graphs on GTSAM.

Quick start::

    import mbfg
    mech = mbfg.load_mechanism("fourbar")   # a bundled mechanism, or a path to your YAML
    mech.coordinate_names, mech.q0, mech.constraints(mech.q0), mech.mass_matrix()
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mbfg import errors
from mbfg.errors import MbfgError
from mbfg.graphs import DEFAULT_INTEGRATOR
from mbfg.model import Mechanism, build_mechanism

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.sensors import Sensor, SensorSet
    from mbfg.results import (EstimationResult, IdentificationResult, TrajectoryResult,
                              ValidationResult)
    from mbfg.studies import SweepResult

__version__ = "0.1.0"


def load_mechanism(path: str | Path, overrides: dict | None = None) -> Mechanism:
    """Read a mechanism YAML file, or a bundled mechanism by name (``"fourbar"``; see
    :func:`mbfg.resources.bundled_mechanisms`), and build its assembled model.

    ``overrides``: physical values replaced by YAML path before the model is built, e.g.
    ``{"planar_bodies[1].mass": 2.5, "gravity": (0, -9.8)}``
    (:func:`mbfg.model.parameters.apply_overrides`).

    Raises a subclass of :class:`mbfg.errors.MechanismError` naming the file, YAML path and
    line for any invalid input."""
    from mbfg.loader import load_spec
    from mbfg.resources import resolve_mechanism
    spec = load_spec(resolve_mechanism(path))
    if overrides:
        from mbfg.model.parameters import apply_overrides
        spec = apply_overrides(spec, overrides)
    from mbfg.loader import build_checked
    return build_checked(spec)


def mechanism_from_yaml(text: str, source: str | None = None) -> Mechanism:
    """Build a mechanism from YAML text (``source`` is used in error messages)."""
    from mbfg.loader import mechanism_from_yaml as from_yaml
    return from_yaml(text, source)


def load_sensors(path_or_text: str | os.PathLike, mech: Mechanism) -> SensorSet:
    """Read a ``sensors:`` YAML description (a path, or the YAML text) for ``mech``
    (:func:`mbfg.loader.load_sensors`; format in docs/sensors.md)."""
    from mbfg.loader import load_sensors as load
    return load(path_or_text, mech)


def simulate(
    mech: Mechanism,
    t_end: float,
    dt: float = 1e-3,
    *,
    solver: str = "smoother",
    coords: str = "dependent",
    integrator: str = DEFAULT_INTEGRATOR,
    window: int = 2,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    forces: ForceInput | None = None,
    inputs: ForceInput | None = None,
    progress: Callable | None = None,
) -> TrajectoryResult:
    """Forward dynamics of ``mech`` released at (q0, qd0) (default: its assembled ``q0`` at
    rest) for ``t_end`` seconds at step ``dt`` [s].

    ``solver``: ``"smoother"`` (fixed-lag smoother of ``window`` steps,
    :func:`mbfg.drivers.forward_dynamics.simulate_smoother`) or ``"batch"`` (causal batch
    segments, :func:`mbfg.drivers.forward_dynamics.simulate_batch`); both solve the same
    square graph (docs/theory.md, section 5).  ``integrator``: ``"hermite"`` (the
    default, fourth order: the trapezoidal rule with its end corrections), ``"trapezoidal"``
    (the paper's Eq. 23, with an energy balance) or ``"euler"`` (Eq. 22).  ``forces``:
    applied generalized forces besides gravity [N, N m], None, (n,) or a callable of the
    time t [s] returning (n,) (:mod:`mbfg.model.forces`, the convention of every driver);
    ``inputs``: the inputs of the mechanism's motors (YAML ``motors:``), (k,) or a callable
    of t; friction (YAML ``friction:``) always acts.  Returns a frozen
    :class:`~mbfg.results.TrajectoryResult` (t, q, qd, qdd, Q as arrays).  Raises
    :class:`~mbfg.errors.ConvergenceError` or :class:`~mbfg.errors.LockupError`, whose
    ``partial`` holds the trajectory computed before the failure."""
    if solver == "smoother":
        from mbfg.drivers.forward_dynamics import simulate_smoother
        return simulate_smoother(mech, t_end, dt, coords=coords, integrator=integrator,
                                 window=window, q0=q0, qd0=qd0, forces=forces, inputs=inputs,
                                 progress=progress)
    if solver == "batch":
        from mbfg.drivers.forward_dynamics import simulate_batch
        return simulate_batch(mech, t_end, dt, coords=coords, integrator=integrator, q0=q0,
                              qd0=qd0, forces=forces, inputs=inputs, progress=progress)
    raise errors.UsageError(f"solver must be 'smoother' or 'batch', got {solver!r}")


def solve_inverse_dynamics(
    mech: Mechanism,
    t: ArrayLike,
    desired: ArrayLike,
    imposed: ArrayLike,
    actuated: ArrayLike | None = None,
    **settings: Any,
) -> TrajectoryResult:
    """Forces on the ``actuated`` coordinates that make ``q[imposed]`` follow ``desired``
    (T, len(imposed)) at times ``t`` (T,) [s]; see :func:`mbfg.drivers.inverse_dynamics.solve_inverse_dynamics`
    for the settings."""
    from mbfg.drivers.inverse_dynamics import solve_inverse_dynamics as solve
    return solve(mech, t, desired, imposed, actuated, **settings)


def estimate(
    model: Mechanism,
    sensors: Sequence[Sensor],
    readings: Sequence,
    dt: float,
    n_steps: int,
    *,
    method: str = "fg-online",
    seed: int = 0,
    progress: Callable | None = None,
    **options: Any,
) -> EstimationResult:
    """State estimates of ``model`` from sensor ``readings`` (one ``(steps, values)`` per
    sensor) on the grid ``k dt``, k < ``n_steps``, by the estimator ``method`` of the one
    registry :data:`mbfg.estimation.ESTIMATORS` (``"fg-online"``, ``"fg-batch"``, ``"ekf"``,
    ``"ukf"``, ``"pf"``, ...).  Returns a frozen :class:`~mbfg.results.EstimationResult`;
    see :func:`mbfg.estimation.estimate` for the options."""
    from mbfg.estimation.registry import estimate as run
    return run(model, sensors, readings, dt, n_steps, method=method, seed=seed,
               progress=progress, **options)


def sweep(
    study: str | os.PathLike | dict,
    *,
    scheduler: str = "local",
    workers: int | None = None,
    out: str | os.PathLike | None = None,
    keep_arrays: str | os.PathLike | None = None,
    **options: Any,
) -> SweepResult:
    """Run a study (Monte-Carlo runs, parameter sweeps; a YAML file or the same structure as a
    dict, docs/studies.md) serially or on Dask and return its tidy table, one row per case.

    ``scheduler``: ``"local"`` (a Dask LocalCluster of ``workers`` processes; serial when
    ``workers`` is 1 or Dask is not installed), ``"serial"`` or a scheduler address; ``out``:
    the CSV table (plus Parquet with pyarrow), resumed if it exists; ``keep_arrays``: a
    directory for each case's arrays.  See :func:`mbfg.studies.sweep`."""
    from mbfg.studies import sweep as run
    return run(study, scheduler=scheduler, workers=workers, out=out, keep_arrays=keep_arrays,
               **options)


def identify(
    model: Mechanism,
    sensors: Sequence[Sensor],
    recordings: Sequence,
    parameters: Sequence[str] | str,
    **options: Any,
) -> IdentificationResult:
    """Identify the physical ``parameters`` (YAML paths: ``planar_bodies[1].mass``,
    ``friction[0].viscous``, ``motors[0].gain``, ``gravity``, ``sensors[1].bias``, ...) of
    ``model`` jointly with the states of every recording; see
    :func:`mbfg.drivers.identification.identify` and docs/identification.md."""
    from mbfg.drivers.identification import identify as run
    return run(model, sensors, recordings, parameters, **options)


def cross_validate(
    model: Mechanism,
    sensors: Sequence[Sensor],
    recording: Any,
    result: IdentificationResult | None = None,
    **options: Any,
) -> ValidationResult:
    """States of a held-out ``recording`` with the parameters fixed at ``result``'s values,
    and its residual per step; see :func:`mbfg.drivers.identification.cross_validate`."""
    from mbfg.drivers.identification import cross_validate as run
    return run(model, sensors, recording, result, **options)


__all__ = ["load_mechanism", "mechanism_from_yaml", "load_sensors", "simulate",
           "solve_inverse_dynamics", "estimate", "identify", "cross_validate", "sweep", "Mechanism", "build_mechanism", "MbfgError", "errors", "__version__"]
