"""The default online estimator against the Kalman baselines, seed by seed, in every condition
(issue 14, items 1 and 5).

The bundled study ``fourbar-estimation-conditions`` (``mbfg sweep``, docs/studies.md): the
review's four-bar three-simulation set-up (prototype simulated by DOP853, readings synthesized
with each seed, the estimator run on a model with errors), in the review's condition and in
the conditions of issue 14 that change one thing each: model gravity -10.81 instead of -8.81,
initial crank-angle error -pi/16 or +pi/8 instead of +pi/16, sensor noise x3, one reading
every 4th step, a prototype coupler 20 % heavier than the model's instead of a gravity error.

For every condition, sensor setup and estimator the table gives the crank-angle RMSE [rad]
over the seeds (mean, worst seed), the 2-sigma coverage of the estimator's reported band
after 0.5 s (mean over the seeds, ± its standard error over them: the steps of one run are
correlated, so the seeds are the independent samples), the RMS of the readings' residuals against the estimate
after 0.5 s in units of each sensor's sigma (needs no truth: two cells with the same residual
cannot be told apart by the readings), CPU ms per 5 ms step, and for each baseline the paired
difference ``reference - baseline`` of the RMSEs with its 95 % confidence interval (Student
t over the seeds; negative: the reference is better).  The reference is the default online
estimator (``fg-online``), run with ``covariance: true`` so that its coverage is measured
(its ms/step includes the covariance).  A summary then gives, per condition and setup, the
verdict of the reference against every Kalman filter (``BASELINES``, item 1's baselines)
and the offline smoother's RMSE against half the best filter's; the particle filter (``pf``)
has its rows in the tables.

The cases run as a study: serially by default, on a local Dask cluster with ``--workers N``;
``--out FILE.csv`` keeps the tidy table (one row per case) and resumes from it;
``--print-study`` prints the study YAML for ``mbfg sweep``; ``--print-only`` prints the tables
of the CSVs given to ``--out`` (also those the former plain script wrote: columns condition,
setup, estimator, seed, status, rmse, rmse_after, coverage, ms_per_step).

Seeds: the estimators' settings were chosen on seeds 0-4; judge on others (default
1000-1019).

    OPENBLAS_NUM_THREADS=1 python benchmarks/estimation_seeds.py [--seeds 1000-1019]
        [--conditions NAME ...] [--setups NAME ...] [--estimators NAME ...] [--t-end 10]
        [--workers N] [--out results.csv ...] [--print-only] [--print-study]
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import add_sweep_arguments, machine_info, run_study, sweep_summary  # noqa: E402

DT = 0.005
STUDY = "fourbar-estimation-conditions"
REFERENCE = "fg-online"
OFFLINE = "fg-batch"
BASELINES = ("ekf", "ekf_fe", "ukf", "dekf")
SETUPS = ("encoder", "gyro-coupler", "gyro-crank")
VERDICTS = ("loses", "tie, higher mean", "tie, lower mean", "wins")
"""The reference's verdicts against one filter, worst first (the summary gives the worst)."""


def parse_seeds(text: str) -> list[int]:
    """"1000-1019" or "0,3,7" or "5-9,12" -> sorted list of ints."""
    out: set[int] = set()
    for part in str(text).split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return sorted(out)


def bundled_study() -> dict:
    """The bundled study file as a dict."""
    from mbfg.resources import resolve_study
    return yaml.safe_load(resolve_study(STUDY).read_text())


def conditions_of(spec: dict) -> list[str]:
    """The condition labels of the study, in order."""
    return list(spec["vary"]["zip"]["run.label"])


def study(conditions=None, setups=None, estimators=None, seeds=None, t_end=None) -> dict:
    """The bundled study restricted to the given conditions (labels), setups, estimators and
    seeds, and run for ``t_end`` seconds."""
    spec = bundled_study()
    zipped = spec["vary"]["zip"]
    labels = zipped["run.label"]
    if conditions is not None:
        unknown = [c for c in conditions if c not in labels]
        if unknown:
            raise SystemExit(f"estimation_seeds.py: unknown condition(s) {unknown}; expected "
                             f"some of {labels}")
        keep = [i for i, c in enumerate(labels) if c in conditions]
        spec["vary"]["zip"] = {k: [v[i] for i in keep] for k, v in zipped.items()}
    grid = spec["vary"]["grid"]
    for key, chosen in (("run.sensors", setups), ("run.method", estimators)):
        if chosen is not None:
            grid[key] = list(chosen)
    if seeds is not None:
        spec["seeds"] = list(seeds)
    if t_end is not None:
        spec["run"]["t_end"] = float(t_end)
    return spec


SWEEP_COLUMNS = {"label": "condition", "sensors": "setup", "method": "estimator",
                 "pos_rmse": "rmse", "pos_rmse_after": "rmse_after",
                 "coverage_2sigma": "coverage", "reading_residual": "residual"}
"""Sweep column -> field of the tables."""


def _case(row: dict) -> dict:
    """One case in the tables' fields, from a sweep row or a row of the former script's CSV."""
    r = {SWEEP_COLUMNS.get(k, k): v for k, v in row.items()}
    for f in ("rmse", "rmse_after", "coverage", "residual", "ms_per_step"):
        v = r.get(f)
        r[f] = float(v) if v not in (None, "") else float("nan")
    r["seed"] = int(r["seed"])
    return r


def cases_of(rows) -> dict:
    """(condition, setup, estimator, seed) -> case."""
    out = {}
    for row in rows:
        r = _case(row)
        out[(r["condition"], r["setup"], r["estimator"], r["seed"])] = r
    return out


def _load(paths) -> dict:
    rows = []
    for path in paths or ():
        if Path(path).exists():
            with open(path, newline="") as fh:
                rows.extend(csv.DictReader(fh))
    return cases_of(rows)


def paired_ci(a, b, level=0.95):
    """Mean of a - b and its two-sided ``level`` confidence interval (Student t, paired)."""
    from scipy.stats import t as student
    d = np.asarray(a, float) - np.asarray(b, float)
    n = d.size
    mean = float(np.mean(d))
    if n < 2:
        return mean, float("nan"), float("nan")
    half = float(student.ppf(0.5 + level / 2, n - 1) * np.std(d, ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def table(rows, cond, setup, names, seeds, reference):
    """Markdown lines of one (condition, setup)."""
    get = {n: [rows.get((cond, setup, n, s)) for s in seeds] for n in names}
    ref = get.get(reference)
    lines = [f"#### {cond}, {setup}", "",
             f"| estimator | mean RMSE | worst seed | 2σ coverage ± its standard error | "
             f"reading residual [σ] | "
             f"ms/step | failed | {reference} − estimator: mean [95 % CI] | "
             f"mean RMSE after 2 s | {reference} − estimator after 2 s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        rs = [r for r in get[n] if r is not None]
        ok = [r for r in rs if r["status"] == "ok"]
        failed = f"{len(rs) - len(ok)}/{len(rs)}"
        if not ok:
            lines.append(f"| {n} | - | - | - | - | - | {failed} | - | - | - |")
            continue
        v = np.array([r["rmse"] for r in ok])
        worst = ok[int(np.argmax(v))]
        cov, residual = (np.nanmean([r[f] for r in ok]) if any(np.isfinite(r[f]) for r in ok)
                         else float("nan") for f in ("coverage", "residual"))
        covs = np.array([r["coverage"] for r in ok if np.isfinite(r["coverage"])])
        cov_se = np.std(covs, ddof=1) / math.sqrt(covs.size) if covs.size > 1 else float("nan")
        ms = np.nanmean([r["ms_per_step"] for r in ok])
        diff = diff_after = "-"
        if n != reference and ref is not None:
            both = [(a, b) for a, b in zip(ref, get[n])
                    if a is not None and b is not None and a["status"] == b["status"] == "ok"]
            if both:
                cells = []
                for f in ("rmse", "rmse_after"):
                    m, lo, hi = paired_ci([a[f] for a, _ in both], [b[f] for _, b in both])
                    verdict = "wins" if hi < 0 else ("loses" if lo > 0 else "tie")
                    cells.append(f"{m:+.5f} [{lo:+.5f}, {hi:+.5f}] {verdict}")
                diff, diff_after = cells
        covtxt = ("-" if not np.isfinite(cov) else f"{100 * cov:.1f} %"
                  + (f" ± {100 * cov_se:.1f}" if np.isfinite(cov_se) else ""))
        restxt = "-" if not np.isfinite(residual) else f"{residual:.2f}"
        lines.append(f"| {n} | {np.mean(v):.5f} | {worst['rmse']:.5f} (seed {worst['seed']}) | "
                     f"{covtxt} | {restxt} | {ms:.2f} | {failed} | {diff} | "
                     f"{np.mean([r['rmse_after'] for r in ok]):.5f} | {diff_after} |")
    return lines + [""]


def summary(rows, conds, setups, names, seeds, reference=REFERENCE, offline=OFFLINE) -> list:
    """Markdown lines: per condition and setup, the reference's verdict against every filter
    (paired 95 % CI of the RMSE difference) and the offline smoother's mean RMSE against half
    the best filter's mean."""
    filters = [n for n in names if n in BASELINES]
    lines = ["| condition | setup | " + f"{reference} mean | best filter (mean) | "
             f"{reference} against every filter | {offline} mean | {offline} / best filter | "
             f"{offline} failed |", "|---|---|---|---|---|---|---|---|"]

    def ok(cond, setup, n):
        return [rows.get((cond, setup, n, s)) for s in seeds]

    for cond in conds:
        for setup in setups:
            ref = ok(cond, setup, reference)
            if not any(r is not None for r in ref):
                continue
            mean = {}
            for n in filters + [reference, offline]:
                v = [r["rmse"] for r in ok(cond, setup, n) if r is not None and r["status"] == "ok"]
                if v:
                    mean[n] = float(np.mean(v))
            best = min((n for n in filters if n in mean), key=mean.get, default=None)
            verdicts = []
            for n in filters:
                both = [(a, b) for a, b in zip(ref, ok(cond, setup, n))
                        if a is not None and b is not None and a["status"] == b["status"] == "ok"]
                if len(both) < 2:
                    continue
                m, lo, hi = paired_ci([a["rmse"] for a, _ in both], [b["rmse"] for _, b in both])
                verdicts.append("wins" if hi < 0 else ("loses" if lo > 0 else
                                                       ("tie, lower mean" if m < 0 else
                                                        "tie, higher mean")))
            worst = next((v for v in VERDICTS if v in verdicts), "-")
            off = [r for r in ok(cond, setup, offline) if r is not None]
            failed = f"{sum(r['status'] != 'ok' for r in off)}/{len(off)}" if off else "-"
            ratio = (f"{mean[offline] / mean[best]:.2f}" if best and offline in mean else "-")
            lines.append(f"| {cond} | {setup} | {mean.get(reference, float('nan')):.5f} | "
                         f"{best or '-'} ({mean.get(best, float('nan')):.5f}) | {worst} | "
                         f"{mean.get(offline, float('nan')):.5f} | {ratio} | {failed} |")
    return lines + [""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1000-1019", help="e.g. 1000-1019 or 0,2,5-9")
    ap.add_argument("--conditions", nargs="+", default=None,
                    help="subset of the study's condition labels (default: all)")
    ap.add_argument("--setups", nargs="+", default=None, help=f"subset of {', '.join(SETUPS)}")
    ap.add_argument("--estimators", nargs="+", default=None,
                    help="subset of the study's estimators (default: all)")
    ap.add_argument("--reference", default=REFERENCE)
    ap.add_argument("--t-end", type=float, default=None, help="duration [s] (default 10)")
    add_sweep_arguments(ap)
    ap.add_argument("--print-only", nargs="*", default=None, metavar="CSV",
                    help="print the tables of these CSVs (default: --out) without running")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    seeds = parse_seeds(args.seeds)
    spec = study(args.conditions, args.setups, args.estimators, seeds, args.t_end)
    conds = conditions_of(spec)
    setups = spec["vary"]["grid"]["run.sensors"]
    names = spec["vary"]["grid"]["run.method"]
    started = time.perf_counter()
    if args.print_only is not None:
        rows, how = _load(args.print_only or [args.out]), "from " + ", ".join(
            args.print_only or [str(args.out)])
    else:
        result = run_study(spec, args)
        if result is None:
            return
        rows, how = cases_of(result.rows), sweep_summary(result)
    print(f"Machine: {machine_info()}; {how}\n")
    print(f"Review four-bar, {spec['run']['t_end']:g} s at dt = {DT * 1e3:g} ms; seeds "
          f"{args.seeds} ({len(seeds)}); crank-angle RMSE [rad] over the whole run; 2σ coverage "
          f"after 0.5 s; paired difference of the RMSEs with its 95 % CI (wins: the whole "
          f"interval below 0).\n")
    print("\n".join(summary(rows, conds, setups, names, seeds, args.reference)))
    for cond in conds:
        for setup in setups:
            print("\n".join(table(rows, cond, setup, names, seeds, args.reference)))
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
