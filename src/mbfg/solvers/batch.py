"""Batch Gauss-Newton / Levenberg-Marquardt loop whose cost is linear in the trajectory length.

gtsam's C++ optimizers copy the whole ``Values`` into every Python ``CustomFactor`` call,
making each iteration O(factors x variables) (measured in docs/benchmarks.md).
This loop keeps the estimate as a numpy array ``X`` (one row per step vector, see
:mod:`mbfg.graphs.layout`) and hands gtsam only native Gaussian factors:

* every :class:`~mbfg.graphs.batch_term.BatchTerm` evaluates a family of factors (linear or nonlinear) for all its
  steps at once with numpy and appends one native ``JacobianFactor`` per step, in gtsam's
  usual delta form ``||A delta + e(X)||``;
* ``delta`` by sequential QR elimination in time order (in C++; QR rather than Cholesky
  because the constraint factors are many orders tighter than the others);
* causal square graphs (``causal=True``: forward dynamics, where each step's own rows and the
  link into it determine it) have a block lower-bidiagonal Jacobian in time order, and their
  undamped Gauss-Newton step is solved by block forward substitution instead
  (:func:`causal_step`: one batched LU of the steps' square diagonal blocks and a recurrence
  over the steps, the same step as the QR to rounding); gtsam's QR remains the fallback
  whenever the system is not of that shape, a diagonal block is singular, or damping is on;
* the step is accepted if the total error decreases; otherwise Levenberg-Marquardt damping
  ``lambda ||D delta||^2`` with Marquardt's scaling D^2 = diag(J^T J) is added and the step
  retried (the damping is then dimensionless: it weighs each component by its own
  curvature, which in these graphs spans many orders of magnitude).

Stopping: the error decrease of an accepted step, or the decrease the Gauss-Newton model
predicts, falls below ``relative_tolerance`` times the error (or the error below
``absolute_tolerance``), or an undamped step lands where the linear model said it would (to
``model_tolerance`` relative; round-off in the error of tightly weighted graphs is ~1e-9): the problem is then linear around the optimum and one more solve
would only confirm it.  Not converging within ``max_iterations`` raises
:class:`~mbfg.errors.ConvergenceError` carrying the residual (unless ``raise_on_failure=False``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gtsam
import numpy as np

from mbfg.errors import ConvergenceError
from mbfg.factors.gaussian import unit_noise
from mbfg.graphs.batch_term import add_blocks
from mbfg.solvers.sparse import assemble, causal_solve

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


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


def step_converged(
    D: ArrayLike, step_scale: np.ndarray | None, step_tolerance: float | None
) -> bool:
    """Newton's test for a square problem: the error left after the update ``D`` (any shape
    ending in dim), estimated by quadratic convergence as the square of the update measured
    in ``step_scale`` (dim,), is at most ``step_tolerance`` (both dimensionless; an ``inf``
    scale leaves a variable out).  False when either is None."""
    if step_scale is None or step_tolerance is None:
        return False
    m = float(np.max(np.abs(D) / step_scale))
    return m * m <= step_tolerance


def held_change(terms: list, X0: np.ndarray, X1: np.ndarray) -> float:
    """The largest whitened change (dimensionless) of the parts that terms hold constant in
    their linearization (a term's ``held_change(X0, X1)``, e.g. the jerk of the Hermite rule's
    links) between the linearization point X0 and the update X1; 0 without such parts."""
    changes = [term.held_change(X0, X1) for term in terms if hasattr(term, "held_change")]
    return float(np.max(changes)) if changes else 0.0  # (NaN if any is)


def held_settled(terms: list, X0: np.ndarray, X1: np.ndarray,
                 step_tolerance: float | None) -> bool:
    """Whether the parts that terms hold constant in their linearization moved by at most
    ``step_tolerance`` between the linearization point X0 and the update X1
    (:func:`held_change`).  The linearization does not see them, so their change is
    residual the update leaves, not covered by Newton's quadratic estimate of
    :func:`step_converged`: it is bounded like the error that test allows."""
    return step_tolerance is None or held_change(terms, X0, X1) <= step_tolerance


HOLD_MIN_COORDINATES = 32
"""Mechanisms with at least this many coordinates keep the held parts of their terms (the
Hermite rule's jerk) held through further solves while their change contracts fast enough
to settle within the solves left (:func:`held_settles_in`); the exact derivatives are a
dense (n, 2n) block per step (O(n^2) entries, O(n^3) work), where a held solve costs O(n).
Measured on the 1 m pendulum chain, smoother window 2, Hermite rule, the same number of
solves either way: 4.1 against 5.9 ms/step at n = 20, 9.9 against 18.4 at n = 32 and 37
against 170 at n = 200 (the held parts contract by 0.03-0.08 per solve there).  Smaller
mechanisms keep the rules validated on the generated families over 100 s: the smoother
switches at a window's second solve, :func:`optimize` once a step converged but left the
held parts unsettled; their exact derivatives cost little."""

HELD_HORIZON = 8
"""The fewest further solves over which :func:`held_settles_in` may predict held parts to
settle before a large mechanism takes the exact derivatives (:func:`held_horizon`)."""


def held_horizon(n_coordinates: int) -> int:
    """The most further solves over which the held parts of a mechanism with
    ``n_coordinates`` may be predicted to settle (:func:`held_settles_in`) before the solvers
    take the exact derivatives: 0 below :data:`HOLD_MIN_COORDINATES` (the rules validated on
    small mechanisms), else max(HELD_HORIZON, n / 8).  An exact solve costs about n / 25
    held ones on the pendulum chains (2 at n = 32, 8 at n = 200, the dense KKT solves of
    the derivatives growing faster beyond) and the exact derivatives converge in about 3,
    so holding pays for up to about n / 8 solves; a fixed 8 made the 400-link chain's
    batch (single retried steps, 50 iterations each) take them, and 2-4x longer."""
    n = int(n_coordinates)
    return 0 if n < HOLD_MIN_COORDINATES else max(HELD_HORIZON, n // 8)


def held_settles_in(change: float, previous: float | None, solves: int,
                    step_tolerance: float | None) -> bool:
    """Whether held parts that changed by ``previous`` and then ``change`` in two successive
    solves (:func:`held_change`) are predicted to settle, contracting at that ratio, within
    ``solves`` more: change * (change / previous)^solves <= step_tolerance.  True after the
    first solve (``previous`` None: no ratio yet) and when they have settled already."""
    if change != change:
        return False  # NaN: nothing to predict from
    if step_tolerance is None or change <= step_tolerance or previous is None:
        return True
    if not previous > 0.0 or not change < previous:
        return False
    return change * (change / previous) ** max(int(solves), 0) <= step_tolerance


def hold_while_settling(terms: list, change: float, previous: float | None, solves: int,
                        step_tolerance: float | None) -> None:
    """Linearize the terms' held parts exactly (:func:`linearize_exactly`) where their
    ``change`` after ``previous`` is not predicted to settle within ``solves`` more
    (:func:`held_settles_in`); nothing when no solve is left."""
    if solves > 0 and not held_settles_in(change, previous, solves, step_tolerance):
        linearize_exactly(terms)


def linearize_exactly(terms: list, on: bool = True) -> bool:
    """Ask the terms that hold parts of their rows constant in their linearization (those
    with a ``linearize_exactly`` method, e.g. the Hermite rule's jerk terms,
    :meth:`mbfg.graphs.links.IntegratorLinks.linearize_exactly`) to linearize them exactly
    (``on``) or to hold them again.  Holding them is cheaper and converges nearly as fast on
    a motion that is slow at the time step; where the held parts are what keeps a solve from
    converging (they moved more than :func:`held_settled` allows after a step that was
    converged otherwise, or the error rose), the solvers switch to the exact derivatives,
    with which Newton converges quadratically.  Returns whether any term changed."""
    changed = False
    for term in terms:
        switch = getattr(term, "linearize_exactly", None)
        if switch is not None:
            changed = switch(on) or changed
    return changed


def residual_floor(step_tolerance: float | None) -> float:
    """The error 1/2 |r|^2 of whitened (dimensionless) residuals whose norm is
    ``step_tolerance``: a square problem whose error is below it is solved to the accuracy
    that :func:`step_converged` asks of the update, whatever the step does (near a singular
    linearization the Newton step can stay finite along a direction the residuals do not
    see).  0 when ``step_tolerance`` is None."""
    return 0.0 if step_tolerance is None else 0.5 * float(step_tolerance) ** 2


CAUSAL_SPARSE_MIN_DIM = 128
"""Causal problems whose step vectors have at least this many components are linearized
sparse and solved by :func:`mbfg.solvers.sparse.causal_solve` (one sparse LU per step, cost
about linear in the number of bodies); smaller ones by the dense :func:`causal_step`, which
is faster there.  A performance threshold: on pendulum chains one linearization and solve of
100 steps takes 11 ms dense and 13 ms sparse at 71 components (10 links), 34 and 29 ms at 141
(20 links), 160 and 81 ms at 281 (40 links)."""


def _linearization(terms, X, keys, causal):
    """(gtsam graph, None), or for causal problems (None, the terms' blocks), or for large
    causal ones (None, the sparse (A, e) of :func:`mbfg.solvers.sparse.assemble`): the graph
    is then built only if gtsam has to eliminate it."""
    if causal:
        if X.shape[1] >= CAUSAL_SPARSE_MIN_DIM:
            return None, assemble(terms, X)
        return None, [t.blocks(X) for t in terms]
    return linearize(terms, X, keys), None


def _dense(blocks, terms, X):
    """The terms' dense blocks at X, for a linearization that may be the sparse (A, e)."""
    return [t.blocks(X) for t in terms] if isinstance(blocks, tuple) else blocks


def _causal_step(blocks, terms, X, work, dense=True):
    """The undamped step of a causal problem (see :func:`causal_step`) and the blocks it
    linearized to, or (None, blocks) when the system declines that shape.  A sparse
    linearization that declines is tried dense only if ``dense``."""
    if isinstance(blocks, tuple):
        step = causal_solve(*blocks, *X.shape)
        if step is not None or not dense:
            return step, blocks
        blocks = _dense(blocks, terms, X)
    return causal_step(blocks, len(X), X.shape[1], work), blocks


def total_error(terms: list, X: ArrayLike) -> float:
    return float(sum(t.error(X) for t in terms))


def linearize(terms: list, X: ArrayLike, keys: list) -> gtsam.GaussianFactorGraph:
    """The whole linear system at X (delta form)."""
    lin = gtsam.GaussianFactorGraph()
    for t in terms:
        t.linearize(X, keys, lin)
    return lin


def graph_of(blocks: list, keys: list) -> gtsam.GaussianFactorGraph:
    """Native gtsam Gaussian factors of the terms' linearized blocks
    (:meth:`~mbfg.graphs.batch_term.BatchTerm.blocks`); the same graph as :func:`linearize`."""
    lin = gtsam.GaussianFactorGraph()
    for b in blocks:
        add_blocks(b, keys, lin)
    return lin


CAUSAL_STEP_MAX_ENTRIES = 2 ** 24
"""Most entries (16.8 M, 134 MB) of the dense per-step block arrays that :func:`causal_step`
allocates for a whole segment (its diagonal and link blocks); beyond, a large mechanism's
steps are eliminated by gtsam's QR one at a time instead."""


def causal_step(blocks: list, n_steps: int, dim: int, work: dict | None = None) -> tuple | None:
    """The Gauss-Newton step (n_steps, dim) minimizing ``sum ||A delta + e||^2`` of the
    linearized blocks of a causal square graph, and that sum's half (the error the linear
    model predicts), by block forward substitution; None when the system is not of that
    shape or a diagonal block is singular (the caller then eliminates it with gtsam).

    The shape: every factor touches one step or two consecutive ones; the rows of step k are
    those of the factors whose last step is k.  Step 0 has at least ``dim`` rows (its priors
    may over-determine it: least squares by QR), every later step exactly ``dim`` nonzero
    rows (rows that are exactly zero, e.g. a link's energy row of zero weight, are dropped).
    Then, with D_k the block of step k's rows on x_k and L_k the one on x_{k-1},

        D_k delta_k = -e_k - L_k delta_{k-1},

    solved with one batched LU of every D_k.  L_k has few nonzero rows (the integrator links),
    so only the columns of D_k^-1 for those rows are formed.  The solution is that of gtsam's
    elimination of the same factors (both exact for a nonsingular square system; the step-0
    least squares leaves the later rows free to be met exactly).  ``work``: a dict owned by
    the caller in which the arrays of one call are kept for the next (of the same size), so
    that their memory is not faulted in again every iteration."""
    if n_steps == 0:
        return None
    cnt = np.zeros(n_steps, int)
    for rows, _, e in blocks:
        last = rows[:, -1]
        if rows.shape[1] > 2 or (rows.shape[1] == 2 and np.any(rows[:, 0] != last - 1)):
            return None
        if e.shape[1] and np.unique(last).size != last.size:
            return None  # two factors of one family on a step: not the causal graph's shape
        cnt[last] += e.shape[1]
    if cnt[0] < dim or np.any(cnt[1:] < dim):
        return None
    cap = int(cnt.max())
    if 2 * n_steps * cap * dim > CAUSAL_STEP_MAX_ENTRIES:
        return None  # a large mechanism: gtsam's QR works one step at a time
    Dg = _zeros(work, "D", (n_steps, cap, dim))
    Lo = _zeros(work, "L", (n_steps, cap, dim))
    E = _zeros(work, "e", (n_steps, cap))
    lpos = np.zeros(cap, bool)  # row positions that may hold a block on the previous step
    fill = np.zeros(n_steps, int)
    # the families covering most steps first: they fill the same positions of every step
    # (slices instead of scattering); the order of a step's rows does not change its solution
    for rows, A, e in sorted(blocks, key=lambda b: -b[2].shape[0]):
        T, r = e.shape
        if T * r == 0:
            continue
        s = rows[:, -1]
        o = fill[s]
        if s[-1] - s[0] == T - 1 and o[0] == o[-1] and np.all(o == o[0]):
            at = (slice(s[0], s[0] + T), slice(o[0], o[0] + r))  # contiguous, same positions
        else:
            at = (s[:, None], o[:, None] + np.arange(r))
        Dg[at] = A[-1]
        if len(A) == 2:
            Lo[at] = A[0]
            lpos[o.min():o.max() + r] = True
        E[at] = e
        fill[s] += r
    R0, e0 = Dg[0, :cnt[0]].copy(), E[0, :cnt[0]].copy()
    over = 1 + np.flatnonzero(cnt[1:] > dim)
    if over.size:  # steps with more rows: keep their nonzero rows, which must be dim
        Do, Lov, Eo = Dg[over], Lo[over], E[over]
        live = np.any(Do != 0.0, axis=2) | np.any(Lov != 0.0, axis=2) | (Eo != 0.0)
        if np.any(live.sum(axis=1) != dim):
            return None
        keep = np.argsort(~live, axis=1, kind="stable")[:, :dim]
        t = np.arange(over.size)[:, None]
        Dg[over, :dim], Lo[over, :dim], E[over, :dim] = Do[t, keep], Lov[t, keep], Eo[t, keep]
        lpos[:dim] |= np.any(Lo[over, :dim] != 0.0, axis=(0, 2))
    Dk, Lk, Ek = Dg[1:, :dim], Lo[1:, :dim], E[1:, :dim]
    lrows = np.flatnonzero(lpos[:dim])
    # D_k^-1 [e_k, the unit columns of L_k's rows]: L_k's few nonzero rows carry the link
    rhs = np.zeros((n_steps - 1, dim, 1 + lrows.size))
    rhs[:, :, 0] = Ek
    rhs[:, lrows, 1 + np.arange(lrows.size)] = 1.0
    try:
        Q, R = np.linalg.qr(R0)
        x0 = np.linalg.solve(R, -(Q.T @ e0))
        G = np.linalg.solve(Dk, rhs) if n_steps > 1 else rhs
    except np.linalg.LinAlgError:
        return None
    P = list(G[:, :, 1:] @ Lk[:, lrows, :])  # D_k^-1 L_k
    xs, prev = [x0], x0
    for Pk, gk in zip(P, list(-G[:, :, 0])):
        prev = gk - Pk @ prev
        xs.append(prev)
    x = np.array(xs)
    if not np.all(np.isfinite(x)):
        return None
    r0 = R0 @ x[0] + e0
    rk = (Dk @ x[1:, :, None])[:, :, 0] + (Lk @ x[:-1, :, None])[:, :, 0] + Ek
    return x, 0.5 * float(r0 @ r0 + np.sum(rk * rk))


def _zeros(work: dict | None, name: str, shape: tuple) -> np.ndarray:
    """A zero array of ``shape``, reusing the one of ``work`` (a dict owned by the caller)
    when it has that shape."""
    if work is None:
        return np.zeros(shape)
    buf = work.get(name)
    if buf is None or buf.shape != shape:
        buf = work[name] = np.zeros(shape)
    else:
        buf.fill(0.0)
    return buf


def read_delta(delta: gtsam.VectorValues, keys: list) -> np.ndarray:
    return np.stack([delta.at(int(k)) for k in keys])


def marquardt_scale(lin: gtsam.GaussianFactorGraph, keys: list, dim: int) -> np.ndarray:
    """(len(keys), dim) square roots of the diagonal of J^T J of ``lin``: Marquardt's scaling
    of the damping, lambda diag(J^T J) (gtsam's ``diagonalDamping``), so that damping acts
    alike on every component however differently the whitened rows weigh them.  Components
    the rows do not touch get the smallest nonzero scale of the system."""
    ijs = lin.sparseJacobian_()  # 1-based (row, column, value); columns: sorted keys, then b
    cols = ijs[1].astype(int) - 1
    var = cols < len(keys) * dim
    d = np.bincount(cols[var], weights=ijs[2][var] ** 2, minlength=len(keys) * dim)
    order = np.argsort(np.argsort(np.asarray(keys, dtype=np.uint64)))  # key -> sorted position
    d = d.reshape(len(keys), dim)[order]
    positive = d[d > 0.0]
    floor = positive.min() if positive.size else 1.0
    return np.sqrt(np.maximum(d, floor))


def optimize(
    terms: list,
    X: ArrayLike,
    keys: list,
    *,
    max_iterations: int = 50,
    relative_tolerance: float = 1e-9,
    absolute_tolerance: float = 0.0,
    initial_lambda: float = 1e-6,
    watchdog: int = 2,
    raise_on_failure: bool = True,
    model_tolerance: float = 1e-5,
    step_scale: np.ndarray | None = None,
    step_tolerance: float | None = None,
    what: str = "batch optimization",
    causal: bool = False,
    hold: int = 0,
) -> tuple:
    """Minimize ``sum(term.error(X))`` over the step vectors ``X`` (N, dim) with keys ``keys``.

    ``step_scale`` (dim,) and ``step_tolerance``: also converged when an accepted undamped
    step passes :func:`step_converged` (the unit-free test for square problems, whose error
    falls to rounding level), or when the error is below :func:`residual_floor`.  Such
    square problems are not stopped by a small relative decrease, and an exact linear model
    stops them only when it predicted most of the error gone: a model that cannot lower the
    error of a square system is a stall (a diverged initial estimate), not an optimum.
    Returns ``(X, stats)``.  Undamped Gauss-Newton steps are tried first.  A step that raises
    the error is still taken up to ``watchdog`` times in a row (tight constraint factors make
    the first step from a rough initial estimate overshoot, and the next one lands near the
    optimum); if that does not produce a new best error, the best point is restored and
    Levenberg-Marquardt damping is used from there.

    ``causal``: the graph is square and causal (see :func:`causal_step`), so undamped steps
    are solved by block forward substitution, and by gtsam's QR only where that declines.
    Large causal graphs of more than one step after the initial one (step vectors of
    ``CAUSAL_SPARSE_MIN_DIM`` components or more) get no damped steps: gtsam would eliminate
    them densely (a 300-step segment of an 80-link chain spent 167 s in them before giving
    up), and their callers (the batch forward dynamics) retry shorter segments from fresh
    estimates instead, which is cheaper.  When the undamped steps stall they stop
    unconverged.  A single step is still damped when it must be (its elimination is cheap).

    Parts that terms hold constant in their linearization (:func:`linearize_exactly`) are
    linearized exactly once an undamped step converged but left them unsettled.  With
    ``hold`` > 0 (large mechanisms: :func:`held_horizon`) they are instead, after any
    accepted undamped step, where their change does not contract fast enough to settle
    within the iterations left, at most ``hold`` (:func:`held_settles_in`),
    and never in large causal graphs without damped steps: where their held parts do not
    settle within ``max_iterations`` the callers retry shorter segments, in which they
    contract faster (on a 100-link chain the exact derivatives of a 100-step segment took
    2.6x the time and 4x the memory of holding them).
    """
    t0 = time.perf_counter()
    X = np.array(X, float)
    keys = [int(k) for k in keys]
    # the steps form a chain: sequential QR in time order is the ideal elimination (no fill-in
    # beyond one step) and ~20 % faster than gtsam's default COLAMD + multifrontal tree
    ordering = gtsam.Ordering(keys)
    dim = X.shape[1]
    absolute_tolerance = max(absolute_tolerance, residual_floor(step_tolerance))
    err = total_error(terms, X)
    stats = SolverStats(initial_error=err)
    lam = 0.0
    converged = err <= absolute_tolerance
    best_X, best_err = X, err
    trial = 0  # consecutive undamped steps taken although they raised the error
    work: dict = {}  # causal_step's arrays, kept from one iteration to the next
    undamped_only = causal and dim >= CAUSAL_SPARSE_MIN_DIM and len(keys) > 2
    # square problems (step_tolerance given) can meet their rows: an error that the model or
    # a step cannot lower is a stall (a diverged initial estimate, a singular system), not
    # an optimum, so only the residual floor, the step test or an exact model stop them
    square = step_tolerance is not None
    held_before = None  # held_change of the last undamped step (with ``hold``)
    while not converged and stats.iterations < max_iterations:
        base, blocks = _linearization(terms, X, keys, causal)
        damping_scale = None  # of this linearization, when a damped step needs it
        accepted = False
        while stats.iterations < max_iterations and lam <= 1e12:
            stats.iterations += 1
            step = None
            stalled = False
            if lam == 0.0 and blocks is not None:
                # a large segment: its sparse solve or nothing (the dense blocks of every
                # step would not fit; a singular step, e.g. at a diverged iterate, stalls it)
                step, blocks = _causal_step(blocks, terms, X, work, dense=not undamped_only)
                stalled = step is None and undamped_only
                if step is None and not stalled:  # not causal here: gtsam's QR decides
                    base, blocks = graph_of(blocks, keys), None
            prev_X = X
            if stalled:
                predicted = new_err = np.inf
            elif step is not None:
                predicted = step[1]
                Y = X + step[0]
                new_err = total_error(terms, Y)
            else:
                if base is None:  # gtsam needs the dense blocks
                    blocks = _dense(blocks, terms, X)
                    base = graph_of(blocks, keys)
                lin = base
                if lam > 0.0:
                    lin = gtsam.GaussianFactorGraph()
                    lin.push_back(base)
                    if damping_scale is None:
                        damping_scale = marquardt_scale(base, keys, dim)
                    z, model = np.zeros(dim), unit_noise(dim)
                    for i, k in enumerate(keys):
                        lin.add(k, np.diag(np.sqrt(lam) * damping_scale[i]), z, model)
                try:
                    delta = lin.eliminateSequential(ordering, gtsam.EliminateQR).optimize()
                    predicted = float(base.error(delta))
                    Y = X + read_delta(delta, keys)
                    new_err = total_error(terms, Y)
                except RuntimeError:  # indeterminant linear system: damp and retry
                    predicted = new_err = np.inf
            if (lam == 0.0 and trial == 0 and err - predicted <= relative_tolerance * err
                    and not square):
                converged = True  # the Gauss-Newton model promises no further decrease
                break
            if np.isfinite(new_err) and new_err <= best_err:
                decrease = best_err - new_err
                X, err = Y, new_err
                best_X, best_err = X, err
                stats.history.append(err)
                # the Gauss-Newton model predicted the new error to within the tolerance: the
                # problem is locally linear and the next step would gain about that mismatch
                model_exact = (lam == 0.0 and abs(new_err - predicted) <= model_tolerance * new_err
                               and (not square or predicted <= model_tolerance * decrease))
                small_step = lam == 0.0 and step_converged(Y - prev_X, step_scale, step_tolerance)
                settled = True
                if hold and lam == 0.0:
                    change = held_change(terms, prev_X, Y)
                    settled = step_tolerance is None or change <= step_tolerance
                    if not undamped_only:
                        hold_while_settling(terms, change, held_before,
                                            min(max_iterations - stats.iterations, hold),
                                            step_tolerance)
                    held_before = change
                elif model_exact or small_step:
                    settled = held_settled(terms, prev_X, Y, step_tolerance)
                    if not settled:  # the held parts are what is left: linearize them
                        linearize_exactly(terms)
                lam = 0.0 if lam <= initial_lambda else lam / 10.0
                trial = 0
                converged = (err <= absolute_tolerance
                             or (decrease <= relative_tolerance * err and not square)
                             or ((model_exact or small_step) and settled))
                accepted = True
                break
            if lam == 0.0 and trial < watchdog and np.isfinite(new_err):
                X, err = Y, new_err  # watchdog step: take it, judge it by the next one
                trial += 1
                accepted = True
                break
            if undamped_only:  # no damped solve of large causal graphs: see the docstring
                break
            if lam == 0.0:  # an undamped step failed: no part of it held from here on
                linearize_exactly(terms)
            if trial:  # the watchdog steps did not pay off: back to the best point, damped
                X, err, trial = best_X, best_err, 0
                lam = initial_lambda
                base, blocks = linearize(terms, X, keys), None
                damping_scale = None
                continue
            lam = initial_lambda if lam == 0.0 else lam * 10.0
        if not accepted or converged:
            break
    X, err = best_X, best_err
    stats.final_error = err
    stats.converged = bool(converged)
    stats.seconds = time.perf_counter() - t0
    if not converged and raise_on_failure:
        raise ConvergenceError(f"{what} did not converge", residual=err,
                               iterations=stats.iterations)
    return X, stats


__all__ = [
    "SolverStats", "step_converged", "held_change", "held_settled", "held_settles_in",
    "hold_while_settling", "HOLD_MIN_COORDINATES", "HELD_HORIZON", "held_horizon",
    "residual_floor", "marquardt_scale",
    "total_error", "linearize", "graph_of", "causal_step", "read_delta", "optimize"
]
