"""The simulation of a mechanism large enough for the sparse constraint kernels
(n + m >= SPARSE_KERNELS_MIN) gives the motion of the dense kernels, with relative angles
and joint friction in it (the families whose Jacobians stay partly dense), batch and
smoother."""
import numpy as np
import pytest

import mbfg
from mbfg.model import constraints as C


def _chain(links: int) -> str:
    """A bent ``links``-body chain hanging from fixed point 0, relative angles on the first
    and a middle body, viscous and Coulomb friction on three joints."""
    pts = ["  - { x: 0, y: 0, fixed: true }"]
    pts += [f"  - {{ x: {0.1 * k}, y: {-0.02 * k * k} }}" for k in range(1, links + 1)]
    bodies = [f"  - {{ points: [{k}, {k + 1}], length: auto, mass: {1.0 + 0.01 * k}, "
              f"I0: (1/3)*mass*length^2, cog: [0.5*length, 0.01] }}" for k in range(links)]
    angles = [f"  - {{ type: RelativeAngleAbsoluteDOF, points: [{k}, {k + 1}] }}"
              for k in (0, links // 2)]
    friction = ["  - {type: joint, bodies: [ground, 0], viscous: 0.3, coulomb: 0.2}",
                "  - {type: joint, bodies: [3, 4], viscous: 0.2}",
                f"  - {{type: joint, bodies: [{links - 2}, {links - 1}], viscous: 0.1}}"]
    return "\n".join(["points:", *pts, "planar_bodies:", *bodies, "relative_coordinates:",
                      *angles, "friction:", *friction]) + "\n"


@pytest.mark.parametrize("solver", ["batch", "smoother"])
def test_sparse_kernels_give_the_dense_motion(solver, monkeypatch):
    mech = mbfg.mechanism_from_yaml(_chain(32), "chain32")
    assert mech.n + mech.m >= C.SPARSE_KERNELS_MIN and mech.friction_elements
    sparse = mbfg.simulate(mech, 0.02, 1e-3, solver=solver)
    monkeypatch.setattr(C, "SPARSE_KERNELS_MIN", 10 ** 9)
    dense = mbfg.simulate(mech, 0.02, 1e-3, solver=solver)
    length = 0.1 * 32
    assert np.abs(sparse.q - dense.q).max() <= 1e-10 * length
    assert np.abs(sparse.q - sparse.q[0]).max() > 1e-4 * length  # it moved
    assert sparse.position_residual.max() <= 1e-9 * length ** 2
