"""Forward-dynamics drivers: batch (whole horizon) and fixed-lag smoother, in dependent or
independent coordinates (paper Sect. 5.1-5.2, 7.1)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import ConvergenceError, LockupError, MbfgError
from mbfg.graphs import DEFAULT_INTEGRATOR
from mbfg.graphs.forward import ForwardProblem, ForwardSettings
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.model.forces import ForceInput, forces_at
from mbfg.model.nonconservative import with_inputs
from mbfg.model.partition import partition_along
from mbfg.results import Stats, TrajectoryResult
from mbfg.solvers.batch import held_horizon, linearize_exactly, optimize
from mbfg.solvers.smoother import FixedLagSmoother

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism


def make_problem(
    mech: Mechanism,
    dt: float,
    coords: str,
    integrator: str,
    indices: ArrayLike,
    q0: ArrayLike,
    settings: ForwardSettings | None = None,
    forces: ForceInput | None = None,
) -> ForwardProblem:
    settings = settings or ForwardSettings(dt=dt, integrator=integrator)
    if coords == "independent":
        indices = (tuple(indices) if indices is not None
                   else K.choose_independent_coordinates(mech, q0))
        K.check_independent_coordinates(mech, indices, q0)
    return ForwardProblem(mech, settings, coords, indices, forces)


def simulate_batch(
    mech: Mechanism,
    t_end: float,
    dt: float = 1e-3,
    *,
    coords: str = "dependent",
    integrator: str = DEFAULT_INTEGRATOR,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    indices: ArrayLike | None = None,
    settings: ForwardSettings | None = None,
    segment: int | None = 500,
    progress: Callable | None = None,
    forces: ForceInput | None = None,
    inputs: ForceInput | None = None,
) -> TrajectoryResult:
    """Forward dynamics as batch factor graphs, solved by Gauss-Newton.

    The graph (:class:`~mbfg.graphs.forward.ForwardProblem`) is square and causal: the states
    of steps 0..k are fixed by the factors of steps 0..k alone.  So the horizon is solved in
    batch graphs of ``segment`` steps, each starting from the previous one's last state, with
    the same solution as one graph over the whole horizon (to the solver tolerance; a test
    checks it) but working memory that does not grow with the horizon.  ``segment=None``
    solves the whole horizon as one graph.  Each segment starts from an explicit propagation
    projected onto the constraints (:func:`explicit_guess`); a segment whose estimate is too
    far off for Gauss-Newton (the explicit estimate drifts from the implicit solution
    exponentially on fast or chaotic motion) is retried in a quarter of the length
    (``stats["retries"]``); the length grows back after each success, up to half the
    shortest length that failed.  A single step that fails from its explicit estimate is
    retried once from the state it leaves (a chain's whipping tip can carry the explicit
    step out of Newton's reach).  A segment gets ``SEGMENT_ITERATIONS`` Gauss-Newton
    iterations before it counts as failed.

    ``forces``: None, (n,) or callable t -> (n,), applied generalized forces besides gravity
    [N, N m] (:mod:`mbfg.model.forces`).  ``inputs``: the motors' inputs (k,) or t -> (k,)
    (YAML ``motors:``, :func:`mbfg.model.nonconservative.with_inputs`); friction always acts.

    Independent coordinates: a segment also ends where its independent coordinates would
    become ill-conditioned on the initial estimate; the next one starts with the best set
    there.  The returned ``z``, ``zd``, ``zdd`` are those of the initial set (``indices``);
    ``stats["switches"]`` lists (step, indices) of every change.

    Raises
    ------
    ConvergenceError, LockupError
        With ``partial``: the trajectory up to the last converged segment.
    """
    t0 = time.perf_counter()
    forces = with_inputs(mech, forces, inputs)
    q0, qd0 = K.release_state(mech, q0, qd0)
    refuse_branch_point(mech, q0)
    problem = make_problem(mech, dt, coords, integrator, indices, q0, settings, forces)
    first = problem
    dt = problem.settings.dt
    N = int(round(t_end / dt))
    size = N if segment is None else max(1, int(segment))
    X = np.empty((N + 1, problem.layout.dim))
    X[0] = problem.pack(q0, qd0, problem.initial_accelerations(q0, qd0))
    iterations, switches, links, retries = 0, [], None, 0
    start, length, cap, hold, energy = 0, size, size, False, True
    while start < N:
        stop = min(N, start + length)
        p = problem.layout.unpack(X[start])
        try:
            seg, stop, Xs, seg_links, st = _solve_segment(problem, p, start, stop, dt, links,
                                                          hold, energy)
        except (MbfgError, np.linalg.LinAlgError) as exc:
            iterations += getattr(exc, "iterations", 0)
            if stop - start > 1:  # the explicit estimate was too far off: a shorter segment,
                # and no longer ones from now on (the estimate drifts about as fast later)
                cap = max(1, (stop - start) // 2)
                length, retries = max(1, (stop - start) // 4), retries + 1
                continue
            if not hold:  # one step from its explicit estimate failed: once more from the
                hold, retries = True, retries + 1  # state it starts at
                continue
            if energy and problem.has_energy_row:  # and from there: once more without the
                # energy row, whose rescaling alpha can keep Newton from converging
                energy, retries = False, retries + 1
                continue
            if not isinstance(exc, MbfgError):
                exc = ConvergenceError(f"batch forward dynamics at step {start}: {exc}")
            raise failure(mech, first, X[:start + 1], dt, exc) from None
        hold, energy = False, True
        if seg is not problem:
            problem = seg
            switches.append((start, problem.indices))
        links = seg_links
        X[start:stop + 1] = problem.pack(*(Xs[:, problem.layout.slice(s)] for s in "qva"))
        iterations += st.iterations
        # grow from what was solved: a segment that a change of coordinates cut short says
        # the next one will not get far either, so its explicit estimate is kept short too
        length = min(cap, 2 * (stop - start))
        start = stop
        if progress:
            progress(stop, N)
    X = _restore_indices(first, X)
    stats = Stats.of("batch", time.perf_counter() - t0, N, iterations, segment=segment,
                     switches=switches, retries=retries)
    return trajectory_result(mech, first, X, dt, stats)


def _solve_segment(problem, p, start, stop, dt, links, hold=False, energy=True):
    """One batch segment from the state ``p`` (slot dict) of step ``start`` to ``stop``:
    (problem, stop, step array, link plan, solver stats).  In independent coordinates the
    segment may end earlier and use other coordinates (the returned problem).  Raises
    ConvergenceError when the explicit estimate is unusable or Gauss-Newton fails.
    ``hold``: one step started from the state it leaves (q + dt v, v, a) instead of the
    explicit estimate (where a fast motion, e.g. a chain's whipping tip, makes the explicit
    step land outside Newton's reach).  Without ``energy``, no link carries the energy row
    (its defect is then the rule's own: O(dt^3) per step for the trapezoidal rule, O(dt^5)
    for the Hermite rule)."""
    mech = problem.mech
    if hold:
        q = np.stack([p["q"], p["q"] + dt * p["v"]])
        v, a = np.stack([p["v"], p["v"]]), np.stack([p["a"], p["a"]])
        stop = start + 1
    else:
        with np.errstate(all="ignore"):
            q, v, a = explicit_guess(mech, p["q"], p["v"], dt, stop - start,
                                     forces=problem.forces, t0=start * dt)
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v)) and np.all(np.isfinite(a))):
        raise ConvergenceError(f"batch forward dynamics (steps {start}-{stop}): the explicit "
                               f"estimate diverged")
    seg = problem
    if problem.indices is not None:
        part = partition_along(mech, q, problem.scales.coordinates, start=problem.indices)
        seg = problem if tuple(part[0]) == problem.indices else problem.with_indices(part[0])
        change = np.flatnonzero(np.any(part != part[0], axis=1))
        if change.size:  # end the segment where the set would change; the next starts with it
            stop = start + int(change[0])
            q, v, a = q[:stop - start + 1], v[:stop - start + 1], a[:stop - start + 1]
    X0 = seg.pack(q, v, a)
    if "lam" in seg.layout.names:  # the multipliers that balance the guess (Eq. 5)
        X0[:, seg.layout.slice("lam")] = D.multipliers(
            mech, q, v, a, seg.applied_forces(np.arange(start, stop + 1)))
    plan = seg.link_plan(X0[1:], None if links is None else links[-1], start=X0[:-1])
    if not energy:
        plan[:, -1] = 0
    steps = np.arange(start, stop + 1)
    terms = seg.terms(steps, p["q"], p["v"], plan)
    # held parts (the Hermite rule's jerk) start held on a segment, whose solves are where
    # the time goes; a single step, the fallback of a longer segment that failed, is cheap
    # and gets the exact derivatives from the start, except on large mechanisms, whose
    # exact derivatives are not cheap (see optimize's ``hold``; the 400-link chain's batch
    # took 3x longer with them).  A short segment's terms may be cached ones, so both
    # cases are set here.
    hold_jerk = held_horizon(seg.mech.n)
    linearize_exactly(terms, stop - start <= 1 and not hold_jerk)
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging trial step is rejected
        Xs, st = optimize(terms, X0,
                          seg.layout.keys(steps), step_scale=seg.step_scale,
                          step_tolerance=seg.settings.step_tolerance,
                          max_iterations=SEGMENT_ITERATIONS if stop > start + 1 else 50,
                          what=f"batch forward dynamics (steps {start}-{stop})",
                          causal=getattr(seg, "causal", False), hold=hold_jerk)
    return seg, stop, Xs, plan, st


def _restore_indices(problem, X):
    """Step array with z, zd, zdd of the problem's own independent coordinates."""
    if problem.indices is not None:
        lay, idx = problem.layout, list(problem.indices)
        for zs, xs in (("z", "q"), ("zd", "v"), ("zdd", "a")):
            X[:, lay.slice(zs)] = X[:, lay.slice(xs)][:, idx]
    return X


def failure(
    mech: Mechanism, problem: ForwardProblem, X: ArrayLike, dt: float, exc: ConvergenceError
) -> ConvergenceError:
    """The error to raise when a simulation stops after the rows X (k+1, dim): a
    :class:`LockupError` if the last good state is a branch point (the constraint Jacobian
    loses rank, in the mechanism's own scales), else ``exc`` with its ``time`` set to that of
    the failing step; either with ``partial`` set to the trajectory computed so far."""
    X = _restore_indices(problem, np.array(X))
    partial = trajectory_result(mech, problem, X, dt,
                                Stats.of("stopped", 0.0, len(X) - 1, converged=False))
    exc.partial = partial
    if isinstance(exc, ConvergenceError):
        exc.at_time(len(X) * dt)  # the step after the last good one failed
    q = partial.q[-1]
    c = problem.scales.coordinates
    J = C.constraint_jacobian(mech, q) * c
    J = C.take_rows(J, C.independent_rows(mech, q, J / c), 1)
    _, s, Vt = np.linalg.svd(J)
    if s[-1] <= LOCKUP_RATIO * s[0]:
        lost = Vt[len(s) - 1]
        names = [mech.coordinate_names[i] for i in np.flatnonzero(np.abs(lost) >= 0.3 * np.abs(lost).max())]
        t = partial.t[-1]
        err = LockupError(
            f"the mechanism locks at t = {t:.6g} s: its constraints lose rank there (branch "
            f"point; smallest/largest singular value of Phi_q {s[-1] / s[0]:.1e}), so the motion "
            f"of {', '.join(names)} is not determined", time=t, coordinates=names,
            partial=partial)
        return err
    return exc


def refuse_branch_point(mech: Mechanism, q0: ArrayLike) -> None:
    """Raise :class:`~mbfg.errors.LockupError` at t = 0 if the motion starts at a branch point
    (:func:`mbfg.model.kinematics.branch_point`): the equations of motion do not determine
    which branch it takes, and the model built there counts a wrong number of degrees of
    freedom."""
    names = K.branch_point(mech, q0)
    if names:
        raise LockupError(
            f"the motion starts at a branch point: the constraints lose rank at q0 (the "
            f"mechanism has {mech.dof} degrees of freedom there instead of fewer around it), so "
            f"the motion of {', '.join(names)} is not determined; start from a configuration "
            f"off the branch point", time=0.0, coordinates=names)


SEGMENT_ITERATIONS = 12
"""Gauss-Newton iterations a batch segment of more than one step gets before it is solved
again in shorter segments from fresh explicit estimates: a segment from a
good estimate converges in 3-6, one whose estimate drifted too far stalls (the undamped
steps overshoot by orders of magnitude), and a shorter one is cheaper than damping it."""

LOCKUP_RATIO = 1e-6
"""Relative smallest singular value of the scaled constraint Jacobian at which a stopped
simulation is reported as a lock-up (:class:`~mbfg.errors.LockupError`)."""


def explicit_guess(
    mech: Mechanism,
    q0: ArrayLike,
    qd0: ArrayLike,
    dt: float,
    N: int,
    coarse: int = 1,
    forces: ForceInput | None = None,
    t0: float = 0.0,
) -> tuple:
    """A cheap initial estimate for the batch solve: velocity-Verlet propagation with the
    model's accelerations at ``coarse * dt``, cubic Hermite interpolation to the fine grid,
    then vectorized projection onto Phi = 0 and Phi_q v = 0 and accelerations from the model
    (all steps at once).  ``forces`` (:mod:`mbfg.model.forces`) act from the time ``t0`` [s]
    of q0.  Returns q, v, a (N+1, n)."""
    Nc = -(-N // coarse)
    h = coarse * dt
    Q = forces_at(forces, t0 + h * np.arange(Nc + 1), mech.n)
    Qc = (lambda k: None) if Q is None else (lambda k: Q[k])
    qc = np.empty((Nc + 1, mech.n))
    vc = np.empty_like(qc)
    ac = np.empty_like(qc)
    qc[0], vc[0] = q0, qd0
    # one state per call: the fused single-state kernels
    accelerations, project = D.StateDynamics(mech), K.StateProjection(mech)
    q, v = np.array(q0, float), np.array(qd0, float)
    a = accelerations(q, v, Qc(0))
    ac[0], hh = a, 0.5 * h * h
    for k in range(Nc):
        q = q + h * v + hh * a
        a1 = accelerations(q, v + h * a, Qc(k + 1))
        v = v + 0.5 * h * (a + a1)
        a = a1
        if (k + 1) % 10 == 0:  # keep the coarse path near the constraint manifold
            q = project.positions(q, max_iter=3)
            v = project.velocities(q, v)
        qc[k + 1], vc[k + 1], ac[k + 1] = q, v, a
    # cubic Hermite interpolation of q (with v) and linear interpolation of v
    t = np.arange(N + 1) * dt
    i = np.minimum((t / h).astype(int), Nc - 1)
    s = (t - i * h)[:, None] / h
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    q = h00 * qc[i] + h10 * h * vc[i] + h01 * qc[i + 1] + h11 * h * vc[i + 1]
    v = (1 - s) * vc[i] + s * vc[i + 1]
    q = K.solve_positions_batch(mech, q, max_iter=3)[0]
    v = K.project_velocities_batch(mech, q, v)
    q[0], v[0] = q0, qd0
    return q, v, D.forward_dynamics(mech, q, v, forces_at(forces, t0 + t, mech.n))


def trajectory_result(
    mech: Mechanism,
    problem: ForwardProblem,
    X: ArrayLike,
    dt: float,
    stats: Stats,
    forces: ForceInput | None = None,
) -> TrajectoryResult:
    """The :class:`TrajectoryResult` of step vectors X (T, dim) of ``problem``'s layout.
    ``forces`` (T, n): the applied generalized forces (default: the problem's, zeros
    without loads)."""
    p = problem.layout.unpack(X)
    q, v, a = p["q"], p["v"], p["a"]
    if forces is None:
        forces = problem.applied_forces(np.arange(X.shape[0]))
    Q = np.zeros_like(q) if forces is None else np.array(forces, float)
    independent = problem.indices is not None
    return TrajectoryResult(
        t=np.arange(X.shape[0]) * dt, q=q, qd=v, qdd=a, Q=Q,
        coords=mech.coordinate_names, stats=stats,
        position_residual=np.linalg.norm(C.position_constraints(mech, q), axis=1),
        velocity_residual=np.linalg.norm(C.velocity_constraints(mech, q, v), axis=1),
        indices=problem.indices if independent else None,
        z=p["z"] if independent else None, zd=p["zd"] if independent else None,
        zdd=p["zdd"] if independent else None)


def simulate_smoother(
    mech: Mechanism,
    t_end: float,
    dt: float = 1e-3,
    *,
    coords: str = "dependent",
    integrator: str = DEFAULT_INTEGRATOR,
    window: int = 2,
    q0: ArrayLike | None = None,
    qd0: list | None = None,
    indices: ArrayLike | None = None,
    settings: ForwardSettings | None = None,
    progress: Callable | None = None,
    max_iterations: int = 10,
    reselect: float | None = 0.9,
    forces: ForceInput | None = None,
    inputs: ForceInput | None = None,
) -> TrajectoryResult:
    """Forward dynamics step by step with a fixed-lag smoother of ``window`` steps.

    The factor graph is that of :func:`mbfg.drivers.forward_dynamics.simulate_batch` (same
    :class:`~mbfg.graphs.forward.ForwardProblem`); steps leaving the window are marginalized
    into a Gaussian prior on the next one (:class:`mbfg.solvers.smoother.FixedLagSmoother`).
    Each returned step is its estimate when it left the window (the last ``window`` steps:
    the final window).  ``settings`` overrides ``dt`` and ``integrator``.

    forces : None, (n,) or callable t -> (n,)
        Applied generalized forces besides gravity [N, N m] (:mod:`mbfg.model.forces`).
    inputs : None, (k,) or callable t -> (k,)
        Inputs of the mechanism's k motors (YAML ``motors:``); friction always acts.
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
    forces = with_inputs(mech, forces, inputs)
    q0, qd0 = K.release_state(mech, q0, qd0)
    refuse_branch_point(mech, q0)
    problem = make_problem(mech, dt, coords, integrator, indices, q0, settings, forces)
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
    stats = Stats.of("smoother", seconds, N, sm.iterations, window=int(window),
                     max_iterations_per_step=sm.max_iterations_per_step,
                     fallbacks=sm.fallbacks, switches=list(sm.switches))
    return trajectory_result(mech, problem, X, dt, stats)


__all__ = ["simulate_batch", "simulate_smoother", "make_problem", "failure", "explicit_guess",
           "refuse_branch_point",
           "trajectory_result", "LOCKUP_RATIO"]
