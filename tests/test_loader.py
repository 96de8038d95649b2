"""The mechanism YAML loader (mbfg.loader): reference files, semantics, error messages, CLI.

Bad inputs are small text edits of the four-bar below, written to ``tmp_path``, so the line
numbers in the expected messages are those of ``FOURBAR``.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mbfg
import mbfg.cli
from mbfg.errors import (AssemblyError, ExpressionError, ExpressionSyntaxError, MbfgError,
                         MechanismError, SchemaError, UndefinedVariableError, YamlSyntaxError)
from mbfg.loader import load_spec, parse_spec

from conftest import MECHANISMS, reference_file

# Line numbers (1-based) are written on the right; they are part of the expected messages.
FOURBAR = """\
parameters:
  L: 1.0
  xb: 4.0
points:
  - {x: 0, y: 0, fixed: true}
  - {x: L, y: 0}
  - {x: L, y: 2*L}
  - {x: xb, y: 0, fixed: true}
planar_bodies:
  - points: [0, 1]
    length: L
    mass: 1.0
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0.0]
  - points: [1, 2]
    length: 2*L
    mass: 2.0
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0.0]
  - points: [2, 3]
    length: auto
    mass: 4.0
    I0: (1/3)*mass*length^2
    cog: [0.5*length, 0.0]
"""
#  1 parameters:        5 points[0]    9 planar_bodies:   15 - points: [1, 2]   20 - points: [2, 3]
#  2   L                6 points[1]   10 - points: [0, 1]  16   length: 2*L     21   length: auto
#  3   xb               7 points[2]   11   length: L       17   mass: 2.0       22   mass: 4.0
#  4 points:            8 points[3]   12   mass: 1.0       18   I0              23   I0
#                                     13   I0              19   cog             24   cog
#                                     14   cog


def edit(old: str, new: str, text: str = FOURBAR) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def bad_file(tmp_path: Path, old: str, new: str, name: str = "bad.yaml", text: str = FOURBAR) -> Path:
    path = tmp_path / name
    path.write_text(edit(old, new, text) if old else text, encoding="utf-8")
    return path


def load_error(path: Path, exc_type: type) -> MechanismError:
    with pytest.raises(exc_type) as info:
        mbfg.load_mechanism(path)
    return info.value


def assert_located(err: MechanismError, path: Path, yaml_path: str | None, line: int | None):
    """The message starts with ``file:line: yaml.path:`` and the attributes agree."""
    msg = str(err)
    assert "\n" not in msg
    assert err.file == str(path)
    assert err.path == yaml_path
    assert err.line == line
    prefix = str(path) + (f":{line}" if line else "") + (f": {yaml_path}" if yaml_path else "") + ": "
    assert msg.startswith(prefix), msg


# =============================================================================================
# Reference files load unchanged
# =============================================================================================
REFERENCE = {
    # file: (coordinate names, n, m, dof)
    "fourbars1.yaml": (("x1", "y1", "x2", "y2"), 4, 3, 1),
    "fourbars1-with-rel-angle.yaml": (("x1", "y1", "x2", "y2", "theta0"), 5, 4, 1),
    "pendulum1.yaml": (("x1", "y1"), 2, 1, 1),
    "pendulum2.yaml": (tuple(f"{c}{i}" for i in range(1, 6) for c in "xy"), 10, 6, 4),
    "pendulum3.yaml": (tuple(f"{c}{i}" for i in range(1, 7) for c in "xy"), 12, 8, 4),
    "pick-and-place-robot.yaml": (tuple(f"{c}{i}" for i in range(2, 12) for c in "xy")
                                  + ("theta0", "theta1"), 22, 21, 2),
    "unmerged-pr7/FourBar.YAML": (("x1", "y1", "x2", "y2"), 4, 3, 1),
}
BUNDLED = {
    "fourbar.yaml": REFERENCE["fourbars1.yaml"],
    "fourbar-crank-angle.yaml": REFERENCE["fourbars1-with-rel-angle.yaml"],
    "pendulum1.yaml": REFERENCE["pendulum1.yaml"],
    "pendulum2.yaml": REFERENCE["pendulum2.yaml"],
    "pendulum3.yaml": REFERENCE["pendulum3.yaml"],
    "pick-and-place-robot.yaml": REFERENCE["pick-and-place-robot.yaml"],
    "slider-crank.yaml": (("x1", "y1", "x2", "y2", "theta0"), 5, 4, 1),
    "quick-return.yaml": (("x1", "y1", "x3", "y3", "theta0"), 5, 4, 1),
}


def _check_summary(mech, expected):
    names, n, m, dof = expected
    assert mech.coordinate_names == names
    assert (mech.n, mech.m, mech.dof) == (n, m, dof)
    assert np.all(np.isfinite(mech.q0))
    assert np.linalg.norm(mech.constraints(mech.q0)) < 1e-9


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_files_load_unchanged(name):
    path = reference_file("mechanisms", *name.split("/"))
    mech = mbfg.load_mechanism(path)
    _check_summary(mech, REFERENCE[name])
    assert mech.source == str(path)


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_mechanisms_load(name):
    _check_summary(mbfg.load_mechanism(MECHANISMS / name), BUNDLED[name])


@pytest.mark.parametrize("reference, bundled", [
    ("fourbars1.yaml", "fourbar.yaml"), ("fourbars1-with-rel-angle.yaml", "fourbar-crank-angle.yaml"),
    ("pendulum1.yaml", "pendulum1.yaml"), ("pendulum2.yaml", "pendulum2.yaml"),
    ("pendulum3.yaml", "pendulum3.yaml"), ("pick-and-place-robot.yaml", "pick-and-place-robot.yaml"),
    ("unmerged-pr7/FourBar.YAML", "fourbar.yaml"),
])
def test_bundled_copies_match_the_reference_files(reference, bundled):
    ref = load_spec(reference_file("mechanisms", *reference.split("/")))
    own = load_spec(MECHANISMS / bundled)
    assert (ref.points, ref.bodies, ref.relative_angles, ref.gravity) == \
        (own.points, own.bodies, own.relative_angles, own.gravity)


def test_fourbar_without_yaml_header():
    text = (MECHANISMS / "fourbar.yaml").read_text()
    assert text.startswith("%YAML 1.2")
    headless = text.split("---", 1)[1]
    assert parse_spec(headless) == parse_spec(text)


def test_pendulum2_ternary_link_visual_key_and_length12():
    spec = load_spec(MECHANISMS / "pendulum2.yaml")
    body = spec.bodies[1]
    assert body.points == (1, 2, 3)
    assert body.I0 == pytest.approx(0.5 * 3.0 * 5.0 ** 2)  # (1/2)*mass*length12^2, length12 = 5
    assert body.length == pytest.approx(5.0)
    assert body.cog == (0.0, 0.0)
    p = spec.points
    assert (p[2].x, p[2].y) == pytest.approx((7 + 5 * math.cos(math.pi / 4), 5 * math.sin(math.pi / 4)))
    assert (p[3].x, p[3].y) == pytest.approx((7 + 5 * math.cos(math.pi / 4), -5 * math.sin(math.pi / 4)))
    assert (p[4].x, p[4].y) == pytest.approx((p[2].x + 2, p[2].y))


def test_pick_and_place_robot_summary():
    mech = mbfg.load_mechanism(MECHANISMS / "pick-and-place-robot.yaml")
    assert (mech.n, mech.m, mech.dof) == (22, 21, 2)
    assert len(mech.spec.bodies) == 11 and len(mech.spec.points) == 14
    assert [ra.points for ra in mech.spec.relative_angles] == [(1, 3), (12, 10)]
    assert mech.coordinate_names[20:] == ("theta0", "theta1")
    assert np.linalg.matrix_rank(mech.constraint_jacobian(mech.q0)) == 20  # redundant


# =============================================================================================
# Semantics
# =============================================================================================
def test_parameters_are_evaluated_in_file_order():
    spec = parse_spec(edit("  L: 1.0\n  xb: 4.0\n",
                           "  a: 2\n  b: a*3\n  c: b + a\n  L: c/8\n  xb: 4*L\n"))
    assert list(spec.parameters) == ["a", "b", "c", "L", "xb"]
    assert spec.parameters == {"a": 2.0, "b": 6.0, "c": 8.0, "L": 1.0, "xb": 4.0}


def test_a_parameter_cannot_use_a_later_one(tmp_path):
    path = bad_file(tmp_path, "  L: 1.0\n  xb: 4.0\n", "  L: xb/4\n  xb: 4.0\n")
    err = load_error(path, UndefinedVariableError)
    assert_located(err, path, "parameters.L", 2)
    assert "undefined variable xb" in str(err) and "defined here: none" in str(err)


def test_points_use_parameters_and_earlier_points():
    spec = parse_spec(edit("  - {x: L, y: 2*L}", "  - {x: x1 + 0*y0, y: y1 + 2*L}"))
    assert (spec.points[2].x, spec.points[2].y) == (1.0, 2.0)


@pytest.mark.parametrize("new, name", [("  - {x: x2, y: 0}", "x2"),   # a later point
                                       ("  - {x: L, y: x1}", "x1")])  # the point itself
def test_points_cannot_use_their_own_or_later_coordinates(tmp_path, new, name):
    path = bad_file(tmp_path, "  - {x: L, y: 0}", new)
    err = load_error(path, UndefinedVariableError)
    assert_located(err, path, "points[1]." + ("x" if name == "x2" else "y"), 6)
    assert f"undefined variable {name}" in str(err)
    assert "only defined for points listed before this one" in str(err)


def test_fixed_defaults_to_false():
    spec = parse_spec(FOURBAR)
    assert [p.fixed for p in spec.points] == [True, False, False, True]


def test_length_auto_is_the_distance_between_the_two_points():
    spec = parse_spec(FOURBAR)
    assert spec.bodies[2].length == pytest.approx(math.hypot(4 - 1, 0 - 2))
    assert spec.bodies[2].I0 == pytest.approx(4.0 * 13 / 3)
    assert spec.bodies[2].cog == pytest.approx((0.5 * math.sqrt(13), 0.0))


def test_length_mass_and_lengthIJ_are_available_to_I0_and_cog():
    spec = parse_spec(edit("    I0: (1/3)*mass*length^2\n    cog: [0.5*length, 0.0]\n  - points: [2, 3]",
                           "    I0: mass*length + length12\n    cog: [length12/4, mass/8]\n"
                           "  - points: [2, 3]"))
    body = spec.bodies[1]
    assert body.length == 2.0 and body.mass == 2.0
    assert body.I0 == pytest.approx(2.0 * 2.0 + 2.0)  # length12 = |p1 - p2| = 2
    assert body.cog == pytest.approx((0.5, 0.25))


def test_length_key_may_differ_from_the_yaml_distance_and_is_assembled():
    spec = parse_spec(edit("    length: 2*L\n", "    length: 2.1\n"))
    assert spec.bodies[1].length == 2.1
    mech = mbfg.build_mechanism(spec)
    r = mech.point_positions(mech.q0)
    assert np.linalg.norm(r[2] - r[1]) == pytest.approx(2.1, rel=1e-10)


def test_three_and_four_point_bodies_and_their_rows():
    mech = mbfg.load_mechanism(MECHANISMS / "pendulum3.yaml")
    plate = mech.spec.bodies[0]
    assert plate.points == (0, 1, 2, 3)
    assert plate.cog == pytest.approx((1.0, 0.5))  # [0.5*length12, 0.5*length14]
    assert plate.I0 == pytest.approx(2.0 * 4.0 / 3)
    assert [lab for lab in mech.constraint_labels if lab.startswith("body0:")] == \
        ["body0:dist(0,1)", "body0:dist(0,2)", "body0:dist(1,2)", "body0:dist(0,3)", "body0:dist(1,3)"]
    ternary = mbfg.load_mechanism(MECHANISMS / "pendulum2.yaml")
    assert [lab for lab in ternary.constraint_labels if lab.startswith("body1:")] == \
        ["body1:dist(1,2)", "body1:dist(1,3)", "body1:dist(2,3)"]


def test_length_of_three_point_bodies_is_ignored():
    text = (MECHANISMS / "pendulum2.yaml").read_text()
    spec = parse_spec(edit("    #length: auto", "    length: 99", text))
    assert spec.bodies[1].length == pytest.approx(5.0)
    spec = parse_spec(edit("    #length: auto", "    length: this is ignored", text))
    assert spec.bodies[1].length == pytest.approx(5.0)


def test_unknown_body_keys_are_ignored():
    spec = parse_spec(edit("    cog: [0.5*length, 0.0]\n  - points: [2, 3]",
                           "    cog: [0.5*length, 0.0]\n    visual: {type: box, color: red}\n"
                           "  - points: [2, 3]"))
    assert len(spec.bodies) == 3


def test_gravity_default_and_custom():
    assert parse_spec(FOURBAR).gravity == (0.0, -9.81)
    assert mbfg.mechanism_from_yaml(FOURBAR).gravity.tolist() == [0.0, -9.81]
    text = edit("  xb: 4.0\n", "  xb: 4.0\n  g: 1.62\n") + "gravity: [0.5, -g]\n"
    assert parse_spec(text).gravity == (0.5, -1.62)
    assert parse_spec(FOURBAR + "gravity: [0, 0]\n").gravity == (0.0, 0.0)


def test_relative_coordinate_is_the_angle_of_the_two_points():
    mech = mbfg.load_mechanism(MECHANISMS / "fourbar-crank-angle.yaml")
    assert mech.q0[4] == pytest.approx(0.0)
    text = (MECHANISMS / "fourbar-crank-angle.yaml").read_text()
    mech = mbfg.mechanism_from_yaml(edit("    points: [0, 1]\n", "    points: [1, 0]\n",
                                         edit("\n# Relative coordinates:", "\n", text)))
    assert mech.q0[4] == pytest.approx(math.pi)


def test_fixed_slider_is_the_signed_distance_to_the_line():
    text = FOURBAR + "constraints:\n  - {type: fixed_slider, point: 2, line: [[0, 1], [2, 3]]}\n"
    text = edit("  - {x: L, y: 2*L}", "  - {x: L, y: 2}", text)  # point 2 = (1, 2) is on y = x + 1
    mech = mbfg.mechanism_from_yaml(text)
    row = mech.constraint_labels.index("constraint0:fixed_slider(2)")
    q = mech.q0.copy()
    for p in [(1.0, 2.0), (3.0, -1.0), (-2.0, 5.0)]:
        q[2:4] = p
        a, u = np.array([0.0, 1.0]), np.array([2.0, 2.0]) / math.hypot(2, 2)
        normal = np.array([-u[1], u[0]])
        assert mech.constraints(q)[row] == pytest.approx(normal @ (np.array(p) - a), abs=1e-14)


def test_mobile_slider_is_the_normalized_cross_product():
    mech = mbfg.load_mechanism(MECHANISMS / "quick-return.yaml")
    assert mech.spec.constraints[0] == mbfg.model.MobileSliderSpec(point=1, line_points=(2, 3))
    row = mech.constraint_labels.index("constraint0:mobile_slider(1;2,3)")
    pts0 = mech.spec.points
    initial = math.hypot(pts0[3].x - pts0[2].x, pts0[3].y - pts0[2].y)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = mech.q0 + rng.normal(scale=0.1, size=mech.n)
        r = mech.point_positions(q)
        d, e = r[3] - r[2], r[1] - r[2]
        expected = (d[0] * e[1] - d[1] * e[0]) / initial
        assert mech.constraints(q)[row] == pytest.approx(expected, abs=1e-14)


def test_slider_crank_fixed_slider():
    mech = mbfg.load_mechanism(MECHANISMS / "slider-crank.yaml")
    row = mech.constraint_labels.index("constraint0:fixed_slider(2)")
    q = mech.q0.copy()
    q[3] = 0.3  # y2
    assert mech.constraints(q)[row] == pytest.approx(0.3)
    assert mech.q0[1] == pytest.approx(0.1 * math.sin(math.radians(60)))


def test_source_names_the_file(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(FOURBAR)
    assert load_spec(path).source == str(path)
    assert parse_spec(FOURBAR, source="x.yaml").source == "x.yaml"


# =============================================================================================
# Bad inputs: type, file, YAML path, line, what was expected
# =============================================================================================
# (id, old text, new text, exception, YAML path, line, message fragments)
BAD = [
    ("missing-mass", "    mass: 2.0\n", "", SchemaError, "planar_bodies[1].mass", 15,
     ["missing required key 'mass'", "expected the mass in kg"]),
    ("missing-cog", "    cog: [0.5*length, 0.0]\n  - points: [2, 3]", "  - points: [2, 3]",
     SchemaError, "planar_bodies[1].cog", 15, ["missing required key 'cog'", "centre of mass"]),
    ("missing-length", "    length: 2*L\n", "", SchemaError, "planar_bodies[1].length", 15,
     ["missing required key 'length'", "'auto'"]),
    ("missing-x", "  - {x: L, y: 0}", "  - {y: 0}", SchemaError, "points[1].x", 6,
     ["missing required key 'x'", "expected the x coordinate"]),
    ("missing-points", "points:\n", "pointz:\n", SchemaError, "pointz", 4,
     ["unknown top-level key 'pointz'", "did you mean 'points'?"]),
    ("missing-planar-bodies", FOURBAR[FOURBAR.index("planar_bodies:"):], "", SchemaError,
     "planar_bodies", 1, ["missing required key 'planar_bodies'", "expected the list of planar bodies"]),
    ("unknown-top-level", "parameters:", "parameter:", SchemaError, "parameter", 1,
     ["unknown top-level key 'parameter'", "did you mean 'parameters'?",
      "valid keys: parameters, points, planar_bodies, relative_coordinates, constraints, gravity"]),
    ("unknown-top-level-far", "parameters:", "materials:", SchemaError, "materials", 1,
     ["unknown top-level key 'materials'", "valid keys: parameters"]),
    ("unknown-point-key", "  - {x: L, y: 0}", "  - {x: L, y: 0, fixd: true}", SchemaError,
     "points[1].fixd", 6, ["unknown point key 'fixd'", "did you mean 'fixed'?"]),
    ("index-out-of-range", "  - points: [1, 2]", "  - points: [1, 7]", SchemaError,
     "planar_bodies[1].points[1]", 15, ["point index 7 out of range", "4 points", "0..3"]),
    ("negative-index", "  - points: [1, 2]", "  - points: [-1, 2]", SchemaError,
     "planar_bodies[1].points[0]", 15, ["point index -1 out of range", "0..3"]),
    ("index-not-integer", "  - points: [1, 2]", "  - points: [1, 1.5]", SchemaError,
     "planar_bodies[1].points[1]", 15, ["expected a point index", "integer", "1.5"]),
    ("one-point-body", "  - points: [1, 2]", "  - points: [1]", SchemaError,
     "planar_bodies[1].points", 15, ["a body needs at least 2 points, got 1"]),
    ("no-point-body", "  - points: [1, 2]", "  - points: []", SchemaError,
     "planar_bodies[1].points", 15, ["a body needs at least 2 points, got 0"]),
    ("repeated-point", "  - points: [1, 2]", "  - points: [1, 1]", SchemaError,
     "planar_bodies[1].points", 15, ["point 1 is repeated", "expected distinct points"]),
    ("zero-length", "    length: 2*L\n", "    length: 0\n", SchemaError, "planar_bodies[1].length",
     16, ["expected a positive length in m, got 0"]),
    ("negative-length", "    length: 2*L\n", "    length: -2*L\n", SchemaError,
     "planar_bodies[1].length", 16, ["expected a positive length in m, got -2"]),
    ("zero-auto-length", "  - {x: L, y: 2*L}", "  - {x: xb, y: 0}", SchemaError,
     "planar_bodies[2].length", 21, ["expected a positive length in m, got 0"]),
    ("zero-mass", "    mass: 2.0\n", "    mass: 0\n", SchemaError, "planar_bodies[1].mass", 17,
     ["expected a positive mass in kg, got 0"]),
    ("negative-mass", "    mass: 2.0\n", "    mass: -2\n", SchemaError, "planar_bodies[1].mass", 17,
     ["expected a positive mass in kg, got -2"]),
    ("inertia-not-psd", "    mass: 2.0\n    I0: (1/3)*mass*length^2", "    mass: 2.0\n    I0: 0.1",
     SchemaError, "planar_bodies[1].I0", 18,
     ["I0 = 0.1", "mass*|cog|^2 = 2", "not positive semi-definite", "expected I0 >= mass*|cog|^2"]),
    ("negative-inertia", "    mass: 2.0\n    I0: (1/3)*mass*length^2\n    cog: [0.5*length, 0.0]",
     "    mass: 2.0\n    I0: -1\n    cog: [0, 0]", SchemaError, "planar_bodies[1].I0", 18,
     ["I0 = -1", "not positive semi-definite"]),
    ("undefined-variable", "    length: 2*L\n", "    length: 2*LL\n", UndefinedVariableError,
     "planar_bodies[1].length", 16,
     ["undefined variable LL", "did you mean 'L'?", "'2*LL'", "defined here: L, auto, length12"]),
    ("undefined-in-I0", "    mass: 2.0\n    I0: (1/3)*mass*length^2", "    mass: 2.0\n    I0: masss",
     UndefinedVariableError, "planar_bodies[1].I0", 18, ["undefined variable masss",
                                                         "did you mean 'mass'?"]),
    ("syntax-error", "    length: 2*L\n", "    length: 2*(L\n", ExpressionSyntaxError,
     "planar_bodies[1].length", 16, ["expected ')'", "column 5", "'2*(L'"]),
    ("unknown-function", "    length: 2*L\n", "    length: cosh(L)\n", ExpressionSyntaxError,
     "planar_bodies[1].length", 16, ["unknown function 'cosh'", "expected one of abs"]),
    ("division-by-zero", "  L: 1.0", "  L: 1/(2-2)", ExpressionError, "parameters.L", 2,
     ["division by zero", "'1/(2-2)'"]),
    ("length-not-a-number", "    length: 2*L\n", "    length: [2]\n", SchemaError,
     "planar_bodies[1].length", 16, ["expected the bar length in m (a number or an expression)",
                                     "got a list"]),
    ("fixed-not-bool", "  - {x: 0, y: 0, fixed: true}", "  - {x: 0, y: 0, fixed: 1}", SchemaError,
     "points[0].fixed", 5, ["expected true or false", "1"]),
    ("cog-wrong-size", "  - points: [2, 3]\n    length: auto\n    mass: 4.0\n"
     "    I0: (1/3)*mass*length^2\n    cog: [0.5*length, 0.0]",
     "  - points: [2, 3]\n    length: auto\n    mass: 4.0\n    I0: (1/3)*mass*length^2\n    cog: [0.5]",
     SchemaError, "planar_bodies[2].cog", 24, ["a list of 2 numbers, got 1"]),
    ("points-not-a-list", "  - {x: 0, y: 0, fixed: true}\n  - {x: L, y: 0}\n  - {x: L, y: 2*L}\n"
     "  - {x: xb, y: 0, fixed: true}\n", "  7\n", SchemaError, "points", 4,
     ["expected the list of points (a list), got int 7"]),
    ("reserved-parameter", "  xb: 4.0", "  x1: 4.0", SchemaError, "parameters.x1", 3,
     ["parameter name 'x1' is reserved"]),
    ("reserved-parameter-function", "  xb: 4.0", "  sin: 4.0", SchemaError, "parameters.sin", 3,
     ["parameter name 'sin' is reserved"]),
    ("points-too-far-apart", "  - {x: L, y: 2*L}", "  - {x: -1.5e308, y: 1.5e308}", SchemaError,
     "planar_bodies[1].points", 15, ["points 1 and 2 are too far apart", "expected finite"]),
    ("cog-overflow", "    cog: [0.5*length, 0.0]\n  - points: [2, 3]",
     "    cog: [1e200, 0.0]\n  - points: [2, 3]", SchemaError, "planar_bodies[1].cog", 19,
     ["mass*|cog|^2 overflows"]),
    ("huge-integer", "    mass: 2.0\n", "    mass: " + "9" * 400 + "\n", SchemaError,
     "planar_bodies[1].mass", 17, ["expected the mass in kg as a finite number"]),
    ("not-finite", "    mass: 2.0\n", "    mass: .inf\n", SchemaError, "planar_bodies[1].mass", 17,
     ["expected the mass in kg as a finite number, got inf"]),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(tmp_path, case):
    _, old, new, exc_type, yaml_path, line, fragments = case
    path = bad_file(tmp_path, old, new)
    err = load_error(path, exc_type)
    assert_located(err, path, yaml_path, line)
    for fragment in fragments:
        assert fragment in str(err)
    assert isinstance(err, MbfgError)


# Sections appended to the four-bar (which ends at line 24).
CONSTRAINT_BAD = [
    ("unknown-constraint-type", "  - {type: fixed_slidr, point: 1, line: [[0, 0], [1, 0]]}",
     "constraints[0].type", ["unknown constraint type 'fixed_slidr'", "did you mean 'fixed_slider'?",
                             "expected one of fixed_slider, mobile_slider"]),
    ("unknown-constraint-type-far", "  - {type: gear, point: 1}", "constraints[0].type",
     ["unknown constraint type 'gear'", "expected one of fixed_slider, mobile_slider"]),
    ("constraint-missing-type", "  - {point: 1}", "constraints[0].type",
     ["missing required key 'type'", "fixed_slider, mobile_slider"]),
    ("constraint-index", "  - {type: fixed_slider, point: 9, line: [[0, 0], [1, 0]]}",
     "constraints[0].point", ["point index 9 out of range", "0..3"]),
    ("mobile-line-index", "  - {type: mobile_slider, point: 2, line_points: [1, 4]}",
     "constraints[0].line_points[1]", ["point index 4 out of range"]),
    ("mobile-same-point", "  - {type: mobile_slider, point: 2, line_points: [2, 3]}",
     "constraints[0].point", ["the sliding point 2 is one of the line points",
                              "expected three distinct points"]),
    ("fixed-slider-degenerate-line", "  - {type: fixed_slider, point: 1, line: [[1, 1], [1, 1]]}",
     "constraints[0].line", ["the two line points coincide", "expected two distinct points"]),
    ("fixed-slider-extra-key", "  - {type: fixed_slider, point: 1, line: [[0, 0], [1, 0]], lin: 1}",
     "constraints[0].lin", ["unknown key 'lin' for a fixed_slider", "valid keys: type, point, line"]),
    ("slider-on-fixed-point", "  - {type: fixed_slider, point: 0, line: [[0, 0], [1, 0]]}",
     "constraints[0].point", ["point 0 is fixed", "expected a moving point"]),
]


@pytest.mark.parametrize("case", CONSTRAINT_BAD, ids=[c[0] for c in CONSTRAINT_BAD])
def test_bad_constraints(tmp_path, case):
    _, item, yaml_path, fragments = case
    _assert_bad_section(tmp_path, "constraints", item, yaml_path, fragments)


def _assert_bad_section(tmp_path, section, item, yaml_path, fragments):
    """The four-bar plus a bad ``section`` list item: a SchemaError at line 26 naming
    ``yaml_path`` and containing every fragment."""
    path = tmp_path / f"{section}.yaml"
    path.write_text(FOURBAR + f"{section}:\n" + item + "\n")
    err = load_error(path, SchemaError)
    assert_located(err, path, yaml_path, 26)
    for fragment in fragments:
        assert fragment in str(err)


@pytest.mark.parametrize("item, yaml_path, fragments", [
    ("  - {type: RelativeAngle, points: [0, 1]}", "relative_coordinates[0].type",
     ["unknown relative coordinate type 'RelativeAngle'", "did you mean 'RelativeAngleAbsoluteDOF'?"]),
    ("  - {type: RelativeAngleAbsoluteDOF, points: [0, 1, 2]}", "relative_coordinates[0].points",
     ["exactly 2 point indices, got 3"]),
    ("  - {type: RelativeAngleAbsoluteDOF, points: [0, 5]}", "relative_coordinates[0].points[1]",
     ["point index 5 out of range"]),
])
def test_bad_relative_coordinates(tmp_path, item, yaml_path, fragments):
    _assert_bad_section(tmp_path, "relative_coordinates", item, yaml_path, fragments)


def test_gravity_needs_two_components(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(FOURBAR + "gravity: [0, -9.81, 0]\n")
    err = load_error(path, SchemaError)
    assert_located(err, path, "gravity", 25)
    assert "a list of 2 numbers, got 3 items" in str(err)


@pytest.mark.parametrize("old, new, line, fragments", [
    ("  xb: 4.0", "  xb: [4.0", 4, ["malformed YAML", "flow sequence", "column"]),
    ("  xb: 4.0", "\txb: 4.0", 3, ["malformed YAML", "'\\t'", "column 1"]),
    ("  - {x: L, y: 0}", "  - {x: L, y: 0", 7, ["malformed YAML", "column"]),
    ("    mass: 2.0\n", "    mass: 2.0\n   junk\n", 18, ["malformed YAML"]),
    ("  L: 1.0", "  L: 1.0\n  L: [a: b: c]", 3, ["malformed YAML"]),
])
def test_malformed_yaml(tmp_path, old, new, line, fragments):
    path = bad_file(tmp_path, old, new)
    err = load_error(path, YamlSyntaxError)
    assert_located(err, path, None, line)
    for fragment in fragments:
        assert fragment in str(err)
    assert "expected a YAML mapping" in str(err)


def test_second_document_is_malformed(tmp_path):
    path = bad_file(tmp_path, "", "", text=FOURBAR + "---\ngravity: [0, 0]\n")
    err = load_error(path, YamlSyntaxError)
    assert "expected a single document" in str(err) and err.line == 25


@pytest.mark.parametrize("text, fragment", [
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("- 1\n- 2\n", "expected a mechanism description (a mapping), got a list"),
    ("just text\n", "expected a mechanism description (a mapping), got str"),
    ("? [1, 2]\n: 3\n", "malformed YAML"),
    ("points: !!python/object/apply:os.system ['echo hi']\n", "malformed YAML"),
])
def test_not_a_mechanism(tmp_path, text, fragment):
    path = tmp_path / "weird.yaml"
    path.write_text(text)
    with pytest.raises(MechanismError) as info:
        mbfg.load_mechanism(path)
    assert fragment in str(info.value)
    assert str(info.value).startswith(str(path))


def test_unreadable_files(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SchemaError, match="file not found"):
        mbfg.load_mechanism(missing)
    with pytest.raises(SchemaError, match="is a directory"):
        mbfg.load_mechanism(tmp_path)
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(FOURBAR.replace("parameters:", "# caf\xe9\nparameters:").encode("latin-1"))
    with pytest.raises(YamlSyntaxError, match="not UTF-8"):
        mbfg.load_mechanism(latin1)


def test_alias_bomb_is_cheap(tmp_path):
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    err = load_error(path, SchemaError)
    assert "unknown top-level key 'a0'" in str(err)


# ------------------------------------------------------------------ code execution attempts
CODE = ["__import__('os').system('x')", "x1.__class__", "lambda: 1", "(lambda x: x)(1)",
        "open('f')", "[1,2]", "a=1", "1 if 1 else 2", "x1**2", "exec('import os')",
        "().__class__.__bases__[0]", "__builtins__"]


@pytest.mark.parametrize("code", CODE)
@pytest.mark.parametrize("where", ["mass", "parameter", "point"])
def test_code_in_yaml_is_a_syntax_error(tmp_path, monkeypatch, code, where):
    ran = []
    monkeypatch.setattr("os.system", lambda *a: ran.append(a) or 0)
    quoted = json.dumps(code)  # a JSON string is a valid double-quoted YAML scalar
    old, new, yaml_path, line = {
        "mass": ("    mass: 2.0\n", f"    mass: {quoted}\n", "planar_bodies[1].mass", 17),
        "parameter": ("  xb: 4.0", f"  xb: {quoted}", "parameters.xb", 3),
        "point": ("  - {x: L, y: 2*L}", f"  - {{x: L, y: {quoted}}}", "points[2].y", 7),
    }[where]
    path = bad_file(tmp_path, old, new)
    err = load_error(path, ExpressionSyntaxError)
    assert_located(err, path, yaml_path, line)
    assert "expected" in str(err) or "not allowed" in str(err)
    assert ran == []


# ------------------------------------------------------------------------------ assembly
def test_unassemblable_configuration(tmp_path):
    # The coupler (body 1) is 10 m long but the fixed pivots are only 4 m apart and the
    # other bars 1 m and sqrt(13) m: no configuration satisfies all distances.
    path = bad_file(tmp_path, "    length: 2*L\n", "    length: 10\n")
    err = load_error(path, AssemblyError)
    msg = str(err)
    assert msg.startswith(str(path) + ": ")
    assert "cannot be assembled" in msg
    assert "did not converge" in msg
    residual = float(msg.split("residual |Phi| = ")[1].split()[0])
    assert residual > 0.1
    assert "check the point coordinates and body lengths" in msg


def test_assembly_fixes_small_inconsistencies():
    # The YAML coordinates need not satisfy the constraints exactly: they are a starting guess.
    mech = mbfg.mechanism_from_yaml(edit("    length: 2*L\n", "    length: 2.2\n"))
    assert np.linalg.norm(mech.constraints(mech.q0)) < 1e-10


# =============================================================================================
# CLI
# =============================================================================================
def test_cli_check_ok(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(FOURBAR)
    assert mbfg.cli.main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "x1 y1 x2 y2" in out and err == ""


@pytest.mark.parametrize("old, new, fragment", [
    ("    mass: 2.0\n", "    mass: -2\n", "planar_bodies[1].mass: expected a positive mass"),
    ("  xb: 4.0", "  xb: [4.0", "malformed YAML"),
    ("    length: 2*L\n", "    length: 10\n", "cannot be assembled"),
    ("    mass: 2.0\n", "    mass: \"__import__('os').system('x')\"\n", "strings are not allowed"),
])
def test_cli_check_bad_file_one_line_exit_2(tmp_path, capsys, old, new, fragment):
    path = bad_file(tmp_path, old, new)
    assert mbfg.cli.main(["check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"mbfg check: error: {path}")
    assert fragment in err
    assert "Traceback" not in err


def test_cli_check_missing_file(tmp_path, capsys):
    assert mbfg.cli.main(["check", str(tmp_path / "missing.yaml")]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "file not found" in err


def test_cli_unexpected_exception_is_one_line_too(tmp_path, capsys, monkeypatch):
    def boom(path):
        raise RuntimeError("something\nbroke")
    monkeypatch.setattr(mbfg, "load_mechanism", boom)
    monkeypatch.delenv("MBFG_DEBUG", raising=False)
    assert mbfg.cli.main(["check", "whatever.yaml"]) == 1
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "internal error: RuntimeError: something broke" in err


def test_python_m_mbfg_check_bad_file(tmp_path):
    path = bad_file(tmp_path, "    mass: 2.0\n", "    mas: 2.0\n")
    proc = subprocess.run([sys.executable, "-m", "mbfg", "check", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert f"{path}:15: planar_bodies[1].mass: missing required key 'mass'" in proc.stderr
    assert proc.stdout == ""
