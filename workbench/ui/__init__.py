"""Notebook parts of the workbench: the live dashboard, the play viewer and run comparison.

This is the only package that imports ipywidgets and plotly; ``workbench`` loads it on first use
(``wb.Dashboard``, ``wb.PlayViewer``, ``wb.compare``, ``session.dashboard()``); the sweep view
(``sweep_view.SweepDashboard``) loads with ``sweep.dashboard()``.
"""

from __future__ import annotations

from .compare import compare
from .dashboard import Dashboard
from .play_viewer import PlayViewer

__all__ = ["Dashboard", "PlayViewer", "compare"]
