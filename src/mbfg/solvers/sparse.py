"""Sparse solution of a window's linear system (simulation graphs of many bodies).

The simulation graph (:class:`mbfg.graphs.forward.ForwardProblem`) has as many independent
rows as unknowns per step, and in dependent coordinates each of its rows touches only the
coordinates of one body or one constraint (the equations of motion carry the multipliers as
unknowns).  Its linearization over a window of L steps is then a square sparse matrix with a
few nonzeros per row, and a sparse LU factorization (SuperLU, with a fill-reducing column
order) solves it in time about linear in the number of bodies, where eliminating each step
vector as one dense gtsam variable (QR) costs the cube of its dimension.  At the solution both
give the same Newton step; gtsam remains the engine whenever the system is not square
(over-determined graphs, redundant constraints) or the LU finds it singular.

The system comes from the terms' sparse linearizations
(:meth:`mbfg.graphs.batch_term.BatchTerm.coo`), so nothing of size (rows x dim) is formed.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

SPARSE_MIN_UNKNOWNS = 200
"""Windows with fewer unknowns are solved by gtsam's dense QR, which is faster there (a
performance threshold: on pendulum chains, window-2 smoother steps of 142 unknowns take 2.7 ms
with gtsam and 3.5 ms sparse, of 282 unknowns 10.4 ms and 5.3 ms; both give the same step)."""

__all__ = ["assemble", "solve_sparse", "SPARSE_MIN_UNKNOWNS"]


def assemble(terms: list, X: np.ndarray) -> tuple[scipy.sparse.csc_matrix, np.ndarray]:
    """The stacked whitened linearization (A, e) of ``terms`` at the step vectors X (L, dim):
    A (rows, L * dim) sparse, e (rows,), the factor ||A delta + e||^2 (each term's
    :meth:`~mbfg.graphs.batch_term.BatchTerm.coo`)."""
    ii, jj, vv, es = [], [], [], []
    offset = 0
    for t in terms:
        i, j, v, e = t.coo(X)
        ii.append(i + offset)
        jj.append(j)
        vv.append(v)
        es.append(e.reshape(-1))
        offset += e.size
    A = scipy.sparse.csc_matrix((np.concatenate(vv), (np.concatenate(ii), np.concatenate(jj))),
                                shape=(offset, X.size))
    return A, np.concatenate(es)


def solve_sparse(A: scipy.sparse.csc_matrix, e: np.ndarray) -> np.ndarray | None:
    """The Gauss-Newton step x minimizing ||A x + e|| (:func:`assemble`), by sparse LU: of A
    itself when the
    system is square, otherwise of the augmented system [[I, A], [A^T, 0]] [r; D] = [-e; 0]
    (the least-squares solution, with the conditioning of A rather than of A^T A).  None
    when the factorization finds the system singular (A without full column rank): the
    caller then uses gtsam's QR."""
    rows, cols = A.shape
    if rows < cols:
        return None
    if rows > cols:
        K = scipy.sparse.bmat([[scipy.sparse.identity(rows, format="csc"), A],
                               [A.T, None]], format="csc")
        rhs = np.concatenate([-e, np.zeros(cols)])
        # threshold partial pivoting (0.1, the usual choice of sparse LU codes): strict
        # partial pivoting fills the augmented system of a 400-link chain 3x more (8e6
        # nonzeros, 1.6 s instead of 0.37 s) for the same residual
        pivot = 0.1
    else:
        K, rhs, pivot = A, -e, 1.0
    try:
        with np.errstate(all="ignore"):
            x = scipy.sparse.linalg.splu(K, diag_pivot_thresh=pivot).solve(rhs)
    except RuntimeError:  # exactly singular
        return None
    if rows > cols:
        x = x[-cols:]
    return x if np.all(np.isfinite(x)) else None
