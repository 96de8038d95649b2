"""The batched position solve keeps every body along its angle coordinate (Eq. 24a's angle
row d_x sin(theta) - d_y cos(theta) = 0 also holds with the body half a turn against its
angle: a Newton solve can reach that spurious root when a held angle jumps far).

The expected configurations come from the mechanism's geometry, not from the solver's jump:
the same angle reached in steps of a degree (each from the last, so on the guess's branch),
and the body vector's direction equal to the angle."""
import numpy as np
import pytest

from mbfg.benchmarking.estimation_review import review_fourbar
from mbfg.model import constraints as C
from mbfg.model.kinematics import solve_positions_batch
from mbfg.model.scales import constraint_scales, coordinate_scales
from mbfg.testing import random_mechanism


def _mechanisms():
    yield "review four-bar", review_fourbar()[1]
    for family, seed, length, mass in (("crank-rocker", 31, 0.01, 0.001),
                                       ("crank-rocker", 31, 4.0, 200.0),
                                       ("quick-return", 31, 0.01, 0.001),
                                       ("six-bar", 32, 4.0, 200.0),
                                       ("triple-rocker", 31, 0.01, 0.001)):
        yield f"{family} {length} m", random_mechanism(family, seed, length=length,
                                                       mass=mass).load()


@pytest.mark.parametrize("name,model", list(_mechanisms()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_far_held_angle_keeps_each_body_along_its_angle(name, model):
    """Holding the first angle coordinate 1.5-3 rad from the guess's (as the sigma points of
    a filter whose spread grew through a gap do), every solved configuration has each body
    along its angle (cosine +1) and, where one-degree steps reach that angle on the guess's
    branch, equals the configuration they reach."""
    k = int(model.angle_coords[0])
    q0 = np.asarray(model.q0, float)
    jumps = np.array([1.5, 2.2, 3.0, -1.8, -2.6])
    q, ok = solve_positions_batch(model, np.broadcast_to(q0, (jumps.size, model.n)), [k],
                                  q0[k] + jumps[:, None])
    for j, jump in enumerate(jumps):
        step = np.radians(1.0) * np.sign(jump)
        ref = q0[None].copy()
        reached = True
        for theta in q0[k] + np.append(np.arange(step, jump, step), jump):
            ref, good = solve_positions_batch(model, ref, [k], [[theta]])
            reached &= bool(good[0])
        if ok[j]:
            np.testing.assert_allclose(C.angle_orientation(model, q[j]), 1.0, atol=1e-9)
        if not reached:          # beyond a rocker's limit on this branch (the solve may find
            continue             # the angle on the other one)
        assert ok[j], (name, jump)
        assert np.max(np.abs(C.position_constraints(model, q[j]))
                      / constraint_scales(model, q[j])) <= 1e-9
        s = coordinate_scales(model)
        np.testing.assert_allclose(q[j] / s, ref[0] / s, atol=1e-7, err_msg=f"{name} {jump}")


def test_a_held_angle_whole_turns_away_is_taken_modulo_its_turns():
    """A diverged filter's sigma points can ask for an angle 1e6 rad away, and after a 4 s gap
    the UKF's reach beyond two turns.  The constraints repeat with each whole turn: the solve
    walks only the jump's part beyond whole turns (no million stages, nor an endless walk for
    1e300 rad) and lands where the same part lands, with the held angle as asked and the
    body along it; NaN and infinity fail; the rows do not disturb each other."""
    model = review_fourbar()[1]
    k = int(model.angle_coords[0])
    q0 = np.asarray(model.q0, float)
    jumps = np.array([1e6, np.nan, -5 * np.pi, 2.6, 6 * np.pi + 2.6, 1e300, np.inf])
    with np.errstate(invalid="ignore"):                       # sin(inf)
        q, ok = solve_positions_batch(model, np.broadcast_to(q0, (jumps.size, model.n)), [k],
                                      (q0[k] + jumps)[:, None])
    assert ok[[0, 2, 3, 4]].all() and not ok[[1, 6]].any()
    ok[5] = False    # 1e300 rad: some configuration along it (its turns are beyond precision)
    np.testing.assert_allclose(C.angle_orientation(model, q[ok]), 1.0, atol=1e-9)
    np.testing.assert_allclose(q[ok, k], q0[k] + jumps[ok])
    s = coordinate_scales(model)
    for j in np.flatnonzero(ok):
        part = float(np.remainder(jumps[j] + np.pi, 2 * np.pi) - np.pi)  # beyond whole turns
        step = np.radians(1.0) * np.sign(part)
        ref = q0[None].copy()
        for theta in q0[k] + np.append(np.arange(step, part, step), part):
            ref, good = solve_positions_batch(model, ref, [k], [[theta]])
            assert good[0]
        free = np.arange(model.n) != k
        np.testing.assert_allclose(q[j, free] / s[free], ref[0, free] / s[free], atol=1e-6,
                                   err_msg=str(jumps[j]))


def test_the_continuation_walks_at_most_half_a_turn_whatever_the_jump(monkeypatch):
    """The continuation itself (run for rows the plain solve left against their angle) walks
    each held angle's part beyond whole turns: a jump of 6.3e299 rad ends (rounding it to
    whole turns once left 7.4e283 rad to walk) and finite jumps land along the angle."""
    import mbfg.model.kinematics as K
    model = review_fourbar()[1]
    k = int(model.angle_coords[0])
    q0 = np.asarray(model.q0, float)
    jumps = np.array([6.3166967e299, 1e17, 40.0, -3.0])
    calls = []
    newton = K._newton_positions
    monkeypatch.setattr(K, "_newton_positions",
                        lambda *args: calls.append(1) or newton(*args))
    q, ok = K._positions_by_continuation(model, np.broadcast_to(q0, (4, model.n)).copy(),
                                         np.array([k]), (q0[k] + jumps)[:, None], 1e-12, 30)
    assert len(calls) <= int(np.ceil(np.pi / K.ANGLE_STAGE))
    assert ok[2:].all()
    np.testing.assert_allclose(C.angle_orientation(model, q[2:]), 1.0, atol=1e-9)
