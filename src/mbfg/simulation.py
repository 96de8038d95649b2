"""Forward-dynamics drivers: batch (whole horizon) and fixed-lag smoother, in dependent or
independent coordinates (paper Sect. 5.1-5.2, 7.1)."""
from __future__ import annotations

import time

import numpy as np

from mbfg.graphs.forward import ForwardProblem, ForwardSettings
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.results import TrajectoryResult
from mbfg.solvers.batch import optimize


def _initial_state(mech, q0, qd0):
    q0 = np.array(mech.q0 if q0 is None else q0, float)
    qd0 = np.zeros(mech.n) if qd0 is None else K.project_velocity(mech, q0, np.asarray(qd0, float))
    return q0, qd0


def make_problem(mech, dt, coords, integrator, indices, q0, settings=None, forces=None):
    settings = settings or ForwardSettings(dt=dt, integrator=integrator)
    if coords == "independent":
        indices = (tuple(indices) if indices is not None
                   else K.choose_independent_coordinates(mech, q0))
        K.check_independent_coordinates(mech, indices, q0)
    return ForwardProblem(mech, settings, coords, indices, forces)


def _solve_segment(problem, steps, X_init, q_start, v_start, what):
    keys = problem.layout.keys(steps)
    return optimize(problem.terms(steps, q_start, v_start), X_init, keys, what=what)


def simulate_batch(mech, t_end: float, dt: float = 1e-3, *, coords: str = "dependent",
                   integrator: str = "trapezoidal", q0=None, qd0=None, indices=None,
                   settings: ForwardSettings | None = None, init: str = "explicit",
                   chunk: int = 50, progress=None) -> TrajectoryResult:
    """Forward dynamics of the whole horizon as one factor graph, solved in batch.

    The initial estimate comes from an explicit second-order propagation with the model's
    accelerations (``init="explicit"``, cheap, drifts off the constraints but close enough for
    Gauss-Newton), or from solving the horizon in segments of ``chunk`` steps, each starting
    from the previous segment's last state (``init="segments"``, more robust for long or fast
    runs).  The whole-horizon graph is then solved from it.  Cost is linear in the number of
    steps.
    """
    t0 = time.perf_counter()
    q0, qd0 = _initial_state(mech, q0, qd0)
    problem = make_problem(mech, dt, coords, integrator, indices, q0, settings)
    lay = problem.layout
    N = int(round(t_end / dt))
    if init == "explicit":
        guess = explicit_guess(mech, q0, qd0, dt, N)
        if problem.indices is not None:
            _check_indices_along(mech, problem.indices, guess[0], dt)
        X = problem.pack(*guess)
        iterations = 0
    else:
        X, iterations = _segment_guess(problem, q0, qd0, dt, N, chunk, progress)
    steps = np.arange(N + 1)
    X, st = _solve_segment(problem, steps, X, q0, qd0, "batch forward dynamics")
    stats = dict(solver="batch", segment_iterations=iterations, iterations=st.iterations,
                 final_error=st.final_error, converged=st.converged,
                 seconds=time.perf_counter() - t0, steps=N)
    return trajectory_result(mech, problem, X, dt, stats)


def _check_indices_along(mech, indices, q, dt, threshold: float = 1e-2):
    """Fail fast (SolverError) if the independent coordinates become singular somewhere on the
    estimated trajectory q (T, n): the batch graph keeps one set of coordinates for the whole
    horizon, and at such a point it cannot tell the assembly branches apart.  The quality
    measure is the smallest singular value of the rows ``indices`` of an orthonormal basis of
    the null space of Phi_q (1 = ideal, 0 = singular)."""
    from mbfg.errors import SolverError
    Jall = C.constraint_jacobian(mech, q)
    J = C.take_rows(Jall, C.independent_rows(mech, q, Jall), 1)
    _, _, Vt = np.linalg.svd(J, full_matrices=True)
    Nb = np.swapaxes(Vt[:, J.shape[1]:, :], 1, 2)[:, list(indices), :]
    quality = np.linalg.svd(Nb, compute_uv=False)[:, -1]
    k = int(np.argmin(quality))
    if quality[k] < threshold:
        names = [mech.coordinate_names[i] for i in indices]
        raise SolverError(
            f"the independent coordinates {names} become singular near t = {k * dt:.3f} s "
            f"(quality {quality[k]:.1e}); the batch graph keeps one set for the whole run: use "
            f"the smoother (it re-partitions), dependent coordinates, or a relative angle")


def explicit_guess(mech, q0, qd0, dt, N, coarse: int = 1):
    """A cheap initial estimate for the batch solve: velocity-Verlet propagation with the
    model's accelerations at ``coarse * dt``, cubic Hermite interpolation to the fine grid,
    then vectorized projection onto Phi = 0 and Phi_q v = 0 and accelerations from the model
    (all steps at once).  Returns q, v, a (N+1, n)."""
    Nc = -(-N // coarse)
    h = coarse * dt
    qc = np.empty((Nc + 1, mech.n))
    vc = np.empty_like(qc)
    ac = np.empty_like(qc)
    qc[0], vc[0] = q0, qd0
    ac[0] = D.forward_dynamics(mech, q0, qd0)
    for k in range(Nc):
        qc[k + 1] = qc[k] + h * vc[k] + 0.5 * h * h * ac[k]
        ac[k + 1] = D.forward_dynamics(mech, qc[k + 1], vc[k] + h * ac[k])
        vc[k + 1] = vc[k] + 0.5 * h * (ac[k] + ac[k + 1])
        if (k + 1) % 10 == 0:  # keep the coarse path near the constraint manifold
            qc[k + 1] = K.project_positions_batch(mech, qc[k + 1][None])[0]
            vc[k + 1] = K.project_velocities_batch(mech, qc[k + 1][None], vc[k + 1][None])[0]
    # cubic Hermite interpolation of q (with v) and linear interpolation of v
    t = np.arange(N + 1) * dt
    i = np.minimum((t / h).astype(int), Nc - 1)
    s = (t - i * h)[:, None] / h
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    q = h00 * qc[i] + h10 * h * vc[i] + h01 * qc[i + 1] + h11 * h * vc[i + 1]
    v = (1 - s) * vc[i] + s * vc[i + 1]
    q = K.project_positions_batch(mech, q)
    v = K.project_velocities_batch(mech, q, v)
    q[0], v[0] = q0, qd0
    return q, v, D.forward_dynamics(mech, q, v)


def _segment_guess(problem, q0, qd0, dt, N, chunk, progress):
    mech, lay = problem.mech, problem.layout
    X = np.zeros((N + 1, lay.dim))
    X[0] = problem.pack(q0, qd0, D.forward_dynamics(mech, q0, qd0))
    iterations = 0
    start = 0
    while start < N:
        stop = min(N, start + chunk)
        steps = np.arange(start, stop + 1)
        p = lay.unpack(X[start])
        tau = (steps - start)[:, None] * dt
        guess = problem.pack(p["q"] + p["v"] * tau + 0.5 * p["a"] * tau**2,
                             p["v"] + p["a"] * tau,
                             np.broadcast_to(p["a"], tau.shape[:1] + p["a"].shape))
        Xs, st = _solve_segment(problem, steps, guess, p["q"], p["v"],
                                f"forward dynamics (steps {start}-{stop})")
        X[start + 1: stop + 1] = Xs[1:]
        iterations += st.iterations
        start = stop
        if progress:
            progress(stop, N)
    return X, iterations


def trajectory_result(mech, problem, X, dt, stats, forces=None) -> TrajectoryResult:
    p = problem.layout.unpack(X)
    q, v, a = p["q"], p["v"], p["a"]
    res = TrajectoryResult(
        t=np.arange(X.shape[0]) * dt, q=q, qd=v, qdd=a,
        Q=p["Q"] if "Q" in p else (np.zeros_like(q) if forces is None else forces),
        coords=mech.coordinate_names, stats=stats,
        position_residual=np.linalg.norm(C.position_constraints(mech, q), axis=1),
        velocity_residual=np.linalg.norm(C.velocity_constraints(mech, q, v), axis=1))
    if problem.indices is not None:
        res.indices = problem.indices
        res.z, res.zd, res.zdd = p["z"], p["zd"], p["zdd"]
    return res
