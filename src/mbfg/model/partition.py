"""Coordinate partitioning: which ``dof`` coordinates describe the motion best at a state.

A set of coordinates ``indices`` can serve as independent coordinates at q when [Phi_q; B] is
nonsingular (B selects them, Eq. 8-11).  Its quality is the smallest singular value of the rows
``indices`` of an orthonormal basis N of the null space of Phi_q (1 = ideal, 0 = singular);
the best set comes from QR with column pivoting of N^T (Wehage & Haug's partitioning).
Coordinates are compared in their own scales (:mod:`mbfg.model.scales`), so the choice does
not depend on the units of lengths versus angles.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg

from mbfg.model import constraints as C

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism


def _null_basis(mech, q, scale):
    """Orthonormal null-space bases (T, n, d) of Phi_q diag(scale) on the independent rows."""
    Jall = C.constraint_jacobian(mech, q)
    J = C.take_rows(Jall, C.independent_rows(mech, q, Jall), 1) * scale
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
    N = _null_basis(mech, q.reshape(-1, mech.n), scale)[:, list(indices), :]
    return np.linalg.svd(N, compute_uv=False)[:, -1].reshape(q.shape[:-1])


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

    Jall = C.constraint_jacobian(mech, q[None])[0]
    J = C.take_rows(Jall, C.independent_rows(mech, q[None], Jall[None]).reshape(-1), 1) * scale
    idx = np.asarray(indices, int)
    dep = np.setdiff1d(np.arange(mech.n), idx)
    if dep.size != J.shape[0]:
        return 0.0
    Jd, Ji = scipy.sparse.csc_matrix(J[:, dep]), scipy.sparse.csc_matrix(J[:, idx])
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


def best_coordinates(
    mech: Mechanism, q: ArrayLike, scale: np.ndarray | None = None
) -> tuple[tuple[int, ...], float]:
    """The best-conditioned independent coordinates at one state q (n,) and their quality."""
    scale = np.ones(mech.n) if scale is None else np.asarray(scale, float)
    if mech.n >= SPARSE_QUALITY_MIN_COORDINATES:
        # the dependent coordinates are the pivots of Phi_q diag(scale) (Wehage & Haug's
        # choice by pivoting the constraint Jacobian), without an n x n null-space basis
        q = np.asarray(q, float)
        Jall = C.constraint_jacobian(mech, q[None])[0]
        J = C.take_rows(Jall, C.independent_rows(mech, q[None], Jall[None]).reshape(-1), 1)
        piv = scipy.linalg.qr(J * scale, pivoting=True, mode="r")[1]
        best = tuple(sorted(int(i) for i in piv[J.shape[0]:]))
        return best, float(_sparse_quality(mech, q, best, scale)) if best else 1.0
    N = _null_basis(mech, np.asarray(q, float)[None], scale)[0]
    d = N.shape[1]
    if d == 0:
        return (), 1.0
    piv = scipy.linalg.qr(N.T, pivoting=True, mode="r")[1]
    best = tuple(sorted(int(i) for i in piv[:d]))
    return best, float(np.linalg.svd(N[list(best)], compute_uv=False)[-1])


def partition_along(
    mech: Mechanism,
    q: ArrayLike,
    scale: np.ndarray | None = None,
    *,
    keep: float = 0.5,
    start: ArrayLike | None = None,
) -> np.ndarray:
    """Independent coordinates for each state of a trajectory q (T, n): (T, d) indices.

    Walks forward keeping the current set while its quality stays at least ``keep`` times the
    best set's (hysteresis, so the choice does not flicker) and switching to the best set
    otherwise.  ``start``: the set to begin with (default: the best at q[0])."""
    q = np.asarray(q, float)
    scale = np.ones(mech.n) if scale is None else np.asarray(scale, float)
    cur = tuple(start) if start is not None else best_coordinates(mech, q[0], scale)[0]
    out = np.empty((q.shape[0], len(cur)), int)
    quality = coordinate_quality(mech, q, cur, scale)
    k = 0
    while k < q.shape[0]:
        if quality[k] < keep:  # (quality >= keep is at least keep times the best, <= 1)
            best, qbest = best_coordinates(mech, q[k], scale)
            if quality[k] < keep * qbest and best != cur:
                cur = best
                quality[k:] = coordinate_quality(mech, q[k:], cur, scale)
        # every state up to the next one where the current set degrades keeps it
        bad = np.flatnonzero(quality[k + 1:] < keep)
        stop = q.shape[0] if bad.size == 0 else k + 1 + int(bad[0])
        out[k:stop] = cur
        k = stop if stop > k + 1 else k + 1
    return out


__all__ = ["coordinate_quality", "best_coordinates", "partition_along"]
