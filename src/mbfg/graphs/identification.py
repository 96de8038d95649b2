"""The joint parameter/state identification graph (docs/identification.md).

Each recording r has its own chain of step vectors ``x_k = [q_k; v_k; a_k]`` (dependent
coordinates, :mod:`mbfg.graphs.layout`) and all recordings share one parameter variable theta
(p,), the unit-free chart of :mod:`mbfg.model.identification`.  Per step the nonlinear rows

* position and velocity constraints Phi(q), Phi_q v (f_pc, f_vc),
* the dynamics ``qddot(q, v, Q(theta, u); theta) - a`` (f_dyn with the process noise of the
  model error, Eq. 26; Q = B(K) u for the recorded motor inputs u),
* the observations ``h(x; theta) - z`` of the readings of that step (gyroscope biases may be
  parameters),

form one Gaussian factor on (x_k, theta); the trapezoidal integrators (Eq. 23) link
consecutive steps, a loose prior holds x_0 near its initial estimate and a weak prior
theta ~ N(0, sigma_p^2 I) keeps unidentifiable directions finite.  Eliminating every step of
every recording in time order and theta last keeps each solve linear in the number of steps
(the fill-in is one (x_{k+1}, theta) factor).

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
q-integrator (coordinate i) ``integrator * s_i * J dt^3 / 12``
v-integrator                ``integrator * s_i * S dt^3 / 12``
dynamics                    ``dynamics * s_i * A``
observation                 the sensor's ``sigma``
initial prior on q_0, v_0   ``s_i``, ``s_i * V``
parameter prior             ``prior`` (theta is dimensionless)
==========================  ==================================================

The integrators' sigma is the trapezoidal rule's local truncation error (dt^3 / 12 times the
third derivative of the integrated quantity): a tighter one would make the discrete
trajectory stiffer than the real one and bias the parameters at coarse steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import gtsam
import numpy as np

from mbfg.factors.gaussian import unit_noise
from mbfg.factors.residuals import position_constraints_residual, velocity_constraints_residual
from mbfg.factors.sensors import observation_residual
from mbfg.graphs import linear_blocks as L
from mbfg.graphs.layout import dependent_layout
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model.identification import characteristic_rate, dynamics_parameter_jacobian
from mbfg.model.nonconservative import motor_forces
from mbfg.model.scales import constraint_scales, coordinate_scales
from mbfg.model.sensors import readings_on_grid

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.identification import ParameterSet
    from mbfg.model.mechanism import Mechanism

__all__ = ["IdentificationSettings", "Recording", "IdentificationProblem", "rate_scale",
           "motion_scales", "payload_vector"]


@dataclass(frozen=True)
class IdentificationSettings:
    """Unit-free noise model and solver settings of identification (module table).

    dynamics : process noise of the dynamics rows relative to s_i A (the model error the
        states may absorb; small: the model is exact at the true parameters)
    integrator : trapezoidal integrator rows relative to their truncation error
    constraints : constraint rows relative to their scales
    prior : standard deviation of the parameter prior in the chart (1: a factor e on masses,
        inertias and coefficients, a body length on centres of mass)
    max_iterations : Levenberg-Marquardt iterations at most
    relative_tolerance : converged when an iteration lowers the cost by less than this
        fraction (or the Gauss-Newton model predicts no more)
    cutoff : cut-off of the zero-phase low-pass filter of the initial estimate as a fraction
        of the Nyquist frequency 1 / (2 dt)
    continuation : the dynamics sigmas (relative to s_i A, each above ``dynamics``) of the
        loose stages solved before the final one, loosest first
    states_first : solve the states alone (parameters at their guesses, dynamics at the
        first loose sigma) before the first joint stage
    stage_tolerance : relative tolerance of the loose stages (they only need to start the
        next one inside its basin)
    """
    dynamics: float = 1e-3
    integrator: float = 1.0
    constraints: float = 1e-7
    prior: float = 1.0
    max_iterations: int = 20
    relative_tolerance: float = 1e-8
    cutoff: float = 0.05
    continuation: tuple = (1.0,)
    states_first: bool = False
    stage_tolerance: float = 1e-3


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


class IdentificationProblem:
    """Terms of the identification graph (module docstring) for ``params`` (the chart) and
    ``recordings``; ``starts`` gives per recording the initial estimate (q_0, v_0) held by the
    loose initial prior, ``motion`` the :func:`motion_scales`.  ``free=False``: theta is fixed (states-only estimation, e.g. the
    cross-validation of a held-out recording)."""

    theta_key = gtsam.symbol("p", 0)

    def __init__(self, params: ParameterSet, recordings: list, settings: IdentificationSettings,
                 starts: list, motion: dict, free: bool = True):
        self.params, self.settings, self.free = params, settings, bool(free)
        self.recordings = list(recordings)
        mech = params.mech
        self.layout = lay = dependent_layout(mech.n)
        s = coordinate_scales(mech)
        self.motion = dict(motion)
        V = self.motion["v"]
        rows = constraint_scales(mech, mech.q0, s)
        self.sigma_pc = settings.constraints * rows
        self.sigma_vc = settings.constraints * rows * V
        self.sigma_dyn = settings.dynamics * s * self.motion["a"]
        self.keys, self.links, self.grids = [], [], []
        off = 0
        for rec, (q0, v0) in zip(self.recordings, starts):
            N = int(rec.n_steps)
            self.keys.append([gtsam.symbol("x", off + k) for k in range(N)])
            off += N
            terms = [L.prior(lay, 0, "q", q0, s), L.prior(lay, 0, "v", v0, s * V)]
            if N > 1:
                r0 = np.arange(N - 1)
                trunc = settings.integrator * s * rec.dt ** 3 / 12.0
                terms.append(L.step_links(lay, r0, rec.dt, [("q", "v")], trunc * self.motion["j"]))
                terms.append(L.step_links(lay, r0, rec.dt, [("v", "a")], trunc * self.motion["s"]))
            self.links.append(terms)
            self.grids.append(readings_on_grid(params.sensors, list(rec.readings), N))
        self._cache = (None, None)
        self._payload = {}

    @property
    def p(self) -> int:
        return self.params.size if self.free else 0

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
    def residuals(self, r: int, X: np.ndarray, theta: ArrayLike, jacobians: bool = True) -> tuple:
        """Whitened nonlinear rows of recording r: e (N, rows) and, with ``jacobians``,
        A_x (N, rows, dim) and A_theta (N, rows, p); also the row count of each family."""
        mech, sensors, deriv = self.recording_model(r, theta)
        rec, lay = self.recordings[r], self.layout
        N = X.shape[0]
        part = lay.unpack(X)
        p = {"q": part["q"], "v": part["v"], "a": part["a"]}
        u = rec.inputs
        Q = motor_forces(mech, u) if (u is not None and mech.spec.motors) else None
        es, Ax, At, sizes = [], [], [], []

        def add(e, J, sigma, Jt=None):
            wgt = 1.0 / np.broadcast_to(np.asarray(sigma, float), (e.shape[1],))
            es.append(e * wgt)
            sizes.append(e.shape[1])
            if jacobians:
                A = np.zeros((N, e.shape[1], lay.dim))
                for slot, Js in J.items():
                    A[:, :, lay.slice(slot)] = Js
                Ax.append(A * wgt[None, :, None])
                T = np.zeros((N, e.shape[1], self.p)) if Jt is None else Jt
                At.append(T * wgt[None, :, None])

        for fam, sig in ((position_constraints_residual(mech), self.sigma_pc),
                         (velocity_constraints_residual(mech), self.sigma_vc)):
            e, J = fam(p, jacobians)
            add(e, J, sig)
        Jall = p["_Phi_q"] if "_Phi_q" in p else C.constraint_jacobian(mech, p["q"])
        if jacobians:
            dyn = D.forward_dynamics_jacobians(mech, p["q"], p["v"], Q, J=Jall,
                                               Jdot=p.get("_Phi_q_dot"))
            e = dyn.qdd - p["a"]
            J = {"q": dyn.d_q, "v": dyn.d_qd, "a": np.broadcast_to(-np.eye(mech.n),
                                                                    (N, mech.n, mech.n))}
            Jt = (dynamics_parameter_jacobian(mech, deriv, p["q"], p["v"], dyn.qdd, dyn.d_Q, u)
                  if self.p else None)
            add(e, J, self.sigma_dyn, Jt)
        else:
            qdd = D.forward_dynamics(mech, p["q"], p["v"], Q, J=Jall)
            add(qdd - p["a"], None, self.sigma_dyn)
        for i, (sensor, (z, has)) in enumerate(zip(sensors, self.grids[r])):
            e, J = observation_residual(mech, sensor, z)(p, jacobians)
            mask = has.astype(float)[:, None]
            e = e * mask
            Jt = None
            if jacobians:
                J = {k: v * mask[:, :, None] for k, v in J.items()}
                if self.p and deriv.bias[i].any():
                    Jt = mask[:, :, None] * deriv.bias[i][None, None, :]
            add(e, J, sensor.sigma, Jt)
        e = np.concatenate(es, axis=1)
        if not jacobians:
            return e, None, None, sizes
        return e, np.concatenate(Ax, axis=1), np.concatenate(At, axis=1), sizes

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
            total += 0.5 * float(np.sum(e * e)) + sum(t.error(X) for t in self.links[r])
        return total

    def linearize(self, Xs: list, theta: ArrayLike) -> tuple:
        """(GaussianFactorGraph in delta form, error) at (Xs, theta)."""
        out = gtsam.GaussianFactorGraph()
        total = self.prior_error(theta)
        p, tk = self.p, self.theta_key
        for r, X in enumerate(Xs):
            keys = self.keys[r]
            total += self._linearize_links(r, X, keys, out)
            e, Ax, At, _ = self.residuals(r, X, theta)
            total += 0.5 * float(np.sum(e * e))
            model = unit_noise(e.shape[1])
            b = -e
            if p:
                for k in range(X.shape[0]):
                    out.add(keys[k], Ax[k], tk, At[k], b[k], model)
            else:
                for k in range(X.shape[0]):
                    out.add(keys[k], Ax[k], b[k], model)
        if p:
            w = 1.0 / self.settings.prior
            out.add(tk, w * np.eye(p), -w * np.asarray(theta, float), unit_noise(p))
        return out, total

    def _linearize_links(self, r: int, X: np.ndarray, keys: list, out) -> float:
        """The initial priors of recording r and its two integrator families, the latter as
        one factor per pair of steps (their rows stacked: half the factors to add and
        eliminate); returns their error."""
        terms = self.links[r]
        total = sum(t.linearize(X, keys, out) for t in terms[:2])
        if len(terms) < 3:
            return total
        blocks = [t.blocks(X) for t in terms[2:]]
        rows = blocks[0][0]
        if any(not np.array_equal(b[0], rows) or b[1][0].shape[0] != 1 for b in blocks):
            raise AssertionError("the integrator families link the same step pairs")  # pragma: no cover
        A0 = np.concatenate([b[1][0][0] for b in blocks], axis=0)
        A1 = np.concatenate([b[1][1][0] for b in blocks], axis=0)
        e = np.concatenate([b[2] for b in blocks], axis=1)
        model, neg = unit_noise(e.shape[1]), -e
        for t, (r0, r1) in enumerate(rows):
            out.add(keys[r0], A0, keys[r1], A1, neg[t], model)
        return total + 0.5 * float(np.sum(e * e))

    def ordering(self) -> list:
        """Elimination order: every recording's steps in time order, theta last."""
        keys = [k for ks in self.keys for k in ks]
        return keys + ([self.theta_key] if self.p else [])

    def prior_information(self) -> np.ndarray:
        """Information (p, p) of the parameter prior (in the chart)."""
        return np.eye(self.p) / self.settings.prior ** 2

    def step_costs(self, r: int, X: np.ndarray, theta: ArrayLike) -> dict:
        """Per step of recording r: the whitened squared residuals summed by family
        (``"observations"``, ``"dynamics"``, ``"constraints"``) and the number of readings."""
        e, _, _, sizes = self.residuals(r, X, theta, jacobians=False)
        cuts = np.cumsum([0] + sizes)
        sq = e * e
        fam = lambda a, b: np.sum(sq[:, cuts[a]:cuts[b]], axis=1)  # noqa: E731
        count = np.zeros(X.shape[0])
        for s, (_, has) in zip(self.params.sensors, self.grids[r]):
            count += has * s.dim
        return {"constraints": fam(0, 2), "dynamics": fam(2, 3),
                "observations": fam(3, len(sizes)), "readings": count}
