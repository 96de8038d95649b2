"""Regenerate and execute the example notebooks from their percent scripts.

The scripts ``examples/*.py`` (jupytext "percent" format) are the reviewed source; each gets an
executed ``examples/<name>.ipynb`` beside it, with its printed output and figures, for readers
who open the folder in Jupyter, VS Code or on GitHub, and for the documentation site.

Usage (needs the ``docs`` extra: ``pip install ".[docs]"``)::

    python docs/build_notebooks.py                      # every example, full runs (minutes)
    python docs/build_notebooks.py state_estimation     # only some examples (names or paths)
    python docs/build_notebooks.py --quick              # MBFG_QUICK=1: a fast trial run

The published notebooks are full runs: ``--quick`` marks its notebooks as quick
(``metadata.mbfg.quick``) and ``tests/test_docs.py`` rejects them.  Each notebook runs in
``examples/`` (its own folder, as Jupyter runs it), with matplotlib's inline backend, and writes
its figures to ``docs/figures/`` (``MBFG_FIGURES``), the same files the documentation shows
(``--quick`` writes them to a scratch folder instead).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FIGURE_DPI = 80
"""Resolution of the figures embedded in the notebooks (the files in docs/figures keep the
scripts' own dpi)."""


def build(script: Path, quick: bool, timeout: int, out_dir: Path | None = None) -> Path:
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    nb = jupytext.read(script)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata.setdefault("jupytext", {})["formats"] = "ipynb,py:percent"
    nb.metadata["jupytext"].pop("text_representation", None)
    nb.metadata["mbfg"] = {"source": f"examples/{script.name}", "quick": quick,
                           "built_by": "docs/build_notebooks.py"}
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(script.parent)}},
        extra_arguments=["--InlineBackend.figure_formats=png",
                         f"--InlineBackend.rc={{'figure.dpi': {FIGURE_DPI}}}"])
    client.execute()
    out = (out_dir or script.parent) / f"{script.stem}.ipynb"
    nbformat.write(nb, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", help="example names or paths (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="MBFG_QUICK=1 (short runs; not for publishing)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    parser.add_argument("--out", type=Path, help="write the notebooks to this folder instead of "
                        "beside their scripts (they still run in examples/)")
    args = parser.parse_args(argv)
    scripts = sorted(EXAMPLES.glob("*.py"))
    if args.examples:
        wanted = {Path(e).stem for e in args.examples}
        unknown = wanted - {s.stem for s in scripts}
        if unknown:
            parser.error(f"no example {', '.join(sorted(unknown))} in {EXAMPLES}")
        scripts = [s for s in scripts if s.stem in wanted]

    # the kernel inherits this environment: the inline backend (not a forced Agg), figures
    # into docs/figures given relative to examples/ (so printed paths carry no machine path)
    # (a quick run writes its figures to a scratch folder: docs/figures shows full runs)
    os.environ.pop("MPLBACKEND", None)
    if args.quick:
        os.environ["MBFG_QUICK"] = "1"
        os.environ["MBFG_FIGURES"] = tempfile.mkdtemp(prefix="mbfg-quick-figures-")
    else:
        os.environ.pop("MBFG_QUICK", None)
        os.environ["MBFG_FIGURES"] = os.path.relpath(ROOT / "docs" / "figures", EXAMPLES)
    try:
        for script in scripts:
            t0 = time.perf_counter()
            out = build(script, args.quick, args.timeout, args.out)
            print(f"{os.path.relpath(out)}: {time.perf_counter() - t0:.0f} s, "
                  f"{out.stat().st_size / 1024:.0f} kB", flush=True)
    finally:
        if args.quick:  # the scratch figures of a trial run
            shutil.rmtree(os.environ["MBFG_FIGURES"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
