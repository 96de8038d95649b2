"""Dask worker preload: import what the run kinds need when a worker starts.

``dask worker SCHEDULER --preload mbfg.studies.warmup`` (the local clusters of
:func:`mbfg.studies.runner.local_cluster` use it): each worker imports mbfg's run kinds, the
drivers, the estimators, GTSAM and SciPy's integrators once, as it starts, instead of in its
first case (whose ``wall_s`` would include it).  Nothing else: results do not depend on it.
"""
from __future__ import annotations

from typing import Any

__all__ = ["dask_setup"]


def dask_setup(worker: Any) -> None:
    """Called by Dask when the worker starts (a preload's hook)."""
    from mbfg.studies.kinds import warm_up
    warm_up()
