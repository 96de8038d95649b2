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

__all__ = ["assemble", "solve_sparse", "causal_solve", "SPARSE_MIN_UNKNOWNS"]


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
        x = _bordered(A, -e)
        if x is not None:
            return x
        K, rhs, pivot = A, -e, 1.0
    try:
        with np.errstate(all="ignore"):
            x = scipy.sparse.linalg.splu(K, diag_pivot_thresh=pivot).solve(rhs)
    except RuntimeError:  # exactly singular
        return None
    if rows > cols:
        x = x[-cols:]
    return x if np.all(np.isfinite(x)) else None


def _bordered(A: scipy.sparse.spmatrix, b: np.ndarray) -> np.ndarray | None:
    """x with A x = b by a sparse LU of A without its k dense rows R and k dense columns C
    (an energy balance touches every velocity; its velocity rescaling alpha enters every
    velocity integrator) and the k x k Schur complement of the rest:

        A11 y = b1 - A12 x2,   (A22 - A21 A11^-1 A12) x2 = b2 - A21 A11^-1 b1.

    Left in, the dense lines make the LU's fill depend on where partial pivoting meets them
    (on an 800-link chain 1.3e6 entries and 59 ms in some steps, against 1.8e5 and 11 ms
    bordered).  None (the caller factors A as it is) when there are no dense lines, when
    their numbers differ, or when A11 is singular.  A line is dense with more than 8 times
    the mean number of nonzeros per row, and at least 32."""
    R_ = A.tocsr()
    row_nnz = np.diff(R_.indptr)
    col_nnz = np.diff(A.tocsc().indptr)
    limit = max(32.0, 8.0 * float(row_nnz.mean()))
    rows_d, cols_d = np.flatnonzero(row_nnz > limit), np.flatnonzero(col_nnz > limit)
    if rows_d.size == 0 or rows_d.size != cols_d.size:
        return None
    n = A.shape[0]
    rows_s = np.setdiff1d(np.arange(n), rows_d)
    cols_s = np.setdiff1d(np.arange(n), cols_d)
    top, bottom = R_[rows_s], R_[rows_d]
    try:
        with np.errstate(all="ignore"):
            lu = scipy.sparse.linalg.splu(top[:, cols_s].tocsc())
    except RuntimeError:  # A11 singular: the dense lines are needed as pivots
        return None
    Y = lu.solve(np.column_stack([b[rows_s], top[:, cols_d].toarray()]))
    y, Z = Y[:, 0], Y[:, 1:]
    A21 = bottom[:, cols_s]
    schur = bottom[:, cols_d].toarray() - A21 @ Z
    try:
        x2 = np.linalg.solve(schur, b[rows_d] - A21 @ y)
    except np.linalg.LinAlgError:
        return None
    x = np.empty(n)
    x[cols_s] = y - Z @ x2
    x[cols_d] = x2
    return x if np.all(np.isfinite(x)) else None


def causal_solve(A: scipy.sparse.spmatrix, e: np.ndarray, n_steps: int,
                 dim: int) -> tuple | None:
    """The Gauss-Newton step (n_steps, dim) minimizing ``||A x + e||`` of a causal square
    graph (:func:`mbfg.solvers.batch.causal_step` gives the shape) and that norm's half
    square, by block forward substitution with one sparse LU per step:

        D_k x_k = -e_k - L_k x_{k-1},

    where D_k and L_k are the sparse blocks of step k's rows on x_k and x_{k-1}.  A row
    belongs to the last step it touches.  Step 0 is the least-squares solution of its own
    rows (:func:`solve_sparse`).  Each D_k is factored on its own: the LU of the whole
    block-bidiagonal matrix would carry L_k U_{k-1}^-1, with (rows of L_k) x dim entries per
    step, so its fill grows with the square of the number of bodies (12x the nonzeros on a
    40-link chain, 33x on 80), where the steps' own factors stay at 2-4x.  The cost is then
    linear in the horizon and about linear in the number of bodies, plus a Python overhead
    of ~0.1 ms per step that makes the dense :func:`~mbfg.solvers.batch.causal_step` the
    faster choice for small steps.  None when the system is not of that shape or a D_k is
    singular (the caller then eliminates it otherwise)."""
    A = scipy.sparse.csr_matrix(A)
    A.eliminate_zeros()
    counts = np.diff(A.indptr)
    live = np.flatnonzero(counts > 0)
    starts = A.indptr[:-1][live]
    last = np.maximum.reduceat(A.indices, starts) // dim
    first = np.minimum.reduceat(A.indices, starts) // dim
    if np.any(last - first > 1):
        return None  # a row spans more than two consecutive steps: not causal
    per_step = np.bincount(last, minlength=n_steps)
    if per_step[0] < dim or np.any(per_step[1:] != dim):
        return None
    rows = live[np.argsort(last, kind="stable")]
    x = np.empty((n_steps, dim))
    r0 = rows[:per_step[0]]
    x0 = solve_sparse(A[r0][:, :dim].tocsc(), e[r0])
    if x0 is None:
        return None
    x[0] = x0
    # the rows of steps >= 1 in step order: step k's are the dim rows from (k - 1) dim on
    B = A[rows[per_step[0]:]].tocoo()
    step = B.row // dim + 1
    own = B.col >= step * dim
    link = np.flatnonzero(~own)
    link_at = np.searchsorted(B.row[link], np.arange(n_steps) * dim)  # B is row-sorted
    lr, lc, lv = B.row[link] % dim, B.col[link] % dim, B.data[link]
    rhs = -e[rows[per_step[0]:]]
    r_own, c_own, v_own = B.row[own], B.col[own] - dim, B.data[own]
    with np.errstate(all="ignore"):
        try:
            # the fill-reducing column order (COLAMD) of step 1 serves every step, whose
            # blocks have its structure: the ordering is half of a step's factorization
            first = c_own < dim
            D1 = scipy.sparse.csc_matrix((v_own[first], (r_own[first], c_own[first])),
                                         shape=(dim, dim))
            position = scipy.sparse.linalg.splu(D1, diag_pivot_thresh=0.1).perm_c
            c_own = c_own - c_own % dim + position[c_own % dim]
            Dall = scipy.sparse.csc_matrix((v_own, (r_own, c_own)),
                                           shape=((n_steps - 1) * dim,) * 2)
            ptr, idx, val = Dall.indptr, Dall.indices, Dall.data
            for k in range(1, n_steps):
                c0, c1 = (k - 1) * dim, k * dim
                p0, p1 = ptr[c0], ptr[c1]
                D = scipy.sparse.csc_matrix((val[p0:p1], idx[p0:p1] - c0, ptr[c0:c1 + 1] - p0),
                                            shape=(dim, dim))
                s = slice(link_at[k - 1], link_at[k])
                b = rhs[c0:c1] - np.bincount(lr[s], lv[s] * x[k - 1, lc[s]], minlength=dim)
                try:
                    x[k] = scipy.sparse.linalg.splu(D, permc_spec="NATURAL",
                                                    diag_pivot_thresh=0.1).solve(b)[position]
                except RuntimeError:  # step 1's order meets a zero pivot here: its own order
                    x[k] = scipy.sparse.linalg.splu(D, diag_pivot_thresh=1.0).solve(b)[position]
        except RuntimeError:  # exactly singular
            return None
    if not np.all(np.isfinite(x)):
        return None
    r = A @ x.ravel() + e
    return x, 0.5 * float(r @ r)
