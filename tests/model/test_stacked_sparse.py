"""The sparse forms of the constraint kernels (the batch drivers' path) against their dense
forms, which test_model_jacobians.py checks against central differences; and the
StackedSparse products against dense products computed here."""
import numpy as np
import pytest

import mbfg
from conftest import FD_MECHANISMS, fd_states
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model.stacked_sparse import Pattern, StackedSparse
from mbfg.testing import random_mechanisms

GENERATED = random_mechanisms(10, 515)  # one per family (seed never used elsewhere)


def _mechanisms():
    for name in FD_MECHANISMS:
        yield name, fd_states(name)[0]
    for g in GENERATED:
        yield g.name, mbfg.mechanism_from_yaml(g.yaml, source=g.name)


CASES = list(_mechanisms())


def _dense(S):
    assert isinstance(S, StackedSparse)
    return np.asarray(S)


@pytest.mark.parametrize("name,mech", CASES, ids=[c[0] for c in CASES])
def test_sparse_kernels_equal_dense_ones(name, mech):
    rng = np.random.default_rng(7)
    T, n, m = 4, mech.n, mech.m
    q = mech.q0 + 1e-2 * rng.normal(size=(T, n))
    v, a = rng.normal(size=(T, n)), rng.normal(size=(T, n))
    lam = rng.normal(size=(T, m))
    J = C.constraint_jacobian(mech, q, sparse=True)
    pairs = [
        (J, C.constraint_jacobian(mech, q)),
        (C.hessian_times(mech, q, v, sparse=True), C.hessian_times(mech, q, v)),
        (C.acceleration_bias_jacobian(mech, q, v, sparse=True),
         C.acceleration_bias_jacobian(mech, q, v)),
        (C.hessian_weighted_sum(mech, q, lam, sparse=True), C.hessian_weighted_sum(mech, q, lam)),
        (C.acceleration_constraints_jacobian(mech, q, v, a, J, sparse=True),
         C.acceleration_bias_jacobian(mech, q, v) + C.hessian_times(mech, q, a)),
    ]
    for S, dense in pairs:
        assert S.pattern.unique  # (the dense kernels assign, not add, on it)
        np.testing.assert_array_equal(_dense(S), dense)
    # the dense forms are exact: the full Hessian tensor, built independently
    H = C.constraint_hessian(mech, q)
    np.testing.assert_allclose(_dense(pairs[3][0]), np.einsum("tk,tkij->tij", lam, H),
                               rtol=0, atol=1e-12 * max(1.0, np.abs(H).max()))
    Jd = pairs[0][1]
    np.testing.assert_allclose(J.matvec(v), np.einsum("tkn,tn->tk", Jd, v), rtol=1e-12,
                               atol=1e-12 * np.abs(Jd).max())
    np.testing.assert_allclose(J.rmatvec(lam), np.einsum("tkn,tk->tn", Jd, lam), rtol=1e-12,
                               atol=1e-12 * np.abs(Jd).max())
    np.testing.assert_array_equal(_dense(J.T), np.swapaxes(Jd, 1, 2))
    c = rng.uniform(0.5, 2.0, n)
    np.testing.assert_allclose(J.row_norms(c), np.linalg.norm(Jd * c, axis=2), rtol=1e-13)
    # every entry of the pattern is inside the rows' own coordinates: at most 4 point
    # coordinates per distance row, 6 per mobile slider, plus an angle row's angle
    assert J.pattern.nnz <= 7 * m


@pytest.mark.parametrize("name,mech", CASES[:len(FD_MECHANISMS)], ids=FD_MECHANISMS)
def test_sparse_equations_of_motion_equal_dense(name, mech):
    rng = np.random.default_rng(8)
    T, n, m = 3, mech.n, mech.m
    q = mech.q0 + 1e-2 * rng.normal(size=(T, n))
    v, a, lam = rng.normal(size=(T, n)), rng.normal(size=(T, n)), rng.normal(size=(T, m))
    dense = D.equations_of_motion(mech, q, v, a, lam)
    sparse = D.equations_of_motion(mech, q, v, a, lam, J=C.constraint_jacobian(mech, q, True),
                                   sparse=True)
    scale = np.abs(dense.e).max()
    np.testing.assert_allclose(sparse.e, dense.e, rtol=0, atol=1e-13 * scale)
    for key in ("d_q", "d_v", "d_a", "d_lam"):
        got = np.broadcast_to(np.asarray(getattr(sparse, key)), getattr(dense, key).shape)
        np.testing.assert_array_equal(got, getattr(dense, key), err_msg=key)


def test_repeated_positions_are_summed():
    p = Pattern.of([0, 1, 0], [1, 0, 1], (2, 3))
    S = StackedSparse(np.array([[1.0, 2.0, 3.0]]), p)
    np.testing.assert_array_equal(S.toarray()[0], [[0, 4, 0], [2, 0, 0]])
    np.testing.assert_array_equal(S.matvec(np.array([[1.0, 10.0, 100.0]])), [[40.0, 2.0]])
    np.testing.assert_array_equal(S.rmatvec(np.array([[1.0, 10.0]])), [[20.0, 4.0, 0.0]])
    total = S + StackedSparse(np.array([[5.0]]), Pattern.of([1], [2], (2, 3)))
    np.testing.assert_array_equal(total.toarray()[0], [[0, 4, 0], [2, 0, 5]])


@pytest.mark.parametrize("size", [(3, 4), (70, 90)])  # summed by a 0/1 product, by reduceat
def test_products_against_dense(size):
    from mbfg.model.stacked_sparse import DENSE_SUM_ENTRIES

    rng = np.random.default_rng(9)
    r, c = size
    nnz = 3 * max(r, c)
    p = Pattern.of(rng.integers(0, r, nnz), rng.integers(0, c - 1, nnz), (r, c))  # (col c-1 empty)
    assert (nnz * r > DENSE_SUM_ENTRIES) == (size == (70, 90))
    S = StackedSparse(rng.normal(size=(5, nnz)), p)
    A = S.toarray()
    x, y = rng.normal(size=(5, c)), rng.normal(size=(5, r))
    np.testing.assert_allclose(S.matvec(x), np.einsum("tij,tj->ti", A, x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(S.rmatvec(y), np.einsum("tij,ti->tj", A, y), rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError):
        S.row_norms()  # (repeated positions)
    keep = np.array([0, 2, c - 1])
    np.testing.assert_array_equal(S.columns(keep).toarray(), A[:, :, keep])


def test_edge_cases_of_the_routed_functions():
    """Shapes the sparse routing must keep: an empty batch, scalar coordinate scales, and
    the sparse equations of motion with friction over two leading axes."""
    from conftest import MOTOR_FOURBAR, bent_chain_yaml
    from mbfg.model.scales import constraint_scales

    for mech in (fd_states("fourbar")[0], mbfg.mechanism_from_yaml(bent_chain_yaml(130))):
        n = mech.n
        assert D.forward_dynamics(mech, np.zeros((0, n)), np.zeros((0, n))).shape == (0, n)
        np.testing.assert_allclose(constraint_scales(mech, mech.q0, 1.0),
                                   constraint_scales(mech, mech.q0, np.ones(n)), rtol=0)
    mech = mbfg.mechanism_from_yaml(MOTOR_FOURBAR)
    rng = np.random.default_rng(10)
    q = mech.q0 + 1e-2 * rng.normal(size=(2, 3, mech.n))
    v, a = rng.normal(size=q.shape), rng.normal(size=q.shape)
    lam = rng.normal(size=(2, 3, mech.m))
    dense = D.equations_of_motion(mech, q, v, a, lam)
    flat = lambda x: x.reshape((-1,) + x.shape[-1:])
    sparse = D.equations_of_motion(mech, flat(q), flat(v), flat(a), flat(lam),
                                   J=C.constraint_jacobian(mech, flat(q), True), sparse=True)
    for key in ("d_q", "d_v"):
        np.testing.assert_allclose(np.asarray(getattr(sparse, key)),
                                   getattr(dense, key).reshape(6, mech.n, mech.n), rtol=0,
                                   atol=1e-12, err_msg=key)
