"""Per-step state layout used by the batch drivers and the fixed-lag smoother.

The factor library (:mod:`mbfg.factors`) uses one gtsam key per quantity per step (q_k, v_k,
a_k, ...).  The drivers instead stack the quantities of one step into a single vector key
``x_k = [q_k; v_k; a_k; ...]`` (symbol ``'x'``).  The linear system is the same (the columns of
``x_k`` are the columns of q_k, v_k, a_k in that order; a test checks the information matrices
agree), but every factor then touches at most two keys: the nonlinear factors of a step are one
unary factor on ``x_k`` and all integrators of a step are one binary factor on
``(x_k, x_{k+1})``, which gtsam's Python constructors build natively in a few microseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import gtsam
import numpy as np

if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class StepLayout:
    """Ordered named slots of a per-step state vector.

    Parameters
    ----------
    slots : tuple of (name, dim)
        E.g. ``(("q", n), ("v", n), ("a", n))``.
    char : str
        gtsam symbol character of the step keys.
    """
    slots: tuple
    char: str = "x"

    def __post_init__(self):
        spans, off = {}, 0
        for name, d in self.slots:
            spans[name] = slice(off, off + d)
            off += d
        object.__setattr__(self, "_spans", spans)  # slices are asked for in every hot loop

    @property
    def dim(self) -> int:
        return sum(d for _, d in self.slots)

    def slice(self, name: str) -> slice:
        try:
            return self._spans[name]
        except KeyError:
            raise KeyError(f"no slot {name!r} in layout {self.names}") from None

    def offset(self, name: str) -> int:
        return self.slice(name).start

    @property
    def names(self) -> tuple:
        return tuple(s for s, _ in self.slots)

    def size(self, name: str) -> int:
        sl = self.slice(name)
        return sl.stop - sl.start

    def key(self, k: int) -> int:
        return gtsam.symbol(self.char, int(k))

    def keys(self, steps: range | np.ndarray) -> list:
        return [gtsam.symbol(self.char, int(k)) for k in steps]

    def selector(self, name: str) -> np.ndarray:
        """(size, dim) matrix picking a slot out of the step vector."""
        S = np.zeros((self.size(name), self.dim))
        S[:, self.slice(name)] = np.eye(self.size(name))
        return S

    def pack(self, **parts: Any) -> np.ndarray:
        """Step vector from slot values given by name (missing slots are zero)."""
        x = np.zeros(self.dim)
        for name, val in parts.items():
            x[self.slice(name)] = val
        return x

    def unpack(self, X: np.ndarray) -> dict:
        """Slot arrays of (..., dim) step vectors."""
        return {name: X[..., self.slice(name)] for name in self.names}


def dependent_layout(n: int, with_forces: bool = False, jerk: int = 0) -> StepLayout:
    """Slots q, v, a (n each), a jerk slot ``"j"`` of ``jerk`` components when ``jerk`` > 0
    (the jerk of some coordinates) and the forces ``"Q"`` (n) ``with_forces``."""
    slots = ((("q", n), ("v", n), ("a", n)) + ((("j", int(jerk)),) if jerk else ())
             + ((("Q", n),) if with_forces else ()))
    return StepLayout(slots)


def independent_layout(n: int, d: int, with_forces: bool = False) -> StepLayout:
    slots = ((("q", n), ("v", n), ("a", n), ("z", d), ("zd", d), ("zdd", d))
             + ((("Q", n),) if with_forces else ()))
    return StepLayout(slots)


__all__ = [
    "StepLayout", "dependent_layout", "independent_layout"
]
