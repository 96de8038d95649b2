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

    python benchmarks/estimation_fourbar.py [--quick] [--seeds N] [--t-end T] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402
from mbfg.errors import MbfgError  # noqa: E402
from mbfg.benchmarking.estimation_review import (PUBLISHED, review_fourbar,  # noqa: E402
                                                 run_case, sensor_setups, simulate_prototype)
from mbfg.estimation import ESTIMATORS  # noqa: E402

DT = 0.005
COLS = ["pos_rmse", "pos_rmse_after", "vel_rmse", "vel_rmse_after", "acc_rmse",
        "acc_rmse_after", "ms_per_step"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds and 4 s")
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (default 10)")
    ap.add_argument("--t-end", type=float, default=None, help="duration [s] (default 10)")
    ap.add_argument("--only", nargs="+", default=None, help="estimator names to run")
    ap.add_argument("--setups", nargs="+", default=None, help="sensor setups to run")
    args = ap.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 10)
    t_end = args.t_end or (4.0 if args.quick else 10.0)
    estimators = ESTIMATORS
    names = [n for n in estimators if args.only is None or n in args.only]
    setups = {k: v for k, v in sensor_setups().items() if args.setups is None or k in args.setups}

    proto, model, q0 = review_fourbar()
    simulate_prototype(proto, t_end, DT)
    print(f"# Four-bar state estimation (review Sect. 12), {t_end:g} s at dt = {DT * 1e3:g} ms, "
          f"mean over {seeds} seeds\n")
    print(machine_info() + "\n")
    print("RMSE of the crank angle theta0 [rad], its rate [rad/s] and acceleration [rad/s^2]; "
          "'>2 s': after the first 2 s.  fg-online: causal estimate (readings up to t), "
          "window 10; (window-smoothed): the same run's estimates when they leave "
          "the window (lag 45 ms); fg-batch: the whole recording smoothed; +force: with an "
          "estimated slowly varying force (fg-online+force: on every point coordinate; "
          "fg-batch+force: on the crank angle).\n")
    for setup, sensors in setups.items():
        print(f"## {setup}\n")
        print(f"Published: {PUBLISHED.get(setup, '-')}\n")
        print("| estimator | pos | pos >2 s | vel | vel >2 s | acc | acc >2 s | ms/step | "
              "failed |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name in names:
            runs, smoothed, failed = [], [], 0
            for seed in range(seeds):
                try:
                    m = run_case(estimators[name], proto, model, sensors, t_end, DT, seed,
                                 q0=q0)
                except (MbfgError, np.linalg.LinAlgError, RuntimeError, ValueError) as exc:
                    failed += 1
                    print(f"<!-- {name} seed {seed}: {type(exc).__name__}: "
                          f"{str(exc)[:120]} -->", file=sys.stderr)
                    continue
                runs.append([m[c] for c in COLS])
                if name.startswith("fg-online") and "smoothed_pos_rmse" in m:
                    smoothed.append([m.get("smoothed_" + c, np.nan) for c in COLS[:-1]]
                                    + [m["ms_per_step"]])
            rows = [(name, runs)]
            if smoothed:
                rows.append((f"{name} (window-smoothed)", smoothed))
            for label, data in rows:
                if data:
                    mean = np.nanmean(np.array(data), axis=0)
                    cells = [f"{v:.5f}" for v in mean[:-1]] + [f"{mean[-1]:.2f}"]
                else:
                    cells = ["-"] * len(COLS)
                print(f"| {label} | " + " | ".join(cells) + f" | {failed}/{seeds} |", flush=True)
        print()


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
