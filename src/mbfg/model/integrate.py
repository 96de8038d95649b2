"""Classical (non factor-graph) forward-dynamics integrator, the project's independent reference.

The index-1 formulation y = [q, qdot], ydot = [qdot, qddot(q, qdot, Q)] (Eq. 5, optionally with
Baumgarte terms) is integrated by scipy's ``solve_ivp`` (DOP853 by default) between output
times; after each output interval q and qdot are projected back onto Phi = 0 and
Phi_q qdot = 0 (coordinate projection), which keeps the drift at round-off level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from mbfg.errors import SolverError
from mbfg.model import kinematics as K
from mbfg.model.dynamics import Baumgarte, forward_dynamics


@dataclass(frozen=True)
class ReferenceTrajectory:
    """Output of :func:`integrate_reference`: arrays over output times.

    t (T,) [s]; q, qd, qdd (T, n)."""
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray


def integrate_reference(mech, t_end: float, dt: float, *, q0=None, qd0=None, forces=None,
                        rtol: float = 1e-12, atol: float = 1e-12, method: str = "DOP853",
                        baumgarte: Baumgarte | None = None,
                        project: bool = True) -> ReferenceTrajectory:
    """Integrate the equations of motion with a classical ODE solver.

    Parameters
    ----------
    mech : Mechanism
    t_end, dt : float
        Final time and output interval [s].
    q0, qd0 : (n,), optional
        Initial state; default ``mech.q0`` at rest.  qd0 is projected onto Phi_q qdot = 0.
    forces : callable t -> (n,) or (n,) array, optional
        Applied generalized forces (gravity is always included).
    rtol, atol : float
        solve_ivp tolerances (down to 1e-12 or lower).
    baumgarte : Baumgarte, optional
        Add stabilization terms inside qddot.
    project : bool
        Project q and qdot onto the constraint manifolds after each output interval.
    """
    n = mech.n
    q = np.array(mech.q0 if q0 is None else q0, float)
    qd = np.zeros(n) if qd0 is None else K.project_velocity(mech, q, np.asarray(qd0, float))
    if forces is None:
        force_at = lambda t: None  # noqa: E731
    elif callable(forces):
        force_at = forces
    else:
        const = np.asarray(forces, float)
        force_at = lambda t: const  # noqa: E731

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
    for k in range(steps):
        sol = solve_ivp(rhs, (ts[k], ts[k + 1]), y, method=method, rtol=rtol, atol=atol)
        if not sol.success:
            raise SolverError(f"reference integration failed at t = {ts[k]:.6g} s: {sol.message}")
        y = sol.y[:, -1]
        if project:
            qq = K.solve_position(mech, y[:n], tol=1e-13 * max(1.0, np.max(np.abs(y[:n]))))
            y = np.concatenate([qq, K.project_velocity(mech, qq, y[n:])])
        Q_out[k + 1], V_out[k + 1] = y[:n], y[n:]
    A_out = np.stack([forward_dynamics(mech, Q_out[i], V_out[i], force_at(ts[i]),
                                       baumgarte=baumgarte) for i in range(steps + 1)])
    return ReferenceTrajectory(t=ts, q=Q_out, qd=V_out, qdd=A_out)
