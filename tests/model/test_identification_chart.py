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
    # with the friction elements' rates already at hand (as the graph passes them)
    from mbfg.model.identification import friction_terms
    fr = friction_terms(m, q[None], qd[None], jacobians=False)
    J2 = dynamics_parameter_jacobian(m, ps.derivatives(theta), q[None], qd[None], dyn.qdd,
                                     dyn.d_Q, u, friction=fr.rates)[0]
    np.testing.assert_allclose(J2, J, rtol=1e-13, atol=1e-13 * np.abs(J).max())


FRICTION_CASES = {
    # joints to the ground and between bodies, a slider (its G by the complex step)
    "quick-return": """
friction:
  - {type: joint, bodies: [ground, 0], viscous: 0.02, coulomb: 0.01, width: 0.5}
  - {type: joint, bodies: [ground, 1], viscous: 0.05}
  - {type: slider, constraint: 0, viscous: 3.0, coulomb: 0.4, width: 0.2}
""",
    "slider-crank": """
friction:
  - {type: joint, bodies: [0, 1], viscous: 0.01, coulomb: 0.02, width: 0.5}
  - {type: slider, constraint: 0, viscous: 2.0, coulomb: 0.5, width: 0.1}
""",
}


def _friction_mechanism(name):
    from mbfg.resources import mechanism_path
    if name == "motor-fourbar":
        return mbfg.mechanism_from_yaml(MOTOR_FOURBAR)
    text = mechanism_path(name).read_text(encoding="utf-8") + FRICTION_CASES[name]
    return mbfg.mechanism_from_yaml(text, f"{name}+friction")


@pytest.mark.parametrize("name", ["motor-fourbar", *sorted(FRICTION_CASES)])
def test_friction_terms_match_finite_differences(name):
    """The closed-form friction derivatives (joints) and the complex-step ones (sliders) of
    friction_terms: central differences of the friction forces, and the same values as
    mbfg.model.nonconservative's complex-step kernel."""
    from mbfg.model.identification import friction_terms
    from mbfg.model.nonconservative import (friction_force_jacobians, friction_forces,
                                            sliding_rates)
    mech = _friction_mechanism(name)
    rng = np.random.default_rng(7)
    states = [random_assembled_state(mech, rng) for _ in range(4)]
    q = np.stack([st[0] for st in states])
    qd = np.stack([st[1] for st in states])
    fr = friction_terms(mech, q, qd)
    Q, dq, dqd = friction_force_jacobians(mech, q, qd)
    np.testing.assert_allclose(fr.Q, Q, rtol=1e-13, atol=1e-13 * np.abs(Q).max())
    np.testing.assert_allclose(fr.d_q, dq, rtol=1e-12, atol=1e-12 * np.abs(dq).max())
    np.testing.assert_allclose(fr.d_qd, dqd, rtol=1e-12, atol=1e-12 * np.abs(dqd).max())
    np.testing.assert_allclose(np.stack([s for _, s in fr.rates], axis=1),
                               sliding_rates(mech, q, qd), rtol=1e-13, atol=1e-13)
    for k in range(q.shape[0]):
        check_jacobian(lambda x: friction_forces(mech, x, qd[k]), q[k], fr.d_q[k],
                       name=f"dQ_f/dq, state {k}")
        check_jacobian(lambda x: friction_forces(mech, q[k], x), qd[k], fr.d_qd[k],
                       name=f"dQ_f/dqdot, state {k}")
    assert np.array_equal(friction_terms(mech, q, qd, jacobians=False).Q, fr.Q)


@pytest.mark.parametrize("name", ["motor-fourbar", "quick-return"])
def test_dynamics_rows_match_finite_differences(name):
    """dynamics_rows (one KKT inverse, friction from friction_terms): central differences of
    the forward dynamics in q, qdot and Q, and the values of forward_dynamics_jacobians."""
    from mbfg.model.identification import dynamics_rows
    mech = _friction_mechanism(name)
    rng = np.random.default_rng(8)
    states = [random_assembled_state(mech, rng) for _ in range(3)]
    q = np.stack([st[0] for st in states])
    qd = np.stack([st[1] for st in states])
    Q = rng.normal(size=q.shape)
    rows = dynamics_rows(mech, q, qd, Q)
    ref = forward_dynamics_jacobians(mech, q, qd, Q)
    for f in ("qdd", "d_q", "d_qd", "d_Q"):
        a, b = getattr(rows, f), getattr(ref, f)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * np.abs(b).max(), err_msg=f)
    for k in range(q.shape[0]):
        check_jacobian(lambda x: forward_dynamics(mech, x, qd[k], Q[k]), q[k], rows.d_q[k],
                       name=f"d qddot/dq, state {k}")
        check_jacobian(lambda x: forward_dynamics(mech, q[k], x, Q[k]), qd[k], rows.d_qd[k],
                       name=f"d qddot/dqdot, state {k}")
        check_jacobian(lambda x: forward_dynamics(mech, q[k], qd[k], x), Q[k], rows.d_Q[k],
                       name=f"d qddot/dQ, state {k}")


RULES = ["trapezoidal", "hermite", "hermite-one-jerk"]
"""Integrator rules of the graph tests; ``"hermite-one-jerk"``: the Hermite rule with the jerk
of one coordinate only (and the acceleration constraint rows that then come with it)."""


def _problem(ps, recs, settings, starts, motion, rule, **kw):
    """IdentificationProblem of ``rule`` (one of RULES)."""
    import dataclasses

    from mbfg.graphs.identification import IdentificationProblem
    settings = dataclasses.replace(settings, rule=rule.split("-")[0])
    jerk = (ps.mech.n - 1,) if rule == "hermite-one-jerk" else None
    return IdentificationProblem(ps, recs, settings, starts, motion, jerk_coordinates=jerk,
                                 **kw)


def _steps(pb, q, qd, qdd, rng):
    """Step arrays (T, dim) of ``pb``'s layout: q, v, a given, other slots (the jerk of the
    Hermite rule) random."""
    given = {"q": q, "v": qd, "a": qdd}
    return np.concatenate([given[n] if n in given else
                           rng.normal(size=(q.shape[0], pb.layout.size(n)))
                           for n in pb.layout.names], axis=1)


@pytest.mark.parametrize("rule", RULES)
def test_graph_rows_jacobians_match_finite_differences(setup, rule):
    """Every whitened nonlinear row of the identification graph (constraints, dynamics,
    observations) against central differences in the step vector and in theta."""
    from mbfg.graphs.identification import IdentificationSettings, Recording
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
    pb = _problem(ps, [rec], IdentificationSettings(), [(q[0], qd[0])], motion, rule)
    lay = pb.layout
    X = _steps(pb, q, qd, qdd, rng)
    theta = 0.1 * rng.normal(size=ps.size)
    e, Ax, At, _ = pb.residuals(0, X, theta)
    for k in range(T):
        def f_x(x, k=k):
            Y = X.copy()
            Y[k] = x
            return pb.residuals(0, Y, theta, jacobians=False)[0][k]
        check_jacobian(f_x, X[k], Ax[k], name=f"rows of step {k} / x_k")
    # A_t holds theta's blocks of the trailing (dynamics and observation) rows; the
    # constraint rows before them do not depend on theta
    rt = At.shape[1]
    check_jacobian(lambda t: pb.residuals(0, X, t, jacobians=False)[0], theta,
                   np.concatenate([np.zeros((T, e.shape[1] - rt, ps.size)), At], axis=1),
                   name="rows / theta")
    assert lay.dim == 3 * mech.n + len(pb.jerk_coordinates)


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


@pytest.mark.parametrize("rule", RULES)
def test_parameter_information_is_the_marginal_of_theta(setup, rule):
    """The last conditional of the sequential elimination gives theta's marginal information:
    the Schur complement of the whole linear system's information onto theta."""
    import gtsam

    from mbfg.graphs.identification import IdentificationSettings, Recording
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
    # moderate sigmas (random states make a system far from any motion: the test is of the
    # algebra, not of rounding; the Hermite rows at 1e4 times their default slack: at the
    # default the system's condition number is about 3e11, and gtsam's multifrontal Cholesky
    # squares it)
    settings = IdentificationSettings(dynamics=1e-3, constraints=1e-5,
                                      integrator=1e3 if rule.startswith("hermite") else None)
    pb = _problem(ps, [rec], settings, [(q[0], qd[0])], motion, rule)
    X = _steps(pb, q, qd, qdd, rng)
    lin, _ = pb.linearize([X], np.zeros(ps.size))
    order = gtsam.Ordering(pb.ordering())
    info = parameter_information(lin.eliminateSequential(order, gtsam.EliminateQR), ps.size)
    # the Schur complement C - B^T A^-1 B of the information [[A, B], [B^T, C]] onto theta
    # (last), by numpy's QR of the whole whitened Jacobian: R_tt^T R_tt (the normal
    # equations' A is too ill-conditioned for the tight integrator rows)
    J, _ = lin.jacobian(order)
    p = ps.size
    R = np.linalg.qr(J, mode="r")
    schur = R[-p:, -p:].T @ R[-p:, -p:]
    np.testing.assert_allclose(info, schur, rtol=1e-6, atol=1e-6 * np.abs(schur).max())
    # the multifrontal (Cholesky) elimination the solver uses by default: the root clique's
    # marginal information of theta is the same
    tree = lin.eliminateMultifrontal(order)
    info_tree = parameter_information(tree, ps.size, pb.theta_key)
    np.testing.assert_allclose(info_tree, schur, rtol=1e-6, atol=1e-6 * np.abs(schur).max())
    # the solver's default (banded Cholesky of the steps, numpy theta's Schur complement) and
    # its QR fallback (gtsam): the same information, the same Gauss-Newton step
    from mbfg.solvers.identification import _solve_qr, solve_joint
    system, _ = pb.linear_system([X], np.zeros(ps.size))
    d_c, t_c, info_c = solve_joint(system)
    d_q, t_q, info_q = _solve_qr(system, 0.0, pb)
    for info_m in (info_c, info_q):
        np.testing.assert_allclose(info_m, schur, rtol=1e-6, atol=1e-6 * np.abs(schur).max())
    # (the normal equations square the conditioning, 5e8 here: agreement to 1e-4 of the
    # step, normwise; elementwise, the small jerks of the random accelerations differ by up
    # to 1.3e-4 of their own size on one CPU's BLAS kernels and 3e-5 on another's)
    for c_, q_ in ((t_c, t_q), (d_c[0], d_q[0])):
        assert np.max(np.abs(c_ - q_)) <= 1e-4 * np.max(np.abs(q_))


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


def test_initial_states_of_several_recordings_are_each_ones_own(setup):
    """initial_states_many (the recordings' continuations in common solves) gives every
    recording exactly what initial_states gives it alone; a recording whose readings do not
    fix the configuration gets None."""
    from mbfg.model.identification import initial_states, initial_states_many
    mech, _, _ = setup
    enc = AngleEncoder(coordinate="theta0", sigma=1e-3)
    grids, dts = [], []
    for N, dt, w in ((400, 0.01, 1.1), (250, 0.02, 2.3), (90, 0.01, 0.4)):
        theta = 2.5 + 1.5 * np.sin(w * np.arange(N) * dt)
        grids.append([(np.arctan2(np.sin(theta), np.cos(theta))[:, None], np.ones(N, bool))])
        dts.append(dt)
    grids.append([(np.zeros((50, 1)), np.zeros(50, bool))])   # no reading at all
    dts.append(0.01)
    many = initial_states_many(mech, [enc], grids, dts, cutoff=0.5)
    assert many[-1] is None
    for grid, dt, got in zip(grids[:-1], dts, many):
        for a, b in zip(got, initial_states(mech, [enc], grid, dt, cutoff=0.5)):
            np.testing.assert_array_equal(a, b)


def test_initial_states_from_markers_on_every_moving_point():
    """Markers on every moving point measure more coordinates than the mechanism has degrees
    of freedom: the continuation holds the best-conditioned dof of them, so every state is
    on the constraint manifold (holding all of them over-determined the position problem and
    left the states off it) and follows the truth of generated mechanisms of 1 and 2 dof."""
    from mbfg.model import constraints as C
    from mbfg.model.identification import initial_states
    from mbfg.model.integrate import integrate_reference
    from mbfg.model.scales import mechanism_scales
    from mbfg.model.sensors import Marker, SensorSet, readings_on_grid
    from mbfg.testing import random_mechanism
    for family, seed, L in (("crank-rocker", 3, 0.01), ("five-bar", 5, 4.0)):
        mech = random_mechanism(family, seed, length=L, mass=1.0).load()
        sc = mechanism_scales(mech)
        w = np.sqrt(9.81 / sc.length)
        dt = 0.02 / w
        tr = integrate_reference(mech, 200 * dt, dt, rtol=1e-10, atol=1e-12 * sc.length)
        points = sorted({p for b in mech.spec.bodies for p in b.points
                         if not mech.spec.points[p].fixed})
        sensors = SensorSet([Marker(point=p, sigma=1e-4 * sc.length) for p in points])
        assert 2 * len(points) > mech.dof
        readings = sensors.synthesize(mech, tr.t, tr.q, tr.qd, tr.qdd,
                                      rng=np.random.default_rng(seed))
        grid = readings_on_grid(tuple(sensors), readings, tr.t.size)
        q, qd, _ = initial_states(mech, tuple(sensors), grid, dt, cutoff=0.5)
        phi = C.position_constraints(mech, q) / sc.constraints
        assert np.max(np.abs(phi)) < 1e-9, (family, np.max(np.abs(phi)))
        assert np.max(np.abs(q - tr.q) / sc.coordinates) < 2e-3, family
        assert np.max(np.abs(qd - tr.qd)[5:-5] / (w * sc.coordinates)) < 0.1, family


def test_fit_positions_is_the_constrained_least_squares_match():
    """fit_positions_batch against scipy's SLSQP on the same problem (min sum ((q_i - z_i) /
    s_i)^2 over the measured coordinates subject to Phi(q) = 0), on a generated five-bar
    with noisy markers on every moving point."""
    from scipy.optimize import minimize

    from mbfg.model import constraints as C
    from mbfg.model.kinematics import fit_positions_batch
    from mbfg.model.scales import mechanism_scales
    from mbfg.testing import random_mechanism
    mech = random_mechanism("five-bar", 5, length=0.03, mass=1.0).load()
    s = mechanism_scales(mech).coordinates
    rng = np.random.default_rng(7)
    states = np.stack([random_assembled_state(mech, rng, spread=0.05)[0] for _ in range(3)])
    idx = [i for i in range(mech.n) if i not in tuple(mech.angle_coords)]
    z = states[:, idx] + 0.01 * s[idx] * rng.normal(size=(3, len(idx)))
    q, ok = fit_positions_batch(mech, states, idx, z)
    assert ok.all()
    for k in range(3):
        ref = minimize(lambda x: np.sum(((x[idx] - z[k]) / s[idx]) ** 2), states[k],
                       method="SLSQP", constraints={"type": "eq",
                                                    "fun": lambda x: C.position_constraints(mech, x)},
                       options={"ftol": 1e-14, "maxiter": 500})
        assert ref.success
        np.testing.assert_allclose(q[k], ref.x, atol=1e-6 * s.max())


def test_scaled_velocity_projection_does_not_depend_on_units():
    """project_velocities_batch with the coordinate scales (its default): the same
    mechanism in mm and in m (a relative angle among its coordinates) gives the same
    projected rates in units of the scales; the plain minimum-norm projection (unit scales)
    mixes m/s with rad/s and does not (it made the identification's initial rates, and so
    its iterations, depend on the units)."""
    from mbfg.model.kinematics import project_velocities_batch
    from mbfg.model.scales import coordinate_scales, mechanism_scales
    from mbfg.testing import random_mechanism
    out = {}
    for L in (0.01, 5.0):
        mech = random_mechanism("crank-rocker", 3, length=L, mass=1.0).load()
        assert mech.angle_coords.size
        s = coordinate_scales(mech)
        rng = np.random.default_rng(3)
        q = np.stack([random_assembled_state(mech, rng, spread=0.2)[0] for _ in range(4)])
        v = rng.normal(size=q.shape) * s                      # off the tangent space
        scaled = project_velocities_batch(mech, q, v, s)
        from mbfg.model.constraints import constraint_jacobian
        assert np.max(np.abs(np.einsum("kmn,kn->km", constraint_jacobian(mech, q), scaled))
                      / mechanism_scales(mech).constraints) < 1e-9
        out[L] = (scaled / s, project_velocities_batch(mech, q, v, np.ones(mech.n)) / s)
    np.testing.assert_allclose(out[0.01][0], out[5.0][0], atol=1e-9)
    assert np.max(np.abs(out[0.01][1] - out[5.0][1])) > 1e-3


def test_a_point_mass_body_keeps_its_zero_central_inertia(setup):
    """A body whose YAML central inertia is zero (I0 = m |c|^2) with only its mass identified:
    apply works (the underflow check looks at the chart's exponentials only)."""
    import dataclasses

    from mbfg.model import build_mechanism
    mech = setup[0]
    b = mech.spec.bodies[1]
    bodies = list(mech.spec.bodies)
    bodies[1] = dataclasses.replace(b, I0=b.mass * float(np.dot(b.cog, b.cog)))
    point = build_mechanism(dataclasses.replace(mech.spec, bodies=tuple(bodies)))
    ps = parameter_set(point, ["planar_bodies[1].mass"], ())
    for value in (0.0, 0.3):
        new, _ = ps.apply(np.array([value]))
        assert np.isclose(new.spec.bodies[1].mass, b.mass * np.exp(value))


def test_an_overflowing_chart_point_is_a_floating_point_error(setup):
    """A trial point far outside any physical range (exp overflows or underflows) raises
    FloatingPointError,
    which the optimizer treats as a rejected step (it used to raise UsageError from the
    mass check and end the identification of a generated crank-rocker)."""
    _, _, ps = setup
    theta = np.zeros(ps.size)
    for value in (800.0, -800.0):   # exp overflows; exp underflows to a zero mass
        theta[0] = value
        with pytest.raises(FloatingPointError):
            ps.apply(theta)


def _two_recordings(ps, mech, sensors, rng, T=5):
    from mbfg.graphs.identification import Recording
    recs, firsts = [], []
    for _ in range(2):
        states = [random_assembled_state(mech, rng) for _ in range(T)]
        q, qd = np.stack([s[0] for s in states]), np.stack([s[1] for s in states])
        qdd = rng.normal(size=q.shape)
        readings = [(np.arange(T), s.measure(mech, q, qd, qdd) + 0.01) for s in sensors]
        recs.append(Recording(tuple(readings), T, 0.01, rng.normal(size=(T, 1))))
        firsts.append((q, qd, qdd))
    return recs, firsts


def _loose_problem(setup, rule, seed, free=True, scaled=False):
    """(problem, step arrays, rng): two random recordings of 5 steps under loose rows (a
    well-conditioned system: the tests are of the algebra, not of rounding).  ``scaled``: the
    integrator rows of the first recording are corrected by offsets (``pair_offsets``), two
    pairs' above their sigmas (which then grow to them), the second recording's none."""
    from mbfg.graphs.identification import IdentificationSettings
    mech, sensors, ps = setup
    rng = np.random.default_rng(seed)
    recs, states = _two_recordings(ps, mech, sensors, rng)
    motion = {"v": 1.0, "a": 1.0, "j": 1.0, "s": 1.0}
    settings = IdentificationSettings(constraints=1e-2, dynamics=1.0, integrator=1e5)
    if scaled:
        probe = _problem(ps, recs, settings, [(q[0], qd[0]) for q, qd, _ in states], motion,
                         rule)
        X0 = _steps(probe, *states[0], np.random.default_rng(0))
        # offsets within the rows' sigmas everywhere (weight 1), above them on two pairs
        offsets = 0.1 * rng.normal(size=probe._link_blocks(0, X0)[1][2].shape)
        offsets[1] = (1.0 + 9.0 * rng.random(offsets.shape[1])) * rng.choice([-1, 1],
                                                                             offsets.shape[1])
        offsets[3, ::2] = 30.0
    pb = _problem(ps, recs, settings, [(q[0], qd[0]) for q, qd, _ in states], motion, rule,
                  free=free)
    if scaled:  # (as where a Coulomb term switches)
        pb.pair_offsets = [offsets, None]
    return pb, [_steps(pb, *s, rng) for s in states], rng


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("free", [True, False])
@pytest.mark.parametrize("chunk", [512, 2])
@pytest.mark.parametrize("scaled", [False, True])
def test_banded_elimination_matches_gtsam_qr(setup, free, rule, chunk, scaled, monkeypatch):
    """The solver's banded Cholesky of two recordings' steps (theta's Schur complement by
    numpy) against gtsam's sequential QR of the same system as a factor graph: the same
    undamped and damped steps and theta's information; the system's error of a step is the
    graph's.  ``chunk``: the steps whose band columns are built together (2: the chunks'
    edges fall between the first, inner and last steps).  ``scaled``: some pairs' integrator
    rows with sigmas of their own (the solver corrects the shared blocks there)."""
    import gtsam

    import mbfg.solvers.identification as solver
    monkeypatch.setattr(solver, "CHUNK", chunk)

    from mbfg.solvers.identification import _solve_qr, solve_joint
    ps = setup[2]
    pb, Xs, rng = _loose_problem(setup, rule, 11, free=free, scaled=scaled)
    theta = 0.1 * rng.normal(size=ps.size)
    system, err = pb.linear_system(Xs, theta)
    assert err == pytest.approx(pb.error(Xs, theta), rel=1e-12)
    for lam in (0.0, 1e-2):
        dxs, dt, info = solve_joint(system, lam)
        dxs_q, dt_q, info_q = _solve_qr(system, lam, pb)
        for a, b in zip(dxs, dxs_q):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10 * np.abs(b).max())
        if free:
            np.testing.assert_allclose(dt, dt_q, rtol=1e-8, atol=1e-10 * np.abs(dt_q).max())
            np.testing.assert_allclose(info, info_q, rtol=1e-8, atol=1e-10 * np.abs(info_q).max())
        else:
            assert dt is None and info is None
        graph = system.graph()
        delta = gtsam.VectorValues()
        for ks, dx in zip(pb.keys, dxs):
            for k, row in zip(ks, dx):
                delta.insert(k, row)
        if free:
            delta.insert(pb.theta_key, dt)
        assert system.error(dxs, dt) == pytest.approx(graph.error(delta), rel=1e-12)
        assert system.error([0 * dx for dx in dxs], 0 * dt if free else None) == \
            pytest.approx(err, rel=1e-12)


def _dense_jacobian(system, reading_rows):
    """The whitened Jacobian of ``system`` as one dense matrix (every chain's steps, then
    theta) and a mask of its random rows: each step's last ``reading_rows`` rows, the initial
    priors and theta's prior (written here from the blocks, independently of the solver)."""
    p = system.p
    sizes = [c.A_x.shape[0] * c.A_x.shape[2] for c in system.chains]
    cols = sum(sizes) + p
    rows, random = [], []

    def add(blocks, is_random):
        row = np.zeros((next(iter(blocks.values())).shape[0], cols))
        for c0, blk in blocks.items():
            row[:, c0:c0 + blk.shape[1]] += blk
        rows.append(row)
        random.append(np.broadcast_to(is_random, row.shape[:1]))
    off = 0
    for c, size in zip(system.chains, sizes):
        N, r, d = c.A_x.shape
        rt = c.A_t.shape[1]
        for k in range(N):
            At = np.zeros((r, p))
            At[r - rt:] = c.A_t[k]
            add({off + k * d: c.A_x[k], sum(sizes): At}, np.arange(r) >= r - reading_rows)
            if k + 1 < N and c.B0.size:
                add({off + k * d: c.B0, off + (k + 1) * d: c.B1}, False)
        for k, A, _ in c.fixed:
            add({off + k * d: A}, True)
        off += size
    add({sum(sizes): system.W}, True)
    return np.vstack(rows), np.concatenate(random)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("chunk", [512, 2])
def test_sampling_covariance_is_the_readings_noise_through_the_estimate(setup, rule, chunk,
                                                                        monkeypatch):
    """theta's sampling covariance (banded factors, solved back chunk by chunk) against the
    dense H^-1 A_r^T A_r H^-1 of the whole whitened Jacobian (H = A^T A, A_r its reading rows
    and priors); it is at most the posterior S^-1, and the factors of the last undamped solve
    are reused."""
    import mbfg.solvers.identification as solver
    monkeypatch.setattr(solver, "CHUNK", chunk)

    _, sensors, ps = setup
    pb, Xs, rng = _loose_problem(setup, rule, 13)
    system, _ = pb.linear_system(Xs, 0.1 * rng.normal(size=ps.size))
    A, random = _dense_jacobian(system, pb.reading_rows)
    assert pb.reading_rows == sum(s.dim for s in sensors)
    H_inv = np.linalg.inv(A.T @ A)
    G = H_inv[:, -ps.size:]
    expected = G.T @ A[random].T @ A[random] @ G
    cov = solver.sampling_covariance(system, pb.reading_rows)
    np.testing.assert_allclose(cov, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())
    posterior = H_inv[-ps.size:, -ps.size:]
    assert np.linalg.eigvalsh(posterior - cov).min() >= -1e-9 * np.abs(posterior).max()
    # the dynamics rows are not noise (most of this short random system's parameters are
    # the prior's: there both are equal)
    assert np.max(1.0 - np.diag(cov) / np.diag(posterior)) > 1e-3
    work = {}
    solver.solve_joint(system, 0.0, work)
    assert work["factors"][0] is system
    np.testing.assert_allclose(solver.sampling_covariance(system, pb.reading_rows, work), cov,
                               rtol=1e-12, atol=1e-15 * np.abs(cov).max())


@pytest.mark.parametrize("rule", RULES)
def test_reused_and_reweighted_systems_equal_fresh_ones(setup, rule):
    """A linearization into a spare system's arrays, and another stage's linearization with its
    rows reweighted, equal a fresh linearization."""
    import dataclasses

    from mbfg.graphs.identification import IdentificationProblem, IdentificationSettings
    mech, sensors, ps = setup
    rng = np.random.default_rng(12)
    recs, states = _two_recordings(ps, mech, sensors, rng)
    motion = {"v": 1.0, "a": 1.0, "j": 1.0, "s": 1.0}
    firsts = [(q[0], qd[0]) for q, qd, _ in states]
    loose = IdentificationSettings(dynamics=1.0, constraints=1e-4)
    tight = dataclasses.replace(loose, dynamics=1e-3, constraints=1e-7)
    pb1 = _problem(ps, recs, loose, firsts, motion, rule)
    pb2 = _problem(ps, recs, tight, firsts, motion, rule)
    Xs = [_steps(pb1, *s, rng) for s in states]
    theta = 0.1 * rng.normal(size=ps.size)

    def same(s1, e1, s2, e2, rtol):
        assert e1 == pytest.approx(e2, rel=rtol)
        for c1, c2 in zip(s1.chains, s2.chains):
            for f in ("A_x", "A_t", "e", "B0", "B1", "e_pair"):
                a, b = getattr(c1, f), getattr(c2, f)
                np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max(),
                                           err_msg=f)
    fresh, err = pb2.linear_system(Xs, theta)
    spare, _ = pb2.linear_system([X + 0.01 for X in Xs], theta + 0.1)
    reused, err_r = pb2.linear_system(Xs, theta, out=spare)
    assert reused.chains[0].A_x is spare.chains[0].A_x
    same(reused, err_r, fresh, err, 0.0)
    source, _ = pb1.linear_system(Xs, theta)
    if rule.startswith("hermite"):
        # its q and v rows' sigmas follow the dynamics sigma: another stage's links differ
        assert pb2.reweighted(source, pb1) is None
        return
    moved, err_m = pb2.reweighted(source, pb1)
    same(moved, err_m, fresh, err, 1e-14)
    # another recording list or parameter set: no reweighting
    other = IdentificationProblem(ps, list(recs), tight, firsts, motion, free=False)
    assert other.reweighted(pb1.linear_system(Xs, theta)[0], pb1) is None


def test_jerk_coordinates_are_one_well_conditioned_set_else_all(setup, monkeypatch):
    """The Hermite rule's jerk: one set of dof coordinates when a set stays well conditioned
    over the recordings' positions, every coordinate when none does."""
    import mbfg.graphs.identification as G
    from mbfg.drivers.forward_dynamics import simulate_batch
    from mbfg.model.partition import coordinate_quality
    from mbfg.model.scales import coordinate_scales
    mech, _, _ = setup
    q = simulate_batch(mech, 0.5).q
    got = G.jerk_coordinates(mech, [q, q[::-1]])
    assert len(got) == mech.dof
    assert coordinate_quality(mech, q, got, coordinate_scales(mech)).min() >= G.JERK_QUALITY_MIN
    monkeypatch.setattr(G, "JERK_QUALITY_MIN", 1.01)  # above any quality
    assert G.jerk_coordinates(mech, [q]) == tuple(range(mech.n))


def test_peak_rates_of_a_sinusoid():
    """peak_rates: the largest jerk and snap of accelerations a_i = c_i s_i sin(w t) in the
    coordinates' scales s_i are max(c) w and max(c) w^2 (central differences, to O(w dt)^2),
    over several recordings."""
    from mbfg.graphs.identification import peak_rates
    from mbfg.model.scales import coordinate_scales
    mech = mbfg.mechanism_from_yaml(MOTOR_FOURBAR)
    s = coordinate_scales(mech)
    w, dt = 3.0, 1e-4
    t = np.arange(0.0, 2 * np.pi / w, dt)
    c = np.linspace(0.5, 2.0, mech.n)
    a = np.sin(w * t)[:, None] * (c * s)[None, :]
    half = a.shape[0] // 2
    peaks = peak_rates(mech, [a[:half], a[half:]], [dt, dt])  # two recordings
    np.testing.assert_allclose(peaks["j"], c.max() * w, rtol=1e-4)
    np.testing.assert_allclose(peaks["s"], c.max() * w ** 2, rtol=1e-3)
