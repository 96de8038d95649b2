"""Levenberg-Marquardt over several step chains and one shared parameter vector.

The problem (duck-typed, built by :mod:`mbfg.graphs.identification`) provides
``linearize(Xs, theta) -> (GaussianFactorGraph, error)``, ``error(Xs, theta)``, ``keys`` (one
list of step keys per chain), ``theta_key``, ``p`` (parameter dimension, 0 when fixed) and
``ordering()`` (every chain in time order, theta last).  Each iteration eliminates the linear
system in that order, so its cost is linear in the number of steps.  By default gtsam
eliminates every step (sequentially, with its default Cholesky on each front) and leaves the
factors on theta alone: their Hessian is theta's marginal information (the Schur complement
of the whole system onto theta, what gtsam's ``Marginals`` returns for that key, exact for the
linear system), a small dense system solved by numpy and handed back to the Bayes net for the
back-substitution.  (Eliminating theta inside gtsam too, as the root of the Bayes tree, trips
gtsam's indefinite-pivot check on long recordings although the information is positive
definite.)  Should a Cholesky still meet an indefinite pivot, sequential QR of the whole
system (theta last; its last conditional's R^T R is the information) serves the rest of the
solve.  Damping ``lambda ||delta||^2`` is added on every variable when a step raises the cost.
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
    stopped, and ``elimination``: the method of the last solve (``"cholesky"`` or ``"qr"``)."""
    reason: str = ""
    elimination: str = ""


def _eliminate(lin, problem, method):
    """Solve the linear system ``lin``: ``(delta, information of theta or None)``.

    ``"cholesky"``: gtsam's sequential elimination of every step (its default, Cholesky on
    the steps' fronts) leaves the factors on theta alone; their Hessian is theta's marginal
    information (p, p), solved by a dense Cholesky (numpy) and handed back to the Bayes net
    as theta's conditional, whose back-substitution gives every step.  ``"qr"``: sequential
    QR of the whole system, theta last; its last conditional's R^T R is the information.
    A Cholesky that meets an indefinite pivot raises RuntimeError (the caller falls back to
    QR)."""
    p, tk = problem.p, problem.theta_key
    if method == "qr":
        bn = lin.eliminateSequential(gtsam.Ordering(problem.ordering()), gtsam.EliminateQR)
        return bn.optimize(), (parameter_information(bn, p) if p else None)
    steps = gtsam.Ordering([k for ks in problem.keys for k in ks])
    if not p:
        return lin.eliminateSequential(steps).optimize(), None
    bn, rest = lin.eliminatePartialSequential(steps)
    H, eta = rest.hessian()  # theta's marginal information and information vector
    H = 0.5 * (np.asarray(H, float) + np.asarray(H, float).T)
    try:
        Lc = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        raise RuntimeError("theta's marginal information is not positive definite") from None
    dtheta = np.linalg.solve(Lc.T, np.linalg.solve(Lc, np.asarray(eta, float)))
    root = gtsam.GaussianFactorGraph()
    root.add(tk, Lc.T, Lc.T @ dtheta, unit_noise(p))
    bn.push_back(root.eliminateSequential(gtsam.Ordering([tk]), gtsam.EliminateQR))
    return bn.optimize(), H


def _solve(lin, lam, problem, Xs, theta, method="cholesky"):
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
    try:
        delta, info = _eliminate(lin, problem, method)
    except RuntimeError:  # an indefinite pivot in Cholesky: QR tells a singular system
        if method == "qr":
            raise
        method = "qr"
        delta, info = _eliminate(lin, problem, method)
    return delta, info, method


def _update(problem, Xs, theta, delta):
    new = [X + read_delta(delta, ks) for ks, X in zip(problem.keys, Xs)]
    th = theta + delta.at(problem.theta_key) if problem.p else theta
    return new, th


def parameter_information(bn: gtsam.GaussianBayesNet | gtsam.GaussianBayesTree, p: int,
                          key: int | None = None) -> np.ndarray:
    """The marginal information (p, p) of theta, eliminated last: R^T R of the last
    conditional of a Bayes net, or gtsam's marginal information of ``key`` in the root clique
    of a Bayes tree."""
    if isinstance(bn, gtsam.GaussianBayesTree):
        info = np.asarray(bn.marginalInformation(key), float)
        return 0.5 * (info + info.T)
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
    method: str = "cholesky",
    information: bool = True,
) -> tuple:
    """Minimize ``problem.error`` over the step arrays ``Xs`` and ``theta``.

    Returns ``(Xs, theta, stats, information)``: the best point, :class:`JointStats` and the
    marginal information of theta (p, p) of the linear system at that point (None when
    p = 0).  An undamped step that raises the cost is still taken up to ``watchdog`` times in
    a row (tight constraint rows make long steps leave the manifold to second order and the
    next step returns); if that does not reach a new best point, the best point is restored
    and damping used from there.  A trial point is linearized at once, so an accepted step's
    system is built once.  ``method``: ``"cholesky"`` (the steps by gtsam's default
    elimination, theta's small dense system by numpy, see :func:`_eliminate`; an indefinite
    pivot falls back to QR, which then serves the rest of the call; ``stats.elimination``
    says which one solved last) or ``"qr"`` (sequential QR of everything: slower, but only
    the square root of the system's conditioning).  ``information=False`` returns no
    information (an intermediate stage: saves the elimination at the final point when the
    last one was damped).  Never raises on non-convergence: ``stats.converged`` and
    ``stats.reason`` say what happened (the caller decides)."""
    t0 = time.perf_counter()
    Xs = [np.array(X, float) for X in Xs]
    theta = np.array(theta, float)
    lin, err = problem.linearize(Xs, theta)
    stats = JointStats(initial_error=err)
    stats.history.append(err)
    lam = 0.0
    bn = None  # theta's information of the last undamped solve at the best point
    best = (Xs, theta, err, lin)
    trial = 0  # consecutive undamped steps taken although they raised the cost
    while stats.iterations < max_iterations:
        stats.iterations += 1
        try:
            delta, bn_try, method = _solve(lin, lam, problem, Xs, theta, method)
            predicted = float(lin.error(delta))
        except RuntimeError:  # indeterminant system: damp
            predicted = np.inf
        if (lam == 0.0 and trial == 0 and np.isfinite(predicted)
                and err - predicted <= relative_tolerance * err):
            if progress is not None:
                progress(stats.iterations, max_iterations, f"cost {best[2]:.6e}")
            stats.converged, stats.reason = True, "the Gauss-Newton model predicts no decrease"
            bn = bn_try
            break
        new_err = np.inf
        if np.isfinite(predicted):
            # the trial point is linearized at once: when it is accepted (most steps) that is
            # the next iteration's system, evaluated once
            Ys, th = _update(problem, Xs, theta, delta)
            try:
                lin_new, new_err = problem.linearize(Ys, th)
            except (RuntimeError, FloatingPointError, np.linalg.LinAlgError):
                new_err = np.inf
        if progress is not None:
            progress(stats.iterations, max_iterations, f"cost {min(best[2], new_err):.6e}")
        if np.isfinite(new_err) and new_err <= best[2]:
            decrease = best[2] - new_err
            Xs, theta, err, lin = Ys, th, new_err, lin_new
            stats.history.append(err)
            lam = 0.0 if lam <= initial_lambda else lam / 10.0
            trial = 0
            best = (Xs, theta, err, lin)
            if decrease <= relative_tolerance * err:
                stats.converged, stats.reason = True, "relative decrease below tolerance"
                break
            continue
        if lam == 0.0 and trial < watchdog and np.isfinite(new_err):
            # tight constraint rows make a long step leave the manifold to second order; the
            # next undamped step returns to it: take it and judge it by the next one
            trial += 1
            Xs, theta, err, lin = Ys, th, new_err, lin_new
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
    if problem.p and information:
        if bn is None:  # information at the final point (undamped)
            try:
                bn = _eliminate(lin, problem, method)[1]
            except RuntimeError:
                method = "qr"
                bn = _eliminate(lin, problem, method)[1]
        info = bn
    stats.final_error = err
    stats.elimination = method
    stats.seconds = time.perf_counter() - t0
    return Xs, theta, stats, info
