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

KKT_SPARSE_MIN = 256
"""Systems with at least this many unknowns (n + r) are solved by one sparse LU per state;
smaller ones by LAPACK's batched dense LU, which is faster there (a performance threshold: on
pendulum chains a state's accelerations take 0.07 ms dense and 0.2 ms sparse at 120
unknowns, 0.6 and 0.3 ms at 240, 3.2 and 0.4 ms at 480)."""

__all__ = ["solve_kkt", "KKT_SPARSE_MIN"]


def solve_kkt(H: np.ndarray, J: np.ndarray, f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """[x; mu] (T, n + r) of the saddle-point systems above for T states.

    Parameters
    ----------
    H : (n, n)
        The constant upper-left block (M [kg, kg m], or the identity).
    J : (T, r, n)
        Constraint Jacobians of the states.
    f : (T, n), g : (T, r)
        Right-hand sides.

    Raises
    ------
    numpy.linalg.LinAlgError
        When a system is singular (as the dense ``numpy.linalg.solve`` does).
    """
    T, r, n = J.shape
    if n + r < KKT_SPARSE_MIN or T == 0:
        K = np.zeros((T, n + r, n + r))
        K[:, :n, :n] = H
        K[:, :n, n:] = np.swapaxes(J, -1, -2)
        K[:, n:, :n] = J
        rhs = np.concatenate([f, g], axis=-1)
        return np.linalg.solve(K, rhs[..., None])[..., 0]
    import scipy.sparse
    import scipy.sparse.linalg

    # one structure for every state: the union of the Jacobians' nonzeros, in CSC order of K
    ji, jj = np.nonzero(np.any(J != 0.0, axis=0))
    hi, hj = np.nonzero(H)
    rows = np.concatenate([hi, n + ji, jj])
    cols = np.concatenate([hj, jj, n + ji])
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]
    indptr = np.searchsorted(cols, np.arange(n + r + 1))
    values = np.empty((T, rows.size))
    values[:, :hi.size] = H[hi, hj]
    values[:, hi.size:hi.size + ji.size] = J[:, ji, jj]
    values[:, hi.size + ji.size:] = J[:, ji, jj]
    values = np.ascontiguousarray(values[:, order])  # fancy indexing may give F order
    rhs = np.concatenate([f, g], axis=-1)
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
