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

   The clusters are :func:`mbfg.studies.runner.local_cluster` (the one ``mbfg sweep`` starts:
   Dask's periodic bookkeeping made rarer, mbfg imported when a worker starts);
   ``--dask-defaults`` also runs the 2-worker study on a plain ``LocalCluster`` with Dask's
   defaults, for comparison.  The 1-minute load average and every other process above 5 %
   CPU are sampled every 5 s during each run and printed with it.

    python benchmarks/studies_scaling.py [--skip-speedup] [--overhead-cases 20]
                                         [--seeds 10] [--dask-defaults]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from importlib import resources
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info  # noqa: E402
import mbfg  # noqa: E402
from mbfg.studies.runner import local_cluster  # noqa: E402


class LoadLog:
    """Samples the 1-minute load average and the other processes above 5 % CPU every 5 s
    (psutil, when installed) while a run lasts."""

    def __init__(self, interval: float = 5.0):
        self.interval, self.loads, self.others = interval, [], set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            import psutil
        except ImportError:
            psutil = None
        mine = {os.getpid()}
        while True:
            self.loads.append(os.getloadavg()[0])
            if psutil is not None:
                me = psutil.Process()
                mine |= {p.pid for p in me.children(recursive=True)}
                for p in psutil.process_iter(["pid", "name", "cmdline"]):
                    try:
                        if p.pid not in mine and p.cpu_percent(None) > 5.0:
                            self.others.add(" ".join(p.info["cmdline"] or [p.info["name"]])[:60])
                    except psutil.Error:
                        pass
            if self._stop.wait(self.interval):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def __str__(self):
        return (f"load {min(self.loads):.2f}-{max(self.loads):.2f}; other processes above 5 % "
                f"CPU: {'; '.join(sorted(self.others)) or 'none'}")


def _cpu() -> float:
    """CPU time [s] (user + system) of this process and its children alive now (the cluster's
    workers), or nan without psutil."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _study(seeds: int | None):
    path = Path(str(resources.files("mbfg") / "data" / "studies" / "fourbar-estimation.yaml"))
    if seeds is None:
        return path, path.name
    spec = yaml.safe_load(path.read_text())
    spec["seeds"] = seeds
    return spec, f"{path.name} with {seeds} seeds"


def _dask_defaults_cluster(n: int):
    from distributed import LocalCluster
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                        dashboard_address=":0", silence_logs=logging.ERROR)


def _per_worker(result) -> str:
    by = {}
    for r in result.rows:
        by.setdefault(r["worker"], []).append(r["wall_s"])
    return ", ".join(f"{len(v)} cases {sum(v):.1f} s" for v in by.values())


def speedup(seeds: int | None, dask_defaults: bool) -> None:
    study, label = _study(seeds)
    with LoadLog() as log_serial:
        c0 = _cpu()
        serial = mbfg.sweep(study, scheduler="serial")
        cpu_serial = _cpu() - c0
    runs = [("2 workers", local_cluster)]
    if dask_defaults:
        runs.append(("2 workers, Dask's defaults", _dask_defaults_cluster))
    print(f"## {len(serial.rows)}-case estimation study ({label})\n")
    print("| run | wall time | speed-up | sum of case times | CPU time, all processes | "
          "during the run |")
    print("|---|---|---|---|---|---|")
    print(f"| serial, one process | {serial.seconds:.1f} s | 1 | "
          f"{sum(r['wall_s'] for r in serial.rows):.1f} s | {cpu_serial:.1f} s | {log_serial} |")
    notes = []
    for name, make in runs:
        with LoadLog() as log:
            t0 = time.perf_counter()
            with make(2) as cluster:
                started = time.perf_counter() - t0
                c0 = _cpu()
                dist = mbfg.sweep(study, scheduler=cluster.scheduler_address)
                cpu = _cpu() - c0
            total = time.perf_counter() - t0
        busy = sum(r["wall_s"] for r in dist.rows)
        print(f"| {name}, cluster start included | {total:.1f} s | "
              f"{serial.seconds / total:.2f}x | {busy:.1f} s | {cpu:.1f} s (the sweep) | {log} |")
        print(f"| {name}, running the cases ({started:.1f} s to start the cluster) | "
              f"{dist.seconds:.1f} s | {serial.seconds / dist.seconds:.2f}x | | | |")
        same = serial.deterministic_rows() == dist.deterministic_rows()
        notes.append(f"{name}: per worker {_per_worker(dist)}; failed cases {dist.failed}; "
                     f"rows bit-identical to the serial ones (timing columns excluded): {same}")
    print(f"\nserial: failed cases {serial.failed}; " + "\n".join(notes) + "\n")


def overhead(n: int) -> None:
    study = {"study": "overhead", "mechanism": "fourbar",
             "run": {"kind": "simulate", "t_end": 2.0, "dt": 0.001},
             "vary": {"grid": {"gravity[1]": [-9.81 + 0.01 * i for i in range(n)]}},
             "metrics": ["steps", "max_phi"]}
    serial = mbfg.sweep(study, scheduler="serial")
    s_cases = sum(r["wall_s"] for r in serial.rows)
    with local_cluster(1) as cluster:
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
    ap.add_argument("--seeds", type=int, default=None,
                    help="seeds of the estimation study (default: the bundled study's 10)")
    ap.add_argument("--dask-defaults", action="store_true",
                    help="also run the 2-worker study on a LocalCluster with Dask's defaults")
    args = ap.parse_args(argv)
    print(machine_info() + "\n")
    if not args.skip_speedup:
        speedup(args.seeds, args.dask_defaults)
    if args.overhead_cases:
        overhead(args.overhead_cases)


if __name__ == "__main__":
    main()
