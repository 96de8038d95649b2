"""mbfg.identify and mbfg.cross_validate on ground-truth synthesized data: a motor-driven
four-bar with friction is simulated with known parameters by the classical integrator, its
sensors are synthesized (a quantized crank encoder and a biased coupler gyroscope) and the
parameters are identified from a perturbed guess; expected values are the simulation's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mbfg
from mbfg.errors import ConvergenceError, UsageError
from mbfg.graphs.identification import IdentificationSettings, Recording
from mbfg.model.identification import parameter_set
from mbfg.model.integrate import integrate_reference
from mbfg.model.sensors import AngleEncoder, Gyroscope, SensorSet

from conftest import MOTOR_FOURBAR

COUNTS = 4096
DT, T_END = 5e-3, 4.0
NAMES = ["friction[0]", "friction[1].viscous", "motors[0].gain", "planar_bodies[1].mass",
         "planar_bodies[1].I0", "planar_bodies[0].I0", "sensors[1].bias"]


def _inputs(phase):
    return lambda t: np.array([0.8 * np.sin(1.3 * t + phase) + 0.5 * np.sin(3.1 * t + 1)
                               + 0.3 * np.sin(7.3 * t + 2 + phase)])


PAYLOAD = ((1, 2.0, (3.0, 0.2), 0.5),)  # 2 kg on the coupler, known


def _record(truth, sensors, phase, seed, payload=()):
    u = _inputs(phase)
    if payload:
        from mbfg.graphs.identification import payload_vector
        from mbfg.model.parameters import parameter_vector
        truth = truth.with_parameters(parameter_vector(truth) + payload_vector(truth, payload))
    tr = integrate_reference(truth, T_END, DT, inputs=u, rtol=1e-10, atol=1e-10)
    rd = sensors.synthesize(truth, tr.t, tr.q, tr.qd, tr.qdd, rng=np.random.default_rng(seed))
    step = 2 * np.pi / COUNTS  # the encoder counts: quantized, no other noise
    rd[0] = rd[0]._replace(values=np.round(tr.q[rd[0].steps][:, [4]] / step) * step)
    U = np.stack([u(t) for t in tr.t])
    return Recording(tuple(rd), tr.t.size, DT, U, payload=payload)


@pytest.fixture(scope="module")
def data():
    truth = mbfg.mechanism_from_yaml(MOTOR_FOURBAR)
    quant = 2 * np.pi / COUNTS / np.sqrt(12.0)
    sensors = SensorSet([AngleEncoder(coordinate="theta0", sigma=quant),
                         Gyroscope(body=1, sigma=0.005, bias=0.03)])
    train = _record(truth, sensors, 0.0, 1)
    held = _record(truth, sensors, 0.7, 2)
    # the guess: 20-30 % off, no gyroscope bias
    guess = mbfg.mechanism_from_yaml(MOTOR_FOURBAR.replace("mass: 7.5, I0: 170", "mass: 9.0, I0: 200")
                                     .replace("mass: 2.2, I0: 3.1", "mass: 2.2, I0: 3.72")
                                     .replace("viscous: 0.5, coulomb: 0.3",
                                              "viscous: 0.35, coulomb: 0.39")
                                     .replace("viscous: 0.2}", "viscous: 0.26}")
                                     .replace("gain: 5.0", "gain: 4.0"))
    gs = SensorSet([sensors[0], dataclasses.replace(sensors[1], bias=0.0)])
    true_values = parameter_set(truth, NAMES, sensors).nominal
    res = mbfg.identify(guess, gs, [train], NAMES)
    return truth, sensors, guess, gs, train, held, true_values, res


def test_identify_recovers_the_true_parameters(data):
    *_, true_values, res = data
    assert res.converged
    want = dict(zip(parameter_set(data[0], NAMES, data[1]).names, true_values))
    rel = {n: abs(v - want[n]) / abs(want[n]) for n, v in zip(res.names, res.values)}
    z = {n: abs(v - want[n]) / s for n, v, s in zip(res.names, res.values, res.std)}
    # 4 s at 200 Hz: the inertial parameters and the gain to 1 %; the friction coefficients'
    # errors are of the size of their std (4-19 % of their values on these 4 s), so a fixed
    # bound on one noise draw would be a coin flip: their precision is checked instead, and
    # their errors by z below
    for n in ("motors[0].gain", "planar_bodies[1].mass", "planar_bodies[1].I0",
              "planar_bodies[0].I0", "sensors[1].bias"):
        assert rel[n] < 0.01, (n, rel[n])
    std = dict(zip(res.names, res.std))
    for n in ("friction[0].viscous", "friction[1].viscous", "friction[0].coulomb"):
        assert std[n] < 0.25 * abs(want[n]), (n, std[n])
    assert max(z.values()) < 4.0, z  # the intervals are honest
    # the sampling intervals (the readings' noise alone: this recording's model is exact) are
    # honest too, and never wider than the posterior's
    z_s = np.abs(res.values - true_values) / res.sampling_std
    assert np.max(z_s) < 4.0, dict(zip(res.names, np.round(z_s, 2)))
    assert np.all(res.sampling_std <= res.std * (1.0 + 1e-3))  # (rounding: S^-1 spans 1e13)
    # the fit is consistent with the sensor noise: about one per reading
    assert 0.7 < res.costs[0] < 1.5
    assert res.stats.iterations <= 30
    assert np.all(res.identifiable)
    np.testing.assert_allclose(np.diag(res.correlation), 1.0, rtol=1e-12)


def test_result_serializes_and_reports(data, tmp_path):
    res = data[-1]
    path = res.save(tmp_path / "r.json")
    import json
    d = json.loads(path.read_text())
    assert [p["name"] for p in d["parameters"]] == list(res.names)
    np.testing.assert_allclose([p["sampling_std"] for p in d["parameters"]], res.sampling_std)
    np.testing.assert_allclose(d["chart"]["sampling_covariance"], res.sampling_covariance)
    assert len(d["combinations"]) == len(res.names)
    text = res.report()
    assert "planar_bodies[1].mass" in text and "95 % interval (sampling)" in text


def test_inertial_base_parameters(data):
    """The base parameters: directions in the inertial coordinates only; each identified one's
    posterior variance is the inverse of its information from the data (the Schur complement
    with the other parameters marginalized: by the block inverse, the prior's share aside);
    they are reported and serialized."""
    truth, sensors, *_, true_values, res = data
    b = res.base_parameters
    inertial = np.array([lab.startswith(("m[", "m*c_", "I_O[")) for lab in
                         res.combination_labels])
    assert b.spectrum.size == inertial.sum() == 3
    assert np.all(b.directions[:, ~inertial] == 0.0)
    np.testing.assert_allclose(np.linalg.norm(b.directions, axis=1), 1.0, rtol=1e-12)
    assert np.all(b.identifiable)
    np.testing.assert_allclose(b.std, 1.0 / np.sqrt(b.spectrum), rtol=0.02)
    assert np.all(b.sampling_std <= b.std * (1.0 + 1e-3))
    # the values are those of v . phi at the result, and hold the truth
    ps = parameter_set(truth, NAMES, sensors)
    phi_true = ps.linear_values(ps.theta_of(truth, sensors)) * ps.linear_scales() \
        / res.combination_scales
    np.testing.assert_allclose(b.values, b.directions @ res.combination_values, rtol=1e-12)
    assert np.max(np.abs(b.directions @ phi_true - b.values) / b.std) < 4.0
    np.testing.assert_allclose(   # the helpers for the same comparison
        b.errors(ps.linear_values(np.zeros(ps.size), scales=res.combination_scales)),
        (b.directions @ phi_true - b.values)[b.identifiable], rtol=1e-12, atol=1e-15)
    import json
    d = json.loads(res.to_json())["base_parameters"]
    np.testing.assert_allclose([x["std"] for x in d], b.std)
    assert "## Inertial base parameters" in res.report()


@pytest.mark.parametrize("names", ["friction[0].viscous, motors[0].gain",
                                   "planar_bodies[1].mass, planar_bodies[1].I0"])
def test_base_parameters_without_other_or_without_inertial_parameters(data, names):
    """No inertial parameter: no base parameter (report and JSON say nothing of them); only
    inertial ones: nothing to marginalize, so the base parameters are the combinations."""
    truth, sensors, *_ = data
    res = mbfg.identify(truth, sensors, [data[4]], names,
                        settings=IdentificationSettings(max_iterations=10))
    b = res.base_parameters
    if names.startswith("friction"):
        assert b.spectrum.size == 0 and b.directions.shape == (0, 2)
        assert "base parameters" not in res.report()
        import json
        assert json.loads(res.to_json())["base_parameters"] == []
    else:
        np.testing.assert_allclose(b.spectrum, res.spectrum, rtol=1e-9)
        np.testing.assert_allclose(np.abs(b.directions), np.abs(res.directions), atol=1e-9)


def test_cross_validation_cost_matches_training(data):
    truth, sensors, guess, gs, train, held, _, res = data
    val = mbfg.cross_validate(guess, gs, held, res)
    assert val.converged
    assert val.observations.shape == (held.n_steps,)
    assert val.cost < 1.3 * res.costs[0]
    # the nominal (wrong) model does much worse on the same recording
    nominal = mbfg.cross_validate(guess, gs, held)
    assert nominal.cost > 3.0 * val.cost


def test_scale_null_direction_is_flagged(data):
    """All inertial parameters, friction and the gain together are only known up to one common
    scale from a single recording (the motion is unchanged when all scale alike): that
    direction lies in the flagged null space (which also holds the combinations a one-degree-
    of-freedom four-bar cannot separate), and fixing the gain removes it."""
    truth, sensors, *_ = data
    train = data[4]
    names = "planar_bodies[0], planar_bodies[1], planar_bodies[2], friction[0], " \
            "friction[1].viscous, motors[0].gain"
    # friction[2] has no friction: nothing to scale there
    res = mbfg.identify(truth, sensors, [train], names,
                        settings=IdentificationSettings(max_iterations=10))
    nulls = int(np.sum(~res.identifiable))
    assert 1 <= nulls < len(res.names)
    # scaling every m, m c, I_O, friction coefficient and the gain alike: phi -> (1 + e) phi
    scale = res.combination_values / np.linalg.norm(res.combination_values)
    assert np.linalg.norm(res.null_directions @ scale) > 0.99
    fixed = mbfg.identify(truth, sensors, [train], names.replace(", motors[0].gain", ""),
                          settings=IdentificationSettings(max_iterations=10))
    assert int(np.sum(~fixed.identifiable)) == nulls - 1
    # every null direction has an inertial part, so the base parameters lose as many (the
    # common scale among them), and one fewer with the gain fixed
    assert int(np.sum(~res.base_parameters.identifiable)) == nulls
    assert int(np.sum(~fixed.base_parameters.identifiable)) == nulls - 1
    # a second recording with a known payload: the scale is seen, the gain identified
    loaded = _record(truth, sensors, 0.3, 3, payload=PAYLOAD)
    both = mbfg.identify(truth, sensors, [train, loaded], names,
                         settings=IdentificationSettings(max_iterations=10))
    assert int(np.sum(~both.identifiable)) == nulls - 1
    k = both.names.index("motors[0].gain")
    assert abs(both.values[k] - 5.0) < 4 * both.std[k] and both.std[k] < 0.02 * 5.0


def test_non_convergence_is_reported_and_keeps_the_result(data):
    _, _, guess, gs, train, *_ = data
    s = IdentificationSettings(max_iterations=1)
    res = mbfg.identify(guess, gs, [train], NAMES, settings=s)
    assert not res.converged and "iterations" in res.stats["reason"]
    with pytest.raises(ConvergenceError) as err:
        mbfg.identify(guess, gs, [train], NAMES, settings=s, raise_on_failure=True)
    assert err.value.partial is not None


def test_bad_recordings_are_refused(data):
    _, _, guess, gs, train, *_ = data
    with pytest.raises(UsageError, match="inputs must have shape"):
        mbfg.identify(guess, gs, [dataclasses.replace(train, inputs=np.zeros((3, 1)))], NAMES)
    with pytest.raises(UsageError, match="at least one recording"):
        mbfg.identify(guess, gs, [], NAMES)


def test_units_do_not_matter(data):
    """The same recording identified on the model written in mm and g (angles, rates and the
    motor inputs unchanged): the same chart point (to 1 % of its standard deviation: the two
    runs differ by rounding, which moves where the stopping test fires), values and standard
    deviations in the new units."""
    _, _, guess, gs, train, *_ = data
    res = data[-1]
    L, M = 1e3, 1e3  # mm, g
    F = M * L * L  # N m -> g mm^2/s^2
    spec = guess.spec
    lines = ["gravity: [0, %r]" % (-9.81 * L), "points:"]
    for p in spec.points:
        lines.append(f"  - {{x: {p.x * L!r}, y: {p.y * L!r}, fixed: {str(p.fixed).lower()}}}")
    lines.append("planar_bodies:")
    for b in spec.bodies:
        lines.append(f"  - {{points: {list(b.points)}, length: {b.length * L!r}, mass: "
                     f"{b.mass * M!r}, I0: {b.I0 * M * L * L!r}, cog: [{b.cog[0] * L!r}, "
                     f"{b.cog[1] * L!r}]}}")
    lines += ["relative_coordinates:", "  - {type: RelativeAngleAbsoluteDOF, points: [0, 1]}",
              "friction:"]
    for f in spec.friction:
        lines.append(f"  - {{type: joint, bodies: [{'ground' if f.bodies[0] < 0 else f.bodies[0]}"
                     f", {f.bodies[1]}], viscous: {f.viscous * F!r}, coulomb: {f.coulomb * F!r}"
                     + (f", width: {f.width!r}" if f.width is not None else "") + "}")
    lines += ["motors:", f"  - {{coordinate: theta0, gain: {spec.motors[0].gain * F!r}}}"]
    mm = mbfg.mechanism_from_yaml("\n".join(lines) + "\n")
    res_mm = mbfg.identify(mm, gs, [train], NAMES)
    sd = np.sqrt(np.diag(res.theta_covariance))
    assert np.all(np.abs(res_mm.theta - res.theta) < 0.01 * sd)
    assert abs(res_mm.stats.iterations - res.stats.iterations) <= 2
    scale = np.array([{"kg": M, "kg m^2": M * L * L, "N m s/rad": F, "N m": F,
                       "N m per input unit": F, "rad/s": 1.0}[u] for u in res.units])
    assert np.all(np.abs(res_mm.values - res.values * scale) < 0.01 * res.std * scale)
    np.testing.assert_allclose(res_mm.std, res.std * scale, rtol=0.01)
    np.testing.assert_allclose(res_mm.sampling_std, res.sampling_std * scale, rtol=0.01)
    np.testing.assert_allclose(res_mm.spectrum, res.spectrum, rtol=0.01)
    b, b_mm = res.base_parameters, res_mm.base_parameters  # unit-free: the same numbers
    np.testing.assert_allclose(b_mm.spectrum, b.spectrum, rtol=0.01)
    np.testing.assert_allclose(b_mm.std, b.std, rtol=0.01)
    np.testing.assert_allclose(b_mm.sampling_std, b.sampling_std, rtol=0.01)
    assert np.all(np.abs(b_mm.values - b.values) < 0.01 * b.std)


def test_short_continuation_matches_the_former_one(data):
    """The default schedule (one loose joint stage, then the final one) reaches the optimum of
    the former four-stage continuation (states alone, then the dynamics sigma 1, 0.1, 0.01,
    and the final one) in about half the iterations."""
    _, _, guess, gs, train, *_ = data
    res = data[-1]
    # (the final sigma twice: the crank's Coulomb term switches in this recording, and the
    # final stage takes its correction from one iteration at the final sigma)
    final = IdentificationSettings().dynamics
    assert [(s["dynamics"], s["parameters"], s["iterations"], s["coulomb_correction"])
            for s in res.stats["stages"]][1:] == [(final, True, 1, True), (final, True,
                                                   res.stats["final_iterations"], True)]
    assert res.stats["stages"][0]["dynamics"] == 1.0
    former = mbfg.identify(guess, gs, [train], NAMES, settings=IdentificationSettings(
        continuation=(1.0, 0.1, 0.01), states_first=True, stage_tolerance=1e-8))
    assert len(former.stats["stages"]) == 6
    assert res.stats.iterations <= 10 and former.stats.iterations >= 1.5 * res.stats.iterations
    sd = np.sqrt(np.diag(res.theta_covariance))
    # (within 0.05 std: the final stage's Coulomb-switching correction is computed from the
    # stage before it, whose states differ between the schedules; 0.019 std measured, under
    # the final stage's own stopping bound of 0.1 std)
    assert np.all(np.abs(former.theta - res.theta) < 0.05 * sd)
    np.testing.assert_allclose(former.std, res.std, rtol=1e-3)


def test_converged_step_bounds_the_distance_to_the_optimum(data):
    """The final stage stops when the Gauss-Newton step's predicted decrease is below
    step_sigmas^2 / 2 (whitened cost): the optimum is then within step_sigmas standard
    deviations of the returned point in every parameter (|d theta_i| <= sqrt(d^T H d) sigma_i).
    This case converges quadratically, so the default (0.1) stops where the relative tolerance
    does; 3 standard deviations stop one iteration earlier."""
    _, _, guess, gs, train, *_ = data
    res = data[-1]
    early = mbfg.identify(guess, gs, [train], NAMES,
                          settings=IdentificationSettings(step_sigmas=3.0))
    assert early.converged and early.stats.iterations < res.stats.iterations
    sd = np.sqrt(np.diag(res.theta_covariance))
    assert np.all(np.abs(early.theta - res.theta) <= 3.0 * sd)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_bad_step_length_is_refused(data, bad):
    _, _, guess, gs, train, *_ = data
    with pytest.raises(UsageError, match="step_sigmas"):
        mbfg.identify(guess, gs, [train], NAMES, settings=IdentificationSettings(step_sigmas=bad))


REVERSING_FOURBAR = """
gravity: [0, -9.81]
points:
  - {x: 0, y: 0, fixed: true}
  - {x: 1, y: 0}
  - {x: 1, y: 2}
  - {x: 4, y: 0, fixed: true}
planar_bodies:
  - {points: [0, 1], length: 1, mass: 1.2, cog: [0.55, 0.04], I0: 0.47492}
  - {points: [1, 2], length: 2, mass: 1.7, cog: [1.05, -0.06], I0: 2.50037}
  - {points: [2, 3], length: auto, mass: 4.6, cog: [1.7, 0.09], I0: 18.43126}
relative_coordinates:
  - {type: RelativeAngleAbsoluteDOF, points: [0, 1]}
friction:
  - {type: joint, bodies: [ground, 0], viscous: 0.08, coulomb: 0.15}
  - {type: joint, bodies: [0, 1], viscous: 0.03}
  - {type: joint, bodies: [1, 2], viscous: 0.03}
  - {type: joint, bodies: [2, ground], viscous: 0.05}
motors:
  - {coordinate: theta0, gain: 5.0}
"""
"""The identification benchmark's four-bar (benchmarks/identification.py, its true values)."""


def _dop853(mech, u, t_end, dt):
    """The exact motion from rest at q0 under inputs u(t): DOP853 (rtol = atol = 1e-10) in one
    call, sampled every dt and projected onto the constraints (q, qd, qdd, U)."""
    tr = integrate_reference(mech, t_end, dt, inputs=u, rtol=1e-10, atol=1e-10, restart=False)
    return tr.q, tr.qd, tr.qdd, np.stack([u(t) for t in tr.t])


def test_coulomb_switching_does_not_bias_the_fit(monkeypatch):
    """Exact readings of a motion whose crank reverses again and again: at each reversal the
    Coulomb term switches within one 1 ms step, which no integrator row of the step can
    follow.  Fitted from the true model, the parameters stay at the truth (within 0.01 of
    their sampling std; 3e-4 measured).  The control: without the rows' switching correction
    (``coulomb_errors``) the same fit is biased."""
    import mbfg.graphs.identification as graph
    truth = mbfg.mechanism_from_yaml(REVERSING_FOURBAR, "benchmark four-bar")
    sensors = SensorSet([AngleEncoder(coordinate="theta0", sigma=2 * np.pi / 4096 / np.sqrt(12)),
                         Gyroscope(body=1, sigma=0.005)])
    freqs, amps = 2 * np.pi * np.array([0.2, 0.7, 1.6, 3.1]), np.array([2.0, 1.5, 0.8, 0.4])
    u = lambda t: np.array([np.sum(amps * np.sin(freqs * t + np.arange(4.0)))])  # noqa: E731
    dt = 1e-3
    q, qd, qdd, U = _dop853(truth, u, 8.0, dt)
    assert np.sum(np.sign(qd[:-1, 4]) != np.sign(qd[1:, 4])) >= 4  # reversals
    readings = tuple((np.arange(len(q)), s.measure(truth, q, qd, qdd)) for s in sensors)
    rec = Recording(readings, len(q), dt, U)
    names = ["friction[0]", "friction[1].viscous", "friction[2].viscous",
             "friction[3].viscous", "motors[0].gain"]
    true_values = parameter_set(truth, names, sensors).nominal

    def z():
        res = mbfg.identify(truth, sensors, [rec], names)
        assert res.converged
        return np.abs(res.values - true_values) / res.sampling_std

    assert np.max(z()) < 0.01
    monkeypatch.setattr(graph.IdentificationProblem, "coulomb_errors",
                        lambda self, Xs, theta: None)
    assert np.max(z()) > 0.05  # (0.11 on these 8 s; up to 1 std on 30 s)


def test_a_parameter_out_of_its_charts_range_is_reported_not_raised(data, monkeypatch):
    """When the chart's Jacobian is singular at the end (a value driven to 0 or beyond a float:
    seen on a generated crank-rocker with Coulomb friction at every joint, which does not
    converge), identify returns its result as not converged and says why, instead of raising
    numpy's LinAlgError."""
    from mbfg.model.identification import ParameterSet
    _, _, guess, gs, train, *_ = data
    real = ParameterSet.linear_jacobian

    def singular(self, theta):
        J = real(self, theta)
        J[0] = 0.0
        return J
    monkeypatch.setattr(ParameterSet, "linear_jacobian", singular)
    res = mbfg.identify(guess, gs, [train], NAMES, settings=IdentificationSettings(
        max_iterations=3))
    assert not res.converged
    assert "left the range its chart represents" in res.stats["reason"]
