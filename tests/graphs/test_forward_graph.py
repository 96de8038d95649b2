"""The energy-consistent forward-dynamics graph (docs/theory.md): exact Jacobians of its
nonlinear links, a square system (so no weight changes its solution), and the batch and the
smoother solving the same equations."""
import numpy as np
import pytest

import mbfg

from conftest import MOTOR_FOURBAR, fd_states, load
from mbfg.graphs.forward import ForwardSettings
from mbfg.graphs.links import IntegratorLinks
from mbfg.drivers.forward_dynamics import make_problem, simulate_batch
from mbfg.model.kinematics import release_state
from mbfg.drivers.forward_dynamics import simulate_smoother
from mbfg.testing import check_jacobian, random_assembled_state


def _two_steps(name, problem, rng):
    """Step array (2, dim) of two random assembled states with random alpha."""
    (q0, v0, a0), (q1, v1, a1) = fd_states(name)[1][:2]
    X = np.stack([problem.pack(q0, v0, a0), problem.pack(q1, v1, a1)])
    X[:, problem.layout.slice("alpha")] = rng.normal(scale=0.1, size=(2, 1))
    return X


@pytest.mark.parametrize("name", ["fourbar", "slider-crank", "quick-return",
                                  "pick-and-place-robot"])
@pytest.mark.parametrize("coords", ["dependent", "independent"])
@pytest.mark.parametrize("integrator", ["trapezoidal", "euler"])
def test_link_jacobians_match_central_differences(name, coords, integrator):
    mech = load(name)
    rng = np.random.default_rng(7)
    problem = make_problem(mech, 1e-2, coords, integrator, None, mech.q0,
                           ForwardSettings(dt=1e-2, integrator=integrator),
                           forces=lambda t: (1.0 + t / 1e-2) * np.linspace(-1, 1, mech.n))
    X = _two_steps(name, problem, rng)
    plan = problem.link_plan(X[1:])
    plan[:, -1] = 1  # the energy row on, whatever the speed
    links = [t for t in problem.window_terms([3, 4], plan) if isinstance(t, IntegratorLinks)]
    assert len(links) == 1
    term = links[0]
    rows, (A0, A1), e = term.blocks(X)
    assert rows.tolist() == [[0, 1]]
    dim = problem.layout.dim

    def residual(x):
        return term.blocks(x.reshape(2, dim))[2][0]

    check_jacobian(residual, X.ravel(), np.hstack([A0[0], A1[0]]),
                   name=f"{name} {coords} {integrator} links")


@pytest.mark.parametrize("integrator", ["hermite", "trapezoidal"])
def test_weights_do_not_change_the_solution(integrator):
    """The graph is square: scaling every residual family differently (here through the
    mechanism's scales, by rescaling the time-step-derived sigmas) leaves the solution."""
    mech = load("fourbar")
    q0, v0 = release_state(mech)
    base = simulate_batch(mech, 0.2, 1e-3, integrator=integrator)
    problem = make_problem(mech, 1e-3, "dependent", integrator, None, q0)
    problem.sigmas = {k: v * np.random.default_rng(1).uniform(0.1, 10.0, np.shape(v))
                    for k, v in problem.sigmas.items()}
    from mbfg.solvers.batch import optimize
    from mbfg.drivers.forward_dynamics import explicit_guess
    q, v, a = explicit_guess(mech, q0, v0, 1e-3, 200)
    X = problem.pack(q, v, a)
    plan = problem.link_plan(X[1:])
    steps = np.arange(201)
    X, st = optimize(problem.terms(steps, q0, v0, plan), X, problem.layout.keys(steps),
                     step_scale=problem.step_scale, step_tolerance=1e-12)
    assert st.converged
    np.testing.assert_allclose(X[:, :mech.n], base.q, rtol=0, atol=1e-10)


@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_batch_segments_equal_one_graph(coords):
    """Causal and square: solving in segments gives the whole-horizon graph's solution."""
    mech = load("slider-crank")
    whole = simulate_batch(mech, 0.3, 1e-3, coords=coords, segment=None)
    parts = simulate_batch(mech, 0.3, 1e-3, coords=coords, segment=37)
    np.testing.assert_allclose(parts.q, whole.q, rtol=0, atol=1e-10)


@pytest.mark.parametrize("integrator", ["trapezoidal", "hermite"])
def test_energy_is_conserved_without_applied_forces(integrator):
    """The discrete energy balance holds step by step (no applied forces: E constant), up to
    the few steps near rest that carry no energy row (measured: 1.4e-9 of the potential-energy
    swing over 2 s)."""
    from mbfg.model.inertia import kinetic_energy, potential_energy
    mech = load("fourbar")
    res = simulate_smoother(mech, 2.0, 1e-3, integrator=integrator)
    E = kinetic_energy(mech, res.qd) + potential_energy(mech, res.q)
    swing = np.ptp(potential_energy(mech, res.q))
    assert np.abs(E - E[0]).max() <= 1e-8 * swing


@pytest.mark.parametrize("solver", ["smoother", "batch"])
def test_time_varying_forces_follow_the_reference(solver):
    """One forces convention (a callable of the time t [s]) in the graph drivers and the
    classical integrators: a time-varying load moves the four-bar far from its free motion,
    and the graph stays within the accuracy of the trapezoidal floor under the same load."""
    from mbfg.model.integrate import integrate_reference, integrate_trapezoidal
    mech = load("fourbar")
    g = np.abs(mech.gravity_forces()).max()
    shape = np.zeros(mech.n)
    shape[0] = g  # a horizontal load on the first free point, of the size of gravity

    def forces(t):
        return np.sin(2 * np.pi * t / 0.4) * shape

    t_end, dt = 1.0, 1e-3
    res = mbfg.simulate(mech, t_end, dt, solver=solver, forces=forces)
    ref = integrate_reference(mech, t_end, dt, forces=forces, rtol=1e-12, atol=1e-12)
    floor = integrate_trapezoidal(mech, t_end, dt, forces=forces)
    free = integrate_reference(mech, t_end, dt, rtol=1e-12, atol=1e-12)
    err = np.abs(res.q - ref.q).max()
    err_floor = np.abs(floor.q - ref.q).max()
    assert np.abs(free.q - ref.q).max() > 100 * err       # the load matters
    assert err <= 2.0 * err_floor, (err, err_floor)
    np.testing.assert_allclose(res.Q, forces(res.t[:, None]), rtol=0, atol=1e-12 * g)


def _hermite_links(name, coords, timed):
    """(term, X, dim): the Hermite links of two random steps of a bundled mechanism (or the
    motor four-bar with joint friction, "motor") under applied forces that vary in time
    (``timed``) or are constant, with random alpha.  The energy row is on where the forces
    conserve energy (constant, no friction), whatever the speed."""
    mech = load(name) if name != "motor" else mbfg.mechanism_from_yaml(MOTOR_FOURBAR, "motor")
    dt = 1e-2
    Q = np.linspace(-1, 1, mech.n)
    problem = make_problem(mech, dt, coords, "hermite", None, mech.q0,
                           ForwardSettings(dt=dt, integrator="hermite"),
                           forces=(lambda t: (1.0 + t / dt) ** 2 * Q) if timed else Q)
    rng = np.random.default_rng(7)
    if name == "motor":
        states = [random_assembled_state(mech, rng) for _ in range(2)]
        X = np.stack([problem.pack(*s) for s in states])
        X[:, problem.layout.slice("alpha")] = rng.normal(scale=0.1, size=(2, 1))
    else:
        X = _two_steps(name, problem, rng)
    plan = problem.link_plan(X[1:])
    plan[:, -1] = problem.conserves_energy
    (term,) = [t for t in problem.window_terms([3, 4], plan) if isinstance(t, IntegratorLinks)]
    assert (term.energy is not None) == (not timed and name != "motor")
    return term, X, problem.layout.dim


HERMITE_CASES = [("fourbar", True), ("fourbar", False), ("slider-crank", True),
                 ("slider-crank", False), ("pick-and-place-robot", False), ("motor", True)]


@pytest.mark.parametrize("name, timed", HERMITE_CASES)
@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_hermite_link_jacobians_hold_the_jerk(name, timed, coords):
    """The Hermite rule's rows are linear in the step vectors apart from the jerk terms
    dt^2/12 (j_{k+1} - j_k), which its linearization holds constant (their derivatives are
    O((omega dt)^2) of the rows', docs/theory.md), and the energy row (conservative forces
    only): with the jerk frozen at its value, the blocks are the exact Jacobian."""
    term, X, dim = _hermite_links(name, coords, timed)
    rows, (A0, A1), e = term.blocks(X)
    frozen = term.jerk(np.arange(2), X)
    term.jerk = lambda rows, Xr: frozen[rows]
    term._jerk_memo.clear()  # the links remember the live jerk's terms at X

    def residual(x):
        return term.blocks(x.reshape(2, dim))[2][0]

    check_jacobian(residual, X.ravel(), np.hstack([A0[0], A1[0]]),
                   name=f"{name} {coords} hermite links")
    np.testing.assert_array_equal(term.blocks(X)[2], e)   # the same residual at X


@pytest.mark.parametrize("name, timed", HERMITE_CASES)
@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_hermite_link_jacobians_when_exact(name, timed, coords):
    """Linearized exactly (for fast motions, where holding the jerk converges slowly), the
    Hermite links' blocks are the central-difference Jacobian of the live rows, and the
    residual is the same as when the jerk is held."""
    term, X, dim = _hermite_links(name, coords, timed)
    held = term.blocks(X)[2]
    assert term.linearize_exactly() and not term.linearize_exactly()
    rows, (A0, A1), e = term.blocks(X)
    np.testing.assert_array_equal(e, held)
    assert term.held_change(X, X + 1.0) == 0.0     # nothing is held

    def residual(x):
        return term.blocks(x.reshape(2, dim))[2][0]

    check_jacobian(residual, X.ravel(), np.hstack([A0[0], A1[0]]),
                   name=f"{name} {coords} exact hermite links")
    i, j, v, e_coo = term.coo(X)                   # the sparse linearization agrees
    A = np.zeros((e.size, 2 * dim))
    np.add.at(A, (i, j), v)
    np.testing.assert_allclose(A, np.hstack([A0[0], A1[0]]), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(e_coo, e)


def test_exact_hermite_links_in_chunks_of_states(monkeypatch):
    """The jerk's exact derivatives are evaluated a few states at a time where a whole range
    would take too much memory (a batch segment of a large mechanism); the blocks are the
    same."""
    import mbfg.graphs.links as links

    term, X, dim = _hermite_links("fourbar", "dependent", False)
    term.linearize_exactly()
    whole = term.blocks(X)
    monkeypatch.setattr(links, "JERK_JACOBIAN_BYTES", 1)  # one state per chunk
    term._jerk_memo.clear()
    chunked = term.blocks(X)
    for a, b in zip(whole[1], chunked[1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(whole[2], chunked[2])


@pytest.mark.parametrize("name, solver, coords", [("fourbar", "batch", "dependent"),
                                                  ("slider-crank", "smoother", "independent")])
def test_hermite_rule_is_fourth_order(name, solver, coords):
    """Halving dt divides the Hermite rule's error by 16 (the trapezoidal rule's by 4), and
    at the same dt it is orders of magnitude below the trapezoidal floor (measured: 16.0 and
    15.8-15.9; 4e-5 and 2e-4 of the floor at dt = 5 ms)."""
    from mbfg.model.integrate import integrate_reference, integrate_trapezoidal
    mech = load(name)
    errors = []
    for dt in (5e-3, 2.5e-3):
        ref = integrate_reference(mech, 0.5, dt, rtol=1e-13, atol=1e-13).q
        res = mbfg.simulate(mech, 0.5, dt, solver=solver, coords=coords, integrator="hermite")
        errors.append(np.abs(res.q - ref).max())
        floor = np.abs(integrate_trapezoidal(mech, 0.5, dt).q - ref).max()
        assert errors[-1] <= 1e-3 * floor, (dt, errors[-1], floor)
    assert 12.0 <= errors[0] / errors[1] <= 20.0, errors


@pytest.mark.parametrize("window", [2, 8])
@pytest.mark.parametrize("name", ["fourbar", "slider-crank"])
def test_hermite_smoother_follows_the_batch_solution(name, window):
    """The smoother's short windows (up to 8 steps) evaluate the jerk state by state,
    reusing it for states that barely moved; the batch evaluates it vectorized.  Both solve
    the same causal square graph, so they agree to the solvers' tolerance (measured on the
    four-bar: 1e-10 and 1e-12 of its size; a window of 8 once reused a ring slot that a
    later state had overwritten and stopped)."""
    mech = load(name)
    dt = 5e-3
    batch = simulate_batch(mech, 0.6, dt, integrator="hermite")
    smoother = simulate_smoother(mech, 0.6, dt, window=window, integrator="hermite")
    scale = np.abs(batch.q).max()
    np.testing.assert_allclose(smoother.q, batch.q, rtol=0, atol=1e-8 * scale)
