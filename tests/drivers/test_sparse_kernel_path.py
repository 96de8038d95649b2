"""The simulation of a mechanism large enough for the sparse constraint kernels
(n + m >= SPARSE_KERNELS_MIN) gives the motion of the dense kernels, with relative angles
and joint friction in it (the families whose Jacobians stay partly dense), batch and
smoother."""
import numpy as np
import pytest

import mbfg
from conftest import bent_chain_yaml
from mbfg.model import constraints as C


@pytest.mark.parametrize("solver", ["batch", "smoother"])
def test_sparse_kernels_give_the_dense_motion(solver, monkeypatch):
    mech = mbfg.mechanism_from_yaml(bent_chain_yaml(32, friction=True), "chain32")
    assert mech.n + mech.m >= C.SPARSE_KERNELS_MIN and mech.friction_elements
    sparse = mbfg.simulate(mech, 0.02, 1e-3, solver=solver)
    monkeypatch.setattr(C, "SPARSE_KERNELS_MIN", 10 ** 9)
    dense = mbfg.simulate(mech, 0.02, 1e-3, solver=solver)
    length = 0.1 * 32
    assert np.abs(sparse.q - dense.q).max() <= 1e-10 * length
    assert np.abs(sparse.q - sparse.q[0]).max() > 1e-4 * length  # it moved
    assert sparse.position_residual.max() <= 1e-9 * length ** 2
