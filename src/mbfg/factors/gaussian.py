"""Native gtsam Gaussian factors from dense blocks, for any number of keys.

gtsam's Python ``JacobianFactor`` constructors take at most three keys.  For more keys,
:func:`gaussian_factor` builds the exact information form ``||sum_i A_i x_i - b||^2`` as a
``HessianFactor``: gtsam's ``HessianFactor(GaussianFactorGraph)`` *adds* the information of the
factors in a graph, so three-key pieces that together hold every block of A^T A, A^T b and
b^T b (each piece alone may be indefinite; only the sum matters) give one exact factor on all
keys.  Elimination treats it like any other Gaussian factor.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import gtsam
import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_UNIT_CACHE: dict = {}


def unit_noise(dim: int) -> gtsam.noiseModel.Unit:
    """Cached ``noiseModel.Unit`` of a dimension."""
    m = _UNIT_CACHE.get(dim)
    if m is None:
        m = _UNIT_CACHE[dim] = gtsam.noiseModel.Unit.Create(dim)
    return m


def gaussian_factor(keys: list, blocks: list, b: ArrayLike) -> gtsam.JacobianFactor:
    """Gaussian factor ``0.5 ||sum_i blocks[i] @ x[keys[i]] - b||^2`` (already whitened).

    Parameters
    ----------
    keys : sequence of int (distinct)
    blocks : sequence of (r, d_i) arrays
    b : (r,) array

    Returns a ``JacobianFactor``; for more than three keys it is obtained from the exact
    :func:`hessian_factor` by gtsam's (rank-revealing) Cholesky conversion, so the graph stays
    all-Jacobian and can be eliminated by QR as well as by Cholesky.
    """
    keys = [int(k) for k in keys]
    b = np.asarray(b, float)
    r = b.shape[0]
    if len(keys) == 1:
        return gtsam.JacobianFactor(keys[0], blocks[0], b, unit_noise(r))
    if len(keys) == 2:
        return gtsam.JacobianFactor(keys[0], blocks[0], keys[1], blocks[1], b, unit_noise(r))
    if len(keys) == 3:
        return gtsam.JacobianFactor(keys[0], blocks[0], keys[1], blocks[1], keys[2], blocks[2], b,
                                    unit_noise(r))
    jf = gtsam.JacobianFactor(hessian_factor(keys, blocks, b))
    # the conversion leaves no noise model, and gtsam then crashes in e.g.
    # LinearContainerFactor.dim(); the rows are already whitened, so it is the unit model
    jf.setModel(False, np.ones(jf.rows()))
    return jf


def hessian_factor(keys: list, blocks: list, b: ArrayLike) -> gtsam.HessianFactor:
    """Exact HessianFactor of ``||sum_i A_i x_i - b||^2`` on any number (>= 3) of keys."""
    nk = len(keys)
    G = [[blocks[i].T @ blocks[j] for j in range(nk)] for i in range(nk)]
    g = [blocks[i].T @ b for i in range(nk)]
    f = float(b @ b)
    dims = [blk.shape[1] for blk in blocks]
    graph = gtsam.GaussianFactorGraph()
    covered = set()
    # every pair (i, j) must be carried by exactly one piece; diagonal and linear terms too
    for trio in itertools.combinations(range(nk), 3):
        pairs = [(trio[0], trio[1]), (trio[0], trio[2]), (trio[1], trio[2])]
        if all(p in covered for p in pairs) and all((i, i) in covered for i in trio):
            continue

        def take(i, j):
            if (i, j) in covered:
                return np.zeros((dims[i], dims[j]))
            covered.add((i, j))
            return G[i][j]

        def lin(i):
            if ("g", i) in covered:
                return np.zeros(dims[i])
            covered.add(("g", i))
            return g[i]

        a, bb, c = trio
        const = 0.0
        if "f" not in covered:
            covered.add("f")
            const = f
        graph.push_back(gtsam.HessianFactor(
            keys[a], keys[bb], keys[c], take(a, a), take(a, bb), take(a, c), lin(a),
            take(bb, bb), take(bb, c), lin(bb), take(c, c), lin(c), const))
    return gtsam.HessianFactor(graph)


__all__ = [
    "unit_noise", "gaussian_factor", "hessian_factor"
]
