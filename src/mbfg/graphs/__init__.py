"""Graph builders per problem (forward dynamics, inverse dynamics, estimation).

Each builder describes its problem as native linear factors (built once) plus vectorized
nonlinear factor families (:class:`mbfg.graphs.batch_term.BatchTerm`), for any range of time steps,
so the batch solver and the fixed-lag smoother share one definition.
"""

#: the simulation graph's integrators (:class:`mbfg.graphs.forward.ForwardSettings`), the
#: default first; defined here so that the CLI can offer them without importing gtsam.  The
#: fourth-order Hermite rule is not the default yet: its batch cost grows faster than the
#: number of bodies where it needs the jerk's exact derivatives (dense d x 2n blocks per
#: link; docs/benchmarks.md, "The Hermite rule as the default")
INTEGRATORS = ("trapezoidal", "hermite", "euler")
DEFAULT_INTEGRATOR = INTEGRATORS[0]

# import the builders from their modules (forward, ...)
__all__: list = ["INTEGRATORS", "DEFAULT_INTEGRATOR"]
