"""The configuration loop of a one-degree-of-freedom mechanism (kinematics.sweep_loop) and the
coordinate-free dynamics step (integrate.dependent_step) that the gap search uses around it.

References are independent of the code under test: the constraint residual, the crank's
angle covering a full turn (a Grashof crank), the same loop in other units, and DOP853 at
tight tolerance (integrate_reference) for the step."""
import numpy as np
import pytest

from mbfg.model import constraints as C
from mbfg.model.integrate import dependent_step, integrate_reference
from mbfg.model.kinematics import sweep_loop
from mbfg.model.scales import constraint_scales, coordinate_scales, mechanism_scales
from mbfg.model.sensors import wrap_angle
from mbfg.testing import random_mechanism

FAMILIES = ["crank-rocker", "double-rocker", "triple-rocker", "slider-crank-offset",
            "quick-return", "shaper", "six-bar", "chain-1"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_loop_closes_assembled_and_the_same_in_other_units(family):
    """From q0 the walk comes back to q0; every configuration is assembled, the steps are at
    most twice the spacing (in units of the scales: the corrector, holding one coordinate,
    can land up to half a step beyond the predictor where the loop bends) and the loop is the same at 1 cm / 1 g and at
    4 m / 200 kg."""
    loops = []
    for length, mass in [(0.01, 0.001), (4.0, 200.0)]:
        model = random_mechanism(family, 31, length=length, mass=mass).load()
        q, held, closed = sweep_loop(model, model.q0, 0.1)
        assert closed and len(q) >= 10
        assert np.max(np.abs(C.position_constraints(model, q)) / constraint_scales(model, q)) <= 1e-9
        s = coordinate_scales(model)
        d = np.diff(q, axis=0) / s
        d[:, model.angle_coords] = wrap_angle(d[:, model.angle_coords])
        assert np.max(np.linalg.norm(d, axis=1)) <= 0.2           # a chord over the bend
        loops.append((q / s, held))
    np.testing.assert_allclose(loops[0][0], loops[1][0], atol=1e-8)
    np.testing.assert_array_equal(loops[0][1], loops[1][1])


def test_the_loop_of_a_crank_covers_its_whole_turn():
    """A Grashof crank-rocker's loop visits every crank angle: no gap between the visited
    crank angles (modulo a turn) wider than 0.15 rad."""
    model = random_mechanism("crank-rocker", 31, length=1.0, mass=1.0).load()
    k = int(model.angle_coords[0])
    q, _, closed = sweep_loop(model, model.q0, 0.1)
    a = np.sort(np.mod(q[:, k], 2 * np.pi))
    assert closed and np.max(np.diff(np.append(a, a[0] + 2 * np.pi))) < 0.15


@pytest.mark.parametrize("family", ["double-rocker", "quick-return", "shaper"])
def test_the_dependent_step_follows_the_classical_integrator(family):
    """Released from q0 with a rate, 13 steps of 0.02 / omega_c stay within 1e-7 of the
    mechanism's length of DOP853 (rtol 1e-11) and assembled, at 1 cm and at 4 m."""
    for length, mass in [(0.01, 0.001), (4.0, 200.0)]:
        model = random_mechanism(family, 31, length=length, mass=mass).load()
        s = coordinate_scales(model)
        ell = mechanism_scales(model).length
        wc = float(np.sqrt(np.hypot(*model.gravity) / ell))
        dt = 0.02 / wc
        _, held, _ = sweep_loop(model, model.q0, 0.1)
        t0 = np.linalg.svd(C.constraint_jacobian(model, model.q0) * s)[2][-1]
        t0 = t0 * np.sign(t0[np.argmax(np.abs(t0))]) * s
        qd0 = 0.5 * wc * t0                               # along the loop, 0.5 omega_c
        ref = integrate_reference(model, 13 * dt, dt, q0=model.q0, qd0=qd0, rtol=1e-11,
                                  atol=1e-11 * ell)
        q, qd = np.asarray(model.q0, float)[None], ref.qd[:1]
        for _ in range(13):
            q, qd, _, ok = dependent_step(model, q, qd, dt, None, None, None)
            assert ok.all()
        err = (q[0] - ref.q[13]) / s
        err[model.angle_coords] = wrap_angle(err[model.angle_coords])
        assert np.max(np.abs(err)) < 1e-7, (family, length, np.max(np.abs(err)))
