"""Graph builders per problem (forward dynamics, inverse dynamics, estimation).

Each builder describes its problem as native linear factors (built once) plus vectorized
nonlinear factor families (:class:`mbfg.graphs.batch_term.BatchTerm`), for any range of time steps,
so the batch solver and the fixed-lag smoother share one definition.
"""

#: the simulation graph's integrators (:class:`mbfg.graphs.forward.ForwardSettings`), the
#: default first; defined here so that the CLI can offer them without importing gtsam.  The
#: fourth-order Hermite rule is the default: at dt = 1 ms its error is typically 1e-4-1e-6
#: of the trapezoidal rule's (median 3e-5 of the floor on 40 generated mechanisms), for
#: 1.1x (batch) to 1.25x (smoother) its instructions per step on small mechanisms, and the
#: trapezoidal rule with the constraints held exactly can be several times less accurate
#: than the unprojected trapezoidal floor (a difference of error constants; docs/theory.md,
#: "Why the Hermite rule is the default"; docs/benchmarks.md)
INTEGRATORS = ("hermite", "trapezoidal", "euler")
DEFAULT_INTEGRATOR = INTEGRATORS[0]

# import the builders from their modules (forward, ...)
__all__: list = ["INTEGRATORS", "DEFAULT_INTEGRATOR"]
