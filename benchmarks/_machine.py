"""Machine description printed above every benchmark table, and the options and summary
line shared by the benchmarks that run as studies (``mbfg.sweep``)."""
import os
import platform


def machine_info() -> str:
    from importlib.metadata import version

    import numpy as np
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, "
            f"numpy {np.__version__}, gtsam {version('gtsam')}")


def add_sweep_arguments(ap) -> None:
    """--workers, --scheduler, --out and --print-study of a benchmark that runs as a study."""
    ap.add_argument("--workers", type=int, default=1,
                    help="Dask worker processes (default 1: serial in this process)")
    ap.add_argument("--scheduler", default="local", help="'local' or a Dask scheduler address")
    ap.add_argument("--out", default=None, help="keep the tidy table (.csv; resumes from it)")
    ap.add_argument("--print-study", action="store_true",
                    help="print the study YAML (for mbfg sweep) and exit")


def run_study(spec: dict, args):
    """Print the study (--print-study) and return None, or run it with ``mbfg.sweep``."""
    import sys

    import yaml

    import mbfg
    if args.print_study:
        print(yaml.safe_dump(spec, sort_keys=False), end="")
        return None
    return mbfg.sweep(spec, scheduler=args.scheduler, workers=args.workers, out=args.out,
                      log=lambda msg: print(msg, file=sys.stderr))


def sweep_summary(result) -> str:
    """'N cases serially in T s' or 'N cases on W Dask workers in T s'."""
    how = "serially" if result.scheduler == "serial" else f"on {result.workers} Dask workers"
    return f"{len(result.rows)} cases {how} in {result.seconds:.0f} s"
