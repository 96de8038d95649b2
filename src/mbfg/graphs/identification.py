"""The joint parameter/state identification graph (docs/identification.md).

Each recording r has its own chain of step vectors ``x_k = [q_k; v_k; a_k; j_k]`` (dependent
coordinates and the jerk of the coordinates :func:`jerk_coordinates` picks,
:mod:`mbfg.graphs.layout`; without j_k under the trapezoidal rule)
and all recordings share one parameter variable theta
(p,), the unit-free chart of :mod:`mbfg.model.identification`.  Per step the nonlinear rows

* position and velocity constraints Phi(q), Phi_q v (f_pc, f_vc), and when the jerk is
  carried for some coordinates only, the acceleration constraints Phi_q a + dPhi_q/dt v (f_ac),
* the dynamics ``qddot(q, v, Q(theta, u); theta) - a`` (f_dyn with the process noise of the
  model error, Eq. 26; Q = B(K) u for the recorded motor inputs u),
* the observations ``h(x; theta) - z`` of the readings of that step (gyroscope biases may be
  parameters),

form one Gaussian factor on (x_k, theta); integrator rows link consecutive steps (by default
the fourth-order Hermite rule, below; or the trapezoidal rule, Eq. 23), a loose prior holds x_0 near its initial estimate and a weak prior
theta ~ N(0, sigma_p^2 I) keeps unidentifiable directions finite.  Eliminating every step of
every recording in time order and theta last keeps each solve linear in the number of steps
(the fill-in is one (x_{k+1}, theta) factor).

The linearization is built as arrays over the time axis, never factor by factor
(:meth:`IdentificationProblem.linear_system`, a :class:`JointSystem`): per recording the
whitened step factors' blocks (N, rows, dim) and (N, rows, p), the one pair of integrator
blocks all consecutive steps share, and the initial priors; the rows of blocks of
``EVALUATION_BLOCK`` steps are evaluated together (the dynamics by
:func:`mbfg.model.identification.dynamics_rows`, friction in closed form).
:mod:`mbfg.solvers.identification` eliminates it as a band matrix with a border;
:meth:`JointSystem.graph` gives the same system as a gtsam factor graph (the solver's QR
fallback, and the tests).

Noise model, all unit-free: derived from the coordinates' scales s_i
(:func:`mbfg.model.scales.coordinate_scales`), the constraint rows' scales, the time step, the
sensors' sigmas and the motion's own rates (:func:`motion_scales` of the initial estimate: the
RMS velocity V, acceleration A, jerk J and snap S of the coordinates measured in their scales;
units 1/s, 1/s^2, 1/s^3, 1/s^4):

==========================  ==================================================
factor                      standard deviation
==========================  ==================================================
position constraint i       ``constraints * scale_i``
velocity constraint i       ``constraints * scale_i * V``
acceleration constraint i   ``constraints * scale_i * A``
Hermite (q, v, a) rows      ``max(s_i C5 dt^5 / 720, k sigma_dyn,i dt^2)``
Hermite (v, a, j) rows      ``max(s_i C6 dt^5 / 720, k sigma_dyn,i dt)`` (jerk's coordinates)
trapezoidal (a, j) rows     ``max(s_i C5 dt^3 / 12, k sigma_dyn,i)`` (jerk's coordinates)
trapezoidal q-integrator    ``integrator * s_i * J dt^3 / 12`` (``rule="trapezoidal"``)
trapezoidal v-integrator    ``integrator * s_i * S dt^3 / 12`` (``rule="trapezoidal"``)
dynamics (sigma_dyn,i)      ``dynamics * s_i * A``
observation                 the sensor's ``sigma``
initial prior on q_0, v_0   ``s_i``, ``s_i * V``
parameter prior             ``prior`` (theta is dimensionless)
==========================  ==================================================

The Hermite rule, x_{k+1} - x_k - dt/2 (x'_k + x'_{k+1}) + dt^2/12 (x''_{k+1} - x''_k), has
the local error dt^5 / 720 x^(5); applied to (q, v, a) and (v, a, j), with j tied to a by a
trapezoidal row, the discrete trajectory is fourth-order accurate.  The (v, a, j) rows need
the jerk of a set of independent coordinates only: the velocity constraints give the other
velocities, and the acceleration constraints the other accelerations
(:func:`jerk_coordinates`; a smaller step, a narrower band).  Its rows' sigmas are the
slack that the process noise leaves anyway over one step (k = ``integrator``, default 0.1,
times the dynamics sigma integrated over dt), never below the rows' own error (C5 = S^2 / J
and C6 = S^3 / J^2, the fifth and sixth derivatives extrapolated from the jerk and the snap;
with ``peaks``, also from an earlier solution's peak jerk and snap, the larger kept):
tighter rows would not add information but would make the normal equations too
ill-conditioned for the banded Cholesky.  Why not the trapezoidal rule: its rows can be no
tighter than its truncation error (dt^3 / 12 times the third derivative of the integrated
quantity; tighter, the discrete trajectory is stiffer than the real one and the parameters
are biased, 7 sigma on the benchmark's Coulomb coefficient), and that slack costs most of the
information on weakly excited parameters (the rocker joint's viscous coefficient of the
benchmark's seed 6: std 69.5 % with the trapezoidal rows, 7.6 % with the Hermite rows,
Cramer-Rao bound 6.9 %; ``benchmarks/identification_bound.py``).

Where a sliding rate crosses zero, the regularized Coulomb term mu tanh(s / eps) switches
within a fraction of a step (eps is 1e-3 of the characteristic rate by default), and every
integrator row of that step errs by up to hundreds of its sigmas: no polynomial of the step
follows a switch.  A fit that holds those rows bends the states across the dynamics rows
there, and the friction and gain estimates take a bias that is the same for every noise
draw of one motion (up to 1 sampling std on the benchmark's fixed motions).  So the final
stage corrects those rows (``local_errors``): each row's residual is taken against the exact
motion's, the switching term integrated in closed form over the step
(:func:`mbfg.model.nonconservative.coulomb_step_errors`, on the states and parameters of
an earlier solution at the final sigma: ``mbfg.identify``), and its sigma is at least that
correction.  On exact readings the bias goes from up to 1.05 sampling std to 0.01.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gtsam
import numpy as np

from mbfg.errors import UsageError
from mbfg.factors.gaussian import unit_noise
from mbfg.factors.residuals import (acceleration_constraints_residual,
                                    position_constraints_residual, velocity_constraints_residual)
from mbfg.factors.sensors import observation_residual
from mbfg.graphs import linear_blocks as L
from mbfg.graphs.layout import dependent_layout
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model.identification import (characteristic_rate, dynamics_parameter_jacobian,
                                       dynamics_rows, friction_terms)
from mbfg.model.nonconservative import coulomb_step_errors, motor_forces
from mbfg.model.partition import fixed_coordinates
from mbfg.model.scales import constraint_scales, coordinate_scales
from mbfg.model.sensors import readings_on_grid

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.model.identification import ParameterSet
    from mbfg.model.mechanism import Mechanism

__all__ = ["IdentificationSettings", "Recording", "IdentificationProblem", "ChainBlocks",
           "JointSystem", "rate_scale", "motion_scales", "payload_vector", "jerk_coordinates"]


EVALUATION_BLOCK = 2048
"""Steps whose rows are evaluated together (a performance setting: the kernels' temporaries
of a block stay in cache; results do not depend on it)."""


INTEGRATOR_DEFAULTS = {"trapezoidal": 1.0, "hermite": 0.1}
"""``IdentificationSettings.integrator`` by rule when not given (the Hermite rule's result
does not change between 0.01 and 0.1 and loses 5 % of its precision at 1, on the benchmark's
tuning seed 6 at dynamics 1e-5)."""


@dataclass(frozen=True)
class IdentificationSettings:
    """Unit-free noise model and solver settings of identification (module table).

    dynamics : process noise of the dynamics rows relative to s_i A (the model error the
        states may absorb; small: the model is exact at the true parameters.  1e-4 was chosen
        on the benchmark's tuning seeds 100-102: 1e-5 is more precise on weakly excited
        parameters but needs more iterations, and a held-out recording that rotates then
        misfits the identified model's small errors)
    integrator : the trapezoidal rule's rows relative to their truncation error (default 1);
        the Hermite rule's rows relative to the process noise integrated over one step
        (default 0.1, never below their own error; module docstring)
    constraints : constraint rows relative to their scales
    prior : standard deviation of the parameter prior in the chart (1: a factor e on masses,
        inertias and coefficients, a body length on centres of mass)
    max_iterations : Levenberg-Marquardt iterations at most
    relative_tolerance : converged when an iteration lowers the cost by less than this
        fraction (or the Gauss-Newton model predicts no more)
    step_sigmas : also converged when the final stage's Gauss-Newton step is shorter than
        this many standard deviations (its predicted decrease below step_sigmas^2 / 2 in the
        whitened cost): no estimate then moves by more than 0.1 of its standard deviation,
        which lowers a 95 % interval's coverage by at most 0.12 percentage point (a fixed
        bound in the noise's units, where the relative one grows with the readings' count)
    cutoff : cut-off of the zero-phase low-pass filter of the initial estimate as a fraction
        of the Nyquist frequency 1 / (2 dt)
    continuation : the dynamics sigmas (relative to s_i A, each above ``dynamics``) of the
        loose stages solved before the final one, loosest first
    states_first : solve the states alone (parameters at their guesses, dynamics at the
        first loose sigma) before the first joint stage
    stage_tolerance : relative tolerance of the loose stages (they only need to start the
        next one inside its basin)
    rule : ``"trapezoidal"`` (Eq. 23 on (q, v) and (v, a)) or ``"hermite"``: each step also
        carries the jerk j of a set of independent coordinates (:func:`jerk_coordinates`), the
        fourth-order Hermite rule links (q, v, a) and, on those coordinates, (v, a, j) and a
        trapezoidal rule (a, j) (module docstring)
    """
    dynamics: float = 1e-4
    integrator: float | None = None
    constraints: float = 1e-7
    prior: float = 1.0
    max_iterations: int = 20
    relative_tolerance: float = 1e-8
    step_sigmas: float = 0.1
    cutoff: float = 0.05
    continuation: tuple = (1.0,)
    states_first: bool = False
    stage_tolerance: float = 1e-3
    rule: str = "hermite"


@dataclass(frozen=True)
class Recording:
    """One recording on a uniform grid: ``readings`` one ``(steps, values)`` per sensor,
    ``n_steps`` grid steps of ``dt`` [s], ``inputs`` (n_steps, k) motor inputs or None, and
    ``name`` (its file) for messages.

    ``payload``: known masses attached during this recording only, each ``(body, mass [kg],
    (c_x, c_y) [m] its centre of mass in the body frame, I_G [kg m^2] its moment of inertia
    about that centre)``; they add to the body's parameters (m, m c, I_O) in this recording's
    dynamics (a known payload makes the common scale of masses, friction and motor gains
    identifiable)."""
    readings: tuple
    n_steps: int
    dt: float
    inputs: np.ndarray | None = None
    name: str = "recording"
    payload: tuple = ()


@dataclass(frozen=True)
class ChainBlocks:
    """The whitened linearization of one recording's factors, each ``||A delta + e||^2``.

    A_x, A_t, e : (N, r, d), (N, r_t, p) or None, (N, r)
        One factor per step on (delta x_k, delta theta): its nonlinear rows; A_t holds
        theta's blocks of the last r_t rows only (the others do not depend on theta).
    B0, B1, e_pair : (l, d), (l, d), (N - 1, l)
        One factor per pair of consecutive steps on (delta x_k, delta x_{k+1}), its blocks
        the same for every pair (the integrators).
    fixed : tuple of (k, A (r0, d), e (r0,))
        Linear factors on single steps (the initial priors).
    order : (d,)
        An order of the step vector's components in which the pair blocks couple only
        nearby components (the solver's band is then narrow).
    pair_weights : (N - 1, l) or None
        Per pair, the weight of each of its rows (1 / the factor by which its sigma exceeds
        the one B0, B1 are whitened with; None: all 1).  Pair t's factor is then
        ``||w_t * (B0 delta x_t + B1 delta x_{t+1}) + e_pair_t||^2``: e_pair holds the
        weighted residual.  Few pairs differ from 1 (where a Coulomb term switches: the
        ``local_errors`` of :class:`IdentificationProblem`), and the solver corrects the shared
        blocks at those only."""
    A_x: np.ndarray
    A_t: np.ndarray | None
    e: np.ndarray
    B0: np.ndarray
    B1: np.ndarray
    e_pair: np.ndarray
    fixed: tuple
    order: np.ndarray
    pair_weights: np.ndarray | None = None

    def residual(self, dx: np.ndarray, dtheta: np.ndarray | None = None) -> float:
        """0.5 * the sum of squared rows ``A delta + e`` at the step (N, d) deltas ``dx``."""
        r = self.e + np.matmul(self.A_x, dx[:, :, None])[:, :, 0]
        if self.A_t is not None and dtheta is not None:
            r[:, r.shape[1] - self.A_t.shape[1]:] += self.A_t @ dtheta
        total = float(np.sum(r * r))
        if self.e_pair.size:
            lin = dx[:-1] @ self.B0.T + dx[1:] @ self.B1.T
            if self.pair_weights is not None:
                lin *= self.pair_weights
            rp = self.e_pair + lin
            total += float(np.sum(rp * rp))
        for k, A, e0 in self.fixed:
            rf = A @ dx[k] + e0
            total += float(rf @ rf)
        return 0.5 * total

    def diagonal(self) -> np.ndarray:
        """(N, d) the diagonal of the chain's normal equations in its steps (the Marquardt
        damping's scale: it has each variable's units, so damping by it is unit-free)."""
        D = np.einsum("krd,krd->kd", self.A_x, self.A_x)
        if self.e_pair.size and D.shape[0] > 1:
            if self.pair_weights is None:
                D[:-1] += np.sum(self.B0 * self.B0, axis=0)
                D[1:] += np.sum(self.B1 * self.B1, axis=0)
            else:
                w2 = self.pair_weights ** 2
                D[:-1] += w2 @ (self.B0 * self.B0)
                D[1:] += w2 @ (self.B1 * self.B1)
        for k, A, _ in self.fixed:
            D[k] += np.sum(A * A, axis=0)
        return D

    def theta_diagonal(self) -> np.ndarray:
        """(p,) the diagonal of the chain's block of theta's normal equations."""
        return np.einsum("krp,krp->p", self.A_t, self.A_t)


@dataclass(frozen=True)
class JointSystem:
    """The linearization of the identification graph at one point: a :class:`ChainBlocks`
    per recording (``keys`` a callable giving every recording's step keys), and theta's prior
    ``||W delta_theta + e_theta||^2``
    (p = 0: theta fixed)."""
    chains: list
    keys: Callable
    theta_key: int
    p: int
    W: np.ndarray
    e_theta: np.ndarray

    def error(self, dxs: list, dtheta: np.ndarray | None) -> float:
        """0.5 * the squared whitened residual of the linear system at the deltas."""
        total = 0.0
        if self.p:
            r = self.W @ dtheta + self.e_theta
            total += 0.5 * float(r @ r)
        return total + sum(c.residual(dx, dtheta if self.p else None)
                           for c, dx in zip(self.chains, dxs))

    def theta_diagonal(self) -> np.ndarray:
        """(p,) the diagonal of theta's block of the normal equations (prior and chains)."""
        return np.sum(self.W * self.W, axis=0) + sum(c.theta_diagonal() for c in self.chains)

    def graph(self, damping: float = 0.0) -> gtsam.GaussianFactorGraph:
        """The same system as a gtsam graph (delta form; ``damping`` lambda adds Marquardt's
        ``lambda sum_i H_ii delta_i^2`` on every variable, H_ii the normal equations'
        diagonal: unit-free)."""
        out = gtsam.GaussianFactorGraph()
        p, tk = self.p, self.theta_key
        for c, keys in zip(self.chains, self.keys()):
            for k, A, e0 in c.fixed:
                out.add(keys[k], A, -e0, unit_noise(A.shape[0]))
            if c.e_pair.size:
                model, neg = unit_noise(c.e_pair.shape[1]), -c.e_pair
                w = (np.ones_like(c.e_pair) if c.pair_weights is None
                     else c.pair_weights)[:, :, None]
                for t in range(c.e_pair.shape[0]):
                    out.add(keys[t], w[t] * c.B0, keys[t + 1], w[t] * c.B1, neg[t], model)
            model, b = unit_noise(c.e.shape[1]), -c.e
            if p:
                At = np.zeros(c.e.shape + (p,))
                At[:, c.e.shape[1] - c.A_t.shape[1]:] = c.A_t
                for k in range(c.e.shape[0]):
                    out.add(keys[k], c.A_x[k], tk, At[k], b[k], model)
            else:
                for k in range(c.e.shape[0]):
                    out.add(keys[k], c.A_x[k], b[k], model)
            if damping > 0.0:
                d = c.A_x.shape[2]
                z, model = np.zeros(d), unit_noise(d)
                for k, Dk in zip(keys, np.sqrt(damping * c.diagonal())):
                    out.add(k, np.diag(Dk), z, model)
        if p:
            out.add(tk, self.W, -self.e_theta, unit_noise(p))
            if damping > 0.0:
                out.add(tk, np.diag(np.sqrt(damping * self.theta_diagonal())), np.zeros(p),
                        unit_noise(p))
        return out


def payload_vector(mech: Mechanism, payload: tuple) -> np.ndarray:
    """The change (P,) of the parameter vector pi (:mod:`mbfg.model.parameters`) made by
    ``payload`` (see :class:`Recording`)."""
    from mbfg.errors import UsageError
    from mbfg.model.parameters import PER_BODY, parameter_vector
    d = np.zeros_like(parameter_vector(mech))
    for item in payload:
        try:
            b, m, c, IG = item
            b, m, c, IG = int(b), float(m), np.asarray(c, float).reshape(2), float(IG)
        except (TypeError, ValueError):
            raise UsageError(f"payload {item!r}: expected (body, mass, (c_x, c_y), I_G)") from None
        if not 0 <= b < len(mech.spec.bodies):
            raise UsageError(f"payload {item!r}: body index out of range "
                             f"0..{len(mech.spec.bodies) - 1}")
        if not (np.isfinite([m, IG, *c]).all() and m > 0 and IG >= 0):
            raise UsageError(f"payload {item!r}: expected a positive mass and I_G >= 0")
        d[PER_BODY * b:PER_BODY * (b + 1)] += (m, m * c[0], m * c[1], IG + m * (c @ c))
    return d


def rate_scale(mech: Mechanism, v: ArrayLike | None = None) -> float:
    """omega [1/s]: the characteristic rate sqrt(|g| / ell), or without gravity the RMS rate of
    the coordinates in ``v`` (T, n) measured in their scales."""
    w = characteristic_rate(mech)
    if np.isfinite(w):
        return w
    if v is not None:
        r = float(np.sqrt(np.mean((np.asarray(v) / coordinate_scales(mech)) ** 2)))
        if r > 0:
            return r
    return 1.0


def motion_scales(mech: Mechanism, states: list, dts: list) -> dict:
    """RMS rates of a motion in the coordinates' scales: ``{"v": V, "a": A, "j": J, "s": S}``
    [1/s .. 1/s^4] of the (q, qd, qdd) estimates of every recording (steps ``dts``); jerk and
    snap by central differences of qdd.  A rate that vanishes (no motion) falls back to the
    characteristic rate's power (:func:`rate_scale`)."""
    s = coordinate_scales(mech)
    w = rate_scale(mech)
    acc = {k: [] for k in "vajs"}
    for (q, v, a), dt in zip(states, dts):
        acc["v"].append(np.asarray(v) / s)
        acc["a"].append(np.asarray(a) / s)
        j = np.gradient(np.asarray(a), dt, axis=0) if len(a) > 2 else np.zeros_like(a)
        acc["j"].append(j / s)
        acc["s"].append((np.gradient(j, dt, axis=0) if len(a) > 2 else np.zeros_like(a)) / s)
    out = {}
    for power, k in enumerate("vajs", start=1):
        r = float(np.sqrt(np.mean(np.concatenate(acc[k]) ** 2)))
        out[k] = r if np.isfinite(r) and r > 0 else w ** power
    return out


def peak_rates(mech: Mechanism, accelerations: list, dts: list) -> dict:
    """The largest jerk and snap of a motion in the coordinates' scales, ``{"j": J, "s": S}``
    [1/s^3, 1/s^4]: central differences of each recording's accelerations (T, n) (steps
    ``dts``), largest over steps and coordinates.  Meant for model-consistent accelerations
    (a final stage's solution): those of the filtered initial estimate, and of a loose
    stage's solution, are mostly differentiated noise.  A rate that vanishes falls back to
    the characteristic rate's power."""
    s = coordinate_scales(mech)
    w = rate_scale(mech)
    peak = {"j": 0.0, "s": 0.0}
    for a, dt in zip(accelerations, dts):
        a = np.asarray(a, float)
        if len(a) <= 2:
            continue
        j = np.gradient(a, dt, axis=0)
        peak["j"] = max(peak["j"], float(np.max(np.abs(j / s))))
        peak["s"] = max(peak["s"], float(np.max(np.abs(np.gradient(j, dt, axis=0) / s))))
    return {k: v if np.isfinite(v) and v > 0 else w ** power
            for (k, v), power in zip(peak.items(), (3, 4))}


JERK_QUALITY_MIN = 0.1
"""The Hermite rule's jerk is carried for one fixed set of independent coordinates when that
set's quality (:func:`mbfg.model.partition.fixed_coordinates`, unit-free, in [0, 1]) stays at
least this over the initial estimate; else for every coordinate."""


def jerk_coordinates(mech: Mechanism, positions: list) -> tuple:
    """The coordinates whose jerk the Hermite rule carries, for the position estimates
    ``positions`` (one (T, n) array per recording): one set of independent coordinates that is
    well conditioned over all of them (:data:`JERK_QUALITY_MIN`), else every coordinate.

    Why a subset suffices: the Hermite rows of the velocities need the jerk, but the velocity
    constraints (tight rows) already fix the velocities given those of the independent
    coordinates; the rows of the other coordinates only repeat them.  Fewer jerk components
    make the step vector, and the solver's band, smaller (the four-bar's step: 16 components
    instead of 20)."""
    q = np.concatenate([np.asarray(x, float).reshape(-1, mech.n) for x in positions])
    indices, quality = fixed_coordinates(mech, q, coordinate_scales(mech))
    if len(indices) and quality >= JERK_QUALITY_MIN:
        return indices
    return tuple(range(mech.n))


class IdentificationProblem:
    """Terms of the identification graph (module docstring) for ``params`` (the chart) and
    ``recordings``; ``starts`` gives per recording the initial estimate (q_0, v_0) held by the
    loose initial prior, ``motion`` the :func:`motion_scales`, ``peaks`` (optional) the
    :func:`peak_rates` of an earlier stage's solution, from which the integrator rows' own
    error is also extrapolated (their sigmas then hold it where the motion peaks, e.g. near a
    singular configuration).  ``local_errors`` (optional; per recording, the
    :meth:`coulomb_errors` of an earlier stage's solution): the integrator rows of the steps
    where a Coulomb term switches are corrected by the exact motion's residual and their
    sigmas raised to it (module docstring).  ``free=False``: theta is fixed (states-only
    estimation, e.g. the cross-validation of a held-out recording)."""

    theta_key = gtsam.symbol("p", 0)

    def __init__(self, params: ParameterSet, recordings: list, settings: IdentificationSettings,
                 starts: list, motion: dict, free: bool = True,
                 jerk_coordinates: tuple | None = None, peaks: dict | None = None,
                 local_errors: list | None = None):
        self.params, self.settings, self.free = params, settings, bool(free)
        self.recordings = list(recordings)
        mech = params.mech
        if settings.rule not in INTEGRATOR_DEFAULTS:
            raise UsageError(f"rule must be 'trapezoidal' or 'hermite', got {settings.rule!r}")
        if not (np.isfinite(settings.step_sigmas) and settings.step_sigmas >= 0):
            raise UsageError(f"step_sigmas must be a finite number >= 0 (standard deviations), "
                             f"got {settings.step_sigmas!r}")
        hermite = settings.rule == "hermite"
        jc = np.arange(mech.n) if jerk_coordinates is None else np.asarray(jerk_coordinates, int)
        self.jerk_coordinates = tuple(int(i) for i in jc) if hermite else ()
        self.layout = lay = dependent_layout(mech.n, jerk=len(self.jerk_coordinates))
        s = coordinate_scales(mech)
        self.motion = dict(motion)
        V = self.motion["v"]
        rows = constraint_scales(mech, mech.q0, s)
        self.sigma_pc = settings.constraints * rows
        self.sigma_vc = settings.constraints * rows * V
        self.sigma_ac = settings.constraints * rows * self.motion["a"]
        # the constraint rows of each step: positions and velocities; with the jerk of some
        # coordinates only, also the accelerations (they then fix the accelerations of the
        # others, which the velocities' Hermite rows of every coordinate did before)
        fams = [(position_constraints_residual, self.sigma_pc),
                (velocity_constraints_residual, self.sigma_vc)]
        if 0 < len(self.jerk_coordinates) < mech.n:
            fams.append((acceleration_constraints_residual, self.sigma_ac))
        self._constraint_families = tuple(fams)
        self.sigma_dyn = settings.dynamics * s * self.motion["a"]
        self.integrator = (settings.integrator if settings.integrator is not None
                           else INTEGRATOR_DEFAULTS[settings.rule])
        self._steps, self.links, self.grids = [], [], []
        # per recording, (N - 1, rows) of the pair rows or None: the exact motion's residuals
        # (in the rows' sigmas) that they are corrected by; a row's sigma is then at least
        # its correction (``pair_weights``)
        self.pair_offsets = []
        off = 0
        for rec, (q0, v0) in zip(self.recordings, starts):
            N = int(rec.n_steps)
            self._steps.append((off, N))
            off += N
            terms = [L.prior(lay, 0, "q", q0, s), L.prior(lay, 0, "v", v0, s * V)]
            if N > 1:
                r0 = np.arange(N - 1)
                trunc = s * rec.dt ** 3 / 12.0  # the trapezoidal rule's error per 3rd derivative
                m = self.motion
                if hermite:
                    # each row at the slack the process noise leaves anyway (``integrator``
                    # times the dynamics sigma, integrated over one step: dt^2 for the
                    # positions, dt for the velocities, 1 for the accelerations), never below
                    # its own error: dt^5 / 720 of the fifth and sixth derivatives for the
                    # Hermite rows, dt^3 / 12 of the fifth for the trapezoidal (a, j) rows
                    # (extrapolated from the jerk and the snap: the RMS of the initial
                    # estimate's, whose finite differences are mostly noise, and the peaks of
                    # an earlier stage's solution where given: a row's own error where the
                    # motion peaks can be far above what the RMS says)
                    c5 = m["s"] * m["s"] / m["j"]
                    c6 = c5 * m["s"] / m["j"]
                    if peaks is not None:
                        c5_peak = peaks["s"] * peaks["s"] / peaks["j"]
                        c5, c6 = max(c5, c5_peak), max(c6, c5_peak * peaks["s"] / peaks["j"])
                    h5 = s * rec.dt ** 5 / 720.0
                    slack = self.integrator * self.sigma_dyn
                    rows = [("hermite_q", np.arange(mech.n),
                             np.maximum(h5 * c5, slack * rec.dt ** 2)),
                            ("hermite_v", jc, np.maximum(h5 * c6, slack * rec.dt)[jc]),
                            ("trapezoid_a", jc, np.maximum(trunc * c5, slack)[jc])]
                    terms.append(L.step_links(lay, r0, rec.dt, [("q", "v", "a")], rows[0][2],
                                              scheme="hermite"))
                    # the velocities' rows on the jerk's coordinates only (the velocity
                    # constraints give the others)
                    terms.append(L.step_links(lay, r0, rec.dt, [(("v", jc), ("a", jc), "j")],
                                              rows[1][2], scheme="hermite"))
                    terms.append(L.step_links(lay, r0, rec.dt, [(("a", jc), "j")], rows[2][2]))
                else:
                    k = self.integrator
                    rows = [("trapezoid_q", np.arange(mech.n), k * trunc * m["j"]),
                            ("trapezoid_v", np.arange(mech.n), k * trunc * m["s"])]
                    terms.append(L.step_links(lay, r0, rec.dt, [("q", "v")], rows[0][2]))
                    terms.append(L.step_links(lay, r0, rec.dt, [("v", "a")], rows[1][2]))
                local = None if local_errors is None else local_errors[len(self.links)]
                offsets = None
                if local is not None:
                    offsets = np.concatenate(
                        [local[key][:, idx] / np.broadcast_to(sg, (len(idx),))
                         for key, idx, sg in rows], axis=1)
                    if not np.any(np.abs(offsets) > 1.0):  # all within the rows' own sigma
                        offsets = None
                self.pair_offsets.append(offsets)
            else:
                self.pair_offsets.append(None)
            self.links.append(terms)
            self.grids.append(readings_on_grid(params.sensors, list(rec.readings), N))
        self._cache = (None, None)
        self._payload = {}
        self._scratch = {}  # per block shape: the block's rows, assembled (``_rows``)
        # within a step, q_i, v_i, a_i (and the jerk, if carried) of each coordinate
        # together: the integrators link only equal coordinates of consecutive steps, so in
        # this order the system's band (steps in time order) is about d wide instead of 2 d
        n, jo = mech.n, lay.dim - len(self.jerk_coordinates)
        self._step_order = np.array(
            [c for i in range(n) for c in (i, n + i, 2 * n + i)
             + tuple(jo + m for m, ji in enumerate(self.jerk_coordinates) if ji == i)], int)

    @property
    def p(self) -> int:
        return self.params.size if self.free else 0

    @functools.cached_property
    def keys(self) -> list:
        """gtsam keys of every recording's steps, one list per recording (made on first use:
        only the gtsam graph of the system needs them)."""
        return [[gtsam.symbol("x", off + k) for k in range(N)] for off, N in self._steps]

    def recording_model(self, r: int, theta: ArrayLike) -> tuple:
        """(mech, sensors, derivatives) of recording r at theta (its payload added)."""
        mech, sensors, deriv = self.model(theta)
        payload = self.recordings[r].payload
        if not payload:
            return mech, sensors, deriv
        key = ("payload", r)
        hit = self._payload.get(key)
        if hit is not None and hit[0] is mech:
            return hit[1], sensors, deriv
        from mbfg.model.parameters import parameter_vector, with_parameters
        loaded = with_parameters(mech, parameter_vector(mech) + payload_vector(mech, payload))
        self._payload[key] = (mech, loaded)
        return loaded, sensors, deriv

    def model(self, theta: ArrayLike) -> tuple:
        """(mech, sensors, derivatives) at theta (the last one is cached)."""
        theta = np.asarray(theta, float)
        key, val = self._cache
        if key is not None and np.array_equal(key, theta):
            return val
        mech, sensors = self.params.apply(theta)
        val = (mech, sensors, self.params.derivatives(theta) if self.free else None)
        self._cache = (theta.copy(), val)
        return val

    # ------------------------------------------------------------------ nonlinear rows
    def residuals(self, r: int, X: np.ndarray, theta: ArrayLike, jacobians: bool = True,
                  out: ChainBlocks | None = None) -> tuple:
        """Whitened nonlinear rows of recording r: e (N, rows) and, with ``jacobians``,
        A_x (N, rows, dim) and A_t (N, rows_t, p), theta's blocks of the last rows_t rows (the
        dynamics and observation rows; the constraint rows before them do not depend on
        theta); also the row count of each family (position and velocity constraints,
        dynamics, each sensor).  ``out``: a :class:`ChainBlocks` of this recording from an
        earlier call, whose e, A_x and A_t are overwritten."""
        mech, sensors, deriv = self.recording_model(r, theta)
        rec, lay = self.recordings[r], self.layout
        N, n, m = X.shape[0], mech.n, mech.m
        nc = len(self._constraint_families)
        sizes = [m] * nc + [n] + [sn.dim for sn in sensors]
        rows, rows_t = sum(sizes), sum(sizes[nc:])
        reuse = (out is not None and jacobians and out.A_x.shape == (N, rows, lay.dim)
                 and (out.A_t is not None and out.A_t.shape == (N, rows_t, self.p)
                      if self.p else out.A_t is None))
        e = out.e if reuse else np.empty((N, rows))
        Ax = At = None
        if jacobians:
            # every call writes the same blocks: the others stay zero in a reused array
            Ax = out.A_x if reuse else np.zeros((N, rows, lay.dim))
            At = out.A_t if reuse and self.p else np.zeros((N, rows_t, self.p))
        u = rec.inputs
        Q = motor_forces(mech, u) if (u is not None and mech.spec.motors) else None
        # in blocks of steps: the kernels' temporaries stay small (in cache, and reused by
        # the allocator instead of being faulted in afresh for every call)
        for k0 in range(0, N, EVALUATION_BLOCK):
            sl = slice(k0, min(N, k0 + EVALUATION_BLOCK))
            self._rows(r, mech, sensors, deriv, X[sl], None if u is None else u[sl],
                       None if Q is None else Q[sl], sl, sizes, e[sl],
                       None if Ax is None else Ax[sl], None if At is None else At[sl])
        return e, Ax, At, sizes

    def _rows(self, r, mech, sensors, deriv, X, u, Q, sl, sizes, e, Ax, At):
        """:meth:`residuals` of the steps ``sl`` (X, u, Q: theirs) into e, Ax, At."""
        lay = self.layout
        N, n = X.shape[0], mech.n
        jacobians = Ax is not None
        part = lay.unpack(X)
        p = {"q": part["q"], "v": part["v"], "a": part["a"]}
        cuts = np.cumsum([0] + sizes)
        nc = len(self._constraint_families)

        # the block's rows are assembled in a small array of their own (slots a family does
        # not write stay zero: a family writes the same slots every time) and copied into A_x
        # as one contiguous run: written slot by slot straight into the large A_x, every
        # write would stream the block's rows through the cache
        block = None
        if jacobians:
            key = (N, cuts[-1], lay.dim)
            block = self._scratch.get(key)
            if block is None:
                block = self._scratch[key] = np.zeros(key)

        def put(i, ei, J, sigma, Jt=None):
            wgt = 1.0 / np.broadcast_to(np.asarray(sigma, float), (sizes[i],))
            rs = slice(cuts[i], cuts[i + 1])
            np.multiply(ei, wgt, out=e[:, rs])
            if jacobians:
                for slot, Js in J.items():
                    np.multiply(Js, wgt[:, None], out=block[:, rs, lay.slice(slot)])
                if Jt is not None:
                    np.multiply(Jt, wgt[:, None],
                                out=At[:, cuts[i] - cuts[nc]:cuts[i + 1] - cuts[nc]])

        for i, (family, sig) in enumerate(self._constraint_families):
            ei, J = family(mech)(p, jacobians)
            put(i, ei, J, sig)
        Jall = p["_Phi_q"] if "_Phi_q" in p else C.constraint_jacobian(mech, p["q"])
        if jacobians:
            fr = friction_terms(mech, p["q"], p["v"])
            dyn = dynamics_rows(mech, p["q"], p["v"], Q, friction=fr, J=Jall,
                                Jdot=p.get("_Phi_q_dot"))
            J = {"q": dyn.d_q, "v": dyn.d_qd, "a": np.broadcast_to(-np.eye(n), (N, n, n))}
            Jt = (dynamics_parameter_jacobian(mech, deriv, p["q"], p["v"], dyn.qdd, dyn.d_Q, u,
                                              friction=fr.rates) if self.p else None)
            put(nc, dyn.qdd - p["a"], J, self.sigma_dyn, Jt)
        else:
            qdd = D.forward_dynamics(mech, p["q"], p["v"], Q, J=Jall)
            put(nc, qdd - p["a"], None, self.sigma_dyn)
        for i, (sensor, (z, has)) in enumerate(zip(sensors, self.grids[r])):
            ei, J = observation_residual(mech, sensor, z[sl])(p, jacobians)
            mask = has[sl].astype(float)[:, None]
            ei = ei * mask
            Jt = None
            if jacobians:
                J = {k: v * mask[:, :, None] for k, v in J.items()}
                if self.p and deriv.bias[i].any():
                    Jt = mask[:, :, None] * deriv.bias[i][None, None, :]
            put(nc + 1 + i, ei, J, sensor.sigma, Jt)
        if jacobians:
            Ax[...] = block

    # ------------------------------------------------------------------ cost and system
    def prior_error(self, theta: ArrayLike) -> float:
        if not self.p:
            return 0.0
        t = np.asarray(theta, float) / self.settings.prior
        return 0.5 * float(t @ t)

    def error(self, Xs: list, theta: ArrayLike) -> float:
        """0.5 * the sum of squared whitened residuals of every factor."""
        total = self.prior_error(theta)
        for r, X in enumerate(Xs):
            e = self.residuals(r, X, theta, jacobians=False)[0]
            total += 0.5 * float(np.sum(e * e))
            if self.pair_offsets[r] is None:
                total += sum(t.error(X) for t in self.links[r])
            else:
                fixed, (_, _, ep, _) = self._link_blocks(r, X)
                total += 0.5 * (float(np.sum(ep * ep)) + sum(float(e0 @ e0) for _, _, e0 in fixed))
        return total

    def coulomb_errors(self, Xs: list, theta: ArrayLike) -> list:
        """Per recording, :func:`~mbfg.model.nonconservative.coulomb_step_errors` of the
        states Xs under the model at theta (its payload added).  For the ``local_errors`` of
        a problem built after this one (its integrator rows are corrected by these errors,
        and their sigmas are at least their size)."""
        out = []
        for r, X in enumerate(Xs):
            mech = self.recording_model(r, theta)[0]
            part = self.layout.unpack(X)
            err = coulomb_step_errors(mech, part["q"], part["v"], self.recordings[r].dt)
            out.append(err)
        return out

    def linear_system(self, Xs: list, theta: ArrayLike, out: JointSystem | None = None) -> tuple:
        """(:class:`JointSystem`, error) at (Xs, theta): the whitened linearization as arrays
        (one :class:`ChainBlocks` per recording and theta's prior).  ``out``: a system of
        this problem that is no longer needed; its large arrays are overwritten (they keep
        their memory, which a fresh allocation would have to fault in again)."""
        total = self.prior_error(theta)
        p = self.p
        chains = []
        for r, X in enumerate(Xs):
            e, Ax, At, _ = self.residuals(r, X, theta,
                                          out=None if out is None else out.chains[r])
            total += 0.5 * float(np.sum(e * e))
            fixed, pair = self._link_blocks(r, X)
            for _, _, e0 in fixed:
                total += 0.5 * float(e0 @ e0)
            B0, B1, ep, pw = pair
            total += 0.5 * float(np.sum(ep * ep))
            chains.append(ChainBlocks(Ax, At if p else None, e, B0, B1, ep, tuple(fixed),
                                      self._step_order, pw))
        if p:
            w = 1.0 / self.settings.prior
            prior = (w * np.eye(p), w * np.asarray(theta, float))
        else:
            prior = (np.zeros((0, 0)), np.zeros(0))
        return JointSystem(chains, lambda: self.keys, self.theta_key, p, *prior), total

    def linearize(self, Xs: list, theta: ArrayLike) -> tuple:
        """(GaussianFactorGraph in delta form, error) at (Xs, theta)."""
        system, total = self.linear_system(Xs, theta)
        return system.graph(), total

    def _link_blocks(self, r: int, X: np.ndarray) -> tuple:
        """The initial priors of recording r as ``[(step, A, e), ...]`` and its two integrator
        families stacked into one pair factor ``(B0, B1, e (N - 1, rows), w)`` (the same blocks
        for every pair of consecutive steps; w (N - 1, rows) the rows' :meth:`pair_weights`,
        e corrected by ``pair_offsets`` and weighted by them, or None)."""
        terms = self.links[r]
        fixed = []
        for t in terms[:2]:
            rows, (A,), e = t.blocks(X)
            fixed += [(int(k), A[0], e[i]) for i, k in enumerate(rows[:, 0])]
        d = self.layout.dim
        if len(terms) < 3:
            return fixed, (np.zeros((0, d)), np.zeros((0, d)), np.zeros((0, 0)), None)
        blocks = [t.blocks(X) for t in terms[2:]]
        rows = blocks[0][0]
        if any(not np.array_equal(b[0], rows) or b[1][0].shape[0] != 1 for b in blocks) or \
                not np.array_equal(rows[:, 0], np.arange(X.shape[0] - 1)) or \
                not np.array_equal(rows[:, 1], rows[:, 0] + 1):
            raise AssertionError(  # pragma: no cover
                "the integrator families link consecutive steps")
        B0 = np.concatenate([b[1][0][0] for b in blocks], axis=0)
        B1 = np.concatenate([b[1][1][0] for b in blocks], axis=0)
        e = np.concatenate([b[2] for b in blocks], axis=1)
        w = self.pair_weights(r)
        if w is not None:
            e -= self.pair_offsets[r]
            e *= w
        return fixed, (B0, B1, e, w)

    def pair_weights(self, r: int) -> np.ndarray | None:
        """(N - 1, rows) weights of recording r's integrator rows, 1 / max(1, |offset|): a
        corrected row's sigma is at least its correction (module docstring); None where
        nothing is corrected."""
        off = self.pair_offsets[r]
        return None if off is None else 1.0 / np.maximum(1.0, np.abs(off))

    @property
    def corrects_switching(self) -> bool:
        """Whether any integrator row is corrected for a Coulomb term's switching
        (``local_errors``)."""
        return any(off is not None for off in self.pair_offsets)

    def ordering(self) -> list:
        """Elimination order: every recording's steps in time order, theta last."""
        keys = [k for ks in self.keys for k in ks]
        return keys + ([self.theta_key] if self.p else [])

    def prior_information(self) -> np.ndarray:
        """Information (p, p) of the parameter prior (in the chart)."""
        return np.eye(self.p) / self.settings.prior ** 2

    def step_costs(self, r: int, X: np.ndarray, theta: ArrayLike, system: JointSystem | None = None
                   ) -> dict:
        """Per step of recording r: the whitened squared residuals summed by family
        (``"observations"``, ``"dynamics"``, ``"constraints"``) and the number of readings.
        ``system``: this problem's :meth:`linear_system` at (X, theta), when at hand (its rows
        are these residuals)."""
        if system is not None:
            e, sizes = system.chains[r].e, self._row_sizes()
        else:
            e, _, _, sizes = self.residuals(r, X, theta, jacobians=False)
        cuts = np.cumsum([0] + sizes)
        sq = e * e
        fam = lambda a, b: np.sum(sq[:, cuts[a]:cuts[b]], axis=1)  # noqa: E731
        count = np.zeros(X.shape[0])
        for s, (_, has) in zip(self.params.sensors, self.grids[r]):
            count += has * s.dim
        nc = len(self._constraint_families)
        return {"constraints": fam(0, nc), "dynamics": fam(nc, nc + 1),
                "observations": fam(nc + 1, len(sizes)), "readings": count}

    @property
    def reading_rows(self) -> int:
        """The observation rows of a step, the last rows of :meth:`residuals`' e and A_x
        (and of A_t)."""
        return sum(self._row_sizes()[len(self._constraint_families) + 1:])

    def _row_sizes(self) -> list:
        mech = self.params.mech
        return ([mech.m] * len(self._constraint_families) + [mech.n]
                + [s.dim for s in self.params.sensors])

    def _row_weights(self) -> np.ndarray:
        """1 / sigma of every nonlinear row (:meth:`residuals`' order)."""
        sig = [sg for _, sg in self._constraint_families] + [self.sigma_dyn] + [
            np.full(s.dim, s.sigma) for s in self.params.sensors]
        return 1.0 / np.concatenate([np.broadcast_to(np.asarray(x, float), (k,))
                                     for x, k in zip(sig, self._row_sizes())])

    def reweighted(self, system: JointSystem, source: IdentificationProblem) -> tuple | None:
        """This problem's :meth:`linear_system` at the point where ``source`` built ``system``,
        from that system: ``source`` is another stage of the same identification (the same
        recordings, parameters, initial priors, integrator rows and theta prior; other dynamics
        and constraint sigmas), so the nonlinear rows only change their weights.  Returns
        ``(system, error)``, or None when the two problems differ otherwise.  ``system``'s
        arrays are rescaled in place (it is ``source``'s, and not used again)."""
        same = (source.params is self.params and source.p == self.p
                and len(source.recordings) == len(self.recordings)
                and all(a is b for a, b in zip(source.recordings, self.recordings))
                and source.motion == self.motion
                and source.integrator == self.integrator
                and _same_arrays(source.pair_offsets, self.pair_offsets)
                and source.settings.prior == self.settings.prior
                and len(source.links) == len(self.links)
                and all(_same_term(a, b) for la, lb in zip(source.links, self.links)
                        for a, b in zip(la, lb)))
        if not same:
            return None
        ratio = self._row_weights() / source._row_weights()
        chains, total = [], 0.0
        for c in system.chains:  # in place: the source's system is not used again
            e = np.multiply(c.e, ratio, out=c.e)
            np.multiply(c.A_x, ratio[:, None], out=c.A_x)
            if c.A_t is not None:
                np.multiply(c.A_t, ratio[ratio.size - c.A_t.shape[1]:, None], out=c.A_t)
            chains.append(c)
            total += float(np.sum(e * e)) + float(np.sum(c.e_pair * c.e_pair))
            total += sum(float(e0 @ e0) for _, _, e0 in c.fixed)
        total += float(system.e_theta @ system.e_theta)
        return dataclasses.replace(system, chains=chains), 0.5 * total


def _same_arrays(a: list, b: list) -> bool:
    """Whether two lists of arrays or None (a problem's ``pair_offsets``) are the same."""
    return len(a) == len(b) and all(
        x is y or (x is not None and y is not None and np.array_equal(x, y))
        for x, y in zip(a, b))


def _same_term(a, b) -> bool:
    """Whether two linear link families are the same rows."""
    if type(a) is not type(b):
        return False
    names = ("rows", "A", "b") if isinstance(a, L.UnaryLinear) else ("rows0", "rows1", "A0", "A1")
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in names)
