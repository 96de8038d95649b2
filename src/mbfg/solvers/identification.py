"""Levenberg-Marquardt over several step chains and one shared parameter vector.

The problem (duck-typed, built by :mod:`mbfg.graphs.identification`) provides
``linear_system(Xs, theta, out=None) -> (system, error)`` (``out``: a system of the same
problem no longer needed, whose arrays it may overwrite), ``error(Xs, theta)``, ``keys`` (one
list of step keys per chain), ``theta_key``, ``p`` (parameter dimension, 0 when fixed) and
``ordering()`` (every chain in time order, theta last).  The system
(:class:`~mbfg.graphs.identification.JointSystem`) holds the whitened linearization as arrays:
per chain one factor per step on (x_k, theta), one factor per pair of consecutive steps whose
blocks are the same for every pair, a few linear factors on single steps; and theta's prior.

**Elimination.**  The normal equations of a chain are block tridiagonal in its steps with a
border (the steps' coupling to theta); the chains couple only through theta.  With the steps
in time order (and each step's components in the order the system gives, where the pair
blocks couple only nearby components) they form a band matrix H_ss of half-bandwidth b (d + 2
for the identification graph's steps of dimension d), factored by LAPACK's banded Cholesky
(``dpbtrf``: the steps eliminated in time order, the same elimination as gtsam's sequential
Cholesky of the steps, in O(N d b^2)).  The border then gives theta's marginal information,
the Schur complement S = H_tt - H_ts H_ss^-1 H_st (what gtsam's ``Marginals`` returns for that
key), by banded triangular solves of its p columns (``dtbtrs``); numpy solves theta's small
dense system and the back-substitution gives every step.  The band is assembled, factored and
forward-solved ``CHUNK`` steps at a time while the chunk is in cache, each chunk's leading
rows carrying the elimination of the one before (:class:`_Carry`).  Each solve costs
O(N d b (b + p)), linear in the number of steps, and nothing per factor is done in Python.

Should the Cholesky meet a pivot that is not positive (a singular or badly conditioned system),
sequential QR of the whole system as a gtsam graph (theta last; its last conditional's R^T R
is the information) serves the rest of the call: it only squares the square root of the
conditioning.  When a step raises the cost, Marquardt's damping ``lambda sum_i H_ii
delta_i^2`` (H_ii the normal equations' diagonal) is added on every variable: it has the
variables' units, so the path of the iterations does not depend on the mechanism's units.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gtsam
import numpy as np
from numpy.lib.stride_tricks import as_strided
from scipy.linalg.blas import dsyrk
from scipy.linalg.lapack import dpbtrf, dtbtrs, dtrtrs

from mbfg.solvers.batch import SolverStats, read_delta

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["JointStats", "optimize_joint", "parameter_information", "solve_joint"]


@dataclass
class JointStats(SolverStats):
    """:class:`~mbfg.solvers.batch.SolverStats` of the joint solve, plus ``reason``: why it
    stopped, ``elimination``: the method of the last solve (``"cholesky"`` or ``"qr"``), and
    ``system``: the linear system at the returned point (``problem.linear_system``'s)."""
    reason: str = ""
    elimination: str = ""
    system: object = field(default=None, repr=False, compare=False)


def _bandwidth(order: np.ndarray, B0: np.ndarray, B1: np.ndarray) -> int:
    """Half-bandwidth of a chain's normal equations with its steps' components in ``order``:
    the step's own (dense) block, and the nonzeros of the pair coupling B1^T B0 (H[(k+1) d
    + i, k d + j] lies pos[i] - pos[j] + d below the diagonal)."""
    d = order.size
    kd = d - 1
    if B0.size:
        pos = np.empty(d, int)
        pos[order] = np.arange(d)
        i, j = np.nonzero(B1.T @ B0)
        if i.size:
            kd = max(kd, int(np.max(d + pos[i] - pos[j])))
    return kd


def _buffer(work: dict | None, name: str, shape: tuple) -> np.ndarray:
    """An uninitialized array of ``shape``, reused from ``work`` (a dict owned by the caller)
    when it already holds one: the same large arrays every iteration, so that their memory
    is not faulted in again each time."""
    if work is None:
        return np.empty(shape)
    buf = work.get(name)
    if buf is None or buf.shape != shape:
        buf = work[name] = np.empty(shape)
    return buf


CHUNK = 256
"""Steps that :func:`_factor_chain` builds, factors and forward-solves together (a performance
setting: the chunk's band columns, border and factor stay in cache from their assembly to
their solves; results do not depend on it beyond rounding)."""


def _permutation(order: np.ndarray) -> np.ndarray:
    """The matrix P (d, d) with ``A @ P == A[..., order]``: permuting by one matrix product is
    much faster than numpy's gather along a short last axis, and exact (each entry is one
    product by 1 plus zeros; the blocks are finite)."""
    d = order.size
    P = np.zeros((d, d))
    P[order, np.arange(d)] = 1.0
    return P


def _spans(N: int, d: int, kd: int) -> list:
    """The chunks of steps (k0, k1), ``CHUNK`` steps each; a last chunk too short to hold the
    kd rows a chunk's factor couples to the next one's is merged into the one before."""
    size = max(CHUNK, -(-(kd + 1) // d))
    cuts = list(range(0, N, size)) + [N]
    if len(cuts) > 2 and (cuts[-1] - cuts[-2]) * d <= kd:
        del cuts[-2]
    return list(zip(cuts[:-1], cuts[1:]))


@dataclass
class ChainFactor:
    """One chain's banded Cholesky factor and forward solves (:func:`_factor_chain`).

    ``L``: the factor of the whole chain in LAPACK's lower band storage (kd + 1, n);
    ``spans``: the chunks' row ranges (a, b) and ``Y``: each chunk's forward solves
    (b - a, p + 1), the border's W = L^-1 H_st in the first p columns and y = L^-1 g_s in the
    last; ``S``: the chain's part of theta's Schur complement, H_tt - W^T W (p, p); ``g``: its
    part of theta's reduced gradient, g_t - W^T y (p,)."""
    L: np.ndarray
    spans: list
    Y: list
    S: np.ndarray
    g: np.ndarray


class _Carry:
    """The coupling of a chunk starting at row ``a`` to the factored chunk before it, for a
    band of half-bandwidth kd: the factor's coupling block L_C = H_C L_T^-T (H_C = H[a:a+kd,
    a-kd:a], upper triangular within the band; L_T the previous chunk's last kd x kd block of
    L) replaces H_C in the band, the chunk's leading block becomes H[a:a+kd, a:a+kd] - L_C
    L_C^T, and its right-hand sides' first kd rows lose L_C times the previous chunk's last kd
    solved rows (:meth:`apply`, in place)."""

    def __init__(self, kd: int):
        self.kd = kd
        iu, ju = np.triu_indices(kd)
        il, jl = np.tril_indices(kd)
        w = kd + 1  # band row length: flat index of abT[a - kd + j, k] in the slab is j w + k
        self.upper = (iu, ju)
        self.hc = ju * w + kd + iu - ju       # H[a+i, a-kd+j] (i <= j)
        self.lower = (il, jl)
        self.lt = jl * w + il - jl            # L[a-kd+i, a-kd+j] (i >= j), and likewise the
        self.Hc = np.zeros((kd, kd))          # chunk's own leading block H[a+i, a+j]
        self.LT = np.zeros((kd, kd))

    def coupling(self, abT: np.ndarray, a: int) -> np.ndarray:
        """The band's block of rows a .. a+kd-1 and columns a-kd .. a-1 (upper triangular
        within the band), in ``self.Hc``: H_C before the chunk at a is factored, L_C after."""
        self.Hc[self.upper] = abT[a - self.kd:a].reshape(-1)[self.hc]
        return self.Hc

    def apply(self, abT: np.ndarray, a: int, Y_prev: np.ndarray, Rc: np.ndarray) -> None:
        kd = self.kd
        prev = abT[a - kd:a].reshape(-1)      # band columns a-kd .. a-1 (already factored)
        self.coupling(abT, a)
        self.LT[self.lower] = prev[self.lt]
        LCt, info = dtrtrs(self.LT, self.Hc.T, lower=1)   # L_C^T = L_T^-1 H_C^T
        if info != 0:  # pragma: no cover - L_T's diagonal is the factor's, positive
            raise RuntimeError(f"the triangular solve failed ({info})")
        prev[self.hc] = LCt.T[self.upper]
        cur = abT[a:a + kd].reshape(-1)
        cur[self.lt] -= (LCt.T @ LCt)[self.lower]
        Rc[:kd] -= LCt.T @ Y_prev[-kd:]


def _factor_chain(c, lam: float, p: int, work: dict | None = None) -> ChainFactor:
    """Banded Cholesky of one chain's step block (its diagonal times 1 + ``lam``) and its
    forward solves, chunk by chunk (:class:`ChainFactor`; the chunks' factors and solves are
    those of the whole band: each chunk's leading rows carry the elimination of the one
    before, :class:`_Carry`).  Raises RuntimeError when a pivot is not positive.  ``work``:
    reusable buffers of this chain (the returned arrays live in them until the next call)."""
    e = c.e
    N, r, d = c.A_x.shape
    n = N * d
    order = np.asarray(c.order, int)
    kd = _bandwidth(order, c.B0, c.B1)
    # every block in the step order (the solution is permuted back)
    P = _permutation(order)
    B0, B1 = c.B0 @ P, c.B1 @ P
    g = -np.matmul(c.A_x.transpose(0, 2, 1), e[:, :, None])[:, :, 0]   # (N, d)
    pw = c.pair_weights
    if c.e_pair.size:
        ew = c.e_pair if pw is None else c.e_pair * pw
        g[:-1] -= ew @ c.B0
        g[1:] -= ew @ c.B1
    fixed = {}
    for k, A, e0 in c.fixed:
        AP = A @ P
        fixed[k] = fixed.get(k, 0.0) + AP.T @ AP
        g[k] -= A.T @ e0
    g = g @ P
    pair = c.e_pair.size and N > 1
    H0, H1 = (B0.T @ B0, B1.T @ B1) if pair else (None, None)
    H01 = H0 + H1 if pair else None
    C10 = B1.T @ B0 if pair else None   # H[(k+1) d + i, k d + j], the same for every pair
    # pairs whose rows are weighted (ChainBlocks.pair_weights): the shared blocks corrected
    # by B^T diag(w^2 - 1) B at those pairs only
    special = {}
    if pair and pw is not None:
        for t in np.flatnonzero(np.any(pw != 1.0, axis=1)):
            dw = (pw[t] * pw[t] - 1.0)[:, None]
            special[int(t)] = (B0.T @ (dw * B0), B1.T @ (dw * B1), B1.T @ (dw * B0))
    # LAPACK's lower band storage ab[i - j, j] = H[i, j], held transposed (C order) so that
    # abT[a:b].T is the Fortran array dpbtrf wants for rows a..b: abT[j, i - j]
    abT = _buffer(work, "band", (n, kd + 1))
    ab3 = abT.reshape(N, d, kd + 1)
    # each chunk's right-hand sides (the border's p columns and the gradient), (b - a, p + 1)
    # in Fortran order, one after the other
    Rbuf = _buffer(work, "rhs", ((p + 1) * n,))
    rt = c.A_t.shape[1] if p else 0                             # A_t: the last rt rows
    spans = _spans(N, d, kd)
    longest = max(k1 - k0 for k0, k1 in spans)
    Ax = _buffer(work, "Ax", (longest, r, d))
    # each step's block of H and, below it, its coupling to the next step (the same for every
    # pair) and zeros: E[k, i + j, j] for j < d, i <= kd is the step's band column j, read by
    # one strided view
    E = _buffer(work, "E", (longest, 3 * d, d))
    E[:, d:] = 0.0
    if pair:
        E[:, d:2 * d] = C10
    st = E.strides
    beyond = np.add.outer(np.arange(d), np.arange(kd + 1)) >= d  # the next step's entries
    S = np.zeros((p, p), order="F")
    gt = np.zeros(p)
    Ys = []
    carry = _Carry(kd)
    for k0, k1 in spans:
        m, a, b = k1 - k0, k0 * d, k1 * d
        ax, hd = Ax[:m], E[:m, :d]
        np.matmul(c.A_x[k0:k1].reshape(-1, d), P, out=ax.reshape(-1, d))
        np.matmul(ax.transpose(0, 2, 1), ax, out=hd)
        if pair:  # H0 on every step but the last, H1 on every step but the first
            lo, hi = int(k0 == 0), m - int(k1 == N)
            hd[lo:hi] += H01
            if lo:
                hd[0] += H0
            if hi < m:
                hd[m - 1] += H1
        for k, H in fixed.items():
            if k0 <= k < k1:
                hd[k - k0] += H
        here = [t for t in special if k0 - 1 <= t < k1]
        for t in here:
            dH0, dH1, dC = special[t]
            if t >= k0:
                hd[t - k0] += dH0
                E[t - k0, d:2 * d] += dC
            if t + 1 < k1:
                hd[t + 1 - k0] += dH1
        band = ab3[k0:k1]
        band[...] = as_strided(E, shape=(m, d, kd + 1), strides=(st[0], st[1] + st[2], st[1]))
        for t in here:  # the shared coupling back for the next chunk
            if t >= k0:
                E[t - k0, d:2 * d] = C10
        if k1 == N:  # the last step couples to no next one
            band[-1][beyond] = 0.0
        if lam > 0.0:  # Marquardt: H_ii (1 + lam), unit-free
            band[:, :, 0] *= 1.0 + lam
        Rc = Rbuf[(p + 1) * a:(p + 1) * b].reshape(p + 1, b - a)
        if p:
            np.matmul(c.A_t[k0:k1].transpose(0, 2, 1), ax[:, r - rt:],
                      out=Rc[:p].reshape(p, m, d).transpose(1, 0, 2))
        Rc[p] = g[k0:k1].reshape(-1)
        Rc = Rc.T                                                # (b - a, p + 1), Fortran
        if a:
            carry.apply(abT, a, Ys[-1], Rc)
        L, info = dpbtrf(abT[a:b].T, lower=1, overwrite_ab=1)
        if info != 0:
            raise RuntimeError("the Cholesky factorization met a non-positive pivot "
                               f"({a + info})")
        if not np.may_share_memory(L, abT):  # pragma: no cover - f2py factors in place
            abT[a:b] = L.T
        Y, info = dtbtrs(L, Rc, uplo="L", trans="N", overwrite_b=1)
        if info != 0:  # pragma: no cover - dpbtrf's pivots are positive
            raise RuntimeError(f"the triangular solve failed ({info})")
        Ys.append(Y)
        if p:
            W = Y[:, :p]
            S = dsyrk(1.0, W, beta=1.0, c=S, trans=1, overwrite_c=1)   # upper triangle
            gt -= W.T @ Y[:, p]
    if p:
        S = np.triu(S)
        S = -(S + np.triu(S, 1).T)
        At = c.A_t.reshape(-1, p)
        S += At.T @ At
        gt -= At.T @ e[:, r - rt:].reshape(-1)
    return ChainFactor(abT.T, [(k0 * d, k1 * d) for k0, k1 in spans], Ys, S, gt)


def _back_chain(c, f: ChainFactor, dtheta):
    """The steps' delta (N, d) of one chain by back-substitution L^T x = y - W dtheta."""
    N, _, d = c.A_x.shape
    rhs = np.empty(N * d)
    p = f.Y[0].shape[1] - 1
    for (a, b), Y in zip(f.spans, f.Y):
        rhs[a:b] = Y[:, p] - Y[:, :p] @ dtheta if dtheta is not None and p else Y[:, p]
    x, info = dtbtrs(f.L, rhs[:, None], uplo="L", trans="T", overwrite_b=1)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"the triangular solve failed ({info})")
    out = np.empty((N, d))
    out[:, np.asarray(c.order, int)] = x[:, 0].reshape(N, d)
    return out


def solve_joint(system: object, lam: float = 0.0, work: dict | None = None) -> tuple:
    """Gauss-Newton (``lam`` = 0) or damped step of ``system`` by banded Cholesky (module
    docstring): ``(dxs, dtheta, information)`` with dxs one (N, d) array per chain, dtheta
    (p,) or None and the Schur complement S (p, p) of the (damped) system on theta, its
    marginal information (None when p = 0).  Raises RuntimeError when a pivot is not
    positive.  ``work``: a dict the caller keeps between calls, for reusable buffers."""
    p = system.p
    parts = [_factor_chain(c, lam, p, None if work is None else work.setdefault(("chain", i), {}))
             for i, c in enumerate(system.chains)]
    if not p:
        return [_back_chain(c, f, None) for c, f in zip(system.chains, parts)], None, None
    S = _schur(system, parts, lam)
    if work is not None:  # the factors of this solve, for sampling_covariance
        work["factors"] = (system, lam, parts, S)
    gt = -(system.W.T @ system.e_theta)
    for f in parts:
        gt += f.g
    try:
        Lc = np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        raise RuntimeError("theta's marginal information is not positive definite") from None
    dtheta = np.linalg.solve(Lc.T, np.linalg.solve(Lc, gt))
    dxs = [_back_chain(c, f, dtheta) for c, f in zip(system.chains, parts)]
    return dxs, dtheta, S


def _schur(system, parts: list, lam: float) -> np.ndarray:
    """theta's Schur complement S (p, p) of the (damped) system from its chains' factors."""
    S = system.W.T @ system.W
    if lam > 0.0:  # Marquardt, as on the steps
        S += np.diag(lam * system.theta_diagonal())
    for f in parts:
        S += f.S
    return 0.5 * (S + S.T)


def sampling_covariance(system: object, reading_rows: int, work: dict | None = None
                        ) -> np.ndarray | None:
    """theta's sampling covariance (p, p): the spread of its estimate over repeated readings
    when their noise is the only randomness, i.e. the model is exact up to its parameters.

    The estimate's linearized error is -[H^-1 A^T e]_theta (A the whitened Jacobian of
    ``system``, H = A^T A undamped, e the rows' noise in units of their sigmas).  The random
    rows are the last ``reading_rows`` rows of every step (the readings), the initial priors
    and theta's prior (their means drawn from them); the dynamics, integrator and constraint
    rows hold exactly (their sigmas are the model's slack, not noise in the data).  So the
    covariance is G^T A_r^T A_r G, G = H^-1 E_theta the theta columns of H's inverse: G_theta =
    S^-1 (S theta's Schur complement) and, per chain, G_x = -U S^-1 with U = H_xx^-1 H_x,theta
    = L^-T W (:class:`ChainFactor`), solved backwards chunk by chunk while the chunk's factor
    is in cache.  It is at most the posterior covariance S^-1 (H^-1 minus a positive
    semidefinite term); along a null direction both are the prior's.

    ``work``: the dict of the :func:`solve_joint` that last solved ``system`` undamped, whose
    factors are then reused (otherwise ``system`` is factored anew).  Returns None when the
    banded Cholesky cannot factor it (a pivot that is not positive)."""
    p = system.p
    last = None if work is None else work.get("factors")
    if last is not None and last[0] is system and last[1] == 0.0:
        parts, S = last[2], last[3]
    else:
        try:
            parts = [_factor_chain(c, 0.0, p) for c in system.chains]
        except RuntimeError:
            return None
        S = _schur(system, parts, 0.0)
    # M = sum over the random rows of D^T D, D = A_r G S (so that the covariance is
    # S^-1 M S^-1): theta's prior W, the readings' A_t,r - A_x,r U and the initial priors' -A U
    M = system.W.T @ system.W
    for c, f in zip(system.chains, parts):
        N, r, d = c.A_x.shape
        order = np.asarray(c.order, int)
        kd = f.L.shape[0] - 1
        carry = _Carry(kd)
        U_next = None
        for (a, b), Y in zip(reversed(f.spans), reversed(f.Y)):
            rhs = np.array(Y[:, :p], order="F")
            if U_next is not None:  # the rows below the chunk, already solved
                rhs[-kd:] -= carry.coupling(f.L.T, b).T @ U_next[:kd]
            U, info = dtbtrs(f.L[:, a:b], rhs, uplo="L", trans="T", overwrite_b=1)
            if info != 0:  # pragma: no cover - dpbtrf's pivots are positive
                raise RuntimeError(f"the triangular solve failed ({info})")
            U_next = U
            k0, k1 = a // d, b // d
            Uk = np.empty((k1 - k0, d, p))
            Uk[:, order, :] = U.reshape(k1 - k0, d, p)   # back to the coordinates' order
            if reading_rows:
                D = c.A_t[k0:k1, c.A_t.shape[1] - reading_rows:] - np.matmul(
                    c.A_x[k0:k1, r - reading_rows:], Uk)
                D = D.reshape(-1, p)
                M += D.T @ D
            for k, A, _ in c.fixed:  # the initial priors
                if k0 <= k < k1:
                    AU = A @ Uk[k - k0]
                    M += AU.T @ AU
    S_inv = np.linalg.inv(S)
    cov = S_inv @ M @ S_inv
    return 0.5 * (cov + cov.T)


def _solve_qr(system, lam, problem):
    """The same step by sequential QR of the system as a gtsam graph (theta last)."""
    lin = system.graph(lam)
    bn = lin.eliminateSequential(gtsam.Ordering(problem.ordering()), gtsam.EliminateQR)
    delta = bn.optimize()
    dxs = [read_delta(delta, ks) for ks in problem.keys]
    if not problem.p:
        return dxs, None, None
    return dxs, np.asarray(delta.at(problem.theta_key), float), parameter_information(
        bn, problem.p)


def _solve(system, lam, problem, method="cholesky", work=None):
    if method == "cholesky":
        try:
            return (*solve_joint(system, lam, work), method)
        except RuntimeError:  # a non-positive pivot: QR tells a singular system
            method = "qr"
    return (*_solve_qr(system, lam, problem), method)


def _update(problem, Xs, theta, dxs, dtheta):
    new = [X + dx for X, dx in zip(Xs, dxs)]
    th = theta + dtheta if problem.p else theta
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
    initial: tuple | None = None,
    work: dict | None = None,
    stall: tuple | None = None,
    step_sigmas: float = 0.0,
) -> tuple:
    """Minimize ``problem.error`` over the step arrays ``Xs`` and ``theta``.

    Returns ``(Xs, theta, stats, information)``: the best point, :class:`JointStats` and the
    marginal information of theta (p, p) of the linear system at that point (None when
    p = 0).  An undamped step that raises the cost is still taken up to ``watchdog`` times in
    a row (tight constraint rows make long steps leave the manifold to second order and the
    next step returns); if that does not reach a new best point, the best point is restored
    and damping used from there on (``initial_lambda`` at least).  A trial point is linearized
    at once, so an accepted step's system is built once.  ``method``: ``"cholesky"`` (banded
    Cholesky of the steps, theta's small dense system by numpy, see :func:`solve_joint`; a
    non-positive pivot falls back to QR, which then serves the rest of the call;
    ``stats.elimination`` says which one solved last) or ``"qr"`` (gtsam's sequential QR of
    everything: much slower, but only the square root of the system's conditioning).
    ``information=False`` returns no information (an
    intermediate stage: saves the elimination at the final point when the last one was
    damped).  ``initial``: ``problem.linear_system(Xs, theta)``'s result when the caller
    already has it; ``work``: a dict for the elimination's buffers and spare systems, which
    the caller may share between calls on systems of the same size.  ``stall``: ``(k,
    error)``, stop after k iterations when the best error is still above ``error`` (reason
    "stalled"; the caller has a better start to try).  ``step_sigmas``: also converged when the
    undamped Gauss-Newton step is shorter than this many standard deviations in the system's
    own metric, its predicted decrease below ``step_sigmas**2 / 2`` (the rows are whitened, so
    the cost is in units of the noise: a bound that does not grow with the number of readings,
    as ``relative_tolerance * error`` does, and that no estimate or marginal interval moves by
    more than).  Never raises on non-convergence:
    ``stats.converged`` and ``stats.reason`` say what happened (the caller decides)."""
    t0 = time.perf_counter()
    Xs = [np.array(X, float) for X in Xs]
    theta = np.array(theta, float)
    lin, err = problem.linear_system(Xs, theta) if initial is None else initial
    stats = JointStats(initial_error=err)
    stats.history.append(err)
    lam = 0.0
    enough = 0.5 * step_sigmas ** 2  # a predicted decrease that moves nothing that matters
    bn = None  # theta's information of the last undamped solve at the best point
    best = (Xs, theta, err, lin)
    trial = 0  # consecutive undamped steps taken although they raised the cost
    floor = 0.0  # the damping after a success: initial_lambda once the watchdog has failed
    work = {} if work is None else work  # the elimination's buffers, reused by every solve
    # systems no longer referenced (also those the caller's earlier calls left in ``work``):
    # their arrays hold the next linearization
    spares = work.setdefault("spares", [])

    def recycle(*systems):
        for s in systems:
            if (s is not None and s is not lin and s is not best[3]
                    and not any(s is x for x in spares)):
                spares.append(s)

    while stats.iterations < max_iterations:
        if stall is not None and stats.iterations >= stall[0] and best[2] > stall[1]:
            stats.reason = (f"stalled: error {best[2]:.3e} after {stats.iterations} "
                            f"iterations, above {stall[1]:.3e}")
            break
        stats.iterations += 1
        try:
            dxs, dtheta, bn_try, method = _solve(lin, lam, problem, method, work)
            predicted = float(lin.error(dxs, dtheta))
        except RuntimeError:  # indeterminant system: damp
            predicted = np.inf
        if (lam <= floor and trial == 0 and np.isfinite(predicted)
                and err - predicted <= max(relative_tolerance * err, enough)):
            if progress is not None:
                progress(stats.iterations, max_iterations, f"cost {best[2]:.6e}")
            stats.converged, stats.reason = True, "the Gauss-Newton model predicts no decrease"
            bn = bn_try if lam == 0.0 else None  # (damped: the information is solved below)
            break
        new_err, lin_new = np.inf, None
        if np.isfinite(predicted):
            # the trial point is linearized at once: when it is accepted (most steps) that is
            # the next iteration's system, evaluated once
            Ys, th = _update(problem, Xs, theta, dxs, dtheta)
            try:
                lin_new, new_err = problem.linear_system(Ys, th,
                                                         out=spares.pop() if spares else None)
            except (RuntimeError, FloatingPointError, np.linalg.LinAlgError):
                new_err = np.inf
        if progress is not None:
            progress(stats.iterations, max_iterations, f"cost {min(best[2], new_err):.6e}")
        if np.isfinite(new_err) and new_err <= best[2]:
            decrease = best[2] - new_err
            old = (lin, best[3])
            Xs, theta, err, lin = Ys, th, new_err, lin_new
            stats.history.append(err)
            lam = floor if lam <= initial_lambda else max(lam / 10.0, floor)
            trial = 0
            best = (Xs, theta, err, lin)
            recycle(*old)
            if decrease <= relative_tolerance * err:
                stats.converged, stats.reason = True, "relative decrease below tolerance"
                break
            continue
        if lam == 0.0 and trial < watchdog and np.isfinite(new_err):
            # tight constraint rows make a long step leave the manifold to second order; the
            # next undamped step returns to it: take it and judge it by the next one
            trial += 1
            old = lin
            Xs, theta, err, lin = Ys, th, new_err, lin_new
            recycle(old)
            continue
        if trial:  # the watchdog steps did not pay off: back to the best point, damped
            old = lin
            Xs, theta, err, lin = best
            recycle(old, lin_new)
            trial = 0
            # and damped from here on: the undamped model has proved unreliable at this point
            # (a nearly flat direction whose long Gauss-Newton step the cost punishes; undamped
            # again after each success, the watchdog cost three iterations per step)
            lam = floor = initial_lambda
            continue
        recycle(lin_new)
        lam = initial_lambda if lam == 0.0 else lam * 10.0
        if lam > 1e12:
            stats.reason = "damping exhausted"
            break
    else:
        stats.reason = f"{max_iterations} iterations reached"
    old = lin
    Xs, theta, err, lin = best
    recycle(old)
    if bn is not None and trial:
        bn = None
    info = None
    if problem.p and information:
        if bn is None:  # information at the final point (undamped)
            _, _, bn, method = _solve(lin, 0.0, problem, method, work)
        info = bn
    stats.final_error = err
    stats.elimination = method
    stats.system = lin
    stats.seconds = time.perf_counter() - t0
    return Xs, theta, stats, info
