"""Joint identification of physical parameters and states from sensor recordings, and the
cross-validation of the identified model on a held-out recording (docs/identification.md).

:func:`identify` builds the graph of :mod:`mbfg.graphs.identification` (one parameter variable
shared by every recording's dynamics and observation factors), initializes every recording's
states from its readings (:func:`mbfg.model.identification.initial_states`; recordings whose
readings do not fix the configuration are initialized by the online factor-graph estimator
with the nominal model), solves it by Levenberg-Marquardt
(:func:`mbfg.solvers.identification.optimize_joint`) and reports the values, their marginal
standard deviations and correlations, and the identifiable combinations.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mbfg.errors import ConvergenceError, DataError, UsageError
from mbfg.graphs.identification import (IdentificationProblem, IdentificationSettings, Recording,
                                        jerk_coordinates, motion_scales, payload_vector,
                                        peak_rates)
from mbfg.model.identification import initial_states, initial_states_many, parameter_set
from mbfg.model.nonconservative import coulomb_dwells
from mbfg.model.sensors import readings_on_grid
from mbfg.results import (BaseParameters, EstimationResult, IdentificationResult, Stats,
                          ValidationResult)
from mbfg.solvers.identification import optimize_joint, sampling_covariance

if TYPE_CHECKING:
    from mbfg.model.mechanism import Mechanism

__all__ = ["identify", "cross_validate", "identified_mechanism", "as_recording",
           "IdentificationSettings", "Recording"]


def as_recording(rec: Any, n_motors: int = 0) -> Recording:
    """A :class:`~mbfg.graphs.identification.Recording` from a Recording, or a tuple
    ``(readings, dt, n_steps)`` or ``(readings, dt, n_steps, inputs)``; ``inputs`` (n_steps, k)
    samples on the grid, (k,) constant, or a callable of the time t = k dt [s]."""
    if not isinstance(rec, Recording):
        if not isinstance(rec, (tuple, list)) or len(rec) not in (3, 4):
            raise UsageError("a recording is a Recording or a tuple (readings, dt, n_steps"
                             "[, inputs])")
        readings, dt, n = rec[:3]
        rec = Recording(tuple(readings), int(n), float(dt), rec[3] if len(rec) == 4 else None)
    if not (np.isfinite(rec.dt) and rec.dt > 0) or rec.n_steps < 2:
        raise UsageError(f"{rec.name}: expected dt > 0 and at least 2 steps, got dt = {rec.dt}, "
                         f"{rec.n_steps} steps")
    u = rec.inputs
    if u is not None:
        if n_motors == 0:
            raise UsageError(f"{rec.name}: inputs were given but the mechanism has no motors; "
                             f"expected a 'motors:' list in its YAML")
        if callable(u):
            u = np.stack([np.atleast_1d(np.asarray(u(k * rec.dt), float))
                          for k in range(rec.n_steps)])
        u = np.asarray(u, float)
        if u.ndim == 1 and u.size == n_motors:
            u = np.broadcast_to(u, (rec.n_steps, n_motors))
        if u.shape != (rec.n_steps, n_motors):
            raise UsageError(f"{rec.name}: inputs must have shape ({rec.n_steps}, {n_motors}) "
                             f"(one column per motor, one row per step), got {u.shape}")
        if not np.all(np.isfinite(u)):
            raise DataError(f"{rec.name}: the inputs contain non-finite values")
        rec = dataclasses.replace(rec, inputs=np.ascontiguousarray(u))
    return rec


def _starts(params, recs, settings):
    """Initial (q, v, a) of each recording: from its readings (the recordings' position
    continuations together), else the online estimator."""
    grids = [readings_on_grid(params.sensors, list(rec.readings), rec.n_steps) for rec in recs]
    inits = initial_states_many(params.mech, params.sensors, grids, [rec.dt for rec in recs],
                                settings.cutoff)
    return [init if init is not None else _start(params, rec, settings, from_readings=False)
            for init, rec in zip(inits, recs)]


def _start(params, rec, settings, from_readings=True):
    """Initial (q, v, a) of a recording: from its readings (when ``from_readings``: they may
    not fix the configuration), else the online estimator."""
    mech = params.mech
    if from_readings:
        grid = readings_on_grid(params.sensors, list(rec.readings), rec.n_steps)
        init = initial_states(mech, params.sensors, grid, rec.dt, settings.cutoff)
        if init is not None:
            return init
    from mbfg.estimation.graph_estimators import estimate_online
    forces = None
    if rec.inputs is not None:
        from mbfg.model.nonconservative import motor_forces
        Qm = motor_forces(mech, rec.inputs)
        forces = lambda t: Qm[min(int(round(t / rec.dt)), rec.n_steps - 1)]  # noqa: E731
    on = estimate_online(mech, params.sensors, list(rec.readings), rec.dt, rec.n_steps,
                         forces=forces)
    return on.q_smoothed, on.qd_smoothed, on.qdd_smoothed


def _pack(problem, dt, q, v, a):
    lay = problem.layout
    X = np.zeros((q.shape[0], lay.dim))
    X[:, lay.slice("q")], X[:, lay.slice("v")], X[:, lay.slice("a")] = q, v, a
    if "j" in lay.names and q.shape[0] > 2:
        X[:, lay.slice("j")] = np.gradient(a[:, list(problem.jerk_coordinates)], dt, axis=0)
    return X


def _states(problem, X, rec, name):
    p = problem.layout.unpack(X)
    t = np.arange(rec.n_steps) * rec.dt
    return EstimationResult(name, t, p["q"].copy(), p["v"].copy(), p["a"].copy(),
                            p["q"].copy(), p["v"].copy(), p["a"].copy(),
                            stats=Stats.of(name, 0.0, rec.n_steps))


def _cost(problem, r, X, theta, system=None):
    c = problem.step_costs(r, X, theta, system)
    n = max(float(np.sum(c["readings"])), 1.0)
    return float(np.sum(c["observations"] + c["dynamics"] + c["constraints"])) / n, c


STALL_ITERATIONS = 8
STALL_FACTOR = 100.0
"""A final stage whose error is still above STALL_FACTOR times the loose stage's after
STALL_ITERATIONS iterations is given up for the states-only retry (:func:`identify`): the two
stages' errors are of the same size at their optima (both about the readings' count), and the
benchmark's final stage converges in at most 5 iterations."""

CORRECTION_ITERATIONS = 1
"""Iterations at the final dynamics sigma whose solution places the Coulomb terms' switching
for the final stage's correction (:func:`identify`): one Gauss-Newton step from the loose
stage makes the states follow the dynamics (they are nearly linear there); on the benchmark's
random-phase seeds 20-22 two steps, or a whole stage, give the same viscous estimates to 3
digits.  The loose stage's own states misplace the crossings: with the correction taken from
them, 14 of its seeds 20-39 had their viscous coefficients within 5 %, 19 with this step."""

CONSISTENCY_SIGMAS = 5.0
"""A recording's cost per reading above 1 + CONSISTENCY_SIGMAS sqrt(2 / n) (n its readings:
the cost of a consistent fit is about chi^2(n) / n) is reported as a fit the noise model does
not explain (:func:`_warn_inconsistent_fit`)."""


def _consistency_bound(n: float) -> float:
    """The largest cost per reading the sensors' noise explains over n readings."""
    return 1.0 + CONSISTENCY_SIGMAS * np.sqrt(2.0 / max(n, 1.0))


def _consistent(cost: tuple) -> bool:
    """Whether a recording's ``_cost`` (cost per reading, step costs) is within
    :func:`_consistency_bound` of its readings."""
    per_reading, steps = cost
    return per_reading <= _consistency_bound(float(np.sum(steps["readings"])))


def _warn_inconsistent_fit(costs, readings):
    """RuntimeWarning for each recording whose cost per reading is more than the sensors'
    noise explains: the model, or the time grid (a motion faster than the steps resolve: a
    generated five-bar at 400 steps per period 2 pi / omega_c fits at 1.08 with an error of
    7.7 standard deviations, at 800 at 1.002), leaves residuals the intervals do not count."""
    for r, (c, n) in enumerate(zip(costs, readings)):
        bound = _consistency_bound(n)
        if c > bound:
            warnings.warn(f"identify: recording {r} fits at a cost of {c:.3g} per reading, above "
                          f"the {bound:.3g} its sensors' noise explains: the model or the time "
                          f"step does not resolve the motion, and the standard deviations are "
                          f"too narrow", RuntimeWarning, stacklevel=4)


def _stage_settings(settings, kd):
    """``settings`` of a continuation stage at dynamics sigma ``kd``: a loose stage loosens the
    constraint rows by the same factor, so the ratio of the constraint to the dynamics weights
    (the system's conditioning) stays the final one."""
    return dataclasses.replace(settings, dynamics=kd,
                               constraints=settings.constraints * kd / settings.dynamics)


def _stopping(settings, final):
    """:func:`optimize_joint`'s convergence tests for a stage: the final stage's relative
    tolerance and step length, a loose stage's ``stage_tolerance`` (it only needs to start the
    next one inside its basin)."""
    if final:
        return {"relative_tolerance": settings.relative_tolerance,
                "step_sigmas": settings.step_sigmas}
    return {"relative_tolerance": settings.stage_tolerance, "step_sigmas": 0.0}


def _schedule(settings, dwells=False):
    """(dynamics sigma, parameters free, final) of each stage: optionally the states alone
    with a loose dynamics model (the states then follow the readings), then the joint problem
    at each of ``settings.continuation``'s loose sigmas and finally at ``settings.dynamics``
    (a continuation: the tight, output-error-like problem has a small basin of convergence;
    the loose one is nearly linear in the parameters and starts the next stage close to its
    optimum).  ``dwells``: a joint dwells in its Coulomb term's steep band (:func:`_dwells`),
    and the loose sigmas also step down from the loosest by ``DWELL_CONTINUATION``."""
    loose = [float(k) for k in settings.continuation if k > settings.dynamics * (1 + 1e-9)]
    if dwells and loose:
        k = max(loose) / DWELL_CONTINUATION
        while k > settings.dynamics * (1 + 1e-9):
            loose.append(k)
            k /= DWELL_CONTINUATION
        loose = sorted(set(loose), reverse=True)
    out = []
    if settings.states_first:
        out.append((loose[0] if loose else settings.dynamics, False, False))
    out += [(k, True, False) for k in loose]
    out.append((settings.dynamics, True, True))
    return out


def identify(
    model: Mechanism,
    sensors: Sequence,
    recordings: Sequence,
    parameters: Sequence[str] | str,
    *,
    settings: IdentificationSettings | None = None,
    progress: Callable | None = None,
    raise_on_failure: bool = False,
) -> IdentificationResult:
    """Identify physical parameters of ``model`` jointly with the states of every recording.

    Parameters
    ----------
    model : Mechanism
        The mechanism with the initial guesses (its YAML values; they are also the means of
        the weak priors).
    sensors : sequence of Sensor
        The sensors of the recordings (a gyroscope's ``bias`` is its initial guess).
    recordings : sequence
        :class:`~mbfg.graphs.identification.Recording` or tuples ``(readings, dt, n_steps[,
        inputs])``: ``readings`` one ``(steps, values)`` per sensor
        (:meth:`~mbfg.model.sensors.SensorSet.synthesize`, :func:`mbfg.io.read_readings`),
        ``dt`` [s], ``inputs`` the motors' inputs (n_steps, k) or a callable of t.  They share
        one parameter vector; each has its own states.
    parameters : sequence of str or comma-separated str
        Names (YAML paths), see :mod:`mbfg.model.identification`.
    settings : IdentificationSettings, optional
    progress : callable(done, total, note), optional
        Called after each Levenberg-Marquardt iteration (e.g. a
        :class:`mbfg.progress.ProgressBar`).
    raise_on_failure : bool
        Raise :class:`~mbfg.errors.ConvergenceError` (with ``partial`` the result) when the
        solver does not converge; by default the result says so (``converged``, ``stats``).

    Returns
    -------
    IdentificationResult
    """
    t0 = time.perf_counter()
    settings = settings or IdentificationSettings()
    sensors = tuple(sensors)
    for s in sensors:
        try:
            s.validate(model)
        except (ValueError, IndexError, KeyError) as e:
            raise UsageError(f"{s.label}: {e}") from None
    params = parameter_set(model, parameters, sensors)
    recs = [as_recording(r, len(model.spec.motors)) for r in recordings]
    if not recs:
        raise UsageError("identify needs at least one recording")
    for r in recs:
        payload_vector(model, r.payload)  # checked before any work
    starts = _starts(params, recs, settings)
    motion = motion_scales(params.mech, starts, [r.dt for r in recs])
    first = [(q[0], v[0]) for q, v, _ in starts]
    jerk = jerk_coordinates(params.mech, [q for q, _, _ in starts])
    Xs = None
    theta = np.zeros(params.size)
    stages, iterations, history, reason, converged = [], 0, [], "", False
    method = "cholesky"  # once an indefinite pivot made it fall back to QR, QR it is
    problem = st = None
    work = {}  # the elimination's buffers, shared by the stages
    plan = list(_schedule(settings, _dwells(params.mech, starts)))
    loose_end = None   # (Xs, theta) at the end of the last loose stage
    peaks = None       # the peak jerk and snap of a final solution (below)
    first_fit = None   # that solution, kept should the stage solved with its peaks fail
    retried = False
    corrected = False  # whether a final-sigma solution has given the Coulomb correction
    while plan:
        kd, free, final = plan.pop(0)
        previous = problem
        # a final stage's integrator rows are corrected for the Coulomb terms' switching where
        # a rate crosses zero, located on the states solved so far
        local = (previous.coulomb_errors(Xs, theta)
                 if final and previous is not None and Xs is not None else None)
        problem = IdentificationProblem(params, recs, _stage_settings(settings, kd), first,
                                        motion, free=free, jerk_coordinates=jerk, peaks=peaks,
                                        local_errors=local)
        # the correction is only as good as the states it is computed on: on a loose stage's,
        # which follow the readings, a crossing is misplaced by a step or so and the
        # misplaced correction biases the fit as the switching did.  So the final sigma is
        # first taken for CORRECTION_ITERATIONS, and the final stage then takes the
        # correction from that solution
        pre = final and free and not corrected and problem.corrects_switching
        corrected = corrected or pre
        solve_final = final and not pre  # this solve's stopping tests and information
        if Xs is None:
            Xs = [_pack(problem, r.dt, *s) for r, s in zip(recs, starts)]
        # the previous stage's last linearization, its rows reweighted, starts this stage
        initial = (None if previous is None or st is None or st.system is None
                   else problem.reweighted(st.system, previous))
        # a final stage that can still fall back on the states-only retry gives up early when
        # it stalls far above the loose stage's error
        stall = ((STALL_ITERATIONS, STALL_FACTOR * loose_end[2])
                 if final and free and loose_end is not None and not retried else None)
        Xs, theta, st, info = optimize_joint(
            problem, Xs, theta, initial=initial,
            max_iterations=CORRECTION_ITERATIONS if pre else settings.max_iterations,
            work=work, stall=stall,
            **_stopping(settings, solve_final),
            information=solve_final, method=method,
            progress=None if progress is None else
            (lambda i, n, note, k=len(stages): progress(iterations + i, iterations + n,
                                                         f"stage {k}: {note}")))
        iterations += st.iterations
        history += st.history
        method = st.elimination
        stages.append({"dynamics": kd, "parameters": free, "iterations": st.iterations,
                       "converged": st.converged, "final_error": st.final_error,
                       "seconds": st.seconds, "elimination": st.elimination,
                       "coulomb_correction": problem.corrects_switching})
        reason, converged = st.reason, st.converged
        if pre:  # the final stage follows, whether or not this one converged
            plan.insert(0, (kd, free, True))
            continue
        if not final:
            loose_end = ([X.copy() for X in Xs], theta.copy(), st.final_error)
        elif not converged and loose_end is not None and free and not retried:
            # the final stage did not converge from the loose stage's states, which the tight
            # dynamics contradict (a generated shaper, even from the true parameters): back to
            # them, the states alone at the final dynamics (theta held), then the joint stage
            Xs, theta, _ = loose_end
            problem, st, retried = None, None, True
            plan = [(kd, False, False), (kd, True, True)]
        elif converged and peaks is None and not all(
                _consistent(_cost(problem, r, X, theta, st.system)) for r, X in enumerate(Xs)):
            # a fit the sensors' noise does not explain: the integrator rows' sigmas hold
            # their own error as the RMS jerk and snap of the (filtered) initial estimate
            # extrapolate it, and where the motion peaks far above them (near a singular
            # configuration) the rows bend the states off the dynamics.  The final stage once
            # more, with those sigmas also from this solution's peaks (model-consistent)
            peaks = _peaks(problem, Xs, recs)
            plan = [(kd, True, True)]
            first_fit = (problem, [X.copy() for X in Xs], theta.copy(), st, info, reason)
    if first_fit is not None and not converged:  # the re-solve did not converge: the first
        problem, Xs, theta, st, info, first_reason = first_fit  # fit stands (and warns)
        converged, reason = True, (f"{first_reason}; solved again with the integrator rows' "
                                   f"sigmas from its peak rates: not converged ({reason})")
    prior_info = problem.prior_information()
    cov_theta = np.linalg.inv(info)
    cov_theta = 0.5 * (cov_theta + cov_theta.T)
    Jv = params.value_jacobian(theta)
    cov = Jv @ cov_theta @ Jv.T
    std = np.sqrt(np.maximum(np.diag(cov), 0.0))
    sampling = sampling_covariance(st.system, problem.reading_rows, work)
    if sampling is None:  # the banded Cholesky cannot factor the system (QR solved it)
        sampling = np.full_like(cov_theta, np.nan)
    sampling_std = np.sqrt(np.maximum(np.diag(Jv @ sampling @ Jv.T), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov / np.outer(std, std)
    corr = np.where(np.isfinite(corr), corr, 0.0)
    # identifiability in the coordinates the model is linear in (scaled, unit-free): there the
    # null directions of the inertial parameters are linear subspaces
    Jl = params.linear_jacobian(theta)
    try:
        Jl_inv = np.linalg.inv(Jl)
    except np.linalg.LinAlgError:  # a value driven to 0 or beyond a float (its chart's exp
        Jl_inv = np.linalg.pinv(Jl)  # under- or overflows): a result that says so, not a crash
        converged = False
        reason = (f"{reason}; a parameter left the range its chart represents (its value went "
                  f"to 0 or out of floating point)")
    data_info = Jl_inv.T @ (info - prior_info) @ Jl_inv
    data_info = 0.5 * (data_info + data_info.T)
    prior_l = Jl_inv.T @ prior_info @ Jl_inv
    lam, vec, identifiable = _spectrum(data_info, prior_l)
    base = _base_parameters(data_info, prior_l, params.linear_inertial(),
                            params.linear_values(theta), Jl @ cov_theta @ Jl.T,
                            Jl @ sampling @ Jl.T)
    parts = [_cost(problem, r, X, theta, st.system) for r, X in enumerate(Xs)]
    costs = np.array([c for c, _ in parts])
    followed = loose_end[0] if loose_end is not None else Xs   # states that follow the readings
    if converged:  # (a run that did not converge says so already)
        _warn_inconsistent_fit(costs, [float(np.sum(c["readings"])) for _, c in parts])
        _warn_unresolved_dwell(problem, followed, recs, theta)
    else:
        reason += _dwell_note(problem, followed, recs)
    states = tuple(_states(problem, X, rec, "identify") for X, rec in zip(Xs, recs))
    seconds = time.perf_counter() - t0
    stats = Stats.of("identify", seconds, sum(r.n_steps for r in recs), iterations,
                     converged, final_error=st.final_error, history=history, reason=reason,
                     stages=stages, final_iterations=st.iterations)
    res = IdentificationResult(params.names, params.units, params.values(theta), params.nominal,
                               std, corr, theta, cov_theta, data_info, lam, vec, identifiable,
                               params.linear_labels(), params.linear_scales(),
                               params.linear_values(theta), states, costs, bool(converged),
                               stats, sampling_std, sampling, base)
    if not converged and raise_on_failure:
        err = ConvergenceError(f"identification did not converge ({reason}; "
                               f"{seconds:.1f} s)", residual=st.final_error,
                               iterations=st.iterations)
        err.partial = res
        raise err
    return res


DWELL_FRACTION = 0.05
"""The share of a recording's steps beyond which a Coulomb term's rate is said to dwell in its
steep band (:func:`~mbfg.model.nonconservative.coulomb_dwells`: the joint sticks or creeps)
rather than cross it.  A crank that reverses crosses the band in some ten steps of a
thousand (the benchmark four-bar: 0.3-0.9 % of the steps, in runs of up to 25 steps); a
generated pendulum that sticks dwells there in 16 % of them (runs of up to 160 steps), and
the generated mechanisms that barely move, in 80-100 %.  Chosen on those cases (the four-bar's
noise seeds 0-1, the generated ones' seed 21)."""

DWELL_CONTINUATION = 10.0
"""The factor between consecutive loose dynamics sigmas when a joint dwells in its Coulomb
term's steep band (:func:`_schedule`).  There the rate that balances mu tanh(s / eps) lies
within about eps of zero, and the states that follow the readings err by a few eps: from
them the final stage lands in tanh's flat parts, where the dynamics rows have no slope in
the rate, and stalls (the generated pendulum: cost 32 per reading after 150 iterations).  The
final stage converges from rates within about 0.3 eps of the truth (the same pendulum from
its true rates at those steps with 0.3 eps of noise; not from 1 eps), and stages a factor 10
apart lead the states there step by step."""


def _dwelling(mech: Mechanism, q: np.ndarray, v: np.ndarray) -> list:
    """:func:`~mbfg.model.nonconservative.coulomb_dwells` of the Coulomb terms whose rates
    dwell in their steep band in more than ``DWELL_FRACTION`` of the steps (q, v) (N, n)."""
    return [d for d in coulomb_dwells(mech, q, v) if d[1] > DWELL_FRACTION]


def _dwells(mech: Mechanism, starts: list) -> bool:
    """Whether a joint of ``mech`` dwells in its Coulomb term's steep band in any of the
    initial estimates ``starts`` ((q, v, a) each)."""
    return any(_dwelling(mech, q, v) for q, v, _ in starts)


def _dwell_notes(mech: Mechanism, problem: IdentificationProblem, Xs: list, recs: list) -> list:
    """Per Coulomb term of ``mech`` that dwells in its steep band (:func:`_dwelling`) in the
    states Xs (ones that follow the readings: the loose stage's, or the initial estimate's): a
    text naming it, how long it dwells and its time constant there against the step, and
    whether the step resolves that time constant."""
    notes = []
    for X, rec in zip(Xs, recs):
        p = problem.layout.unpack(X)
        for label, fraction, longest, tau in _dwelling(mech, p["q"], p["v"]):
            notes.append((f"{label.split(' ')[0]} in {rec.name}: {100 * fraction:.0f} % of the "
                          f"steps, up to {longest} in a row, time constant {tau:.3g} s at "
                          f"dt = {rec.dt:.3g} s", rec.dt <= tau))
    return notes


def _dwell_note(problem: IdentificationProblem, Xs: list, recs: list) -> str:
    """The reason's note on the Coulomb terms whose joints dwell near zero rate
    (:func:`_dwell_notes`): an identification with them may not converge
    (docs/identification.md, "Joints that stick or creep")."""
    notes = _dwell_notes(problem.params.mech, problem, Xs, recs)
    if not notes:
        return ""
    return ("; the rate of a Coulomb term stays within its regularization's steep band (the "
            "joint sticks or creeps), where the smooth model is stiff and hard to fit from "
            "readings: " + ", ".join(text for text, _ in notes))


def _warn_unresolved_dwell(problem: IdentificationProblem, Xs: list, recs: list,
                           theta: np.ndarray) -> None:
    """RuntimeWarning for a converged fit where a Coulomb term dwells in its steep band with a
    time constant (at the identified values ``theta``) shorter than the step: the integrator
    rows do not resolve its creep, and the intervals may be too narrow (generated mechanisms,
    docs/identification.md)."""
    mech = problem.params.apply(theta)[0]
    unresolved = [text for text, resolved in _dwell_notes(mech, problem, Xs, recs)
                  if not resolved]
    if unresolved:
        warnings.warn("identify: a Coulomb term's rate stays within its regularization's steep "
                      "band, where its time constant is shorter than the step (" +
                      "; ".join(unresolved) + "): the steps do not resolve its creep and the "
                      "standard deviations may be too narrow; record at a shorter step or give "
                      "the term a wider width", RuntimeWarning, stacklevel=3)


def _peaks(problem: IdentificationProblem, Xs: list, recs: list) -> dict:
    """:func:`~mbfg.graphs.identification.peak_rates` of a final stage's solution (its
    accelerations follow the dynamics): a stage built with them holds the integrator rows'
    own error where the motion peaks."""
    return peak_rates(problem.params.mech, [problem.layout.unpack(X)["a"] for X in Xs],
                      [r.dt for r in recs])


def _spectrum(info: np.ndarray, prior: np.ndarray) -> tuple:
    """The eigen-decomposition of a (k, k) information matrix: eigenvalues descending (k,)
    (negative rounding clipped to 0), unit eigenvectors as rows (k, k), each with its largest
    component positive, and whether the information along each exceeds ``prior``'s (k,)."""
    if not info.size:  # (no coordinates, e.g. no inertial parameter among those chosen)
        return np.zeros(0), np.zeros((0, 0)), np.zeros(0, bool)
    lam, vec = np.linalg.eigh(0.5 * (info + info.T))
    order = np.argsort(lam)[::-1]
    lam, vec = np.maximum(lam[order], 0.0), vec[:, order].T
    vec = vec * np.where(vec[np.arange(len(vec)), np.argmax(np.abs(vec), axis=1)] < 0,
                         -1.0, 1.0)[:, None]
    return lam, vec, lam > np.einsum("ij,jk,ik->i", vec, prior, vec)


def _base_parameters(data_info, prior, inertial, phi, cov, sampling) -> BaseParameters:
    """The inertial base parameters: :func:`_spectrum` of the data information (p, p) about
    the inertial coordinates of phi (``inertial`` (p,) bool) with the others (friction, gains,
    biases) marginalized out: its Schur complement F_II - F_IO F_OO^+ F_OI (a pseudo-inverse:
    a direction of the others the data does not see has nothing to marginalize).  A
    direction is identified when that information exceeds the prior's along it; its value
    and standard deviations (posterior ``cov``, ``sampling``: (p, p) covariances of phi) are
    those of v . phi."""
    I, O = inertial, ~inertial
    F = data_info[np.ix_(I, I)]
    if O.any():
        F = F - data_info[np.ix_(I, O)] @ np.linalg.pinv(data_info[np.ix_(O, O)],
                                                          hermitian=True) @ data_info[np.ix_(O, I)]
    lam, vec, ok = _spectrum(F, prior[np.ix_(I, I)])
    directions = np.zeros((lam.size, inertial.size))
    directions[:, I] = vec

    def std_of(c):
        return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", directions, c, directions), 0.0))
    return BaseParameters(lam, directions, ok, directions @ phi, std_of(cov), std_of(sampling))


def identified_mechanism(model: Mechanism, result: IdentificationResult,
                         sensors: Sequence = ()) -> tuple:
    """(Mechanism, sensors) of ``model`` with the identified values of ``result``."""
    params = parameter_set(model, result.names, tuple(sensors))
    return params.apply(np.asarray(result.theta, float))


def cross_validate(
    model: Mechanism,
    sensors: Sequence,
    recording: Any,
    result: IdentificationResult | dict | None = None,
    *,
    settings: IdentificationSettings | None = None,
    progress: Callable | None = None,
) -> ValidationResult:
    """Estimate the states of a held-out ``recording`` (as in :func:`identify`) with the
    parameters fixed at ``result``'s values (an :class:`~mbfg.results.IdentificationResult`, or
    a dict with its ``names`` and chart ``theta``; without one at ``model``'s own), with the
    same noise model as the identification, and report the residual per step.

    The states are solved by the identification's continuation (``settings.continuation``'s
    loose dynamics first, then ``settings.dynamics``), the parameters held.

    Returns a :class:`~mbfg.results.ValidationResult`; its ``cost`` (squared whitened residuals
    per reading) is comparable with the training ``result.costs``."""
    t0 = time.perf_counter()
    settings = settings or IdentificationSettings()
    sensors = tuple(sensors)
    if result is None:  # the model's own values: any chart, held at theta = 0
        names, theta = ("planar_bodies[0].mass",), np.zeros(1)
    elif isinstance(result, IdentificationResult):
        names, theta = result.names, np.asarray(result.theta, float)
    else:
        names, theta = tuple(result["names"]), np.asarray(result["theta"], float)
    params = parameter_set(model, names, sensors)
    if theta.shape != (params.size,):
        raise UsageError(f"the result has {theta.size} chart values for {params.size} "
                         f"parameters ({', '.join(params.names)})")
    mech, sens = params.apply(theta)
    fixed = parameter_set(mech, names, sens)  # the identified model is the nominal one
    rec = as_recording(recording, len(model.spec.motors))
    start = _start(fixed, rec, settings)
    motion = motion_scales(fixed.mech, [start], [rec.dt])
    first = [(start[0][0], start[1][0])]
    jerk = jerk_coordinates(fixed.mech, [start[0]])
    zero = np.zeros(fixed.size)
    # the identification's continuation (its stages' dynamics sigmas, the states alone): the
    # tight problem's basin is small, and the initial states come from filtered readings
    sigmas = list(dict.fromkeys(kd for kd, _, _ in _schedule(settings,
                                                              _dwells(fixed.mech, [start]))))
    Xs, problem, st, iterations, peaks, corrected = None, None, None, 0, None, False
    while sigmas:
        kd = sigmas.pop(0)
        final = not sigmas
        previous = problem
        local = (previous.coulomb_errors(Xs, zero)  # as in identify
                 if final and previous is not None else None)
        problem = IdentificationProblem(fixed, [rec], _stage_settings(settings, kd), first,
                                        motion, free=False, jerk_coordinates=jerk, peaks=peaks,
                                        local_errors=local)
        pre = final and not corrected and problem.corrects_switching
        if pre:  # as in identify: CORRECTION_ITERATIONS, then corrected from that solution
            corrected, final = True, False
            sigmas.append(kd)
        if Xs is None:
            Xs = [_pack(problem, rec.dt, *start)]
        initial = None if previous is None else problem.reweighted(st.system, previous)
        Xs, _, st, _ = optimize_joint(
            problem, Xs, zero, initial=initial,
            max_iterations=CORRECTION_ITERATIONS if pre else settings.max_iterations,
            **_stopping(settings, final),
            progress=None if progress is None else
            (lambda i, n, note, done=iterations: progress(done + i, done + n, note)))
        iterations += st.iterations
        if final and st.converged and peaks is None and not _consistent(
                _cost(problem, 0, Xs[0], zero, st.system)):
            # as in identify: once more with the integrator rows' sigmas from the peaks
            peaks = _peaks(problem, Xs, [rec])
            sigmas.append(kd)  # (the loop runs the final stage once more)
            first_fit = (problem, [X.copy() for X in Xs], st)
    if peaks is not None and not st.converged:  # that did not converge: the first fit stands
        problem, Xs, st = first_fit
    cost, c = _cost(problem, 0, Xs[0], zero, st.system)
    reason = st.reason  # (as in identify: the dwelling Coulomb terms, on the initial states)
    if not st.converged:
        reason += _dwell_note(problem, [_pack(problem, rec.dt, *start)], [rec])
    seconds = time.perf_counter() - t0
    stats = Stats.of("cross-validate", seconds, rec.n_steps, iterations, st.converged,
                     final_error=st.final_error, reason=reason)
    return ValidationResult(np.arange(rec.n_steps) * rec.dt, c["observations"], c["dynamics"],
                            c["readings"], cost, _states(problem, Xs[0], rec, "cross-validate"),
                            bool(st.converged), stats)

