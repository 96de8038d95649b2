"""Batch Gauss-Newton / Levenberg-Marquardt loop whose cost is linear in the trajectory length.

gtsam's C++ optimizers copy the whole ``Values`` into every Python ``CustomFactor`` call,
making each iteration O(factors x variables) (shared/notes/gtsam-python-facts.md, fact 1).
This loop owns the ``Values`` in Python instead:

1. ``lin = graph.linearize(values)`` for the native part of the graph (priors, integrators,
   LinearContainerFactors, and any CustomFactors: called without a Values copy);
2. every :class:`BatchTerm` linearizes a whole family of nonlinear factors for all time steps
   at once with numpy and appends native ``JacobianFactor``s to ``lin``;
3. ``delta = lin.optimize()`` (sparse multifrontal elimination in C++), then
   ``values.retract(delta)``; the step is accepted if the total error decreases, otherwise
   Levenberg-Marquardt damping (lambda I on every variable) is increased and the step retried.

It stops when the relative error decrease falls below ``relative_tolerance`` (or the error below
``absolute_tolerance``) and raises :class:`~mbfg.errors.ConvergenceError` with the residual when
``max_iterations`` is reached first (unless ``raise_on_failure=False``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import gtsam
import numpy as np

from mbfg.errors import ConvergenceError


class BatchTerm:
    """A family of nonlinear factors evaluated for many time steps at once.

    Subclasses implement :meth:`linearize` (append whitened Gaussian factors for the current
    values to a ``GaussianFactorGraph`` and return the error ``0.5 * sum ||whitened e||^2``)
    and :meth:`error`."""

    def linearize(self, values: gtsam.Values, out: gtsam.GaussianFactorGraph) -> float:
        raise NotImplementedError

    def error(self, values: gtsam.Values) -> float:
        raise NotImplementedError


@dataclass
class SolverStats:
    """What the optimizer did.

    iterations : number of linear solves (accepted or not); initial_error, final_error :
    0.5 * sum of squared whitened residuals; converged : tolerance met; seconds : wall time;
    history : error after each accepted step."""
    iterations: int = 0
    initial_error: float = float("nan")
    final_error: float = float("nan")
    converged: bool = False
    seconds: float = 0.0
    history: list = field(default_factory=list)

    def __str__(self) -> str:
        return (f"{'converged' if self.converged else 'NOT converged'} after {self.iterations} "
                f"iterations: error {self.initial_error:.3e} -> {self.final_error:.3e} "
                f"({self.seconds:.3f} s)")


def total_error(graph, terms, values) -> float:
    return float(graph.error(values)) + sum(t.error(values) for t in terms)


def _damping_factors(values: gtsam.Values, lam: float):
    g = gtsam.GaussianFactorGraph()
    s = np.sqrt(lam)
    for key in values.keys():
        d = values.atVector(key).size
        g.push_back(gtsam.JacobianFactor(key, s * np.eye(d), np.zeros(d),
                                         gtsam.noiseModel.Unit.Create(d)))
    return g


def optimize(graph: gtsam.NonlinearFactorGraph, values: gtsam.Values, terms=(), *,
             max_iterations: int = 50, relative_tolerance: float = 1e-10,
             absolute_tolerance: float = 1e-20, initial_lambda: float = 1e-6,
             raise_on_failure: bool = True, what: str = "batch optimization"):
    """Minimize the graph's error plus the terms' errors from ``values``.

    Returns ``(values, stats)``.  Gauss-Newton steps are tried first; damping is added only
    when a step fails to decrease the error (Levenberg-Marquardt).
    """
    t0 = time.perf_counter()
    terms = list(terms)
    err = total_error(graph, terms, values)
    stats = SolverStats(initial_error=err)
    lam = 0.0
    converged = err <= absolute_tolerance
    while not converged and stats.iterations < max_iterations:
        lin = graph.linearize(values)
        for t in terms:
            t.linearize(values, lin)
        base = lin
        while stats.iterations < max_iterations:
            stats.iterations += 1
            if lam > 0.0:
                lin = gtsam.GaussianFactorGraph()
                lin.push_back(base)
                lin.push_back(_damping_factors(values, lam))
            try:
                delta = lin.optimize()
                new_values = values.retract(delta)
                new_err = total_error(graph, terms, new_values)
            except RuntimeError:  # indeterminant system: damp and retry
                new_err = np.inf
            if np.isfinite(new_err) and new_err <= err:
                decrease = err - new_err
                values, err = new_values, new_err
                stats.history.append(err)
                lam = 0.0 if lam <= initial_lambda else lam / 10.0
                converged = (err <= absolute_tolerance
                             or decrease <= relative_tolerance * max(err, absolute_tolerance))
                break
            lam = initial_lambda if lam == 0.0 else lam * 10.0
            if lam > 1e10:
                break
        if lam > 1e10:
            break
    stats.final_error = err
    stats.converged = bool(converged)
    stats.seconds = time.perf_counter() - t0
    if not converged and raise_on_failure:
        raise ConvergenceError(f"{what} did not converge", residual=err,
                               iterations=stats.iterations)
    return values, stats
