"""Shared fixtures: bundled mechanisms and reference-data locations."""
from __future__ import annotations

import functools
import os
import zlib
from pathlib import Path

# one BLAS thread per test process: pytest-xdist runs one process per core (pyproject), and
# BLAS threads on top of them would only contend for the same cores (set before numpy loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest

from mbfg.resources import bundled_mechanisms, reference_path
from mbfg.testing import random_assembled_state

import matplotlib

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[1]
# the mechanisms and reference data of the package under test (the installed one in CI)
MECHANISMS = bundled_mechanisms()["fourbar"].parent
REFERENCE_DATA = reference_path("README.md").parent

MOTOR_FOURBAR = """
gravity: [0, -9.81]
points:
  - { x: 0, y: 0, fixed: true }
  - { x: 2*cos(pi/3), y: 2*sin(pi/3) }
  - { x: 8.4125, y: 4.7413 }
  - { x: 10, y: 0, fixed: true }
planar_bodies:
  - {points: [0, 1], length: 2, mass: 2.2, I0: 3.1, cog: [1.1, 0.05]}
  - {points: [1, 2], length: 8, mass: 7.5, I0: 170, cog: [4.2, -0.1]}
  - {points: [2, 3], length: 5, mass: 5.4, I0: 44, cog: [2.4, 0.08]}
relative_coordinates:
  - { type: RelativeAngleAbsoluteDOF, points: [0, 1] }
friction:
  - {type: joint, bodies: [ground, 0], viscous: 0.5, coulomb: 0.3}
  - {type: joint, bodies: [0, 1], viscous: 0.2}
  - {type: joint, bodies: [1, 2]}
motors:
  - {coordinate: theta0, gain: 5.0}
"""
"""A motor-driven four-bar with joint friction (the identification tests' mechanism)."""

def bent_chain_yaml(links: int, friction: bool = False) -> str:
    """A ``links``-body pendulum chain hanging from fixed point 0 (bent, so that no row is
    degenerate), with relative angles on the first body (one fixed point) and a middle one;
    with ``friction``, viscous and Coulomb joint friction on three joints."""
    pts = ["  - { x: 0, y: 0, fixed: true }"]
    pts += [f"  - {{ x: {0.1 * k}, y: {-0.02 * k * k} }}" for k in range(1, links + 1)]
    bodies = [f"  - {{ points: [{k}, {k + 1}], length: auto, mass: {1.0 + 0.01 * k}, "
              f"I0: (1/3)*mass*length^2, cog: [0.5*length, 0.01] }}" for k in range(links)]
    angles = [f"  - {{ type: RelativeAngleAbsoluteDOF, points: [{k}, {k + 1}] }}"
              for k in (0, links // 2)]
    lines = ["points:", *pts, "planar_bodies:", *bodies, "relative_coordinates:", *angles]
    if friction:
        lines += ["friction:",
                  "  - {type: joint, bodies: [ground, 0], viscous: 0.3, coulomb: 0.2}",
                  "  - {type: joint, bodies: [3, 4], viscous: 0.2}",
                  f"  - {{type: joint, bodies: [{links - 2}, {links - 1}], viscous: 0.1}}"]
    return "\n".join(lines) + "\n"


# Mechanisms used by the parametrized Jacobian suites (issue 2 and 3).
FD_MECHANISMS = ["fourbar", "fourbar-crank-angle", "pendulum2", "pendulum3", "slider-crank",
                 "quick-return", "pick-and-place-robot"]


@functools.lru_cache(maxsize=None)
def load(name: str):
    """Load (once per session) a bundled mechanism by file stem."""
    import mbfg
    return mbfg.load_mechanism(MECHANISMS / f"{name}.yaml")


@functools.lru_cache(maxsize=None)
def fd_states(name):
    """(mech, [(q, qd, qdd), ...]): six seeded random assembled states of a bundled mechanism;
    with a relative angle, four of them have |sin(theta)| near 0.707 and near 1 (where the C++
    library switched equations)."""
    mech = load(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # hash() is salted per run
    out = [random_assembled_state(mech, rng) for _ in range(2)]
    if not mech.angle_coords.size:
        out += [random_assembled_state(mech, rng) for _ in range(4)]
    else:
        theta0 = mech.q0[mech.angle_coords[0]]
        for target in (np.pi / 4, np.pi / 2 - 1e-3):
            # move the first angle toward the target in its own quadrant/sense of motion
            out.append(random_assembled_state(mech, rng, angle=theta0 + 0.5 * (target - theta0)))
            out.append(random_assembled_state(mech, rng, angle=target))
    return mech, out


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def reference_file(*parts) -> Path:
    """A reference-data file of the package (fails, never skips, when it is missing)."""
    return reference_path(*parts)
