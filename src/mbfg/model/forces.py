"""Applied generalized forces: the one convention every driver accepts.

``forces`` is one of

* ``None``: no applied forces besides gravity;
* an array (n,): constant generalized forces [N on point coordinates, N m on angles];
* a callable ``f(t) -> (n,)`` of the time t [s] (a float).

Gravity is never part of ``forces``: the model adds ``Mechanism.gravity_forces()`` itself.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Union

import numpy as np
from numpy.typing import ArrayLike

from mbfg.errors import UsageError

__all__ = ["ForceInput", "force_function", "forces_at"]

ForceInput = Union[None, ArrayLike, Callable[[float], ArrayLike]]


def force_function(forces: ForceInput, n: int) -> Callable[[float], np.ndarray | None]:
    """``forces`` as a function of the time t [s] returning (n,) or None (no forces).

    Raises :class:`~mbfg.errors.UsageError` if a constant is not (n,) or a callable returns
    something that is not (n,) finite numbers (checked on the call)."""
    if forces is None:
        return lambda t: None
    if callable(forces):
        def at(t: float) -> np.ndarray:
            return _checked(forces(float(t)), n, f"forces({float(t):g})")
        return at
    const = _checked(forces, n, "forces")
    return lambda t: const


def forces_at(forces: ForceInput, t: ArrayLike, n: int) -> np.ndarray | None:
    """(T, n) applied generalized forces at the times ``t`` (T,) [s], or None."""
    if forces is None:
        return None
    t = np.atleast_1d(np.asarray(t, float))
    if not callable(forces):
        return np.broadcast_to(_checked(forces, n, "forces"), (t.size, n))
    f = force_function(forces, n)
    return np.stack([f(tk) for tk in t]) if t.size else np.zeros((0, n))


def _checked(value, n: int, what: str) -> np.ndarray:
    try:
        arr = np.asarray(value, float)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be {n} numbers (one generalized force per coordinate), "
                         f"got {type(value).__name__}") from None
    if arr.shape != (n,):
        raise UsageError(f"{what} must have shape ({n},) (one generalized force per "
                         f"coordinate), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise UsageError(f"{what} must be finite, got {arr}")
    return arr
