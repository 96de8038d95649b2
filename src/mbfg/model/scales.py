"""Characteristic scales of a mechanism, so that no weight or tolerance carries units.

Every residual a forward-dynamics graph contains is divided by a scale derived from the
mechanism itself (its length, its mass) and from the time step, which makes the whitened
residuals dimensionless: rescaling a YAML's units (lengths by 10^k, masses by 10^j, gravity by
10^k) rescales every residual's raw value and its scale by the same factor and leaves the
whitened system, hence the solution path and every convergence decision, unchanged
(docs/theory.md, "Unit-free weights").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.model import constraints as C

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism
    from mbfg.model.stacked_sparse import StackedSparse


@dataclass(frozen=True)
class MechanismScales:
    """Scales of a mechanism.

    Attributes
    ----------
    length : float
        Characteristic length ell [m]: root mean square of the body lengths.
    mass : float
        Characteristic mass [kg]: mean body mass.
    coordinates : ndarray (n,)
        Scale of each coordinate: ``length`` for point coordinates [m], 1 for angles [rad].
    constraints : ndarray (m,)
        Scale of each constraint row [units of that row]: the norm of its gradient at q0 with
        each coordinate measured in its own scale (||Phi_q,i diag(coordinates)||), so that
        ``Phi_i / constraints[i]`` is a dimensionless distance to the constraint manifold
        (relative to ``length``).
    """
    length: float
    mass: float
    coordinates: np.ndarray
    constraints: np.ndarray

    def energy(self, dt: float) -> float:
        """Energy scale m ell^2 / dt^2 [J] of a step ``dt``."""
        return self.mass * self.length ** 2 / dt ** 2


def characteristic_length(mech: Mechanism) -> float:
    """ell [m]: the root mean square of the body lengths (1 without bodies)."""
    bodies = mech.spec.bodies
    return float(np.sqrt(np.mean([b.length ** 2 for b in bodies]))) if bodies else 1.0


def coordinate_scales(mech: Mechanism) -> np.ndarray:
    """(n,) scale of each coordinate: ell for point coordinates [m], 1 for angles [rad]."""
    coords = np.full(mech.n, characteristic_length(mech))
    coords[np.asarray(mech.angle_coords, int)] = 1.0
    return coords


def constraint_scales(
    mech: Mechanism, q: ArrayLike, coordinates: np.ndarray | None = None,
    jacobian: StackedSparse | None = None,
) -> np.ndarray:
    """(m,) scale of each constraint row at q: ||Phi_q,i(q) diag(coordinates)||, so that
    Phi_i / scale_i is a distance to the manifold relative to the coordinates' scales
    (default :func:`coordinate_scales`).  A row whose gradient vanishes (a singular
    configuration) gets the largest row's scale.  ``jacobian``: Phi_q at the states of q,
    flattened (:func:`~mbfg.model.constraints.constraint_jacobian` with ``sparse=True``), if
    the caller has it."""
    c = coordinate_scales(mech) if coordinates is None else np.broadcast_to(
        np.asarray(coordinates, float), (mech.n,))
    q = np.asarray(q, float)
    J = C.constraint_jacobian(mech, q.reshape(-1, mech.n), sparse=True) if jacobian is None \
        else jacobian
    rows = J.row_norms(c)
    rows = rows.reshape(q.shape[:-1] + (mech.m,))
    largest = np.max(rows, axis=-1, keepdims=True, initial=0.0)
    # (every gradient zero, a degenerate mechanism: the rows are measured in their own units)
    return np.where(rows > 0.0, rows, np.where(largest > 0.0, largest, 1.0))


def mechanism_scales(mech: Mechanism) -> MechanismScales:
    """The :class:`MechanismScales` of ``mech`` (computed from its bodies and ``q0``)."""
    bodies = mech.spec.bodies
    mass = float(np.mean([b.mass for b in bodies])) if bodies else 1.0
    coords = coordinate_scales(mech)
    rows = constraint_scales(mech, mech.q0, coords)
    coords.setflags(write=False)
    rows.setflags(write=False)
    return MechanismScales(length=characteristic_length(mech), mass=mass, coordinates=coords,
                           constraints=rows)


__all__ = ["MechanismScales", "mechanism_scales", "characteristic_length", "coordinate_scales",
           "constraint_scales"]
