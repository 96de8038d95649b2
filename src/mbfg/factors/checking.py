"""Finite-difference verification of gtsam factors (the factor-level half of
:mod:`mbfg.testing`'s single finite-difference machinery).

:func:`check_factor_jacobians` linearizes a factor with gtsam (``factor.linearize(values)``,
the whitened blocks gtsam will actually eliminate), un-whitens each block with the factor's
noise model and compares it with central differences of ``factor.unwhitenedError`` through
:func:`mbfg.testing.check_jacobian`.  Linear (``LinearContainerFactor``) factors, which have no
``unwhitenedError``, are checked for consistency instead: their error must be exactly the
quadratic model of their linearization.
"""
from __future__ import annotations

import gtsam
import numpy as np

from mbfg.factors.keys import key_name
from mbfg.testing import FD_RTOL, check_jacobian


def _with(values, key, x):
    out = gtsam.Values(values)
    out.update(key, np.asarray(x, float))
    return out


def check_factor_jacobians(
    factor: gtsam.NonlinearFactor,
    values: gtsam.Values,
    *,
    rtol: float = FD_RTOL,
    h: float | None = None,
    rng: np.random.Generator | None = None,
) -> float:
    """Assert that ``factor``'s linearization at ``values`` matches finite differences.

    Parameters
    ----------
    factor : gtsam.NonlinearFactor
        A CustomFactor (or any NoiseModelFactor) or a LinearContainerFactor.
    values : gtsam.Values
        Vector values for every key of the factor.
    rtol : float
        Relative tolerance of :func:`mbfg.testing.check_jacobian`.

    Returns the worst relative error; raises AssertionError naming the key otherwise.
    """
    keys = list(factor.keys())
    lin = factor.linearize(values)
    A, b = lin.jacobian()
    dims = [values.atVector(k).size for k in keys]
    offsets = np.concatenate([[0], np.cumsum(dims)])
    if not hasattr(factor, "unwhitenedError"):
        return _check_linear(factor, values, keys, dims, A, b, rng)
    e0 = np.asarray(factor.unwhitenedError(values), float)
    sigmas = np.asarray(factor.noiseModel().sigmas(), float)
    w = np.where(np.isfinite(sigmas), 1.0 / sigmas, 0.0)
    live = w > 0
    np.testing.assert_allclose(b[live] / w[live], -e0[live], rtol=1e-9, atol=1e-12,
                               err_msg="linearized right-hand side != -error")
    worst = 0.0
    for i, k in enumerate(keys):
        x0 = values.atVector(k)
        block = A[live, offsets[i]:offsets[i + 1]] / w[live, None]
        worst = max(worst, check_jacobian(
            lambda x: np.asarray(factor.unwhitenedError(_with(values, k, x)), float)[live],
            x0, block, rtol=rtol, h=h, name=f"{type(factor).__name__} d e / d {key_name(k)}"))
    return worst


def _check_linear(factor, values, keys, dims, A, b, rng):
    """error(x + dx) == 0.5 |A dx - b|^2 for random dx (exact for a linear factor)."""
    rng = np.random.default_rng(0) if rng is None else rng
    worst = 0.0
    for _ in range(3):
        dx = rng.normal(size=sum(dims))
        shifted = gtsam.Values(values)
        o = 0
        for k, d in zip(keys, dims):
            shifted.update(k, values.atVector(k) + dx[o:o + d])
            o += d
        predicted = 0.5 * float(np.sum((A @ dx - b) ** 2))
        actual = factor.error(shifted)
        err = abs(predicted - actual) / max(1.0, abs(actual))
        if not err <= 1e-9:
            raise AssertionError(f"linear factor on {[key_name(k) for k in keys]}: error "
                                 f"{actual:.12g} != quadratic model {predicted:.12g}")
        worst = max(worst, err)
    return worst


__all__ = [
    "check_factor_jacobians"
]
