"""Notebook parts of the workbench: the live dashboard, the play viewer, run comparison, the console bar.

This is the only package that imports ipywidgets and plotly, and only in the modules that draw with
them; ``workbench`` loads it on first use (``wb.Dashboard``, ``wb.PlayViewer``, ``wb.compare``,
``session.dashboard()``). The names below load lazily too, so ``workbench.ui.view_model`` and
``workbench.ui.console`` (plain Python) import without ipywidgets or plotly.

Models never import this package: they ask ``workbench.views`` (the one lazy hook) for a view by kind, and
:func:`view` below builds it. Every run view (session, sweep, population) is a :class:`~.run_view.RunView`:
one button row, one status line, one refresh timer, and plots that are all :class:`~.live_plot.LivePlot`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Dashboard", "PlayViewer", "compare", "follow", "view"]

_WHERE = {
    "Dashboard": ".dashboard",
    "PlayViewer": ".play_viewer",
    "compare": ".compare",
    "follow": ".console",
}


# The view of each kind of model (workbench.views names the kind): module, class.
_VIEWS = {
    "session": (".dashboard", "Dashboard"),
    "sweep": (".sweep_view", "SweepDashboard"),
    "population": (".population_view", "PopulationDashboard"),
    "play": (".play_viewer", "PlayViewer"),
    "human": (".human_view", "HumanPlayView"),
    "board": (".board_view", "BoardView"),
}


def view(kind: str, model: Any, **options: Any) -> Any:
    """A new live view of ``model``, ``kind`` one of ``session``, ``sweep``, ``population``, ``play``, ``human``."""
    if kind not in _VIEWS:
        raise ValueError(f"no view of kind {kind!r}; the kinds are {', '.join(sorted(_VIEWS))}")
    module, name = _VIEWS[kind]
    return getattr(importlib.import_module(module, __name__), name)(model, **options)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
