"""Equations of motion and their exact derivatives (paper Eqs. 4-7, 13-15, 26-29).

Generalized forces: the functions take ``Q``, the *applied* generalized forces (motor torques,
user loads) of shape (..., n); gravity (:meth:`Mechanism.gravity_forces`) and the
mechanism's own friction Q_f(q, qdot) (:mod:`mbfg.model.nonconservative`, YAML ``friction:``)
are always added internally, with their derivatives.  ``Q=None`` means no applied force.

Dependent coordinates.  With Phi_q' the linearly independent constraint rows
(:func:`mbfg.model.constraints.independent_rows`, chosen per state; redundant rows are implied by the others and would make the
multipliers non-unique), the accelerations solve the augmented (KKT) system of Eq. (5)

    [ M     Phi_q'^T ] [ qddot  ]   [ Q_g + Q ]
    [ Phi_q'   0     ] [ lambda ] = [   c     ],   c = -dPhi_q'/dt qdot  (Eq. 3)

which is nonsingular whenever M is positive definite on the null space of Phi_q, so a singular
M (zero rows of relative angles) is fine.  Its solution is Eq. (6).  Optional Baumgarte
stabilization replaces c by ``c - 2 zeta omega Phi_q qdot - omega^2 Phi``.

Exact Jacobians follow by implicit differentiation of the same linear system: with K the KKT
matrix, d[qddot; lambda]/dx = K^-1 (d rhs/dx - dK/dx [qddot; lambda]), where
dK/dq_j [qddot; lambda] = [(Phi_qq^T lambda)_j; (Phi_qq qddot)_j].

Independent coordinates (Eq. 15): zddot = (R^T M R)^-1 R^T (Q_g + Q - M S c).  This is
identically B qddot, so its Jacobians are B times the dependent ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.model import constraints as C
from mbfg.model import stacked_sparse
from mbfg.model.stacked_sparse import StackedSparse
from mbfg.model.kkt import kkt_matrix, solve_kkt, uses_sparse
from mbfg.model.kinematics import selection_matrix, velocity_sensitivity, velocity_transform
from mbfg.model.nonconservative import friction_force_jacobians, friction_forces

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism


@dataclass(frozen=True)
class Baumgarte:
    """Baumgarte stabilization parameters: c -> c - 2 zeta omega Phi_q qdot - omega^2 Phi.

    ``zeta`` [-] damping ratio and ``omega`` [rad/s] natural frequency."""
    zeta: float = 1.0
    omega: float = 10.0


@dataclass(frozen=True)
class DynamicsJacobians:
    """qddot and its exact derivatives at one or many states.

    Shapes: qdd (..., n); lam (..., m) (multipliers of all rows, zero on redundant rows);
    d_q, d_qd, d_Q (..., n, n)."""
    qdd: np.ndarray
    lam: np.ndarray
    d_q: np.ndarray
    d_qd: np.ndarray
    d_Q: np.ndarray


def _applied(mech, Q, q, qd, jacobians=False):
    """Every generalized force of Eq. (4) at (q, qdot), shape of q: gravity, the applied
    ``Q`` and the mechanism's own friction (:mod:`mbfg.model.nonconservative`).  With
    ``jacobians``: (forces, dQ_f/dq, dQ_f/dqdot), the derivatives None without friction.
    Applied forces given per step (T, n) at one state (1, n) give (T, n): the structure
    probe of a term (:meth:`mbfg.graphs.terms.StackedTerm._structure`) evaluates one
    state of a term whose time-varying forces have a row per step."""
    out = mech.gravity_forces() if Q is None else mech.gravity_forces() + np.asarray(Q, float)
    d_q = d_qd = None
    if mech.friction_elements and jacobians:
        Qf, d_q, d_qd = friction_force_jacobians(mech, q, qd)
        out = out + Qf
    elif mech.friction_elements:
        out = out + friction_forces(mech, q, qd)
    out = C.broadcast_to_shape(out, np.broadcast_shapes(np.shape(out), q.shape))
    return (out, d_q, d_qd) if jacobians else out


def _broadcast_states(q, qd, J, Jdot):
    """q and qd broadcast to one shape (one q with many velocities, or the reverse), and a
    caller's Phi_q ``J`` and dPhi_q/dt ``Jdot`` where they are per state of it
    (:func:`~mbfg.model.constraints.given_per_state`; else None: recomputed)."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    if q.shape != qd.shape:
        q, qd = np.broadcast_arrays(q, qd)
    lead = q.shape[:-1]
    return q, qd, C.given_per_state(J, lead), C.given_per_state(Jdot, lead)


def _rhs_c(mech, q, qd, baumgarte, rows=None, Jall=None, Jdot=None):
    """Independent rows (per state), their Jacobian and the acceleration right-hand side c.
    ``Jall``, ``Jdot``: Phi_q(q) and dPhi_q/dt(q, qd) of all rows, if already computed."""
    if rows is None:
        rows, J = C.solve_jacobian(mech, q, Jall)
    else:
        Jall = C.constraint_jacobian(mech, q) if Jall is None else Jall
        J = C.take_rows(Jall, rows, 1)
    bias = (C.acceleration_bias(mech, q, qd) if Jdot is None
            else np.einsum("...kn,...n->...k", Jdot, qd))
    c = -C.take_rows(bias, rows)
    if baumgarte is not None:
        z, w = baumgarte.zeta, baumgarte.omega
        c = (c - 2.0 * z * w * C.take_rows(C.velocity_constraints(mech, q, qd), rows)
             - w * w * C.take_rows(C.position_constraints(mech, q), rows))
    return rows, J, c


def forward_dynamics(
    mech: Mechanism,
    q: ArrayLike,
    qd: ArrayLike,
    Q: ArrayLike | None = None,
    *,
    baumgarte: Baumgarte | None = None,
    return_multipliers: bool = False,
    J: ArrayLike | None = None,
    Jdot: ArrayLike | None = None,
) -> np.ndarray:
    """Accelerations qddot(q, qdot, Q) in dependent coordinates, Eq. (5)-(6).

    Parameters
    ----------
    q, qd : (..., n)
        Positions [m, rad] and velocities.
    Q : (..., n), optional
        Applied generalized forces [N, N m]; gravity and friction are added internally.
    baumgarte : Baumgarte, optional
        Stabilization terms (off by default: graphs carry explicit constraint factors).
    return_multipliers : bool
        Also return lambda (..., m), zero on redundant rows.
    J, Jdot : (..., m, n), optional
        Phi_q(q) and dPhi_q/dt(q, qd) when the caller already has them.

    Returns
    -------
    qdd : (..., n)   [and lam : (..., m)]
    """
    q, qd, J, Jdot = _broadcast_states(q, qd, J, Jdot)
    rows, J, c = _rhs_c(mech, q, qd, baumgarte, Jall=J, Jdot=Jdot)
    lead = q.shape[:-1]
    f = _applied(mech, Q, q, qd)
    if isinstance(J, StackedSparse):  # flattened states
        f = C.broadcast_to_shape(f, lead + (mech.n,)).reshape(-1, mech.n)
        c = C.broadcast_to_shape(c, lead + c.shape[-1:]).reshape(-1, c.shape[-1])
    sol = solve_kkt(mech.mass_matrix(), J, f, c)
    sol = sol.reshape(lead + sol.shape[-1:])
    qdd = sol[..., :mech.n]
    if not return_multipliers:
        return qdd
    return qdd, _scatter_multipliers(mech, rows, sol[..., mech.n:])


def jerk_along(mech: Mechanism, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike | None,
               Q_plus: ArrayLike | None, Q_minus: ArrayLike | None, h: float, *,
               dynamics: Callable | None = None) -> np.ndarray:
    """d/dt qddot along the motion (the jerk [m/s^3, rad/s^3]): the central difference of the
    accelerations (Eq. 6) at (q +- h qd, qd +- h qdd), with the applied forces ``Q_plus`` and
    ``Q_minus`` at t +- h.

    Parameters
    ----------
    q, qd : (T, n), or (n,) for one state
        Positions and velocities.
    qdd : same shape, or None
        The accelerations to follow; None: the model's own at (q, qd) (with the mean of the
        two forces), so that the jerk depends on the state (q, qd) alone.
    Q_plus, Q_minus : like q, or None (no applied forces)
    h : float
        Time step of the difference [s]; its truncation error is O((omega h)^2) relative,
        its rounding error O(eps / (omega h)), for a motion of rate omega.
    dynamics : callable (q, qd, Q) -> qddot, optional
        The accelerations; default :func:`forward_dynamics` of ``mech`` (its fused
        :class:`StateDynamics` is the faster choice for one state).

    Returns
    -------
    Like q.
    """
    if dynamics is None:
        def dynamics(qq, vv, QQ):
            return forward_dynamics(mech, qq, vv, QQ)
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    if qdd is None:
        Qc = None if Q_plus is None else 0.5 * (np.asarray(Q_plus) + np.asarray(Q_minus))
        qdd = dynamics(q, qd, Qc)
    hq, hv = h * qd, h * np.asarray(qdd, float)
    if q.ndim == 1:
        ap = dynamics(q + hq, qd + hv, Q_plus)
        am = dynamics(q - hq, qd - hv, Q_minus)
        return (ap - am) / (2.0 * h)
    T = q.shape[0]
    Q = None if Q_plus is None else np.concatenate([Q_plus, Q_minus])
    a = dynamics(np.concatenate([q + hq, q - hq]), np.concatenate([qd + hv, qd - hv]), Q)
    return (a[:T] - a[T:]) / (2.0 * h)


@dataclass(frozen=True)
class JerkJacobians:
    """The jerk of :func:`jerk_along` (with the model's own accelerations) and its exact
    derivatives.  Shapes: jerk (T, n); d_q, d_qd (T, n, n)."""
    jerk: np.ndarray
    d_q: np.ndarray
    d_qd: np.ndarray


def jerk_jacobians(mech: Mechanism, q: ArrayLike, qd: ArrayLike, Q_plus: ArrayLike | None,
                   Q_minus: ArrayLike | None, h: float) -> JerkJacobians:
    """The jerk J(q, qd) of :func:`jerk_along` with ``qdd=None`` and its derivatives with
    respect to q and qd, exact for that central difference.

    With A(q, qd) the accelerations (Eq. 6), a0 = A(q, qd) and A+-, A_q+-, A_qd+- the
    accelerations and their Jacobians (Eqs. 28d-g, :func:`forward_dynamics_jacobians`) at
    (q +- h qd, qd +- h a0), J = (A+ - A-) / (2h) and by the chain rule

        dJ/dq  = (A_q+ - A_q-) / (2h) + (A_qd+ + A_qd-)/2 A_q(q, qd)
        dJ/dqd = (A_q+ + A_q-)/2 + (A_qd+ - A_qd-) / (2h) + (A_qd+ + A_qd-)/2 A_qd(q, qd)

    Parameters
    ----------
    q, qd : (T, n)
        Positions and velocities.
    Q_plus, Q_minus : (T, n) or None
        Applied forces at t +- h (None: none).
    h : float
        Time step of the difference [s].

    Returns
    -------
    JerkJacobians
        jerk (T, n) [m/s^3, rad/s^3]; d_q (T, n, n) [1/s^3]; d_qd (T, n, n) [1/s^2].
    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    Qc = None if Q_plus is None else 0.5 * (np.asarray(Q_plus) + np.asarray(Q_minus))
    d0 = forward_dynamics_jacobians(mech, q, qd, Qc, force_jacobian=False)
    hq, hv = h * qd, h * d0.qdd
    Q = None if Q_plus is None else np.stack([np.asarray(Q_plus), np.asarray(Q_minus)])
    d = forward_dynamics_jacobians(mech, np.stack([q + hq, q - hq]),
                                   np.stack([qd + hv, qd - hv]), Q, force_jacobian=False)
    qd_mean = 0.5 * (d.d_qd[0] + d.d_qd[1])
    return JerkJacobians(
        jerk=(d.qdd[0] - d.qdd[1]) / (2.0 * h),
        d_q=(d.d_q[0] - d.d_q[1]) / (2.0 * h) + qd_mean @ d0.d_q,
        d_qd=0.5 * (d.d_q[0] + d.d_q[1]) + (d.d_qd[0] - d.d_qd[1]) / (2.0 * h)
        + qd_mean @ d0.d_qd)


class StateDynamics:
    """:func:`forward_dynamics` for one state at a time, fused: ``StateDynamics(mech)(q, qd,
    Q)`` gives qddot (n,) of Eq. (5)-(6) (no Baumgarte terms) from the single-state
    constraint kernels (:class:`~mbfg.model.constraints.StateConstraints`) and the KKT
    matrix's constant block precomputed, the system solved by LAPACK's ``dgesv`` directly
    (the LU with partial pivoting ``numpy.linalg.solve`` uses), so a call costs a dozen small
    array operations instead of the batch kernels' fixed overhead.  For explicit time
    stepping (one state per call); the same accelerations as :func:`forward_dynamics` to
    rounding (a test checks it).  Mechanisms with redundant constraints (whose independent
    rows are chosen per state), and those of ``KKT_SPARSE_MIN`` unknowns or more (whose KKT
    system is solved sparse, :mod:`mbfg.model.kkt`), use :func:`forward_dynamics` itself."""

    def __init__(self, mech: Mechanism):
        from scipy.linalg.lapack import dgesv
        self.mech, self._gesv = mech, dgesv
        n, m = mech.n, mech.m
        self.constraints = C.StateConstraints(mech)
        # redundant rows (chosen per state), or large enough for the sparse KKT solve
        self.general = mech.independent_rows.size < m or uses_sparse(n, m)
        self.friction = bool(mech.friction_elements)
        self._K = np.zeros((n + m, n + m))
        self._K[:n, :n] = mech.mass_matrix()
        self._rhs = np.zeros(n + m)
        self._Qg = mech.gravity_forces()

    def __call__(self, q: ArrayLike, qd: ArrayLike, Q: ArrayLike | None = None) -> np.ndarray:
        if self.general:
            return forward_dynamics(self.mech, q, qd, Q)
        n = self.mech.n
        q, qd = np.asarray(q, float), np.asarray(qd, float)
        K, rhs, sc = self._K, self._rhs, self.constraints
        J, bias = sc.jacobian_bias(q, qd)
        K[n:, :n] = J
        K[:n, n:] = J.T
        np.negative(bias, out=rhs[n:])
        if self.friction:
            rhs[:n] = _applied(self.mech, Q, q, qd)
        elif Q is None:
            rhs[:n] = self._Qg
        else:
            rhs[:n] = self._Qg + Q
        _, _, x, info = self._gesv(K, rhs)
        if info > 0:
            raise np.linalg.LinAlgError("Singular matrix")
        return x[:n]


def _scatter_multipliers(mech, rows, lam_r):
    """Multipliers of all m rows (zero on the redundant ones)."""
    if rows.ndim == 1 and rows.size == mech.m:  # every row (rows are sorted)
        return lam_r
    lam = np.zeros(lam_r.shape[:-1] + (mech.m,))
    np.put_along_axis(lam, np.broadcast_to(rows, lam_r.shape), lam_r, axis=-1)
    return lam


def forward_dynamics_jacobians(
    mech: Mechanism,
    q: ArrayLike,
    qd: ArrayLike,
    Q: ArrayLike | None = None,
    *,
    baumgarte: Baumgarte | None = None,
    J: ArrayLike | None = None,
    Jdot: ArrayLike | None = None,
    force_jacobian: bool = True,
) -> DynamicsJacobians:
    """qddot and its exact Jacobians d qddot/dq, d qddot/dqdot, d qddot/dQ (Eqs. 26d, 28d-g).

    Vectorized over leading axes of q, qd, Q.  ``J`` = Phi_q(q) and ``Jdot`` = dPhi_q/dt(q, qd)
    may be passed when the caller already has them (factor graphs evaluate them for the
    constraint factors of the same step).  Without ``force_jacobian``, d_Q is None (one
    solve with 2n instead of 3n right-hand sides)."""
    q, qd, J, Jdot = _broadcast_states(q, qd, J, Jdot)
    n = mech.n
    lead = q.shape[:-1]
    Jall, Jdot_all = C.constraint_jacobian(mech, q) if J is None else J, Jdot
    rows, J, c = _rhs_c(mech, q, qd, baumgarte, Jall=Jall, Jdot=Jdot_all)
    mr = rows.shape[-1]
    K = kkt_matrix(mech.mass_matrix(), J)
    # Q_f(q, qdot) and its derivatives enter the right-hand side
    Qt, dQf_dq, dQf_dqd = _applied(mech, Q, q, qd, jacobians=True)
    rhs = np.concatenate([Qt, c], axis=-1)
    sol = np.linalg.solve(K, rhs[..., None])[..., 0]
    qdd, lam_r = sol[..., :n], sol[..., n:]

    # derivative right-hand sides, each (..., n + mr, n)
    Jdot = C.take_rows(C.constraint_jacobian_dot(mech, q, qd) if Jdot_all is None else Jdot_all,
                       rows, 1)
    lam = _scatter_multipliers(mech, rows, lam_r)
    Rq = np.zeros(lead + (n + mr, n))
    Rq[..., :n, :] = -C.hessian_weighted_sum(mech, q, lam)
    Rq[..., n:, :] = -C.take_rows(C.acceleration_constraints_jacobian(mech, q, qd, qdd, Jall),
                                  rows, 1)
    Rqd = np.zeros(lead + (n + mr, n))
    Rqd[..., n:, :] = -2.0 * Jdot
    if mech.friction_elements:
        Rq[..., :n, :] += dQf_dq
        Rqd[..., :n, :] += dQf_dqd
    if baumgarte is not None:
        z, w = baumgarte.zeta, baumgarte.omega
        Rq[..., n:, :] += -2.0 * z * w * Jdot - w * w * J
        Rqd[..., n:, :] += -2.0 * z * w * J
    parts = [Rq, Rqd]
    if force_jacobian:
        RQ = np.zeros(lead + (n + mr, n))
        RQ[..., :n, :] = np.eye(n)
        parts.append(RQ)
    X = np.linalg.solve(K, np.concatenate(parts, axis=-1))
    return DynamicsJacobians(qdd=qdd, lam=lam, d_q=X[..., :n, :n], d_qd=X[..., :n, n:2 * n],
                             d_Q=X[..., :n, 2 * n:] if force_jacobian else None)


@dataclass(frozen=True)
class EquationsOfMotion:
    """Residual of the equations of motion with the multipliers as unknowns and its exact
    Jacobians (shapes for leading axes ``...``): ``e`` (..., n) and ``d_q``, ``d_v``, ``d_a``
    (..., n, n), ``d_lam`` (..., n, m)."""
    e: np.ndarray
    d_q: np.ndarray | None
    d_v: np.ndarray | None
    d_a: np.ndarray | None
    d_lam: np.ndarray | None


def equations_of_motion(
    mech: Mechanism,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    lam: ArrayLike,
    Q: ArrayLike | None = None,
    *,
    J: ArrayLike | None = None,
    jacobians: bool = True,
    sparse: bool = False,
) -> EquationsOfMotion:
    """The top row of the KKT system (Eq. 5) as a residual, the multipliers unknown:

        e = M qddot + Phi_q^T lambda - Q_g - Q_f(q, qdot) - Q          (..., n) [N, N m]

    Together with the acceleration constraints Phi_q qddot + dPhi_q/dt qdot = 0 (Eq. 3) it
    determines qddot and lambda.  Unlike qddot(q, qdot) (Eq. 6), whose Jacobians are dense,
    every row of it touches only the coordinates of its own bodies and constraints:
    de/dq = sum_k lambda_k Phi_qq,k - dQ_f/dq, de/dqdot = -dQ_f/dqdot, de/dqddot = M and
    de/dlambda = Phi_q^T.

    Parameters
    ----------
    q, qd, qdd : (..., n)
        Positions [m, rad], velocities and accelerations.
    lam : (..., m)
        Multipliers of every constraint row.
    Q : (..., n) or (n,), optional
        Applied generalized forces besides gravity and friction.
    J : (..., m, n) or StackedSparse, optional
        Phi_q(q) when the caller already has it.
    sparse : bool
        Return the Jacobians as :class:`~mbfg.model.stacked_sparse.StackedSparse` stacks
        (leading axes flattened; q etc. then (T, n)), except the friction terms', which are
        dense.
    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    qdd, lam = np.asarray(qdd, float), np.asarray(lam, float)
    if J is None:  # (the residual alone needs only Phi_q^T lam: sparse)
        J = C.constraint_jacobian(mech, q.reshape(-1, mech.n), sparse=True) \
            if sparse or not jacobians else C.constraint_jacobian(mech, q)
    Qt, dQf_dq, dQf_dqd = _applied(mech, Q, q, qd, jacobians=True) if jacobians else (
        _applied(mech, Q, q, qd), None, None)
    if isinstance(J, StackedSparse):  # (its states: q's, flattened)
        lam_q = C.broadcast_to_shape(lam, q.shape[:-1] + (mech.m,)).reshape(-1, mech.m)
        JTlam = J.rmatvec(lam_q).reshape(q.shape)
    else:
        JTlam = np.einsum("...kn,...k->...n", J, lam)
    e = mech.mass_times(qdd) + JTlam - Qt
    if not jacobians:
        return EquationsOfMotion(e, None, None, None, None)
    lead = e.shape[:-1]
    if sparse:
        if not isinstance(J, StackedSparse):
            raise TypeError("sparse equations of motion need Phi_q as a StackedSparse")
        pattern, values = mech._mass_pattern
        d_q = C.hessian_weighted_sum(mech, q, lam, sparse=True)
        d_v = stacked_sparse.empty(d_q.values.shape[0], (mech.n, mech.n))
        if dQf_dq is not None:  # friction: dense (few mechanisms of many bodies have it)
            n = mech.n
            d_q, d_v = d_q.toarray() - dQf_dq.reshape(-1, n, n), -dQf_dqd.reshape(-1, n, n)
        T = J.values.shape[0]
        return EquationsOfMotion(e, d_q, d_v,
                                 StackedSparse(np.broadcast_to(values, (T, pattern.nnz)), pattern),
                                 J.T)
    M = mech.mass_matrix()
    Jd = J.toarray().reshape(q.shape[:-1] + J.shape[1:]) if isinstance(J, StackedSparse) else J
    d_q = C.hessian_weighted_sum(mech, q, lam)
    d_q = C.broadcast_to_shape(d_q, lead + d_q.shape[-2:])
    d_v = np.broadcast_to(0.0, lead + (mech.n, mech.n))  # (no allocation without friction)
    if dQf_dq is not None:
        d_q = d_q - dQf_dq
        d_v = -dQf_dqd
    return EquationsOfMotion(e, d_q, d_v, np.broadcast_to(M, lead + M.shape),
                             np.broadcast_to(np.swapaxes(Jd, -1, -2), lead + (mech.n, mech.m)))


def multipliers(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike, Q: ArrayLike | None = None
) -> np.ndarray:
    """Multipliers (..., m) that best balance given accelerations: the least-squares solution
    of Phi_q^T lambda = Q_g + Q_f + Q - M qddot on the independent rows (zero on redundant
    ones).  Exact when qddot solves Eq. (5); an initial guess otherwise."""
    q = np.asarray(q, float)
    rows = np.asarray(mech.independent_rows)
    rhs = -equations_of_motion(mech, q, qd, qdd, np.zeros(q.shape[:-1] + (mech.m,)), Q,
                               jacobians=False).e
    if C.sparse_solves(mech):
        # J J^T lam = J rhs as [[I, J^T], [J, 0]] [x; lam] = [rhs; 0], sparse
        n = mech.n
        Jr = C.constraint_jacobian(mech, np.broadcast_to(q, rhs.shape).reshape(-1, n),
                                   sparse=True)
        lam_r = solve_kkt(None, Jr, rhs.reshape(-1, n), 0.0)[:, n:]
        lam_r = lam_r.reshape(rhs.shape[:-1] + (rows.size,))
    else:
        Jr = C.take_rows(C.constraint_jacobian(mech, q), rows, 1)
        Jrt = np.swapaxes(Jr, -1, -2)
        lam_r = np.linalg.solve(Jr @ Jrt,
                                np.einsum("...kn,...n->...k", Jr, rhs)[..., None])[..., 0]
    lam = np.zeros(lam_r.shape[:-1] + (mech.m,))
    lam[..., rows] = lam_r
    return lam


def _reduced(mech, R, S, c, Qt, solve=True):
    """Mbar = R^T M R and zddot = Mbar^-1 R^T (Qt - M S c) (Eq. 15) for a batch, Qt every
    generalized force (:func:`_applied`)."""
    M = mech.mass_matrix()
    Rt = np.swapaxes(R, -1, -2)
    Mbar = Rt @ M @ R
    if not solve:
        return Mbar, None
    Sc = np.einsum("...ij,...j->...i", S, c)
    Qbar = np.einsum("...ij,...j->...i", Rt, Qt - Sc @ M.T)
    return Mbar, np.linalg.solve(Mbar, Qbar[..., None])[..., 0]


def independent_dynamics(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, indices: tuple, Q: ArrayLike | None = None
) -> np.ndarray:
    """zddot of Eq. (15): (R^T M R)^-1 R^T (Q_g + Q - M S c), shape (..., d).

    ``indices`` are the independent coordinates (z = q[indices])."""
    q = np.asarray(q, float)
    qd = np.asarray(qd, float)
    rows, _, c = _rhs_c(mech, q, qd, None)
    R, S = velocity_transform(mech, q, indices, rows)
    return _reduced(mech, R, S, c, _applied(mech, Q, q, qd))[1]


@dataclass(frozen=True)
class IndependentState:
    """States written in independent coordinates z = q[indices] (paper Eqs. 11, 12, 15).

    Shapes for N states, d independent coordinates and m' independent constraint rows:
    q, qd, qdd (N, n) [m, rad and rates]; zdd (N, d); R (N, n, d) and S (N, n, m') the
    velocity transform (Eq. 11); c (N, m') the acceleration right-hand side (Eq. 3);
    Mbar (N, d, d) = R^T M R; rows (m',) or (N, m') the constraint rows used."""
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    zdd: np.ndarray
    R: np.ndarray
    S: np.ndarray
    c: np.ndarray
    Mbar: np.ndarray
    rows: np.ndarray

    def select(self, which: ArrayLike) -> "IndependentState":
        """The states ``which`` (an index array or mask over N)."""
        rows = self.rows if self.rows.ndim == 1 else self.rows[which]
        return IndependentState(self.q[which], self.qd[which], self.qdd[which],
                                self.zdd[which], self.R[which], self.S[which], self.c[which],
                                self.Mbar[which], rows)


def independent_state(
    mech: Mechanism,
    q: ArrayLike,
    indices: ArrayLike,
    zd: ArrayLike,
    Q: ArrayLike | None = None,
    zdd: ArrayLike | None = None,
) -> IndependentState:
    """Velocities and accelerations of assembled configurations from independent rates.

    qdot = R zdot (Eq. 11), zddot from the dynamics (Eq. 15) with the applied forces ``Q``
    (gravity and the mechanism's friction always added) unless ``zdd`` is given, and qddot =
    S c + R zddot (Eq. 12).

    Parameters
    ----------
    q : (N, n) assembled configurations (:func:`mbfg.model.kinematics.solve_positions_batch`)
    indices : (d,) independent coordinates
    zd : (N, d) their rates
    Q : (N, n) or (n,), optional, applied generalized forces [N, N m]
    zdd : (N, d), optional, imposed independent accelerations
    """
    q = np.asarray(q, float)
    idx = np.asarray(indices, int)
    Jall = C.constraint_jacobian(mech, q)
    rows = C.independent_rows(mech, q, Jall)
    R, S = velocity_transform(mech, q, idx, rows, J=Jall)
    zd = np.asarray(zd, float)
    qd = np.einsum("...ij,...j->...i", R, zd)
    c = -C.take_rows(C.acceleration_bias(mech, q, qd), rows)
    Qt = _applied(mech, Q, q, qd) if zdd is None else None
    Mbar, zdd_model = _reduced(mech, R, S, c, Qt, solve=zdd is None)
    zdd = zdd_model if zdd is None else np.broadcast_to(np.asarray(zdd, float), zd.shape)
    qdd = np.einsum("...ij,...j->...i", S, c) + np.einsum("...ij,...j->...i", R, zdd)
    return IndependentState(q, qd, qdd, zdd, R, S, c, Mbar, rows)


@dataclass(frozen=True)
class ManifoldJacobians:
    """Total derivatives along the constraint manifold at one state (shapes (n, d)):
    dqdot/dz (zdot held), and dqddot/dz, dqddot/dzdot with zddot from the dynamics."""
    dqd_dz: np.ndarray
    dqdd_dz: np.ndarray | None
    dqdd_dzd: np.ndarray | None


def manifold_jacobians(
    mech: Mechanism,
    state: IndependentState,
    Q: ArrayLike | None = None,
    k: int = 0,
    *,
    accelerations: bool = True,
) -> ManifoldJacobians:
    """Derivatives of state ``k`` of ``state`` with respect to (z, zdot).

    dqdot/dz from :func:`mbfg.model.kinematics.velocity_sensitivity`; with
    ``accelerations``, dqddot/dz = D_q R + D_qd dqdot/dz and dqddot/dzdot = D_qd R, D the exact
    dynamics Jacobians (Eqs. 27-29, :func:`forward_dynamics_jacobians`) at the applied forces
    ``Q`` (n,).  The rows ``indices`` of the acceleration ones are dzddot/dz, dzddot/dzdot."""
    rows = state.rows if state.rows.ndim == 1 else state.rows[k]
    q, qd, R = state.q[k], state.qd[k], state.R[k]
    dqd_dz = velocity_sensitivity(mech, q, qd, R, state.S[k], rows)
    if not accelerations:
        return ManifoldJacobians(dqd_dz, None, None)
    dj = forward_dynamics_jacobians(mech, q, qd, Q)
    return ManifoldJacobians(dqd_dz, dj.d_q @ R + dj.d_qd @ dqd_dz, dj.d_qd @ R)


def independent_dynamics_jacobians(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, indices: tuple, Q: ArrayLike | None = None
) -> DynamicsJacobians:
    """zddot and its exact Jacobians w.r.t. q, qdot, Q (Eqs. 27d, 29d-g): B times the
    dependent-coordinate ones.  Returned arrays have d rows instead of n."""
    dep = forward_dynamics_jacobians(mech, q, qd, Q)
    idx = np.asarray(indices, int)
    return DynamicsJacobians(qdd=dep.qdd[..., idx], lam=dep.lam, d_q=dep.d_q[..., idx, :],
                             d_qd=dep.d_qd[..., idx, :], d_Q=dep.d_Q[..., idx, :])


def inverse_dynamics(
    mech: Mechanism,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    actuated: ArrayLike,
) -> np.ndarray:
    """Applied forces on the ``actuated`` coordinates that produce ``qdd`` (least squares).

    Solves M qddot + Phi_q^T lambda = Q_g + Q_f + E Q_a for (lambda, Q_a), E selecting the actuated
    coordinates, with a minimum-norm least-squares solve (redundant constraints make lambda
    non-unique).  Vectorized over leading axes.  Returns the full (..., n) applied-force
    vector (zero off the actuated ones).  Used for initial guesses and cross-checks; the
    factor graphs solve the same problem."""
    idx = np.asarray(actuated, int)
    q = np.asarray(q, float)
    J = C.constraint_jacobian(mech, q)
    E = np.broadcast_to(selection_matrix(mech.n, idx).T, J.shape[:-2] + (mech.n, idx.size))
    A = np.concatenate([np.swapaxes(J, -1, -2), -E], axis=-1)
    qd = np.asarray(qd, float)
    b = _applied(mech, None, q, qd) - np.asarray(qdd, float) @ mech.mass_matrix().T
    x = np.einsum("...ij,...j->...i", np.linalg.pinv(A), b)
    Q = np.zeros(q.shape[:-1] + (mech.n,))
    Q[..., idx] = x[..., J.shape[-2]:]
    return Q


__all__ = [
    "Baumgarte", "DynamicsJacobians", "EquationsOfMotion", "equations_of_motion", "multipliers",
    "forward_dynamics", "forward_dynamics_jacobians", "StateDynamics", "jerk_along",
    "JerkJacobians", "jerk_jacobians",
    "independent_dynamics", "independent_dynamics_jacobians", "inverse_dynamics",
    "IndependentState", "independent_state", "ManifoldJacobians", "manifold_jacobians"
]
