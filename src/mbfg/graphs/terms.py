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

import gtsam
import numpy as np

from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.solvers.batch import BatchTerm
from mbfg.solvers.gaussian import unit_noise


def read_vectors(values, keys) -> np.ndarray:
    """Stack the vectors of ``keys`` from a ``VectorValues`` (or ``Values``) into (T, dim)."""
    get = values.at if isinstance(values, gtsam.VectorValues) else values.atVector
    return np.stack([get(int(k)) for k in keys])


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

    def residual(self, Xs, jacobians=True):
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

    def error(self, X) -> float:
        e, _ = self.residual(X[self.rows], jacobians=False)
        w = e * self.inv_sigma
        return 0.5 * float(np.sum(w * w))

    def linearize(self, X, keys, out) -> float:
        e, A = self.residual(X[self.rows], jacobians=True)
        w = self.inv_sigma
        b = -(e * w)
        A *= w[None, :, None]
        model = unit_noise(b.shape[1])
        for t, r in enumerate(self.rows):
            out.add(keys[r], A[t], b[t], model)
        return 0.5 * float(np.sum(b * b))


# ------------------------------------------------------------------ residual families

def position_constraints_residual(mech):
    """f_pc (Eq. 24 / nonlinear rows of Eq. 30): Phi(q)."""
    def f(p, jacobians=True):
        q = p["q"]
        e = C.position_constraints(mech, q)
        return e, ({"q": C.constraint_jacobian(mech, q)} if jacobians else None)
    return f


def velocity_constraints_residual(mech):
    """f_vc (Eq. 25 / nonlinear rows of Eq. 31): Phi_q(q) v."""
    def f(p, jacobians=True):
        q, v = p["q"], p["v"]
        J = C.constraint_jacobian(mech, q)
        e = np.einsum("tkn,tn->tk", J, v)
        return e, ({"q": C.constraint_jacobian_dot(mech, q, v), "v": J} if jacobians else None)
    return f


def acceleration_constraints_residual(mech):
    """f_ac (nonlinear rows of Eq. 32): dPhi_q/dt v + Phi_q a."""
    def f(p, jacobians=True):
        q, v, a = p["q"], p["v"], p["a"]
        J = C.constraint_jacobian(mech, q)
        Jdot = C.constraint_jacobian_dot(mech, q, v)
        e = np.einsum("tkn,tn->tk", Jdot, v) + np.einsum("tkn,tn->tk", J, a)
        if not jacobians:
            return e, None
        return e, {"q": C.acceleration_bias_jacobian(mech, q, v) + C.hessian_times(mech, q, a),
                   "v": 2.0 * Jdot, "a": J}
    return f


def dynamics_residual(mech, *, forces=None, force_slot=None, accel_slot="a", indices=None,
                      baumgarte=None):
    """Dynamics factors: qddot(q, v, Q) - a (f_dyn^d Eq. 26, f_idyn^d Eq. 28), or with
    ``indices`` zddot(q, v, Q) - zdd (f_dyn^i Eq. 27, f_idyn^i Eq. 29; ``accel_slot="zdd"``).

    Q is ``forces`` (known: None, (n,) or (T, n)) or the variable slot ``force_slot``."""
    idx = None if indices is None else np.asarray(indices, int)

    def f(p, jacobians=True):
        q, v, acc = p["q"], p["v"], p[accel_slot]
        Q = p[force_slot] if force_slot else forces
        if not jacobians:
            qdd = D.forward_dynamics(mech, q, v, Q, baumgarte=baumgarte)
            return (qdd if idx is None else qdd[:, idx]) - acc, None
        dyn = D.forward_dynamics_jacobians(mech, q, v, Q, baumgarte=baumgarte)
        sel = (lambda M: M) if idx is None else (lambda M: M[:, idx])
        e = sel(dyn.qdd) - acc
        k = e.shape[1]
        J = {"q": sel(dyn.d_q), "v": sel(dyn.d_qd),
             accel_slot: np.broadcast_to(-np.eye(k), (q.shape[0], k, k))}
        if force_slot:
            J[force_slot] = sel(dyn.d_Q)
        return e, J
    return f
