"""The seeded random-mechanism generator (mbfg.testing) and the trapezoidal "floor" integrator
(mbfg.model.integrate.integrate_trapezoidal)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import load

from mbfg.errors import ConvergenceError
from mbfg.model.dynamics import forward_dynamics
from mbfg.model.integrate import integrate_reference, integrate_trapezoidal
from mbfg.model.mechanism import initial_guess
from mbfg.model.spec import FixedSliderSpec, MobileSliderSpec
from mbfg.testing import FAMILIES, FAMILY_DOF, random_mechanism, random_mechanisms

EXTREME_SCALES = [(0.01, 0.001), (0.01, 500.0), (10.0, 0.001), (10.0, 500.0)]


def point_coordinates(mech) -> np.ndarray:
    """Indices in q of the point coordinates (not the relative angles)."""
    return mech.point_coords[mech.point_coords >= 0]


def scale_vector(mech, factor: float) -> np.ndarray:
    """``factor`` on the point coordinates, 1 on the angles."""
    s = np.ones(mech.n)
    s[point_coordinates(mech)] = factor
    return s


@pytest.mark.parametrize("family", FAMILIES)
def test_family_assembles_moves_and_has_its_dof(family):
    cases = [(seed, None, None) for seed in range(5)]
    cases += [(seed, L, M) for seed in (0, 1) for L, M in EXTREME_SCALES]
    for seed, length, mass in cases:
        gen = random_mechanism(family, seed, length=length, mass=mass)
        mech = gen.load()
        assert mech.dof == FAMILY_DOF[family] == gen.dof, gen.name
        assert gen.name.startswith(f"{family}-s{seed}-L")
        # the generator's positions are assembled: the loader had nothing to correct
        assert np.all(np.abs(mech.q0 - initial_guess(mech))
                      <= 1e-12 * scale_vector(mech, gen.length)), gen.name
        pts = point_coordinates(mech)
        qdd = forward_dynamics(mech, mech.q0, np.zeros(mech.n))
        assert np.max(np.abs(qdd[pts])) > 0.05 * 9.81, f"{gen.name} is at rest in equilibrium"
        if length is not None:
            assert gen.length == length and gen.mass == mass


def test_default_scales_are_drawn_in_range_and_angles_appear():
    gens = random_mechanisms(3 * len(FAMILIES), seed=11)
    assert [g.family for g in gens[:len(FAMILIES)]] == list(FAMILIES)
    assert all(0.01 <= g.length <= 10 and 0.001 <= g.mass <= 500 for g in gens)
    assert [g.yaml for g in gens] == [g.yaml for g in random_mechanisms(3 * len(FAMILIES), 11)]
    with_angle = sum("RelativeAngleAbsoluteDOF" in g.yaml for g in gens)
    assert 0.25 * len(gens) < with_angle < 0.75 * len(gens)
    with pytest.raises(ValueError, match="unknown mechanism family"):
        random_mechanism("four-bar", 0)


def _fourbar_class(spec) -> tuple:
    """(Grashof margin (p + q) - (s + l), index of the shortest of crank, coupler, rocker,
    ground) of a generated four-bar (crank, coupler, rocker bodies first)."""
    fixed = [np.array([p.x, p.y]) for p in spec.points if p.fixed]
    lengths = [b.length for b in spec.bodies[:3]] + [float(np.linalg.norm(fixed[1] - fixed[0]))]
    s, p, q, l = sorted(lengths)
    return (p + q) - (s + l), int(np.argmin(lengths))


@pytest.mark.parametrize("seed", range(4))
def test_families_have_their_character(seed):
    def gen(family):
        return random_mechanism(family, seed).load().spec

    grashof, shortest = _fourbar_class(gen("crank-rocker"))
    assert grashof > 0 and shortest == 0
    grashof, shortest = _fourbar_class(gen("double-rocker"))
    assert grashof > 0 and shortest == 1
    assert _fourbar_class(gen("triple-rocker"))[0] < 0

    spec = gen("triangle-coupler")
    tri = [b for b in spec.bodies if len(b.points) == 3]
    assert len(tri) == 1
    a, b, c = (np.array([spec.points[i].x, spec.points[i].y]) for i in tri[0].points)
    u, w = b - a, c - a
    assert abs(u[0] * w[1] - u[1] * w[0]) > 0.2 * np.linalg.norm(u) * np.linalg.norm(w)

    for family in ("slider-crank-offset", "slider-crank-inclined"):
        spec = gen(family)
        (slider,) = spec.constraints
        (xa, ya), (xb, yb) = slider.line
        incline = np.degrees(np.arctan2(yb - ya, xb - xa)) % 180
        offset = abs((xb - xa) * ya - (yb - ya) * xa) / np.hypot(xb - xa, yb - ya)
        if family == "slider-crank-offset":
            assert incline == 0 and offset > 0.01 * spec.parameters["L"]
        else:
            assert 15 <= min(incline, 180 - incline) <= 75

    for family, mobile, fixed in [("quick-return", 1, 0), ("shaper", 1, 2),
                                  ("oscillating-cylinder", 2, 0)]:
        spec = gen(family)
        kinds = [type(c) for c in spec.constraints]
        assert kinds.count(MobileSliderSpec) == mobile and kinds.count(FixedSliderSpec) == fixed
        for con in spec.constraints:  # every slot pivots about a fixed point
            if isinstance(con, MobileSliderSpec):
                assert spec.points[con.line_points[0]].fixed

    spec = gen("six-bar")
    assert len(spec.bodies) == 5 and sorted(len(b.points) for b in spec.bodies) == [2] * 4 + [3]
    assert sum(p.fixed for p in spec.points) == 3
    for k in range(1, 7):
        spec = gen(f"chain-{k}")
        assert len(spec.bodies) == k and not spec.constraints


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_scales_exactly(family):
    a = random_mechanism(family, 7, length=0.05, mass=2.0, gravity=9.81)
    b = random_mechanism(family, 7, length=50.0, mass=2e-3, gravity=9810.0)
    ma, mb = a.load(), b.load()
    assert ma.coordinate_names == mb.coordinate_names
    s = scale_vector(ma, 1000.0)
    np.testing.assert_allclose(mb.q0, s * ma.q0, rtol=1e-12, atol=1e-12 * b.length)
    qdd_a = forward_dynamics(ma, ma.q0, np.zeros(ma.n))
    qdd_b = forward_dynamics(mb, mb.q0, np.zeros(mb.n))
    np.testing.assert_allclose(qdd_b, s * qdd_a, rtol=1e-9,
                               atol=1e-11 * np.max(np.abs(s * qdd_a)))


@pytest.mark.parametrize("family, seed", [("shaper", 1), ("five-bar", 0)])
def test_trapezoidal_converges_at_second_order(family, seed):
    gen = random_mechanism(family, seed, length=1.0, mass=1.0)
    mech = gen.load()
    assert mech.angle_coords.size  # both cases exercise a relative angle
    pts = point_coordinates(mech)
    ref = integrate_reference(mech, 0.2, 4e-3, rtol=1e-12, atol=1e-12)
    errors = []
    for stride in (1, 2, 4):
        run = integrate_trapezoidal(mech, 0.2, 4e-3 / stride)
        errors.append(np.max(np.abs(run.q[::stride, pts] - ref.q[:, pts])))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((3.8 < ratios) & (ratios < 4.2)), (errors, ratios)


@pytest.mark.parametrize("family, seed", [("shaper", 1), ("chain-2", 0)])
def test_projected_trapezoidal_stays_on_the_manifold_at_second_order(family, seed):
    """The projected floor: constraints held to rounding, still second order."""
    from mbfg.model import constraints as C
    from mbfg.model.scales import mechanism_scales
    gen = random_mechanism(family, seed, length=0.05, mass=3.0)
    mech = gen.load()
    pts = point_coordinates(mech)
    ref = integrate_reference(mech, 0.2, 4e-3, rtol=1e-12, atol=1e-12)
    errors = []
    for stride in (1, 2, 4):
        run = integrate_trapezoidal(mech, 0.2, 4e-3 / stride, project=True)
        phi = np.abs(C.position_constraints(mech, run.q)) / mechanism_scales(mech).constraints
        assert phi.max() <= 1e-11
        vel = np.abs(np.einsum("tij,tj->ti", C.constraint_jacobian(mech, run.q), run.qd))
        assert vel.max() <= 1e-11 * np.abs(run.qd).max() * mechanism_scales(mech).constraints.max() / gen.length
        errors.append(np.max(np.abs(run.q[::stride, pts] - ref.q[:, pts])))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((3.6 < ratios) & (ratios < 4.4)), (errors, ratios)


def test_trapezoidal_floor_on_the_fourbar():
    mech = load("fourbar")
    run = integrate_trapezoidal(mech, 1.0, 1e-3)
    ref = integrate_reference(mech, 1.0, 1e-2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run.t[::10], ref.t)
    rmse = np.sqrt(np.mean((run.q[::10] - ref.q) ** 2))
    assert rmse < 1e-5  # m; about 5e-6 (and 1e-5 over 5 s)
    # the output is a consistent state: qdd is the dynamics at (q, qd)
    k = 500
    np.testing.assert_allclose(run.qdd[k], forward_dynamics(mech, run.q[k], run.qd[k]),
                               rtol=1e-12, atol=1e-12 * np.max(np.abs(run.qdd[k])))


def test_trapezoidal_forces_and_failure():
    mech = load("slider-crank")
    torque = np.zeros(mech.n)
    torque[mech.coordinate_index("theta0")] = 0.3
    by_array = integrate_trapezoidal(mech, 0.05, 1e-3, forces=torque)
    by_callable = integrate_trapezoidal(mech, 0.05, 1e-3, forces=lambda t: torque)
    free = integrate_trapezoidal(mech, 0.05, 1e-3)
    np.testing.assert_array_equal(by_array.q, by_callable.q)
    assert np.max(np.abs(by_array.q - free.q)) > 1e-6
    with pytest.raises(ConvergenceError, match="trapezoidal step"):
        integrate_trapezoidal(mech, 0.05, 1e-3, max_iter=1)
