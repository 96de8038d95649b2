"""Levenberg-Marquardt over several step chains and one shared parameter vector.

The problem (duck-typed, built by :mod:`mbfg.graphs.identification`) provides
``linearize(Xs, theta) -> (GaussianFactorGraph, error)``, ``error(Xs, theta)``, ``keys`` (one
list of step keys per chain), ``theta_key``, ``p`` (parameter dimension, 0 when fixed) and
``ordering()`` (every chain in time order, theta last).  Each iteration eliminates the linear
system by sequential QR in that order, so its cost is linear in the number of steps; the last
conditional is the parameter block, whose R gives the marginal information of theta
(R^T R, the information form of gtsam's ``Marginals`` on that key, exact for the linear
system).  Damping ``lambda ||delta||^2`` is added on every variable when a step raises the
cost.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gtsam
import numpy as np

from mbfg.factors.gaussian import unit_noise
from mbfg.solvers.batch import SolverStats, read_delta

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["JointStats", "optimize_joint", "parameter_information"]


@dataclass
class JointStats(SolverStats):
    """:class:`~mbfg.solvers.batch.SolverStats` of the joint solve, plus ``reason``: why it
    stopped."""
    reason: str = ""


def _solve(lin, ordering, lam, problem, Xs, theta):
    if lam > 0.0:
        damped = gtsam.GaussianFactorGraph()
        damped.push_back(lin)
        for ks, X in zip(problem.keys, Xs):
            d = X.shape[1]
            s, z, model = np.sqrt(lam) * np.eye(d), np.zeros(d), unit_noise(d)
            for k in ks:
                damped.add(k, s, z, model)
        if problem.p:
            p = problem.p
            damped.add(problem.theta_key, np.sqrt(lam) * np.eye(p), np.zeros(p), unit_noise(p))
        lin = damped
    bn = lin.eliminateSequential(ordering, gtsam.EliminateQR)
    return bn.optimize(), bn


def _update(problem, Xs, theta, delta):
    new = [X + read_delta(delta, ks) for ks, X in zip(problem.keys, Xs)]
    th = theta + delta.at(problem.theta_key) if problem.p else theta
    return new, th


def parameter_information(bn: gtsam.GaussianBayesNet, p: int) -> np.ndarray:
    """R^T R (p, p) of the last conditional of a Bayes net eliminated with theta last."""
    c = bn.at(bn.size() - 1)
    R = np.asarray(c.R(), float)
    if R.shape != (p, p):  # pragma: no cover - theta is always the last frontal
        raise ValueError(f"the last conditional has shape {R.shape}, expected ({p}, {p})")
    return R.T @ R


def optimize_joint(
    problem: object,
    Xs: list,
    theta: np.ndarray,
    *,
    max_iterations: int = 20,
    relative_tolerance: float = 1e-8,
    initial_lambda: float = 1e-6,
    watchdog: int = 2,
    progress: Callable | None = None,
) -> tuple:
    """Minimize ``problem.error`` over the step arrays ``Xs`` and ``theta``.

    Returns ``(Xs, theta, stats, information)``: the best point, :class:`JointStats` and the
    marginal information of theta (p, p) of the linear system at that point (None when
    p = 0).  An undamped step that raises the cost is still taken up to ``watchdog`` times in
    a row (tight constraint rows make long steps leave the manifold to second order and the
    next step returns); if that does not reach a new best point, the best point is restored
    and damping used from there.  Never raises on non-convergence: ``stats.converged`` and ``stats.reason`` say
    what happened (the caller decides)."""
    t0 = time.perf_counter()
    Xs = [np.array(X, float) for X in Xs]
    theta = np.array(theta, float)
    ordering = gtsam.Ordering(problem.ordering())
    lin, err = problem.linearize(Xs, theta)
    stats = JointStats(initial_error=err)
    stats.history.append(err)
    lam = 0.0
    bn = None
    best = (Xs, theta, err, lin)
    trial = 0  # consecutive undamped steps taken although they raised the cost
    while stats.iterations < max_iterations:
        stats.iterations += 1
        try:
            delta, bn_try = _solve(lin, ordering, lam, problem, Xs, theta)
            predicted = float(lin.error(delta))
            Ys, th = _update(problem, Xs, theta, delta)
            new_err = problem.error(Ys, th)
        except RuntimeError:  # indeterminant system: damp
            new_err = predicted = np.inf
        if progress is not None:
            progress(stats.iterations, max_iterations, f"cost {min(best[2], new_err):.6e}")
        if lam == 0.0 and trial == 0 and err - predicted <= relative_tolerance * err:
            stats.converged, stats.reason = True, "the Gauss-Newton model predicts no decrease"
            bn = bn_try
            break
        if np.isfinite(new_err) and new_err <= best[2]:
            decrease = best[2] - new_err
            Xs, theta, err = Ys, th, new_err
            stats.history.append(err)
            lam = 0.0 if lam <= initial_lambda else lam / 10.0
            trial = 0
            lin, err = problem.linearize(Xs, theta)
            best = (Xs, theta, err, lin)
            if decrease <= relative_tolerance * err:
                stats.converged, stats.reason = True, "relative decrease below tolerance"
                break
            continue
        if lam == 0.0 and trial < watchdog and np.isfinite(new_err):
            # tight constraint rows make a long step leave the manifold to second order; the
            # next undamped step returns to it: take it and judge it by the next one
            trial += 1
            Xs, theta = Ys, th
            lin, err = problem.linearize(Xs, theta)
            continue
        if trial:  # the watchdog steps did not pay off: back to the best point, damped
            Xs, theta, err, lin = best
            trial = 0
            lam = initial_lambda
            continue
        lam = initial_lambda if lam == 0.0 else lam * 10.0
        if lam > 1e12:
            stats.reason = "damping exhausted"
            break
    else:
        stats.reason = f"{max_iterations} iterations reached"
    Xs, theta, err, lin = best
    if bn is not None and trial:
        bn = None
    info = None
    if problem.p:
        if bn is None:  # information at the final point (undamped)
            bn = lin.eliminateSequential(ordering, gtsam.EliminateQR)
        info = parameter_information(bn, problem.p)
    stats.final_error = err
    stats.seconds = time.perf_counter() - t0
    return Xs, theta, stats, info
