"""Branch points: a motion that starts at one is refused with a LockupError naming the
undetermined coordinates; a motion through one on a branch continues on it."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import mbfg
from mbfg.errors import LockupError
from mbfg.model.inertia import kinetic_energy, potential_energy
from mbfg.model.kinematics import branch_point
from mbfg.resources import bundled_mechanisms
from mbfg.testing import random_mechanisms

PARALLELOGRAM = """
# A parallelogram four-bar (crank a, coupler b, rocker a, ground b): a change-point
# mechanism, a branch point wherever the four pivots are collinear.
parameters: {{a: 0.5, b: 1.0, angle: {angle}}}
points:
  - {{x: 0, y: 0, fixed: true}}
  - {{x: a*cos(angle), y: a*sin(angle)}}
  - {{x: a*cos(angle) + b, y: a*sin(angle)}}
  - {{x: b, y: 0, fixed: true}}
planar_bodies:
  - {{points: [0, 1], length: a, mass: 1.0, I0: mass*length^2/3, cog: [length/2, 0]}}
  - {{points: [1, 2], length: b, mass: 1.0, I0: mass*length^2/3, cog: [length/2, 0]}}
  - {{points: [3, 2], length: a, mass: 1.0, I0: mass*length^2/3, cog: [length/2, 0]}}
"""


def parallelogram(angle: float):
    return mbfg.mechanism_from_yaml(PARALLELOGRAM.format(angle=angle), "parallelogram")


@pytest.mark.parametrize("solver", ["smoother", "batch"])
def test_release_at_a_branch_point_is_refused(solver):
    mech = parallelogram(0.0)  # the four pivots on one line
    with pytest.raises(LockupError) as info:
        mbfg.simulate(mech, 0.1, 1e-3, solver=solver)
    assert info.value.time == 0.0
    assert set(info.value.coordinates) == {"y1", "y2"}


def test_cli_reports_the_branch_point_in_one_line(tmp_path):
    path = tmp_path / "parallelogram.yaml"
    path.write_text(PARALLELOGRAM.format(angle=0.0))
    check = subprocess.run([sys.executable, "-m", "mbfg", "check", str(path)],
                           capture_output=True, text=True)
    assert check.returncode == 0 and "branch point" in check.stdout
    run = subprocess.run([sys.executable, "-m", "mbfg", "simulate", str(path), "--t-end", "0.1"],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "branch point" in run.stderr


def test_motion_through_branch_points_stays_on_its_branch():
    """Released at 45 deg the parallelogram swings through its collinear configurations (the
    crank turns past 0 and 180 deg): it stays a parallelogram (y1 = y2) and its energy is
    conserved, as the equations of motion on that branch demand."""
    mech = parallelogram(np.pi / 4)
    assert branch_point(mech, mech.q0) == ()
    res = mbfg.simulate(mech, 2.0, 1e-3)
    angle = np.degrees(np.arctan2(res.q[:, 1], res.q[:, 0]))
    assert angle.min() < -170 and angle.max() > 170          # it passed the branch points
    assert np.abs(res.q[:, 1] - res.q[:, 3]).max() <= 1e-9 * 0.5
    E = kinetic_energy(mech, res.qd) + potential_energy(mech, res.q)
    assert np.abs(E - E[0]).max() <= 1e-6 * np.ptp(potential_energy(mech, res.q))


def test_ordinary_mechanisms_are_not_branch_points():
    """No false alarm on the bundled mechanisms (the robot's constraints are redundant
    everywhere, which is not a branch point) nor on generated ones."""
    for name in bundled_mechanisms():
        mech = mbfg.load_mechanism(name)
        assert branch_point(mech, mech.q0) == (), name
    for g in random_mechanisms(17, seed=5):
        mech = g.load()
        assert branch_point(mech, mech.q0) == (), g.name


def _with_chain(yaml_text: str, links: int) -> str:
    """The parallelogram's YAML with a ``links``-body pendulum chain added, hanging from a
    new fixed point below it (enough bodies for the sparse solves of mbfg.model.kkt)."""
    k0 = 4  # the parallelogram's points are 0-3
    pts = ["  - {x: 0, y: -2, fixed: true}"]
    pts += [f"  - {{x: {0.1 * k}, y: -2}}" for k in range(1, links + 1)]
    bodies = [f"  - {{points: [{k0 + k}, {k0 + k + 1}], length: 0.1, mass: 0.1, "
              f"I0: mass*length^2/3, cog: [length/2, 0]}}" for k in range(links)]
    head, tail = yaml_text.split("planar_bodies:\n")
    return head.rstrip("\n") + "\n" + "\n".join(pts) + "\nplanar_bodies:\n" + tail \
        + "\n".join(bodies) + "\n"


def test_branch_point_of_a_large_mechanism():
    """With a 130-link chain beside it (n + m = 398), the rank test first tries the sparse
    shortcut (full row rank by a wide margin); at the collinear parallelogram that shortcut
    must decline, and the branch point is still found and named."""
    from mbfg.model.kkt import uses_sparse
    from mbfg.model.kinematics import _clearly_full_row_rank
    from mbfg.model.scales import coordinate_scales

    for angle, expected in ((0.0, {"y1", "y2"}), (np.pi / 4, set())):
        text = _with_chain(PARALLELOGRAM.format(angle=angle), 130)
        mech = mbfg.mechanism_from_yaml(text, "parallelogram+chain")
        assert uses_sparse(mech.n, mech.m)
        assert _clearly_full_row_rank(mech, mech.q0, coordinate_scales(mech)) == (not expected)
        assert set(branch_point(mech, mech.q0)) == expected
