"""Coordinate partitioning: which ``dof`` coordinates describe the motion best at a state.

A set of coordinates ``indices`` can serve as independent coordinates at q when [Phi_q; B] is
nonsingular (B selects them, Eq. 8-11).  Its quality is the smallest singular value of the rows
``indices`` of an orthonormal basis N of the null space of Phi_q (1 = ideal, 0 = singular);
the best set comes from QR with column pivoting of N^T (Wehage & Haug's partitioning).
Coordinates are compared in their own scales (:mod:`mbfg.model.scales`), so the choice does
not depend on the units of lengths versus angles.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg

from mbfg.model import constraints as C
from mbfg.model.stacked_sparse import StackedSparse

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism


def null_space_bases(mech: Mechanism, q: ArrayLike, scale: np.ndarray) -> np.ndarray:
    """Orthonormal bases (T, n, d) of the null space of Phi_q diag(scale) at the states q
    (T, n), on the independent constraint rows: the tangent directions of the constraint
    manifold in the coordinates' scales (dense SVD)."""
    q = np.asarray(q, float)
    Jall = C.constraint_jacobian(mech, q)
    J = C.take_rows(Jall, C.independent_rows(mech, q, Jall), 1) * np.asarray(scale, float)
    _, _, Vt = np.linalg.svd(J, full_matrices=True)
    r = J.shape[-2]
    return np.swapaxes(Vt[..., r:, :], -1, -2)


SPARSE_QUALITY_MIN_COORDINATES = 64
"""Mechanisms with at least this many coordinates evaluate :func:`coordinate_quality` by
sparse LU (:func:`_sparse_quality`, linear in the number of bodies) instead of the dense SVD
of the null space (cubic); both give the same value."""


def coordinate_quality(
    mech: Mechanism, q: ArrayLike, indices: tuple, scale: np.ndarray | None = None
) -> np.ndarray:
    """Quality in [0, 1] of ``indices`` as independent coordinates at q (..., n); shape (...).

    ``scale`` (n,): coordinate scales (default 1)."""
    q = np.asarray(q, float)
    scale = np.ones(mech.n) if scale is None else np.asarray(scale, float)
    if mech.n >= SPARSE_QUALITY_MIN_COORDINATES and len(indices):
        flat = q.reshape(-1, mech.n)
        return np.array([_sparse_quality(mech, x, indices, scale)
                         for x in flat]).reshape(q.shape[:-1])
    N = null_space_bases(mech, q.reshape(-1, mech.n), scale)[:, list(indices), :]
    return _smallest_singular(N).reshape(q.shape[:-1])


def _sparse_quality(mech, q, indices, scale, rtol=1e-6, max_iterations=200) -> float:
    """The quality of :func:`coordinate_quality` at one state without a null-space basis.

    With J = Phi_q diag(scale) on the independent rows split into the dependent columns J_d
    (square) and the independent ones J_i, the null space is spanned by [X; I] with
    X = -J_d^-1 J_i, so an orthonormal basis restricted to the independent rows is
    (I + X^T X)^(-1/2) and its smallest singular value is 1 / sqrt(1 + sigma_max(X)^2).
    sigma_max(X) comes from power iteration on X^T X with one sparse LU of J_d (relative
    accuracy ``rtol``); a singular J_d has quality 0."""
    import scipy.sparse
    import scipy.sparse.linalg

    _, J = C.solve_jacobian(mech, q[None])
    if isinstance(J, StackedSparse):
        J = J.matrix(0, scale)
    else:
        J = scipy.sparse.csc_matrix(J[0] * scale)
    idx = np.asarray(indices, int)
    dep = np.setdiff1d(np.arange(mech.n), idx)
    if dep.size != J.shape[0]:
        return 0.0
    Jd, Ji = J[:, dep], J[:, idx]
    try:
        with np.errstate(all="ignore"):
            lu = scipy.sparse.linalg.splu(Jd)
    except RuntimeError:  # exactly singular
        return 0.0
    x = np.ones(idx.size) / np.sqrt(idx.size)
    sigma2 = 0.0
    for _ in range(max_iterations):
        y = Ji.T @ lu.solve(lu.solve(Ji @ x), trans="T")
        new = float(np.linalg.norm(y))
        if not np.isfinite(new):
            return 0.0
        if new == 0.0:
            return 1.0
        x = y / new
        converged = abs(new - sigma2) <= rtol * new
        sigma2 = new
        if converged:
            break
    return float(1.0 / np.sqrt(1.0 + sigma2))


PIVOT_TIE_RTOL = 1e-6
"""Relative gap below which two candidate pivots of the batched pivoted QR
(:func:`best_coordinate_sets`) count as tied.  Such states are re-decided by LAPACK's pivoted
QR (``scipy.linalg.qr``), so the choice is LAPACK's exactly: its column-norm downdating is
accurate to about sqrt(machine epsilon) relative, far inside this gap."""


def _smallest_singular(rows: np.ndarray) -> np.ndarray:
    """Smallest singular values (K,) of blocks rows (K, a, b); for 1 x 1 blocks the absolute
    value, which is what LAPACK's SVD returns for them."""
    if rows.shape[-2:] == (1, 1):
        return np.abs(rows[:, 0, 0])
    return np.linalg.svd(rows, compute_uv=False)[:, -1]


def _pivoted_rows(N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of null-space bases N (K, n, d) chosen by QR with column pivoting of N^T, batched.

    Step i picks the row with the largest norm of its part orthogonal to the rows picked
    before (Businger & Golub's rule, as LAPACK's xGEQP3), by Gram-Schmidt with one
    reorthogonalization.

    Returns
    -------
    pivots : (K, d) int
        The picked rows in the order picked.
    tied : (K,) bool
        Whether some step had a runner-up within ``PIVOT_TIE_RTOL`` of the largest norm
        (where rounding, or LAPACK's tie-breaking, could pick the other row).
    """
    K, n, d = N.shape
    R = N.copy()
    pivots = np.empty((K, d), int)
    tied = np.zeros(K, bool)
    free = np.ones((K, n), bool)
    states = np.arange(K)
    for i in range(d):
        norms = np.where(free, np.linalg.norm(R, axis=-1), -1.0)  # (K, n)
        p = np.argmax(norms, axis=-1)
        top = norms[states, p]
        norms[states, p] = -1.0
        tied |= np.max(norms, axis=-1) >= (1.0 - PIVOT_TIE_RTOL) * top
        pivots[:, i] = p
        free[states, p] = False
        with np.errstate(invalid="ignore", divide="ignore"):
            u = R[states, p] / top[:, None]  # (K, d)
        for _ in range(2):
            R -= (R @ u[:, :, None]) * u[:, None, :]
    return pivots, tied


def _best_of_bases(N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best independent coordinates of null-space bases N (K, n, d): (K, d) sorted indices
    and (K,) their quality (see :func:`best_coordinate_sets`)."""
    K, n, d = N.shape
    if d == 0:
        return np.empty((K, 0), int), np.ones(K)
    pivots, tied = _pivoted_rows(N)
    for k in np.flatnonzero(tied):  # near ties: LAPACK decides, as for a single state
        pivots[k] = scipy.linalg.qr(N[k].T, pivoting=True, mode="r")[1][:d]
    best = np.sort(pivots, axis=-1)
    rows = np.take_along_axis(N, best[:, :, None], axis=1)  # (K, d, d)
    return best, _smallest_singular(rows)


def _best_sparse(mech, q, scale) -> tuple[tuple[int, ...], float]:
    """The best set and its quality at one state q (n,) of a large mechanism: the dependent
    coordinates are the pivots of Phi_q diag(scale) (Wehage & Haug's choice by pivoting the
    constraint Jacobian), without an n x n null-space basis; quality by sparse LU."""
    Jall = C.constraint_jacobian(mech, q[None])[0]
    J = C.take_rows(Jall, C.independent_rows(mech, q[None], Jall[None]).reshape(-1), 1)
    piv = scipy.linalg.qr(J * scale, pivoting=True, mode="r")[1]
    best = tuple(sorted(int(i) for i in piv[J.shape[0]:]))
    return best, float(_sparse_quality(mech, q, best, scale)) if best else 1.0


def best_coordinate_sets(
    mech: Mechanism, q: ArrayLike, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The best-conditioned independent coordinates at each state of q (..., n).

    Dense (``mech.n < SPARSE_QUALITY_MIN_COORDINATES``): one batched null-space basis per
    state and a batched QR with column pivoting of its transpose; states with a near tie
    between pivots are decided by LAPACK (:data:`PIVOT_TIE_RTOL`), so every set is the one
    ``scipy.linalg.qr(N.T, pivoting=True)`` picks.  Large mechanisms: state by state by
    :func:`_best_sparse` (pivoting Phi_q, quality by sparse LU; no n x n basis).

    Parameters
    ----------
    mech : Mechanism
    q : array_like, shape (..., n)
        States.
    scale : ndarray, shape (n,), optional
        Coordinate scales (default 1).

    Returns
    -------
    indices : ndarray of int, shape (..., d)
        The chosen coordinates of each state, ascending.
    quality : ndarray, shape (...)
        Their quality (:func:`coordinate_quality`) in [0, 1].
    """
    q = np.asarray(q, float)
    scale = np.ones(mech.n) if scale is None else np.asarray(scale, float)
    flat = q.reshape(-1, mech.n)
    if mech.n >= SPARSE_QUALITY_MIN_COORDINATES:
        found = [_best_sparse(mech, x, scale) for x in flat]
        d = len(found[0][0]) if found else mech.dof
        best = np.array([s for s, _ in found], int).reshape(len(found), d)
        quality = np.array([v for _, v in found], float)
    else:
        best, quality = _best_of_bases(null_space_bases(mech, flat, scale))
    return best.reshape(q.shape[:-1] + best.shape[-1:]), quality.reshape(q.shape[:-1])


def best_coordinates(
    mech: Mechanism, q: ArrayLike, scale: np.ndarray | None = None
) -> tuple[tuple[int, ...], float]:
    """The best-conditioned independent coordinates at one state q (n,) and their quality
    (:func:`best_coordinate_sets` of one state)."""
    best, quality = best_coordinate_sets(mech, np.asarray(q, float)[None], scale)
    return tuple(int(i) for i in best[0]), float(quality[0])


SPARSE_FIXED_CANDIDATES = 8
"""Large mechanisms (:data:`SPARSE_QUALITY_MIN_COORDINATES`): :func:`fixed_coordinates`
compares the sets that are best at the most states, at most this many."""


def fixed_coordinates(
    mech: Mechanism, q: ArrayLike, scale: np.ndarray | None = None, *, candidates: int = 256
) -> tuple[tuple[int, ...], float]:
    """The one set of independent coordinates that is best over a whole trajectory.

    The candidates are the best sets (:func:`best_coordinate_sets`) of ``candidates`` states
    spread over the trajectory; the winner is the candidate whose smallest quality over the
    states is largest (dense mechanisms: every candidate over every state; large ones,
    :data:`SPARSE_QUALITY_MIN_COORDINATES`: the :data:`SPARSE_FIXED_CANDIDATES` sets best at
    the most candidates' states, over those states).

    Parameters
    ----------
    mech : Mechanism
    q : array_like, shape (T, n)
        The trajectory (T >= 1).
    scale : ndarray, shape (n,), optional
        Coordinate scales (default 1).
    candidates : int
        States whose best sets are candidates (a cost setting).

    Returns
    -------
    indices : tuple of int
        The set, ascending.
    quality : float
        Its smallest quality (:func:`coordinate_quality`) over the states, in [0, 1].
    """
    q = np.asarray(q, float).reshape(-1, mech.n)
    scale = np.ones(mech.n) if scale is None else np.asarray(scale, float)
    picks = np.unique(np.linspace(0, q.shape[0] - 1, min(q.shape[0], candidates)).astype(int))
    sparse = mech.n >= SPARSE_QUALITY_MIN_COORDINATES
    if sparse:
        sets, _ = best_coordinate_sets(mech, q[picks], scale)
        states = q[picks]

        def worst(s):
            return float(np.min(coordinate_quality(mech, states, s, scale)))
    else:
        N = null_space_bases(mech, q, scale)
        sets, _ = _best_of_bases(N[picks])

        def worst(s):
            return float(np.min(_smallest_singular(N[:, list(s), :]))) if len(s) else 1.0
    counts = Counter(tuple(int(i) for i in row) for row in sets)
    # large mechanisms: the sets best at most states only (each costs a sparse LU per state)
    found = [s for s, _ in counts.most_common(SPARSE_FIXED_CANDIDATES if sparse else None)]
    best, quality = (), -1.0
    for s in found:
        w = worst(s)
        if w > quality or (w == quality and s < best):
            best, quality = s, w
    return best, max(quality, 0.0)


KEEP = 0.5
"""Hysteresis of :func:`partition_along`: the current set is kept while its quality is at least
this fraction of the best set's."""


def partition_along(
    mech: Mechanism,
    q: ArrayLike,
    scale: np.ndarray | None = None,
    *,
    keep: float = KEEP,
    start: ArrayLike | None = None,
) -> np.ndarray:
    """Independent coordinates for each state of a trajectory q (T, n): (T, d) indices.

    Walks forward keeping the current set while its quality stays at least ``keep`` times the
    best set's (hysteresis, so the choice does not flicker) and switching to the best set
    otherwise.  ``start``: the set to begin with (default: the best at q[0]).

    Only states where the current set's quality is below ``keep`` can switch (the best
    quality is at most 1).  Dense mechanisms evaluate the null-space bases of all states
    once, and the best sets of all such states of the current set in one batch; large
    mechanisms (:data:`SPARSE_QUALITY_MIN_COORDINATES`) evaluate them state by state as the
    walk reaches them."""
    q = np.asarray(q, float)
    scale = np.ones(mech.n) if scale is None else np.asarray(scale, float)
    T = q.shape[0]
    if mech.n >= SPARSE_QUALITY_MIN_COORDINATES:
        chunk = 1  # best sets are costly: only at the states the walk reaches

        def quality_from(s, k):  # quality (T - k,) of the set s at the states k..T-1
            return coordinate_quality(mech, q[k:], s, scale)

        def best_at(states):  # best sets (K, d) and their qualities (K,) at states (K,)
            return best_coordinate_sets(mech, q[states], scale)
    else:
        chunk = max(T, 1)  # every flagged state of the current set in one batch
        N = null_space_bases(mech, q, scale)  # (T, n, d)

        def quality_from(s, k):
            return _smallest_singular(N[k:, list(s), :])

        def best_at(states):
            return _best_of_bases(N[states])

    cur = tuple(int(i) for i in (best_at([0])[0][0] if start is None else start))
    out = np.empty((T, len(cur)), int)
    out[:] = cur
    if T == 0 or not cur:
        return out
    best = np.empty((T, len(cur)), int)  # the best set and its quality at the states known
    qbest = np.empty(T)
    known = np.zeros(T, bool)
    quality = quality_from(cur, 0)
    k = 0  # the states before k are decided
    while k < T:
        # only states where the current set's quality is below keep can switch (qbest <= 1)
        flagged = k + np.flatnonzero(quality[k:] < keep)
        switch = None
        for pos in range(0, flagged.size, chunk):
            states = flagged[pos:pos + chunk]
            need = states[~known[states]]
            if need.size:
                best[need], qbest[need] = best_at(need)
                known[need] = True
            hit = (quality[states] < keep * qbest[states]) & np.any(best[states] != cur, axis=1)
            if hit.any():
                switch = int(states[np.argmax(hit)])
                break
        if switch is None:
            out[k:] = cur
            break
        out[k:switch] = cur
        cur = tuple(int(i) for i in best[switch])
        out[switch] = cur
        quality[switch:] = quality_from(cur, switch)
        k = switch + 1
    return out


class StatePartition:
    """:func:`partition_along` one state at a time (a fixed-lag smoother's newest step), fused.

    Only a state where the current set's quality is below ``keep`` can switch (the best
    quality is at most 1), and the current set's quality needs no null-space basis: with
    J = Phi_q diag(scale) split into the dependent columns J_d (square) and the current ones
    J_i it is 1 / sqrt(1 + sigma_max(J_d^-1 J_i)^2) (as in :func:`_sparse_quality`), from
    the single-state Jacobian (:class:`~mbfg.model.constraints.StateConstraints`) and one
    small solve.  Where it is below ``keep`` (or J_d is singular) the state goes to
    :func:`partition_along`.  Mechanisms with redundant constraints (whose independent rows
    are chosen per state) and large ones always do.

    Parameters
    ----------
    mech : Mechanism
    scale : (n,) float
        Coordinate scales [m or rad].
    keep : float
        As :func:`partition_along`.
    """

    def __init__(self, mech: Mechanism, scale: np.ndarray, keep: float = KEEP):
        self.mech, self.scale, self.keep = mech, np.asarray(scale, float), float(keep)
        self.fused = (mech.independent_rows.size == mech.m < mech.n
                      and mech.n < SPARSE_QUALITY_MIN_COORDINATES)
        self._state = C.StateConstraints(mech) if self.fused else None

    def __call__(self, q: ArrayLike, start: ArrayLike) -> np.ndarray:
        """Independent coordinates (d,) int at q (n,), continuing from the set ``start``."""
        q, start = np.asarray(q, float), np.asarray(start, int)
        if self.fused:
            J = self._state.jacobian(q) * self.scale
            dep = np.ones(self.mech.n, bool)
            dep[start] = False
            try:
                X = np.linalg.solve(J[:, dep], J[:, start])
            except np.linalg.LinAlgError:  # singular: the set must go
                X = None
            if X is not None:
                sigma = np.linalg.norm(X) if X.shape[1] == 1 else np.linalg.norm(X, 2)
                if 1.0 / np.sqrt(1.0 + sigma * sigma) >= self.keep:
                    return start.copy()
        return partition_along(self.mech, q[None], self.scale, keep=self.keep, start=start)[0]


__all__ = ["coordinate_quality", "best_coordinate_sets", "best_coordinates", "fixed_coordinates",
           "partition_along", "StatePartition", "KEEP"]
