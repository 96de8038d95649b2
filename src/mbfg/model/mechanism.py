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

Every row touches only the few coordinates of its own points (a distance row at most 4, a
fixed slider 2, a mobile slider 6, an angle row 4 point coordinates plus its angle), so the
tables are per row and local, and building the model and evaluating the kernels cost O(m):

* rows of kinds 1-2 are quadratic in q: with ``u = q[quad_coords[k]]`` (the row's coordinates,
  padded with -1),  ``Phi_k = 1/2 u^T H_k u + g_k.u + c_k`` with constant local blocks
  ``H`` (m_q, k_q, k_q), ``g`` (m_q, k_q) and ``c`` (m_q,); fixed points are folded into g and c
  and padded slots have zero coefficients;
* angle rows are trigonometric and are evaluated by their own kernel (their Hessians depend on
  q): ``d = D_k @ q[angle_d_coords[k]] + d0_k`` is the vector points[0] -> points[1].
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import AssemblyError, ConvergenceError, SchemaError
from mbfg.model.spec import FixedSliderSpec, MechanismSpec, MobileSliderSpec

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import ArrayLike

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
    quad_coords : ndarray (m_q, k_q) of int
        Coordinates of each quadratic row, padded with -1 (k_q <= 6).
    quad_H, quad_g, quad_c : ndarrays (m_q, k_q, k_q), (m_q, k_q), (m_q,)
        Local quadratic constraint tables on ``q[quad_coords]`` (see module docstring), in
        units of Phi per m^2, per m, and of Phi.
    angle_d_coords : ndarray (n_angles, k_a) of int
        Point coordinates of each angle row, padded with -1 (k_a <= 4).
    angle_D : ndarray (n_angles, 2, k_a)
        ``d = angle_D[k] @ q[angle_d_coords[k]] + angle_d0[k]`` is the vector
        points[0] -> points[1] of angle k [m].
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
    quad_coords: np.ndarray
    quad_H: np.ndarray
    quad_g: np.ndarray
    quad_c: np.ndarray
    angle_d_coords: np.ndarray
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
    def source(self) -> str:
        return self.spec.source

    @cached_property
    def _quad_slots(self) -> tuple:
        """Non-padded slots of the quadratic rows: ``(mask (m_q, k_q), rows (P,), cols (P,))``
        with ``Phi_q[rows, cols] = local gradient[mask]``."""
        return _slots(self.quad_coords, 0)

    @cached_property
    def _angle_slots(self) -> tuple:
        """Non-padded point slots of the angle rows, as ``_quad_slots`` (rows counted from
        0 for the first constraint row, i.e. offset by m_quadratic)."""
        return _slots(self.angle_d_coords, self.m_quadratic)

    @cached_property
    def _quad_hessian_slots(self) -> tuple:
        """Non-padded (i, j) slot pairs of the quadratic rows' local Hessians:
        ``(mask (m_q, k_q, k_q), rows (P,), cols_i (P,), cols_j (P,))`` with
        ``Phi_qq[rows, cols_i, cols_j] = quad_H[mask]``."""
        c = self.quad_coords
        mask = (c[:, :, None] >= 0) & (c[:, None, :] >= 0)
        r, i, j = np.nonzero(mask)
        return _freeze(mask, bool), _freeze(r, int), _freeze(c[r, i], int), _freeze(c[r, j], int)

    @cached_property
    def _quad_hessian_sum(self) -> tuple:
        """The nonzero entries of the quadratic rows' Hessians grouped by (n, n) cell, for
        sum_k lam_k H_k: ``(cells (U,), starts (U,), rows (P,), values (P,))``, entries
        ``starts[u]:starts[u + 1]`` (of rows ``rows``) fall in flat cell ``cells[u] = i n + j``."""
        mask, rows, ci, cj = self._quad_hessian_slots
        h = self.quad_H[mask]
        nz = np.flatnonzero(h)
        flat = ci[nz] * self.n + cj[nz]
        order = np.argsort(flat, kind="stable")
        cells, starts = np.unique(flat[order], return_index=True)
        return (_freeze(cells, int), _freeze(starts, int), _freeze(rows[nz][order], int),
                _freeze(h[nz][order]))

    @cached_property
    def _jacobian_pattern(self):
        """:class:`~mbfg.model.stacked_sparse.Pattern` of Phi_q (m, n) and of every kernel
        with its structure (Phi_qq v, d(dPhi_q/dt v)/dq): the quadratic rows' slots, the
        angle rows' point slots, then each angle row's own angle coordinate."""
        from mbfg.model.stacked_sparse import Pattern
        _, qr, qc = self._quad_slots
        _, ar, acol = self._angle_slots
        arows = self.m_quadratic + np.arange(self.angle_coords.size)
        return Pattern.of(np.concatenate([qr, ar, arows]),
                          np.concatenate([qc, acol, self.angle_coords]), (self.m, self.n))

    @cached_property
    def _hessian_sum_pattern(self):
        """Pattern of sum_k lam_k Phi_qq,k (n, n): the quadratic rows' cells
        (``_quad_hessian_sum``), the angle rows' (point, angle) and (angle, point) cells,
        then the angle diagonal."""
        from mbfg.model.stacked_sparse import Pattern
        n = self.n
        cells = self._quad_hessian_sum[0]
        mask, rows, cols = self._angle_slots
        th = self.angle_coords[rows - self.m_quadratic]
        return Pattern.of(np.concatenate([cells // n, cols, th, self.angle_coords]),
                          np.concatenate([cells % n, th, cols, self.angle_coords]), (n, n))

    @cached_property
    def _mass_pattern(self) -> tuple:
        """(Pattern, values (1, nnz)) of the nonzeros of the constant mass matrix."""
        from mbfg.model.stacked_sparse import Pattern
        M = self.mass_matrix()
        i, j = np.nonzero(M)
        return Pattern.of(i, j, M.shape), _freeze(M[i, j][None, :])

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
    def point_positions(self, q: ArrayLike) -> np.ndarray:
        """Positions of all points, shape (..., n_points, 2) [m]."""
        q = np.asarray(q, dtype=float)
        return np.where(self.point_coords >= 0, q[..., self.point_coords], self.point_fixed_xy)

    def constraints(self, q: ArrayLike) -> np.ndarray:
        """Phi(q), shape (..., m).  See :func:`mbfg.model.constraints.position_constraints`."""
        from mbfg.model import constraints
        return constraints.position_constraints(self, q)

    def constraint_jacobian(self, q: ArrayLike) -> np.ndarray:
        """Phi_q(q), shape (..., m, n)."""
        from mbfg.model import constraints
        return constraints.constraint_jacobian(self, q)

    def mass_matrix(self) -> np.ndarray:
        """Constant mass matrix M (n, n) [kg, kg m]; zero rows/columns for relative angles."""
        return self._mass_and_gravity[0]

    def mass_times(self, x: ArrayLike) -> np.ndarray:
        """M x for x (..., n) (M symmetric, so also x M), through the sparse structure of M:
        cost linear in the number of bodies where ``x @ M`` is quadratic."""
        x = np.asarray(x, float)
        if self.n <= 64:  # a dense product is cheaper than the sparse call's overhead there
            return x @ self.mass_matrix()
        return (self._mass_csr @ x.reshape(-1, self.n).T).T.reshape(x.shape)

    @cached_property
    def _mass_csr(self):
        import scipy.sparse
        return scipy.sparse.csr_matrix(self.mass_matrix())

    def gravity_forces(self) -> np.ndarray:
        """Constant generalized gravity forces (n,) [N]."""
        return self._mass_and_gravity[1]

    @cached_property
    def _mass_and_gravity(self):
        from mbfg.model.inertia import assemble_mass_matrix_and_gravity
        M, Qg = assemble_mass_matrix_and_gravity(self)
        return _freeze(M), _freeze(Qg)

    @cached_property
    def friction_elements(self) -> tuple:
        """The friction elements of the YAML ``friction:`` list
        (:func:`mbfg.model.nonconservative.friction_elements`)."""
        from mbfg.model.nonconservative import friction_elements
        return friction_elements(self)

    def with_parameters(self, pi: np.ndarray | None = None, **by_name: Any) -> "Mechanism":
        """The same mechanism with other physical parameters; see
        :func:`mbfg.model.parameters.with_parameters`."""
        from mbfg.model.parameters import with_parameters
        return with_parameters(self, pi, **by_name)

    @property
    def total_mass(self) -> float:
        return float(sum(b.mass for b in self.spec.bodies))

    @property
    def dof(self) -> int:
        """Degrees of freedom n - rank(Phi_q) at q0."""
        return self.n - int(self.independent_rows.size)

    def coordinate_index(self, name_or_index: str | int) -> int:
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


def _constraint_points(spec: MechanismSpec, k: int) -> tuple:
    """Points of user constraint ``k``: (point,) or (point, line point j, line point k)."""
    con = spec.constraints[k]
    if isinstance(con, FixedSliderSpec):
        return (con.point,)
    if isinstance(con, MobileSliderSpec):
        return (con.point,) + tuple(con.line_points)
    raise SchemaError(f"unknown constraint {con!r}",  # pragma: no cover - loader types only
                      file=spec.source, path=f"constraints[{k}]")


def _coordinate_table(point_coords: np.ndarray, row_points) -> np.ndarray:
    """(rows, k) int table of the coordinates of each row's points (fixed points have none),
    padded with -1; k is the widest row."""
    coords = [list(dict.fromkeys(int(c) for p in pts for c in point_coords[p] if c >= 0))
              for pts in row_points]
    table = -np.ones((len(coords), max(map(len, coords), default=0)), dtype=int)
    for r, c in enumerate(coords):
        table[r, :len(c)] = c
    return table


def _local_affine(point_coords, fixed_xy, row_coords, p):
    """(A (2, k), b (2,)) with ``r_p = A @ q[row_coords] + b`` [m], for a point whose
    coordinates are among the row's ``row_coords`` (k,) (padded with -1)."""
    A = (row_coords == point_coords[p][:, None]) & (row_coords >= 0)
    return A.astype(float), fixed_xy[p]


def _slots(coords: np.ndarray, row0: int) -> tuple:
    """(mask, rows, cols) of the non-padded entries of a coordinate table (r, k); rows are
    offset by ``row0``."""
    mask = coords >= 0
    r, _ = np.nonzero(mask)
    return _freeze(mask, bool), _freeze(row0 + r, int), _freeze(coords[mask], int)


def build_mechanism(spec: MechanismSpec, *, assemble: bool = True) -> Mechanism:
    """Build the numerical model of a mechanism description.

    Parameters
    ----------
    spec : MechanismSpec
    assemble : bool
        Solve the position problem from the YAML coordinates (tolerance 1e-12) and store the
        result as ``q0``.  Raises :class:`~mbfg.errors.AssemblyError` if it does not converge,
        and :class:`~mbfg.errors.SingularMassError` if some motion the constraints allow at
        ``q0`` carries no mass (:func:`mbfg.model.validation.check_mass_matrix`).
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

    distances = _distance_rows(spec)
    quad_coords = _coordinate_table(
        point_coords, [(i, j) for i, j, _, _ in distances]
        + [_constraint_points(spec, k) for k in range(len(spec.constraints))])
    mq, kq = quad_coords.shape
    H, g, c = np.zeros((mq, kq, kq)), np.zeros((mq, kq)), np.zeros(mq)

    def affine(row_coords, p):
        return _local_affine(point_coords, fixed_xy, row_coords, p)

    labels = []
    for r, (i, j, L, label) in enumerate(distances):
        Ai, bi = affine(quad_coords[r], i)
        Aj, bj = affine(quad_coords[r], j)
        A, b = Ai - Aj, bi - bj
        H[r] = 2.0 * A.T @ A
        g[r] = 2.0 * A.T @ b
        c[r] = b @ b - L * L
        labels.append(label)
    for k, con in enumerate(spec.constraints):
        r = len(distances) + k
        if isinstance(con, FixedSliderSpec):
            a = np.asarray(con.line[0], float)
            u = np.asarray(con.line[1], float) - a
            normal = np.array([-u[1], u[0]]) / np.linalg.norm(u)
            Ap, bp = affine(quad_coords[r], con.point)
            g[r] = Ap.T @ normal
            c[r] = normal @ (bp - a)
            labels.append(f"constraint{k}:fixed_slider({con.point})")
        else:  # MobileSliderSpec (_constraint_points rejected anything else)
            j, kk = con.line_points
            Ai, bi = affine(quad_coords[r], con.point)
            Aj, bj = affine(quad_coords[r], j)
            Ak, bk = affine(quad_coords[r], kk)
            A1, b1 = Ak - Aj, bk - bj            # line direction
            A2, b2 = Ai - Aj, bi - bj            # point relative to line origin
            scale = 1.0 / np.hypot(pts[kk].x - pts[j].x, pts[kk].y - pts[j].y)
            H[r] = scale * (A1.T @ _CROSS @ A2 + A2.T @ _CROSS.T @ A1)
            g[r] = scale * (A1.T @ _CROSS @ b2 + A2.T @ _CROSS.T @ b1)
            c[r] = scale * (b1 @ _CROSS @ b2)
            labels.append(f"constraint{k}:mobile_slider({con.point};{j},{kk})")
    angle_d_coords = _coordinate_table(point_coords, [ra.points for ra in spec.relative_angles])
    angle_D = np.zeros((len(spec.relative_angles), 2, angle_d_coords.shape[1]))
    angle_d0 = np.zeros((len(spec.relative_angles), 2))
    for k, ra in enumerate(spec.relative_angles):
        A0, b0 = affine(angle_d_coords[k], ra.points[0])
        A1, b1 = affine(angle_d_coords[k], ra.points[1])
        angle_D[k] = A1 - A0
        angle_d0[k] = b1 - b0
        labels.append(f"relative_coordinates[{k}]:angle({ra.points[0]},{ra.points[1]})")
    mech = Mechanism(
        spec=spec, n=n, coordinate_names=tuple(names),
        point_coords=_freeze(point_coords, int), point_fixed_xy=_freeze(fixed_xy),
        angle_coords=_freeze(angle_coords, int), quad_coords=_freeze(quad_coords, int),
        quad_H=_freeze(H), quad_g=_freeze(g), quad_c=_freeze(c),
        angle_d_coords=_freeze(angle_d_coords, int), angle_D=_freeze(angle_D),
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
    if assemble:  # a massless free motion (a point in no body) would make M singular
        from mbfg.model.validation import check_mass_matrix
        check_mass_matrix(mech)
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


__all__ = [
    "Mechanism", "build_mechanism", "initial_guess"
]
