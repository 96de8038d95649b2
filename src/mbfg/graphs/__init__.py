"""Graph builders per problem (forward dynamics, inverse dynamics, estimation).

Each builder describes its problem as native linear factors (built once) plus vectorized
nonlinear factor families (:class:`mbfg.graphs.batch_term.BatchTerm`), for any range of time steps,
so the batch solver and the fixed-lag smoother share one definition.
"""

#: the simulation graph's integrators (:class:`mbfg.graphs.forward.ForwardSettings`), the
#: default first; defined here so that the CLI can offer them without importing gtsam
INTEGRATORS = ("trapezoidal", "hermite", "euler")

__all__: list = ["INTEGRATORS"]  # import the builders from their modules (forward, ...)
