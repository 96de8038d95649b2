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
    tighter so the trajectory stays on the constraint manifold, which is what a projection
    step does in a classical integrator.  ``sigma_constraints=None`` picks 1e-4 for the
    trapezoidal rule (|Phi| ~ 1e-10 on the four-bar; a 1e-6 sigma makes the window problems
    of the smoother so ill-conditioned that Gauss-Newton stalls near the dead centre of an
    offset slider-crank) and 1e-6 for Euler, whose larger O(dt^2) integrator residuals would
    otherwise pull the states off the constraints by ~1e-5.
    """
    dt: float = 1e-3
    integrator: str = "trapezoidal"     # or "euler"
    sigma_integrator: float = 1e-3
    sigma_dynamics: float = 1e-3
    sigma_constraints: float | None = None
    sigma_prior: float = 1e-8
    sigma_prior_q_approx: float = 1.0
    sigma_equality: float = 10.0
    baumgarte: object = None

    def __post_init__(self):
        if self.integrator not in ("trapezoidal", "euler"):
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {self.integrator!r}")
        if self.sigma_constraints is None:
            object.__setattr__(self, "sigma_constraints",
                               1e-4 if self.integrator == "trapezoidal" else 1e-6)


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
        steps = np.asarray(steps, int)
        rows = np.arange(steps.size)
        return (self.initial_priors(q_start, v_start) + self.linear_terms(rows)
                + [self.nonlinear_term(steps, rows)])

    def initial_priors(self, q_start, v_start, row: int = 0) -> list:
        """Priors on the first step (dependent: q, v; independent: z, zd and an approximate
        q), as linear terms on row ``row``."""
        s, lay = self.settings, self.layout
        if self.coords == "dependent":
            return [L.prior(lay, row, "q", q_start, s.sigma_prior),
                    L.prior(lay, row, "v", v_start, s.sigma_prior)]
        idx = list(self.indices)
        return [L.prior(lay, row, "z", np.asarray(q_start)[idx], s.sigma_prior),
                L.prior(lay, row, "zd", np.asarray(v_start)[idx], s.sigma_prior),
                L.prior(lay, row, "q", q_start, s.sigma_prior_q_approx)]

    def selection_term(self, rows):
        """Independent coordinates only: the linear rows q[idx] - z, v[idx] - zd,
        a[idx] - zdd of the steps at ``rows`` (None in dependent coordinates)."""
        if self.coords == "dependent":
            return None
        s = self.settings
        return L.selections(self.layout, rows, [("q", "z"), ("v", "zd"), ("a", "zdd")],
                            list(self.indices), s.sigma_constraints)

    def link_term(self, rows0):
        """All linear factors between steps ``rows0[i]`` and ``rows0[i] + 1`` (integrators,
        and f_eq on q in independent coordinates)."""
        s, lay = self.settings, self.layout
        if self.coords == "dependent":
            return L.step_links(lay, rows0, s.dt, [("q", "v"), ("v", "a")],
                                s.sigma_integrator, scheme=s.integrator)
        return L.step_links(lay, rows0, s.dt, [("z", "zd"), ("zd", "zdd")],
                            s.sigma_integrator, scheme=s.integrator,
                            equalities=["q"], sigma_equality=s.sigma_equality)

    def linear_terms(self, rows) -> list:
        """The linear factors of the steps at ``rows`` (contiguous) apart from priors: the
        selection rows (independent) and the links between consecutive rows."""
        rows = np.asarray(rows, int)
        out = []
        sel = self.selection_term(rows)
        if sel is not None:
            out.append(sel)
        if rows.size > 1:
            out.append(self.link_term(rows[:-1]))
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

    def with_indices(self, indices) -> "ForwardProblem":
        """The same problem in other independent coordinates (independent layout only)."""
        return ForwardProblem(self.mech, self.settings, "independent", indices, self.forces)

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
