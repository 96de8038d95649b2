"""Mass matrix, gravity forces and energies in natural coordinates.

A body with first two points r0, r1 (distance L) places a material point of body-frame
coordinates (xi, eta) at ``r = (1 - u) r0 + u r1 + v R90 (r1 - r0)`` with u = xi/L, v = eta/L
and R90 the +90 deg rotation.  Integrating ``C^T C dm`` over the body gives the 4x4 body mass
matrix on [x0 y0 x1 y1]; only three integrals of the mass distribution enter:
``mass``, the first moments ``mass * cog`` and the polar moment ``I0`` about point 0:

    a = m - 2 m cx / L + I0 / L^2,  b = m cx / L - I0 / L^2,  c = m cy / L,  d = I0 / L^2

    M_body = [[a, 0, b, -c],
              [0, a, c,  b],
              [b, c, d,  0],
              [-c, b, 0, d]]

Points 2, 3, ... of a body carry no mass (they follow rigidly from points 0 and 1).
These are explicit functions of the body parameters (mass, I0, cog, L) so that parameter
identification can differentiate them later.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

_R90 = np.array([[0.0, -1.0], [1.0, 0.0]])


def body_mass_matrix(mass: float, I0: float, cog: tuple, length: float) -> np.ndarray:
    """4x4 mass matrix of one body on (x0, y0, x1, y1) [kg].

    Parameters
    ----------
    mass : float  [kg]
    I0 : float    polar moment of inertia about point 0 [kg m^2]
    cog : (2,)    centre of mass in the body frame [m]
    length : float  distance point 0 -> point 1 [m]
    """
    cx, cy = cog
    L = length
    a = mass - 2.0 * mass * cx / L + I0 / L ** 2
    b = mass * cx / L - I0 / L ** 2
    c = mass * cy / L
    d = I0 / L ** 2
    return np.array([[a, 0.0, b, -c],
                     [0.0, a, c, b],
                     [b, c, d, 0.0],
                     [-c, b, 0.0, d]])


def body_point_map(xi: float, eta: float, length: float) -> np.ndarray:
    """2x4 matrix C with r(xi, eta) = C @ [x0 y0 x1 y1] for a body-frame point."""
    u, v = xi / length, eta / length
    return np.hstack([(1.0 - u) * np.eye(2) - v * _R90, u * np.eye(2) + v * _R90])


def body_gravity_forces(mass: float, cog: tuple, length: float, gravity: ArrayLike) -> np.ndarray:
    """Generalized gravity force of one body on (x0, y0, x1, y1) [N]: m C(cog)^T g."""
    return mass * body_point_map(cog[0], cog[1], length).T @ np.asarray(gravity, float)


def _body_coords(mech, body) -> np.ndarray:
    """(4,) indices in q of [x0 y0 x1 y1] of a body's first two points (-1 for fixed ones)."""
    return mech.point_coords[list(body.points[:2])].ravel()


def assemble_mass_matrix_and_gravity(mech: Mechanism) -> tuple:
    """Constant M (n, n) and gravity forces (n,) of the whole mechanism.

    The 4x4 body blocks are added into the rows and columns of the bodies' free point
    coordinates (fixed points carry no coordinates)."""
    M = np.zeros((mech.n, mech.n))
    Q = np.zeros(mech.n)
    for body in mech.spec.bodies:
        idx = _body_coords(mech, body)
        free = idx >= 0
        Mb = body_mass_matrix(body.mass, body.I0, body.cog, body.length)
        M[np.ix_(idx[free], idx[free])] += Mb[np.ix_(free, free)]
        Q[idx[free]] += body_gravity_forces(body.mass, body.cog, body.length, mech.gravity)[free]
    return M, Q


def centres_of_mass(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """Centre of mass of every body, shape (..., n_bodies, 2) [m]."""
    bodies = mech.spec.bodies
    C = np.stack([body_point_map(b.cog[0], b.cog[1], b.length) for b in bodies])  # (B, 2, 4)
    r = mech.point_positions(q)[..., [b.points[:2] for b in bodies], :]          # (..., B, 2, 2)
    return np.einsum("bkj,...bj->...bk", C, r.reshape(r.shape[:-2] + (4,)))


def kinetic_energy(mech: Mechanism, qd: ArrayLike) -> np.ndarray:
    """T = 1/2 qdot^T M qdot [J], shape (...)."""
    qd = np.asarray(qd, float)
    return 0.5 * np.einsum("...i,ij,...j->...", qd, mech.mass_matrix(), qd)


def potential_energy(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """Gravitational potential V = -sum_b m_b g . r_G,b [J], shape (...)."""
    masses = np.array([b.mass for b in mech.spec.bodies])
    rg = centres_of_mass(mech, q)
    return -np.einsum("b,...bk,k->...", masses, rg, mech.gravity)


def mechanical_energy(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> np.ndarray:
    """E = T + V [J], shape (...): conserved by the exact motion of a mechanism loaded by
    gravity alone, so its drift over a simulation measures the integrator's energy error."""
    return kinetic_energy(mech, qd) + potential_energy(mech, q)


__all__ = [
    "body_mass_matrix", "body_point_map", "body_gravity_forces",
    "assemble_mass_matrix_and_gravity", "centres_of_mass", "kinetic_energy",
    "potential_energy", "mechanical_energy"
]
