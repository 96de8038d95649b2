"""Inverse dynamics (issue 4, item 3 and 8) against published data (MSC ADAMS) and against an
independent per-state solution of the equations of motion."""
import numpy as np
import pytest

from conftest import load, reference_file
from mbfg.errors import MbfgError
from mbfg.drivers.inverse_dynamics import solve_inverse_dynamics
from mbfg.io import read_table, read_trajectory
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.trajectories import l_path


@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_fourbar_crank_torque_matches_adams(coords):
    mech = load("fourbar-crank-angle")
    t, theta = read_trajectory(reference_file("ground-truth", "fourbars1-with-rel-angle-trajectory.txt"))
    adams = read_table(reference_file("ground-truth", "InverseDynamics_4bars_MSC.tab"))
    np.testing.assert_allclose(adams[:, 0], t, atol=1e-9)
    res = solve_inverse_dynamics(mech, t, theta, [4], coords=coords)
    torque_adams = -adams[:, 1]          # ADAMS reports the opposite sign (reference README)
    rms = np.sqrt(np.mean((res.Q[:, 4] - torque_adams) ** 2))
    assert rms <= 0.01 * np.max(np.abs(torque_adams)), rms
    following = np.degrees(np.max(np.abs(res.q[:, 4] - theta[:, 0])))
    assert following <= 1e-3
    assert np.max(res.position_residual) <= 1e-6
    assert np.all(res.Q[:, :4] == 0.0)   # only the crank is actuated


def _exact_robot_motion(mech, t):
    """The L path's q, qdot, qddot from inverse kinematics with the path's analytic
    derivatives (Eqs. 11-12), independent of the factor graph."""
    xy, xyd, xydd = l_path(t)
    return K.inverse_kinematics_point_path(mech, 6, xy, xy_dot=xyd, xy_ddot=xydd)


def _away_from(t, instants, margin):
    keep = np.ones(t.size, bool)
    for tc in instants:
        keep &= np.abs(t - tc) > margin
    return keep


def test_robot_follows_l_path_from_reference_angles():
    mech = load("pick-and-place-robot")
    t, angles = read_trajectory(reference_file("ground-truth", "pick-and-place-robot-trajectory.txt"))
    res = solve_inverse_dynamics(mech, t, angles, [20, 21])
    xy, _, _ = l_path(t)
    ix = mech.coordinate_names.index("x6")
    deviation = np.max(np.hypot(*(res.q[:, ix:ix + 2] - xy).T))
    assert deviation <= 0.02e-3, deviation
    # the reference angles are rounded to 8 digits, which second differences turn into
    # ~1 N m of torque noise; the torques still agree with the exact ones to 1 % RMS of peak
    q, qd, qdd = _exact_robot_motion(mech, t)
    exact = np.stack([D.inverse_dynamics(mech, q[k], qd[k], qdd[k], [20, 21])
                      for k in range(t.size)])[:, [20, 21]]
    rms = np.sqrt(np.mean((res.Q[:, [20, 21]] - exact) ** 2, axis=0))
    assert np.all(rms <= 0.01 * np.max(np.abs(exact), axis=0)), rms


@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_robot_torques_smooth_and_exact_from_inverse_kinematics(coords):
    """Desired motor angles from inverse kinematics of the L path (full precision): away from
    the instants where the path's acceleration jumps (t = 0, 2.5, 5 s), the torques equal the
    exact per-state inverse dynamics and change from step to step only as much as they do
    (the corner itself, an acceleration jump of the path, rings for ~20 steps, +-20 N m at
    the jump)."""
    mech = load("pick-and-place-robot")
    t = np.arange(1001) * 5e-3
    q, qd, qdd = _exact_robot_motion(mech, t)
    res = solve_inverse_dynamics(mech, t, q[:, [20, 21]], [20, 21], coords=coords)
    exact = np.stack([D.inverse_dynamics(mech, q[k], qd[k], qdd[k], [20, 21])
                      for k in range(t.size)])[:, [20, 21]]
    tau = res.Q[:, [20, 21]]
    peak = np.max(np.abs(exact))
    keep = _away_from(t, (0.0, 2.5, 5.0), 0.1)  # the trapezoidal rule rings ~0.1 s after a jump
    assert np.max(np.abs(tau - exact)[keep]) <= 1e-3 * peak
    jumps = np.abs(np.diff(tau, axis=0) - np.diff(exact, axis=0))[keep[1:] & keep[:-1]]
    assert np.max(jumps) <= 1e-3 * peak
    xy, _, _ = l_path(t)
    ix = mech.coordinate_names.index("x6")
    assert np.max(np.abs(res.q[:, ix:ix + 2] - xy)) <= 0.02e-3


def test_inverse_dynamics_rejects_bad_requests():
    mech = load("fourbar-crank-angle")
    t = np.arange(5) * 0.01
    with pytest.raises(MbfgError, match="value column"):
        solve_inverse_dynamics(mech, t, np.zeros((5, 2)), [4])
    with pytest.raises(MbfgError, match="out of range"):
        solve_inverse_dynamics(mech, t, np.zeros((5, 1)), [9])
    with pytest.raises(MbfgError, match="independent coordinates"):
        solve_inverse_dynamics(mech, t, np.zeros((5, 2)), [0, 4])
    with pytest.raises(MbfgError, match="uniformly spaced"):
        solve_inverse_dynamics(mech, np.array([0, 0.1, 0.3, 0.4, 0.5]), np.zeros((5, 1)), [4])


def test_consistent_stages_converge_at_rounding_level():
    """A prescribed motion whose velocity stage has a zero optimum (a crank spin-up of the
    slider-crank in independent coordinates) converges instead of creeping at rounding level,
    and gives the dependent formulation's torque."""
    mech = load("slider-crank")
    k = mech.coordinate_index("theta0")
    t = np.arange(401) * 1e-3
    theta = mech.q0[k] + 2.0 * t + 3.0 * t ** 2
    dep = solve_inverse_dynamics(mech, t, theta[:, None], [k])
    ind = solve_inverse_dynamics(mech, t, theta[:, None], [k], coords="independent")
    assert ind.stats.converged
    np.testing.assert_allclose(ind.Q[:, k], dep.Q[:, k], rtol=0,
                               atol=1e-4 * np.abs(dep.Q[:, k]).max())


@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_skipped_force_stage_equals_its_solve(coords, monkeypatch):
    """The force stage keeps its start (the velocity stage's optimum with the model's inverse
    dynamics forces) when its dynamics rows are met there; solving it anyway moves nothing."""
    import mbfg.drivers.inverse_dynamics as ID
    mech = load("fourbar-crank-angle")
    t, theta = read_trajectory(reference_file("ground-truth", "fourbars1-with-rel-angle-trajectory.txt"))
    t, theta = t[:400], theta[:400]
    skipped = solve_inverse_dynamics(mech, t, theta, [4], coords=coords)
    assert skipped.stats["stages"][-1]["iterations"] == 0
    monkeypatch.setattr(ID, "_already_optimal", lambda *a: False)
    solved = solve_inverse_dynamics(mech, t, theta, [4], coords=coords)
    assert solved.stats["stages"][-1]["iterations"] >= 1
    scale = np.max(np.abs(solved.Q[:, 4]))
    np.testing.assert_allclose(skipped.Q[:, 4], solved.Q[:, 4], rtol=0, atol=1e-7 * scale)
    np.testing.assert_allclose(skipped.q, solved.q, rtol=0, atol=1e-9 * np.max(np.abs(solved.q)))
