"""Result containers: plain numpy arrays, saved to ``.npz`` or CSV for other tools."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class TrajectoryResult:
    """A solved trajectory.

    Attributes
    ----------
    t : (T,) [s]
    q, qd, qdd : (T, n) positions, velocities, accelerations
    Q : (T, n) applied generalized forces (zeros in forward dynamics without loads)
    coords : tuple of str, coordinate names
    z, zd, zdd : (T, d) independent coordinates, or None
    indices : independent-coordinate indices, or None
    position_residual, velocity_residual : (T,) ||Phi(q_k)||, ||Phi_q qdot_k||
    stats : dict of solver statistics (iterations, errors, time, ...)
    """
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    Q: np.ndarray
    coords: tuple
    z: np.ndarray | None = None
    zd: np.ndarray | None = None
    zdd: np.ndarray | None = None
    indices: tuple | None = None
    position_residual: np.ndarray | None = None
    velocity_residual: np.ndarray | None = None
    stats: dict = field(default_factory=dict)

    def save(self, path) -> Path:
        """Write ``.npz`` (arrays t, q, qd, qdd, Q, coords, ...) or ``.csv`` (one row per step:
        t, then q, qd, qdd, Q per coordinate), chosen by the file extension."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            return self.save_csv(path)
        arrays = dict(t=self.t, q=self.q, qd=self.qd, qdd=self.qdd, Q=self.Q,
                      coords=np.array(self.coords))
        for name in ("z", "zd", "zdd", "position_residual", "velocity_residual"):
            val = getattr(self, name)
            if val is not None:
                arrays[name] = val
        if self.indices is not None:
            arrays["indices"] = np.asarray(self.indices)
        np.savez(path, **arrays)
        return path

    def save_csv(self, path) -> Path:
        path = Path(path)
        header = ["t"] + [f"{kind}_{c}" for kind in ("q", "qd", "qdd", "Q") for c in self.coords]
        data = np.column_stack([self.t, self.q, self.qd, self.qdd, self.Q])
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            for row in data:
                w.writerow([f"{v:.17g}" for v in row])
        return path


__all__ = [
    "TrajectoryResult"
]
