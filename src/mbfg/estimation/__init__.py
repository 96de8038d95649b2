"""State estimation: factor-graph estimators and the filter baselines, in one registry.

Every estimator is a pure function of (model, sensors, readings, dt, options, seed) returning
an :class:`~mbfg.results.EstimationResult`; :func:`estimate` runs one by name from
:data:`ESTIMATORS`, so runs can be farmed out.
"""
from mbfg.estimation.graph_estimators import (ONLINE_FORCE_SETTINGS, EstimatorSettings,
                                             estimate_batch, estimate_online)
from mbfg.estimation.kalman import dekf, ekf, ekf_fe, ukf
from mbfg.estimation.particle import particle_filter
from mbfg.estimation.registry import ESTIMATORS, Estimator, estimate, estimator, register
from mbfg.results import EstimationResult

__all__ = ["estimate", "ESTIMATORS", "Estimator", "estimator", "register", "EstimationResult",
           "EstimatorSettings", "ONLINE_FORCE_SETTINGS", "estimate_online", "estimate_batch",
           "ekf", "ekf_fe", "ukf", "dekf", "particle_filter"]
