"""Factor-graph state estimators on the review's four-bar (three-simulation harness)."""
import numpy as np
import pytest

import mbfg
from mbfg.benchmarking.estimation_review import (review_fourbar, run_case, sensor_setups,
                                                 simulate_prototype)
from mbfg.errors import UsageError
from mbfg.estimation import (ESTIMATORS, ONLINE_FORCE_SETTINGS, EstimationResult,
                             EstimatorSettings, estimate_batch, estimate_online, register)
from mbfg.model.sensors import Gyroscope, SensorSet

DT = 0.005
T_END = 3.0


@pytest.fixture(scope="module")
def fourbar():
    proto, model, q0 = review_fourbar()
    truth = simulate_prototype(proto, T_END, DT)
    return proto, model, q0, truth


def _readings(proto, sensors, truth, seed):
    t, q, qd, qdd = truth
    return sensors.synthesize(proto, t, q, qd, qdd, rng=np.random.default_rng(seed))


@pytest.fixture(scope="module")
def encoder_runs(fourbar):
    proto, model, q0, truth = fourbar
    sensors = sensor_setups()["encoder"]
    readings = _readings(proto, sensors, truth, 1)
    n = len(truth[0])
    # the same (constant) settings for both, so that the batch is compared like for like
    online = estimate_online(model, sensors, readings, DT, n, q0=q0, covariance=True,
                             settings=EstimatorSettings())
    batch = estimate_batch(model, sensors, readings, DT, n, q0=q0, covariance=True,
                           settings=EstimatorSettings(),
                           init=np.hstack([online.q_smoothed, online.qd_smoothed,
                                           online.qdd_smoothed]))
    return online, batch


def test_model_has_the_review_errors(fourbar):
    proto, model, q0, _ = fourbar
    k = model.coordinate_index("theta0")
    assert model.gravity[1] == pytest.approx(-8.81)
    assert proto.gravity[1] == pytest.approx(-9.81)
    assert q0[k] - proto.q0[k] == pytest.approx(np.pi / 16, abs=1e-9)
    assert np.abs(model.constraints(q0)).max() < 1e-10


def test_encoder_converges_from_wrong_initial_angle(fourbar, encoder_runs):
    _, model, _, truth = fourbar
    k = model.coordinate_index("theta0")
    i0 = int(round(2.0 / DT))
    errs = {}
    for res in encoder_runs:
        assert isinstance(res, EstimationResult)
        assert res.q.shape == truth[1].shape
        e = np.abs(res.q[i0:, k] - truth[1][i0:, k])
        errs[res.name] = np.sqrt(np.mean(e ** 2))
        assert errs[res.name] < 0.01, res.name        # RMSE after 2 s
        assert e.max() < 0.03, res.name
        assert res.stats["ms_per_step"] > 0
    assert errs["fg-batch"] <= errs["fg-online"]
    online = encoder_runs[0]
    # the window-smoothed estimate is better than the causal one
    es = np.sqrt(np.mean((online.q_smoothed[i0:, k] - truth[1][i0:, k]) ** 2))
    assert es <= errs["fg-online"]


@pytest.mark.parametrize("noise_coordinates", [(), ("theta0",)])
def test_perfect_model_with_gyroscope_tracks_truth(fourbar, noise_coordinates):
    """Exact model and known initial state; process noise and priors on every coordinate or
    (like the Kalman filters) on the crank angle only, with f_ac fixing the rest."""
    proto, _, _, truth = fourbar
    sensors = SensorSet([Gyroscope(body=1, sigma=9.839e-4)])
    n = int(round(2.0 / DT)) + 1
    tr = tuple(x[:n] for x in truth)
    readings = _readings(proto, sensors, tr, 3)
    # the model is exact and the initial state known: small process noise, tight priors
    est = EstimatorSettings(sigma_dynamics=0.1, sigma_q0=1e-3, sigma_v0=1e-3,
                            noise_coordinates=noise_coordinates)
    res = estimate_online(proto, sensors, readings, DT, n, q0=proto.q0, settings=est)
    k = proto.coordinate_index("theta0")
    assert np.abs(res.q[:, k] - tr[1][:, k]).max() < 2e-3
    assert np.abs(res.qd[:, k] - tr[2][:, k]).max() < 2e-2
    assert np.abs(res.q - tr[1]).max() < 1e-2      # all coordinates


def test_covariance_consistent_with_errors(fourbar, encoder_runs):
    _, model, _, truth = fourbar
    k = model.coordinate_index("theta0")
    i0 = int(round(2.0 / DT))
    for res in encoder_runs:
        assert res.z_std.shape == (len(truth[0]), 1) and res.zd_std.shape == res.z_std.shape
        std = res.z_std[i0:, 0]
        assert np.all(std > 0)
        err = np.abs(res.q[i0:, k] - truth[1][i0:, k])
        assert np.mean(err < 4 * std) > 0.95, res.name
        # and not absurdly pessimistic
        assert np.median(std) < 20 * np.sqrt(np.mean(err ** 2)), res.name


def test_same_seed_same_result(fourbar):
    proto, model, q0, _ = fourbar
    sensors = sensor_setups()["gyro-crank"]
    a = run_case("fg-online", proto, model, sensors, 0.5, DT, seed=7, q0=q0)
    b = run_case("fg-online", proto, model, sensors, 0.5, DT, seed=7, q0=q0)
    c = run_case("fg-online", proto, model, sensors, 0.5, DT, seed=8, q0=q0)
    keys = [k for k in a if k != "ms_per_step"]
    va, vb, vc = (np.array([m[k] for k in keys]) for m in (a, b, c))
    assert np.array_equal(va, vb, equal_nan=True)
    assert not np.array_equal(va, vc, equal_nan=True)


def test_registry_accepts_new_estimators():
    assert {"fg-online", "fg-batch", "ekf", "ekf_fe", "ukf", "dekf", "pf"} <= set(ESTIMATORS)
    register("dummy-test", lambda *a, **kw: "ran", window=3)
    try:
        assert mbfg.estimate(None, None, None, 0.1, 2, method="dummy-test") == "ran"
    finally:
        del ESTIMATORS["dummy-test"]


def test_estimate_by_name_is_the_estimator_and_is_reproducible(fourbar):
    """mbfg.estimate runs a registered estimator with its defaults; same seed, same result."""
    proto, model, q0, truth = fourbar
    sensors = sensor_setups()["encoder"]
    readings = _readings(proto, sensors, truth, 3)
    n = 60
    direct = estimate_online(model, sensors, readings, DT, n, window=10, q0=q0)
    by_name = mbfg.estimate(model, sensors, readings, DT, n, method="fg-online", q0=q0)
    assert np.array_equal(direct.q, by_name.q) and by_name.name == "fg-online"
    pf = [mbfg.estimate(model, sensors, readings, DT, n, method="pf", seed=s, q0=q0,
                        n_particles=50) for s in (4, 4, 5)]
    assert np.array_equal(pf[0].q, pf[1].q) and not np.array_equal(pf[0].q, pf[2].q)
    with pytest.raises(UsageError, match="unknown estimator 'nope'.*fg-online"):
        mbfg.estimate(model, sensors, readings, DT, n, method="nope")


def test_estimated_force_state(fourbar):
    """With an unknown crank torque estimated as a random walk (like errorEKF_FE), less
    process noise suffices and the wrong gravity of the model is absorbed by the force."""
    proto, model, q0, truth = fourbar
    sensors = sensor_setups()["encoder"]
    readings = sensors.synthesize(proto, truth[0], truth[1], truth[2], truth[3],
                                  np.random.default_rng(3))
    settings = EstimatorSettings(sigma_dynamics=2.0, force_coordinates=("theta0",),
                                 sigma_force_walk=0.5)
    res = estimate_online(model, sensors, readings, DT, truth[0].size, q0=q0, settings=settings)
    k = model.coordinate_index("theta0")
    i0 = int(round(2.0 / DT))
    assert np.sqrt(np.mean((res.q[i0:, k] - truth[1][i0:, k]) ** 2)) < 0.01


def test_batch_force_estimate_removes_gravity_bias_seen_by_rate_sensor(fourbar):
    """A crank gyroscope cannot see the position bias that the model's wrong gravity causes;
    estimating a crank torque as a random walk (fg-batch+force) or the weight error of the
    scale-derived default (fg-batch) removes it; the constant settings without a force state
    (fg-batch-plain) keep it."""
    import warnings
    proto, model, q0, truth = fourbar
    sensors = sensor_setups()["gyro-crank"]
    k = model.coordinate_index("theta0")
    i0 = int(round(2.0 / DT))
    errs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name in ("fg-batch-plain", "fg-batch+force", "fg-batch"):
            m = run_case(name, proto, model, sensors, T_END, DT, 2, q0=q0)
            errs[name] = m["pos_rmse_after"]
    assert errs["fg-batch+force"] < 0.5 * errs["fg-batch-plain"], errs
    assert errs["fg-batch"] < 0.5 * errs["fg-batch-plain"], errs


def test_point_force_state_learns_the_gravity_error(fourbar):
    """A slowly varying force on every point coordinate (``force_coordinates="points"``) can
    represent the model's wrong gravity exactly: in natural coordinates the gravity
    generalized force is a constant vector.  Only its component along the motion acts, the
    generalized force on the crank angle R^T Q (R = dq/dtheta0); after the first second of
    the swing it must match R^T (Qg_prototype - Qg_model) of the two gravities."""
    from mbfg.model.kinematics import velocity_transform
    proto, model, q0, truth = fourbar
    sensors = sensor_setups()["encoder"]
    readings = _readings(proto, sensors, truth, 4)
    n = len(truth[0])
    res = estimate_online(model, sensors, readings, DT, n, q0=q0, settings=ONLINE_FORCE_SETTINGS)
    assert res.Q.shape == (n, model.n)
    k = model.coordinate_index("theta0")
    assert np.all(res.Q[:, k] == 0.0)          # no force state on the angle itself
    dQ = proto.gravity_forces() - model.gravity_forces()
    i0 = int(round(1.0 / DT))
    R = velocity_transform(model, truth[1][i0:], [k])[0][:, :, 0]
    true_torque = R @ dQ
    est_torque = np.einsum("ti,ti->t", R, res.Q[i0:])
    rms = lambda x: float(np.sqrt(np.mean(x ** 2)))  # noqa: E731
    assert rms(true_torque) > 1.0                    # the error is not negligible
    assert rms(est_torque - true_torque) < 0.3 * rms(true_torque), (
        rms(est_torque - true_torque), rms(true_torque))


def test_force_coordinate_names():
    from mbfg.errors import UsageError
    from mbfg.graphs.estimation import EstimatorSettings, ObservedProblem
    _, model, _ = review_fourbar()
    names = model.coordinate_names

    def problem(coords):
        return ObservedProblem(model, (), [], 10, EstimatorSettings(force_coordinates=coords),
                               DT)
    pts = problem("points").force_indices
    assert [names[i] for i in pts] == ["x1", "y1", "x2", "y2"]
    assert problem(("theta0", 1)).force_indices == (names.index("theta0"), 1)
    with pytest.raises(UsageError, match="points"):
        problem("all")


def test_default_online_settings_come_from_the_mechanism_scales():
    """fg-online's default noise, priors and weight-error state are derived from the
    mechanism (characteristic length ell, omega_c = sqrt(g / ell), gravity forces) and dt;
    without gravity the plain settings (no force state) are used."""
    import dataclasses

    from mbfg.graphs.estimation import (INITIAL_SPREAD, MODEL_ERROR, WEIGHT_TIME,
                                        scaled_settings)
    from mbfg.model import build_mechanism
    _, model, _ = review_fourbar()
    st = scaled_settings(model, DT)
    ell = np.sqrt(np.mean([b.length ** 2 for b in model.spec.bodies]))
    w = np.sqrt(8.81 / ell)
    s = np.where(np.arange(model.n) == model.coordinate_index("theta0"), 1.0, ell)
    np.testing.assert_allclose(st.sigma_dynamics, MODEL_ERROR * w ** 2 * s)
    np.testing.assert_allclose(st.sigma_q0, INITIAL_SPREAD * s)
    np.testing.assert_allclose(st.sigma_v0, INITIAL_SPREAD * w * s)
    names = [model.coordinate_names[i] for i in st.force_coordinates]
    assert names == ["y1", "y2"]                 # gravity acts on the points' y only
    Qg = model.gravity_forces()[list(st.force_coordinates)]
    np.testing.assert_allclose(st.sigma_force0, MODEL_ERROR * np.abs(Qg))
    np.testing.assert_allclose(st.sigma_force_walk, st.sigma_force0 * np.sqrt(DT / WEIGHT_TIME))
    assert st.sigma_weight == MODEL_ERROR
    # the same settings are what estimate_online (and the registry's fg-online) use by default
    proto, _, q0 = review_fourbar()
    sensors = sensor_setups()["gyro-crank"]
    truth = simulate_prototype(proto, 0.2, DT)
    readings = _readings(proto, sensors, truth, 5)
    n = len(truth[0])
    a = mbfg.estimate(model, sensors, readings, DT, n, method="fg-online", q0=q0)
    b = estimate_online(model, sensors, readings, DT, n, q0=q0, settings=st)
    np.testing.assert_array_equal(a.q, b.q)
    assert a.Q is not None and np.any(a.Q != 0.0)
    flat = build_mechanism(dataclasses.replace(model.spec, gravity=(0.0, 0.0)))
    plain = scaled_settings(flat, DT)
    assert plain == EstimatorSettings()


def test_weight_prior_is_correlated_along_gravity():
    """sigma_weight adds the fully correlated part sigma_weight Q_g to the force prior: the
    whitened prior's covariance is diag(sigma_force0^2) + sigma_weight^2 Q_g Q_g^T."""
    from mbfg.graphs.estimation import ObservedProblem
    _, model, q0 = review_fourbar()
    idx = (1, 3)
    st = EstimatorSettings(force_coordinates=idx, sigma_force0=np.array([2.0, 3.0]),
                           sigma_weight=0.1)
    prob = ObservedProblem(model, (), [], 10, st, DT)
    prior = prob.initial_priors(q0, np.zeros(model.n))[-1]
    A = prior.A @ prob.layout.selector("Q").T            # whitening matrix of the Q slot
    C = np.linalg.inv(A.T @ A)
    g = model.gravity_forces()[list(idx)]
    np.testing.assert_allclose(C, np.diag([4.0, 9.0]) + 0.01 * np.outer(g, g), rtol=1e-10)


def _online_smoother(fourbar, elimination, seconds=1.0):
    """A fixed-lag estimator's smoother as estimate_online builds it, run for ``seconds``."""
    from mbfg.estimation.graph_estimators import _setup
    from mbfg.solvers.smoother import FixedLagSmoother
    proto, model, q0, truth = fourbar
    sensors = sensor_setups()["gyro-coupler"]
    n = int(round(seconds / DT)) + 1
    readings = _readings(proto, sensors, tuple(x[:n] for x in truth), 3)
    est, q0, qd0, problem = _setup(model, sensors, readings, DT, n, None, q0, None)
    sm = FixedLagSmoother(problem, 10, max_iterations=est.max_iterations,
                          relative_tolerance=est.relative_tolerance,
                          absolute_tolerance=est.accept_decrease, reselect=None,
                          on_failure="best", elimination=elimination)
    sm.initialize(q0, qd0)
    return sm, sm.run(n - 1), model


def test_cholesky_window_solves_agree_with_qr(fourbar):
    """The online estimator eliminates its windows by Cholesky: the estimates agree with QR's
    far below the estimation error (1e-8 of the mechanism's size and of the largest rate;
    measured 1.4e-11 and 8e-12)."""
    from mbfg.model.scales import mechanism_scales
    sm_qr, X_qr, model = _online_smoother(fourbar, "qr")
    sm_ch, X_ch, _ = _online_smoother(fourbar, "cholesky")
    lay, L = sm_qr.layout, mechanism_scales(model).length
    q_qr, q_ch = X_qr[:, lay.slice("q")], X_ch[:, lay.slice("q")]
    assert np.max(np.abs(q_ch - q_qr)) < 1e-8 * L
    v_qr, v_ch = X_qr[:, lay.slice("v")], X_ch[:, lay.slice("v")]
    assert np.max(np.abs(v_ch - v_qr)) < 1e-8 * np.max(np.abs(v_qr))
    assert sm_ch.iterations == sm_qr.iterations


def test_cholesky_failure_falls_back_to_qr(fourbar, monkeypatch):
    """A window gtsam's Cholesky finds indefinite is solved by QR (the same result as QR's, and
    counted); an update that raises the linear model's error is also redone by QR; any other
    gtsam error is not hidden."""
    import gtsam

    from mbfg.solvers.smoother import FixedLagSmoother
    sm_qr, X_qr, _ = _online_smoother(fourbar, "qr", 0.2)

    class Indefinite:
        def optimize(self, ordering):
            raise RuntimeError("Indeterminate linear system detected while working near "
                               "variable 0")

    real = FixedLagSmoother._cholesky_step
    monkeypatch.setattr(FixedLagSmoother, "_cholesky_step",
                        lambda self, g, keys, err: real(self, Indefinite(), keys, err))
    sm_fb, X_fb, _ = _online_smoother(fourbar, "cholesky", 0.2)
    assert np.array_equal(X_fb, X_qr)
    assert sm_fb.cholesky_fallbacks > 0 and sm_qr.cholesky_fallbacks == 0

    class Uphill:  # an "update" that increases the linear model's error
        def optimize(self, ordering):
            return self.g.optimize(gtsam.EliminateQR).scale(-1.0)

        def error(self, delta):
            return self.g.error(delta)

    def uphill(self, g, keys, err):
        u = Uphill()
        u.g = g
        return real(self, u, keys, err)
    monkeypatch.setattr(FixedLagSmoother, "_cholesky_step", uphill)
    _, X_up, _ = _online_smoother(fourbar, "cholesky", 0.2)
    assert np.array_equal(X_up, X_qr)

    monkeypatch.setattr(FixedLagSmoother, "_ordering", lambda self, keys: gtsam.Ordering([]))
    monkeypatch.setattr(FixedLagSmoother, "_cholesky_step", real)
    with pytest.raises(RuntimeError, match="inconsistent"):
        _online_smoother(fourbar, "cholesky", 0.2)


def test_invalid_elimination(fourbar):
    from mbfg.solvers.smoother import FixedLagSmoother
    sm, _, _ = _online_smoother(fourbar, "qr", 0.02)
    with pytest.raises(ValueError, match="elimination must be 'qr' or 'cholesky'"):
        FixedLagSmoother(sm.problem, 2, elimination="lu")


def test_the_prototype_cache_does_not_hand_a_freed_prototypes_motion_to_a_new_one(monkeypatch):
    """simulate_prototype caches per mechanism; an id alone is reused once the first object is
    freed, and the studies test then compared a condition against another one's motion (an
    intermittent 2.6e-3 difference)."""
    import gc
    from types import SimpleNamespace

    import mbfg.model.integrate as integrate
    from mbfg.benchmarking import estimation_review as ER

    def fake(mech, t_end, dt, **_):
        z = np.full(2, float(mech.tag))
        return SimpleNamespace(t=z, q=z, qd=z, qdd=z)

    class Proto:
        def __init__(self, tag):
            self.tag = tag

    monkeypatch.setattr(integrate, "integrate_reference", fake)
    monkeypatch.setattr(ER, "_PROTO_CACHE", {})
    for tag in range(1, 50):  # CPython hands a freed address to the next object of its size
        proto = Proto(tag)
        assert ER.simulate_prototype(proto, 0.1, 0.01)[1][0] == float(tag)
        del proto
        gc.collect()
