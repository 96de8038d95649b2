"""Nonlinear multibody factors (paper Sect. 6, Eqs. 24-32) as checked gtsam CustomFactors.

Every factor has exact analytic Jacobians with respect to **every** variable it touches.  The
paper's C++ code differentiated the dynamics numerically and gave its inverse-dynamics factors
a Jacobian only with respect to Q (Appendix IV); here d e/d q and d e/d qdot come from implicit
differentiation of the KKT system too, so inverse dynamics can refine positions and forces
together.

Units: q in m (point coordinates) and rad (relative angles), qdot in m/s, rad/s, qddot in
m/s^2, rad/s^2, Q in N (on point coordinates) and N m (on angles).  ``sigma`` arguments are
standard deviations in the units of the residual (scalar or per row).

Each ``*_factor`` returns a :class:`~mbfg.factors.adapter.MultibodyFactor`; the matching
``*_spec`` returns the plain :class:`~mbfg.factors.adapter.FactorSpec` (no gtsam) used by tests.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.factors import residuals as R
from mbfg.factors.adapter import FactorSpec, custom_factor
from mbfg.factors.linear import prior_factor

if TYPE_CHECKING:
    import gtsam
    from numpy.typing import ArrayLike

    from mbfg.factors.adapter import MultibodyFactor
    from mbfg.model.dynamics import Baumgarte
    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism


def position_constraint_factor(mech: Mechanism, q_key: int, sigma: float = 1e-6) -> MultibodyFactor:
    """f_pc^d (Eq. 24): e = Phi(q_k) (m rows); variable q_k."""
    spec = FactorSpec("f_pc^d", R.position_constraints_residual(mech), [q_key], [mech.n], mech.m)
    return custom_factor(spec, sigma)


def velocity_constraint_factor(
    mech: Mechanism, q_key: int, v_key: int, sigma: float = 1e-6
) -> MultibodyFactor:
    """f_vc^d (Eq. 25): e = Phi_q(q_k) qdot_k (m rows); variables q_k, qdot_k."""
    spec = FactorSpec("f_vc^d", R.velocity_constraints_residual(mech), [q_key, v_key],
                      [mech.n] * 2, mech.m)
    return custom_factor(spec, sigma)


def acceleration_constraint_factor(
    mech: Mechanism, q_key: int, v_key: int, a_key: int, sigma: float = 1e-6
) -> MultibodyFactor:
    """f_ac^d: e = dPhi_q/dt qdot_k + Phi_q qddot_k (m rows); variables q_k, qdot_k, qddot_k."""
    spec = FactorSpec("f_ac^d", R.acceleration_constraints_residual(mech), [q_key, v_key, a_key],
                      [mech.n] * 3, mech.m)
    return custom_factor(spec, sigma)


def forward_dynamics_factor(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    a_key: int,
    sigma: float = 1e-3,
    *,
    forces: ForceInput | None = None,
    baumgarte: Baumgarte | None = None,
) -> MultibodyFactor:
    """f_dyn^d (Eq. 26): e = qddot(q_k, qdot_k; Q) - qddot_k (n rows).

    ``forces``: known applied generalized forces (n,) (gravity is always included);
    ``baumgarte``: optional :class:`~mbfg.model.dynamics.Baumgarte` terms (off by default:
    graphs carry explicit constraint factors, see ``accuracy-facts.md``)."""
    f = R.dynamics_residual(mech, forces=None if forces is None else np.asarray(forces, float),
                            baumgarte=baumgarte)
    spec = FactorSpec("f_dyn^d", f, [q_key, v_key, a_key], [mech.n] * 3, mech.n)
    return custom_factor(spec, sigma)


def equations_of_motion_factor(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    a_key: int,
    lam_key: int,
    sigma: float = 1e-3,
    *,
    forces: ForceInput | None = None,
) -> MultibodyFactor:
    """f_eom^d: e = M qddot_k + Phi_q^T lambda_k - Q_g - Q_f - Q (n rows, Eq. 5 top row);
    variables q_k, qdot_k, qddot_k and the multipliers lambda_k (m).  With
    :func:`acceleration_constraint_factor` it is the sparse form of :func:`forward_dynamics_factor`."""
    f = R.equations_of_motion_residual(
        mech, forces=None if forces is None else np.asarray(forces, float))
    spec = FactorSpec("f_eom^d", f, [q_key, v_key, a_key, lam_key], [mech.n] * 3 + [mech.m],
                      mech.n)
    return custom_factor(spec, sigma)


def inverse_dynamics_factor(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    a_key: int,
    Q_key: int,
    sigma: float = 1e-3,
    *,
    baumgarte: Baumgarte | None = None,
) -> MultibodyFactor:
    """f_idyn^d (Eq. 28): e = qddot(q_k, qdot_k, Q_k) - qddot_k (n rows); variables q_k, qdot_k,
    qddot_k, Q_k.  Fix the non-actuated components of Q_k with :func:`unactuated_force_prior`
    (Sect. 5.3)."""
    f = R.dynamics_residual(mech, force_slot="Q", baumgarte=baumgarte)
    spec = FactorSpec("f_idyn^d", f, [q_key, v_key, a_key, Q_key], [mech.n] * 4, mech.n)
    return custom_factor(spec, sigma)


def inverse_dynamics_factors(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    a_key: int,
    Q_key: int,
    actuated: list,
    sigma: float = 1e-3,
    *,
    sigma_unactuated: float = 1e-6,
    indices: ArrayLike | None = None,
    zdd_key: int | None = None,
    baumgarte: Baumgarte | None = None,
) -> list:
    """The inverse-dynamics factors of one step for a set of ``actuated`` coordinates (Sect.
    5.3): f_idyn^d (or f_idyn^i with ``indices`` and ``zdd_key``) plus the zero prior on the
    non-actuated components of Q_k.  Returns a list to add to a graph."""
    if indices is None:
        dyn = inverse_dynamics_factor(mech, q_key, v_key, a_key, Q_key, sigma, baumgarte=baumgarte)
    else:
        if zdd_key is None:
            raise ValueError("independent coordinates need zdd_key")
        dyn = independent_inverse_dynamics_factor(mech, q_key, v_key, zdd_key, Q_key, indices,
                                                  sigma, baumgarte=baumgarte)
    out = [dyn]
    if len(set(int(i) for i in actuated)) < mech.n:
        out.append(unactuated_force_prior(mech, Q_key, actuated, sigma_unactuated))
    return out


def unactuated_force_prior(
    mech: Mechanism, Q_key: int, actuated: ArrayLike, sigma: float = 1e-6
) -> gtsam.PriorFactorVector:
    """Prior Q_k[j] = 0 for every non-actuated coordinate j (zero precision on the actuated
    ones, which the inverse-dynamics factor determines)."""
    act = np.zeros(mech.n, bool)
    act[np.asarray(actuated, int)] = True
    precisions = np.where(act, 0.0, 1.0 / sigma ** 2)
    return prior_factor(Q_key, np.zeros(mech.n), precisions=precisions)


def independent_position_factor(
    mech: Mechanism, q_key: int, z_key: int, indices: tuple, sigma: float = 1e-6
) -> MultibodyFactor:
    """f_pc^i (Eq. 30): e = [Phi(q_k); q_k[idx] - z_k] (m + d rows)."""
    d = len(indices)
    spec = FactorSpec("f_pc^i", R.independent_position_residual(mech, indices), [q_key, z_key],
                      [mech.n, d], mech.m + d)
    return custom_factor(spec, sigma)


def independent_velocity_factor(
    mech: Mechanism, q_key: int, v_key: int, zd_key: int, indices: tuple, sigma: float = 1e-6
) -> MultibodyFactor:
    """f_vc^i (Eq. 31): e = [Phi_q(q_k) qdot_k; qdot_k[idx] - zdot_k] (m + d rows)."""
    d = len(indices)
    spec = FactorSpec("f_vc^i", R.independent_velocity_residual(mech, indices),
                      [q_key, v_key, zd_key], [mech.n, mech.n, d], mech.m + d)
    return custom_factor(spec, sigma)


def independent_acceleration_factor(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    a_key: int,
    zdd_key: int,
    indices: tuple,
    sigma: float = 1e-6,
) -> MultibodyFactor:
    """f_ac^i (Eq. 32): e = [dPhi_q/dt qdot_k + Phi_q qddot_k; qddot_k[idx] - zddot_k]."""
    d = len(indices)
    spec = FactorSpec("f_ac^i", R.independent_acceleration_residual(mech, indices),
                      [q_key, v_key, a_key, zdd_key], [mech.n, mech.n, mech.n, d], mech.m + d)
    return custom_factor(spec, sigma)


def independent_forward_dynamics_factor(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    zdd_key: int,
    indices: tuple,
    sigma: float = 1e-3,
    *,
    forces: ForceInput | None = None,
    baumgarte: Baumgarte | None = None,
) -> MultibodyFactor:
    """f_dyn^i (Eq. 27): e = zddot(q_k, qdot_k; Q) - zddot_k (d rows).

    The paper writes zddot(z, zdot); it is evaluated through the dependent q_k and qdot_k
    that f_pc^i and f_vc^i tie to z_k and zdot_k (Eq. 15 needs them anyway), so the variables
    are q_k, qdot_k, zddot_k."""
    d = len(indices)
    f = R.dynamics_residual(mech, forces=None if forces is None else np.asarray(forces, float),
                            indices=indices, accel_slot="zdd", baumgarte=baumgarte)
    spec = FactorSpec("f_dyn^i", f, [q_key, v_key, zdd_key], [mech.n, mech.n, d], d)
    return custom_factor(spec, sigma)


def independent_inverse_dynamics_factor(
    mech: Mechanism,
    q_key: int,
    v_key: int,
    zdd_key: int,
    Q_key: int,
    indices: tuple,
    sigma: float = 1e-3,
    *,
    baumgarte: Baumgarte | None = None,
) -> MultibodyFactor:
    """f_idyn^i (Eq. 29): e = zddot(q_k, qdot_k, Q_k) - zddot_k (d rows); variables q_k,
    qdot_k, zddot_k, Q_k."""
    d = len(indices)
    f = R.dynamics_residual(mech, force_slot="Q", indices=indices, accel_slot="zdd",
                            baumgarte=baumgarte)
    spec = FactorSpec("f_idyn^i", f, [q_key, v_key, zdd_key, Q_key], [mech.n, mech.n, d, mech.n], d)
    return custom_factor(spec, sigma)


__all__ = [
    "position_constraint_factor", "velocity_constraint_factor",
    "acceleration_constraint_factor", "forward_dynamics_factor", "inverse_dynamics_factor",
    "inverse_dynamics_factors", "unactuated_force_prior", "independent_position_factor",
    "independent_velocity_factor", "independent_acceleration_factor",
    "independent_forward_dynamics_factor", "independent_inverse_dynamics_factor"
]
