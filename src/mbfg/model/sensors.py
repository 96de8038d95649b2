"""Sensors of a planar mechanism: measurement functions with exact Jacobians.

Each sensor is an immutable dataclass with a noise standard deviation ``sigma`` (per reading,
in the reading's units), a sampling ``period`` (it reads at steps 0, period, 2 period, ...;
the other steps simply have no reading) and an optional ``name``.  It provides

* ``measure(mech, q, qd, qdd)``: the noise-free reading h(x), vectorized: inputs (..., n)
  give (..., k) (so (T, n) -> (T, k));
* ``jacobians(mech, q, qd, qdd)``: ``{slot: dh/dslot (..., k, n)}`` for the slots it depends
  on, named as the factor slots of :mod:`mbfg.factors.keys`: ``"q"`` (positions), ``"v"``
  (velocities), ``"a"`` (accelerations); ``sensor.slots`` lists them in that order;
* ``dim`` (k) and ``angular`` (readings are angles: residuals are wrapped to (-pi, pi]).

Arguments a sensor does not depend on may be ``None``.  Measurement functions (see
``docs/sensors.md``), with r0, r1 the first two points of a body, d = r1 - r0 and L the body's
model length (``BodySpec.length``):

==================  ==========================================================  ========
sensor              reading h                                                   units
==================  ==========================================================  ========
``AngleEncoder``    ``q[k]`` (relative angle k) or ``atan2(d_y, d_x)`` (body)    rad
``Gyroscope``       ``(d_x ddot_y - d_y ddot_x) / (d_x^2 + d_y^2)``              rad/s
``Accelerometer``   ``n . (a_P - g)``, specific force along a body-fixed axis    m/s^2
``Marker``          ``(x, y)`` of a point                                        m
``Distance``        ``|r_i - r_j|``                                              m
==================  ==========================================================  ========

:class:`SensorSet` groups sensors (``measure`` stacks them, ``synthesize`` simulates noisy
readings respecting the periods); :func:`mbfg.loader.load_sensors` reads the ``sensors:`` YAML format.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np


if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

__all__ = ["Sensor", "AngleEncoder", "Gyroscope", "Accelerometer", "Marker", "Distance",
           "SensorSet", "Readings", "SENSOR_TYPES", "wrap_angle", "readings_on_grid",
           "finite_readings", "INVALID_READINGS", "without_readings"]

_R90 = np.array([[0.0, -1.0], [1.0, 0.0]])  # +90 deg rotation: perp(v) = _R90 @ v


def wrap_angle(x: ArrayLike) -> float | np.ndarray:
    """Angle(s) wrapped to (-pi, pi] as ``atan2(sin x, cos x)``."""
    x = np.asarray(x, float)
    return np.arctan2(np.sin(x), np.cos(x))


# ------------------------------------------------------------------------ kinematic helpers
def _vec(x, mech, what):
    if x is None:
        raise ValueError(f"this sensor needs {what}")
    x = np.asarray(x, dtype=float)
    if x.shape[-1:] != (mech.n,):
        raise ValueError(f"{what} must have shape (..., {mech.n}), got {x.shape}")
    return x


def _point_affine(mech, p):
    """(S (2, n), c (2,)) with r_p = S q + c."""
    return mech.point_selection[p], mech.point_fixed_xy[p]


def _body(mech, b):
    spec = mech.spec.bodies[b]
    p0, p1 = spec.points[0], spec.points[1]
    S0, c0 = _point_affine(mech, p0)
    S1, c1 = _point_affine(mech, p1)
    return S0, c0, S1 - S0, c1 - c0, float(spec.length)  # r0 = S0 q + c0, d = D q + d0


def _apply(A, x):
    """A (k, n) @ x (..., n) -> (..., k)."""
    return np.einsum("kn,...n->...k", A, x)


def _rows_times(w, A):
    """w (..., k) times A (k, n) -> (..., n) (a row vector times a constant matrix)."""
    return np.einsum("...k,kn->...n", w, A)


def _check_positive(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or not value > 0:
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")


# -------------------------------------------------------------------------------- sensors
@dataclass(frozen=True, kw_only=True)
class Sensor:
    """Common fields: ``sigma`` (standard deviation of one reading, in its units, > 0),
    ``period`` (int >= 1: the sensor reads every ``period``-th step, starting at step 0) and
    an optional ``name``."""

    sigma: float
    period: int = 1
    name: str | None = None

    kind = "sensor"
    slots = ()
    angular = False
    dim = 1

    def __post_init__(self):
        _check_positive(self.sigma, "sigma")
        if isinstance(self.period, bool) or not isinstance(self.period, (int, np.integer)) \
                or self.period < 1:
            raise ValueError(f"period must be an integer >= 1, got {self.period!r}")
        object.__setattr__(self, "sigma", float(self.sigma))
        object.__setattr__(self, "period", int(self.period))

    @property
    def label(self) -> str:
        """``name`` or a description such as ``gyroscope(body 1)``."""
        return self.name or self._describe()

    def _describe(self) -> str:  # pragma: no cover - overridden
        return self.kind

    def component_labels(self) -> tuple:
        return (self.label,) if self.dim == 1 else tuple(f"{self.label}.{c}" for c in "xy"[:self.dim])

    def validate(self, mech: Mechanism) -> None:
        """Raise ValueError/IndexError if the sensor does not fit ``mech``."""

    def measure(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def jacobians(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> dict:  # pragma: no cover
        raise NotImplementedError

    def steps(self, n_steps: int) -> np.ndarray:
        """Indices of the steps at which the sensor reads, out of ``n_steps``."""
        return np.arange(0, int(n_steps), self.period)


def _check_body(mech, body):
    if isinstance(body, bool) or not isinstance(body, (int, np.integer)) \
            or not 0 <= body < len(mech.spec.bodies):
        raise IndexError(f"body {body!r} out of range 0..{len(mech.spec.bodies) - 1}")


def _check_point(mech, p):
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < mech.n_points:
        raise IndexError(f"point {p!r} out of range 0..{mech.n_points - 1}")


@dataclass(frozen=True, kw_only=True)
class AngleEncoder(Sensor):
    """Angle encoder [rad]: on a relative-angle coordinate (``coordinate``, name or index:
    h = q[k]) or on a body (``body``: h = atan2(d_y, d_x), the angle of its first two points
    p0 -> p1 from +X, in (-pi, pi]).  Give exactly one.  Readings are compared modulo 2 pi:
    observation residuals are ``atan2(sin(h - z), cos(h - z))``."""

    coordinate: int | str | None = None
    body: int | None = None

    kind = "encoder"
    angular = True

    def __post_init__(self):
        super().__post_init__()
        if (self.coordinate is None) == (self.body is None):
            raise ValueError("AngleEncoder needs exactly one of coordinate= and body=")

    @property
    def slots(self) -> tuple:
        return ("q",)

    def _describe(self):
        return (f"encoder({self.coordinate})" if self.coordinate is not None
                else f"encoder(body {self.body})")

    def validate(self, mech: Mechanism) -> None:
        if self.coordinate is not None:
            mech.coordinate_index(self.coordinate)
        else:
            _check_body(mech, self.body)

    def measure(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> np.ndarray:
        q = _vec(q, mech, "q")
        if self.coordinate is not None:
            return q[..., [mech.coordinate_index(self.coordinate)]]
        _, _, D, d0, _ = _body(mech, self.body)
        d = _apply(D, q) + d0
        return np.arctan2(d[..., 1], d[..., 0])[..., None]

    def jacobians(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> dict:
        q = _vec(q, mech, "q")
        if self.coordinate is not None:
            J = np.zeros(q.shape[:-1] + (1, mech.n))
            J[..., 0, mech.coordinate_index(self.coordinate)] = 1.0
            return {"q": J}
        _, _, D, d0, _ = _body(mech, self.body)
        d = _apply(D, q) + d0
        s = np.sum(d * d, axis=-1, keepdims=True)
        w = np.stack([-d[..., 1], d[..., 0]], axis=-1) / s          # d atan2 / d d
        return {"q": _rows_times(w, D)[..., None, :]}


@dataclass(frozen=True, kw_only=True)
class Gyroscope(Sensor):
    """Gyroscope on a body [rad/s]: h = (d_x ddot_y - d_y ddot_x) / (d_x^2 + d_y^2), with
    d = r1 - r0 and its current squared length.  This is d/dt atan2(d_y, d_x), which for a
    rigid body (|d| = L constant) is its angular rate omega (counter-clockwise positive),
    plus a constant ``bias`` [rad/s] (default 0)."""

    body: int
    bias: float = 0.0

    kind = "gyroscope"

    @property
    def slots(self) -> tuple:
        return ("q", "v")

    def _describe(self):
        return f"gyroscope(body {self.body})"  # what it is; its bias is a parameter

    def validate(self, mech: Mechanism) -> None:
        _check_body(mech, self.body)

    def _parts(self, mech, q, qd):
        q, qd = _vec(q, mech, "q"), _vec(qd, mech, "qd")
        _, _, D, d0, _ = _body(mech, self.body)
        d = _apply(D, q) + d0
        dd = _apply(D, qd)
        s = np.sum(d * d, axis=-1)
        c = d[..., 0] * dd[..., 1] - d[..., 1] * dd[..., 0]
        return D, d, dd, s, c

    def measure(
        self, mech: Mechanism, q: ArrayLike, qd: ArrayLike | None = None, qdd: ArrayLike | None = None
    ) -> np.ndarray:
        _, _, _, s, c = self._parts(mech, q, qd)
        return (c / s)[..., None] + self.bias

    def jacobians(
        self, mech: Mechanism, q: ArrayLike, qd: ArrayLike | None = None, qdd: ArrayLike | None = None
    ) -> dict:
        D, d, dd, s, c = self._parts(mech, q, qd)
        s_ = s[..., None]
        w_d = (np.stack([dd[..., 1], -dd[..., 0]], axis=-1) - 2.0 * (c / s)[..., None] * d) / s_
        w_dd = np.stack([-d[..., 1], d[..., 0]], axis=-1) / s_
        return {"q": _rows_times(w_d, D)[..., None, :], "v": _rows_times(w_dd, D)[..., None, :]}


@dataclass(frozen=True, kw_only=True)
class Accelerometer(Sensor):
    """Single-axis accelerometer [m/s^2] at body-frame point ``point`` = (X, Y) along the
    body-fixed direction at angle ``axis`` [rad] from the body's +X axis (p0 -> p1).

    It reads the specific force h = n . (a_P - g), with u = (r1 - r0)/L (L the body's model
    length), u_perp = R90 u, n = cos(axis) u + sin(axis) u_perp and
    a_P = a0 + (X (a1 - a0) + Y R90 (a1 - a0)) / L, the second time derivative of
    r_P = r0 + X u + Y u_perp.  Linear in qddot; depends on q through n.  At rest it reads
    -g along its axis (+9.81 m/s^2 on an upward axis)."""

    body: int
    point: tuple = (0.0, 0.0)
    axis: float = 0.0

    kind = "accelerometer"

    def __post_init__(self):
        super().__post_init__()
        pt = tuple(float(x) for x in self.point)
        if len(pt) != 2 or not all(map(math.isfinite, pt)):
            raise ValueError(f"point must be two finite numbers (X, Y), got {self.point!r}")
        if not math.isfinite(float(self.axis)):
            raise ValueError(f"axis must be a finite angle in rad, got {self.axis!r}")
        object.__setattr__(self, "point", pt)
        object.__setattr__(self, "axis", float(self.axis))

    @property
    def slots(self) -> tuple:
        return ("q", "a")

    def _describe(self):
        return (f"accelerometer(body {self.body} at ({self.point[0]:g}, {self.point[1]:g}), "
                f"axis {math.degrees(self.axis):g} deg)")

    def validate(self, mech: Mechanism) -> None:
        _check_body(mech, self.body)

    def _parts(self, mech, q, qdd):
        q, qdd = _vec(q, mech, "q"), _vec(qdd, mech, "qdd")
        S0, _, D, d0, L = _body(mech, self.body)
        X, Y = self.point
        ca, sa = math.cos(self.axis), math.sin(self.axis)
        Rn = (ca * np.eye(2) + sa * _R90) / L                   # n = Rn d
        A = S0 + (X * np.eye(2) + Y * _R90) @ D / L            # a_P = A qdd
        n = _apply(Rn, _apply(D, q) + d0)
        f = _apply(A, qdd) - mech.gravity                       # specific force
        return D, Rn, A, n, f

    def measure(
        self, mech: Mechanism, q: ArrayLike, qd: ArrayLike | None = None, qdd: ArrayLike | None = None
    ) -> np.ndarray:
        _, _, _, n, f = self._parts(mech, q, qdd)
        return np.sum(n * f, axis=-1)[..., None]

    def jacobians(
        self, mech: Mechanism, q: ArrayLike, qd: ArrayLike | None = None, qdd: ArrayLike | None = None
    ) -> dict:
        D, Rn, A, n, f = self._parts(mech, q, qdd)
        return {"q": _rows_times(f, Rn @ D)[..., None, :], "a": _rows_times(n, A)[..., None, :]}


@dataclass(frozen=True, kw_only=True)
class Marker(Sensor):
    """Position marker [m]: h = (x, y) of point ``point`` (two readings, same sigma)."""

    point: int

    kind = "marker"
    dim = 2

    @property
    def slots(self) -> tuple:
        return ("q",)

    def _describe(self):
        return f"marker(point {self.point})"

    def validate(self, mech: Mechanism) -> None:
        _check_point(mech, self.point)

    def measure(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> np.ndarray:
        q = _vec(q, mech, "q")
        S, c = _point_affine(mech, self.point)
        return _apply(S, q) + c

    def jacobians(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> dict:
        q = _vec(q, mech, "q")
        S, _ = _point_affine(mech, self.point)
        return {"q": np.broadcast_to(S, q.shape[:-1] + S.shape).copy()}


@dataclass(frozen=True, kw_only=True)
class Distance(Sensor):
    """Distance between two points [m]: h = |r_i - r_j| (``points`` = (i, j))."""

    points: tuple

    kind = "distance"

    def __post_init__(self):
        super().__post_init__()
        pts = tuple(self.points)
        if len(pts) != 2 or pts[0] == pts[1]:
            raise ValueError(f"points must be two distinct point indices, got {self.points!r}")
        object.__setattr__(self, "points", pts)

    @property
    def slots(self) -> tuple:
        return ("q",)

    def _describe(self):
        return f"distance(points {self.points[0]}, {self.points[1]})"

    def validate(self, mech: Mechanism) -> None:
        for p in self.points:
            _check_point(mech, p)

    def _parts(self, mech, q):
        q = _vec(q, mech, "q")
        Si, ci = _point_affine(mech, self.points[0])
        Sj, cj = _point_affine(mech, self.points[1])
        D = Si - Sj
        d = _apply(D, q) + (ci - cj)
        return D, d, np.sqrt(np.sum(d * d, axis=-1))

    def measure(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> np.ndarray:
        return self._parts(mech, q)[2][..., None]

    def jacobians(
        self,
        mech: Mechanism,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
    ) -> dict:
        D, d, h = self._parts(mech, q)
        return {"q": _rows_times(d / h[..., None], D)[..., None, :]}


SENSOR_TYPES = {"encoder": AngleEncoder, "gyroscope": Gyroscope, "accelerometer": Accelerometer,
                "marker": Marker, "distance": Distance}
"""YAML ``type`` -> sensor class."""


# ----------------------------------------------------------------------------- sensor sets
class Readings(NamedTuple):
    """Readings of one sensor: ``steps`` (int indices into the time grid) and ``values``
    (len(steps), k)."""
    steps: np.ndarray
    values: np.ndarray


class SensorSet(tuple):
    """An immutable tuple of sensors."""

    def __new__(cls, sensors=()):
        sensors = tuple(sensors)
        for s in sensors:
            if not isinstance(s, Sensor):
                raise TypeError(f"expected sensors, got {type(s).__name__}")
        return super().__new__(cls, sensors)

    def __repr__(self):
        return f"SensorSet({', '.join(s.label for s in self)})"

    @property
    def dim(self) -> int:
        """Total number of readings per step when every sensor reads."""
        return int(sum(s.dim for s in self))

    @property
    def names(self) -> tuple:
        """One label per sensor (its ``name`` or a description)."""
        return tuple(s.label for s in self)

    @property
    def labels(self) -> tuple:
        """One label per reading component (markers have ``.x`` and ``.y``)."""
        return tuple(c for s in self for c in s.component_labels())

    @property
    def sigmas(self) -> np.ndarray:
        """(dim,) standard deviation of each reading component."""
        return np.array([s.sigma for s in self for _ in range(s.dim)], float)

    def validate(self, mech: Mechanism) -> None:
        for s in self:
            s.validate(mech)

    def measure(
        self, mech: Mechanism, q: ArrayLike, qd: ArrayLike | None = None, qdd: ArrayLike | None = None
    ) -> np.ndarray:
        """Noise-free readings of every sensor, stacked: (..., dim)."""
        q = np.asarray(q, float)
        if not len(self):
            return np.zeros(q.shape[:-1] + (0,))
        return np.concatenate([s.measure(mech, q, qd, qdd) for s in self], axis=-1)

    def synthesize(
        self,
        mech: Mechanism,
        t: ArrayLike,
        q: ArrayLike,
        qd: ArrayLike | None = None,
        qdd: ArrayLike | None = None,
        rng: np.random.Generator | int | None = None,
    ) -> list:
        """Simulated noisy readings along a trajectory.

        ``t`` (T,) time grid [s] and ``q, qd, qdd`` (T, n) the states at those times.  Sensor
        ``s`` reads at steps ``0, s.period, 2 s.period, ...``; each reading gets independent
        Gaussian noise of standard deviation ``s.sigma``, drawn from ``rng`` (a generator, or
        an int seed; None: fresh entropy, so the readings differ from call to call).  Returns
        one :class:`Readings` ``(steps, values)`` per sensor, in order.
        """
        rng = np.random.default_rng(rng)
        T = np.asarray(t).shape[0]
        q = np.asarray(q, float)
        if q.shape[0] != T:
            raise ValueError(f"q has {q.shape[0]} steps but t has {T}")
        out = []
        for s in self:
            steps = s.steps(T)
            sub = [None if x is None else np.asarray(x, float)[steps] for x in (q, qd, qdd)]
            h = s.measure(mech, *sub)
            out.append(Readings(steps, h + s.sigma * rng.normal(size=h.shape)))
        return out


INVALID_READINGS = ("raise", "skip")
"""What :func:`finite_readings` does with a reading that is not a finite number."""


def without_readings(readings: list, silent: ArrayLike) -> list:
    """Every sensor's readings without those at the steps where ``silent`` is True: a gap in
    all readings, as a recording with NaN rows there gives.

    Parameters
    ----------
    readings : list of Readings (or (steps, values) pairs), one per sensor
    silent : (n_steps,) bool over the time grid

    Returns
    -------
    list of Readings
    """
    silent = np.asarray(silent, bool)
    out = []
    for steps, values in readings:
        keep = ~silent[np.asarray(steps, int)]
        out.append(Readings(np.asarray(steps)[keep], np.asarray(values)[keep]))
    return out


def finite_readings(sensors: tuple | SensorSet, readings: list, invalid: str = "raise") -> tuple:
    """Readings whose values are all finite numbers.

    Parameters
    ----------
    sensors : sequence of Sensor
    readings : one ``(steps, values)`` per sensor; ``values`` (len(steps), dim)
    invalid : "raise" or "skip"
        A reading with a NaN or infinite component raises :class:`~mbfg.errors.DataError`
        naming the sensor, the reading and its step (``"raise"``), or is dropped
        (``"skip"``: the step then has no reading of that sensor, like a slower sensor).

    Returns
    -------
    (readings, skipped) : list of :class:`Readings` (one per sensor), and the number of
    readings dropped.
    """
    from mbfg.errors import DataError, UsageError
    if invalid not in INVALID_READINGS:
        raise UsageError(f"invalid_readings must be one of {', '.join(INVALID_READINGS)}, "
                         f"got {invalid!r}")
    sensors = tuple(sensors)
    if len(readings) != len(sensors):
        raise DataError(f"{len(sensors)} sensors but {len(readings)} reading lists; expected "
                        f"one (steps, values) per sensor")
    out, skipped = [], 0
    for s, (steps, values) in zip(sensors, readings):
        steps = np.asarray(steps, int).ravel()
        values = np.asarray(values, float)
        if values.size != steps.size * s.dim:
            raise DataError(f"{s.label}: {steps.size} reading steps but values of shape "
                            f"{values.shape}; expected ({steps.size}, {s.dim})")
        values = values.reshape(steps.size, s.dim)
        ok = np.all(np.isfinite(values), axis=1)
        if not np.all(ok):
            if invalid == "raise":
                i = int(np.argmax(~ok))
                raise DataError(f"{s.label}: reading {i} (step {steps[i]}) is "
                                f"{values[i].tolist()}; expected finite numbers (drop it, or "
                                f"pass invalid_readings='skip' to skip such readings)")
            skipped += int(np.sum(~ok))
        out.append(Readings(steps[ok], values[ok]))
    return out, skipped


def readings_on_grid(sensors: tuple | SensorSet, readings: list, n_steps: int) -> list:
    """Each sensor's readings placed on the time grid of ``n_steps`` steps.

    Parameters
    ----------
    sensors : sequence of Sensor
    readings : one ``(steps, values)`` per sensor (:meth:`SensorSet.synthesize`,
        :func:`mbfg.io.read_readings`); ``values`` (len(steps), dim)
    n_steps : int

    Returns
    -------
    list of ``(values (n_steps, dim), present (n_steps,) bool)``, one per sensor; values are
    zero where the sensor has no reading.  Readings after the last step are ignored.

    Raises
    ------
    DataError
        When the numbers of sensors and reading lists differ, a reading has the wrong number of
        components or a non-finite one, or a step is negative.
    """
    from mbfg.errors import DataError
    sensors = tuple(sensors)
    n_steps = int(n_steps)
    out = []
    for s, (steps, values) in zip(sensors, finite_readings(sensors, readings, "raise")[0]):
        if steps.size and steps.min() < 0:
            raise DataError(f"{s.label}: negative reading step {steps.min()}; expected steps "
                            f"0..{n_steps - 1}")
        keep = steps < n_steps
        grid = np.zeros((n_steps, s.dim))
        present = np.zeros(n_steps, bool)
        grid[steps[keep]], present[steps[keep]] = values[keep], True
        out.append((grid, present))
    return out
