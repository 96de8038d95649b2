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
"""
from __future__ import annotations

import time

import numpy as np

from mbfg.results import EstimationResult, Stats
from mbfg.model import constraints as C
from mbfg.model.dynamics import forward_dynamics_jacobians
from mbfg.model.forces import force_function
from mbfg.model.kinematics import choose_independent_coordinates, selection_matrix
from mbfg.model.sensors import SensorSet

__all__ = ["ekf", "ekf_fe", "ukf", "dekf", "assemble_batch", "model_state",
           "REVIEW_P0", "REVIEW_QC", "REVIEW_SIGMA2_FE"]

REVIEW_P0 = 0.0076
"""Initial covariance diagonal of the review's benchmark (Sect. 12.1)."""
REVIEW_QC = 9.162e-2
"""Continuous acceleration-noise PSD of the discrete filters without acceleration states."""
REVIEW_SIGMA2_FE = 2.291e-3
"""Acceleration random-walk variance per step of the errorEKF_FE."""


# ============================================================================ kinematics
def assemble_batch(model, q_guess, indices, z, *, tol=1e-11, max_iter=30):
    """Position problem with q[indices] = z for many states at once (batched Newton).

    ``q_guess`` (N, n), ``z`` (N, d).  Newton on the dependent coordinates with the
    independent constraint rows (square systems: ``solve``; otherwise minimum-norm least
    squares), starting from the guess, so each state stays on the guess's assembly branch.
    Returns ``(q, ok)``: q (N, n) and a boolean mask of the states that converged
    (max |Phi| <= tol)."""
    q = np.array(q_guess, dtype=float, ndmin=2)
    idx = np.asarray(indices, int)
    q[:, idx] = np.asarray(z, float).reshape(q.shape[0], idx.size)
    free = np.setdiff1d(np.arange(model.n), idx)
    active = np.ones(q.shape[0], bool)
    ok = np.zeros(q.shape[0], bool)
    for _ in range(max_iter + 1):
        qa = q[active]
        Jall = C.constraint_jacobian(model, qa)
        rows = C.independent_rows(model, qa, Jall)
        phi = C.take_rows(C.position_constraints(model, qa), rows)
        res = np.max(np.abs(phi), axis=-1) if phi.shape[-1] else np.zeros(qa.shape[0])
        done = res <= tol
        ai = np.flatnonzero(active)
        ok[ai[done]] = True
        active[ai[done | ~np.isfinite(res)]] = False
        if not active.any():
            break
        keep = ~done & np.isfinite(res)
        J = C.take_rows(Jall, rows, 1)[keep][..., free]
        rhs = -phi[keep]
        if J.shape[-2] == J.shape[-1]:
            try:
                step = np.linalg.solve(J, rhs[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = np.einsum("...ij,...j->...i", np.linalg.pinv(J), rhs)
        else:
            step = np.einsum("...ij,...j->...i", np.linalg.pinv(J), rhs)
        q[ai[keep][:, None], free[None, :]] += step
    return q, ok


class ModelState:
    """Kinematic and dynamic quantities of the model at a batch of states (N leading)."""
    __slots__ = ("q", "qd", "qdd", "zdd", "R", "S", "c", "Mbar", "rows")


def model_state(model, q, indices, zd, Q=None, zdd=None):
    """q (N, n) assembled, zd (N, d) -> :class:`ModelState` with qdot = R zdot, zddot from the
    dynamics (Eq. 20) with applied forces Q (N, n) or None (gravity always), unless ``zdd``
    (N, d) is given, and qddot = S c + R zddot."""
    st = ModelState()
    q = np.asarray(q, float)
    idx = np.asarray(indices, int)
    Jall = C.constraint_jacobian(model, q)
    rows = C.independent_rows(model, q, Jall)
    J = C.take_rows(Jall, rows, 1)
    B = np.broadcast_to(selection_matrix(model.n, idx), J.shape[:-2] + (idx.size, model.n))
    Kinv = np.linalg.inv(np.concatenate([J, B], axis=-2))
    mr = J.shape[-2]
    R, S = Kinv[..., :, mr:], Kinv[..., :, :mr]
    qd = np.einsum("...ij,...j->...i", R, zd)
    c = -C.take_rows(C.acceleration_bias(model, q, qd), rows)
    Sc = np.einsum("...ij,...j->...i", S, c)
    M = model.mass_matrix()
    Rt = np.swapaxes(R, -1, -2)
    Mbar = Rt @ M @ R
    if zdd is None:
        Qt = model.gravity_forces() + (0.0 if Q is None else np.asarray(Q, float))
        Qt = np.broadcast_to(Qt, q.shape)
        Qbar = np.einsum("...ij,...j->...i", Rt, Qt - Sc @ M.T)
        zdd = np.linalg.solve(Mbar, Qbar[..., None])[..., 0]
    st.q, st.qd, st.zdd, st.R, st.S, st.c, st.Mbar, st.rows = q, qd, np.asarray(zdd, float), R, S, c, Mbar, rows
    st.qdd = Sc + np.einsum("...ij,...j->...i", R, st.zdd)
    return st


def _applied(Qfun, t, Qz, idx, n, N):
    """Applied generalized forces (N, n): known forces plus the estimated force Qz (N, d) on
    the independent coordinates (Q = B^T Qz, so that R^T Q = Qz)."""
    Q = Qfun(t)
    out = np.zeros((N, n)) if Q is None else np.broadcast_to(np.asarray(Q, float), (N, n)).copy()
    if Qz is not None:
        out[:, idx] += Qz
    return out


def _step_batch(model, q, z, zd, zdd, idx, dt, Qnext, method, *, tol=1e-10, max_iter=20,
                fixed_zdd=None):
    """One integration step of the independent-coordinate ODE for N states.

    ``method`` ``"euler"`` (forward Euler, review Eq. 49) or ``"trapezoidal"`` (fixed-point
    iteration of z1 = z + dt/2 (zd + zd1), zd1 = zd + dt/2 (zdd + zdd1)).  Returns the
    :class:`ModelState` at the end of the step and z1, zd1.  ``fixed_zdd`` (N, d): use this
    acceleration at the new state instead of the dynamics (not used by default)."""
    if method == "euler":
        z1 = z + dt * zd
        zd1 = zd + dt * zdd
        q1, _ = assemble_batch(model, q, idx, z1)
        return model_state(model, q1, idx, zd1, Qnext, fixed_zdd), z1, zd1
    if method != "trapezoidal":
        raise ValueError(f"unknown integrator {method!r}; expected 'euler' or 'trapezoidal'")
    zd1 = zd + dt * zdd
    z1 = z + dt * zd + 0.5 * dt * dt * zdd
    q1 = q
    for _ in range(max_iter):
        q1, _ = assemble_batch(model, q1, idx, z1)
        st = model_state(model, q1, idx, zd1, Qnext, fixed_zdd)
        zd_new = zd + 0.5 * dt * (zdd + st.zdd)
        z_new = z + 0.5 * dt * (zd + zd_new)
        err = max(np.max(np.abs(z_new - z1)), np.max(np.abs(zd_new - zd1)) * dt)
        z1, zd1 = z_new, zd_new
        if err <= tol:
            break
    q1, _ = assemble_batch(model, q1, idx, z1)
    return model_state(model, q1, idx, zd1, Qnext, fixed_zdd), z1, zd1


# ============================================================================= readings
def _prepare(model, sensors, readings, n_steps, sensor_sigmas):
    sensors = sensors if isinstance(sensors, SensorSet) else SensorSet(sensors)
    sensors.validate(model)
    if len(readings) != len(sensors):
        raise ValueError(f"{len(readings)} readings for {len(sensors)} sensors")
    if sensor_sigmas is None:
        sig = [s.sigma for s in sensors]
    else:
        sig = [float(x) for x in np.broadcast_to(np.asarray(sensor_sigmas, float), (len(sensors),))]
    per_step = [[] for _ in range(n_steps)]
    for i, (steps, values) in enumerate(readings):
        values = np.asarray(values, float).reshape(len(steps), sensors[i].dim)
        for k, v in zip(np.asarray(steps, int), values):
            if 0 <= k < n_steps:
                per_step[k].append((i, v))
    return sensors, sig, per_step


def _measure(model, sensors, avail, q, qd, qdd):
    """Stacked predicted readings h (N, k) of the available sensors, the readings o (k,),
    the angular mask (k,) and the sensor variances (k,)."""
    hs, os_, ang = [], [], []
    for i, v in avail:
        s = sensors[i]
        hs.append(s.measure(model, q, qd, qdd))
        os_.append(v)
        ang.append(np.full(s.dim, s.angular))
    return np.concatenate(hs, axis=-1), np.concatenate(os_), np.concatenate(ang)


def _residual(o, h, ang):
    r = o - h
    if ang.any():
        r = np.where(ang, np.arctan2(np.sin(r), np.cos(r)), r)
    return r


def _variances(sensors, avail, sig):
    return np.concatenate([np.full(sensors[i].dim, sig[i] ** 2) for i, _ in avail])


# ============================================================== observation Jacobians
def _dqd_dz(model, st, k=0):
    """dqdot/dz (n, d) at state k of a ModelState: -S (Phi_qq R_j) qdot on the independent rows
    (differentiating Phi_q qdot = 0, B qdot = zdot along the manifold direction R e_j)."""
    q, qd, R, S, rows = st.q[k], st.qd[k], st.R[k], st.S[k], st.rows
    rows = rows if rows.ndim == 1 else rows[k]
    cols = []
    for j in range(R.shape[1]):
        Jd = C.take_rows(C.constraint_jacobian_dot(model, q, R[:, j]), rows, 1)
        cols.append(-S @ (Jd @ qd))
    return np.stack(cols, axis=1)


def _obs_jacobian(model, sensors, avail, st, idx, Q, *, fe):
    """dh/dx (k, l) of the available sensors at state 0 of ``st``; x = [z, zd] or, with
    ``fe``, [z, zd, a] where a is the acceleration error due to the force error
    (qddot = S c + R (f(z, zdot, Q) + a))."""
    d = len(idx)
    q, qd, qdd, R = st.q[0], st.qd[0], st.qdd[0], st.R[0]
    need_v = any("v" in sensors[i].slots or "a" in sensors[i].slots for i, _ in avail)
    need_a = any("a" in sensors[i].slots for i, _ in avail)
    dqd_dz = _dqd_dz(model, st) if need_v else None
    if need_a:
        # zdd = f(z, zdot) (+ the force-error acceleration of errorEKF_FE, a separate state)
        dj = forward_dynamics_jacobians(model, q, qd, Q)
        dqdd_dz = dj.d_q @ R + dj.d_qd @ dqd_dz
        dqdd_dzd = dj.d_qd @ R
    l = 3 * d if fe else 2 * d
    blocks = []
    for i, _ in avail:
        s = sensors[i]
        J = s.jacobians(model, q, qd, qdd)
        H = np.zeros((s.dim, l))
        if "q" in J:
            H[:, :d] += J["q"] @ R
        if "v" in J:
            H[:, :d] += J["v"] @ dqd_dz
            H[:, d:2 * d] += J["v"] @ R
        if "a" in J:
            H[:, :d] += J["a"] @ dqdd_dz
            H[:, d:2 * d] += J["a"] @ dqdd_dzd
            if fe:
                H[:, 2 * d:] += J["a"] @ R
        blocks.append(H)
    return np.concatenate(blocks, axis=0)


def _zdd_derivatives(model, st, idx, Q):
    """Total derivatives of the model's zddot along the manifold (errorEKF_EJ terms, review
    Sect. 7.2): dzdd/dz = B (D_q R + D_qd dqdot/dz), dzdd/dzdot = B D_qd R (d, d) each."""
    R = st.R[0]
    dj = forward_dynamics_jacobians(model, st.q[0], st.qd[0], Q)
    fz = dj.d_q[idx] @ R + dj.d_qd[idx] @ _dqd_dz(model, st)
    fzd = dj.d_qd[idx] @ R
    return fz, fzd


def _van_loan(qc, dt, d):
    """Discrete plant noise of a continuous white acceleration noise of PSD qc (review
    Sect. 12.1, figure m): qc [[dt^3/3, dt^2/2], [dt^2/2, dt]] per DOF."""
    Iq = np.eye(d) * np.asarray(qc, float)
    return np.block([[Iq * dt ** 3 / 3, Iq * dt ** 2 / 2], [Iq * dt ** 2 / 2, Iq * dt]])


# ==================================================================== common set-up
def _setup(model, q0, qd0, indices):
    q0 = np.array(model.q0 if q0 is None else q0, float)
    idx = (choose_independent_coordinates(model, q0) if indices is None
           else tuple(int(i) for i in indices))
    idx = np.asarray(idx, int)
    qa, ok = assemble_batch(model, q0[None], idx, q0[idx][None])
    if not ok[0]:
        raise ValueError("the initial guess q0 cannot be assembled with its independent "
                         "coordinates")
    zd0 = np.zeros(idx.size) if qd0 is None else np.asarray(qd0, float)[idx]
    return qa, idx, zd0


def _result(name, dt, Q, QD, QDD, zstd, zdstd, t0, n_steps, stats):
    stats = Stats.of(name, time.perf_counter() - t0, n_steps, n_steps, **stats)
    return EstimationResult(name=name, t=np.arange(n_steps) * dt, q=Q, qd=QD, qdd=QDD,
                            z_std=zstd, zd_std=zdstd, stats=stats)


# ======================================================================= EKF family
def _ekf_family(name, model, sensors, readings, dt, n_steps, *, q0, qd0, fe, integrator,
                indices=None, forces=None, sensor_sigmas=None, p0=REVIEW_P0, qc=REVIEW_QC,
                sigma2_acc=REVIEW_SIGMA2_FE, linear_position_correction=False,
                exact_jacobian=False):
    t0 = time.perf_counter()
    n_steps = int(n_steps)
    sensors, sig, per_step = _prepare(model, sensors, readings, n_steps, sensor_sigmas)
    q, idx, zd = _setup(model, q0, qd0, indices)
    d = idx.size
    n = model.n
    Qfun = force_function(forces, n)
    l = 3 * d if fe else 2 * d
    P = np.eye(l) * p0
    I = np.eye(d)
    if fe:
        F = np.block([[I, dt * I, 0 * I], [0 * I, I, dt * I], [0 * I, 0 * I, I]])
        SigP = np.zeros((l, l))
        SigP[2 * d:, 2 * d:] = np.eye(d) * sigma2_acc
    else:
        F = np.block([[I, dt * I], [0 * I, I]])
        SigP = _van_loan(qc, dt, d)
    Qz = np.zeros((1, d)) if fe else None          # estimated force on z (errorEKF_FE)
    z = q[:, idx].copy()
    zd = zd[None].copy()
    st = model_state(model, q, idx, zd, _applied(Qfun, 0.0, Qz, idx, n, 1))

    out_q = np.empty((n_steps, n))
    out_qd = np.empty((n_steps, n))
    out_qdd = np.empty((n_steps, n))
    zstd = np.empty((n_steps, d))
    zdstd = np.empty((n_steps, d))
    force = np.empty((n_steps, d)) if fe else None
    zddstd = np.empty((n_steps, d)) if fe else None
    n_updates = 0
    for k in range(n_steps):
        tk = k * dt
        if k > 0:
            # ---- prediction: integrate the multibody model; x^- = 0 (error state, Eq. 69)
            if exact_jacobian:
                fz, fzd = _zdd_derivatives(model, st, idx,
                                           _applied(Qfun, tk - dt, Qz, idx, n, 1)[0])
                F = F.copy()
                # forward Euler of zd' = zd + dt (zdd(z, zd) + a)
                F[d:2 * d, :d], F[d:2 * d, d:2 * d] = dt * fz, I + dt * fzd
            Qk = _applied(Qfun, tk, Qz, idx, n, 1)
            st, z, zd = _step_batch(model, st.q, z, zd, st.zdd, idx, dt, Qk, integrator)
            P = F @ P @ F.T + SigP                                       # Eq. 70
        avail = per_step[k]
        if avail:
            # ---- correction (Eqs. 71-75): innovation of the model's virtual sensors
            Qk = _applied(Qfun, tk, Qz, idx, n, 1)
            h, o, ang = _measure(model, sensors, avail, st.q, st.qd, st.qdd)
            y = _residual(o, h[0], ang)
            H = _obs_jacobian(model, sensors, avail, st, idx, Qk[0], fe=fe)
            Sk = H @ P @ H.T + np.diag(_variances(sensors, avail, sig))
            K = np.linalg.solve(Sk, H @ P).T
            dx = K @ y                                                   # Eq. 74, x^- = 0
            A = np.eye(l) - K @ H
            P = A @ P @ A.T + K @ np.diag(_variances(sensors, avail, sig)) @ K.T
            P = 0.5 * (P + P.T)
            # ---- feed the estimated errors back into the model (Sect. 7.1, 7.3)
            dz, dzd = dx[:d], dx[d:2 * d]
            z = z + dz
            zd = zd + dzd
            if linear_position_correction:
                qn = st.q + (st.R[0] @ dz)[None]                      # Eq. 76
                qn[:, idx] = z
            else:
                qn, ok = assemble_batch(model, st.q, idx, z)
                if not ok[0]:
                    qn = st.q + (st.R[0] @ dz)[None]
                    qn[:, idx] = z
            if fe:
                dzdd = dx[2 * d:]
                Qz = Qz + (st.Mbar[0] @ dzdd)[None]                     # Eq. 80
            st = model_state(model, qn, idx, zd, _applied(Qfun, tk, Qz, idx, n, 1))
            n_updates += 1
        out_q[k], out_qd[k], out_qdd[k] = st.q[0], st.qd[0], st.qdd[0]
        sd = np.sqrt(np.maximum(np.diag(P), 0.0))
        zstd[k], zdstd[k] = sd[:d], sd[d:2 * d]
        if fe:
            force[k] = Qz[0]
            zddstd[k] = sd[2 * d:]
    stats = {"indices": tuple(int(i) for i in idx), "integrator": integrator,
             "n_updates": n_updates, "exact_jacobian": bool(exact_jacobian)}
    if fe:
        stats["force"] = force
        stats["zdd_std"] = zddstd
    return _result(name, dt, out_q, out_qd, out_qdd, zstd, zdstd, t0, n_steps, stats)


def ekf(model, sensors, readings, dt, n_steps, *, seed=0, q0=None, qd0=None,
        integrator="trapezoidal", **options):
    """errorEKF (review Sect. 7.1): error state [dz, dzdot], x^- = 0; the multibody model is
    integrated on its own (trapezoidal rule, independent coordinates), the error covariance
    with the forward-Euler Jacobian F = [[I, dt I], [0, I]] (Eq. 50) and the van Loan plant
    noise of q_c; the virtual sensors are evaluated on the model (Eq. 71) and the estimated
    errors are fed back through the position and velocity problems.

    Options: ``indices`` (independent coordinates), ``forces`` ((n,) or t -> (n,) applied
    forces), ``sensor_sigmas`` (assumed sensor sigmas, default each sensor's), ``p0``
    (0.0076), ``qc`` (9.162e-2), ``integrator`` ("trapezoidal" or "euler"),
    ``linear_position_correction`` (Eq. 76 instead of the exact position problem),
    ``exact_jacobian`` (False; True adds the errorEKF_EJ terms dzdd/dz, dzdd/dzdot of Sect. 7.2
    to F, from the exact dynamics Jacobians).  ``seed`` is unused (deterministic filter)."""
    return _ekf_family("ekf", model, sensors, readings, dt, n_steps, q0=q0, qd0=qd0, fe=False,
                       integrator=integrator, **options)


def ekf_fe(model, sensors, readings, dt, n_steps, *, seed=0, q0=None, qd0=None,
           integrator="trapezoidal", exact_jacobian=True, **options):
    """errorEKF_FE (review Sect. 7.3): error state [dz, dzdot, dzddot] with a random walk on the
    acceleration error (Sigma_P = diag(0, 0, sigma2_acc), sigma2_acc = 2.291e-3;
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
                       integrator=integrator, exact_jacobian=exact_jacobian, **options)


def dekf(model, sensors, readings, dt, n_steps, *, seed=0, q0=None, qd0=None,
         integrator="euler", **options):
    """DEKF (review Sect. 5): direct state x = [z, zdot], forward-Euler transition (Eq. 49) for
    both the multibody model and the covariance (Eq. 50), measurement update Eqs. 51-55 with
    h evaluated at the predicted state.  Options as :func:`ekf`.  The update is algebraically
    the errorEKF's (the review, Sect. 7.4); the filters differ by the integrator."""
    return _ekf_family("dekf", model, sensors, readings, dt, n_steps, q0=q0, qd0=qd0, fe=False,
                       integrator=integrator, **options)


# ================================================================================ UKF
def ukf(model, sensors, readings, dt, n_steps, *, seed=0, q0=None, qd0=None,
        integrator="trapezoidal", alpha=1.0, beta=2.0, kappa=0.0, indices=None, forces=None,
        sensor_sigmas=None, p0=REVIEW_P0, qc=REVIEW_QC):
    """UKF (review Sects. 4.1 and 4.4): state x = [z, zdot], 2l+1 sigma points (Eqs. 34-36,
    Cholesky square root, zeta = sqrt(l + lambda), lambda = alpha^2 (l + kappa) - l), each
    propagated through one integration step of the model (trapezoidal rule, as in the
    review's benchmark); predicted mean and covariance Eqs. 38-39 plus the van Loan plant
    noise; update Eqs. 40-44 with sigma points redrawn from (x^-, P^-) and assembled by a
    batched position problem.  Angular readings are averaged as residuals about the central
    sigma point's.  ``seed`` is unused."""
    t0 = time.perf_counter()
    n_steps = int(n_steps)
    sensors, sig, per_step = _prepare(model, sensors, readings, n_steps, sensor_sigmas)
    q, idx, zd0 = _setup(model, q0, qd0, indices)
    d, n = idx.size, model.n
    Qfun = force_function(forces, n)
    l = 2 * d
    lam = alpha ** 2 * (l + kappa) - l
    zeta = np.sqrt(l + lam)
    Wm = np.full(2 * l + 1, 1.0 / (2 * (l + lam)))
    Wc = Wm.copy()
    Wm[0] = lam / (l + lam)
    Wc[0] = Wm[0] + (1 - alpha ** 2 + beta)
    SigP = _van_loan(qc, dt, d)
    x = np.concatenate([q[0, idx], zd0])
    P = np.eye(l) * p0
    qbar = q[0]

    def sigma_points(x, P):
        Lc = np.linalg.cholesky(P + 1e-15 * np.eye(l))
        dX = zeta * Lc.T                                   # rows: columns of sqrt(P)
        return np.concatenate([x[None], x[None] + dX, x[None] - dX], axis=0)

    out_q = np.empty((n_steps, n))
    out_qd = np.empty((n_steps, n))
    out_qdd = np.empty((n_steps, n))
    zstd = np.empty((n_steps, d))
    zdstd = np.empty((n_steps, d))
    n_fail = 0
    for k in range(n_steps):
        tk = k * dt
        N = 2 * l + 1
        if k > 0:
            X = sigma_points(x, P)
            qs, ok = assemble_batch(model, np.broadcast_to(qbar, (N, n)), idx, X[:, :d])
            n_fail += int((~ok).sum())
            Qk = _applied(Qfun, tk - dt, None, idx, n, N)
            st = model_state(model, qs, idx, X[:, d:], Qk)
            st1, z1, zd1 = _step_batch(model, qs, X[:, :d], X[:, d:], st.zdd, idx, dt,
                                       _applied(Qfun, tk, None, idx, n, N), integrator)
            X1 = np.concatenate([z1, zd1], axis=1)
            x = Wm @ X1                                                  # Eq. 38
            D = X1 - x
            P = (Wc[:, None] * D).T @ D + SigP                           # Eq. 39
            qbar = st1.q[0]
        avail = per_step[k]
        if avail:
            X = sigma_points(x, P)
            qs, ok = assemble_batch(model, np.broadcast_to(qbar, (N, n)), idx, X[:, :d])
            n_fail += int((~ok).sum())
            st = model_state(model, qs, idx, X[:, d:], _applied(Qfun, tk, None, idx, n, N))
            Y, o, ang = _measure(model, sensors, avail, st.q, st.qd, st.qdd)
            if ang.any():                                  # unwrap about the central point
                Y = Y[0] - _residual(Y[0], Y, ang)
            yhat = Wm @ Y                                                # Eq. 42
            DY = Y - yhat
            DX = X - x
            Pyy = (Wc[:, None] * DY).T @ DY + np.diag(_variances(sensors, avail, sig))
            Pxy = (Wc[:, None] * DX).T @ DY
            K = np.linalg.solve(Pyy, Pxy.T).T                            # Eq. 40
            x = x + K @ _residual(o, yhat, ang)                          # Eq. 43
            P = P - K @ Pyy @ K.T                                        # Eq. 44
            P = 0.5 * (P + P.T)
        qm, _ = assemble_batch(model, qbar[None], idx, x[None, :d])
        stm = model_state(model, qm, idx, x[None, d:], _applied(Qfun, tk, None, idx, n, 1))
        qbar = stm.q[0]
        out_q[k], out_qd[k], out_qdd[k] = stm.q[0], stm.qd[0], stm.qdd[0]
        sd = np.sqrt(np.maximum(np.diag(P), 0.0))
        zstd[k], zdstd[k] = sd[:d], sd[d:]
    stats = {"indices": tuple(int(i) for i in idx), "integrator": integrator,
             "alpha": alpha, "beta": beta, "kappa": kappa, "assembly_failures": n_fail}
    return _result("ukf", dt, out_q, out_qd, out_qdd, zstd, zdstd, t0, n_steps, stats)
