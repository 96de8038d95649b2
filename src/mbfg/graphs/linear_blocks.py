"""Linear factor families (Eqs. 21-23, f_eq, and the linear rows of Eqs. 30-32) on per-step
state vectors (:mod:`mbfg.graphs.layout`), vectorized over steps.

Each family has blocks that are the same for every step (computed once); per iteration only
the residual ``A x - b`` is evaluated for all steps with one numpy call, and each step's factor
is added natively with ``GaussianFactorGraph.add``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.graphs.batch_term import BatchTerm

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.graphs.layout import StepLayout


def _weights(sigma, d):
    return 1.0 / np.broadcast_to(np.asarray(sigma, float), (d,))


class UnaryLinear(BatchTerm):
    """``e_t = A x_{rows[t]} - b_t`` (A, b already whitened); b is (r,) or (T, r)."""

    def __init__(self, rows, A, b):
        self.rows = np.atleast_1d(np.asarray(rows, int))
        self.A = np.ascontiguousarray(A, float)
        self.b = np.asarray(b, float)

    def residual(self, X: ArrayLike) -> np.ndarray:
        return X[self.rows] @ self.A.T - self.b

    def error(self, X: ArrayLike) -> float:
        e = self.residual(X)
        return 0.5 * float(np.sum(e * e))

    def blocks(self, X: ArrayLike) -> tuple:
        e = self.residual(X)
        return self.rows[:, None], [self.A[None]], e


class BinaryLinear(BatchTerm):
    """``e_t = A0 x_{rows0[t]} + A1 x_{rows1[t]}`` (whitened, zero right-hand side)."""

    arity = 2

    def __init__(self, rows0, rows1, A0, A1):
        self.rows0 = np.asarray(rows0, int)
        self.rows1 = np.asarray(rows1, int)
        self.A0 = np.ascontiguousarray(A0, float)
        self.A1 = np.ascontiguousarray(A1, float)

    def residual(self, X: ArrayLike) -> np.ndarray:
        return X[self.rows0] @ self.A0.T + X[self.rows1] @ self.A1.T

    def error(self, X: ArrayLike) -> float:
        e = self.residual(X)
        return 0.5 * float(np.sum(e * e))

    def blocks(self, X: ArrayLike) -> tuple:
        e = self.residual(X)
        return np.stack([self.rows0, self.rows1], axis=1), [self.A0[None], self.A1[None]], e


def prior(
    layout: StepLayout, row: int, slot: str, mean: ArrayLike, sigma: ArrayLike
) -> UnaryLinear:
    """f_prior (Eq. 21) on one slot of the step at ``row``: e = x_slot - mean.  ``sigma``
    scalar or per component (``np.inf`` leaves a component unconstrained)."""
    mean = np.asarray(mean, float)
    w = _weights(sigma, mean.size)
    return UnaryLinear([row], w[:, None] * layout.selector(slot), w * mean)


def _selector(layout: StepLayout, slot: str | tuple) -> np.ndarray:
    """``layout.selector`` of a slot name, or the rows ``indices`` of it for
    ``(name, indices)``."""
    if isinstance(slot, str):
        return layout.selector(slot)
    name, indices = slot
    return layout.selector(name)[np.asarray(indices, int)]


def step_links(
    layout: StepLayout,
    rows: ArrayLike,
    dt: float,
    integrators: list,
    sigma_integrator: ArrayLike,
    *,
    scheme: str = "trapezoidal",
    equalities: list | tuple = (),
    sigma_equality: float = 1.0,
) -> BinaryLinear:
    """All linear factors between consecutive steps ``rows[i]`` and ``rows[i] + 1``.

    integrators : sequence of (x_slot, xdot_slot) pairs, or (x_slot, xdot_slot, xddot_slot)
        triples for ``scheme="hermite"``; a slot is a name or ``(name, indices)``, some of
        its components (the slots of one integrator select equally many)
        f_ti (Eq. 23): x_{k+1} - x_k - dt/2 (xdot_k + xdot_{k+1}), f_ei (Eq. 22):
        x_{k+1} - x_k - dt xdot_k, or the fourth-order Hermite rule
        x_{k+1} - x_k - dt/2 (xdot_k + xdot_{k+1}) + dt^2/12 (xddot_{k+1} - xddot_k)
        (local error dt^5/720 times the fifth derivative of x), by ``scheme``.
    sigma_integrator : scalar, (d,) or (len(integrators), d)
        Their sigmas [units of each x_slot]: one for all, one per component, or one row per
        integrator pair (e.g. positions and velocities, whose units differ).
    equalities : sequence of slots
        f_eq: x_{k+1} - x_k (soft continuity), with ``sigma_equality``.
    """
    rows0, rows1, ws = [], [], []
    sig = np.asarray(sigma_integrator, float)
    for i, (xs, xds, *xdds) in enumerate(integrators):
        S, Sd = _selector(layout, xs), _selector(layout, xds)
        if scheme == "hermite":
            Sdd = _selector(layout, xdds[0])
            rows0.append(-S - 0.5 * dt * Sd - dt * dt / 12.0 * Sdd)
            rows1.append(S - 0.5 * dt * Sd + dt * dt / 12.0 * Sdd)
        elif scheme == "trapezoidal":
            rows0.append(-S - 0.5 * dt * Sd)
            rows1.append(S - 0.5 * dt * Sd)
        elif scheme == "euler":
            rows0.append(-S - dt * Sd)
            rows1.append(S)
        else:
            raise ValueError(
                f"integrator must be 'trapezoidal', 'euler' or 'hermite', got {scheme!r}")
        ws.append(_weights(sig[i] if sig.ndim == 2 else sig, S.shape[0]))
    for s in equalities:
        S = layout.selector(s)
        rows0.append(-S)
        rows1.append(S)
        ws.append(_weights(sigma_equality, S.shape[0]))
    w = np.concatenate(ws)[:, None]
    rows = np.asarray(rows, int)
    return BinaryLinear(rows, rows + 1, w * np.vstack(rows0), w * np.vstack(rows1))


def selections(
    layout: StepLayout, rows: ArrayLike, pairs: list, indices: ArrayLike, sigma: ArrayLike
) -> UnaryLinear:
    """Linear rows x_slot[indices] - z_slot of Eqs. 30-32 for (x_slot, z_slot) pairs."""
    idx = np.asarray(indices, int)
    A = np.vstack([layout.selector(xs)[idx] - layout.selector(zs) for xs, zs in pairs])
    return UnaryLinear(rows, _weights(sigma, A.shape[0])[:, None] * A, np.zeros(A.shape[0]))


__all__ = [
    "UnaryLinear", "BinaryLinear", "prior", "step_links", "selections"
]
