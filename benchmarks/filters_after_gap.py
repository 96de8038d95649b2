"""The recursive filters after a gap in a rate sensor's readings, on generated mechanisms at
two scales (issue 14 item 2; mbfg.estimation.reacquisition).

Each one-degree-of-freedom family of :func:`mbfg.testing.random_mechanism` (``--seed``, 31 by
default) is the prototype, at 1 cm / 1 g and at 4 m / 200 kg, as
:func:`mbfg.testing.watched_mechanism` makes it (released from rest, DOP853, dt =
0.02 / omega_c, 6 / omega_c long, the estimator's model with gravity 10 % weak), read by one
gyroscope on body 0 (sigma 1e-2 omega_c, noise seed 5) and nothing else.  No reading over
[2, 4] / omega_c.  Printed per family and filter: the point coordinates' RMSE over the
mechanism's length over [5, 6] / omega_c, without the gap, with the gap and the search off
(``reacquire=False``, the filters as published) and with it (the default), then what the
search did (the error of the state it found against the truth, and whether the filter
restarted from it or kept its own state, or why it did not run).

With several seeds (``--seeds 31 32 ...``) a summary per filter follows, over every seed,
family and scale: how many rows are back within 2x of their gap-free error with the search
and without it (issue 14 item 2's bar), the geometric mean and the worst of the ratio
after / gap-free, and the geometric mean of with / without the search.  ``--jsonl FILE``
writes each row (errors as numbers, a refusal as its exception's name, and the search's log
entries) for other tools.

    OPENBLAS_NUM_THREADS=1 python benchmarks/filters_after_gap.py [--seeds 31 ...]
        [--families crank-rocker ...] [--estimators ekf ukf ...] [--scales 0.01:0.001 4:200]
        [--jsonl rows.jsonl]
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

import mbfg
from mbfg.model.scales import coordinate_scales
from mbfg.model.sensors import wrap_angle
from mbfg.testing import FAMILIES, FAMILY_DOF, watched_mechanism

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402

GAP = (2.0, 4.0)     # in units of 1 / omega_c
LATE = 5.0           # the RMSE from here to the end (6 / omega_c)
ESTIMATORS = ("ekf", "ekf_fe", "ukf", "dekf", "pf")


def case(family, seed, length, mass):
    """(watched mechanism read by a gyroscope alone, its sensors, readings, readings with
    the gap)."""
    w = watched_mechanism(family, seed, length=length, mass=mass, gyroscope_only=True)
    return w, w.sensors, w.readings, w.readings_with_gap(*GAP)


def late_error(w, sensors, readings, method, **options):
    """(RMSE / ell over the late span, the result) or (the error's name, None)."""
    try:
        res = mbfg.estimate(w.model, sensors, readings, w.dt, len(w.truth.t), method=method,
                            q0=w.proto.q0, qd0=np.zeros(w.proto.n), **options)
    except mbfg.MbfgError as exc:
        return type(exc).__name__, None
    late = slice(int(round(LATE / (w.omega_c * w.dt))), None)
    err = res.q[late][:, w.points] - w.truth.q[late][:, w.points]
    return float(np.sqrt(np.mean(err ** 2)) / w.ell), res


def cell(value):
    """A late error as printed: 3 digits, or the refusal's name."""
    return f"{value:.2e}" if isinstance(value, float) else value


def summary(rows):
    """Markdown lines: per filter over ``rows`` (dicts of :func:`main`), rows back within 2x
    of their gap-free error with the search / without it, the runs that refused (without
    the gap, with it and without the search, with both), the geometric mean and the worst of
    after / gap-free with the search, and the geometric mean of with / without it (over the
    rows where neither refused)."""
    out = ["| filter | rows | within 2x of gap-free: search / no search | refused: without "
           "gap / gap, no search / gap, search | after / gap-free: geometric mean, worst | "
           "search / no search: geometric mean |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["filter"] for r in rows):
        mine = [r for r in rows if r["filter"] == name]
        usable = [r for r in mine if isinstance(r["free"], float)]

        def within(key):
            return sum(isinstance(r[key], float) and r[key] <= 2.0 * r["free"] for r in usable)

        def refused(key):
            return sum(not isinstance(r[key], float) for r in mine)

        both = [r for r in usable if isinstance(r["search"], float)]
        ratio = [r["search"] / r["free"] for r in both]
        worst = max(both, key=lambda r: r["search"] / r["free"], default=None)
        pair = [r["search"] / r["plain"] for r in both if isinstance(r["plain"], float)]
        geo = (lambda v: f"x{np.exp(np.mean(np.log(v))):.2f}" if v else "-")
        worst_cell = ("-" if worst is None else
                      f"x{worst['search'] / worst['free']:.1f} ({worst['family']}, seed "
                      f"{worst['seed']}, {worst['length']:g} m)")
        out.append(f"| {name} | {len(mine)} | {within('search')} / {within('plain')} | "
                   f"{refused('free')} / {refused('plain')} / {refused('search')} | "
                   f"{geo(ratio)}, {worst_cell} | "
                   f"{geo(pair)} |")
    return out


def search_cell(w, res):
    """What the search did: the found state's error in units of its coordinate's scale s
    (1 rad for an angle, the mechanism's length for a point coordinate) and its rate's in
    omega_c s, or why it did not run."""
    if res is None:
        return "-"
    out = []
    for entry in res.stats.extra.get("reacquisitions", []):
        if "skipped" in entry:
            out.append(f"skipped: {entry['skipped']}")
        else:
            k, j = entry["step"], entry["coordinate"]
            s = float(coordinate_scales(w.model)[j])     # 1 rad, or ell for a point's
            dz = entry["z"] - w.truth.q[k, j]
            dz = wrap_angle(dz) if j in set(int(i) for i in w.model.angle_coords) else dz / s
            out.append(f"found {dz:+.3f} s, "
                       f"{(entry['zd'] - w.truth.qd[k, j]) / (w.omega_c * s):+.3f} ω_c s, "
                       + ("restarted" if entry["restarted"] else "kept its own"))
    return "; ".join(out) or "not triggered"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", "--seed", type=int, nargs="+", default=[31],
                    help="the generator's seeds")
    ap.add_argument("--families", nargs="+",
                    default=[f for f in FAMILIES if FAMILY_DOF[f] == 1 and not f.startswith("chain")])
    ap.add_argument("--estimators", nargs="+", default=list(ESTIMATORS))
    ap.add_argument("--scales", nargs="+", default=["0.01:0.001", "4:200"],
                    metavar="LENGTH:MASS")
    ap.add_argument("--jsonl", type=Path, help="write every row here, one JSON object a line")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"Machine: {machine_info()}\n")
    rows = []
    sink = open(args.jsonl, "w", encoding="utf-8") if args.jsonl else None
    try:
        for seed in args.seeds:
            print(f"Generated mechanisms, seed {seed}, a gyroscope on body 0 only; no reading "
                  f"over [{GAP[0]:g}, {GAP[1]:g}] / omega_c; point-coordinate RMSE / ell over "
                  f"[{LATE:g}, 6] / omega_c.\n")
            print("| family | scale | filter | without gap | gap, no search | gap, search | "
                  "the search |")
            print("|---|---|---|---|---|---|---|")
            for family in args.families:
                for scale in args.scales:
                    length, mass = (float(x) for x in scale.split(":"))
                    w, sensors, readings, gapped = case(family, seed, length, mass)
                    for name in args.estimators:
                        free = late_error(w, sensors, readings, name)[0]
                        plain = late_error(w, sensors, gapped, name, reacquire=False)[0]
                        found, res = late_error(w, sensors, gapped, name)
                        print(f"| {family} | {length:g} m, {mass:g} kg | {name} | {cell(free)} | "
                              f"{cell(plain)} | {cell(found)} | {search_cell(w, res)} |",
                              flush=True)
                        row = dict(seed=seed, family=family, length=length, mass=mass,
                                   filter=name, free=free, plain=plain, search=found)
                        rows.append(row)
                        if sink:
                            log = [] if res is None else res.stats.extra.get("reacquisitions", [])
                            sink.write(json.dumps(dict(row, search_log=log), default=float) + "\n")
                            sink.flush()
            print()
    finally:
        if sink:
            sink.close()
    if len(args.seeds) > 1:
        print(f"Summary over seeds {', '.join(map(str, args.seeds))}; families: "
              f"{len(args.families)}; scales: {', '.join(args.scales)}.\n")
        print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
