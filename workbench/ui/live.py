"""A plotly ``FigureWidget`` whose browser views always converge to the figure's Python state (used by the
sweep view; the session dashboard draws with the lighter ``live_plot.LivePlot``).

plotly 6's FigureWidget runs on anywidget, and three of its behaviours lose data in a notebook:

* The comm opens before plotly fills ``_widget_data``, ``_widget_layout`` and ``_view_count``, so
  those arrive as follow-up updates. anywidget holds every update to a model until the widget's
  JavaScript (a 5 MB bundle, imported afresh for every figure) has loaded, and drops them all,
  for the model's whole life, when that takes more than 2 s (a busy machine). Such a "deaf"
  figure draws an empty, untitled plot and never changes.
* The browser keeps the figure's state (``_widget_data``) as it was when the figure was built:
  plotly sends later edits as ``_py2js_*`` deltas that only the views present at that moment
  apply. A view created later (a dashboard shown again, a cell output re-rendered) starts from
  the stale state.
* Plotly skips edits that set a value it already holds, so re-assigning the data to reach a new
  view sends nothing.

:class:`LiveFigure` opens its comm only once its state is complete (a deaf figure still draws
the data it was built with), pushes its full current data to the views whenever a new view
appears, and records which edits the views acknowledged (each view answers an edit with a
``_js2py_traceDeltas`` message carrying the edit's id), so its owner can see a figure whose views
stopped applying edits (:meth:`LiveFigure.stalled`) and replace it with a fresh one.
"""

from __future__ import annotations

import collections
import copy
import threading
import time
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

__all__ = ["LiveFigure"]

_MAX_PENDING = 64  # edits remembered while waiting for an acknowledgement; the oldest is what counts


class LiveFigure(go.FigureWidget):
    """A ``go.FigureWidget`` that brings every browser view up to date (see the module docstring).

    Parameters are those of ``go.FigureWidget``, plus:
        on_view: called (on the kernel's thread, with the figure) after a new view appeared and
            was sent the full data.
        classes: CSS classes of the widget, set before the comm opens (``add_class`` afterwards is
            an update that a deaf figure never receives).

    Use :attr:`lock` around edits made from another thread than the kernel's.
    """

    def __init__(
        self,
        *args: Any,
        on_view: Callable[[LiveFigure], None] | None = None,
        classes: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        self._wb_ready = False  # holds the comm closed until the state below is complete
        super().__init__(*args, **kwargs)
        self._lock = threading.RLock()
        self._on_view = on_view
        self._views = 0
        self._pending: collections.deque[tuple[int, float]] = collections.deque(maxlen=_MAX_PENDING)
        self._acked = 0
        self._acks = 0
        # _view_count = 0 (not None) makes the browser count views; plotly sets it too, but after
        # the comm opened, and a deaf figure never receives that update.
        self._view_count = 0
        self._widget_layout = copy.deepcopy(self._layout_obj._props)
        self._widget_data = copy.deepcopy(self._data)
        self._dom_classes = tuple(classes)
        self.observe(self._on_view_count, names="_view_count")
        self.observe(self._on_trace_deltas, names="_js2py_traceDeltas")
        self._wb_ready = True
        self.open()

    def open(self) -> None:
        """Open the comm once the figure's full state is in place (ipywidgets calls this earlier)."""
        if getattr(self, "_wb_ready", True):
            super().open()

    @property
    def lock(self) -> threading.RLock:
        """Hold it around edits made from another thread than the kernel's (resends take it too)."""
        return self._lock

    @property
    def acks(self) -> int:
        """How many edits sent after the comm opened the views acknowledged (a deaf figure: none)."""
        return self._acks

    @property
    def views(self) -> int:
        """How many browser views the figure has now (as the browser last reported)."""
        return self._views

    # -- edits and their acknowledgements -------------------------------------------------------

    def sent(self) -> None:
        """Note the edit just sent (call after a ``batch_update``), to wait for the views to apply it."""
        edit = self._last_trace_edit_id
        if edit > self._acked and (not self._pending or self._pending[-1][0] != edit):
            self._pending.append((edit, time.monotonic()))

    def _on_trace_deltas(self, change: dict[str, Any]) -> None:
        msg = change["new"]
        if not msg:
            return  # plotly resets the trait to None after handling it
        edit = int(msg.get("trace_edit_id") or 0)
        if edit > self._acked:
            # Only an answer to an edit sent after the comm opened proves the view hears the kernel:
            # a deaf view answers its first draw too, with the edit id it was built with.
            self._acks += 1
            self._acked = edit
        while self._pending and self._pending[0][0] <= self._acked:
            self._pending.popleft()

    def stalled(self, after_s: float, now: float | None = None) -> bool:
        """True when a view exists and an edit has gone unacknowledged for ``after_s`` seconds."""
        if self._views <= 0 or not self._pending:
            return False
        now = time.monotonic() if now is None else now
        return now - self._pending[0][1] > after_s

    def awaiting(self) -> bool:
        """True while a view exists and some edit sent to it is not acknowledged yet."""
        return self._views > 0 and bool(self._pending)

    # -- new views ------------------------------------------------------------------------------

    def _on_view_count(self, change: dict[str, Any]) -> None:
        new = change["new"] or 0
        grew = new > self._views
        self._views = new
        if grew:
            self.resend()
            if self._on_view is not None:
                self._on_view(self)

    def resend(self) -> None:
        """Send the full current data and layout to every view, even where nothing changed.

        A new view starts from the figure's state as it was built; plotly's own edits would skip
        values it already holds, so this sends one ``Plotly.update`` with every trace's properties.
        """
        with self._lock:
            keys = sorted({key for trace in self._data for key in trace if key not in ("type", "uid")})
            restyle = {key: [trace.get(key) for trace in self._data] for key in keys}
            self._pending.clear()  # older edits may never reach a view that did not exist yet
            self._send_update_msg(restyle, dict(self._layout_obj._props), list(range(len(self._data))))
            self.sent()
