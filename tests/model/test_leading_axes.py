"""The kernels are vectorized over leading axes: one configuration q with many velocities (or
multipliers), and many configurations with one velocity, give what the fully stacked call
gives, bitwise (they used to fail with a numpy axis error when only q was a single state)."""
import numpy as np
import pytest

import mbfg
from conftest import bent_chain_yaml
from mbfg.model import constraints as C
from mbfg.model import dynamics as D

T = 3


def _mechanisms():
    yield "fourbar-crank-angle", mbfg.load_mechanism("fourbar-crank-angle")  # an angle row
    yield "robot", mbfg.load_mechanism("pick-and-place-robot")  # redundant rows
    yield "chain-40", mbfg.mechanism_from_yaml(bent_chain_yaml(40, friction=True))  # sparse


MECHANISMS = dict(_mechanisms())

KERNELS = {
    "hessian_times": lambda m, q, v, a, lam: C.hessian_times(m, q, v),
    "hessian_times sparse": lambda m, q, v, a, lam: C.hessian_times(m, q, v, sparse=True).toarray(),
    "constraint_jacobian_dot": lambda m, q, v, a, lam: C.constraint_jacobian_dot(m, q, v),
    "acceleration_bias": lambda m, q, v, a, lam: C.acceleration_bias(m, q, v),
    "acceleration_bias_jacobian": lambda m, q, v, a, lam: C.acceleration_bias_jacobian(m, q, v),
    "acceleration_constraints_jacobian":
        lambda m, q, v, a, lam: C.acceleration_constraints_jacobian(m, q, v, a),
    "hessian_weighted_sum": lambda m, q, v, a, lam: C.hessian_weighted_sum(m, q, lam),
    "velocity_constraints": lambda m, q, v, a, lam: C.velocity_constraints(m, q, v),
    "forward_dynamics": lambda m, q, v, a, lam: D.forward_dynamics(m, q, v),
    "forward_dynamics multipliers":
        lambda m, q, v, a, lam: D.forward_dynamics(m, q, v, return_multipliers=True)[1],
    "forward_dynamics_jacobians d_q": lambda m, q, v, a, lam: D.forward_dynamics_jacobians(m, q, v).d_q,
    "forward_dynamics_jacobians d_Q": lambda m, q, v, a, lam: D.forward_dynamics_jacobians(m, q, v).d_Q,
}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", MECHANISMS)
def test_one_configuration_with_many_states(name, kernel):
    m = MECHANISMS[name]
    f = KERNELS[kernel]
    rng = np.random.default_rng(7)
    q = np.asarray(m.q0, float)
    V, A = rng.normal(size=(T, m.n)), rng.normal(size=(T, m.n))
    lam = rng.normal(size=(T, m.m))
    Qs = np.tile(q, (T, 1))
    stacked = f(m, Qs, V, A, lam)
    assert np.array_equal(f(m, q, V, A, lam), stacked)
    # many configurations, one velocity (and multipliers)
    assert np.array_equal(f(m, Qs, V[0], A[0], lam[0]),
                          f(m, Qs, np.tile(V[0], (T, 1)), np.tile(A[0], (T, 1)),
                            np.tile(lam[0], (T, 1))))


def test_a_singular_member_of_a_batch_is_lost_alone():
    """velocity_transform over many configurations: one where [Phi_q'; B] is singular gets NaN
    and the others what each gives alone (a particle filter's cloud used to die with numpy's
    LinAlgError when one particle met a rocker's turning point); one configuration, or a
    batch of one, raises as before."""
    from mbfg.model.kinematics import _inverse_each
    rng = np.random.default_rng(3)
    K = rng.normal(size=(4, 3, 3))
    K[2] = 0.0
    K[2, 0, 0] = 1.0                                    # rank 1
    out = _inverse_each(K)
    assert np.all(np.isnan(out[2]))
    for i in (0, 1, 3):
        np.testing.assert_array_equal(out[i], np.linalg.inv(K[i]))
    with pytest.raises(np.linalg.LinAlgError):
        _inverse_each(K[2])
    with pytest.raises(np.linalg.LinAlgError):
        _inverse_each(K[2:3])
