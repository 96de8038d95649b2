"""Forward-dynamics drivers: batch (whole horizon) and fixed-lag smoother, in dependent or
independent coordinates (paper Sect. 5.1-5.2, 7.1)."""
from __future__ import annotations

import time

import gtsam
import numpy as np

from mbfg.graphs.forward import ForwardProblem, ForwardSettings
from mbfg.graphs.terms import read_vectors
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
    lin = problem.add_linear_factors(gtsam.GaussianFactorGraph(), steps)
    for f in problem.initial(steps[0], q_start, v_start):
        lin.push_back(f)
    keys = problem.layout.keys(steps)
    x = gtsam.VectorValues()
    for key, xk in zip(keys, X_init):
        x.insert(key, xk)
    x, st = optimize(lin, [problem.term(steps)], x, keys, what=what)
    return read_vectors(x, keys), st


def simulate_batch(mech, t_end: float, dt: float = 1e-3, *, coords: str = "dependent",
                   integrator: str = "trapezoidal", q0=None, qd0=None, indices=None,
                   settings: ForwardSettings | None = None, chunk: int = 50,
                   progress=None) -> TrajectoryResult:
    """Forward dynamics of the whole horizon as one factor graph, solved in batch.

    An initial estimate comes from solving the horizon in segments of ``chunk`` steps (each
    starting from the previous segment's last state, with constant-acceleration extrapolation);
    the whole-horizon graph is then solved from it.  Cost is linear in the number of steps.
    """
    t0 = time.perf_counter()
    q0, qd0 = _initial_state(mech, q0, qd0)
    problem = make_problem(mech, dt, coords, integrator, indices, q0, settings)
    lay = problem.layout
    N = int(round(t_end / dt))
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
                             p["v"] + p["a"] * tau, np.broadcast_to(p["a"], tau.shape[:1] + p["a"].shape))
        Xs, st = _solve_segment(problem, steps, guess, p["q"], p["v"],
                                f"forward dynamics (steps {start}-{stop})")
        X[start + 1: stop + 1] = Xs[1:]
        iterations += st.iterations
        start = stop
        if progress:
            progress(stop, N)
    steps = np.arange(N + 1)
    X, st = _solve_segment(problem, steps, X, q0, qd0, "batch forward dynamics")
    stats = dict(solver="batch", segment_iterations=iterations, iterations=st.iterations,
                 final_error=st.final_error, converged=st.converged,
                 seconds=time.perf_counter() - t0, steps=N)
    return trajectory_result(mech, problem, X, dt, stats)


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
