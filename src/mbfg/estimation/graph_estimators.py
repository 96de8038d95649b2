"""Factor-graph state estimators: the forward-dynamics graph plus observation factors.

The graph is the dependent-coordinate forward-dynamics graph of
:class:`mbfg.graphs.forward.LeastSquaresProblem` (step vector ``x_k = [q_k; v_k; a_k]``) with

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

import time
from dataclasses import dataclass

import gtsam
import numpy as np

from mbfg.results import EstimationResult, Stats
from mbfg.factors.sensors import observation_residual
from mbfg.graphs import linear_blocks as L
from mbfg.graphs import terms as T
from mbfg.graphs.forward import LeastSquaresProblem, LeastSquaresSettings
from mbfg.model import kinematics as K
from mbfg.solvers.batch import linearize, optimize
from mbfg.solvers.smoother import FixedLagSmoother

__all__ = ["EstimatorSettings", "ONLINE_FORCE_SETTINGS", "ObservedProblem", "estimate_online",
           "estimate_batch"]


@dataclass(frozen=True)
class EstimatorSettings:
    """Noise model of the factor-graph estimators (standard deviations).

    sigma_dynamics : process noise of the dynamics factor qddot(q, v) - a (scalar or (n,))
    sigma_integrator : trapezoidal integrator factors (1e-4; a 1e-6 sigma makes the window
        problems so ill-conditioned that Gauss-Newton stalls on the review four-bar)

    The default process noise (5 m/s^2, rad/s^2 per coordinate) is of the order of the
    review's discrete filters: their acceleration power spectral density q_c = 9.162e-2
    (Sect. 12.1) is a per-step white acceleration noise of sqrt(q_c / dt) = 4.3 rad/s^2 at
    dt = 5 ms.
    force_coordinates : coordinates (indices or names) that carry an unknown generalized
        force estimated as a random walk (like the review's errorEKF_FE): a slot ``Q`` of the
        step vector, in the dynamics factor, with ``Q_{k+1} - Q_k`` of standard deviation
        ``sigma_force_walk`` [N, N m per step] and a loose prior ``sigma_force0`` on Q_0.
        Unmodelled forces that persist (a wrong gravity, friction) then need much less
        process noise; pass e.g. ``("theta0",)`` with a smaller ``sigma_dynamics``.
        ``"points"``: every free point coordinate (x, y of the natural coordinates).  A
        constant force there is any constant set of point loads, including a wrong gravity
        exactly (in natural coordinates the gravity generalized force is a constant vector,
        :meth:`Mechanism.gravity_forces`); only its component along the motion acts, so it
        becomes observable as the motion sweeps the constraint manifold.  Use a slow walk
        (``sigma_force_walk`` ~ 0.005 N per step) and a prior ``sigma_force0`` of the size of
        the suspected error.
    noise_coordinates : coordinates (indices or names) in which the noise model is written,
        like the independent coordinates z of the Kalman filters: the process noise acts on
        their accelerations only (the dynamics factor keeps those rows, and the acceleration
        constraints f_ac^d with ``sigma_constraints`` fix the others) and the initial priors
        act on their q and v only (the constraints fix the rest).  Their number must be the
        mechanism's degrees of freedom and they must stay independent along the motion (the
        crank angle of a crank-rocker).  Empty (the default): process noise on every
        coordinate's acceleration and priors on every coordinate; the effective noise on
        the motion then depends on the coordinates' scaling (sigma / |dq/dz|).
    sigma_constraints : position, velocity (and acceleration) constraint factors
    sigma_q0, sigma_v0 : initial priors on q_0, v_0 (loose: the initial state is uncertain)
    max_iterations : Gauss-Newton solves per step (online) or in total (batch)
    relative_tolerance : online window convergence: the Gauss-Newton model predicts a decrease
        of at most this fraction of the window error (1e-3: the remaining change of the
        estimate is far below the sensor noise; 1e-6 gives the same RMSE to 3 digits on the
        review benchmark with ~15 % more iterations)
    """
    sigma_dynamics: object = 5.0
    force_coordinates: tuple = ()
    noise_coordinates: tuple = ()
    sigma_force_walk: float = 0.5
    sigma_force0: float = 100.0
    sigma_integrator: float = 1e-4
    sigma_constraints: float = 1e-4
    sigma_q0: object = 0.5
    sigma_v0: object = 1.0
    max_iterations: int = 50
    relative_tolerance: float = 1e-3

    def forward_settings(self, dt) -> LeastSquaresSettings:
        return LeastSquaresSettings(dt=float(dt), integrator="trapezoidal",
                               sigma_integrator=self.sigma_integrator,
                               sigma_dynamics=self.sigma_dynamics,
                               sigma_constraints=self.sigma_constraints)


ONLINE_FORCE_SETTINGS = EstimatorSettings(force_coordinates="points", sigma_force0=5.0,
                                          sigma_force_walk=0.005, sigma_dynamics=0.5,
                                          sigma_q0=0.7, sigma_v0=1.0)
"""An unknown, slowly varying force on every point coordinate (a few newtons; it learns e.g.
a wrong gravity): ``fg-online+force`` of the benchmark and ``mbfg estimate --unknown-force``
(with its coordinates).  Tuned on seeds 0-3 of the review's four-bar benchmark."""


def _coordinate_indices(mech, coords) -> tuple:
    """Coordinate indices of names/indices, or of ``"points"`` (every free point coordinate)."""
    if isinstance(coords, str):
        if coords != "points":
            raise ValueError(f"coordinates must be a sequence of names/indices or 'points', "
                             f"got {coords!r}")
        pc = np.asarray(mech.point_coords, int)
        return tuple(int(i) for i in np.unique(pc[pc >= 0]))
    return tuple(mech.coordinate_index(c) for c in coords)


def _rows(f, idx):
    """Residual family ``f`` restricted to its rows ``idx``."""
    idx = np.asarray(idx, int)

    def g(p, jacobians=True):
        e, J = f(p, jacobians)
        return e[:, idx], (None if J is None else {s: A[:, idx] for s, A in J.items()})

    g.slots = f.slots
    return g


def _masked(f, mask):
    """Residual family ``f`` with its rows multiplied by ``mask`` (T,) (0: no reading)."""
    m = np.asarray(mask, float)[:, None]

    def g(p, jacobians=True):
        e, J = f(p, jacobians)
        e = e * m
        if J is not None:
            J = {s: A * m[:, :, None] for s, A in J.items()}
        return e, J

    g.slots = f.slots
    return g


class ObservedProblem(LeastSquaresProblem):
    """Dependent-coordinate forward problem plus observation factors and loose initial priors.

    ``readings``: one ``(steps, values)`` per sensor (as returned by
    :meth:`mbfg.model.sensors.SensorSet.synthesize`); ``n_steps`` the length of the time grid."""

    def __init__(self, mech, sensors, readings, n_steps, est: EstimatorSettings, dt):
        super().__init__(mech, est.forward_settings(dt), "dependent")
        self.est = est
        self.force_indices = _coordinate_indices(mech, est.force_coordinates)
        self.noise_indices = _coordinate_indices(mech, est.noise_coordinates)
        if self.force_indices:
            from mbfg.graphs.layout import StepLayout
            self.layout = StepLayout(self.layout.slots + (("Q", len(self.force_indices)),))
        self.sensors = tuple(sensors)
        if len(readings) != len(self.sensors):
            raise ValueError(f"{len(self.sensors)} sensors but {len(readings)} reading lists")
        self.n_steps = int(n_steps)
        self._z, self._has = [], []
        for s, r in zip(self.sensors, readings):
            s.validate(mech)
            steps, values = np.asarray(r[0], int), np.asarray(r[1], float).reshape(-1, s.dim)
            if steps.size and steps.min() < 0:
                raise ValueError(f"{s.label}: negative reading step {steps.min()}")
            keep = steps < self.n_steps  # readings after the last step are ignored
            steps, values = steps[keep], values[keep]
            z = np.zeros((self.n_steps, s.dim))
            has = np.zeros(self.n_steps, bool)
            z[steps], has[steps] = values, True
            self._z.append(z)
            self._has.append(has)

    def initial_priors(self, q_start, v_start, row: int = 0) -> list:
        lay, e, n = self.layout, self.est, self.mech.n
        sq = np.broadcast_to(np.asarray(e.sigma_q0, float), (n,)).copy()
        sv = np.broadcast_to(np.asarray(e.sigma_v0, float), (n,)).copy()
        if self.noise_indices:
            others = np.setdiff1d(np.arange(n), self.noise_indices)
            sq[others] = sv[others] = np.inf
        out = [L.prior(lay, row, "q", q_start, sq), L.prior(lay, row, "v", v_start, sv)]
        if self.force_indices:
            out.append(L.prior(lay, row, "Q", np.zeros(len(self.force_indices)), e.sigma_force0))
        return out

    def link_term(self, rows0):
        if not self.force_indices:
            return super().link_term(rows0)
        s = self.settings
        return L.step_links(self.layout, rows0, s.dt, [("q", "v"), ("v", "a")],
                            s.sigma_integrator, scheme=s.integrator, equalities=["Q"],
                            sigma_equality=self.est.sigma_force_walk)

    def pack(self, q, v, a):
        return super().pack(q, v, a)  # the force slot (if any) starts at zero

    def nonlinear_term(self, steps, rows):
        if self.force_indices or self.noise_indices:
            s, mech = self.settings, self.mech
            families = [(T.position_constraints_residual(mech), s.sigma_constraints),
                        (T.velocity_constraints_residual(mech), s.sigma_constraints)]
            dyn = (T.dynamics_residual(mech, force_slot="Q", force_indices=self.force_indices)
                   if self.force_indices else T.dynamics_residual(mech))
            if self.noise_indices:
                families.append((T.acceleration_constraints_residual(mech), s.sigma_constraints))
                dyn = _rows(dyn, self.noise_indices)
            families.append((dyn, s.sigma_dynamics))
            term = T.StackedTerm(self.layout, rows, families)
        else:
            term = super().nonlinear_term(steps, rows)
        steps = np.asarray(steps, int)
        for s, z, has in zip(self.sensors, self._z, self._has):
            f = observation_residual(self.mech, s, z[steps])
            term.residuals.append((_masked(f, has[steps]), s.sigma))
        return term


class _ObservedSmoother(FixedLagSmoother):
    """The fixed-lag smoother with the last window linearization kept for covariances.
    Construct it with ``on_failure="best"``: a window that does not converge keeps the best
    point of a damped solve instead of stopping the estimator."""

    def _linearize(self, W, terms, keys):
        out = super()._linearize(W, terms, keys)
        self._last_graph = (out[0], keys)
        return out

    def newest_covariance(self) -> np.ndarray:
        """Marginal covariance of the newest step (linearized at the last Gauss-Newton point
        of the window solve)."""
        g, keys = self._last_graph
        bn = g.eliminateSequential(gtsam.Ordering(list(keys)), gtsam.EliminateQR)
        R = bn.back().R()
        Ri = np.linalg.inv(R)
        return Ri @ Ri.T


def _setup(model, sensors, readings, dt, n_steps, settings, q0, qd0):
    est = settings or EstimatorSettings()
    q0 = np.array(model.q0 if q0 is None else q0, float)
    qd0 = np.zeros(model.n) if qd0 is None else K.project_velocity(model, q0,
                                                                     np.asarray(qd0, float))
    problem = ObservedProblem(model, sensors, readings, n_steps, est, dt)
    return est, q0, qd0, problem


def _forces(problem, parts):
    """(T, n) generalized forces of the force slot (None without a force state)."""
    if not problem.force_indices:
        return None
    Q = np.zeros((parts["q"].shape[0], problem.mech.n))
    Q[:, list(problem.force_indices)] = parts["Q"]
    return Q


def _stds(mech, covs):
    """z_std, zd_std of the relative angle coordinates from (T, dim, dim) covariances."""
    idx = np.asarray(mech.angle_coords, int)
    d = np.sqrt(np.maximum(np.diagonal(covs, axis1=1, axis2=2), 0.0))
    return d[:, idx], d[:, mech.n + idx]


def estimate_online(model, sensors, readings, dt, n_steps, *, window=10, settings=None,
                    q0=None, qd0=None, covariance=False, progress=None) -> EstimationResult:
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
        Steps in the fixed-lag window.
    settings : EstimatorSettings, optional
    q0, qd0 : (n,), optional
        Initial guess of the state (default: the model's ``q0`` at rest).
    covariance : bool
        Also return ``z_std``/``zd_std`` (causal marginal standard deviations).
    progress : callable(done, total), optional

    Returns an :class:`EstimationResult` named ``"fg-online"``: ``q, qd, qdd`` causal,
    ``*_smoothed`` each step's estimate when it left the window; stats ``ms_per_step``,
    ``iterations``, ``fallbacks``, ``window``.
    """
    t0 = time.perf_counter()
    est, q0, qd0, problem = _setup(model, sensors, readings, dt, n_steps, settings, q0, qd0)
    n, N = model.n, int(n_steps)
    lay = problem.layout
    sm = _ObservedSmoother(problem, window, max_iterations=est.max_iterations,
                           relative_tolerance=est.relative_tolerance, reselect=None,
                           on_failure="best")
    causal = np.empty((N, lay.dim))
    covs = np.empty((N, lay.dim, lay.dim)) if covariance else None
    sm.initialize(q0, qd0)
    causal[0] = sm.W[-1]
    if covariance:
        covs[0] = sm.newest_covariance()
    X = np.empty((N, lay.dim))
    every = max(1, N // 100)
    for k in range(1, N):
        out = sm.advance()
        if out is not None:
            X[out[0]] = out[1]
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
                     fallbacks=sm.fallbacks, unconverged_steps=sm.unconverged)
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


def estimate_batch(model, sensors, readings, dt, n_steps, *, settings=None, q0=None, qd0=None,
                   covariance=False, init=None) -> EstimationResult:
    """Offline smoothing of a whole recording as one factor graph (see the module docstring).

    Arguments as :func:`estimate_online`; ``init`` (n_steps, dim) is an optional initial
    estimate of the step vectors (default: the online estimator's smoothed output, which
    starts Gauss-Newton inside the basin of the right solution even from a wrong initial
    configuration; its time is included in ``ms_per_step``).  The result (named
    ``"fg-batch"``) has the smoothed estimates in both ``q`` and ``q_smoothed``.
    """
    t0 = time.perf_counter()
    est, q0, qd0, problem = _setup(model, sensors, readings, dt, n_steps, settings, q0, qd0)
    N = int(n_steps)
    lay = problem.layout
    if init is None:
        on = estimate_online(model, sensors, readings, dt, n_steps, window=10, settings=est,
                             q0=q0, qd0=qd0)
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
                                           final_error=st.final_error))
