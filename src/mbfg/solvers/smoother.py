"""Fixed-lag smoother over per-step state vectors (paper Sect. 5.1-5.2 and 7.1).

The smoother keeps a window of the last ``window`` steps of a problem (anything offering the
:class:`SmootherProblem` protocol, e.g. :class:`mbfg.graphs.forward.ForwardProblem`) as rows
of a small numpy array.  Each new step k

1. is predicted explicitly from step k-1 (``q + dt v + dt^2/2 a``, ``v + dt a``, ``a``; in
   independent coordinates z, zd, zdd the same way, i.e. ``problem.pack`` of the predicted
   q, v, a) with one constant matrix product;
2. if the window is then longer than ``window``, its oldest step j is marginalized: every
   factor touching x_j (its prior or marginal, its selection rows, its nonlinear rows
   linearized at the current estimate, and the links j -> j+1) is stacked into one dense
   whitened system ``[H_j  H_{j+1} | e]``, x_j is eliminated by Householder QR, and the
   rows left on x_{j+1} become the new prior ``R (x_{j+1} - xbar_{j+1}) + r``
   (:class:`~mbfg.graphs.linear_blocks.UnaryLinear`, already whitened);
3. the window is solved by Gauss-Newton: the prior, the window's linear factors and its
   nonlinear factors are linearized into native gtsam Jacobian factors and the system is
   eliminated by sparse QR (``EliminateQR``) as in :mod:`mbfg.solvers.batch`, or with
   ``elimination="cholesky"`` (the online estimator) by gtsam's Cholesky, QR deciding where
   Cholesky fails.

Cost.  The nonlinear model kernels dominate (one vectorized call per linearization, almost
independent of the window length), so the loop does one linearization per Gauss-Newton
iteration and nothing else: the error at a point comes from its linearization, the
convergence test is the decrease the Gauss-Newton model at the current point still
predicts (``<= relative_tolerance * error`` or ``<= absolute_tolerance``), and the
linearization at the final point also supplies the oldest step's nonlinear rows for the
marginalization.  A typical step needs two linearizations (predict -> step -> verify).
If an undamped step raises the error, the window is handed to the damped
Gauss-Newton/Levenberg-Marquardt loop :func:`mbfg.solvers.batch.optimize` from the best
point.  A step that does not converge within ``max_iterations`` linear solves raises
:class:`~mbfg.errors.ConvergenceError` with the window error.

With ``window`` at least the number of steps nothing is ever marginalized and the last
window solve is the batch solve of the whole horizon.

Independent coordinates.  A fixed choice of independent coordinates is singular wherever
[Phi_q; B] loses rank (for the four-bar in natural coordinates every coordinate does somewhere
on a full crank turn: y1 at theta = +-90 deg, x1 at 0 and 180 deg, x2 and y2 at the rocker's
dead points).  There z no longer determines q, v, a, the branch is ambiguous (v -> -v leaves
the dynamics unchanged) and Gauss-Newton stalls.  By default (``reselect=0.9``) the smoother
therefore re-partitions like a classical coordinate-partitioning integrator: after each step it
compares the current choice with the best-conditioned one over the window (pivoted QR of an
orthonormal null-space basis N of Phi_q; quality = smallest singular value of N[indices], a
set's quality over the window its worst over the rows, since the whole window is solved in one
set) and switches when the current quality falls below ``reselect`` times the best.  The switch
substitutes z_old = q[old indices] (a selection factor, exact at the solution) into the
marginal prior, re-packs the window and re-solves it.  ``switches`` lists (step, indices).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import gtsam
import numpy as np
import scipy.stats

from mbfg.errors import ConvergenceError, MbfgError
from mbfg.graphs.batch_term import BatchTerm, add_blocks, block
from mbfg.graphs.linear_blocks import UnaryLinear
from mbfg.solvers.batch import (held_change, held_horizon, held_settled, hold_while_settling,
                                linearize_exactly, optimize, residual_floor, step_converged)
from mbfg.solvers.sparse import SPARSE_MIN_UNKNOWNS, assemble, solve_sparse

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.graphs.estimation import ObservedProblem
    from mbfg.graphs.forward import ForwardProblem
    from mbfg.progress import ProgressBar


@runtime_checkable
class SmootherProblem(Protocol):
    """What a problem offers :class:`FixedLagSmoother` (the graph builders of
    :mod:`mbfg.graphs` implement it; the smoother knows nothing of mechanics).

    ``layout`` is the :class:`~mbfg.graphs.layout.StepLayout` of a step vector and
    ``settings`` has ``dt`` [s], ``integrator`` and optionally ``step_tolerance``.  Optional
    members the smoother uses when present: ``step_scale`` (dim,) (the Newton test of square
    problems), ``causal`` (True: marginalize a step by holding it, :class:`HeldPredecessor`),
    ``link_terms(steps, plan)`` (the window's link terms alone, evaluated with the held
    step's link, :class:`HeldLinks`) and the re-partitioning interface of
    :class:`RepartitioningProblem`."""

    layout: Any
    settings: Any

    def pack(self, q: np.ndarray, v: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Step vectors (..., dim) of positions, velocities, accelerations (..., n)."""

    def initial_priors(self, q_start: np.ndarray, v_start: np.ndarray) -> list:
        """Terms fixing step 0 at (q_start, v_start)."""

    def initial_accelerations(self, q: np.ndarray, v: np.ndarray, step: int = 0) -> np.ndarray:
        """The model's accelerations at (q, v), the initial guess of step 0."""

    def window_terms(self, steps: ArrayLike, plan: Any = None, *, incoming: Any = None) -> list:
        """Every term (:class:`~mbfg.graphs.batch_term.BatchTerm`) of the window ``steps``."""

    def link_plan(self, x: ArrayLike, previous: Any = None, *,
                  start: ArrayLike | None = None) -> np.ndarray | None:
        """The plan of the links from the steps ``start`` into the new step(s) ``x`` (None:
        links need no plan)."""


@runtime_checkable
class RepartitioningProblem(SmootherProblem, Protocol):
    """A problem in independent coordinates whose choice may change along the motion.
    The coordinate partition is the problem's (:mod:`mbfg.model.partition`); the smoother
    only asks for it and re-packs its window."""

    indices: tuple

    def best_indices(self, q: np.ndarray) -> tuple:
        """(best indices, their quality, the current indices' quality) at the window's
        states q (L, n): a set's quality over a window is its worst over the rows."""

    def with_indices(self, indices: ArrayLike) -> "RepartitioningProblem":
        """The same problem with other independent coordinates."""


class HeldPredecessor(BatchTerm):
    """The factors linking a step that left the window, held at its solution ``x_prev``, to
    window row 0: the exact marginal of that step in a causal square problem (its own rows and
    its incoming link already determine it, so nothing after it can move it).  Unlike a
    Gaussian marginal from QR it stays nonlinear and keeps its full rank however weakly the
    past determines a direction of row 0.

    ``links``: terms over the two rows (x_prev, row 0), each with two Jacobian blocks.
    ``T`` (dim, dim), optional: row 0 in the links' packing is ``T x`` (after a switch of
    independent coordinates)."""

    def __init__(self, links, x_prev, T=None):
        self.links, self.x_prev, self.T = links, np.asarray(x_prev, float), T

    def _pair(self, X):
        x0 = X[0] if self.T is None else self.T @ X[0]
        return np.vstack([self.x_prev, x0])

    def blocks(self, X: ArrayLike) -> tuple:
        out = [t.blocks(self._pair(X)) for t in self.links]
        A1 = np.concatenate([A[1] for _, A, _ in out], axis=1)
        if self.T is not None:
            A1 = A1 @ self.T
        e = np.concatenate([e for _, _, e in out], axis=1)
        return np.zeros((1, 1), int), [A1], e

    def error(self, X: ArrayLike) -> float:
        return float(sum(t.error(self._pair(X)) for t in self.links))

    def held_change(self, X0: ArrayLike, X1: ArrayLike) -> float:
        """The links' :meth:`~mbfg.graphs.links.IntegratorLinks.held_change` (those that have
        one) between the pairs (x_prev, X0[0]) and (x_prev, X1[0])."""
        changes = [t.held_change(self._pair(X0), self._pair(X1)) for t in self.links
                   if hasattr(t, "held_change")]
        return max(changes, default=0.0)

    def linearize_exactly(self, on: bool = True) -> bool:
        """:func:`mbfg.solvers.batch.linearize_exactly` of the links."""
        return linearize_exactly(self.links, on)

    def coo(self, X: ArrayLike) -> tuple:
        """Sparse linearization (:meth:`BatchTerm.coo`): the links' entries on row 0."""
        if self.T is not None:
            return super().coo(X)
        dim = X.shape[1]
        parts = [t.coo(self._pair(X)) for t in self.links]
        ii, jj, vv, es, off = [], [], [], [], 0
        for i, j, v, e in parts:
            on_row0 = j >= dim  # the held step's columns are constants here
            ii.append(i[on_row0] + off)
            jj.append(j[on_row0] - dim)
            vv.append(v[on_row0])
            es.append(e.reshape(-1))
            off += e.size
        return (np.concatenate(ii), np.concatenate(jj), np.concatenate(vv),
                np.concatenate(es)[None, :])

    def remapped(self, T: ArrayLike) -> "HeldPredecessor":
        """The same factor for row 0 packed as ``x_old = T x_new``."""
        return HeldPredecessor(self.links, self.x_prev, T if self.T is None else self.T @ T)


class HeldLinks:
    """The integrator links of a window and the link into its row 0 from the step that left
    it, held at ``x_prev`` (what :class:`HeldPredecessor` carries), evaluated together: one
    term ``links`` over the rows (x_prev, row 0, row 1, ...) of the window extended by the
    held step, linearized once per iterate.  Its two views are the terms the window solves
    with: ``held``, the first link's rows on row 0 (a unary term, in place of the
    :class:`HeldPredecessor`), and ``window``, the window's own links (in place of its link
    term).  Each view gives the same rows, in the same order, as the term it replaces; one
    linearization, jerk evaluation and held-parts check serve both (a fixed-lag window is
    linearized at every iterate, and the Hermite rule's per-call overhead dominated its
    cost).

    ``links``: a term of arity 2 over the extended rows (:class:`~mbfg.graphs.links.
    IntegratorLinks`: ``blocks``, ``coo``, ``whitened_residuals``, ``held_change``,
    ``linearize_exactly``); ``x_prev`` (dim,)."""

    def __init__(self, links, x_prev):
        self.links, self.x_prev = links, np.asarray(x_prev, float)
        self._memo: tuple = (None, None)  # (key, value) of the last evaluation
        self.held, self.window = _HeldLinksView(self, 0), _HeldLinksView(self, 1)

    def _cached(self, what, X, compute, X1=None):
        """``compute()``, remembered for the last (``what``, X, X1) and linearization mode
        (the exact jerk derivatives change blocks, sparse entries and held changes)."""
        X = np.asarray(X)
        key = (what, self.links.exact, X.shape, X.tobytes(),
               None if X1 is None else (np.shape(X1), np.asarray(X1).tobytes()))
        if self._memo[0] != key:
            self._memo = (key, compute())
        return self._memo[1]

    def _extended(self, X):
        return np.vstack([self.x_prev, X])

    def parts(self, X, what):
        """The views' parts of the evaluation ``what`` ("blocks", "coo" or "residuals") at
        the window rows X (L, dim): (held part, window part), each in the form of
        :meth:`~mbfg.graphs.batch_term.BatchTerm.blocks` (rows, [A...], e), ``coo`` (i, j,
        v, e) or the whitened residual (T, r) of its links."""
        split = {"blocks": self._split_blocks, "coo": self._split_coo,
                 "residuals": self._split_residuals}[what]
        return self._cached(what, X, lambda: split(X))

    def _split_blocks(self, X):
        pairs, (A0, A1), e = self.links.blocks(self._extended(X))
        return ((np.zeros((1, 1), int), [A1[:1]], e[:1]),
                (pairs[1:] - 1, [A0[1:], A1[1:]], e[1:]))

    def _split_coo(self, X):
        dim = np.shape(X)[1]
        i, j, v, e = self.links.coo(self._extended(X))
        rows = e.shape[1]  # row i of the sparse entries is link i // rows, its row i % rows
        first = i < rows
        held = first & (j >= dim)  # the held step's columns are constants here
        rest = ~first
        return ((i[held], j[held] - dim, v[held], e[:1]),
                (i[rest] - rows, j[rest] - dim, v[rest], e[1:]))

    def _split_residuals(self, X):
        e = self.links.whitened_residuals(self._extended(X))
        return e[:1], e[1:]

    def held_change(self, X0, X1) -> float:
        """The links' held change between the extended X0 and X1 (both views)."""
        return self._cached("held", X0, lambda: self.links.held_change(
            self._extended(X0), self._extended(X1)), X1)


class _HeldLinksView(BatchTerm):
    """One of the two terms of :class:`HeldLinks` (``part`` 0: the held link, unary on row
    0; 1: the window's own links)."""

    def __init__(self, shared, part):
        self.shared, self.part = shared, part
        self.arity = 1 if part == 0 else 2

    def blocks(self, X: ArrayLike) -> tuple:
        return self.shared.parts(X, "blocks")[self.part]

    def coo(self, X: ArrayLike) -> tuple:
        return self.shared.parts(X, "coo")[self.part]

    def error(self, X: ArrayLike) -> float:
        e = self.shared.parts(X, "residuals")[self.part]
        return 0.5 * float(np.sum(e * e))

    def held_change(self, X0: ArrayLike, X1: ArrayLike) -> float:
        return self.shared.held_change(X0, X1)

    def linearize_exactly(self, on: bool = True) -> bool:
        return self.shared.links.linearize_exactly(on)


PRIOR_SURPRISE = 0.05
"""A window that holds step 0 and more than RESTARTED_ROWS steps is solved from other starts
only when its solution violates the initial priors beyond their (1 - PRIOR_SURPRISE)
chi-square quantile (the whitened prior residuals' squared norm, with as many degrees of
freedom as prior rows): the sign of a wrong local minimum (angle +pi/8, seed 1002: a weight
force 14 sigma outside its prior).  Where the priors are met as expected the other starts are
not tried: solving them at every step of the first window cost the review benchmark 0.4 ms
per step."""

# EXACT_FROM_SECOND_SOLVE: a window that needs a second linear solve gets the exact
# derivatives of the parts its terms hold constant (:func:`mbfg.solvers.batch.
# linearize_exactly`); a window of a motion that is slow at the time step converges in one
# (the four-bar: 2001 solves for 2000 steps).  Switching only after three, the 10 mm
# five-link chain #15 of ``random_mechanisms(40, 2026)`` spent them on a window whose
# prediction was far off, and its damped fallback then ran out of iterations at t = 2.85 s
# in independent coordinates.

RESTARTED_ITERATIONS = 5
"""Linear solves each other start of those first windows gets while the priors are met (a
precaution, not a suspicion: a start in the basin of a better minimum gets there in a few
steps; a full damped solve of each cost the review benchmark 0.07 ms per step)."""

RESTARTED_ROWS = 3
"""The windows of the first RESTARTED_ROWS steps are always solved from the other starts as
well (at most this many rows each, so cheap: about 0.07 ms per step of the review benchmark):
the wrong minimum forms there, before the priors show it (angle +pi/8, seed 1002, coupler
gyroscope: 0.025 rad RMSE with the prior test alone, 0.013 with these windows too)."""


def _linear_error(lin) -> float:
    """The error 0.5 |e|^2 of a linearization of :meth:`FixedLagSmoother._linearize`."""
    if isinstance(lin, tuple):
        return 0.5 * float(lin[1] @ lin[1])
    return sum(0.5 * float(np.sum(e * e)) for _, _, e in lin)


def _update(g, delta, keys, err):
    """The solution ``delta`` of the linear system ``g`` as a window update (L, dim), and the
    decrease from ``err`` that its linear model predicts."""
    return np.stack([delta.at(k) for k in keys]), err - float(g.error(delta))


def prediction_matrix(problem: ObservedProblem | ForwardProblem) -> np.ndarray:
    """Constant (dim, dim) matrix P with ``x_{k+1} ~= P x_k``: q + dt v + dt^2/2 a, v + dt a,
    a, packed by ``problem.pack`` (so z, zd, zdd are the predicted q, v, a at the independent
    indices)."""
    lay, dt = problem.layout, problem.settings.dt
    E = np.eye(lay.dim)
    p = lay.unpack(E)  # columns of the identity, by slot: (dim, size) each
    P = problem.pack(p["q"] + dt * p["v"] + 0.5 * dt * dt * p["a"],
                     p["v"] + dt * p["a"], p["a"]).T
    for name in _carried_slots(lay):  # other slots (e.g. estimated forces) stay constant
        sl = lay.slice(name)
        P[sl, sl] = np.eye(sl.stop - sl.start)
    return P


def _carried_slots(layout):
    """Slots that the kinematic prediction does not produce (carried over unchanged)."""
    return [n for n in layout.names if n not in ("q", "v", "a", "z", "zd", "zdd")]


class FixedLagSmoother:
    """Fixed-lag Gauss-Newton smoother with exact (linearized) marginalization.

    Parameters
    ----------
    problem : SmootherProblem
        The graph of the steps (:class:`mbfg.graphs.forward.ForwardProblem`,
        :class:`~mbfg.graphs.forward.LeastSquaresProblem`,
        :class:`~mbfg.graphs.estimation.ObservedProblem`, or anything offering the protocol).
    window : int >= 1
        Number of steps optimized together (the newest step and ``window - 1`` before it).
    max_iterations : int
        Linear solves allowed per step.
    relative_tolerance : float
        Convergence when the decrease of the window error predicted by the Gauss-Newton
        model at the current estimate is at most this fraction of the error (the test for
        over-determined problems, whose error does not vanish), or at most
        ``absolute_tolerance`` (error = 0.5 * sum of squared whitened residuals).
    step_tolerance : float, optional
        With a problem that has a ``step_scale`` (the square simulation graph): convergence
        by :func:`mbfg.solvers.batch.step_converged` (Newton's estimate of the error left
        after the last update).  Default: ``problem.settings.step_tolerance``.
    on_failure : "raise" or "best"
        A window that does not converge within ``max_iterations`` raises
        :class:`~mbfg.errors.ConvergenceError` (simulation: never return garbage), or, with
        ``"best"`` (estimation: one bad window must not stop a long run), gets a full damped
        solve and keeps its best point; such windows are counted in ``unconverged``.
    informative : (n_steps,) bool, optional
        Which steps carry information of their own (an estimator's steps with a reading).
        Given, a step leaves the window only when the window after it still holds
        ``min_informative`` informative steps (and at least ``window`` steps), so a gap in the
        readings is kept in the window until enough readings after it have arrived; they then
        leave together (:meth:`_marginalize` of several rows).  A step without information
        that extends the window beyond ``window`` steps is solved alone, its predecessor
        held (:meth:`_solve_newest`): with nothing new to fit, the older steps' optimum does
        not move, and the cost per step stays that of a one-step window.  The first reading
        after the gap then re-solves the whole gap with it, from the marginal before the gap,
        instead of trusting a Gaussian prior linearized at a prediction that has drifted for
        the whole gap (not for causal problems, whose steps the past determines).
        With ``hold=False`` a gap does not lengthen the window: its steps leave one by one,
        each marginalized at its prediction, as a filter propagates through a gap; a window
        that holds no informative step at all is not re-solved either, only its newest step
        is (:meth:`_solve_newest`): re-solving the older steps without a reading to fit only
        moves them by the integrator's discretization residual, which the marginal prior
        would then carry into the next window, step after step (a generated six-bar's
        prediction drifted 14x further through a gap that way, and its weight-error state
        absorbed the mismatch when the readings came back).
    min_informative : int, optional
        Default ``window``.
    hold : bool
        Whether a gap is held in the window (above; default True).
    elimination : "qr" or "cholesky"
        How gtsam eliminates a window's Gauss-Newton system: sparse QR of the whitened
        Jacobian (``EliminateQR``, default), or Cholesky of its normal equations (gtsam's
        default elimination, about half the time on the review four-bar's 10-step window).
        Cholesky squares the condition number, so it suits over-determined problems whose
        solution the noise, not rounding, limits (estimation: the update of a whitened window
        of condition 4e6 differs from QR's by 2e-9 of its size).  A system gtsam finds
        indefinite, or an update that is not finite or does not decrease the linear model's
        error, is solved again by QR (counted in ``cholesky_fallbacks``).  Simulation keeps
        QR.

    Use :meth:`initialize` then :meth:`advance` (or :meth:`run`).  ``history`` receives
    (step, x) of each step as it leaves the window; :meth:`run` returns all steps.
    """

    def __init__(self, problem, window: int = 2, *, max_iterations: int = 10,
                 relative_tolerance: float = 1e-6, absolute_tolerance: float = 1e-8,
                 step_tolerance: float | None = None, reselect: float | None = 0.9,
                 on_failure: str = "raise", informative: ArrayLike | None = None,
                 min_informative: int | None = None, elimination: str = "qr",
                 hold: bool = True):
        if not isinstance(problem, SmootherProblem):
            raise TypeError(f"{type(problem).__name__} does not offer the SmootherProblem "
                            f"interface (layout, settings, pack, initial_priors, "
                            f"initial_accelerations, window_terms, link_plan)")
        window = int(window)
        if on_failure not in ("raise", "best"):
            raise ValueError(f"on_failure must be 'raise' or 'best', got {on_failure!r}")
        self.on_failure = on_failure
        if elimination not in ("qr", "cholesky"):
            raise ValueError(f"elimination must be 'qr' or 'cholesky', got {elimination!r}")
        self.elimination = elimination
        self._orderings: dict = {}
        self.cholesky_fallbacks = 0  # window solves that Cholesky left to QR
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.max_iterations = int(max_iterations)
        self.relative_tolerance = float(relative_tolerance)
        self.absolute_tolerance = float(absolute_tolerance)
        self.step_tolerance = (float(step_tolerance) if step_tolerance is not None
                               else getattr(problem.settings, "step_tolerance", None))
        self.reselect = (float(reselect) if reselect and isinstance(problem, RepartitioningProblem)
                         and problem.indices is not None else None)
        self.layout = problem.layout
        self.dim = problem.layout.dim
        if informative is not None and getattr(problem, "causal", False):
            raise ValueError("informative steps need a non-causal problem (a causal problem's "
                             "past determines its steps)")
        self.informative = None if informative is None else np.asarray(informative, bool)
        if self.informative is not None:  # informative steps before each step, for counts
            self._informative_cum = np.concatenate([[0], np.cumsum(self.informative)])
        self.min_informative = int(window if min_informative is None else min_informative)
        self.hold = bool(hold)
        self._set_problem(problem)
        # statistics
        self.iterations = 0
        self.max_iterations_per_step = 0
        self.fallbacks = 0
        self.unconverged = 0
        self.steps_done = 0
        self.switches: list = []

    def _set_problem(self, problem):
        self.problem = problem
        self.P_T = np.ascontiguousarray(prediction_matrix(problem).T)
        self.step_scale = getattr(problem, "step_scale", None)
        # solves a large mechanism's held jerk may take to settle (0: small, never held)
        self.held_solves = held_horizon(getattr(getattr(problem, "mech", None), "n", 0))

    # ----------------------------------------------------------------- window terms
    def _linearize(self, W, terms, keys):
        """The window's error at W and its linearization: every term's whitened blocks (kept
        for the marginalization and :meth:`newest_covariance`), or, for the large windows of
        square (simulation) problems, the sparse matrix of :mod:`mbfg.solvers.sparse`."""
        if self.step_scale is not None and W.size >= SPARSE_MIN_UNKNOWNS:
            A, e = assemble(terms, W)
            self._last_linear = None
            return 0.5 * float(e @ e), (A, e)
        blocks = [t.blocks(W) for t in terms]
        err = sum(0.5 * float(np.sum(e * e)) for _, _, e in blocks)
        self._last_linear = (blocks, keys)
        return err, blocks

    @staticmethod
    def _graph(blocks, keys):
        """Native gtsam Gaussian factors of linearized blocks."""
        g = gtsam.GaussianFactorGraph()
        for b in blocks:
            add_blocks(b, keys, g)
        return g

    def _newton_step(self, lin, keys, terms, W, err):
        """The Gauss-Newton update (L, dim) of the window and the decrease of the error its
        linear model predicts: by sparse LU (:mod:`mbfg.solvers.sparse`) when
        :meth:`_linearize` gave a sparse system, otherwise by gtsam's QR elimination."""
        if isinstance(lin, tuple):
            A, e = lin
            x = solve_sparse(A, e)
            if x is not None:
                r = A @ x + e
                return x.reshape(W.shape), err - 0.5 * float(r @ r)
            lin = [t.blocks(W) for t in terms]  # singular for the LU: gtsam's QR decides
        g = self._graph(lin, keys)
        if self.elimination == "cholesky":
            step = self._cholesky_step(g, keys, err)
            if step is not None:
                return step
            self.cholesky_fallbacks += 1
        return _update(g, g.optimize(gtsam.EliminateQR), keys, err)

    def _cholesky_step(self, g, keys, err):
        """(update, predicted decrease) of the window's linear system ``g`` by gtsam's Cholesky
        elimination, or None where QR must decide: gtsam finds the normal equations
        indefinite, or the update is not finite or does not decrease the linear model's error
        (a least-squares solution never increases it: Cholesky lost the system to rounding)."""
        try:
            delta = g.optimize(self._ordering(keys))
        except RuntimeError as exc:
            if "Indeterminate" not in str(exc):
                raise  # not a property of the system (e.g. an inconsistent ordering)
            return None
        D, predicted = _update(g, delta, keys, err)
        if not (np.all(np.isfinite(D)) and predicted >= 0.0):
            return None
        return D, predicted

    def _ordering(self, keys):
        """gtsam's elimination ordering of the window's keys, in time order (cached)."""
        key = tuple(keys)
        if key not in self._orderings:
            self._orderings[key] = gtsam.Ordering(list(keys))
        return self._orderings[key]

    def newest_covariance(self) -> np.ndarray:
        """Marginal covariance (dim, dim) of the newest step of the window, from the window's
        last linearization (at the final Gauss-Newton point of the last solve): the last
        conditional of the sequential QR elimination in time order.  After a step solved
        alone (:meth:`_solve_newest`), the previous step's square-root information is
        propagated through the new step's links and rows (call this after every step)."""
        newest = self.first + self.W.shape[0] - 1
        if self._silent is not None:
            if self._newest_R is None or self._newest_R[0] != newest - 1:
                raise RuntimeError("newest_covariance after a step solved alone needs the "
                                   "previous step's covariance (call it after every step)")
            links, own = self._silent
            d = self.dim
            pair = self.W[-2:]
            parts = [np.hstack([self._newest_R[1], np.zeros((d, d))])]
            for t in links:
                rows, A, _ = t.blocks(pair)
                parts += [np.hstack([block(A[0], i), block(A[1], i)])
                          for i in range(rows.shape[0])]
            for t in own:
                rows, A, _ = t.blocks(pair[1:])
                parts += [np.hstack([np.zeros((A[0].shape[-2], d)), block(A[0], i)])
                          for i in range(rows.shape[0])]
            R = np.linalg.qr(np.vstack(parts), mode="r")[d:2 * d, d:2 * d]
        else:
            blocks, keys = self._last_linear
            g = self._graph(blocks, keys)
            bn = g.eliminateSequential(gtsam.Ordering(list(keys)), gtsam.EliminateQR)
            R = bn.back().R()
        self._newest_R = (newest, R)
        Ri = np.linalg.pinv(R) if self._silent is not None else np.linalg.inv(R)
        return Ri @ Ri.T

    def _converged(self, D, predicted, err) -> bool:
        """Whether W + D ends the Gauss-Newton loop.  Square problems (``step_tolerance`` and
        ``step_scale`` given: simulation) stop only when the update passes
        :func:`step_converged` (or the error reaches its floor): a linear model that predicts
        no decrease of a square system's error is a stall (a singular or diverged
        linearization), not an optimum, as in the batch solver
        (:func:`mbfg.solvers.batch.optimize`).  The loop goes on: to the damped fallback if
        the error rises, else to its iteration limit and a ConvergenceError."""
        if step_converged(D, self.step_scale, self.step_tolerance):
            return True
        if self.step_tolerance is not None and self.step_scale is not None:
            return False
        return predicted <= self.relative_tolerance * err or predicted <= self.absolute_tolerance

    # ----------------------------------------------------------------- public API
    def initialize(self, q0: ArrayLike, v0: ArrayLike, a0: ArrayLike | None = None) -> None:
        """Start at step 0 with the problem's initial priors on (q0, v0); ``a0`` is only the
        initial guess of the accelerations (default: the model's)."""
        if a0 is None:
            a0 = self.problem.initial_accelerations(np.asarray(q0, float),
                                                    np.asarray(v0, float))
        self.W = np.atleast_2d(self.problem.pack(np.asarray(q0, float), np.asarray(v0, float),
                                                 np.asarray(a0, float))).copy()
        self.first = 0  # step index of row 0
        self.prior = self.problem.initial_priors(q0, v0)
        self.links = []  # each link's plan (ForwardProblem.link_plan)
        self._incoming = None  # plan of the link into row 0, carried by the marginal prior
        self.history = []
        self.left = []  # (step, x) of the steps that left the window in the last advance
        self._silent = None  # (links, own terms) when the newest step was solved alone
        self._newest_R = None  # (step, square-root information) of newest_covariance
        self._solve()
        self._check_coordinates()

    @property
    def estimate(self) -> np.ndarray:
        """Current window estimate (rows = steps ``first .. first + len - 1``)."""
        return self.W

    def _predict(self, x):
        """Initial estimate of the next step: with the previous acceleration known, a_{k+1} =
        2 a_k - a_{k-1} and q, v by the trapezoidal rule (so the integrator factors start
        satisfied and Gauss-Newton usually needs one step fewer); otherwise the Taylor
        prediction ``P x``.  A problem with a ``refine_prediction`` (e.g. a projection onto
        the constraints) refines it."""
        pred = self._extrapolate(x)
        refine = getattr(self.problem, "refine_prediction", None)
        return pred if refine is None else refine(pred)

    def _extrapolate(self, x):
        a_prev = getattr(self, "_a_prev", None)
        lay = self.layout
        if a_prev is None or self.problem.settings.integrator not in ("trapezoidal", "hermite") \
                or a_prev.shape != x[self._a_slice].shape:
            return x @ self.P_T
        dt = self.problem.settings.dt
        q, v, a = x[lay.slice("q")], x[lay.slice("v")], x[self._a_slice]
        a1 = 2.0 * a - a_prev
        v1 = v + 0.5 * dt * (a + a1)
        q1 = q + 0.5 * dt * (v + v1)
        pred = self.problem.pack(q1, v1, a1)
        for name in _carried_slots(lay):
            pred[lay.slice(name)] = x[lay.slice(name)]
        return pred

    @property
    def _a_slice(self):
        return self.layout.slice("a")

    def advance(self) -> tuple:
        """Add the next step, marginalize the oldest one if the window is full, solve.
        Returns (step, x) of the step that left the window, or None."""
        W = self.W
        pred = self._predict(W[-1])
        self._a_prev = W[-1, self._a_slice].copy()
        # the plan of the link into the newest row continues (hysteresis); with a window of
        # one step that link has already left with the marginal prior
        latest = self.links[-1] if self.links else self._incoming
        link = self.problem.link_plan(pred[None], latest, start=W[-1:])
        if link is not None:
            self.links.append(link[0])
        W = np.vstack([W, pred])
        self.left = []
        m = self._rows_leaving(W.shape[0])
        W = self._drop_oldest(W, m) if m else W
        out = self.left[-1] if self.left else None
        self.W = W
        if self.informative is not None and W.shape[0] > self.window \
                and self._informative_count(W.shape[0] - self.window, W.shape[0]) \
                < self.min_informative:
            self._solve_newest()
        elif (self.informative is not None and not self.hold
              and self._informative_count(0, W.shape[0]) == 0):
            self._solve_newest()  # nothing in the window to fit: predict the newest step
        else:
            self._solve()
            self._check_coordinates()
        return out

    def _count(self, a: int, b: int) -> int:
        """Informative steps among steps a .. b - 1 (none outside the horizon)."""
        n = self._informative_cum.size - 1
        cum = self._informative_cum
        return int(cum[min(max(b, 0), n)] - cum[min(max(a, 0), n)])

    def _informative_count(self, start: int, stop: int) -> int:
        """Informative steps among window rows start .. stop - 1."""
        return self._count(self.first + start, self.first + stop)

    def _rows_leaving(self, L: int) -> int:
        """How many of the oldest rows leave a window of L rows (the new step included)."""
        if L <= self.window:
            return 0
        if self.informative is None or not self.hold:
            return 1
        newest = self.first + L - 1

        def may_leave(s):  # rows 0 .. s-1 may leave: row s and after hold enough readings
            step = self.first + s
            # ... of which a full solve has seen all but the newest: a step leaves only once
            # the readings after it have corrected it (a gap's steps leave after their re-solve)
            seen = max(0, self._count(step, min(newest, self._solved_through) + 1))
            return (self._count(step, newest + 1) >= self.min_informative
                    and seen >= self.min_informative - 1)

        lo, hi = 0, L - self.window  # both counts only fall with s: the largest s that may
        while lo < hi:               # leave, by bisection
            mid = (lo + hi + 1) // 2
            if may_leave(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def run(self, steps: int, progress: Callable | ProgressBar | None = None) -> np.ndarray:
        """Advance ``steps`` times from the initialized state; returns (steps + 1, dim): each
        step's estimate when it left the window, then the final window.

        A step that fails raises its error with ``partial`` set to the rows computed so far
        (every step before the failing one)."""
        X = np.empty((self.first + self.W.shape[0] + steps, self.dim))
        for k, x in self.history:
            X[k] = x
        every = max(1, steps // 100)
        for i in range(steps):
            try:
                out = self.advance()
            except MbfgError as exc:
                last = self.first + self.W.shape[0]
                if self.history and self.history[-1][0] == self.first - 1:
                    X[self.first - 1] = self.history[-1][1]  # left the window in this advance
                X[self.first:last] = self.W
                exc.partial = X[:last].copy()
                raise
            if out is not None:
                X[out[0]] = out[1]
            if progress is not None and ((i + 1) % every == 0 or i + 1 == steps):
                progress(i + 1, steps)
        X[self.first:self.first + self.W.shape[0]] = self.W
        return X

    # ----------------------------------------------------------------- internals
    def _marginalize(self, W, m: int = 1):
        """Eliminate rows 0 .. m-1 (linearized at the last solve's final linearization point)
        into a Gaussian prior on row m, one row after the other.  ``W``: the window with the
        new step appended (with a window of one step, the link to it is linearized here, at
        the new step's prediction).  A problem with a ``marginal_projector(x)`` (estimation:
        :meth:`mbfg.graphs.estimation.ObservedProblem.marginal_projector`) gets the prior
        restricted to the tangent space of its constraint manifold at row m's linearization
        point, A -> A P: the row's own constraint factors fix the normal part."""
        d = self.dim
        if getattr(self.problem, "causal", False):
            self.prior = [HeldPredecessor(self._links_between(self.first, self.links[:1]),
                                          W[0])]
            return
        W_lin, blocks = self._lin
        if m > 1 or self._lin_first != self.first:
            W_lin, blocks = self._relinearized(W, m)
        if W_lin.shape[0] < 2:
            W_lin = np.vstack([W_lin[0], W[1]])
            blocks = blocks + [t.blocks(W_lin)
                               for t in self._links_between(self.first, self.links[:1])]
        carried = []  # rows [R | 0 | r] on row j left by eliminating row j - 1
        for j in range(m):
            top, bottom = list(carried), []
            for rows, A, e in blocks:
                sel = np.flatnonzero(rows[:, 0] == j)
                for t in sel:
                    M = np.zeros((e.shape[1], 2 * d + 1))
                    M[:, :d] = block(A[0], t)
                    if len(A) == 2:
                        M[:, d:2 * d] = block(A[1], t)
                    M[:, 2 * d] = e[t]
                    (top if len(A) == 1 else bottom).append(M)
            R = np.linalg.qr(np.vstack(top + bottom), mode="r")
            R1 = R[d:2 * d, d:2 * d]
            r1 = R[d:2 * d, 2 * d]
            carried = [np.hstack([R1, np.zeros((R1.shape[0], d)), r1[:, None]])]
        # residual R1 (x1 - x1_lin) + r1 = U (S V^T (x1 - x1_lin) + U^T r1).  R1 may be rank
        # deficient (a window step's information is not always full); only its range is
        # kept: the rows along its null space hold rounding noise times x1 plus a constant
        # part of r1 that does not move the argmin but would make the window error (and so
        # the convergence tests) depend on rounding, e.g. on the units of the mechanism
        U, sv, Vt = np.linalg.svd(R1, full_matrices=False)
        k = int(np.count_nonzero(sv > sv[0] * max(R1.shape) * np.finfo(float).eps)) if sv.size else 0
        A = sv[:k, None] * Vt[:k]
        project = getattr(self.problem, "marginal_projector", None)
        if project is not None:  # keep the prior's information along the manifold only
            A = A @ project(W_lin[m])
        self.prior = [UnaryLinear([0], A, A @ W_lin[m] - U[:, :k].T @ r1)]

    def _links_between(self, step, plan):
        """The link terms from ``step`` to ``step + 1`` with the plan rows ``plan`` (a list;
        empty where links need none): the problem's ``link_terms`` where it offers them,
        else the terms of arity 2 among its window terms."""
        steps = np.array([step, step + 1])
        plan = np.array(plan) if plan else None
        link_terms = getattr(self.problem, "link_terms", None)
        if link_terms is not None and plan is not None:
            return link_terms(steps, plan)
        return [t for t in self.problem.window_terms(steps, plan, incoming=self._incoming)
                if t.arity == 2]

    def _relinearized(self, W, m):
        """(W_lin, blocks) of rows 0 .. m of the window before the new step was appended, at
        their current estimates, when the last full solve does not cover them (rows that
        leave together after a gap; relative row indices).  Only the factors of those rows
        are linearized: the prior and the rows 0 .. m window terms."""
        rows = W[:m + 1]
        steps = np.arange(self.first, self.first + m + 1)
        terms = self.prior + self.problem.window_terms(steps)
        return rows, [t.blocks(rows) for t in terms]

    def _solve(self):
        """Gauss-Newton on the current window (see module docstring)."""
        W = self.W
        L = W.shape[0]
        steps = np.arange(self.first, self.first + L)
        terms = self._held_together(self.prior + self.problem.window_terms(
            steps, np.array(self.links) if self.links else None, incoming=self._incoming),
            steps)
        W0, failed = W, self.unconverged
        W, lin = self._gauss_newton(W, terms, steps)
        if self.informative is not None and L > self.window and self.unconverged > failed:
            self._give_up_gap(W0)
            return
        starts = getattr(self.problem, "alternative_starts", None)
        if starts is not None and self.first == 0:
            W, lin = self._best_start(W, lin, lambda: starts(W), terms, steps)
        self._lin = lin
        self._lin_first = self.first
        self._solved_through = int(steps[-1])
        self._silent = None
        self.W = W
        self.steps_done += 1

    def _held_together(self, terms, steps):
        """``terms`` with the :class:`HeldPredecessor` prior and the window's link term
        replaced by the two views of one :class:`HeldLinks` (the same rows, evaluated in one
        call), where the problem offers that (``link_terms(steps, plan)``: the window's link
        terms alone): a causal window of at least two rows whose prior holds the step before
        it in the window's own packing, and one link term each."""
        held = terms[0] if len(self.prior) == 1 else None
        link_terms = getattr(self.problem, "link_terms", None)
        if not (isinstance(held, HeldPredecessor) and held.T is None and len(held.links) == 1
                and self._incoming is not None and len(steps) >= 2 and link_terms):
            return terms
        if not (self.history and self.history[-1][0] == steps[0] - 1):
            return terms  # the held step is not the one before row 0 (its link's plan is
            # then not ``_incoming``; causal problems leave one row at a time)
        own = [i for i, t in enumerate(terms) if i > 0 and t.arity == 2]
        if len(own) != 1:
            return terms
        links = link_terms(np.r_[steps[0] - 1, steps], np.vstack([self._incoming, self.links]))
        if len(links) != 1:
            return terms
        shared = HeldLinks(links[0], held.x_prev)
        terms = list(terms)
        terms[0], terms[own[0]] = shared.held, shared.window
        return terms

    def _give_up_gap(self, W0):
        """The re-solve of a window extended over a gap did not converge (the readings after
        the gap left a problem too far from its prediction): the gap's steps leave the window
        at their estimates before the re-solve (the prediction through the gap, as a window
        of fixed length would have kept them), and the remaining ``window`` steps are solved
        as usual.  The failed re-solve is not counted in ``unconverged``."""
        self.unconverged -= 1
        self.W = self._drop_oldest(W0, W0.shape[0] - self.window)
        self._solve()

    def _drop_oldest(self, W, m):
        """Marginalize the oldest m rows of W into the prior, record them as left
        (``left``, ``history``) and return the rows that stay."""
        self._marginalize(W, m)
        gone = [(self.first + i, W[i].copy()) for i in range(m)]
        self.left = self.left + gone
        self.history.extend(gone)
        if self.links:
            self._incoming = self.links[m - 1]
        self.links = self.links[m:]
        self.first += m
        return W[m:]

    def _best_start(self, W, lin, starts, terms, steps):
        """The solution of least error among W (solved from the prediction) and the solves
        from the problem's other ``starts`` (a window that still holds step 0: its initial
        prior may leave the first solves a local minimum).  Another start is kept only if its
        error is lower by more than the solves' own tolerance (``absolute_tolerance``, or
        ``relative_tolerance`` of the error): starts that reach the same minimum then never
        swap on rounding.  Only the kept solve counts in ``unconverged``; the other starts are
        tried only when the solution W contradicts the initial priors (PRIOR_SURPRISE)."""
        residuals = [t.residual(W) for t in self.prior if hasattr(t, "residual")]
        r = np.concatenate([np.ravel(x) for x in residuals]) if residuals else np.zeros(0)
        met = r.size == 0 or float(r @ r) <= scipy.stats.chi2.ppf(1.0 - PRIOR_SURPRISE, r.size)
        if W.shape[0] > RESTARTED_ROWS and met:
            return W, lin  # the initial priors are met as expected: no sign of a wrong minimum
        best, best_lin, best_err = W, lin, _linear_error(lin[1])
        margin = max(self.absolute_tolerance, self.relative_tolerance * best_err)
        base = self.unconverged
        kept_unconverged = 0
        # an early window solved from the other starts as a precaution: cheaply
        limit = min(self.max_iterations, RESTARTED_ITERATIONS) if met else self.max_iterations
        for W0 in starts():
            before = self.unconverged
            try:
                W1, lin1 = self._gauss_newton(W0, terms, steps, limit)
            except ConvergenceError:
                continue
            err = _linear_error(lin1[1])
            if err < best_err - margin:
                best, best_lin, best_err = W1, lin1, err
                kept_unconverged = self.unconverged - before
        self.unconverged = base + kept_unconverged
        if best is not W:
            keys = self.layout.keys(range(best.shape[0]))
            self._linearize(best, terms, keys)  # the kept solve's linearization
        return best, best_lin

    def _solve_newest(self):
        """Gauss-Newton on the newest step alone, the step before it held at its estimate
        (:class:`HeldPredecessor` of the links between them): a step without information of
        its own in a window that already spans a gap (see ``informative``)."""
        W = self.W
        k = self.first + W.shape[0] - 1
        links = [t for t in self.problem.window_terms([k - 1, k]) if t.arity == 2]
        own = self.problem.window_terms([k])
        x, _ = self._gauss_newton(W[-1:], [HeldPredecessor(links, W[-2])] + own,
                                  np.array([k]))
        W = W.copy()
        W[-1] = x[0]
        self.W = W
        self._silent = (links, own)
        self.steps_done += 1

    def _gauss_newton(self, W, terms, steps, max_iterations=None):
        """The Gauss-Newton loop of :meth:`_solve` on the rows W of ``steps`` with ``terms``
        (at most ``max_iterations`` linear solves, default the smoother's, the damped
        fallback included); returns the solution and its linearization (W, blocks)."""
        limit = self.max_iterations if max_iterations is None else int(max_iterations)
        L = W.shape[0]
        keys = self.layout.keys(range(L))
        it = 0
        W_prev, prev_err = W, np.inf
        converged = False
        # the held parts of the terms (the Hermite rule's jerk) are held until they keep the
        # solve from converging (see linearize_exactly); the window terms are reused by the
        # next solves, which start held again.  Large mechanisms hold them while they
        # contract fast enough to settle within the solves left (held_horizon).
        linearize_exactly(terms, False)
        hold = 0 if self.step_tolerance is None else self.held_solves
        held_before = None
        while True:
            err, blocks = self._linearize(W, terms, keys)
            lin = (W, blocks)
            if err <= residual_floor(self.step_tolerance):
                converged = True  # every whitened residual is at rounding level already
                break
            if it == 0 and not np.isfinite(err):  # nothing to fall back to
                raise ConvergenceError(
                    f"fixed-lag smoother: the error of window {steps[0]}-{steps[-1]} is not "
                    f"finite at its initial estimate (a non-finite input or a diverged "
                    f"previous step)", residual=err, iterations=0)
            if not err <= prev_err * (1.0 + 1e-9):  # the last step raised the error
                W, err, it, lin = self._fallback(W_prev, terms, keys, steps, it, limit)
                converged = True
                break
            if it >= limit:
                break
            D, predicted = self._newton_step(blocks, keys, terms, W, err)
            it += 1
            W_prev, prev_err = W, err
            W = W + D
            if hold:
                change = held_change(terms, W_prev, W)
                if self._converged(D, predicted, err) and change <= self.step_tolerance:
                    converged = True
                    break
                hold_while_settling(terms, change, held_before, min(limit - it, hold),
                                    self.step_tolerance)
                held_before = change
                continue
            if self._converged(D, predicted, err) \
                    and held_settled(terms, W_prev, W, self.step_tolerance):
                converged = True  # W + D is the (free) last Gauss-Newton step
                break
            linearize_exactly(terms)  # a second solve: see EXACT_FROM_SECOND_SOLVE
        if not converged and self.on_failure == "best":
            W, err, it, lin = self._fallback(W, terms, keys, steps, it, limit)
            converged = True
        self.iterations += it
        self.max_iterations_per_step = max(self.max_iterations_per_step, it)
        if not converged:
            raise ConvergenceError(
                f"fixed-lag smoother did not converge at step {steps[-1]} "
                f"(window {steps[0]}-{steps[-1]})", residual=err, iterations=it)
        return W, lin

    def _check_coordinates(self):
        """Switch independent coordinates when the current ones become ill-conditioned."""
        if self.reselect is None:
            return
        lay = self.layout
        best, q_best, q_cur = self.problem.best_indices(self.W[:, lay.slice("q")])
        if q_cur >= self.reselect * q_best or tuple(best) == tuple(self.problem.indices):
            return
        old = list(self.problem.indices)
        new = self.problem.with_indices(best)
        # x_old = T x_new: z_old = q[old], zd_old = v[old], zdd_old = a[old]
        T = np.eye(self.dim)
        for zs, xs in (("z", "q"), ("zd", "v"), ("zdd", "a")):
            T[lay.slice(zs)] = lay.selector(xs)[old]
        self.prior = [t.remapped(T) if isinstance(t, HeldPredecessor)
                      else UnaryLinear(t.rows, t.A @ T, t.b) for t in self.prior]
        W = self.W.copy()
        for zs, xs in (("z", "q"), ("zd", "v"), ("zdd", "a")):
            W[:, lay.slice(zs)] = W[:, lay.slice(xs)][:, list(best)]
        self.W = W
        self._set_problem(new)
        self.switches.append((self.first + W.shape[0] - 1, tuple(best)))
        self._solve()
        self.steps_done -= 1

    def _fallback(self, W_prev, terms, keys, steps, it, limit):
        """Damped Gauss-Newton / LM (mbfg.solvers.batch.optimize) from the best point
        (with ``on_failure="best"``: a full solve of at most ``limit`` iterations that keeps
        its best point if it does not converge)."""
        self.fallbacks += 1
        linearize_exactly(terms)
        keep_best = self.on_failure == "best"
        remaining = limit if keep_best else max(1, limit - it)
        try:
            W, st = optimize(terms, W_prev, keys, max_iterations=remaining,
                             relative_tolerance=self.relative_tolerance,
                             step_scale=self.step_scale, step_tolerance=self.step_tolerance,
                             raise_on_failure=not keep_best,
                             what=f"fixed-lag smoother at step {steps[-1]}")
        except ConvergenceError as exc:
            self.iterations += it + exc.iterations
            raise ConvergenceError(
                f"fixed-lag smoother did not converge at step {steps[-1]} "
                f"(window {steps[0]}-{steps[-1]}, damped fallback)",
                residual=exc.residual, iterations=it + exc.iterations) from None
        if not st.converged:
            self.unconverged += 1
        err, blocks = self._linearize(W, terms, keys)
        return W, err, it + st.iterations, (W, blocks)


__all__ = [
    "SmootherProblem", "RepartitioningProblem", "HeldPredecessor", "prediction_matrix",
    "FixedLagSmoother"
]
