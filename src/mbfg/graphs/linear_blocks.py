"""Absolute-form Gaussian factors of the linear factors (Eqs. 21-23 and f_eq).

These are the native linear factors the batch and fixed-lag drivers hand to gtsam:
``0.5 ||(A x - b) / sigma||^2`` on the variables themselves (not on increments), built once.
:mod:`mbfg.factors.linear` wraps the same blocks as nonlinear-graph factors.
"""
from __future__ import annotations

import numpy as np

from mbfg.solvers.gaussian import gaussian_factor


def _sig(sigma, d):
    s = np.broadcast_to(np.asarray(sigma, float), (d,))
    return 1.0 / s


def prior_blocks(key, mean, sigma):
    """f_prior (Eq. 21): e = x - x0.  ``sigma`` scalar or per component (inf = unconstrained)."""
    mean = np.asarray(mean, float)
    w = _sig(sigma, mean.size)
    return gaussian_factor([key], [np.diag(w)], w * mean)


def euler_blocks(x_k, x_k1, xd_k, dt, sigma, d):
    """f_ei (Eq. 22): e = x_{k+1} - x_k - dt xdot_k."""
    w = _sig(sigma, d)
    W = np.diag(w)
    return gaussian_factor([x_k, x_k1, xd_k], [-W, W, -dt * W], np.zeros(d))


def trapezoidal_blocks(x_k, x_k1, xd_k, xd_k1, dt, sigma, d):
    """f_ti (Eq. 23): e = x_{k+1} - x_k - dt/2 (xdot_k + xdot_{k+1})."""
    w = _sig(sigma, d)
    W = np.diag(w)
    return gaussian_factor([x_k, x_k1, xd_k, xd_k1], [-W, W, -0.5 * dt * W, -0.5 * dt * W],
                           np.zeros(d))


def equality_blocks(x_k, x_k1, sigma, d):
    """f_eq: e = x_{k+1} - x_k (soft continuity between consecutive states)."""
    W = np.diag(_sig(sigma, d))
    return gaussian_factor([x_k, x_k1], [-W, W], np.zeros(d))


def selection_blocks(x_key, z_key, indices, n, sigma):
    """Linear rows x[indices] - z (the lower blocks of Eqs. 30-32)."""
    idx = np.asarray(indices, int)
    d = idx.size
    w = _sig(sigma, d)
    B = np.zeros((d, n))
    B[np.arange(d), idx] = 1.0
    return gaussian_factor([x_key, z_key], [w[:, None] * B, -np.diag(w)], np.zeros(d))
