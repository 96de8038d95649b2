"""GTSAM factors of the multibody graphs (paper Sect. 6).

* :mod:`~mbfg.factors.keys`: key helpers and symbol characters;
* :mod:`~mbfg.factors.linear`: native linear factors (prior, Euler/trapezoidal integrators,
  equality);
* :mod:`~mbfg.factors.multibody`: constraint and dynamics CustomFactors with exact Jacobians;
* :mod:`~mbfg.factors.residuals`: their numpy residual functions, shared with the batch drivers;
* :mod:`~mbfg.factors.adapter`: the checked CustomFactor adapter;
* :mod:`~mbfg.factors.checking`: finite-difference verification of any gtsam factor.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import gtsam

from mbfg.factors import keys
from mbfg.factors.adapter import FactorSpec, MultibodyFactor, custom_factor, noise_model
from mbfg.factors.linear import (equality_factor, euler_integrator_factor, linear_factor,
                                 prior_factor, trapezoidal_integrator_factor)
from mbfg.factors.multibody import (acceleration_constraint_factor,
                                    equations_of_motion_factor, forward_dynamics_factor,
                                    independent_acceleration_factor,
                                    independent_forward_dynamics_factor,
                                    independent_inverse_dynamics_factor,
                                    independent_position_factor, independent_velocity_factor,
                                    inverse_dynamics_factor, inverse_dynamics_factors,
                                    position_constraint_factor,
                                    unactuated_force_prior, velocity_constraint_factor)
from mbfg.factors.sensors import observation_factor

if TYPE_CHECKING:
    from typing import Any


def lm_params(**settings: Any) -> gtsam.LevenbergMarquardtParams:
    """Levenberg-Marquardt parameters suited to multibody graphs: multifrontal QR elimination.

    gtsam's default Cholesky elimination stalls (and the optimizer returns its initial values)
    when constraint factors are many orders of magnitude tighter than the others, as they are
    here.  ``settings`` are set by name, e.g. ``lm_params(maxIterations=20)``."""
    params = gtsam.LevenbergMarquardtParams()
    params.setLinearSolverType("MULTIFRONTAL_QR")
    for name, value in settings.items():
        setattr(params, name, value)
    return params


__all__ = [
    "lm_params", "keys", "FactorSpec", "MultibodyFactor", "custom_factor", "noise_model",
    "equality_factor", "euler_integrator_factor", "linear_factor", "prior_factor",
    "trapezoidal_integrator_factor", "acceleration_constraint_factor",
    "equations_of_motion_factor", "forward_dynamics_factor",
    "independent_acceleration_factor", "independent_forward_dynamics_factor",
    "independent_inverse_dynamics_factor", "independent_position_factor",
    "independent_velocity_factor", "inverse_dynamics_factor", "inverse_dynamics_factors", "position_constraint_factor",
    "unactuated_force_prior", "velocity_constraint_factor", "observation_factor",
]
