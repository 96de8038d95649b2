"""The identification chart (mbfg.model.identification) and the identification graph's exact
Jacobians, checked with the one shared finite-difference helper (mbfg.testing)."""
from __future__ import annotations

import numpy as np
import pytest

import mbfg
from mbfg.errors import UsageError
from mbfg.model.dynamics import forward_dynamics, forward_dynamics_jacobians
from mbfg.model.identification import (dynamics_parameter_jacobian, expand_names,
                                       parameter_set)
from mbfg.model.nonconservative import motor_forces
from mbfg.model.parameters import _check_body, parameter_vector
from mbfg.model.sensors import AngleEncoder, Gyroscope
from mbfg.testing import check_jacobian, random_assembled_state
from conftest import MOTOR_FOURBAR


ALL = ("planar_bodies[0], planar_bodies[1], planar_bodies[2].mass, planar_bodies[2].I0, "
       "friction[0], friction[1].viscous, friction[2].viscous, motors[0].gain, gravity, "
       "sensors[1].bias")


@pytest.fixture(scope="module")
def setup():
    mech = mbfg.mechanism_from_yaml(MOTOR_FOURBAR)
    sensors = (AngleEncoder(coordinate="theta0", sigma=1e-3), Gyroscope(body=1, sigma=1e-2,
                                                                       bias=0.02))
    return mech, sensors, parameter_set(mech, ALL, sensors)


def test_names_expand_and_bad_names_are_refused(setup):
    mech, sensors, ps = setup
    assert ps.size == 4 + 4 + 2 + 2 + 1 + 1 + 1 + 1 + 1
    assert expand_names("planar_bodies[1].cog", 3, 0) == ("planar_bodies[1].cog[0]",
                                                         "planar_bodies[1].cog[1]")
    for bad, what in (("planar_bodies[7].mass", "out of range"), ("mass", "unknown parameter"),
                      ("friction[5]", "out of range"), ("motors[3].gain", "out of range"),
                      ("sensors[0].bias", "no bias"), ("planar_bodies[0].I0[1]", "components")):
        with pytest.raises(UsageError, match=what):
            parameter_set(mech, bad, sensors)
    with pytest.raises(UsageError, match="no parameters"):
        parameter_set(mech, " , ", sensors)


def test_chart_is_zero_at_the_yaml_values(setup):
    mech, sensors, ps = setup
    m0, s0 = ps.apply(np.zeros(ps.size))
    np.testing.assert_allclose(parameter_vector(m0), parameter_vector(mech), rtol=1e-14)
    assert s0[1].bias == 0.02
    # a zero viscous coefficient uses a linear chart from a derived scale
    i = ps.names.index("friction[2].viscous")
    assert ps.nominal[i] == 0.0


def test_every_chart_point_is_physically_consistent(setup):
    mech, sensors, ps = setup
    rng = np.random.default_rng(0)
    for _ in range(50):
        theta = 3.0 * rng.normal(size=ps.size)
        m, _ = ps.apply(theta)
        for b, body in enumerate(m.spec.bodies):
            _check_body(b, body.mass, body.mass * body.cog[0], body.mass * body.cog[1], body.I0)
            assert body.I0 - body.mass * np.dot(body.cog, body.cog) > 0.0


def test_value_jacobian_matches_finite_differences(setup):
    _, _, ps = setup
    theta = 0.2 * np.random.default_rng(1).normal(size=ps.size)
    check_jacobian(ps.values, theta, ps.value_jacobian(theta), name="d values/d theta")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dynamics_parameter_jacobian_matches_finite_differences(setup, seed):
    mech, _, ps = setup
    rng = np.random.default_rng(seed)
    theta = 0.2 * rng.normal(size=ps.size)
    q, qd = random_assembled_state(mech, rng)[:2]
    u = rng.normal(size=(1, 1))

    def qdd(t):
        m, _ = ps.apply(t)
        return forward_dynamics(m, q[None], qd[None], motor_forces(m, u))[0]

    m, _ = ps.apply(theta)
    dyn = forward_dynamics_jacobians(m, q[None], qd[None], motor_forces(m, u))
    J = dynamics_parameter_jacobian(m, ps.derivatives(theta), q[None], qd[None], dyn.qdd,
                                    dyn.d_Q, u)[0]
    check_jacobian(qdd, theta, J, name="d qddot/d theta")


def test_graph_rows_jacobians_match_finite_differences(setup):
    """Every whitened nonlinear row of the identification graph (constraints, dynamics,
    observations) against central differences in the step vector and in theta."""
    from mbfg.graphs.identification import (IdentificationProblem, IdentificationSettings,
                                            Recording)
    mech, sensors, ps = setup
    rng = np.random.default_rng(3)
    T = 3
    states = [random_assembled_state(mech, rng) for _ in range(T)]
    q = np.stack([s[0] for s in states])
    qd = np.stack([s[1] for s in states])
    qdd = rng.normal(size=q.shape)
    readings = [(np.arange(T), s.measure(mech, q, qd, qdd) + 0.01) for s in sensors]
    u = rng.normal(size=(T, 1))
    rec = Recording(tuple(readings), T, 0.01, u)
    motion = {"v": 1.0, "a": 1.0, "j": 1.0, "s": 1.0}
    pb = IdentificationProblem(ps, [rec], IdentificationSettings(), [(q[0], qd[0])], motion)
    lay = pb.layout
    X = np.concatenate([q, qd, qdd], axis=1)
    theta = 0.1 * rng.normal(size=ps.size)
    e, Ax, At, _ = pb.residuals(0, X, theta)
    for k in range(T):
        def f_x(x, k=k):
            Y = X.copy()
            Y[k] = x
            return pb.residuals(0, Y, theta, jacobians=False)[0][k]
        check_jacobian(f_x, X[k], Ax[k], name=f"rows of step {k} / x_k")
    check_jacobian(lambda t: pb.residuals(0, X, t, jacobians=False)[0], theta, At,
                   name="rows / theta")
    assert lay.dim == 3 * mech.n


def test_theta_of_inverts_apply(setup):
    mech, sensors, ps = setup
    theta = 0.3 * np.random.default_rng(5).normal(size=ps.size)
    m, s = ps.apply(theta)
    np.testing.assert_allclose(ps.theta_of(m, s), theta, rtol=1e-10, atol=1e-12)


def test_linear_coordinates_jacobian(setup):
    _, _, ps = setup
    theta = 0.2 * np.random.default_rng(6).normal(size=ps.size)
    check_jacobian(ps.linear_values, theta, ps.linear_jacobian(theta), name="d phi/d theta")
    assert np.linalg.matrix_rank(ps.linear_jacobian(theta)) == ps.size


def test_parameter_information_is_the_marginal_of_theta(setup):
    """The last conditional of the sequential elimination gives theta's marginal information:
    the Schur complement of the whole linear system's information onto theta."""
    import gtsam

    from mbfg.graphs.identification import (IdentificationProblem, IdentificationSettings,
                                            Recording)
    from mbfg.solvers.identification import parameter_information
    mech, sensors, ps = setup
    rng = np.random.default_rng(4)
    T = 4
    states = [random_assembled_state(mech, rng) for _ in range(T)]
    q, qd = np.stack([s[0] for s in states]), np.stack([s[1] for s in states])
    qdd = rng.normal(size=q.shape)
    readings = [(np.arange(T), s.measure(mech, q, qd, qdd)) for s in sensors]
    rec = Recording(tuple(readings), T, 0.01, rng.normal(size=(T, 1)))
    motion = {"v": 1.0, "a": 1.0, "j": 1.0, "s": 1.0}
    pb = IdentificationProblem(ps, [rec], IdentificationSettings(), [(q[0], qd[0])], motion)
    X = np.concatenate([q, qd, qdd], axis=1)
    lin, _ = pb.linearize([X], np.zeros(ps.size))
    order = gtsam.Ordering(pb.ordering())
    info = parameter_information(lin.eliminateSequential(order, gtsam.EliminateQR), ps.size)
    H, _ = lin.hessian(order)
    p = ps.size
    A, B, C = H[:-p, :-p], H[:-p, -p:], H[-p:, -p:]
    schur = C - B.T @ np.linalg.solve(A, B)
    np.testing.assert_allclose(info, schur, rtol=1e-6, atol=1e-6 * np.abs(schur).max())
    # the multifrontal (Cholesky) elimination the solver uses by default: the root clique's
    # marginal information of theta is the same
    tree = lin.eliminateMultifrontal(order)
    info_tree = parameter_information(tree, ps.size, pb.theta_key)
    np.testing.assert_allclose(info_tree, schur, rtol=1e-6, atol=1e-6 * np.abs(schur).max())
    # the solver's default (gtsam eliminates the steps, numpy theta's Schur complement) and
    # its QR fallback: the same information, the same Gauss-Newton step
    from mbfg.solvers.identification import _eliminate
    d_c, info_c = _eliminate(lin, pb, "cholesky")
    d_q, info_q = _eliminate(lin, pb, "qr")
    for info_m in (info_c, info_q):
        np.testing.assert_allclose(info_m, schur, rtol=1e-6, atol=1e-6 * np.abs(schur).max())
    # (the normal equations square the conditioning: agreement to 1e-5 of the step)
    np.testing.assert_allclose(d_c.at(pb.theta_key), d_q.at(pb.theta_key), rtol=1e-5,
                               atol=1e-7 * np.abs(d_q.at(pb.theta_key)).max())
    for k in pb.keys[0]:
        np.testing.assert_allclose(d_c.at(k), d_q.at(k), rtol=1e-5,
                                   atol=1e-7 * np.abs(d_q.at(k)).max())


def test_initial_states_follow_the_encoder_on_the_yaml_branch(setup):
    """From encoder readings alone (starting far from the YAML's crank angle): the position
    solve by continuation stays on the YAML's assembly branch; rates by differences."""
    from mbfg.model.identification import initial_states
    from mbfg.model.kinematics import solve_positions_batch
    mech, _, _ = setup
    dt, N = 0.01, 400
    t = np.arange(N) * dt
    theta = 2.5 + 1.5 * np.sin(1.1 * t)            # starts 1.45 rad away from q0's pi/3
    enc = AngleEncoder(coordinate="theta0", sigma=1e-3)
    grid = [(np.arctan2(np.sin(theta), np.cos(theta))[:, None], np.ones(N, bool))]
    q, qd, qdd = initial_states(mech, [enc], grid, dt, cutoff=0.5)
    np.testing.assert_allclose(q[:, 4], theta, atol=1e-3)
    # the truth: the same branch, solved by small steps from q0
    ref = np.empty_like(q)
    g = np.array(mech.q0, float)
    for k in range(N):
        path = np.linspace(g[4], theta[k], 20 if k == 0 else 2)[1:]
        for th in path:
            g[4] = th
            g = solve_positions_batch(mech, g[None], [4], [[th]])[0][0]
        ref[k] = g
    np.testing.assert_allclose(q, ref, atol=1e-3)
    np.testing.assert_allclose(qd[50:-50, 4], 1.65 * np.cos(1.1 * t[50:-50]), atol=1e-2)
