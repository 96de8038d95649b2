"""Non-conservative generalized forces of the mechanism itself: joint and slider friction, and
motors (the YAML ``friction:`` and ``motors:`` keys, docs/yaml-reference.md).

Every friction element e has a sliding rate that is linear in the velocities,
s_e = g_e(q) . qdot, and a force law

    f_e(s) = -(c_e s + mu_e tanh(s / eps_e))        (viscous + regularized Coulomb)

whose power f_e s_e is never positive.  Its generalized force is Q_e = f_e(s_e) g_e(q) (the
virtual power of the force, as every generalized force of Eq. 4):

* revolute joint between bodies a and b: s = omega_b - omega_a, the relative angular rate
  [rad/s], with omega = (d_x ddot_y - d_y ddot_x) / |d|^2 and d = r1 - r0 of the body (the
  gyroscope's rate, :class:`mbfg.model.sensors.Gyroscope`); so g = w(d_b) D_b - w(d_a) D_a,
  w(d) = (-d_y, d_x) / |d|^2;
* fixed slider (point p on a fixed line of unit direction u): s = u . rdot_p;
* mobile slider (point p on the line through body points a and b): s = u . (rdot_p - (1 - l)
  rdot_a - l rdot_b) with u = (r_b - r_a) / |r_b - r_a| and l = (r_p - r_a) . u / |r_b - r_a|:
  the rate of p relative to the body's material point under it, which is the affine
  combination (1 - l) r_a + l r_b of the two line points.

The Coulomb term is the sign function regularized by tanh with the width eps (``width`` in the
YAML; by default 1e-3 of the mechanism's characteristic rate: sqrt(|g| / ell) rad/s for joints
and sqrt(|g| ell) m/s for sliders, ell the RMS body length).

Exact derivatives: dQ/dqdot = sum_e f_e'(s_e) g_e g_e^T and dQ/dq = sum_e f_e'(s_e) g_e
(G_e^T qdot)^T + f_e(s_e) G_e with G_e = dg_e/dq, obtained by complex-step differentiation of
g_e (exact to rounding: g_e is analytic and evaluated without abs or norms).

Motors: ``Q = B u``, B (n, k) with the motor gains K_j [N m or N per input unit] in the rows
of their coordinates, u (k,) the inputs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.model.scales import characteristic_length
from mbfg.model.spec import JointFrictionSpec, SliderFrictionSpec

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism

__all__ = ["FrictionElement", "friction_elements", "friction_forces", "friction_force_jacobians",
           "sliding_rates", "motor_matrix", "motor_forces", "input_function",
           "with_inputs", "sampled_inputs", "coulomb_step_errors", "coulomb_dwells",
           "DEFAULT_WIDTH_FRACTION"]

DEFAULT_WIDTH_FRACTION = 1e-3
"""Default Coulomb regularization width as a fraction of the mechanism's characteristic rate."""

_COMPLEX_STEP = 1e-30
"""Complex step relative to the coordinates' scales (no cancellation, so any tiny step works)."""


@dataclass(frozen=True)
class FrictionElement:
    """One friction element: its velocity map ``g(q) (..., n)`` (complex-safe), viscous
    coefficient, Coulomb force or torque, regularization width and a label."""
    rate: Callable
    viscous: float
    coulomb: float
    width: float
    label: str


def _body_map(mech: Mechanism, b: int):
    """(D (2, n), d0 (2,)) with d = r1 - r0 = D q + d0 of body b (zero for the ground, -1)."""
    if b < 0:
        return np.zeros((2, mech.n)), np.zeros(2)
    p0, p1 = mech.spec.bodies[b].points[:2]
    S, c = mech.point_selection, mech.point_fixed_xy
    return S[p1] - S[p0], c[p1] - c[p0]


def _angular_rate_map(D, d0):
    """g(q) of a body's angular rate: w(d) D with w = (-d_y, d_x) / |d|^2 (zero for ground)."""
    if not D.any():
        return lambda q: np.zeros(q.shape, dtype=q.dtype)

    def g(q):
        d = np.einsum("kn,...n->...k", D, q) + d0
        s = d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]
        w = np.stack([-d[..., 1], d[..., 0]], axis=-1) / s[..., None]
        return np.einsum("...k,kn->...n", w, D)
    return g


def _joint(mech: Mechanism, spec: JointFrictionSpec):
    ga = _angular_rate_map(*_body_map(mech, spec.bodies[0]))
    gb = _angular_rate_map(*_body_map(mech, spec.bodies[1]))
    return lambda q: gb(q) - ga(q)


def _slider(mech: Mechanism, k: int):
    from mbfg.model.spec import FixedSliderSpec
    con = mech.spec.constraints[k]
    S, c = mech.point_selection, mech.point_fixed_xy
    Sp, cp = S[con.point], c[con.point]
    if isinstance(con, FixedSliderSpec):
        (xa, ya), (xb, yb) = con.line
        u = np.array([xb - xa, yb - ya]) / np.hypot(xb - xa, yb - ya)
        g0 = u @ Sp
        return lambda q: np.broadcast_to(g0, q.shape).astype(q.dtype)
    a, b = con.line_points
    Sa, ca, Sb, cb = S[a], c[a], S[b], c[b]

    def g(q):
        ra = np.einsum("kn,...n->...k", Sa, q) + ca
        rb = np.einsum("kn,...n->...k", Sb, q) + cb
        rp = np.einsum("kn,...n->...k", Sp, q) + cp
        e = rb - ra
        ee = e[..., 0] * e[..., 0] + e[..., 1] * e[..., 1]
        u = e / np.sqrt(ee)[..., None]
        lam = ((rp - ra) * e).sum(-1) / ee
        rel = Sp - (1 - lam)[..., None, None] * Sa - lam[..., None, None] * Sb  # (..., 2, n)
        return np.einsum("...k,...kn->...n", u, rel)
    return g


def _default_width(mech: Mechanism, kind: str) -> float:
    ell = characteristic_length(mech)
    g = float(np.hypot(*mech.gravity))
    rate = np.sqrt(g / ell) if kind == "joint" else np.sqrt(g * ell)
    return DEFAULT_WIDTH_FRACTION * float(rate)


def friction_elements(mech: Mechanism) -> tuple[FrictionElement, ...]:
    """The friction elements of ``mech.spec.friction`` (cached on the mechanism)."""
    out = []
    for k, f in enumerate(mech.spec.friction):
        if isinstance(f, JointFrictionSpec):
            kind, rate = "joint", _joint(mech, f)
            names = ["ground" if b < 0 else f"body {b}" for b in f.bodies]
            label = f"friction[{k}] (joint {names[0]}-{names[1]})"
        elif isinstance(f, SliderFrictionSpec):
            kind, rate = "slider", _slider(mech, f.constraint)
            label = f"friction[{k}] (slider constraints[{f.constraint}])"
        else:  # pragma: no cover - the loader builds only these
            raise TypeError(f"unknown friction spec {f!r}")
        width = f.width if f.width is not None else _default_width(mech, kind)
        out.append(FrictionElement(rate, float(f.viscous), float(f.coulomb), float(width), label))
    return tuple(out)


def sliding_rates(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> np.ndarray:
    """Sliding rate s_e = g_e(q) . qdot of every friction element, shape (..., E)
    [rad/s for joints, m/s for sliders]."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    els = mech.friction_elements
    if not els:
        return np.zeros(q.shape[:-1] + (0,))
    return np.stack([np.einsum("...n,...n->...", e.rate(q), qd) for e in els], axis=-1)


def _law(e: FrictionElement, s):
    """f(s) = -(c s + mu tanh(s / eps)) of one element and its derivative f'(s)."""
    th = np.tanh(s / e.width)
    return (-(e.viscous * s + e.coulomb * th),
            -(e.viscous + (e.coulomb / e.width) * (1.0 - th * th)))


TANH_SATURATED = 20.0
"""|s| / eps beyond which tanh(s / eps) is +-1 to double precision (1 - tanh(20) = 8e-18)."""


def _constrained_response(mech: Mechanism, q: np.ndarray, qd: np.ndarray,
                          g: np.ndarray) -> np.ndarray:
    """The constrained accelerations (k, n) from unit generalized forces g (k, n) at the
    states (q, qd): forward_dynamics is affine in the applied force, so its change from 0 to
    g (gravity, friction and the velocity terms cancel)."""
    from mbfg.model.dynamics import forward_dynamics
    return forward_dynamics(mech, q, qd, g) - forward_dynamics(mech, q, qd, np.zeros_like(g))


def coulomb_dwells(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> list:
    """Where each Coulomb term stays in its steep part over a sampled motion, and how stiff
    it is there.

    A joint that sticks (or creeps) keeps its sliding rate within a few regularization widths
    of zero for many steps: there mu tanh(s / eps) is a damper of slope mu / eps, far stiffer
    than the rest of the dynamics, and the rate that balances it is a fraction of eps, below
    what readings resolve.  A rate that crosses zero passes that band within a step or a few.
    The damper's time constant is tau = 1 / ((mu / eps + c) g^T M^-1 g), with M^-1 g the
    constrained response to the element's force direction g (1 / g^T M^-1 g is the inertia
    the element moves; c the viscous coefficient).

    Parameters
    ----------
    mech : Mechanism
    q, qd : (N, n) arrays
        Coordinates and their rates at N samples.

    Returns
    -------
    list of (label, fraction, longest, tau)
        One per element with a Coulomb term: the fraction of the samples where |s| <
        ``TANH_SATURATED`` eps, the longest run of consecutive such samples, and the shortest
        time constant tau [s] at them (inf when there are none).
    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    s = sliding_rates(mech, q, qd)
    out = []
    for i, e in enumerate(mech.friction_elements):
        if e.coulomb == 0.0:
            continue
        steep = np.abs(s[:, i]) < TANH_SATURATED * e.width
        edges = np.flatnonzero(np.diff(np.concatenate(([0], steep.astype(np.int8), [0]))))
        longest = int(np.max(edges[1::2] - edges[::2])) if edges.size else 0
        tau = np.inf
        k = np.flatnonzero(steep)
        if k.size:
            g = e.rate(q[k])
            response = _constrained_response(mech, q[k], qd[k], g)
            mobility = float(np.max(np.einsum("kn,kn->k", g, response)))   # 1 / inertia
            if mobility > 0.0:
                tau = 1.0 / ((e.coulomb / e.width + e.viscous) * mobility)
        out.append((e.label, float(np.mean(steep)) if steep.size else 0.0, longest, tau))
    return out


_GAUSS_NODES, _GAUSS_WEIGHTS = np.polynomial.legendre.leggauss(128)


def _tanh_profile_integrals(u0: np.ndarray, u1: np.ndarray) -> tuple:
    """For phi(t) = tanh(u0 + (u1 - u0) t) on t in [0, 1] (u linear over a unit step):
    I0 = int phi dt and I1 = int (1/2 - t) phi dt.  I0 in closed form (log cosh); I1 by
    128-point Gauss-Legendre on the part of the step where |u| < TANH_SATURATED (tanh is
    analytic there, its poles pi/2 off the real axis: the rule is exact to rounding) and in
    closed form where tanh is +-1.  Requires |u1 - u0| > 0."""
    d = u1 - u0
    lc = lambda u: np.abs(u) + np.log1p(np.exp(-2.0 * np.abs(u))) - np.log(2.0)  # noqa: E731
    I0 = (lc(u1) - lc(u0)) / d
    # in u: t = (u - u0) / d, dt = du / d; the integrand (1/2 - (u - u0) / d) tanh(u)
    lo, hi = np.minimum(u0, u1), np.maximum(u0, u1)

    def poly(a, b):  # int_a^b (1/2 - (u - u0) / d) du, a <= b
        return 0.5 * (b - a) - ((b - u0) ** 2 - (a - u0) ** 2) / (2.0 * d)

    U = TANH_SATURATED
    total = np.zeros_like(d)
    a, b = lo, np.minimum(hi, -U)          # tanh = -1
    total -= np.where(b > a, poly(a, np.maximum(a, b)), 0.0)
    a, b = np.maximum(lo, U), hi           # tanh = +1
    total += np.where(b > a, poly(np.minimum(a, b), b), 0.0)
    a, b = np.maximum(lo, -U), np.minimum(hi, U)
    mid = b > a
    if np.any(mid):
        am, bm, u0m, dm = a[mid], b[mid], u0[mid], d[mid]
        u = 0.5 * (am + bm)[:, None] + 0.5 * (bm - am)[:, None] * _GAUSS_NODES
        f = (0.5 - (u - u0m[:, None]) / dm[:, None]) * np.tanh(u)
        total[mid] += 0.5 * (bm - am) * (f @ _GAUSS_WEIGHTS)
    return I0, total / np.abs(d)


def coulomb_step_errors(mech: Mechanism, q: ArrayLike, qd: ArrayLike, dt: float) -> dict:
    """The integrator rows' own errors over each step from the regularized Coulomb terms.

    Where a sliding rate crosses zero within a step, mu tanh(s / eps) switches faster than any
    polynomial of the step can follow (the default width eps is 1e-3 of the characteristic
    rate: at 1 kHz the switch takes a fraction of a step).  The Hermite and trapezoidal rows
    then err by far more than their smooth-motion truncation error, and a fit that holds them
    to it bends the states and biases the parameters (docs/identification.md).  Per step and
    coordinate, with the sliding rate s linear over the step, the acceleration's Coulomb part
    -mu_e tanh(s_e / eps_e) (M^-1 g_e)_i (the constrained response to the element's force
    direction g_e, frozen at the step's start) is integrated exactly by each rule's formula:

    ``"hermite_q"``   x'' = phi: int (h/2 - t) phi dt + h^2/12 (phi_1 - phi_0)
    ``"hermite_v"``   x' = phi: int phi dt - h/2 (phi_0 + phi_1) + h^2/12 (phi'_1 - phi'_0)
    ``"trapezoid_a"`` x = phi: phi_1 - phi_0 - h/2 (phi'_0 + phi'_1)
    ``"trapezoid_q"`` x'' = phi: int (h/2 - t) phi dt
    ``"trapezoid_v"`` x' = phi: int phi dt - h/2 (phi_0 + phi_1)

    the rows of (q, v, a), (v, a, j), (a, j), (q, v) and (v, a): each row's residual
    x_{k+1} - x_k - ... on the exact motion (signed; summed over the elements).  Steps whose
    rate stays where tanh is saturated (``TANH_SATURATED``) or changes by less than 1e-3 eps
    give 0 (tanh is then a quadratic of the step to within 1e-9, which every row integrates
    exactly: the smooth motion's bound holds).

    Parameters
    ----------
    q, qd : (N, n)
        The states at the grid's steps [m, rad], [m/s, rad/s].
    dt : float
        The step [s].

    Returns
    -------
    dict of (N - 1, n) arrays, each in the units of its row's integrated quantity x
    (q's for the position rows, q's / s for the velocity rows, / s^2 for the accelerations)
    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    N, n = q.shape
    keys = ("hermite_q", "hermite_v", "trapezoid_a", "trapezoid_q", "trapezoid_v")
    out = {k: np.zeros((max(N - 1, 0), n)) for k in keys}
    if N < 2:
        return out
    h = float(dt)
    for e in mech.friction_elements:
        if e.coulomb == 0.0:
            continue
        g = e.rate(q)
        u = np.einsum("kn,kn->k", g, qd) / e.width
        u0, u1 = u[:-1], u[1:]
        k = np.flatnonzero((np.minimum(u0, u1) < TANH_SATURATED)
                           & (np.maximum(u0, u1) > -TANH_SATURATED)
                           & (np.abs(u1 - u0) > 1e-3))
        if not k.size:
            continue
        I0, I1 = _tanh_profile_integrals(u0[k], u1[k])
        p0, p1 = np.tanh(u0[k]), np.tanh(u1[k])
        rate = (u1[k] - u0[k]) / h                       # du/dt [1/s]
        dp0, dp1 = rate * (1.0 - p0 * p0), rate * (1.0 - p1 * p1)
        R = {"hermite_q": h * h * (I1 + (p1 - p0) / 12.0),
             "hermite_v": h * (I0 - 0.5 * (p0 + p1)) + h * h / 12.0 * (dp1 - dp0),
             "trapezoid_a": p1 - p0 - 0.5 * h * (dp0 + dp1),
             "trapezoid_q": h * h * I1,
             "trapezoid_v": h * (I0 - 0.5 * (p0 + p1))}
        response = e.coulomb * _constrained_response(mech, q[k], qd[k], g[k])
        for key, r in R.items():
            out[key][k] -= r[:, None] * response
    return out


def friction_forces(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> np.ndarray:
    """Generalized friction forces Q_f(q, qdot), shape (..., n) [N, N m]."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    out = np.zeros(np.broadcast_shapes(q.shape, qd.shape))
    for e in mech.friction_elements:
        g = e.rate(q)
        f, _ = _law(e, np.einsum("...n,...n->...", g, qd))
        out = out + f[..., None] * g
    return out


def _rate_jacobian(e: FrictionElement, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """G = dg/dq (..., n, n) by complex-step differentiation (G[..., i, j] = dg_i/dq_j)."""
    h = _COMPLEX_STEP * scale
    qc = q[..., None, :] + 1j * np.diag(h)                      # (..., n(j), n)
    return np.swapaxes(e.rate(qc).imag / h[:, None], -1, -2)


def friction_force_jacobians(mech: Mechanism, q: ArrayLike,
                             qd: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q_f (..., n) and its exact derivatives dQ_f/dq, dQ_f/dqdot (..., n, n)."""
    from mbfg.model.scales import coordinate_scales
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    shape = np.broadcast_shapes(q.shape, qd.shape)
    q, qd = np.broadcast_to(q, shape), np.broadcast_to(qd, shape)
    n = shape[-1]
    Q = np.zeros(shape)
    dq = np.zeros(shape + (n,))
    dqd = np.zeros(shape + (n,))
    scale = coordinate_scales(mech)
    for e in mech.friction_elements:
        g = e.rate(q)
        s = np.einsum("...n,...n->...", g, qd)
        f, df = _law(e, s)
        G = _rate_jacobian(e, q, scale)
        ds_dq = np.einsum("...ij,...i->...j", G, qd)
        Q += f[..., None] * g
        dqd += df[..., None, None] * g[..., :, None] * g[..., None, :]
        dq += df[..., None, None] * g[..., :, None] * ds_dq[..., None, :] + f[..., None, None] * G
    return Q, dq, dqd


def motor_matrix(mech: Mechanism) -> np.ndarray:
    """B (n, k): the generalized force of the motors is B u for inputs u (k,)."""
    B = np.zeros((mech.n, len(mech.spec.motors)))
    for j, m in enumerate(mech.spec.motors):
        B[mech.coordinate_index(m.coordinate), j] = m.gain
    return B


def motor_forces(mech: Mechanism, u: ArrayLike) -> np.ndarray:
    """Generalized motor forces B u, shape (..., n), for inputs u (..., k)."""
    return np.einsum("nk,...k->...n", motor_matrix(mech), np.asarray(u, float))


def input_function(mech: Mechanism, inputs: ForceInput) -> Callable[[float], np.ndarray | None]:
    """The motors' generalized forces as a function of the time t [s], from ``inputs``: None
    (no input: zero), (k,) constant, or a callable t -> (k,); None without motors."""
    from mbfg.model.forces import force_function
    k = len(mech.spec.motors)
    if k == 0:
        return lambda t: None
    u_at = force_function(inputs, k) if inputs is not None else (lambda t: np.zeros(k))
    B = motor_matrix(mech)
    return lambda t: B @ u_at(t)


def with_inputs(mech: Mechanism, forces: ForceInput, inputs: ForceInput) -> ForceInput:
    """One time-dependent force input (the :mod:`mbfg.model.forces` convention) of the
    external ``forces`` plus the motors driven by ``inputs``; ``forces`` itself without motors
    or inputs."""
    if inputs is None or not mech.spec.motors:
        if inputs is not None:
            from mbfg.errors import UsageError
            raise UsageError(f"inputs were given but {mech.source or 'the mechanism'} has no "
                             f"motors; expected a 'motors:' list in its YAML")
        return forces
    from mbfg.model.forces import force_function
    external = force_function(forces, mech.n)
    motors = input_function(mech, inputs)

    def total(t: float) -> np.ndarray:
        e = external(t)
        m = motors(t)
        return m if e is None else e + m
    return total


def sampled_inputs(t: ArrayLike, u: ArrayLike) -> Callable[[float], np.ndarray]:
    """Inputs recorded at times ``t`` (T,) [s] as a function of time: linear interpolation
    between samples, held constant outside.  ``u`` (T, k)."""
    t = np.asarray(t, float)
    u = np.asarray(u, float).reshape(t.size, -1)
    return lambda tt: np.array([np.interp(float(tt), t, u[:, j]) for j in range(u.shape[1])])
