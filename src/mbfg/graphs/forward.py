"""Forward-dynamics factor graphs (paper Sect. 5.1-5.2, Figs. 2-3) on per-step state vectors.

Dependent coordinates (Fig. 2), step vector x_k = [q_k; v_k; a_k] (v = qdot, a = qddot):
f_pc^d, f_vc^d, f_dyn^d on step k; integrators q <-> v and v <-> a between k and k+1
(trapezoidal by default, Euler selectable); priors on q_0 and v_0.

Independent coordinates (Fig. 3), x_k = [q_k; v_k; a_k; z_k; zd_k; zdd_k]: f_pc^i, f_vc^i,
f_ac^i (nonlinear rows Phi, Phi_q v, dPhi_q/dt v + Phi_q a, and linear rows q[idx] - z, ...),
f_dyn^i (zddot(q, v) - zdd), integrators z <-> zd <-> zdd, f_eq(q_k, q_{k+1}) for branch
continuity, priors on z_0, zd_0 and an approximate q_0.  The dynamics of the independent
formulation is Eq. (15), evaluated through the full q and qdot (see
:func:`mbfg.model.dynamics.independent_dynamics`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbfg.graphs import linear_blocks as L
from mbfg.graphs import terms as T
from mbfg.graphs.layout import dependent_layout, independent_layout


@dataclass(frozen=True)
class ForwardSettings:
    """Time step, integrator and noise (standard deviations, in the units of each residual).

    The physics factors (integrators, dynamics) share one sigma; the constraint factors are
    tighter so the trajectory stays on the constraint manifold (|Phi| at round-off level),
    which is what a projection step does in a classical integrator.
    """
    dt: float = 1e-3
    integrator: str = "trapezoidal"     # or "euler"
    sigma_integrator: float = 1e-3
    sigma_dynamics: float = 1e-3
    sigma_constraints: float = 1e-6
    sigma_prior: float = 1e-8
    sigma_prior_q_approx: float = 1.0
    sigma_equality: float = 10.0
    baumgarte: object = None

    def __post_init__(self):
        if self.integrator not in ("trapezoidal", "euler"):
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {self.integrator!r}")


class ForwardProblem:
    """Factor definitions of a forward-dynamics graph for any range of steps.

    Parameters
    ----------
    mech : Mechanism
    settings : ForwardSettings
    coords : "dependent" or "independent"
    indices : independent coordinates (required for "independent")
    forces : None, (n,) or callable k -> (n,) applied generalized forces (gravity is implicit)
    """

    def __init__(self, mech, settings: ForwardSettings, coords="dependent", indices=None,
                 forces=None):
        self.mech, self.settings, self.coords = mech, settings, coords
        n = mech.n
        if coords == "dependent":
            self.indices = None
            self.layout = dependent_layout(n)
        elif coords == "independent":
            self.indices = tuple(int(i) for i in indices)
            self.layout = independent_layout(n, len(self.indices))
        else:
            raise ValueError(f"coords must be 'dependent' or 'independent', got {coords!r}")
        self.forces = forces

    def terms(self, steps, q_start, v_start):
        """Every factor of a contiguous range of steps, as batch terms over the step array X
        whose row i is step ``steps[i]``; initial priors hold step ``steps[0]`` at
        (q_start, v_start)."""
        s, mech, lay = self.settings, self.mech, self.layout
        steps = np.asarray(steps, int)
        rows = np.arange(steps.size)
        out = []
        if self.coords == "dependent":
            out += [L.prior(lay, 0, "q", q_start, s.sigma_prior),
                    L.prior(lay, 0, "v", v_start, s.sigma_prior)]
            if steps.size > 1:
                out.append(L.step_links(lay, rows[:-1], s.dt, [("q", "v"), ("v", "a")],
                                        s.sigma_integrator, scheme=s.integrator))
        else:
            idx = list(self.indices)
            out += [L.prior(lay, 0, "z", np.asarray(q_start)[idx], s.sigma_prior),
                    L.prior(lay, 0, "zd", np.asarray(v_start)[idx], s.sigma_prior),
                    L.prior(lay, 0, "q", q_start, s.sigma_prior_q_approx),
                    L.selections(lay, rows, [("q", "z"), ("v", "zd"), ("a", "zdd")], idx,
                                 s.sigma_constraints)]
            if steps.size > 1:
                out.append(L.step_links(lay, rows[:-1], s.dt, [("z", "zd"), ("zd", "zdd")],
                                        s.sigma_integrator, scheme=s.integrator,
                                        equalities=["q"], sigma_equality=s.sigma_equality))
        out.append(self.nonlinear_term(steps, rows))
        return out

    def nonlinear_term(self, steps, rows):
        s, mech = self.settings, self.mech
        forces = self.forces(steps) if callable(self.forces) else self.forces
        fams = [(T.position_constraints_residual(mech), s.sigma_constraints),
                (T.velocity_constraints_residual(mech), s.sigma_constraints)]
        if self.coords == "dependent":
            fams.append((T.dynamics_residual(mech, forces=forces, baumgarte=s.baumgarte),
                         s.sigma_dynamics))
        else:
            fams.append((T.acceleration_constraints_residual(mech), s.sigma_constraints))
            fams.append((T.dynamics_residual(mech, forces=forces, indices=self.indices,
                                             accel_slot="zdd", baumgarte=s.baumgarte),
                         s.sigma_dynamics))
        return T.StackedTerm(self.layout, rows, fams)

    def pack(self, q, v, a):
        """Step vector (or vectors) from q, v, a."""
        parts = dict(q=q, v=v, a=a)
        if self.coords == "independent":
            idx = list(self.indices)
            parts.update(z=np.asarray(q)[..., idx], zd=np.asarray(v)[..., idx],
                         zdd=np.asarray(a)[..., idx])
        X = np.zeros(np.shape(q)[:-1] + (self.layout.dim,))
        for name, val in parts.items():
            X[..., self.layout.slice(name)] = val
        return X
