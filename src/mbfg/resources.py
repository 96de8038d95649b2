"""Data that ships inside the package: the bundled mechanisms and the reference data of the
published C++ implementation (its YAMLs, desired trajectories and MSC ADAMS output; see
``mbfg/data/reference/README.md`` for the files and their attribution).

Everything is read through :mod:`importlib.resources`, so it works from an installed wheel as
well as from a checkout, whatever the working directory.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from mbfg.errors import UsageError

_DATA = "mbfg.data"


def _folder(*parts: str):
    node = resources.files(_DATA)
    for part in parts:
        node = node.joinpath(part)
    return node


def bundled_mechanisms() -> dict[str, Path]:
    """Name -> path of every bundled mechanism YAML (``fourbar`` -> ``.../fourbar.yaml``),
    sorted by name."""
    folder = _folder("mechanisms")
    return {Path(f.name).stem: Path(str(f)) for f in sorted(folder.iterdir(), key=lambda f: Path(f.name).stem)
            if f.name.endswith(".yaml")}


def mechanism_path(name: str) -> Path:
    """Path of the bundled mechanism ``name`` (with or without ``.yaml``).

    Raises :class:`~mbfg.errors.UsageError` listing the bundled names if there is none."""
    stem = name[:-5] if name.endswith(".yaml") else name
    known = bundled_mechanisms()
    if stem not in known:
        raise UsageError(f"no bundled mechanism {name!r}; bundled: {', '.join(known)}")
    return known[stem]


def reference_path(*parts: str) -> Path:
    """Path of a reference-data file, e.g. ``reference_path("ground-truth",
    "InverseDynamics_4bars_MSC.tab")`` or ``reference_path("mechanisms", "fourbars1.yaml")``.

    Raises :class:`FileNotFoundError` if the file is not in the package."""
    path = Path(str(_folder("reference", *parts)))
    if not path.is_file():
        raise FileNotFoundError(f"reference data file {'/'.join(parts)} is not in the package "
                                f"({path})")
    return path


def resolve_mechanism(path_or_name: str | Path) -> Path:
    """A mechanism argument as users give it: an existing file path, or else the name of a
    bundled mechanism (``fourbar``).  A missing path that is not a bundled name is returned
    unchanged (the loader then reports the missing file)."""
    path = Path(path_or_name)
    if path.exists():
        return path
    if path.parent == Path(".") and path.suffix in ("", ".yaml"):
        try:
            return mechanism_path(path.name)
        except UsageError:
            pass
    return path


__all__ = ["bundled_mechanisms", "mechanism_path", "reference_path", "resolve_mechanism"]
