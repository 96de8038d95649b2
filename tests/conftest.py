"""Shared fixtures: bundled mechanisms and reference-data locations."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest

import matplotlib

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[1]
MECHANISMS = REPO / "mechanisms"
SHARED = Path(os.environ.get("MBFG_SHARED", REPO.parent / "shared"))
REFERENCE_DATA = SHARED / "reference-data"

# Mechanisms used by the parametrized Jacobian suites (issue 2 and 3).
FD_MECHANISMS = ["fourbar", "fourbar-crank-angle", "pendulum2", "pendulum3", "slider-crank",
                 "quick-return", "pick-and-place-robot"]


@functools.lru_cache(maxsize=None)
def load(name: str):
    """Load (once per session) a bundled mechanism by file stem."""
    import mbfg
    return mbfg.load_mechanism(MECHANISMS / f"{name}.yaml")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def reference_file(*parts) -> Path:
    path = REFERENCE_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"reference data not found: {path}")
    return path
