"""Drivers and solvers: batch Gauss-Newton/Levenberg-Marquardt, fixed-lag smoothing."""
from mbfg.solvers.batch import SolverStats, optimize

__all__ = ["optimize", "SolverStats"]
