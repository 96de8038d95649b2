"""Sensors (state-estimation issue, items 1-2): measurement functions and their exact
Jacobians, observation factors, physics checks against hand-derived values, the ``sensors:``
YAML format and synthetic readings.

Jacobians go through the shared finite-difference helpers (:func:`mbfg.testing.check_jacobian`,
:func:`mbfg.factors.checking.check_factor_jacobians`) at the seeded random assembled states of
``conftest.fd_states``, also moved slightly off the constraint manifold, with random qdd.
"""
import math
import re

import gtsam
import numpy as np
import pytest

from conftest import fd_states, load
from mbfg import factors as F
from mbfg.errors import SchemaError, UndefinedVariableError, YamlSyntaxError
from mbfg.factors import keys as K
from mbfg.factors.checking import check_factor_jacobians
from mbfg.factors.sensors import observation_residual
from mbfg.loader import load_sensors, parse_sensors
from mbfg.model.sensors import (Accelerometer, AngleEncoder, Distance, Gyroscope, Marker, Readings,
                                SensorSet, wrap_angle)
from mbfg.testing import check_jacobian

MECHS = ["fourbar-crank-angle", "slider-crank", "pendulum3", "pick-and-place-robot"]
KINDS = ["encoder", "gyroscope", "accelerometer", "marker", "distance"]
G = 9.81


def sensors_of(mech, kind, rng):
    """Every sensor of ``kind`` the mechanism admits (random body-frame points and axes)."""
    moving_bodies = [b for b, body in enumerate(mech.spec.bodies)
                     if (mech.point_coords[list(body.points[:2]), 0] >= 0).any()]
    free_points = [p for p in range(mech.n_points) if mech.point_coords[p, 0] >= 0]
    if kind == "encoder":
        return ([AngleEncoder(coordinate=mech.coordinate_names[k], sigma=0.01)
                 for k in mech.angle_coords]
                + [AngleEncoder(body=b, sigma=0.01) for b in moving_bodies])
    if kind == "gyroscope":
        return [Gyroscope(body=b, sigma=1e-3) for b in moving_bodies]
    if kind == "accelerometer":
        return [Accelerometer(body=b, point=tuple(rng.uniform(-1, 1, 2)),
                              axis=rng.uniform(-np.pi, np.pi), sigma=0.05) for b in moving_bodies]
    if kind == "marker":
        return [Marker(point=p, sigma=1e-3) for p in free_points]
    pairs = [(free_points[0], p) for p in range(mech.n_points) if p != free_points[0]]
    return [Distance(points=pr, sigma=1e-3) for pr in pairs[:6]]


def perturbed_states(name):
    """fd_states with random qdd, each also moved 1e-3 off the constraint manifold."""
    mech, states = fd_states(name)
    rng = np.random.default_rng(7)
    out = []
    for q, qd, _ in states:
        qdd = rng.normal(size=mech.n)
        out.append((q, qd, qdd))
        out.append((q + 1e-3 * rng.normal(size=mech.n), qd, qdd))
    return mech, out


# ------------------------------------------------------------------ (a) sensor Jacobians
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", MECHS)
def test_sensor_jacobians_match_finite_differences(name, kind):
    mech, states = perturbed_states(name)
    sensors = sensors_of(mech, kind, np.random.default_rng(1))
    assert sensors
    for s in sensors:
        for x in states:
            J = s.jacobians(mech, *x)
            assert set(J) == set(s.slots)
            for slot in s.slots:
                i = "qva".index(slot)

                def h(xi, i=i):
                    args = list(x)
                    args[i] = xi
                    return s.measure(mech, *args)
                assert J[slot].shape == (s.dim, mech.n)
                check_jacobian(h, x[i], J[slot], name=f"{name} {s.label} d h / d {slot}")


@pytest.mark.parametrize("name", MECHS)
def test_measure_is_vectorized(name):
    mech, states = perturbed_states(name)
    sensors = SensorSet(s for kind in KINDS
                        for s in sensors_of(mech, kind, np.random.default_rng(2)))
    Q, V, A = (np.array([x[i] for x in states]) for i in range(3))
    stacked = sensors.measure(mech, Q, V, A)
    assert stacked.shape == (len(states), sensors.dim)
    for t, x in enumerate(states):
        np.testing.assert_allclose(stacked[t], sensors.measure(mech, *x), rtol=1e-14, atol=1e-14)
    for s in sensors:
        J = s.jacobians(mech, Q, V, A)
        for slot in s.slots:
            assert J[slot].shape == (len(states), s.dim, mech.n)
            np.testing.assert_allclose(J[slot][3], s.jacobians(mech, *states[3])[slot],
                                       rtol=1e-14, atol=1e-14)


# ------------------------------------------------------------- (b) observation factors
def factor_values(mech, x):
    v = gtsam.Values()
    for key, xi in zip((K.q(0), K.v(0), K.a(0)), x):
        v.insert(key, np.asarray(xi, float))
    return v


STEP_KEYS = {"q": K.q(0), "v": K.v(0), "a": K.a(0)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", MECHS)
def test_observation_factor_jacobians(name, kind):
    mech, states = perturbed_states(name)
    rng = np.random.default_rng(3)
    for s in sensors_of(mech, kind, rng):
        for x in states[:4]:
            z = s.measure(mech, *x) + 0.1 * s.sigma * rng.normal(size=s.dim)
            f = F.observation_factor(mech, s, z, STEP_KEYS)
            assert [K.key_name(k) for k in f.keys()] == [f"{c}0" for c in s.slots]
            check_factor_jacobians(f, factor_values(mech, x))


def test_observation_factor_error_is_h_minus_reading():
    mech, states = perturbed_states("pick-and-place-robot")
    x = states[0]
    values = factor_values(mech, x)
    for s in [Marker(point=5, sigma=1e-3), Accelerometer(body=2, point=(0.1, 0.2), sigma=0.05),
              Gyroscope(body=3, sigma=1e-3), Distance(points=(2, 9), sigma=2e-3)]:
        z = np.arange(1.0, s.dim + 1)
        f = F.observation_factor(mech, s, z, {"q": K.q(0), "qd": K.v(0), "qdd": K.a(0)})
        e = f.unwhitenedError(values)
        np.testing.assert_allclose(e, s.measure(mech, *x) - z, rtol=1e-12)
        assert f.error(values) == pytest.approx(0.5 * np.sum((e / s.sigma) ** 2))
    g = F.observation_factor(mech, Marker(point=5, sigma=1e-3), [0.0, 0.0], {"q": K.q(0)},
                             sigma=[1.0, 2.0])
    e = g.unwhitenedError(values)
    assert g.error(values) == pytest.approx(0.5 * ((e[0] / 1) ** 2 + (e[1] / 2) ** 2))


def test_observation_factor_argument_errors():
    mech = load("fourbar-crank-angle")
    with pytest.raises(ValueError, match="no key for v"):
        F.observation_factor(mech, Gyroscope(body=1, sigma=1e-3), 0.0, {"q": K.q(0)})
    with pytest.raises(ValueError, match="unknown slot"):
        F.observation_factor(mech, Marker(point=1, sigma=1e-3), [0, 0], {"pos": K.q(0)})
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        F.observation_factor(mech, Marker(point=1, sigma=1e-3), 0.0, {"q": K.q(0)})
    with pytest.raises(IndexError, match="body 7 out of range"):
        F.observation_factor(mech, Gyroscope(body=7, sigma=1e-3), 0.0,
                             {"q": K.q(0), "v": K.v(0)})
    with pytest.raises(KeyError, match="unknown coordinate"):
        F.observation_factor(mech, AngleEncoder(coordinate="phi", sigma=1e-3), 0.0,
                             {"q": K.q(0)})


def test_sensor_constructor_validation():
    with pytest.raises(ValueError, match="sigma"):
        Marker(point=1, sigma=0.0)
    with pytest.raises(ValueError, match="sigma"):
        Marker(point=1, sigma=-1.0)
    with pytest.raises(ValueError, match="period"):
        Marker(point=1, sigma=1.0, period=0)
    with pytest.raises(ValueError, match="exactly one"):
        AngleEncoder(sigma=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        AngleEncoder(sigma=1.0, body=0, coordinate=4)
    with pytest.raises(ValueError, match="distinct"):
        Distance(points=(2, 2), sigma=1.0)
    with pytest.raises(TypeError):
        Marker(1, 1.0)  # keyword-only
    s = Gyroscope(body=1, sigma=1e-3)
    with pytest.raises(Exception):
        s.body = 2      # immutable


# ------------------------------------------------------------------- (c) physics checks
def test_gyroscope_on_crank_is_rate_of_crank_angle():
    """Four-bar with crank angle theta0 = angle of points 0 -> 1 = body 0: the gyroscope
    reads d(theta0)/dt, which the assembled velocity carries as qd[theta0]."""
    mech, states = fd_states("fourbar-crank-angle")
    k = mech.coordinate_names.index("theta0")
    for q, qd, qdd in states:
        assert Gyroscope(body=0, sigma=1e-3).measure(mech, q, qd)[0] == pytest.approx(qd[k], rel=1e-9)


def test_gyroscope_equals_time_derivative_of_angle_along_motion():
    """A gyroscope on the coupler equals the time derivative of the coupler's angle along a
    path q(t) = q + t qd + t^2/2 qdd (central difference of atan2 of its points)."""
    mech, states = fd_states("fourbar-crank-angle")
    for q, qd, qdd in states:
        h = 1e-6
        ang = []
        for t in (-h, h):
            r = mech.point_positions(q + t * qd + t * t / 2 * qdd)
            ang.append(math.atan2(r[2, 1] - r[1, 1], r[2, 0] - r[1, 0]))
        rate = wrap_angle(ang[1] - ang[0]) / (2 * h)
        assert Gyroscope(body=1, sigma=1e-3).measure(mech, q, qd)[0] == pytest.approx(rate, rel=1e-6)


def test_encoder_on_crank_body_equals_relative_angle():
    mech, states = fd_states("fourbar-crank-angle")
    k = mech.coordinate_names.index("theta0")
    for q, qd, qdd in states:
        h = AngleEncoder(body=0, sigma=1e-3).measure(mech, q)[0]
        assert abs(wrap_angle(h - q[k])) < 1e-9
        assert AngleEncoder(coordinate="theta0", sigma=1e-3).measure(mech, q)[0] == q[k]
        assert AngleEncoder(coordinate=k, sigma=1e-3).measure(mech, q)[0] == q[k]


def pendulum_state(phi, w=0.0, alpha=0.0, L=2.0):
    """pendulum1 (point 0 fixed at the origin, point 1 at distance L): exact q, qd, qdd for
    bar angle phi, angular rate w and angular acceleration alpha."""
    u = np.array([math.cos(phi), math.sin(phi)])
    up = np.array([-math.sin(phi), math.cos(phi)])
    return L * u, L * w * up, L * (alpha * up - w * w * u)


@pytest.mark.parametrize("phi", [math.radians(45), 0.0, -2.0, 3.0])
def test_accelerometer_at_rest_reads_minus_gravity(phi):
    mech = load("pendulum1")
    q, _, _ = pendulum_state(phi)
    zero = np.zeros(2)
    for X, Y in [(1.0, 0.0), (0.5, 0.3), (2.0, -1.0)]:
        up = Accelerometer(body=0, point=(X, Y), axis=math.pi / 2 - phi, sigma=0.05)
        right = Accelerometer(body=0, point=(X, Y), axis=-phi, sigma=0.05)
        down = Accelerometer(body=0, point=(X, Y), axis=-math.pi / 2 - phi, sigma=0.05)
        assert up.measure(mech, q, zero, zero)[0] == pytest.approx(G, rel=1e-12)
        assert right.measure(mech, q, zero, zero)[0] == pytest.approx(0.0, abs=1e-12)
        assert down.measure(mech, q, zero, zero)[0] == pytest.approx(-G, rel=1e-12)


@pytest.mark.parametrize("phi,w,alpha", [(math.radians(45), 1.5, 0.0), (-1.0, -3.0, 0.0),
                                         (2.5, 0.7, 4.0), (0.3, 2.0, -1.5)])
def test_accelerometer_on_swinging_pendulum(phi, w, alpha):
    """Along the bar (outward) at distance X from the pivot: centripetal -X w^2 minus the
    gravity component g.u = -9.81 sin(phi); across the bar (axis 90 deg): tangential X alpha
    minus g.u_perp = -9.81 cos(phi)."""
    mech = load("pendulum1")
    q, qd, qdd = pendulum_state(phi, w, alpha)
    for X in (0.5, 1.0, 2.0):
        along = Accelerometer(body=0, point=(X, 0.0), axis=0.0, sigma=0.05)
        across = Accelerometer(body=0, point=(X, 0.0), axis=math.pi / 2, sigma=0.05)
        assert along.measure(mech, q, qd, qdd)[0] == pytest.approx(
            -X * w * w + G * math.sin(phi), rel=1e-12, abs=1e-12)
        assert across.measure(mech, q, qd, qdd)[0] == pytest.approx(
            X * alpha + G * math.cos(phi), rel=1e-12, abs=1e-12)


def test_accelerometer_offset_point_on_rotating_bar():
    """A point at body-frame (X, Y) of a bar rotating at constant rate w about its fixed
    point 0 moves on a circle of radius sqrt(X^2 + Y^2): acceleration -w^2 r_P.  Gravity off
    by projecting on an axis perpendicular to g is not possible for every phi, so compare
    the full specific force (two orthogonal axes) with -w^2 r_P - g."""
    mech = load("pendulum1")
    phi, w, X, Y = 0.4, 2.0, 0.7, -0.3
    q, qd, qdd = pendulum_state(phi, w)
    c, s = math.cos(phi), math.sin(phi)
    rP = np.array([c * X - s * Y, s * X + c * Y])
    f = -w * w * rP - np.array([0.0, -G])
    u, up = np.array([c, s]), np.array([-s, c])
    for axis, n in [(0.0, u), (math.pi / 2, up), (math.pi / 3, 0.5 * u + math.sqrt(3) / 2 * up)]:
        acc = Accelerometer(body=0, point=(X, Y), axis=axis, sigma=0.05)
        assert acc.measure(mech, q, qd, qdd)[0] == pytest.approx(n @ f, rel=1e-12)


@pytest.mark.parametrize("name", MECHS)
def test_marker_equals_point_coordinates(name):
    mech, states = fd_states(name)
    q = states[1][0]
    for p, pt in enumerate(mech.spec.points):
        h = Marker(point=p, sigma=1e-3).measure(mech, q)
        if pt.fixed:
            assert tuple(h) == (pt.x, pt.y)
        else:
            names = mech.coordinate_names
            assert tuple(h) == (q[names.index(f"x{p}")], q[names.index(f"y{p}")])


@pytest.mark.parametrize("name", MECHS)
def test_distance_equals_rigid_length(name):
    mech, states = fd_states(name)
    pts = mech.spec.points
    for q, _, _ in states:
        for body in mech.spec.bodies:
            i, j = body.points[:2]
            assert Distance(points=(i, j), sigma=1e-3).measure(mech, q)[0] == \
                pytest.approx(body.length, rel=1e-9)
            for k in body.points[2:]:  # other points keep their initial distances
                d0 = math.hypot(pts[i].x - pts[k].x, pts[i].y - pts[k].y)
                assert Distance(points=(k, i), sigma=1e-3).measure(mech, q)[0] == \
                    pytest.approx(d0, rel=1e-9)


# --------------------------------------------------------------------------- (d) wrap
@pytest.mark.parametrize("h,z", [(math.pi - 0.01, -math.pi + 0.01), (-math.pi + 0.01, math.pi - 0.01),
                                 (3 * math.pi - 0.01, -math.pi + 0.01), (0.2, 0.2 + 4 * math.pi)])
def test_encoder_residual_wraps(h, z):
    mech = load("fourbar-crank-angle")
    k = mech.coordinate_names.index("theta0")
    q = mech.q0.copy()
    q[k] = h
    values = gtsam.Values()
    values.insert(K.q(0), q)
    f = F.observation_factor(mech, AngleEncoder(coordinate=k, sigma=0.01), z, {"q": K.q(0)})
    e = f.unwhitenedError(values)[0]
    expected = math.remainder(h - z, 2 * math.pi)
    assert abs(e) < 0.05 and e == pytest.approx(expected, abs=1e-12)
    check_factor_jacobians(f, values)


def test_body_encoder_residual_wraps_near_pi():
    """Coupler pointing in -X (angle ~ +-pi): readings on either side of the cut."""
    mech = load("pendulum1")
    for eps in (1e-3, -1e-3):
        q, _, _ = pendulum_state(math.pi - eps)
        values = gtsam.Values()
        values.insert(K.q(0), q)
        enc = AngleEncoder(body=0, sigma=0.01)
        for z in (math.pi - 2e-3, -math.pi + 2e-3):
            f = F.observation_factor(mech, enc, z, {"q": K.q(0)})
            e = f.unwhitenedError(values)[0]
            assert e == pytest.approx(math.remainder(math.pi - eps - z, 2 * math.pi), abs=1e-12)
            assert abs(e) < 1e-2
    res = observation_residual(mech, AngleEncoder(body=0, sigma=0.01), [-math.pi + 1e-3])
    e, _ = res({"q": np.array([pendulum_state(math.pi - 1e-3)[0]])})
    assert e[0, 0] == pytest.approx(-2e-3, abs=1e-12)


# --------------------------------------------------------------------------- (e) YAML
ROBOT_YAML = """\
sensors:
  - {type: encoder, coordinate: theta0, sigma_deg: 1}
  - {type: encoder, body: 1, sigma: 0.01}
  - {type: gyroscope, body: 1, sigma: 9.839e-4, period: 2}
  - {type: accelerometer, body: 0, point: [0.5, 0], axis_deg: 90, sigma: 0.05}
  - {type: marker, point: 6, sigma: 1e-3}
  - {type: distance, points: [2, 7], sigma: 1e-3, name: span}
  - type: encoder
    coordinate: 21
    sigma: 2*pi/4096
    period: 5
  - {type: accelerometer, body: 2, sigma: 0.1}
"""


def test_yaml_happy_path(tmp_path):
    mech = load("pick-and-place-robot")
    ss = load_sensors(ROBOT_YAML, mech)
    assert isinstance(ss, SensorSet) and len(ss) == 8
    assert ss[0] == AngleEncoder(coordinate="theta0", sigma=math.radians(1))
    assert ss[1] == AngleEncoder(body=1, sigma=0.01)
    assert ss[2] == Gyroscope(body=1, sigma=9.839e-4, period=2)
    assert ss[3] == Accelerometer(body=0, point=(0.5, 0.0), axis=math.pi / 2, sigma=0.05)
    assert ss[4] == Marker(point=6, sigma=1e-3)
    assert ss[5] == Distance(points=(2, 7), sigma=1e-3, name="span")
    assert ss[6] == AngleEncoder(coordinate="theta1", sigma=2 * math.pi / 4096, period=5)
    assert ss.names[0] == "encoder(theta0)" and ss.names[6] == "encoder(theta1)"
    assert ss[7] == Accelerometer(body=2, point=(0.0, 0.0), axis=0.0, sigma=0.1)
    assert ss.dim == 9 and len(ss.labels) == 9 and ss.names[5] == "span"
    np.testing.assert_allclose(ss.sigmas[4:6], [1e-3, 1e-3])
    path = tmp_path / "robot-sensors.yaml"
    path.write_text(ROBOT_YAML)
    assert load_sensors(path, mech) == ss
    assert load_sensors(str(path), mech) == ss
    assert len(parse_sensors("sensors: []", mech)) == 0


def test_yaml_example_of_the_documentation_loads():
    from conftest import REPO
    doc = (REPO / "docs" / "sensors.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", doc, re.S).group(1)
    ss = load_sensors(block, load("pick-and-place-robot"))
    assert [s.kind for s in ss] == ["encoder", "encoder", "gyroscope", "accelerometer",
                                    "marker", "distance", "encoder"]


def test_yaml_parameters_of_the_mechanism_are_available():
    mech = load("fourbar-crank-angle")   # parameters L, xb
    ss = load_sensors("sensors:\n  - {type: accelerometer, body: 1, point: [L/2, 0], sigma: 0.1}", mech)
    assert ss[0].point == (0.5, 0.0)


def _err(text, mech_name="pick-and-place-robot", cls=SchemaError):
    with pytest.raises(cls) as info:
        load_sensors(text, load(mech_name))
    return info.value


@pytest.mark.parametrize("entry,path,line,match", [
    ("{type: gyro, body: 1, sigma: 1}", "sensors[1].type", 3,
     r"unknown sensor type 'gyro' \(did you mean 'gyroscope'\?\); expected one of encoder, "
     r"gyroscope, accelerometer, marker, distance"),
    ("{body: 1, sigma: 1}", "sensors[1].type", 3, "missing required key 'type'"),
    ("{type: gyroscope, body: 11, sigma: 1}", "sensors[1].body", 3,
     r"body index 11 out of range: the mechanism has 11 bodies \(valid indices 0..10\)"),
    ("{type: gyroscope, body: -1, sigma: 1}", "sensors[1].body", 3, "body index -1 out of range"),
    ("{type: gyroscope, body: one, sigma: 1}", "sensors[1].body", 3,
     r"expected a body index 0..10 \(an integer\), got str 'one'"),
    ("{type: gyroscope, sigma: 1}", "sensors[1].body", 3, "missing required key 'body'"),
    ("{type: marker, point: 14, sigma: 1}", "sensors[1].point", 3,
     r"point index 14 out of range: the mechanism has 14 points \(valid indices 0..13\)"),
    ("{type: marker, point: 0, sigma: 1}", "sensors[1].point", 3,
     "point 0 is fixed, so the marker measures nothing"),
    ("{type: distance, points: [2, 20], sigma: 1}", "sensors[1].points[1]", 3,
     "point index 20 out of range"),
    ("{type: distance, points: [2, 2], sigma: 1}", "sensors[1].points", 3, "point 2 is repeated"),
    ("{type: distance, points: [2], sigma: 1}", "sensors[1].points", 3,
     r"expected two point indices \[i, j\], got 1 item"),
    ("{type: distance, points: [0, 1], sigma: 1}", "sensors[1].points", 3, "both fixed"),
    ("{type: encoder, coordinate: theta7, sigma: 1}", "sensors[1].coordinate", 3,
     r"unknown coordinate 'theta7' \(did you mean 'theta\d'\?\); expected a relative angle: "
     r"theta0 \(index 20\), theta1 \(index 21\)"),
    ("{type: encoder, coordinate: x2, sigma: 1}", "sensors[1].coordinate", 3,
     "coordinate 'x2' is not a relative angle"),
    ("{type: encoder, coordinate: 22, sigma: 1}", "sensors[1].coordinate", 3,
     r"coordinate index 22 out of range 0..21"),
    ("{type: encoder, sigma: 1}", "sensors[1]", 3, "exactly one of 'coordinate'"),
    ("{type: encoder, body: 1, coordinate: 20, sigma: 1}", "sensors[1]", 3, "exactly one"),
    ("{type: encoder, body: 1, sigma: 0}", "sensors[1].sigma", 3,
     r"expected the standard deviation in rad > 0, got 0"),
    ("{type: marker, point: 5, sigma: -1e-3}", "sensors[1].sigma", 3,
     r"expected the standard deviation in m > 0, got -0.001"),
    ("{type: gyroscope, body: 1, sigma_deg: 0}", "sensors[1].sigma_deg", 3,
     r"deg/s > 0, got 0"),
    ("{type: gyroscope, body: 1}", "sensors[1].sigma", 3,
     r"missing required key 'sigma' \(expected the standard deviation of a reading in rad/s "
     r"or sigma_deg in degrees\)"),
    ("{type: marker, point: 5, sigma: 1, sigma_deg: 1}", "sensors[1].sigma_deg", 3, "unknown key"),
    ("{type: encoder, body: 1, sigma: 1, sigma_deg: 1}", "sensors[1].sigma_deg", 3, "either sigma"),
    ("{type: marker, point: 5, sigma: 1, period: 0}", "sensors[1].period", 3,
     r"expected the sampling period as an integer number of steps >= 1, got int 0"),
    ("{type: marker, point: 5, sigma: 1, period: 1.5}", "sensors[1].period", 3,
     "got float 1.5"),
    ("{type: marker, point: 5, sigma: 1, perod: 2}", "sensors[1].perod", 3,
     r"unknown key 'perod' for a marker \(did you mean 'period'\?\); valid keys: type, name, "
     r"sigma, period, point"),
    ("{type: accelerometer, body: 1, sigma: 1, point: [1]}", "sensors[1].point", 3,
     "a list of 2 numbers, got 1 item"),
    ("{type: accelerometer, body: 1, sigma: 1, axis: 1, axis_deg: 2}", "sensors[1].axis_deg", 3,
     "either axis or axis_deg"),
    ("7", "sensors[1]", 3, r"expected a sensor \{type, sigma, ...\} \(a mapping\), got int 7"),
])
def test_yaml_errors(entry, path, line, match):
    text = f"sensors:\n  - {{type: marker, point: 5, sigma: 1e-3}}\n  - {entry}\n"
    e = _err(text)
    assert e.path == path and e.line == line
    assert e.file is None and type(e) is SchemaError
    assert re.search(match, e.reason), e.reason


def test_yaml_document_errors(tmp_path):
    e = _err("sensor:\n  - {type: marker, point: 5, sigma: 1}\n")
    assert e.path == "sensor" and e.line == 1 and "did you mean 'sensors'" in e.reason
    e = _err("")
    assert "empty" in e.reason
    e = _err("sensors: 3\n")
    assert e.path == "sensors" and "list" in e.reason
    e = _err("- {type: marker}\n")
    assert "mapping" in e.reason
    e = _err("sensors:\n  - {type: marker, point: 5\n", cls=YamlSyntaxError)
    assert "malformed YAML" in e.reason and "sensors" in e.reason and e.line is not None
    e = _err("sensors:\n  - {type: marker, point: 5, sigma: abc}\n", cls=UndefinedVariableError)
    assert (e.path, e.line) == ("sensors[0].sigma", 2) and "undefined variable abc" in e.reason
    e = _err("sensors:\n  - {type: encoder, coordinate: theta0, sigma: 1}\n", "pendulum3")
    assert "no relative angle coordinates" in e.reason and e.path == "sensors[0].coordinate"
    bad = tmp_path / "bad.yaml"
    bad.write_text("sensors:\n  - {type: gyroscope, body: 1, sigma: 1}\n"
                   "  - {type: gyroscope, body: 99, sigma: 1}\n")
    with pytest.raises(SchemaError) as info:
        load_sensors(bad, load("slider-crank"))
    err = info.value
    assert (err.file, err.path, err.line) == (str(bad), "sensors[1].body", 3)
    assert str(err).startswith(f"{bad}:3: sensors[1].body: body index 99 out of range")
    with pytest.raises(SchemaError, match="file not found"):
        load_sensors(tmp_path / "missing.yaml", load("slider-crank"))
    with pytest.raises(SchemaError, match="expected YAML text"):
        parse_sensors(3, load("slider-crank"))


# ------------------------------------------------------------------------ (f) synthesize
def test_synthesize_respects_periods_and_noise():
    mech = load("fourbar-crank-angle")
    T = 4001
    t = np.arange(T) * 1e-3
    rng = np.random.default_rng(0)
    states = fd_states("fourbar-crank-angle")[1]
    # a "trajectory" cycling through the assembled states (only the sensor model matters here)
    q, qd, qdd = (np.array([states[i % len(states)][j] for i in range(T)]) for j in range(3))
    ss = SensorSet([Marker(point=2, sigma=1e-3),
                    Gyroscope(body=1, sigma=0.02, period=2),
                    Accelerometer(body=1, point=(0.3, 0.1), axis=0.5, sigma=0.05, period=3),
                    AngleEncoder(coordinate="theta0", sigma=0.01, period=7),
                    Distance(points=(0, 2), sigma=2e-3, period=1)])
    readings = ss.synthesize(mech, t, q, qd, qdd, np.random.default_rng(42))
    assert len(readings) == len(ss)
    for s, r in zip(ss, readings):
        assert isinstance(r, Readings)
        steps, values = r
        np.testing.assert_array_equal(steps, np.arange(0, T, s.period))
        assert values.shape == (len(steps), s.dim)
        noise = values - s.measure(mech, q[steps], qd[steps], qdd[steps])
        std = noise.std()
        assert abs(std / s.sigma - 1) < 0.1, (s.label, std)
        assert abs(noise.mean()) < 4 * s.sigma / math.sqrt(noise.size)
    again = ss.synthesize(mech, t, q, qd, qdd, np.random.default_rng(42))
    for r1, r2 in zip(readings, again):
        np.testing.assert_array_equal(r1.values, r2.values)
    # sensors that do not need qd/qdd work without them
    only_q = SensorSet([Marker(point=1, sigma=1.0, period=1000)])
    (steps, values), = only_q.synthesize(mech, t, q, rng=rng)
    np.testing.assert_array_equal(steps, [0, 1000, 2000, 3000, 4000])


def test_gyroscope_bias():
    """A gyroscope's constant bias adds to every reading and leaves its Jacobians; the YAML
    takes it in rad/s (bias) or deg/s (bias_deg)."""
    mech = load("fourbar")
    rng = np.random.default_rng(2)
    q, qd = mech.q0, rng.normal(size=mech.n)
    plain, biased = Gyroscope(body=1, sigma=0.01), Gyroscope(body=1, sigma=0.01, bias=0.03)
    np.testing.assert_allclose(biased.measure(mech, q, qd), plain.measure(mech, q, qd) + 0.03)
    for slot, J in biased.jacobians(mech, q, qd).items():
        np.testing.assert_array_equal(J, plain.jacobians(mech, q, qd)[slot])
    ss = load_sensors("sensors:\n  - {type: gyroscope, body: 1, sigma_deg: 0.5, bias_deg: 2}", mech)
    assert ss[0].bias == pytest.approx(np.radians(2.0))
    with pytest.raises(SchemaError, match="either bias or bias_deg"):
        load_sensors("sensors:\n  - {type: gyroscope, body: 1, sigma: 0.1, bias: 1, bias_deg: 2}",
                     mech)
