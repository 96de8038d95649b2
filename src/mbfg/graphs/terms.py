"""Vectorized factor families for the batch drivers (:class:`mbfg.solvers.batch.BatchTerm`).

Each term evaluates one family of nonlinear factors for many time steps with a single call of
the vectorized model kernels and hands gtsam one native Gaussian factor per step (rows of the
family stacked, whitened by their sigmas).  The per-step factors are mathematically the same as
the CustomFactor ones in :mod:`mbfg.factors` (a test checks that both give the same linear
system); only the evaluation is batched, which removes the per-call Python overhead.
"""
from __future__ import annotations

import gtsam
import numpy as np

from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.solvers.batch import BatchTerm
from mbfg.solvers.gaussian import gaussian_factor


def read_vectors(values, keys) -> np.ndarray:
    """Stack the vectors of ``keys`` from a ``VectorValues`` (or ``Values``) into (T, dim)."""
    get = values.at if isinstance(values, gtsam.VectorValues) else values.atVector
    return np.stack([get(int(k)) for k in keys])


class StackedTerm(BatchTerm):
    """Generic stacked family: ``residual(arrays) -> (e (T, r), [J_i (T, r, d_i)])``.

    Parameters
    ----------
    keys : list of (T,) int arrays, one per variable slot (e.g. q_k, v_k, a_k keys)
    residual : callable
        Receives the list of (T, d_i) arrays read from the values, returns the unwhitened
        error and its Jacobians w.r.t. each slot.
    sigmas : (r,) array
        Standard deviation of each error row.
    """

    def __init__(self, keys, residual, sigmas):
        self.keys = [np.asarray(k, dtype=np.int64) for k in keys]
        self.residual = residual
        self.inv_sigma = 1.0 / np.asarray(sigmas, float)

    def _arrays(self, values):
        return [read_vectors(values, k) for k in self.keys]

    def error(self, values) -> float:
        e, _ = self.residual(self._arrays(values), jacobians=False)
        w = e * self.inv_sigma
        return 0.5 * float(np.sum(w * w))

    def linearize(self, values, out, absolute: bool = True) -> float:
        X = self._arrays(values)
        e, J = self.residual(X, jacobians=True)
        w = self.inv_sigma
        b = -(e * w)
        A = [Ji * w[None, :, None] for Ji in J]
        err = 0.5 * float(np.sum(b * b))
        if absolute:  # e + J (y - x) = J y - (J x - e)
            b = b + sum(np.einsum("trd,td->tr", Ai, Xi) for Ai, Xi in zip(A, X))
        keys = self.keys
        nslot = len(keys)
        for t in range(e.shape[0]):
            out.push_back(gaussian_factor([keys[s][t] for s in range(nslot)],
                                          [A[s][t] for s in range(nslot)], b[t]))
        return err


def dependent_dynamics_residual(mech, forces=None, baumgarte=None):
    """Rows [Phi(q); Phi_q qdot; qddot(q, qdot, Q) - a] on slots (q, v, a) (Eqs. 24-26)."""
    n, m = mech.n, mech.m

    def residual(arrays, jacobians=True):
        q, v, a = arrays
        T = q.shape[0]
        Q = forces  # None, (n,) or (T, n) aligned with the term's steps
        phi = C.position_constraints(mech, q)
        Jq = C.constraint_jacobian(mech, q)
        vel = np.einsum("tkn,tn->tk", Jq, v)
        if not jacobians:
            qdd = D.forward_dynamics(mech, q, v, Q, baumgarte=baumgarte)
            return np.concatenate([phi, vel, qdd - a], axis=1), None
        dyn = D.forward_dynamics_jacobians(mech, q, v, Q, baumgarte=baumgarte)
        Jdot = C.constraint_jacobian_dot(mech, q, v)
        e = np.concatenate([phi, vel, dyn.qdd - a], axis=1)
        Aq = np.concatenate([Jq, Jdot, dyn.d_q], axis=1)
        Av = np.concatenate([np.zeros((T, m, n)), Jq, dyn.d_qd], axis=1)
        Aa = np.zeros((T, 2 * m + n, n))
        Aa[:, 2 * m:, :] = -np.eye(n)
        return e, [Aq, Av, Aa]

    return residual


def independent_rows_residual(mech):
    """Nonlinear rows of f_pc^i, f_vc^i, f_ac^i (Eqs. 30-32): [Phi; Phi_q v; dPhi_q/dt v +
    Phi_q a] on slots (q, v, a)."""
    n, m = mech.n, mech.m

    def residual(arrays, jacobians=True):
        q, v, a = arrays
        T = q.shape[0]
        phi = C.position_constraints(mech, q)
        Jq = C.constraint_jacobian(mech, q)
        Jdot = C.constraint_jacobian_dot(mech, q, v)
        vel = np.einsum("tkn,tn->tk", Jq, v)
        acc = np.einsum("tkn,tn->tk", Jdot, v) + np.einsum("tkn,tn->tk", Jq, a)
        e = np.concatenate([phi, vel, acc], axis=1)
        if not jacobians:
            return e, None
        zeros = np.zeros((T, m, n))
        Aq = np.concatenate([Jq, Jdot, C.acceleration_bias_jacobian(mech, q, v)
                             + C.hessian_times(mech, q, a)], axis=1)
        Av = np.concatenate([zeros, Jq, 2.0 * Jdot], axis=1)
        Aa = np.concatenate([zeros, zeros, Jq], axis=1)
        return e, [Aq, Av, Aa]

    return residual


def independent_dynamics_residual(mech, indices, forces=None, baumgarte=None):
    """f_dyn^i (Eq. 27, our variables): zddot(q, v, Q) - zdd on slots (q, v, zdd)."""
    idx = np.asarray(indices, int)
    d = idx.size

    def residual(arrays, jacobians=True):
        q, v, zdd = arrays
        if not jacobians:
            qdd = D.forward_dynamics(mech, q, v, forces, baumgarte=baumgarte)
            return qdd[:, idx] - zdd, None
        dyn = D.forward_dynamics_jacobians(mech, q, v, forces, baumgarte=baumgarte)
        e = dyn.qdd[:, idx] - zdd
        return e, [dyn.d_q[:, idx, :], dyn.d_qd[:, idx, :],
                   np.broadcast_to(-np.eye(d), (q.shape[0], d, d))]

    return residual
