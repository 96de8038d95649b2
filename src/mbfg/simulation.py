"""Forward-dynamics drivers: batch (whole horizon) and fixed-lag smoother, in dependent or
independent coordinates (paper Sect. 5.1-5.2, 7.1)."""
from __future__ import annotations

import time

import gtsam
import numpy as np

from mbfg.factors.keys import a_key, q_key, v_key, z_key, zd_key, zdd_key
from mbfg.graphs import forward as F
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


def _variables(coords, indices):
    base = [(q_key, "q"), (v_key, "v"), (a_key, "a")]
    if coords == "independent":
        base += [(z_key, "z"), (zd_key, "zd"), (zdd_key, "zdd")]
    return base


def _problem(mech, steps, settings, coords, indices, forces):
    """Linear factors (list) and terms for ``steps`` (which includes its own linking factors)."""
    lin, terms = [], []
    first = steps[0]
    for k in steps:
        if coords == "dependent":
            lin += F.dependent_step_linear_factors(mech, k, settings) if k > first else []
        else:
            lin += [f for f in F.independent_step_linear_factors(mech, k, indices, settings)
                    ][: (3 if k == first else None)]
    if coords == "dependent":
        terms.append(F.dependent_term(mech, steps, settings, forces))
    else:
        terms += F.independent_terms(mech, steps, indices, settings, forces)
    return lin, terms


def _guess(x: gtsam.VectorValues, mech, k, q, v, a, indices):
    x.insert(q_key(k), q)
    x.insert(v_key(k), v)
    x.insert(a_key(k), a)
    if indices is not None:
        idx = list(indices)
        x.insert(z_key(k), q[idx])
        x.insert(zd_key(k), v[idx])
        x.insert(zdd_key(k), a[idx])


def simulate_batch(mech, t_end: float, dt: float = 1e-3, *, coords: str = "dependent",
                   integrator: str = "trapezoidal", q0=None, qd0=None, indices=None,
                   settings: F.ForwardSettings | None = None, chunk: int = 50,
                   progress=None) -> TrajectoryResult:
    """Forward dynamics of the whole horizon as one factor graph, solved in batch.

    The horizon is first solved chunk by chunk (each chunk starting from the previous chunk's
    last state, constant-acceleration extrapolation as initial guess); the whole-horizon graph
    is then solved from that initial estimate.  Cost is linear in the number of steps.
    """
    settings = settings or F.ForwardSettings(dt=dt, integrator=integrator)
    t0 = time.perf_counter()
    q0, qd0 = _initial_state(mech, q0, qd0)
    if coords == "independent":
        indices = tuple(indices) if indices is not None else K.choose_independent_coordinates(mech, q0)
        K.check_independent_coordinates(mech, indices, q0)
    elif coords != "dependent":
        raise ValueError(f"coords must be 'dependent' or 'independent', got {coords!r}")
    else:
        indices = None
    N = int(round(t_end / dt))
    qdd0 = D.forward_dynamics(mech, q0, qd0)

    def initial_factors(q, v, k=0):
        if coords == "dependent":
            return F.dependent_initial_factors(mech, q, v, settings, k)
        return F.independent_initial_factors(mech, q, v, indices, settings, k)

    x = gtsam.VectorValues()
    _guess(x, mech, 0, q0, qd0, qdd0, indices)
    iterations = 0
    # --- chunked initialization
    start = 0
    q_s, v_s, a_s = q0, qd0, qdd0
    while start < N:
        stop = min(N, start + chunk)
        steps = np.arange(start, stop + 1)
        lin_list, terms = _problem(mech, steps, settings, coords, indices, None)
        lin = gtsam.GaussianFactorGraph()
        for f in lin_list + initial_factors(q_s, v_s, start):
            lin.push_back(f)
        xc = gtsam.VectorValues()
        for j, k in enumerate(steps):
            tau = j * dt
            _guess(xc, mech, k, q_s + v_s * tau + 0.5 * a_s * tau**2, v_s + a_s * tau, a_s, indices)
        keys = _keys_for(steps, coords)
        xc, st = optimize(lin, terms, xc, keys, what=f"forward dynamics (steps {start}-{stop})")
        iterations += st.iterations
        for k in steps[1:]:
            for kf in _key_funcs(coords):
                x.insert(kf(k), xc.at(kf(k)))
        q_s, v_s, a_s = xc.at(q_key(stop)), xc.at(v_key(stop)), xc.at(a_key(stop))
        start = stop
        if progress:
            progress(stop, N)
    # --- whole-horizon batch solve
    steps = np.arange(0, N + 1)
    lin_list, terms = _problem(mech, steps, settings, coords, indices, None)
    lin = gtsam.GaussianFactorGraph()
    for f in lin_list + initial_factors(q0, qd0):
        lin.push_back(f)
    x, st = optimize(lin, terms, x, _keys_for(steps, coords), what="batch forward dynamics")
    stats = dict(solver="batch", iterations_chunks=iterations, iterations=st.iterations,
                 final_error=st.final_error, converged=st.converged,
                 seconds=time.perf_counter() - t0, steps=N)
    return _result(mech, x, steps, dt, coords, indices, stats)


def _key_funcs(coords):
    return [kf for kf, _ in _variables(coords, None)]


def _keys_for(steps, coords):
    return [kf(int(k)) for k in steps for kf in _key_funcs(coords)]


def _result(mech, x, steps, dt, coords, indices, stats) -> TrajectoryResult:
    q = read_vectors(x, [q_key(int(k)) for k in steps])
    v = read_vectors(x, [v_key(int(k)) for k in steps])
    a = read_vectors(x, [a_key(int(k)) for k in steps])
    res = TrajectoryResult(t=steps * dt, q=q, qd=v, qdd=a, Q=np.zeros_like(q),
                           coords=mech.coordinate_names, stats=stats,
                           position_residual=np.linalg.norm(C.position_constraints(mech, q), axis=1),
                           velocity_residual=np.linalg.norm(C.velocity_constraints(mech, q, v), axis=1))
    if coords == "independent":
        res.indices = tuple(indices)
        res.z = read_vectors(x, [z_key(int(k)) for k in steps])
        res.zd = read_vectors(x, [zd_key(int(k)) for k in steps])
        res.zdd = read_vectors(x, [zdd_key(int(k)) for k in steps])
    return res
