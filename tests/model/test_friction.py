"""Joint and slider friction and motors (YAML ``friction:``/``motors:``,
mbfg.model.nonconservative): exact Jacobians, dissipation, the energy balance of the
classical integrator, motors as generalized forces, and the loader's errors."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import mbfg
from mbfg.errors import SchemaError
from mbfg.model.inertia import kinetic_energy, potential_energy
from mbfg.model.integrate import integrate_reference, integrate_trapezoidal
from mbfg.model.nonconservative import (TANH_SATURATED, coulomb_dwells,
                                        friction_force_jacobians, friction_forces,
                                        motor_forces, sliding_rates)
from mbfg.model.sensors import Gyroscope
from mbfg.resources import mechanism_path
from mbfg.testing import check_jacobian

QUICK_RETURN_FRICTION = """
friction:
  - {type: joint, bodies: [ground, 0], viscous: 0.02, coulomb: 0.01, width: 0.5}
  - {type: joint, bodies: [ground, 1], viscous: 0.05}
  - {type: slider, constraint: 0, viscous: 3.0, coulomb: 0.4, width: 0.2}
motors:
  - {coordinate: theta0, gain: 5.0}
"""
SLIDER_CRANK_FRICTION = """
friction:
  - {type: joint, bodies: [0, 1], viscous: 0.01, coulomb: 0.02, width: 0.5}
  - {type: slider, constraint: 0, viscous: 2.0, coulomb: 0.5, width: 0.1}
"""


def with_yaml(name: str, extra: str):
    text = mechanism_path(name).read_text(encoding="utf-8") + extra
    return mbfg.mechanism_from_yaml(text, f"{name}+friction")


CASES = {"quick-return": QUICK_RETURN_FRICTION, "slider-crank": SLIDER_CRANK_FRICTION}


def _states(mech, rng, count=4):
    for _ in range(count):
        q = mech.q0 + 0.05 * rng.normal(size=mech.n)
        qd = rng.normal(size=mech.n)
        yield q, qd


@pytest.mark.parametrize("name", sorted(CASES))
def test_friction_jacobians_match_central_differences(name):
    mech = with_yaml(name, CASES[name])
    rng = np.random.default_rng(3)
    for q, qd in _states(mech, rng):
        Q, dq, dqd = friction_force_jacobians(mech, q, qd)
        np.testing.assert_allclose(Q, friction_forces(mech, q, qd), rtol=1e-14, atol=1e-14)
        check_jacobian(lambda x: friction_forces(mech, x, qd), q, dq, name="dQ_f/dq")
        check_jacobian(lambda x: friction_forces(mech, q, x), qd, dqd, name="dQ_f/dqdot")
    # batched evaluation equals the per-state one
    qs, qds = map(np.array, zip(*_states(mech, rng)))
    Qb, dqb, dqdb = friction_force_jacobians(mech, qs, qds)
    for i in range(len(qs)):
        Qi, dqi, dqdi = friction_force_jacobians(mech, qs[i], qds[i])
        np.testing.assert_allclose(Qb[i], Qi, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(dqb[i], dqi, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_friction_never_adds_power(name):
    mech = with_yaml(name, CASES[name])
    for q, qd in _states(mech, np.random.default_rng(5), count=20):
        assert friction_forces(mech, q, qd) @ qd <= 1e-12


def test_joint_rate_is_the_relative_angular_rate():
    """A joint's sliding rate is omega_b - omega_a, the bodies' rates as the gyroscope reads
    them (body-to-ground: omega_b)."""
    mech = with_yaml("slider-crank", SLIDER_CRANK_FRICTION + """
  - {type: joint, bodies: [ground, 0], viscous: 1.0}
""")
    q, qd = next(_states(mech, np.random.default_rng(1)))
    w0 = Gyroscope(body=0, sigma=1.0).measure(mech, q, qd)[0]
    w1 = Gyroscope(body=1, sigma=1.0).measure(mech, q, qd)[0]
    s = sliding_rates(mech, q, qd)
    np.testing.assert_allclose(s[[0, 2]], [w1 - w0, w0], rtol=1e-12)
    np.testing.assert_allclose(s[1], qd[mech.coordinate_index("x2")], rtol=1e-12)  # slider on x


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_energy_balance_with_friction(name):
    """Released from rest under gravity with friction, the classical integrator's energy
    falls by exactly the work of the friction forces: E(t) - E(0) = int Q_f . qdot dt (an
    independent physical check of the forces and their use in the integrator)."""
    mech = with_yaml(name, CASES[name])
    ref = integrate_reference(mech, 1.0, 1e-3, rtol=1e-11, atol=1e-11)
    E = kinetic_energy(mech, ref.qd) + potential_energy(mech, ref.q)
    power = np.einsum("ti,ti->t", friction_forces(mech, ref.q, ref.qd), ref.qd)
    work = np.concatenate([[0.0], np.cumsum(0.5 * (power[1:] + power[:-1]) * 1e-3)])
    swing = np.ptp(potential_energy(mech, ref.q))
    assert work[-1] < -1e-3 * swing                         # friction matters
    assert np.abs(E - E[0] - work).max() <= 1e-4 * swing    # quadrature error of the check
    floor = integrate_trapezoidal(mech, 1.0, 1e-3)
    assert np.abs(floor.q - ref.q).max() <= 1e-3 * 0.5      # the floor honours friction too


def test_motor_is_a_generalized_force_on_its_coordinate():
    mech = with_yaml("quick-return", QUICK_RETURN_FRICTION)
    k = mech.coordinate_index("theta0")
    Q = motor_forces(mech, [0.3])
    assert Q[k] == pytest.approx(5.0 * 0.3) and np.count_nonzero(Q) == 1

    def u(t):
        return [0.4 * np.sin(3 * t)]
    by_input = integrate_reference(mech, 0.5, 1e-3, inputs=u, rtol=1e-11, atol=1e-11)
    by_force = integrate_reference(mech, 0.5, 1e-3, forces=lambda t: motor_forces(mech, u(t)),
                                   rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(by_input.q, by_force.q, rtol=0, atol=1e-12)
    idle = integrate_reference(mech, 0.5, 1e-3, rtol=1e-11, atol=1e-11)
    assert np.abs(idle.q - by_input.q).max() > 1e-3


@pytest.mark.parametrize("extra, path, message", [
    ("friction:\n  - {type: hinge, bodies: [0, 1]}", "friction[0].type", "unknown friction type"),
    ("friction:\n  - {type: joint, bodies: [ground, 1]}", "friction[0].bodies", "share no point"),
    ("friction:\n  - {type: joint, bodies: [0, 0]}", "friction[0].bodies", "the same"),
    ("friction:\n  - {type: joint, bodies: [0, 7]}", "friction[0].bodies[1]", "body index"),
    ("friction:\n  - {type: joint, bodies: [0, 1], viscous: -1}", "friction[0].viscous", ">= 0"),
    ("friction:\n  - {type: joint, bodies: [0, 1], width: 0}", "friction[0].width", "> 0"),
    ("friction:\n  - {type: slider, constraint: 3}", "friction[0].constraint", "slider"),
    ("friction:\n  - {type: joint, bodies: [0, 1], damping: 1}", "friction[0].damping", "unknown key"),
    ("motors:\n  - {coordinate: theta7, gain: 1}", "motors[0].coordinate", "unknown coordinate"),
    ("motors:\n  - {coordinate: x1}", "motors[0].gain", "gain"),
    ("gravity: [0, 0]\nfriction:\n  - {type: joint, bodies: [0, 1], coulomb: 1}", "friction[0]",
     "width"),
])
def test_bad_friction_and_motor_entries(extra, path, message):
    text = mechanism_path("slider-crank").read_text(encoding="utf-8").replace(
        "gravity: [0, -9.81]\n", "") + extra + "\n"
    with pytest.raises(SchemaError, match=message) as info:
        mbfg.mechanism_from_yaml(text, "bad.yaml")
    assert info.value.path == path


@pytest.mark.parametrize("method", ["ekf", "ukf", "fg-online"])
def test_estimators_use_the_friction_of_their_model(method):
    """The estimators' process models include friction: with the true (frictional) model the
    crank angle of a slider-crank released under gravity is tracked from a noisy gyroscope
    much better than with the same model without friction."""
    from mbfg.estimation.kalman import REVIEW_QC
    from mbfg.model.sensors import SensorSet
    true = with_yaml("slider-crank", SLIDER_CRANK_FRICTION)
    dt, t_end = 5e-3, 2.0
    truth = integrate_reference(true, t_end, dt, rtol=1e-11, atol=1e-11)
    sensors = SensorSet([Gyroscope(body=1, sigma=np.radians(0.5))])
    readings = sensors.synthesize(true, truth.t, truth.q, truth.qd, truth.qdd,
                                  rng=np.random.default_rng(0))
    k = true.coordinate_index("theta0")
    # the Kalman filters' default plant noise allows a model error as large, relative to this
    # mechanism's accelerations, as the review's four-bar had; the gyroscope then keeps both
    # models near the truth.  The review's value in rad and s (146x smaller for this 0.22 m
    # slider-crank) trusts the model, so that its friction shows
    options = {"qc": REVIEW_QC} if method in ("ekf", "ukf") else {}

    def rmse(model):
        res = mbfg.estimate(model, sensors, readings, dt, len(truth.t), method=method,
                            **options)
        err = np.angle(np.exp(1j * (res.q[:, k] - truth.q[:, k])))
        return float(np.sqrt(np.mean(err ** 2)))
    with_friction, without = rmse(true), rmse(mbfg.load_mechanism("slider-crank"))
    assert with_friction < 0.5 * without, (with_friction, without)


def test_inverse_dynamics_with_friction_reproduces_the_motion():
    """Inverse dynamics on a mechanism with friction gives the crank torque that, applied in
    the reference integrator (with the same friction), reproduces the prescribed motion; the
    torque differs from the frictionless one by the friction it overcomes."""
    mech = with_yaml("slider-crank", SLIDER_CRANK_FRICTION)
    k = mech.coordinate_index("theta0")
    t = np.arange(401) * 1e-3
    theta = mech.q0[k] + 2.0 * t + 3.0 * t ** 2          # spin-up of the crank
    res = mbfg.solve_inverse_dynamics(mech, t, theta[:, None], [k])
    torque = res.Q[:, k]

    def forces(tt):
        Q = np.zeros(mech.n)
        Q[k] = np.interp(tt, t, torque)
        return Q
    ref = integrate_reference(mech, 0.4, 1e-3, q0=res.q[0], qd0=res.qd[0], forces=forces,
                              rtol=1e-11, atol=1e-11)
    assert np.abs(ref.q[:, k] - theta).max() <= 2e-4             # rad, over 0.4 s
    plain = mbfg.solve_inverse_dynamics(mbfg.load_mechanism("slider-crank"), t,
                                        theta[:, None], [k])
    assert np.abs(plain.Q[:, k] - torque).max() > 0.01            # N m: friction matters


@functools.lru_cache(maxsize=None)
def _references(name, t_end, dt):
    """DOP853 and the trapezoidal floor with friction, and DOP853 without (shared by the
    solver modes)."""
    mech = with_yaml(name, CASES[name])
    return (integrate_reference(mech, t_end, dt, rtol=1e-12, atol=1e-12),
            integrate_trapezoidal(mech, t_end, dt),
            integrate_reference(mbfg.load_mechanism(name), t_end, dt, rtol=1e-12, atol=1e-12))


@pytest.mark.parametrize("integrator", ["hermite", "trapezoidal"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("solver, coords", [("smoother", "dependent"), ("batch", "dependent"),
                                            ("smoother", "independent")])
def test_graph_simulation_with_friction_is_at_the_floor(name, solver, coords, integrator):
    """The factor-graph simulation honours friction (dynamics factors, and with the
    trapezoidal rule the energy balance with the friction work): against DOP853 it is as
    accurate as the trapezoidal floor with the same friction, and its energy falls by the
    friction work."""
    mech = with_yaml(name, CASES[name])
    t_end, dt = 1.0, 1e-3
    res = mbfg.simulate(mech, t_end, dt, solver=solver, coords=coords, integrator=integrator)
    ref, floor, frictionless = _references(name, t_end, dt)
    err = np.abs(res.q - ref.q).max()
    assert np.abs(frictionless.q - ref.q).max() > 100 * err          # friction matters
    assert err <= 2.0 * np.abs(floor.q - ref.q).max() + 1e-9 * 0.5, err
    E = kinetic_energy(mech, res.qd) + potential_energy(mech, res.q)
    power = np.einsum("ti,ti->t", friction_forces(mech, res.q, res.qd), res.qd)
    work = np.concatenate([[0.0], np.cumsum(0.5 * (power[1:] + power[:-1]) * dt)])
    assert np.abs(E - E[0] - work).max() <= 1e-4 * np.ptp(potential_energy(mech, res.q))


def test_motor_inputs_drive_the_graph_simulation_and_the_cli(tmp_path):
    """Motors driven by recorded inputs: mbfg.simulate(inputs=...) follows the reference with
    the same inputs at the floor's accuracy, and `mbfg simulate --inputs U.txt` gives the same
    trajectory (inputs interpolated linearly between samples)."""
    import subprocess
    import sys

    from mbfg.model.nonconservative import sampled_inputs
    mech = with_yaml("quick-return", QUICK_RETURN_FRICTION)
    ts = np.linspace(0.0, 0.5, 51)
    us = 0.4 * np.sin(7 * ts)[:, None]
    u = sampled_inputs(ts, us)
    res = mbfg.simulate(mech, 0.5, 1e-3, inputs=u)
    ref = integrate_reference(mech, 0.5, 1e-3, inputs=u, rtol=1e-12, atol=1e-12)
    floor = integrate_trapezoidal(mech, 0.5, 1e-3, inputs=u)
    assert np.abs(res.q - ref.q).max() <= 2.0 * np.abs(floor.q - ref.q).max() + 1e-9
    yaml_path, u_path = tmp_path / "qr.yaml", tmp_path / "u.txt"
    yaml_path.write_text(mechanism_path("quick-return").read_text(encoding="utf-8")
                         + QUICK_RETURN_FRICTION)
    np.savetxt(u_path, np.column_stack([ts, us]))
    out = tmp_path / "r.npz"
    run = subprocess.run([sys.executable, "-m", "mbfg", "simulate", str(yaml_path), "--t-end",
                          "0.5", "--inputs", str(u_path), "--out", str(out), "--quiet"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(out)["q"], res.q, rtol=0, atol=1e-9)
    bad = subprocess.run([sys.executable, "-m", "mbfg", "simulate", "slider-crank", "--inputs",
                          str(u_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "no motors" in bad.stderr


def test_synthesize_honours_friction_motor_inputs_and_gyroscope_bias(tmp_path):
    """`mbfg synthesize --inputs` simulates the prototype with its friction and driven motors
    and writes readings that include a gyroscope's bias."""
    import subprocess
    import sys

    from mbfg.io import read_readings
    from mbfg.loader import load_sensors
    from mbfg.model.nonconservative import sampled_inputs
    mech = with_yaml("quick-return", QUICK_RETURN_FRICTION)
    yaml_path, u_path = tmp_path / "qr.yaml", tmp_path / "u.txt"
    yaml_path.write_text(mechanism_path("quick-return").read_text(encoding="utf-8")
                         + QUICK_RETURN_FRICTION)
    ts = np.linspace(0.0, 0.3, 31)
    us = 0.4 * np.cos(5 * ts)[:, None]
    np.savetxt(u_path, np.column_stack([ts, us]))
    sensors_path = tmp_path / "s.yaml"
    sensors_path.write_text("sensors:\n  - {type: gyroscope, body: 1, sigma: 1e-9, bias: 0.05}\n")
    run = subprocess.run([sys.executable, "-m", "mbfg", "synthesize", str(yaml_path), "--sensors",
                          str(sensors_path), "--t-end", "0.3", "--inputs", str(u_path), "--out",
                          str(tmp_path / "r.txt"), "--truth", str(tmp_path / "truth.npz")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ref = integrate_reference(mech, 0.3, 5e-3, inputs=sampled_inputs(ts, us), rtol=1e-11,
                              atol=1e-11)
    np.testing.assert_allclose(np.load(tmp_path / "truth.npz")["q"], ref.q, rtol=0, atol=1e-10)
    sensors = load_sensors(sensors_path, mech)
    t, readings = read_readings(tmp_path / "r.txt", sensors)
    rate = Gyroscope(body=1, sigma=1.0).measure(mech, ref.q, ref.qd)[:, 0]
    np.testing.assert_allclose(readings[0][1][:, 0], rate[readings[0][0]] + 0.05, atol=1e-7)


@pytest.mark.parametrize("method", ["ekf", "fg-online"])
def test_estimators_take_the_motor_inputs(method, tmp_path):
    """With the motors' recorded inputs (mbfg.estimate(inputs=...), mbfg estimate --inputs)
    the estimate of a driven quick-return follows the truth far better than without them."""
    import subprocess
    import sys

    from mbfg.io import write_readings
    from mbfg.model.nonconservative import sampled_inputs
    from mbfg.model.sensors import SensorSet
    mech = with_yaml("quick-return", QUICK_RETURN_FRICTION)
    dt, t_end = 5e-3, 2.0
    ts = np.linspace(0.0, t_end, 201)
    us = (0.05 * (1.0 + np.sin(3 * ts)))[:, None]   # a gentle drive: the crank swings
    u = sampled_inputs(ts, us)
    truth = integrate_reference(mech, t_end, dt, inputs=u, rtol=1e-11, atol=1e-11)
    sensors = SensorSet([Gyroscope(body=1, sigma=np.radians(0.5))])
    readings = sensors.synthesize(mech, truth.t, truth.q, truth.qd, truth.qdd,
                                  rng=np.random.default_rng(1))
    k = mech.coordinate_index("theta0")

    def rmse(q):
        return float(np.sqrt(np.mean(np.angle(np.exp(1j * (q[:, k] - truth.q[:, k]))) ** 2)))
    driven = mbfg.estimate(mech, sensors, readings, dt, len(truth.t), method=method, inputs=u)
    blind = mbfg.estimate(mech, sensors, readings, dt, len(truth.t), method=method)
    assert rmse(driven.q) < 0.5 * rmse(blind.q), (rmse(driven.q), rmse(blind.q))
    if method != "fg-online":
        return
    yaml_path, u_path, r_path = tmp_path / "qr.yaml", tmp_path / "u.txt", tmp_path / "r.txt"
    yaml_path.write_text(mechanism_path("quick-return").read_text(encoding="utf-8")
                         + QUICK_RETURN_FRICTION)
    np.savetxt(u_path, np.column_stack([ts, us]))
    write_readings(r_path, truth.t, sensors, readings)
    s_path = tmp_path / "s.yaml"
    s_path.write_text("sensors:\n  - {type: gyroscope, body: 1, sigma_deg: 0.5}\n")
    out = tmp_path / "est.npz"
    run = subprocess.run([sys.executable, "-m", "mbfg", "estimate", str(yaml_path), "--sensors",
                          str(s_path), "--readings", str(r_path), "--inputs", str(u_path),
                          "--out", str(out), "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(out)["q"], driven.q, rtol=0, atol=1e-9)


#: rounding bound of the units test per rule, relative to the mechanism's size: the Hermite
#: rule's jerk is a central difference at h = 1e-3 dt, which multiplies rounding by about
#: 1 / (omega h) (measured 1.7e-12 at 1 mm, 1 g; the trapezoidal rule 1e-13)
UNITS_ROUNDING = {"hermite": 1e-11, "trapezoidal": 1e-12}


@pytest.mark.parametrize("integrator", list(UNITS_ROUNDING))
@pytest.mark.parametrize("length, mass", [(1e-3, 1e-3), (10.0, 300.0)])
def test_friction_simulation_does_not_depend_on_units(length, mass, integrator):
    """Lengths scaled by ``length`` and masses by ``mass`` (gravity with the lengths, so time
    is unchanged; friction coefficients with their units, default widths derived): the
    simulated positions scale by ``length`` to rounding, in every mode."""
    import dataclasses

    from mbfg.loader import build_checked, parse_spec
    text = (mechanism_path("slider-crank").read_text(encoding="utf-8") + SLIDER_CRANK_FRICTION
            + "  - {type: joint, bodies: [ground, 0], viscous: 0.005, coulomb: 0.01}\n")
    spec = parse_spec(text, "slider-crank with friction")  # this joint has a default width

    def scaled(sL, sm):
        s = dataclasses.replace
        fr = tuple(s(f, viscous=f.viscous * sm * sL * sL, coulomb=f.coulomb * sm * sL * sL)
                   if hasattr(f, "bodies") else
                   s(f, viscous=f.viscous * sm, coulomb=f.coulomb * sm * sL,
                     width=None if f.width is None else f.width * sL) for f in spec.friction)
        return build_checked(s(
            spec, friction=fr,
            points=tuple(s(p, x=p.x * sL, y=p.y * sL) for p in spec.points),
            bodies=tuple(s(b, mass=b.mass * sm, I0=b.I0 * sm * sL * sL, length=b.length * sL,
                           cog=(b.cog[0] * sL, b.cog[1] * sL)) for b in spec.bodies),
            constraints=tuple(s(c, line=tuple((x * sL, y * sL) for x, y in c.line))
                              for c in spec.constraints),
            gravity=(spec.gravity[0] * sL, spec.gravity[1] * sL)))
    nominal, big = scaled(1.0, 1.0), scaled(length, mass)
    pts = [i for i, c in enumerate(nominal.coordinate_names) if not c.startswith("theta")]
    for solver, coords in [("smoother", "dependent"), ("batch", "dependent"),
                           ("smoother", "independent")]:
        a = mbfg.simulate(nominal, 0.5, 1e-3, solver=solver, coords=coords,
                          integrator=integrator).q[:, pts]
        b = mbfg.simulate(big, 0.5, 1e-3, solver=solver, coords=coords,
                          integrator=integrator).q[:, pts] / length
        assert np.abs(a - b).max() <= UNITS_ROUNDING[integrator] * 0.4, (solver, coords)


@pytest.mark.parametrize("dt", [2e-3])
def test_coulomb_step_errors_are_the_exact_motions_rule_residuals(dt):
    """Where a Coulomb term switches within a step, the integrator rows' residual on the exact
    motion (the reference integrator at tight tolerance) is the switching term's: the closed
    form of ``coulomb_step_errors`` matches it, and is zero where no rate crosses zero."""
    from conftest import bent_chain_yaml

    from mbfg.model.nonconservative import TANH_SATURATED, coulomb_step_errors, sliding_rates
    mech = mbfg.mechanism_from_yaml(bent_chain_yaml(6, friction=True), "chain6")
    tr = integrate_reference(mech, 4.0, dt, rtol=1e-11, atol=1e-11)
    q, v, a = tr.q, tr.qd, tr.qdd
    # the rows' residuals x_{k+1} - x_k - ... on the exact motion: (q, v, a) Hermite and the
    # trapezoidal (v, a)
    hq = q[1:] - q[:-1] - 0.5 * dt * (v[:-1] + v[1:]) + dt * dt / 12.0 * (a[1:] - a[:-1])
    tv = v[1:] - v[:-1] - 0.5 * dt * (a[:-1] + a[1:])
    err = coulomb_step_errors(mech, q, v, dt)
    s = sliding_rates(mech, q, v)
    coulomb = [k for k, e in enumerate(mech.friction_elements) if e.coulomb]
    cross = np.flatnonzero(np.any(np.sign(s[:-1, coulomb]) != np.sign(s[1:, coulomb]), axis=1))
    assert cross.size >= 3  # the chain swings: its joints reverse
    for key, exact in (("hermite_q", hq), ("trapezoid_v", tv)):
        want, got = exact[cross], err[key][cross]
        # where the switch dominates the row (its residual far above the smooth motion's)
        big = np.abs(want) > 100 * np.median(np.abs(exact))
        assert big.sum() >= 3
        np.testing.assert_allclose(got[big], want[big], rtol=0.1)
        # where every rate stays where tanh is saturated over the step, no switching error
        sat = TANH_SATURATED * np.array([e.width for e in mech.friction_elements])
        calm = np.all((np.minimum(np.abs(s[:-1]), np.abs(s[1:])) > sat)[:, coulomb]
                      & (np.sign(s[:-1]) == np.sign(s[1:]))[:, coulomb], axis=1)
        assert calm.sum() > 0.5 * len(calm)
        assert np.all(err[key][calm] == 0.0)


def test_coulomb_dwells_count_the_steps_in_each_terms_steep_band():
    """A rate swept linearly through zero spends a known share of the steps within
    TANH_SATURATED widths (the band is 20 x 0.5 rad/s for the crank and 20 x 0.2 m/s for the
    slider); one that jumps across zero from step to step never dwells.  Elements without a
    Coulomb term are not listed."""
    mech = with_yaml("quick-return", QUICK_RETURN_FRICTION)
    rng = np.random.default_rng(5)
    direction = rng.normal(size=mech.n)
    k = sliding_rates(mech, mech.q0, direction)            # rate per unit of the sweep
    N = 1001
    alpha = np.linspace(-1.0, 1.0, N) * 4.0 * TANH_SATURATED / np.min(np.abs(k[[0, 2]])) * 0.5
    q = np.broadcast_to(mech.q0, (N, mech.n))
    out = coulomb_dwells(mech, q, alpha[:, None] * direction)
    assert [label.split(" ")[0] for label, *_ in out] == ["friction[0]", "friction[2]"]
    for (label, fraction, longest, _), e, width in zip(out, (0, 2), (0.5, 0.2)):
        inside = np.abs(alpha * k[e]) < TANH_SATURATED * width
        assert fraction == pytest.approx(np.mean(inside)) and 0.0 < fraction < 1.0
        assert longest == int(np.sum(inside))              # one contiguous run around zero
    flip = np.where(np.arange(N) % 2 == 0, 1.0, -1.0) * np.max(np.abs(alpha))
    assert all(f == 0.0 and n == 0 and tau == np.inf
               for _, f, n, tau in coulomb_dwells(mech, q, flip[:, None] * direction))


@pytest.mark.parametrize("length, mass", [(1e-3, 1e-3), (2.0, 50.0)])
def test_coulomb_dwells_time_constant_is_the_pendulums(length, mass):
    """A uniform rod pivoted at one end, I_O = m L^2 / 3: near zero rate its friction
    mu tanh(w / eps) + c w is a damper of time constant I_O / (mu / eps + c)."""
    from mbfg.testing import pendulum_chain_yaml
    mu, eps, c = 0.2 * mass * length, 0.01, 0.05 * mass * length ** 2
    text = pendulum_chain_yaml(1, length, mass) + (
        f"friction:\n  - {{type: joint, bodies: [ground, 0], viscous: {c!r}, "
        f"coulomb: {mu!r}, width: {eps!r}}}\n")
    mech = mbfg.mechanism_from_yaml(text, "rod")
    q = np.broadcast_to(mech.q0, (5, mech.n))
    qd = np.zeros((5, mech.n))
    [(label, fraction, longest, tau)] = coulomb_dwells(mech, q, qd)
    assert (fraction, longest) == (1.0, 5)
    assert tau == pytest.approx(mass * length ** 2 / 3.0 / (mu / eps + c), rel=1e-10)
