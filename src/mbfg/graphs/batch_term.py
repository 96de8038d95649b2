"""The unit every graph builder produces and every numeric solver consumes.

A :class:`BatchTerm` is a family of factors evaluated for many time steps at once with numpy;
its whitened linearization becomes native gtsam Gaussian factors (:func:`add_blocks`).  The
graph builders (:mod:`mbfg.graphs`) define the terms, the solvers (:mod:`mbfg.solvers`) only
linearize and eliminate them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.factors.gaussian import unit_noise

if TYPE_CHECKING:
    import gtsam
    from numpy.typing import ArrayLike

__all__ = ["BatchTerm", "add_blocks", "block", "coo_of_blocks"]


class BatchTerm:
    """A family of factors evaluated for many steps at once.

    ``X`` is the (N, dim) array of step vectors and ``keys`` their gtsam keys.
    :meth:`blocks` returns the whitened linearization at ``X`` of every factor of the family:
    ``rows`` (T, k) the step rows each factor touches (k = 1 or 2), ``A`` a list of k arrays
    (T, r, dim) (the Jacobian block on each of those rows; (1, r, dim) when the same block
    serves every factor) and ``e`` (T, r) the whitened
    residual, i.e. the factor ``||A delta + e||^2``.  :meth:`linearize` appends those factors to
    a ``GaussianFactorGraph`` and returns the error at ``X``; :meth:`error` returns
    ``0.5 * sum ||whitened e||^2``.  ``arity``: how many rows each factor touches (1, or 2
    for links between consecutive steps)."""

    arity = 1

    def blocks(self, X: ArrayLike) -> tuple[np.ndarray, list, np.ndarray]:
        raise NotImplementedError

    def error(self, X: ArrayLike) -> float:
        raise NotImplementedError

    def linearize(self, X: ArrayLike, keys: list, out: gtsam.GaussianFactorGraph) -> float:
        return add_blocks(self.blocks(X), keys, out)

    def coo(self, X: ArrayLike) -> tuple:
        """The same whitened linearization as :meth:`blocks`, sparse: ``(i, j, v, e)`` with
        ``e`` (T, r) as in :meth:`blocks` and the nonzeros v of row i (an index into
        ``e.ravel()``) and column j (an index into ``X.ravel()``).  This default converts the
        dense blocks; terms whose rows each touch a few coordinates override it so that
        nothing of size (rows x dim) is formed."""
        return coo_of_blocks(self.blocks(X), np.shape(X)[1])


def coo_of_blocks(blocks: tuple, dim: int) -> tuple:
    """(i, j, v, e) of dense blocks (see :meth:`BatchTerm.coo`)."""
    rows, A, e = blocks
    T, r = e.shape
    ii, jj, vv = [], [], []
    if T * r:
        for k, Ak in enumerate(A):
            if Ak.shape[0] != T:  # one block shared by every factor
                t, li, lj = _tiled_nonzero(Ak[0], T)
                v = Ak[0][li, lj]
            else:
                t, li, lj = np.nonzero(Ak)
                v = Ak[t, li, lj]
            ii.append(t * r + li)
            jj.append(rows[t, k] * dim + lj)
            vv.append(v)
    return _cat(ii, int), _cat(jj, int), _cat(vv, float), e


def _tiled_nonzero(A2: np.ndarray, T: int) -> tuple:
    """Nonzeros of one (r, c) block repeated for T factors: (t, i, j), each (T * nnz,)."""
    li, lj = np.nonzero(A2)
    return np.repeat(np.arange(T), li.size), np.tile(li, T), np.tile(lj, T)


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)
def add_blocks(blocks: tuple, keys: list, out: gtsam.GaussianFactorGraph) -> float:
    """Append the factors of ``blocks`` (see :meth:`BatchTerm.blocks`) to ``out``; returns
    their error."""
    rows, A, e = blocks
    model = unit_noise(e.shape[1])
    b = -e
    if len(A) == 1:
        A0 = A[0]
        for t, r in enumerate(rows[:, 0]):
            out.add(keys[r], block(A0, t), b[t], model)
    else:
        A0, A1 = A
        for t, (r0, r1) in enumerate(rows):
            out.add(keys[r0], block(A0, t), keys[r1], block(A1, t), b[t], model)
    return 0.5 * float(np.sum(e * e))


def block(A: ArrayLike, t: int) -> np.ndarray:
    """Factor t's block of a (T, r, dim) or shared (1, r, dim) block array."""
    return A[t] if A.shape[0] > 1 else A[0]
