"""The live notebook dashboard of a :class:`~workbench.Session`: it draws the view-model, nothing more.

Every refresh takes a :func:`~workbench.ui.view_model.snapshot` of the session (status, counters,
series already downsampled, or only their new points) and draws it: the status line with its
heartbeat, the progress bar, the buttons (which call exactly the session's public commands) and one
:class:`~workbench.ui.live_plot.LivePlot` per chosen signal. Refreshes run on a timer thread the
dashboard owns, never in the training thread, and they slow down when the page acknowledges slowly.
The first paint (status, progress, buttons) imports neither plotly nor nbformat; the plots fill in
on the first tick. When the run ends, the dashboard's output keeps an SVG picture of its plots for
saved notebooks, nbviewer and GitHub.
"""

from __future__ import annotations

import datetime
import html
import time
import traceback
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import numpy as np

from ..run.registry import sessions as live_sessions
from .heartbeat import Heartbeat
from .live_plot import LivePlot
from .picture import svg_picture
from .plots import MAX_POINTS, X_AXES
from .run_view import RunView, error_html
from .video_panel import VideoPanel
from .view_model import (
    ACTIVE,
    COMPANIONS,
    DashboardView,
    default_signals,
    event_markers,
    series_view,
    snapshot,
)

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["DEFAULT_SIGNALS", "Dashboard"]

DEFAULT_SIGNALS = ("episode_reward", "loss")
"""The plots of an algorithm the dashboard knows nothing about (see ``Agent.default_plots``)."""

_STATUS_COLORS = {
    "idle": "#555",
    "running": "#1a7f37",
    "paused": "#b35900",
    "stopped": "#555",
    "finished": "#0550ae",
    "failed": "#cf222e",
}
_BAR_STYLES = {"running": "info", "paused": "warning", "finished": "success", "failed": "danger"}
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
_PLOT_EVERY_S = 1.0  # plots redraw at most this often while training (the status line every interval)
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


_RECONNECT_TEXT = (
    "This dashboard lives in its kernel: if it reads 'model not found' (the notebook was reopened or the "
    "kernel restarted), re-run this cell for a live one."
)
_RECONNECT_HTML = (
    f"<div class='wb-reconnect-hint' style='color:#b35900;font-family:monospace;font-size:12px'>"
    f"{html.escape(_RECONNECT_TEXT)}</div>"
)
# In the status line of every live dashboard: hides the hint above a dashboard that rendered.
_HIDE_HINT = "<style>.jp-OutputArea:has(.wb-dashboard) .wb-reconnect-hint { display: none; }</style>"


def _trace_specs(series: tuple[str, ...], smoothing: int, x_title: str) -> list[dict[str, Any]]:
    specs = []
    for i, label in enumerate(series):
        color = _PALETTE[i % len(_PALETTE)]
        hover = f"<b>{label}</b><br>{x_title}: %{{x:,.6~g}}<br>value: %{{y:,.5~g}}<extra></extra>"
        specs.append(
            {
                "type": "scatter",
                "mode": "lines+markers" if label == "eval_reward" else "lines",
                "name": label,
                "line": {"color": color, "width": 1},
                "opacity": 0.3 if smoothing > 1 else 1.0,
                "hovertemplate": hover,
            }
        )
        specs.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{label} (smoothed over {smoothing})",
                "line": {"color": color, "width": 2},
                "showlegend": False,
                "visible": smoothing > 1,
                "hovertemplate": hover.replace("<b>" + label + "</b>", f"<b>{label}</b> (smoothed over {smoothing})"),
            }
        )
    return specs


def _marker_shapes(markers: list[tuple[float, str]]) -> list[dict[str, Any]]:
    """A dotted vertical line per live edit or env call, labelled at the top (plotly shapes)."""
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": x,
            "x1": x,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#8250df", "width": 1, "dash": "dot"},
            "label": {"text": label, "textposition": "end", "textangle": 0, "font": {"size": 9, "color": "#8250df"}},
        }
        for x, label in markers
    ]


def _layout(
    name: str, series: tuple[str, ...], x_axis: str, log_y: bool, markers: list[tuple[float, str]] = ()
) -> dict[str, Any]:
    grid = "#ebf0f8"
    return {
        "shapes": _marker_shapes(list(markers)),
        "title": {"text": name, "x": 0.02, "font": {"size": 14}},
        "height": 260,
        "margin": {"l": 60, "r": 15, "t": 35, "b": 40},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "showlegend": len(series) > 1,
        "legend": {"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"},
        "xaxis": {"title": {"text": X_AXES[x_axis]}, "gridcolor": grid, "zeroline": False},
        "yaxis": {"type": "log" if log_y else "linear", "gridcolor": grid, "zeroline": False},
        "hovermode": "closest",
        "hoverlabel": {"namelength": -1},
        "uirevision": name,  # keep the user's zoom across redraws
    }


class _Panel:
    """One plot: a :class:`LivePlot` with a raw and a smoothed trace per series, and what it was sent."""

    def __init__(self, name: str, series: tuple[str, ...], plot: LivePlot) -> None:
        self.name = name
        self.series = series
        self.plot = plot
        self.cursors: dict[str, tuple[int, int]] = {}  # per series: the view-model cursor sent up to
        self.markers: list[tuple[float, str]] = []  # the live edits and env calls its layout marks

    @property
    def fig(self) -> LivePlot:
        """The plot widget (the name the dashboard's tests and older code use)."""
        return self.plot


class Dashboard(RunView):
    """The live dashboard of a session: status, progress, control buttons and signal plots (a :class:`RunView`).

    Example::

        session.start(steps=50_000)
        session              # in a notebook, the last expression of a cell shows this dashboard
        dash = session.dashboard()
        dash.close()         # stop its timer and remove its widgets

    Parameters:
        session: the session to show.
        interval: seconds between refreshes, 0.25 to 1 (1 to 4 times a second); a page that
            acknowledges slowly backs this off, up to 4 s.
        signals: the signals plotted at first (default: those the algorithm records, e.g.
            ``episode_reward`` and ``loss`` for PPO, ``critic_loss`` and ``actor_loss`` for DDPG).
        smoothing: moving-average window in points (1: no smoothing).
        x_axis: ``"steps"`` (env steps), ``"episodes"`` or ``"time"`` (wall time).
        max_points: most points per trace drawn afresh (appends add to it until twice that).
        save_path: where the Save button writes; default ``runs/<algorithm>-<timestamp>``.
        steps: how many steps the Start button trains for; default the session's last budget or 10,000.
        log_y: start with logarithmic y axes.
    """

    def __init__(
        self,
        session: Session,
        *,
        interval: float = 0.5,
        signals: tuple[str, ...] | list[str] | None = None,
        smoothing: int = 1,
        x_axis: str = "steps",
        max_points: int = MAX_POINTS,
        save_path: str | None = None,
        steps: int | None = None,
        log_y: bool = False,
    ) -> None:
        from ..session import Session

        if not isinstance(session, Session):
            raise TypeError(f"Dashboard needs a wb.Session, got {type(session).__name__}")
        if not 0.25 <= interval <= 1.0:
            raise ValueError(f"interval must be between 0.25 and 1 second (1 to 4 refreshes a second), got {interval}")
        if x_axis not in X_AXES:
            raise ValueError(f"unknown x_axis {x_axis!r}; choose one of {', '.join(X_AXES)}")
        if isinstance(signals, str):
            signals = (signals,)
        league = session.run_state.selfplay.league if session.run_state.selfplay is not None else None
        if signals is None:
            signals = default_signals(session.agent, session.signals.names())
            if league is not None:  # self-play: the learner's Elo rating first
                signals = ("rating", *(s for s in signals if s != "rating"))
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {max_points}")
        if not isinstance(smoothing, int) or smoothing < 1:
            raise ValueError(f"smoothing must be a window of at least 1 point, got {smoothing!r}")
        super().__init__(session, interval, "workbench-dashboard", ("start", "pause", "resume", "stop", "save"))
        self.session = session
        self.max_points = int(max_points)
        self._panels: dict[str, _Panel] = {}
        self._sps: tuple[float, int] | None = None  # (clock, steps) at the last refresh, for steps/s
        self._rate: float | None = None
        self._display_id = f"workbench-dashboard-{uuid.uuid4().hex}"
        self._displayed = False
        self._picture_for: tuple[Any, ...] | None = None  # the run state the picture in the output shows
        self._known_signals: frozenset[str] = frozenset(session.signals.names())
        self.skipped_count = 0  # plot updates held back because the page had not acknowledged the last
        self._ticking = False
        self._plotted_at = 0.0
        self.view: DashboardView | None = None  # the view-model drawn last
        self._markers: list[tuple[float, str]] = []  # live edits and env calls marked on the plots
        self._events_key: tuple[int, str, int] | None = None
        self.picture: str | None = None  # the SVG picture left in the output when the run ended

        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        budget = steps or (session.target_steps if session.target_steps else 10_000)

        # The status text is a plain HTML widget (it paints before anywidget's code has loaded on the
        # page); the heartbeat and the plots, anywidgets, join on the timer's first tick.
        self.status_line = self.status
        self.status_line.add_class("wb-status")
        self.heartbeat = Heartbeat()
        self.heartbeat.add_class("wb-heartbeat-box")
        self.heartbeat.on_page = self._on_page
        self.status_row = widgets.HBox([self.status_line], layout={"align_items": "baseline", "flex_flow": "row wrap"})
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout={"width": "auto"})
        self.progress.add_class("wb-progress")
        for name, tip in (
            ("start", "train for the number of steps at the right"),
            ("pause", "session.pause()"),
            ("resume", "session.resume()"),
            ("stop", "session.stop()"),
            ("save", "session.save(path)"),
        ):
            self.buttons[name].tooltip = tip
        self.steps_box = widgets.BoundedIntText(
            value=int(budget),
            min=1,
            max=10**12,
            description="steps",
            layout={"width": "190px"},
            style={"description_width": "40px"},
        )
        self.save_path = widgets.Text(
            value=save_path or f"runs/{session.agent.algorithm.lower()}-{stamp}",
            description="save to",
            layout={"width": "300px"},
            style={"description_width": "50px"},
        )
        self.traceback = widgets.HTML()
        self.error_box = widgets.Accordion(children=[self.traceback], titles=("Traceback",))
        self.error_box.selected_index = None
        self.error_box.layout.display = "none"
        self.error_box.add_class("wb-traceback")

        chosen = [s for s in signals if isinstance(s, str)]
        self.signal_select = widgets.SelectMultiple(
            options=self._signal_options(chosen),
            value=tuple(chosen),
            rows=5,
            description="signals",
            layout={"width": "260px"},
            style={"description_width": "50px"},
        )
        self.signal_select.add_class("wb-signals")
        self.smoothing = widgets.IntSlider(
            value=smoothing,
            min=1,
            max=200,
            description="smoothing",
            continuous_update=False,
            layout={"width": "300px"},
            style={"description_width": "70px"},
        )
        self.x_axis = widgets.ToggleButtons(
            options=[("env steps", "steps"), ("episodes", "episodes"), ("wall time", "time")],
            value=x_axis,
            style={"button_width": "90px"},
        )
        self.log_scale = widgets.ToggleButton(
            value=bool(log_y),
            description="log y",
            tooltip="logarithmic y axes",
            icon="signal",
            layout={"width": "90px"},
        )
        self.log_scale.add_class("wb-log-scale")
        self.plots = widgets.Box(layout={"display": "flex", "flex_flow": "row wrap", "width": "100%"})
        self.plots.add_class("wb-plots")
        self.league = league
        self.league_table = widgets.HTML()  # self-play: the win-rate table against the pool
        self.league_table.add_class("wb-league")
        if league is None:
            self.league_table.layout.display = "none"
        self.video_panel = VideoPanel(session)  # the latest evaluation video beside the plots (session.videos)
        self.signal_select.observe(self._on_view_change, names="value")
        self.smoothing.observe(self._on_view_change, names="value")
        self.x_axis.observe(self._on_view_change, names="value")
        self.log_scale.observe(self._on_log_scale, names="value")

        # The edit panel (live hyperparameters, session.set) is built when first asked for.
        self.edit_button = widgets.ToggleButton(
            value=False,
            description="Edit",
            icon="sliders",
            tooltip="edit hyperparameters while it trains",
            layout={"width": "92px"},
        )
        self.edit_button.add_class("wb-edit")
        self.edit_button.observe(self._on_edit, names="value")
        self.edit_panel: Any = None
        self.edit_box = widgets.VBox()
        controls = widgets.HBox(
            [*self.buttons.values(), self.edit_button, self.steps_box, self.save_path],
            layout={"flex_flow": "row wrap", "align_items": "center"},
        )
        view = widgets.HBox(
            [self.signal_select, widgets.VBox([self.smoothing, widgets.HBox([self.x_axis, self.log_scale])])],
            layout={"align_items": "flex-start", "flex_flow": "row wrap"},
        )
        self._lay_out(
            [
                self.status_row,
                self.progress,
                controls,
                self.message,
                self.edit_box,
                self.error_box,
                view,
                widgets.HBox([self.plots, self.video_panel], layout={"width": "100%", "align_items": "flex-start"}),
                self.league_table,
            ],
            "wb-dashboard",
        )
        # The first paint needs no plotly and no anywidget; the plots join on the timer's first tick.
        self._painted = False
        with self._lock:
            self._draw_status(self._status_view())
            self._set_panels()
        _subscribe_waker(self)
        self._ensure_timer(watch=True)

    # -- reading the session --------------------------------------------------------------------

    def _signal_options(self, extra: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
        return tuple(sorted(set(self.session.signals.names()) | set(extra)))

    def _steps_per_second(self, status: str, steps: int) -> float | None:
        """Steps per second over the last refreshes (the session's own signal when this is the first)."""
        now = time.perf_counter()
        if status != "running":
            self._sps = None
            self._rate = None
            return None
        if self._sps is not None and now - self._sps[0] >= 0.2:
            then, then_steps = self._sps
            rate = (steps - then_steps) / (now - then)
            # Exponential smoothing keeps the number readable at 4 refreshes a second.
            self._rate = rate if self._rate is None else 0.7 * self._rate + 0.3 * rate
            self._sps = (now, steps)
        elif self._sps is None:
            self._sps = (now, steps)
            sig = self.session.signals.get("steps_per_second")
            self._rate = sig.last if sig is not None and len(sig) else None
        return self._rate

    def _status_view(self) -> DashboardView:
        session = self.session
        rate = self._steps_per_second(session.status, session.steps)
        return snapshot(
            session,
            plotted=tuple(self.signal_select.value),
            x_axis=self.x_axis.value,
            smoothing=self.smoothing.value,
            max_points=self.max_points,
            since={},  # the series come per plot, below
            steps_per_second=rate,
        )

    # -- drawing --------------------------------------------------------------------------------

    def _draw_status(self, view: DashboardView) -> None:
        color = _STATUS_COLORS.get(view.status, "#555")
        texts = view.parts()
        parts = [
            f"<b style='color:{color}' class='wb-status-word'>{view.status}</b>",
            texts[1].replace(f"{view.steps:,}", f"<span class='wb-steps'>{view.steps:,}</span>", 1),
            *(html.escape(t) for t in texts[2:]),
        ]
        if view.end_reason:
            parts[-1] = f"<span class='wb-end-reason'>{html.escape(view.end_reason)}</span>"
        line = _HIDE_HINT + "<span style='font-family:monospace'>" + " &nbsp;·&nbsp; ".join(parts) + "</span>"
        if view.error is not None:
            line += f"<div style='color:{color}' class='wb-error'><b>{html.escape(view.error)}</b></div>"
        others = [s for s in live_sessions() if s is not self.session]
        if others:
            listing = "<br>".join(html.escape(repr(s)) for s in others)
            line += (
                f"<div class='wb-other-sessions' style='color:#b35900'>{len(others)} other session"
                f"{'s' if len(others) > 1 else ''} training in this kernel, sharing its CPU "
                f"(<code>wb.sessions()</code> lists them; <code>.stop()</code> ends one):<br>{listing}</div>"
            )
        if self.status_line.value != line:
            self.status_line.value = line
        beat = self.heartbeat
        if beat is not None:  # the dashboard always has one (RunView's may not)
            with beat.hold_sync():
                beat.active = view.active and self.timer_alive
                beat.beat += 1
        with self.progress.hold_sync():
            self.progress.value = view.fraction
            self.progress.bar_style = _BAR_STYLES.get(view.status, "")
        for name, button in self.buttons.items():
            if button.disabled == view.enabled[name]:
                button.disabled = not view.enabled[name]
        error = self.session.error if view.status == "failed" else None
        if error is not None:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            with self.error_box.hold_sync():
                self.traceback.value = f"<pre style='font-size:12px;white-space:pre-wrap'>{html.escape(text)}</pre>"
                self.error_box.layout.display = ""
        elif self.error_box.layout.display != "none":
            self.error_box.layout.display = "none"

    def _refresh_options(self, view: DashboardView) -> None:
        options = tuple(sorted(set(view.signal_names) | set(self.signal_select.value)))
        self._known_signals = frozenset(view.signal_names)
        if options != tuple(self.signal_select.options):
            value = self.signal_select.value
            with self.signal_select.hold_sync():
                self.signal_select.options = options
                self.signal_select.value = value

    def _new_panel(self, name: str) -> _Panel:
        series = (name, *COMPANIONS.get(name, ()))
        x_axis, smoothing = self.x_axis.value, self.smoothing.value
        plot = LivePlot(
            _trace_specs(series, smoothing, X_AXES[x_axis]),
            _layout(name, series, x_axis, self.log_scale.value, self._markers),
            classes=(f"wb-plot-{name}",),
        )
        plot.on_page = self._on_page  # a new page model (a reload) asks for the data: wake the timer, resync
        panel = _Panel(name, series, plot)
        panel.markers = self._markers
        return panel

    def _set_panels(self) -> None:
        shown = []
        for name in self.signal_select.value:
            panel = self._panels.get(name)
            if panel is None:
                panel = self._panels[name] = self._new_panel(name)
            shown.append(panel.plot)
        # The plots join the page after its first paint (see _tick).
        if self._painted and tuple(shown) != tuple(self.plots.children):
            self.plots.children = shown

    def _series(self, panel: _Panel, full: bool, episode_steps: np.ndarray) -> dict[str, Any]:
        return {
            label: series_view(
                self.session.signals,
                label,
                x_axis=self.x_axis.value,
                smoothing=self.smoothing.value,
                max_points=self.max_points,
                episode_steps=episode_steps,
                since=None if full else panel.cursors.get(label, (0, 0)),
            )
            for label in panel.series
        }

    def _draw_panel(self, panel: _Panel, force: bool, episode_steps: np.ndarray) -> None:
        plot = panel.plot
        full = force or plot.wants_reset or max(plot.points, default=0) > 2 * self.max_points
        if not full and not plot.ready():
            self.skipped_count += 1  # the page is behind: send these points with the next ones
            return
        views = self._series(panel, full, episode_steps)
        if not full and any(v is not None and v.full for v in views.values()):
            full = True  # a signal thinned its oldest points: appending would be wrong, redraw
            views = self._series(panel, True, episode_steps)
        smoothing = self.smoothing.value
        empty = np.zeros(0)
        if full:
            data: list[tuple[np.ndarray, np.ndarray]] = []
            for label in panel.series:
                v = views[label]
                if v is None:
                    data += [(empty, empty), (empty, empty)]
                    panel.cursors[label] = (0, 0)
                    continue
                data.append((v.x, v.y))
                data.append((v.x, v.smooth_y) if smoothing > 1 and v.smooth_y is not None else (empty, empty))
                panel.cursors[label] = v.cursor
            plot.reset(data)
            return
        new: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i, label in enumerate(panel.series):
            v = views[label]
            if v is None or v.points == 0:
                continue
            new[2 * i] = (v.x, v.y)
            if smoothing > 1 and v.smooth_y is not None:
                new[2 * i + 1] = (v.x, v.smooth_y)
            panel.cursors[label] = v.cursor
        plot.extend(new)

    def _live_plots(self) -> dict[str, LivePlot]:
        return {name: panel.plot for name, panel in self._panels.items()}

    def _rebuild_plot(self, name: str) -> LivePlot:
        fresh = self._panels[name] = self._new_panel(name)
        return fresh.plot

    def _refresh_plots(self, force: bool = False) -> None:
        self._replace_deaf()
        self._set_panels()
        rewards = self.session.signals.get("episode_reward")
        episode_steps = rewards.snapshot()[0] if rewards is not None else np.zeros(0, dtype=np.int64)
        self._mark_events(episode_steps)
        for name in self.signal_select.value:
            self._draw_panel(self._panels[name], force, episode_steps)
        self.video_panel.refresh()

    def _mark_events(self, episode_steps: np.ndarray) -> None:
        """Keep a marker on every plot for each live edit and env call (``session.events``).
        Costs a length check per plot refresh; layouts change only when an event is added."""
        events = self.session.events
        x_axis = self.x_axis.value
        key = (len(events), x_axis, len(episode_steps) if x_axis == "episodes" else 0)
        if key == self._events_key:
            return
        self._events_key = key
        self._markers = event_markers(list(events), x_axis, episode_steps) if events else []
        for panel in self._panels.values():
            if panel.markers != self._markers:
                panel.markers = self._markers
                panel.plot.plot_layout = _layout(panel.name, panel.series, x_axis, self.log_scale.value, self._markers)

    def refresh(self) -> None:
        """Redraw the status, buttons and plots from a fresh view-model of the session (any thread)."""
        if self._closed.is_set():
            return
        self._join_anywidgets()
        super().refresh()

    def _draw(self) -> None:
        view = self._status_view()
        self._draw_status(view)
        self._refresh_options(view)
        now = time.monotonic()
        if not self._ticking or view.status not in ACTIVE or now - self._plotted_at >= _PLOT_EVERY_S:
            self._plotted_at = now
            self._refresh_plots()
            if self.league is not None:
                self.league_table.value = league_html(self.league.table())
        self.view = view

    # -- the picture left behind ----------------------------------------------------------------

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # One display id for every place this dashboard is shown: when the run ends, each of those
        # outputs gets the picture beside the widget (what a saved notebook or GitHub shows).
        # A line above the widget says what to do when a reopened notebook cannot reach the widget's
        # kernel side ("model not found"); a live dashboard's status line hides it (CSS below).
        display({"text/html": _RECONNECT_HTML, "text/plain": _RECONNECT_TEXT}, raw=True)
        display(self._bundle(), raw=True, display_id=self._display_id)
        self._displayed = True
        self._shown.set()

    def _bundle(self) -> dict[str, Any]:
        bundle: dict[str, Any] = {
            _WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": self.model_id},
            "text/plain": (
                f"Dashboard of {self.session!r}. It is live only while its kernel runs: if it shows "
                "'model not found' (a reopened notebook, a restarted kernel), re-run its cell."
            ),
        }
        if self.picture is not None:
            bundle["image/svg+xml"] = self.picture
        return bundle

    def make_picture(self) -> str:
        """An SVG picture of the plots as they are now (what the output keeps once the run ended)."""
        x_axis = self.x_axis.value
        rewards = self.session.signals.get("episode_reward")
        episode_steps = rewards.snapshot()[0] if rewards is not None else np.zeros(0, dtype=np.int64)
        charts = []
        for name in self.signal_select.value:
            series = []
            for i, label in enumerate((name, *COMPANIONS.get(name, ()))):
                v = series_view(
                    self.session.signals,
                    label,
                    x_axis=x_axis,
                    smoothing=self.smoothing.value,
                    max_points=600,
                    episode_steps=episode_steps,
                    since=None,
                )
                if v is not None:
                    y = v.smooth_y if v.smooth_y is not None else v.y
                    series.append((label, v.x, y, _PALETTE[i % len(_PALETTE)]))
            charts.append((name, series))
        view = self.view or self._status_view()
        return svg_picture(charts, x_title=X_AXES[x_axis], caption=view.line())

    def _leave_picture(self) -> None:
        """Put the picture of the final plots into the dashboard's outputs (once per ended run)."""
        session = self.session
        key = (session.status, session.steps, sum(len(s) for _, s in session.signals.items()))
        if key == self._picture_for:
            return
        self._picture_for = key
        self.picture = self.make_picture()
        if self._displayed:
            from IPython.display import update_display

            update_display(self._bundle(), raw=True, display_id=self._display_id)

    # -- the timer (RunView's, with the dashboard's first paint, plot rate and picture) ----------

    LIVE = ("idle", "running", "paused")  # an idle session may be started from code: keep watching

    def _settled(self) -> bool:
        """True when every shown plot's page has the final draw (or no page is there to get it)."""
        return all(
            not p.plot.wants_reset and p.plot.ready() for n, p in self._panels.items() if n in self.signal_select.value
        )

    def _before_ticks(self) -> None:
        # The first paint (status line, progress, buttons: plain ipywidgets) goes first; the heartbeat
        # and plots (anywidgets, whose code a page loads once) join after it, then plotly.js (4.8 MB)
        # and the points follow once a page has opened the heartbeat, or after a second without one.
        if self._shown.wait(0.3):
            self._closed.wait(0.3)
        self._join_anywidgets()
        if self._displayed and self.heartbeat is not None:
            self.heartbeat.page_opened.wait(1.0)

    def _timer_refresh(self) -> None:
        self._ticking = True  # timer refreshes draw the plots at most once a second
        try:
            self.refresh()
        finally:
            self._ticking = False

    def _ended(self) -> None:
        self._leave_picture()

    def _join_anywidgets(self) -> None:
        """Put the heartbeat and the plots into the dashboard (after its first paint)."""
        with self._lock:
            if self._painted or self._closed.is_set():
                return
            self._painted = True
            self.status_row.children = (self.status_line, self.heartbeat)
            self._set_panels()

    def close(self) -> None:
        """Stop the refresh timer and close every widget of the dashboard, the hidden plots too."""
        super().close()
        for panel in getattr(self, "_panels", {}).values():
            panel.plot.close()

    # -- user actions ---------------------------------------------------------------------------

    def _on_view_change(self, change: dict[str, Any]) -> None:
        self._join_anywidgets()  # the user is at the page: it has painted
        with self._lock:
            if change["owner"] is self.signal_select:
                self._refresh_plots()
                return
            x_axis, smoothing = self.x_axis.value, self.smoothing.value
            for panel in self._panels.values():
                with panel.plot.hold_sync():
                    panel.plot.traces = _trace_specs(panel.series, smoothing, X_AXES[x_axis])
                    panel.plot.plot_layout = _layout(
                        panel.name, panel.series, x_axis, self.log_scale.value, panel.markers
                    )
            self._refresh_plots(force=True)

    def _on_log_scale(self, change: dict[str, Any]) -> None:
        with self._lock:
            for panel in self._panels.values():
                panel.plot.plot_layout = _layout(
                    panel.name, panel.series, self.x_axis.value, bool(change["new"]), panel.markers
                )

    def _start(self) -> None:
        self.session.start(steps=int(self.steps_box.value))

    def _stop(self) -> None:
        self.session.stop()

    def _on_edit(self, change: dict[str, Any]) -> None:
        """Show or hide the edit panel (built on first use; it shows the values current then)."""
        if change["new"]:
            if self.edit_panel is None:
                from .edit_panel import EditPanel

                self.edit_panel = EditPanel(self.session)
            else:
                self.edit_panel.reload()
            self.edit_box.children = (self.edit_panel,)
        else:
            self.edit_box.children = ()

    def _on_save(self, _button: widgets.Button | None = None) -> None:
        path = self.save_path.value.strip()
        if not path:
            self.message.value = error_html("type a path to save to (a folder, or a name ending in .zip)")
            return
        saved: list[str] = []
        self._command(lambda: saved.append(self.session.save(path)))
        if saved:
            self.message.value = f"saved to <code class='wb-saved'>{html.escape(saved[0])}</code>"


def league_html(rows: list[dict[str, Any]]) -> str:
    """A self-play league's table (``League.table()``) as HTML: each pool member's rating, the learner's
    wins, draws, losses and win rate against it, and its chance to be the next opponent."""

    def cell(value: Any, fmt: str = "{}") -> str:
        return "<td>-</td>" if value is None else f"<td>{html.escape(fmt.format(value))}</td>"

    head = "".join(f"<th>{h}</th>" for h in ("opponent", "rating", "won", "drawn", "lost", "win rate", "next pick"))
    body = "".join(
        "<tr>"
        + cell(r["name"])
        + cell(r["rating"], "{:.0f}")
        + cell(r["wins"])
        + cell(r["draws"])
        + cell(r["losses"])
        + cell(r["win_rate"], "{:.2f}")
        + cell(r["pick"], "{:.2f}")
        + "</tr>"
        for r in reversed(rows)
    )
    return (
        "<div style='font-family:monospace;font-size:12px'><b>league</b> (the learner against each)"
        f"<table class='wb-league-table'><tr>{head}</tr>{body}</table></div>"
    )


def _subscribe_waker(dash: Dashboard) -> None:
    """Wake a dashboard whose timer stopped when its session records something new.

    A user signal logged after the run ended (or a run started from code) then reaches the signal
    list and the plots. The subscriber holds the dashboard weakly and costs the recording thread one
    attribute check per point while the timer runs.
    """
    ref = weakref.ref(dash)

    def wake(name: str, _step: int, _value: float) -> None:
        d = ref()
        if d is None or d._closed.is_set() or d.timer_alive:
            return
        d._ensure_timer(watch=True)

    dash.session.signals.subscribe(wake)
