"""Shared fixtures: bundled mechanisms and reference-data locations."""
from __future__ import annotations

import functools
import zlib
from pathlib import Path

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
