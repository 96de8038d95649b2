"""Particle filter with branch inference (Sanjurjo, Blanco-Claraco et al. 2015, "Multibody
dynamics as Bayesian networks", Algorithm 1 MBD_SIR), vectorized over particles with numpy,
with an informative proposal, selective resampling and a mode-loss monitor.

Each particle carries the independent coordinates z, their rates zdot and a branch label B in
{-1, +1}: the orientation sign of the triangle of three points (i, j, k) whose middle point j
has two assemblies (for a four-bar, the coupler-rocker joint mirrored across the line from the
crank pin to the rocker's ground pivot).  The dependent coordinates follow z by a batched
Newton position problem started at each particle's previous q (continuation: the particle
stays on its branch).

Transition (the paper's lines 2-3, Eqs. 11-13): the model's independent dynamics
zddot = f(z, zdot) integrated over the step (by default the classical Runge-Kutta step of
:func:`mbfg.model.integrate.independent_step`, as in the paper; ``integrator="heun"``: Heun's
predictor-corrector, two position problems per step instead of five, enough for slow
mechanisms), plus an acceleration noise w ~ N(0, sigma_a^2)
held over the step: x_k = Phi(x_{k-1}) + G w_k with G = [dt^2/2, dt] per coordinate.

Proposal.  The paper samples w blindly (the "bootstrap" proposal) and weights by the
likelihood of the readings.  With precise sensors (the review's gyroscope reads to 1e-3
rad/s, while one step of process noise spreads the rates by sigma_a dt) almost every sample
then misses the reading: the effective sample size collapses and the filter loses the mode.
Here (``proposal="optimal"``, default) w is drawn from the locally linearized optimal proposal
p(w | x_{k-1}, o_k) (Doucet, Godsill & Andrieu 2000): with h(w) ~ h0 + H w (H from the
sensors' exact Jacobians, dh/dw = H_q R dt^2/2 + H_v R dt + H_a R),

    S = H Sigma_a H^T + Sigma_s,   K = Sigma_a H^T S^-1,
    w ~ N(K (o - h0), Sigma_a - K H Sigma_a),

and the weight is multiplied by the exact importance ratio
p(o | x_k) N(w; 0, Sigma_a) / N(w; K r, Sigma_a - K H Sigma_a) (unbiased whatever the quality
of the linearization).  Resampling (systematic) only when the effective sample size drops
below ``resample_threshold * M`` (Algorithm 1, lines 11-14).

Acceleration noise.  sigma_a^2 + (``model_error`` f)^2 per particle, f its model
acceleration: a floor from the mechanism's scales plus a relative model error (a fast phase
of a well-modelled mechanism still has integration error in proportion to its acceleration).
With ``init="gaussian"`` (tracking from a guess, possibly with a wrong model) the noise is
also adapted by covariance matching: the normalized innovation squared of the cloud's
predictive distribution of the readings per reading component averages 1 when the noise is
right.  That distribution is the prior-weighted mixture of the particles' predictions: its
mean innovation ybar against its covariance C, the spread of the particles' innovations plus
their mean S (:func:`_predictive_innovation`), S with the noise of every step since the last
readings, so that readings every few steps do not count the unread steps' noise as too
little noise.  (The prior-weighted mean of each particle's own r^T S^-1 r, used before, is
1 + 2 tr(S^-1 C_h) / k on average even when the noise is right, C_h the spread of the
predicted readings: it raised the noise whenever the cloud was spread against the readings'
noise, up to 4x on the review four-bar with the crank gyroscope's noise x3, and the angle
then drifted from the truth by 4 of its reported standard deviations.)  Its running mean
(rate :data:`ADAPT_RATE`) scales the noise variance up, to at most :data:`ADAPT_MAX`^2 times,
and back down to 1.  With ``init="uniform"`` it is not adapted: there the innovations measure
the spread of the hypotheses, not the noise.

Fading.  The running mean answers a lasting model error in a few dozen readings; a sudden
one (a generated five-bar whose accelerations rise tenfold for a few steps where its
coordinates turn singular) empties the cloud first.  Where this step's readings lie beyond
the chi-square quantile ``fading`` of the predictive distribution (ybar^T C^-1 ybar, k
components), this step's noise variance alone is multiplied by the factor lambda that brings
that statistic to its mean k, C(lambda) = C + (lambda - 1) (Sbar - Sigma_s) (Sbar the
cloud's mean S: the part of C the noise makes), at most up to the adaptation's limit
(:func:`_fading`; the "fading memory" of the strong tracking filters, per step).  The
optimal proposal then draws that step's noise with the wider prior and weights by it;
the mode-loss monitor and the running mean still judge the readings against the model's
noise.  Not over the first 1 / omega_c: there the readings are still separating the initial
spread's modes, and a wide proposal kicks the rates to explain a position error.  Without
it the five-bar of seed 31 (200 particles, the calibrated statistic) fell to 3 effective
particles at that crossing, restarted, and doubled its whole-run error.

Regularized resampling.  While the branch is undecided (``init="uniform"``), copies of a
resampled particle are spread in z over the spacing of the initial cover (range / M) and
re-assembled on their own branch, so that the ridge of initial states that explain the first
readings stays sampled at the cover's resolution (without it 1000 particles lock onto a
wrong angle, or the wrong branch, in some runs).  While tracking (``init="gaussian"``) the
copies are moved by the shrunk kernel of Liu & West (2001) in (z, zdot), fitted to each mode
of the survivors (:func:`_kernel_moves`): survivors closer than 4 h cloud standard deviations
(h Silverman's bandwidth) form one mode; in each, the copies move towards the mode's mean by
1 - sqrt(1 - h^2) of their deviation plus h times a draw from its weighted covariance, then
exactly onto the mode's weighted mean and covariance, that covariance divided by 1 - sum w^2
(the weighted Bessel correction); re-assembled on their own branch.  Without a kernel the
angle's spread is renewed only by dt^2/2 of each step's noise: on the review four-bar with the
coupler gyroscope it collapsed to 1e-4 rad about an angle 0.04 rad off before the phase (t =
1.3 s) where the coupler's rate hardly depends on the crank's, and no particle explained the
readings after it (seeds 108 and 301 refused).  Without the correction and the exact match,
the weights of hundreds of resamplings (each shrinking the spread by 1 - sum w^2 on average,
however little they say about the angle) collapsed the angle's spread with the crank
gyroscope to 1e-4 rad about an error of 0.006 rad (2-sigma coverage 2-100 % over seeds
1000-1009, 64 % on average over 1000-1019).  One kernel for the whole cloud moves particles
between modes: fitted to the cloud the first readings leave (several modes, on a generated
shaper near a turning point of its coordinates) it put 7 of 8 noise seeds of that shaper on a
wrong one.  Over the first 1 / omega_c, while the readings are still separating the modes the
initial spread covers, the copies move only when the survivors form one mode of at least
D + 1 of them (a smaller one, which is not moved, does not hold the others back: on the
review four-bar with the crank gyroscope and the angle +pi/8 off, two survivors 0.15 rad
away at the first resampling kept the main mode's copies from moving, its 200 angles came
down to two clusters 0.01 rad apart by 0.07 s, and the filter held one of them, 0.0125 rad
off, with a spread of 2e-4 rad to the end, on 2 of seeds 2000-2009), and not at the first
step's resampling, of the initial draw itself.  Over that time a Gaussian start also holds
:data:`SETTLING_COVER` times the tracking particles (1000 for 200): with one crank-gyroscope
reading every 4th step, 200 particles still collapsed onto a cluster beside the truth on 7 of
seeds 2000-2019 (2-sigma coverage 0-55 %).  Below as many effective particles
as the kernel's covariance has dimensions (precise readings meeting a spread cloud, as when
they resume after a gap; after the first 1 / omega_c) the weighted covariance is degenerate:
the kernel then takes the predicted cloud's covariance updated by
the step's readings (the Kalman update, :func:`_updated_covariance`).  Without it the copies
of the one survivor kept its angle: on the review four-bar with the crank gyroscope, 4 s
without readings (seed 300), 0.02 rad off to the end with a reported spread of 1e-5 rad.

Weight error.  With ``init="gaussian"`` the model's weights are uncertain too: the dynamics
carry a factor eps on the model's gravity forces, Q = Q_applied + eps Q_g, prior N(0,
``model_error``^2).  A wrong gravity, or all masses off by the same fraction, is exactly
that in natural coordinates, at every configuration (the fully correlated part of the online
factor-graph estimator's weight-error state, :func:`mbfg.graphs.estimation.scaled_settings`).
eps enters the accelerations linearly, zddot = f(z, zdot) + eps g(z) + w with g = Mbar^-1 R^T
Q_g, so each particle carries its posterior of eps given its own path as sufficient
statistics (Storvik 2002): a Gaussian N(m, P), updated at every step with readings by the
step's acceleration deviation u = w + eps g as a linear reading of eps with the noise
Sigma_a; the step's prediction draws eps from it.  A constant carried as a particle value
instead collapses onto the values the first resamplings keep and cannot move after (tried
with the Liu-West kernel: with the encoder on the review four-bar it froze at -0.19 to
+0.17).  A restart keeps the cloud's estimate and spread; the gap search integrates its
candidates with the estimate.  Without it the model's weight error biases the angle a rate
sensor leaves to the dynamics: on the review four-bar with the crank gyroscope (model
gravity -8.81 against -9.81, eps = 0.1135) the angle error after 2 s was 0.0099 rad on
average over seeds 100-109, and is 0.0014 with it (eps 0.113-0.114 +- 0.0025 at the end).
With rates only, the unknown weight also adds ways to explain them: a few generated
mechanisms' runs settle on a wrong configuration with a wrong weight.

Mode loss.  For every reading the normalized innovation squared of each particle,
r^T S^-1 r, is compared with the chi-square quantile of ``1 - loss_probability``.  When not one
particle explains ``patience`` readings in a row (or no particle assembles), the filter has
lost the mode: it restarts from its initial prior, at most ``max_restarts`` times in a row
(about the current estimate with ``init="gaussian"``, its rates spread by the initial spread
or, if larger, by the predicted cloud's rate spread when the readings last resumed after
steps without any: after a gap a lost mode's rate can be off by several initial spreads; its
coordinates and rates spread at least as far as the estimate has moved from the last step
whose readings a particle explained: over a burst of outliers the estimate follows them; the
whole turn, both branches, rates up to twice the estimate with ``init="uniform"`` while the
mechanism is slower than omega_c s; at speed a global restart locks onto wrong modes, so a
filter that has decided its branch restarts about its estimate on that branch, as from a
guess (the 2015 four-bar's lower branch, readings seed 1114: lost from 0.215 s, one restart
at 0.235 s, 0.11 deg after 0.5 s); after a gap's search, about the state it found).  A
restart after which the filter explains readings for 1 / omega_c has recovered the mode and
the count starts again: a run over many cycles of the mechanism may pass a phase where the
readings lose the mode once per cycle (the review four-bar's coupler gyroscope near t = 1.3 s
and 7.9 s).  Otherwise it
raises :class:`~mbfg.errors.ConvergenceError` whose ``partial`` is the result up to the last
step whose reading a particle explained.  A diverged estimate is not returned as a result
when its readings show it; a wrong mode that explains every reading (rates only, far too
much process noise) cannot be seen by any monitor.

Noise settings come from the mechanism's scales (:mod:`mbfg.model.scales`): with
omega_c = sqrt(|g| / ell) (:func:`mbfg.model.identification.characteristic_rate`) and s the
scale of each independent coordinate (1 rad, or ell for a point coordinate), the default
sigma_a = ``model_error`` omega_c^2 s, the initial spread 0.25 s and 0.25 omega_c s, the
uniform start's rate bound 0.5 omega_c s.

Estimates (Eq. 19): weighted means, the angles by the circular mean (footnote 6); P(B = b)
(Eq. 20) as the summed weights of the particles on branch b.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import ConvergenceError, UsageError
from mbfg.estimation.common import gate as _gate
from mbfg.estimation.common import (applied_forces, check_probability, correlation_cholesky,
                                    filter_result, initial_state, innovation,
                                    normalized_square, observation_jacobian, predict_readings,
                                    prepare_readings, reading_variances, systematic_resample,
                                    weighted_mean)
from mbfg.estimation.reacquisition import GapReacquisition
from mbfg.model.dynamics import independent_state
from mbfg.model.forces import force_function
from mbfg.model.identification import characteristic_rate
from mbfg.model.integrate import independent_step
from mbfg.model.kinematics import solve_positions_batch, sweep_configurations
from mbfg.model.partition import StatePartition
from mbfg.model.scales import coordinate_scales

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import SensorSet
    from mbfg.results import EstimationResult

__all__ = ["particle_filter", "branch_sign", "default_branch_points", "mirror_branch",
           "noise_scales", "MODEL_ERROR", "INITIAL_SPREAD", "ADAPT_RATE",
           "ADAPT_MAX", "SETTLING_COVER", "FADING"]

MODEL_ERROR = 0.1
"""Default ``model_error``: sigma_a = MODEL_ERROR omega_c^2 s (dimensionless)."""

ADAPT_RATE = 0.1
"""Smoothing and step of the noise adaptation per reading (dimensionless)."""

ADAPT_MAX = 10.0
"""Largest factor the adaptation puts on the acceleration noise (dimensionless)."""

INITIAL_SPREAD = 0.25
"""Default initial spread about the guess, in units of each coordinate's scale s (and of
omega_c s for the rates) (dimensionless)."""

SETTLING_COVER = 5
"""Particles per tracked particle over the first 1 / omega_c of a Gaussian start (the
2015 benchmark's 1000 : 200 of its uniform start; dimensionless).  While the readings are
still separating the modes of the initial spread, 200 copies of a few survivors collapsed
onto a cluster that missed the truth (review four-bar, crank gyroscope, one reading every
4th step or the angle +pi/8 off)."""

FADING = 0.999
"""Default ``fading``: the chi-square quantile of the predictive distribution beyond which a
step's readings widen that step's noise (module docstring, Fading; a probability).  A
reading beyond it comes once in 1000 when the noise is right.  Tried at 0.99 while it was
developed: it also fired on the review four-bar's coupler gyroscope, whose 2-sigma coverage
fell from 96.2 to 92.4 % (trace seeds 2000-2009), for about the same rescue of the generated
five-bar (whole-run error 1.9e-3 against 2.1e-3 of its length)."""

INFORMED_ITERATIONS = 5
"""Gauss-Newton iterations that center the informed start on the first readings (a cost
setting: each is one position problem; :func:`_informed_positions`)."""


# ================================================================================ branches
def default_branch_points(mech: Mechanism) -> tuple:
    """(i, j, k) for the branch label: a free point j joined by bodies to a free point i and a
    fixed point k (an RR dyad closing the loop on the ground), the highest-index such j (for
    the bundled four-bars the coupler-rocker joint); () when the mechanism has no such dyad
    (an open chain, or loops closed otherwise): there is then no branch label to track, and
    every configuration is labelled +1."""
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
    return ()


def branch_sign(mech: Mechanism, q: ArrayLike, points: tuple | None = None) -> np.ndarray:
    """Branch label sign(cross(r_j - r_i, r_k - r_i)) of configurations q (..., n) -> (...)."""
    points = default_branch_points(mech) if points is None else tuple(points)
    if not points:  # no branch label: one branch
        return np.ones(np.shape(q)[:-1], int)
    i, j, k = points
    r = mech.point_positions(q)
    a, b = r[..., j, :] - r[..., i, :], r[..., k, :] - r[..., i, :]
    return np.sign(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]).astype(int)


def mirror_branch(mech: Mechanism, q: ArrayLike, points: tuple | None = None) -> np.ndarray:
    """q with point j reflected across the line through points i and k (the other assembly of
    the dyad: distances to i and k are preserved)."""
    points = default_branch_points(mech) if points is None else tuple(points)
    q = np.array(q, float)
    if not points:  # no branch label: nothing to mirror
        return q
    i, j, k = points
    r = mech.point_positions(q)
    u = r[..., k, :] - r[..., i, :]
    u = u / np.linalg.norm(u, axis=-1, keepdims=True)
    v = r[..., j, :] - r[..., i, :]
    rj = r[..., i, :] + 2 * np.sum(v * u, axis=-1, keepdims=True) * u - v
    ix, iy = mech.point_coords[j]
    q[..., ix], q[..., iy] = rj[..., 0], rj[..., 1]
    return q


def noise_scales(model: Mechanism, indices: ArrayLike) -> tuple[np.ndarray, float]:
    """Scales of the independent coordinates ``indices``: s (d,) (1 for an angle, the
    characteristic length ell for a point coordinate) and the rate omega_c = sqrt(|g| / ell)
    [1/s].  :class:`~mbfg.errors.UsageError` without gravity (then no acceleration scale
    follows from the mechanism: give ``sigma_a`` and the initial spreads)."""
    s = coordinate_scales(model)[np.asarray(indices, int)]
    w = characteristic_rate(model)
    return s, w


def _need(value, name, w):
    if value is None and not np.isfinite(w):
        raise UsageError(f"the particle filter derives {name} from gravity, which this "
                         f"mechanism has none of; give {name}=...")


def _proposal(model, sensors, avail, st, zd, f, sig, sa2, dt, coef=None, steps=1):
    """Linearized optimal proposal at the predicted states: innovation r (N, k), its
    covariance S (N, k, k), mean (N, d) and covariance (N, d, d) of w, and the readings'
    angular mask.  ``st`` holds q, R at the predicted positions, ``zd``, ``f`` the predicted
    rates and model accelerations.

    Returned: ``(mean, P, nis, var, ang, o, r, S, S_since)``; nis (N,) is r^T S^-1 r for
    this step's noise, S_since (N, k, k) the innovation covariance with the noise of the
    ``steps`` steps since the last readings (the step's own and ``steps - 1`` earlier ones,
    unread, propagated at this state's Jacobians: a rate moves by dt w, a position by
    dt^2 (m + 1/2) w for noise m steps back), the covariance the noise adaptation must
    compare against when readings come every ``steps`` steps (``S`` itself when ``steps``
    is 1)."""
    R = st.R
    qd = np.einsum("pij,pj->pi", R, zd)
    qdd = np.einsum("pij,pj->pi", st.S, st.c) + np.einsum("pij,pj->pi", R, f)
    h, o, ang = predict_readings(model, sensors, avail, st.q, qd, qdd)
    r = innovation(o[None], h, ang)
    cq, cv, ca = (0.5 * dt * dt, dt, 1.0) if coef is None else coef
    blocks, of_q, of_v = [], [], []
    for i, _ in avail:
        J = sensors[i].jacobians(model, st.q, qd, qdd)
        shape = (R.shape[0], sensors[i].dim, R.shape[2])
        Hq = np.broadcast_to(J["q"] @ R, shape) if "q" in J and cq else np.zeros(shape)
        Hv = np.broadcast_to(J["v"] @ R, shape) if "v" in J and cv else np.zeros(shape)
        Ha = np.broadcast_to(J["a"] @ R, shape) if "a" in J and ca else 0.0
        blocks.append(cq * Hq + cv * Hv + ca * Ha)
        of_q.append(Hq)
        of_v.append(Hv)
    H = np.concatenate(blocks, axis=1)                              # (N, k, d)
    var = reading_variances(sensors, avail, sig)
    sa2 = np.broadcast_to(sa2, (R.shape[0], R.shape[2]))
    HS = H * sa2[:, None, :]                                        # H Sigma_a
    S = np.einsum("pkd,pld->pkl", HS, H) + np.diag(var)[None]
    Sinv = np.linalg.inv(S)
    K = np.einsum("pkd,pkl->pdl", HS, Sinv)                         # Sigma_a H^T S^-1
    mean = np.einsum("pdl,pl->pd", K, r)
    P = sa2[:, :, None] * np.eye(sa2.shape[1])[None] - np.einsum("pdl,plj->pdj", K, HS)
    nis = np.einsum("pk,pkl,pl->p", r, Sinv, r)
    S_since = S
    if steps > 1:
        # the earlier steps' noise: H_m = cq (2m + 1) Hq + cv Hv, m = 1 .. steps - 1
        a = cq * (2.0 * np.arange(1, steps) + 1.0)
        Hq, Hv = np.concatenate(of_q, axis=1), np.concatenate(of_v, axis=1)
        qS, vS = Hq * sa2[:, None, :], Hv * sa2[:, None, :]
        qv = np.einsum("pkd,pld->pkl", qS, Hv)
        S_since = S + np.sum(a * a) * np.einsum("pkd,pld->pkl", qS, Hq) \
            + (steps - 1) * cv * cv * np.einsum("pkd,pld->pkl", vS, Hv) \
            + cv * np.sum(a) * (qv + np.swapaxes(qv, -1, -2))
    return mean, P, nis, var, ang, o, r, S, S_since


def _predictive_innovation(r, S, wprior):
    """Mean ybar (k,) and covariance C (k, k) of the innovation under the cloud's predictive
    distribution of the readings, and the particles' mean covariance Sbar (k, k): the
    particles' innovations r (N, k) and covariances S (N, k, k) mixed with the prior weights
    ``wprior`` (N,) (law of total covariance: C is the weighted spread of r plus Sbar, the
    weighted mean of S).  None when no particle has a finite weight and innovation, or when
    the mixture overflows (readings far outside the mechanism's range: the mode-loss monitor
    then speaks for them)."""
    w = np.where(np.isfinite(wprior) & np.all(np.isfinite(r), axis=1), wprior, 0.0)
    if not w.sum() > 0.0:
        return None
    w = w / w.sum()
    use = w > 0.0
    ybar = w[use] @ r[use]
    D = r[use] - ybar
    Sbar = np.einsum("p,pkl->kl", w[use], S[use])
    C = (w[use, None] * D).T @ D + Sbar
    if not (np.all(np.isfinite(ybar)) and np.all(np.isfinite(C))):
        return None
    return ybar, C, Sbar


def _fading(ybar, C, Sbar, var, level, limit):
    """This step's factor lambda (>= 1, <= ``limit``) on the acceleration noise variance
    (module docstring, Fading): 1 while the predictive distribution's statistic
    ybar^T C^-1 ybar (``ybar`` (k,), ``C``, ``Sbar`` (k, k) of
    :func:`_predictive_innovation`, ``var`` (k,) the readings' variances) is within the
    chi-square quantile ``level`` with k degrees of freedom; otherwise the lambda whose
    C(lambda) = C + (lambda - 1) (Sbar - diag(var)) brings it to k, found by bisection in
    log lambda (the statistic falls as lambda grows), or ``limit`` if even that leaves it
    above k.  1 also where the statistic is not finite (``normalized_square``): no
    noise explains such readings, the mode-loss monitor speaks for them."""
    from scipy.stats import chi2
    k = ybar.size
    first = normalized_square(ybar, C)
    if not (math.isfinite(first) and first > chi2.isf(1.0 - level, k)):
        return 1.0
    noise = Sbar - np.diag(var)

    def statistic(lam):
        return normalized_square(ybar, C + (lam - 1.0) * noise)

    if not limit > 1.0 or statistic(limit) > k:
        return max(float(limit), 1.0)
    lo, hi = 0.0, math.log(limit)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if statistic(math.exp(mid)) > k else (lo, mid)
    return math.exp(hi)


def _gate_readings(prop, wprior, sensors, avail, probability):
    """The ``(index, values)`` pairs of ``avail`` that pass innovation gating against the
    particles' predictive distribution (:func:`_predictive_innovation` of the innovations
    and covariances of :func:`_proposal`'s result ``prop``, prior weights ``wprior`` (N,))."""
    mixed = _predictive_innovation(prop[6], prop[7], wprior)
    if mixed is None:
        return avail
    keep = _gate(*mixed[:2], sensors, avail, probability)
    out, row = [], 0
    for a in avail:
        if keep[row]:
            out.append(a)
        row += sensors[a[0]].dim
    return out


def _kernel_moves(dev, w, sel, rng, C=None, one_mode_only=False):
    """Moves (M', D) of the resampled copies ``sel`` (M',) of a cloud whose deviations from its
    weighted mean are ``dev`` (M, D), with weights ``w`` (M,): the shrunk kernel of Liu & West
    (2001) fitted to each mode of the survivors, its copies then moved to exactly the mode's
    weighted mean and covariance.

    Modes: the survivors linked by distances of at most 4 h in units of the cloud's weighted
    standard deviations (single linkage; h = (4 / (M' (D + 2)))^(1 / (D + 4)), Silverman's
    bandwidth: farther apart than the 2-sigma reach of two kernel draws, one from each side).
    Per mode with at least D + 1 survivors: its weighted mean m and covariance C_c = sum w (x -
    m)(x - m)^T / (1 - sum w^2) (weights normalized in the mode; the divisor is the weighted
    form of Bessel's correction: without it each resampling's weights, however little they say
    about a coordinate, shrink its spread by 1 - sum w^2 on average, and over the hundreds of
    resamplings of a run the cloud's angle spread collapsed far below its error), each copy
    x -> m + a (x - m) + h_c e, e ~ N(0, C_c), a = sqrt(1 - h_c^2) (h_c from the mode's count
    of copies), and the copies' deviations then mapped linearly onto exactly mean m and
    covariance C_c (the random part of the copies' spread otherwise drifts too).  Modes with
    fewer survivors are not moved (their covariance is degenerate).  With ``C`` (D, D) given,
    the whole cloud is one mode with that covariance (a Kalman-updated one when the weighted
    one is degenerate: :func:`_updated_covariance`).  Square roots are Cholesky factors of
    the correlations (:func:`~mbfg.estimation.common.correlation_cholesky`): they follow a
    change of units of z and zdot exactly.  ``one_mode_only``: no move at all when more than
    one mode has D + 1 survivors or more."""
    from scipy.sparse.csgraph import connected_components
    M, D = sel.size, dev.shape[1]
    move = np.zeros((M, D))
    if C is not None:
        labels, members, given = np.zeros(M, int), [np.unique(sel)], C
    else:
        h = (4.0 / (M * (D + 2))) ** (1.0 / (D + 4))
        survivors, copy_of = np.unique(sel, return_inverse=True)
        wn = w / w.sum()
        mean = wn @ dev
        sd = np.sqrt(wn @ (dev - mean) ** 2)
        x = (dev[survivors] - mean) / np.where(sd > 0.0, sd, 1.0)
        near = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1) <= (4.0 * h) ** 2
        n_modes, mode_of = connected_components(near, directed=False)
        labels = mode_of[copy_of]
        if one_mode_only and np.sum(np.bincount(mode_of) >= D + 1) > 1:
            return move
        members = [survivors[mode_of == c] for c in range(n_modes)]
    for c, mem in enumerate(members):
        copies = np.flatnonzero(labels == c)
        wc = w[mem] / w[mem].sum()
        m = wc @ dev[mem]
        if C is None:
            if mem.size < D + 1 or not float(wc @ wc) < 1.0:   # (one survivor has it all)
                continue
            dm = dev[mem] - m
            given = (wc[:, None] * dm).T @ dm / (1.0 - float(wc @ wc))
        try:
            L = correlation_cholesky(given)
        except np.linalg.LinAlgError:
            continue
        Mc = copies.size
        hc = (4.0 / (Mc * (D + 2))) ** (1.0 / (D + 4))
        y = dev[sel[copies]] - m
        y_new = math.sqrt(1.0 - hc * hc) * y + hc * rng.normal(size=(Mc, D)) @ L.T
        if Mc > D + 1:
            yc = y_new - y_new.mean(axis=0)
            try:
                Lv = correlation_cholesky(yc.T @ yc / Mc)
                y_new = np.linalg.solve(Lv, yc.T).T @ L.T
            except np.linalg.LinAlgError:
                pass
        move[copies] = y_new - y
    return move


def _updated_covariance(model, sensors, avail, sig, zp, zdp, wprior, live, angular, center,
                        state, Q):
    """The covariance (2d, 2d) of (z, zdot) of the predicted cloud (``zp``, ``zdp`` (M, d)
    with the prior weights ``wprior`` (M,) where ``live``; angles about ``center``) updated
    by the readings ``avail`` linearized at ``state`` (one particle's IndependentState, forces
    ``Q`` (n,)): P - P H^T (H P H^T + Sigma_s)^-1 H P (the Kalman update)."""
    wr = np.where(np.isfinite(wprior) & live, wprior, 0.0)
    wr = wr / wr.sum()
    _, dz = weighted_mean(zp, wr, angular, reference=center)
    dev = np.concatenate([dz - wr @ dz, zdp - wr @ zdp], axis=1)
    P = (wr[:, None] * dev).T @ dev
    H = observation_jacobian(model, sensors, avail, state, Q)
    S = H @ P @ H.T + np.diag(reading_variances(sensors, avail, sig))
    C = P - P @ H.T @ np.linalg.solve(S, H @ P)
    return 0.5 * (C + C.T)


def _gauss_logpdf(x, mean, cov):
    """log N(x; mean, cov) for batches (N, d), (N, d), (N, d, d) (or (d,), (N, d) diagonal)."""
    d = x.shape[-1]
    e = x - mean
    if cov.ndim <= 2:
        return -0.5 * (np.sum(e * e / cov, axis=-1) + np.sum(np.log(2 * np.pi * cov), axis=-1))
    L = np.linalg.cholesky(cov)
    y = np.linalg.solve(L, e[..., None])[..., 0]
    logdet = 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * (np.sum(y * y, axis=-1) + logdet + d * np.log(2 * np.pi))


def _initial_rates(model, sensors, avail, st, zd, logw, zds, sig, dt, rng, idx, Q,
                   bound=None):
    """Rates of the initial particles drawn from their prior conditioned on the first
    readings (linearized, with the exact importance ratio as weight): the prior N(zd, zds^2),
    or with ``bound`` U(-bound, bound) (proposed from N(0, bound^2 / 3) conditioned)."""
    M, d = zd.shape
    if bound is not None:
        zd = np.zeros_like(zd)
        zds = np.full(d, bound / math.sqrt(3.0))
    v2 = np.asarray(zds, float) ** 2
    mean, P, *_ = _proposal(model, sensors, avail, st, zd, st.zdd, sig, v2, dt,
                                    coef=(0.0, 1.0, 0.0))
    L = np.linalg.cholesky(0.5 * (P + np.swapaxes(P, -1, -2)))
    delta = mean + np.einsum("pij,pj->pi", L, rng.normal(size=(M, d)))
    if bound is None:
        prior = _gauss_logpdf(delta, np.zeros_like(delta), v2)
    else:
        prior = np.where(np.all(np.abs(delta) <= bound, axis=-1), -d * math.log(2 * bound),
                         -np.inf)
    logw = logw + prior - _gauss_logpdf(delta, mean, P)
    return independent_state(model, st.q, idx, zd + delta, Q), logw


def _explained(model, sensors, avail, st, sig, limit):
    """Whether some particle of ``st`` explains the readings ``avail`` on its own: its
    normalized innovation squared is within ``limit``."""
    h, o, ang = predict_readings(model, sensors, avail, st.q, st.qd, st.qdd)
    r = innovation(o[None], h, ang)
    nis = np.sum(r * r / reading_variances(sensors, avail, sig), axis=-1)
    return bool(np.any(nis <= limit))


def _informed_positions(model, sensors, avail, q0, idx, zd0, zs, sig, rng, M, Q, pts, branch,
                        iterations=INFORMED_ITERATIONS):
    """Initial positions drawn from their Gaussian prior N(z0, zs^2) conditioned on the first
    readings: the iterated (Gauss-Newton) linearization of the readings about the posterior
    mode, then M draws from that Gaussian on the branch ``branch``, weighted by the exact
    ratio prior / proposal (the readings' likelihood is added by the caller).  Used when no
    particle of the prior's draw explains the first readings (several independent
    coordinates against precise position sensors).  Returns z, q, ok, logw."""
    d = idx.size
    zc = q0[idx]
    Pz = np.diag(np.asarray(zs, float) ** 2)
    var = reading_variances(sensors, avail, sig)
    z, q = zc.copy(), q0[None].copy()
    for _ in range(iterations):
        st = independent_state(model, q, idx, zd0[None], Q[:1])
        h, o, ang = predict_readings(model, sensors, avail, st.q, st.qd, st.qdd)
        r = innovation(o, h[0], ang)
        H = observation_jacobian(model, sensors, avail, st, Q[0])[:, :d]
        S = H @ Pz @ H.T + np.diag(var)
        K = np.linalg.solve(S, H @ Pz).T
        z_new = zc + K @ (r + H @ (z - zc))
        qn, ok = solve_positions_batch(model, q + (st.R[0] @ (z_new - z))[None], idx, z_new[None])
        if not ok[0]:
            break
        z, q = z_new, qn
    P = Pz - K @ H @ Pz
    P = 0.5 * (P + P.T)
    zs_ = z[None] + rng.multivariate_normal(np.zeros(d), P, size=M)
    R = independent_state(model, q, idx, zd0[None], Q[:1]).R[0]
    qs, ok = solve_positions_batch(model, q + (zs_ - z) @ R.T, idx, zs_)
    wrong = ok & (branch_sign(model, qs, pts) != branch)
    if wrong.any():
        qs[wrong], ok[wrong] = solve_positions_batch(model, mirror_branch(model, qs[wrong], pts),
                                                    idx, zs_[wrong])
    logw = (_gauss_logpdf(zs_ - zc, np.zeros_like(zs_), np.diag(Pz)[None])
            - _gauss_logpdf(zs_, np.broadcast_to(z, zs_.shape), np.broadcast_to(P, (M, d, d))))
    return zs_, qs, ok, np.where(ok, logw, -np.inf)


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
    n_particles: int = 200,
    initial_particles: int | None = None,
    sigma_a: ArrayLike | None = None,
    model_error: float = MODEL_ERROR,
    sensor_sigmas: ArrayLike | None = None,
    init: str = "gaussian",
    z_std: ArrayLike | None = None,
    zd_std: ArrayLike | None = None,
    z_range: tuple[float, float] | None = None,
    zd_max: float | None = None,
    branch_init: str | None = None,
    branch_points: ArrayLike | None = None,
    true_branch: int | None = None,
    resample_threshold: float = 0.5,
    proposal: str = "optimal",
    integrator: str = "rk4",
    loss_probability: float = 1e-6,
    patience: int = 5,
    adapt: bool | None = None,
    regularize: bool = True,
    max_restarts: int = 2,
    gate: float | None = None,
    fading: float | None = FADING,
    indices: ArrayLike | None = None,
    forces: ForceInput | None = None,
    repartition: bool = True,
    reacquire: bool = True,
    weight_error: bool | None = None,
) -> EstimationResult:
    """Particle filter with branch inference (2015 paper, Algorithm 1, with the proposal and
    the mode-loss monitor of the module docstring).

    Parameters (besides the common ones: ``model``, ``sensors``, ``readings``, ``dt``,
    ``n_steps``, ``seed``, ``q0``, ``qd0``, ``indices``, ``forces``)
    ----------
    n_particles : int
        M, the particles kept while tracking.
    initial_particles : int, optional
        Start with this many (more than ``n_particles``) and resample down to
        ``n_particles`` once one branch has probability > 0.99 (with ``init="gaussian"``:
        and not before the first 1 / omega_c): an unknown initial state and branch need a
        dense cover, tracking does not.  Default: :data:`SETTLING_COVER` x ``n_particles``
        with ``init="gaussian"`` (``n_particles`` throughout without gravity, where omega_c
        is not defined), ``n_particles`` throughout with ``init="uniform"``.
    sigma_a : float or (d,), optional
        Acceleration noise of the probabilistic equations of motion, in the units of zddot.
        Default ``model_error * omega_c^2 * s`` (:func:`noise_scales`).
    model_error : float
        Dimensionless; see ``sigma_a``.
    sensor_sigmas : sequence or float, optional
        Sensor sigmas the filter assumes; default each sensor's sigma.
    init : "gaussian" or "uniform"
        ``"gaussian"`` (default): z ~ N(q0's z, z_std^2), zdot ~ N(qd0's zdot, zd_std^2), like
        the Kalman filters' initial covariance about the same guess.  ``"uniform"``: the
        paper's unknown start (Eq. 22): z ~ U(z_range) (default q0's z +- pi s, a full turn
        for an angle; restricted to where the mechanism assembles), zdot ~ U(-zd_max, zd_max); one
        independent coordinate only.
    z_std, zd_std : float or (d,), optional
        Initial spread (default 0.25 s and 0.25 omega_c s, :data:`INITIAL_SPREAD`); also the
        spread of a restart after a mode loss.
    zd_max : float, optional
        Rate bound of ``init="uniform"`` (default 0.5 omega_c s).
    branch_init : "model" or "uniform", optional
        All particles on q0's branch, or B ~ U{-1, +1} (Eq. 22).  Default: "model" with
        ``init="gaussian"``, "uniform" with ``init="uniform"``.
    branch_points : (i, j, k), optional
        Points of the branch triangle (default :func:`default_branch_points`).
    true_branch : int, optional
        The truth's label (+1/-1, :func:`branch_sign` of the true q): then
        ``stats["branch_probability"]`` (T,) is P(B = true_branch) after each step.
    resample_threshold : float
        Resample when ESS < threshold * M (Algorithm 1: 1/2).
    proposal : "optimal" or "prior"
        The linearized optimal proposal (default) or the paper's blind one.
    integrator : "rk4" or "heun"
        Deterministic part of the transition (RK4: 5 position problems per step, Heun: 2).
    loss_probability, patience, max_restarts
        Mode-loss monitor: a reading no particle explains at the chi-square level
        ``1 - loss_probability``, ``patience`` readings in a row, triggers a restart; after
        ``max_restarts`` restarts in a row (none followed by 1 / omega_c of explained
        readings) the filter gives up (module docstring).
    adapt : bool, optional
        Adapt the acceleration noise by covariance matching (default: with
        ``init="gaussian"`` only).
    regularize : bool
        Regularized resampling (module docstring): while the branch is undecided
        (``init="uniform"``), and while tracking (``init="gaussian"``).  Default True.
    gate : float in (0, 1), optional
        Innovation gating, as the Kalman filters' (:func:`mbfg.estimation.common.gate`): a
        sensor's reading whose normalized innovation squared against the particles'
        predictive distribution (prior-weighted mean and covariance of the innovations plus
        each particle's linearized S) exceeds the chi-square quantile of ``gate`` is left out
        (``stats["rejected_readings"]`` counts the rows).  A step whose readings are all
        rejected counts for the mode-loss monitor as an unexplained one, so gating cannot
        hide a lost mode for more than ``patience`` readings.  Default None: no gating.
    fading : float in (0, 1), optional
        With ``adapt``: a step whose readings lie beyond this chi-square quantile of the
        particles' predictive distribution draws its own noise with the variance widened
        until they lie at its mean (module docstring, Fading; ``stats["fading"]`` (T,) the
        factor per step).  Default :data:`FADING`; None: off.
    repartition : bool
        Move the independent coordinates to the best-conditioned set when theirs approach a
        singular configuration (:class:`~mbfg.model.partition.StatePartition`, as the Kalman
        filters; ``stats["switches"]``), with ``init="gaussian"`` and the default noise and
        spreads only (those are set per coordinate from its scale).  ``z_std``/``zd_std``
        of the result stay on the first set, ``stats["indices"]``.  Default True.
    weight_error : bool, optional
        Estimate the model's weight error as a factor on its gravity forces (module
        docstring; ``stats["weight_error"]`` and ``stats["weight_error_std"]``, (T,)).
        Default: with ``init="gaussian"`` and gravity.
    reacquire : bool
        With ``init="gaussian"``: when the readings resume after a gap over which the cloud
        spread beyond a quarter of the coordinate's scale, search the crank's turn and rate
        against the next readings (also after an encoder's: it reads the angle, not the
        rate) and restart the cloud about the state found where the estimate is more
        than that spread from it (:mod:`mbfg.estimation.reacquisition`;
        ``stats["reacquisitions"]``).  Default True.

    Returns
    -------
    EstimationResult
        Named ``"pf"``: causal weighted-mean estimates, weighted standard deviations in
        ``z_std``/``zd_std``; stats: ``ms_per_step``, ``p_branch_plus`` (T,), ``ess`` (T,),
        ``population`` (T,), ``resamples``, ``restarts`` (steps), ``nis_min`` (T,) (the
        best particle's normalized innovation squared, nan without readings),
        ``unassembled`` (T,), ``noise_factor`` (T,) (the adaptation's factor on sigma_a),
        ``fading`` (T,) (the step's own factor on the noise variance),
        ``rejected_readings``, ``sigma_a``, ``branch_probability`` (with ``true_branch``), ``branch_points``,
        ``n_particles``.

    Raises
    ------
    ConvergenceError
        The mode is lost and restarts did not recover it; ``partial`` holds the estimates
        up to the last step whose reading a particle explained.
    UsageError
        Invalid options, or no gravity to derive the default noise from.
    """
    t0 = time.perf_counter()
    n_steps = int(n_steps)
    gate = check_probability(gate)
    fading = check_probability(fading, "fading")
    rng = np.random.default_rng(seed)
    sensors, sig, per_step = prepare_readings(model, sensors, readings, n_steps, sensor_sigmas)
    # the particles' independent coordinates move to a better-conditioned set when theirs
    # approach a singular configuration (as the Kalman filters': docs/sensors.md); only with
    # the Gaussian start and the default noise, which are set per coordinate from its scale
    movable = (repartition and init == "gaussian" and sigma_a is None and z_std is None
               and zd_std is None)
    partition = StatePartition(model, coordinate_scales(model)) if movable else None
    qa, idx, zd0 = initial_state(model, q0, qd0, indices, partition)
    q0a = qa[0]
    d, n, M_target = idx.size, model.n, int(n_particles)
    idx0 = idx                       # the coordinates z_std reports
    angular0 = np.isin(idx0, model.angle_coords)
    switches = []
    if init not in ("gaussian", "uniform"):
        raise UsageError(f"init must be 'gaussian' or 'uniform', got {init!r}")
    if proposal not in ("optimal", "prior"):
        raise UsageError(f"proposal must be 'optimal' or 'prior', got {proposal!r}")
    if integrator not in ("heun", "rk4"):
        raise UsageError(f"integrator must be 'heun' or 'rk4', got {integrator!r}")
    adapt = (init == "gaussian") if adapt is None else bool(adapt)
    branch_init = branch_init or ("model" if init == "gaussian" else "uniform")
    if branch_init not in ("model", "uniform"):
        raise UsageError(f"branch_init must be 'model' or 'uniform', got {branch_init!r}")

    def coordinate_noise(idx):
        """Scales s, omega_c, the acceleration noise sigma_a and the initial spreads of the
        coordinates idx (each given value as given, the others from the scales)."""
        s, wc = noise_scales(model, idx)
        sa = (model_error * wc * wc * s if sigma_a is None
              else np.broadcast_to(np.asarray(sigma_a, float), (d,)).copy())
        zs0 = INITIAL_SPREAD * s if z_std is None else np.broadcast_to(
            np.asarray(z_std, float), (d,))
        zds0 = (INITIAL_SPREAD * wc * s if zd_std is None
                else np.broadcast_to(np.asarray(zd_std, float), (d,)))
        return s, wc, sa, zs0, zds0

    s, wc, sa, zs0, zds0 = coordinate_noise(idx)
    _need(sigma_a, "sigma_a", wc)
    # a Gaussian start covers its spread with SETTLING_COVER times the particles over the
    # first 1 / omega_c, while the readings separate the spread's modes (``shrink`` below)
    settling_cover = init == "gaussian" and bool(np.isfinite(wc))
    if initial_particles is None and settling_cover:
        initial_particles = SETTLING_COVER * M_target
    M = max(int(initial_particles or 0), M_target)
    sa2 = sa * sa
    if init == "gaussian":
        _need(zd_std, "zd_std", wc)
    Qfun = force_function(forces, n)
    # the unknown weight error: each particle's factor eps on the model's gravity forces
    Qg = np.asarray(model.gravity_forces(), float)
    learns_weight = (init == "gaussian") if weight_error is None else bool(weight_error)
    learns_weight = learns_weight and bool(np.any(Qg != 0.0))
    eps_hat, eps_sd = 0.0, float(model_error)     # the estimate and its spread
    # each particle's Gaussian posterior of eps given its own path, N(eps_m, eps_P)
    # (Storvik 2002), and the value eps drawn from it for the current step
    eps_m, eps_P = np.zeros(M), np.full(M, eps_sd * eps_sd)

    def draw_weight_errors():
        """The particles' weight errors for a step (M,): drawn from their posteriors."""
        return eps_m + np.sqrt(eps_P) * rng.normal(size=eps_m.size) if learns_weight else (
            np.zeros(eps_m.size))

    eps = draw_weight_errors()

    def forces_at(t):
        """Generalized forces (M, n) of the particles at time t: the applied ones plus
        their weight errors eps Q_g."""
        Q = applied_forces(Qfun, t, None, idx, n, eps.size)
        return Q + np.outer(eps, Qg) if learns_weight else Q

    def searched_forces(t):
        """The gap search's forces (n,) or None: the applied ones plus the estimated weight
        error."""
        Q = Qfun(t)
        if not learns_weight:
            return Q
        return eps_hat * Qg if Q is None else Q + eps_hat * Qg

    # after a gap whose prediction spread the cloud over the turn: a global search of the
    # state against the next readings, and a restart about it (mbfg.estimation.reacquisition;
    # init='uniform' has its own global restart)
    watch = GapReacquisition(model, sensors, per_step, sig, dt, searched_forces,
                             "rk4" if integrator == "rk4" else "trapezoidal",
                             enabled=reacquire and init == "gaussian")
    pts = default_branch_points(model) if branch_points is None else tuple(branch_points)
    angular = np.isin(idx, model.angle_coords)
    b0 = int(branch_sign(model, q0a, pts))
    zmax = None
    if init == "uniform":
        _need(zd_max, "zd_max", wc)
        zmax = 0.5 * wc * float(s[0]) if zd_max is None else float(zd_max)
    # spacing of the initial uniform cover: the bandwidth of the regularized resampling
    roughen = None
    if init == "uniform" and regularize:
        lo_, hi_ = (-np.pi * s[0], np.pi * s[0]) if z_range is None else z_range
        roughen = (hi_ - lo_) / M * np.ones(d)
    from scipy.stats import chi2
    nis_limit = {}

    def draw(M, zc, zdc, qc, branch_of_q0, rate_spread=zds0, spread=None):
        """Initial (or restart) particles: z, zd, q, ok (``rate_spread``, ``spread``: the
        rates' and the coordinates' spread of a Gaussian draw, default zs0)."""
        if branch_init == "uniform" and branch_of_q0 is None:
            B = rng.choice(np.array([-1, 1]), size=M)
        else:
            B = np.full(M, b0 if branch_of_q0 is None else branch_of_q0)
        if init == "uniform" and branch_of_q0 is None:
            if d != 1:
                raise UsageError("init='uniform' supports one independent coordinate; use "
                                 "init='gaussian'")
            c = float(zc[0])
            half = np.pi * float(s[0])      # a full turn (pi ell for a point coordinate)
            lo, hi = (c - half, c + half) if z_range is None else z_range
            zt, qt = sweep_configurations(model, qc, idx, span=max(abs(hi - c), abs(c - lo)),
                                          step=np.radians(2.0) * float(s[0]))
            lo, hi = max(lo, zt[0]), min(hi, zt[-1])
            z = rng.uniform(lo, hi, size=(M, 1))
            zd = rng.uniform(-zmax, zmax, size=(M, 1))
            guess = qt[np.clip(np.searchsorted(zt, z[:, 0]), 0, len(zt) - 1)]
        else:
            z = zc[None] + (zs0 if spread is None else spread) * rng.normal(size=(M, d))
            zd = zdc[None] + rate_spread * rng.normal(size=(M, d))
            guess = np.broadcast_to(qc, (M, n))
        q, ok = solve_positions_batch(model, guess, idx, z)
        wrong = ok & (branch_sign(model, q, pts) != B)
        if wrong.any():
            q[wrong], ok[wrong] = solve_positions_batch(
                model, mirror_branch(model, q[wrong], pts), idx, z[wrong])
        return z, zd, q, ok

    z, zd, q, ok = draw(M, q0a[idx], zd0, q0a, None)
    logw = np.where(ok, -np.log(M), -np.inf)
    Q0 = forces_at(0.0)
    st = independent_state(model, q, idx, zd, Q0)
    wnoise = np.zeros((M, d))
    informed = False
    for attempt in range(2):
        if proposal == "optimal" and per_step[0]:
            # the first reading informs the initial rates: draw them from their conditional
            st, logw = _initial_rates(model, sensors, per_step[0], st, zd, logw, zds0, sig, dt,
                                      rng, idx, Q0, bound=zmax if init == "uniform" else None)
            zd = st.qd[:, idx]
        if (attempt or init != "gaussian" or proposal != "optimal" or not per_step[0]
                or _explained(model, sensors, per_step[0], st, sig, chi2.isf(
                    loss_probability, sum(sensors[i].dim for i, _ in per_step[0])))):
            break
        # no particle of the prior's draw explains the first readings (precise position
        # sensors on several independent coordinates): the readings inform the positions too
        z, q, ok, logw = _informed_positions(model, sensors, per_step[0], q0a, idx, zd0, zs0,
                                             sig, rng, M, Q0, pts, b0)
        zd = np.broadcast_to(zd0, (M, d)).copy()
        st = independent_state(model, q, idx, zd, Q0)
        informed = True

    out_q = np.empty((n_steps, n))
    out_qd = np.empty((n_steps, n))
    out_qdd = np.empty((n_steps, n))
    zstd = np.empty((n_steps, d))
    zdstd = np.empty((n_steps, d))
    p_plus = np.empty(n_steps)
    ess_t = np.empty(n_steps)
    nis_t = np.full(n_steps, np.nan)
    lost_t = np.zeros(n_steps, int)
    infl_t = np.ones(n_steps)
    fade_t = np.ones(n_steps)
    population = np.empty(n_steps, int)
    eps_t = np.zeros(n_steps)
    eps_sd_t = np.zeros(n_steps)
    n_res, restarts, unexplained, last_good, n_rejected = 0, [], 0, -1, 0
    # 1 / omega_c, the mechanism's own time, in steps: a restart followed by that much
    # tracking recovered the mode (``streak`` counts the restarts since the last that did; a
    # run over many of its cycles may meet several losses), and the regularizing kernel
    # waits that long after the start
    own_time = max(1, int(np.ceil(1.0 / (float(wc) * dt)))) if np.isfinite(wc) else n_steps
    streak = 0
    resume_spread = np.zeros(d)  # the cloud's rate spread when readings last resumed
    adapt2, nis_bar = 1.0, 1.0
    last_read = 0                # the last step with readings
    decided = False
    z_prev = q0a[idx].copy()
    zd_prev = np.array(zd0, float)
    bmax_prev = b0

    def result(upto, extra=None):
        stats = {"indices": tuple(int(i) for i in idx0), "n_particles": M_target,
                 "sigma_a": tuple(float(x) for x in sa), "integrator": integrator,
                 "proposal": proposal, "p_branch_plus": p_plus[:upto], "ess": ess_t[:upto],
                 "nis_min": nis_t[:upto], "unassembled": lost_t[:upto],
                 "noise_factor": infl_t[:upto], "fading": fade_t[:upto], "resamples": n_res,
                 "restarts": tuple(restarts),
                 "population": population[:upto], "branch_points": pts, "model_branch": b0,
                 "rejected_readings": n_rejected, "switches": tuple(switches),
                 "informed_start": informed, "reacquisitions": watch.log}
        if learns_weight:
            stats["weight_error"] = eps_t[:upto]
            stats["weight_error_std"] = eps_sd_t[:upto]
        if true_branch is not None:
            tb = int(np.sign(true_branch))
            stats["branch_probability"] = p_plus[:upto] if tb > 0 else 1.0 - p_plus[:upto]
        stats.update(extra or {})
        return filter_result("pf", dt, out_q[:upto], out_qd[:upto], out_qdd[:upto],
                             zstd[:upto], zdstd[:upto], t0, upto, stats)

    for k in range(n_steps):
        tk = k * dt
        avail = per_step[k]
        nis = None
        mixed = None
        found = None
        wprior = np.exp(logw - np.max(logw)) if np.isfinite(np.max(logw)) else None
        if k > 0:
            if learns_weight:
                eps = draw_weight_errors()
            Qk = forces_at(tk)
            f0 = st.zdd
            if integrator == "heun":
                zp = z + dt * zd + 0.5 * dt * dt * f0
                guess = q + dt * st.qd + 0.5 * dt * dt * st.qdd
                qp, okp = solve_positions_batch(model, guess, idx, zp)
                sp = independent_state(model, qp, idx, zd + dt * f0, Qk)
                zdp = zd + 0.5 * dt * (f0 + sp.zdd)
                zp = z + dt * zd + dt * dt * (f0 / 3.0 + sp.zdd / 6.0)
                fp = sp.zdd
            else:
                sp, zp, zdp, okp = independent_step(
                    model, q, z, zd, f0, idx, dt, Qk, "rk4",
                    Q_stages=forces_at(tk - 0.5 * dt))
                qp, fp = sp.q, sp.zdd
            # a particle whose prediction is not finite (its step met a singular
            # configuration) is dead; it takes a live particle's prediction at weight zero, so
            # that the batched linear algebra below stays finite (without readings, as in a
            # gap, nothing resamples the dead away)
            live = okp & np.all(np.isfinite(np.concatenate([zp, zdp, fp, f0], axis=1)), axis=1)
            if live.any() and not live.all():
                src = np.where(live, np.arange(M), np.flatnonzero(live)[0])
                sp, zp, zdp, fp, qp, f0 = sp.select(src), zp[src], zdp[src], fp[src], qp[src], f0[src]
                eps, eps_m, eps_P = eps[src], eps_m[src], eps_P[src]
                okp = live
            # acceleration noise: sigma_a, plus model_error times the particle's acceleration
            # (a relative model error) unless sigma_a is given
            sa2k = adapt2 * (sa2[None] + (0.0 if sigma_a is not None
                                                else (model_error * f0) ** 2))
            sa2k = np.broadcast_to(sa2k, (M, d))
            spread, q_ref = None, out_q[k - 1]
            if avail and not per_step[k - 1] and wprior is not None:
                # readings resume after steps without any: the predicted cloud's rate spread
                # (large after a gap) is what a restart must cover, and its spread in z tells
                # the gap search whether the cloud may have lost the crank
                wr = np.where(np.isfinite(wprior) & okp, wprior, 0.0)
                if wr.sum() > 0.0:
                    wr = wr / wr.sum()
                    resume_spread = np.sqrt(wr @ (zdp - wr @ zdp) ** 2)
                    if watch.needs_spread(k):
                        _, dzp = weighted_mean(zp, wr, angular, reference=z_prev)
                        spread = np.sqrt(wr @ (dzp * dzp))
                        # the sweep starts from a particle: the mean of a cloud spread over
                        # the turn, assembled about one particle, need not be a consistent
                        # configuration (a relative angle can come out a half turn off)
                        q_ref = qp[int(np.argmax(wr))]
            found = watch.observe(k, q_ref, idx, zd_prev, spread)
            prop = _proposal(model, sensors, avail, sp, zdp, fp, sig, sa2k, dt,
                             steps=k - last_read) if avail else None
            if (prop is not None and gate is not None and wprior is not None
                    and not (restarts and k - restarts[-1] <= patience)):
                # (not right after a restart: its fresh cloud is no reference yet)
                kept = _gate_readings(prop, wprior, sensors, avail, gate)
                if len(kept) < len(avail):
                    n_rejected += sum(sensors[i].dim for i, _ in avail) - sum(
                        sensors[i].dim for i, _ in kept)
                    avail = kept
                    prop = _proposal(model, sensors, avail, sp, zdp, fp, sig, sa2k,
                                     dt, steps=k - last_read) if avail else None
                    if not avail:          # every reading rejected: counts for the monitor
                        unexplained += 1
            # the cloud's predictive distribution of the readings, for the noise adaptation
            # and the fading
            mixed = (_predictive_innovation(prop[6], prop[8], np.where(okp, wprior, 0.0))
                     if avail and adapt and wprior is not None else None)
            if (mixed is not None and fading is not None and k >= own_time
                    and not (restarts and k - restarts[-1] <= patience)):
                # (not while the readings still separate the initial spread's modes, nor
                # right after a restart: a fresh cloud is no reference yet)
                fade_t[k] = _fading(*mixed, prop[3], fading, ADAPT_MAX ** 2 / adapt2)
                if fade_t[k] > 1.0:
                    # a sudden model error: this step's noise widened (the monitor keeps
                    # judging the readings against the model's noise)
                    sa2k = sa2k * fade_t[k]
                    prop = _proposal(model, sensors, avail, sp, zdp, fp, sig, sa2k, dt,
                                     steps=k - last_read)[:2] + (prop[2],)
            if avail and proposal == "optimal":
                mean, P, nis = prop[:3]
                P = 0.5 * (P + np.swapaxes(P, -1, -2))
                L = np.linalg.cholesky(P)
                wnoise = mean + np.einsum("pij,pj->pi", L, rng.normal(size=(M, d)))
                log_ratio = _gauss_logpdf(wnoise, np.zeros_like(wnoise), sa2k) - \
                    _gauss_logpdf(wnoise, mean, P)
            else:
                wnoise = np.sqrt(sa2k) * rng.normal(size=(M, d))
                log_ratio = 0.0
                if avail:
                    nis = prop[2]
            z = zp + 0.5 * dt * dt * wnoise
            zd = zdp + dt * wnoise
            q, ok = solve_positions_batch(model, qp + np.einsum("pij,pj->pi", sp.R,
                                                                 z - sp.q[:, idx]), idx, z)
            st = independent_state(model, q, idx, zd, Qk)
            logw = np.where(ok & okp, logw + log_ratio, -np.inf)
            lost_t[k] = int(np.sum(~(ok & okp)))
            if learns_weight and avail:
                # the step's acceleration deviation from the dynamics without weight error,
                # u = w + eps g (g: the independent accelerations of Q_g), is a linear
                # reading of eps with the noise sa2k: each particle's posterior is updated
                # (only on read steps: without readings the draw is the prior's)
                g = np.linalg.solve(sp.Mbar, np.einsum("pij,i->pj", sp.R, Qg)[..., None])[..., 0]
                u = wnoise + eps[:, None] * g
                info = 1.0 / eps_P + np.sum(g * g / sa2k, axis=1)
                upd = ok & okp & np.isfinite(info) & np.all(np.isfinite(u), axis=1)
                m_new = (eps_m / eps_P + np.sum(g * u / sa2k, axis=1)) / info
                eps_m = np.where(upd, m_new, eps_m)
                eps_P = np.where(upd, 1.0 / info, eps_P)
        qdd_noisy = st.qdd + np.einsum("pij,pj->pi", st.R, wnoise)
        if avail:
            # line 5: weights times the likelihood of the readings at the sampled state
            h, o, ang = predict_readings(model, sensors, avail, q, st.qd, qdd_noisy)
            r = innovation(o[None], h, ang)
            var = reading_variances(sensors, avail, sig)
            logw = logw - 0.5 * np.sum(r * r / var, axis=-1)
            if nis is None:                         # step 0: the particles' own innovation
                nis = np.sum(r * r / var, axis=-1)
            kdim = r.shape[-1]
            if kdim not in nis_limit:
                nis_limit[kdim] = chi2.isf(loss_probability, kdim)
            alive = np.isfinite(logw)
            nis_min = float(np.min(nis[alive])) if alive.any() else np.inf
            nis_t[k] = nis_min
            unexplained = unexplained + 1 if not nis_min <= nis_limit[kdim] else 0
            if mixed is not None:
                # covariance matching: the innovation's normalized square under the cloud's
                # predictive distribution is 1 per component on average when the noise is
                # right; raise (or lower, down to 1) the noise inflation.  With the noise of
                # every step since the last readings: against this step's alone, readings
                # every few steps measured the unread steps' noise as too much noise, and the
                # adaptation ran to its limit (the review four-bar's crank gyroscope read
                # every 4th step: the factor at ADAPT_MAX from 1 s on)
                ybar, C = mixed[:2]
                ratio = min(normalized_square(ybar, C), 10.0 * kdim) / kdim
                nis_bar = (1.0 - ADAPT_RATE) * nis_bar + ADAPT_RATE * ratio
                adapt2 = float(np.clip(adapt2 * nis_bar ** ADAPT_RATE, 1.0, ADAPT_MAX ** 2))
            infl_t[k] = math.sqrt(adapt2)
            last_read = k
        mx = np.max(logw)
        # (not while a gap's global search is pending: its outcome restarts the cloud)
        lost = not np.isfinite(mx) or (unexplained >= patience and not watch.pending)
        if lost and found is None:
            if restarts and last_good - restarts[-1] >= own_time:
                streak = 0       # the last restart recovered the mode: a new budget
            if streak >= max_restarts or k == 0 or last_good < 0:
                upto = max(last_good + 1, 0)
                exc = ConvergenceError(
                    f"pf lost the mode: from step {k - unexplained + 1 if unexplained else k} "
                    f"(t = {max(k - unexplained + 1, 0) * dt:g} s) no particle explains the "
                    f"readings (chi-square level 1 - {loss_probability:g}), "
                    f"{streak} restart(s) in a row did not recover it; the model cannot "
                    f"support these readings (try a larger model_error or sigma_a)",
                    iterations=k)
                exc.partial = result(upto, {"lost_at": k})
                raise exc
            restarts.append(k)
            streak += 1
        restarted = lost or found is not None   # the monitor's restart or the gap search's
        if restarted:
            unexplained = 0
            avail = per_step[k]          # a restart doubts the cloud, not this step's readings
            # (a global restart covers with the initial count; the weight errors keep their
            # estimate and spread: a restart doubts the state)
            # a global restart (init='uniform') covers the rates densely only while the
            # mechanism is slow: beyond omega_c s it would lock onto wrong modes, so a filter
            # that has decided its branch restarts locally there, as from a guess
            at_speed = bool(np.any(np.abs(zd_prev) > wc * s)) if np.isfinite(wc) else True
            global_restart = init == "uniform" and not (decided and at_speed)
            M = max(int(initial_particles or 0), M_target) if global_restart else M
            eps_m, eps_P = np.full(M, eps_hat), np.full(M, eps_sd * eps_sd)
            eps = draw_weight_errors()
            Qk = forces_at(tk)
            if global_restart:
                # a global restart: the whole turn, both branches, rates up to the bound or
                # twice the last estimate, the first reading conditioning the rates
                bound = max(zmax, 2.0 * float(np.max(np.abs(zd_prev))))
                z, zd, q, ok = draw(M, z_prev, zd_prev, out_q[k - 1], None)
                st = independent_state(model, q, idx, zd, Qk)
                logw = np.where(ok, -np.log(M), -np.inf)
                if avail and proposal == "optimal":
                    st, logw = _initial_rates(model, sensors, avail, st, zd, logw, zds0, sig,
                                              dt, rng, idx, Qk, bound=bound)
                    zd = st.qd[:, idx]
            else:
                # a local restart about the estimate; its rates spread by zds0, or by the
                # predicted cloud's rate spread when the readings last resumed, if larger
                # (after a gap the lost mode's rate can be off by several zds0); after a gap's
                # global search, about the state it found, spread over the search's grid
                # spacing (its resolution) on the branch of that state
                if found is None:
                    spread, z_spread = np.maximum(zds0, resume_spread), zs0
                    if last_good >= 0:
                        # the estimate may have followed the unexplained readings (a burst of
                        # outliers): the cover reaches back to the state of the last step
                        # whose readings a particle explained
                        spread = np.maximum(spread, np.abs(zd_prev - out_qd[last_good, idx]))
                        back = innovation(z_prev, out_q[last_good, idx], angular)
                        z_spread = np.maximum(zs0, np.abs(back))
                    z, zd, q, ok = draw(M, z_prev, zd_prev, out_q[k - 1], bmax_prev, spread,
                                        z_spread)
                else:
                    # the cloud the readings' resumption measured is replaced: its rate spread
                    # no longer bounds a later restart's
                    resume_spread = np.zeros(d)
                    spread, spacing = watch.spacing(idx)
                    z, zd, q, ok = draw(M, found.q[idx], found.zd, found.q,
                                        int(branch_sign(model, found.q, pts)), spread,
                                        spacing)
                st = independent_state(model, q, idx, zd, Qk)
                logw = np.where(ok, -np.log(M), -np.inf)
                if avail and proposal == "optimal":
                    st, logw = _initial_rates(model, sensors, avail, st, zd, logw, spread, sig,
                                              dt, rng, idx, Qk)
                    zd = st.qd[:, idx]
            wnoise = np.zeros((M, d))
            if avail:
                h, o, ang = predict_readings(model, sensors, avail, q, st.qd, st.qdd)
                r = innovation(o[None], h, ang)
                logw = logw - 0.5 * np.sum(r * r / reading_variances(sensors, avail, sig), axis=-1)
            mx = np.max(logw)
        elif unexplained == 0:
            last_good = k
        # lines 7-10: normalize
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
        zd_prev = zdm
        zddm = w @ (st.zdd + wnoise)
        zstd[k] = np.sqrt(w @ (dz * dz))
        zdstd[k] = np.sqrt(w @ ((zd - zdm) ** 2))
        eps_hat = float(w @ eps_m)
        eps_sd = math.sqrt(float(w @ eps_P + w @ (eps_m - eps_hat) ** 2))
        eps_t[k], eps_sd_t[k] = eps_hat, eps_sd
        bmax = 1 if p_plus[k] >= 0.5 else -1
        bmax_prev = bmax
        on_b = np.flatnonzero(bsign == bmax)
        best = on_b[np.argmax(w[on_b])] if on_b.size else int(np.argmax(w))
        qm, okm = solve_positions_batch(model, q[best], idx, zm[None])
        if not okm[0]:
            qm = q[best][None]
        stm = independent_state(model, qm, idx, zdm[None], zdd=zddm[None])
        out_q[k], out_qd[k], out_qdd[k] = stm.q[0], stm.qd[0], stm.qdd[0]
        if not np.array_equal(idx, idx0):  # the spread of the first coordinates
            _, dz0 = weighted_mean(q[:, idx0], w, angular0, reference=out_q[k, idx0])
            zstd[k] = np.sqrt(w @ (dz0 * dz0))
            zdstd[k] = np.sqrt(w @ ((st.qd[:, idx0] - out_qd[k, idx0]) ** 2))
        # lines 11-14: selective (systematic) resampling
        decided = decided or max(p_plus[k], 1.0 - p_plus[k]) > 0.99
        shrink = (M > M_target and max(p_plus[k], 1.0 - p_plus[k]) > 0.99
                  and np.all(zstd[k] < zs0) and not (settling_cover and k < own_time))
        if ess < resample_threshold * M or shrink:
            # tracking: copies of a survivor are moved by the shrunk kernel fitted per mode,
            # which keeps each mode's mean and covariance (the angle's spread is otherwise only
            # renewed by the step's noise, dt^2 / 2 sigma_a, and collapses)
            kernel = regularize and init == "gaussian" and k > 0
            # (over the first 1 / omega_c the readings are still separating the modes the
            # initial spread covers: the copies move only while the survivors form one mode
            # that can be moved)
            settling = k < own_time
            if kernel:
                dev = np.concatenate([dz, zd - zdm], axis=1)    # about the estimate
                C = None
                if (ess < dev.shape[1] + 1 and avail and wprior is not None
                        and not restarted and not settling):
                    # fewer effective particles than the covariance has dimensions (precise
                    # readings on a spread cloud, as when they resume after a gap): the
                    # weighted covariance is degenerate, and the kernel takes the Gaussian
                    # update of the predicted cloud's covariance by this step's readings
                    top = int(np.argmax(w))
                    C = _updated_covariance(model, sensors, avail, sig, zp, zdp, wprior, okp,
                                            angular, zm, st.select([top]), Qk[top])
            sel = systematic_resample(w, rng, M_target if shrink else M)
            M = sel.size
            z, zd, q, wnoise = z[sel], zd[sel], q[sel], wnoise[sel]
            eps, eps_m, eps_P = eps[sel], eps_m[sel], eps_P[sel]
            st = st.select(sel)
            logw = np.full(M, -np.log(M))
            n_res += 1
            zr = zdr = None
            if roughen is not None and not decided:
                # regularized resampling during the global search: copies of a survivor spread
                # over the spacing of the initial cover, so the ridge of states that explain the
                # readings stays sampled at that resolution
                zr, zdr = z + roughen * rng.normal(size=z.shape), zd
            elif kernel:
                move = _kernel_moves(dev, w, sel, rng, C, one_mode_only=settling)
                zr, zdr = z + move[:, :d], zd + move[:, d:]
            if zr is not None:        # the moved copies assembled, each on its own branch
                qr, okr = solve_positions_batch(model, q + np.einsum("pij,pj->pi", st.R, zr - z),
                                                idx, zr)
                keep = okr & (branch_sign(model, qr, pts) == branch_sign(model, q, pts))
                if keep.any():
                    z[keep], q[keep], zd[keep] = zr[keep], qr[keep], zdr[keep]
                    st = independent_state(model, q, idx, zd, forces_at(tk))
        if partition is not None:
            new = partition(out_q[k], idx)
            if not np.array_equal(new, idx):  # near a singular set: the particles move
                idx = new
                s, wc, sa, zs0, zds0 = coordinate_noise(idx)
                sa2 = sa * sa
                angular = np.isin(idx, model.angle_coords)
                z, zd = q[:, idx].copy(), st.qd[:, idx].copy()
                st = independent_state(model, q, idx, zd,
                                       forces_at(tk))
                wnoise = np.zeros((M, d))
                z_prev, zd_prev = out_q[k, idx].copy(), out_qd[k, idx].copy()
                resume_spread = np.zeros(d)
                switches.append((k, tuple(int(i) for i in idx)))
    return result(n_steps)
