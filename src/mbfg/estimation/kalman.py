"""Kalman-filter baselines in independent coordinates (Sanjurjo et al. 2017, the review of
nonlinear Kalman filters for multibody systems): the errorEKF (Sect. 7.1), its
force-estimating variant errorEKF_FE (Sect. 7.3), the UKF (Sects. 4.1, 4.4) and the DEKF
(Sect. 5).

Every filter is a pure function

    fn(model, sensors, readings, dt, n_steps, *, seed=0, q0=None, qd0=None, **options)
        -> EstimationResult

``model`` is the (possibly wrong) :class:`~mbfg.model.mechanism.Mechanism` the filter believes,
``sensors`` a :class:`~mbfg.model.sensors.SensorSet` (or a sequence of sensors) and ``readings`` the
per-sensor ``(steps, values)`` of :meth:`SensorSet.synthesize`.  ``q0, qd0`` are the initial
guess (default ``model.q0`` at rest).  The filter state is the independent coordinates
x = [z, zdot] (plus zddot for errorEKF_FE); z = q[indices] with ``indices`` chosen by
:func:`~mbfg.model.kinematics.choose_independent_coordinates` (relative angles first) unless
given.  Each step

1. predicts with the model's independent-coordinate dynamics, zddot = (R^T M R)^-1 R^T
   (Q_g + Q - M S c) (Eq. 20 of the review, Eq. 15 of the mbfg paper), integrated with the
   review's discretization: forward Euler for the DEKF (Eq. 49), the trapezoidal rule for
   the UKF and for the multibody model of the errorEKF family (Sect. 12.1; the covariance of
   the errorEKF family is propagated with the forward-Euler Jacobian of Eq. 50 / figure f);
2. reconstructs q, qdot, qddot from z by the position problem (Newton from the previous q:
   continuation keeps the assembly branch), the velocity problem qdot = R zdot and the
   acceleration problem qddot = S c + R zddot;
3. updates with the readings of that step (if any); sensor Jacobians by the chain rule:
   dh/dz = H_q R + H_v dqdot/dz + H_a dqddot/dz, dh/dzdot = H_v R + H_a dqddot/dzdot with
   dqdot/dz_j = -S (dPhi_q/dq . R_j) qdot exact and dqddot/d(z, zdot) from the exact
   dynamics Jacobians (:func:`~mbfg.model.dynamics.forward_dynamics_jacobians`).

Noise (review Sect. 12.1): P0 = 0.0076 I; sensor covariance sigma^2 of each sensor (or the
``sensor_sigmas`` option: what the filter assumes); plant noise from the continuous
acceleration noise PSD q_c = 9.162e-2 by Van Loan's method,
Sigma_P = q_c [[dt^3/3, dt^2/2], [dt^2/2, dt]] (per DOF), for the filters without acceleration
states; for errorEKF_FE a random walk on the acceleration, Sigma_P = diag(0, 0, sigma^2) with
sigma^2 = 2.291e-3.

Simplifications with respect to the review (see also each function):

* the review's errorEKF family integrates the model with an index-3 augmented Lagrangian and
  the trapezoidal rule; here the trapezoidal rule is applied to the independent-coordinate
  ODE (zddot from Eq. 20), solved by fixed-point iteration to 1e-10 (the review's UKF
  tolerance);
* the position correction after an update solves the position problem exactly (the review
  also allows the linearized Eq. 76; ``linear_position_correction=True`` gives it);
* the covariance update uses the Joseph form (same result, numerically safer);
* the UKF redraws sigma points from (x^-, P^-) for the measurement update instead of
  reusing the propagated ones (the review mentions both).

Where the independent coordinates cannot hold a step (the review's filters run on a
crank-rocker whose crank angle never turns back; a rocker's coordinates all do):

* the EKF family's position correction, where z + dz is beyond the held coordinates' reach,
  is taken in halves until the position problem has a solution (``_corrected_positions``;
  the review's linearized Eq. 76 was the fallback and left the constraints); a prediction
  step that passes their turning point is taken again in the coordinates best at its start;
* the UKF moves its coordinates where a sigma point (not only the mean) falls below the
  partition's ``keep``, halves the unscented transform's spread alpha where sigma points
  still do not assemble or step (Julier's scaled transform, moments then taken to first
  order: :func:`~mbfg.estimation.common.unscented_moments`), and in a gap of the readings
  holds its spread within a turn and the search's rate bound
  (:meth:`~mbfg.estimation.reacquisition.GapReacquisition.bounded_spread`).
docs/benchmarks.md, "The unscented filter crosses the gap", measures these on generated
mechanisms.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from mbfg.estimation.common import gate as _gate
from mbfg.estimation.common import (applied_forces, carried_covariance, check_probability,
                                    filter_result, initial_state, innovation,
                                    observation_jacobian, predict_readings, prepare_readings,
                                    reading_variances, sigma_points, unscented_moments,
                                    unscented_weights,
                                    white_acceleration_noise)
from mbfg.estimation.reacquisition import GapReacquisition
from mbfg.model.dynamics import independent_state, manifold_jacobians
from mbfg.model.forces import force_function
from mbfg.model.identification import characteristic_rate
from mbfg.model.integrate import independent_step
from mbfg.model.kinematics import solve_positions_batch
from mbfg.model.partition import (StatePartition, best_coordinate_sets, best_coordinates,
                                  coordinate_quality)
from mbfg.model.scales import coordinate_scales

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import SensorSet
    from mbfg.results import EstimationResult

__all__ = ["ekf", "ekf_fe", "ukf", "dekf", "review_noise", "REVIEW_P0", "REVIEW_QC",
           "REVIEW_SIGMA2_FE", "REVIEW_OMEGA_C", "REVIEW_DT"]

REVIEW_P0 = 0.0076
"""Initial covariance diagonal of the review's benchmark (Sect. 12.1) [rad^2]."""
REVIEW_QC = 9.162e-2
"""Continuous acceleration-noise PSD of the discrete filters without acceleration states
[rad^2 / s^3]."""
REVIEW_SIGMA2_FE = 2.291e-3
"""Acceleration random-walk variance per step of the errorEKF_FE [rad^2 / s^4]."""
REVIEW_OMEGA_C = 1.2579040944586701
"""omega_c = sqrt(|g| / ell) [1/s] of the review benchmark's model (the four-bar
``fourbar-review``, ell = 5.568 m, |g| = 8.81 m/s^2): the time scale of the review's noise
values (:func:`review_noise`)."""
REVIEW_DT = 0.005
"""The review benchmark's step [s]: ``REVIEW_SIGMA2_FE`` is a variance per step of this."""


def review_noise(model: Mechanism, indices: ArrayLike, dt: float, p0: float | None = None,
                 qc: float | None = None, sigma2_acc: float | None = None,
                 force_state: bool = False) -> tuple:
    """The filters' initial covariance and plant noise for the independent coordinates
    ``indices``: (P0, Sigma_P), (2d, 2d) for [z, zdot] (Van Loan's noise of q_c) or, with
    ``force_state``, (3d, 3d) for [z, zdot, zddot] (the acceleration random walk of
    errorEKF_FE).

    A value given is used as it is, in the units of the coordinates.  By default the review's
    values (Sect. 12.1) are carried over to this mechanism in its own scales: they are the
    review's on the review benchmark's model, and for another mechanism the same in units of
    its coordinate scale s (1 rad, or ell for a point coordinate,
    :func:`~mbfg.model.scales.coordinate_scales`) and of its time scale 1 / omega_c
    (omega_c = sqrt(|g| / ell), 1 / dt without gravity):

    * p0 = REVIEW_P0 s^2 on z, times (omega_c / REVIEW_OMEGA_C)^2 on zdot and times its
      square on zddot (the review's P0 = 0.0076 I holds rad^2, rad^2/s^2 and rad^2/s^4);
    * q_c = REVIEW_QC (omega_c / REVIEW_OMEGA_C)^3 s^2;
    * sigma2_acc = REVIEW_SIGMA2_FE (omega_c / REVIEW_OMEGA_C)^5 (dt / REVIEW_DT) s^2 (the
      same continuous random walk at another step).

    So the filters do the same on a mechanism and on its copy in other units (lengths times
    10^k with gravity), and on a 1 cm linkage as on a 4 m one; on a 1 cm linkage the review's
    q_c in rad and s would be about 20 000 times too small."""
    idx = np.asarray(indices, int)
    d = idx.size
    s = coordinate_scales(model)[idx]
    w = characteristic_rate(model)
    w = w if np.isfinite(w) else 1.0 / dt
    ratio = w / REVIEW_OMEGA_C
    order = 3 if force_state else 2
    # each block's unit: s, s omega_c, s omega_c^2 (in the review's time unit when omega_c is
    # the review's: the factors are then exactly 1)
    S = np.concatenate([s * ratio ** i for i in range(order)])
    P0 = np.diag(REVIEW_P0 * S * S if p0 is None else np.full(S.size, float(p0)))
    if not force_state:
        SigP = white_acceleration_noise(
            REVIEW_QC * ratio ** 3 * s * s if qc is None else float(qc), dt, d)
    else:
        SigP = np.zeros((3 * d, 3 * d))
        SigP[2 * d:, 2 * d:] = np.diag(
            REVIEW_SIGMA2_FE * ratio ** 5 * (dt / REVIEW_DT) * s * s if sigma2_acc is None
            else np.full(d, float(sigma2_acc)))
    return P0, SigP


def _stopped(exc: Exception, k: int, outputs: tuple, used: np.ndarray, idx: np.ndarray) -> str:
    """A filter's breakdown at step k (a singular matrix): its outputs from k on become NaN,
    the coordinates it used stay those of the last step; returns the ``stats["failure"]``
    text."""
    for a in outputs:
        a[k:] = np.nan
    used[k:] = idx
    return f"{exc} at step {k}"


# ======================================================================= EKF family
SHRINK_STEPS = 10
"""Halvings at most of a filter's step that leaves the region its independent coordinates
describe: the EKF family's correction (:func:`_corrected_positions`), the UKF's spread
(:func:`_local_sigma_points`)."""


def _corrected_positions(model, q, idx, z, dz):
    """The configuration (1, n) at the corrected coordinates z + part dz (d,), with part the
    largest of 1, 1/2, 1/4, ... (:data:`SHRINK_STEPS` halvings) at which the position
    problem from q (1, n) has a solution, and part (0 and q itself if none has).  A
    correction larger than the coordinates' reach (the first readings after a gap asking
    past a rocker's turning point) is taken as far as the mechanism goes, on the constraint
    manifold; the next readings carry on, in coordinates the partition chooses there."""
    part = 1.0
    for _ in range(SHRINK_STEPS + 1):
        qn, ok = solve_positions_batch(model, q, idx, z + part * dz)
        if ok[0]:
            return qn, part
        part *= 0.5
    return np.array(q, float), 0.0


def _ekf_family(name, model, sensors, readings, dt, n_steps, *, q0, qd0, fe, integrator,
                indices=None, forces=None, sensor_sigmas=None, p0=None, qc=None,
                sigma2_acc=None, linear_position_correction=False,
                exact_jacobian=False, gate=None, repartition=True, reacquire=True):
    t0 = time.perf_counter()
    gate = check_probability(gate)
    n_rejected = 0
    n_steps = int(n_steps)
    sensors, sig, per_step = prepare_readings(model, sensors, readings, n_steps, sensor_sigmas)
    partition = StatePartition(model, coordinate_scales(model)) if repartition else None
    q, idx, zd = initial_state(model, q0, qd0, indices, partition)
    d = idx.size
    n = model.n
    Qfun = force_function(forces, n)
    order = 3 if fe else 2
    l = order * d
    P, SigP = review_noise(model, idx, dt, p0, qc, sigma2_acc, fe)
    watch = GapReacquisition(model, sensors, per_step, sig, dt, Qfun, integrator,
                             enabled=reacquire)
    I = np.eye(d)
    if fe:
        F = np.block([[I, dt * I, 0 * I], [0 * I, I, dt * I], [0 * I, 0 * I, I]])
    else:
        F = np.block([[I, dt * I], [0 * I, I]])
    Qz = np.zeros((1, d)) if fe else None          # estimated force on z (errorEKF_FE)
    z = q[:, idx].copy()
    zd = zd[None].copy()
    st = independent_state(model, q, idx, zd, applied_forces(Qfun, 0.0, Qz, idx, n, 1))
    idx0 = idx                                     # the coordinates z_std reports
    used = np.empty((n_steps, d), int)
    switches = []

    out_q = np.empty((n_steps, n))
    out_qd = np.empty((n_steps, n))
    out_qdd = np.empty((n_steps, n))
    zstd = np.empty((n_steps, d))
    zdstd = np.empty((n_steps, d))
    force = np.empty((n_steps, d)) if fe else None
    zddstd = np.empty((n_steps, d)) if fe else None
    n_updates = 0
    n_shortened = 0                                # corrections taken in part
    failure = None

    def move_to(new, k, t):
        """The filter's state at time t (step k), its covariance, force and plant noise carried
        to the independent coordinates ``new``, and the switch recorded."""
        nonlocal P, Qz, idx, z, zd, st, SigP
        P = carried_covariance(model, st, P, idx, new, order)
        if fe:                                     # the same generalized force on the new ones
            Qz = np.linalg.solve(st.R[0][new].T, Qz[0])[None]
        idx = new
        z, zd = st.q[:, idx].copy(), st.qd[:, idx].copy()
        st = independent_state(model, st.q, idx, zd, applied_forces(Qfun, t, Qz, idx, n, 1))
        SigP = review_noise(model, idx, dt, p0, qc, sigma2_acc, fe)[1]
        switches.append((k, tuple(int(i) for i in idx)))

    try:
        for k in range(n_steps):
            tk = k * dt
            if k > 0:
                # ---- prediction: integrate the multibody model; x^- = 0 (error state, Eq. 69)
                Qk = applied_forces(Qfun, tk, Qz, idx, n, 1)
                st1, z1, zd1, held = independent_step(model, st.q, z, zd, st.zdd, idx, dt, Qk,
                                                      integrator)
                if not held[0] and partition is not None:
                    # the step passes the held coordinates' turning point: once more in the
                    # coordinates best at its start
                    best = np.asarray(best_coordinates(model, st.q[0], partition.scale)[0])
                    if not np.array_equal(best, idx):
                        move_to(best, k, tk - dt)
                        Qk = applied_forces(Qfun, tk, Qz, idx, n, 1)
                        st1, z1, zd1, _ = independent_step(model, st.q, z, zd, st.zdd, idx, dt,
                                                           Qk, integrator)
                if exact_jacobian:
                    mj = manifold_jacobians(model, st, applied_forces(Qfun, tk - dt, Qz, idx, n, 1)[0])
                    fz, fzd = mj.dqdd_dz[idx], mj.dqdd_dzd[idx]
                    F = F.copy()
                    # forward Euler of zd' = zd + dt (zdd(z, zd) + a)
                    F[d:2 * d, :d], F[d:2 * d, d:2 * d] = dt * fz, I + dt * fzd
                st, z, zd = st1, z1, zd1
                P = F @ P @ F.T + SigP                                       # Eq. 70
            found = watch.observe(k, st.q[0], idx, zd[0], np.sqrt(np.diag(P)[:d]),
                                  np.sqrt(np.diag(P)[d:2 * d]))
            if found is not None:          # the readings resumed after a gap: restart
                if fe:                     # a force learned elsewhere on the turn: afresh
                    Qz = np.zeros((1, d))
                new, zd = found.restart_coordinates(idx, partition)
                if not np.array_equal(new, idx):
                    idx = new
                    switches.append((k, tuple(int(i) for i in idx)))
                zd = zd[None]
                st = independent_state(model, found.q[None], idx, zd,
                                       applied_forces(Qfun, tk, Qz, idx, n, 1))
                z = st.q[:, idx].copy()
                P, SigP = review_noise(model, idx, dt, p0, qc, sigma2_acc, fe)
            avail = per_step[k]
            if avail:
                # ---- correction (Eqs. 71-75): innovation of the model's virtual sensors
                Qk = applied_forces(Qfun, tk, Qz, idx, n, 1)
                h, o, ang = predict_readings(model, sensors, avail, st.q, st.qd, st.qdd)
                y = innovation(o, h[0], ang)
                H = observation_jacobian(model, sensors, avail, st, Qk[0], force_state=fe)
                Rk = np.diag(reading_variances(sensors, avail, sig))
                Sk = H @ P @ H.T + Rk
                use = _gate(y, Sk, sensors, avail, gate)
                if not use.all():                        # outliers: update with the others only
                    n_rejected += int(np.sum(~use))
                    y, H, Rk = y[use], H[use], Rk[np.ix_(use, use)]
                    Sk = H @ P @ H.T + Rk
                K = np.linalg.solve(Sk, H @ P).T
                dx = K @ y                                                   # Eq. 74, x^- = 0
                A = np.eye(l) - K @ H
                P = A @ P @ A.T + K @ Rk @ K.T
                P = 0.5 * (P + P.T)
                # ---- feed the estimated errors back into the model (Sect. 7.1, 7.3)
                if linear_position_correction:
                    qn = st.q + (st.R[0] @ dx[:d])[None]                  # Eq. 76
                    qn[:, idx] = z + dx[:d]
                else:
                    qn, part = _corrected_positions(model, st.q, idx, z, dx[:d])
                    dx = part * dx
                    n_shortened += int(part < 1.0)
                dz, dzd = dx[:d], dx[d:2 * d]
                z = z + dz
                zd = zd + dzd
                if fe:
                    dzdd = dx[2 * d:]
                    Qz = Qz + (st.Mbar[0] @ dzdd)[None]                     # Eq. 80
                st = independent_state(model, qn, idx, zd, applied_forces(Qfun, tk, Qz, idx, n, 1))
                n_updates += 1
            if partition is not None:
                new = partition(st.q[0], idx)
                if not np.array_equal(new, idx):   # the coordinates near a singular set: move
                    move_to(new, k, tk)
            used[k] = idx
            out_q[k], out_qd[k], out_qdd[k] = st.q[0], st.qd[0], st.qdd[0]
            Pr = carried_covariance(model, st, P, idx, idx0, order)   # the first set's
            sd = np.sqrt(np.maximum(np.diag(Pr), 0.0))
            zstd[k], zdstd[k] = sd[:d], sd[d:2 * d]
            if fe:
                force[k] = Qz[0]
                zddstd[k] = sd[2 * d:]
    except np.linalg.LinAlgError as exc:  # singular: return what was computed before
        failure = _stopped(exc, k, (out_q, out_qd, out_qdd, zstd, zdstd)
                           + ((force, zddstd) if fe else ()), used, idx)
    stats = {"indices": tuple(int(i) for i in idx0), "integrator": integrator,
             "n_updates": n_updates, "shortened_corrections": n_shortened,
             "exact_jacobian": bool(exact_jacobian),
             "rejected_readings": n_rejected, "partition": used, "switches": switches,
             "reacquisitions": watch.log, "failure": failure}
    if fe:
        stats["force"] = force
        stats["zdd_std"] = zddstd
    return filter_result(name, dt, out_q, out_qd, out_qdd, zstd, zdstd, t0, n_steps, stats)


def ekf(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    seed: int = 0,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    integrator: str = "trapezoidal",
    gate: float | None = None,
    **options: Any,
) -> EstimationResult:
    """errorEKF (review Sect. 7.1): error state [dz, dzdot], x^- = 0; the multibody model is
    integrated on its own (trapezoidal rule, independent coordinates), the error covariance
    with the forward-Euler Jacobian F = [[I, dt I], [0, I]] (Eq. 50) and the van Loan plant
    noise of q_c; the virtual sensors are evaluated on the model (Eq. 71) and the estimated
    errors are fed back through the position and velocity problems.

    Options: ``indices`` (independent coordinates), ``forces`` ((n,) or t -> (n,) applied
    forces), ``sensor_sigmas`` (assumed sensor sigmas, default each sensor's), ``p0`` and
    ``qc`` (default: the review's 0.0076 and 9.162e-2 in the mechanism's own scales,
    :func:`review_noise`; a value given is in the coordinates' units), ``repartition``
    (True: move to the best-conditioned coordinates when the current ones approach a
    singular configuration, carrying the covariance over, docs/sensors.md;
    ``stats["switches"]``, ``stats["partition"]``), ``integrator`` ("trapezoidal" or "euler"),
    ``linear_position_correction`` (Eq. 76 instead of the exact position problem; without
    it a correction beyond the held coordinates' reach is taken only as far as the mechanism
    goes, ``stats["shortened_corrections"]`` counts those), ``exact_jacobian`` (False; True
    adds the errorEKF_EJ terms dzdd/dz, dzdd/dzdot of Sect. 7.2 to F, from the exact
    dynamics Jacobians), ``gate`` (None: every reading is used; a
    probability such as 0.9999: innovation gating, a sensor's reading whose normalized
    innovation squared exceeds that chi-square quantile is rejected as an outlier,
    :func:`mbfg.estimation.common.gate`; ``stats["rejected_readings"]`` counts them),
    ``reacquire`` (True: when the readings resume after a gap with the predicted spread of
    z or zdot beyond a quarter of the coordinate's scale (of omega_c times it), search the
    crank's turn against the next readings and restart where the filter has lost it,
    :mod:`mbfg.estimation.reacquisition`; ``stats["reacquisitions"]``; False: the filter as
    published).
    ``seed`` is unused (deterministic filter)."""
    return _ekf_family("ekf", model, sensors, readings, dt, n_steps, q0=q0, qd0=qd0, fe=False,
                       integrator=integrator, gate=gate, **options)


def ekf_fe(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    seed: int = 0,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    integrator: str = "trapezoidal",
    exact_jacobian: bool = True,
    gate: float | None = None,
    **options: Any,
) -> EstimationResult:
    """errorEKF_FE (review Sect. 7.3): error state [dz, dzdot, dzddot] with a random walk on the
    acceleration error (Sigma_P = diag(0, 0, sigma2_acc), sigma2_acc = 2.291e-3 on the review's
    model, in the mechanism's scales elsewhere (:func:`review_noise`);
    F = [[I, dt I, 0], [0, I, dt I], [0, 0, I]]).  After each update the acceleration
    correction becomes a generalized-force correction dQ = Mbar dzddot (Eq. 80) accumulated
    into an estimated force on the independent coordinates, applied in the following steps
    (``stats["force"]`` (T, d)).  Options as :func:`ekf` plus ``sigma2_acc``.

    The third state is read as the acceleration error due to the force error, a, a random
    walk (zddot = f(z, zdot, Q + Q_est) + a); its Jacobian column is H_a R, and the z and
    zdot columns include the dynamics derivatives as for :func:`ekf`.

    ``exact_jacobian`` (default True: the review counts the errorEKF_FE among the filters
    with the complete transition Jacobian): F = [[I, dt I, 0], [dt fz, I + dt fzd, dt I],
    [0, 0, I]] with fz, fzd = dzdd/dz, dzdd/dzdot of the model (our reading of the review's
    figure f, which the text does not reproduce; the alternative reading with the
    derivatives in the third row makes the error model unstable); False drops fz, fzd."""
    return _ekf_family("ekf_fe", model, sensors, readings, dt, n_steps, q0=q0, qd0=qd0, fe=True,
                       integrator=integrator, exact_jacobian=exact_jacobian, gate=gate,
                       **options)


def dekf(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    seed: int = 0,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    integrator: str = "euler",
    gate: float | None = None,
    **options: Any,
) -> EstimationResult:
    """DEKF (review Sect. 5): direct state x = [z, zdot], forward-Euler transition (Eq. 49) for
    both the multibody model and the covariance (Eq. 50), measurement update Eqs. 51-55 with
    h evaluated at the predicted state.  Options as :func:`ekf`.  The update is algebraically
    the errorEKF's (the review, Sect. 7.4); the filters differ by the integrator."""
    return _ekf_family("dekf", model, sensors, readings, dt, n_steps, q0=q0, qd0=qd0, fe=False,
                       integrator=integrator, gate=gate, **options)


# ================================================================================ UKF
def _local_sigma_points(model, partition, qbar, x, P, idx, alpha, beta, kappa, drawn=None,
                        then=None):
    """Sigma points of (x, P) that all assemble on ``idx`` from ``qbar`` and, with ``then``,
    whose image ``then(X, qs)`` -> (image, fine) is fine everywhere and where the quality of
    ``idx`` is at least ``partition.keep`` times its quality at the central point: the scaled
    unscented transform's spread alpha halved until they are (Julier 2002, the scaled
    unscented transformation, keeps sigma points local where wide ones leave the region the
    coordinates describe), at most :data:`SHRINK_STEPS` times.  ``drawn``: (X, qs, ok,
    quality) at ``alpha`` if already assembled.  Returns (X, qs, ok, Wm, Wc, image, shrunk),
    shrunk whether alpha was halved: the moments are then taken to first order
    (:func:`unscented_moments`)."""
    d, n, l = idx.size, model.n, x.size
    image = None
    for i in range(SHRINK_STEPS + 1):
        Wm, Wc, zeta = unscented_weights(l, alpha * 0.5 ** i, beta, kappa)
        if i or drawn is None:
            X = sigma_points(x, P, zeta)
            qs, ok = solve_positions_batch(model, np.broadcast_to(qbar, (X.shape[0], n)), idx,
                                           X[:, :d])
            quality = None
        else:
            X, qs, ok, quality = drawn
        if not ok.all():
            continue
        if then is None:
            break
        if quality is None:
            quality = coordinate_quality(model, qs, tuple(idx), partition.scale)
        if quality.min() < partition.keep * quality[0]:
            continue
        image, fine = then(X, qs)
        if fine.all():
            break
    if then is not None and image is None:
        image, _ = then(X, qs)
    return X, qs, ok, Wm, Wc, image, i > 0


def _spread_partition(model, partition, qs, ok, idx):
    """The quality (N,) of ``idx`` at the assembled sigma points qs (N, n) (0 where one did not
    assemble, ``ok``) and, where it falls below the partition's ``keep`` at one of them, the
    set among those best at some sigma point and no worse than ``idx`` at the central one
    (so that the mean's own partition keeps it) whose smallest quality over the sigma points
    is largest, if larger than the current set's; else None."""
    now = np.zeros(len(ok))
    if ok.any():
        now[ok] = coordinate_quality(model, qs[ok], tuple(idx), partition.scale)
    if not ok[0] or now.min() >= partition.keep:
        return now, None
    good = qs[ok]
    sets, _ = best_coordinate_sets(model, good, partition.scale)
    best, top = None, now.min()
    for s in {tuple(int(i) for i in c) for c in sets}:
        quality = coordinate_quality(model, good, s, partition.scale)
        if quality[0] >= now[0] and quality.min() > top:
            best, top = np.asarray(s, int), quality.min()
    return now, best


def ukf(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    seed: int = 0,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    integrator: str = "trapezoidal",
    alpha: float = 1.0,
    beta: float = 2.0,
    kappa: float = 0.0,
    indices: ArrayLike | None = None,
    forces: ForceInput | None = None,
    sensor_sigmas: ArrayLike | None = None,
    p0: float | None = None,
    qc: float | None = None,
    gate: float | None = None,
    repartition: bool = True,
    reacquire: bool = True,
) -> EstimationResult:
    """UKF (review Sects. 4.1 and 4.4): state x = [z, zdot], 2l+1 sigma points (Eqs. 34-36,
    Cholesky square root, zeta = sqrt(l + lambda), lambda = alpha^2 (l + kappa) - l), each
    propagated through one integration step of the model (trapezoidal rule, as in the
    review's benchmark); predicted mean and covariance Eqs. 38-39 plus the van Loan plant
    noise; update Eqs. 40-44 with sigma points redrawn from (x^-, P^-) and assembled by a
    batched position problem.  Angular readings are averaged as residuals about the central
    sigma point's.  ``gate``: innovation gating probability, ``p0``, ``qc``,
    ``repartition`` and ``reacquire`` as :func:`ekf`.  ``seed`` is unused."""
    t0 = time.perf_counter()
    gate = check_probability(gate)
    n_rejected = 0
    n_steps = int(n_steps)
    sensors, sig, per_step = prepare_readings(model, sensors, readings, n_steps, sensor_sigmas)
    partition = StatePartition(model, coordinate_scales(model)) if repartition else None
    q, idx, zd0 = initial_state(model, q0, qd0, indices, partition)
    d, n = idx.size, model.n
    Qfun = force_function(forces, n)
    l = 2 * d
    Wm, Wc, zeta = unscented_weights(l, alpha, beta, kappa)
    P, SigP = review_noise(model, idx, dt, p0, qc)
    watch = GapReacquisition(model, sensors, per_step, sig, dt, Qfun, integrator,
                             enabled=reacquire)
    x = np.concatenate([q[0, idx], zd0])
    qbar = q[0]
    idx0 = idx                                     # the coordinates z_std reports
    used = np.empty((n_steps, d), int)
    switches = []

    out_q = np.empty((n_steps, n))
    out_qd = np.empty((n_steps, n))
    out_qdd = np.empty((n_steps, n))
    zstd = np.empty((n_steps, d))
    zdstd = np.empty((n_steps, d))
    n_fail = 0
    failure = None

    def move_to(new, k, t):
        """The mean state stm at time t (step k) and the covariance carried to the independent
        coordinates ``new``, with their plant noise, and the switch recorded."""
        nonlocal P, idx, x, stm, SigP
        P = carried_covariance(model, stm, P, idx, new, 2)
        idx = new
        x = np.concatenate([stm.q[0, idx], stm.qd[0, idx]])
        stm = independent_state(model, stm.q, idx, x[None, d:],
                                applied_forces(Qfun, t, None, idx, n, 1))
        SigP = review_noise(model, idx, dt, p0, qc)[1]
        switches.append((k, tuple(int(i) for i in idx)))

    N = 2 * l + 1

    def step(X, qs):
        """Each sigma point's step from time tk - dt to tk in the current coordinates idx, and
        where it held."""
        st = independent_state(model, qs, idx, X[:, d:],
                               applied_forces(Qfun, tk - dt, None, idx, n, N))
        st1, z1, zd1, held = independent_step(
            model, qs, X[:, :d], X[:, d:], st.zdd, idx, dt,
            applied_forces(Qfun, tk, None, idx, n, N), integrator)
        fine = held & np.isfinite(z1).all(axis=1) & np.isfinite(zd1).all(axis=1)
        return (st1, z1, zd1), fine

    try:
        for k in range(n_steps):
            tk = k * dt
            if k > 0:
                X = sigma_points(x, P, zeta)
                qs, ok = solve_positions_batch(model, np.broadcast_to(qbar, (N, n)), idx, X[:, :d])
                Wm_k, Wc_k, shrunk = Wm, Wc, False
                if partition is not None:
                    quality, new = _spread_partition(model, partition, qs, ok, idx)
                    drawn = (X, qs, ok, quality)
                    if new is not None:       # a sigma point near the set's singular set: move
                        move_to(new, k, tk - dt)
                        drawn = None
                    X, qs, ok, Wm_k, Wc_k, stepped, shrunk = _local_sigma_points(
                        model, partition, qbar, x, P, idx, alpha, beta, kappa, drawn, then=step)
                else:
                    stepped, _ = step(X, qs)
                n_fail += int((~ok).sum())
                st1, z1, zd1 = stepped
                X1 = np.concatenate([z1, zd1], axis=1)
                x, P = unscented_moments(Wm_k, Wc_k, X1, first_order=shrunk)  # Eqs. 38-39
                P = watch.bounded_spread(P + SigP, idx)
                qbar = st1.q[0]
            found = watch.observe(k, qbar, idx, x[d:], np.sqrt(np.diag(P)[:d]),
                                  np.sqrt(np.diag(P)[d:]))
            if found is not None:          # the readings resumed after a gap: restart
                new, zd_found = found.restart_coordinates(idx, partition)
                if not np.array_equal(new, idx):
                    idx = new
                    switches.append((k, tuple(int(i) for i in idx)))
                x = np.concatenate([found.q[idx], zd_found])
                qbar = found.q
                P, SigP = review_noise(model, idx, dt, p0, qc)
            avail = per_step[k]
            if avail:
                X = sigma_points(x, P, zeta)
                qs, ok = solve_positions_batch(model, np.broadcast_to(qbar, (N, n)), idx, X[:, :d])
                Wm_k, Wc_k, shrunk = Wm, Wc, False
                if partition is not None:
                    X, qs, ok, Wm_k, Wc_k, _, shrunk = _local_sigma_points(
                        model, partition, qbar, x, P, idx, alpha, beta, kappa, (X, qs, ok, None))
                n_fail += int((~ok).sum())
                st = independent_state(model, qs, idx, X[:, d:], applied_forces(Qfun, tk, None, idx, n, N))
                Y, o, ang = predict_readings(model, sensors, avail, st.q, st.qd, st.qdd)
                if ang.any():                                  # unwrap about the central point
                    Y = Y[0] - innovation(Y[0], Y, ang)
                yhat, Pyy, Pxy = unscented_moments(Wm_k, Wc_k, Y, X,           # Eqs. 42-43
                                                   first_order=shrunk)
                Pyy = Pyy + np.diag(reading_variances(sensors, avail, sig))
                y = innovation(o, yhat, ang)
                use = _gate(y, Pyy, sensors, avail, gate)
                if not use.all():                        # outliers: update with the others only
                    n_rejected += int(np.sum(~use))
                    y, Pyy, Pxy = y[use], Pyy[np.ix_(use, use)], Pxy[:, use]
                K = np.linalg.solve(Pyy, Pxy.T).T                            # Eq. 40
                x = x + K @ y                                                 # Eq. 43
                P = P - K @ Pyy @ K.T                                        # Eq. 44
                P = 0.5 * (P + P.T)
            z_from = qbar[idx]
            qm, part = _corrected_positions(model, qbar[None], idx, z_from, x[:d] - z_from)
            x[:d] = z_from + part * (x[:d] - z_from)   # the mean as far as the mechanism goes
            stm = independent_state(model, qm, idx, x[None, d:], applied_forces(Qfun, tk, None, idx, n, 1))
            qbar = stm.q[0]
            if partition is not None:
                new = partition(qbar, idx)
                if not np.array_equal(new, idx):   # the coordinates near a singular set: move
                    move_to(new, k, tk)
            used[k] = idx
            out_q[k], out_qd[k], out_qdd[k] = stm.q[0], stm.qd[0], stm.qdd[0]
            Pr = carried_covariance(model, stm, P, idx, idx0, 2)      # the first set's
            sd = np.sqrt(np.maximum(np.diag(Pr), 0.0))
            zstd[k], zdstd[k] = sd[:d], sd[d:]
    except np.linalg.LinAlgError as exc:  # singular: return what was computed before
        failure = _stopped(exc, k, (out_q, out_qd, out_qdd, zstd, zdstd), used, idx)
    stats = {"indices": tuple(int(i) for i in idx0), "integrator": integrator,
             "alpha": alpha, "beta": beta, "kappa": kappa, "assembly_failures": n_fail,
             "rejected_readings": n_rejected, "partition": used, "switches": switches,
             "reacquisitions": watch.log, "failure": failure}
    return filter_result("ukf", dt, out_q, out_qd, out_qdd, zstd, zdstd, t0, n_steps, stats)
