"""Reading and writing plain data files: trajectories, readings, results.

Text tables have one row per time step, ``t value ...``, separated by blanks or commas;
lines starting with ``%`` or ``#`` (and blank lines) are comments.  This is the format of the
files in ``shared/reference-data/ground-truth/``.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from mbfg.errors import DataError

_SPLIT = re.compile(r"[,\s]+")


def read_table(path, *, min_columns: int = 2) -> np.ndarray:
    """Read a numeric table (rows x columns) skipping ``%``/``#`` comment lines.

    Raises :class:`DataError` naming the file and line for a malformed row, a row with a
    different number of columns, a non-finite value, or an empty table."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    rows, width = [], None
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "%#":
            continue
        parts = [p for p in _SPLIT.split(s) if p]
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            raise DataError(f"{path}:{lineno}: expected numbers separated by blanks or commas, "
                            f"got {s[:60]!r}") from None
        if width is None:
            width = len(vals)
            if width < min_columns:
                raise DataError(f"{path}:{lineno}: expected at least {min_columns} columns "
                                f"(t and values), got {width}")
        elif len(vals) != width:
            raise DataError(f"{path}:{lineno}: expected {width} columns like the first data row, "
                            f"got {len(vals)}")
        if not np.all(np.isfinite(vals)):
            raise DataError(f"{path}:{lineno}: non-finite value")
        rows.append(vals)
    if not rows:
        raise DataError(f"{path}: no data rows")
    return np.array(rows)


def read_trajectory(path, *, columns: int | None = None):
    """Read ``t value...`` rows.  Returns ``(t, values)`` with t (T,) strictly increasing and
    values (T, k).  ``columns`` checks k."""
    table = read_table(path)
    t, vals = table[:, 0], table[:, 1:]
    if columns is not None and vals.shape[1] != columns:
        raise DataError(f"{path}: expected {columns} value column(s) after t, got {vals.shape[1]}")
    if t.size > 1 and not np.all(np.diff(t) > 0):
        k = int(np.argmax(np.diff(t) <= 0))
        raise DataError(f"{path}: time must increase strictly (row {k + 2}: t = {t[k + 1]:g} after "
                        f"{t[k]:g})")
    return t, vals


def uniform_step(t, path="trajectory") -> float:
    """The constant time step of ``t`` or a DataError."""
    if t.size < 2:
        raise DataError(f"{path}: need at least two time samples")
    dt = np.diff(t)
    h = float(np.mean(dt))
    if np.max(np.abs(dt - h)) > 1e-6 * h + 1e-12:
        raise DataError(f"{path}: samples must be uniformly spaced in time (dt varies from "
                        f"{dt.min():g} to {dt.max():g} s)")
    return h
