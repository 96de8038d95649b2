"""Studies: Monte-Carlo runs and parameter sweeps of one mechanism (or many), as data.

A study file names the mechanism, the values to vary (grid, zipped lists, random draws), what
each case runs (a registered run kind: ``simulate``, ``estimate``, ...) and the metrics to
keep; :func:`sweep` runs its cases serially or on Dask and returns one tidy table.  Format and
cluster set-up: ``docs/studies.md``.
"""
from __future__ import annotations

from mbfg.studies.kinds import KINDS, CaseOutput, RunKind, Setting, register_kind, run_kind
from mbfg.studies.runner import SweepResult, dask_available, run_case, sweep
from mbfg.studies.spec import Case, Study, load_study, parse_study, study_from_dict

__all__ = ["sweep", "SweepResult", "run_case", "dask_available", "load_study", "parse_study",
           "study_from_dict", "Study", "Case", "KINDS", "RunKind", "Setting", "CaseOutput",
           "register_kind", "run_kind"]
