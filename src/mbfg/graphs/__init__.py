"""Graph builders per problem (forward dynamics, inverse dynamics, estimation).

Each builder describes its problem as native linear factors (built once) plus vectorized
nonlinear factor families (:class:`mbfg.graphs.batch_term.BatchTerm`), for any range of time steps,
so the batch solver and the fixed-lag smoother share one definition.
"""

#: the simulation graph's integrators (:class:`mbfg.graphs.forward.ForwardSettings`), the
#: default first; defined here so that the CLI can offer them without importing gtsam.  The
#: fourth-order Hermite rule is the default: at dt = 1 ms it is 1e-4-1e-6 of the trapezoidal
#: rule's error for about 1.1x its cost (docs/benchmarks.md), and the second-order rule with
#: constraints held exactly can be several times less accurate than the unprojected
#: trapezoidal floor on some mechanisms (a difference of error constants, docs/theory.md)
INTEGRATORS = ("hermite", "trapezoidal", "euler")
DEFAULT_INTEGRATOR = INTEGRATORS[0]

__all__: list = ["INTEGRATORS", "DEFAULT_INTEGRATOR"]  # import the builders from their modules (forward, ...)
