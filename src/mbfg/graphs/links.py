"""Integrator links between consecutive steps of the square simulation graph (docs/theory.md,
"Forward dynamics: the square simulation graph"), vectorized over steps.

For every link k -> k+1 and the coordinates it integrates (the independent ones, chosen per
link, or the z slots of the independent formulation), with x = position, xd = velocity,
xdd = acceleration slots restricted to those coordinates:

* trapezoidal (Eq. 23)::

      r1 = x_{k+1} - x_k - dt/2 (xd_k + xd_{k+1})
      r2 = xd_{k+1} - xd_k - dt/2 (xdd_k + xdd_{k+1}) - alpha_{k+1} (xd_k + xd_{k+1}) / 2
      r3 = E(q_{k+1}, v_{k+1}) - E(q_k, v_k) - dt/4 (v_k + v_{k+1}) . (Q_k + Q_{k+1})

  (Q_k includes the friction forces at step k, Q_f(q_k, v_k), when the mechanism has any)

  with E = 1/2 v^T M v - Q_g^T q the mechanical energy (M constant and Q_g linear in
  natural coordinates) and Q the applied forces.  r3 is the discrete energy balance the
  unconstrained trapezoidal rule satisfies; ``alpha`` (one scalar slot per step) is the
  velocity rescaling that lets the step meet it while it also meets the constraints exactly.
* hermite (Eq. 23 with the end corrections of the two-point Hermite quadrature, fourth
  order)::

      r1 = x_{k+1} - x_k - dt/2 (xd_k + xd_{k+1}) + dt^2/12 (xdd_{k+1} - xdd_k)
      r2 = xd_{k+1} - xd_k - dt/2 (xdd_k + xdd_{k+1}) + dt^2/12 (xddd_{k+1} - xddd_k)
           [- alpha_{k+1} (xd_k + xd_{k+1}) / 2]
      [r3 = E(q_{k+1}, v_{k+1}) - E(q_k, v_k)]

  with xddd the jerk of the model at each step (``jerk``), held constant in the
  linearization (its derivatives are O((omega dt)^2) of the rows') unless the links are
  asked to linearize it exactly (:meth:`IntegratorLinks.linearize_exactly`).  The energy row
  and alpha only where every force has a potential (``energy`` given: gravity and constant
  applied forces in E, no friction); elsewhere alpha stays at its prior.
* Euler (Eq. 22): r1 = x_{k+1} - x_k - dt xd_k, r2 = xd_{k+1} - xd_k - dt xdd_k (no energy
  row; alpha stays at its prior, zero).

Rows are whitened by the coordinates' scales (r1 / c, r2 dt / c, r3 / (m ell^2 / dt^2)), so
they are dimensionless (:mod:`mbfg.model.scales`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

from mbfg.graphs import INTEGRATORS
from mbfg.graphs.batch_term import BatchTerm

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

EPS = float(np.finfo(float).eps)
#: ranges of at most this many links keep templates of their constant Jacobian entries
TEMPLATE_MAX_LINKS = 64
#: working memory [bytes] of the jerk's exact derivatives: they are evaluated for as many
#: states at a time as fit, counting JERK_JACOBIAN_ARRAYS arrays (n, 2n) per state (the
#: derivatives at three states and the kernels' temporaries)
JERK_JACOBIAN_BYTES = 2 ** 27
JERK_JACOBIAN_ARRAYS = 12


class EnergyBalance(NamedTuple):
    """What the energy row of a range of links needs: the mechanism's energy and the forces
    that do work, at the links' distinct steps (a contiguous range)."""
    mass_times: Callable
    """v (..., n) -> M v: the constant mass matrix of natural coordinates."""
    gravity: np.ndarray
    """(n,) constant generalized forces with a potential (gravity, and with the Hermite
    rule also constant applied forces): E = 1/2 v M v - gravity . q."""
    forces: np.ndarray | None
    """(S, n) applied generalized forces at the steps (trapezoidal rule only), or None."""
    scale: float
    """Energy scale of the row [J] (m ell^2 / dt^2, :mod:`mbfg.model.scales`)."""
    friction: Callable | None = None
    """(q, v) (S, n) -> (Q_f, dQ_f/dq, dQ_f/dv) of state-dependent forces
    (:func:`mbfg.model.nonconservative.friction_force_jacobians`; trapezoidal rule only),
    or None."""


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
    scheme : "hermite", "trapezoidal" or "euler"
    slots : (str, str, str)
        Position, velocity and acceleration slots integrated: ("q", "v", "a") or
        ("z", "zd", "zdd").
    indices : (T, d) int
        Components of those slots integrated by each link.
    scale : (T, d) float
        Scale of each integrated coordinate [m or rad].
    energy : EnergyBalance, optional
        The energy row (rows0 must be contiguous): its forces are those at rows0[0] ..
        rows0[-1] + 1.  With the Hermite rule, only for conservative forces (no ``forces``,
        no ``friction``; constant applied forces go into ``gravity``).
    energy_rows : (T,) bool, optional
        Links that carry the energy row (default all); on the others it has zero weight and
        their alpha must be held by a prior.
    jerk : callable (rows (S,), X[rows] (S, dim)) -> (S, n), required by "hermite"
        The jerk [m/s^3, rad/s^3] of every coordinate at the given rows of the step array.
    jerk_columns : (T, d) int, optional
        The coordinates of that jerk the links integrate (default ``indices``).
    jerk_step : float, optional
        The time step h [s] of the jerk's central difference: its rounding error, about
        eps |xdd| / h, is the floor of :meth:`held_change`.
    jerk_jacobian : callable (rows (S,), X[rows] (S, dim)) -> (S, n, 2n), optional
        The derivatives of that jerk with respect to (q, v) at the given rows
        (:func:`mbfg.model.dynamics.jerk_jacobians`): with them the links can be linearized
        exactly (:meth:`linearize_exactly`) instead of holding the jerk constant.
    """

    arity = 2

    def __init__(self, layout, rows0, dt, scheme, slots, indices, scale, energy=None,
                 energy_rows=None, jerk=None, jerk_columns=None, jerk_step=None,
                 jerk_jacobian=None):
        self.layout = layout
        self.rows0 = np.asarray(rows0, int)
        self.dt = float(dt)
        if scheme not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {', '.join(INTEGRATORS)}, "
                             f"got {scheme!r}")
        if scheme == "hermite" and jerk is None:
            raise ValueError("the hermite rule needs the jerk of the integrated coordinates")
        self.jerk, self.jerk_step, self.jerk_jacobian = jerk, jerk_step, jerk_jacobian
        self.exact = False  # hermite: linearize the jerk terms (else hold them constant)
        self._jerk_memo: dict = {}  # X -> jerk terms, for the last few X
        self._jerk_flat = None  # flat indices of the integrated jerk at both ends
        # the distinct steps the links touch (consecutive links share one) and each link's
        # two ends among them
        self._rows1 = self.rows0 + 1
        self._steps, inv = np.unique(np.concatenate([self.rows0, self._rows1]),
                                     return_inverse=True)
        self._ends = (inv[:self.rows0.size], inv[self.rows0.size:])
        self.scheme = scheme
        self.energy = energy if scheme in ("trapezoidal", "hermite") else None
        if scheme == "hermite" and energy is not None and (energy.forces is not None
                                                          or energy.friction is not None):
            raise ValueError("the hermite rule's energy row is for conservative forces only")
        idx = np.asarray(indices, int).reshape(self.rows0.size, -1)
        T, d = idx.shape
        scale = np.broadcast_to(np.asarray(scale, float), idx.shape)
        rows = 2 * d + (self.energy is not None)
        w = np.empty((T, rows))
        w[:, :d], w[:, d:2 * d] = 1.0 / scale, dt / scale
        if self.energy is not None:
            on = np.ones(T, bool) if energy_rows is None else np.asarray(energy_rows, bool)
            w[:, 2 * d] = on / self.energy.scale
        self.weights = w
        # constant (unweighted) coefficients of the integrator rows on x_k and x_{k+1}, as
        # entry lists (t, row, column, value) per end, so that nothing of size T x rows x dim
        # is formed unless dense blocks are asked for; what depends on the state (alpha
        # terms, energy row) is filled in by ``_linearization`` and ``coo``
        pos, vel, acc = (layout.offset(name) + idx for name in slots)
        self._t, self._r = np.arange(T)[:, None], np.arange(d)[None, :]
        t, r = np.broadcast_to(self._t, idx.shape), np.broadcast_to(self._r, idx.shape)
        ends = ([], [])  # (t, row, column, value) pieces on x_k and on x_{k+1}
        for end, sign in ((0, -1.0), (1, 1.0)):
            ends[end].append((t, r, pos, sign))
            ends[end].append((t, d + r, vel, sign))
        if scheme in ("trapezoidal", "hermite"):
            for end in (0, 1):
                ends[end].append((t, r, vel, -0.5 * self.dt))
                ends[end].append((t, d + r, acc, -0.5 * self.dt))
            if scheme == "hermite":  # + dt^2/12 (xdd_{k+1} - xdd_k) in r1
                for end, sign in ((0, -1.0), (1, 1.0)):
                    ends[end].append((t, r, acc, sign * self.dt ** 2 / 12.0))
        else:
            ends[0].append((t, r, vel, -self.dt))
            ends[0].append((t, d + r, acc, -self.dt))
        self._const = [tuple(np.concatenate([np.broadcast_to(p[c], idx.shape).ravel()
                                             for p in pieces]) for c in range(4))
                       for pieces in ends]
        self._vel, self._acc, self._d, self._rows = vel, acc, d, rows
        self._pairs = np.stack([self.rows0, self._rows1], axis=1)
        self._pairs.flags.writeable = False
        self._templates: dict = {}  # dim -> the constant entries of (A0, A1), (T, rows, dim)
        self._qv = np.r_[layout.slice("q"), layout.slice("v")]  # the jerk's arguments
        self.jerk_columns = idx if jerk_columns is None else np.asarray(jerk_columns, int)

    def _constant_residual(self, X):
        """The constant coefficients' part of the unweighted residual, (T, rows), with the
        hermite rule's jerk terms (held constant in the linearization)."""
        T = self.rows0.size
        e = np.zeros(T * self._rows)
        for shift, (t, i, j, v) in enumerate(self._const):
            e += np.bincount(t * self._rows + i, weights=v * X[self.rows0[t] + shift, j],
                             minlength=e.size)
        e = e.reshape(T, self._rows)
        if self.scheme == "hermite":
            e[:, self._d:2 * self._d] += self._jerk_terms(X)
        return e

    def linearize_exactly(self, on: bool = True) -> bool:
        """Linearize the Hermite rule's jerk terms with their exact derivatives (``on``) or
        hold them constant (the default: their derivatives are O((omega dt)^2) of the rows',
        so Newton converges nearly as fast, at a third of the cost).  A fast motion, whose
        held iteration converges only slowly, needs them.  Returns whether the mode
        changed (False for the other rules, or without ``jerk_jacobian``)."""
        on = bool(on) and self.scheme == "hermite" and self.jerk_jacobian is not None
        changed, self.exact = on != self.exact, on
        return changed

    def _jerk_terms(self, X):
        """The Hermite rule's dt^2/12 (xddd_{k+1} - xddd_k) of every link, (T, d)."""
        return self._jerk_parts(X, False)[0]

    def _jerk_parts(self, X, derivatives):
        """The jerk terms (T, d) and, with ``derivatives``, their Jacobians (dt^2/12 times
        those of the jerk at either end: (T, d, 2n) on (q_k, v_k) and on (q_{k+1}, v_{k+1}),
        else None), remembered for the last few X (a solve evaluates the error, the
        linearization and the convergence tests at the same iterate)."""
        X = np.asarray(X)
        key = (X.shape, X.tobytes())
        parts = self._jerk_memo.get(key)
        if parts is None or (derivatives and parts[1] is None):
            steps = self._steps
            J = self.jerk(steps, X[steps])                               # (S, n)
            cols, c = self.jerk_columns, self.dt ** 2 / 12.0
            i0, i1 = self._ends[0][:, None], self._ends[1][:, None]
            dJ = None
            if derivatives:  # (their jerk is recomputed there; J stays the held value, so
                # that the residual does not change with the mode)
                dJ = self._jerk_derivatives(X, J.shape[1])
            if len(self._jerk_memo) >= 4:
                self._jerk_memo.pop(next(iter(self._jerk_memo)))
            if self._jerk_flat is None:  # flat indices of J[i0, cols] and J[i1, cols]
                n = J.shape[1]
                self._jerk_flat = (i0 * n + cols, i1 * n + cols)
            f0, f1 = self._jerk_flat
            parts = self._jerk_memo[key] = (c * (J.take(f1) - J.take(f0)), dJ)
        return parts

    def _jerk_derivatives(self, X, n):
        """dt^2/12 times the jerk's derivatives with respect to (q, v) at the start and at
        the end of every link, restricted to the integrated coordinates: two (T, d, 2n).
        The model's derivatives (n, 2n) per state, and its kernels' temporaries, are formed
        for at most ``JERK_JACOBIAN_BYTES`` worth of states at a time (a batch segment of a
        large mechanism would otherwise need gigabytes)."""
        steps, cols, c = self._steps, self.jerk_columns, self.dt ** 2 / 12.0
        chunk = max(1, JERK_JACOBIAN_BYTES // (JERK_JACOBIAN_ARRAYS * 8 * 2 * n * n))
        if steps.size <= chunk:
            dJ = c * self.jerk_jacobian(steps, X[steps])                 # (S, n, 2n)
            return tuple(dJ[ends[:, None], cols] for ends in self._ends)
        out = tuple(np.empty(cols.shape + (2 * n,)) for _ in range(2))
        for lo in range(0, steps.size, chunk):
            part = steps[lo:lo + chunk]
            dJ = c * self.jerk_jacobian(part, X[part])
            for o, ends in zip(out, self._ends):
                t = np.flatnonzero((ends >= lo) & (ends < lo + part.size))
                o[t] = dJ[ends[t, None] - lo, cols[t]]
        return out

    def _linearization(self, X, jacobians=True):
        """Unweighted residual (T, rows) and, if asked, dense Jacobian blocks on x_k and
        x_{k+1}, each (T, rows, dim)."""
        lay, d, t = self.layout, self._d, self._t
        x0, x1 = X[self.rows0], X[self._rows1]
        e = self._constant_residual(X)
        A0 = A1 = None
        if jacobians:
            A0, A1 = self._constant_blocks(X.shape[1])
        if jacobians and self.exact:
            dJ0, dJ1 = self._jerk_parts(X, True)[1]
            A0[:, d:2 * d, self._qv] -= dJ0
            A1[:, d:2 * d, self._qv] += dJ1
        if self.energy is not None:
            alpha = x1[:, lay.offset("alpha")]
            vbar = 0.5 * (x0[t, self._vel] + x1[t, self._vel])
            e[:, d:2 * d] -= alpha[:, None] * vbar
            if jacobians:
                A0[t, d + self._r, self._vel] -= 0.5 * alpha[:, None]
                A1[t, d + self._r, self._vel] -= 0.5 * alpha[:, None]
                A1[:, d:2 * d, lay.offset("alpha")] = -vbar
        if self.energy is not None:
            e[:, 2 * d], grads = self._energy(X, x0, x1, jacobians)
            if jacobians:
                for A, (gq, gv) in ((A0, grads[:2]), (A1, grads[2:])):
                    A[:, 2 * d, lay.slice("q")] = gq
                    A[:, 2 * d, lay.slice("v")] = gv
        return e, A0, A1

    def _constant_blocks(self, dim):
        """New arrays (T, rows, dim) holding the constant entries of the Jacobian blocks on
        x_k and x_{k+1}: copies of templates kept for short ranges (a fixed-lag window,
        linearized at every iterate), built afresh for long ones (a batch segment, whose
        templates would double the blocks' memory)."""
        blocks = self._templates.get(dim)
        if blocks is None:
            blocks = tuple(np.zeros((self.rows0.size, self._rows, dim)) for _ in range(2))
            for A, (tt, i, j, v) in zip(blocks, self._const):
                A[tt, i, j] = v  # the entries of one end are distinct
            if self.rows0.size > TEMPLATE_MAX_LINKS:
                return blocks
            self._templates[dim] = blocks
        return tuple(A.copy() for A in blocks)

    def _energy(self, X, x0, x1, jacobians):
        """The energy row r3 (T,) and, if asked, its gradients (T, n) with respect to q_k,
        v_k, q_{k+1}, v_{k+1} (else None)."""
        lay, dt, en = self.layout, self.dt, self.energy
        M, Qg, Q, friction = en.mass_times, en.gravity, en.forces, en.friction
        q0, q1 = x0[:, lay.slice("q")], x1[:, lay.slice("q")]
        v0, v1 = x0[:, lay.slice("v")], x1[:, lay.slice("v")]
        Mv0, Mv1 = M(v0), M(v1)
        fw = None if Q is None else 0.25 * dt * (Q[:-1] + Q[1:])  # (None: no work done)
        if friction is not None:  # state-dependent forces: Q_f(q_k, v_k), Q_f(q_k+1, ...)
            # once per distinct step (consecutive links share one)
            steps, (i0, i1) = self._steps, self._ends
            Fq, Fdq, Fdv = friction(X[steps, lay.slice("q")], X[steps, lay.slice("v")])
            F0, F1 = (Fq[i0], Fdq[i0], Fdv[i0]), (Fq[i1], Fdq[i1], Fdv[i1])
            work = 0.25 * dt * (F0[0] + F1[0])
            fw = work if fw is None else fw + work
        r3 = 0.5 * ((v1 * Mv1).sum(axis=1) - (v0 * Mv0).sum(axis=1)) - (q1 - q0) @ Qg
        if fw is not None:
            r3 -= ((v0 + v1) * fw).sum(axis=1)
        if not jacobians:
            return r3, None
        gq0 = np.empty_like(q0)
        gq0[:] = Qg
        gq1 = -gq0
        gv0, gv1 = (-Mv0, Mv1) if fw is None else (-Mv0 - fw, Mv1 - fw)
        if friction is not None:
            vs = 0.25 * dt * (v0 + v1)
            gq0 -= np.einsum("ti,tij->tj", vs, F0[1])
            gv0 -= np.einsum("ti,tij->tj", vs, F0[2])
            gq1 -= np.einsum("ti,tij->tj", vs, F1[1])
            gv1 -= np.einsum("ti,tij->tj", vs, F1[2])
        return r3, (gq0, gv0, gq1, gv1)

    def held_change(self, X0: ArrayLike, X1: ArrayLike) -> float:
        """The largest whitened change of the rows' parts that the linearization holds
        constant, between X0 and X1: the Hermite rule's jerk terms (0 for the other rules,
        and when they are linearized exactly)."""
        if self.scheme != "hermite" or self.exact:
            return 0.0
        change = np.abs(self._jerk_terms(X1) - self._jerk_terms(X0))
        if self.jerk_step:  # less the difference's rounding error at both ends, both states
            X1 = np.asarray(X1)
            acc = (np.abs(X1[self.rows0[:, None], self._acc])
                   + np.abs(X1[self._rows1[:, None], self._acc]))
            change = np.maximum(change - self.dt ** 2 / 12.0 * 16.0 * EPS
                                / self.jerk_step * acc, 0.0)
        change *= self.weights[:, self._d:2 * self._d]
        return float(change.max()) if change.size else 0.0

    def coo(self, X: ArrayLike) -> tuple:
        """Sparse linearization (:meth:`BatchTerm.coo`): the constant integrator entries,
        the alpha terms and the energy row, without forming (rows x dim) blocks."""
        T, rows = self.weights.shape
        dim, lay, d = X.shape[1], self.layout, self._d
        ii, jj, vv = [], [], []
        for shift, (t, i, j, v) in enumerate(self._const):
            ii.append(t * rows + i)
            jj.append((self.rows0[t] + shift) * dim + j)
            vv.append(v)
        e = self._constant_residual(X)
        x0, x1 = X[self.rows0], X[self._rows1]
        t = self._t
        if self.energy is not None:
            alpha = x1[:, lay.offset("alpha")]
            r = t * rows + d + self._r                                   # (T, d)
            half = np.broadcast_to(-0.5 * alpha[:, None], r.shape)
            vbar = 0.5 * (x0[t, self._vel] + x1[t, self._vel])
            base0, base1 = (self.rows0 * dim)[:, None], (self._rows1 * dim)[:, None]
            ii += [r.ravel()] * 3
            jj += [(base0 + self._vel).ravel(), (base1 + self._vel).ravel(),
                   np.broadcast_to(base1 + lay.offset("alpha"), r.shape).ravel()]
            vv += [half.ravel(), half.ravel(), -vbar.ravel()]
            e[:, d:2 * d] -= alpha[:, None] * vbar
        if self.exact:
            r = (t * rows + d + self._r)[:, :, None]                     # (T, d, 1)
            for shift, (sign, dJ) in enumerate(zip((-1.0, 1.0), self._jerk_parts(X, True)[1])):
                cols = ((self.rows0 + shift) * dim)[:, None, None] + self._qv
                ii.append(np.broadcast_to(r, dJ.shape).ravel())
                jj.append(np.broadcast_to(cols, dJ.shape).ravel())
                vv.append(sign * dJ.ravel())
        if self.energy is not None:
            e[:, 2 * d], grads = self._energy(X, x0, x1, True)
            r = np.arange(T)[:, None] * rows + 2 * d
            for shift, (gq, gv) in enumerate((grads[:2], grads[2:])):
                base = ((self.rows0 + shift) * dim)[:, None]
                for name, g in (("q", gq), ("v", gv)):
                    cols = base + lay.offset(name) + np.arange(g.shape[1])
                    ii.append(np.broadcast_to(r, cols.shape).ravel())
                    jj.append(cols.ravel())
                    vv.append(g.ravel())
        i = np.concatenate(ii)
        w = self.weights
        return i, np.concatenate(jj), np.concatenate(vv) * w.ravel()[i], e * w

    def blocks(self, X: ArrayLike) -> tuple:
        e, A0, A1 = self._linearization(X)
        w = self.weights
        A0 *= w[:, :, None]
        A1 *= w[:, :, None]
        return self._pairs, [A0, A1], e * w

    def whitened_residuals(self, X: ArrayLike) -> np.ndarray:
        """The whitened residual (T, rows) of every link at X."""
        return self._linearization(X, jacobians=False)[0] * self.weights

    def error(self, X: ArrayLike) -> float:
        e = self.whitened_residuals(X)
        return 0.5 * float(np.sum(e * e))


__all__ = [
    "EnergyBalance", "IntegratorLinks"
]
