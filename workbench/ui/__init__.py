"""Notebook and console views of the workbench: the live dashboard, the play viewer, run
comparison, and the console progress bar.

This is the only package that imports ipywidgets and plotly; ``workbench`` loads it on first use
(``wb.Dashboard``, ``wb.PlayViewer``, ``wb.compare``, ``session.dashboard()``). Importing
``workbench.ui`` itself is light: each view's module loads when the view is first asked for, so the
console progress bar works without the notebook extra. The sweep view
(``sweep_view.SweepDashboard``) loads with ``sweep.dashboard()``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Dashboard", "PlayViewer", "compare", "follow"]

_WHERE = {
    "Dashboard": ".dashboard",
    "PlayViewer": ".play_viewer",
    "compare": ".compare",
    "follow": "..progress",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
