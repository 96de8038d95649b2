"""Inverse-dynamics factor graphs (paper Sect. 5.3, Fig. 4) built in the four stages of
Sect. 7.2, on per-step state vectors (:mod:`mbfg.graphs.layout`).

Stage 1: q (and z), priors on the imposed coordinates, f_pc, f_eq.
Stage 2: + qdot, qddot (and zdot, zddot) with integrator factors (f_ti or f_ei).
Stage 3: + velocity constraints f_vc and acceleration constraints f_ac (the paper adds only
         f_vc; without f_ac the integrated qddot leaves the acceleration manifold by O(dt^2),
         which f_idyn^d can only absorb by biasing Q: 0.7-0.9 % RMS torque error on the
         parallel robot at dt = 5 ms, 0.2-0.3 % with it).  In independent coordinates f_vc^i
         and f_ac^i already enter at stage 2 (they define qdot, qddot from zdot, zddot).
Stage 4: + generalized forces Q with f_idyn.  The paper fixes the non-actuated components of
         Q by zero priors; here the step vector holds only the actuated components (the
         same optimum, with 20 fewer unknowns per step on the parallel robot, which makes the
         sparse QR ~40 % cheaper).

Stages 2-4 also carry very weak priors (``sigma_hint``) that pull qdot and qddot toward
finite-difference estimates of the imposed motion: the integrator chain alone leaves one
alternating (+-1)^k mode per coordinate undetermined, and the hints fix it without
measurably biasing the solution (their weight is ~1e-12 of the integrators').
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.graphs import linear_blocks as L
from mbfg.graphs import terms as T
from mbfg.graphs.layout import StepLayout

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass(frozen=True)
class InverseSettings:
    """Time step, integrator and standard deviations of each factor type (residual units)."""
    dt: float = 5e-3
    integrator: str = "trapezoidal"
    sigma_desired: float = 1e-8        # prior on the imposed coordinates [m or rad]
    sigma_constraints: float = 1e-8    # f_pc, f_vc, f_ac and z selections
    sigma_equality: float = 1.0        # f_eq between consecutive q
    sigma_integrator: float = 1e-6
    sigma_dynamics: float = 1e-3       # f_idyn [m/s^2]
    sigma_hint: float = 1.0            # weak hints for v and a

    def __post_init__(self):
        if self.integrator not in ("trapezoidal", "euler"):
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {self.integrator!r}")


class InverseProblem:
    """Factor definitions of the inverse-dynamics graph, stage by stage.

    Parameters
    ----------
    mech : Mechanism
    settings : InverseSettings
    imposed : indices of the coordinates whose trajectory is prescribed
    actuated : indices of the coordinates with unknown generalized force
    coords : "dependent" or "independent"
    indices : independent coordinates (independent formulation; default ``imposed``)
    """

    def __init__(self, mech, settings: InverseSettings, imposed, actuated, coords="dependent",
                 indices=None):
        self.mech, self.settings, self.coords = mech, settings, coords
        self.imposed = tuple(int(i) for i in imposed)
        self.actuated = tuple(int(i) for i in actuated)
        if coords not in ("dependent", "independent"):
            raise ValueError(f"coords must be 'dependent' or 'independent', got {coords!r}")
        self.indices = (tuple(int(i) for i in (indices if indices is not None else imposed))
                        if coords == "independent" else None)

    def layout(self, stage: int) -> StepLayout:
        n = self.mech.n
        slots = [("q", n)]
        if stage >= 2:
            slots += [("v", n), ("a", n)]
        if self.indices is not None:
            d = len(self.indices)
            slots += [("z", d)] + ([("zd", d), ("zdd", d)] if stage >= 2 else [])
        if stage >= 4:  # only the actuated components are unknowns (the others are zero)
            slots.append(("Q", len(self.actuated)))
        return StepLayout(tuple(slots))

    def terms(self, stage: int, desired: ArrayLike, hints: dict | None = None) -> tuple:
        """(layout, terms) of ``stage`` for the prescribed values ``desired`` (N, len(imposed)).

        ``hints``: dict with "v" and "a" (N, n) finite-difference estimates (stages >= 2)."""
        s, mech = self.settings, self.mech
        lay = self.layout(stage)
        N = desired.shape[0]
        rows = np.arange(N)
        w = 1.0 / s.sigma_desired
        imp = list(self.imposed)
        out = [L.UnaryLinear(rows, w * lay.selector("q")[imp], w * np.asarray(desired, float))]
        # f_eq ties consecutive q in stage 1; from stage 2 on the integrators do, and its 20+
        # rows per step only cost elimination time (its weight is ~1e-6 of theirs)
        links, eq = [], (["q"] if stage == 1 else [])
        fams = []
        if self.indices is None:
            fams.append((T.position_constraints_residual(mech), s.sigma_constraints))
        else:
            pairs = [("q", "z")] + ([("v", "zd"), ("a", "zdd")] if stage >= 2 else [])
            out.append(L.selections(lay, rows, pairs, self.indices, s.sigma_constraints))
            fams.append((T.position_constraints_residual(mech), s.sigma_constraints))
        if stage >= 2:
            if self.indices is None:
                links = [("q", "v"), ("v", "a")]
            else:
                links = [("z", "zd"), ("zd", "zdd")]
            wh = 1.0 / s.sigma_hint
            # in independent coordinates f_vc^i, f_ac^i make qdot, qddot functions of zdot,
            # zddot, so the undetermined modes live in the imposed coordinates only (in
            # dependent coordinates hints on every coordinate measurably help: 1.1 vs 2.3 N m
            # RMS torque error on the robot with the 8-digit reference angles)
            cols = imp if self.indices is not None else list(range(mech.n))
            for slot in ("v", "a"):
                out.append(L.UnaryLinear(rows, wh * lay.selector(slot)[cols], wh * hints[slot][:, cols]))
        if stage >= 3 or (stage >= 2 and self.indices is not None):
            fams.append((T.velocity_constraints_residual(mech), s.sigma_constraints))
            fams.append((T.acceleration_constraints_residual(mech), s.sigma_constraints))
        if stage >= 4:
            fams.append((T.dynamics_residual(mech, force_slot="Q", indices=self.indices,
                                             accel_slot="a" if self.indices is None else "zdd",
                                             force_indices=self.actuated),
                         s.sigma_dynamics))
        if N > 1:
            out.append(L.step_links(lay, rows[:-1], s.dt, links, s.sigma_integrator,
                                    scheme=s.integrator, equalities=eq,
                                    sigma_equality=s.sigma_equality))
        out.append(T.StackedTerm(lay, rows, fams))
        return lay, out


__all__ = [
    "InverseSettings", "InverseProblem"
]
