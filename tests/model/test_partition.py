"""Coordinate partitioning (mbfg.model.partition): the batched best sets and the walk with
hysteresis agree exactly with the state-by-state definitions (LAPACK's QR with column
pivoting of each null-space basis, and the sequential walk)."""
import functools

import numpy as np
import pytest
import scipy.linalg

from conftest import load
from mbfg.drivers.forward_dynamics import simulate_batch
from mbfg.model import partition as P
from mbfg.model.scales import coordinate_scales
from mbfg.testing import random_mechanisms

T_END = 1.0
"""Length [s] of the trajectories the tests partition."""


@functools.lru_cache(maxsize=None)
def _trajectory(name):
    """(mech, q (T, n), coordinate scales (n,)) of a run from rest of a bundled mechanism or
    of a random one of ``random_mechanisms(20, seed=5)`` (by family)."""
    if name.startswith("random-"):
        family = name[len("random-"):]
        mech = [g for g in random_mechanisms(20, seed=5) if g.family == family][0].load()
    else:
        mech = load(name)
    return mech, simulate_batch(mech, T_END).q, coordinate_scales(mech)


TRAJECTORIES = ["fourbar", "quick-return", "pendulum3", "random-crank-rocker",
                "random-triple-rocker", "random-five-bar", "random-chain-3"]


def _reference_best(mech, x, scale):
    """The best set at one state x (n,) and its quality, by LAPACK's QR with column pivoting
    of the transposed null-space basis of that state alone."""
    N = P.null_space_bases(mech, x[None], scale)[0]
    d = N.shape[1]
    piv = scipy.linalg.qr(N.T, pivoting=True, mode="r")[1]
    best = tuple(sorted(int(i) for i in piv[:d]))
    return best, float(np.linalg.svd(N[list(best)], compute_uv=False)[-1])


def _reference_walk(mech, q, scale, keep, start, best_at):
    """partition_along state by state: the best set evaluated at each state the walk reaches
    whose current quality is below ``keep``."""
    cur = tuple(start) if start is not None else best_at(mech, q[0], scale)[0]
    out = np.empty((q.shape[0], len(cur)), int)
    quality = P.coordinate_quality(mech, q, cur, scale)
    for k in range(q.shape[0]):
        if quality[k] < keep:
            best, qbest = best_at(mech, q[k], scale)
            if quality[k] < keep * qbest and best != cur:
                cur = best
                quality[k:] = P.coordinate_quality(mech, q[k:], cur, scale)
        out[k] = cur
    return out


@pytest.mark.parametrize("name", TRAJECTORIES)
def test_best_sets_equal_state_by_state_pivoting(name):
    mech, q, c = _trajectory(name)
    best, quality = P.best_coordinate_sets(mech, q, c)
    assert best.shape == (q.shape[0], P.null_space_bases(mech, q[:1], c).shape[2])
    for k in range(0, q.shape[0], 7):
        ref, ref_quality = _reference_best(mech, q[k], c)
        assert tuple(best[k]) == ref
        assert quality[k] == ref_quality
    assert P.best_coordinates(mech, q[-1], c) == _reference_best(mech, q[-1], c)


def test_near_ties_are_decided_by_lapack():
    """Bases whose rows tie exactly (duplicated rows) or nearly: the batched pivoting gives
    LAPACK's choice wherever the runner-up is within PIVOT_TIE_RTOL."""
    rng = np.random.default_rng(3)
    N = rng.normal(size=(400, 7, 3))
    N[:200, 4] = N[:200, 1]  # exact ties
    N[200:, 5] = N[200:, 2] * (1.0 + 1e-9 * rng.normal(size=(200, 1)))  # near ties
    N = np.linalg.qr(N)[0]
    _, tied = P._pivoted_rows(N)
    assert tied.any()
    best, quality = P._best_of_bases(N)
    for k in range(N.shape[0]):
        piv = scipy.linalg.qr(N[k].T, pivoting=True, mode="r")[1][:3]
        assert tuple(best[k]) == tuple(sorted(piv))
        assert quality[k] == np.linalg.svd(N[k][np.sort(piv)], compute_uv=False)[-1]


@pytest.mark.parametrize("n, d", [(4, 1), (8, 2), (12, 4), (20, 7)])
def test_batched_pivoting_equals_lapack_on_random_bases(n, d):
    rng = np.random.default_rng(n)
    A = rng.normal(size=(500, n, d)) * rng.lognormal(sigma=2.0, size=(500, n, 1))
    N = np.linalg.qr(A)[0]
    best, _ = P._best_of_bases(N)
    ref = np.sort([scipy.linalg.qr(x.T, pivoting=True, mode="r")[1][:d] for x in N], axis=1)
    np.testing.assert_array_equal(best, ref)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("name", TRAJECTORIES)
def test_fixed_coordinates_is_the_best_set_over_the_trajectory(name, sparse, monkeypatch):
    """The one set for a whole trajectory, against every set of dof coordinates: its smallest
    quality over the states (SVD state by state; the sparse path's quality is iterative, to
    1e-6) is the largest among the sets that are best at some state."""
    import itertools
    if sparse:
        monkeypatch.setattr(P, "SPARSE_QUALITY_MIN_COORDINATES", 0)
    mech, q, c = _trajectory(name)
    q = q[::10]  # every state is a candidate's state (candidates=256 > states)
    got, quality = P.fixed_coordinates(mech, q, c)
    worst = {s: float(np.min([np.linalg.svd(P.null_space_bases(mech, x[None], c)[0][list(s)],
                                            compute_uv=False)[-1] for x in q]))
             for s in itertools.combinations(range(mech.n), mech.dof)}
    rtol = 1e-6 if sparse else 1e-9
    assert quality == pytest.approx(worst[got], rel=rtol, abs=1e-12)
    best_at = P._best_sparse if sparse else _reference_best
    best_somewhere = {best_at(mech, x, c)[0] for x in q}
    assert got in best_somewhere
    assert worst[got] >= max(worst[s] for s in best_somewhere) * (1 - rtol)


@pytest.mark.parametrize("keep", [0.5, 0.9])
@pytest.mark.parametrize("name", TRAJECTORIES)
def test_partition_along_equals_the_sequential_walk(name, keep):
    mech, q, c = _trajectory(name)
    switches = 0
    for lo in range(0, q.shape[0], 250):  # windows like the batch segments, chained
        window = q[lo:lo + 250]
        start = None if lo == 0 else got[-1]
        got = P.partition_along(mech, window, c, keep=keep, start=start)
        np.testing.assert_array_equal(
            got, _reference_walk(mech, window, c, keep, start, _reference_best))
        switches += int(np.any(np.diff(got, axis=0) != 0, axis=1).sum())
    if name.startswith("random-crank") or name.startswith("random-triple"):
        assert switches > 0  # the walk is exercised through changes of set


@pytest.mark.parametrize("name", ["fourbar", "random-crank-rocker", "random-five-bar"])
def test_sparse_partition_equals_the_sequential_walk(name, monkeypatch):
    """The large-mechanism path (pivoting Phi_q, sparse LU quality, best sets only where the
    walk reaches) on small mechanisms, against the walk with the same rules."""
    monkeypatch.setattr(P, "SPARSE_QUALITY_MIN_COORDINATES", 0)
    mech, q, c = _trajectory(name)
    q = q[:400]
    for keep in (0.5, 0.9):
        np.testing.assert_array_equal(
            P.partition_along(mech, q, c, keep=keep),
            _reference_walk(mech, q, c, keep, None, P._best_sparse))
    best, quality = P.best_coordinate_sets(mech, q[::50], c)
    for k, x in enumerate(q[::50]):
        assert (tuple(best[k]), quality[k]) == P._best_sparse(mech, x, c)


@pytest.mark.parametrize("keep", [0.5, 0.9])
@pytest.mark.parametrize("name", TRAJECTORIES)
def test_state_partition_equals_the_walk_state_by_state(name, keep, monkeypatch):
    """The fused single-state path (a smoother's newest step: the current set's quality from
    one small solve, the walk only below ``keep``) chooses what partition_along chooses,
    through changes of set, and with the default hysteresis leaves most states to the small
    solve alone."""
    mech, q, c = _trajectory(name)
    step = P.StatePartition(mech, c, keep=keep)
    assert step.fused
    walk, walked = P.partition_along, []

    def counted(*args, **kwargs):
        walked.append(1)
        return walk(*args, **kwargs)

    monkeypatch.setattr(P, "partition_along", counted)
    cur = walk(mech, q[:1], c, keep=keep)[0]
    switches = 0
    for x in q[1:]:
        want = walk(mech, x[None], c, keep=keep, start=cur)[0]
        got = step(x, cur)
        np.testing.assert_array_equal(got, want)
        switches += int(np.any(got != cur))
        cur = got
    if name.startswith("random-crank") or name.startswith("random-triple"):
        assert switches > 0
    if keep == P.KEEP:  # with the default hysteresis the walk runs only near changes of set
        assert len(walked) < 0.5 * (q.shape[0] - 1)  # (keep 0.9: below it most of the time)


def test_state_partition_leaves_redundant_rows_to_the_walk():
    """Redundant constraints choose their independent rows per state: no fused path."""
    mech = load("pick-and-place-robot")
    assert mech.independent_rows.size < mech.m
    assert not P.StatePartition(mech, coordinate_scales(mech)).fused
