"""A griffe extension for the API reference site (mkdocs.yml): the package's docstrings are written in reST's
inline style (``:class:`Session```, ``Example::``); this turns them into the Markdown that mkdocstrings renders.

A role becomes inline code of its name (``:meth:`~workbench.Session.start``` -> ```start```), and a paragraph's
closing ``::`` one colon (the indented block after it is already a Markdown code block).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`([^`]+)`")
LITERAL_BLOCK = re.compile(r"(\S)::[ \t]*$", re.M)  # "Example::" at the end of a line
LONE_LITERAL_MARK = re.compile(r"^[ \t]*::[ \t]*$", re.M)


def _name(target: str) -> str:
    """What a role shows: ``~a.b.C`` -> ``C``, ``text <a.b.C>`` -> ``text``, ``.datasets`` -> ``datasets``."""
    explicit = re.fullmatch(r"(.*?)\s*<[^>]+>", target)
    if explicit:
        return explicit.group(1)
    if target.startswith("~"):
        return target.rsplit(".", 1)[-1]
    return target.lstrip(".")


def markdown(text: str) -> str:
    """A reST-style docstring as Markdown (roles as inline code, ``::`` as ``:``)."""
    text = ROLE.sub(lambda m: f"`{_name(m.group(1))}`", text)
    text = LONE_LITERAL_MARK.sub("", text)
    return LITERAL_BLOCK.sub(r"\1:", text)


class RestRoles(griffe.Extension):
    """Rewrites every object's docstring with :func:`markdown` as griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
