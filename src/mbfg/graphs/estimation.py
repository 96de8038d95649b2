"""The state-estimation graph: the forward-dynamics least-squares graph plus observation
factors, loose initial priors and optional unknown-force states (the problem the
factor-graph estimators of :mod:`mbfg.estimation.graph_estimators` solve; see that module for
the noise model).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import MbfgError, UsageError
from mbfg.factors.sensors import observation_residual
from mbfg.graphs import linear_blocks as L
from mbfg.graphs import terms as T
from mbfg.graphs.forward import LeastSquaresProblem, LeastSquaresSettings
from mbfg.graphs.layout import StepLayout
from mbfg.model import kinematics as K
from mbfg.model.partition import best_coordinates
from mbfg.model.sensors import readings_on_grid

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.graphs.linear_blocks import BinaryLinear
    from mbfg.model.mechanism import Mechanism
    from mbfg.graphs.terms import StackedTerm

__all__ = ["EstimatorSettings", "ONLINE_FORCE_SETTINGS", "ObservedProblem", "ROBUST_LOSSES",
           "scaled_settings", "MODEL_ERROR", "INITIAL_SPREAD", "WEIGHT_TIME",
           "CONSTRAINT_ACCURACY", "INTEGRATOR_ACCURACY",
           "ROBUST_WIDTH", "robust_weights"]


ROBUST_LOSSES = (None, "huber", "cauchy")
"""The observation losses of :class:`EstimatorSettings` (``robust``)."""
ROBUST_WIDTH = {"huber": 1.345, "cauchy": 2.385}
"""Default ``robust_width`` of each loss [sigmas]: 95 % asymptotic efficiency on Gaussian
noise."""


def robust_weights(u: np.ndarray, loss: str, width: float) -> np.ndarray:
    """IRLS weights w(u) of whitened residuals u (any shape) for ``loss`` ("huber" or
    "cauchy") of width ``width`` [sigmas]: the weight of each squared residual, as gtsam's
    ``mEstimator`` classes define it."""
    a = np.abs(u)
    if loss == "huber":
        return np.where(a <= width, 1.0, width / np.maximum(a, width))
    return 1.0 / (1.0 + (a / width) ** 2)


def _row_scaled(f, scale):
    """Residual family ``f`` with its rows and their Jacobians multiplied by ``scale(e)`` (an
    array broadcasting to e (T, r); held constant in the Jacobian)."""

    def g(p, jacobians=True):
        e, J = f(p, jacobians)
        s = np.broadcast_to(scale(e), e.shape)
        if J is not None:
            J = {k: A * s[:, :, None] for k, A in J.items()}
        return e * s, J

    g.slots = f.slots
    return g


def _robust(f, sigma, loss, width):
    """Residual family ``f`` of sigma ``sigma`` with its rows scaled by sqrt(w(r / sigma))
    (iteratively reweighted least squares; the weight is held constant in the Jacobian, as
    gtsam's robust noise models do)."""
    return _row_scaled(f, lambda e: np.sqrt(robust_weights(e / sigma, loss, width)))


@dataclass(frozen=True)
class EstimatorSettings:
    """Noise model of the factor-graph estimators (standard deviations).

    sigma_dynamics : process noise of the dynamics factor qddot(q, v) - a (scalar or (n,))
    sigma_integrator : trapezoidal integrator factors, scalar, (n,) or (2, n) (rows: the
        position links [m, rad] and the velocity links [m/s, rad/s]; default 1e-4 for all; a
        1e-6 sigma makes the window problems so ill-conditioned that Gauss-Newton stalls on
        the review four-bar)

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
    sigma_constraints : position-constraint rows Phi, scalar or (m,) [units of each row];
        default 1e-4, also for the velocity and acceleration rows
    sigma_velocity_constraints, sigma_acceleration_constraints : velocity rows Phi_q v [row
        units / s] and acceleration rows [row units / s^2], scalar or (m,); None (default):
        ``sigma_constraints``
    sigma_q0, sigma_v0 : initial priors on q_0, v_0 (loose: the initial state is uncertain)
    robust : None, "huber" or "cauchy"
        Loss of the observation factors (gtsam's ``noiseModel.Robust`` M-estimators, applied
        the same way, by iteratively reweighted least squares: each whitened reading residual
        u = r / sigma is weighted by w(u), Huber w = min(1, c / |u|), Cauchy
        w = 1 / (1 + (u / c)^2)), so that outlying readings pull on the estimate with a
        bounded (Huber) or vanishing (Cauchy) force.  None: Gaussian (least squares).
    robust_width : c, in sensor sigmas (default 1.345 for Huber and 2.385 for Cauchy, the
        usual 95 %-efficiency constants)
    sigma_weight : relative error of the model's weights (dimensionless, default 0): the prior
        of the force slot gets a fully correlated part ``sigma_weight`` times the model's
        gravity generalized force on the force coordinates (a wrong gravity, or all masses off
        by the same fraction, is exactly such a force in natural coordinates), on top of the
        independent ``sigma_force0`` of each coordinate
    max_iterations : Gauss-Newton solves per step (online) or in total (batch)
    relative_tolerance : online window convergence: the Gauss-Newton model predicts a decrease
        of at most this fraction of the window error (1e-3: the remaining change of the
        estimate is far below the sensor noise; 1e-6 gives the same RMSE to 3 digits on the
        review benchmark with ~15 % more iterations)
    accept_decrease : online window convergence, absolute (dimensionless, in units of the
        error 1/2 sum of squared whitened residuals): a Gauss-Newton step whose predicted
        decrease is at most this is accepted without a verifying relinearization.  2 = a
        move of 2 posterior standard deviations, within which the models are linear to the
        accuracy of the estimate; the next step relinearizes the whole window anyway, as
        iSAM2 does.  On the review four-bar it halves the linearizations (about 1.1 instead
        of 2.05 per step) at the same RMSE (chosen on seeds 0-9 of its gyroscope setup
        among 0, 1, 2 and 4.5).  0: always verify.
    """
    sigma_dynamics: object = 5.0
    force_coordinates: tuple = ()
    noise_coordinates: tuple = ()
    sigma_force_walk: float = 0.5
    sigma_force0: float = 100.0
    sigma_integrator: object = 1e-4
    sigma_constraints: object = 1e-4
    sigma_velocity_constraints: object = None
    sigma_acceleration_constraints: object = None
    sigma_q0: object = 0.5
    sigma_v0: object = 1.0
    max_iterations: int = 50
    relative_tolerance: float = 1e-3
    accept_decrease: float = 2.0
    robust: str | None = None
    robust_width: float | None = None
    sigma_weight: float = 0.0

    def __post_init__(self):
        if self.robust not in ROBUST_LOSSES:
            raise UsageError(f"robust must be one of {', '.join(map(repr, ROBUST_LOSSES))}, "
                             f"got {self.robust!r}")
        if self.robust_width is not None and not float(self.robust_width) > 0.0:
            raise UsageError(f"robust_width must be a positive number of sigmas, got "
                             f"{self.robust_width!r}")

    def forward_settings(self, dt: float) -> LeastSquaresSettings:
        return LeastSquaresSettings(
            dt=float(dt), integrator="trapezoidal", sigma_integrator=self.sigma_integrator,
            sigma_dynamics=self.sigma_dynamics, sigma_constraints=self.sigma_constraints,
            sigma_velocity_constraints=self.sigma_velocity_constraints,
            sigma_acceleration_constraints=self.sigma_acceleration_constraints)


ONLINE_FORCE_SETTINGS = EstimatorSettings(force_coordinates="points", sigma_force0=5.0,
                                          sigma_force_walk=0.005, sigma_dynamics=0.5,
                                          sigma_q0=0.7, sigma_v0=1.0)
"""An unknown, slowly varying force on every point coordinate (a few newtons; it learns e.g.
a wrong gravity): ``fg-online+force`` of the benchmark and ``mbfg estimate --unknown-force``
(with its coordinates).  Tuned on seeds 0-3 of the review's four-bar benchmark."""


MODEL_ERROR = 0.1
"""Relative model error the scaled settings assume (dimensionless): the white process noise is
MODEL_ERROR omega_c^2 s per coordinate, the unknown weight error MODEL_ERROR of the model's
weights (the particle filter's ``model_error`` has the same default)."""
INITIAL_SPREAD = 0.25
"""Prior standard deviation of the initial state about the guess, in units of each
coordinate's scale s (and omega_c s for the rates) (the particle filter's initial spread)."""
CONSTRAINT_ACCURACY = 3e-6
"""Distance from the constraint manifold the scaled settings allow, relative to the
mechanism's length ell (dimensionless): each constraint row's sigma is this times the row's
scale (:func:`mbfg.model.scales.constraint_scales`).  On the review four-bar, 1e-4 divided by
the geometric mean of its row scales (31 m^2): as tight overall as the plain settings'
constant 1e-4 (same RMSE on seeds 0-9; 1e-6 needs ~2x the damped fallbacks with the
encoder)."""
INTEGRATOR_ACCURACY = 2e-5
"""Sigma of the scaled settings' trapezoidal links relative to each coordinate's scale s
(dimensionless): INTEGRATOR_ACCURACY s on positions and INTEGRATOR_ACCURACY omega_c s on
velocities.  On the review four-bar about 1e-4 / ell, the plain settings' 1e-4 on its point
coordinates."""
TRUNCATION = 15.0
"""The trapezoidal links' allowance for the rule's own truncation error, in units of
(omega_c dt)^3 s (dimensionless; :func:`integrator_accuracy`)."""


def integrator_accuracy(step: float) -> float:
    """Sigma of the scaled settings' trapezoidal links relative to each coordinate's scale
    (and omega_c times it on velocities), at a step of ``step`` = omega_c dt (dimensionless):
    max(INTEGRATOR_ACCURACY, TRUNCATION step^3).  The trapezoidal rule's local error is
    dt^3 / 12 times the third derivative, (omega_c dt)^3 s times a dimensionless jerk that
    fast phases raise far above 1; the links must allow it, or they bend the estimate away from
    the readings.  On the review four-bar at dt = 5 ms the step is 0.0063 and the floor
    INTEGRATOR_ACCURACY holds."""
    return max(INTEGRATOR_ACCURACY, TRUNCATION * float(step) ** 3)


WEIGHT_TIME = 1000.0
"""Time [s] over which the estimated weight error may drift by its prior: the weights are
constant, the walk only keeps the force state from freezing (the step's walk is
sigma_force0 sqrt(dt / WEIGHT_TIME))."""


def scaled_settings(mech: Mechanism, dt: float, **overrides: Any) -> EstimatorSettings:
    """:class:`EstimatorSettings` derived from the mechanism's scales (no per-benchmark
    tuning; the default of the online estimator).

    With ell the characteristic length, s each coordinate's scale (ell for a point
    coordinate, 1 for an angle, :func:`mbfg.model.scales.coordinate_scales`), g = |gravity|
    and omega_c = sqrt(g / ell):

    * white process noise ``sigma_dynamics`` = MODEL_ERROR omega_c^2 s (a tenth of the
      gravity acceleration scale, per coordinate);
    * initial priors ``sigma_q0`` = INITIAL_SPREAD s and ``sigma_v0`` = INITIAL_SPREAD
      omega_c s;
    * an unknown **weight error** as the force state: on every point coordinate on which
      the model's gravity acts (in natural coordinates a gravity or mass error is a constant
      generalized force there), with prior MODEL_ERROR |Q_g,i| on each coordinate
      (independent errors of the lumped weights) plus a fully correlated part MODEL_ERROR
      Q_g (``sigma_weight``: a wrong gravity or all masses off by the same fraction), and a
      slow random walk ``sigma_force0 sqrt(dt / WEIGHT_TIME)`` per step;
    * constraint rows ``sigma_constraints`` = CONSTRAINT_ACCURACY r_i, with r_i each row's
      scale (||Phi_q,i diag(s)|| at q0, :func:`mbfg.model.scales.constraint_scales`, in the
      row's units: Phi_i / r_i is a distance to the manifold in units of ell), the velocity
      rows CONSTRAINT_ACCURACY omega_c r_i and the acceleration rows (with
      ``noise_coordinates``) CONSTRAINT_ACCURACY omega_c^2 r_i: the velocity rows are the
      time derivative of the position rows along the motion, whose rate is omega_c (as in
      ``sigma_v0``).  1/dt would tie the constraints' accuracy to the step and make the
      velocity rows 1 / (omega_c dt) (160 on the review four-bar at dt = 5 ms) times looser
      than the position rows; with omega_c both are of the same size, as the plain settings'
      common 1e-4;
    * trapezoidal links ``sigma_integrator`` = INTEGRATOR_ACCURACY s on positions [m, rad]
      and INTEGRATOR_ACCURACY omega_c s on velocities [m/s, rad/s];

    the observation factors have each sensor's own sigma.  On the review four-bar (ell =
    5.57 m, omega_c = 1.26 rad/s; rows crank, coupler, rocker [m^2] and crank angle [m])
    the constraint sigmas are 6.7e-5, 3.8e-4, 1.7e-4, 1.8e-5 (position rows) and 1.26 times
    those (velocity rows, per s), the integrator's 1.1e-4 m and 2e-5 rad (position links)
    and 1.4e-4 m/s and 2.5e-5 rad/s (velocity links): of the order of the plain settings'
    1e-4, and the RMSE of its benchmark is unchanged.  Rescaling the mechanism's units
    rescales every sigma with its residual, so the estimate does not change.

    Without gravity there is no acceleration scale: the plain :class:`EstimatorSettings`
    (no force state, constant sigmas) are returned.
    ``overrides`` replace fields of the result."""
    import dataclasses

    from mbfg.model.scales import mechanism_scales
    g = float(np.hypot(*mech.gravity))
    if not g > 0.0:
        return dataclasses.replace(EstimatorSettings(), **overrides)
    sc = mechanism_scales(mech)
    s, r = sc.coordinates, sc.constraints
    w = float(np.sqrt(g / sc.length))
    Qg = np.asarray(mech.gravity_forces(), float)
    pc = np.asarray(mech.point_coords, int)
    pc = np.unique(pc[pc >= 0])
    weighed = pc[np.abs(Qg[pc]) > 1e-12 * max(float(np.max(np.abs(Qg))), 1e-300)]
    sigma_f0 = MODEL_ERROR * np.abs(Qg[weighed])
    settings = EstimatorSettings(
        sigma_dynamics=MODEL_ERROR * w ** 2 * s,
        sigma_q0=INITIAL_SPREAD * s, sigma_v0=INITIAL_SPREAD * w * s,
        force_coordinates=tuple(int(i) for i in weighed), sigma_force0=sigma_f0,
        sigma_weight=MODEL_ERROR if weighed.size else 0.0,
        sigma_force_walk=sigma_f0 * float(np.sqrt(dt / WEIGHT_TIME)),
        sigma_constraints=CONSTRAINT_ACCURACY * r,
        sigma_velocity_constraints=CONSTRAINT_ACCURACY * w * r,
        sigma_acceleration_constraints=CONSTRAINT_ACCURACY * w ** 2 * r,
        sigma_integrator=integrator_accuracy(w * dt) * np.vstack([s, w * s]))
    return dataclasses.replace(settings, **overrides)


def _coordinate_indices(mech, coords) -> tuple:
    """Coordinate indices of names/indices, or of ``"points"`` (every free point coordinate)."""
    if isinstance(coords, str):
        if coords != "points":
            raise UsageError(f"coordinates must be a sequence of names/indices or 'points', "
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
    return _row_scaled(f, lambda e: m)


START_OFFSETS = (-2.0, -1.0, 1.0, 2.0)
"""Displacements, in standard deviations of the initial prior, of each independent coordinate
in the other starts of the windows that hold step 0 (:meth:`ObservedProblem.alternative_starts`);
with the start at the prior mean they cover its 2-sigma range."""


class ObservedProblem(LeastSquaresProblem):
    """Dependent-coordinate forward problem plus observation factors and loose initial priors.

    ``readings``: one ``(steps, values)`` per sensor (as returned by
    :meth:`mbfg.model.sensors.SensorSet.synthesize`); ``n_steps`` the length of the time grid;
    ``forces`` the known applied forces (:mod:`mbfg.model.forces`, t = k dt)."""

    def __init__(self, mech, sensors, readings, n_steps, est: EstimatorSettings, dt,
                 forces=None):
        super().__init__(mech, est.forward_settings(dt), "dependent", forces=forces)
        self.est = est
        self.force_indices = _coordinate_indices(mech, est.force_coordinates)
        self.noise_indices = _coordinate_indices(mech, est.noise_coordinates)
        if self.force_indices:
            self.layout = StepLayout(self.layout.slots + (("Q", len(self.force_indices)),))
        self.sensors = tuple(sensors)
        for s in self.sensors:
            s.validate(mech)
        self.n_steps = int(n_steps)
        grid = readings_on_grid(self.sensors, readings, self.n_steps)
        self._z = [z for z, _ in grid]
        self._has = [has for _, has in grid]

    def initial_priors(self, q_start: ArrayLike, v_start: ArrayLike, row: int = 0) -> list:
        lay, e, n = self.layout, self.est, self.mech.n
        sq = np.broadcast_to(np.asarray(e.sigma_q0, float), (n,)).copy()
        sv = np.broadcast_to(np.asarray(e.sigma_v0, float), (n,)).copy()
        if self.noise_indices:
            others = np.setdiff1d(np.arange(n), self.noise_indices)
            sq[others] = sv[others] = np.inf
        out = [L.prior(lay, row, "q", q_start, sq), L.prior(lay, row, "v", v_start, sv)]
        if self.force_indices:
            nf = len(self.force_indices)
            s0 = np.broadcast_to(np.asarray(e.sigma_force0, float), (nf,))
            if e.sigma_weight:
                g = np.asarray(self.mech.gravity_forces(), float)[list(self.force_indices)]
                C = np.diag(s0 ** 2) + float(e.sigma_weight) ** 2 * np.outer(g, g)
                W = np.linalg.inv(np.linalg.cholesky(C))        # whitening: W C W^T = I
                out.append(L.UnaryLinear([row], W @ lay.selector("Q"), np.zeros(nf)))
            else:
                out.append(L.prior(lay, row, "Q", np.zeros(nf), s0))
        return out

    def alternative_starts(self, W: ArrayLike) -> list:
        """Other starting points (L, dim) for the Gauss-Newton solve of a window that still
        holds step 0 (a fixed-lag smoother's multi-start): the window with each independent
        coordinate displaced by START_OFFSETS standard deviations of its initial prior
        (``sigma_q0``) and re-assembled, the velocities projected onto the constraints.

        With rate sensors and a wrong model the first windows have a local minimum: the
        initial angle error explained by a weight force far outside its prior (review
        four-bar, angle off by pi/8, crank gyroscope, seed 1002: on the first 11 steps an
        error of 66.5 there against 7.3 near the true angle), from which Gauss-Newton does
        not escape.  The smoother keeps the start whose solution has the least error."""
        W = np.asarray(W, float)
        lay, mech = self.layout, self.mech
        q, v = W[:, lay.slice("q")], W[:, lay.slice("v")]
        sq = np.broadcast_to(np.asarray(self.est.sigma_q0, float), (mech.n,))
        indices, _ = best_coordinates(mech, q[-1], self.scales.coordinates)
        starts = []
        for i in indices:
            if not np.isfinite(sq[i]):
                continue
            for f in START_OFFSETS:
                try:
                    qs = np.array([K.solve_finite_displacement(mech, qr, [i], [qr[i] + f * sq[i]])
                                   for qr in q])
                except MbfgError:
                    continue
                X = W.copy()
                X[:, lay.slice("q")] = qs
                X[:, lay.slice("v")] = K.project_velocities_batch(mech, qs, v)
                starts.append(X)
        return starts

    def marginal_projector(self, x: ArrayLike) -> np.ndarray:
        """(dim, dim) projector P onto the tangent space, at the step vector ``x``, of the
        manifold the position and velocity constraints define (the fixed-lag smoother's
        marginal prior on a row is restricted to it: A -> A P).

        Each window row carries its own position and velocity constraint factors, nonlinear
        and tight (sigma ~ 3e-6 of each row's scale).  A Gaussian prior marginalized from the
        rows before it also carries their information along the manifold's normals, but
        linearized where those rows were then estimated: when the estimate later moves along
        the curved manifold by an angle d, the frozen tangent plane misses the manifold by
        about ell d^2 / 2, and the prior charges that as a constraint violation (2 m crank,
        d = 0.05 rad: a whitened error in the thousands, against about 1/2 per reading that
        asks for the move).  The prior then pins the estimate, which is biased and too
        confident (review four-bar, encoder noise x3, seed 1009: 0.40 rad RMSE with a 0.005
        rad std; 0.0098 rad with the projection).  Restricting the prior to the tangent
        space conditions it on the normal part, which the row's own constraint factors
        impose exactly.

        The normal directions are the rows of the constraints' Jacobian J = [[Phi_q, 0],
        [(Phi_q v)_q, Phi_q]] in (q, v), orthogonal in the metric that measures each
        coordinate in its own scale (s, and omega_c s for the rates; 1/dt without gravity),
        so P does not depend on the mechanism's units: P = S (I - N^T N) S^-1 with N an
        orthonormal basis of the rows of J S.  The other slots (accelerations, forces) are
        untouched."""
        lay, mech = self.layout, self.mech
        parts = lay.unpack(np.asarray(x, float)[None])
        _, Jp = T.position_constraints_residual(mech)(parts, True)
        _, Jv = T.velocity_constraints_residual(mech)(parts, True)
        sq, sv = lay.slice("q"), lay.slice("v")
        mc = Jp["q"].shape[1]
        J = np.zeros((2 * mc, lay.dim))
        J[:mc, sq] = Jp["q"][0]
        J[mc:, sq] = Jv["q"][0]
        J[mc:, sv] = Jv["v"][0]
        g = float(np.hypot(*mech.gravity))
        rate = np.sqrt(g / self.scales.length) if g > 0.0 else 1.0 / self.settings.dt
        S = np.ones(lay.dim)
        S[sq] = self.scales.coordinates
        S[sv] = rate * self.scales.coordinates
        _, sv_, Vt = np.linalg.svd(J * S, full_matrices=False)
        rank = int(np.count_nonzero(sv_ > sv_[0] * max(J.shape) * np.finfo(float).eps)) \
            if sv_.size and sv_[0] > 0.0 else 0
        N = Vt[:rank]
        return np.eye(lay.dim) - (S[:, None] * (N.T @ N)) / S[None, :]

    @property
    def informative_steps(self) -> np.ndarray:
        """(n_steps,) bool: the steps with at least one reading."""
        return np.any(np.vstack(self._has), axis=0) if self._has else np.zeros(self.n_steps, bool)

    def link_term(self, rows0: ArrayLike) -> BinaryLinear:
        if not self.force_indices:
            return super().link_term(rows0)
        s = self.settings
        return L.step_links(self.layout, rows0, s.dt, [("q", "v"), ("v", "a")],
                            s.sigma_integrator, scheme=s.integrator, equalities=["Q"],
                            sigma_equality=self.est.sigma_force_walk)

    def pack(self, q: ArrayLike, v: ArrayLike, a: ArrayLike) -> np.ndarray:
        return super().pack(q, v, a)  # the force slot (if any) starts at zero

    def nonlinear_term(self, steps: ArrayLike, rows: ArrayLike) -> StackedTerm:
        if self.force_indices or self.noise_indices:
            s, mech = self.settings, self.mech
            families = [(T.position_constraints_residual(mech), s.sigma_constraints),
                        (T.velocity_constraints_residual(mech), s.sigma_velocity_constraints)]
            known = self.applied_forces(np.asarray(steps, int))
            dyn = (T.dynamics_residual(mech, forces=known, force_slot="Q",
                                       force_indices=self.force_indices)
                   if self.force_indices else T.dynamics_residual(mech, forces=known))
            if self.noise_indices:
                families.append((T.acceleration_constraints_residual(mech),
                                 s.sigma_acceleration_constraints))
                dyn = _rows(dyn, self.noise_indices)
            families.append((dyn, s.sigma_dynamics))
            term = T.StackedTerm(self.layout, rows, families)
        else:
            term = super().nonlinear_term(steps, rows)
        steps = np.asarray(steps, int)
        loss = self.est.robust
        width = (self.est.robust_width if self.est.robust_width is not None
                 else ROBUST_WIDTH.get(loss))
        for s, z, has in zip(self.sensors, self._z, self._has):
            f = observation_residual(self.mech, s, z[steps])
            if loss is not None:
                f = _robust(f, s.sigma, loss, width)
            term.residuals.append((_masked(f, has[steps]), s.sigma))
        return term
