"""State estimation on the review's four-bar (Sanjurjo et al., 2017, Sect. 12).

Three-simulation method: the prototype (``mechanisms/fourbar-review.yaml``, g = -9.81 m/s^2)
is simulated accurately from rest at crank angle pi/3; one sensor reads every step
(dt = 5 ms) with Gaussian noise from a fixed seed; each estimator runs the model with gravity
-8.81 m/s^2 and initial crank angle pi/3 + pi/16.  Setups: crank encoder (sigma = 1 deg),
gyroscope on the coupler, gyroscope on the crank (sigma = 9.839e-4 rad/s).

For every setup and registered estimator (``mbfg.estimation.ESTIMATORS``: the
factor-graph ones and any baseline modules that register themselves) the table gives the
RMSE of the crank angle theta0 [rad], its rate [rad/s] and acceleration [rad/s^2] over the
whole run and after the first 2 s, and CPU ms per step, averaged over the seeds.

The cases (setups x estimators x seeds) run as a study (``mbfg.sweep``, docs/studies.md):
serially by default, on a local Dask cluster with ``--workers N``; ``--out FILE.csv`` keeps the
tidy table (one row per case) and resumes from it; ``--print-study`` prints the equivalent study
YAML for ``mbfg sweep``.  The ms/step column is measured inside each case: with several workers
on a shared machine it includes their contention.

    python benchmarks/estimation_fourbar.py [--quick] [--seeds N] [--t-end T] [--only NAME ...]
        [--setups NAME ...] [--workers N] [--out results.csv] [--print-study]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import add_sweep_arguments, machine_info, run_study, sweep_summary  # noqa: E402
from mbfg.benchmarking.estimation_review import (ANGLE_OFFSET, CRANK, ENCODER_SIGMA,  # noqa: E402
                                                 GYRO_SIGMA, MODEL_GRAVITY, PUBLISHED)
from mbfg.estimation import ESTIMATORS  # noqa: E402

DT = 0.005
COLS = ["pos_rmse", "pos_rmse_after", "vel_rmse", "vel_rmse_after", "acc_rmse",
        "acc_rmse_after", "ms_per_step"]
SENSOR_SETS = {
    "encoder": [{"type": "encoder", "coordinate": CRANK, "sigma": ENCODER_SIGMA}],
    "gyro-coupler": [{"type": "gyroscope", "body": 1, "sigma": GYRO_SIGMA}],
    "gyro-crank": [{"type": "gyroscope", "body": 0, "sigma": GYRO_SIGMA}],
}
"""The review's three single-sensor setups (mbfg.benchmarking.estimation_review.sensor_setups)."""


def study(setups, names, seeds: int, t_end: float) -> dict:
    """The benchmark as a study: setups x estimators x seeds on the review's four-bar."""
    return {
        "study": "estimation-fourbar",
        "mechanism": "fourbar-review",
        "run": {"kind": "estimate", "t_end": float(t_end), "dt": DT,
                "model_overrides": {"gravity[1]": MODEL_GRAVITY},
                "initial_offset": {CRANK: float(ANGLE_OFFSET)}, "coordinate": CRANK,
                "after": 2.0},
        "sensor_sets": {k: SENSOR_SETS[k] for k in setups},
        "vary": {"grid": {"run.sensors": list(setups), "run.method": list(names)}},
        "seeds": int(seeds),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds and 4 s")
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (default 10)")
    ap.add_argument("--t-end", type=float, default=None, help="duration [s] (default 10)")
    ap.add_argument("--only", nargs="+", default=None, help="estimator names to run")
    ap.add_argument("--setups", nargs="+", default=None, help="sensor setups to run")
    add_sweep_arguments(ap)
    args = ap.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 10)
    t_end = args.t_end or (4.0 if args.quick else 10.0)
    names = [n for n in ESTIMATORS if args.only is None or n in args.only]
    setups = [k for k in SENSOR_SETS if args.setups is None or k in args.setups]
    spec = study(setups, names, seeds, t_end)
    result = run_study(spec, args)
    if result is None:
        return

    print(f"# Four-bar state estimation (review Sect. 12), {t_end:g} s at dt = {DT * 1e3:g} ms, "
          f"mean over {seeds} seeds\n")
    print(f"{machine_info()}; {sweep_summary(result)}\n")
    print("RMSE of the crank angle theta0 [rad], its rate [rad/s] and acceleration [rad/s^2]; "
          "'>2 s': after the first 2 s.  fg-online: causal estimate (readings up to t), "
          "window 10; (window-smoothed): the same run's estimates when they leave "
          "the window (lag 45 ms); fg-batch: the whole recording smoothed; +force: with an "
          "estimated slowly varying force (fg-online+force: on every point coordinate; "
          "fg-batch+force: on the crank angle).\n")
    for setup in setups:
        print(f"## {setup}\n")
        print(f"Published: {PUBLISHED.get(setup, '-')}\n")
        print("| estimator | pos | pos >2 s | vel | vel >2 s | acc | acc >2 s | ms/step | "
              "failed |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name in names:
            cases = [r for r in result.rows if r["sensors"] == setup and r["method"] == name]
            runs, smoothed = [], []
            for r in cases:
                if r["status"] != "ok":
                    print(f"<!-- {name} seed {r['seed']}: {r['error'][:140]} -->",
                          file=sys.stderr)
                    continue
                runs.append([r[c] for c in COLS])
                if name.startswith("fg-online") and r.get("smoothed_pos_rmse") is not None:
                    smoothed.append([r["smoothed_" + c] for c in COLS[:-1]] + [r["ms_per_step"]])
            failed = len(cases) - len(runs)
            rows = [(name, runs)]
            if smoothed:
                rows.append((f"{name} (window-smoothed)", smoothed))
            for label, data in rows:
                if data:
                    mean = np.nanmean(np.array(data, float), axis=0)
                    cells = [f"{v:.5f}" for v in mean[:-1]] + [f"{mean[-1]:.2f}"]
                else:
                    cells = ["-"] * len(COLS)
                print(f"| {label} | " + " | ".join(cells) + f" | {failed}/{len(cases)} |")
        print()


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
