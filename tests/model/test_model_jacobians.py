"""Every kernel of the model (constraints and equations of motion) against central differences,
on several mechanisms and random assembled states, through the one shared helper."""
import numpy as np
import pytest

from conftest import FD_MECHANISMS, bent_chain_yaml, fd_states
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.testing import check_jacobian


CASES = [(name, i) for name in FD_MECHANISMS for i in range(6)]


@pytest.fixture(scope="module")
def states():
    return {name: fd_states(name) for name in FD_MECHANISMS}


def _case(states, name, i):
    mech, sts = states[name]
    q, qd, qdd = sts[i]
    # move slightly off the manifold too: kernels must be exact everywhere, not only on Phi = 0
    rng = np.random.default_rng(i)
    return mech, q + 1e-3 * rng.normal(size=q.shape), qd, qdd, rng


@pytest.mark.parametrize("name,i", CASES)
def test_constraint_kernels(states, name, i):
    mech, q, qd, qdd, rng = _case(states, name, i)
    v = rng.normal(size=mech.n)
    check_jacobian(lambda x: C.position_constraints(mech, x), q, C.constraint_jacobian(mech, q),
                   name="Phi_q")
    check_jacobian(lambda x: C.constraint_jacobian(mech, x), q, C.constraint_hessian(mech, q),
                   name="Phi_qq")
    check_jacobian(lambda x: C.velocity_constraints(mech, x, v), q, C.hessian_times(mech, q, v),
                   name="d(Phi_q v)/dq")
    lam = rng.normal(size=mech.m)
    check_jacobian(lambda x: C.constraint_jacobian(mech, x).T @ lam, q,
                   C.hessian_weighted_sum(mech, q, lam), name="d(Phi_q^T lam)/dq")
    check_jacobian(lambda x: C.velocity_constraints(mech, x, qd), q,
                   C.constraint_jacobian_dot(mech, q, qd), name="dPhi_q/dt")
    check_jacobian(lambda x: C.acceleration_bias(mech, x, qd), q,
                   C.acceleration_bias_jacobian(mech, q, qd), name="(dPhi_q/dt qdot)_q")
    check_jacobian(lambda x: C.acceleration_bias(mech, q, x), qd,
                   2.0 * C.constraint_jacobian_dot(mech, q, qd), name="(dPhi_q/dt qdot)_qdot")
    check_jacobian(lambda x: C.acceleration_constraints(mech, x, qd, qdd), q,
                   C.acceleration_bias_jacobian(mech, q, qd) + C.hessian_times(mech, q, qdd),
                   name="acceleration constraints _q")
    check_jacobian(lambda x: C.acceleration_constraints(mech, x, qd, qdd), q,
                   C.acceleration_constraints_jacobian(mech, q, qd, qdd),
                   name="acceleration constraints _q (one kernel)")


@pytest.mark.parametrize("name,i", CASES)
@pytest.mark.parametrize("stabilized", [False, True])
def test_dependent_dynamics_jacobians(states, name, i, stabilized):
    mech, q, qd, _, rng = _case(states, name, i)
    Q = rng.normal(size=mech.n)
    bg = D.Baumgarte(zeta=1.0, omega=10.0) if stabilized else None
    jac = D.forward_dynamics_jacobians(mech, q, qd, Q, baumgarte=bg)
    np.testing.assert_allclose(jac.qdd, D.forward_dynamics(mech, q, qd, Q, baumgarte=bg),
                               rtol=1e-10, atol=1e-10)
    f = D.forward_dynamics
    check_jacobian(lambda x: f(mech, x, qd, Q, baumgarte=bg), q, jac.d_q, name="dqdd/dq")
    check_jacobian(lambda x: f(mech, q, x, Q, baumgarte=bg), qd, jac.d_qd, name="dqdd/dqd")
    check_jacobian(lambda x: f(mech, q, qd, x, baumgarte=bg), Q, jac.d_Q, name="dqdd/dQ")


@pytest.mark.parametrize("name,i", CASES)
def test_independent_dynamics_jacobians(states, name, i):
    """z'' from Eq. 15 (its own implementation through R and S) differentiated numerically
    must match the analytic Jacobians."""
    mech, q, qd, _, rng = _case(states, name, i)
    idx = K.choose_independent_coordinates(mech, q)
    Q = rng.normal(size=mech.n)
    jac = D.independent_dynamics_jacobians(mech, q, qd, idx, Q)
    f = D.independent_dynamics
    np.testing.assert_allclose(jac.qdd, f(mech, q, qd, idx, Q), rtol=1e-9, atol=1e-9)
    check_jacobian(lambda x: f(mech, x, qd, idx, Q), q, jac.d_q, name="dzdd/dq")
    check_jacobian(lambda x: f(mech, q, x, idx, Q), qd, jac.d_qd, name="dzdd/dqd")
    check_jacobian(lambda x: f(mech, q, qd, idx, x), Q, jac.d_Q, name="dzdd/dQ")


def test_batched_kernels_match_single_state(states):
    mech, sts = states["pick-and-place-robot"]
    q = np.stack([s[0] for s in sts])
    qd = np.stack([s[1] for s in sts])
    for fn in (C.position_constraints, C.constraint_jacobian, C.constraint_hessian):
        np.testing.assert_allclose(fn(mech, q), np.stack([fn(mech, x) for x in q]), atol=1e-12)
    for fn in (C.hessian_times, C.acceleration_bias, C.acceleration_bias_jacobian):
        np.testing.assert_allclose(fn(mech, q, qd), np.stack([fn(mech, a, b) for a, b in zip(q, qd)]),
                                   atol=1e-12)
    batch = D.forward_dynamics_jacobians(mech, q, qd)
    for k in range(len(q)):
        one = D.forward_dynamics_jacobians(mech, q[k], qd[k])
        np.testing.assert_allclose(batch.d_q[k], one.d_q, atol=1e-9)


def _arrays(obj):
    """Every ndarray held by the model: its attributes (cached ones included), in tuples too."""
    for value in vars(obj).values():
        for a in (value if isinstance(value, tuple) else (value,)):
            if isinstance(a, np.ndarray):
                yield a


def test_chain_kernels_are_sparse_and_match_dense_references():
    """A 50-link chain: the per-row kernels against references built densely in the test
    (Phi from the point positions, derivatives by central differences and from the full
    Hessian tensor), and the model holds no (m, n, n)-sized table."""
    import mbfg

    links = 50
    mech = mbfg.mechanism_from_yaml(bent_chain_yaml(links))
    n, m = mech.n, mech.m
    assert (n, m, mech.m_quadratic) == (2 * links + 2, links + 2, links)
    assert ((mech.quad_coords >= 0).sum(axis=1) <= 4).all()
    assert ((mech.angle_d_coords >= 0).sum(axis=1) <= 4).all()

    rng = np.random.default_rng(50)
    q = mech.q0 + 1e-3 * rng.normal(size=n)
    v = rng.normal(size=n)
    lam = rng.normal(size=m)

    r = mech.point_positions(q)
    phi_ref = [np.sum((r[k] - r[k + 1]) ** 2) - mech.spec.bodies[k].length ** 2
               for k in range(links)]
    for theta, ra in zip(q[mech.angle_coords], mech.spec.relative_angles):
        d = r[ra.points[1]] - r[ra.points[0]]
        phi_ref.append(d[0] * np.sin(theta) - d[1] * np.cos(theta))
    np.testing.assert_allclose(C.position_constraints(mech, q), phi_ref, rtol=0, atol=1e-14)

    J = C.constraint_jacobian(mech, q)
    H = C.constraint_hessian(mech, q)
    check_jacobian(lambda x: C.position_constraints(mech, x), q, J, name="Phi_q")
    check_jacobian(lambda x: C.constraint_jacobian(mech, x), q, H, name="Phi_qq")
    check_jacobian(lambda x: C.constraint_jacobian(mech, x) @ v, q, C.hessian_times(mech, q, v),
                   name="Phi_qq v")
    check_jacobian(lambda x: C.constraint_jacobian(mech, x).T @ lam, q,
                   C.hessian_weighted_sum(mech, q, lam), name="sum lam_k Phi_qq,k")
    np.testing.assert_allclose(C.hessian_times(mech, q, v), H @ v, rtol=0, atol=1e-13)
    np.testing.assert_allclose(C.hessian_weighted_sum(mech, q, lam),
                               np.einsum("k,kij->ij", lam, H), rtol=0, atol=1e-13)
    qs = q + 1e-3 * rng.normal(size=(3, n))  # batched over states like the single-state calls
    np.testing.assert_allclose(C.hessian_weighted_sum(mech, qs, lam),
                               np.stack([C.hessian_weighted_sum(mech, x, lam) for x in qs]),
                               rtol=0, atol=1e-13)
    M = mech.mass_matrix()
    assert np.count_nonzero(M) <= 16 * links  # one 4x4 block per body

    sizes = [a.size for a in _arrays(mech) if a is not M]  # after every kernel ran (caches)
    assert max(sizes) < m * n * n
    assert max(sizes) <= 32 * (n + m)  # linear in the number of bodies: not even an (m, n) table


@pytest.mark.parametrize("name", FD_MECHANISMS)
def test_constraint_rows_touch_only_their_coordinates(states, name):
    """Each row's table lists at most the coordinates of its points: distance 4, fixed slider 2,
    mobile slider 6, relative angle 4 point coordinates (plus its angle)."""
    mech, _ = states[name]
    width = (mech.quad_coords >= 0).sum(axis=1)
    limits = {"dist": 4, "fixed_slider": 2, "mobile_slider": 6}
    for label, k in zip(mech.constraint_labels, width):
        assert k <= next(v for key, v in limits.items() if key in label), label
    assert ((mech.angle_d_coords >= 0).sum(axis=1) <= 4).all()
