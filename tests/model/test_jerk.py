"""The jerk d/dt qddot along the motion (:func:`mbfg.model.dynamics.jerk_along`), which the
fourth-order Hermite integrator of the simulation graph needs, against closed forms."""
import numpy as np
import pytest

import mbfg
from conftest import FD_MECHANISMS, MOTOR_FOURBAR, fd_states, load
from mbfg.model.dynamics import forward_dynamics, jerk_along, jerk_jacobians
from mbfg.testing import check_jacobian, random_assembled_state

PENDULUM = """
points:
  - {{x: 0, y: 0, fixed: true}}
  - {{x: {L}, y: 0}}
planar_bodies:
  - points: [0, 1]
    length: {L}
    mass: {m}
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0.0]
"""


@pytest.mark.parametrize("theta, rate", [(np.pi / 4, 0.0), (0.3, 2.0), (-2.0, -5.0)])
@pytest.mark.parametrize("L, m", [(0.01, 0.002), (2.0, 5.0), (30.0, 400.0)])
def test_pendulum_jerk_matches_the_closed_form(theta, rate, L, m):
    """A uniform bar of length L and mass m pinned at one end, at angle th and rate th'
    (in units of sqrt(g / L)): I_O th'' = -m g (L/2) cos th, so th''' = m g (L/2) sin th th'
    / I_O, and its tip (L cos th, L sin th) has x''' = L (sin th th'^3 - 3 cos th th' th'' -
    sin th th''') and y''' = L (-cos th th'^3 - 3 sin th th' th'' + cos th th''')."""
    mech = mbfg.mechanism_from_yaml(PENDULUM.format(L=L, m=m))
    g = 9.81
    I = m * L ** 2 / 3.0
    omega = np.sqrt(g / L)                 # the motion's rate scale
    rate = rate * omega
    dd = -m * g * (L / 2) * np.cos(theta) / I
    ddd = m * g * (L / 2) * np.sin(theta) * rate / I
    s, c = np.sin(theta), np.cos(theta)
    q = L * np.array([c, s])
    qd = L * rate * np.array([-s, c])
    expected = L * np.array([s * rate ** 3 - 3 * c * rate * dd - s * ddd,
                             -c * rate ** 3 - 3 * s * rate * dd + c * ddd])
    h = 1e-3 * 1e-3                        # 1e-3 of a 1 ms step, as the graph uses
    got = jerk_along(mech, q[None], qd[None], None, None, None, h)[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8 * L * omega ** 3 * 30)


def test_given_accelerations_are_followed():
    """With the accelerations given, the difference follows (v, a) as given: on the model's
    own accelerations it is the model's jerk."""
    mech = load("fourbar")
    q, v, _ = fd_states("fourbar")[1][0]
    a = forward_dynamics(mech, q, v)
    h = 1e-6
    np.testing.assert_allclose(jerk_along(mech, q[None], v[None], a[None], None, None, h),
                               jerk_along(mech, q[None], v[None], None, None, None, h),
                               rtol=0, atol=1e-12 * np.abs(a).max() / h)


@pytest.mark.parametrize("name", FD_MECHANISMS + ["friction"])
def test_jerk_jacobians_match_central_differences(name):
    """The exact derivatives of the jerk (which the Hermite rule's links use where holding
    the jerk constant converges slowly) against central differences of the jerk itself, on
    every state of the Jacobian suites, with time-varying applied forces."""
    if name == "friction":
        mech = mbfg.mechanism_from_yaml(MOTOR_FOURBAR)
        states = [random_assembled_state(mech, np.random.default_rng(s)) for s in range(3)]
    else:
        mech, states = fd_states(name)
    rng = np.random.default_rng(7)
    h = 1e-4
    for q, qd, _ in states:
        Qp, Qm = rng.normal(size=(2, 1, mech.n))
        got = jerk_jacobians(mech, q[None], qd[None], Qp, Qm, h)
        np.testing.assert_allclose(got.jerk, jerk_along(mech, q[None], qd[None], None, Qp, Qm,
                                                        h), rtol=1e-9, atol=1e-9)
        check_jacobian(lambda x: jerk_along(mech, x[None], qd[None], None, Qp, Qm, h)[0], q,
                       got.d_q[0], name=f"{name} dJ/dq", rtol=1e-5)
        check_jacobian(lambda x: jerk_along(mech, q[None], x[None], None, Qp, Qm, h)[0], qd,
                       got.d_qd[0], name=f"{name} dJ/dqd", rtol=1e-5)
