"""The ``simulate`` and ``inverse`` sub-commands of the ``mbfg`` CLI (registered into
:data:`mbfg.cli._EXTRA_COMMANDS`)."""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import DataError, MbfgError, SolverError, UsageError
from mbfg.graphs import INTEGRATORS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from typing import Any

    from numpy.typing import ArrayLike

    from mbfg.model.mechanism import Mechanism
    from mbfg.results import TrajectoryResult

RESULT_SUFFIXES = (".npz", ".csv")
"""File types of ``--out`` for simulate and inverse (TrajectoryResult.save)."""

MEMORY_FACTOR = 4
"""Bytes a run needs ~ steps x (3 n + 1) x 8 x MEMORY_FACTOR (solver state, result arrays and
their copies); a run needing more than half of the machine's RAM is refused up front."""


def parse_coordinates(text: str, mech: Mechanism, option: str) -> tuple:
    """``"20,21"`` or ``"theta0,theta1"`` -> coordinate indices of ``mech``."""
    out = []
    for item in str(text).replace(" ", "").split(","):
        if not item:
            continue
        if item.lstrip("-").isdigit():
            i = int(item)
            if not 0 <= i < mech.n:
                raise UsageError(f"{option}: coordinate index {i} out of range 0..{mech.n - 1} "
                                 f"({' '.join(mech.coordinate_names)})")
        elif item in mech.coordinate_names:
            i = mech.coordinate_names.index(item)
        else:
            raise UsageError(f"{option}: {item!r} is neither an index nor a coordinate name "
                             f"({' '.join(mech.coordinate_names)})")
        out.append(i)
    if not out:
        raise UsageError(f"{option}: expected a comma-separated list of coordinates")
    if len(set(out)) != len(out):
        raise UsageError(f"{option}: repeated coordinate in {text!r}")
    return tuple(out)


def _positive(value: float, option: str) -> float:
    """A positive, finite option value (a duration [s])."""
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{option} must be positive and finite, got {value}; expected a "
                         f"duration in seconds such as 0.001")
    return value


def _seed(value: int, option: str = "--seed") -> int:
    if value < 0:
        raise UsageError(f"{option} must be a non-negative integer, got {value}")
    return value


def _size(nbytes: float) -> str:
    if not math.isfinite(nbytes):
        return "more bytes than a float can count"
    if nbytes >= 1e21:
        return f"{nbytes:.3g} bytes"
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB", "EB"):
        if nbytes < 1000 or unit == "EB":
            return f"{nbytes:.3g} {unit}"
        nbytes /= 1000
    return f"{nbytes:.3g} EB"  # pragma: no cover


def physical_memory() -> int | None:
    """The machine's RAM in bytes (os.sysconf), or None where it is not available."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def check_horizon(
    mech: Mechanism, t_end: float, dt: float, *, t_option: str = "--t-end", dt_option: str = "--dt"
) -> int:
    """Number of steps round(t_end / dt) of a run, after refusing a step longer than the
    duration, a run whose arrays would not fit in half of the RAM, and a step longer than half
    the period of a pendulum of the mechanism's size (no step could follow its motion)."""
    if dt > t_end:
        raise UsageError(f"{dt_option} {dt:g} s is longer than the duration {t_option} {t_end:g} s, "
                         f"so no step would be taken; expected {dt_option} <= {t_option}")
    steps = t_end / dt
    need = (steps + 1) * (3 * mech.n + 1) * 8 * MEMORY_FACTOR
    ram = physical_memory()
    if ram is not None and not need <= ram / 2:
        raise UsageError(f"{t_option} {t_end:g} s at {dt_option} {dt:g} s is {steps:.3g} steps, "
                         f"which would need about {_size(need)} of memory (more than half of this "
                         f"machine's {_size(ram)}); expected fewer steps (at most about "
                         f"{ram / 2 / need * steps:.3g}): a shorter {t_option} or a larger "
                         f"{dt_option}")
    check_step(mech, dt, f"{dt_option} {dt:g} s")
    return int(round(steps))


def check_step(mech: Mechanism, dt: float, what: str) -> None:
    """Refuse a time step longer than half the small-oscillation period 2 pi sqrt(ell / |g|)
    of a pendulum as long as the mechanism's characteristic length ell (the sampling limit:
    at least two steps per period).  Without gravity the mechanism has no time scale.
    ``what`` names the step in the message (``"--dt 5000 s"``)."""
    from mbfg.model.scales import characteristic_length
    g = float(np.hypot(*mech.gravity))
    if not g > 0:
        return
    ell = characteristic_length(mech)
    period = 2 * math.pi * math.sqrt(ell / g)
    if dt > period / 2:
        raise UsageError(f"{what} is longer than half the period {period:.3g} s of a "
                         f"pendulum of the mechanism's size (ell = {ell:.3g} m, |g| = {g:.3g} "
                         f"m/s^2), so no step could follow its motion; expected a step of at "
                         f"most {period / 2:.3g} s (typically far less)")


def check_window(window: int, samples: int, option: str = "--window", what: str = "") -> None:
    """1 <= window <= samples (a window of every sample already solves the whole horizon)."""
    if window < 1:
        raise UsageError(f"{option} must be >= 1, got {window}")
    if window > samples:
        raise UsageError(f"{option} {window} is larger than the number of time samples, "
                         f"{samples}{what}, and a window of {samples} already solves the whole "
                         f"horizon at once; expected 1 <= {option} <= {samples}")


def check_output(
    path: str | None, option: str, suffixes: tuple | None = RESULT_SUFFIXES, what: str = ""
) -> None:
    """Before any computation: ``path`` has one of ``suffixes`` (case-insensitive) and its
    directory exists."""
    if path is None:
        return
    p = Path(path)
    suffix = p.suffix.lower()
    if suffixes is not None and suffix not in suffixes:
        got = f"suffix {p.suffix!r}" if p.suffix else "no suffix"
        raise UsageError(f"{option} {path}: {got}; expected a file name ending in "
                         f"{', '.join(suffixes[:-1])}{' or ' if len(suffixes) > 1 else ''}"
                         f"{suffixes[-1]}{what}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: the directory {parent} does not exist; expected a "
                         f"file in an existing directory")


def check_plot(path: str | None, option: str = "--plot") -> None:
    """``path`` names an image type matplotlib can write (checked before the computation)."""
    if path is None:
        return
    from matplotlib.backend_bases import FigureCanvasBase
    kinds = tuple(f".{k}" for k in sorted(FigureCanvasBase.get_supported_filetypes()))
    preferred = (".png", ".pdf", ".svg")
    check_output(path, option, preferred + tuple(k for k in kinds if k not in preferred),
                 what=" (an image type matplotlib writes)")


@contextlib.contextmanager
def numerics(what: str) -> Iterator:
    """Numerical breakdowns of a computation on absurd input (singular or non-positive-definite
    matrices, overflow, an indeterminate GTSAM system) become a one-line SolverError."""
    try:
        yield
    except MbfgError:
        raise
    except (np.linalg.LinAlgError, FloatingPointError, OverflowError, ZeroDivisionError) as e:
        raise SolverError(f"{what} broke down numerically ({type(e).__name__}: {e}); the input "
                          f"(time step, readings, mechanism) is probably far outside its physical "
                          f"range") from None
    except RuntimeError as e:
        text = " ".join(str(e).split())
        if "Indeterminate linear system" not in text:
            raise
        first = text.split(". ")[0]
        raise SolverError(f"{what} broke down numerically (GTSAM: {first}); the input (time "
                          f"step, readings, mechanism) is probably far outside its physical "
                          f"range") from None


def check_finite(what: str, t: ArrayLike, **arrays: Any) -> None:
    """A result with a non-finite value is an error, not a result."""
    for name, a in arrays.items():
        if a is None:
            continue
        a = np.asarray(a, float)
        bad = ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1) if a.ndim else ~np.isfinite(a)
        if np.any(bad):
            k = int(np.argmax(bad))
            when = f" from t = {t[k]:g} s" if t is not None and k < len(t) else ""
            raise SolverError(f"{what} produced non-finite values ({name}{when}); the input "
                              f"(time step, readings, mechanism) is probably far outside its "
                              f"physical range")


def _finish(result, args, plot) -> None:
    if args.out:
        print(f"saved:     {result.save(args.out)}")
    if args.plot:
        print(f"plot:      {plot(result, args.plot)}")


def energy_report(mech: Mechanism, res: TrajectoryResult) -> str:
    """One line: the drift of the mechanical energy T + V over a forward-dynamics result,
    absolute [J] and relative to the largest kinetic energy reached (the energy in play)."""
    from mbfg.model.inertia import kinetic_energy, mechanical_energy

    energy = mechanical_energy(mech, res.q, res.qd)
    drift = energy - energy[0]
    peak = float(np.max(kinetic_energy(mech, res.qd)))
    worst = float(np.max(np.abs(drift)))
    relative = f" ({worst / peak:.1e} of the peak kinetic energy)" if peak > 0 else ""
    return (f"energy:    E(end) - E(0) = {drift[-1]:.3e} J, max |E - E(0)| = {worst:.3e} J"
            + relative)


def read_inputs(path: str, mech: Mechanism) -> Callable[[float], np.ndarray]:
    """The motors' inputs from rows ``t u_1 ... u_k`` (one column per YAML motor), as a
    function of time (linear interpolation, held outside the samples)."""
    from mbfg.io import read_trajectory
    from mbfg.model.nonconservative import sampled_inputs
    k = len(mech.spec.motors)
    if k == 0:
        raise UsageError(f"--inputs was given but {mech.source or 'the mechanism'} has no "
                         f"motors; expected a 'motors:' list in its YAML")
    t, u = read_trajectory(path, columns=k)
    return sampled_inputs(t, u)


def cmd_simulate(args: argparse.Namespace) -> int:
    import mbfg
    from mbfg.progress import ProgressBar

    t_end, dt = _positive(args.t_end, "--t-end"), _positive(args.dt, "--dt")
    if args.window < 1:
        raise UsageError(f"--window must be >= 1, got {args.window}")
    check_output(args.out, "--out")
    check_plot(args.plot)
    mech = mbfg.load_mechanism(args.mechanism)
    steps = check_horizon(mech, t_end, dt)
    check_window(args.window, steps + 1, what=" (--t-end / --dt + 1)")
    inputs = read_inputs(args.inputs, mech) if args.inputs else None
    bar = ProgressBar(f"simulate ({args.solver})", enabled=False if args.quiet else None)
    try:
        with numerics("the simulation"):
            if args.solver == "smoother":
                from mbfg.drivers.forward_dynamics import simulate_smoother
                res = simulate_smoother(mech, t_end, dt, coords=args.coords,
                                        integrator=args.integrator, window=args.window,
                                        inputs=inputs, progress=bar)
            else:
                from mbfg.drivers.forward_dynamics import simulate_batch
                res = simulate_batch(mech, t_end, dt, coords=args.coords,
                                     integrator=args.integrator, inputs=inputs, progress=bar)
        check_finite("the simulation", res.t, q=res.q, qd=res.qd, qdd=res.qdd)
    except MbfgError as exc:
        partial = getattr(exc, "partial", None)
        if args.out and partial is not None:  # keep what was computed before the failure
            exc.args = (f"{exc}; the trajectory up to t = {partial.t[-1]:.6g} s is saved in "
                        f"{partial.save(args.out)}",)
        raise
    finally:
        bar.close()
    st = res.stats
    steps = len(res.t) - 1
    print(f"mechanism: {args.mechanism} (n = {mech.n}, DOF = {mech.dof})")
    print(f"solver:    {args.solver}" + (f", window {args.window}" if args.solver == "smoother" else "")
          + f", {args.coords} coordinates, {args.integrator} integrator")
    print(f"steps:     {steps} x {dt:g} s = {steps * dt:g} s")
    print(f"time:      {st.get('seconds', float('nan')):.3f} s "
          f"({1e3 * st.get('seconds', float('nan')) / max(steps, 1):.3f} ms/step), "
          f"{st.get('iterations', 0)} iterations")
    print(f"max |Phi|: {np.max(res.position_residual):.3e}")
    print(energy_report(mech, res))

    from mbfg.plot import plot_simulation
    _finish(res, args, lambda r, p: plot_simulation(r, p, title=f"{args.mechanism}: forward dynamics"))
    return 0


def cmd_inverse(args: argparse.Namespace) -> int:
    import mbfg
    from mbfg.drivers.inverse_dynamics import solve_inverse_dynamics
    from mbfg.io import read_trajectory
    from mbfg.model import kinematics as K
    from mbfg.progress import ProgressBar

    from mbfg.trajectories import uniform_step

    check_output(args.out, "--out")
    check_plot(args.plot)
    mech = mbfg.load_mechanism(args.mechanism)
    imposed = parse_coordinates(args.imposed, mech, "--imposed")
    actuated = parse_coordinates(args.actuated, mech, "--actuated") if args.actuated else imposed
    if (args.trajectory is None) == (args.point_path is None):
        raise UsageError("give exactly one of --trajectory FILE or --point-path FILE (with --point)")
    why = "velocities and accelerations are second-order differences of 3 or more samples"
    if args.trajectory is not None:
        from mbfg.resources import resolve_trajectory
        trajectory = resolve_trajectory(args.trajectory)  # a file, or a bundled name
        t, desired = read_trajectory(trajectory, columns=len(imposed), min_rows=3, why=why)
        uniform_step(t, trajectory)
    else:
        if args.point is None:
            raise UsageError("--point-path needs --point P (the point that follows the path)")
        if not 0 <= args.point < len(mech.spec.points):
            raise UsageError(f"--point {args.point} out of range 0..{len(mech.spec.points) - 1}")
        t, xy = read_trajectory(args.point_path, columns=2, min_rows=3, why=why)
        uniform_step(t, args.point_path)
        with numerics("inverse kinematics"):
            q = K.inverse_kinematics_point_path(mech, args.point, xy)
        desired = q[:, list(imposed)]
        print(f"inverse kinematics: point {args.point} along {args.point_path} ({len(t)} samples)")
    bar = ProgressBar("inverse dynamics (stage)", enabled=False if args.quiet else None)
    try:
        with numerics("inverse dynamics"):
            res = solve_inverse_dynamics(mech, t, desired, imposed, actuated, coords=args.coords,
                                         integrator=args.integrator, progress=bar)
    finally:
        bar.close()
    check_finite("inverse dynamics", res.t, q=res.q, qd=res.qd, qdd=res.qdd, Q=res.Q)
    names = mech.coordinate_names
    st = res.stats
    print(f"mechanism: {args.mechanism} (n = {mech.n}, DOF = {mech.dof})")
    print(f"imposed:   {', '.join(names[i] for i in imposed)};  actuated: "
          f"{', '.join(names[i] for i in actuated)};  {args.coords} coordinates")
    print(f"steps:     {len(t)} (dt = {t[1] - t[0]:g} s)")
    print(f"time:      {st['seconds']:.3f} s, iterations per stage "
          f"{[s['iterations'] for s in st['stages']]}")
    print(f"following error (max): {st['max_following_error']:.3e}")
    print(f"max |Phi|: {np.max(res.position_residual):.3e}")
    for j in actuated:
        print(f"Q[{names[j]}]: min {res.Q[:, j].min():.6g}, max {res.Q[:, j].max():.6g}, "
              f"rms {np.sqrt(np.mean(res.Q[:, j] ** 2)):.6g}")
    from mbfg.plot import plot_inverse
    _finish(res, args, lambda r, p: plot_inverse(r, p, imposed, actuated, desired,
                                                 title=f"{args.mechanism}: inverse dynamics"))
    return 0


def cmd_synthesize(args: argparse.Namespace) -> int:
    """Simulate the mechanism accurately (the "prototype") and write noisy sensor readings."""
    import mbfg
    from mbfg.io import write_readings
    from mbfg.model.integrate import integrate_reference
    from mbfg.loader import load_sensors

    t_end, dt = _positive(args.t_end, "--t-end"), _positive(args.dt, "--dt")
    seed = _seed(args.seed)
    check_output(args.out, "--out", None)
    check_output(args.truth, "--truth", (".npz",))
    mech = mbfg.load_mechanism(args.mechanism)
    from mbfg.resources import resolve_sensors
    sensors = load_sensors(resolve_sensors(args.sensors), mech)  # a file, or a bundled name
    check_horizon(mech, t_end, dt)
    inputs = read_inputs(args.inputs, mech) if args.inputs else None
    with numerics("the reference simulation"):
        truth = integrate_reference(mech, t_end, dt, inputs=inputs, rtol=1e-11, atol=1e-11)
        check_finite("the reference simulation", truth.t, q=truth.q, qd=truth.qd, qdd=truth.qdd)
        readings = sensors.synthesize(mech, truth.t, truth.q, truth.qd, truth.qdd,
                                      np.random.default_rng(seed))
    write_readings(args.out, truth.t, sensors, readings)
    print(f"readings:  {args.out} ({len(truth.t)} steps x {sensors.dim} columns: "
          f"{' '.join(sensors.labels)}; seed {args.seed})")
    if args.truth:
        np.savez(args.truth, t=truth.t, q=truth.q, qd=truth.qd, qdd=truth.qdd,
                 coords=np.array(mech.coordinate_names))
        print(f"truth:     {args.truth}")
    return 0


ESTIMATE_WINDOW = 10
"""Default --window of mbfg estimate."""


def _estimator_settings(args, mech, est):
    """EstimatorSettings of --unknown-force (None: the defaults)."""
    if not args.unknown_force:
        return None
    if not est.accepts("settings"):
        raise UsageError(f"--unknown-force needs a factor-graph --method (fg-online, fg-batch), "
                         f"not {args.method}")
    import dataclasses

    from mbfg.estimation.graph_estimators import ONLINE_FORCE_SETTINGS
    coords = args.unknown_force
    if coords != "points":
        coords = parse_coordinates(coords, mech, "--unknown-force")
    return dataclasses.replace(ONLINE_FORCE_SETTINGS, force_coordinates=coords)


def cmd_estimate(args: argparse.Namespace) -> int:
    """State estimation from a readings file with a factor graph or a filter baseline."""
    import dataclasses

    import mbfg
    from mbfg.estimation import estimate, estimator
    from mbfg.io import read_readings
    from mbfg.trajectories import uniform_step
    from mbfg.progress import ProgressBar
    from mbfg.loader import load_sensors

    _seed(args.seed)
    est = estimator(args.method)
    window = ESTIMATE_WINDOW if args.window is None else args.window
    if window < 1:
        raise UsageError(f"--window must be >= 1, got {window}")
    check_output(args.out, "--out", (".npz",))
    mech = mbfg.load_mechanism(args.mechanism)
    from mbfg.resources import resolve_sensors
    sensors = load_sensors(resolve_sensors(args.sensors), mech)  # a file, or a bundled name
    t, readings = read_readings(args.readings, sensors)
    dt = uniform_step(t, args.readings)
    try:
        check_step(mech, dt, f"{args.readings}: the time step {dt:g} s")
    except UsageError as e:
        raise DataError(str(e)) from None
    if args.window is None:  # the default: at most the whole horizon
        window = min(window, t.size)
    check_window(window, t.size, what=f" (rows of {args.readings})")
    settings = _estimator_settings(args, mech, est)
    for option, value, kind in (("robust", args.robust, "a factor-graph --method (fg-*)"),
                                ("gate", args.gate, "a filter --method (ekf, ekf_fe, dekf, "
                                                    "ukf, pf)")):
        if value is not None and not est.accepts(option):
            raise UsageError(f"--{option} needs {kind}, not {args.method}")
    options = {"window": window, "covariance": args.covariance, "settings": settings,
               "robust": args.robust, "gate": args.gate}
    options = {k: v for k, v in options.items() if est.accepts(k) and v is not None}
    if args.inputs:  # the motors' inputs on the readings' clock (the grid starts at t[0])
        u = read_inputs(args.inputs, mech)
        t0 = float(t[0])
        options["inputs"] = lambda tt: u(tt + t0)
    bar = ProgressBar(f"estimate ({est.name})", enabled=False if args.quiet else None)
    try:
        with numerics(f"the estimation ({est.name})"):
            res = estimate(mech, sensors, readings, dt, t.size, method=est.name, seed=args.seed,
                           progress=bar, **options)
    finally:
        bar.close()
    check_finite(f"the estimation ({est.name})", t, q=res.q, qd=res.qd)
    res = dataclasses.replace(res, t=t)  # the readings' own times (the grid starts at t[0])
    print(f"mechanism: {args.mechanism} (n = {mech.n}, DOF = {mech.dof})")
    print(f"sensors:   {' '.join(sensors.names)}")
    print(f"method:    {res.name}; {t.size} steps (dt = {dt:g} s), "
          f"{res.stats.get('ms_per_step', float('nan')):.2f} ms/step")
    for j in mech.angle_coords:
        print(f"{mech.coordinate_names[j]}: final estimate {res.q[-1, j]:.6g} rad")
    if args.out:
        print(f"saved:     {res.save(args.out)}")
    return 0


def _add_model_options(p, integrators=("trapezoidal", "euler")) -> None:
    """--coords and --integrator (simulate, inverse); the first integrator is the default."""
    p.add_argument("--coords", choices=["dependent", "independent"], default="dependent")
    what = {"hermite": "fourth order", "trapezoidal": "the paper's Eq. 23", "euler": "Eq. 22"}
    p.add_argument("--integrator", choices=list(integrators), default=integrators[0],
                   help="; ".join(f"{name}: {what[name]}" for name in integrators)
                   + f" (default: {integrators[0]})")


def _add_output_options(p, plot: bool = True, out_help="save the result (.npz or .csv)") -> None:
    """--out, --plot and --quiet."""
    p.add_argument("--out", help=out_help)
    if plot:
        p.add_argument("--plot", help="save a plot (.png, .pdf, .svg)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(sub: argparse._SubParsersAction) -> None:
    from mbfg.cli import MECHANISM_HELP

    s = sub.add_parser("simulate", help="forward dynamics from the YAML configuration at rest")
    s.add_argument("mechanism", help=MECHANISM_HELP)
    s.add_argument("--t-end", type=float, default=5.0, help="duration [s] (default 5)")
    s.add_argument("--dt", type=float, default=1e-3, help="time step [s] (default 0.001)")
    s.add_argument("--solver", choices=["smoother", "batch"], default="smoother")
    s.add_argument("--window", type=int, default=2, help="fixed-lag window N_w (default 2)")
    s.add_argument("--inputs", help="rows 't u1 ... uk' of the inputs of the mechanism's k "
                   "motors (YAML motors:), interpolated linearly in time")
    _add_model_options(s, INTEGRATORS)
    _add_output_options(s)
    s.set_defaults(func=cmd_simulate)

    i = sub.add_parser("inverse", help="inverse dynamics: forces for a prescribed motion")
    i.add_argument("mechanism", help=MECHANISM_HELP)
    i.add_argument("--trajectory", help="rows 't value...' of the imposed coordinates "
                   "(blank or comma separated, %%/# comments), or the name of a bundled "
                   "reference trajectory (fourbars1-with-rel-angle-trajectory, "
                   "pick-and-place-robot-trajectory)")
    i.add_argument("--point-path", help="rows 't x y' of a point's desired path (solved by "
                   "inverse kinematics for the imposed coordinates); needs --point")
    i.add_argument("--point", type=int, help="point index that follows --point-path")
    i.add_argument("--imposed", required=True, help="coordinates with a prescribed motion, "
                   "e.g. 20,21 or theta0,theta1")
    i.add_argument("--actuated", help="coordinates with an unknown force (default: --imposed)")
    _add_model_options(i)
    _add_output_options(i)
    i.set_defaults(func=cmd_inverse)

    y = sub.add_parser("synthesize", help="simulate a mechanism and write noisy sensor readings")
    y.add_argument("mechanism", help=MECHANISM_HELP + " (the true prototype)")
    y.add_argument("--sensors", required=True, help="sensors YAML file (docs/sensors.md), or "
                   "the name of a bundled one (fourbar-review)")
    y.add_argument("--t-end", type=float, default=10.0, help="duration [s] (default 10)")
    y.add_argument("--dt", type=float, default=5e-3, help="time step [s] (default 0.005)")
    y.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    y.add_argument("--out", required=True, help="readings file: rows 't value...', nan = no reading")
    y.add_argument("--truth", help="also save the true trajectory (.npz)")
    y.add_argument("--inputs", help="rows 't u1 ... uk' of the inputs of the mechanism's k "
                   "motors (YAML motors:), interpolated linearly in time")
    y.set_defaults(func=cmd_synthesize)

    e = sub.add_parser("estimate", help="estimate the state from noisy sensor readings")
    e.add_argument("mechanism", help=MECHANISM_HELP + " (the estimator's model)")
    e.add_argument("--sensors", required=True, help="sensors YAML file (docs/sensors.md), or "
                   "the name of a bundled one (fourbar-review)")
    e.add_argument("--inputs", help="rows 't u1 ... uk' of the inputs of the model's k motors "
                   "(YAML motors:), interpolated linearly in time")
    e.add_argument("--readings", required=True, help="rows 't value...' (nan = no reading), "
                   "as written by 'mbfg synthesize'")
    e.add_argument("--method", default="fg-online",
                   help="estimator: fg-online (factor-graph fixed-lag smoother; alias "
                        "smoother), fg-batch (whole recording; alias batch), fg-online+force, "
                        "fg-batch+force, ekf, ekf_fe, ukf, dekf, pf (mbfg.estimation.ESTIMATORS)")
    e.add_argument("--window", type=int, default=None,
                   help=f"smoother window, at most the number of readings rows (default "
                        f"{ESTIMATE_WINDOW}, or every row of a shorter file)")
    e.add_argument("--covariance", action="store_true", help="also estimate standard deviations")
    e.add_argument("--unknown-force", metavar="COORDS",
                   help="also estimate a slowly varying unknown generalized force on these "
                        "coordinates (comma-separated names, or 'points' for every point "
                        "coordinate: learns e.g. a wrong gravity); smoother and batch only")
    e.add_argument("--robust", choices=("huber", "cauchy"), default=None,
                   help="robust loss on the readings against outliers (factor-graph methods)")
    e.add_argument("--gate", type=float, default=None, metavar="P",
                   help="innovation gating: reject a reading whose normalized innovation "
                        "exceeds the chi-square quantile P, e.g. 0.9999 (filters: "
                        "ekf, ekf_fe, dekf, ukf, pf)")
    e.add_argument("--seed", type=int, default=0, help="seed of the particle filter")
    _add_output_options(e, plot=False, out_help="save the estimates (.npz)")
    e.set_defaults(func=cmd_estimate)


__all__ = ["read_inputs", "cmd_simulate", "cmd_inverse", "cmd_synthesize", "cmd_estimate", "register",
           "parse_coordinates", "check_horizon", "check_step", "check_window", "check_output",
           "check_plot", "check_finite", "numerics", "energy_report", "physical_memory",
           "RESULT_SUFFIXES", "MEMORY_FACTOR", "ESTIMATE_WINDOW"]
