"""One live view of a run, whatever runs: the session dashboard, the sweep view and the population view are
each a :class:`RunView`.

A view has one button row (Start/Pause/Resume/Stop, and Save where the run can save) whose buttons call the
run's public commands, a status line, a message line for the last command's error, and a refresh timer, a
thread the view owns that redraws while the run is active and, once it ended, until the page has the final
draw. Its plots are all :class:`~workbench.ui.live_plot.LivePlot`: the view rebuilds a plot a page opened
but never answered (anywidget's 2 s start-up limit), and after a page opens one of its widgets (a reload, the
notebook opened again) it sends the layout of its boxes again for a while, so a change the page missed while
it was rebuilding its widgets from the kernel still reaches it (see :meth:`RunView._resync`).

A view subclasses :class:`RunView`, builds its widgets, calls :meth:`RunView._lay_out` and implements
:meth:`RunView._draw`; the run it shows needs only ``status`` and its commands.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import ipywidgets as widgets

from .comm_route import route_tree_as_sent
from .heartbeat import Heartbeat
from .live_plot import LivePlot
from .view_model import ACTIVE, ENDED

__all__ = ["ACTIVE", "ENDED", "RunView", "error_html", "fmt", "line_trace", "plot_layout"]

_BUTTONS = {
    "start": ("play", "start the run"),
    "pause": ("pause", "pause the run"),
    "resume": ("play", "resume the run"),
    "stop": ("stop", "stop the run"),
    "save": ("save", "save the run"),
}
_ERROR_COLOR = "#cf222e"
_WATCH_S = 120.0  # after a run ends, how long the timer waits for the page to acknowledge the last draw
_MAX_WAIT_S = 4.0  # the slowest refresh rate a slow page backs a view off to
_DEAF_S = 6.0  # a page that opened a widget but answered nothing for this long gets a fresh widget
_MAX_REPLACEMENTS = 5  # rebuilds in a row without any answer; then stop trying
_RESYNC_AFTER_S = 1.5  # after a page opened a widget of the view, when the boxes' children are sent again (once)


def fmt(value: Any) -> str:
    """A table cell: floats to four significant digits, anything else as escaped text."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def error_html(text: str) -> str:
    """``text`` as an error in a view's message line."""
    return f"<span style='color:{_ERROR_COLOR}' class='wb-error'>{html.escape(text)}</span>"


def plot_layout(
    title: str, *, x_title: str | None = None, y_title: str | None = None, margin_left: int = 55
) -> dict[str, Any]:
    """The plotly layout of a run view's plot: a title, white with a light grid, the user's zoom kept."""
    grid = "#ebf0f8"
    return {
        "title": {"text": title, "x": 0.02, "font": {"size": 14}},
        "margin": {"l": margin_left, "r": 15, "t": 35, "b": 40},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "showlegend": False,
        "xaxis": {"title": {"text": x_title or ""}, "gridcolor": grid, "zeroline": False},
        "yaxis": {"title": {"text": y_title or ""}, "gridcolor": grid, "zeroline": False},
        "hovermode": "closest",
        "hoverlabel": {"namelength": -1},
        "uirevision": title,  # keep the user's zoom across redraws
    }


def line_trace(name: str, color: str | None, *, bold: bool = False, faint: float = 0.6, **extra: Any) -> dict[str, Any]:
    """A line's plotly trace properties: bold and opaque for the best, thin and faint (``faint``) otherwise."""
    return {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "line": {"width": 3 if bold else 1.5, "color": color},
        "opacity": 1.0 if bold else faint,
        **extra,
    }


class RunView(widgets.VBox):
    """The controls, refresh timer and plot upkeep of a live view of a run (``run``).

    The timer runs while the run's status is one of :attr:`LIVE` (and, once it is not, until the page has
    the final draw).

    Parameters:
        run: what the view shows and commands (``status``, ``start``, ``pause``, ``resume``, ``stop``).
        interval: seconds between refreshes while the run is active.
        thread_name: the refresh thread's name (seen in thread dumps).
        buttons: the buttons of the row, in order (a subset of start, pause, resume, stop, save).
    """

    LIVE: tuple[str, ...] = ACTIVE
    """The statuses in which the run can change by itself, so the timer keeps redrawing."""

    def __init__(
        self,
        run: Any,
        interval: float,
        thread_name: str,
        buttons: tuple[str, ...] = ("start", "pause", "resume", "stop"),
    ) -> None:
        self._run = run
        self.interval = float(interval)
        self.refresh_count = 0
        self.replaced_count = 0  # rebuilds of widgets a busy page never started (anywidget's 2 s limit)
        self._thread_name = thread_name
        self._lock = threading.RLock()  # refreshes come from the timer and from button clicks
        self._closed = threading.Event()
        self._shown = threading.Event()  # set once the view was displayed (or closed)
        self._timer: threading.Thread | None = None
        self._deaf_streak = 0
        self._reopened = 0  # hellos beyond each plot's first, at the last check (a new page: a reload)
        self._resync_at: float | None = None  # when to send the boxes' children again (a page opened a widget)
        self._page_opened_at: float | None = None  # when a page last opened the heartbeat (a load of the page)
        self.heartbeat: Heartbeat | None = None
        self._plots: dict[str, LivePlot] = {}  # the plots by name (a view keeps them here or says otherwise)
        self.buttons: dict[str, widgets.Button] = {}
        for name in buttons:
            icon, tip = _BUTTONS[name]
            button = widgets.Button(description=name.capitalize(), icon=icon, tooltip=tip, layout={"width": "92px"})
            button.add_class(f"wb-{name}")
            button.on_click(getattr(self, f"_on_{name}"))
            self.buttons[name] = button
        self.status = widgets.HTML()
        self.message = widgets.HTML()
        self.message.add_class("wb-message")

    def _lay_out(self, children: list[widgets.Widget], css_class: str) -> None:
        """Build the view's box from ``children`` (the subclass places the button row among them)."""
        super().__init__(children=children)
        self.add_class(css_class)
        route_tree_as_sent(self)

    def _show_run(self, below: widgets.Widget, css_class: str) -> None:
        """Lay out the buttons and status, the message line, the plots side by side and ``below``; draw the
        view once and start the timer (the sweep's and the population's layout)."""
        self._lay_out(
            [
                widgets.HBox([*self.buttons.values(), self.status]),
                self.message,
                widgets.HBox(list(self._plots.values()), layout={"width": "100%"}),
                below,
            ],
            css_class,
        )
        self.refresh()
        self._ensure_timer()

    # -- the run's commands, from the buttons ----------------------------------------------------

    def _start(self) -> None:
        self._run.start()

    def _stop(self) -> None:
        self._run.stop(timeout=0)

    def _on_start(self, _button: widgets.Button | None = None) -> None:
        self._command(self._start)

    def _on_pause(self, _button: widgets.Button | None = None) -> None:
        self._command(self._run.pause)

    def _on_resume(self, _button: widgets.Button | None = None) -> None:
        self._command(self._run.resume)

    def _on_stop(self, _button: widgets.Button | None = None) -> None:
        self._command(self._stop)

    def _on_save(self, _button: widgets.Button | None = None) -> None:
        raise NotImplementedError  # a view with a Save button says where it saves

    def _command(self, action: Callable[[], Any], done: str = "") -> None:
        """Run a button's command; its error, if any, goes to the message line (the kernel's log stays quiet)."""
        try:
            action()
        except Exception as exc:
            self.message.value = error_html(f"{type(exc).__name__}: {exc}")
        else:
            self.message.value = done
        self._ensure_timer()
        self.refresh()

    # -- drawing --------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw everything from the run's current state (any thread)."""
        if self._closed.is_set():
            return
        with self._lock:
            self._draw()
            self._resync()
            route_tree_as_sent(self)  # widgets a draw added (an edit panel, a video) included
            self.refresh_count += 1

    def _draw(self) -> None:
        """Draw the run's current state (called under the view's lock)."""
        raise NotImplementedError

    def _draw_status_line(self, text: str) -> None:
        """Put ``text`` (HTML) in the status line, sending nothing when it is already there."""
        if text != self.status.value:
            self.status.value = text

    def _draw_controls(self, enabled: dict[str, bool]) -> None:
        """Each button enabled only where ``enabled`` says its command applies now."""
        for name, button in self.buttons.items():
            on = enabled.get(name, True)
            if button.disabled == on:
                button.disabled = not on

    def _run_buttons(self, startable: bool = True) -> dict[str, bool]:
        """Which commands apply to the run's status now (Start also only when ``startable``)."""
        status = self._run.status
        return {
            "start": startable and status not in ACTIVE,
            "pause": status == "running",
            "resume": status == "paused",
            "stop": status in ACTIVE,
        }

    # -- the plots ------------------------------------------------------------------------------

    def _live_plots(self) -> dict[str, LivePlot]:
        """The view's plots by name (those the page may show)."""
        return dict(self._plots)

    def _rebuild_plot(self, name: str) -> LivePlot:
        """A fresh plot for ``name``, in the view's records (the box it sits in is updated by the caller)."""
        raise NotImplementedError

    def _on_page(self, _widget: Any = None) -> None:
        """A page opened one of the view's widgets (a reload, the notebook opened again): wake the timer, and
        send the boxes' layout again a moment later, once (see :meth:`_resync`)."""
        if self._resync_at is None:
            self._resync_at = time.monotonic() + _RESYNC_AFTER_S
        if isinstance(_widget, Heartbeat):
            self._page_opened_at = time.monotonic()
        self._ensure_timer(watch=True)

    def _boxes(self, widget: widgets.Widget | None = None) -> Iterator[widgets.Box]:
        """Every box of the view, itself included (the widgets whose children can change)."""
        widget = self if widget is None else widget
        if isinstance(widget, widgets.Box):
            yield widget
            for child in widget.children:
                yield from self._boxes(child)

    def _resync(self) -> None:
        """A moment after a page opened a widget of the view, send every box's children again, once.

        A page that loads while the kernel runs (a reload, a return from another page) rebuilds its widgets
        from the kernel's state in one batch: it asks every model for its state, then builds them all. A
        change the kernel sends in between, such as a plot rebuilt into a box's children, reaches no model
        yet and is lost: the page keeps the box as it was, showing a plot the kernel closed, and the plots
        stay empty until the next load. Sending the children again once the page is there, a list of model
        ids, puts the current plots in place.
        """
        if self._resync_at is None or time.monotonic() < self._resync_at:
            return
        self._resync_at = None
        for box in self._boxes():
            box.send_state("children")

    @property
    def wait_s(self) -> float:
        """Seconds to the next refresh: ``interval``, longer while the page acknowledges slowly."""
        trips = [p.round_trip for p in self._live_plots().values() if p.round_trip is not None]
        slowest = max(trips, default=0.0)
        return min(max(self.interval, 2.0 * slowest), _MAX_WAIT_S)

    def _settled(self) -> bool:
        """True when every plot's page has the final draw (or no page is there to get it)."""
        return all(not p.wants_reset and p.ready() for p in self._live_plots().values())

    def _replace_deaf(self) -> None:
        """Rebuild the widgets a page opened but never answered (anywidget's 2 s start-up limit).

        The wait doubles after each rebuild that got no answer either, and at most ``_MAX_REPLACEMENTS`` are
        tried in a row; a fresh model starts with the current data. A new page (a plot's model built again:
        a reload) starts the count afresh: the waits earned by the page before it say nothing about this
        one, and a reload is when a busy page is likeliest.
        """
        now = time.monotonic()
        plots = self._live_plots()
        reopened = sum(max(p.hellos - 1, 0) for p in plots.values())
        if reopened > self._reopened:
            self._deaf_streak = 0
        self._reopened = reopened
        after = _DEAF_S * 2 ** min(self._deaf_streak, 4)
        if self._deaf_streak >= _MAX_REPLACEMENTS:
            return
        replaced = False
        if self.heartbeat is not None and self.heartbeat.deaf(after, now):
            old_beat = self.heartbeat
            self.heartbeat = Heartbeat(beat=old_beat.beat, active=old_beat.active)
            self.heartbeat.add_class("wb-heartbeat-box")
            self.heartbeat.on_page = self._on_page
            self._swap(old_beat, self.heartbeat)
            old_beat.close()
            replaced = True
        shown = {id(child) for box in self._boxes() for child in box.children}
        opened = self._page_opened_at
        for name, plot in plots.items():
            # A page that loaded (its heartbeat said hello) but from which a plot older than it heard nothing
            # since: the plot's hello was lost while the page rebuilt its widgets, and without one it would
            # never be judged deaf (seen as empty plots under a live heartbeat after a return to the page).
            unheard = (
                opened is not None
                and id(plot) in shown
                and plot.created_at < opened
                and now - opened > after
                and (plot.heard_at is None or plot.heard_at < opened)
            )
            if plot.deaf(after, now) or unheard:
                fresh = self._rebuild_plot(name)
                self._swap(plot, fresh)
                plot.close()
                replaced = True
        if replaced:
            self.replaced_count += 1
            self._deaf_streak += 1
        elif any(p.acks for p in plots.values()):
            self._deaf_streak = 0

    def _swap(self, old: widgets.Widget, new: widgets.Widget) -> None:
        """Put ``new`` where ``old`` is, in whichever box of the view holds it."""
        for box in self._boxes():
            if any(child is old for child in box.children):
                box.children = tuple(new if child is old else child for child in box.children)
        route_tree_as_sent(new)

    def _new_plot(self, traces: list[dict[str, Any]], layout: dict[str, Any], **options: Any) -> LivePlot:
        """A :class:`LivePlot` whose page wakes the view when it opens it."""
        plot = LivePlot(traces, layout, **options)
        plot.on_page = self._on_page
        return plot

    # -- the timer ------------------------------------------------------------------------------

    @property
    def timer_alive(self) -> bool:
        """True while the refresh thread runs (it ends once an ended run's last state is drawn)."""
        return self._timer is not None and self._timer.is_alive()

    def _ensure_timer(self, watch: bool = False) -> None:
        """Start the refresh thread if it is not running; ``watch``: also after the run ended."""
        with self._lock:
            if self._closed.is_set() or self.timer_alive:
                return
            if self._run.status not in self.LIVE and not watch:
                return  # nothing will change until a button starts it again
            self._timer = threading.Thread(target=self._tick, name=self._thread_name, daemon=True)
            self._timer.start()

    def _before_ticks(self) -> None:
        """What the timer does before its first refresh (nothing; the dashboard lets its first paint land)."""

    def _timer_refresh(self) -> None:
        """One refresh of the timer (the dashboard's draws its plots at most once a second)."""
        self.refresh()

    def _ended(self) -> None:
        """Called once by the timer when the run ended and the page has its final draw."""

    def _tick(self) -> None:
        ended_at = None
        first = True
        self._before_ticks()
        while first or not self._closed.wait(self.wait_s):
            first = False
            # Read the status before drawing: once it says the run ended, the run has recorded its
            # last point, so this draw is the final state and the timer may stop.
            status = self._run.status
            try:
                self._timer_refresh()
            except Exception as exc:  # a broken refresh must not kill the timer silently
                self.message.value = error_html(f"refresh failed: {exc!r}")
            if status in self.LIVE:
                ended_at = None
                continue
            with self._lock:
                # Decide under the lock _ensure_timer takes: a Start clicked meanwhile either sees this
                # timer gone and starts another, or this timer sees the run going on.
                if self._run.status in self.LIVE:
                    ended_at = None
                    continue
                ended_at = ended_at or time.monotonic()
                if self._settled() or time.monotonic() - ended_at > _WATCH_S:
                    try:
                        self._ended()
                    except Exception as exc:  # a bonus: never lose the timer's end
                        self.message.value = error_html(f"could not finish the view: {exc!r}")
                    self._timer = None
                    if self.heartbeat is not None:
                        self.heartbeat.active = False
                    return

    # -- closing --------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop the refresh timer and close every widget of the view."""
        closed = getattr(self, "_closed", None)  # ipywidgets also calls close() on half-built widgets
        if closed is not None:
            closed.set()
            self._shown.set()
        timer = getattr(self, "_timer", None)
        if timer is not None and timer is not threading.current_thread():
            timer.join(timeout=5)
        tree: list[widgets.Widget] = []

        def walk(widget: Any) -> None:
            for child in getattr(widget, "children", ()):
                walk(child)
                tree.append(child)

        walk(self)
        for value in [*tree, *getattr(self, "buttons", {}).values(), *vars(self).values()]:
            if isinstance(value, widgets.Widget) and value is not self:
                value.close()
        super().close()
