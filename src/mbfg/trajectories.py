"""Desired-motion generators (pure functions of time) and time-grid checks."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import DataError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def rest_to_rest(tau: ArrayLike) -> tuple:
    """Cubic rest-to-rest profile s(tau) = 3 tau^2 - 2 tau^3 on [0, 1] and its first two
    derivatives w.r.t. tau (clipped outside [0, 1])."""
    tau = np.clip(np.asarray(tau, float), 0.0, 1.0)
    return 3 * tau**2 - 2 * tau**3, 6 * tau - 6 * tau**2, 6 - 12 * tau


def l_path(
    t: ArrayLike,
    *,
    start: tuple = (-0.5, -5.0),
    corner: tuple = (-0.5, -4.0),
    end: tuple = (0.5, -4.0),
    t_corner: float = 2.5,
    t_end: float = 5.0,
) -> tuple:
    """The parallel robot's "L" path of point 6 (reference-data README): straight up from
    ``start`` to ``corner`` during [0, t_corner], then to ``end`` during [t_corner, t_end], each
    leg with the rest-to-rest profile.

    Returns xy, xy_dot, xy_ddot, each (T, 2) [m, m/s, m/s^2]."""
    t = np.asarray(t, float)
    start, corner, end = (np.asarray(p, float) for p in (start, corner, end))
    first = t <= t_corner
    T1, T2 = t_corner, t_end - t_corner
    s1, ds1, dds1 = rest_to_rest(t / T1)
    s2, ds2, dds2 = rest_to_rest((t - t_corner) / T2)
    d1, d2 = corner - start, end - corner
    xy = np.where(first[:, None], start + s1[:, None] * d1, corner + s2[:, None] * d2)
    xyd = np.where(first[:, None], ds1[:, None] / T1 * d1, ds2[:, None] / T2 * d2)
    xydd = np.where(first[:, None], dds1[:, None] / T1**2 * d1, dds2[:, None] / T2**2 * d2)
    # the acceleration is discontinuous at the ends of each leg (the cubic's jerk is infinite):
    # at t = t_corner, both legs are at rest; report the first leg's value there
    return xy, xyd, xydd


def uniform_step(t: ArrayLike, path: str = "trajectory") -> float:
    """The constant time step of ``t`` or a DataError."""
    if t.size < 2:
        raise DataError(f"{path}: need at least two time samples")
    dt = np.diff(t)
    h = float(np.mean(dt))
    # 1e-6 of the step, plus the rounding of the time stamps themselves (large t)
    if np.max(np.abs(dt - h)) > 1e-6 * h + 8.0 * np.finfo(float).eps * float(np.max(np.abs(t))):
        raise DataError(f"{path}: samples must be uniformly spaced in time (dt varies from "
                        f"{dt.min():g} to {dt.max():g} s)")
    return h


__all__ = [
    "rest_to_rest", "l_path", "uniform_step"
]
