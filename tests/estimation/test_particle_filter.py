"""The particle filter (mbfg.estimation.particle, registered as "pf") keeps its mode or says it
lost it (issue 14, item 4).

Expected values come from the prototype's simulation (the truth), never from the filter.  The
filter's settings were chosen on seeds 0-4; the seeds here are others.  Short horizons keep
the file fast.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import mbfg
from mbfg.benchmarking.estimation_review import (review_condition, review_fourbar,
                                                 sensor_setups, simulate_prototype,
                                                 thin_readings)
from mbfg.errors import ConvergenceError, UsageError
from mbfg.estimation.particle import (MODEL_ERROR, SETTLING_COVER, branch_sign,
                                      mirror_branch, noise_scales, particle_filter)
from mbfg.model import build_mechanism
from mbfg.model.integrate import integrate_reference
from mbfg.model.sensors import Gyroscope, Readings, SensorSet, wrap_angle
from mbfg.resources import mechanism_path

DT = 5e-3


@functools.lru_cache(maxsize=None)
def _review(t_end: float, condition: str | None = None):
    """(prototype, model, model q0, truth, sensor setups, reading stride) of the review
    four-bar, or of one of its benchmark conditions."""
    if condition is None:
        proto, model, q0 = review_fourbar()
        setups, stride = sensor_setups(), 1
    else:
        proto, model, q0, setups, stride = review_condition(condition)
    return proto, model, q0, simulate_prototype(proto, t_end, DT), setups, stride


def _review_run(setup: str, t_end: float, seed: int, readings=None, condition=None,
                **options):
    proto, model, q0, truth, setups, stride = _review(t_end, condition)
    sensors = setups[setup]
    t, q, qd, qdd = truth
    if readings is None:
        readings = thin_readings(sensors.synthesize(proto, t, q, qd, qdd,
                                                    rng=np.random.default_rng(seed)), stride)
    res = mbfg.estimate(model, sensors, readings, DT, len(t), method="pf", seed=seed, q0=q0,
                        qd0=np.zeros(model.n), **options)
    k = model.coordinate_index("theta0")
    return res, wrap_angle(res.q[:, k] - q[:len(res.q), k]), readings


def test_review_encoder_tracks_under_the_wrong_gravity():
    """Model gravity -8.81 vs the prototype's -9.81, crank angle off by pi/16: after its first
    second the crank angle is tracked to the EKF's level on the same readings, on average
    over eight noise seeds (one seed's error over a short run is mostly its first transient:
    0.002-0.007 rad over [1 s, 1.5 s] on these seeds, the EKF 0.003-0.007), without a
    restart.  (Before the kernel moved copies from the second step, seed 41's angle spread
    collapsed to 0.001 rad by 0.4 s, its rate drifted off and it restarted once.)"""
    proto, model, q0, truth, _, _ = _review(1.5)
    pf, ekf = [], []
    for seed in range(41, 49):
        res, e, readings = _review_run("encoder", 1.5, seed=seed)
        assert res.name == "pf" and len(res.stats["restarts"]) == 0
        ref = mbfg.estimate(model, sensor_setups()["encoder"], readings, DT, len(truth[0]),
                            method="ekf", q0=q0, qd0=np.zeros(model.n))
        e_ref = wrap_angle(ref.q[:, 4] - truth[1][:, 4])
        pf.append(np.sqrt(np.mean(e[200:] ** 2)))
        ekf.append(np.sqrt(np.mean(e_ref[200:] ** 2)))
    assert np.mean(pf) < 1.5 * np.mean(ekf)


def test_review_coupler_gyroscope_keeps_its_mode_through_the_insensitive_phase():
    """Near t = 1.3 s the coupler's rate hardly depends on the crank's: the cloud's angle
    spread, renewed only by dt^2/2 of the step's noise, had collapsed to 1e-4 rad about an
    angle 0.04 rad off, and no particle explained the readings after it (seed 301 refused
    with ConvergenceError after 2 restarts).  With the regularized resampling the cloud keeps
    its spread, and one restart there recovers the mode."""
    res, e, _ = _review_run("gyro-coupler", 2.0, seed=301)
    assert np.sqrt(np.mean(e[300:] ** 2)) < 0.005


@pytest.mark.parametrize("seed", [300, 309])
def test_a_loss_after_a_recovered_one_gets_its_own_restarts(seed):
    """The encoder with two bursts of readings 30 sigma off (0.5 rad), each ``patience``
    readings long (no gating), at 1.5 s and 3.0 s.  Each burst loses the mode twice in a row:
    the restart at its last reading draws about that reading, and the next one, at the true
    readings, recovers (explained for more than 1 / omega_c before the second burst): its
    cover reaches back to the state of the last explained step, which the estimate left to
    follow the burst (without that, seed 309 was refused; a regression seed picked for it,
    of the scenario's seeds 300-309, of which 9 now recover, 302 not).  The
    budget of ``max_restarts`` (2) counts restarts in a row, so the run ends with four, where a
    count over the whole run refuses at the third; the estimate after the second burst is
    back near the truth.  (First seen with the coupler gyroscope after a 4 s gap, gap
    condition seed 300; the filter no longer loses the mode there.)"""
    proto, model, q0, truth, _, _ = _review(4.5)
    t, q, qd, qdd = truth
    sensors = sensor_setups()["encoder"]
    steps, values = sensors.synthesize(proto, t, q, qd, qdd, rng=np.random.default_rng(seed))[0]
    values = np.array(values, float)
    patience = 5
    for start in (1.5, 3.0):
        burst = (steps >= round(start / DT)) & (steps < round(start / DT) + patience)
        values[burst] += 30.0 * sensors[0].sigma
    res = mbfg.estimate(model, sensors, [Readings(steps, values)], DT, len(t), method="pf",
                        seed=seed, q0=q0, qd0=np.zeros(model.n), patience=patience,
                        max_restarts=2)
    restarts = np.asarray(res.stats["restarts"]) * DT
    assert len(restarts) == 4 and np.all(np.diff(restarts)[[0, 2]] < 0.1)
    e = wrap_angle(res.q[:, 4] - q[:, 4])
    assert np.sqrt(np.mean(e[t >= 3.5] ** 2)) < 0.01
    with pytest.raises(ConvergenceError, match="1 restart"):     # one in a row is not enough
        mbfg.estimate(model, sensors, [Readings(steps, values)], DT, len(t), method="pf",
                      seed=seed, q0=q0, qd0=np.zeros(model.n), patience=patience,
                      max_restarts=1)


def test_review_crank_gyroscope_learns_the_weight_error():
    """Model gravity -8.81 against the prototype's -9.81: a weight error eps = 9.81 / 8.81 - 1
    on the model's gravity forces.  With the crank gyroscope the angle is left to the
    dynamics, and the filter's posterior of eps (its sufficient statistics per particle)
    holds the truth within 3 reported standard deviations by 3 s; the angle after 2 s is
    unbiased by the weight error (without the factor 0.010 rad on average over seeds
    100-109)."""
    truth = 9.81 / 8.81 - 1.0
    late = []
    for seed in (51, 52, 53):
        res, e, _ = _review_run("gyro-crank", 3.0, seed=seed)
        eps, sd = res.stats["weight_error"][-1], res.stats["weight_error_std"][-1]
        assert 0.0 < sd < MODEL_ERROR and abs(eps - truth) < 3.0 * sd
        late.append(np.sqrt(np.mean(e[400:] ** 2)))
    assert np.mean(late) < 0.004


def test_without_the_weight_error_no_factor_is_reported():
    """``weight_error=False`` runs the model's weights as given."""
    res, _, _ = _review_run("gyro-crank", 0.2, seed=51, weight_error=False)
    assert "weight_error" not in res.stats


def test_review_crank_gyroscope_after_a_gap_keeps_the_angles_spread():
    """Crank gyroscope, 4 s without readings (the gap condition of the review benchmark,
    seed 300).  When the readings resume, the first one's weights fall on one particle of
    the cloud spread over the turn (effective sample size 1), 0.02 rad off.  The weighted
    covariance is then degenerate: the survivor's copies kept its angle (the crank's rate does
    not correct it) and reported a spread of 1e-5 rad to the end, 0.019 rad off over
    [7 s, 10 s].  The kernel takes the predicted cloud's covariance updated by the reading
    instead, and the angle is back near the gap-free run's error (6e-4 rad) within 1 s."""
    from mbfg.model.sensors import without_readings
    proto, model, q0, truth, _, _ = _review(10.0)
    t, q, qd, qdd = truth
    sensors = sensor_setups()["gyro-crank"]
    readings = sensors.synthesize(proto, t, q, qd, qdd, rng=np.random.default_rng(300))
    gap = without_readings(readings, (t >= 2.0) & (t < 6.0))
    res = mbfg.estimate(model, sensors, gap, DT, len(t), method="pf", seed=300, q0=q0,
                        qd0=np.zeros(model.n))
    e = wrap_angle(res.q[:, 4] - q[:, 4])
    late = t >= 7.0
    assert np.sqrt(np.mean(e[late] ** 2)) < 0.002
    assert np.min(res.z_std[late, 0]) > 1e-4


def test_review_crank_gyroscope_reports_a_spread_that_holds_the_angle():
    """With the crank gyroscope the angle is left to the dynamics, and the reported spread is
    all that says how far off it may be: the 2-sigma band holds the true angle in 85-95 % of
    the steps after 0.5 s on these seeds (6 s runs; mean 0.90), where without the weighted
    Bessel correction and the exact match of the kernel the resamplings' weights collapsed
    the spread below the error (57-100 %, mean 0.77)."""
    covered = []
    for seed in (61, 62, 63, 64):
        res, e, _ = _review_run("gyro-crank", 6.0, seed=seed)
        covered.append(np.mean(np.abs(e[100:]) <= 2.0 * res.z_std[100:, 0]))
    assert np.mean(covered) >= 0.85


def test_a_gaussian_start_holds_more_particles_while_settling():
    """A Gaussian start holds SETTLING_COVER times the particles over the first 1 / omega_c
    (the readings are still separating the initial spread's modes), and the tracking count
    after it; given ``initial_particles`` equal to ``n_particles`` it holds that count."""
    _, model, _, _, _, _ = _review(1.2)
    own_time = int(np.ceil(1.0 / (noise_scales(model, [0])[1] * DT)))
    res, _, readings = _review_run("gyro-crank", 1.2, seed=65, n_particles=40)
    pop = res.stats["population"]
    assert np.all(pop[:own_time] == SETTLING_COVER * 40) and pop[-1] == 40
    res, _, _ = _review_run("gyro-crank", 1.2, seed=65, readings=readings, n_particles=40,
                            initial_particles=40)
    assert np.all(res.stats["population"] == 40)


def test_review_crank_gyroscope_with_readings_every_4th_step_keeps_the_angles_spread():
    """One crank-gyroscope reading every 4th step (the review condition "every 4th step"):
    with the denser cover while settling the 2-sigma band holds the true angle after 0.5 s in
    99-100 % of the steps on these seeds (4 s runs).  With 200 particles from the start
    (``initial_particles=200``) the cloud collapsed onto a cluster 0.007-0.011 rad beside the
    truth on each of them (coverage 0-1 %).  These are three of the seven trace seeds of
    2000-2019 (the ones the change was made on) where that happened: a regression test; the
    judgement is the 20-seed benchmark in docs/benchmarks.md."""
    covered = []
    for seed in (2006, 2009, 2018):
        res, e, _ = _review_run("gyro-crank", 4.0, seed=seed, condition="every 4th step")
        covered.append(np.mean(np.abs(e[100:]) <= 2.0 * res.z_std[100:, 0]))
    assert np.mean(covered) >= 0.85


def test_kernel_moves_keep_each_modes_mean_and_covariance():
    """The regularized resampling's moves: a cloud of two modes 20 standard deviations apart
    (the far one a fifth of the particles), resampled and moved by the kernel fitted per mode
    (Liu & West 2001).  No copy leaves its mode, and each mode's copies end with exactly the
    weighted mean of its survivors and their weighted covariance divided by 1 - sum w^2 (the
    weighted Bessel correction), computed here from the modes as drawn.  With a covariance
    given, the whole cloud is one mode with that covariance."""
    from mbfg.estimation.common import systematic_resample
    from mbfg.estimation.particle import _kernel_moves
    rng = np.random.default_rng(3)
    M = 4000
    x = rng.normal(size=(M, 2)) @ np.array([[0.3, 0.0], [0.8, 2.0]])
    far = np.arange(M) < M // 5
    x[far] += [6.0, 40.0]
    w = rng.random(M)
    w /= w.sum()
    mean = w @ x
    sel = systematic_resample(w, rng, M)
    moved = x[sel] + _kernel_moves(x - mean, w, sel, rng)
    for mode in (far, ~far):
        survivors = np.unique(sel[mode[sel]])
        wm = w[survivors] / w[survivors].sum()
        m = wm @ x[survivors]
        C = ((x[survivors] - m) * wm[:, None]).T @ (x[survivors] - m) / (1.0 - wm @ wm)
        copies = moved[mode[sel]]
        assert np.allclose(copies.mean(axis=0), m, rtol=0, atol=1e-9 * np.abs(m).max())
        assert np.allclose(np.cov(copies.T, bias=True), C, rtol=1e-9, atol=0)
        assert np.all(np.abs(copies[:, 1] - m[1]) < 10 * np.sqrt(C[1, 1]))  # none crossed
    C = np.array([[0.5, 0.2], [0.2, 3.0]])
    moved = x[sel] + _kernel_moves(x - mean, w, sel, rng, C)
    survivors = np.unique(sel)
    m = w[survivors] @ x[survivors] / w[survivors].sum()
    assert np.allclose(moved.mean(axis=0), m, rtol=0, atol=1e-9 * np.abs(m).max())
    assert np.allclose(np.cov(moved.T, bias=True), C, rtol=1e-9, atol=0)


def test_while_settling_a_mode_too_small_to_move_does_not_hold_the_others_back():
    """Over the first 1 / omega_c the kernel moves copies only while one mode can be moved:
    a main mode beside two far survivors (fewer than D + 1 = 3, whose covariance is
    degenerate) is moved, and the two survivors' copies stay where they are; beside a second
    mode of many survivors nothing moves."""
    from mbfg.estimation.common import systematic_resample
    from mbfg.estimation.particle import _kernel_moves
    rng = np.random.default_rng(5)
    M = 400
    x = rng.normal(size=(M, 2))
    x[:2] += [40.0, 0.0]                   # two far particles, heavy enough to survive
    w = np.full(M, 1.0)
    w[:2] = 20.0
    w /= w.sum()
    sel = systematic_resample(w, rng, M)
    assert np.isin([0, 1], sel).all()
    move = _kernel_moves(x - w @ x, w, sel, rng, one_mode_only=True)
    small = sel < 2
    assert np.all(move[small] == 0.0) and np.all(np.any(move[~small] != 0.0, axis=1))
    x[: M // 4] += [40.0, 0.0]             # a second mode of a hundred survivors
    w = np.full(M, 1.0 / M)
    sel = systematic_resample(w, rng, M)
    assert np.all(_kernel_moves(x - w @ x, w, sel, rng, one_mode_only=True) == 0.0)


def test_review_coupler_gyroscope_converges_from_the_wrong_angle():
    """Rates only: the pi/16 initial error is corrected through the dynamics (the Kalman
    filters reach about 0.0007 rad after 2 s on this setup)."""
    res, e, _ = _review_run("gyro-coupler", 2.5, seed=42)
    assert abs(e[0]) > 0.1                      # starts about pi/16 off
    assert np.sqrt(np.mean(e[400:] ** 2)) < 0.005
    assert np.all(np.isfinite(res.z_std))


def test_a_kidnapped_mechanism_is_an_error_not_a_result():
    """The encoder's readings jump by 1 rad at step 100 (the model cannot explain that): the
    filter restarts about its estimate, cannot recover, and raises ConvergenceError with the
    part up to the last reading it explained; it never returns the diverged estimate."""
    proto, model, q0, truth, _, _ = _review(1.5)
    sensors = sensor_setups()["encoder"]
    t, q, qd, qdd = truth
    clean = sensors.synthesize(proto, t, q, qd, qdd, rng=np.random.default_rng(43))
    v = clean[0].values.copy()
    v[100:] += 1.0
    with pytest.raises(ConvergenceError, match="pf lost the mode") as info:
        _review_run("encoder", 1.5, seed=43, readings=[Readings(clean[0].steps, v)])
    part = info.value.partial
    assert part is not None and 90 <= len(part.t) < len(t)
    e = wrap_angle(part.q[:, 4] - q[:len(part.t), 4])
    assert np.all(np.isfinite(part.q)) and np.sqrt(np.mean(e[20:100] ** 2)) < 0.02


@functools.lru_cache(maxsize=None)
def _paper(flip: bool):
    mech = mbfg.load_mechanism(mechanism_path("fourbar-pf2015"))
    q0 = mirror_branch(mech, mech.q0) if flip else mech.q0
    ref = integrate_reference(mech, 0.6, DT, q0=q0)
    return mech, ref


@pytest.mark.parametrize("flip", [False, True], ids=["upper", "lower"])
def test_2015_fourbar_branch_and_angle_from_an_unknown_start(flip):
    """Released from rest on either branch; unknown angle (a full turn), rate and branch;
    gyroscope on the longest bar (0.3 deg/s): the true branch reaches P > 0.99 within 25
    readings and keeps it, and the crank angle is then tracked to 0.3 deg."""
    mech, ref = _paper(flip)
    gyro = SensorSet([Gyroscope(body=2, sigma=np.radians(0.3))])
    readings = gyro.synthesize(mech, ref.t, ref.q, ref.qd, ref.qdd,
                               rng=np.random.default_rng(1044))
    tb = int(branch_sign(mech, ref.q[0]))
    assert np.all(branch_sign(mech, ref.q) == tb)
    res = particle_filter(mech, gyro, readings, DT, ref.t.size, seed=44, init="uniform",
                          zd_max=0.5, n_particles=200, initial_particles=1000, true_branch=tb)
    p = res.stats["branch_probability"]
    first = int(np.flatnonzero(p <= 0.99)[-1]) + 1
    assert first < 25 and np.all(p[first:] > 0.99)
    pop = res.stats["population"]
    assert pop[0] == 1000 and pop[-1] == 200
    e = np.degrees(wrap_angle(res.q[:, 4] - ref.q[:, 4]))[ref.t >= 0.3]
    assert np.sqrt(np.mean(e ** 2)) < 0.3


def test_2015_fourbar_restarts_about_its_decided_branch_at_speed():
    """A filter that has decided its branch and loses the mode while the mechanism moves
    faster than omega_c s (where a global restart would lock onto wrong modes) restarts about
    its estimate on that branch, as from a guess, and tracks on.  Lower branch, readings seed
    1114 (the one loss in 120 runs of benchmarks/particle_filter.py, seeds 100-159 per
    branch; found by that benchmark, so a regression seed): before, it raised
    ConvergenceError at 0.235 s.  Judged as the benchmark judges: 1.5 s, the angle after 0.5 s."""
    mech, _ = _paper(True)
    ref = integrate_reference(mech, 1.5, DT, q0=mirror_branch(mech, mech.q0))
    gyro = SensorSet([Gyroscope(body=2, sigma=np.radians(0.3))])
    readings = gyro.synthesize(mech, ref.t, ref.q, ref.qd, ref.qdd,
                               rng=np.random.default_rng(1114))
    tb = int(branch_sign(mech, ref.q[0]))
    res = particle_filter(mech, gyro, readings, DT, ref.t.size, seed=114, init="uniform",
                          zd_max=0.5, n_particles=200, initial_particles=1000, true_branch=tb)
    restarts = res.stats["restarts"]
    assert len(restarts) == 1 and ref.t[restarts[0]] > 0.2
    assert np.all(res.stats["population"][restarts[0]:] == 200)    # local: the tracking count
    assert np.all(res.stats["branch_probability"][restarts[0]:] > 0.99)
    e = np.degrees(wrap_angle(res.q[:, 4] - ref.q[:, 4]))[ref.t >= 0.5]
    assert np.sqrt(np.mean(e ** 2)) < 0.3


def test_defaults_come_from_the_mechanism_scales():
    """sigma_a = MODEL_ERROR omega_c^2 s with omega_c = sqrt(|g| / ell); no gravity and no
    sigma_a is a usage error, not a guess."""
    mech = mbfg.load_mechanism(mechanism_path("fourbar-pf2015"))
    s, wc = noise_scales(mech, [4])
    ell = np.sqrt(np.mean([b.length ** 2 for b in mech.spec.bodies]))
    assert s[0] == 1.0 and np.isclose(wc, np.sqrt(9.81 / ell))
    ref = integrate_reference(mech, 0.05, DT)
    gyro = SensorSet([Gyroscope(body=2, sigma=np.radians(0.3))])
    readings = gyro.synthesize(mech, ref.t, ref.q, ref.qd, ref.qdd, rng=np.random.default_rng(45))
    res = particle_filter(mech, gyro, readings, DT, ref.t.size, n_particles=20)
    assert np.isclose(res.stats["sigma_a"][0], MODEL_ERROR * wc ** 2)
    flat = build_mechanism(dataclasses.replace(mech.spec, gravity=(0.0, 0.0)))
    with pytest.raises(UsageError, match="sigma_a"):
        particle_filter(flat, gyro, readings, DT, ref.t.size, n_particles=20)


def test_reproducible_by_seed():
    res_a, _, readings = _review_run("gyro-crank", 0.2, seed=46)
    res_b, _, _ = _review_run("gyro-crank", 0.2, seed=46, readings=readings)
    res_c, _, _ = _review_run("gyro-crank", 0.2, seed=47, readings=readings)
    np.testing.assert_array_equal(res_a.q, res_b.q)
    assert not np.array_equal(res_a.q, res_c.q)


@pytest.mark.parametrize("length,mass", [(1e-3, 1e-3), (1.0, 100.0)])
def test_particles_that_diverge_in_a_gap_do_not_break_the_filter(length, mass):
    """A generated six-bar with a gap in all readings: some particles' predictions stop being
    finite in the gap (nothing resamples them away without readings).  The filter keeps them
    dead at weight zero: it ends in a result or a ConvergenceError, never numpy's
    LinAlgError, the same at a millimetre and at a metre."""
    from mbfg.testing import watched_mechanism
    w = watched_mechanism("six-bar", 31, length=length, mass=mass)
    try:
        res = mbfg.estimate(w.model, w.sensors, w.readings_with_gap(2.0, 4.0), w.dt,
                            len(w.truth.t), method="pf", q0=w.proto.q0, qd0=np.zeros(w.proto.n))
        assert np.all(np.isfinite(res.q))
    except ConvergenceError as exc:
        assert np.all(np.isfinite(exc.partial.q))


def _noisy_step(model, idx, q, z, zd, f, noise):
    """One RK4 step of states (q (N, n), z, zd (N, d), accelerations f) with the acceleration
    noise ``noise`` (N, d) held over it, as the particle filter propagates a particle:
    (IndependentState, z, zd) after the step."""
    from mbfg.model.dynamics import independent_state
    from mbfg.model.integrate import independent_step
    from mbfg.model.kinematics import solve_positions_batch
    st, z1, zd1, _ = independent_step(model, q, z, zd, f, idx, DT, method="rk4")
    z1, zd1 = z1 + 0.5 * DT * DT * noise, zd1 + DT * noise
    q1, ok = solve_positions_batch(model, st.q + np.einsum("pij,pj->pi", st.R,
                                                           z1 - st.q[:, idx]), idx, z1)
    assert ok.all()
    return independent_state(model, q1, idx, zd1), z1, zd1


def test_the_predictive_innovation_is_calibrated_for_a_spread_cloud():
    """The gate's statistic with a cloud: 200 particles and 400 truths drawn from one
    Gaussian about a moving state of the review four-bar (crank angle and rate spread by
    2 and 4 of the gyroscope's sigma in units of dt), each truth propagated one step with
    the filter's acceleration noise and read by the crank gyroscope.  The truth is then a
    draw from the cloud's predictive distribution, so its innovation's normalized square
    under that distribution (:func:`_predictive_innovation`, what the gate compares with a
    chi-square quantile and the noise adaptation and the fading with 1) is chi-square with
    1 degree of freedom: mean 1 (0.94 here, standard error 0.07).  The prior-weighted mean
    of each particle's own r^T S^-1 r, the adaptation's statistic before, is
    1 + 2 tr(S^-1 C_h) on average (C_h the spread of the predicted readings): 22 here, with
    the noise exactly right."""
    from mbfg.estimation.common import predict_readings
    from mbfg.estimation.particle import _predictive_innovation, _proposal
    from mbfg.model.dynamics import independent_state
    from mbfg.model.integrate import independent_step
    from mbfg.model.kinematics import solve_positions_batch
    _, model, _, truth, _, _ = _review(0.5)
    t, q_true, qd_true, _ = truth
    sensors = sensor_setups()["gyro-crank"]
    sigma = sensors[0].sigma
    idx = np.array([model.coordinate_index("theta0")])
    s, wc = noise_scales(model, idx)
    sa2 = (0.1 * wc * wc * s) ** 2                      # the filter's floor
    rng = np.random.default_rng(11)
    P, N = 200, 400
    k0 = int(0.3 / DT)                                  # the crank in motion
    z_sd, zd_sd = 2.0 * sigma * DT, 4.0 * sigma
    z = q_true[k0, idx] + z_sd * rng.normal(size=(P + N, 1))
    zd = qd_true[k0, idx] + zd_sd * rng.normal(size=(P + N, 1))
    q, ok = solve_positions_batch(model, np.repeat(q_true[k0][None], P + N, 0), idx, z)
    assert ok.all()
    st = independent_state(model, q, idx, zd)
    cloud, truths = st.select(np.arange(P)), st.select(np.arange(P, P + N))
    truths, _, _ = _noisy_step(model, idx, truths.q, z[P:], zd[P:], truths.zdd,
                               np.sqrt(sa2) * rng.normal(size=(N, 1)))
    sp, _, zd_read, _ = independent_step(model, cloud.q, z[:P], zd[:P], cloud.zdd, idx, DT,
                                         method="rk4")
    h, _, _ = predict_readings(model, sensors, [(0, np.zeros(1))], truths.q, truths.qd,
                               truths.qdd)
    o = h + sigma * rng.normal(size=h.shape)
    w = np.full(P, 1.0 / P)
    mixed, own = [], []
    for i in range(N):
        prop = _proposal(model, sensors, [(0, o[i])], sp, zd_read, sp.zdd, [sigma], sa2, DT)
        ybar, C, _ = _predictive_innovation(prop[6], prop[7], w)
        mixed.append(ybar @ np.linalg.solve(C, ybar))
        own.append(w @ prop[2])
    se = np.sqrt(2.0 / N)                               # standard error of 400 chi2(1)
    assert abs(np.mean(mixed) - 1.0) < 4.0 * se
    assert np.mean(own) - 1.0 > 4.0 * se


@pytest.mark.parametrize("steps", [1, 4, 8])
def test_the_noise_adaptation_counts_the_unread_steps_noise(steps):
    """Readings every few steps: the truth takes the acceleration noise at every step, read
    or not, so the innovation at a reading carries the noise of every step since the last.
    Monte-Carlo of 400 truths from one assembled state of the review four-bar (crank angle
    and rate read), each propagated ``steps`` steps as the filter propagates particles (RK4
    and the step's noise), against the noise-free prediction: the normalized innovation
    against the proposal's ``S_since`` has the readings' dimension (2) as mean (1.86,
    2.02, 2.18 for 1, 4, 8 steps), where against this step's noise alone (``nis``) it is
    3.26 after 4 steps and 5.44 after 8: the adaptation, which wants 1 per reading, read the
    unread steps' noise as too little noise and ran to its limit (10x) with the crank
    gyroscope read every 4th step."""
    from mbfg.estimation.common import predict_readings
    from mbfg.estimation.particle import _proposal
    from mbfg.model.dynamics import independent_state
    from mbfg.model.integrate import independent_step
    _, model, _, truth, _, _ = _review(0.5)
    t, q_true, qd_true, _ = truth
    sensors = SensorSet([*sensor_setups()["encoder"], *sensor_setups()["gyro-crank"]])
    idx = np.array([model.coordinate_index("theta0")])
    s, wc = noise_scales(model, idx)
    sa2 = (0.1 * wc * wc * s) ** 2                      # the filter's floor
    sig = [x.sigma for x in sensors]
    rng = np.random.default_rng(7)
    N = 400

    k0 = int(0.3 / DT)                                  # the crank in motion
    st0 = independent_state(model, q_true[k0][None], idx, qd_true[k0][None, idx])
    truths = independent_state(model, np.repeat(st0.q, N, 0), idx, np.repeat(st0.qd[:, idx],
                                                                               N, 0))
    z, zd = truths.q[:, idx], truths.qd[:, idx]
    pred, zp, zdp = st0, st0.q[:, idx], st0.qd[:, idx]
    for j in range(steps):
        truths, z, zd = _noisy_step(model, idx, truths.q, z, zd, truths.zdd,
                                    np.sqrt(sa2) * rng.normal(size=(N, 1)))
        if j < steps - 1:
            pred, zp, zdp = _noisy_step(model, idx, pred.q, zp, zdp, pred.zdd, np.zeros((1, 1)))
    # the particle's prediction to the read step, without its noise
    sp, _, zd_read, _ = independent_step(model, pred.q, zp, zdp, pred.zdd, idx, DT,
                                         method="rk4")
    dummy = [(i, np.zeros(x.dim)) for i, x in enumerate(sensors)]
    h, _, _ = predict_readings(model, sensors, dummy, truths.q, truths.qd, truths.qdd)
    o = h + np.array(sig) * rng.normal(size=h.shape)
    nis, nis_since = [], []
    for i in range(N):
        avail = [(0, o[i, :1]), (1, o[i, 1:])]
        prop = _proposal(model, sensors, avail, sp, zd_read, sp.zdd, sig, sa2, DT, steps=steps)
        nis.append(prop[2][0])
        nis_since.append(prop[6][0] @ np.linalg.solve(prop[8][0], prop[6][0]))
    se = 2.0 / np.sqrt(N)                               # standard error of 400 chi2(2)
    assert abs(np.mean(nis_since) - 2.0) < 4.0 * se
    if steps > 1:
        assert np.mean(nis) - 2.0 > 4.0 * se


def test_the_fading_brings_a_surprising_reading_to_its_mean():
    """One reading component (k = 1), where the statistic is y^2 / (C + (lambda - 1) n) with
    n = Sbar - var: within the 0.999 quantile (10.83) the factor is 1; beyond it, the lambda
    of the closed form 1 + (y^2 - C) / n, which brings the statistic to 1; capped at the
    limit.  Two components with diagonal covariances (noise parts 1 and 4): the factor
    returned brings the sum of the two components' statistics to 2."""
    from mbfg.estimation.particle import _fading
    var = np.array([0.5])
    C, Sbar = np.array([[2.0]]), np.array([[1.5]])          # spread 0.5, noise part 1.0
    assert _fading(np.array([3.0]), C, Sbar, var, 0.999, 100.0) == 1.0   # 4.5 < 10.83
    y = np.array([6.0])                                     # 36 / 2 = 18 > 10.83
    assert _fading(y, C, Sbar, var, 0.999, 100.0) == pytest.approx(1.0 + (36.0 - 2.0) / 1.0,
                                                                   rel=1e-9)
    assert _fading(y, C, Sbar, var, 0.999, 10.0) == 10.0
    assert _fading(y, C, Sbar, var, 0.999, 1.0) == 1.0      # the adaptation at its limit
    # two components, noise parts 1 and 4: statistic 36 / (2 + (l - 1)) + 4 / (2 + 4 (l - 1))
    var2 = np.array([0.5, 0.5])
    C2, Sbar2 = np.diag([2.0, 2.0]), np.diag([1.5, 4.5])
    y2 = np.array([6.0, 2.0])
    lam = _fading(y2, C2, Sbar2, var2, 0.999, 1e3)
    assert 36.0 / (1.0 + lam) + 4.0 / (4.0 * lam - 2.0) == pytest.approx(2.0, rel=1e-9)
