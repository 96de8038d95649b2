"""Read mechanism YAML files (the C++ reference library's format plus mbfg's extensions) and
sensor descriptions (``sensors:`` YAML, ``docs/sensors.md``).

The loader turns text into a validated :class:`~mbfg.model.spec.MechanismSpec` of plain floats
and ints; :func:`mbfg.model.build_mechanism` then builds the numerical model.  Every problem is
reported as a :class:`~mbfg.errors.MechanismError` subclass that names the file, the YAML path
(``planar_bodies[2].mass``), the line and what was expected.  The full format is documented in
``docs/yaml-reference.md``.

Semantics (as the C++ library):

* ``parameters`` are evaluated in file order; each may use the earlier ones.
* ``points[i].x``/``.y`` may use the parameters and ``x<j>``/``y<j>`` of earlier points (j < i).
* In a body, ``length: auto`` is the distance between its two points; ``length`` is only read
  for 2-point bodies.  ``lengthIJ`` (1-based I < J) is the distance between the body's points
  I and J; ``mass`` and ``length`` are available to ``I0`` and ``cog``.  Unknown body keys (e.g.
  ``visual``) are ignored.
"""
from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import SchemaError, YamlSyntaxError
from mbfg.expressions import RESERVED_NAMES
from mbfg.model.sensors import (SENSOR_TYPES, Accelerometer, AngleEncoder, Distance, Gyroscope,
                               Marker, Sensor, SensorSet)
from mbfg.model.spec import (BodySpec, FixedSliderSpec, JointFrictionSpec, MechanismSpec,
                             MobileSliderSpec, MotorSpec, PointSpec, RelativeAngleSpec,
                             SliderFrictionSpec)
from mbfg.yaml_document import YamlDocument, YamlFields
from mbfg.yaml_document import closest as _closest
from mbfg.yaml_document import type_name as _type_name

if TYPE_CHECKING:
    from mbfg.model.mechanism import Mechanism

__all__ = ["FRICTION_TYPES", "load_spec", "parse_spec", "read_yaml_text", "build_checked", "mechanism_from_yaml",
           "load_sensors", "parse_sensors", "TOP_LEVEL_KEYS", "CONSTRAINT_TYPES", "RELATIVE_COORDINATE_TYPES",
           "LENGTH_MASS_RTOL"]

TOP_LEVEL_KEYS = ("parameters", "points", "planar_bodies", "relative_coordinates", "constraints",
                  "gravity", "friction", "motors")
FRICTION_TYPES = ("joint", "slider")
POINT_KEYS = ("x", "y", "fixed")
CONSTRAINT_TYPES = ("fixed_slider", "mobile_slider")
RELATIVE_COORDINATE_TYPES = ("RelativeAngleAbsoluteDOF",)
LENGTH_MASS_RTOL = 1e-12
"""A body length (mass) below LENGTH_MASS_RTOL times the largest body length (mass) is refused."""
_SQUARE_MIN = sys.float_info.min  # a length or mass whose square is subnormal is refused
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_POINT_VARIABLE = re.compile(r"[xy]\d+\Z")


class _Loader(YamlFields):
    """The mechanism format's reader: :class:`~mbfg.yaml_document.YamlFields` plus point
    indices and coordinate pairs, and :meth:`load`."""

    def undefined_hint(self, names: set, path: str) -> str:
        if any(_POINT_VARIABLE.match(n) for n in names):
            return ("; x<i>/y<i> are only defined for points listed before this one"
                    if path.startswith("points[") else
                    "; x<i>/y<i> name the initial coordinates of point i")
        return ""

    def index(self, value, path: str, n_points: int, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.r.error(SchemaError, f"expected {what} (an integer 0..{n_points - 1}), "
                               f"got {_type_name(value)}", path)
        if not 0 <= value < n_points:
            raise self.r.error(SchemaError, f"point index {value} out of range: the mechanism has "
                               f"{n_points} points (valid indices 0..{n_points - 1})", path)
        return value

    def indices(self, value, path: str, n_points: int, count: int | None, what: str) -> tuple[int, ...]:
        items = self.sequence(value, path, what)
        if count is not None and len(items) != count:
            raise self.r.error(SchemaError, f"expected {what}: exactly {count} point indices, got "
                               f"{len(items)}", path)
        idx = tuple(self.index(v, f"{path}[{i}]", n_points, "a point index") for i, v in enumerate(items))
        if len(set(idx)) != len(idx):
            rep = next(i for i in idx if idx.count(i) > 1)
            raise self.r.error(SchemaError, f"point {rep} is repeated in {list(idx)}; expected "
                               f"distinct points", path)
        return idx

    def pair(self, value, path: str, env: dict, what: str) -> tuple[float, float]:
        items = self.sequence(value, path, what)
        if len(items) != 2:
            raise self.r.error(SchemaError, f"expected {what}: a list of 2 numbers, got {len(items)} "
                               f"item{'s' * (len(items) != 1)}", path)
        return tuple(self.expression(v, f"{path}[{i}]", env, "a number") for i, v in enumerate(items))

    # -- sections ------------------------------------------------------------------------------
    def load(self) -> MechanismSpec:
        data = self.r.data
        if data is None:
            raise self.r.error(SchemaError, "the file is empty; expected a mapping with keys "
                               "'points' and 'planar_bodies'", "")
        doc = self.mapping(data, "", "a mechanism description")
        for key in doc:
            if key not in TOP_LEVEL_KEYS:
                raise self.r.error(SchemaError, f"unknown top-level key {key!r}{_closest(key, TOP_LEVEL_KEYS)}; "
                                   f"valid keys: {', '.join(TOP_LEVEL_KEYS)}", key)
        env = self.parameters(doc.get("parameters"))
        parameters = dict(env)
        gravity = (0.0, -9.81)
        if "gravity" in doc:
            gravity = self.pair(doc["gravity"], "gravity", env, "gravity [gx, gy] in m/s^2")
        points, env = self.points(self.require(doc, "points", "", "the list of points"), env)
        bodies = self.bodies(self.require(doc, "planar_bodies", "", "the list of planar bodies"),
                             points, env)
        angles = self.relative_coordinates(doc.get("relative_coordinates"), points)
        constraints = self.constraints(doc.get("constraints"), points, env)
        friction = self.friction(doc.get("friction"), points, bodies, constraints, gravity, env)
        motors = self.motors(doc.get("motors"), points, angles, env)
        return MechanismSpec(points=points, bodies=bodies, relative_angles=angles,
                             constraints=constraints, gravity=gravity, parameters=parameters,
                             source=self.r.source, friction=friction, motors=motors)

    def _keys(self, entry: dict, allowed, path: str, what: str) -> None:
        for key in entry:
            if key not in allowed:
                raise self.r.error(SchemaError, f"unknown key {key!r} for {what}"
                                   f"{_closest(key, allowed)}; valid keys: {', '.join(allowed)}",
                                   f"{path}.{key}")

    def _nonnegative(self, entry: dict, key: str, path: str, env: dict, what: str) -> float:
        if key not in entry:
            return 0.0
        x = self.expression(entry[key], f"{path}.{key}", env, what)
        if x < 0:
            raise self.r.error(SchemaError, f"expected {what} >= 0, got {x:g}", f"{path}.{key}")
        return x

    def friction(self, value, points, bodies, constraints, gravity, env: dict):
        if value is None:
            return ()
        items = self.sequence(value, "friction", "the list of friction elements")
        out = []
        for k, item in enumerate(items):
            path = f"friction[{k}]"
            f, kind = self.typed_entry(item, path, "a friction element {type, ...}",
                                       FRICTION_TYPES, "friction type")
            units = ("N m s/rad", "N m", "rad/s") if kind == "joint" else ("N s/m", "N", "m/s")
            viscous = self._nonnegative(f, "viscous", path, env,
                                        f"the viscous coefficient [{units[0]}]")
            coulomb = self._nonnegative(f, "coulomb", path, env, f"the Coulomb friction [{units[1]}]")
            width = None
            if "width" in f:
                width = self.expression(f["width"], f"{path}.width", env,
                                        f"the Coulomb regularization width [{units[2]}]")
                if not width > 0:
                    raise self.r.error(SchemaError, f"expected the Coulomb regularization width "
                                       f"[{units[2]}] > 0, got {width:g}", f"{path}.width")
            elif coulomb > 0 and gravity[0] == 0 and gravity[1] == 0:
                raise self.r.error(SchemaError, "without gravity there is no rate scale to derive "
                                   f"the Coulomb regularization width from; expected 'width' "
                                   f"[{units[2]}]", path)
            if kind == "joint":
                self._keys(f, ("type", "bodies", "viscous", "coulomb", "width"), path, "a joint")
                pair = self.sequence(self.require(f, "bodies", path, "[body, body] or [ground, body]"),
                                     f"{path}.bodies", "two bodies [a, b] (a body index or 'ground')")
                if len(pair) != 2:
                    raise self.r.error(SchemaError, f"expected two bodies [a, b], got {len(pair)} "
                                       "items", f"{path}.bodies")
                ids = []
                for i, b in enumerate(pair):
                    if b == "ground":
                        ids.append(-1)
                    elif isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < len(bodies):
                        raise self.r.error(SchemaError, f"expected a body index 0..{len(bodies) - 1} "
                                           f"or 'ground', got {_type_name(b)}", f"{path}.bodies[{i}]")
                    else:
                        ids.append(b)
                if ids[0] == ids[1]:
                    raise self.r.error(SchemaError, "the two bodies are the same; expected two "
                                       "different bodies (or 'ground' and a body)", f"{path}.bodies")
                shared = [set(bodies[b].points) if b >= 0 else {i for i, p in enumerate(points)
                                                                if p.fixed} for b in ids]
                if not shared[0] & shared[1]:
                    raise self.r.error(SchemaError, "the two bodies share no point, so they form no "
                                       "revolute joint; expected bodies joined at a common point",
                                       f"{path}.bodies")
                out.append(JointFrictionSpec(bodies=tuple(ids), viscous=viscous, coulomb=coulomb,
                                             width=width))
            else:
                self._keys(f, ("type", "constraint", "viscous", "coulomb", "width"), path, "a slider")
                c = self.require(f, "constraint", path, "the index of a slider in 'constraints'")
                if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < len(constraints):
                    raise self.r.error(SchemaError, f"expected the index of a slider in 'constraints' "
                                       f"(0..{len(constraints) - 1}), got {_type_name(c)}"
                                       if constraints else "the mechanism has no 'constraints' "
                                       "(sliders); expected a slider index", f"{path}.constraint")
                out.append(SliderFrictionSpec(constraint=c, viscous=viscous, coulomb=coulomb,
                                              width=width))
        return tuple(out)

    def motors(self, value, points, angles, env: dict):
        if value is None:
            return ()
        names = [f"{a}{i}" for i, p in enumerate(points) if not p.fixed for a in "xy"]
        names += [f"theta{k}" for k in range(len(angles))]
        items = self.sequence(value, "motors", "the list of motors")
        out = []
        for k, item in enumerate(items):
            path = f"motors[{k}]"
            m = self.mapping(item, path, "a motor {coordinate, gain}")
            self._keys(m, ("coordinate", "gain"), path, "a motor")
            c = self.require(m, "coordinate", path, "the name of the driven coordinate")
            if not isinstance(c, str) or c not in names:
                raise self.r.error(SchemaError, f"unknown coordinate {c!r}"
                                   f"{_closest(str(c), names)}; expected one of {', '.join(names)}",
                                   f"{path}.coordinate")
            gain = self.expression(self.require(m, "gain", path, "the motor gain"), f"{path}.gain",
                                   env, "the motor gain [N m or N per input unit]")
            out.append(MotorSpec(coordinate=c, gain=gain))
        return tuple(out)

    def parameters(self, value) -> dict:
        env: dict[str, float] = {}
        if value is None:
            return env
        params = self.mapping(value, "parameters", "parameters: name -> value")
        for name, expr in params.items():
            path = f"parameters.{name}"
            if not _IDENTIFIER.match(name):
                raise self.r.error(SchemaError, f"invalid parameter name {name!r}; expected a name "
                                   "of letters, digits and '_' not starting with a digit", path)
            if name in RESERVED_NAMES or _POINT_VARIABLE.match(name) or name.startswith("__"):
                raise self.r.error(SchemaError, f"parameter name {name!r} is reserved (constants, "
                                   "functions, point coordinates x<i>/y<i> and names starting with "
                                   "'__'); expected another name", path)
            env[name] = self.expression(expr, path, env, "the parameter value")
        return env

    def points(self, value, env: dict):
        items = self.sequence(value, "points", "the list of points")
        if len(items) < 2:
            raise self.r.error(SchemaError, f"expected at least 2 points, got {len(items)}", "points")
        env = dict(env)
        points = []
        for i, item in enumerate(items):
            path = f"points[{i}]"
            pt = self.mapping(item, path, "a point {x, y, fixed}")
            for key in pt:
                if key not in POINT_KEYS:
                    raise self.r.error(SchemaError, f"unknown point key {key!r}{_closest(key, POINT_KEYS)}; "
                                       f"valid keys: x, y, fixed", f"{path}.{key}")
            x = self.expression(self.require(pt, "x", path, "the x coordinate in m"), f"{path}.x", env,
                                "the x coordinate in m")
            y = self.expression(self.require(pt, "y", path, "the y coordinate in m"), f"{path}.y", env,
                                "the y coordinate in m")
            fixed = pt.get("fixed", False)
            if not isinstance(fixed, bool):
                raise self.r.error(SchemaError, f"expected true or false, got {_type_name(fixed)}",
                                   f"{path}.fixed")
            points.append(PointSpec(x, y, fixed))
            env[f"x{i}"], env[f"y{i}"] = x, y
        return tuple(points), env

    def bodies(self, value, points, env: dict):
        items = self.sequence(value, "planar_bodies", "the list of planar bodies")
        if not items:
            raise self.r.error(SchemaError, "expected at least one planar body", "planar_bodies")
        bodies = []
        for b, item in enumerate(items):
            path = f"planar_bodies[{b}]"
            body = self.mapping(item, path, "a planar body {points, length, mass, I0, cog}")
            idx = self.indices(self.require(body, "points", path, "a list of 2 or more point indices"),
                               f"{path}.points", len(points), None, "the body's point indices")
            if len(idx) < 2:
                raise self.r.error(SchemaError, f"a body needs at least 2 points, got {len(idx)}",
                                   f"{path}.points")
            benv = dict(env)
            for I in range(len(idx)):
                for J in range(I + 1, len(idx)):
                    pi, pj = points[idx[I]], points[idx[J]]
                    d = math.hypot(pi.x - pj.x, pi.y - pj.y)
                    if not math.isfinite(d):
                        raise self.r.error(SchemaError, f"points {idx[I]} and {idx[J]} are too far "
                                           "apart (their distance overflows); expected finite, "
                                           "physically sized coordinates", f"{path}.points")
                    benv[f"length{I + 1}{J + 1}"] = d
            auto = benv["length12"]
            if len(idx) == 2:
                lenv = dict(benv, auto=auto)
                length = self.expression(self.require(body, "length", path, "the bar length in m or 'auto'"),
                                         f"{path}.length", lenv, "the bar length in m")
                if not length > 0:
                    raise self.r.error(SchemaError, f"expected a positive length in m, got {length:g}",
                                       f"{path}.length")
            else:  # length is ignored for 3+ point bodies (C++ semantics)
                length = auto
                if length <= 0:
                    raise self.r.error(SchemaError, f"points {idx[0]} and {idx[1]} coincide: the body "
                                       "frame needs distinct first two points", f"{path}.points")
            benv["length"] = length
            mass = self.expression(self.require(body, "mass", path, "the mass in kg"), f"{path}.mass",
                                   benv, "the mass in kg")
            if not mass > 0:
                raise self.r.error(SchemaError, f"expected a positive mass in kg, got {mass:g}", f"{path}.mass")
            benv["mass"] = mass
            I0 = self.expression(self.require(body, "I0", path, "the moment of inertia about the "
                                              "body's first point in kg m^2"), f"{path}.I0", benv,
                                 "the moment of inertia in kg m^2")
            cog = self.pair(self.require(body, "cog", path, "the centre of mass [x, y] in the body frame"),
                            f"{path}.cog", benv, "the centre of mass [x, y] in m")
            # The body's mass matrix is [[m I, m C], [m C^T, I0 I]] with C^T C = |cog|^2 I (in
            # point-0 / direction coordinates), so it is PSD iff I0 >= m |cog|^2 (I_G >= 0).
            m_c2 = mass * (cog[0] * cog[0] + cog[1] * cog[1])  # no ** : it raises on overflow
            if not math.isfinite(m_c2):
                raise self.r.error(SchemaError, f"mass*|cog|^2 overflows for mass = {mass:g} kg and "
                                   f"cog = [{cog[0]:g}, {cog[1]:g}] m; expected physically sized "
                                   "values", f"{path}.cog")
            i_g = I0 - m_c2
            if i_g < -1e-12 * max(abs(I0), 1.0):
                raise self.r.error(
                    SchemaError, f"inertia I0 = {I0:g} kg m^2 about point {idx[0]} is smaller than "
                    f"mass*|cog|^2 = {m_c2:g}: the moment of inertia about the centre of mass would "
                    f"be negative and the body mass matrix not positive semi-definite; expected "
                    f"I0 >= mass*|cog|^2", f"{path}.I0")
            bodies.append(BodySpec(points=idx, mass=mass, I0=I0, cog=cog, length=length))
        self._check_scales(bodies)
        return tuple(bodies)

    def _check_scales(self, bodies) -> None:
        """Body lengths and masses must be representable with room to spare: their squares
        normal floats (the constraints use squared lengths, the energies m L^2), and none
        below LENGTH_MASS_RTOL of the largest of its kind (a bar 1e-320 m long in a 1 m
        mechanism is a typo, and it would make the equations singular)."""
        for kind, unit, values in (("length", "m", [b.length for b in bodies]),
                                   ("mass", "kg", [b.mass for b in bodies])):
            top = max(values)
            for b, (body, value) in enumerate(zip(bodies, values)):
                if kind == "length" and len(body.points) > 2:
                    where, what = f"planar_bodies[{b}].points", (
                        f"the distance {value:g} m between points {body.points[0]} and "
                        f"{body.points[1]} (the body length)")
                else:
                    where, what = f"planar_bodies[{b}].{kind}", f"{kind} {value:g} {unit}"
                square = value * value
                if not (_SQUARE_MIN <= square and math.isfinite(square)):
                    raise self.r.error(SchemaError, f"{what} is outside the range of "
                                       f"representable values: its square is "
                                       f"{'subnormal or zero' if square < _SQUARE_MIN else 'infinite'}"
                                       f" in double precision; expected a {kind} in "
                                       f"[{math.sqrt(_SQUARE_MIN):.3g}, "
                                       f"{math.sqrt(sys.float_info.max):.3g}] {unit} (choose other "
                                       f"units if needed)", where)
                if value < LENGTH_MASS_RTOL * top:
                    raise self.r.error(SchemaError, f"{what} is {value / top:.3g} times the "
                                       f"largest body {kind} ({top:g} {unit}), below "
                                       f"{LENGTH_MASS_RTOL:g}: such a body would make the model "
                                       f"numerically singular; expected a {kind} comparable to "
                                       f"the mechanism's other bodies", where)

    def relative_coordinates(self, value, points):
        if value is None:
            return ()
        items = self.sequence(value, "relative_coordinates", "the list of relative coordinates")
        out = []
        for k, item in enumerate(items):
            path = f"relative_coordinates[{k}]"
            rc, _ = self.typed_entry(item, path, "a relative coordinate {type, points}",
                                     RELATIVE_COORDINATE_TYPES, "relative coordinate type")
            idx = self.indices(self.require(rc, "points", path, "two point indices [p0, p1]"),
                               f"{path}.points", len(points), 2, "two point indices [p0, p1]")
            a, b = points[idx[0]], points[idx[1]]
            if a.x == b.x and a.y == b.y:
                raise self.r.error(SchemaError, f"points {idx[0]} and {idx[1]} coincide, so their "
                                   "angle is undefined; expected distinct positions", f"{path}.points")
            out.append(RelativeAngleSpec(points=idx))
        return tuple(out)

    def constraints(self, value, points, env: dict):
        if value is None:
            return ()
        items = self.sequence(value, "constraints", "the list of constraints")
        out = []
        for k, item in enumerate(items):
            path = f"constraints[{k}]"
            con, kind = self.typed_entry(item, path, "a constraint {type, ...}", CONSTRAINT_TYPES,
                                         "constraint type")
            p = self.index(self.require(con, "point", path, "the index of the sliding point"),
                           f"{path}.point", len(points), "the sliding point")
            if kind == "fixed_slider":
                allowed = ("type", "point", "line")
                line = self.sequence(self.require(con, "line", path, "[[xa, ya], [xb, yb]]"),
                                     f"{path}.line", "the line [[xa, ya], [xb, yb]]")
                if len(line) != 2:
                    raise self.r.error(SchemaError, f"expected two points [[xa, ya], [xb, yb]], got "
                                       f"{len(line)} items", f"{path}.line")
                a = self.pair(line[0], f"{path}.line[0]", env, "[xa, ya]")
                b = self.pair(line[1], f"{path}.line[1]", env, "[xb, yb]")
                if math.hypot(b[0] - a[0], b[1] - a[1]) <= 1e-12 * (1 + max(map(abs, a + b))):
                    raise self.r.error(SchemaError, "the two line points coincide; expected two "
                                       "distinct points defining the line", f"{path}.line")
                spec = FixedSliderSpec(point=p, line=(a, b))
            else:
                allowed = ("type", "point", "line_points")
                j, kk = self.indices(self.require(con, "line_points", path, "two point indices [j, k]"),
                                     f"{path}.line_points", len(points), 2, "two point indices [j, k]")
                if p in (j, kk):
                    raise self.r.error(SchemaError, f"the sliding point {p} is one of the line points "
                                       f"{[j, kk]}; expected three distinct points", f"{path}.point")
                if points[j].x == points[kk].x and points[j].y == points[kk].y:
                    raise self.r.error(SchemaError, f"line points {j} and {kk} coincide; expected "
                                       "distinct positions", f"{path}.line_points")
                spec = MobileSliderSpec(point=p, line_points=(j, kk))
            for key in con:
                if key not in allowed:
                    raise self.r.error(SchemaError, f"unknown key {key!r} for a {kind}"
                                       f"{_closest(key, allowed)}; valid keys: {', '.join(allowed)}",
                                       f"{path}.{key}")
            if points[p].fixed and (kind == "fixed_slider" or all(points[i].fixed for i in spec.line_points)):
                raise self.r.error(SchemaError, f"point {p} is fixed, so the slider constrains "
                                   "nothing; expected a moving point", f"{path}.point")
            out.append(spec)
        return tuple(out)


def parse_spec(text: str, source: str | None = None) -> MechanismSpec:
    """Parse mechanism YAML ``text`` into a validated spec (``source`` names it in errors)."""
    if not isinstance(text, str):
        raise SchemaError(f"expected YAML text, got {type(text).__name__}", file=source)
    return _Loader(YamlDocument(text, source, expected=f"a YAML mapping of "
                                                  f"{', '.join(TOP_LEVEL_KEYS)}")).load()


def read_yaml_text(path: str | os.PathLike, what: str = "mechanism") -> str:
    """The UTF-8 text of the ``what`` YAML file ``path``, or a typed error naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"file not found; expected a {what} YAML file", file=str(path)) from None
    except IsADirectoryError:
        raise SchemaError(f"is a directory; expected a {what} YAML file", file=str(path)) from None
    except UnicodeDecodeError as e:
        raise YamlSyntaxError(f"not UTF-8 text ({e.reason} at byte {e.start})", file=str(path)) from None
    except OSError as e:
        raise SchemaError(f"cannot read the file: {e.strerror}", file=str(path)) from None


def load_spec(path: str | os.PathLike) -> MechanismSpec:
    """Read and validate the mechanism YAML file ``path``."""
    return parse_spec(read_yaml_text(path, "mechanism"), source=str(Path(path)))


def build_checked(spec: MechanismSpec) -> Mechanism:
    """:func:`mbfg.model.build_mechanism` of ``spec``; numerical breakdowns on absurd input
    (a singular assembly, overflow) become an :class:`~mbfg.errors.AssemblyError` naming the
    file."""
    from mbfg.errors import AssemblyError
    from mbfg.model import build_mechanism
    try:
        with np.errstate(all="ignore"):
            return build_mechanism(spec)
    except (np.linalg.LinAlgError, FloatingPointError, OverflowError, ZeroDivisionError) as e:
        raise AssemblyError(f"the initial configuration cannot be assembled: {e}",
                            file=spec.source) from None


def mechanism_from_yaml(text: str, source: str | None = None) -> Mechanism:
    """The assembled :class:`~mbfg.model.Mechanism` of mechanism YAML ``text`` (``source``
    names it in error messages)."""
    return build_checked(parse_spec(text, source=source))


# ---------------------------------------------------------------------------- YAML format
_COMMON_KEYS = ("type", "name", "sigma", "period")
_TYPE_KEYS = {
    "encoder": ("coordinate", "body", "sigma_deg"),
    "gyroscope": ("body", "sigma_deg", "bias", "bias_deg"),
    "accelerometer": ("body", "point", "axis", "axis_deg"),
    "marker": ("point",),
    "distance": ("points",),
}


class _SensorLoader:
    def __init__(self, text, source, mech):
        self.r = YamlDocument(text, source, expected="a mapping with a 'sensors' list")
        self.base = _Loader(self.r)  # typed accessors: mapping, sequence, require, expression, pair
        self.mech = mech
        self.env = dict(mech.spec.parameters)

    def err(self, message, path):
        return self.r.error(SchemaError, message, path)

    def load(self) -> SensorSet:
        data = self.r.data
        if data is None:
            raise self.err("the file is empty; expected a mapping with a 'sensors' list", "")
        doc = self.base.mapping(data, "", "a sensor description {sensors: [...]}")
        for key in doc:
            if key != "sensors":
                raise self.err(f"unknown top-level key {key!r}{_closest(key, ['sensors'])}; the "
                               "only valid key is 'sensors'", key)
        items = self.base.sequence(self.base.require(doc, "sensors", "", "the list of sensors"),
                                   "sensors", "the list of sensors")
        return SensorSet(self.sensor(item, f"sensors[{i}]") for i, item in enumerate(items))

    # -- typed values -------------------------------------------------------------------
    def radians_or_degrees(self, s, key, path, what, unit, deg_unit):
        """The value of ``key`` (in ``unit``) or of ``key_deg`` (in ``deg_unit``, converted);
        None when neither is given, an error when both are."""
        if key in s and f"{key}_deg" in s:
            raise self.err(f"give either {key} or {key}_deg, not both", f"{path}.{key}_deg")
        if key in s:
            return self.number(s[key], f"{path}.{key}", f"{what} in {unit}")
        if f"{key}_deg" in s:
            return math.radians(self.number(s[f"{key}_deg"], f"{path}.{key}_deg",
                                            f"{what} in {deg_unit}"))
        return None

    def number(self, value, path, what):
        return self.base.expression(value, path, self.env, what)

    def integer(self, value, path, what):
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(f"expected {what} (an integer), got {_type_name(value)}", path)
        return value

    def body(self, value, path):
        nb = len(self.mech.spec.bodies)
        b = self.integer(value, path, f"a body index 0..{nb - 1}")
        if not 0 <= b < nb:
            raise self.err(f"body index {b} out of range: the mechanism has {nb} bodies (valid "
                           f"indices 0..{nb - 1})", path)
        p0, p1 = self.mech.spec.bodies[b].points[:2]
        if (self.mech.point_coords[[p0, p1], 0] < 0).all():
            raise self.err(f"body {b} is fixed (its points {p0} and {p1} are both fixed), so the "
                           "sensor measures nothing; expected a moving body", path)
        return b

    def point(self, value, path):
        npts = self.mech.n_points
        p = self.integer(value, path, f"a point index 0..{npts - 1}")
        if not 0 <= p < npts:
            raise self.err(f"point index {p} out of range: the mechanism has {npts} points (valid "
                           f"indices 0..{npts - 1})", path)
        return p

    def coordinate(self, value, path):
        mech = self.mech
        angles = [mech.coordinate_names[i] for i in mech.angle_coords]
        if not angles:
            raise self.err("the mechanism has no relative angle coordinates; expected an "
                           "encoder on a body (body: <index>) instead", path)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise self.err(f"expected a relative angle coordinate (one of {', '.join(angles)}, by "
                           f"name or index), got {_type_name(value)}", path)
        if isinstance(value, int):
            if not 0 <= value < mech.n:
                raise self.err(f"coordinate index {value} out of range 0..{mech.n - 1}; expected "
                               f"a relative angle: {_angle_list(mech)}", path)
            k = value
        else:
            if value not in mech.coordinate_names:
                raise self.err(f"unknown coordinate {value!r}{_closest(value, mech.coordinate_names)}; "
                               f"expected a relative angle: {_angle_list(mech)}", path)
            k = mech.coordinate_names.index(value)
        if k not in mech.angle_coords:
            raise self.err(f"coordinate {mech.coordinate_names[k]!r} is not a relative angle; an "
                           f"encoder reads angles: {_angle_list(mech)} (or use body: <index>)", path)
        return k

    def positive(self, value, path, what):
        x = self.number(value, path, what)
        if not x > 0:
            raise self.err(f"expected {what} > 0, got {x:g}", path)
        if not (np.finfo(float).tiny <= x * x < math.inf):  # the weights are 1 / sigma^2
            raise self.err(f"{what} {x:g} is outside the range of representable values (its "
                           f"square is {'subnormal' if x < 1 else 'infinite'} in double "
                           f"precision); expected a value in [{math.sqrt(np.finfo(float).tiny):.3g}, "
                           f"{math.sqrt(np.finfo(float).max):.3g}]", path)
        return x

    # -- one sensor -----------------------------------------------------------------------
    def sensor(self, item, path) -> Sensor:
        s, kind = self.base.typed_entry(item, path, "a sensor {type, sigma, ...}", SENSOR_TYPES,
                                        "sensor type")
        allowed = _COMMON_KEYS + _TYPE_KEYS[kind]
        for key in s:
            if key not in allowed:
                raise self.err(f"unknown key {key!r} for a {kind}{_closest(key, allowed)}; valid "
                               f"keys: {', '.join(allowed)}", f"{path}.{key}")
        kw = {}
        angular_sigma = kind in ("encoder", "gyroscope")
        unit = {"encoder": "rad", "gyroscope": "rad/s"}.get(kind, "m" if kind in ("marker", "distance")
                                                                   else "m/s^2")
        if "sigma" in s and "sigma_deg" in s:
            raise self.err("give either sigma or sigma_deg, not both", f"{path}.sigma_deg")
        if "sigma" in s:
            kw["sigma"] = self.positive(s["sigma"], f"{path}.sigma", f"the standard deviation in {unit}")
        elif angular_sigma and "sigma_deg" in s:
            kw["sigma"] = math.radians(self.positive(
                s["sigma_deg"], f"{path}.sigma_deg",
                "the standard deviation in " + ("deg" if kind == "encoder" else "deg/s")))
        else:
            raise self.err(f"missing required key 'sigma' (expected the standard deviation of a "
                           f"reading in {unit}{' or sigma_deg in degrees' if angular_sigma else ''})",
                           f"{path}.sigma")
        if "period" in s:
            period = s["period"]
            if isinstance(period, bool) or not isinstance(period, int) or period < 1:
                raise self.err(f"expected the sampling period as an integer number of steps >= 1, "
                               f"got {_type_name(period)}", f"{path}.period")
            kw["period"] = period
        if "name" in s:
            if not isinstance(s["name"], str) or not s["name"]:
                raise self.err(f"expected a name (text), got {_type_name(s['name'])}", f"{path}.name")
            kw["name"] = s["name"]

        if kind == "encoder":
            if ("coordinate" in s) == ("body" in s):
                raise self.err("an encoder needs exactly one of 'coordinate' (a relative angle, "
                               "by name or index) and 'body' (a body index)", path)
            if "coordinate" in s:
                k = self.coordinate(s["coordinate"], f"{path}.coordinate")
                kw["coordinate"] = self.mech.coordinate_names[k]   # by name: readable labels
            else:
                kw["body"] = self.body(s["body"], f"{path}.body")
            return AngleEncoder(**kw)
        if kind == "gyroscope":
            kw["body"] = self.body(self.base.require(s, "body", path, "a body index"), f"{path}.body")
            bias = self.radians_or_degrees(s, "bias", path, "the bias", "rad/s", "deg/s")
            if bias is not None:
                kw["bias"] = bias
            return Gyroscope(**kw)
        if kind == "accelerometer":
            kw["body"] = self.body(self.base.require(s, "body", path, "a body index"), f"{path}.body")
            if "point" in s:
                kw["point"] = self.base.pair(s["point"], f"{path}.point", self.env,
                                             "the point [X, Y] in the body frame in m")
            axis = self.radians_or_degrees(s, "axis", path, "the axis angle", "rad", "degrees")
            if axis is not None:
                kw["axis"] = axis
            return Accelerometer(**kw)
        if kind == "marker":
            p = self.point(self.base.require(s, "point", path, "a point index"), f"{path}.point")
            if self.mech.point_coords[p, 0] < 0:
                raise self.err(f"point {p} is fixed, so the marker measures nothing; expected a "
                               "moving point", f"{path}.point")
            return Marker(point=p, **kw)
        # distance
        pts = self.base.sequence(self.base.require(s, "points", path, "two point indices [i, j]"),
                                 f"{path}.points", "two point indices [i, j]")
        if len(pts) != 2:
            raise self.err(f"expected two point indices [i, j], got {len(pts)} "
                           f"item{'s' * (len(pts) != 1)}", f"{path}.points")
        i, j = (self.point(v, f"{path}.points[{k}]") for k, v in enumerate(pts))
        if i == j:
            raise self.err(f"point {i} is repeated; expected two distinct points", f"{path}.points")
        if (self.mech.point_coords[[i, j], 0] < 0).all():
            raise self.err(f"points {i} and {j} are both fixed, so the distance measures nothing; "
                           "expected at least one moving point", f"{path}.points")
        return Distance(points=(i, j), **kw)


def _angle_list(mech):
    return ", ".join(f"{mech.coordinate_names[i]} (index {i})" for i in mech.angle_coords) \
        or "none in this mechanism"


def parse_sensors(text: str, mech: Mechanism, source: str | None = None) -> SensorSet:
    """Parse ``sensors:`` YAML ``text`` for mechanism ``mech`` (``source`` names it in errors)."""
    if not isinstance(text, str):
        raise SchemaError(f"expected YAML text, got {type(text).__name__}", file=source)
    return _SensorLoader(text, source, mech).load()


def load_sensors(path_or_text: str | Path, mech: Mechanism) -> SensorSet:
    """Read a ``sensors:`` YAML description for mechanism ``mech``.

    ``path_or_text``: a path (``os.PathLike``, or a one-line string ending in ``.yaml``/``.yml``)
    or the YAML text itself.  Errors are :class:`~mbfg.errors.SchemaError` (or
    :class:`~mbfg.errors.YamlSyntaxError`) naming the file, the YAML path (``sensors[2].body``),
    the line and what was expected.  Format: ``docs/sensors.md``.
    """
    is_path = isinstance(path_or_text, os.PathLike) or (
        isinstance(path_or_text, str) and "\n" not in path_or_text
        and path_or_text.strip().lower().endswith((".yaml", ".yml")))
    if not is_path:
        return parse_sensors(path_or_text, mech)
    path = Path(path_or_text)
    return parse_sensors(read_yaml_text(path, "sensors"), mech, source=str(path))
