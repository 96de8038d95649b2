"""The ``sweep`` sub-command: run a study (docs/studies.md) serially or on Dask and write its
tidy table.

    mbfg sweep STUDY.yaml [--scheduler local|ADDRESS] [--workers N] [--out results.csv]
                          [--keep-arrays DIR] [--retry-failed] [--quiet]
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["cmd_sweep", "register", "default_output"]


def default_output(study: str) -> str:
    """The default ``--out``: the study file's name with ``.csv``, in the working directory."""
    return Path(study).with_suffix(".csv").name


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run the study and print a summary (the table goes to --out)."""
    from mbfg.studies import load_study, sweep

    def log(message: str) -> None:
        print(f"mbfg sweep: {message}", file=sys.stderr)

    study = load_study(args.study)  # every bad input is reported before a case runs
    out = args.out or default_output(args.study)
    result = sweep(study, scheduler=args.scheduler, workers=args.workers, out=out,
                   keep_arrays=args.keep_arrays, retry_failed=args.retry_failed,
                   progress=False if args.quiet else None, log=log)
    ok = len(result.rows) - result.failed
    where = ("serially in this process" if result.scheduler == "serial" else
             f"on {result.workers} Dask worker{'s' * (result.workers != 1)} "
             f"({result.scheduler})")
    print(f"study:     {study.name} ({study.kind.name}, {len(study.cases)} cases)")
    print(f"ran:       {result.ran} cases {where} in {result.seconds:.1f} s"
          + (f"; {result.skipped} already in {result.csv}" if result.skipped else ""))
    print(f"results:   {ok} ok, {result.failed} failed")
    print(f"table:     {result.csv}" + (f" and {result.parquet}" if result.parquet else ""))
    if args.keep_arrays:
        print(f"arrays:    {args.keep_arrays}/<case>.npz")
    failures = [r for r in result.rows if r["status"] != "ok"]
    for r in failures[:3]:
        print(f"failed:    case {r['case']} (seed {r['seed']}): {r['error']}")
    if len(failures) > 3:
        print(f"failed:    ... and {len(failures) - 3} more (column 'error' of the table)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mbfg sweep`` to the sub-commands."""
    s = sub.add_parser("sweep", help="run a study (Monte-Carlo runs, parameter sweeps) "
                       "serially or on Dask; see docs/studies.md")
    s.add_argument("study", help="study YAML file (docs/studies.md), or the name of a bundled "
                   "example study (fourbar-mass-sweep, fourbar-estimation, "
                   "fourbar-identification, robustness)")
    s.add_argument("--scheduler", default="local",
                   help="'local' (a Dask LocalCluster on this machine, the default), 'serial', "
                        "or the address of a running Dask scheduler (tcp://host:8786)")
    s.add_argument("--workers", type=int, default=None,
                   help="worker processes of the local cluster (default: the cores; 1 runs "
                        "serially in this process)")
    s.add_argument("--out", help="result table (.csv; a .parquet copy too when pyarrow is "
                   "installed); cases already in it are skipped (resume). Default: the "
                   "study's name with .csv")
    s.add_argument("--keep-arrays", metavar="DIR", help="also save each case's arrays as "
                   "DIR/<case>.npz")
    s.add_argument("--retry-failed", action="store_true",
                   help="on resume, run the failed cases again")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_sweep)
