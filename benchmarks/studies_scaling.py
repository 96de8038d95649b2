"""Studies on Dask (issue 13): speed-up of a 40-case estimation study on 2 workers, and the
Dask overhead per case.

1. The bundled 40-case study ``fourbar-estimation`` (2 sensor setups x 2 estimators x 10
   seeds, 5 s each): wall time serially in one process, then on a ``LocalCluster`` of 2
   single-threaded worker processes (with and without starting the cluster); the rows,
   without the timing columns, must be bit-identical.
2. Overhead per case: ``--overhead-cases`` forward-dynamics cases of about 1 s each (the
   four-bar, 2 s at 1 ms) serially and on a 1-worker LocalCluster whose address is passed
   as the scheduler; overhead = (sweep wall time - sum of the cases' own wall times) / cases.
   With one worker nothing competes for the cores, so the difference is what Dask adds:
   pickling, scheduling, the round trips, gathering the rows.

    python benchmarks/studies_scaling.py [--skip-speedup] [--overhead-cases 20]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402
import mbfg  # noqa: E402


def _cluster(n: int):
    from distributed import LocalCluster
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                        dashboard_address=":0", silence_logs=logging.ERROR)


def speedup() -> None:
    path = Path(str(resources.files("mbfg") / "data" / "studies" / "fourbar-estimation.yaml"))
    serial = mbfg.sweep(path, scheduler="serial")
    t0 = time.perf_counter()
    with _cluster(2) as cluster:
        started = time.perf_counter() - t0
        dist = mbfg.sweep(path, scheduler=cluster.scheduler_address)
    total = time.perf_counter() - t0
    same = serial.deterministic_rows() == dist.deterministic_rows()
    busy = sum(r["wall_s"] for r in dist.rows)
    print(f"## 40-case estimation study ({path.name})\n")
    print("| run | wall time | speed-up |")
    print("|---|---|---|")
    print(f"| serial, one process | {serial.seconds:.1f} s | 1 |")
    print(f"| 2 workers, cluster start included | {total:.1f} s | {serial.seconds / total:.2f}x |")
    print(f"| 2 workers, running the cases ({started:.1f} s to start the cluster) | "
          f"{dist.seconds:.1f} s | {serial.seconds / dist.seconds:.2f}x |")
    print(f"\nsum of the case wall times: serial {sum(r['wall_s'] for r in serial.rows):.1f} s, "
          f"2 workers {busy:.1f} s; failed cases: {serial.failed}, {dist.failed}; rows "
          f"bit-identical (timing columns excluded): {same}\n")


def overhead(n: int) -> None:
    study = {"study": "overhead", "mechanism": "fourbar",
             "run": {"kind": "simulate", "t_end": 2.0, "dt": 0.001},
             "vary": {"grid": {"gravity[1]": [-9.81 + 0.01 * i for i in range(n)]}},
             "metrics": ["steps", "max_phi"]}
    serial = mbfg.sweep(study, scheduler="serial")
    s_cases = sum(r["wall_s"] for r in serial.rows)
    with _cluster(1) as cluster:
        dist = mbfg.sweep(study, scheduler=cluster.scheduler_address)
    d_cases = sum(r["wall_s"] for r in dist.rows)
    print(f"## Dask overhead per case ({n} cases of {s_cases / n:.2f} s)\n")
    print("| run | wall time | sum of case times | overhead per case |")
    print("|---|---|---|---|")
    print(f"| serial | {serial.seconds:.2f} s | {s_cases:.2f} s | "
          f"{1e3 * (serial.seconds - s_cases) / n:.1f} ms |")
    print(f"| 1 Dask worker (existing LocalCluster) | {dist.seconds:.2f} s | {d_cases:.2f} s | "
          f"{1e3 * (dist.seconds - d_cases) / n:.1f} ms |")
    print(f"\nrows bit-identical: {serial.deterministic_rows() == dist.deterministic_rows()}\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-speedup", action="store_true")
    ap.add_argument("--overhead-cases", type=int, default=20)
    args = ap.parse_args(argv)
    print(machine_info() + "\n")
    if not args.skip_speedup:
        speedup()
    if args.overhead_cases:
        overhead(args.overhead_cases)


if __name__ == "__main__":
    main()
