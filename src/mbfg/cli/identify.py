"""The ``identify`` and ``validate`` sub-commands of the ``mbfg`` CLI (docs/identification.md).

``mbfg identify MECH.yaml --sensors S.yaml --readings R1.txt [R2.txt ...] [--inputs U1.txt
[U2.txt ...]] [--payload K:P.yaml ...] --parameters NAMES [--out result.json] [--report
report.md] [--write-yaml identified.yaml] [--validate HELDOUT.txt [--validate-inputs U.txt]]``

``--payload K:P.yaml`` attaches the known payload of the YAML file ``P.yaml`` to the K-th
(1-based) ``--readings`` recording (:func:`read_payload`).

``mbfg validate MECH.yaml --sensors S.yaml --readings HELDOUT.txt [--inputs U.txt]
[--payload P.yaml] [--result result.json] [--out steps.csv]``: the states of a held-out recording with the
parameters fixed (at the values of ``--result``, else the YAML's), and its residual per step.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import DataError, UsageError

if TYPE_CHECKING:
    import argparse

    from mbfg.model.mechanism import Mechanism
    from mbfg.model.sensors import SensorSet

__all__ = ["register", "cmd_identify", "cmd_validate", "read_recording", "identified_yaml",
           "read_payload", "PAYLOAD_HELP"]

PAYLOAD_HELP = ("K:FILE.yaml: the known payload of the K-th --readings recording (1-based), "
                "a YAML file 'payload: [{body: i, mass: kg, cog: [x, y] m (body frame), "
                "inertia: kg m^2 about its centre (default 0)}, ...]'; repeat for other "
                "recordings")


def read_recording(path: str, sensors: SensorSet, mech: Mechanism, inputs: str | None) -> tuple:
    """(Recording, t) of a readings file (rows ``t value...``) and its optional inputs file
    (rows ``t u1 ... uk``, interpolated at the readings' times)."""
    from mbfg.cli.commands import read_inputs
    from mbfg.graphs.identification import Recording
    from mbfg.io import read_readings
    from mbfg.trajectories import uniform_step
    t, readings = read_readings(path, sensors)
    dt = uniform_step(t, path)
    u = None
    if inputs:
        f = read_inputs(inputs, mech)
        u = np.stack([np.atleast_1d(f(float(tk))) for tk in t])
    elif mech.spec.motors:
        raise UsageError(f"{mech.source or 'the mechanism'} has motors: give their recorded "
                         f"inputs for {path} with --inputs")
    return Recording(tuple(readings), int(t.size), float(dt), u, name=str(path)), t


def read_payload(path: str, mech: Mechanism) -> tuple:
    """The payload of a recording (see :class:`mbfg.graphs.identification.Recording`) from the
    YAML file ``path``::

        payload:
          - {body: 1, mass: 2.0, cog: [1.2, 0.1], inertia: 0.05}

    ``body`` a ``planar_bodies`` index, ``mass`` [kg] > 0, ``cog`` [m] its centre of mass in
    the body's frame (as the mechanism YAML's ``cog``), ``inertia`` [kg m^2] >= 0 its moment
    of inertia about that centre (default 0: a point mass).  Errors are
    :class:`~mbfg.errors.SchemaError` naming the file, the YAML path and what was expected."""
    import yaml

    from mbfg.errors import SchemaError, YamlSyntaxError
    from mbfg.loader import read_yaml_text
    try:
        data = yaml.safe_load(read_yaml_text(path, "payload"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise YamlSyntaxError(f"invalid YAML ({getattr(e, 'problem', None) or e})", file=path,
                              line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict) or set(data) != {"payload"}:
        raise SchemaError("expected a mapping with the one key 'payload'", file=path)
    items = data["payload"]
    if not isinstance(items, list) or not items:
        raise SchemaError("expected a non-empty list of {body, mass, cog, inertia}", file=path,
                          path="payload")
    n_bodies = len(mech.spec.bodies)
    out = []
    for i, item in enumerate(items):
        where = f"payload[{i}]"
        if not isinstance(item, dict):
            raise SchemaError("expected a mapping {body, mass, cog, inertia}", file=path,
                              path=where)
        unknown = set(item) - {"body", "mass", "cog", "inertia"}
        if unknown:
            raise SchemaError(f"unknown key {sorted(unknown)[0]!r}; expected body, mass, cog, "
                              f"inertia", file=path, path=where)
        for key in ("body", "mass", "cog"):
            if key not in item:
                raise SchemaError(f"missing '{key}'", file=path, path=where)
        b = item["body"]
        if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < n_bodies:
            raise SchemaError(f"expected a planar_bodies index 0..{n_bodies - 1}, got {b!r}",
                              file=path, path=f"{where}.body")

        def number(key, value, positive=False):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not np.isfinite(value) or value < 0 or (positive and value == 0):
                raise SchemaError(f"expected a {'positive' if positive else 'non-negative'} "
                                  f"number, got {value!r}", file=path, path=f"{where}.{key}")
            return float(value)
        m = number("mass", item["mass"], positive=True)
        c = item["cog"]
        if not (isinstance(c, list) and len(c) == 2
                and all(not isinstance(x, bool) and isinstance(x, (int, float))
                        and np.isfinite(x) for x in c)):
            raise SchemaError(f"expected [x, y] (two finite numbers, m), got {c!r}", file=path,
                              path=f"{where}.cog")
        out.append((b, m, (float(c[0]), float(c[1])), number("inertia", item.get("inertia", 0.0))))
    return tuple(out)


def _payloads(specs: list, n_recordings: int, mech: Mechanism) -> list:
    """One payload tuple per recording from the ``--payload K:FILE`` options."""
    out = [() for _ in range(n_recordings)]
    for spec in specs or []:
        k, sep, path = str(spec).partition(":")
        if not sep or not k.strip().isdigit() or not path:
            raise UsageError(f"--payload {spec}: expected K:FILE.yaml, K the 1-based position of "
                             f"the recording among the --readings files")
        k = int(k)
        if not 1 <= k <= n_recordings:
            raise UsageError(f"--payload {spec}: recording {k} does not exist; expected 1.."
                             f"{n_recordings} (one per --readings file)")
        if out[k - 1]:
            raise UsageError(f"--payload {spec}: recording {k} already has a payload; expected "
                             f"one --payload per recording (list several masses in its file)")
        out[k - 1] = read_payload(path, mech)
    return out


def _number(x: float) -> float:
    return float(f"{float(x):.12g}")


def identified_yaml(source: str, mech: Mechanism) -> str:
    """The YAML text of ``source`` (the mechanism file) with the physical values of ``mech``
    (bodies' mass, cog, I0; friction coefficients; motor gains; gravity) written as numbers;
    the rest (geometry, parameters, expressions) is kept.  Comments are not."""
    import yaml
    from mbfg.loader import read_yaml_text
    from mbfg.resources import resolve_mechanism
    data = yaml.safe_load(read_yaml_text(resolve_mechanism(source)))  # a file or a bundled name
    if not isinstance(data, dict):
        raise DataError(f"{source}: expected a YAML mapping")
    spec = mech.spec
    for b, body in enumerate(spec.bodies):
        entry = data["planar_bodies"][b]
        entry["mass"] = _number(body.mass)
        entry["cog"] = [_number(body.cog[0]), _number(body.cog[1])]
        entry["I0"] = _number(body.I0)
    for k, f in enumerate(spec.friction):
        entry = data["friction"][k]
        entry["viscous"] = _number(f.viscous)
        entry["coulomb"] = _number(f.coulomb)
    for j, m in enumerate(spec.motors):
        data["motors"][j]["gain"] = _number(m.gain)
    data["gravity"] = [_number(g) for g in spec.gravity]
    head = f"# identified by mbfg identify from {source}\n"
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _load(args):
    import mbfg
    from mbfg.loader import load_sensors
    from mbfg.resources import resolve_sensors
    mech = mbfg.load_mechanism(args.mechanism)
    sensors = load_sensors(resolve_sensors(args.sensors), mech)
    return mech, sensors


def _settings(args):
    import dataclasses

    from mbfg.graphs.identification import IdentificationSettings
    s = IdentificationSettings()
    if getattr(args, "max_iterations", None) is not None:
        if args.max_iterations < 1:
            raise UsageError(f"--max-iterations must be >= 1, got {args.max_iterations}")
        s = dataclasses.replace(s, max_iterations=int(args.max_iterations))
    if getattr(args, "dynamics_sigma", None) is not None:
        v = float(args.dynamics_sigma)
        if not (np.isfinite(v) and v > 0):
            raise UsageError(f"--dynamics-sigma must be positive, got {args.dynamics_sigma}")
        s = dataclasses.replace(s, dynamics=v)
    if getattr(args, "rule", None) is not None:
        s = dataclasses.replace(s, rule=args.rule)
    return s


def _check_suffix(path, option, suffixes):
    if path and Path(path).suffix.lower() not in suffixes:
        raise UsageError(f"{option}: expected a {' or '.join(suffixes)} file, got {path}")


def _validation_lines(res, path: str, training: float | None) -> list:
    lines = [f"validation: {path}: cost per reading {res.cost:.4g}"
             + (f" ({res.cost / training:.3f} x training)" if training else "")
             + ("" if res.converged else " (NOT converged)")]
    per = res.observations / np.maximum(res.readings, 1)
    worst = int(np.argmax(per))
    lines.append(f"            worst step {worst} (t = {res.t[worst]:g} s): "
                 f"{per[worst]:.3g} per reading")
    return lines


def cmd_identify(args: argparse.Namespace) -> int:
    """Identify physical parameters from one or more recordings."""
    import dataclasses

    import mbfg
    from mbfg.progress import ProgressBar
    _check_suffix(args.out, "--out", (".json",))
    _check_suffix(args.report, "--report", (".md",))
    _check_suffix(args.write_yaml, "--write-yaml", (".yaml", ".yml"))
    mech, sensors = _load(args)
    inputs = list(args.inputs or [])
    if inputs and len(inputs) != len(args.readings):
        raise UsageError(f"--inputs: {len(inputs)} files for {len(args.readings)} --readings "
                         f"files; expected one inputs file per recording")
    payloads = _payloads(getattr(args, "payload", None), len(args.readings), mech)
    recs = [dataclasses.replace(read_recording(r, sensors, mech, inputs[i] if inputs else None)[0],
                                payload=payloads[i])
            for i, r in enumerate(args.readings)]
    settings = _settings(args)
    bar = ProgressBar("identify", enabled=False if args.quiet else None)
    try:
        res = mbfg.identify(mech, sensors, recs, args.parameters, settings=settings,
                            progress=bar)
    finally:
        bar.close()
    width = max(len(n) for n in res.names)
    print(f"{'converged' if res.converged else 'NOT converged'} after {res.stats.iterations} "
          f"iterations ({res.stats.seconds:.2f} s); cost per reading "
          + ", ".join(f"{c:.4g}" for c in res.costs))
    print("(+- the posterior std, the model's process noise counted; sampling: the readings' "
          "noise alone)")
    for n, v, s, ss, u in zip(res.names, res.values, res.std, res.sampling_std, res.units):
        print(f"{n:{width}s} = {v:.6g} +- {s:.2g} {u} (sampling +- {ss:.2g})")
    nulls = int(np.sum(~res.identifiable))
    print(f"identifiable combinations: {int(np.sum(res.identifiable))} of {len(res.names)}"
          + ("; null directions: " + "; ".join(res.combination_text(i) for i in
                                                np.flatnonzero(~res.identifiable))
             if nulls else ""))
    b = res.base_parameters
    if b is not None and b.spectrum.size:
        print(f"inertial base parameters: {int(np.sum(b.identifiable))} of {b.spectrum.size} "
              "identified (the report lists them)")
    if args.out:
        print(f"saved:     {res.save(args.out)}")
    report = res.report()
    if args.validate:
        rec, _ = read_recording(args.validate, sensors, mech, args.validate_inputs)
        if args.validate_payload:
            rec = dataclasses.replace(rec, payload=read_payload(args.validate_payload, mech))
        val = mbfg.cross_validate(mech, sensors, rec, res, settings=settings)
        lines = _validation_lines(val, args.validate, float(np.mean(res.costs)))
        print("\n".join(lines))
        report += "\n## Cross-validation\n\n" + "\n".join(f"    {x.strip()}" for x in lines) + "\n"
    if args.report:
        Path(args.report).write_text(report)
        print(f"report:    {args.report}")
    if args.write_yaml:
        from mbfg.drivers.identification import identified_mechanism
        new, _ = identified_mechanism(mech, res, sensors)
        Path(args.write_yaml).write_text(identified_yaml(args.mechanism, new))
        print(f"yaml:      {args.write_yaml}")
    return 0


def _result_from_json(path: str) -> dict:
    try:
        d = json.loads(Path(path).read_text())
        return {"names": tuple(p["name"] for p in d["parameters"]),
                "theta": np.asarray(d["chart"]["theta"], float)}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not an 'mbfg identify --out' result ({type(e).__name__}: "
                        f"{e})") from None


def cmd_validate(args: argparse.Namespace) -> int:
    """States of a held-out recording with fixed parameters; residual per step."""
    import dataclasses

    import mbfg
    _check_suffix(args.out, "--out", (".csv", ".json"))
    mech, sensors = _load(args)
    result = _result_from_json(args.result) if args.result else None
    rec, t = read_recording(args.readings, sensors, mech, args.inputs)
    if args.payload:
        rec = dataclasses.replace(rec, payload=read_payload(args.payload, mech))
    val = mbfg.cross_validate(mech, sensors, rec, result, settings=_settings(args))
    print("\n".join(_validation_lines(val, args.readings, None)))
    if args.out:
        print(f"saved:     {dataclasses.replace(val, t=t).save(args.out)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from mbfg.cli import MECHANISM_HELP
    from mbfg.model.identification import NAME_HELP
    p = sub.add_parser("identify", help="identify physical parameters (masses, friction, motor "
                       "gains, ...) jointly with the states, from sensor recordings")
    p.add_argument("mechanism", help=MECHANISM_HELP + " (its values are the initial guesses)")
    p.add_argument("--sensors", required=True, help="sensors YAML file (docs/sensors.md)")
    p.add_argument("--readings", required=True, nargs="+", help="one or more readings files "
                   "(rows 't value...', nan = no reading); they share the parameters")
    p.add_argument("--inputs", nargs="+", help="the motors' inputs of each recording (rows "
                   "'t u1 ... uk'), one file per --readings file")
    p.add_argument("--payload", action="append", metavar="K:FILE.yaml", help=PAYLOAD_HELP)
    p.add_argument("--parameters", required=True, help=f"comma-separated names: {NAME_HELP}")
    p.add_argument("--out", help="save the result (.json)")
    p.add_argument("--report", help="write a Markdown report (.md)")
    p.add_argument("--write-yaml", help="write the identified mechanism (.yaml)")
    p.add_argument("--validate", help="a held-out readings file: estimate its states with the "
                   "identified parameters fixed and report its residual")
    p.add_argument("--validate-inputs", help="the motors' inputs of --validate")
    p.add_argument("--validate-payload", metavar="FILE.yaml", help="the known payload of "
                   "--validate (a payload YAML file, as --payload)")
    p.add_argument("--max-iterations", type=int, help="Levenberg-Marquardt iterations per "
                   "stage (default 20)")
    p.add_argument("--dynamics-sigma", type=float, help="process noise of the dynamics "
                   "relative to the motion's RMS accelerations (default 1e-4)")
    p.add_argument("--rule", choices=("hermite", "trapezoidal"), help="the integrator rows "
                   "between steps (default hermite: fourth order, with the jerk as a state)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_identify)

    v = sub.add_parser("validate", help="estimate the states of a held-out recording with "
                       "fixed (identified) parameters and report its residual per step")
    v.add_argument("mechanism", help=MECHANISM_HELP)
    v.add_argument("--sensors", required=True, help="sensors YAML file (docs/sensors.md)")
    v.add_argument("--readings", required=True, help="the held-out readings file")
    v.add_argument("--inputs", help="the motors' inputs of the recording (rows 't u1 ... uk')")
    v.add_argument("--payload", metavar="FILE.yaml", help="the known payload of the recording "
                   "(a YAML file 'payload: [{body, mass, cog, inertia}, ...]', as for identify)")
    v.add_argument("--result", help="an 'mbfg identify --out' result (.json); default: the "
                   "YAML's values")
    v.add_argument("--out", help="save the residual per step (.csv or .json)")
    v.add_argument("--dynamics-sigma", type=float, help="as for identify (default 1e-4)")
    v.add_argument("--rule", choices=("hermite", "trapezoidal"), help="as for identify")
    v.set_defaults(func=cmd_validate)
