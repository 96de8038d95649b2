"""Reading and writing plain data files: trajectories, readings, results.

Text tables have one row per time step, ``t value ...``, separated by blanks or commas;
lines starting with ``%`` or ``#`` (and blank lines) are comments.  This is the format of the
files in the reference data shipped with the package (``mbfg/data/reference/ground-truth/``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbfg.errors import DataError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from mbfg.model.sensors import SensorSet

_SPLIT = re.compile(r"[,\s]+")


def read_table(path: str | Path, *, min_columns: int = 2, allow_nan: bool = False) -> np.ndarray:
    """Read a numeric table (rows x columns) skipping ``%``/``#`` comment lines.

    Raises :class:`DataError` naming the file and line for a malformed row, a row with a
    different number of columns, a non-finite value, or an empty table."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not a text file (byte 0x{e.object[e.start]:02x} at "
                        f"offset {e.start} is not UTF-8); expected text rows 't value...'") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise DataError(f"{path}:{line}: not a text file (it contains NUL bytes); expected text "
                        f"rows 't value...'")
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
        bad = ~np.isfinite(vals) & ~(np.isnan(vals) if allow_nan else False)
        if np.any(bad):
            raise DataError(f"{path}:{lineno}: non-finite value"
                            + (" (only nan, for a missing reading, is allowed)" if allow_nan else ""))
        rows.append(vals)
    if not rows:
        raise DataError(f"{path}: no data rows")
    return np.array(rows)


def read_trajectory(
    path: str | Path,
    *,
    columns: int | None = None,
    allow_nan: bool = False,
    min_rows: int = 1,
    why: str = "",
) -> tuple:
    """Read ``t value...`` rows.  Returns ``(t, values)`` with t (T,) strictly increasing and
    values (T, k).  ``columns`` checks k; ``min_rows`` checks T (``why`` says why it needs
    them in the error message)."""
    table = read_table(path, allow_nan=allow_nan)
    t, vals = table[:, 0], table[:, 1:]
    if columns is not None and vals.shape[1] != columns:
        raise DataError(f"{path}: expected {columns} value column(s) after t, got {vals.shape[1]}")
    if t.size < min_rows:
        raise DataError(f"{path}: {t.size} data row{'s' * (t.size != 1)}; expected at least "
                        f"{min_rows} time samples" + (f" ({why})" if why else ""))
    if t.size > 1 and not np.all(np.diff(t) > 0):
        k = int(np.argmax(np.diff(t) <= 0))
        raise DataError(f"{path}: time must increase strictly (row {k + 2}: t = {t[k + 1]:g} after "
                        f"{t[k]:g})")
    return t, vals


def write_readings(path: str, t: ArrayLike, sensors: SensorSet, readings: list) -> None:
    """Write sensor readings as rows ``t value...``: one column per sensor component in the
    order of ``sensors`` (a SensorSet), ``nan`` where a sensor has no reading at that step
    (its period), with a ``%`` header naming the columns."""
    from pathlib import Path
    t = np.asarray(t, float)
    cols = np.full((t.size, sensors.dim), np.nan)
    c = 0
    for s, r in zip(sensors, readings):
        cols[np.asarray(r.steps, int), c:c + s.dim] = np.asarray(r.values, float).reshape(-1, s.dim)
        c += s.dim
    with Path(path).open("w") as fh:
        fh.write("% t " + " ".join(sensors.labels) + "\n")
        for k in range(t.size):
            fh.write(" ".join([f"{t[k]:.9g}"] + [("nan" if np.isnan(v) else f"{v:.17g}")
                                                 for v in cols[k]]) + "\n")


def _check_whitened(path, t, vals, sensors) -> None:
    """Every estimator sums squared whitened readings (value / sigma); refuse a reading whose
    square, times the number of readings, overflows a float: nothing could process it."""
    sigma = np.asarray(sensors.sigmas, float)  # (dim,): one per column
    count = max(int(np.sum(~np.isnan(vals))), 1)
    limit = np.sqrt(np.finfo(float).max / count)
    with np.errstate(all="ignore"):
        bad = np.abs(vals) / sigma > limit
    if np.any(bad):
        k, c = map(int, np.argwhere(bad)[0])
        raise DataError(f"{path}: row {k + 1} (t = {t[k]:g} s), column {c + 2} "
                        f"({sensors.labels[c]}): reading {vals[k, c]:g} is {abs(vals[k, c]) / sigma[c]:.3g} "
                        f"times its sigma {sigma[c]:g}, beyond what a float can square and sum "
                        f"({limit:.3g}); expected readings of the size the sensor measures")


def column_header(path: str | Path) -> str | None:
    """The column names of a table's header, as one string with single blanks: what follows
    the word ``t`` on the last comment line (``%`` or ``#``) before the first data row that
    starts with ``t`` (as :func:`write_readings` writes it); None when there is no such line.
    (Sensor labels contain blanks, so the names are not split.)"""
    header = None
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            s = line.strip()
            if not s:
                continue
            if s[0] not in "%#":
                break
            words = s[1:].split()
            if words and words[0] == "t":
                header = " ".join(words[1:])
    return header


def _check_labels(path, sensors) -> None:
    """A readings header must name the columns of ``sensors``, in order."""
    found = column_header(path)
    expected = " ".join(" ".join(sensors.labels).split())
    # only headers in mbfg's label form (as 'mbfg synthesize' writes them: descriptive labels
    # such as 'gyroscope(body 1)', or the sensors' own names) are checked; a free-form
    # header such as '% t x y' is a comment
    ours = "(" in found if found is not None else False
    named = found is not None and any(s.name and s.name in found for s in sensors)
    if found is None or found == expected or not (ours or named):
        return
    raise DataError(f"{path}: its header names the columns {found!r}, but the sensors file "
                    f"gives {expected!r}; expected readings of those sensors in that order "
                    f"(or a file without a '% t ...' header)")


def read_readings(path: str, sensors: SensorSet) -> tuple:
    """Inverse of :func:`write_readings`: ``(t, readings)`` with one ``Readings(steps,
    values)`` per sensor; rows where a sensor's columns are ``nan`` are absent readings.

    A header line ``% t label ...`` in mbfg's label form (as :func:`write_readings` writes:
    descriptive labels such as ``gyroscope(body 1)`` or the sensors' names) must name the
    columns of ``sensors`` in order (:class:`DataError` otherwise); a file without one, or with
    a free-form header such as ``% t x y``, is read by position."""
    from mbfg.model.sensors import Readings
    t, vals = read_trajectory(path, columns=sensors.dim, allow_nan=True)
    _check_labels(path, sensors)
    _check_whitened(path, t, vals, sensors)
    out, c = [], 0
    for s in sensors:
        block = vals[:, c:c + s.dim]
        present = ~np.isnan(block).any(axis=1)
        out.append(Readings(np.flatnonzero(present), block[present]))
        c += s.dim
    return t, out


__all__ = ["read_table", "read_trajectory", "write_readings", "read_readings",
           "column_header"]
