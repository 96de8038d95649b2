"""benchmarks/peers.py (docs/benchmarks.md, "Peers in one run") in a shortened run: it exits 0
and prints the mbfg rows; each peer prints a row whether it is installed or not.  No timing
is checked."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_peers_benchmark_short_run():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "peers.py"),
                          "--t-end", "0.05", "--repeat", "1"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| code ")}
    for name in ("mbfg batch", "mbfg smoother"):
        cells = [c.strip() for c in rows[name].split("|")[1:-1]]
        rmse = float(cells[6])
        assert 0.0 <= rmse < 0.1, rows[name]          # mm, against the DOP853 reference
    for name in ("Exudyn", "MuJoCo", "Pinocchio"):
        assert name in rows, out.stdout
        assert "failed" not in rows[name], rows[name]
