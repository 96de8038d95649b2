"""Constraint kernels: Phi and its derivatives, exact and analytic (paper Eqs. 1-3, 24-25,
31-32, 40 and Appendix III).

Every function is pure, takes the immutable :class:`~mbfg.model.mechanism.Mechanism` and numpy
arrays, and is vectorized over leading axes: ``q`` of shape ``(n,)`` gives results for one
state, ``(T, n)`` gives them for T states at once (the batch drivers use this).

Notation (time-independent constraints, so Phi_t = 0):

===========================  =====================================  ==================
function                     quantity                               shape
===========================  =====================================  ==================
position_constraints         Phi(q)                                 (..., m)
constraint_jacobian          Phi_q(q)                               (..., m, n)
constraint_hessian           Phi_qq(q)  (row k = Hessian of Phi_k)  (..., m, n, n)
hessian_times                Phi_qq(q) v   (= d(Phi_q v)/dq)        (..., m, n)
hessian_weighted_sum         sum_k lam_k Phi_qq,k  (= d(Phi_q^T lam)/dq)  (..., n, n)
constraint_jacobian_dot      dPhi_q/dt = Phi_qq qdot  (Eq. 40a)     (..., m, n)
velocity_constraints         Phi_q qdot  (Eq. 25a)                  (..., m)
acceleration_bias            dPhi_q/dt qdot   (c = -this, Eq. 3)    (..., m)
acceleration_bias_jacobian   d(dPhi_q/dt qdot)/dq                   (..., m, n)
acceleration_constraints     dPhi_q/dt qdot + Phi_q qddot           (..., m)
===========================  =====================================  ==================

Each row is evaluated on the few coordinates of its own points (the per-row local tables of
:class:`~mbfg.model.mechanism.Mechanism`), so apart from filling the dense outputs the cost
and memory are linear in the number of rows.  With ``sparse=True`` the Jacobian kernels return
only those values, as a :class:`~mbfg.model.stacked_sparse.StackedSparse` (the batch drivers'
path, linear in the number of bodies).

Useful identities (all exact here): d(Phi_q qdot)/dq = Phi_qq qdot = dPhi_q/dt;
d(dPhi_q/dt qdot)/dqdot = 2 dPhi_q/dt; d(Phi_q qddot)/dq = Phi_qq qddot.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.model.kkt import uses_sparse
from mbfg.model.stacked_sparse import StackedSparse, times

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism


def _flat(mech, x):
    x = np.asarray(x, dtype=float)
    return x.reshape(-1, mech.n), x.shape[:-1]


def broadcast_to_shape(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``np.broadcast_to(a, shape)``, read only, but ``a`` itself when it has that shape
    already (the common case, without broadcast_to's per-call overhead in the solvers' loops).
    Callers must not write into the result."""
    return a if a.shape == tuple(shape) else np.broadcast_to(a, shape)


def _states(mech, q, *xs):
    """q and the state arrays xs, each (..., n), broadcast over their leading axes and
    flattened: (q2 (T, n), x2 (T, n) for each x, lead)."""
    arrays = [np.asarray(a, dtype=float) for a in (q, *xs)]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return (*(broadcast_to_shape(a, shape).reshape(-1, mech.n) for a in arrays), shape[:-1])


def given_per_state(J: ArrayLike | StackedSparse | None, lead: tuple
                    ) -> ArrayLike | StackedSparse | None:
    """A caller's per-state matrix ``J`` (Phi_q or dPhi_q/dt) if it holds one matrix per state
    of ``lead`` (dense (*lead, r, c) or a StackedSparse of prod(lead) states), else None, so
    that the kernel recomputes it: the states were broadcast beyond those it was computed for
    (one q with many velocities)."""
    if J is None:
        return None
    T = int(np.prod(lead, dtype=int))
    if isinstance(J, StackedSparse):
        return J if J.values.shape[0] == T else None
    return J if np.shape(J)[:-2] == tuple(lead) else None


def _local(coords, x2):
    """x2 (T, n) at a row table's coordinates (r, k): (T, r, k).  Padded slots (-1) read the
    last coordinate, which the zero coefficients of those slots cancel."""
    return x2[:, coords]


def _quad_Hu(mech, u):
    """H_k u_k for local quadratic-row coordinates u (T, m_q, k_q): (T, m_q, k_q)."""
    return np.einsum("kij,tkj->tki", mech.quad_H, u)


def _angle_terms(mech, q2):
    """Per-angle quantities for T states, each (T, a): d = points[0] -> points[1] (dx, dy) [m]
    and sin, cos of the angle coordinate."""
    d = np.einsum("aij,taj->tai", mech.angle_D, _local(mech.angle_d_coords, q2)) + mech.angle_d0
    th = q2[:, mech.angle_coords]
    return d[..., 0], d[..., 1], np.sin(th), np.cos(th)


def angle_orientation(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """Cosine between each angle coordinate's body vector d (its two points) and the
    direction (cos theta, sin theta), shape (..., a).  The angle constraint
    d_x sin theta - d_y cos theta = 0 (Eq. 24a's angle row) holds for d along theta (+1) and
    against it (-1); only the orientation of the mechanism's own assembly ``mech.q0`` is the
    body's angle, the other is a spurious root a Newton solve can reach from far away."""
    q2, lead = _flat(mech, q)
    dx, dy, s, c = _angle_terms(mech, q2)
    with np.errstate(all="ignore"):
        out = (dx * c + dy * s) / np.hypot(dx, dy)
    return out.reshape(lead + (mech.angle_coords.size,))


def _angle_rows(mech):
    """Row index of every angle constraint, (a,)."""
    return mech.m_quadratic + np.arange(mech.angle_coords.size)


def _angle_hessian_slots(mech):
    """``(mask, rows, cols, th)``: the angle rows' point slots as in ``mech._angle_slots`` and
    the angle coordinate of each slot's row; Hessian entries (cols, th) and (th, cols)."""
    mask, rows, cols = mech._angle_slots
    return mask, rows, cols, mech.angle_coords[rows - mech.m_quadratic]


def _shared_terms(mech, q2):
    """The terms Phi and Phi_q of T states q2 (T, n) share: (u, H u) of the quadratic rows
    (:func:`_local`, :func:`_quad_Hu`; None without such rows) and the angle rows'
    :func:`_angle_terms` (None without angles)."""
    quad = None
    if mech.m_quadratic:
        u = _local(mech.quad_coords, q2)
        quad = (u, _quad_Hu(mech, u))
    return quad, (_angle_terms(mech, q2) if mech.angle_coords.size else None)


def _position_values(mech, q2, terms):
    """Phi of T states (T, m) from their :func:`_shared_terms`."""
    quad, angles = terms
    out = np.empty((q2.shape[0], mech.m))
    mq = mech.m_quadratic
    if quad is not None:
        u, Hu = quad
        out[:, :mq] = np.einsum("tki,tki->tk", 0.5 * Hu + mech.quad_g, u) + mech.quad_c
    if angles is not None:
        dx, dy, s, c = angles
        out[:, mq:] = dx * s - dy * c
    return out


def position_constraints(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """Phi(q), Eq. (1) / (24a).  Shape (..., m)."""
    q2, lead = _flat(mech, q)
    return _position_values(mech, q2, _shared_terms(mech, q2)).reshape(lead + (mech.m,))


def position_constraints_and_jacobian(mech: Mechanism, q: ArrayLike) -> tuple:
    """``(Phi, Phi_q)`` of T states q (T, n): Phi (T, m) as :func:`position_constraints`
    and Phi_q as :func:`constraint_jacobian` with ``sparse=True``, the terms they share
    computed once (the position solver's Newton iteration, Eq. 1)."""
    q2, _ = _flat(mech, q)
    terms = _shared_terms(mech, q2)
    return (_position_values(mech, q2, terms),
            StackedSparse(_jacobian_values(mech, q2, terms=terms), mech._jacobian_pattern))


def _on_pattern(mech, values, lead, pattern, sparse):
    """A kernel's values (T, nnz) on ``pattern``: a StackedSparse (``sparse``, leading axes
    flattened to T) or the dense array (lead + pattern shape)."""
    if sparse:
        return StackedSparse(values, pattern)
    r, c = pattern.shape
    out = np.zeros((values.shape[0], r * c))
    out[:, pattern.flat] = values  # (the kernels' patterns repeat no position)
    return out.reshape(lead + pattern.shape)


def _jacobian_values(mech, q2, angles=None, terms=None):
    """Phi_q of T states on ``mech._jacobian_pattern``: (T, nnz); ``angles`` their
    :func:`_angle_terms` or ``terms`` their :func:`_shared_terms` if already computed."""
    quad, angles = (None, angles) if terms is None else terms
    parts = []
    if mech.m_quadratic:
        mask = mech._quad_slots[0]
        Hu = _quad_Hu(mech, _local(mech.quad_coords, q2)) if quad is None else quad[1]
        parts.append((Hu + mech.quad_g)[:, mask])
    if mech.angle_coords.size:
        dx, dy, s, c = _angle_terms(mech, q2) if angles is None else angles
        D = mech.angle_D
        parts.append((D[:, 0] * s[..., None] - D[:, 1] * c[..., None])[:, mech._angle_slots[0]])
        parts.append(dx * c + dy * s)
    return np.concatenate(parts, axis=1) if parts else np.zeros((q2.shape[0], 0))


def constraint_jacobian(
    mech: Mechanism, q: ArrayLike, sparse: bool = False
) -> np.ndarray | StackedSparse:
    """Phi_q(q), Eq. (24d).  Shape (..., m, n), or with ``sparse`` a
    :class:`~mbfg.model.stacked_sparse.StackedSparse` of T = prod(...) matrices."""
    q2, lead = _flat(mech, q)
    return _on_pattern(mech, _jacobian_values(mech, q2), lead, mech._jacobian_pattern, sparse)


def _angle_w(mech, s, c):
    """w = d(dPhi/dtheta)/d(point coords) = D_x cos + D_y sin on the angle rows' local point
    coordinates, shape (T, a, k_a)."""
    D = mech.angle_D
    return D[:, 0] * c[..., None] + D[:, 1] * s[..., None]


def _hessian_times_values(mech, q2, v2, angles=None):
    """Phi_qq(q) v of T states on ``mech._jacobian_pattern``: (T, nnz)."""
    parts = []
    if mech.m_quadratic:
        parts.append(_quad_Hu(mech, _local(mech.quad_coords, v2))[:, mech._quad_slots[0]])
    if mech.angle_coords.size:
        dx, dy, s, c = _angle_terms(mech, q2) if angles is None else angles
        w = _angle_w(mech, s, c)
        phi = dx * s - dy * c
        vth = v2[:, mech.angle_coords]
        wv = np.einsum("tai,tai->ta", w, _local(mech.angle_d_coords, v2))
        parts.append((w * vth[..., None])[:, mech._angle_slots[0]])
        parts.append(wv - phi * vth)
    return np.concatenate(parts, axis=1) if parts else np.zeros((q2.shape[0], 0))


def hessian_times(
    mech: Mechanism, q: ArrayLike, v: ArrayLike, sparse: bool = False
) -> np.ndarray | StackedSparse:
    """Phi_qq(q) v: row k is (Hessian of Phi_k) @ v.  Shape (..., m, n) (``sparse``: as in
    :func:`constraint_jacobian`).

    Equals d(Phi_q v)/dq for a constant v; with v = qdot it is dPhi_q/dt (Eq. 40a)."""
    q2, v2, lead = _states(mech, q, v)
    return _on_pattern(mech, _hessian_times_values(mech, q2, v2), lead, mech._jacobian_pattern,
                       sparse)


def constraint_jacobian_dot(mech: Mechanism, q: ArrayLike, qd: ArrayLike,
                            sparse: bool = False) -> np.ndarray | StackedSparse:
    """dPhi_q/dt = Phi_qq qdot (Eq. 40a).  Shape (..., m, n)."""
    return hessian_times(mech, q, qd, sparse)


def constraint_hessian(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """Full Hessian tensor Phi_qq(q), shape (..., m, n, n) (mainly for tests and analysis; the
    other kernels never form it)."""
    q2, lead = _flat(mech, q)
    out = np.zeros((q2.shape[0], mech.m, mech.n, mech.n))
    mask, rows, ci, cj = mech._quad_hessian_slots
    out[:, rows, ci, cj] = mech.quad_H[mask]
    if mech.angle_coords.size:
        dx, dy, s, c = _angle_terms(mech, q2)
        w = _angle_w(mech, s, c)
        mask, rows, cols, th = _angle_hessian_slots(mech)
        out[:, rows, cols, th] = w[:, mask]
        out[:, rows, th, cols] = w[:, mask]
        out[:, _angle_rows(mech), mech.angle_coords, mech.angle_coords] = -(dx * s - dy * c)
    return out.reshape(lead + (mech.m, mech.n, mech.n))


def hessian_weighted_sum(mech: Mechanism, q: ArrayLike, lam: ArrayLike,
                         sparse: bool = False) -> np.ndarray | StackedSparse:
    """sum_k lam_k Phi_qq,k(q): the constraint-force term d(Phi_q^T lam)/dq, shape (..., n, n)
    (``sparse``: a :class:`~mbfg.model.stacked_sparse.StackedSparse` on
    ``mech._hessian_sum_pattern``).

    Never forms the (m, n, n) Hessian tensor: the weighted entries of the quadratic rows'
    constant local Hessians are summed cell by cell, and the angle rows' rank-2 Hessians (whose
    cells all involve their own angle coordinate, so they are distinct from each other and
    from the quadratic rows' cells) are written in place."""
    q, lam = np.asarray(q, dtype=float), np.asarray(lam, dtype=float)
    lead = np.broadcast_shapes(q.shape[:-1], lam.shape[:-1])
    q2 = broadcast_to_shape(q, lead + (mech.n,)).reshape(-1, mech.n)
    lam2 = broadcast_to_shape(lam, lead + (mech.m,)).reshape(-1, mech.m)
    cells, starts, rows, h = mech._quad_hessian_sum
    parts = [np.add.reduceat(lam2[:, rows] * h, starts, axis=1) if cells.size
             else np.zeros((q2.shape[0], 0))]
    if mech.angle_coords.size:
        dx, dy, s, c = _angle_terms(mech, q2)
        lam_a = lam2[:, mech.m_quadratic:]
        w = (_angle_w(mech, s, c) * lam_a[..., None])[:, mech._angle_slots[0]]
        parts += [w, w, -(dx * s - dy * c) * lam_a]
    return _on_pattern(mech, np.concatenate(parts, axis=1), lead, mech._hessian_sum_pattern,
                       sparse)


def sparse_kernels(mech: Mechanism) -> bool:
    """Whether the factor graphs and the products below use the kernels' StackedSparse form
    for this mechanism (:data:`SPARSE_KERNELS_MIN`)."""
    return mech.n + mech.m >= SPARSE_KERNELS_MIN


def velocity_constraints(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> np.ndarray:
    """Phi_q(q) qdot, Eq. (25a).  Shape (..., m)."""
    q2, qd2, lead = _states(mech, q, qd)
    J = constraint_jacobian(mech, q2, sparse=sparse_kernels(mech))
    return times(J, qd2).reshape(lead + (mech.m,))


def acceleration_bias(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> np.ndarray:
    """dPhi_q/dt qdot = qdot^T Phi_qq qdot; the acceleration right-hand side is c = -this (Eq. 3)."""
    q2, qd2, lead = _states(mech, q, qd)
    Jdot = hessian_times(mech, q2, qd2, sparse=sparse_kernels(mech))
    return times(Jdot, qd2).reshape(lead + (mech.m,))


def _bias_jacobian_values(mech, q2, qd2, J, angles=None):
    """d(dPhi_q/dt qdot)/dq of T states on ``mech._jacobian_pattern``: (T, nnz); ``J``
    Phi_q of the states (dense or StackedSparse) or None."""
    T = q2.shape[0]
    nq = mech._quad_slots[1].size
    parts = [np.zeros((T, nq))]
    if mech.angle_coords.size:
        angles = _angle_terms(mech, q2) if angles is None else angles
        _, _, s, c = angles
        dd = np.einsum("aij,taj->tai", mech.angle_D, _local(mech.angle_d_coords, qd2))
        thd = qd2[:, mech.angle_coords]
        pattern = mech._jacobian_pattern
        if isinstance(J, StackedSparse) and J.pattern is pattern:
            Ja = J.values[:, nq:]
        elif J is not None:  # dense (..., m, n): its entries on the pattern
            Ja = np.asarray(J).reshape(-1, mech.m, mech.n)[:, pattern.rows[nq:],
                                                           pattern.cols[nq:]]
        else:
            Ja = _jacobian_values(mech, q2, angles)[:, nq:]
        na = mech._angle_slots[1].size
        thd2 = (thd ** 2)[:, mech._angle_slots[1] - mech.m_quadratic]
        parts.append(-thd2 * Ja[:, :na])
        parts.append(-(thd ** 2) * Ja[:, na:] + 2.0 * thd * (-s * dd[..., 0] + c * dd[..., 1]))
    return np.concatenate(parts, axis=1)


def acceleration_bias_jacobian(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, J: ArrayLike | None = None,
    sparse: bool = False
) -> np.ndarray | StackedSparse:
    """d(dPhi_q/dt qdot)/dq, shape (..., m, n) (``sparse``: as in
    :func:`constraint_jacobian`).  Zero for the quadratic rows.

    ``J``: Phi_q(q) of the same states (dense, or a StackedSparse), if already computed."""
    q2, qd2, lead = _states(mech, q, qd)
    return _on_pattern(mech, _bias_jacobian_values(mech, q2, qd2, given_per_state(J, lead)),
                       lead, mech._jacobian_pattern, sparse)


def acceleration_constraints_jacobian(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike, J: ArrayLike | None = None,
    sparse: bool = False
) -> np.ndarray | StackedSparse:
    """d(dPhi_q/dt qdot + Phi_q qddot)/dq = :func:`acceleration_bias_jacobian` +
    :func:`hessian_times` (q, qddot), shape (..., m, n), with the angle terms evaluated once
    (the same sums).  ``J`` and ``sparse`` as in :func:`acceleration_bias_jacobian`."""
    q2, qd2, qdd2, lead = _states(mech, q, qd, qdd)
    angles = _angle_terms(mech, q2) if mech.angle_coords.size else None
    values = (_bias_jacobian_values(mech, q2, qd2, given_per_state(J, lead), angles)
              + _hessian_times_values(mech, q2, qdd2, angles))
    return _on_pattern(mech, values, lead, mech._jacobian_pattern, sparse)


def acceleration_constraints(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike
) -> np.ndarray:
    """dPhi_q/dt qdot + Phi_q qddot (the acceleration-level constraint, Eq. 32a top)."""
    return acceleration_bias(mech, q, qd) + velocity_constraints(mech, q, qdd)


SPARSE_KERNELS_MIN = 64
"""Mechanisms with n + m at least this evaluate the factor graphs' constraint Jacobians as
StackedSparse (values on the rows' own coordinates), and :func:`velocity_constraints` and
:func:`acceleration_bias` as sparse products; smaller ones densely, which takes fewer array
operations there (a performance threshold: a 20-link chain, n + m = 60, is as fast either
way)."""

DENSE_STATE_ENTRIES = 4096
"""Mechanisms without angle rows whose constraint Hessian has at most this many entries
(m n^2) evaluate :meth:`StateConstraints.jacobian_bias` from its dense form (a performance
threshold: fewer array operations per call; the per-row tables otherwise)."""


class StateConstraints:
    """Phi, Phi_q and the acceleration bias of one state at a time, fused: the kernels above
    for a single q (n,) with every index array precomputed, so that an explicit time step
    costs a few small array operations rather than the batch kernels' fixed overhead per
    call.  The same values as :func:`position_constraints`, :func:`constraint_jacobian` and
    :func:`acceleration_bias` to rounding (a test checks it).  ``jacobian`` and
    ``evaluate`` return one internal (m, n) buffer, overwritten by the next call."""

    def __init__(self, mech: Mechanism):
        self.mech = mech
        n, m = mech.n, mech.m
        self.J = np.zeros((m, n))
        self.mq, self.na = mech.m_quadratic, mech.angle_coords.size
        if self.mq:
            mask, rows, cols = mech._quad_slots
            self._qc, self._H, self._g, self._c = (mech.quad_coords, mech.quad_H, mech.quad_g,
                                                   mech.quad_c)
            self._qsel = np.flatnonzero(mask.ravel())
            self._qJ = rows * n + cols
            self._qc2 = np.stack([self._qc % n, self._qc % n + n], axis=2)
        # without angle rows Phi_q is affine in q: for small mechanisms its dense form
        # (m n, n) is fewer operations than the per-row tables (its size is quadratic in n)
        self._dense = None
        if self.na == 0 and m * n * n <= DENSE_STATE_ENTRIES:
            Hd = np.zeros((m, n, n))
            mask, rows, ci, cj = mech._quad_hessian_slots
            np.add.at(Hd, (rows, ci, cj), mech.quad_H[mask])
            gd = np.zeros((m, n))
            gmask, grows, gcols = mech._quad_slots
            np.add.at(gd, (grows, gcols), mech.quad_g[gmask])
            self._dense = (Hd.reshape(m * n, n), gd.reshape(m * n))
        if self.na:
            mask, rows, cols = mech._angle_slots
            self._th, self._adc = mech.angle_coords, mech.angle_d_coords
            self._aD, self._ad0 = mech.angle_D, mech.angle_d0
            self._asel = np.flatnonzero(mask.ravel())
            self._aJ = rows * n + cols
            self._tJ = (self.mq + np.arange(self.na)) * n + self._th

    def _angles(self, q):
        th = q[self._th]
        d = (self._aD @ q[self._adc][:, :, None])[:, :, 0] + self._ad0
        return d, np.sin(th), np.cos(th)

    def evaluate(self, q: np.ndarray, phi: bool = True) -> tuple:
        """(Phi (m,) or None, Phi_q (m, n)) at q (n,)."""
        J, out = self.J, (np.empty(self.J.shape[0]) if phi else None)
        mq = self.mq
        if mq:
            u = q[self._qc]
            Hu = (self._H @ u[:, :, None])[:, :, 0]
            grad = Hu + self._g
            J.put(self._qJ, grad.ravel().take(self._qsel))
            if phi:
                out[:mq] = np.einsum("ki,ki->k", 0.5 * Hu + self._g, u) + self._c
        if self.na:
            d, s, c = self._angles(q)
            D = self._aD
            J.put(self._aJ, (D[:, 0] * s[:, None] - D[:, 1] * c[:, None]).ravel()
                  .take(self._asel))
            J.put(self._tJ, d[:, 0] * c + d[:, 1] * s)
            if phi:
                out[mq:] = d[:, 0] * s - d[:, 1] * c
        return out, J

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """Phi_q (m, n) at q (n,)."""
        return self.evaluate(q, phi=False)[1]

    def jacobian_bias(self, q: np.ndarray, qd: np.ndarray) -> tuple:
        """(Phi_q (m, n), dPhi_q/dt qdot (m,)) at (q, qdot): :meth:`jacobian` and
        :meth:`bias` sharing their gathers and products."""
        if self.na:
            return self.jacobian(q), self.bias(q, qd)
        if self._dense is not None:  # small mechanisms: Phi_q = H q + g with H (m n, n)
            Hd, gd = self._dense
            m, n = self.J.shape
            J = (Hd @ q + gd).reshape(m, n)
            return J, (Hd @ qd).reshape(m, n) @ qd
        U = np.concatenate((q, qd))[self._qc2]  # (m_q, k_q, 2): q and qdot on each row
        HU = self._H @ U
        self.J.put(self._qJ, (HU[:, :, 0] + self._g).ravel().take(self._qsel))
        return self.J, np.einsum("ki,ki->k", HU[:, :, 1], U[:, :, 1])

    def bias(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """dPhi_q/dt qdot = qdot^T Phi_qq qdot (m,) at (q, qdot) (c = -this, Eq. 3)."""
        out = np.empty(self.J.shape[0])
        mq = self.mq
        if mq:
            ud = qd[self._qc]
            out[:mq] = np.einsum("ki,ki->k", (self._H @ ud[:, :, None])[:, :, 0], ud)
        if self.na:
            d, s, c = self._angles(q)
            D = self._aD
            vth = qd[self._th]
            w = D[:, 0] * c[:, None] + D[:, 1] * s[:, None]
            wv = np.einsum("ai,ai->a", w, qd[self._adc])
            out[mq:] = 2.0 * vth * wv - (d[:, 0] * s - d[:, 1] * c) * vth * vth
        return out


# ---------------------------------------------------------------------------------------------
# Redundant constraints: a per-state choice of independent rows
# ---------------------------------------------------------------------------------------------

ROW_SWITCH_RATIO = 0.1
"""The default rows (``mech.independent_rows``, chosen at q0) are kept while the smallest
singular value of their Jacobian is at least this fraction of the r-th singular value of the
full Phi_q; otherwise the rows are re-chosen by pivoted QR at that state."""


def independent_rows(mech: Mechanism, q: ArrayLike, J: ArrayLike | None = None) -> np.ndarray:
    """Indices of r independent rows of Phi_q: (r,) when one set serves every state of ``q``
    (the usual case), else per state, shape ``q.shape[:-1] + (r,)``.

    For mechanisms without redundant constraints this is every row.  With redundant
    constraints (e.g. the pick-and-place robot, Phi_q 21x22 of rank 20), which rows are
    redundant depends on the configuration: a subset independent at q0 can become singular
    elsewhere.  The q0 subset is used where it is well conditioned and re-chosen by QR with
    column pivoting of Phi_q^T where it is not.  On the constraint manifold every choice gives
    the same accelerations and velocities; the choice only matters for conditioning.
    """
    import scipy.linalg

    rows0 = np.asarray(mech.independent_rows)
    r = rows0.size
    if r == mech.m:
        return rows0
    q = np.asarray(q, float)
    J = constraint_jacobian(mech, q) if J is None else J
    Jf = J.reshape((-1,) + J.shape[-2:])
    s_full = np.linalg.svd(Jf, compute_uv=False)[:, r - 1]
    s_sub = np.linalg.svd(Jf[:, rows0, :], compute_uv=False)[:, -1]
    bad = np.flatnonzero(s_sub < ROW_SWITCH_RATIO * s_full)
    if bad.size == 0:
        return rows0
    flat = np.broadcast_to(rows0, (Jf.shape[0], r)).copy()
    for k in bad:
        _, _, piv = scipy.linalg.qr(Jf[k].T, mode="economic", pivoting=True)
        flat[k] = np.sort(piv[:r])
    return flat.reshape(q.shape[:-1] + (r,))


def sparse_solves(mech: Mechanism) -> bool:
    """Whether the saddle-point solves of :mod:`mbfg.model.kkt` take Phi_q as a
    StackedSparse: large enough for them to be sparse (:func:`mbfg.model.kkt.uses_sparse`),
    and no redundant rows (whose choice per state needs the dense Phi_q)."""
    return mech.independent_rows.size == mech.m and uses_sparse(mech.n, mech.m)


def solve_jacobian(mech: Mechanism, q: ArrayLike, Jall: ArrayLike | None = None) -> tuple:
    """``(rows, J)``: the independent rows (:func:`independent_rows`) and their Jacobian, for
    the saddle-point solves of :mod:`mbfg.model.kkt`.  J is a StackedSparse of the flattened
    states where :func:`sparse_solves`, so that nothing of size (m, n) is formed; otherwise
    the dense (..., r, n).  ``Jall``: Phi_q(q) of every row, dense, if already computed."""
    if Jall is None and sparse_solves(mech):
        return np.asarray(mech.independent_rows), constraint_jacobian(mech, q, sparse=True)
    Jall = constraint_jacobian(mech, q) if Jall is None else Jall
    rows = independent_rows(mech, q, Jall)
    return rows, take_rows(Jall, rows, 1)


def take_rows(a: ArrayLike, rows: ArrayLike, trailing: int = 0) -> np.ndarray:
    """Select constraint rows ``rows`` (..., r) from ``a`` of shape (..., m, *trailing dims)."""
    a = np.asarray(a)
    if rows.shape[-1] == a.shape[-1 - trailing]:  # every row (rows are sorted)
        return a
    if rows.ndim == 1:  # the same rows for every state
        return np.take(a, rows, axis=-1 - trailing)
    idx = rows.reshape(rows.shape + (1,) * trailing)
    shape = np.broadcast_shapes(a.shape[:-1 - trailing], rows.shape[:-1])
    a = np.broadcast_to(a, shape + a.shape[-1 - trailing:])
    idx = np.broadcast_to(idx, shape + idx.shape[-1 - trailing:])
    return np.take_along_axis(a, idx, axis=-1 - trailing)


__all__ = [
    "position_constraints", "position_constraints_and_jacobian", "constraint_jacobian",
    "hessian_times", "constraint_jacobian_dot",
    "constraint_hessian", "hessian_weighted_sum", "velocity_constraints", "acceleration_bias",
    "acceleration_bias_jacobian", "acceleration_constraints", "independent_rows", "take_rows",
    "solve_jacobian", "acceleration_constraints_jacobian", "sparse_kernels", "sparse_solves",
    "given_per_state", "angle_orientation",
    "StateConstraints"
]
