"""The example notebooks match their scripts and were executed in full; the documentation site
builds strictly (docs/contributing.md)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
MAX_NOTEBOOK_BYTES = 1_500_000
"""A notebook embeds small PNGs only (GIFs are linked from docs/figures, not embedded)."""


def percent_cells(text: str) -> list[tuple[str, str]]:
    """(kind, source) of the cells of a jupytext percent script, as jupytext makes them: the
    ``# ---`` header is notebook metadata; ``# %%`` starts a code cell, ``# %% [markdown]`` a
    markdown cell whose ``# `` comment marks are removed; blank lines around a cell are not
    part of it."""
    lines = text.splitlines()
    if lines and lines[0] == "# ---":
        lines = lines[lines.index("# ---", 1) + 1:]
    cells: list[list] = []
    for line in lines:
        if line.startswith("# %%"):
            cells.append(["markdown" if "[markdown]" in line else "code", []])
        elif cells:
            cells[-1][1].append(line)
        elif line.strip():  # code before the first marker is a cell of its own
            cells.append(["code", [line]])
    out = []
    for kind, body in cells:
        if kind == "markdown":
            body = [ln[2:] if ln.startswith("# ") else ("" if ln == "#" else ln) for ln in body]
        out.append((kind, "\n".join(body).strip("\n")))
    return out


def notebook(script: Path) -> dict:
    path = script.with_suffix(".ipynb")
    assert path.is_file(), (f"{path.name} is missing: every example has an executed notebook "
                            f"beside its script; run python docs/build_notebooks.py {script.stem}")
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    src = cell["source"]
    return ("".join(src) if isinstance(src, list) else src).strip("\n")


def test_percent_parser_on_a_small_script():
    text = ("# ---\n# jupyter:\n#   jupytext: {}\n# ---\n\n# %% [markdown]\n# # Title\n#\n"
            "# text\n\n# %%\nimport os\n\nx = 1\n\n\n# %%\ny = 2\n")
    assert percent_cells(text) == [("markdown", "# Title\n\ntext"), ("code", "import os\n\nx = 1"),
                                   ("code", "y = 2")]


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_notebook_cells_equal_the_script(script):
    """The notebook is the script: same cells, same code, same text (rebuild it otherwise)."""
    nb = notebook(script)
    want = percent_cells(script.read_text(encoding="utf-8"))
    got = [(c["cell_type"], source(c)) for c in nb["cells"]]
    hint = f"{script.name} and its notebook differ: run python docs/build_notebooks.py {script.stem}"
    assert [k for k, _ in got] == [k for k, _ in want], hint
    for i, ((_, a), (_, b)) in enumerate(zip(got, want)):
        assert a == b, f"{hint} (cell {i}:\n--- notebook\n{a[:500]}\n--- script\n{b[:500]})"


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_notebook_was_executed_in_full(script):
    nb = notebook(script)
    meta = nb["metadata"].get("mbfg", {})
    hint = f"run python docs/build_notebooks.py {script.stem}"
    assert meta.get("quick") is False, f"{script.stem}.ipynb is not a full run; {hint}"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code), \
        f"{script.stem}.ipynb has cells that were not executed; {hint}"
    counts = [c["execution_count"] for c in code]
    assert counts == sorted(counts), f"{script.stem}.ipynb was not executed in order; {hint}"
    outputs = [o for c in code for o in c.get("outputs", [])]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, f"{script.stem}.ipynb: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    assert any("image/png" in o.get("data", {}) for o in outputs), \
        f"{script.stem}.ipynb shows no figure"
    size = script.with_suffix(".ipynb").stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, f"{script.stem}.ipynb is {size / 1e6:.1f} MB"


def test_every_notebook_has_a_script():
    orphans = [p.name for p in (REPO / "examples").glob("*.ipynb")
               if not p.with_suffix(".py").is_file()]
    assert not orphans, f"notebooks without a percent script: {orphans}"


def test_build_notebooks_quick(tmp_path):
    """A shortened variant of `python docs/build_notebooks.py` (an illustration in the docs:
    it takes minutes): one example, quick mode, into a scratch folder."""
    for module in ("jupytext", "nbclient", "ipykernel"):
        pytest.importorskip(module)
    env = {k: v for k, v in os.environ.items() if k not in ("MBFG_QUICK", "MBFG_FIGURES")}
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "build_notebooks.py"), "--quick",
                           "--out", str(tmp_path), "fourbar_inverse_dynamics"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = json.loads((tmp_path / "fourbar_inverse_dynamics.ipynb").read_text())
    assert nb["metadata"]["mbfg"]["quick"] is True
    assert any("image/png" in o.get("data", {}) for c in nb["cells"] if c["cell_type"] == "code"
               for o in c["outputs"])


def test_mkdocs_strict_build(tmp_path):
    """The site builds with --strict: no broken link, no missing page, no page out of the nav."""
    for module in ("mkdocs", "material", "mkdocs_jupyter", "mkdocstrings_handlers.python"):
        pytest.importorskip(module)
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(REPO / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))  # (cwd: its caches)
    problems = [ln for ln in proc.stderr.splitlines() if ln.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0, ("mkdocs build --strict failed:\n"
                                  + "\n".join(problems or [proc.stderr[-5000:]]))
    assert (site / "index.html").is_file()
    assert (site / "api" / "index.html").is_file()
    for script in EXAMPLES:
        page = site / "examples" / script.stem / "index.html"
        assert page.is_file(), f"no page for the notebook of {script.name}"
    shutil.rmtree(site, ignore_errors=True)
