"""The one way a model reaches its views: sessions, sweeps, populations, agents and human play show
themselves in a notebook through :func:`view` and :func:`display`, which import ``workbench.ui`` on first use.

No module outside ``workbench/ui`` imports the views (``tests/test_boundaries.py`` holds this): a model names
the kind of view it wants (``"session"``, ``"sweep"``, ``"population"``, ``"play"``, ``"human"``) and this
module finds it, so ``import workbench`` loads no widget library and no model module depends on a view.
"""

from __future__ import annotations

import sys
import threading
import weakref
from types import ModuleType
from typing import Any

__all__ = ["display", "follow", "shown", "ui", "view", "warm"]

_shown: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # model -> its live view
_shown_lock = threading.Lock()
_warming: list[threading.Thread] = []  # the one thread that imports the views, once started


def ui() -> ModuleType:
    """The views package, ``workbench.ui``, imported on first use (with ipywidgets and anywidget as it needs them)."""
    from . import ui as package

    return package


def view(kind: str, model: Any, **options: Any) -> Any:
    """A new live view of ``model``: ``kind`` is ``"session"``, ``"sweep"``, ``"population"``, ``"play"`` or
    ``"human"``; ``options`` go to the view (e.g. a play viewer's ``episodes``)."""
    return ui().view(kind, model, **options)


def shown(model: Any) -> Any | None:
    """The live view that showing ``model`` in a notebook displays now (None before the first time)."""
    with _shown_lock:
        return _shown.get(model)


def display(model: Any) -> None:
    """Show ``model``'s live view in the notebook (the model's ``_ipython_display_``).

    Showing a model again while its view is live shows that view in one more place: one refresh timer per
    model however often a cell shows it. A view whose timer has stopped (the run ended) or that was closed
    is replaced by a fresh one from ``model.dashboard()``.
    """
    from IPython.display import display as show

    with _shown_lock:
        current = _shown.get(model)
    if current is None or current.closed or not current.timer_alive:
        current = model.dashboard()
        with _shown_lock:
            _shown[model] = current
    show(current)


def follow(session: Any, **options: Any) -> Any:
    """The console progress bar of ``session`` (``session.run(progress=True)``)."""
    return ui().follow(session, **options)


def warm() -> None:
    """In a Jupyter kernel, import the dashboard's modules (ipywidgets, anywidget, ``workbench.ui.dashboard``)
    in a background thread, once per kernel, when workbench is imported or the first session is made.

    Showing a session then only builds its widgets: the import runs beside the agent's construction (time
    spent in torch, without the GIL) and does not compete with a run that starts in the same cell as the
    dashboard (``session.start(...); session``). Outside a kernel (scripts, the command line, tests) nothing
    is imported. A failed import is left for showing the session to report (it names the extra).
    """
    if _warming or "ipykernel" not in sys.modules or "workbench.ui.dashboard" in sys.modules:
        return
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if getattr(shell, "kernel", None) is None:
        return
    thread = threading.Thread(target=_import_views, name="workbench-import-views", daemon=True)
    _warming.append(thread)
    thread.start()


def _import_views() -> None:
    try:
        ui().Dashboard  # noqa: B018 (the name is loaded on first use, with ipywidgets and anywidget)
    except Exception:
        pass  # showing a session imports it again and says what is missing
