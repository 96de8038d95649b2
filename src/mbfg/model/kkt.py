"""Saddle-point (KKT) systems of many states, sparse when they are large.

The accelerations of Eq. (5) and the minimum-norm position and velocity corrections (Eq. 1's
Newton steps, the projection onto Phi_q v = 0) all solve, per state,

    [ H   J^T ] [x ]   [f]
    [ J    0  ] [mu] = [g],

with H constant (the mass matrix M, or the identity) and J the constraint Jacobian (r, n) of
the state.  Dense, that costs (n + r)^3 per state; for a mechanism of many bodies the matrix
has a few nonzeros per row (every constraint touches the coordinates of one or two bodies, M
is block diagonal), and one sparse LU per state (SuperLU) costs about linear in the number
of bodies.  :func:`solve_kkt` picks the sparse path from ``KKT_SPARSE_MIN`` unknowns on.
"""
from __future__ import annotations

import numpy as np

from mbfg.model.stacked_sparse import StackedSparse

KKT_SPARSE_MIN = 256
"""Systems with at least this many unknowns (n + r) are solved by one sparse LU per state;
smaller ones by LAPACK's batched dense LU, which is faster there (a performance threshold: on
pendulum chains a state's accelerations take 0.07 ms dense and 0.2 ms sparse at 120
unknowns, 0.6 and 0.3 ms at 240, 3.2 and 0.4 ms at 480)."""

__all__ = ["kkt_matrix", "solve_kkt", "minimum_norm", "uses_sparse", "KKT_SPARSE_MIN"]


def kkt_matrix(H: np.ndarray, J: np.ndarray) -> np.ndarray:
    """The dense saddle-point matrices [[H, J^T], [J, 0]] (..., n + r, n + r) of Jacobians J
    (..., r, n) with the constant block H (n, n)."""
    n, r = H.shape[0], J.shape[-2]
    K = np.zeros(J.shape[:-2] + (n + r, n + r))
    K[..., :n, :n] = H
    K[..., :n, n:] = np.swapaxes(J, -1, -2)
    K[..., n:, :n] = J
    return K


def uses_sparse(n: int, r: int) -> bool:
    """Whether saddle-point systems of n + r unknowns are solved by sparse LU."""
    return n + r >= KKT_SPARSE_MIN


def solve_kkt(H: np.ndarray | None, J: np.ndarray | StackedSparse, f: np.ndarray,
              g: np.ndarray) -> np.ndarray:
    """[x; mu] (..., n + r) of the saddle-point systems above for the states of J.

    Parameters
    ----------
    H : (n, n) or None
        The constant upper-left block (M [kg, kg m]); None for the identity.
    J : (..., r, n) array, or StackedSparse of T matrices (r, n)
        Constraint Jacobians of the states (a StackedSparse keeps the cost linear in the
        number of bodies; its leading axis is then T).
    f : (..., n), g : (..., r)
        Right-hand sides (broadcast to the states of J).

    Raises
    ------
    numpy.linalg.LinAlgError
        When a system is singular (as the dense ``numpy.linalg.solve`` does).
    """
    lead, (r, n) = J.shape[:-2], J.shape[-2:]
    rhs = np.concatenate([np.broadcast_to(f, lead + (n,)), np.broadcast_to(g, lead + (r,))],
                         axis=-1)
    if isinstance(J, StackedSparse):
        if 0 in lead:
            return rhs
        p = J.pattern
        return _solve_sparse(H, n, p.rows, p.cols, np.broadcast_to(J.values, lead + (p.nnz,)),
                             rhs)
    if not uses_sparse(n, r) or 0 in lead:
        return np.linalg.solve(kkt_matrix(np.eye(n) if H is None else H, J),
                               rhs[..., None])[..., 0]
    Jf = J.reshape(-1, r, n)
    ji, jj = np.nonzero(np.any(Jf != 0.0, axis=0))  # the union of the states' nonzeros
    return _solve_sparse(H, n, ji, jj, Jf[:, ji, jj],
                         rhs.reshape(-1, n + r)).reshape(rhs.shape)


def minimum_norm(J: np.ndarray | StackedSparse, rhs: np.ndarray) -> np.ndarray:
    """The minimum-norm solutions x (..., n) of J x = rhs, for J (..., r, n) (or a
    StackedSparse) and rhs (..., r): the x of [[I, J^T], [J, 0]] [x; mu] = [0; rhs]
    (:func:`solve_kkt` with H = I), which is J^T (J J^T)^-1 rhs without forming J J^T."""
    n = J.shape[-1]
    return solve_kkt(None, J, np.zeros(n), rhs)[..., :n]


_H_ENTRIES: dict = {}
"""Nonzero entries of read-only H blocks (the mass matrices), by id; each entry holds its
array, so the id stays its own."""


def _entries(H, n):
    """(rows, cols, values) of H's nonzeros; H None is the identity (n, n)."""
    if H is None:
        i = np.arange(n)
        return i, i, np.ones(n)
    hit = _H_ENTRIES.get(id(H))
    if hit is not None and hit[0] is H:
        return hit[1]
    i, j = np.nonzero(H)
    out = (i, j, H[i, j])
    if not H.flags.writeable:  # constant: cache it
        if len(_H_ENTRIES) >= 64:
            _H_ENTRIES.clear()
        _H_ENTRIES[id(H)] = (H, out)
    return out


def _solve_sparse(H, n, ji, jj, jvalues, rhs):
    """[x; mu] (T, n + r) by one sparse LU per state: H (n, n) or None (the identity), J's
    entries ``jvalues`` (T, nnz) at (ji, jj) (distinct positions, one structure for every
    state), rhs (T, n + r)."""
    T = rhs.shape[0]
    r = rhs.shape[1] - n
    import scipy.sparse
    import scipy.sparse.linalg

    # one structure for every state, in CSC order of K
    hi, hj, hv = _entries(H, n)
    rows = np.concatenate([hi, n + ji, jj])
    cols = np.concatenate([hj, jj, n + ji])
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]
    indptr = np.searchsorted(cols, np.arange(n + r + 1))
    values = np.empty((T, rows.size))
    values[:, :hi.size] = hv
    values[:, hi.size:hi.size + ji.size] = jvalues
    values[:, hi.size + ji.size:] = jvalues
    values = np.ascontiguousarray(values[:, order])  # fancy indexing may give F order
    out = np.empty((T, n + r))
    for t in range(T):
        K = scipy.sparse.csc_matrix((values[t], rows, indptr), shape=(n + r, n + r))
        try:
            with np.errstate(all="ignore"):
                out[t] = scipy.sparse.linalg.splu(K, diag_pivot_thresh=0.1).solve(rhs[t])
        except RuntimeError as exc:  # exactly singular
            raise np.linalg.LinAlgError(f"Singular matrix ({exc})") from None
    if not np.all(np.isfinite(out)):
        raise np.linalg.LinAlgError("Singular matrix")
    return out
