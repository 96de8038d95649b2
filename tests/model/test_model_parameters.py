"""The explicit parameter vector pi (mbfg.model.parameters): M and Q_g linear in pi, the
inverse-dynamics regressor, with_parameters and load-time overrides."""
from __future__ import annotations

import numpy as np
import pytest

import mbfg
from mbfg.errors import UsageError
from mbfg.model import parameters as P
from mbfg.model.inertia import body_point_map
from mbfg.testing import check_jacobian, random_mechanisms

from conftest import FD_MECHANISMS, load


def _point_mass_body(rng, length):
    """Body-frame point masses (k,), positions (k, 2) and their exact m, m c, I_O."""
    masses = rng.uniform(0.1, 2.0, size=5)
    xy = rng.uniform(-0.5, 1.5, size=(5, 2)) * length
    return masses, xy, masses.sum(), masses @ xy, masses @ np.sum(xy * xy, axis=1)


def test_kinetic_energy_of_point_masses_matches_mass_matrix():
    """Independent physics: for a body made of point masses, 1/2 qd^T M(pi) qd equals
    sum 1/2 m_i |r_i dot|^2 with each r_i moving rigidly with points 0 and 1."""
    rng = np.random.default_rng(3)
    for length in (0.01, 1.0, 7.0):
        masses, xy, m, mc, I0 = _point_mass_body(rng, length)
        Mb = np.einsum("j,jkl->kl", [m, mc[0], mc[1], I0], P.body_mass_basis(length))
        # a rigid motion of the segment 0 -> 1 keeps its length: r0, r1 and their velocities
        theta, w = rng.uniform(0, 2 * np.pi), rng.normal()
        r0, v0 = rng.normal(size=2), rng.normal(size=2)
        e = np.array([np.cos(theta), np.sin(theta)])
        qd = np.concatenate([v0, v0 + length * w * np.array([-e[1], e[0]])])
        T_points = 0.5 * sum(mi * np.sum((body_point_map(x, y, length) @ qd) ** 2)
                             for mi, (x, y) in zip(masses, xy))
        assert 0.5 * qd @ Mb @ qd == pytest.approx(T_points, rel=1e-12)
        g = np.array([0.3, -9.81])
        Qg = P.body_gravity_basis(length, g) @ np.array([m, mc[0], mc[1], I0])
        Q_points = sum(mi * body_point_map(x, y, length).T @ g for mi, (x, y) in zip(masses, xy))
        np.testing.assert_allclose(Qg, Q_points, rtol=1e-12, atol=1e-12 * np.abs(Q_points).max())


@pytest.mark.parametrize("name", FD_MECHANISMS)
def test_mass_matrix_and_gravity_linear_in_pi(name):
    mech = load(name)
    pi = P.parameter_vector(mech)
    M, Q = mech.mass_matrix(), mech.gravity_forces()
    np.testing.assert_allclose(P.mass_matrix(mech, pi), M, rtol=0, atol=1e-14 * np.abs(M).max())
    np.testing.assert_allclose(P.gravity_forces(mech, pi), Q, rtol=0,
                               atol=1e-14 * max(np.abs(Q).max(), 1.0))
    # linear: M(a pi1 + b pi2) = a M(pi1) + b M(pi2) on the inertial part
    rng = np.random.default_rng(0)
    p1, p2 = pi * rng.uniform(0.5, 2, pi.size), pi * rng.uniform(0.5, 2, pi.size)
    p1[-2:] = p2[-2:] = pi[-2:]
    np.testing.assert_allclose(P.mass_matrix(mech, 2 * p1 - p2),
                               2 * P.mass_matrix(mech, p1) - P.mass_matrix(mech, p2),
                               atol=1e-12 * np.abs(M).max())


@pytest.mark.parametrize("name", FD_MECHANISMS)
def test_regressor_is_the_jacobian(name):
    """Y = d(M(pi) qdd - Q_g(pi))/dpi by the shared central-difference helper, and
    Y pi_inertial = M qdd - Q_g exactly."""
    mech = load(name)
    rng = np.random.default_rng(7)
    pi = P.parameter_vector(mech) * rng.uniform(0.8, 1.2, P.parameter_vector(mech).size)
    qdd = rng.normal(size=mech.n)
    Y = P.inverse_dynamics_regressor(mech, qdd, pi)

    def residual(p):
        return P.mass_matrix(mech, p) @ qdd - P.gravity_forces(mech, p)

    check_jacobian(residual, pi, Y, name=f"{name} regressor")
    np.testing.assert_allclose(Y[:, :-2] @ pi[:-2], residual(pi),
                               atol=1e-12 * np.abs(residual(pi)).max())
    batch = P.inverse_dynamics_regressor(mech, np.stack([qdd, 2 * qdd]), pi)
    np.testing.assert_allclose(batch[0], Y)


def test_regressor_on_generated_mechanisms():
    """Mechanisms nobody here wrote, millimetres to metres, grams to hundreds of kg."""
    for gen in random_mechanisms(12, seed=5):
        mech = gen.load()
        pi = P.parameter_vector(mech)
        qdd = np.random.default_rng(1).normal(size=mech.n) / gen.length
        Y = P.inverse_dynamics_regressor(mech, qdd)
        expect = mech.mass_matrix() @ qdd - mech.gravity_forces()
        np.testing.assert_allclose(Y[:, :-2] @ pi[:-2], expect,
                                   atol=1e-12 * np.abs(expect).max(), err_msg=gen.name)


def test_with_parameters_round_trip_and_names():
    mech = load("pendulum3")
    names = P.parameter_names(mech)
    assert len(names) == P.parameter_vector(mech).size == 4 * len(mech.spec.bodies) + 2
    same = mech.with_parameters(P.parameter_vector(mech))
    np.testing.assert_allclose(same.mass_matrix(), mech.mass_matrix(), atol=1e-14)
    heavier = mech.with_parameters(**{"planar_bodies[0].mass": 2 * mech.spec.bodies[0].mass,
                                      "gravity[1]": -1.62})
    assert heavier.gravity[1] == -1.62 and mech.gravity[1] == -9.81  # mech is unchanged
    np.testing.assert_array_equal(heavier.q0, mech.q0)
    pi = P.parameter_vector(heavier)
    np.testing.assert_allclose(P.mass_matrix(heavier, pi), heavier.mass_matrix(), atol=1e-14)
    with pytest.raises(UsageError, match="unknown parameter"):
        mech.with_parameters(**{"planar_bodies[0].colour": 1})
    with pytest.raises(UsageError, match="negative inertia"):
        mech.with_parameters(**{"planar_bodies[0].I0": 0.0})


def test_load_overrides():
    base = mbfg.load_mechanism("fourbar")
    mech = mbfg.load_mechanism("fourbar", overrides={"planar_bodies[1].mass": 2.5,
                                                     "gravity": (0.0, -1.62)})
    assert mech.spec.bodies[1].mass == 2.5 and mech.spec.bodies[1].cog == base.spec.bodies[1].cog
    np.testing.assert_array_equal(mech.gravity, [0.0, -1.62])
    for bad, words in [({"planar_bodies[9].mass": 1.0}, "out of range"),
                       ({"planar_bodies[1].mass": -1.0}, "positive"),
                       ({"planar_bodies[1].mass": float("nan")}, "finite"),
                       ({"planar_bodies[1].cog": 1.0}, "pair"),
                       ({"gravity": 3.0}, "pair"),
                       ({"points[0].x": 1.0}, "unknown override")]:
        with pytest.raises(UsageError, match=words):
            mbfg.load_mechanism("fourbar", overrides=bad)
