"""Absolute-form Gaussian factors of the linear factors (Eqs. 21-23, f_eq, and the linear rows
of Eqs. 30-32) on per-step state vectors (:mod:`mbfg.graphs.layout`).

Each is ``0.5 ||W (A x - b)||^2`` on the step variables themselves (not on increments), built
once and never relinearized.
"""
from __future__ import annotations

import numpy as np

from mbfg.solvers.gaussian import gaussian_factor, unit_noise


def _weights(sigma, d):
    return 1.0 / np.broadcast_to(np.asarray(sigma, float), (d,))


def prior(layout, k: int, slot: str, mean, sigma):
    """f_prior (Eq. 21) on one slot of step k: e = x_slot - mean.  ``sigma`` scalar or per
    component (``np.inf`` leaves a component unconstrained)."""
    mean = np.asarray(mean, float)
    w = _weights(sigma, mean.size)
    return gaussian_factor([layout.key(k)], [w[:, None] * layout.selector(slot)], w * mean)


class StepLink:
    """All linear factors between steps k and k+1 as one binary factor on (x_k, x_{k+1}).

    The blocks are the same for every k, so they are computed once; :meth:`add` appends the
    factor of step k to a ``GaussianFactorGraph`` natively.

    integrators : sequence of (x_slot, xdot_slot) pairs
        f_ti (Eq. 23): x_{k+1} - x_k - dt/2 (xdot_k + xdot_{k+1}), or f_ei (Eq. 22):
        x_{k+1} - x_k - dt xdot_k, by ``scheme``.
    equalities : sequence of slots
        f_eq: x_{k+1} - x_k (soft continuity), with ``sigma_equality``.
    """

    def __init__(self, layout, dt: float, integrators, sigma_integrator, *,
                 scheme="trapezoidal", equalities=(), sigma_equality=1.0):
        self.layout = layout
        self.A0, self.A1 = _link_blocks(layout, dt, integrators, sigma_integrator, scheme,
                                        equalities, sigma_equality)
        self.b = np.zeros(self.A0.shape[0])
        self.model = unit_noise(self.A0.shape[0])

    def add(self, graph, k: int):
        graph.add(self.layout.key(k), self.A0, self.layout.key(k + 1), self.A1, self.b, self.model)

    def factor(self, k: int):
        return gaussian_factor([self.layout.key(k), self.layout.key(k + 1)], [self.A0, self.A1],
                               self.b)


def _link_blocks(layout, dt, integrators, sigma_integrator, scheme, equalities, sigma_equality):
    rows0, rows1, ws = [], [], []
    for xs, xds in integrators:
        S, Sd = layout.selector(xs), layout.selector(xds)
        if scheme == "trapezoidal":
            rows0.append(-S - 0.5 * dt * Sd)
            rows1.append(S - 0.5 * dt * Sd)
        elif scheme == "euler":
            rows0.append(-S - dt * Sd)
            rows1.append(S)
        else:
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {scheme!r}")
        ws.append(_weights(sigma_integrator, S.shape[0]))
    for s in equalities:
        S = layout.selector(s)
        rows0.append(-S)
        rows1.append(S)
        ws.append(_weights(sigma_equality, S.shape[0]))
    w = np.concatenate(ws)
    return w[:, None] * np.vstack(rows0), w[:, None] * np.vstack(rows1)


class Selections:
    """Linear rows x_slot[indices] - z_slot of Eqs. 30-32 for (x_slot, z_slot) pairs: a unary
    factor on x_k with the same block for every k."""

    def __init__(self, layout, pairs, indices, sigma):
        idx = np.asarray(indices, int)
        A = np.vstack([layout.selector(xs)[idx] - layout.selector(zs) for xs, zs in pairs])
        self.layout = layout
        self.A = _weights(sigma, A.shape[0])[:, None] * A
        self.b = np.zeros(A.shape[0])
        self.model = unit_noise(A.shape[0])

    def add(self, graph, k: int):
        graph.add(self.layout.key(k), self.A, self.b, self.model)
