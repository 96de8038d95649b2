"""Definitions used only by the benchmarks and the tests that reproduce published results
(the Kalman-filter review's three-simulation study: :mod:`mbfg.benchmarking.estimation_review`).
Not needed to use mbfg."""
__all__: list = []

__all__: list = []
