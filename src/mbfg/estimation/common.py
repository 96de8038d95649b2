"""Pieces every recursive estimator shares (the role of filterpy's ``common`` and
``monte_carlo`` modules): readings handling, process-noise discretization, sigma points,
resampling, angle-aware innovations and means, and the filters' common set-up.

The physics the filters need (position problem, independent-coordinate dynamics, their
Jacobians, the integration step) lives in :mod:`mbfg.model`
(:func:`~mbfg.model.kinematics.solve_positions_batch`,
:func:`~mbfg.model.dynamics.independent_state`,
:func:`~mbfg.model.dynamics.manifold_jacobians`,
:func:`~mbfg.model.integrate.independent_step`); this module only holds estimation
bookkeeping.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import SolverError
from mbfg.model.dynamics import manifold_jacobians
from mbfg.model.kinematics import choose_independent_coordinates, solve_positions_batch
from mbfg.model.sensors import SensorSet, readings_on_grid, wrap_angle
from mbfg.results import EstimationResult, Stats

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.dynamics import IndependentState
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.partition import StatePartition

__all__ = ["sensor_set", "assumed_sigmas", "readings_by_step", "prepare_readings",
           "predict_readings", "innovation", "reading_variances", "gate", "check_probability",
           "normalized_square", "observation_jacobian",
           "white_acceleration_noise", "unscented_weights", "unscented_moments", "sigma_points",
           "correlation_cholesky",
           "systematic_resample",
           "weighted_mean", "applied_forces", "initial_state", "error_map", "carried_covariance",
           "filter_result", "wrap_angle",
           "readings_on_grid"]


# =============================================================================== readings
def sensor_set(sensors: SensorSet, model: Mechanism) -> SensorSet:
    """``sensors`` as a :class:`SensorSet`, validated against ``model``."""
    sensors = sensors if isinstance(sensors, SensorSet) else SensorSet(sensors)
    sensors.validate(model)
    return sensors


def assumed_sigmas(sensors: Sequence, sensor_sigmas: ArrayLike | None = None) -> list[float]:
    """The sensor sigmas a filter assumes: each sensor's own ``sigma`` or ``sensor_sigmas``
    (a scalar or one per sensor, in each reading's units)."""
    if sensor_sigmas is None:
        return [s.sigma for s in sensors]
    return [float(x) for x in np.broadcast_to(np.asarray(sensor_sigmas, float), (len(sensors),))]


def readings_by_step(sensors: Sequence, readings: list, n_steps: int) -> list[list]:
    """Per step k of the grid, the list of ``(sensor index, values (dim,))`` read at k
    (:func:`mbfg.model.sensors.readings_on_grid` regrouped by step)."""
    per_step: list[list] = [[] for _ in range(int(n_steps))]
    for i, (values, present) in enumerate(readings_on_grid(sensors, readings, n_steps)):
        for k in np.flatnonzero(present):
            per_step[k].append((i, values[k]))
    return per_step


def prepare_readings(
    model: Mechanism,
    sensors: Sequence,
    readings: Sequence,
    n_steps: int,
    sensor_sigmas: ArrayLike | None = None,
) -> tuple[SensorSet, list[float], list[list]]:
    """A filter's view of its inputs: the validated :class:`SensorSet`, the sigmas it assumes
    (:func:`assumed_sigmas`) and the readings per step (:func:`readings_by_step`)."""
    sensors = sensor_set(sensors, model)
    return (sensors, assumed_sigmas(sensors, sensor_sigmas),
            readings_by_step(sensors, readings, n_steps))


def predict_readings(
    model: Mechanism,
    sensors: Sequence,
    available: list,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
) -> tuple:
    """Predicted readings of the sensors in ``available`` (``(index, values)`` pairs).

    Returns ``h`` (N, k) the stacked predictions at the N states, ``o`` (k,) the stacked
    readings and ``angular`` (k,) which components are angles."""
    hs, os_, ang = [], [], []
    for i, v in available:
        s = sensors[i]
        hs.append(s.measure(model, q, qd, qdd))
        os_.append(v)
        ang.append(np.full(s.dim, s.angular))
    return np.concatenate(hs, axis=-1), np.concatenate(os_), np.concatenate(ang)


def innovation(o: ArrayLike, h: ArrayLike, angular: np.ndarray) -> np.ndarray:
    """o - h, with the ``angular`` components wrapped to (-pi, pi]."""
    r = np.asarray(o, float) - h
    return np.where(angular, wrap_angle(r), r) if np.any(angular) else r


def observation_jacobian(
    model: Mechanism,
    sensors: Sequence,
    available: list,
    state: IndependentState,
    Q: ArrayLike | None = None,
    *,
    force_state: bool = False,
) -> np.ndarray:
    """Jacobian dh/dx (k, l) of the predicted readings of ``available`` at state 0 of
    ``state`` (an :class:`~mbfg.model.dynamics.IndependentState`) with respect to the filter
    state x = [z, zdot] (l = 2d) or, with ``force_state``, [z, zdot, a] (l = 3d) where a is an
    acceleration error added to the dynamics (qddot = S c + R (f(z, zdot, Q) + a), the
    errorEKF_FE of the review, Sect. 7.3).

    Chain rule: dh/dz = H_q R + H_v dqdot/dz + H_a dqddot/dz, dh/dzdot = H_v R + H_a
    dqddot/dzdot, dh/da = H_a R, with the sensors' exact Jacobians H and the model's
    manifold derivatives (:func:`mbfg.model.dynamics.manifold_jacobians`, forces ``Q`` (n,))."""
    avail, st, fe = available, state, force_state
    d = st.R.shape[-1]
    q, qd, qdd, R = st.q[0], st.qd[0], st.qdd[0], st.R[0]
    need_v = any("v" in sensors[i].slots or "a" in sensors[i].slots for i, _ in avail)
    need_a = any("a" in sensors[i].slots for i, _ in avail)
    mj = manifold_jacobians(model, st, Q, accelerations=need_a) if need_v else None
    l = 3 * d if fe else 2 * d
    blocks = []
    for i, _ in avail:
        s = sensors[i]
        J = s.jacobians(model, q, qd, qdd)
        H = np.zeros((s.dim, l))
        if "q" in J:
            H[:, :d] += J["q"] @ R
        if "v" in J:
            H[:, :d] += J["v"] @ mj.dqd_dz
            H[:, d:2 * d] += J["v"] @ R
        if "a" in J:
            H[:, :d] += J["a"] @ mj.dqdd_dz
            H[:, d:2 * d] += J["a"] @ mj.dqdd_dzd
            if fe:
                H[:, 2 * d:] += J["a"] @ R
        blocks.append(H)
    return np.concatenate(blocks, axis=0)


def gate(
    y: ArrayLike, S: ArrayLike, sensors: Sequence, available: list, probability: float | None
) -> np.ndarray:
    """Innovation gating: which stacked reading rows to use in an update.

    A sensor's reading is rejected as an outlier when its normalized innovation squared
    y_i^T S_ii^-1 y_i exceeds the chi-square quantile of ``probability`` for its dimension
    (a consistent filter then rejects a fraction 1 - probability of good readings).

    Parameters
    ----------
    y : (k,) innovation of the stacked readings of ``available``
    S : (k, k) its predicted covariance (H P H^T + R)
    sensors, available : the sensors and the ``(index, values)`` pairs read at this step
    probability : float in (0, 1), or None (no gating: every row is kept)

    Returns
    -------
    (k,) bool: rows to keep.
    """
    y, S = np.asarray(y, float), np.asarray(S, float)
    keep = np.ones(y.size, bool)
    if probability is None:
        return keep
    from scipy.stats import chi2
    r = 0
    for i, _ in available:
        dim = sensors[i].dim
        b = slice(r, r + dim)
        nis = normalized_square(y[b], S[b, b])
        keep[b] = nis <= chi2.ppf(probability, dim)
        r += dim
    return keep


def normalized_square(y: np.ndarray, S: np.ndarray) -> float:
    """y^T S^-1 y for y (k,), S (k, k); inf where S is numerically singular (readings absurdly
    far from the prediction: an innovation of 1e150 sigmas swamps the rest of a mixture's
    covariance)."""
    try:
        return float(y @ np.linalg.solve(S, y))
    except np.linalg.LinAlgError:
        return float("inf")


def check_probability(probability: float | None, name: str = "gate") -> float | None:
    """The option ``name`` (the ``probability`` of :func:`gate` by default, or a filter's
    other chi-square level), validated: None or a number in (0, 1)."""
    from mbfg.errors import UsageError
    if probability is None:
        return None
    try:
        p = float(probability)
    except (TypeError, ValueError):
        p = float("nan")
    if not 0.0 < p < 1.0:
        raise UsageError(f"{name} must be a probability in (0, 1) (e.g. 0.9999), "
                         f"got {probability!r}")
    return p


def reading_variances(sensors: Sequence, available: list, sigmas: list) -> np.ndarray:
    """(k,) variances of the stacked readings of ``available`` from per-sensor ``sigmas``."""
    return np.concatenate([np.full(sensors[i].dim, sigmas[i] ** 2) for i, _ in available])


# ========================================================================== process noise
def white_acceleration_noise(qc: float, dt: float, d: int) -> np.ndarray:
    """Discrete process noise (2d, 2d) of a continuous white acceleration noise of power
    spectral density ``qc`` (a number, or (d,) one per coordinate) on d coordinates, by Van
    Loan's method (review Sect. 12.1): qc [[dt^3/3, dt^2/2], [dt^2/2, dt]] per coordinate,
    for the state [z, zdot]."""
    Iq = np.eye(d) * np.asarray(qc, float)
    return np.block([[Iq * dt ** 3 / 3, Iq * dt ** 2 / 2], [Iq * dt ** 2 / 2, Iq * dt]])


# =========================================================================== sigma points
def unscented_weights(l: int, alpha: float = 1.0, beta: float = 2.0, kappa: float = 0.0) -> tuple:
    """Mean and covariance weights (2l+1,) and the spread zeta = sqrt(l + lambda) of the
    scaled unscented transform (review Eqs. 34-36), lambda = alpha^2 (l + kappa) - l."""
    lam = alpha ** 2 * (l + kappa) - l
    Wm = np.full(2 * l + 1, 1.0 / (2 * (l + lam)))
    Wc = Wm.copy()
    Wm[0] = lam / (l + lam)
    Wc[0] = Wm[0] + (1 - alpha ** 2 + beta)
    return Wm, Wc, float(np.sqrt(l + lam))


def unscented_moments(
    Wm: np.ndarray, Wc: np.ndarray, Y: np.ndarray, X: np.ndarray | None = None, *,
    first_order: bool = False,
) -> tuple:
    """Mean (m,) and covariance (m, m) of the transformed sigma points Y (2l+1, m) and, with
    the sigma points X (2l+1, l), their cross-covariance (l, m) (review Eqs. 38-39, 42-43).

    Taken about the central point: with D_i = Y_i - Y_0,
    ybar = Y_0 + sum_i>0 Wm_i D_i and P = sum_i>0 Wm_i D_i D_i^T + c (ybar - Y_0)(ybar - Y_0)^T,
    c = Wc_0 - Wm_0 - 1 = beta - alpha^2: the same sums as sum_i Wc_i (Y_i - ybar)(...)^T,
    without the cancellation between Wm_0 ~ -1/alpha^2 and the others that a small alpha
    (:func:`unscented_weights`) brings; P stays positive semi-definite for beta >= alpha^2.

    ``first_order``: ybar = Y_0 and c = 0, the linearization by central differences that the
    transform tends to as alpha -> 0 without its second-order mean shift, whose weights
    ~ 1/alpha^2 would amplify any roughness of the map at the sigma points' small spread."""
    c = 0.0 if first_order else Wc[0] - Wm[0] - 1.0
    D = Y[1:] - Y[0]
    shift = np.zeros(Y.shape[1]) if first_order else Wm[1:] @ D
    mean = Y[0] + shift
    cov = (Wm[1:, None] * D).T @ D + c * np.outer(shift, shift)
    if X is None:
        return mean, cov
    DX = X[1:] - X[0]
    cross = (Wm[1:, None] * DX).T @ D + c * np.outer(Wm[1:] @ DX, shift)
    return mean, cov, cross


def correlation_cholesky(P: ArrayLike) -> np.ndarray:
    """The lower-triangular L (l, l) with L L^T = P (l, l), a covariance, taken as the
    Cholesky factor of its correlation matrix (P scaled by its standard deviations) scaled
    back, so that a state mixing angles, lengths and rates factors the same in any units (a
    1 mm five-bar's P spans 1e12 between its point and angle variances); a jitter of a few
    ulps on the correlations keeps a semi-definite P factorizable."""
    P = np.asarray(P, float)
    sd = np.sqrt(np.maximum(np.diag(P), np.finfo(float).tiny))
    C = P / np.outer(sd, sd)
    return sd[:, None] * np.linalg.cholesky(C + 4 * np.finfo(float).eps * np.eye(P.shape[0]))


def sigma_points(x: ArrayLike, P: ArrayLike, zeta: float) -> np.ndarray:
    """The 2l+1 sigma points (rows) of mean ``x`` (l,) and covariance ``P`` (l, l):
    x, x + zeta L_i, x - zeta L_i with L = :func:`correlation_cholesky` (P)."""
    dX = zeta * correlation_cholesky(P).T
    return np.concatenate([x[None], x[None] + dX, x[None] - dX], axis=0)


# ============================================================================ resampling
def systematic_resample(
    weights: ArrayLike, rng: np.random.Generator, count: int | None = None
) -> np.ndarray:
    """``count`` (default ``weights.size``) indices drawn by systematic resampling of the
    normalized ``weights``."""
    M = weights.size if count is None else int(count)
    u = (rng.random() + np.arange(M)) / M
    c = np.cumsum(weights)
    c[-1] = 1.0
    return np.searchsorted(c, u)


def weighted_mean(
    values: ArrayLike, weights: ArrayLike, angular: Sequence[bool], reference: ArrayLike | None = None
) -> tuple:
    """Weighted mean of samples ``values`` (M, d) and their deviations from it (M, d).

    Angular columns use the circular mean (2015 particle-filter paper, footnote 6), unwrapped
    next to ``reference`` (d,) when given, and wrapped deviations."""
    values = np.asarray(values, float)
    w = np.asarray(weights, float)
    mean = w @ values
    dev = values - mean
    for j in np.flatnonzero(np.asarray(angular, bool)):
        m = np.arctan2(w @ np.sin(values[:, j]), w @ np.cos(values[:, j]))
        if reference is not None:
            m = reference[j] + wrap_angle(m - reference[j])
        mean[j] = m
        dev[:, j] = wrap_angle(values[:, j] - m)
    return mean, dev


# ================================================================================ set-up
def applied_forces(
    force: Callable, t: float, estimated: ArrayLike | None, indices: ArrayLike, n: int, count: int
) -> np.ndarray:
    """Applied generalized forces (count, n) at time t [s]: the known forces ``force(t)``
    (:func:`mbfg.model.forces.force_function`) plus ``estimated`` (count, d) on the
    independent coordinates (Q = B^T Q_z, so that R^T Q = Q_z), if given."""
    Q = force(t)
    out = np.zeros((count, n)) if Q is None else np.broadcast_to(np.asarray(Q, float), (count, n)).copy()
    if estimated is not None:
        out[:, indices] += estimated
    return out


def initial_state(
    model: Mechanism,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    indices: ArrayLike | None = None,
    partition: StatePartition | None = None,
) -> tuple:
    """A filter's start: q (1, n) assembled with its independent coordinates held, the
    independent coordinates (d,) (default
    :func:`~mbfg.model.kinematics.choose_independent_coordinates`; with ``partition``, a
    :class:`~mbfg.model.partition.StatePartition`, the best-conditioned set at q0 instead
    when that one is poor there) and their rates (d,)."""
    q0 = np.array(model.q0 if q0 is None else q0, float)
    idx = np.asarray(choose_independent_coordinates(model, q0) if indices is None
                     else tuple(int(i) for i in indices), int)
    if partition is not None:
        idx = np.asarray(partition(q0, idx), int)
    qa, ok = solve_positions_batch(model, q0, idx, q0[idx])
    if not ok[0]:
        raise SolverError("the initial guess q0 cannot be assembled with its independent "
                          "coordinates held")
    zd0 = np.zeros(idx.size) if qd0 is None else np.asarray(qd0, float)[idx]
    return qa, idx, zd0


# ================================================================= coordinate partition
def error_map(model: Mechanism, state: IndependentState, rows: ArrayLike, order: int) -> np.ndarray:
    """The map (order r, order d) from a filter's errors of [z, zdot] (``order`` 2) or
    [z, zdot, zddot] (3) in the independent coordinates of ``state`` (an
    :class:`~mbfg.model.dynamics.IndependentState` of one configuration, d coordinates) to
    the errors of the coordinates ``rows`` (r,) and their rates, to first order along the
    constraint manifold: dq = R dz, dqdot = R dzdot + (dqdot/dz) dz, and for the third block
    (an acceleration or force error) dqddot = R dzddot.

    With ``rows`` a new set of independent coordinates it carries a filter's covariance over
    to them (P' = T P T^T, the generalized coordinate partitioning of Wehage & Haug applied
    to the error state); with the filter's first set it gives the standard deviations of
    those coordinates after the filter has moved to others."""
    rows = np.asarray(rows, int)
    A = state.R[0][rows]
    r, d = A.shape
    T = np.zeros((order * r, order * d))
    for i in range(order):
        T[i * r:(i + 1) * r, i * d:(i + 1) * d] = A
    T[r:2 * r, :d] = manifold_jacobians(model, state, accelerations=False).dqd_dz[rows]
    return T


def carried_covariance(model: Mechanism, state: IndependentState, P: np.ndarray,
                       current: ArrayLike, rows: ArrayLike, order: int) -> np.ndarray:
    """A filter's covariance P of its errors in the independent coordinates ``current`` of
    ``state``, expressed on the coordinates ``rows``: P itself when they are the same set,
    T P T^T with T = :func:`error_map` otherwise."""
    if np.array_equal(current, rows):
        return P
    T = error_map(model, state, rows, order)
    return T @ P @ T.T


def filter_result(
    name: str,
    dt: float,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    z_std: ArrayLike,
    zd_std: ArrayLike,
    started: float,
    n_steps: int,
    extra: dict,
) -> EstimationResult:
    """The frozen :class:`EstimationResult` of a recursive filter; ``started`` is its
    ``time.perf_counter()`` at the start, ``extra`` its own statistics."""
    stats = Stats.of(name, time.perf_counter() - started, n_steps, n_steps, **extra)
    return EstimationResult(name=name, t=np.arange(n_steps) * dt, q=q, qd=qd, qdd=qdd,
                            z_std=z_std, zd_std=zd_std, stats=stats)
