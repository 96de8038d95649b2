"""The saddle-point solver of mbfg.model.kkt: its sparse path (large mechanisms) against a
dense solve of the same system assembled here, and the model functions built on it."""
import numpy as np
import pytest

from mbfg import mechanism_from_yaml
from mbfg.model import kkt
from mbfg.model import constraints as C
from mbfg.model import dynamics as D
from mbfg.model import kinematics as K
from mbfg.testing import pendulum_chain_yaml


def _dense(H, J, f, g):
    n, r = H.shape[0], J.shape[-2]
    out = []
    for Jt, ft, gt in zip(J, f, g):
        A = np.zeros((n + r, n + r))
        A[:n, :n], A[:n, n:], A[n:, :n] = H, Jt.T, Jt
        out.append(np.linalg.solve(A, np.concatenate([ft, gt])))
    return np.array(out)


@pytest.fixture(scope="module")
def chain():
    return mechanism_from_yaml(pendulum_chain_yaml(12), source="chain-12")


def _states(mech, T=4, seed=0):
    rng = np.random.default_rng(seed)
    q = K.solve_positions_batch(mech, mech.q0 + 0.05 * rng.normal(size=(T, mech.n)))[0]
    return q, rng.normal(size=(T, mech.n))


@pytest.mark.parametrize("sparse", [False, True])
def test_solve_kkt_matches_a_dense_solve(chain, monkeypatch, sparse):
    """Both paths give the dense LU's solution of M and the chain's Jacobians to rounding."""
    monkeypatch.setattr(kkt, "KKT_SPARSE_MIN", 0 if sparse else 10 ** 9)
    q, v = _states(chain)
    J = C.constraint_jacobian(chain, q)
    rng = np.random.default_rng(1)
    f, g = rng.normal(size=(len(q), chain.n)), rng.normal(size=(len(q), chain.m))
    H = chain.mass_matrix()
    ref = _dense(H, J, f, g)
    np.testing.assert_allclose(kkt.solve_kkt(H, J, f, g), ref, rtol=0,
                               atol=1e-10 * np.abs(ref).max())


def test_singular_systems_raise(chain, monkeypatch):
    """A zero Jacobian row makes K singular: LinAlgError on both paths, as numpy's."""
    q, _ = _states(chain, T=1)
    J = C.constraint_jacobian(chain, q)
    J[:, 0] = 0.0
    for limit in (0, 10 ** 9):
        monkeypatch.setattr(kkt, "KKT_SPARSE_MIN", limit)
        with pytest.raises(np.linalg.LinAlgError):
            kkt.solve_kkt(chain.mass_matrix(), J, np.ones((1, chain.n)), np.ones((1, chain.m)))


def test_model_functions_agree_on_both_paths(chain, monkeypatch):
    """Accelerations, multipliers, minimum-norm position steps and velocity projections of a
    large mechanism's sparse path equal the dense path's."""
    q, v = _states(chain)
    rng = np.random.default_rng(2)
    q_off = q + 1e-3 * rng.normal(size=q.shape)
    results = []
    for limit in (10 ** 9, 0):
        monkeypatch.setattr(kkt, "KKT_SPARSE_MIN", limit)
        qdd, lam = D.forward_dynamics(chain, q, v, return_multipliers=True)
        one = D.StateDynamics(chain)(q[0], v[0])
        results.append((qdd, lam, one, K.solve_positions_batch(chain, q_off)[0],
                        K.project_velocities_batch(chain, q, v),
                        K.StateProjection(chain).velocities(q[0], v[0])))
    for dense, sparse in zip(*results):
        np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-9 * np.abs(dense).max())
    assert np.abs(C.position_constraints(chain, results[1][3])).max() <= 1e-12
