"""Observation factors: one sensor reading on the variables the sensor depends on.

The error is ``e = h(x) - z`` with h the sensor's measurement function
(:mod:`mbfg.model.sensors`) and z the reading; for angle encoders it is the wrapped difference
``atan2(sin(h - z), cos(h - z))`` so that readings near +-pi compare correctly.  Jacobians are
the sensor's exact ones (the wrap has unit derivative).

Variables (slots of :mod:`mbfg.factors.keys`): ``q`` positions for encoders, markers and
distances; ``q, v`` for gyroscopes; ``q, a`` for accelerometers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.factors.adapter import FactorSpec, custom_factor
from mbfg.model.sensors import wrap_angle

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.factors.adapter import MultibodyFactor
    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import Sensor

__all__ = ["observation_residual", "observation_spec", "observation_factor"]

_ALIASES = {"q": "q", "v": "v", "a": "a", "qd": "v", "qdot": "v", "qdd": "a", "qddot": "a"}
_ARG = {"q": 0, "v": 1, "a": 2}


def observation_residual(mech: Mechanism, sensor: Sensor, reading: ArrayLike) -> Callable:
    """Residual family ``f(p, jacobians) -> e (T, k), {slot: (T, k, n)}`` of one sensor.

    ``reading`` is (k,) (the same reading at every row) or (T, k); ``f.slots`` is
    ``sensor.slots``."""
    z = np.asarray(reading, float)
    if z.shape[-1:] != (sensor.dim,):
        raise ValueError(f"{sensor.label}: a reading has {sensor.dim} component(s), got shape "
                         f"{z.shape}")
    slots = tuple(sensor.slots)

    def f(p, jacobians=True):
        args = [None, None, None]
        for s in slots:
            args[_ARG[s]] = p[s]
        e = sensor.measure(mech, *args) - z
        if sensor.angular:
            e = wrap_angle(e)
        if not jacobians:
            return e, None
        J = sensor.jacobians(mech, *args)
        return e, {s: np.ascontiguousarray(J[s], dtype=float) for s in slots}

    f.slots = slots
    return f


def _slot_keys(sensor, keys):
    norm = {}
    for name, key in dict(keys).items():
        if name not in _ALIASES:
            raise ValueError(f"unknown slot {name!r}; expected q, v (qd) or a (qdd)")
        norm[_ALIASES[name]] = key
    missing = [s for s in sensor.slots if s not in norm]
    if missing:
        raise ValueError(f"{sensor.label} depends on {', '.join(sensor.slots)}: no key for "
                         f"{', '.join(missing)}")
    return [norm[s] for s in sensor.slots]


def observation_spec(
    mech: Mechanism, sensor: Sensor, reading: np.ndarray, keys: dict
) -> FactorSpec:
    """The :class:`~mbfg.factors.adapter.FactorSpec` of :func:`observation_factor` (no gtsam)."""
    sensor.validate(mech)
    reading = np.asarray(reading, float)
    if reading.shape != (sensor.dim,):
        raise ValueError(f"{sensor.label}: expected a reading of shape ({sensor.dim},), got "
                         f"{reading.shape}")
    return FactorSpec(f"f_obs[{sensor.kind}]", observation_residual(mech, sensor, reading),
                      _slot_keys(sensor, keys), [mech.n] * len(sensor.slots), sensor.dim)


def observation_factor(
    mech: Mechanism, sensor: Sensor, reading: ArrayLike, keys: dict, sigma: list | None = None
) -> MultibodyFactor:
    """Observation factor e = h(x_k) - z_k of one reading of ``sensor``.

    Parameters
    ----------
    mech : Mechanism
    sensor : mbfg.model.sensors.Sensor
    reading : float or (k,) array
        The measured value z_k (sensor units; a marker has k = 2).
    keys : dict
        slot -> gtsam key for the variables of the step, e.g. ``{"q": K.q(k), "v": K.v(k),
        "a": K.a(k)}``; only the sensor's ``slots`` are used (aliases ``qd``, ``qdd`` accepted).
    sigma : float or (k,) array, optional
        Noise standard deviation; defaults to ``sensor.sigma``.

    Returns a checked :class:`~mbfg.factors.adapter.MultibodyFactor`.
    """
    reading = np.atleast_1d(np.asarray(reading, float))
    spec = observation_spec(mech, sensor, reading, keys)
    return custom_factor(spec, sensor.sigma if sigma is None else sigma)
