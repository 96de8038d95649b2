"""Running a study: every case serially in this process, or on Dask (a ``LocalCluster`` of
worker processes, or an existing scheduler's workers), into one tidy table.

Dask (``pip install "mbfg[cluster]"``) is imported here only, and only when a sweep runs on
it.  A case never raises: a failure is a row with ``status = failed`` and the message.  Rows
are appended to the CSV as cases finish; a later :func:`sweep` with the same output skips the
cases already in it (by :attr:`~mbfg.studies.spec.Case.key`) and finally rewrites the table
in case order (plus Parquet when pyarrow is installed).
"""
from __future__ import annotations

import logging
import os
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mbfg.errors import UsageError
from mbfg.studies.spec import Study, load_study, study_from_dict
from mbfg.studies.table import (CsvAppender, cell, parquet_available, read_csv, write_csv,
                                write_parquet)

if TYPE_CHECKING:
    from mbfg.studies.spec import Case

__all__ = ["sweep", "run_case", "SweepResult", "dask_available", "local_cluster",
           "WORKER_CONFIG", "WARM_UP_PRELOAD", "SERIAL_NOTICE", "CONNECT_TIMEOUT"]

SERIAL_NOTICE = ("dask.distributed is not installed (pip install \"mbfg[cluster]\"), so the "
                 "{n} cases run serially in this process")
CONNECT_TIMEOUT = "20s"
"""How long to wait for an existing Dask scheduler."""
_ERROR_LENGTH = 400

WORKER_CONFIG = {
    # Dask's statistical profiler: every 10 ms the worker's event loop takes the GIL from the
    # running case and walks its stack (for the dashboard's profile page)
    "distributed.worker.profile.enabled": False,
    # the event loop's watchdog (default every 20 ms): a GIL hand-off each time
    "distributed.admin.tick.interval": "500ms",
    # the CPU/memory samples of the dashboard (default every 500 ms)
    "distributed.admin.system-monitor.interval": "2s",
    # the nanny's check of the worker's memory limit (default every 100 ms)
    "distributed.worker.memory.monitor-interval": "1s",
}
"""Dask settings of the clusters a sweep starts (:func:`local_cluster`): Dask's own periodic
bookkeeping made rarer.  With the defaults an idle 2-worker LocalCluster used 66 ms of CPU per
second (scheduler, nannies and workers; 12 ms with these), and a busy worker 3-6 % more CPU
than the case it ran (0.2-0.4 % with these): time the cases lost on a machine whose cores
are all busy (docs/benchmarks.md).  The cases' results do not depend on any of it.  For workers started by hand, the same as
environment variables: ``DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False`` and so on
(docs/studies.md)."""
WARM_UP_PRELOAD = "mbfg.studies.warmup"
"""Dask worker preload (``dask worker --preload mbfg.studies.warmup``): imports what the run
kinds need (:func:`mbfg.studies.kinds.warm_up`) when the worker starts, not in its first
case."""


def dask_available() -> bool:
    """Whether ``dask.distributed`` can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_case(case: Case, metrics: Sequence[str], keep_arrays: bool = False) -> tuple:
    """Run one case: ``(row, arrays)``.  Never raises: a failure is a row with ``status``
    ``"failed"`` and ``error`` (exception type and message, one line); ``arrays`` is None
    unless ``keep_arrays`` (and the case succeeded)."""
    from mbfg.studies.kinds import run_kind
    row = _case_columns(case)
    arrays = None
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            out = run_kind(case.kind).function(case)
        row.update({m: cell(out.metrics.get(m)) for m in metrics})
        row.update(status="ok", error=None)
        if keep_arrays:
            arrays = {k: np.asarray(v) for k, v in out.arrays.items()}
    except Exception as e:  # noqa: BLE001 - a failed case is recorded, not fatal
        _mark_failed(row, metrics, e)
    row.update(wall_s=time.perf_counter() - t0, worker=_worker_name())
    return row, arrays


def _case_columns(case: Case) -> dict:
    """The columns that name a case: its key, mechanism, labels and seed."""
    row = {"case": case.key, "mechanism": case.mechanism_label, **dict(case.labels),
           "seed": case.seed}
    return {k: cell(v) for k, v in row.items()}


def _mark_failed(row: dict, metrics: Sequence[str], exc: BaseException) -> None:
    """Blank metrics, ``status`` "failed" and the one-line ``error`` of ``exc``."""
    row.update({m: None for m in metrics})
    row.update(status="failed", error=f"{type(exc).__name__}: {_one_line(exc)}"[:_ERROR_LENGTH])


def _failure_row(case: Case, metrics: Sequence[str], exc: BaseException) -> dict:
    """The row of a case whose worker failed (killed, lost) rather than the case itself."""
    row = _case_columns(case)
    _mark_failed(row, metrics, exc)
    row.update(wall_s=None, worker=None)
    return row


@dataclass(frozen=True)
class SweepResult:
    """The table of a study and how it was run.

    Attributes
    ----------
    study : Study
    columns : tuple of str
    rows : tuple of dict
        One per case, in case order (column -> plain value).
    csv, parquet : Path or None
        The files written (Parquet only with pyarrow).
    ran, skipped, failed : int
        Cases run now, cases found in the output (resume), failed rows in the table.
    scheduler : str
        ``"serial"``, ``"local"`` or the scheduler address.
    workers : int
    seconds : float
        Wall time of the sweep (including starting the cluster).
    """
    study: Study
    columns: tuple
    rows: tuple
    csv: Path | None
    parquet: Path | None
    ran: int
    skipped: int
    failed: int
    scheduler: str
    workers: int
    seconds: float

    def column(self, name: str) -> list:
        """The values of one column, in case order."""
        return [row.get(name) for row in self.rows]

    def deterministic_rows(self) -> list:
        """The rows without the timing columns (``wall_s``, ``worker`` and timing metrics
        such as ``ms_per_step``): identical, bit for bit, for any scheduler and number of
        workers.  (Tuples of ``repr`` of the values, so NaN compares equal.)"""
        keep = [c for c in self.columns if c not in self.study.timing_columns]
        return [tuple(repr(row.get(c)) for c in keep) for row in self.rows]

    def to_pandas(self) -> Any:
        """The table as a pandas DataFrame (needs pandas)."""
        import pandas as pd
        return pd.DataFrame(list(self.rows), columns=list(self.columns))


def _as_study(study: Any) -> Study:
    if isinstance(study, Study):
        return study
    if isinstance(study, dict):
        return study_from_dict(study)
    if isinstance(study, (str, os.PathLike)):
        return load_study(study)
    raise UsageError(f"expected a study file, a study mapping or a Study, got "
                     f"{type(study).__name__}")


def _resume(path: Path, study: Study, retry_failed: bool) -> dict:
    """key -> row of the cases already in the output ``path`` (rewritten cleanly, so that
    appending continues after a whole row)."""
    if not path.exists():
        return {}
    rows = read_csv(path, study.columns)
    keys = {c.key for c in study.cases}
    foreign = [r for r in rows if r.get("case") not in keys]
    if foreign:
        raise UsageError(f"{path}: {len(foreign)} of its rows are cases that are not in this "
                         f"study (it changed, or the file is another study's output); expected "
                         f"this study's output to resume, or another --out")
    done = {r["case"]: r for r in rows if r.get("status") == "ok"
            or (r.get("status") == "failed" and not retry_failed)}
    write_csv(path, study.columns, [done[c.key] for c in study.cases if c.key in done])
    return done


def _save_arrays(directory: Path, key: str, arrays: dict) -> None:
    tmp = directory / f"{key}.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, directory / f"{key}.npz")


def local_cluster(workers: int | None = None, **kwargs: Any) -> Any:
    """The Dask ``LocalCluster`` a sweep starts: ``workers`` single-threaded worker processes
    (default: the cores) that import mbfg when they start (:data:`WARM_UP_PRELOAD`), with
    Dask's bookkeeping made rarer (:data:`WORKER_CONFIG`).  ``kwargs`` go to LocalCluster.
    Pass its ``scheduler_address`` to :func:`sweep`, or let ``sweep`` start one."""
    import dask
    from distributed import LocalCluster
    options = dict(n_workers=workers, threads_per_worker=1, processes=True,
                   dashboard_address=":0", silence_logs=logging.ERROR,
                   preload=[WARM_UP_PRELOAD])
    options.update(kwargs)
    with dask.config.set(WORKER_CONFIG):  # read when the scheduler and workers are made
        return LocalCluster(**options)


def _submission_groups(study: Study, todo: list) -> list:
    """(priority, cases) groups of ``todo``, the most expensive first (the kind's expected
    cost of the settings; equal costs keep case order): the longest cases start first, so
    the last ones to finish are short and no worker waits long for the others."""
    cost = study.kind.cost
    if cost is None:
        return [(0, list(todo))]
    groups: dict = {}
    for case in todo:
        groups.setdefault(float(cost(case.settings_dict)), []).append(case)
    ranked = sorted(groups, reverse=True)
    return [(len(ranked) - i, groups[c]) for i, c in enumerate(ranked)]


def _dask_client(scheduler: str, workers: int | None) -> tuple:
    from distributed import Client
    if scheduler == "local":
        cluster = local_cluster(workers)
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT), None
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"--scheduler {scheduler}: cannot connect to a Dask scheduler "
                         f"({_one_line(e)}); expected 'local' or the address of a running "
                         f"scheduler such as tcp://10.0.0.5:8786") from None


def sweep(
    study: Any,
    *,
    scheduler: str = "local",
    workers: int | None = None,
    out: str | os.PathLike | None = None,
    keep_arrays: str | os.PathLike | None = None,
    retry_failed: bool = False,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepResult:
    """Run every case of a study and return (and write) its tidy table.

    Parameters
    ----------
    study : path, mapping or Study
        A study YAML file (docs/studies.md), the same structure as a dict, or a parsed
        :class:`~mbfg.studies.spec.Study`.
    scheduler : str
        ``"local"``: a Dask ``LocalCluster`` of ``workers`` single-threaded processes (serial
        in this process when ``workers`` is 1, or when Dask is not installed: then
        ``log`` or a warning says so); ``"serial"``: in this process; otherwise the address of
        a running Dask scheduler (``tcp://host:8786``) whose workers run the cases.
    workers : int, optional
        Worker processes of the local cluster (default: the machine's cores).
    out : path, optional
        The CSV table (``.csv``); rows are appended as cases finish, cases already in it are
        skipped (resume), and at the end it is rewritten in case order, with a Parquet copy
        (same name, ``.parquet``) when pyarrow is installed.  None: nothing is written.
    keep_arrays : directory, optional
        Also save each successful case's arrays as ``<case key>.npz`` there (created).
    retry_failed : bool
        On resume, run again the cases that failed (default: keep their rows).
    progress : bool, optional
        Draw a progress bar of cases done, failed and remaining on stderr (default: when
        stderr is a terminal).
    log : callable(str), optional
        Receives one-line notices (serial fallback, resume counts); default: warnings for
        the serial fallback only.

    Returns
    -------
    SweepResult
        Rows in case order; every column but the timing ones (``wall_s``, ``worker``,
        timing metrics) is bit-identical for any scheduler and number of workers.
    """
    from mbfg.progress import ProgressBar
    t_start = time.perf_counter()
    study = _as_study(study)
    if workers is not None and (isinstance(workers, bool) or int(workers) != workers
                                or workers < 1):
        raise UsageError(f"--workers must be an integer >= 1, got {workers}")
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise UsageError(f"--scheduler: expected 'local', 'serial' or a scheduler address, got "
                         f"{scheduler!r}")
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        if out_path.suffix.lower() != ".csv":
            raise UsageError(f"--out {out}: expected a file name ending in .csv (a Parquet "
                             f"copy is written next to it when pyarrow is installed)")
        if not (out_path.parent if str(out_path.parent) else Path(".")).is_dir():
            raise UsageError(f"--out {out}: the directory {out_path.parent} does not exist; "
                             f"expected a file in an existing directory")
    arrays_dir = Path(keep_arrays) if keep_arrays is not None else None
    if arrays_dir is not None:
        if arrays_dir.exists() and not arrays_dir.is_dir():
            raise UsageError(f"--keep-arrays {keep_arrays}: not a directory")
        if not arrays_dir.parent.is_dir():
            raise UsageError(f"--keep-arrays {keep_arrays}: the directory {arrays_dir.parent} "
                             f"does not exist")
        arrays_dir.mkdir(exist_ok=True)

    done = _resume(out_path, study, retry_failed) if out_path is not None else {}
    todo = [c for c in study.cases if c.key not in done]
    if done and log:
        log(f"resuming {out_path}: {len(done)} of {len(study.cases)} cases already there, "
            f"{len(todo)} to run")

    mode = scheduler.strip()
    n_workers = 1
    if mode == "local":
        n_workers = workers or os.cpu_count() or 1
        if n_workers == 1 or not todo:
            mode = "serial"
        elif not dask_available():
            notice = SERIAL_NOTICE.format(n=len(todo))
            log(notice) if log else warnings.warn(notice, stacklevel=2)
            mode, n_workers = "serial", 1
    elif mode != "serial" and not dask_available():
        raise UsageError(f"--scheduler {scheduler}: dask.distributed is not installed; "
                         f"expected pip install \"mbfg[cluster]\" (or --scheduler local)")

    if not todo:
        mode = "serial"
    client = cluster = None
    if mode != "serial":  # connect (or start the cluster) before touching the output
        client, cluster = _dask_client(mode, n_workers)
        if mode != "local":
            n_workers = len(client.scheduler_info().get("workers", {}))
            if not n_workers and log:
                log(f"the scheduler {mode} has no workers yet; the cases wait for them")
            n_workers = n_workers or 1

    rows = dict(done)
    total = len(study.cases)
    failed = sum(r["status"] != "ok" for r in rows.values())
    bar = ProgressBar(f"sweep {study.name}", enabled=progress)

    def record(row: dict, arrays: dict | None) -> None:
        nonlocal failed
        rows[row["case"]] = row
        failed += row["status"] != "ok"
        if appender is not None:
            appender.append(row)
        if arrays is not None and arrays_dir is not None:
            _save_arrays(arrays_dir, row["case"], arrays)
        bar(len(rows), total, f"{failed} failed, {total - len(rows)} remaining")

    metrics = study.metrics
    keep = arrays_dir is not None
    appender = None
    try:
        appender = CsvAppender(out_path, study.columns) if out_path is not None else None
        bar(len(rows), total, f"{failed} failed, {total - len(rows)} remaining")
        if client is None:
            for case in todo:
                record(*run_case(case, metrics, keep))
        else:
            from distributed import as_completed
            token = uuid.uuid4().hex[:8]  # this sweep's tasks, whatever else the scheduler runs
            by_key = {f"mbfg-case-{c.key}-{token}": c for c in todo}
            futures = []
            for priority, group in _submission_groups(study, todo):
                futures += client.map(run_case, group, metrics=metrics, keep_arrays=keep,
                                      key=[f"mbfg-case-{c.key}-{token}" for c in group],
                                      priority=priority, pure=False)
            for fut in as_completed(futures):
                case = by_key[fut.key]
                try:
                    row, arrays = fut.result()
                except Exception as e:  # noqa: BLE001 - a lost worker fails its case only
                    row, arrays = _failure_row(case, metrics, e), None
                fut.release()
                record(row, arrays)
    finally:
        bar.close()
        if appender is not None:
            appender.close()
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    ordered = tuple(rows[c.key] for c in study.cases if c.key in rows)
    parquet = None
    if out_path is not None:
        write_csv(out_path, study.columns, ordered)
        if parquet_available():
            parquet = write_parquet(out_path.with_suffix(".parquet"), study.columns, ordered)
    return SweepResult(study, study.columns, ordered, out_path, parquet, len(todo), len(done),
                       sum(r["status"] != "ok" for r in ordered),
                       "serial" if mode == "serial" else mode, n_workers,
                       time.perf_counter() - t_start)
