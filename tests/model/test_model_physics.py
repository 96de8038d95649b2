"""Model checks against physics and closed forms (no expected values from the code itself)."""
import numpy as np
import pytest

import mbfg
from conftest import load
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.model.inertia import centres_of_mass, kinetic_energy, potential_energy
from mbfg.model.integrate import integrate_reference
from mbfg.testing import check_jacobian, random_assembled_state

G = 9.81


def _pendulum_yaml(theta, L, with_angle):
    rel = "relative_coordinates:\n  - {type: RelativeAngleAbsoluteDOF, points: [0, 1]}\n"
    return f"""
parameters:
  L: {L}
  th: {theta}
points:
  - {{x: 0, y: 0, fixed: true}}
  - {{x: L*cos(th), y: L*sin(th)}}
planar_bodies:
  - points: [0, 1]
    length: L
    mass: 3.0
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0]
{rel if with_angle else ''}"""


@pytest.mark.parametrize("theta", [0.0, 0.4, -1.1, 2.5])
@pytest.mark.parametrize("formulation", ["dependent", "dependent+angle", "independent"])
def test_pendulum_released_from_rest(theta, formulation):
    """Uniform bar pinned at one end: theta'' = -3 g cos(theta) / (2 L)."""
    L = 1.7
    mech = mbfg.mechanism_from_yaml(_pendulum_yaml(theta, L, formulation != "dependent"))
    q, qd = mech.q0, np.zeros(mech.n)
    expected = -3.0 * G * np.cos(theta) / (2.0 * L)
    if formulation == "independent":
        idx = (mech.n - 1,)  # theta
        got = D.independent_dynamics(mech, q, qd, idx)[0]
    else:
        qdd = D.forward_dynamics(mech, q, qd)
        if formulation == "dependent+angle":
            got = qdd[-1]
            # and the point acceleration agrees with the angle's
            np.testing.assert_allclose(qdd[:2], L * got * np.array([-np.sin(theta), np.cos(theta)]),
                                       atol=1e-12)
        else:
            x, y = q[:2]
            got = (x * qdd[1] - y * qdd[0]) / L**2
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_pendulum_centripetal_term():
    """Spinning at omega with no gravity, the pin force makes the point accelerate inward at
    omega^2 L: checks the velocity-dependent part c = -dPhi_q/dt qdot."""
    L, w = 2.0, 3.0
    mech = mbfg.mechanism_from_yaml(_pendulum_yaml(0.3, L, True).replace(
        "parameters:", "gravity: [0, 0]\nparameters:"))
    q = mech.q0
    qd = K.solve_velocity(mech, q, (mech.n - 1,), [w])
    qdd = D.forward_dynamics(mech, q, qd)
    np.testing.assert_allclose(qdd[:2], -w**2 * q[:2], atol=1e-12)
    assert qdd[2] == pytest.approx(0.0, abs=1e-12)


def _quadrature_kinetic_energy(points_xy, masses, r0, r1, v0, v1):
    """T = sum 1/2 m_i |v_i|^2 for material points given in the body frame."""
    L = np.linalg.norm(r1 - r0)
    ex = (r1 - r0) / L
    ey = np.array([-ex[1], ex[0]])
    dex = (v1 - v0) / L
    dey = np.array([-dex[1], dex[0]])
    v = v0 + points_xy[:, :1] * dex + points_xy[:, 1:] * dey
    return 0.5 * np.sum(masses * np.sum(v * v, axis=1))


def test_mass_matrix_of_bar_against_quadrature(rng):
    """Four-bar (uniform bars): 1/2 qd^T M qd equals the kinetic energy integrated over each
    bar's mass distribution with Gauss-Legendre quadrature."""
    mech = load("fourbar")
    xg, wg = np.polynomial.legendre.leggauss(8)
    for _ in range(3):
        q, qd, _ = random_assembled_state(mech, rng)
        P = mech.point_positions(q)
        V = mech.point_positions(qd) - mech.point_fixed_xy
        T = 0.0
        for body in mech.spec.bodies:
            i, j = body.points[:2]
            L = body.length
            xi = 0.5 * L * (xg + 1.0)
            dm = 0.5 * L * wg * body.mass / L
            T += _quadrature_kinetic_energy(np.column_stack([xi, 0 * xi]), dm, P[i], P[j], V[i], V[j])
        assert kinetic_energy(mech, qd) == pytest.approx(T, rel=1e-12)


def test_mass_matrix_of_offset_plate_against_quadrature(rng):
    """A uniform rectangular plate [0, a] x [0, b] in its body frame, hinged at point 0, whose
    centre of mass is off the 0-1 axis (cy = b/2): checks the skew (m cy / L) terms of M."""
    a, b, m = 0.8, 0.3, 2.5
    mech = mbfg.mechanism_from_yaml(f"""
points:
  - {{x: 0, y: 0, fixed: true}}
  - {{x: {a}, y: 0}}
planar_bodies:
  - {{points: [0, 1], length: auto, mass: {m}, I0: mass*({a}^2 + {b}^2)/3, cog: [{a / 2}, {b / 2}]}}
""")
    xg, wg = np.polynomial.legendre.leggauss(6)
    X, Y = np.meshgrid(0.5 * a * (xg + 1), 0.5 * b * (xg + 1))
    W = np.outer(wg, wg) * 0.25 * m  # (a b / 4) * density m / (a b)
    pts = np.column_stack([X.ravel(), Y.ravel()])
    for _ in range(3):
        q, qd, _ = random_assembled_state(mech, rng)
        qd = qd + 0.0
        P = mech.point_positions(q)
        V = mech.point_positions(qd) - mech.point_fixed_xy
        T = _quadrature_kinetic_energy(pts, W.ravel(), P[0], P[1], V[0], V[1])
        assert kinetic_energy(mech, qd) == pytest.approx(T, rel=1e-12)
    # also off the manifold's tangent: an arbitrary velocity of point 1 (stretching the bar is
    # not a rigid motion, so use a rigid rotation about point 0 at a random rate)
    w = 1.7
    qd = w * np.array([-q[1], q[0]])
    V = np.array([[0.0, 0.0], qd])
    T = _quadrature_kinetic_energy(pts, W.ravel(), P[0], P[1], V[0], V[1])
    assert T == pytest.approx(0.5 * m * (a * a + b * b) / 3.0 * w * w, rel=1e-12)
    assert kinetic_energy(mech, qd) == pytest.approx(T, rel=1e-12)


def test_gravity_forces_are_minus_potential_gradient(rng):
    for name in ("fourbar", "pendulum3", "pick-and-place-robot", "quick-return"):
        mech = load(name)
        q, _, _ = random_assembled_state(mech, rng)
        check_jacobian(lambda x: np.atleast_1d(-potential_energy(mech, x)), q,
                       mech.gravity_forces()[None, :], name=f"{name} gravity")


def test_total_mass_and_centre_of_mass():
    mech = load("fourbar")
    assert mech.total_mass == pytest.approx(7.0)
    rg = centres_of_mass(mech, mech.q0)
    np.testing.assert_allclose(rg[0], [0.5, 0.0])
    np.testing.assert_allclose(rg[1], [1.0, 1.0])
    np.testing.assert_allclose(rg[2], [2.5, 1.0])


def test_fourbar_energy_conservation_classical_integrator():
    """Four-bar from rest, 5 s: relative energy drift < 1e-6 and |Phi| < 1e-9."""
    mech = load("fourbar")
    ref = integrate_reference(mech, 5.0, 0.01, rtol=1e-12, atol=1e-12)
    E = kinetic_energy(mech, ref.qd) + potential_energy(mech, ref.q)
    drift = np.max(np.abs(E - E[0])) / np.max(kinetic_energy(mech, ref.qd))
    assert drift < 1e-6
    assert np.max(np.linalg.norm(C.position_constraints(mech, ref.q), axis=1)) < 1e-9
    assert np.max(np.abs(C.velocity_constraints(mech, ref.q, ref.qd))) < 1e-9
    # it actually moved: the crank swings through a large angle
    assert np.ptp(ref.q[:, 1]) > 0.5


def test_one_solver_call_agrees_with_the_restarted_integration():
    """restart=False (one solve_ivp call, samples projected afterwards) follows the same
    motion as the default restart at every sample, and its samples lie on the manifolds."""
    mech = load("fourbar")
    a = integrate_reference(mech, 2.0, 0.01, rtol=1e-12, atol=1e-12)
    b = integrate_reference(mech, 2.0, 0.01, rtol=1e-12, atol=1e-12, restart=False)
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_allclose(b.q, a.q, atol=1e-8)
    np.testing.assert_allclose(b.qd, a.qd, atol=1e-7)
    assert np.max(np.linalg.norm(C.position_constraints(mech, b.q), axis=1)) < 1e-9
    assert np.max(np.abs(C.velocity_constraints(mech, b.q, b.qd))) < 1e-9


def test_fourbar_integrator_agrees_with_baumgarte_variant():
    """Two different stabilizations of the same ODE agree at tight tolerance."""
    mech = load("fourbar")
    a = integrate_reference(mech, 1.0, 0.01)
    b = integrate_reference(mech, 1.0, 0.01, baumgarte=D.Baumgarte(1.0, 10.0), project=False)
    np.testing.assert_allclose(a.q, b.q, atol=1e-8)
