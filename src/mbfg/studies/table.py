"""The result table of a study: one row per case, as plain CSV (always) and Parquet (when
pyarrow is installed).

Cells are plain values: None (blank), bool, int, float, str; a pair (a gravity override) is
written as JSON text ``[0.0, -9.81]``.  Floats are written with ``repr``, the shortest text that
reads back to the same double, so a table read back from CSV is bit-identical to the one
written.
"""
from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mbfg.errors import DataError

__all__ = ["cell", "parse_cell", "write_csv", "read_csv", "CsvAppender", "write_parquet",
           "parquet_available"]

_INT = re.compile(r"[-+]?\d+\Z")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|nan|inf)\Z")


def cell(value: Any) -> Any:
    """A table cell of ``value``: None, bool, int, float or str (sequences and mappings as
    JSON text, numpy scalars as Python ones)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (tuple, list, np.ndarray)):
        return json.dumps([cell(v) for v in np.asarray(value).tolist()]
                          if isinstance(value, np.ndarray) else [cell(v) for v in value])
    if isinstance(value, dict):
        return json.dumps({str(k): cell(v) for k, v in value.items()}, sort_keys=True)
    return str(value)


def parse_cell(text: str) -> Any:
    """The value of a CSV cell written by :func:`write_csv` (blank -> None)."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(path: str | os.PathLike, columns: Sequence[str], rows: Iterable[dict]) -> Path:
    """Write the table (atomically: a temporary file renamed over ``path``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for row in rows:
            w.writerow([_text(row.get(c)) for c in columns])
    os.replace(tmp, path)
    return path


class CsvAppender:
    """Appends rows to a CSV file as cases finish (flushed each time, so an interrupted study
    keeps every finished case).  Writes the header when the file is new."""

    def __init__(self, path: str | os.PathLike, columns: Sequence[str]):
        self.path = Path(path)
        self.columns = list(columns)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fh = self.path.open("a", newline="", encoding="utf-8")
        self._w = csv.writer(self._fh)
        if new:
            self._w.writerow(self.columns)
            self._fh.flush()

    def append(self, row: dict) -> None:
        """Write one row and flush it."""
        self._w.writerow([_text(row.get(c)) for c in self.columns])
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def read_csv(path: str | os.PathLike, columns: Sequence[str]) -> list:
    """The rows of a table written by :func:`write_csv` or :class:`CsvAppender` whose header
    is ``columns``; a truncated last row (an interrupted write) is dropped.

    Raises :class:`~mbfg.errors.DataError` naming the file when its header differs."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return []
        if list(header) != list(columns):
            missing = [c for c in columns if c not in header]
            extra = [c for c in header if c not in columns]
            raise DataError(f"{path}: its columns are not this study's (missing: "
                            f"{', '.join(missing) or 'none'}; not in the study: "
                            f"{', '.join(extra) or 'none'}; or another order), so it is the "
                            f"output of another study; expected this study's output to resume, "
                            f"or another --out")
        rows = []
        try:
            for fields in reader:
                if len(fields) != len(columns):
                    continue
                rows.append({c: parse_cell(v) for c, v in zip(columns, fields)})
        except csv.Error:  # a torn last line
            pass
    return rows


def parquet_available() -> bool:
    """Whether pyarrow is installed (Parquet output)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _arrow_type(values: list):
    import pyarrow as pa
    present = [v for v in values if v is not None]
    if not present:
        return pa.float64()
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def write_parquet(path: str | os.PathLike, columns: Sequence[str], rows: Sequence[dict]) -> Path:
    """Write the table as Parquet (needs pyarrow); column types from the values (numbers,
    booleans, text; a blank is null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    arrays = []
    for c in columns:
        values = [row.get(c) for row in rows]
        typ = _arrow_type(values)
        if typ == pa.float64():
            values = [None if v is None else float(v) for v in values]
        elif typ == pa.string():
            values = [None if v is None else _text(v) for v in values]
        arrays.append(pa.array(values, type=typ))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_arrays(arrays, names=list(columns)), tmp)
    os.replace(tmp, path)
    return path
