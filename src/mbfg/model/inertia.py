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

import numpy as np

_R90 = np.array([[0.0, -1.0], [1.0, 0.0]])


def body_mass_matrix(mass: float, I0: float, cog, length: float) -> np.ndarray:
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


def body_gravity_forces(mass: float, cog, length: float, gravity) -> np.ndarray:
    """Generalized gravity force of one body on (x0, y0, x1, y1) [N]: m C(cog)^T g."""
    return mass * body_point_map(cog[0], cog[1], length).T @ np.asarray(gravity, float)


def _body_selection(mech, body):
    """(4, n) selection and (4,) fixed offsets of [r0; r1] of a body."""
    A = mech.point_selection
    p0, p1 = body.points[0], body.points[1]
    return np.vstack([A[p0], A[p1]]), np.concatenate([mech.point_fixed_xy[p0],
                                                       mech.point_fixed_xy[p1]])


def assemble_mass_matrix_and_gravity(mech):
    """Constant M (n, n) and gravity forces (n,) of the whole mechanism."""
    M = np.zeros((mech.n, mech.n))
    Q = np.zeros(mech.n)
    for body in mech.spec.bodies:
        S, _ = _body_selection(mech, body)
        M += S.T @ body_mass_matrix(body.mass, body.I0, body.cog, body.length) @ S
        Q += S.T @ body_gravity_forces(body.mass, body.cog, body.length, mech.gravity)
    return M, Q


def centres_of_mass(mech, q) -> np.ndarray:
    """Centre of mass of every body, shape (..., n_bodies, 2) [m]."""
    q = np.asarray(q, float)
    out = []
    for body in mech.spec.bodies:
        S, off = _body_selection(mech, body)
        C = body_point_map(body.cog[0], body.cog[1], body.length)
        out.append(np.einsum("kn,...n->...k", C @ S, q) + C @ off)
    return np.stack(out, axis=-2)


def kinetic_energy(mech, qd) -> np.ndarray:
    """T = 1/2 qdot^T M qdot [J], shape (...)."""
    qd = np.asarray(qd, float)
    return 0.5 * np.einsum("...i,ij,...j->...", qd, mech.mass_matrix(), qd)


def potential_energy(mech, q) -> np.ndarray:
    """Gravitational potential V = -sum_b m_b g . r_G,b [J], shape (...)."""
    masses = np.array([b.mass for b in mech.spec.bodies])
    rg = centres_of_mass(mech, q)
    return -np.einsum("b,...bk,k->...", masses, rg, mech.gravity)
