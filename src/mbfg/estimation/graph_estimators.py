"""Factor-graph state estimators: the forward-dynamics graph plus observation factors.

The graph (:class:`mbfg.graphs.estimation.ObservedProblem`) is the dependent-coordinate
forward-dynamics graph of :class:`mbfg.graphs.forward.LeastSquaresProblem` (step vector
``x_k = [q_k; v_k; a_k]``) with

* **process noise**: the dynamics factor ``e = qddot(q_k, v_k) - a_k`` has the standard
  deviation ``sigma_dynamics`` (per coordinate, in m/s^2 and rad/s^2): it stands for the
  forces the model does not know (the benchmark's model has gravity 1 m/s^2 too weak), as the
  acceleration plant noise of the Kalman filters in the review (Sect. 12.1);
* loose **initial priors** on q_0 and v_0 (``sigma_q0``, ``sigma_v0``): the model's initial
  configuration may be wrong (the benchmark's crank angle is off by pi/16); the tight
  constraint factors keep every step on the constraint manifold;
* **observation factors** ``h(x_k) - z_k`` (:func:`mbfg.factors.sensors.observation_residual`)
  of every reading, inside the step's stacked nonlinear term (one residual family per sensor;
  the rows of the steps where that sensor has no reading are masked to zero).

Estimators
----------
:func:`estimate_online`
    A fixed-lag smoother (:class:`mbfg.solvers.smoother.FixedLagSmoother` with the observation
    factors) over the last ``window`` steps.  At each step k the newest estimate is the causal
    one (readings up to k) and a step's estimate when it leaves the window is the smoothed one
    (readings up to k + window - 1).  ``covariance=True``: the marginal covariance of the newest
    step from the window's linear system (sequential QR elimination in time order; the last
    conditional is the marginal of the newest step).
:func:`estimate_batch`
    The whole recording as one graph (:func:`mbfg.solvers.batch.optimize`).  ``covariance=True``:
    per-step marginal covariances by a backward (Rauch-Tung-Striebel-like) recursion over the
    Gaussian Bayes net of the sequential elimination in time order: with the conditionals
    ``R_k x_k + S_k x_{k+1} = d_k``, ``Sigma_k = R_k^-1 S_k Sigma_{k+1} S_k^T R_k^-T +
    (R_k^T R_k)^-1`` (exact for the chain; O(N dim^3)).

The reported standard deviations ``z_std``/``zd_std`` are those of the mechanism's relative
angle coordinates (``mech.angle_coords``; for the review four-bar, the crank angle theta0).
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import gtsam
import numpy as np

from mbfg.graphs.estimation import (ONLINE_FORCE_SETTINGS, EstimatorSettings, ObservedProblem,
                                   scaled_settings)
from mbfg.model import kinematics as K
from mbfg.results import EstimationResult, Stats
from mbfg.solvers.batch import linearize, optimize
from mbfg.solvers.smoother import FixedLagSmoother

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import Sensor, SensorSet

__all__ = ["estimate_online", "estimate_batch", "EstimatorSettings", "ONLINE_FORCE_SETTINGS",
           "scaled_settings", "window_steps"]


def _setup(model, sensors, readings, dt, n_steps, settings, q0, qd0, forces=None,
           robust=None):
    est = scaled_settings(model, dt) if settings is None else settings
    if robust is not None:
        est = dataclasses.replace(est, robust=robust)
    q0, qd0 = K.release_state(model, q0, qd0)
    problem = ObservedProblem(model, sensors, readings, n_steps, est, dt, forces)
    return est, q0, qd0, problem


def _forces(problem, parts):
    """(T, n) generalized forces of the force slot (None without a force state)."""
    if not problem.force_indices:
        return None
    Q = np.zeros((parts["q"].shape[0], problem.mech.n))
    Q[:, list(problem.force_indices)] = parts["Q"]
    return Q


def window_steps(readings: Sequence, window: int, n_steps: int) -> int:
    """Steps of a fixed-lag window that holds about ``window`` reading times: ``window`` times
    the median number of steps between consecutive steps with at least one reading (1 when
    every step has one; gaps are rare, so they do not lengthen it), at most ``n_steps``.

    With few readings in the window, the steps that leave it are marginalized at a
    linearization that the readings have hardly corrected, which biases an estimator with a
    force state (encoder every 4th step on the review four-bar, ``fg-online+force``: crank
    RMSE 0.066 rad with 10 steps, 0.007 rad with 40)."""
    steps = np.unique(np.concatenate([np.asarray(r[0], int).ravel() for r in readings]
                                     + [np.zeros(0, int)]))
    steps = steps[(steps >= 0) & (steps < n_steps)]
    spacing = int(np.median(np.diff(steps))) if steps.size > 1 else 1
    return int(max(1, min(int(window) * max(spacing, 1), int(n_steps))))


def _std_indices(mech, covariance):
    """Stats entry naming the coordinates of the columns of z_std / zd_std (as the filters'
    ``indices``): the relative angle coordinates, when covariances were computed."""
    return {"indices": tuple(int(i) for i in mech.angle_coords)} if covariance else {}


def _stds(mech, covs):
    """z_std, zd_std of the relative angle coordinates from (T, dim, dim) covariances."""
    idx = np.asarray(mech.angle_coords, int)
    d = np.sqrt(np.maximum(np.diagonal(covs, axis1=1, axis2=2), 0.0))
    return d[:, idx], d[:, mech.n + idx]


def estimate_online(
    model: Mechanism,
    sensors: SensorSet,
    readings: list,
    dt: float,
    n_steps: int,
    *,
    window: int = 10,
    settings: EstimatorSettings | None = None,
    forces: ForceInput | None = None,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    covariance: bool = False,
    progress: Callable | None = None,
    robust: str | None = None,
    hold_gaps: bool = False,
) -> EstimationResult:
    """Fixed-lag factor-graph estimator (see the module docstring).

    Parameters
    ----------
    model : Mechanism
        The estimator's model (may differ from the real system).
    sensors : SensorSet or sequence of sensors
    readings : list of (steps, values), one per sensor (``SensorSet.synthesize``)
    dt : float
        Time step [s]; the time grid is ``k dt`` for k = 0 .. n_steps - 1.
    n_steps : int
        Number of steps of the grid (including step 0).
    window : int
        Reading times in the fixed-lag window: with a reading at every step, the window's
        number of steps; with sparser readings the window is lengthened to
        ``window`` times the median number of steps between steps that have a reading (an
        encoder read every 4th step: 4 x ``window`` steps), so that it always holds about
        ``window`` readings (:func:`window_steps`; ``stats["window"]`` is the length used).
        Through a gap in the readings the window slides on (``hold_gaps=False``, the
        default): the gap's steps leave one by one, each marginalized at the model's
        prediction, as a filter propagates through a gap, and a window that holds no reading
        at all only predicts its newest step (the older rows stay where they were; the
        uncertainty grows through the gap).
    hold_gaps : bool
        True: a step leaves the window only when ``window`` readings after it have been
        solved with it: a gap stays in the window (its steps solved one by one, the step
        before held) until ``window`` readings after it have arrived; the whole gap is then
        re-solved with them and leaves at once (``informative`` of
        :class:`~mbfg.solvers.smoother.FixedLagSmoother`).  That re-solve rarely converges
        after a long gap: after the review four-bar's 4 s gap (seeds 300-303) sliding is
        within x1.05 / x1.27 / x1.43 of the gap-free error (encoder / coupler gyroscope /
        crank gyroscope), holding x1.05 / x1.37 / x2.57; on five generated families at 1 cm
        and at 4 m (benchmarks/estimation_generated.py --gap) the two agree to 1 % after a
        2 / omega_c gap (the six-bar's sliding window costs half as much per step).  With
        readings at regular intervals the two are the same.
    settings : EstimatorSettings, optional
        Default: :func:`~mbfg.graphs.estimation.scaled_settings` of ``model`` and ``dt``,
        noise and priors derived from the mechanism's scales, with an unknown weight error
        as force state (``fg-online``; no tuning to any benchmark).
    q0, qd0 : (n,), optional
        Initial guess of the state (default: the model's ``q0`` at rest).
    forces : None, (n,) or callable t -> (n,)
        Known applied generalized forces besides gravity (:mod:`mbfg.model.forces`), e.g.
        the motors' forces for recorded inputs; the model's friction always acts.
    covariance : bool
        Also return ``z_std``/``zd_std`` (causal marginal standard deviations).
    progress : callable(done, total), optional
    robust : None, "huber" or "cauchy", optional
        Replaces ``settings.robust``: a robust loss on the observation factors against
        outlying readings (:class:`~mbfg.graphs.estimation.EstimatorSettings`).

    Returns an :class:`EstimationResult` named ``"fg-online"``: ``q, qd, qdd`` causal,
    ``*_smoothed`` each step's estimate when it left the window; stats ``ms_per_step``,
    ``iterations``, ``fallbacks``, ``window``, ``cholesky_fallbacks`` (window solves that
    gtsam's Cholesky left to QR, :class:`~mbfg.solvers.smoother.FixedLagSmoother`).
    """
    t0 = time.perf_counter()
    est, q0, qd0, problem = _setup(model, sensors, readings, dt, n_steps, settings, q0, qd0,
                                   forces, robust)
    N = int(n_steps)
    lay = problem.layout
    readings_in_window = int(window)
    window = window_steps(readings, window, N)
    sm = FixedLagSmoother(problem, window, max_iterations=est.max_iterations,
                           relative_tolerance=est.relative_tolerance,
                           absolute_tolerance=est.accept_decrease, reselect=None,
                           on_failure="best",
                           informative=problem.informative_steps,
                           min_informative=readings_in_window, elimination="cholesky",
                           hold=hold_gaps)
    causal = np.empty((N, lay.dim))
    covs = np.empty((N, lay.dim, lay.dim)) if covariance else None
    sm.initialize(q0, qd0)
    causal[0] = sm.W[-1]
    if covariance:
        covs[0] = sm.newest_covariance()
    X = np.empty((N, lay.dim))
    every = max(1, N // 100)
    for k in range(1, N):
        sm.advance()
        for j, x in sm.left:
            X[j] = x
        causal[k] = sm.W[-1]
        if covariance:
            covs[k] = sm.newest_covariance()
        if progress is not None and (k % every == 0 or k == N - 1):
            progress(k, N - 1)
    X[sm.first:sm.first + sm.W.shape[0]] = sm.W
    seconds = time.perf_counter() - t0
    p, s = lay.unpack(causal), lay.unpack(X)
    z_std, zd_std = _stds(model, covs) if covariance else (None, None)
    stats = Stats.of("fg-online", seconds, N, sm.iterations, converged=not sm.unconverged,
                     window=int(window), max_iterations_per_step=sm.max_iterations_per_step,
                     fallbacks=sm.fallbacks, unconverged_steps=sm.unconverged,
                     cholesky_fallbacks=sm.cholesky_fallbacks,
                     **_std_indices(model, covariance))
    res = EstimationResult("fg-online", np.arange(N) * dt, p["q"], p["v"], p["a"],
                           s["q"], s["v"], s["a"], z_std=z_std, zd_std=zd_std,
                           Q=_forces(problem, p), stats=stats)
    if sm.unconverged:
        import warnings
        warnings.warn(f"fg-online: {sm.unconverged} of {N} window solves did not converge within "
                      f"{sm.max_iterations} iterations; their estimates are the best damped "
                      f"solution (stats['unconverged_steps'])", RuntimeWarning, stacklevel=2)
    return res


def _chain_marginals(lin, keys, dim):
    """Per-step marginal covariances of a chain-structured linear system (see module doc)."""
    bn = lin.eliminateSequential(gtsam.Ordering(list(keys)), gtsam.EliminateQR)
    N = len(keys)
    covs = np.empty((N, dim, dim))
    c = bn.at(N - 1)
    Ri = np.linalg.inv(c.R())
    covs[-1] = Ri @ Ri.T
    for k in range(N - 2, -1, -1):
        c = bn.at(k)
        Ri = np.linalg.inv(c.R())
        S = c.S() if c.size() > 1 else np.zeros((dim, dim))
        G = Ri @ S
        covs[k] = G @ covs[k + 1] @ G.T + Ri @ Ri.T
    return covs


def estimate_batch(
    model: Mechanism,
    sensors: Sequence[Sensor],
    readings: Sequence,
    dt: float,
    n_steps: int,
    *,
    settings: Any = None,
    forces: ForceInput | None = None,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    covariance: bool = False,
    init: str | None = None,
    robust: str | None = None,
) -> EstimationResult:
    """Offline smoothing of a whole recording as one factor graph (see the module docstring).

    Arguments as :func:`estimate_online` (the default ``settings`` are the same
    :func:`~mbfg.graphs.estimation.scaled_settings`, whose weight-error force state the
    whole recording estimates as one slowly varying force); ``init`` (n_steps, dim) is an optional initial
    estimate of the step vectors (default: the online estimator's smoothed output, which
    starts Gauss-Newton inside the basin of the right solution even from a wrong initial
    configuration; its time is included in ``ms_per_step``).  The result (named
    ``"fg-batch"``) has the smoothed estimates in both ``q`` and ``q_smoothed``.
    """
    t0 = time.perf_counter()
    est, q0, qd0, problem = _setup(model, sensors, readings, dt, n_steps, settings, q0, qd0,
                                   forces, robust)
    N = int(n_steps)
    lay = problem.layout
    if init is None:
        on = estimate_online(model, sensors, readings, dt, n_steps, window=10, settings=est,
                             forces=forces, q0=q0, qd0=qd0, hold_gaps=True)
        init = problem.pack(on.q_smoothed, on.qd_smoothed, on.qdd_smoothed)
    steps = np.arange(N)
    keys = lay.keys(steps)
    terms = problem.terms(steps, q0, qd0)
    X, st = optimize(terms, np.asarray(init, float), keys, max_iterations=max(est.max_iterations, 30),
                     relative_tolerance=1e-9, what="batch estimation")
    covs = None
    if covariance:
        covs = _chain_marginals(linearize(terms, X, keys), keys, lay.dim)
    seconds = time.perf_counter() - t0
    p = lay.unpack(X)
    z_std, zd_std = _stds(model, covs) if covariance else (None, None)
    return EstimationResult("fg-batch", steps * dt, p["q"], p["v"], p["a"],
                            p["q"].copy(), p["v"].copy(), p["a"].copy(),
                            z_std=z_std, zd_std=zd_std, Q=_forces(problem, p),
                            stats=Stats.of("fg-batch", seconds, N, st.iterations, st.converged,
                                           final_error=st.final_error,
                                           **_std_indices(model, covariance)))
