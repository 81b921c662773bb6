"""What the sweep view and the population view share: a run's Start/Pause/Resume/Stop buttons and status
line, a message line for the last command's error, and the refresh timer, a thread the view owns that redraws
while the run is active and ends after drawing the state the run ended in.

A view subclasses :class:`RunView`, builds its own widgets, and implements :meth:`RunView._draw`; the run it
shows needs only ``status`` and the ``start``/``pause``/``resume``/``stop(timeout=...)`` commands.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import ipywidgets as widgets

__all__ = ["ACTIVE", "RunView", "fmt"]

ACTIVE = ("running", "paused")
"""The statuses in which a run can change, so its view keeps redrawing."""


def fmt(value: Any) -> str:
    """A table cell: floats to four significant digits, anything else as escaped text."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


class RunView(widgets.VBox):
    """The controls and refresh timer of a live view of a sweep or a population (``run``).

    Parameters:
        run: what the view shows and commands.
        interval: seconds between refreshes while the run is active.
        thread_name: the refresh thread's name (seen in thread dumps).
    """

    def __init__(self, run: Any, interval: float, thread_name: str) -> None:
        self._run = run
        self.interval = float(interval)
        self.refresh_count = 0
        self._thread_name = thread_name
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._timer: threading.Thread | None = None
        self.buttons = {
            name: widgets.Button(description=name, layout=widgets.Layout(width="90px"))
            for name in ("Start", "Pause", "Resume", "Stop")
        }
        self.buttons["Start"].on_click(lambda _b: self._command(run.start))
        self.buttons["Pause"].on_click(lambda _b: self._command(run.pause))
        self.buttons["Resume"].on_click(lambda _b: self._command(run.resume))
        self.buttons["Stop"].on_click(lambda _b: self._command(lambda: run.stop(timeout=0)))
        self.status = widgets.HTML()
        self.message = widgets.HTML()

    def _show(self, children: list[widgets.Widget], css_class: str) -> None:
        """Lay the view out (the controls row and the message line first), draw it once and start the timer."""
        super().__init__(children=[widgets.HBox([*self.buttons.values(), self.status]), self.message, *children])
        self.add_class(css_class)
        self.refresh()
        self._ensure_timer()

    # -- drawing --------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw everything from the run's current state (any thread)."""
        if self._closed.is_set():
            return
        with self._lock:
            self._draw()
            self.refresh_count += 1

    def _draw(self) -> None:
        """Draw the run's current state (called under the view's lock)."""
        raise NotImplementedError

    def _draw_controls(self, status_html: str, startable: bool = True) -> None:
        """The status line, and each button enabled only where its command applies to ``run.status``."""
        status = self._run.status
        if status_html != self.status.value:
            self.status.value = status_html
        enabled = {
            "Start": startable and status not in ACTIVE,
            "Pause": status == "running",
            "Resume": status == "paused",
            "Stop": status in ACTIVE,
        }
        for name, button in self.buttons.items():
            if button.disabled == enabled[name]:
                button.disabled = not enabled[name]

    # -- the timer ------------------------------------------------------------------------------

    @property
    def timer_alive(self) -> bool:
        """True while the refresh thread runs (it ends after drawing a run that ended)."""
        return self._timer is not None and self._timer.is_alive()

    def _ensure_timer(self) -> None:
        with self._lock:
            if self._closed.is_set() or self.timer_alive or self._run.status not in ACTIVE:
                return
            self._timer = threading.Thread(target=self._tick, name=self._thread_name, daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        while not self._closed.wait(self.interval):
            status = self._run.status  # read first: once ended, this draw is the final state
            try:
                self.refresh()
            except Exception as exc:  # keep the timer alive, say what went wrong
                self.message.value = f"<span style='color:#cf222e'>refresh failed: {html.escape(repr(exc))}</span>"
            if status not in ACTIVE:
                with self._lock:
                    if self._run.status not in ACTIVE:
                        self._timer = None
                        return

    def _command(self, action: Any) -> None:
        """Run a button's command; its error, if any, goes to the message line (the kernel's log stays quiet)."""
        try:
            action()
        except Exception as exc:
            self.message.value = f"<span style='color:#cf222e'>{html.escape(f'{type(exc).__name__}: {exc}')}</span>"
        else:
            self.message.value = ""
        self._ensure_timer()
        self.refresh()

    # -- closing --------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed.is_set()

    def _stop_timer(self) -> None:
        closed = getattr(self, "_closed", None)
        if closed is not None:
            closed.set()
        timer = getattr(self, "_timer", None)
        if timer is not None and timer is not threading.current_thread():
            timer.join(timeout=5)

    def close(self) -> None:
        """Stop the refresh timer and close every widget of the view."""
        self._stop_timer()
        for value in [*getattr(self, "buttons", {}).values(), *vars(self).values()]:
            if isinstance(value, widgets.Widget) and value is not self:
                value.close()
        super().close()
