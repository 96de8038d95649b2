"""The example scripts (jupytext percent format) run end to end in quick mode."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))


def test_examples_exist():
    assert EXAMPLES, "no example scripts found in examples/"


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    env = dict(os.environ, MBFG_QUICK="1", MBFG_FIGURES=str(tmp_path), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (f"{script.name} exited with {proc.returncode}\n"
                                  f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    assert list(tmp_path.glob("*.png")), f"{script.name} wrote no .png to MBFG_FIGURES"


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_is_jupytext_percent(script):
    """Cells are '# %%' lines and at least one is a markdown cell (checked without jupytext,
    which the test environment may not have)."""
    lines = script.read_text().splitlines()
    cells = [ln for ln in lines if ln.startswith("# %%")]
    assert cells, f"{script.name}: no '# %%' cells"
    assert any(ln.startswith("# %% [markdown]") for ln in cells), \
        f"{script.name}: no '# %% [markdown]' cell"
    code_cells = [ln for ln in cells if ln.rstrip() == "# %%"]
    assert code_cells, f"{script.name}: no code cells"


def test_readme_python_example_runs(tmp_path):
    """The README's "Use from Python" block runs as written (one import, from any directory)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Use from Python", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, MPLBACKEND="Agg"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "fourbar.npz").is_file()


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_also_runs_as_a_notebook(script):
    """The same code is the executed notebook (tests/test_docs.py): it must not force a
    matplotlib backend (the notebook shows its figures inline) nor use ``__file__`` unguarded
    (a kernel has none)."""
    text = script.read_text()
    assert "matplotlib.use(" not in text, f"{script.name} forces a matplotlib backend"
    for line in text.splitlines():
        if "__file__" in line and not line.lstrip().startswith("#"):
            assert '"__file__" in globals()' in line, f"{script.name}: unguarded __file__: {line}"
