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

    def residual(self, Xs: ArrayLike, jacobians: bool = True) -> tuple:
        """Stacked unwhitened residuals (T, r) and Jacobians (T, r, dim) of step vectors Xs."""
        parts = self.layout.unpack(Xs)
        es, As = [], []
        T = Xs.shape[0]
        for f, _ in self.residuals:
            e, J = f(parts, jacobians=jacobians)
            es.append(e)
            if jacobians:
                A = np.zeros((T, e.shape[1], self.layout.dim))
                for slot, Js in J.items():
                    A[:, :, self.layout.slice(slot)] = Js
                As.append(A)
        self._weights(es)
        e = np.concatenate(es, axis=1)
        return e, (np.concatenate(As, axis=1) if jacobians else None)

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
                                    dynamics_residual, position_constraints_residual,
                                    velocity_constraints_residual)


__all__ = [
    "StackedTerm"
]
