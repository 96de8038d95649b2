"""The results every driver returns: one small frozen family with plain numpy arrays.

* :class:`TrajectoryResult`: a motion with its generalized forces (forward dynamics,
  :func:`mbfg.simulate`; inverse dynamics, :func:`mbfg.solve_inverse_dynamics`).
* :class:`EstimationResult`: state estimates from readings (:func:`mbfg.estimate`).
* :class:`IdentificationResult`: identified physical parameters with their uncertainty and
  identifiability (:func:`mbfg.identify`); :class:`ValidationResult`: a held-out recording
  estimated with them (:func:`mbfg.cross_validate`).
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

__all__ = ["Stats", "TrajectoryResult", "EstimationResult", "IdentificationResult",
           "BaseParameters", "ValidationResult"]


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


@dataclass(frozen=True)
class BaseParameters:
    """The inertial base parameters of an identification: the combinations of the inertial
    coordinates of phi alone (m, m c_x, m c_y, I_O of the bodies, scaled as
    ``IdentificationResult.combination_scales``) that the data determine, the other parameters
    (friction coefficients, gains, biases) marginalized out.  They are the identifiable
    combinations of the identification literature; unlike ``IdentificationResult.directions``
    they do not mix in the other parameters.

    Attributes
    ----------
    spectrum : (k,)
        The data's information along each, descending (k: the number of inertial
        coordinates): eigenvalues of the Schur complement of the data information on the
        inertial coordinates.
    directions : (k, p)
        Unit rows in the coordinates of phi (zero on the non-inertial ones).
    identifiable : (k,) bool
        The data informs the direction more than the prior does.
    values, std, sampling_std : (k,)
        v . phi at the result, and its posterior and sampling standard deviations
        (dimensionless: phi is scaled).
    """
    spectrum: np.ndarray
    directions: np.ndarray
    identifiable: np.ndarray
    values: np.ndarray
    std: np.ndarray
    sampling_std: np.ndarray

    def errors(self, phi: np.ndarray) -> np.ndarray:
        """v . phi - value of each identified base parameter (signed, dimensionless), for
        ``phi`` (p,) in the same scaled coordinates (e.g. a ground truth's)."""
        return (self.directions @ np.asarray(phi, float) - self.values)[self.identifiable]


@dataclass(frozen=True)
class IdentificationResult:
    """Identified physical parameters (:func:`mbfg.identify`, docs/identification.md).

    Attributes
    ----------
    names, units : tuple of str (p,)
        Canonical parameter names (YAML paths) and the units of their values.
    values, initial, std : (p,)
        Identified values, the initial guesses (YAML), marginal standard deviations (the
        linearized posterior of the chart mapped by the delta method) [their units].
    correlation : (p, p)
        Correlation matrix of the values.
    theta, theta_covariance : (p,), (p, p)
        The unit-free chart coordinates (docs/identification.md) and their posterior
        covariance (prior included).
    information : (p, p)
        The data's information (posterior information minus the prior's) about the
        dimensionless coordinates phi the model is linear in: per parameter m, m c_x, m c_y,
        I_O or the value itself, divided by ``combination_scales``.
    spectrum : (p,)
        Eigenvalues of ``information``, descending; ``directions`` (p, p): row i the unit
        eigenvector (a combination of the phi coordinates, labelled by
        ``combination_labels``).
    identifiable : (p,) bool
        Direction i is seen by the data (its information exceeds the prior's along it); the
        others are null directions, decided by the prior.
    combination_labels, combination_scales, combination_values : (p,)
        Labels (``m[1]``, ``m*c_x[1]``, ``I_O[1]``, or the parameter name), scales (m_0,
        m_0 L, m_0 L^2 of the YAML, or the chart's reference value) and identified values of
        phi.
    states : tuple of EstimationResult
        The estimated states of each recording.
    costs : (R,)
        Per recording: sum of squared whitened residuals per reading (about 1 for a model and
        noise model consistent with the data).
    converged : bool
        Whether Levenberg-Marquardt met its tolerance (otherwise the values are the best point
        reached; ``stats["reason"]`` says why it stopped).
    stats : Stats
        ``iterations``, ``seconds``, ``initial_error``, ``final_error``, ``history``,
        ``reason``.
    sampling_std : (p,)
        The values' sampling standard deviations [their units]: their spread over repeated
        recordings when the model is exact up to its parameters, the readings' noise
        propagated through the estimate (:func:`mbfg.solvers.identification.
        sampling_covariance`).  ``std`` also counts the dynamics' process noise, the model's
        slack, which exact data do not have: ``sampling_std <= std`` (up to rounding), equal
        along null directions.  NaN when the banded Cholesky could not factor the system.
    sampling_covariance : (p, p)
        The same for theta (the chart).
    base_parameters : BaseParameters
        The identifiable combinations of the inertial parameters alone (friction, gains and
        biases marginalized out).
    """
    names: tuple
    units: tuple
    values: np.ndarray
    initial: np.ndarray
    std: np.ndarray
    correlation: np.ndarray
    theta: np.ndarray
    theta_covariance: np.ndarray
    information: np.ndarray
    spectrum: np.ndarray
    directions: np.ndarray
    identifiable: np.ndarray
    combination_labels: tuple
    combination_scales: np.ndarray
    combination_values: np.ndarray
    states: tuple
    costs: np.ndarray
    converged: bool
    stats: Stats = field(default_factory=lambda: Stats("none", 0.0, 0))
    sampling_std: np.ndarray | None = None
    sampling_covariance: np.ndarray | None = None
    base_parameters: BaseParameters | None = None

    @property
    def null_directions(self) -> np.ndarray:
        """(k, p) the directions (chart combinations) the data does not determine."""
        return self.directions[~np.asarray(self.identifiable, bool)]

    def _sampling_std(self) -> np.ndarray:
        return (np.full(len(self.names), np.nan) if self.sampling_std is None
                else np.asarray(self.sampling_std, float))

    def as_dict(self) -> dict:
        """The values by name (for ``mbfg.load_mechanism(..., overrides=...)`` use
        :func:`mbfg.drivers.identification.identified_mechanism`)."""
        return dict(zip(self.names, (float(v) for v in self.values)))

    def combination_text(self, i: int, digits: int = 3) -> str:
        """Direction i as text, e.g. ``+0.707 m[1]/7.5 -0.707 motors[0].gain/5`` (scaled
        coordinates; terms below 0.05 left out)."""
        return self.direction_text(self.directions[i], digits)

    def direction_text(self, v: np.ndarray, digits: int = 3) -> str:
        """A direction (p,) in the coordinates of phi as text (:meth:`combination_text`)."""
        big = np.flatnonzero(np.abs(v) >= 0.05)
        return " ".join(f"{v[j]:+.{digits}f} {self.combination_labels[j]}/"
                        f"{self.combination_scales[j]:.4g}" for j in big)

    def to_json(self) -> str:
        """Everything but the states, as JSON."""
        d = {
            "parameters": [{"name": n, "unit": u, "value": float(v), "initial": float(v0),
                            "std": float(s), "sampling_std": float(ss)} for n, u, v, v0, s, ss in
                           zip(self.names, self.units, self.values, self.initial, self.std,
                               self._sampling_std())],
            "correlation": self.correlation.tolist(),
            "chart": {"theta": self.theta.tolist(),
                      "covariance": self.theta_covariance.tolist(),
                      "sampling_covariance": (None if self.sampling_covariance is None else
                                              self.sampling_covariance.tolist())},
            "linear": {"labels": list(self.combination_labels),
                       "scales": self.combination_scales.tolist(),
                       "values": self.combination_values.tolist(),
                       "data_information": self.information.tolist()},
            "combinations": [{"information": float(s), "direction": d.tolist(),
                              "identifiable": bool(ok), "text": self.combination_text(i)}
                             for i, (s, d, ok) in enumerate(zip(self.spectrum, self.directions,
                                                                 self.identifiable))],
            "base_parameters": ([] if (b := self.base_parameters) is None else [
                {"information": float(lam), "direction": v.tolist(), "identifiable": bool(ok),
                 "value": float(x), "std": float(sd), "sampling_std": float(ss),
                 "text": self.direction_text(v)}
                for lam, v, ok, x, sd, ss in zip(b.spectrum, b.directions, b.identifiable,
                                                 b.values, b.std, b.sampling_std)]),
            "costs": [float(c) for c in self.costs],
            "converged": bool(self.converged),
            "stats": json.loads(self.stats.to_json()),
        }
        return json.dumps(d, indent=1, default=_jsonable)

    def save(self, path: str) -> Path:
        """Write :meth:`to_json` to ``path``."""
        path = Path(path)
        path.write_text(self.to_json() + "\n")
        return path

    def report(self) -> str:
        """A Markdown report: values with 95 % intervals, identifiable combinations, fit."""
        lines = ["# Identification report", "",
                 f"{'Converged' if self.converged else '**Not converged**'} after "
                 f"{self.stats.iterations} iterations in {self.stats.seconds:.2f} s "
                 f"({self.stats.extra.get('reason', '')}); cost per reading "
                 + ", ".join(f"{c:.4g}" for c in self.costs) + ".", "",
                 "std: the posterior's (the model's process noise counted); sampling std: the "
                 "readings' noise alone, the spread over repeated recordings if the model is "
                 "exact up to its parameters.", "",
                 "| parameter | initial | identified | std | 95 % interval | sampling std | "
                 "95 % interval (sampling) | unit |",
                 "|---|---|---|---|---|---|---|---|"]
        for n, u, v0, v, s, ss in zip(self.names, self.units, self.initial, self.values,
                                      self.std, self._sampling_std()):
            lines.append(f"| `{n}` | {v0:.6g} | {v:.6g} | {s:.3g} | "
                         f"[{v - 1.96 * s:.6g}, {v + 1.96 * s:.6g}] | {ss:.3g} | "
                         f"[{v - 1.96 * ss:.6g}, {v + 1.96 * ss:.6g}] | {u} |")
        lines += ["", "## Identifiable combinations", "",
                  "Eigen-decomposition of the data's information about the parameters in the "
                  "coordinates the model is linear in (m, m c, I_O or the value), each divided "
                  "by its YAML scale; a direction is *null* when the data informs it less than "
                  "the prior does (its value is then the prior's).", "",
                  "| # | information | std along it | status | combination |",
                  "|---|---|---|---|---|"]
        for i, (s, ok) in enumerate(zip(self.spectrum, self.identifiable)):
            std = 1.0 / np.sqrt(s) if s > 0 else float("inf")
            lines.append(f"| {i} | {s:.3e} | {std:.3g} | {'identified' if ok else '**null**'} | "
                         f"{self.combination_text(i)} |")
        b = self.base_parameters
        if b is not None and b.spectrum.size:
            lines += ["", "## Inertial base parameters", "",
                      "The combinations of the inertial coordinates alone (m, m c, I_O, scaled "
                      "as above) that the data determine, friction, gains and biases "
                      "marginalized out.", "",
                      "| # | value | std | sampling std | status | combination |",
                      "|---|---|---|---|---|---|"]
            for i, (x, sd, ss, ok, v) in enumerate(zip(b.values, b.std, b.sampling_std,
                                                        b.identifiable, b.directions)):
                lines.append(f"| {i} | {x:.6g} | {sd:.3g} | {ss:.3g} | "
                             f"{'identified' if ok else '**null**'} | {self.direction_text(v)} |")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ValidationResult:
    """States of a held-out recording estimated with fixed (identified) parameters
    (:func:`mbfg.cross_validate`).

    Attributes
    ----------
    t : (T,) [s]
    observations, dynamics : (T,)
        Per step: sum of the squared whitened residuals of the readings, and of the dynamics
        rows (model error).
    readings : (T,)
        Number of reading components per step.
    cost : float
        Sum of squared whitened residuals per reading (compare with the training
        ``IdentificationResult.costs``).
    states : EstimationResult
    converged : bool
    stats : Stats
    """
    t: np.ndarray
    observations: np.ndarray
    dynamics: np.ndarray
    readings: np.ndarray
    cost: float
    states: EstimationResult
    converged: bool
    stats: Stats = field(default_factory=lambda: Stats("none", 0.0, 0))

    def save(self, path: str) -> Path:
        """``.json`` (cost, stats and the per-step arrays) or ``.csv`` (t, observations,
        dynamics, readings per step)."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            return _write_csv(path, ["t", "observations", "dynamics", "readings"],
                              [self.t, self.observations, self.dynamics, self.readings])
        d = {"cost": float(self.cost), "converged": bool(self.converged),
             "stats": json.loads(self.stats.to_json()), "t": self.t.tolist(),
             "observations": self.observations.tolist(), "dynamics": self.dynamics.tolist(),
             "readings": self.readings.tolist()}
        path.write_text(json.dumps(d, default=_jsonable) + "\n")
        return path
