"""The results every driver returns: one small frozen family with plain numpy arrays.

* :class:`TrajectoryResult`: a motion with its generalized forces (forward dynamics,
  :func:`mbfg.simulate`; inverse dynamics, :func:`mbfg.solve_inverse_dynamics`).
* :class:`EstimationResult`: state estimates from readings (:func:`mbfg.estimate`).
* :class:`Stats`: what the solver did (time, steps, iterations, convergence) and the
  driver-specific extras, in one frozen dataclass that also reads like a mapping
  (``res.stats["ms_per_step"]``).

Results are frozen: derive a changed one with :func:`dataclasses.replace`.  ``save`` writes
``.npz`` (every array, the coordinate names and the stats as JSON) or a tidy ``.csv``.
"""
from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Stats", "TrajectoryResult", "EstimationResult"]


@dataclass(frozen=True)
class Stats(Mapping):
    """Solver statistics shared by every driver.

    Attributes
    ----------
    solver : str
        What produced the result (``"smoother"``, ``"batch"``, ``"ekf"``, ...).
    seconds : float
        Wall time of the whole call [s].
    steps : int
        Number of time steps computed.
    iterations : int
        Total Gauss-Newton / filter update iterations (0 where it does not apply).
    converged : bool
        Whether every solve met its tolerance.
    extra : Mapping
        Driver-specific entries (``window``, ``switches``, ``stages``,
        ``branch_probability``, ...), listed in each driver's docstring.

    ``stats[key]`` reads a field or an ``extra`` entry; ``ms_per_step`` is derived.
    """
    solver: str
    seconds: float
    steps: int
    iterations: int = 0
    converged: bool = True
    extra: Mapping = field(default_factory=dict)

    @property
    def ms_per_step(self) -> float:
        """Wall time per step [ms]."""
        return 1e3 * self.seconds / max(self.steps, 1)

    @classmethod
    def of(cls, solver: str, seconds: float, steps: int, iterations: int = 0,
           converged: bool = True, **extra: Any) -> "Stats":
        """Stats with the driver-specific entries as keyword arguments."""
        return cls(str(solver), float(seconds), int(steps), int(iterations), bool(converged),
                   dict(extra))

    def with_extra(self, **extra: Any) -> "Stats":
        """A copy with more (or replaced) driver-specific entries."""
        return dataclasses.replace(self, extra={**self.extra, **extra})

    def _fields(self) -> dict:
        return dict(solver=self.solver, seconds=self.seconds, steps=self.steps,
                    iterations=self.iterations, converged=self.converged,
                    ms_per_step=self.ms_per_step)

    def __getitem__(self, key: str) -> Any:
        fields = self._fields()
        if key in fields:
            return fields[key]
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._fields()
        yield from (k for k in self.extra if k not in self._fields())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_json(self) -> str:
        """The stats as JSON (arrays as lists, non-finite numbers as strings)."""
        return json.dumps(dict(self), default=_jsonable, allow_nan=True)


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return repr(value)


def _write_npz(result, path: Path, extra: dict) -> Path:
    arrays = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
              if isinstance(getattr(result, f.name), np.ndarray)}
    arrays.update(extra)
    arrays["stats"] = np.array(result.stats.to_json())
    np.savez(path, **arrays)
    return path


def _write_csv(path: Path, header: list, columns: list) -> Path:
    data = np.column_stack(columns)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in data:
            w.writerow([f"{v:.17g}" for v in row])
    return path


@dataclass(frozen=True)
class TrajectoryResult:
    """A solved motion.

    Attributes
    ----------
    t : (T,) [s]
    q, qd, qdd : (T, n)
        Positions, velocities, accelerations in the model's coordinates [m, rad, per s, s^2].
    Q : (T, n)
        Applied generalized forces [N, N m] besides gravity: the solved motor forces in
        inverse dynamics, the given loads in forward dynamics (zeros without loads).
    coords : tuple of str
        Coordinate names (``Mechanism.coordinate_names``).
    z, zd, zdd : (T, d) or None
        Independent coordinates and their rates (independent-coordinate solves).
    indices : tuple of int or None
        Positions of the independent coordinates in q.
    position_residual, velocity_residual : (T,) or None
        ||Phi(q_k)|| and ||Phi_q qd_k|| (constraint violation of the result).
    stats : Stats
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
    stats: Stats = field(default_factory=lambda: Stats("none", 0.0, 0))

    def save(self, path: str) -> Path:
        """Write ``.npz`` (arrays t, q, qd, qdd, Q, coords, ..., stats as JSON) or ``.csv``
        (one row per step: t, then q, qd, qdd, Q per coordinate), chosen by the extension."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            return self.save_csv(path)
        extra = {"coords": np.array(self.coords)}
        if self.indices is not None:
            extra["indices"] = np.asarray(self.indices)
        return _write_npz(self, path, extra)

    def save_csv(self, path: Path) -> Path:
        """One row per step: t, then q, qd, qdd and Q of every coordinate."""
        header = ["t"] + [f"{kind}_{c}" for kind in ("q", "qd", "qdd", "Q") for c in self.coords]
        return _write_csv(Path(path), header, [self.t, self.q, self.qd, self.qdd, self.Q])


@dataclass(frozen=True)
class EstimationResult:
    """State estimates of a run.

    Attributes
    ----------
    name : str
        Estimator name in :data:`mbfg.estimation.ESTIMATORS` (``"fg-online"``, ``"ekf"``, ...).
    t : (T,) [s]
    q, qd, qdd : (T, n)
        Estimated positions, velocities, accelerations.  For online estimators these are the
        causal (filtered) estimates: step k uses readings up to step k only.
    q_smoothed, qd_smoothed, qdd_smoothed : (T, n) or None
        Estimates after smoothing (fixed-lag window or whole batch), when available.
    z_std, zd_std : (T, d) or None
        Standard deviations of the independent coordinates and their rates, when the
        estimator provides covariances.
    Q : (T, n) or None
        Estimated unknown generalized forces [N, N m] (estimators with a force state; zero on
        the coordinates without one).
    stats : Stats
        ``ms_per_step`` and the estimator's extras.
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
    Q: np.ndarray | None = None
    stats: Stats = field(default_factory=lambda: Stats("none", 0.0, 0))

    def with_stats(self, **extra: Any) -> "EstimationResult":
        """A copy whose stats have more (or replaced) driver-specific entries."""
        return dataclasses.replace(self, stats=self.stats.with_extra(**extra))

    def truncated(self, steps: int) -> "EstimationResult":
        """The first ``steps`` time steps of every per-step array (e.g. the part of a
        diverged run that is still finite)."""
        cut = {f.name: getattr(self, f.name)[:steps] for f in dataclasses.fields(self)
               if isinstance(getattr(self, f.name), np.ndarray)}
        return dataclasses.replace(self, **cut)

    def save(self, path: str) -> Path:
        """Write the arrays, the name and the stats (JSON) to ``.npz``, or the causal
        estimates to ``.csv`` (t, then q, qd, qdd per coordinate index)."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            n = self.q.shape[1]
            header = ["t"] + [f"{kind}_{i}" for kind in ("q", "qd", "qdd") for i in range(n)]
            return _write_csv(path, header, [self.t, self.q, self.qd, self.qdd])
        return _write_npz(self, path, {"name": np.array(self.name)})
