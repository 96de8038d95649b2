"""Forward-dynamics factor graphs (paper Sect. 5.1-5.2, Figs. 2-3) on per-step state vectors.

Simulation uses :class:`ForwardProblem`: the square simulation graph (by default with the
fourth-order Hermite rule, or the paper's trapezoidal rule; both with an energy balance on
conservative mechanisms), a *square* system (as many independent equations as unknowns per
step), so its solution does not depend on any weight, and every residual is whitened by
scales of the mechanism and dt (:mod:`mbfg.model.scales`), so nothing in it carries units
(docs/theory.md).

Dependent coordinates, step vector x_k = [q_k; v_k; a_k; lambda_k; alpha_k]:
f_pc^d (Phi = 0), f_vc^d (Phi_q v = 0), and the equations of motion with the multipliers as
unknowns, f_eom^d (M a + Phi_q^T lambda = Q_g + Q_f + Q) with f_ac^d (Phi_q a + dPhi_q/dt v =
0), on every step: together they are Eq. 5, so a = qddot(q, v) (f_dyn^d, Eq. 6) holds at the
solution, but every row touches only the coordinates of its own bodies and constraints, so a
step's linear system is sparse (cost linear in the number of bodies, where the dense
qddot(q, v) couples every coordinate with every other).  With redundant constraints the
multipliers of the rows left out by :func:`mbfg.model.constraints.independent_rows` are held at
zero (the choice Eq. 6 makes);
between k and k+1 the integrators on the ``dof`` coordinates that are independent there
(chosen per link by coordinate partitioning, :mod:`mbfg.model.partition`): the trapezoidal
rule (Eq. 23) with the energy-balance row and its velocity rescaling alpha, or the Hermite
rule (:mod:`mbfg.graphs.links`).

Independent coordinates (Fig. 3), x_k = [q_k; v_k; a_k; z_k; zd_k; zdd_k; alpha_k]: f_pc^i,
f_vc^i, f_ac^i (Phi, Phi_q v, dPhi_q/dt v + Phi_q a and the linear rows q[idx] - z, ...),
f_dyn^i (zdd = zddot(q, v), Eq. 15), the same integrators and energy row on z, zd, zdd; priors
on z_0, zd_0 and an approximate q_0.

:class:`LeastSquaresProblem` is the paper's over-determined graph (integrators on every
coordinate next to every constraint level, balanced by sigmas); state estimation builds on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mbfg.graphs import DEFAULT_INTEGRATOR, INTEGRATORS
from mbfg.graphs import linear_blocks as L
from mbfg.graphs import terms as T
from mbfg.graphs.layout import StepLayout, dependent_layout, independent_layout
from mbfg.graphs.links import EnergyBalance, IntegratorLinks
from mbfg.model import constraints as C
from mbfg.model.dynamics import forward_dynamics
from mbfg.model.forces import forces_at
from mbfg.model.nonconservative import friction_force_jacobians
from mbfg.model.partition import StatePartition, best_coordinates, partition_along
from mbfg.model.scales import mechanism_scales

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.graphs.linear_blocks import BinaryLinear, UnaryLinear
    from mbfg.graphs.terms import StackedTerm


@dataclass(frozen=True)
class ForwardSettings:
    """Settings of the simulation graph (:class:`ForwardProblem`).  Every number is
    dimensionless: weights and tolerances are relative to scales of the mechanism and dt.

    Attributes
    ----------
    dt : float
        Time step [s].
    integrator : "hermite", "trapezoidal" or "euler"
        ``"trapezoidal"``: Eq. 23 with the energy balance (the paper's rule);
        ``"hermite"`` (the default): the fourth-order two-point Hermite rule, Eq. 23 with its end
        corrections, x_{k+1} - x_k - dt/2 (xd_k + xd_{k+1}) + dt^2/12 (xdd_{k+1} - xdd_k)
        and likewise for the velocities with the jerk (:mod:`mbfg.graphs.links`), with the
        energy row where every force has a potential (:attr:`ForwardProblem.conserves_energy`);
        ``"euler"``: Eq. 22.
    step_tolerance : float
        A Gauss-Newton solve has converged when the error left after its last update,
        estimated by Newton's quadratic convergence as the square of that update measured in
        the coordinates' scales (positions: the mechanism's length; velocities: length / dt;
        accelerations: length / dt^2), is at most this fraction (1e-12: updates of 1e-6 of
        the scale, leaving about 1e-12).
    energy_speed : float
        Links where no coordinate moves more than this fraction of its scale in a step carry
        no energy row (see :meth:`ForwardProblem.link_plan`).
    prior_q_approx : float
        Independent coordinates: sigma of the approximate prior on q_0, in mechanism lengths.
    """
    dt: float = 1e-3
    integrator: str = DEFAULT_INTEGRATOR
    step_tolerance: float = 1e-12
    energy_speed: float = 1e-4
    prior_q_approx: float = 1.0

    def __post_init__(self):
        if self.integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {', '.join(INTEGRATORS)}, "
                             f"got {self.integrator!r}")


#: time step of the hermite rule's central jerk difference, in dt: its truncation error,
#: (omega h)^2 relative, and its rounding error, eps / (omega h), are below what the rule
#: needs, (omega dt)^3 / 60, for motions of 3e-3 <= omega dt <= 1; slower ones are solved to
#: rounding level either way (their jerk term is below 1e-16 of the velocity rows)
JERK_STEP = 1e-3
#: a fixed-lag window reuses the jerk of a state that moved by at most this fraction of the
#: coordinates' scales (positions c, velocities c / dt) since it was computed: the reused
#: jerk's effect on the rows is then below 1e-8 (omega dt)^2 / 12 of their scale (a window's
#: older steps move by ~1e-10 between solves)
JERK_REUSE = 1e-8


def _with_alpha(layout: StepLayout) -> StepLayout:
    return StepLayout(layout.slots + (("alpha", 1),), layout.char)


def _plan_key(plan) -> bytes | None:
    """A hashable key of a link plan (None: no plan)."""
    return None if plan is None else np.asarray(plan, int).tobytes()


class _AppliedForces:
    """What every forward problem computes from ``mech``, ``settings.dt`` and ``forces``."""

    @property
    def conserves_energy(self) -> bool:
        """Whether every force has a potential: gravity, and applied forces that are constant
        (or none), without friction.  The Hermite rule's links then carry the energy row
        E_{k+1} = E_k (docs/theory.md)."""
        return not callable(self.forces) and not self.mech.friction_elements

    @property
    def has_energy_row(self) -> bool:
        """Whether the links carry the energy row (where the motion is not at rest): the
        trapezoidal rule always, the Hermite rule where every force has a potential."""
        rule = self.settings.integrator
        return rule == "trapezoidal" or (rule == "hermite" and self.conserves_energy)

    def applied_forces(self, steps):
        """(T, n) applied forces at ``steps`` (times ``steps * dt``), or None."""
        return forces_at(self.forces, np.asarray(steps) * self.settings.dt, self.mech.n)

    def initial_accelerations(self, q, v, step: int = 0) -> np.ndarray:
        """Accelerations (n,) of the model at (q, v) and step ``step`` (Eq. 6): the initial
        guess of a solver."""
        Q = self.applied_forces(np.array([step]))
        return forward_dynamics(self.mech, q, v, None if Q is None else Q[0])


class ForwardProblem(_AppliedForces):
    """Factor definitions of the square forward-dynamics graph for any range of
    steps (see the module docstring).

    Parameters
    ----------
    mech : Mechanism
    settings : ForwardSettings
    coords : "dependent" or "independent"
    indices : independent coordinates (required for "independent")
    forces : None, (n,) or callable t -> (n,)
        Applied generalized forces [N, N m] besides gravity, of the time t = k dt [s]
        (:mod:`mbfg.model.forces`).
    """

    #: square and causal: a step's own rows and the link into it determine it, so a
    #: fixed-lag smoother's exact marginal of a step that leaves the window is the link out
    #: of it with that step held at its solution (:mod:`mbfg.solvers.smoother`)
    causal = True

    def __init__(self, mech, settings: ForwardSettings, coords="dependent", indices=None,
                 forces=None):
        self.mech, self.settings, self.coords = mech, settings, coords
        self.scales = sc = mechanism_scales(mech)
        n, dt = mech.n, settings.dt
        if coords == "dependent":
            self.indices = None
            base = dependent_layout(n)
            self.layout = _with_alpha(StepLayout(base.slots + (("lam", mech.m),), base.char))
        elif coords == "independent":
            self.indices = tuple(int(i) for i in indices)
            self.layout = _with_alpha(independent_layout(n, len(self.indices)))
        else:
            raise ValueError(f"coords must be 'dependent' or 'independent', got {coords!r}")
        self.forces = forces
        self._window_cache: dict = {}
        self._state_partition = None  # StatePartition, made at the first single-step plan
        self._jerk_ring: list | None = None  # recent single-state jerks (_jerk_function)
        self._state_dynamics = None  # StateDynamics of the mechanism, made with the ring
        c, s = sc.coordinates, sc.constraints
        #: sigma of each residual family (q, v, a, phi, phid, phidd, force, lam): the scale of
        #: its residual, so every whitened row is dimensionless; the square graph's solution
        #: does not depend on them.  force: mass c / dt^2 per coordinate [N, N m]; lam: the
        #: multiplier whose constraint force on a coordinate is of that size
        force = sc.mass * c / dt ** 2
        self.sigmas = dict(q=c, v=c / dt, a=c / dt ** 2, phi=s, phid=s / dt, phidd=s / dt ** 2,
                           force=force, lam=sc.mass * sc.length ** 2 / dt ** 2 / s)
        scale = {"q": c, "v": c / dt, "a": c / dt ** 2, "alpha": np.array([np.inf]),
                 "lam": self.sigmas["lam"]}
        if self.indices is not None:
            ci = c[list(self.indices)]
            scale.update(z=ci, zd=ci / dt, zdd=ci / dt ** 2)
        self.step_scale = np.concatenate([np.broadcast_to(scale[nm], (sz,))
                                          for nm, sz in self.layout.slots])

    # ------------------------------------------------------------------ terms
    def initial_priors(self, q_start: ArrayLike, v_start: ArrayLike, row: int = 0) -> list:
        """Priors holding the step at ``row`` at (q_start, v_start): dependent q and v;
        independent z, zd and an approximate q (the paper's weak prior that picks the branch)."""
        lay, sig = self.layout, self.sigmas
        q_start, v_start = np.asarray(q_start, float), np.asarray(v_start, float)
        if self.coords == "dependent":
            return [L.prior(lay, row, "q", q_start, sig["q"]),
                    L.prior(lay, row, "v", v_start, sig["v"])]
        idx = list(self.indices)
        return [L.prior(lay, row, "z", q_start[idx], sig["q"][idx]),
                L.prior(lay, row, "zd", v_start[idx], sig["v"][idx]),
                L.prior(lay, row, "q", q_start, self.settings.prior_q_approx * sig["q"])]

    def link_plan(self, x: ArrayLike, previous: np.ndarray | None = None, *,
                  start: ArrayLike | None = None) -> np.ndarray:
        """How the links ending at the step vectors x (T, dim) integrate: (T, d + 1) ints, the
        integrated components of the position/velocity/acceleration slots (dependent: the
        coordinates chosen by partitioning with hysteresis, starting from ``previous``, a row
        of an earlier plan; independent: the z slots) and, last, 1 where the link carries
        the energy balance.  ``start`` (T, dim), optional: the step vectors the links start
        from (their estimates; default: x itself).

        The energy row is dropped (and alpha held at 0) on links whose mean velocity
        vbar = (v_k + v_{k+1}) / 2 is small, max_j |vbar_j| dt / c_j <
        ``settings.energy_speed``: the rescaling alpha acts along vbar, and along the
        trapezoidal rule the energy balance changes with v_{k+1} in proportion to vbar too
        (its derivative m (v_{k+1} - a dt / 2) ~ m vbar in one degree of freedom), so
        there the row is (nearly) singular and Newton converges only linearly: at rest, and
        at every turning point where the velocity reverses within the step.  The energy
        defect of such a step is negligible."""
        x = np.atleast_2d(np.asarray(x, float))
        lay = self.layout
        q, v = x[:, lay.slice("q")], x[:, lay.slice("v")]
        if start is not None:
            v = 0.5 * (v + np.atleast_2d(np.asarray(start, float))[:, lay.slice("v")])
        if self.coords == "dependent":
            prev = None if previous is None else previous[:-1]
            if prev is not None and q.shape[0] == 1:  # a smoother's newest step
                if self._state_partition is None:
                    self._state_partition = StatePartition(self.mech, self.scales.coordinates)
                idx = self._state_partition(q[0], prev)[None]
            else:
                idx = partition_along(self.mech, q, self.scales.coordinates, start=prev)
        else:
            idx = np.broadcast_to(np.arange(len(self.indices)), (x.shape[0], len(self.indices)))
        speed = np.max(np.abs(v) * self.settings.dt / self.scales.coordinates, axis=1)
        energy = (speed >= self.settings.energy_speed) & self.has_energy_row
        return np.column_stack([idx, energy.astype(int)])

    def window_terms(
        self,
        steps: ArrayLike,
        plan: np.ndarray | None = None,
        *,
        incoming: np.ndarray | None = None,
    ) -> list:
        """Every factor of the rows 0 .. len(steps) - 1 (holding ``steps``) except the
        initial priors.  ``plan`` (len(steps) - 1, d + 1): how each link integrates
        (:meth:`link_plan`).  ``incoming``: the plan row of the link into row 0 when a
        marginal prior carries that link (a fixed-lag window); if it has an energy row, that
        prior determines row 0's alpha, which then needs no prior of its own.

        The terms depend on the steps only through time-varying applied forces; otherwise the
        terms of a short window are built once per plan and reused (a fixed-lag smoother asks
        for the same window at every step)."""
        steps = np.asarray(steps, int)
        return self._cached(("window", steps.size, _plan_key(plan),
                             incoming is None or not incoming[-1]), steps,
                            lambda: self._window_terms(steps, plan, incoming))

    def link_terms(self, steps: ArrayLike, plan: np.ndarray) -> list:
        """The integrator links of :meth:`window_terms` alone (the terms of arity 2), built
        without the window's other factors: what a fixed-lag smoother evaluates together
        with the link from the step that left its window.  ``steps``: at least two;
        ``plan`` (len(steps) - 1, d + 1) as for :meth:`window_terms`."""
        steps = np.asarray(steps, int)
        if steps.size < 2:
            raise ValueError(f"links need at least two steps, got {steps.size}")
        return self._cached(("links", steps.size, _plan_key(plan)), steps,
                            lambda: [self._integrator_links(steps, self._plan(steps, plan))])

    def _cached(self, key, steps, build) -> list:
        """``build()`` (a list of terms), kept in the problem's window cache under ``key`` for
        short ranges whose terms do not depend on the time (no time-varying applied
        forces)."""
        if callable(self.forces) or steps.size > 64:
            return build()
        terms = self._window_cache.get(key)
        if terms is None:
            if len(self._window_cache) >= 64:
                self._window_cache.clear()
            terms = self._window_cache[key] = build()
        return terms

    def _plan(self, steps, plan):
        return (np.zeros((0, self.mech.dof + 1), int) if steps.size == 1
                else np.asarray(plan, int).reshape(steps.size - 1, -1))

    def _window_terms(self, steps, plan, incoming) -> list:
        rows = np.arange(steps.size)
        lay, sig, mech = self.layout, self.sigmas, self.mech
        Q = self.applied_forces(steps)
        plan = self._plan(steps, plan)
        with_energy = plan[:, -1].astype(bool)
        # alpha is held at zero where no energy row determines it (row 0, links at rest)
        held = rows[np.concatenate([[incoming is None or not incoming[-1]], ~with_energy])]
        terms = [L.UnaryLinear(held, lay.selector("alpha"), np.zeros(1))]
        if self.coords == "dependent":
            fams = [(T.position_constraints_residual(mech), sig["phi"]),
                    (T.velocity_constraints_residual(mech), sig["phid"]),
                    (T.equations_of_motion_residual(mech, forces=Q), sig["force"]),
                    (T.acceleration_constraints_residual(mech), sig["phidd"])]
            if mech.independent_rows.size < mech.m:
                fams.append((T.redundant_multipliers_residual(mech), float(np.median(sig["lam"]))))
        else:
            ind = list(self.indices)
            terms.append(L.selections(lay, rows, [("q", "z"), ("v", "zd"), ("a", "zdd")], ind,
                                      np.concatenate([sig[k][ind] for k in ("q", "v", "a")])))
            fams = [(T.position_constraints_residual(mech), sig["phi"]),
                    (T.velocity_constraints_residual(mech), sig["phid"]),
                    (T.acceleration_constraints_residual(mech), sig["phidd"]),
                    (T.dynamics_residual(mech, forces=Q, indices=ind, accel_slot="zdd"),
                     sig["a"][ind])]
        if steps.size > 1:
            terms.append(self._integrator_links(steps, plan, Q))
        terms.append(T.StackedTerm(lay, rows, fams))
        return terms

    def _integrator_links(self, steps, plan, Q=None) -> IntegratorLinks:
        """The :class:`~mbfg.graphs.links.IntegratorLinks` of the rows holding ``steps`` (at
        least two) with the link plan ``plan`` (len(steps) - 1, d + 1); ``Q``: the applied
        forces at the steps, if already computed."""
        mech, settings = self.mech, self.settings
        if Q is None:
            Q = self.applied_forces(steps)
        idx, with_energy = plan[:, :-1], plan[:, -1].astype(bool)
        if self.coords == "dependent":
            slots, scale = ("q", "v", "a"), self.scales.coordinates[idx]
        else:
            slots, scale = ("z", "zd", "zdd"), self.scales.coordinates[list(self.indices)]
        energy_scale = self.scales.energy(settings.dt)
        jerk = cols = jerk_jacobian = None
        if settings.integrator != "hermite":
            friction = (None if not mech.friction_elements
                        else lambda q, v: friction_force_jacobians(mech, q, v))
            energy = EnergyBalance(mech.mass_times, mech.gravity_forces(), Q,
                                   energy_scale, friction)
        else:
            # the energy row for conservative forces only: constant ones have a potential
            energy = None if not self.conserves_energy else EnergyBalance(
                mech.mass_times, mech.gravity_forces() + (0.0 if Q is None else Q[0]),
                None, energy_scale)
            jerk, jerk_jacobian = self._jerk_function(steps)
            cols = idx if self.coords == "dependent" else np.asarray(self.indices)[idx]
        return IntegratorLinks(self.layout, np.arange(steps.size - 1), settings.dt,
                               settings.integrator, slots, idx, scale, energy,
                               energy_rows=with_energy, jerk=jerk, jerk_columns=cols,
                               jerk_step=JERK_STEP * settings.dt, jerk_jacobian=jerk_jacobian)

    def _jerk_function(self, steps):
        """Two functions of (rows, X[rows]): the jerk (len(rows), n) of the model at each
        step's (q, v) (:func:`mbfg.model.dynamics.jerk_along`, a function of the state
        alone), and its derivatives (len(rows), n, 2n) with respect to (q, v)
        (:func:`mbfg.model.dynamics.jerk_jacobians`).

        Long ranges (a batch segment) are evaluated in one vectorized call, remembered for
        the last few step arrays (a solver evaluates the error, the linearization and the
        convergence test at the same iterate).  Short ones (a fixed-lag window, at most 8
        states) reuse the jerk of a recent state within ``JERK_REUSE`` of the coordinates'
        scales (a ring shared by the problem's terms: a window is re-solved at every step,
        and its older steps move only by rounding) and evaluate the others state by state
        with the fused single-state dynamics, or, for mechanisms whose dynamics need the
        batch kernels (redundant constraints, sparse saddle-point solves), in one call."""
        from mbfg.model.dynamics import StateDynamics, jerk_along, jerk_jacobians
        lay, dt, n = self.layout, self.settings.dt, self.mech.n
        times = np.asarray(steps, float) * dt
        h = JERK_STEP * dt
        cols = np.r_[lay.slice("q"), lay.slice("v")]
        c = self.scales.coordinates
        inverse_scale = 1.0 / np.concatenate([c, c / dt])
        # a ring of recent (time, state, jerk), one for every term of the problem (a window,
        # its links with the held step, the terms rebuilt at every step under time-varying
        # forces); the states start out of reach (NaN).  With forces that do not depend on
        # time the window's terms are cached and reused at every step, so their ``times``
        # are those of the first window: match on the state
        timed = callable(self.forces)
        if self._jerk_ring is None:
            self._state_dynamics = StateDynamics(self.mech)
            self._jerk_ring = [np.full(8, np.nan), np.full((8, 2 * n), np.nan),
                               np.zeros((8, n)), 0]
        single, recent = self._state_dynamics, self._jerk_ring

        def forces(t):  # (at t + h, at t - h), or (None, None) without applied forces
            if self.forces is None:
                return None, None
            return tuple(forces_at(self.forces, t + s, n) for s in (h, -h))

        def short(rows, S):  # state by state, each from the ring if a recent one is near
            times_, states, jerks, _ = recent
            near = np.max(np.abs(states[None] - S[:, None]) * inverse_scale, axis=2) <= JERK_REUSE
            if timed:
                near &= times_[None] == times[rows][:, None]
            first = near.argmax(axis=1)
            out = jerks[first]  # a copy: a later miss may overwrite the ring's slot
            missed = np.flatnonzero(~near[np.arange(len(rows)), first])
            if missed.size and single.general:  # the batch kernels (independent rows chosen
                # per state): every missed state in one call, its +-h states in one more
                Qp, Qm = forces(times[rows[missed]])
                out[missed] = jerk_along(self.mech, S[missed, :n], S[missed, n:], None, Qp,
                                         Qm, h)
            for k in missed:
                t = times[rows[k]]
                if not single.general:  # the fused single-state kernels
                    Qp, Qm = (None if Q is None else Q[0] for Q in forces(np.array([t])))
                    out[k] = jerk_along(self.mech, S[k, :n], S[k, n:], None, Qp, Qm, h,
                                        dynamics=single)
                i = recent[3] = (recent[3] + 1) % times_.size
                times_[i], states[i], jerks[i] = t, S[k], out[k]
            return out

        arrays: dict = {}  # (rows, states) -> jerk of the last few vectorized calls

        def jerk(rows, X):
            S = X[:, cols]
            if len(rows) <= 8:
                return short(np.asarray(rows), S)
            key = (np.asarray(rows).tobytes(), S.tobytes())
            if key not in arrays:
                if len(arrays) >= 4:
                    arrays.pop(next(iter(arrays)))
                Qp, Qm = forces(times[rows])
                arrays[key] = jerk_along(self.mech, S[:, :n], S[:, n:], None, Qp, Qm, h)
            return arrays[key]

        def jacobian(rows, X):
            S = X[:, cols]
            Qp, Qm = forces(times[rows])
            d = jerk_jacobians(self.mech, S[:, :n], S[:, n:], Qp, Qm, h)
            return np.concatenate([d.d_q, d.d_qd], axis=2)
        return jerk, jacobian

    def terms(
        self, steps: ArrayLike, q_start: ArrayLike, v_start: ArrayLike, plan: np.ndarray | None = None
    ) -> list:
        """Every factor of a contiguous range of steps, rows 0 .. len(steps) - 1, with the
        initial priors on row 0."""
        return self.initial_priors(q_start, v_start) + self.window_terms(steps, plan)

    def best_indices(self, q: ArrayLike) -> tuple:
        """(best independent coordinates, their quality, quality of the current ones) at one
        state q (n,) or over a window of states (L, n).

        Over a window a set's quality is its worst over the rows: the window is solved in
        one set of coordinates, so a set that is good at the newest row but nearly singular
        at an older one makes every row's Newton step ill-conditioned (a five-bar with a
        5-step window stalled that way after 86 s).  Candidates: the current set and the
        best sets at the newest and the oldest row."""
        from mbfg.model.partition import coordinate_quality
        c = self.scales.coordinates
        q = np.atleast_2d(np.asarray(q, float))
        current = tuple(self.indices)
        candidates = {current, best_coordinates(self.mech, q[-1], c)[0],
                      best_coordinates(self.mech, q[0], c)[0]}
        worst = {s: float(np.min(coordinate_quality(self.mech, q, s, c))) for s in candidates}
        best = max(sorted(candidates), key=lambda s: worst[s])
        return best, worst[best], worst[current]

    def with_indices(self, indices: ArrayLike) -> "ForwardProblem":
        """The same problem in other independent coordinates (independent layout only)."""
        return ForwardProblem(self.mech, self.settings, "independent", indices, self.forces)

    def pack(self, q: ArrayLike, v: ArrayLike, a: ArrayLike) -> np.ndarray:
        """Step vector (or vectors) from q, v, a (alpha = 0)."""
        parts = dict(q=q, v=v, a=a)
        if self.coords == "independent":
            idx = list(self.indices)
            parts.update(z=np.asarray(q)[..., idx], zd=np.asarray(v)[..., idx],
                         zdd=np.asarray(a)[..., idx])
        X = np.zeros(np.shape(q)[:-1] + (self.layout.dim,))
        for name, val in parts.items():
            X[..., self.layout.slice(name)] = val
        return X


@dataclass(frozen=True)
class LeastSquaresSettings:
    """The paper's over-determined graph: time step, integrator and noise (standard
    deviations, in the units of each residual).  Used where the sigmas are real noise models
    (state estimation); simulation uses :class:`ForwardSettings`.

    The physics factors (integrators, dynamics) share one sigma; the constraint factors are
    tighter so the trajectory stays on the constraint manifold, which is what a projection
    step does in a classical integrator.  ``sigma_constraints=None`` picks 1e-4 for the
    trapezoidal rule (|Phi| ~ 1e-10 on the four-bar; a 1e-6 sigma makes the window problems
    of the smoother so ill-conditioned that Gauss-Newton stalls near the dead centre of an
    offset slider-crank) and 1e-6 for Euler, whose larger O(dt^2) integrator residuals would
    otherwise pull the states off the constraints by ~1e-5.

    Every sigma may also be an array, one per row of its family (e.g. derived from the
    mechanism's scales, :func:`mbfg.graphs.estimation.scaled_settings`):

    sigma_integrator : scalar, (n,) or (2, n)
        Integrator rows [m or rad for the position rows, m/s or rad/s for the velocity rows]:
        one for all, one per coordinate, or rows (position link q - dt/2 (v0 + v1), velocity
        link v - dt/2 (a0 + a1)) by coordinate.
    sigma_constraints : scalar or (m,)
        Position-constraint rows Phi [units of each row]; the independent graph's selection
        rows q[idx] - z, v[idx] - zd, a[idx] - zdd take it too, so there it must be a scalar.
    sigma_velocity_constraints, sigma_acceleration_constraints : scalar, (m,) or None
        Velocity rows Phi_q v [row units / s] and acceleration rows [row units / s^2];
        None (the default): ``sigma_constraints``.
    """
    dt: float = 1e-3
    integrator: str = "trapezoidal"     # or "euler"
    sigma_integrator: object = 1e-3
    sigma_dynamics: object = 1e-3
    sigma_constraints: object = None
    sigma_prior: float = 1e-8
    sigma_prior_q_approx: float = 1.0
    sigma_equality: float = 10.0
    baumgarte: object = None
    sigma_velocity_constraints: object = None
    sigma_acceleration_constraints: object = None

    def __post_init__(self):
        if self.integrator not in ("trapezoidal", "euler"):
            raise ValueError(f"integrator must be 'trapezoidal' or 'euler', got {self.integrator!r}")
        if self.sigma_constraints is None:
            object.__setattr__(self, "sigma_constraints",
                               1e-4 if self.integrator == "trapezoidal" else 1e-6)
        for name in ("sigma_velocity_constraints", "sigma_acceleration_constraints"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.sigma_constraints)


class LeastSquaresProblem(_AppliedForces):
    """The paper's forward-dynamics graph (Figs. 2-3: constraint factors at every level plus
    integrators on every coordinate, over-determined and solved in the least-squares sense
    with the sigmas of :class:`LeastSquaresSettings`) for any range of steps.  State
    estimation builds on it; simulation uses the square :class:`ForwardProblem`.

    Parameters
    ----------
    mech : Mechanism
    settings : LeastSquaresSettings
    coords : "dependent" or "independent"
    indices : independent coordinates (required for "independent")
    forces : None, (n,) or callable t -> (n,)
        Applied generalized forces besides gravity, of the time t = k dt [s]
        (:mod:`mbfg.model.forces`).
    """

    def __init__(self, mech, settings: LeastSquaresSettings, coords="dependent", indices=None,
                 forces=None):
        self.mech, self.settings, self.coords = mech, settings, coords
        self.scales = mechanism_scales(mech)
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
        self._link_cache: dict = {}  # link terms by their rows (_links)

    def terms(self, steps: ArrayLike, q_start: ArrayLike, v_start: ArrayLike) -> list:
        """Every factor of a contiguous range of steps, as batch terms over the step array X
        whose row i is step ``steps[i]``; initial priors hold step ``steps[0]`` at
        (q_start, v_start)."""
        steps = np.asarray(steps, int)
        rows = np.arange(steps.size)
        return (self.initial_priors(q_start, v_start) + self.linear_terms(rows)
                + [self.nonlinear_term(steps, rows)])

    def initial_priors(self, q_start: ArrayLike, v_start: ArrayLike, row: int = 0) -> list:
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

    def selection_term(self, rows: ArrayLike) -> UnaryLinear | None:
        """Independent coordinates only: the linear rows q[idx] - z, v[idx] - zd,
        a[idx] - zdd of the steps at ``rows`` (None in dependent coordinates)."""
        if self.coords == "dependent":
            return None
        s = self.settings
        if np.ndim(s.sigma_constraints):
            raise ValueError("independent coordinates: sigma_constraints must be a scalar "
                             "(it is also the selection rows' sigma)")
        return L.selections(self.layout, rows, [("q", "z"), ("v", "zd"), ("a", "zdd")],
                            list(self.indices), s.sigma_constraints)

    def link_term(self, rows0: ArrayLike) -> BinaryLinear:
        """All linear factors between steps ``rows0[i]`` and ``rows0[i] + 1`` (integrators,
        and f_eq on q in independent coordinates)."""
        s, lay = self.settings, self.layout
        if self.coords == "dependent":
            return L.step_links(lay, rows0, s.dt, [("q", "v"), ("v", "a")],
                                s.sigma_integrator, scheme=s.integrator)
        sigma = np.asarray(s.sigma_integrator, float)
        if sigma.ndim:                      # per coordinate: those of z
            sigma = sigma[..., list(self.indices)]
        return L.step_links(lay, rows0, s.dt, [("z", "zd"), ("zd", "zdd")],
                            sigma, scheme=s.integrator,
                            equalities=["q"], sigma_equality=s.sigma_equality)

    def linear_terms(self, rows: ArrayLike) -> list:
        """The linear factors of the steps at ``rows`` (contiguous) apart from priors: the
        selection rows (independent) and the links between consecutive rows."""
        rows = np.asarray(rows, int)
        out = []
        sel = self.selection_term(rows)
        if sel is not None:
            out.append(sel)
        if rows.size > 1:
            out.append(self._links(rows[:-1]))
        return out

    def _links(self, rows0):
        """:meth:`link_term` of ``rows0``, built once per set of rows: its blocks are constant,
        and a fixed-lag window asks for the same rows at every step."""
        key = np.asarray(rows0, int).tobytes()
        term = self._link_cache.get(key)
        if term is None:
            if len(self._link_cache) >= 64:
                self._link_cache.clear()
            term = self._link_cache[key] = self.link_term(rows0)
        return term

    def nonlinear_term(self, steps: ArrayLike, rows: ArrayLike) -> StackedTerm:
        s, mech = self.settings, self.mech
        forces = self.applied_forces(steps)
        fams = [(T.position_constraints_residual(mech), s.sigma_constraints),
                (T.velocity_constraints_residual(mech), s.sigma_velocity_constraints)]
        if self.coords == "dependent":
            fams.append((T.dynamics_residual(mech, forces=forces, baumgarte=s.baumgarte),
                         s.sigma_dynamics))
        else:
            fams.append((T.acceleration_constraints_residual(mech),
                         s.sigma_acceleration_constraints))
            fams.append((T.dynamics_residual(mech, forces=forces, indices=self.indices,
                                             accel_slot="zdd", baumgarte=s.baumgarte),
                         s.sigma_dynamics))
        return T.StackedTerm(self.layout, rows, fams)

    step_scale = None  # over-determined: convergence is judged by the error decrease

    def window_terms(self, steps: ArrayLike, plan: Any = None, *, incoming: Any = None) -> list:
        """Every factor of the window rows 0 .. len(steps) - 1 apart from its prior."""
        rows = np.arange(len(steps))
        return self.linear_terms(rows) + [self.nonlinear_term(steps, rows)]

    def link_plan(self, x: ArrayLike, previous: Any = None, *, start: Any = None) -> None:
        return None

    def refine_prediction(self, x: ArrayLike) -> np.ndarray:
        """A fixed-lag smoother's explicit prediction x (dim,) of a new step with its velocity
        projected onto the constraints' tangent space, Phi_q(q) v = 0 (least change in the
        coordinates' own scales; with zd = v[indices] in independent coordinates).

        The Taylor prediction violates Phi_q v = 0 by O(dt^2); the tight constraint factors
        then dominate the first Gauss-Newton step (measured on the review four-bar: whitened
        error up to 2e4 from the new step's velocity rows alone), so without the projection
        the step needs a second linearization far more often."""
        x = np.array(x, float)
        lay, c = self.layout, self.scales.coordinates
        q, v = x[lay.slice("q")], x[lay.slice("v")]
        Js = C.constraint_jacobian(self.mech, q) * c
        vs = v / c
        vs = vs - np.linalg.lstsq(Js, Js @ vs, rcond=None)[0]
        x[lay.slice("v")] = vs * c
        if self.indices is not None:
            x[lay.slice("zd")] = x[lay.slice("v")][list(self.indices)]
        return x

    def with_indices(self, indices: ArrayLike) -> "LeastSquaresProblem":
        """The same problem in other independent coordinates (independent layout only)."""
        return type(self)(self.mech, self.settings, "independent", indices, self.forces)

    pack = ForwardProblem.pack
    best_indices = ForwardProblem.best_indices


__all__ = [
    "ForwardSettings", "ForwardProblem", "LeastSquaresSettings", "LeastSquaresProblem"
]
