"""Particle filter with branch inference (Sanjurjo, Blanco-Claraco et al. 2015, "Multibody
dynamics as Bayesian networks", Algorithm 1 MBD_SIR), vectorized over particles with numpy.

Each particle carries the independent coordinates z, their rates zdot, a sampled
acceleration zddot and a branch label B in {-1, +1}: the orientation sign of the triangle of
three points (i, j, k) whose middle point j has two assemblies (for a four-bar, the coupler-
rocker joint mirrored across the line from the crank pin to the rocker's ground pivot).  Per
step (Algorithm 1):

* line 2, numerical integration: explicit RK4 as in the paper, of zddot = f(z, zdot) + v with
  the particle's sampled acceleration noise v held over the step (its first stage uses the
  particle's zddot); ``integrator="constant"`` instead holds the sampled zddot over the step
  (z' = z + dt zdot + dt^2/2 zddot: one position problem per step instead of four, but first
  order: on the small, fast 2015 four-bar it drifts by ~1 rad within 1 s without readings);
* the dependent coordinates from z' by a batched Newton position problem started at each
  particle's previous q (continuation: the particle stays on its branch);
* line 3, probabilistic equations of motion: zddot' = f(z', zdot') + N(0, sigma_a^2)
  (Eqs. 11-13, f the model's independent dynamics);
* line 5, weights times the Gaussian likelihood of the step's readings (Eq. 10, with the
  sensor sigmas the filter assumes: ``sensor_sigmas``);
* lines 7-14, normalization and selective resampling when the effective sample size drops
  below ``resample_threshold * M`` (systematic resampling).

Estimates (Eq. 19): weighted means, the angles by the circular mean (footnote 6); P(B = b)
(Eq. 20) as the summed weights of the particles on branch b.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from mbfg.estimation.common import (applied_forces, filter_result, initial_state, innovation,
                                    predict_readings, prepare_readings, reading_variances,
                                    systematic_resample, weighted_mean)
from mbfg.model.dynamics import independent_state
from mbfg.model.forces import force_function
from mbfg.model.integrate import independent_step
from mbfg.model.kinematics import solve_positions_batch

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import SensorSet
    from mbfg.results import EstimationResult

__all__ = ["particle_filter", "branch_sign", "default_branch_points", "mirror_branch"]


# ================================================================================ branches
def default_branch_points(mech: Mechanism) -> tuple:
    """(i, j, k) for the branch label: a free point j joined by bodies to a free point i and a
    fixed point k (an RR dyad closing the loop on the ground), the highest-index such j (for
    the bundled four-bars the coupler-rocker joint)."""
    nbrs = {p: set() for p in range(mech.n_points)}
    for b in mech.spec.bodies:
        for p in b.points:
            nbrs[p].update(x for x in b.points if x != p)
    fixed = lambda p: mech.point_coords[p, 0] < 0  # noqa: E731
    for j in range(mech.n_points - 1, -1, -1):
        if fixed(j):
            continue
        free_n = sorted(p for p in nbrs[j] if not fixed(p))
        fixed_n = sorted(p for p in nbrs[j] if fixed(p))
        if free_n and fixed_n:
            return (free_n[0], j, fixed_n[0])
    raise ValueError("no point with two assemblies found (a free point joined to a free and a "
                     "fixed point); give branch_points=(i, j, k)")


def branch_sign(mech: Mechanism, q: ArrayLike, points: tuple | None = None) -> np.ndarray:
    """Branch label sign(cross(r_j - r_i, r_k - r_i)) of configurations q (..., n) -> (...)."""
    i, j, k = default_branch_points(mech) if points is None else points
    r = mech.point_positions(q)
    a, b = r[..., j, :] - r[..., i, :], r[..., k, :] - r[..., i, :]
    return np.sign(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]).astype(int)


def mirror_branch(mech: Mechanism, q: ArrayLike, points: tuple | None = None) -> np.ndarray:
    """q with point j reflected across the line through points i and k (the other assembly of
    the dyad: distances to i and k are preserved)."""
    i, j, k = default_branch_points(mech) if points is None else points
    q = np.array(q, float)
    r = mech.point_positions(q)
    u = r[..., k, :] - r[..., i, :]
    u = u / np.linalg.norm(u, axis=-1, keepdims=True)
    v = r[..., j, :] - r[..., i, :]
    rj = r[..., i, :] + 2 * np.sum(v * u, axis=-1, keepdims=True) * u - v
    ix, iy = mech.point_coords[j]
    q[..., ix], q[..., iy] = rj[..., 0], rj[..., 1]
    return q


def _sweep_table(model, q, idx, span=np.pi, step=np.radians(2.0)):
    """Assembled configurations along z (1 DOF) from q by continuation in both directions over
    +-span; returns sorted z (K,) and q (K, n).  Stops where the position problem fails (the
    limits of a non-Grashof crank)."""
    z0 = float(q[idx[0]])
    zs, qs = [z0], [q.copy()]
    for sgn in (1.0, -1.0):
        qc = q[None].copy()
        for s in np.arange(1, int(np.ceil(span / step)) + 1):
            zz = z0 + sgn * s * step
            qn, ok = solve_positions_batch(model, qc, idx, np.array([[zz]]))
            if not ok[0]:
                break
            qc = qn
            zs.append(zz)
            qs.append(qn[0])
    order = np.argsort(zs)
    return np.asarray(zs)[order], np.asarray(qs)[order]


# ========================================================================= the filter
def particle_filter(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    seed: int = 0,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    n_particles: int = 100,
    sigma_a: float = 1.0,
    sensor_sigmas: ArrayLike | None = None,
    init: str = "uniform",
    z_range: tuple[float, float] | None = None,
    zd_max: float = 2.0,
    z_std: float = 0.1,
    zd_std: float = 0.1,
    branch_init: str = "uniform",
    branch_points: ArrayLike | None = None,
    true_branch: int | None = None,
    resample_threshold: float = 0.5,
    initial_particles: int | None = None,
    integrator: str = "rk4",
    indices: ArrayLike | None = None,
    forces: ForceInput | None = None,
) -> EstimationResult:
    """Particle filter with branch inference (2015 paper, Algorithm 1).

    Parameters (besides the common ones)
    ----------
    n_particles : int
        M (100 in the paper's simulation).
    sigma_a : float
        Acceleration noise of the probabilistic equations of motion, in the units of zddot
        (rad/s^2 for a crank angle; the paper's 1 m/s^2 was on a point coordinate).
    sensor_sigmas : sequence or float, optional
        Sensor sigmas the filter assumes (the paper inflates them: 1 deg/s for a 0.3 deg/s
        gyroscope); default each sensor's sigma.
    init : "uniform" or "gaussian"
        Initial particles: z ~ U(z_range) (default q0's z +- pi, a full turn; restricted to
        where the mechanism assembles), zdot ~ U(-zd_max, zd_max) (Eq. 22); or Gaussian about
        (q0, qd0) with ``z_std``, ``zd_std``.  Initial zddot = f(z, zdot) + noise.
    branch_init : "uniform" or "model"
        Branch labels ~ U{-1, +1} (Eq. 22) or all on q0's branch.
    branch_points : (i, j, k), optional
        Points of the branch triangle (default :func:`default_branch_points`).
    true_branch : int, optional
        The truth's label (+1/-1, :func:`branch_sign` of the true q): then
        ``stats["branch_probability"]`` (T,) is P(B = true_branch) after each step.
    resample_threshold : float
        Resample when ESS < threshold * M (Algorithm 1: 1/2).
    initial_particles : int, optional
        Start with this many particles (more than ``n_particles``) and resample down to
        ``n_particles`` once one branch has probability > 0.99: the unknown initial state
        and branch need a dense cover (see ``docs/benchmarks.md``: with 100 particles the
        true mode is often lost in the first readings), tracking afterwards does not.
        Default: ``n_particles`` throughout (Algorithm 1).

    Supports one independent coordinate with uniform initialization (the sweep that builds
    the per-branch configurations is 1-D); ``init="gaussian"`` works for any DOF.

    Returns an :class:`EstimationResult` named ``"pf"``: causal weighted-mean estimates,
    weighted standard deviations in ``z_std``/``zd_std``; stats: ``ms_per_step``,
    ``p_branch_plus`` (T,), ``ess`` (T,), ``population`` (T,) (particles at each step),
    ``resamples``, ``branch_probability`` (if ``true_branch``), ``branch_points``,
    ``n_particles``.
    """
    t0 = time.perf_counter()
    n_steps = int(n_steps)
    rng = np.random.default_rng(seed)
    sensors, sig, per_step = prepare_readings(model, sensors, readings, n_steps, sensor_sigmas)
    qa, idx, zd0 = initial_state(model, q0, qd0, indices)
    q0a = qa[0]
    d, n, M_target = idx.size, model.n, int(n_particles)
    M = max(int(initial_particles or 0), M_target)  # current population size
    Qfun = force_function(forces, n)
    pts = default_branch_points(model) if branch_points is None else tuple(branch_points)
    angular = np.isin(idx, model.angle_coords)
    b0 = int(branch_sign(model, q0a, pts))

    # ---- initial particles (Eq. 22)
    if branch_init == "uniform":
        B = rng.choice(np.array([-1, 1]), size=M)
    elif branch_init == "model":
        B = np.full(M, b0)
    else:
        raise ValueError(f"branch_init must be 'uniform' or 'model', got {branch_init!r}")
    if init == "uniform":
        if d != 1:
            raise ValueError("init='uniform' supports one independent coordinate; use "
                             "init='gaussian'")
        zc = float(q0a[idx[0]])
        lo, hi = (zc - np.pi, zc + np.pi) if z_range is None else z_range
        zt, qt = _sweep_table(model, q0a, idx, span=max(abs(hi - zc), abs(zc - lo)))
        lo, hi = max(lo, zt[0]), min(hi, zt[-1])
        z = rng.uniform(lo, hi, size=(M, 1))
        zd = rng.uniform(-zd_max, zd_max, size=(M, 1))
        guess = qt[np.clip(np.searchsorted(zt, z[:, 0]), 0, len(zt) - 1)]
    elif init == "gaussian":
        z = q0a[idx][None] + z_std * rng.normal(size=(M, d))
        zd = zd0[None] + zd_std * rng.normal(size=(M, d))
        guess = np.broadcast_to(q0a, (M, n))
    else:
        raise ValueError(f"init must be 'uniform' or 'gaussian', got {init!r}")
    q, ok = solve_positions_batch(model, guess, idx, z)
    wrong = ok & (branch_sign(model, q, pts) != B)
    if wrong.any():
        q[wrong], ok2 = solve_positions_batch(model, mirror_branch(model, q[wrong], pts), idx,
                                             z[wrong])
        ok[wrong] = ok2
    logw = np.where(ok, -np.log(M), -np.inf)
    st = independent_state(model, q, idx, zd, applied_forces(Qfun, 0.0, None, idx, n, M))
    noise = sigma_a * rng.normal(size=(M, d))
    zdd = st.zdd + noise
    qdd = st.qdd + np.einsum("pij,pj->pi", st.R, noise)

    out_q = np.empty((n_steps, n))
    out_qd = np.empty((n_steps, n))
    out_qdd = np.empty((n_steps, n))
    zstd = np.empty((n_steps, d))
    zdstd = np.empty((n_steps, d))
    p_plus = np.empty(n_steps)
    ess_t = np.empty(n_steps)
    population = np.empty(n_steps, int)
    n_res = 0
    z_prev = q0a[idx].copy()
    for k in range(n_steps):
        tk = k * dt
        if k > 0:
            # line 2: integrate with the particle's sampled acceleration
            Qk = applied_forces(Qfun, tk, None, idx, n, M)
            if integrator == "rk4":
                st, z, zd, ok = independent_step(
                    model, q, z, zd, zdd, idx, dt, Qk, "rk4", acceleration_noise=noise,
                    Q_stages=applied_forces(Qfun, tk - 0.5 * dt, None, idx, n, M))
            elif integrator == "constant":
                z = z + dt * zd + 0.5 * dt * dt * zdd
                zd = zd + dt * zdd
                q, ok = solve_positions_batch(model, q, idx, z)
                st = independent_state(model, q, idx, zd, Qk)
            else:
                raise ValueError(f"integrator must be 'rk4' or 'constant', got {integrator!r}")
            q = st.q
            logw[~ok] = -np.inf
            # line 3: probabilistic equations of motion (st: the dynamics at the new state)
            noise = sigma_a * rng.normal(size=(M, d))
            zdd = st.zdd + noise
            qdd = st.qdd + np.einsum("pij,pj->pi", st.R, noise)
        qd = st.qd
        avail = per_step[k]
        if avail:
            # line 5: weight update with the Gaussian likelihood of the readings
            h, o, ang = predict_readings(model, sensors, avail, q, qd, qdd)
            r = innovation(o[None], h, ang)
            var = reading_variances(sensors, avail, sig)
            logw = logw - 0.5 * np.sum(r * r / var, axis=-1)
        # lines 7-10: normalize
        mx = np.max(logw)
        if not np.isfinite(mx):                      # every particle lost: restart uniform
            logw = np.zeros(M)
            mx = 0.0
        w = np.exp(logw - mx)
        w /= w.sum()
        logw = np.log(np.maximum(w, 1e-300))
        ess = 1.0 / np.sum(w * w)
        ess_t[k] = ess
        population[k] = M
        # ---- estimates (Eqs. 19, 20)
        bsign = branch_sign(model, q, pts)
        p_plus[k] = float(np.sum(w[bsign > 0]))
        zm, dz = weighted_mean(z, w, angular, reference=z_prev)
        z_prev = zm
        zdm = w @ zd
        zddm = w @ zdd
        zstd[k] = np.sqrt(w @ (dz * dz))
        zdstd[k] = np.sqrt(w @ ((zd - zdm) ** 2))
        bmax = 1 if p_plus[k] >= 0.5 else -1
        on_b = np.flatnonzero(bsign == bmax)
        best = on_b[np.argmax(w[on_b])] if on_b.size else int(np.argmax(w))
        qm, okm = solve_positions_batch(model, q[best], idx, zm[None])
        if not okm[0]:
            qm = q[best][None]
        stm = independent_state(model, qm, idx, zdm[None], zdd=zddm[None])
        out_q[k], out_qd[k], out_qdd[k] = stm.q[0], stm.qd[0], stm.qdd[0]
        # lines 11-14: selective (systematic) resampling
        shrink = M > M_target and max(p_plus[k], 1.0 - p_plus[k]) > 0.99
        if ess < resample_threshold * M or shrink:
            sel = systematic_resample(w, rng, M_target if shrink else M)
            M = sel.size
            z, zd, zdd, q, qdd, noise = z[sel], zd[sel], zdd[sel], q[sel], qdd[sel], noise[sel]
            st = st.select(sel)
            logw = np.full(M, -np.log(M))
            n_res += 1
    stats = {"indices": tuple(int(i) for i in idx), "n_particles": M_target, "sigma_a": sigma_a,
             "integrator": integrator,
             "p_branch_plus": p_plus, "ess": ess_t, "resamples": n_res,
             "population": population,
             "branch_points": pts, "model_branch": b0}
    if true_branch is not None:
        tb = int(np.sign(true_branch))
        stats["branch_probability"] = p_plus if tb > 0 else 1.0 - p_plus
    return filter_result("pf", dt, out_q, out_qd, out_qdd, zstd, zdstd, t0, n_steps, stats)
