"""Every shell command in README.md and docs/ that a reader is told to run runs here as written,
or is marked as an illustration (docs/contributing.md):

- ```bash fences run, command by command, in a scratch folder linked to the clone's files;
- ```console fences are illustrations (not run);
- a leading ``python3 -m venv .venv && . .venv/bin/activate && pip install ...`` is the set-up
  CI itself performs (.ci/run): it is checked and the rest of the line runs; the README's test
  command must equal .ci/run's.

Also: the bundled sensors file and reference trajectories that those commands use by name.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mbfg.errors import UsageError
from mbfg.resources import (bundled_sensors, bundled_trajectories, resolve_sensors,
                            resolve_trajectory)

REPO = Path(__file__).resolve().parents[1]
SETUP = re.compile(r"^python3 -m venv \.venv && \. \.venv/bin/activate && pip install (\S+) && (.+)$")
COMMAND = re.compile(r"^(\$ )?(mbfg|python3?|pip|mkdocs|jupytext)\s")
SHELL_LANGUAGES = ("bash", "console")
TIMEOUT = 300


def doc_files() -> list[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")) \
        + sorted((REPO / "docs" / "api").glob("*.md"))


def fences(path: Path) -> list[tuple[str, int, list[str]]]:
    """(language, line number, lines) of the fenced code blocks of a Markdown file."""
    out, block = [], None
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if block is None:
            m = re.match(r"^```+\s*([\w+-]*)", stripped)
            if m:
                block = (m.group(1).lower(), no, [])
        elif stripped.startswith("```"):
            out.append(block)
            block = None
        else:
            block[2].append(line)
    return out


def commands(lines: list[str]) -> list[str]:
    """The commands of a bash block: continuation lines joined, blank and comment lines
    dropped."""
    out, current = [], ""
    for line in lines:
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.lstrip().startswith("#"):
            out.append(" ".join(current.split()) if "'" not in current and '"' not in current
                       else current.strip())
        current = ""
    return out


def ci_test_command() -> str:
    """The README test command as .ci/run runs it (after its own venv set-up)."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# --- the README's test command"))
    return lines[i + 1].replace(" -q ", " ").strip()


TESTED = [p for p in doc_files() if any(lang == "bash" for lang, _, _ in fences(p))]


def test_the_docs_have_tested_commands():
    assert REPO / "README.md" in TESTED and REPO / "docs" / "install.md" in TESTED


@pytest.mark.parametrize("doc", TESTED, ids=lambda p: p.relative_to(REPO).as_posix())
def test_bash_commands_run(doc, tmp_path):
    """The file's bash blocks, in order, in one scratch folder (a block may read what an
    earlier one wrote).  The scratch folder links to the clone's top-level entries, so paths
    such as mechanisms/fourbar.yaml or examples/data/... work; output files land in it, and
    example scripts write their figures there (MBFG_FIGURES)."""
    for entry in REPO.iterdir():
        if not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    bindir = str(Path(sys.executable).parent)  # the installed mbfg and this python
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
               MPLBACKEND="Agg", MBFG_FIGURES=str(tmp_path / "figures"))
    env.pop("MBFG_QUICK", None)
    ran = []
    for lang, line, lines in fences(doc):
        if lang != "bash":
            continue
        for cmd in commands(lines):
            m = SETUP.match(cmd)
            if m:
                assert m.group(1) in (".", '".[test]"', '".[test,docs]"'), cmd
                rest = m.group(2)
                if rest == "python -m pytest":  # the test command: what CI runs, not from here
                    assert f"pip install {m.group(1)} && {rest}" == ci_test_command(), (
                        f"{doc.name}:{line}: the test command differs from .ci/run's")
                    continue
                cmd = rest
            t0 = time.perf_counter()
            proc = subprocess.run(["bash", "-c", f"set -euo pipefail\n{cmd}"], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=TIMEOUT)
            assert proc.returncode == 0, (
                f"{doc.relative_to(REPO)}:{line}: `{cmd}` exited with {proc.returncode}\n"
                f"--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-2000:]}")
            ran.append((cmd, time.perf_counter() - t0))
    assert ran or doc.name == "README.md"
    print("\n".join(f"{dt:6.1f} s  {cmd}" for cmd, dt in ran))


def test_readme_test_command_equals_ci():
    readme = [cmd for lang, _, lines in fences(REPO / "README.md") if lang == "bash"
              for cmd in commands(lines) if cmd.endswith("&& python -m pytest")]
    assert len(readme) == 1, readme
    m = SETUP.match(readme[0])
    assert m, readme[0]
    assert f"pip install {m.group(1)} && python -m pytest" == ci_test_command()


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_commands_are_marked(doc):
    """A command shown outside a bash or console fence (another fence's language, or an
    indented code block) is neither tested nor marked as an illustration."""
    bad = []
    for lang, line, lines in fences(doc):
        if lang in SHELL_LANGUAGES or lang in ("python", "py", "yaml", "yml"):
            continue
        first = next((ln.strip() for ln in lines if ln.strip()), "")
        if COMMAND.match(first):
            bad.append(f"{doc.name}:{line}: ```{lang} block starts with the command {first!r}")
    in_fence, previous = False, ""
    for no, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("    ") and not previous.strip() \
                and COMMAND.match(line.strip()):
            bad.append(f"{doc.name}:{no}: indented code block with the command {line.strip()!r}")
        previous = line
    assert not bad, ("commands must be in ```bash (tested) or ```console (illustration) "
                     "fences (docs/contributing.md):\n" + "\n".join(bad))


def test_inline_example_and_benchmark_commands_name_existing_scripts():
    """Inline `python examples/X.py` / `python benchmarks/X.py` name real scripts (the
    examples themselves run in tests/test_examples.py)."""
    missing = []
    for doc in doc_files():
        for script in re.findall(r"python3? ((?:examples|benchmarks|docs)/[\w./-]+\.py)",
                                 doc.read_text(encoding="utf-8")):
            if not (REPO / script).is_file():
                missing.append(f"{doc.name}: {script}")
    assert not missing, missing


# ---------------------------------------------------------------- bundled files used by name

def test_bundled_sensors_and_trajectories():
    assert "fourbar-review" in bundled_sensors()
    assert {"fourbars1-with-rel-angle-trajectory", "pick-and-place-robot-trajectory"} \
        <= set(bundled_trajectories())
    assert resolve_sensors("fourbar-review") == bundled_sensors()["fourbar-review"]
    assert resolve_sensors("fourbar-review.yaml") == bundled_sensors()["fourbar-review"]
    path = resolve_trajectory("fourbars1-with-rel-angle-trajectory")
    assert path == resolve_trajectory("fourbars1-with-rel-angle-trajectory.txt")
    assert path.is_file() and path.name == "fourbars1-with-rel-angle-trajectory.txt"


def test_bundled_sensors_load_for_their_mechanism():
    import mbfg
    mech = mbfg.load_mechanism("fourbar-review")
    sensors = mbfg.load_sensors(resolve_sensors("fourbar-review"), mech)
    assert sensors.dim == 2


def test_files_win_over_bundled_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fourbar-review").write_text("sensors: []\n")
    assert resolve_sensors("fourbar-review") == "fourbar-review"
    assert resolve_trajectory("nosuch.txt") == "nosuch.txt"      # the reader reports it
    assert resolve_trajectory("dir/fourbars1-with-rel-angle-trajectory") \
        == "dir/fourbars1-with-rel-angle-trajectory"             # a path, not a name
    text = "sensors:\n  - {type: gyroscope, body: 1, sigma: 0.1}"
    assert resolve_sensors(text) == text                          # YAML text passes through


def test_unknown_sensors_name_is_a_usage_error():
    with pytest.raises(UsageError, match="no bundled sensors of that name.*fourbar-review"):
        resolve_sensors("nosuch")
    assert resolve_sensors("nosuch.yaml") == "nosuch.yaml"        # the loader reports it


def test_cli_unknown_bundled_sensors_name_is_one_line_exit_2(tmp_path, capsys):
    from mbfg.cli import main
    code = main(["synthesize", "fourbar-review", "--sensors", "nosuch", "--t-end", "0.1",
                 "--out", str(tmp_path / "r.txt")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "fourbar-review" in err[0], err
