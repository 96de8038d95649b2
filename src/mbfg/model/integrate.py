"""Classical (non factor-graph) forward-dynamics integrators: the project's independent
reference and its accuracy floor.

The index-1 formulation y = [q, qdot], ydot = [qdot, qddot(q, qdot, Q)] (Eq. 5, optionally with
Baumgarte terms) is integrated

* by :func:`integrate_reference` with scipy's ``solve_ivp`` (DOP853 by default) between output
  times; after each output interval q and qdot are projected back onto Phi = 0 and
  Phi_q qdot = 0 (coordinate projection), which keeps the drift at round-off level;
* by :func:`integrate_trapezoidal` with the implicit trapezoidal rule at the step dt, solved
  exactly by Newton, without stabilization or projection: the "floor", the accuracy a
  trapezoidal factor graph at the same dt can be expected to reach.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.integrate import solve_ivp

from mbfg.errors import ConvergenceError, SolverError
from mbfg.model import kinematics as K
from mbfg.model.dynamics import (Baumgarte, forward_dynamics, forward_dynamics_jacobians,
                                 independent_state)
from mbfg.model.forces import force_function
from mbfg.model.nonconservative import with_inputs
from mbfg.model.scales import coordinate_scales

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.forces import ForceInput
    from mbfg.model.mechanism import Mechanism


@dataclass(frozen=True)
class ReferenceTrajectory:
    """Output of :func:`integrate_reference`: arrays over output times.

    t (T,) [s]; q, qd, qdd (T, n)."""
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray


def integrate_reference(
    mech: Mechanism,
    t_end: float,
    dt: float,
    *,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    forces: ForceInput | None = None,
    inputs: ForceInput | None = None,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    method: str = "DOP853",
    baumgarte: Baumgarte | None = None,
    project: bool = True,
    restart: bool = True,
) -> ReferenceTrajectory:
    """Integrate the equations of motion with a classical ODE solver.

    Parameters
    ----------
    mech : Mechanism
    t_end, dt : float
        Final time and output interval [s].
    q0, qd0 : (n,), optional
        Initial state; default ``mech.q0`` at rest.  qd0 is projected onto Phi_q qdot = 0.
    forces : None, (n,) or callable t -> (n,), optional
        Applied generalized forces besides gravity (:mod:`mbfg.model.forces`).
    inputs : None, (k,) or callable t -> (k,), optional
        Inputs of the mechanism's k motors (YAML ``motors:``); the mechanism's friction
        (YAML ``friction:``) always acts (:mod:`mbfg.model.dynamics` adds it).
    rtol, atol : float
        solve_ivp tolerances (down to 1e-12 or lower).
    baumgarte : Baumgarte, optional
        Add stabilization terms inside qddot.
    project : bool
        Project q and qdot onto the constraint manifolds after each output interval.
    restart : bool
        Restart the solver at every output sample, from the projected state (default).
        False: one solver call over the whole span, sampled at the outputs, the samples
        projected afterwards (about ten times faster over thousands of samples; the
        constraint drift between samples is then the solver's, e.g. 5e-6 rad on a 30 s
        four-bar recording at rtol = atol = 1e-10, and this run was the closer of the two to
        DOP853 at rtol 1e-13: 4e-7 rad).
    """
    n = mech.n
    q = np.array(mech.q0 if q0 is None else q0, float)
    qd = np.zeros(n) if qd0 is None else K.project_velocity(mech, q, np.asarray(qd0, float))
    force_at = force_function(with_inputs(mech, forces, inputs), n)

    def rhs(t, y):
        qq, vv = y[:n], y[n:]
        return np.concatenate([vv, forward_dynamics(mech, qq, vv, force_at(t),
                                                    baumgarte=baumgarte)])

    steps = int(round(t_end / dt))
    ts = np.arange(steps + 1) * dt
    Q_out = np.empty((steps + 1, n))
    V_out = np.empty((steps + 1, n))
    Q_out[0], V_out[0] = q, qd
    y = np.concatenate([q, qd])
    if restart:
        for k in range(steps):
            sol = solve_ivp(rhs, (ts[k], ts[k + 1]), y, method=method, rtol=rtol, atol=atol)
            if not sol.success:
                raise SolverError(f"reference integration failed at t = {ts[k]:.6g} s: "
                                  f"{sol.message}")
            y = sol.y[:, -1]
            if project:
                qq = K.solve_position(mech, y[:n], tol=1e-13 * max(1.0, np.max(np.abs(y[:n]))))
                y = np.concatenate([qq, K.project_velocity(mech, qq, y[n:])])
            Q_out[k + 1], V_out[k + 1] = y[:n], y[n:]
    else:
        sol = solve_ivp(rhs, (0.0, ts[-1]), y, method=method, rtol=rtol, atol=atol, t_eval=ts)
        if not sol.success:
            raise SolverError(f"reference integration failed: {sol.message}")
        Q_out, V_out = sol.y[:n].T.copy(), sol.y[n:].T.copy()
        if project:
            Q_out = K.solve_positions_batch(mech, Q_out)[0]
            V_out = K.project_velocities_batch(mech, Q_out, V_out)
    A_out = np.stack([forward_dynamics(mech, Q_out[i], V_out[i], force_at(ts[i]),
                                       baumgarte=baumgarte) for i in range(steps + 1)])
    return ReferenceTrajectory(t=ts, q=Q_out, qd=V_out, qdd=A_out)


def integrate_trapezoidal(
    mech: Mechanism,
    t_end: float,
    dt: float,
    *,
    q0: ArrayLike | None = None,
    qd0: ArrayLike | None = None,
    forces: ForceInput | None = None,
    inputs: ForceInput | None = None,
    tol: float = 1e-14,
    max_iter: int = 20,
    project: bool = False,
) -> ReferenceTrajectory:
    """Integrate the equations of motion with the implicit trapezoidal rule (the "floor").

    With a = qddot(q, qdot, Q) of Eq. (5) (gravity included, no stabilization), each step
    solves

        q_{k+1} = q_k + dt/2 (v_k + v_{k+1}),   v_{k+1} = v_k + dt/2 (a_k + a_{k+1})

    by Newton on v_{k+1} (q_{k+1} eliminated) with the exact Jacobian
    I - dt/2 da/dqdot - dt^2/4 da/dq, starting from the explicit Taylor prediction
    v = v_k + dt a_k.  Nothing is projected: the constraint drift is the method's own.

    Parameters
    ----------
    mech : Mechanism
    t_end, dt : float
        Final time and step [s].
    q0, qd0 : (n,), optional
        Initial state; default ``mech.q0`` at rest.  qd0 is projected onto Phi_q qdot = 0, as
        in :func:`integrate_reference`.
    forces : None, (n,) or callable t -> (n,), optional
        Applied generalized forces besides gravity (:mod:`mbfg.model.forces`).
    inputs : None, (k,) or callable t -> (k,), optional
        Motor inputs; friction always acts (as :func:`integrate_reference`).
    tol : float
        Unit-free Newton tolerance: a step has converged when the last Newton correction of
        every coordinate, dt/2 |dv_i|, is at most ``tol`` times the size of its kind of
        coordinate, max |q_j| + dt max |v_j| over the point coordinates [m] or over the angles
        (at least 1 rad).  The accepted iterate is the one whose correction is that small, so
        q, qdot and qddot of every output sample are mutually consistent.
    max_iter : int
        Newton iterations allowed per step.
    project : bool
        After each step, project q onto Phi = 0 and qdot onto Phi_q qdot = 0 (minimum-norm
        corrections, :func:`mbfg.model.kinematics.solve_position` and
        :func:`~mbfg.model.kinematics.project_velocity`): the "projected floor", the same
        rule held on the constraint manifold as every constraint-satisfying method is.

    Returns
    -------
    ReferenceTrajectory
        t (T,) [s] with T = round(t_end / dt) + 1; q, qd, qdd (T, n).

    Raises
    ------
    ConvergenceError
        If a step does not converge in ``max_iter`` iterations (residual: the last relative
        correction).
    """
    n = mech.n
    q = np.array(mech.q0 if q0 is None else q0, float)
    v = np.zeros(n) if qd0 is None else K.project_velocity(mech, q, np.asarray(qd0, float))
    force_at = force_function(with_inputs(mech, forces, inputs), n)
    angle = np.zeros(n, bool)
    angle[np.asarray(mech.angle_coords, int)] = True
    steps = int(round(t_end / dt))
    ts = np.arange(steps + 1) * dt
    Q_out, V_out, A_out = (np.empty((steps + 1, n)) for _ in range(3))
    a = forward_dynamics(mech, q, v, force_at(ts[0]))
    Q_out[0], V_out[0], A_out[0] = q, v, a
    half = 0.5 * dt
    eye = np.eye(n)
    for k in range(steps):
        force = force_at(ts[k + 1])
        v1 = v + dt * a
        for it in range(1, max_iter + 1):
            q1 = q + half * (v + v1)
            jac = forward_dynamics_jacobians(mech, q1, v1, force)
            dv = np.linalg.solve(eye - half * jac.d_qd - half * half * jac.d_q,
                                 v1 - v - half * (a + jac.qdd))
            size = np.abs(q1) + dt * np.abs(v1)
            scale = np.where(angle, max(1.0, np.max(size, where=angle, initial=0.0)),
                             np.max(size, where=~angle, initial=0.0))
            change = float(np.max(half * np.abs(dv) / scale))
            if change <= tol:
                break
            v1 = v1 - dv
        else:
            raise ConvergenceError(
                f"trapezoidal step at t = {ts[k]:.6g} s did not converge",
                residual=change,
                iterations=it,
            )
        q, v, a = q1, v1, jac.qdd
        if project:
            q = K.solve_position(mech, q)
            v = K.project_velocity(mech, q, v)
            a = forward_dynamics(mech, q, v, force)
        Q_out[k + 1], V_out[k + 1], A_out[k + 1] = q, v, a
    return ReferenceTrajectory(t=ts, q=Q_out, qd=V_out, qdd=A_out)


INDEPENDENT_METHODS = ("euler", "trapezoidal", "rk4")
"""Integrators of :func:`independent_step`."""


def dependent_step(
    mech: Mechanism,
    q: ArrayLike,
    qd: ArrayLike,
    dt: float,
    Q_start: ArrayLike | None,
    Q_mid: ArrayLike | None,
    Q_end: ArrayLike | None,
) -> tuple:
    """One classical Runge-Kutta step of Eqs. (5)-(6) in dependent coordinates for N states,
    then the positions projected back onto Phi = 0 and the velocities onto Phi_q qdot = 0
    (minimum-norm in the coordinates' scales: :func:`~mbfg.model.kinematics.solve_positions_batch`
    without held coordinates, :func:`~mbfg.model.kinematics.project_velocities_batch`).

    No independent coordinates: a state passes a configuration where any one coordinate
    turns back (a rocker's limit) as anywhere else, and a small step stays on its assembly
    branch.

    Parameters
    ----------
    q, qd : (N, n) assembled states [m, rad; per s]
    dt : step [s]
    Q_start, Q_mid, Q_end : (N, n) or None, applied forces at the step's start, middle and end

    Returns
    -------
    q, qd, qdd : (N, n) at the step's end
    ok : (N,) bool, False where the projection failed
    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)

    def rate(qq, vv, QQ):
        return vv, forward_dynamics(mech, qq, vv, QQ)

    k1 = rate(q, qd, Q_start)
    k2 = rate(q + 0.5 * dt * k1[0], qd + 0.5 * dt * k1[1], Q_mid)
    k3 = rate(q + 0.5 * dt * k2[0], qd + 0.5 * dt * k2[1], Q_mid)
    k4 = rate(q + dt * k3[0], qd + dt * k3[1], Q_end)
    q1 = q + dt / 6.0 * (k1[0] + 2.0 * k2[0] + 2.0 * k3[0] + k4[0])
    qd1 = qd + dt / 6.0 * (k1[1] + 2.0 * k2[1] + 2.0 * k3[1] + k4[1])
    q1, ok = K.solve_positions_batch(mech, q1)
    qd1 = K.project_velocities_batch(mech, q1, qd1)
    return q1, qd1, forward_dynamics(mech, q1, qd1, Q_end), ok


def independent_step(
    mech: Mechanism,
    q: ArrayLike,
    z: ArrayLike,
    zd: ArrayLike,
    zdd: ArrayLike,
    indices: ArrayLike,
    dt: float,
    Q: ArrayLike | None = None,
    method: str = "trapezoidal",
    *,
    Q_stages: np.ndarray | None = None,
    acceleration_noise: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 20,
) -> tuple:
    """One step of the independent-coordinate ODE zddot = f(z, zdot) (Eq. 15) for N states.

    The prediction step of the Kalman filters and the particle filter (each state one filter
    state, sigma point or particle).  Positions at each stage come from the batched position
    problem started at the previous configuration (continuation keeps each state's assembly
    branch), velocities and accelerations from :func:`mbfg.model.dynamics.independent_state`.

    Parameters
    ----------
    q : (N, n) assembled configurations at the start of the step
    z, zd, zdd : (N, d) independent coordinates, rates and accelerations at the start
    indices : (d,) the independent coordinates
    dt : step [s]
    Q : (N, n) or (n,), optional, applied forces at the end of the step [N, N m]
    method : "euler", "trapezoidal" or "rk4"
        ``"euler"``: forward Euler (review Eq. 49).  ``"trapezoidal"``: z1 = z + dt/2 (zd + zd1),
        zd1 = zd + dt/2 (zdd + zdd1) by fixed-point iteration until the change of z (relative
        to the coordinates' scales) and of dt zd falls below ``tol``.  ``"rk4"``: classical
        Runge-Kutta, the forces ``Q_stages`` (default ``Q``) held over the step.
    acceleration_noise : (N, d), optional
        An acceleration added to f at every stage (the particle filter's sampled noise).

    Returns
    -------
    state : IndependentState at the end of the step (forces ``Q``)
    z1, zd1 : (N, d)
    assembled : (N,) bool, False where a position problem failed
    """
    idx = np.asarray(indices, int)
    noise = 0.0 if acceleration_noise is None else acceleration_noise

    def at(q_guess, z_new, zd_new, forces):
        qn, ok = K.solve_positions_batch(mech, q_guess, idx, z_new)
        return independent_state(mech, qn, idx, zd_new, forces), ok

    if method == "euler":
        z1, zd1 = z + dt * zd, zd + dt * zdd
        st, ok = at(q, z1, zd1, Q)
        return st, z1, zd1, ok
    if method == "rk4":
        Qs = Q if Q_stages is None else Q_stages
        s2, ok2 = at(q, z + 0.5 * dt * zd, zd + 0.5 * dt * zdd, Qs)
        zd2, a2 = zd + 0.5 * dt * zdd, s2.zdd + noise
        s3, ok3 = at(s2.q, z + 0.5 * dt * zd2, zd + 0.5 * dt * a2, Qs)
        zd3, a3 = zd + 0.5 * dt * a2, s3.zdd + noise
        s4, ok4 = at(s3.q, z + dt * zd3, zd + dt * a3, Qs)
        zd4, a4 = zd + dt * a3, s4.zdd + noise
        z1 = z + dt / 6 * (zd + 2 * zd2 + 2 * zd3 + zd4)
        zd1 = zd + dt / 6 * (zdd + 2 * a2 + 2 * a3 + a4)
        st, ok = at(s4.q, z1, zd1, Q)
        return st, z1, zd1, ok & ok2 & ok3 & ok4
    if method != "trapezoidal":
        raise ValueError(f"unknown integrator {method!r}; expected one of {INDEPENDENT_METHODS}")
    scale = coordinate_scales(mech)[idx]
    zd1 = zd + dt * zdd
    z1 = z + dt * zd + 0.5 * dt * dt * zdd
    q1 = q
    for _ in range(max_iter):
        st, _ = at(q1, z1, zd1, Q)
        q1 = st.q
        zd_new = zd + 0.5 * dt * (zdd + st.zdd + noise)
        z_new = z + 0.5 * dt * (zd + zd_new)
        err = max(np.max(np.abs(z_new - z1) / scale), np.max(np.abs(zd_new - zd1) / scale) * dt)
        z1, zd1 = z_new, zd_new
        if err <= tol:
            break
    st, ok = at(q1, z1, zd1, Q)
    return st, z1, zd1, ok


__all__ = [
    "ReferenceTrajectory", "integrate_reference", "integrate_trapezoidal", "independent_step",
    "dependent_step",
    "INDEPENDENT_METHODS"
]
