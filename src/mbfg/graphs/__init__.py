"""Graph builders per problem (forward dynamics, inverse dynamics, estimation).

Each builder describes its problem as native linear factors (built once) plus vectorized
nonlinear factor families (:class:`mbfg.solvers.batch.BatchTerm`), for any range of time steps,
so the batch solver and the fixed-lag smoother share one definition.
"""
