"""Verification helpers shared by the test suite (and useful for users' own factors).

:func:`numerical_jacobian` and :func:`check_jacobian` are the single finite-difference
machinery of the project: every analytic Jacobian of the model kernels and of the factors is
compared with central differences through them.

:func:`random_mechanism` and :func:`random_mechanisms` draw seeded random mechanisms of the
:data:`FAMILIES` (four-bars of every Grashof class, slider-cranks, quick-return and shaper
mechanisms, an oscillating cylinder, five- and six-bars, open chains) at any length and mass
scale, for tests and benchmarks on mechanisms nobody tuned on.
"""
from __future__ import annotations

import functools
import itertools
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import MbfgError

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

FD_RTOL = 1e-6
"""Default relative tolerance.  Central differences with h = eps^(1/3) * max(1, |x|) have
truncation error O(h^2 |f'''|) ~ 4e-11 and round-off O(eps |f| / h) ~ 4e-11 relative to the
function scale, so a correct Jacobian agrees to ~1e-9; a wrong term shows up at O(1)."""


def numerical_jacobian(f: Callable, x: ArrayLike, h: float | None = None) -> np.ndarray:
    """Central-difference Jacobian of ``f`` at ``x``.

    Parameters
    ----------
    f : callable
        Maps a 1-D array (k,) to an array of any shape S.
    x : (k,) array
    h : float, optional
        Absolute step; by default eps^(1/3) * max(1, |x_i|) per component.

    Returns
    -------
    J : array of shape S + (k,)
    """
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        hi = h if h is not None else np.cbrt(np.finfo(float).eps) * max(1.0, abs(x[i]))
        xp, xm = x.copy(), x.copy()
        xp[i] += hi
        xm[i] -= hi
        cols.append((np.asarray(f(xp), float) - np.asarray(f(xm), float)) / (2.0 * hi))
    return np.stack(cols, axis=-1) if cols else np.zeros(np.shape(f(x)) + (0,))


def jacobian_error(analytic: ArrayLike, numeric: ArrayLike) -> float:
    """Max-norm difference relative to max(1, max |numeric|, max |analytic|)."""
    analytic = np.asarray(analytic, float)
    numeric = np.asarray(numeric, float)
    if analytic.shape != numeric.shape:
        raise AssertionError(f"Jacobian shape {analytic.shape} != finite-difference shape "
                             f"{numeric.shape}")
    if analytic.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(numeric))), float(np.max(np.abs(analytic))))
    return float(np.max(np.abs(analytic - numeric))) / scale


def check_jacobian(
    f: Callable,
    x: ArrayLike,
    analytic: ArrayLike,
    *,
    rtol: float = FD_RTOL,
    name: str = "Jacobian",
    h: float | None = None,
) -> float:
    """Assert that ``analytic`` matches the central-difference Jacobian of ``f`` at ``x``.

    Returns the relative error; raises AssertionError (with the worst entry) otherwise."""
    numeric = numerical_jacobian(f, x, h)
    err = jacobian_error(analytic, numeric)
    if not err <= rtol:
        diff = np.abs(np.asarray(analytic, float) - numeric)
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        raise AssertionError(
            f"{name}: relative error {err:.3e} > {rtol:.1e}; worst entry {worst}: analytic "
            f"{np.asarray(analytic)[worst]:.9g}, finite differences {numeric[worst]:.9g}")
    return err


def random_assembled_state(
    mech: Mechanism,
    rng: np.random.Generator,
    *,
    spread: float = 0.5,
    angle: float | None = None,
    speed: float = 1.0,
) -> tuple:
    """A random assembled state (q, qd, qdd) of ``mech``, all constraint levels satisfied.

    The independent coordinates are moved by up to ``spread`` (relative) from q0 and solved
    by finite displacement; velocities and accelerations are random in the tangent space.
    ``angle`` sets the first relative angle (if any) to that value instead.
    Falls back to smaller moves when a random target cannot be assembled.
    """
    from mbfg.errors import ConvergenceError
    from mbfg.model import kinematics as K
    idx = K.choose_independent_coordinates(mech)
    a = int(mech.angle_coords[0]) if (angle is not None and mech.angle_coords.size) else None
    attempts = [(1.0, a)] if a is not None and a in idx else []
    attempts += [(s, None) for s in (1.0, 0.5, 0.25, 0.1, 0.03, 0.0)]
    q = None
    for shrink, angle_index in attempts:
        z0 = mech.q0[list(idx)]
        z = z0 * (1 + shrink * spread * rng.uniform(-1, 1, len(idx))) \
            + shrink * spread * rng.uniform(-0.2, 0.2, len(idx))
        if angle_index is not None:
            z[list(idx).index(angle_index)] = angle
        try:  # continuation from q0 keeps the assembly branch
            q = mech.q0.copy()
            for s in np.linspace(0.1, 1.0, 10):
                q = K.solve_finite_displacement(mech, q, idx, z0 + s * (z - z0))
            break
        except ConvergenceError:
            q = None
    if q is None:
        raise RuntimeError("could not assemble a random state")
    idx = K.choose_independent_coordinates(mech, q)
    # a random direction of the tangent space, scaled to |qd| = speed * sqrt(n): velocities of
    # the independent coordinates alone can blow up where those coordinates are ill-suited
    qd = K.solve_velocity(mech, q, idx, rng.normal(size=len(idx)))
    qd *= speed * np.sqrt(mech.n) / max(np.linalg.norm(qd), 1e-300)
    qdd = K.solve_acceleration(mech, q, qd, idx, rng.normal(size=len(idx)))
    return q, qd, qdd


# ------------------------------------------------------------------ random mechanisms
#
# A seeded generator of planar mechanisms nobody tuned on, for the test suite and the
# robustness benchmarks.  Each family is drawn in dimensionless proportions (lengths in units
# of a length scale L, masses in units of a mass scale M, gravity g), validated at L = M = g = 1
# and only then written as YAML at the requested scales, so that the same (family, seed) gives
# the same dimensionless mechanism at every scale.

FAMILIES: tuple = ("crank-rocker", "double-rocker", "triple-rocker", "triangle-coupler",
                   "slider-crank-offset", "slider-crank-inclined", "quick-return", "shaper",
                   "oscillating-cylinder", "five-bar", "six-bar",
                   "chain-1", "chain-2", "chain-3", "chain-4", "chain-5", "chain-6")
"""The mechanism families of :func:`random_mechanism`."""

FAMILY_DOF: dict = {**{f: 1 for f in FAMILIES}, "five-bar": 2,
                    **{f"chain-{k}": k for k in range(1, 7)}}
"""Degrees of freedom of each family."""

_MARGIN_DEG = 20.0
"""Smallest angle [deg] between two links at a joint that closes a loop (transmission angle)
or that would be a dead centre, at the start."""
_SIGMA_RTOL = 1e-3
"""Smallest accepted sigma_min / sigma_max of the row-normalized constraint Jacobian at q0."""
_MIN_ACCELERATION = 0.05
"""Smallest accepted max |qddot| of the point coordinates at q0, released from rest [g]."""
_MAX_DRAWS = 1000


@dataclass(frozen=True)
class GeneratedMechanism:
    """A mechanism drawn by :func:`random_mechanism`.

    Attributes
    ----------
    family : str
        One of :data:`FAMILIES`.
    seed : int
        The seed it was drawn from.
    length : float
        Length scale L [m]: every length of the mechanism is a fixed multiple of it.
    mass : float
        Mass scale M [kg]: every mass is a fixed multiple of it (moments of inertia of M L^2).
    yaml : str
        Complete YAML text, loadable by :func:`mbfg.mechanism_from_yaml`.
    name : str
        ``family-s<seed>-L<length>-m<mass>``, e.g. ``crank-rocker-s3-L0.057-m2.1``.
    """
    family: str
    seed: int
    length: float
    mass: float
    yaml: str
    name: str

    @property
    def dof(self) -> int:
        """Degrees of freedom of the family."""
        return FAMILY_DOF[self.family]

    def load(self) -> Mechanism:
        """Build the assembled :class:`~mbfg.model.Mechanism` (``source`` = :attr:`name`)."""
        from mbfg.loader import mechanism_from_yaml
        return mechanism_from_yaml(self.yaml, self.name)


def random_mechanism(family: str, seed: int, *, length: float | None = None,
                     mass: float | None = None, gravity: float = 9.81) -> GeneratedMechanism:
    """Draw a random planar mechanism of a family, at rest in a non-equilibrium configuration.

    The geometry (link ratios, initial configuration, assembly branch), the mass properties
    (body masses, centres of mass, some off the line between the points, and moments of
    inertia with I0 > mass |cog|^2) and whether the crank angle is a relative coordinate
    (``RelativeAngleAbsoluteDOF``, in about half of the draws) depend on ``family`` and
    ``seed`` only.  Every draw is checked at unit scale: it assembles with the family's DOF,
    the row-normalized constraint Jacobian at q0 has sigma_min / sigma_max > 1e-3 (not at a
    branch point), and released from rest some point accelerates by more than 0.05 g (not an
    equilibrium); a draw that fails is replaced by the next one of the same seeded stream.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    seed : int
        Non-negative seed.
    length : float, optional
        Length scale L [m]; by default drawn log-uniformly in [0.01, 10] from the seed.
    mass : float, optional
        Mass scale M [kg]; by default drawn log-uniformly in [0.001, 500] from the seed.
    gravity : float
        Magnitude g [m/s^2] of gravity, which points along -y.

    Returns
    -------
    GeneratedMechanism
        Scaling ``length`` by 10^k, ``mass`` by 10^j and ``gravity`` by 10^k scales the
        positions by 10^k at the same times (numbers are written with ``repr`` precision).
    """
    if family not in FAMILY_DOF:
        raise ValueError(f"unknown mechanism family {family!r}; expected one of "
                         f"{', '.join(FAMILIES)}")
    scale_rng = np.random.default_rng([seed, zlib.crc32(family.encode()), 1])
    drawn_length = 10.0 ** scale_rng.uniform(-2.0, 1.0)
    drawn_mass = 10.0 ** scale_rng.uniform(-3.0, np.log10(500.0))
    length = float(drawn_length if length is None else length)
    mass = float(drawn_mass if mass is None else mass)
    name = f"{family}-s{seed}-L{length:.3g}-m{mass:.3g}"
    header = (f"{family} mechanism, seed {seed}, drawn by mbfg.testing.random_mechanism: "
              f"lengths are multiples of L [m], masses of M [kg]; {FAMILY_DOF[family]} DOF")
    text = _draw(family, seed).yaml(header, length, mass, float(gravity))
    return GeneratedMechanism(family=family, seed=seed, length=length, mass=mass, yaml=text,
                              name=name)


@dataclass(frozen=True)
class WatchedMechanism:
    """A generated mechanism, its simulated truth and synthesized readings
    (:func:`watched_mechanism`).

    Attributes
    ----------
    proto : Mechanism
        The prototype (the truth's mechanism).
    model : Mechanism
        The estimator's model: the prototype with gravity ``gravity_factor`` times its own.
    sensors : SensorSet
        A marker on every moving point (sigma 3e-3 ell) and a gyroscope on body 0 (sigma
        1e-2 omega_c), or the gyroscope alone.
    readings : list of Readings
        Noisy readings at every step, without those inside the gap if one was asked for.
    truth : ReferenceSolution
        DOP853 at rtol 1e-10, atol 1e-10 ell (``t``, ``q``, ``qd``, ``qdd``).
    dt : float
        0.02 / omega_c [s].
    omega_c : float
        sqrt(|g| / ell) [1/s].
    ell : float
        The characteristic length [m] (:func:`mbfg.model.scales.mechanism_scales`).
    points : (k,) int
        The point coordinates (indices into q).
    """
    proto: Mechanism
    model: Mechanism
    sensors: object
    readings: list
    truth: object
    dt: float
    omega_c: float
    ell: float
    points: np.ndarray

    def readings_with_gap(self, start: float, stop: float) -> list:
        """:attr:`readings` without any over [start, stop) / omega_c."""
        from mbfg.model.sensors import without_readings
        tw = np.arange(len(self.truth.t)) * self.dt * self.omega_c
        return without_readings(self.readings, (tw >= start) & (tw < stop))


def watched_mechanism(family: str, seed: int, *, length: float, mass: float,
                      span: float = 6.0, noise_seed: int = 5,
                      gravity_factor: float = 0.9,
                      gyroscope_only: bool = False) -> WatchedMechanism:
    """A generated mechanism released from rest and watched by sensors, for estimation tests
    and benchmarks on mechanisms nobody tuned on.

    Times are in units of 1 / omega_c, so the set-up is the same at every scale: the truth
    runs over ``span`` / omega_c at dt = 0.02 / omega_c (a gap in the readings:
    :meth:`WatchedMechanism.readings_with_gap`).  Readings are drawn with ``noise_seed``; the
    model's gravity is ``gravity_factor`` times the prototype's (a weight error to
    estimate).  ``gyroscope_only``: the gyroscope on body 0 is the only sensor (a rate
    sensor, which gives no angle back after a gap)."""
    import dataclasses

    from mbfg.model.integrate import integrate_reference
    from mbfg.model.scales import mechanism_scales
    from mbfg.model.sensors import Gyroscope, Marker, SensorSet
    proto = random_mechanism(family, seed, length=length, mass=mass).load()
    ell = mechanism_scales(proto).length
    wc = float(np.sqrt(np.hypot(*proto.gravity) / ell))
    dt = 0.02 / wc
    truth = integrate_reference(proto, span / wc, dt, rtol=1e-10, atol=1e-10 * ell)
    pc = np.asarray(proto.point_coords, int)
    moving = [i for i in range(pc.shape[0]) if np.all(pc[i] >= 0)]
    sensors = SensorSet(([] if gyroscope_only else
                         [Marker(point=p, sigma=3e-3 * ell) for p in moving])
                        + [Gyroscope(body=0, sigma=1e-2 * wc)])
    readings = sensors.synthesize(proto, truth.t, truth.q, truth.qd, truth.qdd,
                                  rng=np.random.default_rng(noise_seed))
    model = dataclasses.replace(proto, gravity=tuple(gravity_factor * g for g in proto.gravity))
    return WatchedMechanism(proto, model, sensors, readings, truth, dt, wc, ell,
                            np.unique(pc[pc >= 0]))


def random_mechanisms(count: int, seed: int, families: tuple = FAMILIES) -> list:
    """``count`` random mechanisms cycling through ``families``, at random scales.

    The i-th is of family ``families[i % len(families)]`` with a seed drawn from ``seed``, so
    ``count = k * len(families)`` covers every family k times.

    Returns
    -------
    list of GeneratedMechanism
    """
    families = tuple(families)
    seeds = np.random.default_rng(seed).integers(0, 2 ** 31, size=count)
    return [random_mechanism(families[i % len(families)], int(s)) for i, s in enumerate(seeds)]


class _Redraw(Exception):
    """The current draw does not have the family's character; draw again."""


def _require(condition: bool) -> None:
    if not condition:
        raise _Redraw


def _unit(angle: float) -> np.ndarray:
    return np.array([np.cos(angle), np.sin(angle)])


def _angle_deg(u, v) -> float:
    """Angle between two vectors [deg], in [0, 180]."""
    return float(np.degrees(np.arctan2(abs(u[0] * v[1] - u[1] * v[0]), np.dot(u, v))))


def _require_angle(u, v, margin: float = _MARGIN_DEG) -> None:
    """Redraw unless the angle between u and v is at least ``margin`` degrees from 0 and 180."""
    _require(margin <= _angle_deg(u, v) <= 180.0 - margin)


def _dyad(p, rp: float, q, rq: float, sign: int, margin: float = _MARGIN_DEG) -> np.ndarray:
    """The point X with |X - p| = rp and |X - q| = rq on side ``sign`` (+1 left) of p -> q.

    Redraws unless the angle at X between X -> p and X -> q is within ``margin`` degrees of
    neither 0 nor 180 (the dyad is far from its dead centres, hence it assembles)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    d = float(np.linalg.norm(q - p))
    _require(abs((rp ** 2 + rq ** 2 - d ** 2) / (2.0 * rp * rq)) <= np.cos(np.radians(margin)))
    x = (d ** 2 + rp ** 2 - rq ** 2) / (2.0 * d)
    u = (q - p) / d
    return p + x * u + sign * np.sqrt(rp ** 2 - x ** 2) * np.array([-u[1], u[0]])


def _collinear_margin(lengths, closing: float) -> float:
    """min over signs of |sum(+-lengths) - closing|: how far a closed chain of links of these
    lengths and a ground link ``closing`` is from folding flat (all links collinear), the only
    configurations where its constraint Jacobian loses rank."""
    return min(abs(np.dot(s, lengths) - closing)
               for s in itertools.product((-1.0, 1.0), repeat=len(lengths)))


def _off_line_point(rng, origin, toward) -> np.ndarray:
    """A body point off the line origin -> toward: at 0.5-1.2 times its length, 25-75 deg to
    either side."""
    d = np.asarray(toward, float) - np.asarray(origin, float)
    angle = np.arctan2(d[1], d[0]) + rng.choice([-1.0, 1.0]) * np.radians(rng.uniform(25, 75))
    return origin + rng.uniform(0.5, 1.2) * np.linalg.norm(d) * _unit(angle)


class _Sketch:
    """A dimensionless mechanism under construction: points (in units of L), bodies with
    masses in units of M, sliders and relative angles, rendered to YAML at any scale."""

    def __init__(self, rng):
        self.rng = rng
        self.points = []       # (xy (2,), fixed, comment)
        self.bodies = []       # (point indices, length or None, mass, I0, cog (2,), comment)
        self.constraints = []  # (YAML flow mapping, comment)
        self.angles = []       # (point a, point b)

    def point(self, xy, comment: str, fixed: bool = False) -> int:
        self.points.append((np.asarray(xy, float), fixed, comment))
        return len(self.points) - 1

    def body(self, indices, comment: str) -> None:
        """Add a body on ``indices`` with random mass properties: mass 0.3-3, centre of mass
        near the centroid of its points (off their line in about half of the bodies), radius
        of gyration about it sqrt(1/30..1/6) times the body's size."""
        rng = self.rng
        xy = np.array([self.points[i][0] for i in indices])
        ex = xy[1] - xy[0]
        length = float(np.linalg.norm(ex))
        ex = ex / length
        local = (xy - xy[0]) @ np.column_stack([ex, [-ex[1], ex[0]]])  # body frame
        local[1] = (length, 0.0)  # exactly on the frame's axis (a bar's cog y stays 0)
        size = max(float(np.linalg.norm(a - b)) for a in xy for b in xy)
        mass = 10.0 ** rng.uniform(np.log10(0.3), np.log10(3.0))
        cog = local.mean(axis=0) + size * np.array(
            [rng.uniform(-0.2, 0.2), rng.uniform(-0.15, 0.15) if rng.random() < 0.5 else 0.0])
        i0 = mass * (rng.uniform(1 / 30, 1 / 6) * size ** 2 + cog @ cog)
        self.bodies.append((tuple(indices), length if len(indices) == 2 else None, mass, i0,
                            cog, comment))

    def crank_angle(self, i: int, j: int) -> None:
        """Make the angle of i -> j a relative coordinate in about half of the draws."""
        if self.rng.random() < 0.5:
            self.angles.append((i, j))

    def fixed_slider(self, point: int, a, b, comment: str) -> None:
        line = ", ".join(f"[{_length(p[0])}, {_length(p[1])}]" for p in (a, b))
        self.constraints.append((f"{{type: fixed_slider, point: {point}, line: [{line}]}}",
                                 comment))

    def mobile_slider(self, point: int, j: int, k: int, comment: str) -> None:
        self.constraints.append(
            (f"{{type: mobile_slider, point: {point}, line_points: [{j}, {k}]}}", comment))

    def yaml(self, header: str, length: float, mass: float, gravity: float) -> str:
        """The YAML text with length scale ``length`` [m], mass scale ``mass`` [kg] and
        gravity ``gravity`` [m/s^2] along -y."""
        lines = ["%YAML 1.2", "---", f"# {header}", "parameters:",
                 f"  L: {float(length)!r}  # length scale [m]",
                 f"  M: {float(mass)!r}  # mass scale [kg]",
                 f"  g: {float(gravity)!r}  # gravity [m/s^2]",
                 "gravity: [0, -g]", "points:"]
        for k, (xy, fixed, comment) in enumerate(self.points):
            flag = ", fixed: true" if fixed else ""
            lines.append(f"  - {{x: {_length(xy[0])}, y: {_length(xy[1])}{flag}}}"
                         f"  # {k}: {comment}")
        lines.append("planar_bodies:")
        for indices, body_length, m, i0, cog, comment in self.bodies:
            lines.append(f"  - points: [{', '.join(map(str, indices))}]  # {comment}")
            if body_length is not None:
                lines.append(f"    length: {_length(body_length)}")
            lines += [f"    mass: {float(m)!r}*M", f"    I0: {float(i0)!r}*M*L^2",
                      f"    cog: [{_length(cog[0])}, {_length(cog[1])}]"]
        if self.constraints:
            lines.append("constraints:")
            lines += [f"  - {text}  # {comment}" for text, comment in self.constraints]
        if self.angles:
            lines.append("relative_coordinates:")
            lines += [f"  - {{type: RelativeAngleAbsoluteDOF, points: [{a}, {b}]}}"
                      for a, b in self.angles]
        return "\n".join(lines) + "\n"


def _length(x: float) -> str:
    """A length expression in units of the parameter L, with repr precision."""
    return f"{float(x)!r}*L"


# ---------------------------------------------------------------- family builders
# Each draws one candidate into a _Sketch from the generator's stream (raising _Redraw when
# the draw lacks the family's character); points are created before the bodies using them.


@dataclass(frozen=True)
class _FourBar:
    """A drawn four-bar: crank a at the origin, at angle ``theta`` [rad] at the start, coupler
    b, rocker c pivoting about ``pivot`` (ground length 1), assembly side ``sign``; index of
    the rocker's third point (or -1)."""
    a: float
    b: float
    c: float
    theta: float
    pivot: np.ndarray
    sign: int
    rocker_point: int

    def rocker_angle(self, theta: float) -> float:
        """Angle [rad] of the rocker (pivot -> joint) at crank angle ``theta`` [rad]."""
        d = _dyad(self.a * _unit(theta), self.b, self.pivot, self.c, self.sign, 0.0) \
            - self.pivot
        return float(np.arctan2(d[1], d[0]))


def _fourbar(sk: _Sketch, kind: str, *, coupler_point: bool = False,
             rocker_point: bool = False) -> _FourBar:
    """Draw a four-bar of ``kind`` (crank-rocker: Grashof, crank shortest; double-rocker:
    Grashof, coupler shortest; triple-rocker: non-Grashof), ground link of length 1 from the
    crank pivot at the origin, tilted by up to 20 deg.  ``coupler_point``/``rocker_point``
    make the coupler/rocker a 3-point body with a point off its line."""
    rng = sk.rng
    if kind == "crank-rocker":
        a, b, c = rng.uniform(0.15, 0.45), rng.uniform(0.5, 1.6), rng.uniform(0.5, 1.6)
    elif kind == "double-rocker":
        a, b, c = rng.uniform(0.5, 1.6), rng.uniform(0.15, 0.45), rng.uniform(0.5, 1.6)
    else:
        a, b, c = rng.uniform(0.3, 1.8, size=3)
    s, p, q, l = sorted((a, b, c, 1.0))
    grashof = (p + q) - (s + l)
    _require(grashof >= 0.1 if kind != "triple-rocker" else grashof <= -0.1)
    _require(_collinear_margin((a, b, c), 1.0) >= 0.1)
    pivot = _unit(np.radians(rng.uniform(-20, 20)))
    theta = rng.uniform(-np.pi, np.pi)
    sign = int(rng.choice([-1, 1]))
    crank_pin = a * _unit(theta)
    joint = _dyad(crank_pin, b, pivot, c, sign)
    _require_angle(-crank_pin, joint - crank_pin)
    o = sk.point((0.0, 0.0), "crank pivot", fixed=True)
    pin = sk.point(crank_pin, "crank pin")
    jc = sk.point(joint, "coupler-rocker joint")
    pv = sk.point(pivot, "rocker pivot", fixed=True)
    sk.body((o, pin), "crank")
    if coupler_point:
        cp = sk.point(_off_line_point(rng, crank_pin, joint), "coupler point")
        sk.body((pin, jc, cp), "triangular coupler")
    else:
        sk.body((pin, jc), "coupler")
    rp = -1
    if rocker_point:
        rp = sk.point(_off_line_point(rng, pivot, joint), "rocker's third point")
        sk.body((pv, jc, rp), "ternary rocker")
    else:
        sk.body((pv, jc), "rocker")
    sk.crank_angle(o, pin)
    return _FourBar(a, b, c, theta, pivot, sign, rp)


def _slider_crank(sk: _Sketch, inclination: float, offset: float) -> None:
    """Crank r (0.2-0.45) at the origin, connecting rod 1 whose end slides on a fixed line at
    ``inclination`` [rad] from +x and at signed distance ``offset * (1 - r)`` from the crank
    pivot (|offset| < 1, so the crank turns fully)."""
    rng = sk.rng
    r = rng.uniform(0.2, 0.45)
    u, n = _unit(inclination), _unit(inclination + np.pi / 2)
    e = offset * (1.0 - r)
    pin = r * _unit(rng.uniform(-np.pi, np.pi))
    across = n @ pin - e
    slider = pin - across * n + rng.choice([-1.0, 1.0]) * np.sqrt(1.0 - across ** 2) * u
    _require_angle(-pin, slider - pin)  # away from the dead centres
    o = sk.point((0.0, 0.0), "crank pivot", fixed=True)
    a = sk.point(pin, "crank pin")
    b = sk.point(slider, "slider (piston pin)")
    sk.body((o, a), "crank")
    sk.body((a, b), "connecting rod")
    sk.fixed_slider(b, e * n, e * n + u, "piston on the fixed line")
    sk.crank_angle(o, a)


def _slider_crank_offset(sk):
    rng = sk.rng
    _slider_crank(sk, 0.0, rng.choice([-1.0, 1.0]) * rng.uniform(0.1, 0.9))


def _slider_crank_inclined(sk):
    rng = sk.rng
    _slider_crank(sk, rng.choice([-1.0, 1.0]) * np.radians(rng.uniform(15, 75)),
                  rng.uniform(-0.9, 0.9))


@dataclass(frozen=True)
class _QuickReturn:
    """A drawn quick-return: crank r at the origin, lever b pivoting about ``pivot`` (1 below
    the crank pivot, tilted by up to 15 deg)."""
    r: float
    b: float
    pivot: np.ndarray

    def lever_tip(self, theta: float) -> np.ndarray:
        """Lever tip at crank angle ``theta`` [rad]."""
        d = self.r * _unit(theta) - self.pivot
        return self.pivot + self.b * d / np.linalg.norm(d)


def _quick_return(sk: _Sketch) -> tuple:
    """Crank (0.25-0.65) whose pin slides in the slot of a lever pivoting 1 below the crank
    pivot (so the lever oscillates); the lever is 1.15-1.5 times the longest pin distance.
    Returns the geometry and the index of the lever tip."""
    rng = sk.rng
    r = rng.uniform(0.25, 0.65)
    qr = _QuickReturn(r, (1.0 + r) * rng.uniform(1.15, 1.5),
                      -_unit(np.pi / 2 + np.radians(rng.uniform(-15, 15))))
    theta = rng.uniform(-np.pi, np.pi)
    o = sk.point((0.0, 0.0), "crank pivot", fixed=True)
    a = sk.point(r * _unit(theta), "crank pin, sliding in the lever's slot")
    p = sk.point(qr.pivot, "lever pivot", fixed=True)
    t = sk.point(qr.lever_tip(theta), "lever tip")
    sk.body((o, a), "crank")
    sk.body((p, t), "slotted lever")
    sk.mobile_slider(a, p, t, "crank pin in the slot")
    sk.crank_angle(o, a)
    return qr, t


def _shaper(sk: _Sketch) -> None:
    """Quick-return whose lever tip drives, through a link, a ram sliding on a horizontal
    line near the top of the tip's sweep; the link stays within 60 deg of the ram line over
    the whole crank revolution."""
    rng = sk.rng
    qr, t = _quick_return(sk)
    height = qr.pivot[1] + qr.b * rng.uniform(0.95, 1.1)
    link = qr.b * rng.uniform(0.4, 0.9)
    sweep = np.array([qr.lever_tip(th)[1] for th in np.linspace(-np.pi, np.pi, 73)])
    _require(np.max(np.abs(height - sweep)) <= link * np.sin(np.radians(60)))
    side = rng.choice([-1.0, 1.0])
    tip = sk.points[t][0]
    rise = height - tip[1]
    ram_pin = tip + np.array([side * np.sqrt(link ** 2 - rise ** 2), rise])
    ram_end = ram_pin + np.array([side * qr.b * rng.uniform(0.3, 0.6), 0.0])
    r1 = sk.point(ram_pin, "ram pin")
    r2 = sk.point(ram_end, "ram end")
    sk.body((t, r1), "connecting link")
    sk.body((r1, r2), "ram")
    for p in (r1, r2):
        sk.fixed_slider(p, (0.0, height), (1.0, height), "ram on the fixed guide")


def _oscillating_cylinder(sk: _Sketch) -> None:
    """Crank r (0.25-0.6) at the origin; a cylinder pivoting about a fixed point at distance
    1 in a random direction; a piston rod from the crank pin into the cylinder: the pin and the
    piston both stay on the cylinder's line (mobile sliders)."""
    rng = sk.rng
    r = rng.uniform(0.25, 0.6)
    pivot = _unit(rng.uniform(-np.pi, np.pi))
    pin = r * _unit(rng.uniform(-np.pi, np.pi))
    w = (pivot - pin) / np.linalg.norm(pivot - pin)
    rod = (1.0 - r) * rng.uniform(0.5, 0.85)
    barrel = (1.0 + r - rod) * rng.uniform(1.05, 1.3)
    o = sk.point((0.0, 0.0), "crank pivot", fixed=True)
    a = sk.point(pin, "crank pin, end of the piston rod")
    p = sk.point(pivot, "cylinder pivot", fixed=True)
    c = sk.point(pivot - barrel * w, "cylinder mouth")
    d = sk.point(pin + rod * w, "piston")
    sk.body((o, a), "crank")
    sk.body((p, c), "cylinder")
    sk.body((a, d), "piston rod")
    sk.mobile_slider(a, p, c, "rod end on the cylinder axis")
    sk.mobile_slider(d, p, c, "piston on the cylinder axis")
    sk.crank_angle(o, a)


def _five_bar(sk: _Sketch) -> None:
    """Two cranks (0.3-0.8) on ground pivots 1 apart, two couplers (0.7-1.4) meeting at a
    point; 2 DOF."""
    rng = sk.rng
    a1, a2 = rng.uniform(0.3, 0.8, size=2)
    b1, b2 = rng.uniform(0.7, 1.4, size=2)
    _require(_collinear_margin((a1, b1, b2, a2), 1.0) >= 0.1)
    right = _unit(np.radians(rng.uniform(-20, 20)))
    pin1 = a1 * _unit(rng.uniform(-np.pi, np.pi))
    pin2 = right + a2 * _unit(rng.uniform(-np.pi, np.pi))
    tip = _dyad(pin1, b1, pin2, b2, int(rng.choice([-1, 1])))
    _require_angle(-pin1, tip - pin1)
    _require_angle(right - pin2, tip - pin2)
    o1 = sk.point((0.0, 0.0), "left pivot", fixed=True)
    a = sk.point(pin1, "left crank pin")
    p = sk.point(tip, "coupler joint")
    b = sk.point(pin2, "right crank pin")
    o2 = sk.point(right, "right pivot", fixed=True)
    sk.body((o1, a), "left crank")
    sk.body((a, p), "left coupler")
    sk.body((b, p), "right coupler")
    sk.body((o2, b), "right crank")
    sk.crank_angle(o1, a)
    sk.crank_angle(o2, b)


def _six_bar(sk: _Sketch) -> None:
    """Watt II six-bar: a crank-rocker whose ternary rocker drives a second rocker through a
    link; the second dyad assembles, 15 deg from its dead centres, over the whole crank
    revolution."""
    rng = sk.rng
    fb = _fourbar(sk, "crank-rocker", rocker_point=True)
    start = sk.points[fb.rocker_point][0]
    arm = start - fb.pivot
    link, rocker = rng.uniform(0.5, 1.3, size=2)
    pivot = start + rng.uniform(0.6, 1.4) * _unit(rng.uniform(-np.pi, np.pi))
    sign = int(rng.choice([-1, 1]))
    for theta in np.linspace(-np.pi, np.pi, 73):  # the third point turns with the rocker
        turn = fb.rocker_angle(theta) - fb.rocker_angle(fb.theta)
        third = fb.pivot + np.linalg.norm(arm) * _unit(np.arctan2(arm[1], arm[0]) + turn)
        _dyad(third, link, pivot, rocker, sign, 15.0)
    j = sk.point(_dyad(start, link, pivot, rocker, sign), "output joint")
    o3 = sk.point(pivot, "output rocker pivot", fixed=True)
    sk.body((fb.rocker_point, j), "second coupler")
    sk.body((o3, j), "output rocker")


def _chain(sk: _Sketch, links: int) -> None:
    """Open pendulum chain of ``links`` links (0.4-1) hanging from a fixed pivot, at random
    absolute angles."""
    rng = sk.rng
    points = [sk.point((0.0, 0.0), "pivot", fixed=True)]
    tip = np.zeros(2)
    for k in range(links):
        tip = tip + rng.uniform(0.4, 1.0) * _unit(rng.uniform(-np.pi, np.pi))
        points.append(sk.point(tip, f"end of link {k}"))
    for k in range(links):
        sk.body((points[k], points[k + 1]), f"link {k}")
    sk.crank_angle(points[0], points[1])


_BUILDERS = {
    "crank-rocker": lambda sk: _fourbar(sk, "crank-rocker"),
    "double-rocker": lambda sk: _fourbar(sk, "double-rocker"),
    "triple-rocker": lambda sk: _fourbar(sk, "triple-rocker"),
    "triangle-coupler": lambda sk: _fourbar(
        sk, str(sk.rng.choice(["crank-rocker", "double-rocker", "triple-rocker"])),
        coupler_point=True),
    "slider-crank-offset": _slider_crank_offset,
    "slider-crank-inclined": _slider_crank_inclined,
    "quick-return": _quick_return,
    "shaper": _shaper,
    "oscillating-cylinder": _oscillating_cylinder,
    "five-bar": _five_bar,
    "six-bar": _six_bar,
    **{f"chain-{k}": functools.partial(_chain, links=k) for k in range(1, 7)},
}


def _acceptable(sk: _Sketch, dof: int) -> bool:
    """Whether a sketch, loaded at unit scale, has ``dof`` DOF, is far from a branch point
    and is not in equilibrium."""
    from mbfg.loader import mechanism_from_yaml
    from mbfg.model.dynamics import forward_dynamics
    try:
        mech = mechanism_from_yaml(sk.yaml("candidate", 1.0, 1.0, 1.0), "candidate")
    except MbfgError:
        return False
    if mech.dof != dof:
        return False
    J = mech.constraint_jacobian(mech.q0)
    s = np.linalg.svd(J / np.linalg.norm(J, axis=1, keepdims=True), compute_uv=False)
    if not s[-1] > _SIGMA_RTOL * s[0]:
        return False
    qdd = forward_dynamics(mech, mech.q0, np.zeros(mech.n))
    return float(np.max(np.abs(qdd[mech.point_coords[mech.point_coords >= 0]]))) \
        > _MIN_ACCELERATION


@functools.lru_cache(maxsize=512)
def _draw(family: str, seed: int) -> _Sketch:
    """The first acceptable sketch of the seeded stream of (family, seed)."""
    rng = np.random.default_rng([seed, zlib.crc32(family.encode())])
    for _ in range(_MAX_DRAWS):
        sk = _Sketch(rng)
        try:
            _BUILDERS[family](sk)
        except _Redraw:
            continue
        if _acceptable(sk, FAMILY_DOF[family]):
            return sk
    raise RuntimeError(f"no acceptable {family} mechanism in {_MAX_DRAWS} draws of seed {seed}")


def pendulum_chain_yaml(links: int, length: float = 1.0, mass: float = 1.0) -> str:
    """YAML text of a ``links``-body pendulum chain of total ``length`` [m] and ``mass`` [kg]:
    it hangs from the fixed point 0 and starts horizontal, body k joins points k and k + 1
    (uniform rods, I0 = m L^2 / 3), so n = 2 links coordinates and m = links distance
    constraints.  The body-count scaling tests and benchmarks/body_scaling.py use it."""
    lines = ["%YAML 1.2", "---", f"# {links}-link pendulum chain", "parameters:",
             f"  L: {length / links!r}", f"  mass_link: {mass / links!r}", "points:",
             "  - { x: 0, y: 0, fixed: true }"]
    lines += [f"  - {{ x: {k}*L, y: 0 }}" for k in range(1, links + 1)]
    lines.append("planar_bodies:")
    for k in range(links):
        lines += [f"  - points: [{k}, {k + 1}]", "    length: L", "    mass: mass_link",
                  "    I0: (1/3)*mass*length^2", "    cog: [0.5*length, 0.0]"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class IdentificationCase:
    """Ground truth for identification on a generated mechanism
    (:func:`random_identification_case`).

    Attributes
    ----------
    truth, guess : Mechanism
        The mechanism with viscous friction at every revolute joint and a motor, and the
        same with masses, central inertias and friction coefficients off by a random factor
        (the initial guess of the identification).
    sensors : SensorSet
        Markers on every moving point (sigma 1e-3 ell) and a gyroscope on body 0 (sigma
        1e-2 omega_c).
    recording : tuple
        ``(readings, dt, n_steps, inputs)`` as :func:`mbfg.identify` takes it.
    names : tuple of str
        Every body's mass and I0 and every joint's viscous coefficient.
    true_values : (p,) array
        Their values in ``truth`` (in the units of :attr:`names`).
    """
    name: str
    truth: Mechanism
    guess: Mechanism
    sensors: object
    recording: tuple
    names: tuple
    true_values: np.ndarray


def random_identification_case(family: str, seed: int, *, length: float, mass: float,
                               periods: float = 10.0, steps: int = 4000,
                               guess_error: float = 0.25,
                               coulomb: bool = False) -> IdentificationCase:
    """A generated mechanism (:func:`random_mechanism`) made into an identification problem
    with a known answer, at any scale.

    Viscous friction at every revolute joint (a damping of a few percent of the gravity
    pendulum's: c = 0.05 m_total ell^2 omega_c times a random factor in [0.5, 2]); a motor on
    the best independent coordinate at q0, with gain K = the reduced inertia there times
    omega_c^2 (times ell on a point coordinate), driven by three harmonics at 0.31, 0.73 and
    1.57 omega_c of amplitudes 0.3, 0.2, 0.1 and random phases; released from rest at q0
    and simulated by DOP853 (rtol 1e-10, atol 1e-10 of the scales) for ``periods`` periods
    2 pi / omega_c in ``steps`` steps; markers on every moving point and a gyroscope on body
    0.  The guess moves each mass and central inertia by a factor exp(U(-e, e)) and each
    viscous coefficient by exp(U(-1.2 e, 1.2 e)), e = ``guess_error`` (the centres of mass
    stay).  ell is the mechanism's length, omega_c = sqrt(|g| / ell); everything is drawn
    from ``seed``, so the problem is the same in every unit system.  ``coulomb``: every joint
    also has Coulomb friction (at the default regularization width), mu = c omega_c times a
    random factor in [0.1, 0.5] (the viscous torque at 0.1-0.5 omega_c), identified too and
    guessed like the viscous coefficients (drawn from a stream of their own: the other
    values are those of ``coulomb=False``).
    """
    import dataclasses

    from mbfg.model import build_mechanism
    from mbfg.model.identification import parameter_set
    from mbfg.model.integrate import integrate_reference
    from mbfg.model.partition import best_coordinates, null_space_bases
    from mbfg.model.scales import mechanism_scales
    from mbfg.model.sensors import Gyroscope, Marker, SensorSet
    from mbfg.model.spec import JointFrictionSpec, MotorSpec
    gen = random_mechanism(family, seed, length=length, mass=mass)
    mech = gen.load()
    spec = mech.spec
    fixed = {i for i, p in enumerate(spec.points) if p.fixed}
    joints = []
    for a, body in enumerate(spec.bodies):
        joints += [(-1, a) for p in body.points if p in fixed]
        joints += [(a, b) for b in range(a + 1, len(spec.bodies))
                   if set(body.points) & set(spec.bodies[b].points)]
    sc = mechanism_scales(mech)
    ell = sc.length
    w = float(np.sqrt(np.hypot(*mech.gravity) / ell))
    m_total = sum(b.mass for b in spec.bodies)
    rng = np.random.default_rng([seed, zlib.crc32(family.encode()), 2])
    friction = tuple(JointFrictionSpec(bodies=j, viscous=float(
        0.05 * m_total * ell ** 2 * w * rng.uniform(0.5, 2.0))) for j in joints)
    if coulomb:
        crng = np.random.default_rng([seed, zlib.crc32(family.encode()), 5])
        friction = tuple(dataclasses.replace(f, coulomb=float(f.viscous * w
                                                              * crng.uniform(0.1, 0.5)))
                         for f in friction)
    c = int(best_coordinates(mech, mech.q0, sc.coordinates)[0][0])
    N = null_space_bases(mech, mech.q0[None], sc.coordinates)[0]
    n = (N @ N[c]) / float(N[c] @ N[c]) * sc.coordinates / sc.coordinates[c]
    gain = float(n @ mech.mass_matrix() @ n) * w * w * sc.coordinates[c]
    truth = build_mechanism(dataclasses.replace(spec, friction=friction, motors=(
        MotorSpec(coordinate=mech.coordinate_names[c], gain=gain),)))
    phases = rng.uniform(0.0, 2.0 * np.pi, 3)
    freqs, amps = w * np.array([0.31, 0.73, 1.57]), np.array([0.3, 0.2, 0.1])

    def inputs(t):
        return np.array([float(np.sum(amps * np.sin(freqs * t + phases)))])

    t_end = periods * 2.0 * np.pi / w
    dt = t_end / steps
    atol = 1e-10 * np.concatenate([sc.coordinates, w * sc.coordinates])
    tr = integrate_reference(truth, t_end, dt, inputs=inputs, rtol=1e-10, atol=atol)
    moving = sorted({p for b in spec.bodies for p in b.points if p not in fixed})
    sensors = SensorSet([Marker(point=p, sigma=1e-3 * ell) for p in moving]
                        + [Gyroscope(body=0, sigma=1e-2 * w)])
    readings = sensors.synthesize(truth, tr.t, tr.q, tr.qd, tr.qdd,
                                  rng=np.random.default_rng([seed, 3]))
    U = np.stack([inputs(t) for t in tr.t])
    bodies = []
    for b in spec.bodies:
        fm, fi = np.exp(rng.uniform(-guess_error, guess_error, 2))
        cc = float(np.dot(b.cog, b.cog))
        bodies.append(dataclasses.replace(b, mass=b.mass * fm,
                                          I0=(b.I0 - b.mass * cc) * fi + b.mass * fm * cc))
    guess_friction = tuple(dataclasses.replace(f, viscous=f.viscous * float(
        np.exp(rng.uniform(-1.2 * guess_error, 1.2 * guess_error)))) for f in friction)
    if coulomb:
        guess_friction = tuple(dataclasses.replace(f, coulomb=f.coulomb * float(
            np.exp(crng.uniform(-1.2 * guess_error, 1.2 * guess_error))))
            for f in guess_friction)
    guess = build_mechanism(dataclasses.replace(truth.spec, bodies=tuple(bodies),
                                                friction=guess_friction))
    names = tuple([f"planar_bodies[{i}].mass" for i in range(len(spec.bodies))]
                  + [f"planar_bodies[{i}].I0" for i in range(len(spec.bodies))]
                  + [f"friction[{k}].viscous" for k in range(len(friction))]
                  + ([f"friction[{k}].coulomb" for k in range(len(friction))]
                     if coulomb else []))
    true_values = np.asarray(parameter_set(truth, names, tuple(sensors)).nominal, float)
    return IdentificationCase(gen.name, truth, guess, sensors,
                              (tuple(readings), dt, tr.t.size, U), names, true_values)


__all__ = [
    "numerical_jacobian", "jacobian_error", "check_jacobian", "random_assembled_state",
    "GeneratedMechanism", "random_mechanism", "random_mechanisms", "pendulum_chain_yaml",
    "IdentificationCase", "random_identification_case", "WatchedMechanism",
    "watched_mechanism"
]
