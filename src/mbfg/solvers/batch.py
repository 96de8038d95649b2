"""Batch Gauss-Newton / Levenberg-Marquardt loop whose cost is linear in the trajectory length.

gtsam's C++ optimizers copy the whole ``Values`` into every Python ``CustomFactor`` call,
making each iteration O(factors x variables) (shared/notes/gtsam-python-facts.md, fact 1).
This loop keeps the estimate in Python and hands gtsam only native Gaussian factors:

* linear factors (priors, integrators, equalities, marginals) are built **once**, in absolute
  form ``||A x - b||`` (not in delta form), so they need no re-linearization at all;
* every :class:`BatchTerm` linearizes a family of nonlinear factors for all time steps at once
  with numpy, in absolute form too: ``e(x0) + J (x - x0) = J x - (J x0 - e(x0))``;
* ``x = lin.optimize()`` (sparse multifrontal elimination in C++) is then directly the
  Gauss-Newton iterate.  It is accepted if the total error decreases; otherwise
  Levenberg-Marquardt damping ``lambda ||x - x0||^2`` is added and the step retried.

Stopping: relative error decrease below ``relative_tolerance``, or a Gauss-Newton model that
predicts no more than that decrease (or error below ``absolute_tolerance``).  Not converging within ``max_iterations`` raises
:class:`~mbfg.errors.ConvergenceError` carrying the residual (unless ``raise_on_failure=False``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import gtsam
import numpy as np

from mbfg.errors import ConvergenceError
from mbfg.solvers.gaussian import unit_noise


class BatchTerm:
    """A family of nonlinear factors evaluated for many time steps at once.

    ``linearize(x, out, absolute=True)`` appends whitened Gaussian factors linearized at the
    estimate ``x`` (a ``gtsam.VectorValues``) to ``out`` and returns the error there;
    ``error(x)`` returns ``0.5 * sum ||whitened e||^2``.  With ``absolute=False`` the factors
    are in gtsam's usual delta form (what ``NonlinearFactor.linearize`` returns)."""

    def linearize(self, x, out, absolute: bool = True) -> float:
        raise NotImplementedError

    def error(self, x) -> float:
        raise NotImplementedError


@dataclass
class SolverStats:
    """What the optimizer did.

    iterations : linear solves (accepted or not); initial_error, final_error :
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


def total_error(linear: gtsam.GaussianFactorGraph, terms, x: gtsam.VectorValues) -> float:
    """Error of the absolute-form linear factors plus the nonlinear terms at x."""
    return float(linear.error(x)) + sum(t.error(x) for t in terms)


def damping_factors(x: gtsam.VectorValues, lam: float, keys) -> gtsam.GaussianFactorGraph:
    """``lam * ||y - x||^2`` on every key (absolute form)."""
    g = gtsam.GaussianFactorGraph()
    s = np.sqrt(lam)
    for key in keys:
        xk = x.at(key)
        d = xk.size
        g.push_back(gtsam.JacobianFactor(key, s * np.eye(d), s * xk, unit_noise(d)))
    return g


def optimize(linear: gtsam.GaussianFactorGraph, terms, x: gtsam.VectorValues, keys, *,
             max_iterations: int = 50, relative_tolerance: float = 1e-8,
             absolute_tolerance: float = 1e-24, initial_lambda: float = 1e-6,
             raise_on_failure: bool = True, what: str = "batch optimization"):
    """Minimize ``linear.error(x) + sum(term.error(x))`` starting at ``x``.

    Parameters
    ----------
    linear : GaussianFactorGraph
        Absolute-form linear factors (constant across iterations).
    terms : sequence of BatchTerm
    x : VectorValues
        Initial estimate (one entry per variable key).
    keys : sequence of int
        All variable keys (used for damping).

    Returns
    -------
    (x, stats) : optimized VectorValues and :class:`SolverStats`.
    """
    t0 = time.perf_counter()
    terms = list(terms)
    keys = [int(k) for k in keys]
    err = total_error(linear, terms, x)
    stats = SolverStats(initial_error=err)
    lam = 0.0
    converged = err <= absolute_tolerance
    while not converged and stats.iterations < max_iterations:
        base = gtsam.GaussianFactorGraph()
        base.push_back(linear)
        for t in terms:
            t.linearize(x, base)
        accepted = False
        while stats.iterations < max_iterations and lam <= 1e12:
            stats.iterations += 1
            lin = base
            if lam > 0.0:
                lin = gtsam.GaussianFactorGraph()
                lin.push_back(base)
                lin.push_back(damping_factors(x, lam, keys))
            try:
                y = lin.optimize(gtsam.EliminateQR)
                predicted = float(base.error(y))
                new_err = total_error(linear, terms, y)
            except RuntimeError:  # indeterminant linear system: damp and retry
                predicted, new_err = np.inf, np.inf
            if lam == 0.0 and err - predicted <= relative_tolerance * err:
                converged = True  # the Gauss-Newton model promises no further decrease
                break
            if np.isfinite(new_err) and new_err <= err:
                decrease = err - new_err
                x, err = y, new_err
                stats.history.append(err)
                lam = 0.0 if lam <= initial_lambda else lam / 10.0
                converged = (err <= absolute_tolerance
                             or decrease <= relative_tolerance * err)
                accepted = True
                break
            lam = initial_lambda if lam == 0.0 else lam * 10.0
        if not accepted or converged:
            break
    stats.final_error = err
    stats.converged = bool(converged)
    stats.seconds = time.perf_counter() - t0
    if not converged and raise_on_failure:
        raise ConvergenceError(f"{what} did not converge", residual=err,
                               iterations=stats.iterations)
    return x, stats

