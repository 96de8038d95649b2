"""Forward dynamics with the fixed-lag smoother (paper Sect. 5.1-5.2, 7.1)."""
from __future__ import annotations

import time

from mbfg.errors import MbfgError
from mbfg.graphs.forward import ForwardSettings
from mbfg.results import TrajectoryResult
from mbfg.simulation import _initial_state, _restore_indices, failure, make_problem, trajectory_result
from mbfg.solvers.smoother import FixedLagSmoother


def simulate_smoother(mech, t_end: float, dt: float = 1e-3, *, coords: str = "dependent",
                      integrator: str = "trapezoidal", window: int = 2, q0=None, qd0=None,
                      indices=None, settings: ForwardSettings | None = None, progress=None,
                      max_iterations: int = 10,
                      reselect: float | None = 0.9) -> TrajectoryResult:
    """Forward dynamics step by step with a fixed-lag smoother of ``window`` steps.

    The factor graph is that of :func:`mbfg.simulation.simulate_batch` (same
    :class:`~mbfg.graphs.forward.ForwardProblem`); steps leaving the window are marginalized
    into a Gaussian prior on the next one (:class:`mbfg.solvers.smoother.FixedLagSmoother`).
    Each returned step is its estimate when it left the window (the last ``window`` steps:
    the final window).  ``settings`` overrides ``dt`` and ``integrator``.

    progress : callable(done_steps, total_steps), optional
        Called about every 1 % of the steps.
    max_iterations :
        Gauss-Newton solves allowed per step (convergence: ``settings.step_tolerance``, see
        :class:`~mbfg.solvers.smoother.FixedLagSmoother`).  A step that does not converge
        raises :class:`~mbfg.errors.ConvergenceError`, or :class:`~mbfg.errors.LockupError`
        at a branch point, with ``partial`` holding the trajectory up to the last good step.
    reselect : float or None
        Independent coordinates only: switch to better-conditioned independent coordinates
        when the current ones' quality drops below this fraction of the best (None: never).
        The returned ``indices``/``z`` are the initial choice (z = q[indices], which the
        graph enforces to the constraint sigma); ``stats["switches"]`` lists (step, indices).

    stats: solver="smoother", window, iterations (total Gauss-Newton iterations),
    max_iterations_per_step, fallbacks (steps that needed damping), switches, converged,
    seconds, ms_per_step, steps.
    """
    t0 = time.perf_counter()
    q0, qd0 = _initial_state(mech, q0, qd0)
    problem = make_problem(mech, dt, coords, integrator, indices, q0, settings)
    dt = problem.settings.dt
    N = int(round(t_end / dt))
    sm = FixedLagSmoother(problem, window, max_iterations=max_iterations,
                          relative_tolerance=0.0, absolute_tolerance=0.0, reselect=reselect)
    try:
        sm.initialize(q0, qd0)
        X = sm.run(N, progress)
    except MbfgError as exc:
        rows = getattr(exc, "partial", None)
        rows = sm.W[:1] if rows is None else rows[:-1]  # up to the last converged step
        raise failure(mech, problem, rows, dt, exc) from None
    X = _restore_indices(problem, X)  # z in the initial independent coordinates throughout
    seconds = time.perf_counter() - t0
    stats = dict(solver="smoother", window=int(window), iterations=sm.iterations,
                 max_iterations_per_step=sm.max_iterations_per_step, fallbacks=sm.fallbacks,
                 switches=list(sm.switches), converged=True, seconds=seconds, ms_per_step=1e3 * seconds / max(N, 1),
                 steps=N)
    return trajectory_result(mech, problem, X, dt, stats)


__all__ = ["simulate_smoother", "TrajectoryResult"]
