"""The common output of every state estimator (factor-graph ones and the filter baselines),
so that the benchmark harness can compare them."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class EstimationResult:
    """State estimates of a run.

    Attributes
    ----------
    name : str
        Estimator label (``"fg-smoother"``, ``"ekf"``, ``"ukf"``, ``"pf"``, ...).
    t : (T,) [s]
    q, qd, qdd : (T, n)
        Estimated positions, velocities, accelerations.  For online estimators these are the
        causal (filtered) estimates: step k uses readings up to step k only.
    q_smoothed, qd_smoothed, qdd_smoothed : (T, n) or None
        Estimates after smoothing (fixed-lag window or whole batch), when available.
    z_std, zd_std : (T, d) or None
        Standard deviations of the independent coordinates and their rates, when the
        estimator provides covariances.
    forces : (T, n) or None
        Estimated unknown generalized forces [N, N m] (estimators with a force state; zero on
        the coordinates without one).
    stats : dict
        At least ``ms_per_step``; anything else useful (iterations, branch probabilities...).
    """
    name: str
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    q_smoothed: np.ndarray | None = None
    qd_smoothed: np.ndarray | None = None
    qdd_smoothed: np.ndarray | None = None
    z_std: np.ndarray | None = None
    zd_std: np.ndarray | None = None
    forces: np.ndarray | None = None
    stats: dict = field(default_factory=dict)

    def save(self, path):
        """Write the arrays to ``.npz``."""
        arrays = {k: v for k, v in self.__dict__.items()
                  if isinstance(v, np.ndarray)}
        arrays["name"] = np.array(self.name)
        np.savez(path, **arrays)
        return path


__all__ = [
    "EstimationResult"
]
