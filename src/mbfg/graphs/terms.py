"""Vectorized nonlinear factor families for the batch drivers and the fixed-lag smoother.

A :class:`StackedTerm` evaluates the nonlinear factors of many time steps with one call of the
vectorized model kernels and hands gtsam one native unary Gaussian factor per step on the step
vector ``x_k`` (:mod:`mbfg.graphs.layout`): the rows of all families of that step, whitened by
their sigmas.  The factors are mathematically those of :mod:`mbfg.factors` (a test checks that
both give the same linear system); only the evaluation is batched.

Residual functions take a dict of slot arrays ``{"q": (T, n), "v": (T, n), ...}`` and return
``e (T, r)`` and, when asked, ``{slot: d e / d slot (T, r, dim)}``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.graphs.batch_term import BatchTerm
from mbfg.model.stacked_sparse import StackedSparse

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


class StackedTerm(BatchTerm):
    """Nonlinear residual families of the steps at ``rows`` of X, one unary factor per step.

    Parameters
    ----------
    layout : StepLayout
    rows : sequence of int (indices into the step array X)
    residuals : sequence of (residual_function, sigmas) pairs; rows are stacked in this order.
    """

    def __init__(self, layout, rows, residuals):
        self.layout = layout
        self.rows = np.asarray(rows, int)
        self.residuals = list(residuals)
        self.inv_sigma = None  # row weights, known after the first evaluation

    def _weights(self, es):
        if self.inv_sigma is None:
            self.inv_sigma = np.concatenate([
                1.0 / np.broadcast_to(np.asarray(s, float), (e.shape[1],))
                for (_, s), e in zip(self.residuals, es)])
        return self.inv_sigma

    def _evaluate(self, Xs, jacobians):
        """Unwhitened residuals (T, r) and, if asked, (row offset, {slot: Jacobian}) per
        family."""
        parts = self.layout.unpack(Xs)
        es, Js, off = [], [], 0
        for f, _ in self.residuals:
            e, J = f(parts, jacobians=jacobians)
            es.append(e)
            Js.append((off, J))
            off += e.shape[1]
        self._weights(es)
        leads = {e.shape[:-1] for e in es}
        if len(leads) > 1:  # per-step inputs at one state (the structure probe)
            lead = np.broadcast_shapes(*leads)
            es = [np.broadcast_to(e, lead + e.shape[-1:]) for e in es]
        return np.concatenate(es, axis=1), Js

    def residual(self, Xs: ArrayLike, jacobians: bool = True) -> tuple:
        """Stacked unwhitened residuals (T, r) and Jacobians (T, r, dim) of step vectors Xs."""
        e, Js = self._evaluate(Xs, jacobians)
        if not jacobians:
            return e, None
        A = np.zeros(e.shape + (self.layout.dim,))
        for off, J in Js:
            for slot, Jslot in J.items():
                A[:, off:off + Jslot.shape[-2], self.layout.slice(slot)] = Jslot
        return e, A

    def coo(self, X: ArrayLike) -> tuple:
        e, Js = self._evaluate(X[self.rows], "sparse")
        T, r = e.shape
        blocks, vv = [], []
        for k, (off, J) in enumerate(Js):
            for slot, block in J.items():
                if isinstance(block, StackedSparse):  # the kernels' own pattern
                    li, lj = block.pattern.rows, block.pattern.cols
                    vals = np.broadcast_to(block.values, (T, li.size))
                else:  # dense: its structural nonzeros
                    if self._pattern is None:
                        self._pattern = self._structure(X.shape[1])
                    li, lj = self._pattern[k][slot]
                    vals = np.broadcast_to(block, (T,) + np.shape(block)[-2:])[:, li, lj]
                blocks.append((off, slot, li, lj))
                vv.append(vals)
        key = (X.shape[1], tuple((off, slot, id(li), id(lj)) for off, slot, li, lj in blocks))
        if self._coo_index is None or self._coo_index[0] != key:
            ii, jj = [], []
            for off, slot, li, lj in blocks:
                ii.append((np.arange(T)[:, None] * r + off + li).ravel())
                jj.append((self.rows[:, None] * X.shape[1] + self.layout.offset(slot)
                           + lj).ravel())
            i = np.concatenate(ii)
            # (the pattern arrays are the mechanism's cached ones: their ids identify them)
            self._coo_index = (key, i, np.concatenate(jj), self.inv_sigma[i % r])
        _, i, j, wi = self._coo_index
        v = np.concatenate([a.ravel() for a in vv]) if len(vv) > 1 else vv[0].ravel()
        return i, j, v * wi, e * self.inv_sigma

    _coo_index = None

    _pattern = None

    def _structure(self, dim):
        """Where each family's Jacobian blocks can be nonzero: {slot: (i, j)} per family, the
        union of the nonzeros at two random step vectors (the kernels' zeros at a given
        state, e.g. dPhi_q/dt at rest, are not structural).  Gathering these entries costs
        the number of nonzeros, not rows x coordinates."""
        rng = np.random.default_rng(0)
        out = None
        for _ in range(2):
            _, Js = self._evaluate(rng.normal(size=(1, dim)), True)
            cur = [{slot: np.any(np.asarray(J[slot]).reshape((-1,) + np.shape(J[slot])[-2:])
                                 != 0, axis=0)
                    for slot in J} for _, J in Js]
            out = cur if out is None else [{k: a[k] | b[k] for k in a} for a, b in zip(out, cur)]
        return [{k: np.nonzero(m) for k, m in fam.items()} for fam in out]

    def error(self, X: ArrayLike) -> float:
        e, _ = self.residual(X[self.rows], jacobians=False)
        w = e * self.inv_sigma
        return 0.5 * float(np.sum(w * w))

    def blocks(self, X: ArrayLike) -> tuple:
        e, A = self.residual(X[self.rows], jacobians=True)
        w = self.inv_sigma
        A *= w[None, :, None]
        return self.rows[:, None], [A], e * w


# The residual families are shared with the per-step gtsam factors.
from mbfg.factors.residuals import (acceleration_constraints_residual,  # noqa: E402,F401
                                    dynamics_residual, equations_of_motion_residual,
                                    position_constraints_residual,
                                    redundant_multipliers_residual,
                                    velocity_constraints_residual)


__all__ = [
    "StackedTerm"
]
