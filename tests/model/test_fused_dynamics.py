"""The fused single-state kernels (StateConstraints, StateDynamics, StateProjection) against
the batch kernels they stand in for, and their Jacobian against central differences; and the
batch solver's block forward substitution (causal_step) against gtsam's QR of the same graph."""
import numpy as np
import pytest

from conftest import FD_MECHANISMS, fd_states, load
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.model.scales import coordinate_scales
from mbfg.testing import check_jacobian


def _rounding(*arrays):
    """Round-off level of values built from ``arrays``: a few hundred ulps of their size."""
    return 256 * np.finfo(float).eps * max(1.0, *(float(np.max(np.abs(a))) for a in arrays))


def _states(name, i):
    mech, sts = fd_states(name)
    q, qd, _ = sts[i]
    rng = np.random.default_rng(i)
    # off the manifold too: the kernels must agree everywhere
    c = coordinate_scales(mech)
    return mech, q + 1e-3 * c * rng.normal(size=q.shape), qd + rng.normal(size=q.shape), rng


@pytest.mark.parametrize("name", FD_MECHANISMS)
@pytest.mark.parametrize("i", range(3))
def test_state_constraints_match_batch_kernels(name, i):
    mech, q, qd, _ = _states(name, i)
    sc = C.StateConstraints(mech)
    phi, J = sc.evaluate(q)
    phi, J = phi.copy(), J.copy()
    ref_phi, ref_J = C.position_constraints(mech, q), C.constraint_jacobian(mech, q)
    np.testing.assert_allclose(phi, ref_phi, rtol=0, atol=_rounding(ref_phi, q))
    np.testing.assert_allclose(J, ref_J, rtol=0, atol=_rounding(ref_J))
    np.testing.assert_allclose(sc.jacobian(q), ref_J, rtol=0, atol=_rounding(ref_J))
    bias = C.acceleration_bias(mech, q, qd)
    np.testing.assert_allclose(sc.bias(q, qd), bias, rtol=0, atol=_rounding(bias, ref_J))
    Jb, b = sc.jacobian_bias(q, qd)
    np.testing.assert_allclose(Jb, ref_J, rtol=0, atol=_rounding(ref_J))
    np.testing.assert_allclose(b, bias, rtol=0, atol=_rounding(bias, ref_J))


@pytest.mark.parametrize("name", FD_MECHANISMS)
def test_state_constraints_jacobian_central_differences(name):
    mech, q, qd, _ = _states(name, 0)
    sc = C.StateConstraints(mech)
    check_jacobian(lambda x: sc.evaluate(x)[0].copy(), q, sc.jacobian(q).copy(),
                   name="fused Phi_q")
    # the bias is qdot^T Phi_qq qdot = d(Phi_q(q) qdot)/dq qdot
    check_jacobian(lambda x: sc.jacobian(x) @ qd, q,
                   C.hessian_times(mech, q, qd), name="d(Phi_q qdot)/dq (bias check)")
    np.testing.assert_allclose(C.hessian_times(mech, q, qd) @ qd, sc.bias(q, qd), rtol=0,
                               atol=_rounding(sc.bias(q, qd), sc.jacobian(q)))


@pytest.mark.parametrize("name", FD_MECHANISMS)
@pytest.mark.parametrize("forces", [False, True])
def test_state_dynamics_match_forward_dynamics(name, forces):
    mech, sts = fd_states(name)
    f = D.StateDynamics(mech)
    rng = np.random.default_rng(3)
    for q, qd, _ in sts[:3]:
        Q = rng.normal(size=mech.n) * np.abs(mech.gravity_forces()).max() if forces else None
        ref = D.forward_dynamics(mech, q, qd, Q)
        np.testing.assert_allclose(f(q, qd, Q), ref, rtol=0, atol=1e3 * _rounding(ref))


def test_state_dynamics_with_friction():
    import mbfg
    from mbfg.resources import mechanism_path
    text = mechanism_path("slider-crank").read_text(encoding="utf-8") + (
        "\nfriction:\n"
        "  - {type: joint, bodies: [0, 1], viscous: 0.01, coulomb: 0.02, width: 0.5}\n"
        "  - {type: slider, constraint: 0, viscous: 2.0, coulomb: 0.5, width: 0.1}\n")
    mech = mbfg.mechanism_from_yaml(text, "slider-crank+friction")
    assert mech.friction_elements
    f = D.StateDynamics(mech)
    _, sts = fd_states("slider-crank")
    for q, qd, _ in sts[:3]:
        ref = D.forward_dynamics(mech, q, qd)
        np.testing.assert_allclose(f(q, qd), ref, rtol=0, atol=1e3 * _rounding(ref))


@pytest.mark.parametrize("name", FD_MECHANISMS)
def test_state_projection_matches_batch(name):
    mech, q, qd, rng = _states(name, 1)
    p = K.StateProjection(mech)
    for max_iter in (1, 3, 30):
        ref = K.solve_positions_batch(mech, q, max_iter=max_iter)[0][0]
        np.testing.assert_allclose(p.positions(q, max_iter=max_iter), ref, rtol=0,
                                   atol=1e3 * _rounding(ref))
    qa = K.solve_positions_batch(mech, q)[0][0]
    ref = K.project_velocities_batch(mech, qa[None], qd[None])[0]
    np.testing.assert_allclose(p.velocities(qa, qd), ref, rtol=0, atol=1e3 * _rounding(ref, qd))


@pytest.mark.parametrize("name,coords", [("fourbar", "dependent"), ("slider-crank", "dependent"),
                                         ("fourbar-crank-angle", "independent"),
                                         ("pick-and-place-robot", "dependent"),
                                         ("chain-20", "dependent")])
def test_causal_step_equals_gtsam_qr(name, coords):
    """The block forward substitution, dense (causal_step) and with one sparse LU per step
    (causal_solve, what step vectors of 128 components or more use), gives gtsam's QR step
    of the forward graph (the explicit estimate's, where the update is largest) and its
    predicted error; both decline the graphs of redundant constraints."""
    import gtsam

    from mbfg.drivers.forward_dynamics import explicit_guess, make_problem
    from mbfg.solvers.batch import causal_step, linearize, read_delta
    from mbfg.solvers.sparse import assemble, causal_solve

    if name.startswith("chain-"):  # 20 links: 141 components per step
        from mbfg import mechanism_from_yaml
        from mbfg.testing import pendulum_chain_yaml
        mech = mechanism_from_yaml(pendulum_chain_yaml(int(name[6:])), source=name)
    else:
        mech = load(name)
    q0, v0 = K.release_state(mech, None, None)
    idx = (4,) if coords == "independent" else None
    pb = make_problem(mech, 1e-3, coords, "trapezoidal", idx, q0)
    N = 60
    q, v, a = explicit_guess(mech, q0, v0, 1e-3, N)
    X = pb.pack(q, v, a)
    if "lam" in pb.layout.names:
        X[:, pb.layout.slice("lam")] = D.multipliers(mech, q, v, a)
    plan = pb.link_plan(X[1:], None, start=X[:-1])
    steps = np.arange(N + 1)
    terms, keys = pb.terms(steps, q0, v0, plan), pb.layout.keys(steps)
    lin = linearize(terms, X, keys)
    delta = lin.eliminateSequential(gtsam.Ordering(keys), gtsam.EliminateQR).optimize()
    ref = read_delta(delta, keys)
    outs = [causal_step([t.blocks(X) for t in terms], N + 1, X.shape[1]),
            causal_solve(*assemble(terms, X), N + 1, X.shape[1])]
    if mech.independent_rows.size < mech.m:
        # redundant constraints: their rows make the steps over-determined (of full rank),
        # which only gtsam's least squares solves
        assert outs == [None, None]
        return
    scale = np.where(np.isfinite(pb.step_scale), pb.step_scale, 1.0)
    err = float(lin.error(delta))
    initial = 0.5 * float(np.sum(
        np.concatenate([e.ravel() for _, _, e in (t.blocks(X) for t in terms)]) ** 2))
    for out in outs:
        assert out is not None
        step, predicted = out
        # both solve the same nonsingular system: they agree to its conditioning x rounding
        assert np.max(np.abs(step - ref) / scale) <= 1e-8 * max(1.0, np.max(np.abs(ref) / scale))
        assert abs(predicted - err) <= 1e-6 * max(err, initial) + 1e-30


def test_causal_step_declines_other_shapes():
    """Over-determined steps or factors across non-consecutive steps: None (gtsam decides)."""
    from mbfg.solvers.batch import causal_step
    from mbfg.solvers.sparse import causal_solve
    dim = 2
    rng = np.random.default_rng(0)
    unary = (np.arange(3)[:, None], [rng.normal(size=(3, 3, dim))], rng.normal(size=(3, 3)))
    assert causal_step([unary], 3, dim) is None  # 3 rows on a 2-dim step
    skip = (np.array([[0, 2]]), [rng.normal(size=(1, 2, dim))] * 2, rng.normal(size=(1, 2)))
    prior = (np.array([[0]]), [rng.normal(size=(1, 2, dim))], rng.normal(size=(1, 2)))
    assert causal_step([prior, skip], 3, dim) is None
    for blocks in ([unary], [prior, skip]):  # the sparse solver declines them alike
        assert causal_solve(*_sparse(blocks, 3, dim), 3, dim) is None
    # a square causal chain is solved exactly
    link = (np.array([[0, 1], [1, 2]]),
            [rng.normal(size=(2, 2, dim)), rng.normal(size=(2, 2, dim))], rng.normal(size=(2, 2)))
    x, predicted = causal_step([prior, link], 3, dim)
    A = np.zeros((6, 6))
    b = np.zeros(6)
    A[0:2, 0:2], b[0:2] = prior[1][0][0], prior[2][0]
    for t, (r0, r1) in enumerate(link[0]):
        A[2 + 2 * t:4 + 2 * t, 2 * r0:2 * r0 + 2] = link[1][0][t]
        A[2 + 2 * t:4 + 2 * t, 2 * r1:2 * r1 + 2] = link[1][1][t]
        b[2 + 2 * t:4 + 2 * t] = link[2][t]
    np.testing.assert_allclose(x.ravel(), np.linalg.solve(A, -b), rtol=1e-10, atol=1e-12)
    assert predicted <= 1e-20
    x, predicted = causal_solve(*_sparse([prior, link], 3, dim), 3, dim)
    np.testing.assert_allclose(x.ravel(), np.linalg.solve(A, -b), rtol=1e-10, atol=1e-12)
    assert predicted <= 1e-20


def _sparse(blocks, n_steps, dim):
    """(A, e) of dense blocks, stacked as :func:`mbfg.solvers.sparse.assemble` stacks terms."""
    import scipy.sparse

    from mbfg.graphs.batch_term import coo_of_blocks
    ii, jj, vv, es, off = [], [], [], [], 0
    for b in blocks:
        i, j, v, e = coo_of_blocks(b, dim)
        ii.append(i + off)
        jj.append(j)
        vv.append(v)
        es.append(e.ravel())
        off += e.size
    A = scipy.sparse.csr_matrix((np.concatenate(vv), (np.concatenate(ii), np.concatenate(jj))),
                                shape=(off, n_steps * dim))
    return A, np.concatenate(es)


@pytest.mark.parametrize("links,slots", [(0, "q"), (20, "qv")])
def test_a_diverged_estimate_is_not_reported_converged(links, slots):
    """A square forward graph started from an estimate far off the solution (the slots
    ``slots`` 1e40 x their values, as an explicit estimate that diverged) stalls: optimize
    says so (ConvergenceError with the residual), for the four-bar (dense forward
    substitution) and a 20-link chain (sparse), instead of reading the linear model's lack
    of decrease as an optimum (both were reported converged before, at errors of 1e159 and
    1e160)."""
    from mbfg.drivers.forward_dynamics import explicit_guess, make_problem
    from mbfg.errors import ConvergenceError
    from mbfg.solvers.batch import optimize

    if links:
        from mbfg import mechanism_from_yaml
        from mbfg.testing import pendulum_chain_yaml
        mech = mechanism_from_yaml(pendulum_chain_yaml(links), source=f"chain-{links}")
    else:
        mech = load("fourbar")
    q0, v0 = K.release_state(mech, None, None)
    pb = make_problem(mech, 1e-3, "dependent", "trapezoidal", None, q0)
    N = 40
    q, v, a = explicit_guess(mech, q0, v0, 1e-3, N)
    q[1:] *= 1e40
    if "v" in slots:
        v[1:] *= 1e40
    X = pb.pack(q, v, a)
    plan = pb.link_plan(X[1:], None, start=X[:-1])
    steps = np.arange(N + 1)
    with np.errstate(all="ignore"), pytest.raises(ConvergenceError) as info:
        optimize(pb.terms(steps, q0, v0, plan), X, pb.layout.keys(steps),
                 step_scale=pb.step_scale, step_tolerance=pb.settings.step_tolerance,
                 max_iterations=12, causal=True)
    assert info.value.residual > 1.0


@pytest.mark.parametrize("family", ["crank-rocker", "slider-crank-offset", "five-bar", "chain-6"])
def test_projections_do_not_depend_on_units(family):
    """The same mechanism in mm and in m (angle coordinates among its lengths): a guess off
    the manifold and rates off its tangent space, the same in units of the coordinates'
    scales, project to the same configuration and rates in those units, by the batch
    functions, the single-state projection and the single-state position solve.  The
    minimum-norm steps measure each coordinate in its own scale; in plain units they mixed
    metres with radians, and the point reached depended on the units."""
    from mbfg.testing import random_mechanism
    out = {}
    for L in (0.01, 5.0):
        mech = random_mechanism(family, 3, length=L, mass=1.0).load()
        assert mech.angle_coords.size
        s = coordinate_scales(mech)
        rng = np.random.default_rng(7)
        q_off = mech.q0 + 0.02 * s * rng.normal(size=(3, mech.n))
        v = s * rng.normal(size=q_off.shape)
        qb = K.solve_positions_batch(mech, q_off)[0]
        p = K.StateProjection(mech)
        qs = np.stack([p.positions(x) for x in q_off])
        q1 = np.stack([K.solve_position(mech, x) for x in q_off])
        vb = K.project_velocities_batch(mech, qb, v)
        vs = np.stack([p.velocities(x, y) for x, y in zip(qb, v)])
        out[L] = [x / s for x in (qb, qs, q1, vb, vs)]
    for a, b in zip(out[0.01], out[5.0]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
