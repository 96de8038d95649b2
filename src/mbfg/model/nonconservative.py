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
           "with_inputs", "sampled_inputs",
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
