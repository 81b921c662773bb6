"""The page's messages to a live view's widgets reach the kernel, whichever subshell last wrote to them.

ipykernel 7 routes a message from the page to a widget to the *subshell that last sent on that widget*, so
that a cell waiting for a widget's reply in a subshell gets it. A live view writes to its widgets from a
background thread whose context still names the subshell of the cell that created it; JupyterLab 4 opens
subshells for short jobs and deletes them, and from then on every message from the page to the widget (a
plot's hello and acks, a button's click) is answered "Unknown subshell_id" and dropped: the page shows empty
plots after a reload and the view never learns that a page listens. No cell ever waits on a live view's
widget, so its messages are best handled where the page sent them, which is what :func:`route_as_sent` sets.

The routing hook is ipykernel's own (``BaseComm._reply_subshell_for``, a private name): where a kernel has
no such hook (ipykernel before 7, another kernel) nothing is set and nothing is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ipywidgets as widgets

__all__ = ["route_as_sent", "route_tree_as_sent"]


def _as_sent(_data: Any, default: Any) -> Any:
    """The subshell the page addressed (``default``), never the one that last wrote to the widget."""
    return default


def route_as_sent(widget: widgets.Widget) -> None:
    """Handle the page's messages to ``widget`` on the subshell the page sent them to (see the module)."""
    comm = getattr(widget, "comm", None)
    if comm is not None and hasattr(comm, "_reply_subshell_for"):
        comm._reply_subshell_for = _as_sent


def _tree(widget: widgets.Widget) -> Iterator[widgets.Widget]:
    yield widget
    if isinstance(widget, widgets.Box):
        for child in widget.children:
            yield from _tree(child)


def route_tree_as_sent(root: widgets.Widget) -> None:
    """:func:`route_as_sent` for ``root`` and every widget in its boxes, however deep."""
    for widget in _tree(root):
        route_as_sent(widget)
