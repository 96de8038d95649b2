"""Plain, validated description of a mechanism as read from YAML.

The loader (:mod:`mbfg.loader`) produces a :class:`MechanismSpec`; :func:`mbfg.model.build_mechanism`
turns it into the immutable numerical :class:`~mbfg.model.mechanism.Mechanism`.  Everything here is
already evaluated to floats and checked for ranges; units are SI (m, kg, kg m², rad).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PointSpec:
    """A point of the mechanism: initial position [m] and whether it is fixed to the ground."""
    x: float
    y: float
    fixed: bool = False


@dataclass(frozen=True)
class BodySpec:
    """A rigid planar body.

    Attributes
    ----------
    points : tuple of int
        Indices of its points (>= 2, distinct).  Points 0 and 1 define the body frame:
        origin at ``points[0]``, +X toward ``points[1]``, +Y 90 deg counter-clockwise.
    mass : float
        Mass [kg], > 0.
    I0 : float
        Polar moment of inertia about ``points[0]`` [kg m^2].
    cog : tuple of float
        Centre of mass in the body frame [m].
    length : float
        Distance between points 0 and 1 [m] (``length`` key for 2-point bodies; for 3+
        points the distance in the initial configuration).
    """
    points: tuple[int, ...]
    mass: float
    I0: float
    cog: tuple[float, float]
    length: float


@dataclass(frozen=True)
class RelativeAngleSpec:
    """``RelativeAngleAbsoluteDOF``: theta = angle of points[0] -> points[1] from +X [rad]."""
    points: tuple[int, int]


@dataclass(frozen=True)
class FixedSliderSpec:
    """Point ``point`` stays on the fixed line through ``line[0]`` and ``line[1]`` [m]."""
    point: int
    line: tuple[tuple[float, float], tuple[float, float]]


@dataclass(frozen=True)
class MobileSliderSpec:
    """Point ``point`` stays on the line through points ``line_points[0]`` and ``line_points[1]``."""
    point: int
    line_points: tuple[int, int]


@dataclass(frozen=True)
class JointFrictionSpec:
    """Friction at the revolute joint between ``bodies`` (a body index, or -1 for the ground):
    a torque -(viscous w + coulomb tanh(w / width)) on the second body and its opposite on the
    first, w their relative angular rate [rad/s].  ``viscous`` [N m s/rad] >= 0, ``coulomb``
    [N m] >= 0, ``width`` [rad/s] > 0 or None (derived from the mechanism's scales)."""
    bodies: tuple[int, int]
    viscous: float = 0.0
    coulomb: float = 0.0
    width: float | None = None


@dataclass(frozen=True)
class SliderFrictionSpec:
    """Friction along the slider ``constraints[constraint]``: a force -(viscous s' + coulomb
    tanh(s' / width)) on the sliding point along the line and its opposite on the line's body,
    s' the sliding rate [m/s].  ``viscous`` [N s/m], ``coulomb`` [N], ``width`` [m/s] or None."""
    constraint: int
    viscous: float = 0.0
    coulomb: float = 0.0
    width: float | None = None


@dataclass(frozen=True)
class MotorSpec:
    """A motor on coordinate ``coordinate`` (its name): generalized force ``gain * u(t)``
    [N m or N] for the recorded input u (one input per motor, in file order)."""
    coordinate: str
    gain: float


@dataclass(frozen=True)
class MechanismSpec:
    """Everything the YAML file says, evaluated.

    ``source`` is the file name (for messages); ``parameters`` the evaluated named parameters.
    """
    points: tuple[PointSpec, ...]
    bodies: tuple[BodySpec, ...]
    relative_angles: tuple[RelativeAngleSpec, ...] = ()
    constraints: tuple[FixedSliderSpec | MobileSliderSpec, ...] = ()
    gravity: tuple[float, float] = (0.0, -9.81)
    parameters: dict = field(default_factory=dict)
    source: str | None = None
    friction: tuple[JointFrictionSpec | SliderFrictionSpec, ...] = ()
    motors: tuple[MotorSpec, ...] = ()


__all__ = [
    "PointSpec", "BodySpec", "RelativeAngleSpec", "FixedSliderSpec", "MobileSliderSpec",
    "JointFrictionSpec", "SliderFrictionSpec", "MotorSpec", "MechanismSpec"
]
