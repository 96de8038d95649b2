"""Finding a recursive filter's state again after a gap in the readings.

Through a long gap a filter only predicts, under its model's errors.  With a rate sensor
nothing gives the angle back when the readings return: a Kalman filter's prediction can be
several radians off, its covariance spans more than a turn and its first updates follow the
wrong linearization (docs/benchmarks.md, "Why the Kalman filters do not come back after the
gap with a rate sensor").

:class:`GapReacquisition` watches for that case and answers it with a global search, the
mechanism's whole turn against the first readings after the gap:

1. **Trigger.**  The readings resume after at least one step without any, and the filter's
   predicted standard deviation of an independent coordinate exceeds
   :data:`REACQUIRE_SPREAD` s (s its scale: 1 rad, or ell for a point coordinate), the
   initial spread of a rough guess.  A filter that reads at every step, or every few steps,
   never comes near it, so its results are unchanged.
2. **Window.**  The filter goes on as before for :data:`REACQUIRE_WINDOW` / omega_c seconds
   (omega_c = sqrt(|g| / ell), :func:`~mbfg.model.identification.characteristic_rate`).
3. **Search** (:func:`search_state`).  Candidate states at the window's first step: the
   configurations along the whole turn of the independent coordinate (continuation from the
   filter's configuration, so on its assembly branch), and the filter's own.  Each has the
   rate its first reading gives (a rate sensor: one Gauss-Newton step from rest) or, where
   that reading does not tell the rate (an encoder), every rate of a grid over
   [-rate_bound, rate_bound] (twice the fastest rate estimated before).  The grids' spacing
   is :data:`GRID_SPACING` s and GRID_SPACING omega_c s.  Each candidate is integrated
   with the filter's own model over the window and scored by the sum of its readings'
   squared normalized residuals.  Candidates whose first reading alone costs more than its
   chi-square quantile of 1 - :data:`TIE_LEVEL` above the best are dropped first (an
   encoder's reading leaves the configurations next to the read angle), as long as
   :data:`SURVIVORS` remain.  After a quarter of the window's readings only the
   :data:`SURVIVORS` best go on, and each is refined over the whole window by a few damped
   Gauss-Newton steps on its state at the window's start (a grid point can be half a
   spacing off, and with precise rate sensors that alone costs more than a wrong part of
   the turn).
4. **Restart.**  Where the filter's own state at the window's last step lies within
   REACQUIRE_SPREAD s (and REACQUIRE_SPREAD omega_c s in rate) of the best candidate's, it
   has not lost the crank and goes on as it was: its estimate rests on all its readings,
   the search's on the window's alone, which the model's errors bias (by 0.1-0.2 rad on
   some generated mechanisms with gravity 10 % weak; restarting such filters anyway, for
   all or for the EKF, DEKF and UKF only, moved 2 of 250 generated rows under the issue's
   bar, made 13-26 worse and 26-37 better: docs/benchmarks.md, "Should a filter near the
   search's state restart from it?").  So it does where the candidate that
   stands for the filter lies in another part of the turn and explains the window about as
   well as the best (:data:`TIE_LEVEL`): some mechanisms' readings fit a second part of the
   turn as well (a generated quick-return, half a turn away).  That candidate is the
   cheapest one ending within REACQUIRE_SPREAD of the filter's own state at the window's
   last step (the filter may have found its way back inside the window: a generated shaper,
   whose candidate started at the filter's configuration at the window's start fitted
   poorly), else the best one started at that configuration.  And so it does where no
   candidate explains the window (an RMS normalized residual beyond :data:`EXPLAINED_RMS`
   sigmas: a generated triple-rocker, 20 sigmas, where a restart sent the EKF off the
   constraints).  Otherwise it continues from the best
   candidate's state: a Kalman filter with its initial covariance (errorEKF_FE also with its force
   estimate back at zero: a force learned elsewhere on the turn is wrong here), the particle
   filter with a fresh cloud about it (its restart's spreads).  The estimates reported inside
   the window stay as they were: the filter stays causal.

The particle filter searches too where its first reading after the gap locates the
configuration (an encoder): the reading gives the angle, not the rate, and a cloud spread over
several rad/s keeps the few particles near the read angle, whose rates are a lottery (the
review four-bar, seed 300: 0.09 rad off 0.3 s after the gap, x3.6 its gap-free error over the
next 3 s; with the search x1.03).

The search is for one degree of freedom.  Where the filter's independent coordinate is an
angle that turns fully (a crank), its candidates lie along that turn
(:func:`~mbfg.model.kinematics.sweep_configurations`).  Otherwise (a point coordinate, a
rocker) they lie around the configuration loop through the filter's configuration
(:func:`~mbfg.model.kinematics.sweep_loop`, GRID_SPACING apart in units of the coordinates'
scales), each holding the coordinate that moves fastest there for its rate and its
refinement, and each integrated over the window by
:func:`~mbfg.model.integrate.dependent_step`, which holds no coordinate (a candidate may pass a
turning point of any one within the window); distances between states are then taken over
all coordinates (a point coordinate alone takes one value at two places of the loop), and a
Kalman filter restarts with the coordinates its partition chooses at the state found.  With
several degrees of freedom the filter goes on without a search and says why in
``stats["reacquisitions"]``.  ``reacquire=False`` (an option of every filter) turns the
search off: the filters as published.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from mbfg.estimation.common import (applied_forces, innovation, predict_readings,
                                    reading_variances)
from mbfg.model.dynamics import independent_state
from mbfg.model.identification import characteristic_rate
from mbfg.model.integrate import dependent_step, independent_step
from mbfg.model.kinematics import (scaled_difference, solve_positions_batch,
                                   sweep_configurations, sweep_loop)
from mbfg.model.scales import coordinate_scales

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism

__all__ = ["GapReacquisition", "Reacquired", "search_state", "REACQUIRE_SPREAD", "SPREAD_BOUND",
           "REACQUIRE_WINDOW", "GRID_SPACING", "TIE_LEVEL", "SURVIVORS", "EXPLAINED_RMS"]

SPREAD_BOUND = float(np.pi / np.sqrt(3.0))
"""Largest standard deviation of an independent coordinate a filter keeps in a gap, in units
of its scale s (:meth:`GapReacquisition.bounded_spread`): that of a uniform spread over a
turn, pi / sqrt(3) rad for an angle of scale 1 rad."""

REACQUIRE_SPREAD = 0.25
"""Predicted standard deviation of an independent coordinate, in units of its scale s,
beyond which a filter whose readings resume after a gap searches its state again
(dimensionless; the initial spread of a rough guess, as ``INITIAL_SPREAD`` of the particle
filter and of the factor-graph settings)."""
REACQUIRE_WINDOW = 0.25
"""Length of the readings window the search fits, in units of 1 / omega_c (dimensionless;
0.2 s on the review four-bar)."""
TIE_LEVEL = 1e-4
"""A search's best state replaces the filter's only where the best candidate started at the
filter's own configuration costs more than the chi-square quantile of 1 - TIE_LEVEL (two
parameters) above it (dimensionless)."""
SURVIVORS = 64
"""Candidates that go on to the whole window after its first quarter of readings, each then
refined by Gauss-Newton."""
EXPLAINED_RMS = 3.0
"""A search's best state replaces the filter's only where its readings' RMS normalized
residual over the window is at most this many sigmas (dimensionless; the window's costs run
1-1.5 sigmas under the benchmarks' 10 % gravity error where the search finds the state,
20 sigmas where no candidate explains the window).  Where none does, a restart would throw
away the filter's own estimate for a state that is no better supported."""
GRID_SPACING = 0.1
"""Spacing of the search's candidates, in units of the coordinate's scale s (0.1 rad: 63
configurations per turn) and of omega_c s for the rates (dimensionless; about the Kalman
filters' initial standard deviation on the review four-bar, 0.087)."""


@dataclass(frozen=True)
class Reacquired:
    """The outcome of :func:`search_state`.

    Attributes
    ----------
    q : (n,) configuration at the window's last step [m, rad]
    zd : (1,) the rate there of the filter's independent coordinate
    cost : float
        Sum of the window's squared normalized reading residuals along the best candidate.
    candidates : int
        Candidate states scored.
    own_cost : float
        The same cost of the candidate that stands for the filter: the cheapest one ending
        within REACQUIRE_SPREAD of the filter's own state at the window's last step, or,
        where none does, the best one started at the filter's configuration (inf where it
        did not survive the first quarter of the readings).
    own_apart : bool
        That candidate lies more than REACQUIRE_SPREAD s from the best (another part of the
        turn or loop, not the same optimum).
    swept : str
        "coordinate": the candidates came from the filter's angle along its turn; "loop":
        from the configuration loop (:func:`~mbfg.model.kinematics.sweep_loop`), distances
        then taken over all coordinates.
    qd : (n,) velocities at the window's last step [m/s, rad/s]
    readings : int
        Scalar readings in the window (the degrees of freedom of ``cost``).
    """

    q: np.ndarray
    zd: np.ndarray
    cost: float
    candidates: int
    own_cost: float = np.inf
    own_apart: bool = False
    swept: str = "coordinate"
    qd: np.ndarray | None = None
    readings: int = 0

    def restart_coordinates(self, indices: ArrayLike,
                            partition: Callable | None = None) -> tuple:
        """The independent coordinates a filter holding ``indices`` restarts with at ``q``
        (its :class:`~mbfg.model.partition.StatePartition`'s choice there, if it has one:
        after a search around the loop its own coordinate may be at a turning point) and
        their rates: ((d,) int, (d,))."""
        idx = np.asarray(indices, int)
        new = idx if partition is None else np.asarray(partition(self.q, idx), int)
        if np.array_equal(new, idx) or self.qd is None:
            return idx, np.asarray(self.zd, float).copy()
        return new, self.qd[new].copy()


def search_state(
    model: Mechanism,
    sensors: Sequence,
    per_step: list,
    sigmas: list,
    q_ref: ArrayLike,
    indices: ArrayLike,
    start: int,
    stop: int,
    dt: float,
    forces: Callable,
    integrator: str,
    rate_unit: float,
    rate_bound: float,
    q_end: ArrayLike | None = None,
) -> Reacquired | str:
    """The state that best explains the readings of steps ``start`` .. ``stop`` (inclusive),
    searched over the mechanism's whole motion.

    Parameters
    ----------
    per_step, sigmas : the filter's readings by step and assumed sigmas
        (:func:`~mbfg.estimation.common.prepare_readings`)
    q_ref : (n,) an assembled configuration on the filter's branch [m, rad]
    indices : (1,) the filter's independent coordinate
    forces : t -> applied forces (:func:`~mbfg.model.forces.force_function`)
    integrator : the filter's integration rule (:func:`~mbfg.model.integrate.independent_step`)
    rate_unit : omega_c [1/s]; the grids' spacing is GRID_SPACING s and GRID_SPACING
        omega_c s on a coordinate of scale s
    rate_bound : the candidates' rates span [-rate_bound, rate_bound] on ``indices`` (in
        proportion to their scales on other coordinates) [rad/s or m/s]
    q_end : (n,) the filter's own configuration at ``stop``, optional: the candidate that
        stands for the filter is then the cheapest one ending within REACQUIRE_SPREAD of it
        (its own estimate over the window), else the one started at ``q_ref``

    Returns
    -------
    :class:`Reacquired`, or a str saying why there is none: the window holds no reading, or
    no candidate could be integrated over it.
    """
    idx = np.asarray(indices, int)
    scales = coordinate_scales(model)
    q_ref = np.asarray(q_ref, float)
    qt, held, swept = _candidate_configurations(model, q_ref, idx, scales)
    own_config = np.zeros(qt.shape[0], bool)
    own_config[-1 if swept == "coordinate" else 0] = True

    def forces_at(t, m):
        return applied_forces(forces, t, None, idx, model.n, m)

    read_steps = [k for k in range(start, stop + 1) if per_step[k]]
    if not read_steps:
        return "no reading in the window"
    # every candidate is integrated holding the coordinate that moves fastest at it (the
    # filter's own along a crank's turn): one group per such coordinate
    groups = []
    for c in np.unique(held):
        at = held == c
        cidx = np.array([c])
        position_step = GRID_SPACING * scales[c]
        rate_step = GRID_SPACING * rate_unit * scales[c]
        bound = rate_bound / scales[idx[0]] * scales[c]
        # the rate at each configuration from the first reading, where that reading tells it
        # to within the grid's spacing (a rate sensor); elsewhere (an encoder) a grid of rates
        fitted, pinned = _rates_from_reading(model, sensors, per_step[read_steps[0]], sigmas,
                                             qt[at], cidx, forces_at(start * dt, int(at.sum())),
                                             rate_step)
        grid = np.arange(-np.ceil(bound / rate_step), np.ceil(bound / rate_step) + 1)
        grid = grid * rate_step
        per = np.where(pinned, 1, grid.size)
        groups.append(dict(
            idx=cidx, steps=(position_step, rate_step),
            own=np.repeat(own_config[at], per), q=np.repeat(qt[at], per, axis=0),
            zd=np.concatenate([[f] if p else grid for f, p in zip(fitted, pinned)])[:, None]))
    count = sum(g["q"].shape[0] for g in groups)

    def roll(q, zd, last, cidx):
        """The candidates (q (N, n), zd (N, 1) the rates of coordinate cidx at ``start``)
        integrated to step ``last``: their normalized reading residuals (N, R) (inf where one
        failed to assemble), the state at ``last`` and its rates, of the candidates that
        were integrated to it (``alive``, their indices)."""
        z = q[:, cidx].copy()
        st = independent_state(model, q, cidx, zd, forces_at(start * dt, q.shape[0]))
        alive = np.arange(q.shape[0])       # a candidate that failed is integrated no more
        out = []
        for k in range(start, last + 1):
            if k > start and alive.size and swept == "loop":
                # around the loop a candidate may pass a turning point of any coordinate
                # within the window: the step holds none
                m = alive.size
                with np.errstate(all="ignore"):       # a wrong candidate may blow up
                    qn, qdn, qddn, ok = dependent_step(
                        model, st.q, st.qd, dt, forces_at((k - 1) * dt, m),
                        forces_at((k - 0.5) * dt, m), forces_at(k * dt, m))
                ok &= np.all(np.isfinite(qdn), axis=1) & np.all(np.isfinite(qddn), axis=1)
                alive = alive[ok]
                st = SimpleNamespace(q=qn[ok], qd=qdn[ok], qdd=qddn[ok])
                zd = st.qd[:, cidx]
            elif k > start and alive.size:
                st, z, zd, ok = independent_step(model, st.q, z, zd, st.zdd, cidx, dt,
                                                 forces_at(k * dt, z.shape[0]), integrator)
                if not ok.all():
                    alive, st, z, zd = alive[ok], st.select(ok), z[ok], zd[ok]
            if per_step[k]:
                variances = reading_variances(sensors, per_step[k], sigmas)
                r = np.full((q.shape[0], variances.size), np.inf)
                if alive.size:
                    h, o, ang = predict_readings(model, sensors, per_step[k], st.q, st.qd,
                                                 st.qdd)
                    r[alive] = innovation(o, h, ang) / np.sqrt(variances)
                out.append(r)
        r = np.concatenate(out, axis=-1)
        r[~np.all(np.isfinite(r), axis=1)] = np.inf
        return r, st, zd, alive

    def residuals(q, zd, last, cidx):
        """roll's residuals alone; a batch in which some candidate meets a singular
        configuration of its coordinate (a turning point inside the window) is split until
        that one is alone, whose residuals are then inf."""
        try:
            return roll(q, zd, last, cidx)[0]
        except np.linalg.LinAlgError:
            if q.shape[0] == 1:
                width = sum(reading_variances(sensors, per_step[k], sigmas).size
                            for k in read_steps if k <= last)
                return np.full((1, width), np.inf)
            h = q.shape[0] // 2
            return np.concatenate([residuals(q[:h], zd[:h], last, cidx),
                                   residuals(q[h:], zd[h:], last, cidx)])

    def cost_of(r):
        return np.sum(r * r, axis=1)

    def select(groups, keep, score=None):
        """The groups' candidates where ``keep`` (over all groups, in order), each group's
        in the order of ``score`` (default: as they were)."""
        cut = np.cumsum([0] + [g["q"].shape[0] for g in groups])
        for g, lo, hi in zip(groups, cut[:-1], cut[1:]):
            order = (np.arange(hi - lo) if score is None
                     else np.argsort(score[lo:hi], kind="stable"))
            mine = order[keep[lo:hi][order]]
            g["q"], g["zd"], g["own"] = g["q"][mine], g["zd"][mine], g["own"][mine]
        return [g for g in groups if g["q"].shape[0]]

    from scipy.stats import chi2         # (scipy.stats is slow to import: not with mbfg)
    if count > SURVIVORS:
        # the first reading alone rules out most of a grid it does not pin (an encoder's
        # angle: only the configurations next to it are worth integrating): those beyond its
        # chi-square quantile of 1 - TIE_LEVEL above the best, as long as SURVIVORS remain
        r1 = [residuals(g["q"], g["zd"], read_steps[0], g["idx"]) for g in groups]
        first = np.concatenate([cost_of(r) for r in r1])
        level = max(np.min(first) + chi2.isf(TIE_LEVEL, r1[0].shape[1]),
                    np.partition(first, SURVIVORS - 1)[SURVIVORS - 1])
        groups = select(groups, first <= level)
    if sum(g["q"].shape[0] for g in groups) > SURVIVORS:
        # the first quarter of the readings thins them out
        quarter = read_steps[max(0, len(read_steps) // 4 - 1)]
        early = np.concatenate([cost_of(residuals(g["q"], g["zd"], quarter, g["idx"]))
                                for g in groups])
        keep = np.zeros(early.size, bool)
        keep[np.argsort(early)[:SURVIVORS]] = True
        groups = select(groups, keep, early)
    for g in groups:
        g["cost"] = cost_of(residuals(g["q"], g["zd"], stop, g["idx"]))
    if not any(np.isfinite(g["cost"]).any() for g in groups):
        return "no candidate could be integrated over the window"
    for g in groups:
        g["q"], g["zd"], g["cost"] = _refine(
            model, g["idx"], g["q"], g["zd"], g["cost"],
            lambda q, zd, last, c=g["idx"]: (residuals(q, zd, last, c), None, None), cost_of,
            *g["steps"], stop)
    cost = np.concatenate([g["cost"] for g in groups])
    q = np.concatenate([g["q"] for g in groups])
    zd = np.concatenate([g["zd"] for g in groups])
    own = np.concatenate([g["own"] for g in groups])
    which = np.concatenate([np.full(g["q"].shape[0], i) for i, g in enumerate(groups)])
    best = int(np.argmin(cost))
    cidx = groups[which[best]]["idx"]
    r, st, zd_end, _ = roll(q[best:best + 1], zd[best:best + 1], stop, cidx)
    rate = zd_end[0].copy() if cidx[0] == idx[0] else st.qd[0, idx].copy()
    mine = _own_candidate(model, groups, cost, q_end, stop, roll, idx, swept)
    if mine is None:
        mine = int(np.flatnonzero(own)[np.argmin(cost[own])]) if own.any() else best
        apart = _distance(model, q[mine], q[best], idx, swept) > REACQUIRE_SPREAD
    else:
        apart = _distance(model, q_end, st.q[0], idx, swept) > REACQUIRE_SPREAD
    return Reacquired(q=st.q[0].copy(), zd=rate, cost=float(cost[best]),
                      candidates=count, own_cost=float(cost[mine]), own_apart=apart,
                      swept=swept, qd=st.qd[0].copy(), readings=int(r.shape[1]))


def _own_candidate(model, groups, cost, q_end, stop, roll, idx, swept):
    """The index (into the concatenated groups) of the cheapest candidate whose state at
    ``stop`` lies within REACQUIRE_SPREAD of the filter's own ``q_end``, or None (no q_end,
    or no such candidate)."""
    if q_end is None:
        return None
    q_end = np.asarray(q_end, float)
    near = np.zeros(cost.size, bool)
    offset = 0
    for g in groups:
        try:
            _, st, _, alive = roll(g["q"], g["zd"], stop, g["idx"])
        except np.linalg.LinAlgError:
            alive = np.zeros(0, int)
        if alive.size:
            near[offset + alive] = (_distance(model, q_end, st.q, idx, swept)
                                    <= REACQUIRE_SPREAD)
        offset += g["q"].shape[0]
    near &= np.isfinite(cost)
    if not near.any():
        return None
    return int(np.flatnonzero(near)[np.argmin(cost[near])])


def _candidate_configurations(model, q_ref, idx, scales):
    """The configurations a search starts from and the coordinate each holds: along the
    filter's independent coordinate where it is an angle that turns fully (every
    GRID_SPACING rad by continuation, then q_ref; ``swept`` "coordinate"), else around the
    configuration loop through q_ref (q_ref first, then every GRID_SPACING of the scaled
    arclength, :func:`~mbfg.model.kinematics.sweep_loop`; "loop")."""
    if int(idx[0]) in set(int(i) for i in model.angle_coords):
        s = float(scales[idx[0]])
        zt, qt = sweep_configurations(model, q_ref, idx, np.pi * s, GRID_SPACING * s)
        if zt[-1] - zt[0] >= 2 * np.pi * s - 0.5 * GRID_SPACING * s:
            qt = np.vstack([qt[:-1], q_ref])       # a full turn: drop the repeated end
            return qt, np.full(qt.shape[0], int(idx[0])), "coordinate"
    qt, held, _ = sweep_loop(model, q_ref, GRID_SPACING)
    return qt, held, "loop"


def _distance(model, qa, qb, idx, swept):
    """How far configuration qa (n,) is from qb (n,) or from each row of qb (N, n), in units
    of the scales: along the filter's angle where the search swept it, else the largest of
    all coordinates' (angles modulo a turn: a point coordinate alone takes one value at two
    places of the loop); a float, or (N,)."""
    d = scaled_difference(model, qa, qb)
    if swept == "coordinate":
        return np.abs(d[..., idx[0]])
    return np.max(np.abs(d), axis=-1)


def _refine(model, idx, q, zd, cost, roll, cost_of, position_step, rate_step, stop,
            iterations=3):
    """A few damped Gauss-Newton steps on each candidate's (z, zdot) at the window's start,
    the Jacobian by differences of a tenth of the grid's spacing, the damping that of a
    prior of half the spacing about the candidate (so a step stays within its cell's
    reach); a step is kept where it lowers the cost."""
    K = q.shape[0]
    eps = np.array([position_step, rate_step]) / 10.0
    damping = np.diag((2.0 / np.array([position_step, rate_step])) ** 2)
    for _ in range(iterations):
        qz, ok = solve_positions_batch(model, q, idx, q[:, idx] + eps[0])
        r, _, _ = roll(np.concatenate([q, qz, q]),
                       np.concatenate([zd, zd, zd + eps[1]]), stop)
        r0, rz, rr = r[:K], r[K:2 * K], r[2 * K:]
        J = np.stack([(rz - r0) / eps[0], (rr - r0) / eps[1]], axis=-1)      # (K, R, 2)
        usable = np.all(np.isfinite(J), axis=(1, 2)) & ok
        if not usable.any():
            break
        A = np.einsum("krj,kri->kji", J[usable], J[usable]) + damping
        b = -np.einsum("krj,kr->kj", J[usable], r0[usable])
        step = np.zeros((K, 2))
        step[usable] = np.linalg.solve(A, b[..., None])[..., 0]
        qn, okn = solve_positions_batch(model, q, idx, q[:, idx] + step[:, :1])
        zdn = zd + step[:, 1:]
        trial = cost_of(roll(qn, zdn, stop)[0])
        better = okn & usable & (trial < cost)
        if not better.any():
            break
        q[better], zd[better], cost[better] = qn[better], zdn[better], trial[better]
    return q, zd, cost


def _rates_from_reading(model, sensors, available, sigmas, q, indices, Q, rate_step):
    """One Gauss-Newton step from rest for the rate at each configuration q (K, n) against
    the readings ``available``: (K,) rates and (K,) whether the readings pin the rate to
    within ``rate_step`` (information J^T W J rate_step^2 >= 1; J by a difference of
    ``rate_step``, exact for a sensor linear in the rates such as a gyroscope)."""
    rest = independent_state(model, q, indices, np.zeros((q.shape[0], 1)), Q)
    moving = independent_state(model, q, indices, np.full((q.shape[0], 1), rate_step), Q)
    h0, o, ang = predict_readings(model, sensors, available, rest.q, rest.qd, rest.qdd)
    h1 = predict_readings(model, sensors, available, moving.q, moving.qd, moving.qdd)[0]
    w = 1.0 / reading_variances(sensors, available, sigmas)
    J = (h1 - h0) / rate_step
    info = np.sum(w * J * J, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.sum(w * J * innovation(o, h0, ang), axis=1) / info
    pinned = info * rate_step ** 2 >= 1.0
    return np.where(pinned, rate, 0.0), pinned


class GapReacquisition:
    """A filter's watch for readings that resume after a gap it cannot bridge (module
    docstring).

    Parameters
    ----------
    model, sensors, per_step, sigmas, dt, forces, integrator : the filter's model, sensors,
        readings by step and assumed sigmas (:func:`~mbfg.estimation.common.prepare_readings`),
        step [s], applied forces and integration rule
    enabled : False: never search (the filter as published)

    The filter calls :meth:`observe` once per step, after its prediction and before its
    update, and acts on the :class:`Reacquired` it returns.  ``log`` lists each search as a
    dict (``start``, ``step``, ``cost``, ``candidates``, the state found: the independent
    ``coordinate``'s index, its value ``z`` and rate ``zd`` at ``step``, and whether the
    filter ``restarted`` from it), or with a ``skipped`` reason where it could not run; the
    filters put it in ``stats["reacquisitions"]``.
    """

    def __init__(self, model: Mechanism, sensors: Sequence, per_step: list, sigmas: list,
                 dt: float, forces: Callable, integrator: str, enabled: bool = True) -> None:
        self.model, self.sensors, self.per_step, self.sigmas = model, sensors, per_step, sigmas
        self.dt, self.forces, self.integrator = dt, forces, integrator
        self.enabled = bool(enabled)
        w = characteristic_rate(model)
        self.rate_unit = w if np.isfinite(w) else 1.0 / dt     # omega_c, 1 / dt without gravity
        self.window = max(1, int(np.ceil(REACQUIRE_WINDOW / self.rate_unit / dt)))
        self.scales = coordinate_scales(model)
        self.rate_floor = REACQUIRE_SPREAD * self.rate_unit
        self.fastest = None
        self.start = None
        self.log = []

    @property
    def pending(self) -> bool:
        """A search window is open: the filter's state waits for its outcome."""
        return self.start is not None

    def needs_spread(self, k: int) -> bool:
        """Whether :meth:`observe` at step k looks at the predicted spread (the readings
        resume there); a filter whose spread is costly passes None at other steps."""
        return (self.enabled and self.start is None and k > 0 and bool(self.per_step[k])
                and not self.per_step[k - 1])

    def _spread(self, idx, z_std, zd_std) -> bool:
        """Whether the filter's std of z or of zd (d,) exceeds REACQUIRE_SPREAD of the
        coordinate's scale (of omega_c times it for zd); never before the filter has had
        readings (readings that start late end no gap)."""
        if z_std is None or self.fastest is None:
            return False
        unit = self.scales[idx]
        if np.any(np.asarray(z_std) > REACQUIRE_SPREAD * unit):
            return True
        return zd_std is not None and bool(
            np.any(np.asarray(zd_std) > REACQUIRE_SPREAD * self.rate_unit * unit))

    def observe(self, k: int, q: ArrayLike, indices: ArrayLike, zd: ArrayLike,
                z_std: ArrayLike | None, zd_std: ArrayLike | None = None) -> Reacquired | None:
        """Step k with the filter's predicted state (q (n,), its independent coordinates,
        zd (d,), the predicted std of z and of zd (d,)); returns a :class:`Reacquired` when
        the filter should restart from it, else None.  The search runs where either std
        exceeds REACQUIRE_SPREAD of the coordinate's scale (of omega_c times it for zd): a
        filter whose spread of z is bounded by the coordinate's range (an unscented one on a
        rocker) can have lost the phase of the swing with its rate alone spread."""
        if not self.enabled:
            return None
        idx = np.asarray(indices, int)
        if self.start is None:
            if not self.per_step[k]:
                return None
            if self.needs_spread(k) and self._spread(idx, z_std, zd_std):
                if idx.size != 1:
                    self.log.append({"start": k, "skipped": "more than one degree of freedom"})
                elif k + self.window - 1 >= len(self.per_step):
                    self.log.append({"start": k, "skipped": "the run ends inside the window"})
                else:
                    self.start, self.q_start = k, np.asarray(q, float).copy()
                    return None
            self._track(zd, idx)
            return None
        if k < self.start + self.window - 1:
            return None
        start, self.start = self.start, None
        bound = self._rate_bound(idx)
        try:
            found = search_state(self.model, self.sensors, self.per_step, self.sigmas,
                                 self.q_start, idx, start, k, self.dt, self.forces,
                                 self.integrator, self.rate_unit, bound, q_end=q)
        except np.linalg.LinAlgError as exc:   # the filter goes on; the search says why
            found = f"a candidate met a singular configuration ({exc})"
        if isinstance(found, str):
            self.log.append({"start": start, "skipped": found})
            return None
        entry = {"start": start, "step": k, "cost": found.cost, "candidates": found.candidates,
                 "swept": found.swept, "coordinate": int(idx[0]),
                 "z": float(found.q[idx[0]]), "zd": float(found.zd[0])}
        # the filter's own state within a rough guess's spread of the state found: it has
        # not lost the crank, and its own estimate (fitted to all the readings, not to the
        # window's alone under the model's errors) is kept
        s = float(self.scales[idx[0]])
        near = (_distance(self.model, q, found.q, idx, found.swept)
                <= REACQUIRE_SPREAD
                and abs(float(np.ravel(zd)[0] - found.zd[0]))
                <= REACQUIRE_SPREAD * self.rate_unit * s)
        # nor where the state started at the filter's own configuration explains the window
        # as well, to within the chi-square quantile of 1 - TIE_LEVEL for two parameters (a
        # mechanism whose readings fit a second part of the turn as well: the filter's own
        # history decides)
        from scipy.stats import chi2
        near = near or (found.own_apart
                        and found.own_cost - found.cost <= chi2.isf(TIE_LEVEL, 2))
        # nor where no candidate explains the window (its RMS normalized residual beyond
        # EXPLAINED_RMS sigmas): the search has nothing better to offer
        explained = found.cost <= EXPLAINED_RMS ** 2 * max(found.readings, 1)
        entry["own_cost"] = found.own_cost
        entry["explained"] = bool(explained)
        entry["restarted"] = not near and explained
        self.log.append(entry)
        return found if entry["restarted"] else None

    def spacing(self, indices: ArrayLike) -> tuple[float, float]:
        """The search grid's spacing on coordinate indices[0]: GRID_SPACING s and
        GRID_SPACING omega_c s [rad or m, per s]."""
        s = float(self.scales[np.asarray(indices, int).ravel()[0]])
        return GRID_SPACING * s, GRID_SPACING * self.rate_unit * s

    def bounded_spread(self, P: np.ndarray, idx: ArrayLike) -> np.ndarray:
        """A filter's covariance P (2d, 2d) of [z, zd] with the standard deviations of z held
        at most SPREAD_BOUND times the coordinates' scales (a uniform spread over a turn) and
        those of zd at most the search's rate bound (twice the fastest rate seen, at least
        REACQUIRE_SPREAD omega_c, times the scales), the correlations kept.  Without
        readings the unscented filter's spread otherwise feeds on itself (a sigma point twice
        as fast meets four times the centripetal forces) until it is not finite; the search
        takes over when the readings resume (:meth:`observe`).  P unchanged when disabled."""
        idx = np.asarray(idx, int)
        if not self.enabled or idx.size != 1 or self.fastest is None:
            return P
        cap = np.array([SPREAD_BOUND * float(self.scales[idx[0]]), self._rate_bound(idx)])
        sd = np.sqrt(np.maximum(np.diag(P), 0.0))
        if np.all(sd <= cap):
            return P
        f = np.minimum(1.0, cap / np.maximum(sd, np.finfo(float).tiny))
        return P * np.outer(f, f)

    def _rate_bound(self, idx) -> float:
        """The largest rate the search tries, of the coordinate idx[0]: twice the fastest rate
        seen, at least REACQUIRE_SPREAD omega_c, times the coordinate's scale."""
        return float(max(2.0 * self.fastest, self.rate_floor) * self.scales[idx[0]])

    def _track(self, zd, idx):
        """The fastest rate the filter has predicted at a step with readings outside a
        search window, in units of its coordinate's scale (its coordinates can change on the
        way, from a point's to an angle's; the search's rates span twice it)."""
        if idx.size == 1:
            v = float(np.max(np.abs(zd))) / float(self.scales[idx[0]])
            self.fastest = v if self.fastest is None else max(self.fastest, v)
