"""Griffe extension for the API reference (mkdocs.yml): the docstrings cross-reference with
Sphinx roles (:func:`mbfg.x.y`, :class:`~mbfg.errors.UsageError`), which Markdown would show
literally; render them as inline code (``~`` keeps the last name only, as in Sphinx) and
turn reST literal-block markers (``Quick start::``) into a plain colon."""
from __future__ import annotations

import re
from typing import Any

from griffe import Extension

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and docstring.value:
            text = ROLE.sub(_role, docstring.value)
            docstring.value = re.sub(r"(\w)::$", r"\1:", text, flags=re.M)
