"""State estimation: factor-graph estimators, filter baselines and the benchmark harness.

Every estimator is a pure function of (model, sensors, readings, dt, options, seed) returning
an :class:`~mbfg.estimation.result.EstimationResult`, so runs can be farmed out.
"""
from mbfg.estimation.graph_estimators import (EstimatorSettings, estimate_batch,
                                              estimate_online)
from mbfg.estimation.kalman import dekf, ekf, ekf_fe, ukf
from mbfg.estimation.particle import particle_filter
from mbfg.estimation.result import EstimationResult

__all__ = ["EstimationResult", "EstimatorSettings", "estimate_online", "estimate_batch",
           "ekf", "ekf_fe", "ukf", "dekf", "particle_filter"]
