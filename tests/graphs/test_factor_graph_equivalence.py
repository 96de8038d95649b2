"""The stacked terms of the paper's graph (LeastSquaresProblem) and the per-step gtsam factors
are the same graph.

Both are linearized at the same (perturbed) trajectory; because x_k = [q_k; v_k; a_k]
(and z_k, zd_k, zdd_k for independent coordinates), the information matrix
[A b]^T [A b] of the batch system in step-key order must equal that of the per-factor
system in the order q_0 v_0 a_0 q_1 ... .  This checks the integrators, priors, selections,
constraint and dynamics rows and their weights in one go.
"""
import gtsam
import numpy as np
import pytest

from conftest import fd_states
from mbfg import factors as F
from mbfg.factors import keys as K
from mbfg.graphs.forward import LeastSquaresProblem, LeastSquaresSettings
from mbfg.model.kinematics import choose_independent_coordinates
from mbfg.solvers.batch import linearize

N = 3


def per_factor_graph(mech, s: LeastSquaresSettings, coords, idx, q_start, v_start):
    g = gtsam.NonlinearFactorGraph()
    n = mech.n
    integ = (F.trapezoidal_integrator_factor if s.integrator == "trapezoidal"
             else F.euler_integrator_factor)

    def link(x, xd, k, dim):
        if s.integrator == "trapezoidal":
            return integ(x(k), x(k + 1), xd(k), xd(k + 1), s.dt, dim, s.sigma_integrator)
        return integ(x(k), x(k + 1), xd(k), s.dt, dim, s.sigma_integrator)

    if coords == "dependent":
        g.add(F.prior_factor(K.q(0), q_start, s.sigma_prior))
        g.add(F.prior_factor(K.v(0), v_start, s.sigma_prior))
        for k in range(N):
            g.add(F.position_constraint_factor(mech, K.q(k), s.sigma_constraints))
            g.add(F.velocity_constraint_factor(mech, K.q(k), K.v(k), s.sigma_constraints))
            g.add(F.forward_dynamics_factor(mech, K.q(k), K.v(k), K.a(k), s.sigma_dynamics))
            if k + 1 < N:
                g.add(link(K.q, K.v, k, n))
                g.add(link(K.v, K.a, k, n))
    else:
        d = len(idx)
        g.add(F.prior_factor(K.z(0), q_start[list(idx)], s.sigma_prior))
        g.add(F.prior_factor(K.zd(0), v_start[list(idx)], s.sigma_prior))
        g.add(F.prior_factor(K.q(0), q_start, s.sigma_prior_q_approx))
        for k in range(N):
            g.add(F.independent_position_factor(mech, K.q(k), K.z(k), idx, s.sigma_constraints))
            g.add(F.independent_velocity_factor(mech, K.q(k), K.v(k), K.zd(k), idx,
                                                s.sigma_constraints))
            g.add(F.independent_acceleration_factor(mech, K.q(k), K.v(k), K.a(k), K.zdd(k), idx,
                                                    s.sigma_constraints))
            g.add(F.independent_forward_dynamics_factor(mech, K.q(k), K.v(k), K.zdd(k), idx,
                                                        s.sigma_dynamics))
            if k + 1 < N:
                g.add(link(K.z, K.zd, k, d))
                g.add(link(K.zd, K.zdd, k, d))
                g.add(F.equality_factor(K.q(k), K.q(k + 1), n, s.sigma_equality))
    return g


@pytest.mark.parametrize("integrator", ["trapezoidal", "euler"])
@pytest.mark.parametrize("coords", ["dependent", "independent"])
@pytest.mark.parametrize("name", ["fourbar-crank-angle", "slider-crank", "pick-and-place-robot"])
def test_batch_terms_equal_per_step_factors(name, coords, integrator):
    mech, states = fd_states(name)
    q, qd, qdd = states[0]
    idx = choose_independent_coordinates(mech, q) if coords == "independent" else None
    s = LeastSquaresSettings(dt=1e-2, integrator=integrator)
    problem = LeastSquaresProblem(mech, s, coords, idx)
    rng = np.random.default_rng(7)
    qs = q + 1e-3 * rng.normal(size=(N, mech.n))
    vs = qd + 1e-2 * rng.normal(size=(N, mech.n))
    accs = qdd + 1e-1 * rng.normal(size=(N, mech.n))
    X = problem.pack(qs, vs, accs)
    if coords == "independent":  # z off q[idx] too, so the selection rows are exercised
        X[:, problem.layout.slice("z")] += 1e-3 * rng.normal(size=(N, len(idx)))
    keys_x = problem.layout.keys(range(N))
    terms = problem.terms(np.arange(N), qs[0] + 1e-4, vs[0] - 1e-4)
    batch = linearize(terms, X, keys_x)
    H_batch = batch.augmentedHessian(gtsam.Ordering(list(keys_x)))

    slots = problem.layout.names
    values, order = gtsam.Values(), []
    for k in range(N):
        for slot in slots:
            key = K.key(slot, k)
            values.insert(key, X[k, problem.layout.slice(slot)])
            order.append(key)
    graph = per_factor_graph(mech, s, coords, idx, qs[0] + 1e-4, vs[0] - 1e-4)
    H_factors = graph.linearize(values).augmentedHessian(gtsam.Ordering(order))

    scale = np.abs(H_factors).max()
    np.testing.assert_allclose(H_batch, H_factors, rtol=1e-9, atol=1e-12 * scale)
    assert sum(f.error(values) for f in [graph.at(i) for i in range(graph.size())]) \
        == pytest.approx(sum(t.error(X) for t in terms), rel=1e-9)
