"""The Kalman filters and the particle filter on generated mechanisms nobody here wrote, at a
centimetre and gram scale and at metres and hundreds of kilograms (issue 14: correct on the
users' mechanisms, no units in the numbers).

The truth is the prototype simulated by DOP853 at tight tolerance
(:func:`mbfg.testing.watched_mechanism`); the filters' model has gravity 10 % weak; markers on
every moving point (sigma 3e-3 of the length) and a gyroscope on body 0.

- The double-rocker's first independent coordinate (its crank angle) passes a dead point of
  the crank (quality 0.002 at step 210); the five-bar's first pair nearly loses rank (3e-4 at
  step 237).  With the coordinates fixed, ekf_fe, dekf and the UKF diverged there (the UKF with
  numpy's LinAlgError) and the particle filter refused; the filters now move to a
  better-conditioned set (:class:`mbfg.model.partition.StatePartition`).
- The five-bar has two independent coordinates: no particle of the prior's draw explained its
  first marker readings, and the particle filter refused at step 0; its start is now informed
  by them.
- With the review's noise values in rad and s, the Kalman filters were 10-30x worse at 1 cm than
  at 4 m; the values now follow the mechanism's scales.
"""
import functools

import numpy as np
import pytest

import mbfg
from mbfg.errors import ConvergenceError
from mbfg.estimation import kalman as KF
from mbfg.estimation.common import error_map
from mbfg.estimation.particle import default_branch_points
from mbfg.model import constraints as C
from mbfg.model.dynamics import independent_state
from mbfg.model.kinematics import choose_independent_coordinates, solve_positions_batch
from mbfg.model.partition import best_coordinates
from mbfg.model.scales import constraint_scales, coordinate_scales
from mbfg.testing import check_jacobian, watched_mechanism

SCALES = [(1e-2, 1e-3), (4.0, 200.0)]
MARKER_SIGMA = 3e-3   # of the length, watched_mechanism's markers


@functools.lru_cache(maxsize=None)
def _watched(family, length, mass):
    return watched_mechanism(family, 31, length=length, mass=mass)


def _rmse(w, method, **options):
    """RMSE of the point coordinates over the mechanism's length, and the result."""
    r = mbfg.estimate(w.model, w.sensors, w.readings, w.dt, len(w.truth.t), method=method,
                      q0=w.proto.q0, qd0=np.zeros(w.proto.n), **options)
    err = r.q[:, w.points] - w.truth.q[:, w.points]
    return float(np.sqrt(np.mean(err ** 2))) / w.ell, r


@pytest.mark.parametrize("method", ["ekf", "ekf_fe", "ukf", "dekf", "pf"])
@pytest.mark.parametrize("family", ["double-rocker", "five-bar"])
def test_filters_track_where_their_first_coordinates_turn_singular(family, method):
    """Below the markers' sigma at both scales (the DEKF, forward Euler over dt = 0.02 /
    omega_c: below three sigmas), and the same error at both scales."""
    errors = []
    for length, mass in SCALES:
        err, res = _rmse(_watched(family, length, mass), method)
        assert np.all(np.isfinite(res.z_std)) and np.all(np.isfinite(res.zd_std))
        assert res.stats["switches"], "the coordinates were expected to change"
        errors.append(err)
    bound = (3.0 if method == "dekf" else 1.0) * MARKER_SIGMA
    assert max(errors) < bound, errors
    if method == "pf":  # (rounding can flip a resampling draw: another random path)
        assert max(errors) < 1.5 * min(errors), errors
    else:
        assert errors[0] == pytest.approx(errors[1], rel=1e-3), errors


def test_fixed_coordinates_fail_with_a_typed_error():
    """``repartition=False`` keeps the first coordinates: through the double-rocker's dead
    point the UKF breaks down, and says so with a ConvergenceError and what it computed
    before (at 1 m / 100 kg it raised numpy's LinAlgError from its Cholesky factor)."""
    w = _watched("double-rocker", 4.0, 200.0)
    with pytest.raises(ConvergenceError, match="not finite from step") as info:
        mbfg.estimate(w.model, w.sensors, w.readings, w.dt, len(w.truth.t), method="ukf",
                      q0=w.proto.q0, qd0=np.zeros(w.proto.n), repartition=False)
    part = info.value.partial
    assert part is not None and len(part.q) > 0 and np.all(np.isfinite(part.q))


def test_particle_filter_without_a_branch_dyad():
    """A generated chain has no free point joined to a free and a fixed one: there is no
    branch label to track (it raised ValueError before), and the filter tracks."""
    w = _watched("chain-1", 4.0, 200.0)
    assert default_branch_points(w.model) == ()
    err, res = _rmse(w, "pf")
    assert err < MARKER_SIGMA, err
    np.testing.assert_allclose(res.stats["p_branch_plus"], 1.0, rtol=1e-12)


def test_particle_filter_start_is_informed_by_precise_first_readings():
    """Where no particle of the prior's draw explains the first readings (precise markers on
    the five-bar's two coordinates, 200 particles from the start) the readings inform the
    positions; the default denser cover over the first 1 / omega_c (1000) has a particle
    that explains them and needs no informed start."""
    w = _watched("five-bar", 4.0, 200.0)
    err, res = _rmse(w, "pf", initial_particles=200)
    assert res.stats["informed_start"] and err < MARKER_SIGMA, err
    err, res = _rmse(w, "pf")
    assert not res.stats["informed_start"] and err < MARKER_SIGMA, err
    _, res = _rmse(_watched("crank-rocker", 4.0, 200.0), "pf")
    assert not res.stats["informed_start"]    # one coordinate: the prior's draw covers it


def test_error_map_is_the_derivative_along_the_manifold():
    """error_map's first two block rows are the derivative of (q[j], qdot[j]) with respect
    to (z, zdot) along the constraint manifold, checked by central differences."""
    w = _watched("five-bar", 4.0, 200.0)
    model, k = w.model, 150
    q, qd = w.truth.q[k], w.truth.qd[k]
    idx = np.array(choose_independent_coordinates(model, q))     # angles first
    new = np.array(best_coordinates(model, q, coordinate_scales(model))[0])
    assert not np.array_equal(idx, new)
    d = idx.size
    st = independent_state(model, q[None], idx, qd[None, idx])

    def f(x):
        qz, ok = solve_positions_batch(model, q[None], idx, x[None, :d])
        assert ok[0]
        s = independent_state(model, qz, idx, x[None, d:])
        return np.concatenate([s.q[0, new], s.qd[0, new]])

    x0 = np.concatenate([q[idx], qd[idx]])
    check_jacobian(f, x0, error_map(model, st, new, 2), name="error_map", rtol=1e-6)


def test_review_noise_is_the_review_values_on_its_model_and_unit_free_elsewhere():
    from mbfg.benchmarking.estimation_review import review_fourbar
    from mbfg.estimation.common import white_acceleration_noise
    _, model, _ = review_fourbar()
    idx = [model.coordinate_index("theta0")]
    P0, SigP = KF.review_noise(model, idx, 0.005)
    assert np.array_equal(P0, 0.0076 * np.eye(2))                  # review Sect. 12.1
    assert np.array_equal(SigP, white_acceleration_noise(9.162e-2, 0.005, 1))
    P0, SigP = KF.review_noise(model, idx, 0.005, force_state=True)
    assert SigP[2, 2] == 2.291e-3 and np.array_equal(P0, 0.0076 * np.eye(3))
    # the same mechanism at 1 cm and at 4 m: the same noise in its own units
    out = []
    for length, mass in SCALES:
        w = _watched("six-bar", length, mass)
        i = [int(w.points[0])]                       # a point coordinate (scale ell)
        wc, dt = w.omega_c, w.dt
        unit = np.array([w.ell, w.ell * wc, w.ell * wc ** 2])
        P0, SigP = KF.review_noise(w.model, i, dt, force_state=True)
        out.append((P0 / np.outer(unit, unit), SigP / np.outer(unit, unit)))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-12)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-12, atol=0.0)


def test_an_estimate_off_the_constraints_is_refused():
    """A finite estimate that leaves the model's constraints is a breakdown, not a result (the
    DEKF returned one 6e20 lengths off on the generated six-bar before the coordinates moved):
    ConvergenceError from the first such step, the steps before it as ``partial``."""
    import dataclasses

    from mbfg.estimation.registry import MANIFOLD_LIMIT, _checked
    w = _watched("crank-rocker", 4.0, 200.0)
    _, res = _rmse(w, "ekf")
    assert _checked(res, w.model) is res
    q = res.q.copy()
    q[120:, w.points[0]] += 5 * MANIFOLD_LIMIT * w.ell
    with pytest.raises(ConvergenceError, match="leaves the constraints .* from step 120"
                       ) as info:
        _checked(dataclasses.replace(res, q=q), w.model)
    assert len(info.value.partial.q) == 120


def test_sigma_points_do_not_depend_on_the_units():
    """The UKF's sigma points of a covariance mixing a 1 mm length, an angle and their rates
    (variances 1e12 apart) are those of the same covariance in other units, rescaled: the UKF
    on the generated five-bar broke down at 1 mm (not positive definite one step after its
    coordinates moved) and tracked at 1 cm and 1 m."""
    from mbfg.estimation.common import sigma_points
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    P1 = A @ A.T + 1e-9 * np.eye(4)        # nearly singular, as after a change of coordinates
    unit = np.array([1e-3, 1.0, 1e-1, 30.0])
    X1 = sigma_points(np.zeros(4), P1, 2.0)
    Xu = sigma_points(np.zeros(4), P1 * np.outer(unit, unit), 2.0)
    np.testing.assert_allclose(Xu, X1 * unit, rtol=1e-9, atol=1e-12 * np.max(np.abs(X1 * unit)))


def test_the_particle_filter_survives_a_particle_at_a_singular_configuration():
    """The generated shaper (seed 34) read by its gyroscope: at 4 m / 200 kg one particle's
    step meets a configuration where its held coordinate turns back, and the whole filter
    used to stop with numpy's LinAlgError (a traceback, not a typed error).  That particle is
    lost alone now: the run ends, the same at 1 cm / 1 g and at 4 m / 200 kg in units of the
    length."""
    from mbfg.testing import watched_mechanism
    late = []
    for length, mass in [(1e-2, 1e-3), (4.0, 200.0)]:
        w = watched_mechanism("shaper", 34, length=length, mass=mass, gyroscope_only=True)
        res = mbfg.estimate(w.model, w.sensors, w.readings, w.dt, len(w.truth.t), method="pf",
                            q0=w.proto.q0, qd0=np.zeros(w.proto.n))
        tail = slice(len(w.truth.t) * 5 // 6, None)
        err = res.q[tail][:, w.points] - w.truth.q[tail][:, w.points]
        late.append(float(np.sqrt(np.mean(err ** 2))) / w.ell)
    assert np.isfinite(late).all(), late
    np.testing.assert_allclose(late[0], late[1], rtol=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 0.3, 2.0 ** -10])
def test_unscented_moments_are_the_weighted_sums(alpha):
    """The moments taken about the central sigma point are the review's weighted sums
    (Eqs. 38-39, 42-43) written out here, for the usual spread and a small one; at a small
    spread those sums cancel between weights of -1/alpha^2 and +1/alpha^2, so the reference
    is evaluated in extended precision.  Their covariance stays positive semi-definite."""
    from mbfg.estimation.common import sigma_points, unscented_moments, unscented_weights
    rng = np.random.default_rng(5)
    l, m = 4, 3
    A = rng.normal(size=(l, l))
    P = A @ A.T
    Wm, Wc, zeta = unscented_weights(l, alpha, 2.0, 0.0)
    X = sigma_points(rng.normal(size=l), P, zeta)
    Y = np.tanh(X[:, :m] @ rng.normal(size=(m, m))) + X[:, 1:m + 1] ** 2   # a curved map
    Xe, Ye, We, Wce = (np.asarray(a, np.longdouble) for a in (X, Y, Wm, Wc))
    ybar = We @ Ye
    cov = ((Wce[:, None] * (Ye - ybar)).T @ (Ye - ybar)).astype(float)
    cross = ((Wce[:, None] * (Xe - We @ Xe)).T @ (Ye - ybar)).astype(float)
    mean, c, x = unscented_moments(Wm, Wc, Y, X)
    scale = np.max(np.abs(Y))
    tol = 1e-12 * scale / alpha ** 2 if np.finfo(np.longdouble).eps < 1e-17 else 1e-6
    np.testing.assert_allclose(mean, ybar.astype(float), atol=tol)
    np.testing.assert_allclose(c, cov, atol=tol * scale)
    np.testing.assert_allclose(x, cross, atol=tol * np.max(np.abs(X)))
    assert np.linalg.eigvalsh(c).min() >= -1e-12 * np.linalg.eigvalsh(c).max()


def test_first_order_unscented_moments_are_exact_for_a_linear_map():
    """For Y = X A^T + b the first-order moments are the linear map's: mean x A^T + b,
    covariance A P A^T, cross-covariance P A^T (any spread)."""
    from mbfg.estimation.common import sigma_points, unscented_moments, unscented_weights
    rng = np.random.default_rng(6)
    l, m = 4, 2
    B = rng.normal(size=(l, l))
    P = B @ B.T
    A, b, x = rng.normal(size=(m, l)), rng.normal(size=m), rng.normal(size=l)
    for alpha in (1.0, 1e-3):
        Wm, Wc, zeta = unscented_weights(l, alpha, 2.0, 0.0)
        X = sigma_points(x, P, zeta)
        mean, cov, cross = unscented_moments(Wm, Wc, X @ A.T + b, X, first_order=True)
        np.testing.assert_allclose(mean, A @ x + b, rtol=1e-12, atol=1e-12)
        APA = A @ P @ A.T
        np.testing.assert_allclose(cov, APA, rtol=1e-6, atol=1e-9 * np.abs(APA).max())
        np.testing.assert_allclose(cross, P @ A.T, rtol=1e-6, atol=1e-9 * np.abs(P).max())


@pytest.mark.parametrize("length,mass", [(1e-2, 1e-3), (4.0, 200.0)])
def test_a_correction_past_a_turning_point_goes_as_far_as_the_mechanism(length, mass):
    """The EKF family's position correction asked past the turning point of its held point
    coordinate (the first readings after a gap on a rocker) used to leave the constraints
    (the linearized Eq. 76 as a fallback) and the run ended as diverged.  It is now taken
    in halves until the position problem has a solution: on the constraint manifold, at
    z + part dz with part a power of 1/2, and the part is unit-free."""
    w = _watched("double-rocker", length, mass)
    q = w.truth.q[:1]
    s = coordinate_scales(w.model)
    k = int(np.argmax(np.ptp(w.truth.q[:, w.points], axis=0)))
    j = int(w.points[k])                              # the point coordinate that moves most
    idx = np.array([j])
    z = q[:, idx][0]
    dz = np.array([20.0 * s[j]])                     # far past the coordinate's reach
    assert not solve_positions_batch(w.model, q, idx, z + dz)[1][0]
    qn, part = KF._corrected_positions(w.model, q, idx, z, dz)
    assert 0.0 < part < 1.0 and np.log2(part) == np.round(np.log2(part)), part
    np.testing.assert_allclose(qn[0, j], z[0] + part * dz[0], rtol=0, atol=1e-9 * s[j])
    off = np.abs(C.position_constraints(w.model, qn[0])) / constraint_scales(w.model, qn[0])
    assert np.max(off) < 1e-9, off
    _, ok = solve_positions_batch(w.model, q, idx, z + 2 * part * dz)
    assert not ok[0]
