"""Notebook parts of the workbench: the live dashboard, the play viewer, run comparison, the console bar.

This is the only package that imports ipywidgets and plotly, and only in the modules that draw with
them; ``workbench`` loads it on first use (``wb.Dashboard``, ``wb.PlayViewer``, ``wb.compare``,
``session.dashboard()``). The names below load lazily too, so ``workbench.ui.view_model`` and
``workbench.ui.console`` (plain Python) import without ipywidgets or plotly.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Dashboard", "PlayViewer", "compare", "follow"]

_WHERE = {
    "Dashboard": ".dashboard",
    "PlayViewer": ".play_viewer",
    "compare": ".compare",
    "follow": ".console",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
