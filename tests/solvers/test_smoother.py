"""Fixed-lag smoother for forward dynamics (paper Sect. 5.1-5.2, 7.1)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import load
from mbfg.errors import ConvergenceError
from mbfg.model import constraints as C
from mbfg.model.dynamics import forward_dynamics
from mbfg.model.integrate import integrate_reference
from mbfg.drivers.forward_dynamics import make_problem, simulate_batch
from mbfg.model.kinematics import release_state
from mbfg.model.scales import mechanism_scales
from mbfg.drivers.forward_dynamics import simulate_smoother
from mbfg.solvers.smoother import FixedLagSmoother, prediction_matrix


@functools.lru_cache(maxsize=None)
def fourbar_reference(t_end=5.0, dt=1e-3):
    return integrate_reference(load("fourbar"), t_end, dt, rtol=1e-12, atol=1e-12).q


def rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


#: q RMSE bound [m] of the four-bar's 5 s run per rule.  Measured: the trapezoidal rule
#: 0.0076 mm (dependent) and 0.011 mm (independent: natural coordinates as z, with
#: re-partitioning at each coordinate's singular configurations; O(dt^2)); the Hermite
#: rule (the default) 2.4e-8 and 1.6e-8 mm (O(dt^4))
FOURBAR_RMSE = {"trapezoidal": 1e-4, "hermite": 1e-9}


@pytest.mark.parametrize("integrator", list(FOURBAR_RMSE))
@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_fourbar_5s_matches_reference(coords, integrator):
    """The paper's run: four-bar from rest, dt = 1 ms, 5 s, N_w = 2."""
    mech = load("fourbar")
    res = simulate_smoother(mech, 5.0, 1e-3, coords=coords, window=2, integrator=integrator)
    ref = fourbar_reference()
    assert res.q.shape == ref.shape == (5001, 4)
    err = rmse(res.q, ref)
    assert err <= FOURBAR_RMSE[integrator], f"q RMSE {err * 1e3:.4f} mm"
    phi = np.linalg.norm(C.position_constraints(mech, res.q), axis=1)
    assert phi.max() <= 1e-6
    assert res.velocity_residual.max() <= 1e-6
    st = res.stats
    assert st["solver"] == "smoother" and st["window"] == 2 and st["converged"]
    assert st["steps"] == 5000 and st["iterations"] >= 5000
    assert st["ms_per_step"] == pytest.approx(1e3 * st["seconds"] / 5000)
    if coords == "independent":
        assert st["switches"], "y1 passes its singular configuration: the smoother must switch"
        np.testing.assert_allclose(res.z, res.q[:, list(res.indices)], atol=1e-9)


@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_smoother_equals_batch(coords):
    mech = load("fourbar")
    T = 0.2
    batch = simulate_batch(mech, T, 1e-3, coords=coords)
    N = batch.q.shape[0]
    # a window holding every step never marginalizes: its last solve is the batch solve
    full = simulate_smoother(mech, T, 1e-3, coords=coords, window=N)
    np.testing.assert_allclose(full.q, batch.q, rtol=0, atol=1e-8)
    np.testing.assert_allclose(full.qd, batch.qd, rtol=0, atol=1e-8)
    # with marginalization: fixed-lag estimates agree with the full smoothing solution
    # (measured 3e-11 m dependent, 4e-10 m independent)
    for w in (1, 2, 5):
        res = simulate_smoother(mech, T, 1e-3, coords=coords, window=w)
        np.testing.assert_allclose(res.q, batch.q, rtol=0, atol=1e-7)
        np.testing.assert_allclose(res.qd, batch.qd, rtol=0, atol=1e-6)


def test_window_of_one_step_keeps_the_coordinate_choice():
    """Dependent coordinates: each link integrates the coordinates chosen with hysteresis from
    the link before it.  A window of one step used to start every link's choice afresh (the
    link before had already left with the marginal prior), so near t = 0.3 s it kept
    coordinates the batch graph and longer windows switch away from, and the trajectories
    parted by 5.8e-7 m (measured; with the choice carried on: 1.7e-13 m, like longer windows)."""
    mech = load("fourbar")
    T = 0.4
    scale = make_problem(mech, 1e-3, "dependent", "trapezoidal", None,
                         release_state(mech)[0]).scales.coordinates
    batch = simulate_batch(mech, T, 1e-3, integrator="trapezoidal")
    for w in (1, 2):
        res = simulate_smoother(mech, T, 1e-3, window=w, integrator="trapezoidal")
        worst = float(np.max(np.abs(res.q - batch.q) / scale))
        assert worst <= 1e-10, (w, worst)


@pytest.mark.parametrize("integrator", ["trapezoidal", "hermite"])
@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_links_held_together_give_the_rows_they_replace(integrator, coords):
    """The window's links and the link into its row 0 from the held step are evaluated in one
    call (HeldLinks); its two views must give the rows of the HeldPredecessor and of the
    window's link term they stand for: blocks, sparse entries, errors and held changes."""
    from mbfg.solvers.smoother import HeldPredecessor

    mech = load("fourbar")
    q0, v0 = release_state(mech)
    problem = make_problem(mech, 1e-3, coords, integrator, None, q0)
    sm = FixedLagSmoother(problem, window=3, step_tolerance=problem.settings.step_tolerance)
    sm.initialize(q0, v0)
    for _ in range(40):
        sm.advance()
    W = sm.W
    steps = np.arange(sm.first, sm.first + W.shape[0])
    plain = sm.prior + problem.window_terms(steps, np.array(sm.links), incoming=sm._incoming)
    together = sm._held_together(plain, steps)
    assert isinstance(plain[0], HeldPredecessor)
    replaced = [i for i, (a, b) in enumerate(zip(plain, together)) if a is not b]
    assert len(together) == len(plain) and len(replaced) == 2
    rng = np.random.default_rng(0)
    W1 = W + 1e-6 * problem.step_scale.clip(max=1e3) * rng.standard_normal(W.shape)
    for i in replaced:
        a, b = plain[i], together[i]
        assert a.arity == b.arity
        (ra, Aa, ea), (rb, Ab, eb) = a.blocks(W1), b.blocks(W1)  # off the solution
        np.testing.assert_array_equal(ra, rb)
        # the Hermite jerk of a state within JERK_REUSE of a recent one is reused, so the
        # whitened rows may differ by far less than the solves' tolerance
        np.testing.assert_allclose(eb, ea, rtol=0, atol=problem.settings.step_tolerance)
        for x, y in zip(Aa, Ab):
            np.testing.assert_allclose(y, x, rtol=1e-14, atol=1e-14 * np.abs(x).max())
        ca, cb = (sorted(zip(*(np.asarray(v).ravel() for v in t.coo(W1)[:3])))
                  for t in (a, b))
        np.testing.assert_array_equal([c[:2] for c in ca], [c[:2] for c in cb])
        np.testing.assert_allclose([c[2] for c in cb], [c[2] for c in ca], rtol=1e-14,
                                   atol=1e-14 * max(abs(c[2]) for c in ca))
        assert b.error(W1) == pytest.approx(a.error(W1), rel=1e-9)
        held_a = a.held_change(W, W1) if hasattr(a, "held_change") else None
        if held_a is not None and i > 0:
            assert b.held_change(W, W1) >= held_a * (1 - 1e-13)
    # switched to the jerk's exact derivatives at the same point, the views must not return
    # what they remembered in the held mode
    a, b = plain[replaced[-1]], together[replaced[-1]]
    b.blocks(W1)  # remembered in the held mode
    changed = a.linearize_exactly(True)
    assert b.linearize_exactly(True) == changed
    np.testing.assert_allclose(b.blocks(W1)[1][0], a.blocks(W1)[1][0], rtol=1e-12,
                               atol=1e-12 * np.abs(a.blocks(W1)[1][0]).max())
    if changed:
        assert b.held_change(W, W1) == 0.0
    a.linearize_exactly(False)
    b.linearize_exactly(False)


def test_marginal_prior_is_exact_for_linear_terms():
    """Marginalizing into a prior and solving the rest equals solving everything."""
    mech = load("fourbar")
    q0, v0 = release_state(mech)
    problem = make_problem(mech, 1e-3, "dependent", "trapezoidal", None, q0)
    a = FixedLagSmoother(problem, window=1)
    b = FixedLagSmoother(problem, window=50)
    a.initialize(q0, v0)
    b.initialize(q0, v0)
    Xa = a.run(20)
    Xb = b.run(20)
    np.testing.assert_allclose(Xa[-1], Xb[-1], rtol=0, atol=1e-9)


def test_prediction_matrix_is_explicit_taylor_step():
    mech = load("fourbar")
    q0, v0 = release_state(mech)
    problem = make_problem(mech, 1e-2, "independent", "trapezoidal", None, q0)
    rng = np.random.default_rng(3)
    q, v, a = rng.normal(size=(3, mech.n))
    x = problem.pack(q, v, a)
    dt = 1e-2
    np.testing.assert_allclose(prediction_matrix(problem) @ x,
                               problem.pack(q + dt * v + 0.5 * dt * dt * a, v + dt * a, a),
                               atol=1e-15)


@pytest.mark.parametrize("name,coords", [("slider-crank", "dependent"),
                                         ("pendulum1", "independent")])
def test_euler_integrator_converges_and_keeps_constraints(name, coords):
    mech = load(name)
    res = simulate_smoother(mech, 0.5, 1e-3, coords=coords, integrator="euler", window=2)
    assert res.stats["converged"] and res.stats["max_iterations_per_step"] <= 10
    assert np.all(np.isfinite(res.q))
    assert res.position_residual.max() <= 1e-6
    assert res.velocity_residual.max() <= 1e-6
    ref = integrate_reference(mech, 0.5, 1e-3, rtol=1e-10, atol=1e-10)
    # first order: close to the reference, but clearly less accurate than trapezoidal
    assert rmse(res.q, ref.q) < 2e-2  # measured 8e-3 (slider-crank, theta in rad)
    # ... and it really is a different (Euler) scheme
    trap = simulate_smoother(mech, 0.5, 1e-3, coords=coords, window=2,
                             integrator="trapezoidal")
    assert rmse(trap.q, ref.q) < rmse(res.q, ref.q)


def test_progress_callback():
    calls = []
    simulate_smoother(load("pendulum1"), 0.2, 1e-3, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (200, 200)
    assert 90 <= len(calls) <= 101
    assert all(b[0] > a[0] for a, b in zip(calls, calls[1:]))


def test_non_convergence_raises_with_residual_and_keeps_the_trajectory():
    mech = load("fourbar")
    # 20 ms steps: the explicit prediction is too far off for one Gauss-Newton update
    with pytest.raises(ConvergenceError) as info:
        simulate_smoother(mech, 1.0, 2e-2, max_iterations=1)
    assert np.isfinite(info.value.residual) and info.value.residual > 0
    assert info.value.iterations >= 1
    assert "step" in str(info.value)
    part = info.value.partial
    assert part is not None and part.q.shape[1] == mech.n and not part.stats["converged"]
    np.testing.assert_allclose(part.q[0], mech.q0, atol=1e-12)
    # the error says when: the step after the last one kept
    assert info.value.time == pytest.approx(part.t[-1] + 2e-2)
    assert f"t = {info.value.time:.6g} s" in str(info.value)
    # every kept step is a solved one, on the manifold (also the step that left the window
    # in the failing advance)
    assert np.max(np.abs(C.position_constraints(mech, part.q))) <= 1e-8
    # a wild initial velocity far off the constraint manifold is projected first, so a large
    # step size is what makes the per-step problem too nonlinear for two iterations
    with pytest.raises(ConvergenceError) as info:
        simulate_smoother(mech, 1.0, 0.2, qd0=[50.0, -30.0, 20.0, 40.0], max_iterations=2)
    assert info.value.residual > 0


@pytest.mark.parametrize("coords", ["dependent", "independent"])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_newton_converges_at_a_velocity_reversal(coords, window):
    """Released with qd0 = -a0 dt / 2 the motion reverses in the middle of the first step
    (v_1 ~ -v_0).  There the energy row of the link is singular (the rescaling alpha acts
    along the link's mean velocity, ~0) and Newton converged only linearly (7 iterations and
    a damped fallback on a 10 mm slider-crank, a stop after 29 s of a 100 s run).  The link
    carries no energy row then, and each step converges in a few iterations.  dt is chosen
    so that the reversal's speed is 10x the mechanism's at-rest threshold."""
    mech = load("slider-crank")
    q0, _ = release_state(mech)
    a0 = forward_dynamics(mech, q0, np.zeros(mech.n))
    problem = make_problem(mech, 1e-3, coords, "trapezoidal", None, q0)
    c = problem.scales.coordinates
    # speed of the reversal: |a0| dt^2 / (2 c) = 10 energy_speed
    dt = float(np.sqrt(20.0 * problem.settings.energy_speed / np.max(np.abs(a0) / c)))
    res = simulate_smoother(mech, 10 * dt, dt, qd0=-0.5 * dt * a0, coords=coords,
                            window=window, integrator="trapezoidal")
    assert res.stats["fallbacks"] == 0 and res.stats["max_iterations_per_step"] <= 3
    assert res.position_residual.max() <= 1e-10 * np.max(c)


def test_invalid_window():
    mech = load("pendulum1")
    with pytest.raises(ValueError):
        simulate_smoother(mech, 0.01, 1e-3, window=0)


OFFSET_SLIDER_CRANK = """
parameters: {r: 0.12, l: 0.40, e: -0.04, th0: deg2rad(75)}
points:
  - {x: 0, y: 0, fixed: true}
  - {x: r*cos(th0), y: r*sin(th0)}
  - {x: x1 + sqrt(l^2 - (y1 - e)^2), y: e}
planar_bodies:
  - {points: [0, 1], length: r, mass: 0.6, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {points: [1, 2], length: l, mass: 1.2, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
constraints:
  - {type: fixed_slider, point: 2, line: [[0, e], [1, e]]}
relative_coordinates:
  - {type: RelativeAngleAbsoluteDOF, points: [0, 1]}
"""


def test_smoother_passes_the_dead_centre_of_an_offset_slider_crank():
    """Regression: with 1e-6 constraint sigmas the window problem near the inner dead centre
    (t ~ 1.09 s) was so ill-conditioned that Gauss-Newton stalled."""
    import mbfg
    mech = mbfg.mechanism_from_yaml(OFFSET_SLIDER_CRANK, "offset-slider-crank.yaml")
    res = simulate_smoother(mech, 1.3, 1e-3)
    assert res.stats["converged"]
    assert res.position_residual.max() <= 1e-6
    ref = integrate_reference(mech, 1.3, 1e-3, rtol=1e-11, atol=1e-11)
    assert rmse(res.q[:, :4], ref.q[:, :4]) < 0.5e-3


# five rows of a 5-step window of the 30 mm five-bar of random_mechanisms(17, 77) after 86 s
# (window 5, independent coordinates), where the smoother stopped before windows were judged
# as a whole: x1, y1, x2, y2, x3, y3, theta0
FIVE_BAR_WINDOW = np.array([
    [1.0178867923786710e-02, -1.9459580249016315e-02, 2.4194116066952227e-02,
     -4.1493160823105030e-02, 2.0066450982334717e-02, -1.8159729983369208e-02,
     1.6750752946949383e+01],
    [1.1594478045057718e-02, -1.8650809487538993e-02, 2.4050641313728575e-02,
     -4.1601841055936499e-02, 2.0178582314268959e-02, -1.8224634787688598e-02,
     1.6757352849229779e+01],
    [1.2923789755200999e-02, -1.7755570225739346e-02, 2.3659002254852460e-02,
     -4.1560214016745568e-02, 2.0037598386937965e-02, -1.8142868995822316e-02,
     1.6749050619141784e+01],
    [1.4092238106316749e-02, -1.6843201620614593e-02, 2.3082016909572886e-02,
     -4.1360332988249975e-02, 1.9656028959794212e-02, -1.7913601438384087e-02,
     1.6726374003248171e+01],
    [1.5080519639341164e-02, -1.5964414899558497e-02, 2.2403327111744479e-02,
     -4.1029975817907766e-02, 1.9109723002565929e-02, -1.7564282012364592e-02,
     1.6693340725735585e+01]])


def test_independent_coordinates_are_judged_over_the_whole_window():
    """At the newest row (x2, theta0) is the best set (quality 0.53 against 0.46 for the
    current (x1, x2)), but two rows earlier it is nearly singular (0.10), and the window is
    solved in one set: the choice over the window keeps (x1, x2), good on every row."""
    from mbfg.graphs.forward import ForwardProblem, ForwardSettings
    from mbfg.model.partition import coordinate_quality
    from mbfg.testing import random_mechanisms
    mech = [g for g in random_mechanisms(17, 77) if g.family == "five-bar"][0].load()
    problem = ForwardProblem(mech, ForwardSettings(), "independent", (0, 2))
    c = problem.scales.coordinates
    newest = problem.best_indices(FIVE_BAR_WINDOW[-1])
    assert newest[0] == (2, 6)
    best, q_best, q_current = problem.best_indices(FIVE_BAR_WINDOW)
    assert best == (0, 2)
    worst = coordinate_quality(mech, FIVE_BAR_WINDOW, (0, 2), c).min()
    assert q_best == pytest.approx(worst) and q_current == pytest.approx(worst)
    assert coordinate_quality(mech, FIVE_BAR_WINDOW, (2, 6), c).min() < 0.5 * worst


def test_a_step_that_predicts_no_decrease_is_not_taken_as_converged(monkeypatch):
    """Simulation windows are square: a Gauss-Newton update whose linear model predicts no
    decrease (here: a broken linear solve, simulated by a bad update and a negative predicted
    decrease) must not end the loop as converged; the smoother goes on (damped fallback) and
    reaches the same motion.  (It used to accept it: the window then kept the bad update.)"""
    mech = load("fourbar")
    reference = simulate_smoother(mech, 0.05, 1e-3)
    original = FixedLagSmoother._newton_step
    calls = {"n": 0}

    def failing_once(self, lin, keys, terms, W, err):
        calls["n"] += 1
        D, predicted = original(self, lin, keys, terms, W, err)
        if calls["n"] == 20:  # mid-run, on a window whose error is well above its floor
            bad = np.where(np.isfinite(self.step_scale), 1e-2 * self.step_scale, 0.0)
            return D + bad, -err  # a bad update, far from converged
        return D, predicted

    monkeypatch.setattr(FixedLagSmoother, "_newton_step", failing_once)
    res = simulate_smoother(mech, 0.05, 1e-3)
    assert calls["n"] > 20
    np.testing.assert_allclose(res.q, reference.q, rtol=0, atol=1e-12)


def test_a_least_squares_window_with_a_step_tolerance_still_converges():
    """Without step scales (an estimation problem) the step test cannot decide, so a given
    step_tolerance must not turn off the decrease test."""
    from mbfg.graphs.estimation import LeastSquaresProblem, LeastSquaresSettings

    mech = load("fourbar")
    problem = LeastSquaresProblem(mech, LeastSquaresSettings(dt=1e-3))
    sm = FixedLagSmoother(problem, 3, step_tolerance=1e-12)
    sm.initialize(mech.q0, np.zeros(mech.n))
    sm.run(5)
    assert sm.W.shape[0] == 3


def test_sparse_window_under_time_varying_forces_equals_batch():
    """A window large enough for the sparse system (the robot, N_w = 5) under an applied
    force that varies in time: each step's terms carry their own forces (shape steps x n),
    and the smoother still solves the batch's equations."""
    mech = load("pick-and-place-robot")
    shape = np.linspace(-1.0, 1.0, mech.n) * mechanism_scales(mech).mass * 9.81  # a body's weight

    def forces(t):
        return np.sin(40.0 * np.asarray(t, float))[..., None] * shape

    batch = simulate_batch(mech, 0.02, 1e-3, forces=forces)
    res = simulate_smoother(mech, 0.02, 1e-3, window=5, forces=forces)
    moved = np.abs(batch.q - batch.q[0]).max()
    assert moved > 0
    np.testing.assert_allclose(res.q, batch.q, rtol=0, atol=1e-6 * moved)
