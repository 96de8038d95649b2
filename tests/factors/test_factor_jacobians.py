"""Every factor type, linearized by gtsam, against central differences of its error
(issue 3): through the one shared helper :func:`mbfg.factors.checking.check_factor_jacobians`,
on six mechanisms at random assembled states (plus states near |sin(theta)| = 0.707 and 1)
moved slightly off the constraint manifold, with random velocities, accelerations and forces.

Tolerance: mbfg.testing.FD_RTOL = 1e-6 relative to the largest Jacobian entry.  Central
differences with h = eps^(1/3) max(1, |x|) have truncation and round-off errors ~1e-10
relative, so a correct Jacobian passes with orders of magnitude to spare while any wrong
term (a missing second-order term, a sign) is O(1e-3) or larger.
"""
import gtsam
import numpy as np
import pytest

from conftest import fd_states
from mbfg import factors as F
from mbfg.errors import FactorJacobianError
from mbfg.factors import keys as K
from mbfg.factors.checking import check_factor_jacobians
from mbfg.model.dynamics import Baumgarte

MECHS = ["fourbar", "fourbar-crank-angle", "slider-crank", "quick-return", "pendulum3",
         "pick-and-place-robot"]
STATES = range(6)

FACTORS = {
    "f_pc^d": lambda m, idx: F.position_constraint_factor(m, K.q(0)),
    "f_vc^d": lambda m, idx: F.velocity_constraint_factor(m, K.q(0), K.v(0)),
    "f_ac^d": lambda m, idx: F.acceleration_constraint_factor(m, K.q(0), K.v(0), K.a(0)),
    "f_dyn^d": lambda m, idx: F.forward_dynamics_factor(
        m, K.q(0), K.v(0), K.a(0), forces=np.linspace(-1, 1, m.n)),
    "f_dyn^d+baumgarte": lambda m, idx: F.forward_dynamics_factor(
        m, K.q(0), K.v(0), K.a(0), baumgarte=Baumgarte(1.0, 10.0)),
    "f_eom^d": lambda m, idx: F.equations_of_motion_factor(
        m, K.q(0), K.v(0), K.a(0), K.lam(0), forces=np.linspace(-1, 1, m.n)),
    "f_idyn^d": lambda m, idx: F.inverse_dynamics_factor(m, K.q(0), K.v(0), K.a(0), K.Q(0)),
    "f_pc^i": lambda m, idx: F.independent_position_factor(m, K.q(0), K.z(0), idx),
    "f_vc^i": lambda m, idx: F.independent_velocity_factor(m, K.q(0), K.v(0), K.zd(0), idx),
    "f_ac^i": lambda m, idx: F.independent_acceleration_factor(m, K.q(0), K.v(0), K.a(0),
                                                               K.zdd(0), idx),
    "f_dyn^i": lambda m, idx: F.independent_forward_dynamics_factor(
        m, K.q(0), K.v(0), K.zdd(0), idx, forces=np.linspace(1, -1, m.n)),
    "f_idyn^i": lambda m, idx: F.independent_inverse_dynamics_factor(
        m, K.q(0), K.v(0), K.zdd(0), K.Q(0), idx),
    "f_prior": lambda m, idx: F.prior_factor(K.q(0), np.ones(m.n), np.linspace(0.1, 1, m.n)),
    "f_prior(precisions)": lambda m, idx: F.unactuated_force_prior(m, K.Q(0), idx),
    "f_ei": lambda m, idx: F.euler_integrator_factor(K.q(0), K.q(1), K.v(0), 1e-3, m.n, 1e-3),
    "f_ti": lambda m, idx: F.trapezoidal_integrator_factor(K.q(0), K.q(1), K.v(0), K.v(1), 1e-3,
                                                           m.n, 1e-3),
    "f_eq": lambda m, idx: F.equality_factor(K.q(0), K.q(1), m.n, 0.1),
}


def state_values(name, i):
    """Values for every key any factor uses, at state i of the mechanism, 1e-3 off-manifold."""
    from mbfg.model.kinematics import choose_independent_coordinates
    mech, states = fd_states(name)
    q, qd, qdd = states[i]
    rng = np.random.default_rng(100 + i)
    q = q + 1e-3 * rng.normal(size=mech.n)
    idx = choose_independent_coordinates(mech, q)
    d = len(idx)
    v = gtsam.Values()
    v.insert(K.q(0), q)
    v.insert(K.v(0), qd)
    v.insert(K.a(0), qdd + 0.1 * rng.normal(size=mech.n))
    v.insert(K.Q(0), rng.normal(size=mech.n))
    v.insert(K.lam(0), rng.normal(size=mech.m))
    v.insert(K.z(0), q[list(idx)] + 0.01 * rng.normal(size=d))
    v.insert(K.zd(0), rng.normal(size=d))
    v.insert(K.zdd(0), rng.normal(size=d))
    v.insert(K.q(1), q + 1e-3 * rng.normal(size=mech.n))
    v.insert(K.v(1), qd + 1e-2 * rng.normal(size=mech.n))
    return mech, idx, v


@pytest.mark.parametrize("factor", sorted(FACTORS))
@pytest.mark.parametrize("i", STATES)
@pytest.mark.parametrize("name", MECHS)
def test_factor_jacobians_match_finite_differences(name, i, factor):
    mech, idx, values = state_values(name, i)
    f = FACTORS[factor](mech, idx)
    check_factor_jacobians(f, values)


def test_checker_fails_on_wrong_jacobian():
    """The helper must catch a Jacobian that is off by a small relative amount."""
    mech, idx, values = state_values("fourbar", 0)
    good = F.position_constraint_factor(mech, K.q(0))
    check_factor_jacobians(good, values)
    base = good.spec.residual

    def wrong(p, jacobians=True):
        e, J = base(p, jacobians)
        if jacobians:
            J = {"q": J["q"] * (1 + 1e-4)}
        return e, J
    wrong.slots = base.slots
    bad = F.custom_factor(F.FactorSpec("wrong", wrong, [K.q(0)], [mech.n], mech.m), 1e-6)
    with pytest.raises(AssertionError, match="d e / d q0"):
        check_factor_jacobians(bad, values)


def test_checker_fails_on_missing_second_order_term():
    """The C++ library's slider constraints left Phi_qq at zero: the helper must notice."""
    mech, idx, values = state_values("quick-return", 0)
    base = F.velocity_constraint_factor(mech, K.q(0), K.v(0)).spec.residual

    def first_order_only(p, jacobians=True):
        e, J = base(p, jacobians)
        if jacobians:
            J = {"q": np.zeros_like(J["q"]), "v": J["v"]}
        return e, J
    first_order_only.slots = base.slots
    bad = F.custom_factor(F.FactorSpec("no-2nd-order", first_order_only, [K.q(0), K.v(0)],
                                       [mech.n] * 2, mech.m), 1e-6)
    with pytest.raises(AssertionError):
        check_factor_jacobians(bad, values)


# --- the adapter turns crash modes of CustomFactor into Python exceptions ---------------

def _spec_with(jacobian, error=None, rows=3):
    def f(p, jacobians=True):
        e = np.zeros((1, rows)) if error is None else error
        return e, ({"q": jacobian} if jacobians else None)
    f.slots = ("q",)
    return F.FactorSpec("test", f, [K.q(0)], [4], rows)


@pytest.mark.parametrize("jacobian,match", [
    (np.zeros((1, 2, 4)), r"shape \(2, 4\), expected \(3, 4\)"),   # wrong rows: would segfault
    (np.zeros((1, 3, 5)), r"shape \(3, 5\), expected \(3, 4\)"),   # wrong columns: corrupts
    (np.zeros((1, 3, 4), dtype=int), "float64"),
    (np.full((1, 3, 4), np.nan), "not finite"),
])
def test_adapter_rejects_bad_jacobians(jacobian, match):
    factor = F.custom_factor(_spec_with(jacobian), 1.0)
    values = gtsam.Values()
    values.insert(K.q(0), np.zeros(4))
    with pytest.raises(FactorJacobianError, match=match):
        factor.linearize(values)


def test_adapter_rejects_bad_error_and_variable():
    factor = F.custom_factor(_spec_with(np.zeros((1, 3, 4)), error=np.zeros((1, 2))), 1.0)
    values = gtsam.Values()
    values.insert(K.q(0), np.zeros(4))
    with pytest.raises(FactorJacobianError, match="error has shape"):
        factor.error(values)
    good = F.custom_factor(_spec_with(np.zeros((1, 3, 4))), 1.0)
    wrong_dim = gtsam.Values()
    wrong_dim.insert(K.q(0), np.zeros(5))
    with pytest.raises(FactorJacobianError, match=r"variable q0 has shape \(5,\), expected \(4,\)"):
        good.error(wrong_dim)


def test_integrator_errors_follow_their_definitions():
    """Eqs. 22a and 23a evaluated by hand: the native factors carry exactly these residuals."""
    rng = np.random.default_rng(3)
    x0, x1, xd0, xd1 = (rng.normal(size=3) for _ in range(4))
    dt, sigma = 0.01, 0.2
    values = gtsam.Values()
    for k, x in zip([K.q(0), K.q(1), K.v(0), K.v(1)], [x0, x1, xd0, xd1]):
        values.insert(k, x)
    ei = F.euler_integrator_factor(K.q(0), K.q(1), K.v(0), dt, 3, sigma)
    ti = F.trapezoidal_integrator_factor(K.q(0), K.q(1), K.v(0), K.v(1), dt, 3, sigma)
    e_ei = x1 - x0 - dt * xd0
    e_ti = x1 - x0 - dt / 2 * (xd0 + xd1)
    assert ei.error(values) == pytest.approx(0.5 * np.sum((e_ei / sigma) ** 2), rel=1e-12)
    assert ti.error(values) == pytest.approx(0.5 * np.sum((e_ti / sigma) ** 2), rel=1e-12)


def test_zero_precision_leaves_component_free():
    mech, idx, values = state_values("fourbar-crank-angle", 0)
    prior = F.unactuated_force_prior(mech, K.Q(0), [4], sigma=1e-3)
    Q = np.zeros(mech.n)
    Q[4] = 123.0           # actuated: free
    values.update(K.Q(0), Q)
    assert prior.error(values) == 0.0
    Q[0] = 1e-3            # not actuated: penalized with sigma 1e-3
    values.update(K.Q(0), Q)
    assert prior.error(values) == pytest.approx(0.5)


def test_four_key_linear_factor_has_a_noise_model():
    """The trapezoidal integrator (4 keys) goes through gtsam's Hessian -> Jacobian conversion,
    which left no noise model; dim() on it then crashed the interpreter."""
    f = F.trapezoidal_integrator_factor(K.q(0), K.q(1), K.v(0), K.v(1), 1e-3, 3, 1e-3)
    assert f.dim() == 3


def test_gtsam_optimizers_solve_mbfg_graphs():
    """Users can hand a graph of mbfg factors to gtsam's own optimizers (with QR, as the tight
    constraint sigmas require): a pendulum released from rest, one trapezoidal step."""
    mech, idx, _ = state_values("fourbar", 0)
    dt = 1e-3
    g = gtsam.NonlinearFactorGraph()
    g.add(F.prior_factor(K.q(0), mech.q0, 1e-8))
    g.add(F.prior_factor(K.v(0), np.zeros(mech.n), 1e-8))
    values = gtsam.Values()
    for k in range(2):
        g.add(F.position_constraint_factor(mech, K.q(k)))
        g.add(F.velocity_constraint_factor(mech, K.q(k), K.v(k)))
        g.add(F.forward_dynamics_factor(mech, K.q(k), K.v(k), K.a(k)))
        for key in (K.q(k), K.v(k), K.a(k)):
            values.insert(key, mech.q0 if key == K.q(k) else np.zeros(mech.n))
    g.add(F.trapezoidal_integrator_factor(K.q(0), K.q(1), K.v(0), K.v(1), dt, mech.n, 1e-3))
    g.add(F.trapezoidal_integrator_factor(K.v(0), K.v(1), K.a(0), K.a(1), dt, mech.n, 1e-3))
    params = F.lm_params()
    result = gtsam.LevenbergMarquardtOptimizer(g, values, params).optimize()
    assert g.error(result) < 1e-6 * g.error(values)
    from mbfg.model.dynamics import forward_dynamics
    a0 = forward_dynamics(mech, mech.q0, np.zeros(mech.n))
    np.testing.assert_allclose(result.atVector(K.a(0)), a0, rtol=1e-6, atol=1e-9)


def test_inverse_dynamics_factors_fix_unactuated_forces():
    """One step of Fig. 4 by hand: with q, qdot, qddot held, the graph's Q is the motor torque
    of the equations of motion, and the non-actuated components stay zero."""
    from mbfg.model.dynamics import inverse_dynamics
    mech, idx, values = state_values("fourbar-crank-angle", 1)
    q, qd, qdd = fd_states("fourbar-crank-angle")[1][0]
    g = gtsam.NonlinearFactorGraph()
    for key, x in ((K.q(0), q), (K.v(0), qd), (K.a(0), qdd)):
        g.add(F.prior_factor(key, x, 1e-9))
    for f in F.inverse_dynamics_factors(mech, K.q(0), K.v(0), K.a(0), K.Q(0), actuated=[4]):
        g.add(f)
    v = gtsam.Values()
    for key, x in ((K.q(0), q), (K.v(0), qd), (K.a(0), qdd), (K.Q(0), np.zeros(mech.n))):
        v.insert(key, x)
    result = gtsam.LevenbergMarquardtOptimizer(g, v, F.lm_params()).optimize()
    Q = result.atVector(K.Q(0))
    expected = inverse_dynamics(mech, q, qd, qdd, [4])
    np.testing.assert_allclose(Q, expected, rtol=1e-6, atol=1e-6)
