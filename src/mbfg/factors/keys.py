"""gtsam keys of the multibody graphs: one vector-valued key per quantity per time step.

==========  ======  ===================================================  ==========
quantity    symbol  meaning                                              dimension
==========  ======  ===================================================  ==========
q_k         ``q``   dependent positions (natural coordinates, angles)   n
qdot_k      ``v``   dependent velocities                                 n
qddot_k     ``a``   dependent accelerations                              n
Q_k         ``f``   generalized forces (applied, without gravity)        n
z_k         ``z``   independent coordinates q_k[idx]                     d
zdot_k      ``w``   independent velocities                               d
zddot_k     ``u``   independent accelerations                            d
lambda_k    ``l``   Lagrange multipliers of the constraint rows          m
x_k         ``x``   stacked step vector of the batch drivers             varies
==========  ======  ===================================================  ==========

``gtsam.symbol(char, k)`` makes the key; :func:`key_name` turns it back into ``"q12"``.
"""
from __future__ import annotations

import gtsam

SYMBOLS = {"q": "q", "v": "v", "a": "a", "Q": "f", "z": "z", "zd": "w", "zdd": "u", "lam": "l",
           "x": "x"}
"""Quantity (slot) name -> gtsam symbol character."""

_QUANTITY_OF = {c: name for name, c in SYMBOLS.items()}


def key(quantity: str, k: int) -> int:
    """Key of ``quantity`` (one of ``q v a Q z zd zdd lam x``) at time step ``k``."""
    try:
        return gtsam.symbol(SYMBOLS[quantity], int(k))
    except KeyError:
        raise ValueError(f"unknown quantity {quantity!r}; expected one of {', '.join(SYMBOLS)}") from None


def q(k: int) -> int:
    """Key of the positions q_k."""
    return gtsam.symbol("q", int(k))


def v(k: int) -> int:
    """Key of the velocities qdot_k."""
    return gtsam.symbol("v", int(k))


def a(k: int) -> int:
    """Key of the accelerations qddot_k."""
    return gtsam.symbol("a", int(k))


def Q(k: int) -> int:
    """Key of the generalized forces Q_k."""
    return gtsam.symbol("f", int(k))


def z(k: int) -> int:
    """Key of the independent coordinates z_k."""
    return gtsam.symbol("z", int(k))


def zd(k: int) -> int:
    """Key of the independent velocities zdot_k."""
    return gtsam.symbol("w", int(k))


def zdd(k: int) -> int:
    """Key of the independent accelerations zddot_k."""
    return gtsam.symbol("u", int(k))


def lam(k: int) -> int:
    """Key of the multipliers lambda_k."""
    return gtsam.symbol("l", int(k))


def key_name(key_: int) -> str:
    """Readable name of a key: ``"q12"``, ``"zdd3"``."""
    s = gtsam.Symbol(int(key_))
    return f"{_QUANTITY_OF.get(chr(s.chr()), chr(s.chr()))}{s.index()}"


def key_step(key_: int) -> int:
    """Time-step index of a key."""
    return int(gtsam.Symbol(int(key_)).index())


__all__ = [
    "key", "q", "v", "a", "Q", "z", "zd", "zdd", "lam", "key_name", "key_step"
]
