"""Kinematic problems: position (assembly, finite displacement), velocity and acceleration
problems, choice of independent coordinates and the velocity transform R, S (paper Eqs. 1-3,
8-12).

Every linear solve on Phi_q is rank revealing (SVD least squares or QR with column pivoting),
because mechanisms such as the pick-and-place robot have redundant constraints (Phi_q is 21x22
of rank 20).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg

from mbfg.errors import ConvergenceError, SolverError
from mbfg.model import constraints as C
from mbfg.model.kkt import minimum_norm, uses_sparse
from mbfg.model.stacked_sparse import StackedSparse, times
from mbfg.model.scales import constraint_scales, coordinate_scales
from mbfg.model.sensors import wrap_angle

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

RANK_RTOL = 1e-9
"""Singular values below RANK_RTOL * sigma_max count as zero when computing ranks."""


def numerical_rank(A: np.ndarray, rtol: float = RANK_RTOL) -> int:
    """Rank of A from its singular values."""
    if A.size == 0:
        return 0
    s = np.linalg.svd(A, compute_uv=False)
    return int(np.sum(s > rtol * max(s[0], 1e-300)))


def independent_constraint_rows(mech: Mechanism, q: ArrayLike) -> np.ndarray:
    """Indices of a maximal linearly independent subset of the rows of Phi_q(q), sorted.

    Found by QR with column pivoting of Phi_q^T; equal to all rows for non-redundant
    constraints."""
    J = C.constraint_jacobian(mech, q)
    r = numerical_rank(J)
    if r == J.shape[0]:
        return np.arange(J.shape[0])
    _, _, piv = scipy.linalg.qr(J.T, mode="economic", pivoting=True)
    return np.sort(piv[:r])


def solve_position(
    mech: Mechanism,
    q_guess: ArrayLike,
    *,
    fixed_indices: ArrayLike = (),
    fixed_values: ArrayLike | None = None,
    tol: float = 1e-12,
    max_iter: int = 100,
) -> np.ndarray:
    """Solve the position problem Phi(q) = 0 (optionally with q[fixed_indices] = fixed_values).

    Gauss-Newton with minimum-norm least-squares steps (SVD; the norm in units of the
    coordinates' scales, :func:`mbfg.model.scales.coordinate_scales`, so that the solution
    does not depend on the mechanism's units), which keeps the solution on the assembly
    branch nearest the guess.

    Parameters
    ----------
    q_guess : (n,) array
    fixed_indices : sequence of int
        Coordinates held at ``fixed_values`` (finite-displacement problem).
    tol : float
        Convergence when max_i |Phi_i| / scale_i <= tol: the distance to the constraint
        manifold relative to the mechanism's length (``scale_i`` from
        :func:`mbfg.model.scales.constraint_scales` at the guess), so the tolerance means the
        same for a 10 mm linkage and a 10 m crane.

    Raises
    ------
    ConvergenceError
        With the final (relative) residual when the tolerance is not met within ``max_iter``
        iterations.
    """
    q = np.array(q_guess, dtype=float)
    idx = np.asarray(fixed_indices, dtype=int)
    if idx.size:
        q[idx] = np.asarray(fixed_values, dtype=float)
    free = _other_indices(mech.n, idx)
    s_free = coordinate_scales(mech)[free]
    with np.errstate(all="ignore"):
        scale = constraint_scales(mech, q)
    best = np.inf
    for it in range(max_iter + 1):
        phi = C.position_constraints(mech, q)
        res = float(np.max(np.abs(phi) / scale)) if phi.size else 0.0
        if not np.isfinite(res):
            break
        best = min(best, res)
        if res <= tol:
            return q
        if it == max_iter:
            break
        J = C.constraint_jacobian(mech, q)[:, free]
        step = np.linalg.lstsq(J * s_free, -phi, rcond=None)[0] * s_free
        q[free] += step
    raise ConvergenceError("position problem did not converge", residual=best, iterations=it)


def solve_finite_displacement(
    mech: Mechanism,
    q_guess: ArrayLike,
    indices: ArrayLike,
    values: ArrayLike,
    *,
    tol: float = 1e-12,
    max_iter: int = 100,
) -> np.ndarray:
    """Position problem with given independent coordinates ``q[indices] = values``."""
    return solve_position(mech, q_guess, fixed_indices=indices, fixed_values=values, tol=tol,
                          max_iter=max_iter)


def choose_independent_coordinates(
    mech: Mechanism, q: ArrayLike | None = None, prefer: ArrayLike | None = None
) -> tuple:
    """Choose ``dof`` coordinates that can serve as independent coordinates at ``q``.

    Greedy: walk through candidate coordinates (``prefer`` first, then relative angles, then
    point coordinates) and keep one if it raises the rank of [Phi_q; B].  The test is made
    against an orthonormal basis of the row space of Phi_q in the coordinates' own scales
    (:func:`mbfg.model.scales.coordinate_scales`), extended by each kept coordinate: a
    candidate raises the rank when its distance to that space exceeds ``RANK_RTOL``.  One QR
    and O(n) small products, so the cost stays low for long chains.  Returns a sorted tuple
    of coordinate indices.
    """
    q = mech.q0 if q is None else np.asarray(q, float)
    # the independent rows at q: off the constraint manifold the full Phi_q of a mechanism
    # with redundant constraints gains rank, but the mechanism's DOF does not change
    Jall = C.constraint_jacobian(mech, q)
    J = C.take_rows(Jall, C.independent_rows(mech, q, Jall), 1) * coordinate_scales(mech)
    dof = mech.n - J.shape[0]
    basis = np.linalg.qr(J.T)[0] if J.shape[0] else np.zeros((mech.n, 0))
    order = list(prefer or []) + list(mech.angle_coords) + list(range(mech.n))
    chosen = []
    for i in order:
        if len(chosen) == dof:
            break
        if i in chosen:
            continue
        u = -basis @ basis[i]
        u[i] += 1.0  # e_i minus its projection onto the current space
        dist = float(np.linalg.norm(u))
        if dist > RANK_RTOL:
            chosen.append(int(i))
            basis = np.column_stack([basis, u / dist])
    return tuple(sorted(chosen))


def selection_matrix(n: int, indices: ArrayLike) -> np.ndarray:
    """B (d, n) with B q = q[indices] (the I_idxs of Eq. 30d)."""
    idx = np.asarray(indices, dtype=int)
    B = np.zeros((idx.size, n))
    B[np.arange(idx.size), idx] = 1.0
    return B


def check_independent_coordinates(
    mech: Mechanism, indices: tuple, q: ArrayLike | None = None
) -> tuple:
    """Raise :class:`SolverError` unless ``indices`` is a valid set of independent coordinates."""
    q = mech.q0 if q is None else q
    idx = tuple(int(i) for i in indices)
    if len(idx) != mech.dof or len(set(idx)) != len(idx) or any(not 0 <= i < mech.n for i in idx):
        raise SolverError(f"independent coordinates must be {mech.dof} distinct indices in "
                          f"0..{mech.n - 1}; got {list(idx)}")
    K = np.vstack([C.take_rows(C.constraint_jacobian(mech, q), C.independent_rows(mech, q), 1),
                   selection_matrix(mech.n, idx)])
    if numerical_rank(K) < mech.n:
        names = [mech.coordinate_names[i] for i in idx]
        raise SolverError(f"coordinates {names} cannot serve as independent coordinates at this "
                          f"configuration ([Phi_q; B] is singular)")
    return idx


def velocity_transform(
    mech: Mechanism,
    q: ArrayLike,
    indices: ArrayLike,
    rows: ArrayLike | None = None,
    J: ArrayLike | None = None,
) -> tuple:
    """R (n, d) and S (n, m') of Eq. (11): [Phi_q'; B]^-1 = [S R], where Phi_q' keeps the
    independent constraint rows ``rows`` (default :func:`~mbfg.model.constraints.independent_rows`).

    qdot = S b + R zdot (Eq. 11);  qddot = S c + R zddot (Eq. 12), with b and c taken on the
    same rows.  Vectorized over leading axes of ``q``; ``J`` is Phi_q(q) of all rows when the
    caller already has it.  In a batch of several configurations, one where [Phi_q'; B] is
    singular (the coordinates ``indices`` turn back there: a rocker's point at its limit) gets
    NaN rows and the others their transforms (a particle or sigma point that meets it is
    lost, not the whole cloud); a single configuration raises ``LinAlgError``."""
    Jall = C.constraint_jacobian(mech, q) if J is None else J
    rows = C.independent_rows(mech, q, Jall) if rows is None else rows
    J = C.take_rows(Jall, rows, 1)
    B = np.broadcast_to(selection_matrix(mech.n, indices), J.shape[:-2] + (len(indices), mech.n))
    Kinv = _inverse_each(np.concatenate([J, B], axis=-2))
    mr = J.shape[-2]
    return Kinv[..., :, mr:], Kinv[..., :, :mr]


def _inverse_each(K: np.ndarray) -> np.ndarray:
    """np.linalg.inv over the leading axes, NaN for a singular member of a batch of several
    (a single matrix, or a batch of one, raises as np.linalg.inv does)."""
    try:
        return np.linalg.inv(K)
    except np.linalg.LinAlgError:
        if int(np.prod(K.shape[:-2])) <= 1:
            raise
    flat = K.reshape((-1,) + K.shape[-2:])
    out = np.full(flat.shape, np.nan)
    for i, Ki in enumerate(flat):          # the rare path: a batch with a singular member
        try:
            out[i] = np.linalg.inv(Ki)
        except np.linalg.LinAlgError:
            pass
    return out.reshape(K.shape)


def velocity_sensitivity(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, R: ArrayLike, S: ArrayLike, rows: ArrayLike
) -> np.ndarray:
    """dqdot/dz (n, d) along the constraint manifold at one state, with zdot held.

    Differentiating Phi_q' qdot = 0 and B qdot = zdot along the manifold direction R e_j gives
    dqdot/dz_j = -S (dPhi_q'/dq . R e_j) qdot (the derivative of Eq. 11 with b = 0).

    Parameters
    ----------
    q, qd : (n,) state on the manifold [m, rad; m/s, rad/s]
    R, S : (n, d), (n, m') the velocity transform at q (:func:`velocity_transform`)
    rows : (m',) the independent constraint rows R and S were built with
    """
    cols = []
    for j in range(R.shape[1]):
        Jd = C.take_rows(C.constraint_jacobian_dot(mech, q, R[:, j]), rows, 1)
        cols.append(-S @ (Jd @ qd))
    return np.stack(cols, axis=1) if cols else np.zeros((mech.n, 0))


def null_space_basis(mech: Mechanism, q: ArrayLike, indices: ArrayLike | None = None) -> np.ndarray:
    """R(q) (n, dof): a basis of the null space of Phi_q with B R = I (Eq. 8)."""
    indices = choose_independent_coordinates(mech, q) if indices is None else indices
    return velocity_transform(mech, q, indices)[0]


def solve_velocity(mech: Mechanism, q: ArrayLike, indices: tuple, zd: ArrayLike) -> np.ndarray:
    """Velocity problem: qdot with Phi_q qdot = 0 and qdot[indices] = zd (Eq. 11, b = 0)."""
    R, _ = velocity_transform(mech, q, indices)
    return R @ np.asarray(zd, float)


def acceleration_rhs(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, rows: ArrayLike | None = None
) -> np.ndarray:
    """c = -dPhi_q/dt qdot on the independent rows (Eq. 3, time-independent constraints)."""
    rows = C.independent_rows(mech, q) if rows is None else rows
    return -C.take_rows(C.acceleration_bias(mech, q, qd), rows)


def solve_acceleration(
    mech: Mechanism, q: ArrayLike, qd: ArrayLike, indices: tuple, zdd: ArrayLike
) -> np.ndarray:
    """Acceleration problem: qddot = S c + R zddot (Eq. 12)."""
    rows = C.independent_rows(mech, q)
    R, S = velocity_transform(mech, q, indices, rows)
    return S @ acceleration_rhs(mech, q, qd, rows) + R @ np.asarray(zdd, float)


def project_velocity(mech: Mechanism, q: ArrayLike, qd: ArrayLike) -> np.ndarray:
    """Minimum-norm correction of qdot onto Phi_q qdot = 0."""
    J = C.constraint_jacobian(mech, q)
    return qd - np.linalg.lstsq(J, J @ qd, rcond=None)[0]


def release_state(
    mech: Mechanism, q0: ArrayLike | None = None, qd0: list | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The state a motion starts from: ``q0`` (n,) (default the assembled ``mech.q0``) and
    ``qd0`` (n,) projected onto Phi_q qdot = 0 (default rest) [m, rad; m/s, rad/s]."""
    q0 = np.array(mech.q0 if q0 is None else q0, float)
    qd0 = np.zeros(mech.n) if qd0 is None else project_velocity(mech, q0, np.asarray(qd0, float))
    return q0, qd0


def branch_point(mech: Mechanism, q: ArrayLike, *, probes: int = 3) -> tuple[str, ...]:
    """The coordinates whose motion is not determined if ``q`` is a branch point, else ().

    A branch point (a change point of a Grashof four-bar, the collinear configuration of a
    parallelogram) is a configuration on the constraint manifold where Phi_q has a lower rank
    than at the configurations around it, so more motions are allowed there than anywhere
    else and the motion through it is not determined by the equations (Eqs. 5-6).  Test: the
    rank of Phi_q in the coordinates' own scales (:func:`mbfg.model.scales.coordinate_scales`)
    at q against its rank at ``probes`` nearby configurations on the manifold, reached by a
    seeded step of 1e-3 of the coordinates' scales along the null space of Phi_q(q) and the
    position problem.  Redundant constraints (rank-deficient everywhere) are not branch points.

    Returns the names of the coordinates that dominate the extra null-space direction.
    """
    q = np.asarray(q, float)
    c = coordinate_scales(mech)
    if mech.m == 0:
        return ()
    if uses_sparse(mech.n, mech.m) and _clearly_full_row_rank(mech, q, c):
        return ()  # the rank cannot rise nearby (and a dense SVD would cost (m n^2))
    J = C.constraint_jacobian(mech, q) * c
    _, sv, Vt = np.linalg.svd(J)
    rank = int(np.sum(sv > RANK_RTOL * sv[0]))
    null = Vt[rank:]
    rng = np.random.default_rng(0)
    for _ in range(probes):
        step = (rng.normal(size=null.shape[0]) @ null) * c
        step *= 1e-3 / max(float(np.max(np.abs(step / c))), np.finfo(float).tiny)
        qp, ok = solve_positions_batch(mech, q + step)
        if not ok[0]:
            continue
        _, sp, Vp = np.linalg.svd(C.constraint_jacobian(mech, qp[0]) * c)
        if int(np.sum(sp > RANK_RTOL * sp[0])) > rank:
            # the constraint direction that degenerates at q: the (rank+1)-th right singular
            # vector nearby, small there and zero at q
            lost = np.abs(Vp[rank])
            return tuple(mech.coordinate_names[i] for i in np.flatnonzero(lost >= 0.3 * lost.max()))
    return ()


def _clearly_full_row_rank(mech, q, c) -> bool:
    """Whether Phi_q(q) diag(c) has full row rank by a wide margin, from one sparse LU of
    G = J J^T: inverse iteration gives mu >= lambda_min(G) (and, from a seeded random start,
    mu <= about 100 sqrt(m) lambda_min after the first step), Gershgorin's bound exceeds
    lambda_max(G).  True when mu exceeds m 1e6 RANK_RTOL^2 times that bound, so that
    sigma_min > RANK_RTOL sigma_max with room to spare; False means "not sure"."""
    import scipy.sparse
    import scipy.sparse.linalg

    J = C.constraint_jacobian(mech, q[None], sparse=True).matrix(0, c)
    G = (J @ J.T).tocsc()
    try:
        with np.errstate(all="ignore"):
            lu = scipy.sparse.linalg.splu(G)
    except RuntimeError:  # exactly singular
        return False
    bound = float(abs(G).sum(axis=1).max())
    x = np.random.default_rng(0).normal(size=G.shape[0])
    mu = 0.0
    for _ in range(3):
        y = lu.solve(x)
        ny = float(np.linalg.norm(y))
        if not np.isfinite(ny) or ny == 0.0:
            return False
        mu = float(np.linalg.norm(x)) / ny
        x = y / ny
    return mu > G.shape[0] * 1e6 * RANK_RTOL ** 2 * bound


def point_coordinate_indices(mech: Mechanism, point: int) -> tuple:
    """Indices of (x, y) of a non-fixed point in q."""
    ix, iy = (int(i) for i in mech.point_coords[point])
    if ix < 0:
        raise SolverError(f"point {point} is fixed; it has no coordinates in q")
    return ix, iy


def inverse_kinematics_point_path(
    mech: Mechanism,
    point: int,
    xy: ArrayLike,
    *,
    q_guess: ArrayLike | None = None,
    xy_dot: ArrayLike | None = None,
    xy_ddot: ArrayLike | None = None,
    tol: float = 1e-12,
) -> tuple | np.ndarray:
    """Configurations that move ``point`` along a path (inverse kinematics of a 2-DOF mechanism
    whose end effector is a natural-coordinate point, e.g. the parallel robot's point 6).

    Each sample solves the finite-displacement problem with the point's (x, y) imposed,
    starting from the previous solution (continuation keeps the assembly branch).  When
    ``xy_dot`` / ``xy_ddot`` are given, velocities and accelerations follow from the velocity
    and acceleration problems (Eqs. 11-12) with the point's coordinates as independent ones.

    Parameters
    ----------
    point : int
        Point index.
    xy : (T, 2) array
        Desired positions [m].
    Returns
    -------
    q : (T, n)  (and qd, qdd (T, n) when xy_dot and xy_ddot are given)
    """
    idx = point_coordinate_indices(mech, point)
    xy = np.asarray(xy, float)
    q = np.array(mech.q0 if q_guess is None else q_guess, float)
    out = np.empty((xy.shape[0], mech.n))
    for k in range(xy.shape[0]):
        try:
            q = solve_finite_displacement(mech, q, idx, xy[k], tol=tol)
        except ConvergenceError as e:
            raise ConvergenceError(f"inverse kinematics failed at sample {k} (point {point} at "
                                   f"{xy[k].tolist()}): the path leaves the workspace or crosses "
                                   f"a singularity", residual=e.residual,
                                   iterations=e.iterations) from None
        out[k] = q
    if xy_dot is None:
        return out
    check_independent_coordinates(mech, idx, out[0])
    qd = np.stack([solve_velocity(mech, out[k], idx, xy_dot[k]) for k in range(len(out))])
    if xy_ddot is None:
        return out, qd
    qdd = np.stack([solve_acceleration(mech, out[k], qd[k], idx, xy_ddot[k])
                    for k in range(len(out))])
    return out, qd, qdd


def solve_positions_batch(
    mech: Mechanism,
    q_guess: ArrayLike,
    fixed_indices: ArrayLike = (),
    fixed_values: ArrayLike | None = None,
    *,
    tol: float = 1e-12,
    max_iter: int = 30,
) -> tuple[np.ndarray, np.ndarray]:
    """Position problem Phi(q) = 0 for many states at once (batched Newton, paper Eq. 1).

    The one batched position solver of the package: the filters' assembly from independent
    coordinates, the inverse-dynamics continuation and the projection of initial guesses all
    call it.  Each iteration takes the minimum-norm step on the free coordinates (those not in
    ``fixed_indices``) for the independent constraint rows, so every state stays on the
    assembly branch of its guess.  The norm is that of the step in units of the coordinates'
    scales (:func:`mbfg.model.scales.coordinate_scales`: lengths against angles), so that the
    configuration a projection reaches does not depend on the mechanism's units.  A held
    angle more than a quarter turn from the guess's can pull a body onto the spurious root of
    its angle row (the body half a turn against its angle,
    :func:`~mbfg.model.constraints.angle_orientation`); such a state is solved again by
    continuation in steps of at most ANGLE_STAGE over the jump's part beyond whole turns,
    and fails if it still ends against its angle or the target is not finite.

    Parameters
    ----------
    q_guess : (N, n) or (n,) array
        Initial configurations [m, rad].
    fixed_indices : sequence of int
        Coordinates held at ``fixed_values`` (the finite-displacement problem, Eq. 8); empty:
        a projection onto the constraint manifold.
    fixed_values : (N, k) or (k,) array
    tol : float
        A state has converged when max_i |Phi_i| / scale_i <= tol, ``scale_i`` the row scale
        of :func:`mbfg.model.scales.constraint_scales` at the guess (unit-free).
    max_iter : int
        Newton iterations at most.

    Returns
    -------
    q : (N, n) array
        The configurations after the last iteration (converged or not).
    converged : (N,) bool array
    """
    q = np.array(q_guess, dtype=float, ndmin=2)
    idx = np.asarray(fixed_indices, int).ravel()
    if idx.size:
        guess = q.copy()
        q[:, idx] = np.broadcast_to(np.asarray(fixed_values, float), (q.shape[0], idx.size))
    q, ok = _newton_positions(mech, q, idx, tol, max_iter)
    if idx.size and mech.angle_coords.size:
        # a held angle moved beyond a quarter turn from the guess's can pull a body's points
        # onto the spurious root of its angle row (the body half a turn against its angle):
        # such a jump is taken again by continuation, in steps of at most ANGLE_STAGE
        held = _is_angle(mech, idx)
        if held.any():
            far = np.max(np.abs(q[:, idx[held]] - guess[:, idx[held]]), axis=1) > np.pi / 2
            rows = np.flatnonzero(far & ok)
            if rows.size:
                rows = rows[_flipped(mech, q[rows]) & ~_flipped(mech, guess[rows])]
            if rows.size:
                q[rows], ok[rows] = _positions_by_continuation(mech, guess[rows], idx,
                                                               q[rows][:, idx], tol, max_iter)
    return q, ok


ANGLE_STAGE = np.pi / 4
"""Largest change of a held angle per stage of the position solve's continuation [rad]."""


def _flipped(mech, q):
    """(N,) whether a configuration has a body against its angle coordinate, where the
    mechanism's own assembly q0 has it along (:func:`~mbfg.model.constraints.angle_orientation`)."""
    own = np.sign(C.angle_orientation(mech, np.asarray(mech.q0, float)))
    return np.any(C.angle_orientation(mech, q) * own < 0, axis=-1)


def _positions_by_continuation(mech, guess, idx, target, tol, max_iter):
    """The position problem from ``guess`` (N, n) with coordinates ``idx`` moved to
    ``target`` (N, k) in equal stages, none changing a held angle by more than ANGLE_STAGE,
    each solved from the last; a configuration still against its angle fails, and so does a
    target that is not finite.

    The constraints repeat with every whole turn of an angle, so each held angle walks only
    the part of its jump beyond whole turns (at most half a turn, four stages) and takes the
    whole turns at the end: a crank's configuration after k turns is the one it started
    from (a diverged filter's sigma points can ask for 1e6 rad; after a 4 s gap the UKF's
    reach beyond two turns)."""
    held = _is_angle(mech, idx)
    with np.errstate(invalid="ignore"):              # (a target that is not finite fails)
        part = wrap_angle(target - guess[:, idx])
    # each held angle's goal within half a turn of the guess (wrapped, so bounded even for a
    # target of 1e300 rad, whose whole turns a rounding would not resolve)
    goal = np.where(held, guess[:, idx] + part, target)
    jump = np.max(np.abs(goal - guess[:, idx])[:, held], axis=1, initial=0.0)
    q = guess.copy()
    q[:, idx] = target
    ok = np.zeros(q.shape[0], bool)
    walk = np.isfinite(jump) & np.all(np.isfinite(target), axis=1)
    if walk.any():
        start, goal = guess[walk], goal[walk]
        stages = max(1, int(np.ceil(np.max(jump[walk]) / ANGLE_STAGE)))
        qw = start.copy()
        for j in range(1, stages + 1):
            qw[:, idx] = start[:, idx] + (j / stages) * (goal - start[:, idx])
            qw, okw = _newton_positions(mech, qw, idx, tol, max_iter)
        ok[walk] = okw & ~_flipped(mech, qw)
        qw[:, idx] = target[walk]                    # the whole turns back
        q[walk] = qw
    return q, ok


def _other_indices(n, idx):
    """The sorted indices of range(n) not in idx (np.setdiff1d without its sort, which
    costs more than a small solve's iteration)."""
    keep = np.ones(n, bool)
    keep[idx] = False
    return np.flatnonzero(keep)


def _is_angle(mech, idx):
    """(k,) bool: whether each coordinate of idx is an angle (np.isin without its sort)."""
    angle = np.zeros(mech.n, bool)
    angle[mech.angle_coords] = True
    return angle[idx]


def _newton_positions(mech, q, idx, tol, max_iter):
    """Batched Newton on the free coordinates of q (N, n), its coordinates idx held
    (:func:`solve_positions_batch`); (q, converged)."""
    free = _other_indices(mech.n, idx)
    coords = coordinate_scales(mech)
    s_free = coords[free]
    sparse = C.sparse_solves(mech)
    active = np.ones(q.shape[0], bool)
    ok = np.zeros(q.shape[0], bool)
    for it in range(max_iter + 1):
        ai = np.flatnonzero(active)
        qa = q[ai]
        phi, Jq = C.position_constraints_and_jacobian(mech, qa)
        if it == 0:                  # the row scales at the guesses (qa is all of q)
            with np.errstate(all="ignore"):
                scale = constraint_scales(mech, q, coords, jacobian=Jq)
        # C.solve_jacobian's rows and Jacobian, from the Phi_q in hand
        rows, J = (np.asarray(mech.independent_rows), Jq) if sparse else \
            C.solve_jacobian(mech, qa, Jq.toarray())
        phi = C.take_rows(phi, rows)
        with np.errstate(all="ignore"):
            rel = phi / C.take_rows(scale[ai], rows)
        res = np.max(np.abs(rel), axis=-1) if rel.shape[-1] else np.zeros(ai.size)
        done = res <= tol
        ok[ai[done]] = True
        keep = ~done & np.isfinite(res)
        active[ai[~keep]] = False
        if it == max_iter or not keep.any():
            break
        ai = ai[keep]
        if isinstance(J, StackedSparse):
            J = StackedSparse(J.values[keep], J.pattern)
            J = J if free.size == mech.n else J.columns(free)
        else:
            J = J[keep][..., free]
        step = _minimum_norm_step(_scaled_columns(J, s_free), -phi[keep]) * s_free
        q[ai[:, None], free[None, :]] += step
    return q, ok


def sweep_configurations(
    mech: Mechanism,
    q: ArrayLike,
    indices: ArrayLike,
    span: float,
    step: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Assembled configurations along one independent coordinate, by continuation from q.

    Walks z = q[indices[0]] in both directions by ``step`` up to ``span``, each configuration
    solved from its neighbour (:func:`solve_positions_batch`), so the sweep stays on the
    assembly branch of q.  It stops where the position problem fails (the limits of a
    non-Grashof crank).

    Parameters
    ----------
    q : (n,) assembled configuration [m, rad]
    indices : (1,) the independent coordinate (one degree of freedom)
    span, step : float
        Half-width of the sweep and its spacing, in the coordinate's units [rad or m].

    Returns
    -------
    z : (K,) the swept values, sorted
    q : (K, n) their configurations
    """
    idx = np.asarray(indices, int).ravel()
    q = np.asarray(q, float)
    z0 = float(q[idx[0]])
    zs, qs = [z0], [q.copy()]
    for sgn in (1.0, -1.0):
        qc = q[None].copy()
        for s in np.arange(1, int(np.ceil(span / step)) + 1):
            zz = z0 + sgn * s * step
            qn, ok = solve_positions_batch(mech, qc, idx, np.array([[zz]]))
            if not ok[0]:
                break
            qc = qn
            zs.append(zz)
            qs.append(qn[0])
    order = np.argsort(zs)
    return np.asarray(zs)[order], np.asarray(qs)[order]


def scaled_difference(mech: Mechanism, qa: ArrayLike, qb: ArrayLike) -> np.ndarray:
    """qb - qa in units of the coordinates' scales (:func:`mbfg.model.scales.coordinate_scales`),
    angles taken modulo a turn: (..., n), broadcast over leading axes (dimensionless)."""
    d = (np.asarray(qb, float) - np.asarray(qa, float)) / coordinate_scales(mech)
    angles = np.asarray(mech.angle_coords, int)
    d[..., angles] = wrap_angle(d[..., angles])
    return d


def sweep_loop(
    mech: Mechanism,
    q: ArrayLike,
    step: float,
    max_points: int = 20000,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Assembled configurations around a one-degree-of-freedom mechanism's configuration
    loop through q, by pseudo-arclength continuation.

    Where :func:`sweep_configurations` walks one coordinate and stops where that coordinate
    turns back (a rocker's limit, a point coordinate's extreme), this walks the curve
    Phi(q) = 0 itself: at each configuration the unit tangent t (the null space of Phi_q in
    units of the coordinates' scales, :func:`mbfg.model.scales.coordinate_scales`) gives the
    coordinate c that moves fastest there (largest |t_c|, so holding it is well conditioned),
    which is moved by ``step`` t_c of its scale and held while the others are solved from
    the predicted q + step t (:func:`solve_positions_batch`; halved up to four times where
    that fails).  It goes on until it is back
    within three quarters of a step of q (angles taken modulo a turn): the closed loop, on q's branch
    and through the other assembly mode where the loop passes into it, as the mechanism
    moves.  Where a solve fails (a singular configuration), it walks the other way from q
    instead, and the result is an open arc.

    Parameters
    ----------
    q : (n,) assembled configuration [m, rad]
    step : float
        Spacing along the loop in units of the coordinates' scales (dimensionless).
    max_points : int
        Most configurations walked in all.

    Returns
    -------
    q : (K, n) configurations, in order along the loop (the first is q)
    coordinate : (K,) int, the coordinate moving fastest at each (the one to hold there)
    closed : bool, whether the walk came back to q
    """
    q = np.asarray(q, float)
    s = coordinate_scales(mech)

    def tangent(qc, previous):
        J = C.constraint_jacobian(mech, qc) * s
        t = np.linalg.svd(J)[2][-1]
        if previous is not None and t @ previous < 0:
            t = -t
        return t

    def gap(qa):
        return float(np.linalg.norm(scaled_difference(mech, q, qa)))

    t0 = tangent(q, None)
    out, coord = [q.copy()], [int(np.argmax(np.abs(t0)))]
    closed = False
    for direction in (1.0, -1.0):
        qc, t = q.copy(), direction * t0
        arc, arc_coord = [], []
        while len(out) + len(arc) < max_points:
            c = int(np.argmax(np.abs(t)))
            for h in step / 2.0 ** np.arange(5):      # a tight bend: shorter steps
                guess = qc + h * t * s
                qn, ok = solve_positions_batch(mech, guess, [c], [[guess[c]]])
                if ok[0]:
                    break
            if not ok[0]:
                break
            qc = qn[0]
            if len(arc) >= 3 and gap(qc) < 0.75 * step:
                closed = True
                break
            arc.append(qc)
            t = tangent(qc, t)
            arc_coord.append(int(np.argmax(np.abs(t))))   # the coordinate to hold there
        if direction > 0:
            out, coord = out + arc, coord + arc_coord
        else:
            out, coord = arc[::-1] + out, arc_coord[::-1] + coord
        if closed:
            break
    return np.asarray(out), np.array(coord, int), closed


def fit_positions_batch(
    mech: Mechanism,
    q_guess: ArrayLike,
    indices: ArrayLike,
    values: ArrayLike,
    *,
    tol: float = 1e-10,
    max_iter: int = 30,
) -> tuple[np.ndarray, np.ndarray]:
    """Configurations on the constraint manifold whose coordinates ``indices`` best match
    ``values`` in least squares (each coordinate in its own scale,
    :func:`mbfg.model.scales.coordinate_scales`), for many states at once.

    The position problem of measurements that over-determine the configuration (markers on
    every moving point of a one-dof linkage): holding all measured coordinates, as
    :func:`solve_positions_batch` does, has no solution when the readings are noisy, and
    holding only ``dof`` of them can pick the other root where they are poorly conditioned
    (a crank's y alone near its top).  Gauss-Newton on the manifold: each iteration moves
    along the tangent space (an orthonormal basis N of the null space of Phi_q diag(s),
    :func:`mbfg.model.partition.null_space_bases`) by the least-squares step of the
    measured rows of N, then returns to the manifold by :func:`solve_positions_batch`, so
    each state stays on the assembly branch of its guess.

    Parameters
    ----------
    q_guess : (N, n) or (n,) array
        Initial configurations [m, rad] (projected onto the manifold first).
    indices : sequence of int
        The measured coordinates (at least ``dof`` of them, fixing the configuration).
    values : (N, k) or (k,) array
        Their measured values.
    tol : float
        Convergence: the largest tangent step, in units of the coordinates' scales.
    max_iter : int

    Returns
    -------
    q : (N, n) array
    converged : (N,) bool array
    """
    from mbfg.model.partition import null_space_bases
    q = np.array(q_guess, dtype=float, ndmin=2)
    idx = np.asarray(indices, int).ravel()
    s = coordinate_scales(mech)
    z = np.broadcast_to(np.asarray(values, float), (q.shape[0], idx.size))
    q, ok = solve_positions_batch(mech, q)
    done = np.zeros(q.shape[0], bool)
    for _ in range(max_iter):
        a = np.flatnonzero(~done)
        if not a.size:
            break
        N = null_space_bases(mech, q[a], s)                        # (A, n, d)
        Nm = N[:, idx, :]
        r = (z[a] - q[a][:, idx]) / s[idx]
        step = (np.linalg.pinv(Nm) @ r[:, :, None])[:, :, 0]          # (A, d)
        qa, oka = solve_positions_batch(mech, q[a] + s * (N @ step[:, :, None])[:, :, 0])
        q[a], ok[a] = qa, oka
        done[a] = np.max(np.abs(step), axis=1) <= tol
    return q, ok & done


def _scaled_columns(J, s: np.ndarray):
    """J diag(s) for a batch of Jacobians (T, r, f) or a StackedSparse one: the Jacobian
    with respect to the coordinates in units of their scales s (f,)."""
    if isinstance(J, StackedSparse):
        return StackedSparse(J.values * s[J.pattern.cols], J.pattern)
    return J * s


def _minimum_norm_step(J, rhs):
    """Minimum-norm solutions of J x = rhs for a batch (T, r, f), (T, r): a direct solve when
    square, J^T (J J^T)^-1 rhs when wide (for large systems the same x by
    :func:`mbfg.model.kkt.minimum_norm`, sparse);
    the pseudo-inverse where those are singular."""
    if isinstance(J, StackedSparse):
        return minimum_norm(J, rhs)
    try:
        if J.shape[-2] == J.shape[-1]:
            return np.linalg.solve(J, rhs[..., None])[..., 0]
        if uses_sparse(J.shape[-1], J.shape[-2]):
            return minimum_norm(J, rhs)
        Jt = np.swapaxes(J, -1, -2)
        return (Jt @ np.linalg.solve(J @ Jt, rhs[..., None]))[..., 0]
    except np.linalg.LinAlgError:
        return np.einsum("...ij,...j->...i", np.linalg.pinv(J), rhs)


def project_velocities_batch(mech: Mechanism, q: ArrayLike, v: ArrayLike,
                             scale: ArrayLike | None = None) -> np.ndarray:
    """Vectorized minimum-norm projection of velocities (T, n) onto Phi_q v = 0.

    ``scale`` (n,): the norm is that of v / scale; default each coordinate's own scale
    (:func:`mbfg.model.scales.coordinate_scales`), so that the projection does not depend on
    the units of lengths against angles."""
    q = np.asarray(q, float)
    v = np.asarray(v, float)
    _, J = C.solve_jacobian(mech, q)
    s = coordinate_scales(mech) if scale is None else np.asarray(scale, float)
    v = v / s                                  # in the scaled coordinates u = v / s:
    J = _scaled_columns(J, s)                  # Phi_q diag(s) u = 0
    if isinstance(J, StackedSparse) or uses_sparse(mech.n, J.shape[-2]):
        # the minimum-norm correction, by the sparse saddle-point solve (flattened states)
        v2 = np.broadcast_to(v, q.shape).reshape(-1, mech.n)
        J2 = J if isinstance(J, StackedSparse) else J.reshape((-1,) + J.shape[-2:])
        return (v2 + minimum_norm(J2, -times(J2, v2))).reshape(q.shape) * s
    y = np.linalg.solve(J @ np.swapaxes(J, 1, 2), (J @ v[..., None]))
    return (v - (np.swapaxes(J, 1, 2) @ y)[..., 0]) * s


class StateProjection:
    """:func:`solve_positions_batch` (a projection: no fixed coordinates) and
    :func:`project_velocities_batch` for one state at a time, on the fused single-state
    constraint kernels (:class:`~mbfg.model.constraints.StateConstraints`): the same Newton
    iterations, minimum-norm steps and unit-free convergence test, the same results to
    rounding, at a fraction of the batch functions' fixed cost per call (explicit time
    stepping projects one state every few steps).  Mechanisms with redundant constraints
    (rows chosen per state), and those large enough for the sparse saddle-point solve
    (:mod:`mbfg.model.kkt`), use the batch functions themselves."""

    def __init__(self, mech: Mechanism):
        self.mech = mech
        self.constraints = C.StateConstraints(mech)
        # redundant rows (chosen per state), or large enough for the sparse KKT solve
        self.general = (mech.independent_rows.size < mech.m
                        or uses_sparse(mech.n, mech.m))
        self._c = coordinate_scales(mech)
        from scipy.linalg.lapack import dgesv
        self._gesv = dgesv

    def positions(self, q: ArrayLike, *, tol: float = 1e-12, max_iter: int = 30) -> np.ndarray:
        """q (n,) moved onto Phi = 0 (the configuration after the last iteration, converged
        or not, as :func:`solve_positions_batch`)."""
        if self.general:
            return solve_positions_batch(self.mech, q, tol=tol, max_iter=max_iter)[0][0]
        q = np.array(q, dtype=float)
        phi, J = self.constraints.evaluate(q)
        with np.errstate(all="ignore"):
            Jc = J * self._c  # constraint_scales at the guess
            rows = np.sqrt(np.einsum("ij,ij->i", Jc, Jc))
            largest = rows.max(initial=0.0)
            inv = 1.0 / np.where(rows > 0.0, rows, largest if largest > 0.0 else 1.0)
            for it in range(max_iter + 1):
                if it:
                    phi, J = self.constraints.evaluate(q)
                res = np.abs(phi * inv).max(initial=0.0)
                if res <= tol or not np.isfinite(res) or it == max_iter:
                    break
                q += self._minimum_norm(J, -phi)
        return q

    def _minimum_norm(self, J, rhs):
        """The step x with J x = rhs of least norm in units of the coordinates' scales c:
        c * Jc^T (Jc Jc^T)^-1 rhs, Jc = J diag(c) (:func:`_minimum_norm_step` for one
        state)."""
        Jc = J * self._c
        if J.shape[0] < J.shape[1]:
            _, _, y, info = self._gesv(Jc @ Jc.T, rhs)
            if info == 0:
                return (Jc.T @ y) * self._c
        return _minimum_norm_step(Jc[None], rhs[None])[0] * self._c

    def velocities(self, q: ArrayLike, v: ArrayLike) -> np.ndarray:
        """The minimum-norm projection of v (n,) onto Phi_q(q) v = 0 (the norm in units of
        the coordinates' scales, as :func:`project_velocities_batch`)."""
        v = np.asarray(v, float)
        if self.general:
            return project_velocities_batch(self.mech, np.asarray(q)[None], v[None])[0]
        Jc = self.constraints.jacobian(np.asarray(q, float)) * self._c
        _, _, y, info = self._gesv(Jc @ Jc.T, Jc @ (v / self._c))
        if info:
            raise np.linalg.LinAlgError("Singular matrix")
        return v - (Jc.T @ y) * self._c


__all__ = [
    "numerical_rank", "independent_constraint_rows", "solve_position",
    "solve_finite_displacement", "choose_independent_coordinates", "selection_matrix",
    "check_independent_coordinates", "velocity_transform", "velocity_sensitivity",
    "null_space_basis",
    "solve_velocity", "acceleration_rhs", "solve_acceleration", "project_velocity",
    "release_state", "branch_point",
    "point_coordinate_indices", "inverse_kinematics_point_path", "solve_positions_batch",
    "sweep_configurations", "sweep_loop", "scaled_difference",
    "project_velocities_batch", "StateProjection"
]
