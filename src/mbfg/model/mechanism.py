"""The immutable numerical model of a planar mechanism in natural coordinates.

:func:`build_mechanism` turns a :class:`~mbfg.model.spec.MechanismSpec` into a
:class:`Mechanism`: coordinate layout, constraint tables (as constant arrays, so the
kernels in :mod:`mbfg.model.constraints` are a handful of vectorized numpy calls), the
constant mass matrix and gravity forces, and the assembled initial configuration ``q0``.

Coordinates (reference README): ``x<i>, y<i>`` of each non-fixed point in index order, then
one ``theta<k>`` per relative angle in file order.

Constraints, in row order (paper Appendix III):

1. rigid-body constant distances, body by body: one per 2-point body; pairs (0,1), (0,2),
   (1,2) for 3 points; (0,1), then (0,j), (1,j) for j >= 2 for 4+ points.
   ``Phi = |r_i - r_j|^2 - L^2`` [m^2];
2. user constraints in file order: ``fixed_slider`` (signed distance of the point to the
   fixed line [m]) and ``mobile_slider`` (cross product of (r_k - r_j) and (r_i - r_j)
   divided by the initial |r_k - r_j| [m]);
3. one row per relative angle: ``Phi = (x1 - x0) sin(theta) - (y1 - y0) cos(theta)`` [m].

Rows of kinds 1-2 are quadratic in q and are stored as ``Phi_k = 1/2 q^T H_k q + g_k.q + c_k``
with constant ``H`` (m_q, n, n), ``g`` (m_q, n), ``c`` (m_q,).  Angle rows are trigonometric
and are evaluated by their own kernel; their Hessians depend on q.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from mbfg.errors import AssemblyError, ConvergenceError, SchemaError
from mbfg.model.spec import FixedSliderSpec, MechanismSpec, MobileSliderSpec

_CROSS = np.array([[0.0, 1.0], [-1.0, 0.0]])  # a^T _CROSS b = a_x b_y - a_y b_x


def _freeze(a, dtype=float) -> np.ndarray:
    a = np.array(a, dtype=dtype)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Mechanism:
    """Immutable numerical model.  Build it with :func:`build_mechanism` or
    :func:`mbfg.load_mechanism`; never mutate its arrays (they are read-only).

    Attributes
    ----------
    spec : MechanismSpec
        The evaluated description it was built from.
    n, m : int
        Number of coordinates and of constraint equations.
    coordinate_names : tuple of str
    point_coords : ndarray (n_points, 2) of int
        Index in q of each point's x and y, or -1 for fixed points.
    point_fixed_xy : ndarray (n_points, 2)
        Position of fixed points (0 for free points).
    angle_coords : ndarray (n_angles,) of int
        Index in q of each relative angle.
    quad_H, quad_g, quad_c : ndarrays
        Quadratic constraint tables (see module docstring).
    angle_D : ndarray (n_angles, 2, n)
        ``d = angle_D @ q + angle_d0`` is the vector points[0] -> points[1] of each angle.
    angle_d0 : ndarray (n_angles, 2)
    gravity : ndarray (2,)
        [m/s^2].
    q0 : ndarray (n,)
        Assembled initial configuration.
    independent_rows : ndarray of int
        A maximal linearly independent subset of constraint rows at ``q0`` (all rows unless
        the constraints are redundant).  Dynamics uses these rows.
    """

    spec: MechanismSpec
    n: int
    coordinate_names: tuple
    point_coords: np.ndarray
    point_fixed_xy: np.ndarray
    angle_coords: np.ndarray
    quad_H: np.ndarray
    quad_g: np.ndarray
    quad_c: np.ndarray
    angle_D: np.ndarray
    angle_d0: np.ndarray
    gravity: np.ndarray
    constraint_labels: tuple
    q0: np.ndarray = field(default=None)
    independent_rows: np.ndarray = field(default=None)

    # ----------------------------------------------------------------- sizes
    @property
    def m(self) -> int:
        return self.quad_c.shape[0] + self.angle_coords.shape[0]

    @property
    def m_quadratic(self) -> int:
        return self.quad_c.shape[0]

    @property
    def n_points(self) -> int:
        return self.point_coords.shape[0]

    @property
    def source(self):
        return self.spec.source

    @cached_property
    def _quad_H_flat(self) -> np.ndarray:
        return _freeze(self.quad_H.reshape(-1, self.n))

    @cached_property
    def angle_onehot(self) -> np.ndarray:
        """(n_angles, n) rows selecting each angle coordinate."""
        e = np.zeros((self.angle_coords.size, self.n))
        e[np.arange(self.angle_coords.size), self.angle_coords] = 1.0
        return _freeze(e)

    @cached_property
    def point_selection(self) -> np.ndarray:
        """(n_points, 2, n): ``r_p = point_selection[p] @ q + point_fixed_xy[p]``."""
        A = np.zeros((self.n_points, 2, self.n))
        for p, (ix, iy) in enumerate(self.point_coords):
            if ix >= 0:
                A[p, 0, ix] = 1.0
                A[p, 1, iy] = 1.0
        return _freeze(A)

    # --------------------------------------------------------- convenience API
    def point_positions(self, q) -> np.ndarray:
        """Positions of all points, shape (..., n_points, 2) [m]."""
        q = np.asarray(q, dtype=float)
        return np.einsum("pkn,...n->...pk", self.point_selection, q) + self.point_fixed_xy

    def constraints(self, q):
        """Phi(q), shape (..., m).  See :func:`mbfg.model.constraints.position_constraints`."""
        from mbfg.model import constraints
        return constraints.position_constraints(self, q)

    def constraint_jacobian(self, q):
        """Phi_q(q), shape (..., m, n)."""
        from mbfg.model import constraints
        return constraints.constraint_jacobian(self, q)

    def mass_matrix(self) -> np.ndarray:
        """Constant mass matrix M (n, n) [kg, kg m]; zero rows/columns for relative angles."""
        return self._mass_and_gravity[0]

    def gravity_forces(self) -> np.ndarray:
        """Constant generalized gravity forces (n,) [N]."""
        return self._mass_and_gravity[1]

    @cached_property
    def _mass_and_gravity(self):
        from mbfg.model.inertia import assemble_mass_matrix_and_gravity
        M, Qg = assemble_mass_matrix_and_gravity(self)
        return _freeze(M), _freeze(Qg)

    @property
    def total_mass(self) -> float:
        return float(sum(b.mass for b in self.spec.bodies))

    @property
    def dof(self) -> int:
        """Degrees of freedom n - rank(Phi_q) at q0."""
        return self.n - int(self.independent_rows.size)

    def coordinate_index(self, name_or_index) -> int:
        """Index of a coordinate given by name (``'x1'``, ``'theta0'``) or integer."""
        if isinstance(name_or_index, (int, np.integer)):
            i = int(name_or_index)
            if not 0 <= i < self.n:
                raise IndexError(f"coordinate index {i} out of range 0..{self.n - 1}")
            return i
        try:
            return self.coordinate_names.index(name_or_index)
        except ValueError:
            raise KeyError(f"unknown coordinate {name_or_index!r}; coordinates are "
                           f"{', '.join(self.coordinate_names)}") from None

    def __repr__(self) -> str:
        src = f" from {self.source}" if self.source else ""
        return (f"<Mechanism{src}: n={self.n}, m={self.m}, dof={self.dof}, "
                f"{len(self.spec.bodies)} bodies>")


def _distance_rows(spec: MechanismSpec):
    """(i, j, L, label) for every rigid-body distance constraint, in C++ order."""
    rows = []
    pts = spec.points
    for b, body in enumerate(spec.bodies):
        idx = body.points
        pairs = [(0, 1)]
        if len(idx) == 3:
            pairs += [(0, 2), (1, 2)]
        elif len(idx) > 3:
            for j in range(2, len(idx)):
                pairs += [(0, j), (1, j)]
        for a, c in pairs:
            i, j = idx[a], idx[c]
            if a == 0 and c == 1:
                L = body.length
            else:  # distances between other points of the body come from the initial positions
                L = float(np.hypot(pts[i].x - pts[j].x, pts[i].y - pts[j].y))
            rows.append((i, j, L, f"body{b}:dist({i},{j})"))
    return rows


def build_mechanism(spec: MechanismSpec, *, assemble: bool = True) -> Mechanism:
    """Build the numerical model of a mechanism description.

    Parameters
    ----------
    spec : MechanismSpec
    assemble : bool
        Solve the position problem from the YAML coordinates (tolerance 1e-12) and store the
        result as ``q0``.  Raises :class:`~mbfg.errors.AssemblyError` if it does not converge.
    """
    pts = spec.points
    names = []
    point_coords = -np.ones((len(pts), 2), dtype=int)
    fixed_xy = np.zeros((len(pts), 2))
    for p, pt in enumerate(pts):
        if pt.fixed:
            fixed_xy[p] = (pt.x, pt.y)
        else:
            point_coords[p] = (len(names), len(names) + 1)
            names += [f"x{p}", f"y{p}"]
    angle_coords = []
    for k, _ in enumerate(spec.relative_angles):
        angle_coords.append(len(names))
        names.append(f"theta{k}")
    n = len(names)
    if n == 0:
        raise SchemaError("the mechanism has no coordinates (every point is fixed)",
                          file=spec.source, path="points")

    def affine(p):
        A = np.zeros((2, n))
        if point_coords[p, 0] >= 0:
            A[0, point_coords[p, 0]] = 1.0
            A[1, point_coords[p, 1]] = 1.0
        return A, fixed_xy[p].copy()

    Hs, gs, cs, labels = [], [], [], []
    for i, j, L, label in _distance_rows(spec):
        Ai, bi = affine(i)
        Aj, bj = affine(j)
        A, b = Ai - Aj, bi - bj
        Hs.append(2.0 * A.T @ A)
        gs.append(2.0 * A.T @ b)
        cs.append(b @ b - L * L)
        labels.append(label)
    for k, con in enumerate(spec.constraints):
        if isinstance(con, FixedSliderSpec):
            a = np.asarray(con.line[0], float)
            u = np.asarray(con.line[1], float) - a
            normal = np.array([-u[1], u[0]]) / np.linalg.norm(u)
            Ap, bp = affine(con.point)
            Hs.append(np.zeros((n, n)))
            gs.append(Ap.T @ normal)
            cs.append(normal @ (bp - a))
            labels.append(f"constraint{k}:fixed_slider({con.point})")
        elif isinstance(con, MobileSliderSpec):
            j, kk = con.line_points
            Ai, bi = affine(con.point)
            Aj, bj = affine(j)
            Ak, bk = affine(kk)
            A1, b1 = Ak - Aj, bk - bj            # line direction
            A2, b2 = Ai - Aj, bi - bj            # point relative to line origin
            scale = 1.0 / np.hypot(pts[kk].x - pts[j].x, pts[kk].y - pts[j].y)
            Hs.append(scale * (A1.T @ _CROSS @ A2 + A2.T @ _CROSS.T @ A1))
            gs.append(scale * (A1.T @ _CROSS @ b2 + A2.T @ _CROSS.T @ b1))
            cs.append(scale * (b1 @ _CROSS @ b2))
            labels.append(f"constraint{k}:mobile_slider({con.point};{j},{kk})")
        else:  # pragma: no cover - the loader only produces the types above
            raise SchemaError(f"unknown constraint {con!r}", file=spec.source,
                              path=f"constraints[{k}]")
    angle_D = np.zeros((len(spec.relative_angles), 2, n))
    angle_d0 = np.zeros((len(spec.relative_angles), 2))
    for k, ra in enumerate(spec.relative_angles):
        A0, b0 = affine(ra.points[0])
        A1, b1 = affine(ra.points[1])
        angle_D[k] = A1 - A0
        angle_d0[k] = b1 - b0
        labels.append(f"relative_coordinates[{k}]:angle({ra.points[0]},{ra.points[1]})")
    mq = len(cs)
    mech = Mechanism(
        spec=spec, n=n, coordinate_names=tuple(names),
        point_coords=_freeze(point_coords, int), point_fixed_xy=_freeze(fixed_xy),
        angle_coords=_freeze(angle_coords, int),
        quad_H=_freeze(np.array(Hs).reshape(mq, n, n)), quad_g=_freeze(np.array(gs).reshape(mq, n)),
        quad_c=_freeze(np.array(cs).reshape(mq)), angle_D=_freeze(angle_D),
        angle_d0=_freeze(angle_d0), gravity=_freeze(np.asarray(spec.gravity, float)),
        constraint_labels=tuple(labels),
    )
    q_guess = initial_guess(mech)
    if assemble:
        from mbfg.model.kinematics import solve_position
        try:
            q0 = solve_position(mech, q_guess, tol=1e-12)
        except ConvergenceError as e:
            raise AssemblyError(
                f"the initial configuration cannot be assembled: the position problem did not "
                f"converge (residual |Phi| = {e.residual:.3e} after {e.iterations} Newton "
                f"iterations); check the point coordinates and body lengths",
                file=spec.source) from None
    else:
        q0 = q_guess
    object.__setattr__(mech, "q0", _freeze(q0))
    from mbfg.model.kinematics import independent_constraint_rows
    object.__setattr__(mech, "independent_rows", _freeze(independent_constraint_rows(mech, q0), int))
    return mech


def initial_guess(mech: Mechanism) -> np.ndarray:
    """q built directly from the YAML point coordinates and their angles (not assembled)."""
    q = np.zeros(mech.n)
    for p, pt in enumerate(mech.spec.points):
        ix, iy = mech.point_coords[p]
        if ix >= 0:
            q[ix], q[iy] = pt.x, pt.y
    for k, ra in enumerate(mech.spec.relative_angles):
        a, b = mech.spec.points[ra.points[0]], mech.spec.points[ra.points[1]]
        q[mech.angle_coords[k]] = np.arctan2(b.y - a.y, b.x - a.x)
    return q
