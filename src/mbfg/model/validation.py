"""Checks of a built mechanism that the YAML schema cannot make: the mass matrix must be
positive definite on the constraint manifold, or the accelerations are undetermined.

The check is unit-free: coordinates are measured in their own scales (the characteristic
length for point coordinates, 1 for angles) so that every entry of the reduced mass matrix
has the same unit, and a motion counts as massless when its reduced mass is below
:data:`MASS_RTOL` times the largest one (a float-representation limit, far below any real
mass ratio; the loader already refuses masses below 1e-12 of the largest one).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import SingularMassError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

MASS_RTOL = 1e-13
"""A reduced-mass eigenvalue below MASS_RTOL * the largest one counts as zero."""


def massless_motions(mech: Mechanism, q: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Motions allowed by the constraints at ``q`` (default ``q0``) that carry no mass.

    Returns ``(modes, ratios)``: ``modes`` (n, k) are velocity directions in q (unit norm in
    scaled coordinates) with ``Phi_q @ mode = 0`` and ``mode^T M mode`` numerically zero,
    ``ratios`` (k,) their reduced mass relative to the largest one.  Empty (n, 0) when the
    mass matrix is positive definite on the manifold."""
    from mbfg.model import constraints as C
    from mbfg.model.kinematics import RANK_RTOL
    from mbfg.model.scales import coordinate_scales

    q = mech.q0 if q is None else np.asarray(q, float)
    D = coordinate_scales(mech)
    J = C.constraint_jacobian(mech, q) * D                  # Phi_q in scaled coordinates
    if J.size:
        _, s, Vt = np.linalg.svd(J)
        rank = int(np.sum(s > RANK_RTOL * max(s[0], np.finfo(float).tiny)))
        N = Vt[rank:].T                                     # (n, dof) orthonormal null space
    else:
        N = np.eye(mech.n)
    if N.shape[1] == 0:
        return np.zeros((mech.n, 0)), np.zeros(0)
    Mr = N.T @ (D[:, None] * mech.mass_matrix() * D[None, :]) @ N
    lam, V = np.linalg.eigh(0.5 * (Mr + Mr.T))
    top = float(np.max(np.abs(lam)))
    ratios = lam / top if top > 0 else np.zeros_like(lam)
    low = ratios <= MASS_RTOL
    modes = D[:, None] * (N @ V[:, low])
    return modes, ratios[low]


def _moving_points(mech, mode) -> list[int]:
    """Points whose coordinates move in ``mode``, most moving first."""
    coords = mech.point_coords
    amount = []
    for p in range(mech.n_points):
        if coords[p, 0] >= 0:
            amount.append((float(np.hypot(*mode[coords[p]])), p))
    top = max((a for a, _ in amount), default=0.0)
    return [p for a, p in sorted(amount, reverse=True) if top > 0 and a > 1e-6 * top]


def check_mass_matrix(mech: Mechanism) -> None:
    """Raise :class:`~mbfg.errors.SingularMassError` (naming the file and the point) when the
    mass matrix is singular on the constraint manifold at ``q0``."""
    modes, _ = massless_motions(mech)
    if modes.shape[1] == 0:
        return
    in_body = {p for b in mech.spec.bodies for p in b.points}
    moving = sorted({p for k in range(modes.shape[1]) for p in _moving_points(mech, modes[:, k])})
    free = [p for p in moving if p not in in_body]
    if free:
        p = free[0]
        others = f" (also point{'s' * (len(free) > 2)} {', '.join(map(str, free[1:]))})" \
            if len(free) > 1 else ""
        raise SingularMassError(
            f"point {p}{others} belongs to no body, so it has no mass, yet the constraints let it "
            f"move: its acceleration is undetermined (the mass matrix is singular on the "
            f"constraint manifold); expected every moving point to belong to a body, or to be "
            f"held by constraints (e.g. two sliders)", file=mech.source, path=f"points[{p}]")
    names = ", ".join(map(str, moving)) or "?"
    raise SingularMassError(
        f"a motion of point{'s' * (len(moving) > 1)} {names} carries no mass (the mass matrix is "
        f"singular on the constraint manifold: a body with no rotational inertia, or a massless "
        f"combination of bodies); expected every motion the constraints allow to move some mass",
        file=mech.source, path=f"points[{moving[0]}]" if moving else None)


__all__ = ["check_mass_matrix", "massless_motions", "MASS_RTOL"]
