"""A minimal progress bar for long runs, on stderr, silent when stderr is not a terminal."""
from __future__ import annotations

import sys
import time


class ProgressBar:
    """``bar = ProgressBar("simulate", enabled=None); bar(done, total); bar.close()``.

    ``enabled=None`` means: only when stderr is a terminal.  Redraws at most 10 times a
    second, so calling it every step costs almost nothing.
    """

    def __init__(self, label: str, *, enabled: bool | None = None, stream=None, width: int = 30):
        self.stream = stream or sys.stderr
        self.enabled = (self.stream.isatty() if enabled is None else enabled)
        self.label, self.width = label, width
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int, note: str = "") -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        frac = done / total if total else 1.0
        filled = int(round(frac * self.width))
        elapsed = now - self.t0
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{done}/{total} {elapsed:5.1f}s eta {eta:5.1f}s {note}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


__all__ = [
    "ProgressBar"
]
