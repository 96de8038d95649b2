"""Inverse dynamics driver (paper Sect. 5.3 and 7.2): generalized forces that make a mechanism
follow a prescribed motion of some coordinates, by the four-stage batch solve of
:mod:`mbfg.graphs.inverse`.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import SolverError
from mbfg.graphs.inverse import InverseProblem, InverseSettings
from mbfg.trajectories import uniform_step
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.results import Stats, TrajectoryResult
from mbfg.solvers.batch import optimize, total_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

RESIDUAL_RMS = 1e-6
"""A stage has converged when its whitened residuals (in units of their sigmas, which come
from the mechanism's scales) have fallen to this RMS: a consistent stage (zero optimum) would
otherwise creep at rounding level without meeting a relative test."""

STAGE_TOLERANCE = 1e-9
"""Relative tolerance of each stage's Gauss-Newton solve (:func:`mbfg.solvers.batch.optimize`,
its default).  The force stage is skipped when its factors add at most this fraction to the
velocity stage's optimal error at the start (see :func:`solve_inverse_dynamics`)."""

STAGE_NAMES = {1: "positions", 2: "velocities and accelerations", 3: "velocity constraints",
               4: "forces"}


def _already_optimal(terms, X, previous_error: float) -> bool:
    """Whether the force stage can keep its start X: its terms are the velocity stage's plus
    the dynamics rows, and X has the velocity stage's optimum with the forces of the model's
    inverse dynamics.  Near that optimum E4(x, Q) = E3(x) + E_dyn(x, Q) >= E3(x) >= E3*, so
    if E4 at X exceeds E3* by at most STAGE_TOLERANCE (the dynamics rows are met, as they are
    whenever the actuated coordinates determine the forces), no step can lower the error by
    more than the solver's own relative tolerance: the Gauss-Newton solve (the most expensive
    one, ~30 % of the robot's time) would only confirm X."""
    return total_error(terms, X) <= previous_error * (1.0 + STAGE_TOLERANCE)


def _transfer(X, old, new, extra=None) -> np.ndarray:
    """Step array in layout ``new`` from one in layout ``old`` (plus ``extra`` slot arrays)."""
    parts = old.unpack(X)
    parts.update(extra or {})
    out = np.zeros((X.shape[0], new.dim))
    for name in new.names:
        out[:, new.slice(name)] = parts[name]
    return out


def positions_by_continuation(
    mech: Mechanism,
    imposed: tuple,
    desired: ArrayLike,
    q_guess: ArrayLike | None = None,
    stride: int = 10,
    tol: float = 1e-12,
) -> np.ndarray:
    """q (N, n) with q[imposed] = desired on the assembly branch of ``q_guess`` (default q0).

    Finite displacement by continuation on every ``stride``-th sample (each solve starts
    from a linear extrapolation of the previous ones, which keeps the branch), linear
    interpolation in between, then Newton on all samples at once (vectorized minimum-norm
    least-squares steps with the imposed coordinates held).  Samples that do not converge
    that way are solved one by one from their predecessor."""
    desired = np.asarray(desired, float)
    N = desired.shape[0]
    imposed = list(imposed)
    coarse = np.unique(np.r_[np.arange(0, N, max(1, int(stride))), N - 1])
    qc = np.empty((coarse.size, mech.n))
    q = np.array(mech.q0 if q_guess is None else q_guess, float)
    for i, k in enumerate(coarse):
        guess = q if i < 2 else qc[i - 1] + (qc[i - 1] - qc[i - 2]) * (k - coarse[i - 1]) / (
            coarse[i - 1] - coarse[i - 2])
        q = qc[i] = K.solve_finite_displacement(mech, guess, imposed, desired[k], tol=tol)
    out = np.empty((N, mech.n))
    for j in range(mech.n):
        out[:, j] = np.interp(np.arange(N), coarse, qc[:, j])
    out[:, imposed] = desired
    out, ok = K.solve_positions_batch(mech, out, imposed, desired, tol=tol, max_iter=20)
    for k in np.flatnonzero(~ok):
        prev = out[k - 1] if k > 0 else np.array(mech.q0, float)
        out[k] = K.solve_finite_displacement(mech, prev, imposed, desired[k], tol=tol)
    return out


def solve_inverse_dynamics(
    mech: Mechanism,
    t: ArrayLike,
    desired: ArrayLike,
    imposed: ArrayLike,
    actuated: tuple | None = None,
    *,
    coords: str = "dependent",
    indices: ArrayLike | None = None,
    integrator: str = "trapezoidal",
    settings: InverseSettings | None = None,
    progress: Callable | None = None,
    max_iterations: int = 50,
) -> TrajectoryResult:
    """Forces on the ``actuated`` coordinates that make ``q[imposed]`` follow ``desired``.

    Parameters
    ----------
    mech : Mechanism
    t : (N,) uniformly spaced times [s]
    desired : (N, len(imposed)) prescribed values [m or rad]
    imposed : coordinate indices; must be valid independent coordinates (as many as the DOF)
    actuated : coordinate indices with an unknown force (default: ``imposed``)
    coords : "dependent" (Fig. 4 with f_idyn^d) or "independent" (f_idyn^i, z = q[indices])
    progress : optional callable ``progress(stage, 4)`` called after each stage

    Returns
    -------
    TrajectoryResult with Q (N, n): the generalized forces (zero off ``actuated``); ``stats``
    has per-stage iterations and times and the largest following error.
    """
    t0 = time.perf_counter()
    t = np.asarray(t, float)
    desired = np.asarray(desired, float).reshape(t.size, -1)
    imposed = tuple(int(i) for i in imposed)
    actuated = imposed if actuated is None else tuple(int(i) for i in actuated)
    if desired.shape[1] != len(imposed):
        raise SolverError(f"the trajectory has {desired.shape[1]} value column(s) but "
                          f"{len(imposed)} imposed coordinate(s) were given")
    for i in imposed + actuated:
        if not 0 <= i < mech.n:
            raise SolverError(f"coordinate index {i} out of range 0..{mech.n - 1} "
                              f"({' '.join(mech.coordinate_names)})")
    K.check_independent_coordinates(mech, imposed)
    dt = uniform_step(t)
    settings = settings or InverseSettings(dt=dt, integrator=integrator)
    if abs(settings.dt - dt) > 1e-12 * max(1.0, dt):
        raise SolverError(f"settings.dt = {settings.dt} differs from the trajectory's step {dt}")
    problem = InverseProblem(mech, settings, imposed, actuated, coords, indices)
    if problem.indices is not None:
        K.check_independent_coordinates(mech, problem.indices)

    q = positions_by_continuation(mech, imposed, desired)
    lay = problem.layout(1)
    parts = {"q": q}
    if problem.indices is not None:
        parts["z"] = q[:, list(problem.indices)]
    X = np.hstack([parts[name] for name in lay.names])
    stages = []
    hints = None
    for stage in (1, 2, 3, 4):
        new_lay = problem.layout(stage)
        extra = {}
        if stage == 2:
            p = lay.unpack(X)
            v = np.gradient(p["q"], dt, axis=0, edge_order=2)
            a = np.gradient(v, dt, axis=0, edge_order=2)
            hints = {"v": v, "a": a}
            extra = {"v": v, "a": a}
            if problem.indices is not None:
                idx = list(problem.indices)
                extra.update(zd=v[:, idx], zdd=a[:, idx])
        if stage == 4:
            p = lay.unpack(X)
            extra = {"Q": D.inverse_dynamics(mech, p["q"], p["v"], p["a"], actuated)[:, list(actuated)]}
        X = _transfer(X, lay, new_lay, extra)
        lay, terms = problem.terms(stage, desired, hints)
        keys = lay.keys(range(t.size))
        t_stage = time.perf_counter()
        if stage == 4 and _already_optimal(terms, X, stages[-1]["final_error"]):
            stages.append(dict(stage=4, iterations=0, final_error=stages[-1]["final_error"],
                               seconds=time.perf_counter() - t_stage))
            continue
        X, st = optimize(terms, X, keys, max_iterations=max_iterations,
                         relative_tolerance=STAGE_TOLERANCE,
                         absolute_tolerance=0.5 * X.size * RESIDUAL_RMS ** 2,
                         what=f"inverse dynamics stage {stage} ({STAGE_NAMES[stage]})")
        stages.append(dict(stage=stage, iterations=st.iterations,
                                    final_error=st.final_error, seconds=st.seconds))
        if progress:
            progress(stage, 4)
    p = lay.unpack(X)
    from mbfg.model import constraints as C
    Q = np.zeros((t.size, mech.n))
    Q[:, list(actuated)] = p["Q"]
    stats = Stats.of("batch, 4 stages", time.perf_counter() - t0, t.size,
                     sum(s["iterations"] for s in stages), coords=coords, stages=stages,
                     max_following_error=float(np.max(np.abs(p["q"][:, list(imposed)] - desired))))
    independent = problem.indices is not None
    return TrajectoryResult(
        t=t, q=p["q"], qd=p["v"], qdd=p["a"], Q=Q, coords=mech.coordinate_names, stats=stats,
        position_residual=np.linalg.norm(C.position_constraints(mech, p["q"]), axis=1),
        velocity_residual=np.linalg.norm(C.velocity_constraints(mech, p["q"], p["v"]), axis=1),
        indices=problem.indices if independent else None,
        z=p["z"] if independent else None, zd=p["zd"] if independent else None,
        zdd=p["zdd"] if independent else None)


__all__ = [
    "positions_by_continuation", "solve_inverse_dynamics", "RESIDUAL_RMS"
]
