"""The ``simulate`` and ``inverse`` sub-commands of the ``mbfg`` CLI (registered into
:data:`mbfg.cli._EXTRA_COMMANDS`)."""
from __future__ import annotations

import numpy as np

from mbfg.errors import MbfgError, UsageError


def parse_coordinates(text: str, mech, option: str) -> tuple:
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
    if not value > 0:
        raise UsageError(f"{option} must be positive, got {value}")
    return value


def _finish(result, args, plot) -> None:
    if args.out:
        print(f"saved:     {result.save(args.out)}")
    if args.plot:
        print(f"plot:      {plot(result, args.plot)}")


def energy_report(mech, res) -> str:
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


def cmd_simulate(args) -> int:
    import mbfg
    from mbfg.progress import ProgressBar

    mech = mbfg.load_mechanism(args.mechanism)
    t_end, dt = _positive(args.t_end, "--t-end"), _positive(args.dt, "--dt")
    if args.window < 1:
        raise UsageError(f"--window must be >= 1, got {args.window}")
    bar = ProgressBar(f"simulate ({args.solver})", enabled=False if args.quiet else None)
    try:
        if args.solver == "smoother":
            from mbfg.smoothing import simulate_smoother
            res = simulate_smoother(mech, t_end, dt, coords=args.coords,
                                    integrator=args.integrator, window=args.window, progress=bar)
        else:
            from mbfg.simulation import simulate_batch
            res = simulate_batch(mech, t_end, dt, coords=args.coords, integrator=args.integrator,
                                 progress=bar)
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


def cmd_inverse(args) -> int:
    import mbfg
    from mbfg.inverse import solve_inverse_dynamics
    from mbfg.io import read_trajectory
    from mbfg.model import kinematics as K
    from mbfg.progress import ProgressBar

    mech = mbfg.load_mechanism(args.mechanism)
    imposed = parse_coordinates(args.imposed, mech, "--imposed")
    actuated = parse_coordinates(args.actuated, mech, "--actuated") if args.actuated else imposed
    if (args.trajectory is None) == (args.point_path is None):
        raise UsageError("give exactly one of --trajectory FILE or --point-path FILE (with --point)")
    if args.trajectory is not None:
        t, desired = read_trajectory(args.trajectory, columns=len(imposed))
    else:
        if args.point is None:
            raise UsageError("--point-path needs --point P (the point that follows the path)")
        if not 0 <= args.point < len(mech.spec.points):
            raise UsageError(f"--point {args.point} out of range 0..{len(mech.spec.points) - 1}")
        t, xy = read_trajectory(args.point_path, columns=2)
        q = K.inverse_kinematics_point_path(mech, args.point, xy)
        desired = q[:, list(imposed)]
        print(f"inverse kinematics: point {args.point} along {args.point_path} ({len(t)} samples)")
    bar = ProgressBar("inverse dynamics (stage)", enabled=False if args.quiet else None)
    try:
        res = solve_inverse_dynamics(mech, t, desired, imposed, actuated, coords=args.coords,
                                     integrator=args.integrator, progress=bar)
    finally:
        bar.close()
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


def cmd_synthesize(args) -> int:
    """Simulate the mechanism accurately (the "prototype") and write noisy sensor readings."""
    import mbfg
    from mbfg.io import write_readings
    from mbfg.model.integrate import integrate_reference
    from mbfg.sensors import load_sensors

    mech = mbfg.load_mechanism(args.mechanism)
    sensors = load_sensors(args.sensors, mech)
    t_end, dt = _positive(args.t_end, "--t-end"), _positive(args.dt, "--dt")
    truth = integrate_reference(mech, t_end, dt, rtol=1e-11, atol=1e-11)
    readings = sensors.synthesize(mech, truth.t, truth.q, truth.qd, truth.qdd,
                                  np.random.default_rng(args.seed))
    write_readings(args.out, truth.t, sensors, readings)
    print(f"readings:  {args.out} ({len(truth.t)} steps x {sensors.dim} columns: "
          f"{' '.join(sensors.labels)}; seed {args.seed})")
    if args.truth:
        np.savez(args.truth, t=truth.t, q=truth.q, qd=truth.qd, qdd=truth.qdd,
                 coords=np.array(mech.coordinate_names))
        print(f"truth:     {args.truth}")
    return 0


ESTIMATE_METHODS = ("smoother", "batch", "ekf", "ekf_fe", "ukf", "dekf", "pf")


def _estimator_settings(args, mech):
    """EstimatorSettings of --unknown-force (None: the defaults)."""
    if not args.unknown_force:
        return None
    if args.method not in ("smoother", "batch"):
        raise UsageError(f"--unknown-force needs --method smoother or batch, not {args.method}")
    import dataclasses

    from mbfg.estimation.graph_estimators import ONLINE_FORCE_SETTINGS
    coords = args.unknown_force
    if coords != "points":
        coords = parse_coordinates(coords, mech, "--unknown-force")
    return dataclasses.replace(ONLINE_FORCE_SETTINGS, force_coordinates=coords)


def cmd_estimate(args) -> int:
    """State estimation from a readings file with a factor graph or a filter baseline."""
    import mbfg
    from mbfg.io import read_readings, uniform_step
    from mbfg.progress import ProgressBar
    from mbfg.sensors import load_sensors

    mech = mbfg.load_mechanism(args.mechanism)
    sensors = load_sensors(args.sensors, mech)
    t, readings = read_readings(args.readings, sensors)
    dt = uniform_step(t, args.readings)
    if args.window < 1:
        raise UsageError(f"--window must be >= 1, got {args.window}")
    settings = _estimator_settings(args, mech)
    bar = ProgressBar(f"estimate ({args.method})", enabled=False if args.quiet else None)
    try:
        if args.method == "smoother":
            from mbfg.estimation import estimate_online
            res = estimate_online(mech, sensors, readings, dt, t.size, window=args.window,
                                  covariance=args.covariance, progress=bar, settings=settings)
        elif args.method == "batch":
            from mbfg.estimation import estimate_batch
            res = estimate_batch(mech, sensors, readings, dt, t.size, covariance=args.covariance,
                                 settings=settings)
        else:
            from mbfg.estimation import kalman, particle
            fn = {"ekf": kalman.ekf, "ekf_fe": kalman.ekf_fe, "ukf": kalman.ukf,
                  "dekf": kalman.dekf, "pf": particle.particle_filter}[args.method]
            res = fn(mech, sensors, readings, dt, t.size, seed=args.seed)
    finally:
        bar.close()
    res.t = t
    print(f"mechanism: {args.mechanism} (n = {mech.n}, DOF = {mech.dof})")
    print(f"sensors:   {' '.join(sensors.names)}")
    print(f"method:    {res.name}; {t.size} steps (dt = {dt:g} s), "
          f"{res.stats.get('ms_per_step', float('nan')):.2f} ms/step")
    for j in mech.angle_coords:
        print(f"{mech.coordinate_names[j]}: final estimate {res.q[-1, j]:.6g} rad")
    if args.out:
        print(f"saved:     {res.save(args.out)}")
    return 0


def _add_model_options(p) -> None:
    """--coords and --integrator (simulate, inverse)."""
    p.add_argument("--coords", choices=["dependent", "independent"], default="dependent")
    p.add_argument("--integrator", choices=["trapezoidal", "euler"], default="trapezoidal")


def _add_output_options(p, plot: bool = True, out_help="save the result (.npz or .csv)") -> None:
    """--out, --plot and --quiet."""
    p.add_argument("--out", help=out_help)
    if plot:
        p.add_argument("--plot", help="save a plot (.png, .pdf, .svg)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(sub) -> None:
    from mbfg.cli import MECHANISM_HELP

    s = sub.add_parser("simulate", help="forward dynamics from the YAML configuration at rest")
    s.add_argument("mechanism", help=MECHANISM_HELP)
    s.add_argument("--t-end", type=float, default=5.0, help="duration [s] (default 5)")
    s.add_argument("--dt", type=float, default=1e-3, help="time step [s] (default 0.001)")
    s.add_argument("--solver", choices=["smoother", "batch"], default="smoother")
    s.add_argument("--window", type=int, default=2, help="fixed-lag window N_w (default 2)")
    _add_model_options(s)
    _add_output_options(s)
    s.set_defaults(func=cmd_simulate)

    i = sub.add_parser("inverse", help="inverse dynamics: forces for a prescribed motion")
    i.add_argument("mechanism", help=MECHANISM_HELP)
    i.add_argument("--trajectory", help="rows 't value...' of the imposed coordinates "
                   "(blank or comma separated, %%/# comments)")
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
    y.add_argument("--sensors", required=True, help="sensors YAML file (docs/sensors.md)")
    y.add_argument("--t-end", type=float, default=10.0, help="duration [s] (default 10)")
    y.add_argument("--dt", type=float, default=5e-3, help="time step [s] (default 0.005)")
    y.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    y.add_argument("--out", required=True, help="readings file: rows 't value...', nan = no reading")
    y.add_argument("--truth", help="also save the true trajectory (.npz)")
    y.set_defaults(func=cmd_synthesize)

    e = sub.add_parser("estimate", help="estimate the state from noisy sensor readings")
    e.add_argument("mechanism", help=MECHANISM_HELP + " (the estimator's model)")
    e.add_argument("--sensors", required=True, help="sensors YAML file (docs/sensors.md)")
    e.add_argument("--readings", required=True, help="rows 't value...' (nan = no reading), "
                   "as written by 'mbfg synthesize'")
    e.add_argument("--method", choices=ESTIMATE_METHODS, default="smoother",
                   help="factor graph (smoother: online fixed-lag, batch: offline) or a filter")
    e.add_argument("--window", type=int, default=10, help="smoother window (default 10)")
    e.add_argument("--covariance", action="store_true", help="also estimate standard deviations")
    e.add_argument("--unknown-force", metavar="COORDS",
                   help="also estimate a slowly varying unknown generalized force on these "
                        "coordinates (comma-separated names, or 'points' for every point "
                        "coordinate: learns e.g. a wrong gravity); smoother and batch only")
    e.add_argument("--seed", type=int, default=0, help="seed of the particle filter")
    _add_output_options(e, plot=False, out_help="save the estimates (.npz)")
    e.set_defaults(func=cmd_estimate)
