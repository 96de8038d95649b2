"""Forward-dynamics factor graphs (paper Sect. 5.1-5.2, Figs. 2-3).

Dependent coordinates (Fig. 2), per step k: variables q_k, v_k (= qdot_k), a_k (= qddot_k);
factors f_pc^d(q_k), f_vc^d(q_k, v_k), f_dyn^d(q_k, v_k, a_k) (stacked into one vectorized
family), integrators q <-> v and v <-> a between k and k+1, priors on q_0 and v_0.

Independent coordinates (Fig. 3), per step k: additionally z_k, zd_k, zdd_k; factors
f_pc^i(q_k, z_k), f_vc^i(q_k, v_k, zd_k), f_ac^i(q_k, v_k, a_k, zdd_k), f_dyn^i(q_k, v_k,
zdd_k), integrators z <-> zd <-> zdd, f_eq(q_k, q_{k+1}) for branch continuity, priors on z_0,
zd_0 and an approximate q_0.  The rows ``q[idx] - z`` of f_pc^i, f_vc^i, f_ac^i are linear and
are built natively; their nonlinear rows form the vectorized families.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbfg.factors.keys import a_key, q_key, v_key, z_key, zd_key, zdd_key
from mbfg.graphs import linear_blocks as L
from mbfg.graphs.terms import StackedTerm, dependent_dynamics_residual, independent_rows_residual


@dataclass(frozen=True)
class ForwardSettings:
    """Noise (standard deviations) and options of the forward-dynamics graphs.

    Defaults follow the paper's Table 2 in spirit (all physics factors equally tight), with the
    constraint factors tighter so the trajectory stays on the constraint manifold.
    """
    dt: float = 1e-3
    integrator: str = "trapezoidal"     # or "euler"
    sigma_integrator: float = 1e-3
    sigma_dynamics: float = 1e-3
    sigma_position: float = 1e-6
    sigma_velocity: float = 1e-6
    sigma_acceleration: float = 1e-6
    sigma_prior_q0: float = 1e-8
    sigma_prior_v0: float = 1e-8
    sigma_prior_z: float = 1e-8
    sigma_prior_q0_approx: float = 1.0
    sigma_equality: float = 10.0
    baumgarte: object = None

    def __post_init__(self):
        if self.integrator not in ("trapezoidal", "euler"):
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {self.integrator!r}")


def integrator_factors(x_keys, xd_keys, settings: ForwardSettings, d: int, k: int):
    """Integrator between steps k and k+1 of a (x, xdot) pair of key functions."""
    if settings.integrator == "trapezoidal":
        return L.trapezoidal_blocks(x_keys(k), x_keys(k + 1), xd_keys(k), xd_keys(k + 1),
                                    settings.dt, settings.sigma_integrator, d)
    return L.euler_blocks(x_keys(k), x_keys(k + 1), xd_keys(k), settings.dt,
                          settings.sigma_integrator, d)


def dependent_step_linear_factors(mech, k: int, settings: ForwardSettings):
    """Native linear factors that link step k-1 to step k (none for k = 0)."""
    if k == 0:
        return []
    n = mech.n
    return [integrator_factors(q_key, v_key, settings, n, k - 1),
            integrator_factors(v_key, a_key, settings, n, k - 1)]


def dependent_term(mech, steps, settings: ForwardSettings, forces=None) -> StackedTerm:
    """Vectorized f_pc^d + f_vc^d + f_dyn^d for the given steps."""
    steps = np.asarray(steps, int)
    sig = np.concatenate([np.full(mech.m, settings.sigma_position),
                          np.full(mech.m, settings.sigma_velocity),
                          np.full(mech.n, settings.sigma_dynamics)])
    keys = [[q_key(k) for k in steps], [v_key(k) for k in steps], [a_key(k) for k in steps]]
    return StackedTerm(keys, dependent_dynamics_residual(mech, forces, settings.baumgarte), sig)


def dependent_initial_factors(mech, q0, v0, settings: ForwardSettings, k: int = 0):
    """Priors on q_k and v_k (the initial state, k = 0 unless a later segment starts)."""
    return [L.prior_blocks(q_key(k), q0, settings.sigma_prior_q0),
            L.prior_blocks(v_key(k), v0, settings.sigma_prior_v0)]


def independent_step_linear_factors(mech, k: int, indices, settings: ForwardSettings):
    """Native linear factors of step k: selection rows of f_pc^i, f_vc^i, f_ac^i, and the
    z integrators and f_eq linking step k-1 to k."""
    n, d = mech.n, len(indices)
    out = [L.selection_blocks(q_key(k), z_key(k), indices, n, settings.sigma_position),
           L.selection_blocks(v_key(k), zd_key(k), indices, n, settings.sigma_velocity),
           L.selection_blocks(a_key(k), zdd_key(k), indices, n, settings.sigma_acceleration)]
    if k > 0:
        out += [integrator_factors(z_key, zd_key, settings, d, k - 1),
                integrator_factors(zd_key, zdd_key, settings, d, k - 1),
                L.equality_blocks(q_key(k - 1), q_key(k), settings.sigma_equality, n)]
    return out


def independent_terms(mech, steps, indices, settings: ForwardSettings, forces=None):
    """Vectorized nonlinear rows of f_pc^i, f_vc^i, f_ac^i (on q, v, a) and f_dyn^i (on q, v,
    zdd) for the given steps."""
    from mbfg.graphs.terms import independent_dynamics_residual
    steps = np.asarray(steps, int)
    m = mech.m
    sig = np.concatenate([np.full(m, settings.sigma_position), np.full(m, settings.sigma_velocity),
                          np.full(m, settings.sigma_acceleration)])
    qk = [q_key(k) for k in steps]
    vk = [v_key(k) for k in steps]
    return [StackedTerm([qk, vk, [a_key(k) for k in steps]], independent_rows_residual(mech), sig),
            StackedTerm([qk, vk, [zdd_key(k) for k in steps]],
                        independent_dynamics_residual(mech, indices, forces, settings.baumgarte),
                        np.full(len(indices), settings.sigma_dynamics))]


def independent_initial_factors(mech, q0, v0, indices, settings: ForwardSettings, k: int = 0):
    """Priors on z_k, zd_k (exact initial state) and an approximate q_k (branch choice)."""
    idx = list(indices)
    return [L.prior_blocks(z_key(k), np.asarray(q0)[idx], settings.sigma_prior_z),
            L.prior_blocks(zd_key(k), np.asarray(v0)[idx], settings.sigma_prior_z),
            L.prior_blocks(q_key(k), q0, settings.sigma_prior_q0_approx)]
