"""Residual functions of the multibody factors, vectorized over time steps.

One implementation serves both the per-step gtsam factors (:mod:`mbfg.factors.multibody`,
called with T = 1) and the batch drivers' stacked terms (:mod:`mbfg.graphs.terms`, all steps
at once), so the two cannot drift apart.

Each ``*_residual(mech, ...)`` returns a function ``f(p, jacobians=True)`` where ``p`` maps slot
names (``q v a Q z zd zdd``, see :mod:`mbfg.factors.keys`) to arrays (T, dim).  It returns
``e`` (T, r) and, when ``jacobians``, a dict ``{slot: de/dslot (T, r, dim)}`` with an entry for
every slot it reads (exact, analytic).  ``f.slots`` lists those slots in factor-key order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model.stacked_sparse import StackedSparse, times

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.model.dynamics import Baumgarte
    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism


def _slots(*names):
    def deco(f):
        f.slots = tuple(names)
        return f
    return deco


def _dense(p, S):
    """The dense (T, r, c) form of the StackedSparse ``S`` of this evaluation, converted once
    per evaluation (the families of a step share ``p``)."""
    cache = p.setdefault("_dense", {})
    hit = cache.get(id(S))
    if hit is None or hit[0] is not S:
        hit = cache[id(S)] = (S, S.toarray())
    return hit[1]


def _cached(mech, p, key, kernel, own):
    """``kernel(mech, p, sparse)`` of the slot dict ``p``, computed once per evaluation and
    shared by the families of the same step (a StackedTerm evaluates several on one dict).
    Dense (T, r, c), or with ``own`` the form the mechanism's kernels use
    (:func:`mbfg.model.constraints.sparse_kernels`)."""
    J = p.get(key)
    if J is None:
        J = p[key] = kernel(mech, p, C.sparse_kernels(mech))
    return J if own or not isinstance(J, StackedSparse) else _dense(p, J)


def _phi_q(mech, p, own=False):
    """Phi_q(q) of the slot dict ``p`` (see :func:`_cached`)."""
    return _cached(mech, p, "_Phi_q",
                   lambda m, p, sparse: C.constraint_jacobian(m, p["q"], sparse), own)


def _phi_q_dot(mech, p, own=False):
    """dPhi_q/dt(q, v) of the slot dict ``p`` (see :func:`_cached`)."""
    return _cached(mech, p, "_Phi_q_dot",
                   lambda m, p, sparse: C.constraint_jacobian_dot(m, p["q"], p["v"], sparse),
                   own)


def _jacobians(p, jacobians, blocks):
    """The Jacobian dict as asked, from ``blocks`` {slot: (factor, block)}: with
    ``jacobians == "sparse"`` StackedSparse blocks stay sparse (the batch terms gather their
    entries); otherwise they are made dense, once per evaluation."""
    out = {}
    for slot, (factor, b) in blocks.items():
        if isinstance(b, StackedSparse) and jacobians != "sparse":
            b = _dense(p, b)
        out[slot] = b if factor == 1.0 else factor * b
    return out


def _selection(n, idx):
    S = np.zeros((len(idx), n))
    S[np.arange(len(idx)), idx] = 1.0
    return S


def position_constraints_residual(mech: Mechanism) -> Callable:
    """f_pc^d (Eq. 24): e = Phi(q), de/dq = Phi_q (m rows)."""
    @_slots("q")
    def f(p, jacobians=True):
        e = C.position_constraints(mech, p["q"])
        return e, (_jacobians(p, jacobians, {"q": (1.0, _phi_q(mech, p, True))}) if jacobians
                   else None)
    return f


def velocity_constraints_residual(mech: Mechanism) -> Callable:
    """f_vc^d (Eq. 25): e = Phi_q(q) v; de/dq = (Phi_q v)_q = dPhi_q/dt, de/dv = Phi_q."""
    @_slots("q", "v")
    def f(p, jacobians=True):
        J = _phi_q(mech, p, True)
        e = times(J, p["v"])
        if not jacobians:
            return e, None
        return e, _jacobians(p, jacobians, {"q": (1.0, _phi_q_dot(mech, p, True)),
                                            "v": (1.0, J)})
    return f


def acceleration_constraints_residual(mech: Mechanism) -> Callable:
    """f_ac^d: e = dPhi_q/dt v + Phi_q a (the nonlinear rows of Eq. 32)."""
    sparse = C.sparse_kernels(mech)

    @_slots("q", "v", "a")
    def f(p, jacobians=True):
        q, v, a = p["q"], p["v"], p["a"]
        J = _phi_q(mech, p, True)
        Jdot = _phi_q_dot(mech, p, True)
        e = times(Jdot, v) + times(J, a)
        if not jacobians:
            return e, None
        d_q = C.acceleration_constraints_jacobian(mech, q, v, a, J, sparse=sparse)
        return e, _jacobians(p, jacobians, {"q": (1.0, d_q), "v": (2.0, Jdot), "a": (1.0, J)})
    return f


def dynamics_residual(
    mech: Mechanism,
    *,
    forces: ForceInput | None = None,
    force_slot: str | None = None,
    accel_slot: str = "a",
    indices: ArrayLike | None = None,
    baumgarte: Baumgarte | None = None,
    force_indices: tuple | None = None,
) -> Callable:
    """Dynamics factors.

    * f_dyn^d (Eq. 26): e = qddot(q, v, Q) - a, Q known (``forces``);
    * f_idyn^d (Eq. 28): the same with Q the variable slot ``force_slot`` (plus the known
      ``forces``, if any);
    * with ``indices`` (and ``accel_slot="zdd"``): f_dyn^i (Eq. 27) / f_idyn^i (Eq. 29),
      e = zddot(q, v, Q) - zdd, zddot = qddot[indices] (Eq. 15 equals Eq. 6 restricted to
      the independent coordinates).

    qddot is Eq. (5)-(6) with gravity and the mechanism's friction always included
    (:mod:`mbfg.model.dynamics`); ``forces`` is None, (n,) or (T, n).
    ``force_indices``: the variable slot holds only these components of Q (the others are
    zero), e.g. the actuated coordinates; the batch inverse-dynamics driver uses it to keep
    the step vectors small.
    Jacobians with respect to every variable (q, v, acceleration and Q) are exact (implicit
    differentiation of the KKT system, :func:`mbfg.model.dynamics.forward_dynamics_jacobians`).
    """
    idx = None if indices is None else np.asarray(indices, int)
    fidx = None if force_indices is None else np.asarray(force_indices, int)
    sel = (lambda M: M) if idx is None else (lambda M: M[:, idx])

    @_slots(*(("q", "v", accel_slot) + ((force_slot,) if force_slot else ())))
    def f(p, jacobians=True):
        q, v, acc = p["q"], p["v"], p[accel_slot]
        Q = p[force_slot] if force_slot else forces
        if force_slot and fidx is not None:
            Q = np.zeros(q.shape[:-1] + (mech.n,))
            Q[..., fidx] = p[force_slot]
        if force_slot and forces is not None:  # known forces besides the unknown slot
            Q = Q + forces
        if not jacobians:
            qdd = D.forward_dynamics(mech, q, v, Q, baumgarte=baumgarte, J=_phi_q(mech, p),
                                     Jdot=_phi_q_dot(mech, p))
            return sel(qdd) - acc, None
        dyn = D.forward_dynamics_jacobians(mech, q, v, Q, baumgarte=baumgarte,
                                           J=_phi_q(mech, p), Jdot=_phi_q_dot(mech, p),
                                           force_jacobian=bool(force_slot))
        e = sel(dyn.qdd) - acc
        k = e.shape[1]
        J = {"q": sel(dyn.d_q), "v": sel(dyn.d_qd),
             accel_slot: np.broadcast_to(-np.eye(k), (q.shape[0], k, k))}
        if force_slot:
            J[force_slot] = sel(dyn.d_Q) if fidx is None else sel(dyn.d_Q)[..., fidx]
        return e, J
    return f


def equations_of_motion_residual(
    mech: Mechanism, *, forces: ForceInput | None = None, multiplier_slot: str = "lam"
) -> Callable:
    """f_eom^d: e = M a + Phi_q^T lambda - Q_g - Q_f(q, v) - Q, the top row of the KKT system
    (Eq. 5) with the multipliers as the variable slot ``multiplier_slot`` (m).  With the
    acceleration constraints (:func:`acceleration_constraints_residual`) it replaces the dense
    f_dyn^d (e = qddot(q, v) - a): the same solution, but every row touches only its own
    bodies' coordinates (:func:`mbfg.model.dynamics.equations_of_motion`)."""
    @_slots("q", "v", "a", multiplier_slot)
    def f(p, jacobians=True):
        J = _phi_q(mech, p, True)
        sparse = jacobians == "sparse" and isinstance(J, StackedSparse)
        eom = D.equations_of_motion(mech, p["q"], p["v"], p["a"], p[multiplier_slot], forces,
                                    J=J, jacobians=bool(jacobians), sparse=sparse)
        if not jacobians:
            return eom.e, None
        return eom.e, {"q": eom.d_q, "v": eom.d_v, "a": eom.d_a, multiplier_slot: eom.d_lam}
    return f


def redundant_multipliers_residual(mech: Mechanism, multiplier_slot: str = "lam") -> Callable:
    """e = lambda on the m - r constraint rows that are redundant at q (those left out by
    :func:`mbfg.model.constraints.independent_rows`): their multipliers are not determined by
    the equations of motion, and zero is the choice Eq. (6) makes.  Slots q (which rows) and
    the multipliers."""
    m = mech.m

    @_slots("q", multiplier_slot)
    def f(p, jacobians=True):
        q, lam = p["q"], p[multiplier_slot]
        rows = np.broadcast_to(C.independent_rows(mech, q, _phi_q(mech, p)),
                               q.shape[:-1] + (mech.independent_rows.size,))
        keep = np.ones(q.shape[:-1] + (m,), bool)
        np.put_along_axis(keep, rows, False, axis=-1)
        red = np.nonzero(keep)[-1].reshape(q.shape[:-1] + (-1,))
        e = np.take_along_axis(lam, red, axis=-1)
        if not jacobians:
            return e, None
        Jl = np.zeros(e.shape + (m,))
        np.put_along_axis(Jl, red[..., None], 1.0, axis=-1)
        return e, {"q": np.zeros(e.shape + (mech.n,)), multiplier_slot: Jl}
    return f


def _with_selection(mech, base, dep_slot, ind_slot, indices):
    """[base rows; x_dep[indices] - x_ind] (Eqs. 30-32: nonlinear rows plus linear ones)."""
    idx = np.asarray(indices, int)
    d = idx.size
    S = _selection(mech.n, idx)

    @_slots(*(base.slots + (ind_slot,)))
    def f(p, jacobians=True):
        e0, J0 = base(p, jacobians)
        T = e0.shape[0]
        e = np.concatenate([e0, p[dep_slot][:, idx] - p[ind_slot]], axis=1)
        if not jacobians:
            return e, None
        J = {}
        for slot in base.slots:
            lower = np.broadcast_to(S if slot == dep_slot else np.zeros((d, mech.n)), (T, d, mech.n))
            J[slot] = np.concatenate([J0[slot], lower], axis=1)
        J[ind_slot] = np.concatenate([np.zeros((T, e0.shape[1], d)),
                                      np.broadcast_to(-np.eye(d), (T, d, d))], axis=1)
        return e, J
    return f


def independent_position_residual(mech: Mechanism, indices: tuple) -> Callable:
    """f_pc^i (Eq. 30): e = [Phi(q); q[idx] - z]  ((m + d) rows; slots q, z)."""
    return _with_selection(mech, position_constraints_residual(mech), "q", "z", indices)


def independent_velocity_residual(mech: Mechanism, indices: tuple) -> Callable:
    """f_vc^i (Eq. 31): e = [Phi_q(q) v; v[idx] - zd]  (slots q, v, zd)."""
    return _with_selection(mech, velocity_constraints_residual(mech), "v", "zd", indices)


def independent_acceleration_residual(mech: Mechanism, indices: tuple) -> Callable:
    """f_ac^i (Eq. 32): e = [dPhi_q/dt v + Phi_q a; a[idx] - zdd]  (slots q, v, a, zdd).

    (The paper's Eq. 32a prints Phi_qq a in the first row; the acceleration constraint is
    Phi_q a, as its own Jacobian 32d shows.)"""
    return _with_selection(mech, acceleration_constraints_residual(mech), "a", "zdd", indices)


__all__ = [
    "position_constraints_residual", "velocity_constraints_residual",
    "acceleration_constraints_residual", "dynamics_residual", "equations_of_motion_residual",
    "redundant_multipliers_residual", "independent_position_residual",
    "independent_velocity_residual", "independent_acceleration_residual"
]
