"""MkDocs hook: the example notebooks ``examples/*.ipynb`` as pages ``examples/<name>.ipynb``.

The notebooks live beside their scripts in ``examples/`` (outside ``docs_dir``); this adds them
to the site's files from there, so that no symlink is needed (git checks symlinks out as
plain text files on Windows, where the site then could not be built).
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns notebooks into pages
def on_files(files, config):
    for notebook in sorted(EXAMPLES.glob("*.ipynb")):
        files.append(File(f"examples/{notebook.name}", src_dir=str(EXAMPLES.parent),
                          dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
