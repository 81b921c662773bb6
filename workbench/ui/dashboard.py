"""The live notebook dashboard of a :class:`~workbench.Session`.

The dashboard only observes the session (``status``, ``steps``, ``episodes``, ``elapsed``,
``error`` and signal snapshots) and its buttons call exactly the session's public commands.
It redraws itself on a timer in a thread it owns, never in the training thread, so training
never waits on the browser. Each refresh sends one update per widget (``hold_sync`` for the
controls, ``batch_update`` for each figure) and each trace carries at most ``max_points`` points.
"""

from __future__ import annotations

import datetime
import html
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from .live import LiveFigure
from .plots import MAX_POINTS, X_AXES, downsample, moving_average, x_values

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["DEFAULT_SIGNALS", "Dashboard"]

DEFAULT_SIGNALS = ("episode_reward", "loss")
"""The plots a dashboard shows before the user picks others."""

_COMPANIONS = {"episode_reward": ("eval_reward",)}  # drawn in the same plot when present
_ACTIVE = ("running", "paused")
_ENDED = ("stopped", "finished", "failed")
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
_STALL_S = 6.0  # seconds a shown plot may leave an edit unapplied before it is rebuilt
_MAX_REPLACEMENTS = 5  # rebuilds in a row without any answer from the browser; then stop trying
_WATCH_S = 120.0  # after a run ends, how long the timer keeps checking the last draw reached the views


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None or not np.isfinite(seconds):
        return "–"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _error_html(text: str) -> str:
    return f"<span style='color:{_STATUS_COLORS['failed']}' class='wb-error'>{html.escape(text)}</span>"


class _Panel:
    """One plot: a live figure with a faint raw trace and a smoothed trace per series.

    ``traces`` gives each trace's starting properties (x, y, opacity, visible), so a figure built
    to replace a stalled one carries the current data in the state its views start from.
    """

    def __init__(
        self,
        name: str,
        series: tuple[str, ...],
        x_axis: str,
        *,
        traces: list[dict[str, Any]] | None = None,
        on_view: Any = None,
        stall_s: float = _STALL_S,
        replacements: int = 0,
    ) -> None:
        self.name = name
        self.series = series
        self.drawn: dict[str, tuple[Any, ...]] = {}  # what each series shows now, to skip unchanged ones
        self.stall_s = stall_s  # doubles with each replacement that got no answer either
        self.replacements = replacements
        data = []
        for i, label in enumerate(series):
            color = _PALETTE[i % len(_PALETTE)]
            mode = "lines+markers" if label == "eval_reward" else "lines"
            raw = {"x": [], "y": [], **(traces[2 * i] if traces else {})}
            smooth = {"x": [], "y": [], "visible": False, **(traces[2 * i + 1] if traces else {})}
            data.append(go.Scatter(mode=mode, name=label, line={"color": color, "width": 1}, **raw))
            data.append(
                go.Scatter(
                    mode="lines",
                    name=f"{label} (smoothed)",
                    line={"color": color, "width": 2},
                    showlegend=False,
                    **smooth,
                )
            )
        self.fig = LiveFigure(
            data=data,
            layout=go.Layout(
                title={"text": name, "x": 0.02, "font": {"size": 14}},
                height=260,
                width=420,
                margin={"l": 55, "r": 15, "t": 35, "b": 40},
                template="plotly_white",
                showlegend=len(series) > 1,
                legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"},
                xaxis={"title": {"text": X_AXES[x_axis]}},
                uirevision=name,  # keep the user's zoom across redraws
            ),
            on_view=on_view,
            classes=("wb-plot", f"wb-plot-{name}"),
        )


class Dashboard(widgets.VBox):
    """The live dashboard of a session: status, progress, control buttons and signal plots.

    Example::

        session.start(steps=50_000)
        session              # in a notebook, the last expression of a cell shows this dashboard
        dash = session.dashboard()
        dash.close()         # stop its timer and remove its widgets

    Parameters:
        session: the session to show.
        interval: seconds between refreshes, 0.25 to 1 (1 to 4 times a second).
        signals: the signals plotted at first (the user can add any other from the list).
        smoothing: moving-average window in points (1: no smoothing).
        x_axis: ``"steps"`` (env steps), ``"episodes"`` or ``"time"`` (wall time).
        max_points: most points per trace sent to the browser.
        save_path: where the Save button writes; default ``runs/<algorithm>-<timestamp>``.
        steps: how many steps the Start button trains for; default the session's last budget or 10,000.
    """

    def __init__(
        self,
        session: Session,
        *,
        interval: float = 0.5,
        signals: tuple[str, ...] | list[str] = DEFAULT_SIGNALS,
        smoothing: int = 1,
        x_axis: str = "steps",
        max_points: int = MAX_POINTS,
        save_path: str | None = None,
        steps: int | None = None,
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
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {max_points}")
        if not isinstance(smoothing, int) or smoothing < 1:
            raise ValueError(f"smoothing must be a window of at least 1 point, got {smoothing!r}")
        self.session = session
        self.interval = float(interval)
        self.max_points = int(max_points)
        self._lock = threading.RLock()  # refreshes come from the timer and from button clicks
        self._closed = threading.Event()
        self._timer: threading.Thread | None = None
        self._panels: dict[str, _Panel] = {}
        self._sps: tuple[float, int] | None = None  # (clock, steps) at the last refresh, for steps/s
        self._rate: float | None = None
        self.refresh_count = 0
        self.replaced_count = 0  # plots rebuilt because their browser view stopped applying edits

        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        budget = steps or (session.target_steps if session.target_steps else 10_000)

        self.status_line = widgets.HTML()
        self.status_line.add_class("wb-status")
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout={"width": "auto"})
        self.progress.add_class("wb-progress")
        self.buttons: dict[str, widgets.Button] = {}
        for name, icon, tip in (
            ("start", "play", "train for the number of steps at the right"),
            ("pause", "pause", "session.pause()"),
            ("resume", "play", "session.resume()"),
            ("stop", "stop", "session.stop()"),
            ("save", "save", "session.save(path)"),
        ):
            button = widgets.Button(description=name.capitalize(), icon=icon, tooltip=tip, layout={"width": "92px"})
            button.add_class(f"wb-{name}")
            button.on_click(getattr(self, f"_on_{name}"))
            self.buttons[name] = button
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
        self.message = widgets.HTML()
        self.message.add_class("wb-message")
        self.traceback = widgets.HTML()
        self.error_box = widgets.Accordion(children=[self.traceback], titles=("Traceback",))
        self.error_box.selected_index = None
        self.error_box.layout.display = "none"
        self.error_box.add_class("wb-traceback")

        defaults = [s for s in signals if isinstance(s, str)]
        self.signal_select = widgets.SelectMultiple(
            options=self._signal_options(defaults),
            value=tuple(defaults),
            rows=4,
            description="signals",
            layout={"width": "260px"},
            style={"description_width": "50px"},
        )
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
        self.plots = widgets.Box(layout={"display": "flex", "flex_flow": "row wrap", "width": "100%"})
        self.plots.add_class("wb-plots")
        self.signal_select.observe(self._on_view_change, names="value")
        self.smoothing.observe(self._on_view_change, names="value")
        self.x_axis.observe(self._on_view_change, names="value")

        controls = widgets.HBox(
            [*self.buttons.values(), self.steps_box, self.save_path],
            layout={"flex_flow": "row wrap", "align_items": "center"},
        )
        view = widgets.HBox(
            [self.signal_select, widgets.VBox([self.smoothing, self.x_axis])], layout={"align_items": "flex-start"}
        )
        super().__init__([self.status_line, self.progress, controls, self.message, self.error_box, view, self.plots])
        self.add_class("wb-dashboard")
        self._set_panels()
        self.refresh()
        self._ensure_timer()

    # -- reading the session --------------------------------------------------------------------

    def _signal_options(self, extra: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
        names = set(self.session.signals.names()) | set(DEFAULT_SIGNALS) | set(extra)
        return tuple(sorted(names))

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
            self._rate = sig.last if sig is not None else None
        return self._rate

    def _refresh_status(self) -> None:
        session = self.session
        status = session.status
        steps, episodes, target = session.steps, session.episodes, session.target_steps
        rate = self._steps_per_second(status, steps)
        eta = None
        if status == "running" and target is not None and rate:
            eta = max(target - steps, 0) / rate
        color = _STATUS_COLORS.get(status, "#555")
        parts = [
            f"<b style='color:{color}' class='wb-status-word'>{status}</b>",
            f"steps <span class='wb-steps'>{steps:,}</span>" + (f" / {target:,}" if target else ""),
            f"episodes {episodes:,}",
            f"{rate:,.0f} steps/s" if rate else "– steps/s",
            f"elapsed {_fmt_duration(session.elapsed)}",
            f"ETA {_fmt_duration(eta)}",
        ]
        line = " &nbsp;·&nbsp; ".join(parts)
        error = session.error if status == "failed" else None
        if error is not None:
            line += (
                f"<div style='color:{color}' class='wb-error'><b>{html.escape(type(error).__name__)}:</b> "
                f"{html.escape(str(error))}</div>"
            )
        with self.status_line.hold_sync():
            self.status_line.value = f"<div style='font-family:monospace'>{line}</div>"
        fraction = min(steps / target, 1.0) if target else 0.0
        with self.progress.hold_sync():
            self.progress.value = fraction
            self.progress.bar_style = _BAR_STYLES.get(status, "")
        enabled = {
            "start": status not in _ACTIVE,
            "pause": status == "running",
            "resume": status == "paused",
            "stop": status in _ACTIVE,
            "save": steps > 0,
        }
        for name, button in self.buttons.items():
            if button.disabled == enabled[name]:
                button.disabled = not enabled[name]
        if error is not None:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            with self.error_box.hold_sync():
                self.traceback.value = f"<pre style='font-size:12px;white-space:pre-wrap'>{html.escape(text)}</pre>"
                self.error_box.layout.display = ""
        elif self.error_box.layout.display != "none":
            self.error_box.layout.display = "none"

    def _refresh_options(self) -> None:
        options = self._signal_options(self.signal_select.value)
        if options != tuple(self.signal_select.options):
            value = self.signal_select.value
            with self.signal_select.hold_sync():
                self.signal_select.options = options
                self.signal_select.value = value

    def _series_data(self, name: str, episode_steps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        sig = self.session.signals.get(name)
        if sig is None or len(sig) == 0:
            return None
        steps, values, times = sig.snapshot()
        assert episode_steps is not None or self.x_axis.value != "episodes"
        x = x_values(self.x_axis.value, steps, times, episode_steps if episode_steps is not None else steps)
        return x, values.astype(np.float64)

    def _trace_props(self, name: str, episode_steps: np.ndarray | None) -> list[dict[str, Any]]:
        """The raw and smoothed traces' properties for one series, downsampled to ``max_points``."""
        window = self.smoothing.value
        data = self._series_data(name, episode_steps)
        raw: dict[str, Any] = {"x": [], "y": []}
        smooth: dict[str, Any] = {"x": [], "y": []}
        if data is not None:
            x, y = data
            raw["x"], raw["y"] = downsample(x, y, self.max_points)
            if window > 1:
                smooth["x"], smooth["y"] = downsample(x, moving_average(y, window), self.max_points)
            else:
                del smooth["x"], smooth["y"]  # hidden: leave the old curve, saving the bytes
        raw["opacity"] = 0.3 if window > 1 else 1.0
        smooth["visible"] = window > 1 and data is not None
        return [raw, smooth]

    def _episode_axis(self) -> tuple[np.ndarray | None, Any]:
        if self.x_axis.value != "episodes":
            return None, None
        rewards = self.session.signals.get("episode_reward")
        episode_steps = rewards.snapshot()[0] if rewards is not None else np.zeros(0, dtype=np.int64)
        return episode_steps, len(episode_steps)

    def _series_key(self, name: str, episodes_key: Any) -> tuple[Any, ...]:
        sig = self.session.signals.get(name)
        count = (sig.count, len(sig)) if sig is not None else (0, 0)
        return (*count, self.x_axis.value, self.smoothing.value, episodes_key)

    def _refresh_plots(self, force: bool = False) -> None:
        episode_steps, episodes_key = self._episode_axis()
        now = time.monotonic()
        for panel in list(self._panels.values()):
            if panel.name not in self.signal_select.value:
                continue
            fig = panel.fig
            if fig.stalled(panel.stall_s, now) and panel.replacements < _MAX_REPLACEMENTS:
                self._replace_panel(panel)
                continue
            updates = []
            for i, name in enumerate(panel.series):
                key = self._series_key(name, episodes_key)
                if not force and panel.drawn.get(name) == key:
                    continue
                updates.append((i, name, key, self._trace_props(name, episode_steps)))
            if not updates:
                continue
            with fig.lock, fig.batch_update():
                for i, name, key, props in updates:
                    for trace, values in zip(fig.data[2 * i : 2 * i + 2], props):
                        for prop, value in values.items():
                            setattr(trace, prop, value)  # cheaper than trace.update(), which walks paths
                    panel.drawn[name] = key
                if force:
                    fig.layout.xaxis.title.text = X_AXES[self.x_axis.value]
            fig.sent()

    def _replace_panel(self, old: _Panel) -> None:
        """Rebuild a plot whose browser view stopped applying edits, with the current data in its state.

        A figure whose widget code loaded too slowly never hears from the kernel again (see
        :mod:`workbench.ui.live`); a new figure starts from the data it is built with.
        """
        answered = old.fig.acks > 0  # it worked once: the browser is there, try again soon
        new = self._new_panel(
            old.name,
            old.series,
            stall_s=_STALL_S if answered else min(old.stall_s * 2, 60.0),
            replacements=1 if answered else old.replacements + 1,
        )
        self._panels[old.name] = new
        self.plots.children = tuple(new.fig if child is old.fig else child for child in self.plots.children)
        old.fig.close()
        self.replaced_count += 1

    def _new_panel(self, name: str, series: tuple[str, ...], **kwargs: Any) -> _Panel:
        """A plot built with the session's current data in the state its first views start from."""
        episode_steps, episodes_key = self._episode_axis()
        traces: list[dict[str, Any]] = []
        for label in series:
            traces.extend(self._trace_props(label, episode_steps))
        panel = _Panel(name, series, self.x_axis.value, traces=traces, on_view=self._on_new_view, **kwargs)
        panel.drawn.update({label: self._series_key(label, episodes_key) for label in series})
        return panel

    def _on_new_view(self, _fig: LiveFigure) -> None:
        # The figure already sent the view its full data; keep the timer up to see the view apply it.
        self._ensure_timer(watch=True)

    def _awaiting_views(self) -> bool:
        """True while a shown plot's view has not applied the last draw (and may still be rebuilt)."""
        return any(
            panel.fig.awaiting() and panel.replacements < _MAX_REPLACEMENTS
            for panel in self._panels.values()
            if panel.name in self.signal_select.value
        )

    def refresh(self) -> None:
        """Redraw the status, buttons and plots from the session's current state (any thread)."""
        if self._closed.is_set():
            return
        with self._lock:
            self._refresh_status()
            self._refresh_options()
            self._refresh_plots()
            self.refresh_count += 1

    # -- the timer ------------------------------------------------------------------------------

    @property
    def timer_alive(self) -> bool:
        """True while the refresh thread runs (it ends once a finished run's last state is drawn)."""
        return self._timer is not None and self._timer.is_alive()

    def _ensure_timer(self, watch: bool = False) -> None:
        """Start the refresh thread if it is not running; ``watch``: also after the run ended."""
        with self._lock:
            if self._closed.is_set() or self.timer_alive:
                return
            if self.session.status in _ENDED and not watch:
                return  # nothing will change until a button starts it again
            self._timer = threading.Thread(target=self._tick, name="workbench-dashboard", daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        ended_at = None
        while not self._closed.wait(self.interval):
            # Read the status before drawing: once it says the run ended, the loop thread has
            # recorded its last point, so this draw is the final state and the timer may stop.
            status = self.session.status
            try:
                self.refresh()
            except Exception as exc:  # a broken refresh must not kill the timer silently
                self.message.value = _error_html(f"dashboard refresh failed: {exc!r}")
            if status in _ENDED:
                with self._lock:
                    # Decide under the lock _ensure_timer takes: a Start clicked meanwhile either
                    # sees this timer gone and starts another, or this timer sees the run going on.
                    if self.session.status in _ENDED:
                        # Keep going until the views applied the final draw (or a rebuilt plot
                        # carries it), so a slow browser still ends on the final data.
                        ended_at = ended_at or time.monotonic()
                        if not self._awaiting_views() or time.monotonic() - ended_at > _WATCH_S:
                            self._timer = None
                            return
                    else:
                        ended_at = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop the refresh timer and close every widget of the dashboard."""
        closed = getattr(self, "_closed", None)  # ipywidgets also calls close() on half-built widgets
        if closed is not None:
            closed.set()
        timer = getattr(self, "_timer", None)
        if timer is not None and timer is not threading.current_thread():
            timer.join(timeout=5)
        for panel in getattr(self, "_panels", {}).values():
            panel.fig.close()
        for button in getattr(self, "buttons", {}).values():
            button.close()
        for value in list(vars(self).values()):
            if isinstance(value, widgets.Widget) and value is not self:
                value.close()
        super().close()

    # -- user actions ---------------------------------------------------------------------------

    def _set_panels(self) -> None:
        chosen = self.signal_select.value
        shown = []
        for name in chosen:
            panel = self._panels.get(name)
            if panel is None:
                panel = self._panels[name] = self._new_panel(name, (name, *_COMPANIONS.get(name, ())))
            shown.append(panel.fig)
        self.plots.children = shown

    def _on_view_change(self, change: dict[str, Any]) -> None:
        with self._lock:
            if change["owner"] is self.signal_select:
                self._set_panels()
                self._refresh_plots()
            else:
                self._refresh_plots(force=True)

    def _command(self, action: Any, done: str = "") -> None:
        try:
            action()
        except Exception as exc:
            self.message.value = _error_html(f"{type(exc).__name__}: {exc}")
        else:
            self.message.value = done
        self._ensure_timer()
        self.refresh()

    def _on_start(self, _button: widgets.Button | None = None) -> None:
        self._command(lambda: self.session.start(steps=int(self.steps_box.value)))

    def _on_pause(self, _button: widgets.Button | None = None) -> None:
        self._command(self.session.pause)

    def _on_resume(self, _button: widgets.Button | None = None) -> None:
        self._command(self.session.resume)

    def _on_stop(self, _button: widgets.Button | None = None) -> None:
        self._command(self.session.stop)

    def _on_save(self, _button: widgets.Button | None = None) -> None:
        path = self.save_path.value.strip()
        if not path:
            self.message.value = _error_html("type a path to save to (a folder, or a name ending in .zip)")
            return
        saved: list[str] = []
        self._command(lambda: saved.append(self.session.save(path)))
        if saved:
            self.message.value = f"saved to <code class='wb-saved'>{html.escape(saved[0])}</code>"
