"""Energy-consistent integrator links between consecutive steps (docs/theory.md, "The
energy-consistent trapezoidal graph"), vectorized over steps.

For every link k -> k+1 and the coordinates it integrates (the independent ones, chosen per
link, or the z slots of the independent formulation), with x = position, xd = velocity,
xdd = acceleration slots restricted to those coordinates:

* trapezoidal (Eq. 23)::

      r1 = x_{k+1} - x_k - dt/2 (xd_k + xd_{k+1})
      r2 = xd_{k+1} - xd_k - dt/2 (xdd_k + xdd_{k+1}) - alpha_{k+1} (xd_k + xd_{k+1}) / 2
      r3 = E(q_{k+1}, v_{k+1}) - E(q_k, v_k) - dt/4 (v_k + v_{k+1}) . (Q_k + Q_{k+1})

  with E = 1/2 v^T M v - Q_g^T q the mechanical energy (M constant and Q_g linear in
  natural coordinates) and Q the applied forces.  r3 is the discrete energy balance the
  unconstrained trapezoidal rule satisfies; ``alpha`` (one scalar slot per step) is the
  velocity rescaling that lets the step meet it while it also meets the constraints exactly.
* Euler (Eq. 22): r1 = x_{k+1} - x_k - dt xd_k, r2 = xd_{k+1} - xd_k - dt xdd_k (no energy
  row; alpha stays at its prior, zero).

Rows are whitened by the coordinates' scales (r1 / c, r2 dt / c, r3 / (m ell^2 / dt^2)), so
they are dimensionless (:mod:`mbfg.model.scales`).
"""
from __future__ import annotations

import numpy as np

from mbfg.solvers.batch import BatchTerm


class IntegratorLinks(BatchTerm):
    """Integrator (and energy) rows of the links ``rows0[t] -> rows0[t] + 1``.

    Parameters
    ----------
    layout : StepLayout
        Must have the slots named in ``slots`` and, for the trapezoidal rule, ``alpha``.
    rows0 : (T,) int
        First row of each link.
    dt : float
        Time step [s].
    scheme : "trapezoidal" or "euler"
    slots : (str, str, str)
        Position, velocity and acceleration slots integrated: ("q", "v", "a") or
        ("z", "zd", "zdd").
    indices : (T, d) int
        Components of those slots integrated by each link.
    scale : (T, d) float
        Scale of each integrated coordinate [m or rad].
    energy : tuple (M (n, n), Q_g (n,), Q (T + 1, n) or None, energy scale [J]) or None
        The energy row (trapezoidal only); Q are the applied forces at rows0[0] .. rows0[-1]+1.
    energy_rows : (T,) bool, optional
        Links that carry the energy row (default all); on the others it has zero weight and
        their alpha must be held by a prior.
    """

    def __init__(self, layout, rows0, dt, scheme, slots, indices, scale, energy=None,
                 energy_rows=None):
        self.layout = layout
        self.rows0 = np.asarray(rows0, int)
        self.dt = float(dt)
        if scheme not in ("trapezoidal", "euler"):
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {scheme!r}")
        self.scheme = scheme
        self.slots = slots
        self.indices = np.asarray(indices, int).reshape(self.rows0.size, -1)
        scale = np.broadcast_to(np.asarray(scale, float), self.indices.shape)
        self.weights = np.concatenate([1.0 / scale, self.dt / scale], axis=1)
        self.energy = energy if scheme == "trapezoidal" else None
        self.energy_rows = (np.ones(self.rows0.size, bool) if energy_rows is None
                            else np.asarray(energy_rows, bool))

    def _residual(self, X, jacobians):
        lay, dt, idx = self.layout, self.dt, self.indices
        T, d = idx.shape
        x0, x1 = X[self.rows0], X[self.rows0 + 1]
        offs = [lay.offset(s) for s in self.slots]
        p0 = [np.take_along_axis(x0, o + idx, axis=1) for o in offs]
        p1 = [np.take_along_axis(x1, o + idx, axis=1) for o in offs]
        trap = self.scheme == "trapezoidal"
        if trap:
            alpha = x1[:, lay.offset("alpha")]
            vbar = 0.5 * (p0[1] + p1[1])
            r1 = p1[0] - p0[0] - dt * vbar
            r2 = p1[1] - p0[1] - 0.5 * dt * (p0[2] + p1[2]) - alpha[:, None] * vbar
        else:
            r1 = p1[0] - p0[0] - dt * p0[1]
            r2 = p1[1] - p0[1] - dt * p0[2]
        rows = 2 * d + (self.energy is not None)
        e = np.empty((T, rows))
        e[:, :d], e[:, d:2 * d] = r1, r2
        if self.energy is not None:
            M, Qg, Q, _ = self.energy
            q0, q1 = x0[:, lay.slice("q")], x1[:, lay.slice("q")]
            v0, v1 = x0[:, lay.slice("v")], x1[:, lay.slice("v")]
            Qsum = 0.0 if Q is None else Q[:-1] + Q[1:]
            kin = 0.5 * (np.einsum("ti,ij,tj->t", v1, M, v1) - np.einsum("ti,ij,tj->t", v0, M, v0))
            work = 0.25 * dt * np.sum((v0 + v1) * Qsum, axis=1) if Q is not None else 0.0
            e[:, 2 * d] = kin - (q1 - q0) @ Qg - work
        if not jacobians:
            return e, None
        A0 = np.zeros((T, rows, lay.dim))
        A1 = np.zeros((T, rows, lay.dim))
        t = np.arange(T)[:, None]
        r = np.arange(d)[None, :]
        pos, vel, acc = (o + idx for o in offs)
        if trap:
            A0[t, r, pos], A1[t, r, pos] = -1.0, 1.0
            A0[t, r, vel] = A1[t, r, vel] = -0.5 * dt
            A0[t, d + r, vel] = -(1.0 + 0.5 * alpha)[:, None]
            A1[t, d + r, vel] = (1.0 - 0.5 * alpha)[:, None]
            A0[t, d + r, acc] = A1[t, d + r, acc] = -0.5 * dt
            A1[:, d:2 * d, lay.offset("alpha")] = -vbar
        else:
            A0[t, r, pos], A1[t, r, pos], A0[t, r, vel] = -1.0, 1.0, -dt
            A0[t, d + r, vel], A1[t, d + r, vel], A0[t, d + r, acc] = -1.0, 1.0, -dt
        if self.energy is not None:
            fw = 0.0 if Q is None else 0.25 * dt * Qsum
            A0[:, 2 * d, lay.slice("q")] = Qg
            A1[:, 2 * d, lay.slice("q")] = -Qg
            A0[:, 2 * d, lay.slice("v")] = -(v0 @ M) - fw
            A1[:, 2 * d, lay.slice("v")] = v1 @ M - fw
        return e, (A0, A1)

    def _row_weights(self):
        w = self.weights
        if self.energy is not None:
            w = np.concatenate([w, (self.energy_rows / self.energy[3])[:, None]], axis=1)
        return w

    def blocks(self, X):
        e, (A0, A1) = self._residual(X, True)
        w = self._row_weights()
        return (np.stack([self.rows0, self.rows0 + 1], axis=1),
                [A0 * w[:, :, None], A1 * w[:, :, None]], e * w)

    def error(self, X) -> float:
        e, _ = self._residual(X, False)
        e = e * self._row_weights()
        return 0.5 * float(np.sum(e * e))
