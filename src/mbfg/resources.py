"""Data that ships inside the package: the bundled mechanisms, sensor files and the reference
data of the published C++ implementation (its YAMLs, desired trajectories and MSC ADAMS output;
see ``mbfg/data/reference/README.md`` for the files and their attribution).

Commands take each kind by name as well as by path: ``mbfg simulate fourbar``, ``--sensors
fourbar-review`` (:func:`resolve_sensors`), ``--trajectory fourbars1-with-rel-angle-trajectory``
(:func:`resolve_trajectory`).

Everything is read through :mod:`importlib.resources`, so it works from an installed wheel as
well as from a checkout, whatever the working directory.
"""
from __future__ import annotations

import os
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
    return _bundled(("mechanisms",), (".yaml",))


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


def _bundled(folder_parts: tuple, suffixes: tuple) -> dict[str, Path]:
    """Stem -> path of the files of a data folder with one of ``suffixes``, sorted by stem."""
    folder = _folder(*folder_parts)
    if not folder.is_dir():
        return {}
    found = {Path(f.name).stem: Path(str(f)) for f in folder.iterdir()
             if f.name.endswith(suffixes)}
    return dict(sorted(found.items()))


def bundled_sensors() -> dict[str, Path]:
    """Name -> path of every bundled sensors YAML (``fourbar-review`` -> ``.../sensors/
    fourbar-review.yaml``, the sensors of the bundled mechanism of the same name)."""
    return _bundled(("sensors",), (".yaml",))


def bundled_trajectories() -> dict[str, Path]:
    """Name -> path of the bundled reference trajectories (rows ``t value...``, for
    ``mbfg inverse --trajectory``), e.g. ``fourbars1-with-rel-angle-trajectory``."""
    return _bundled(("reference", "ground-truth"), ("-trajectory.txt",))


def bundled_studies() -> dict[str, Path]:
    """Name -> path of the example studies shipped in ``mbfg/data/studies``
    (:mod:`mbfg.studies`, ``mbfg sweep``)."""
    return _bundled(("studies",), (".yaml",))


def resolve_study(path: str | os.PathLike) -> Path:
    """A study argument as users give it: an existing file, or else the name of a bundled
    example study (``fourbar-mass-sweep``, with or without ``.yaml``); otherwise the path
    unchanged (reading it reports the missing file)."""
    return Path(_resolve(path, bundled_studies()))


def _resolve(path_or_name: str | Path, known: dict[str, Path]) -> str | Path:
    """An existing path as given; else a bare name (no folder) of a ``known`` bundled file,
    with or without its suffix, as that file's path; else the argument unchanged (the reader
    then reports the missing file)."""
    text = str(path_or_name)
    if "\n" in text:  # YAML text, not a file name
        return path_or_name
    path = Path(text)
    try:
        if path.exists():
            return path_or_name
    except OSError:  # e.g. a name too long for the file system
        return path_or_name
    if path.parent == Path("."):
        for stem in (path.name, path.stem):
            if stem in known:
                return known[stem]
    return path_or_name


def resolve_sensors(path_or_name: str | Path) -> str | Path:
    """A ``--sensors`` argument: an existing file, or else the name of a bundled sensors file
    (``fourbar-review``, see :func:`bundled_sensors`).

    Raises :class:`~mbfg.errors.UsageError` for a one-line argument without a ``.yaml``/
    ``.yml`` suffix that is neither a file nor a bundled name (it would otherwise be read as
    YAML text)."""
    known = bundled_sensors()
    found = _resolve(path_or_name, known)
    text = str(found)
    if (found is path_or_name and "\n" not in text and not isinstance(found, Path)
            and not text.strip().lower().endswith((".yaml", ".yml"))
            and not _exists(text)):
        raise UsageError(f"no sensors file {text!r} and no bundled sensors of that name "
                         f"(bundled: {', '.join(known) or 'none'}); expected the path of a "
                         f"sensors YAML file (docs/sensors.md)")
    return found


def _exists(text: str) -> bool:
    try:
        return Path(text).exists()
    except OSError:
        return False


def resolve_trajectory(path_or_name: str | Path) -> str | Path:
    """A ``--trajectory`` argument: an existing file, or else the name of a bundled reference
    trajectory (see :func:`bundled_trajectories`)."""
    return _resolve(path_or_name, bundled_trajectories())


__all__ = ["bundled_mechanisms", "bundled_sensors", "bundled_studies", "bundled_trajectories",
           "mechanism_path", "reference_path", "resolve_mechanism", "resolve_sensors",
           "resolve_study", "resolve_trajectory"]
