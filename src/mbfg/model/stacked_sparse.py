"""Stacks of T sparse matrices that share one sparsity pattern.

The constraint kernels' Jacobians (Phi_q, Phi_qq v, sum_k lam_k Phi_qq,k, ...) have a
structure fixed by the mechanism: each distance row touches at most four coordinates.  For
T states their dense form (T, m, n) costs memory and time quadratic in the number of bodies;
a :class:`StackedSparse` holds only the values on the pattern, (T, nnz), so the batch drivers
stay linear in it.  ``np.asarray`` of one gives the dense (T, r, c) array.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse


def _freeze(a, dtype) -> np.ndarray:
    a = np.array(a, dtype=dtype)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Pattern:
    """Positions ``(rows[k], cols[k])`` of the stored entries of an (r, c) matrix.  Entries
    may repeat a position; they are then summed (as in a COO matrix)."""

    rows: np.ndarray
    cols: np.ndarray
    shape: tuple

    @classmethod
    def of(cls, rows: np.ndarray, cols: np.ndarray, shape: tuple) -> "Pattern":
        return cls(_freeze(rows, int), _freeze(cols, int), (int(shape[0]), int(shape[1])))

    @property
    def nnz(self) -> int:
        return int(self.rows.size)

    @cached_property
    def flat(self) -> np.ndarray:
        """Flat positions rows * c + cols."""
        return self.rows * self.shape[1] + self.cols

    @cached_property
    def unique(self) -> bool:
        return bool(np.unique(self.flat).size == self.nnz)

    @cached_property
    def by_row(self) -> tuple:
        return _segments(self.rows, self.shape[0])

    @cached_property
    def by_col(self) -> tuple:
        return _segments(self.cols, self.shape[1])

    @cached_property
    def transposed(self) -> "Pattern":
        return Pattern(self.cols, self.rows, self.shape[::-1])


DENSE_SUM_ENTRIES = 4096
"""Patterns whose entries times rows (or columns) are at most this sum their products by one
product with a 0/1 matrix (fewer array operations for small mechanisms, a performance
threshold); larger ones by ``np.add.reduceat``."""


def _segments(index, size):
    """How to sum (T, nnz) products by ``index`` into (T, size): a 0/1 matrix (nnz, size)
    when small, else the order that sorts ``index`` with the reduceat starts and groups of
    its nonempty groups."""
    if index.size * size <= DENSE_SUM_ENTRIES:
        S = np.zeros((index.size, size))
        S[np.arange(index.size), index] = 1.0
        return S
    order = np.argsort(index, kind="stable")
    groups, starts = np.unique(index[order], return_index=True)
    return order, starts, groups


def _reduce(products, segments, size):
    """Sums of the columns of ``products`` (T, nnz) per segment: (T, size)."""
    if not isinstance(segments, tuple):
        return products @ segments
    order, starts, groups = segments
    out = np.zeros((products.shape[0], size))
    if starts.size:
        out[:, groups] = np.add.reduceat(products[:, order], starts, axis=1)
    return out


@dataclass(frozen=True, eq=False)
class StackedSparse:
    """T matrices (r, c) with one :class:`Pattern`: ``values`` (T, nnz), where T may be
    broadcast from 1.

    ``np.asarray(S)`` or ``S.toarray()`` is the dense (T, r, c) stack; ``S.matvec(x)``
    with x (T, c) is the stack of products (T, r), ``S.rmatvec(y)`` with y (T, r) the
    transposed products (T, c), ``S.T`` the stack of transposes."""

    values: np.ndarray
    pattern: Pattern

    @property
    def shape(self) -> tuple:
        return (self.values.shape[0],) + self.pattern.shape

    @property
    def ndim(self) -> int:
        return 3

    def toarray(self) -> np.ndarray:
        T, (r, c) = self.values.shape[0], self.pattern.shape
        out = np.zeros((T, r * c))
        if self.pattern.unique:
            out[:, self.pattern.flat] = self.values
        else:
            np.add.at(out, (slice(None), self.pattern.flat), self.values)
        return out.reshape(T, r, c)

    def __array__(self, dtype=None, copy=None):
        a = self.toarray()
        return a if dtype is None else a.astype(dtype)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """S x for x (T, c): (T, r)."""
        p = self.pattern
        return _reduce(self.values * x[:, p.cols], p.by_row, p.shape[0])

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """S^T y for y (T, r): (T, c)."""
        p = self.pattern
        return _reduce(self.values * y[:, p.rows], p.by_col, p.shape[1])

    def matrix(self, k: int = 0, column_scale: np.ndarray | None = None
               ) -> "scipy.sparse.csc_matrix":
        """Matrix ``k`` of the stack as a scipy CSC matrix (r, c), times diag(column_scale)
        if given (c,)."""
        import scipy.sparse

        p = self.pattern
        v = self.values[k] if column_scale is None else self.values[k] * column_scale[p.cols]
        return scipy.sparse.csc_matrix((v, (p.rows, p.cols)), p.shape)

    def row_norms(self, column_scale: np.ndarray | None = None) -> np.ndarray:
        """Euclidean norms of the rows (T, r), of S diag(column_scale) if given (c,); for a
        pattern without repeated positions."""
        p = self.pattern
        if not p.unique:
            raise ValueError("row_norms needs a pattern without repeated positions")
        v = self.values if column_scale is None else self.values * column_scale[p.cols]
        return np.sqrt(_reduce(v * v, p.by_row, p.shape[0]))

    def columns(self, keep: np.ndarray) -> "StackedSparse":
        """The stack restricted to the columns ``keep`` (sorted, distinct), renumbered."""
        p = self.pattern
        new = np.full(p.shape[1], -1)
        new[keep] = np.arange(keep.size)
        sel = np.flatnonzero(new[p.cols] >= 0)
        return StackedSparse(self.values[:, sel],
                             Pattern.of(p.rows[sel], new[p.cols[sel]], (p.shape[0], keep.size)))

    @property
    def T(self) -> "StackedSparse":
        return StackedSparse(self.values, self.pattern.transposed)

    def __add__(self, other: "StackedSparse") -> "StackedSparse":
        if other.pattern.shape != self.pattern.shape:
            raise ValueError(f"cannot add stacks of {self.pattern.shape} and "
                             f"{other.pattern.shape} matrices")
        if other.pattern is self.pattern:
            return StackedSparse(self.values + other.values, self.pattern)
        T = max(self.values.shape[0], other.values.shape[0])
        a, b = self.pattern, other.pattern
        return StackedSparse(
            np.concatenate([np.broadcast_to(self.values, (T, a.nnz)),
                            np.broadcast_to(other.values, (T, b.nnz))], axis=1),
            Pattern.of(np.concatenate([a.rows, b.rows]), np.concatenate([a.cols, b.cols]),
                       a.shape))

    def __mul__(self, factor) -> "StackedSparse":
        """Entry-wise product with a scalar or a per-matrix factor (T, 1)."""
        return StackedSparse(self.values * factor, self.pattern)

    __rmul__ = __mul__


@lru_cache(maxsize=64)
def _empty_pattern(shape: tuple) -> Pattern:
    return Pattern.of([], [], shape)


def times(A: "np.ndarray | StackedSparse", x: np.ndarray) -> np.ndarray:
    """A x for a stack A (T, r, c), dense or StackedSparse, and x (T, c): (T, r)."""
    return A.matvec(x) if isinstance(A, StackedSparse) else np.einsum("tkn,tn->tk", A, x)


def empty(T: int, shape: tuple) -> StackedSparse:
    """A stack of T zero matrices with no stored entries (one pattern object per shape)."""
    return StackedSparse(np.zeros((T, 0)), _empty_pattern(tuple(int(k) for k in shape)))


__all__ = [
    "Pattern", "StackedSparse", "times", "empty"
]
