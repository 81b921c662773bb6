"""The live notebook view of a :class:`~workbench.Sweep`: controls, the trials table, curves, importances.

Like the session dashboard it only observes (the sweep's status and its study) and its buttons call
the sweep's public commands. It redraws on a timer in a thread it owns: one update per widget per
refresh (``hold_sync`` for the controls and the table, ``batch_update`` for each figure).
"""

from __future__ import annotations

import html
import threading
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import plotly.graph_objects as go

from .live import LiveFigure

if TYPE_CHECKING:
    from ..sweeps.sweep import Sweep, TrialResult

__all__ = ["SweepDashboard"]

_ACTIVE = ("running", "paused")
_STATE_COLORS = {
    "complete": "#0550ae",
    "pruned": "#b35900",
    "failed": "#cf222e",
    "interrupted": "#555",
    "running": "#1a7f37",
    "waiting": "#555",
}
_MAX_ROWS = 200  # rows drawn in the table (the newest); sweep.table() has them all


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


class SweepDashboard(widgets.VBox):
    """Start/Pause/Resume/Stop buttons, status, the table of trials, the curve of every trial with
    the best so far drawn bold, and the parameters' importances once enough trials completed.

    Example::

        view = wb.sweep(...).dashboard()   # or show the sweep itself in a cell
        view.close()                       # stop its timer and remove its widgets

    Parameters:
        sweep: the sweep to show.
        interval: seconds between refreshes while the sweep runs.
    """

    def __init__(self, sweep: Sweep, interval: float = 1.0) -> None:
        self.sweep = sweep
        self.interval = float(interval)
        self.refresh_count = 0
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._timer: threading.Thread | None = None
        self.buttons = {
            name: widgets.Button(description=name, layout=widgets.Layout(width="90px"))
            for name in ("Start", "Pause", "Resume", "Stop")
        }
        self.buttons["Start"].on_click(lambda _b: self._command(self.sweep.start))
        self.buttons["Pause"].on_click(lambda _b: self._command(self.sweep.pause))
        self.buttons["Resume"].on_click(lambda _b: self._command(self.sweep.resume))
        self.buttons["Stop"].on_click(lambda _b: self._command(lambda: self.sweep.stop(timeout=0)))
        self.status = widgets.HTML()
        self.message = widgets.HTML()
        self.table = widgets.HTML(layout=widgets.Layout(max_height="320px", overflow="auto"))
        self.curves = LiveFigure(
            layout=go.Layout(
                title={"text": f"{sweep.metric} by trial (best so far in bold)", "x": 0.02, "font": {"size": 14}},
                height=300,
                width=560,
                template="plotly_white",
                margin={"l": 55, "r": 15, "t": 35, "b": 40},
                xaxis={"title": {"text": "env steps"}},
                showlegend=False,
                uirevision="curves",
            ),
            classes=("wb-sweep-curves",),
        )
        self.importance = LiveFigure(
            data=[go.Bar(x=[], y=[], orientation="h", marker={"color": "#1f77b4"})],
            layout=go.Layout(
                title={"text": "parameter importance (after a few complete trials)", "x": 0.02, "font": {"size": 14}},
                height=300,
                width=380,
                template="plotly_white",
                margin={"l": 110, "r": 15, "t": 35, "b": 40},
                xaxis={"range": [0, 1]},
                uirevision="importance",
            ),
            classes=("wb-sweep-importance",),
        )
        self._curve_key: tuple[Any, ...] = ()
        super().__init__(
            children=[
                widgets.HBox([*self.buttons.values(), self.status]),
                self.message,
                widgets.HBox([self.curves, self.importance]),
                self.table,
            ]
        )
        self.add_class("wb-sweep-dashboard")
        self.refresh()
        self._ensure_timer()

    # -- drawing --------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw everything from the sweep's current state (any thread)."""
        if self._closed.is_set():
            return
        with self._lock:
            results = self.sweep.results()
            best = self.sweep.best
            self._draw_status(results, best)
            self._draw_table(results, best)
            self._draw_curves(results, best)
            self._draw_importance()
            self.refresh_count += 1

    def _draw_status(self, results: list[TrialResult], best: TrialResult | None) -> None:
        s = self.sweep
        status = s.status
        ended = sum(r.state in ("complete", "pruned", "failed") for r in results)
        running = sum(r.state == "running" for r in results)
        best_text = "" if best is None else f", best {s.metric} <b>{best.value:.4g}</b> (trial {best.number})"
        with self.status.hold_sync():
            self.status.value = (
                f"<span class='wb-sweep-status'><b>{status}</b>: {ended} of {s.trials} trials ended, "
                f"{running} running{best_text}</span>"
            )
        for name, button in self.buttons.items():
            button.disabled = {
                "Start": status in _ACTIVE,
                "Pause": status != "running",
                "Resume": status != "paused",
                "Stop": status not in _ACTIVE,
            }[name]

    def _draw_table(self, results: list[TrialResult], best: TrialResult | None) -> None:
        params = list(self.sweep.dists)
        head = "".join(f"<th>{html.escape(h)}</th>" for h in ["trial", "state", self.sweep.metric, *params, "steps"])
        rows = []
        for r in results[-_MAX_ROWS:][::-1]:
            color = _STATE_COLORS.get(r.state, "#555")
            weight = "font-weight:bold;" if best is not None and r.number == best.number else ""
            cells = [
                str(r.number),
                f"<span style='color:{color}'>{r.state}</span>",
                "" if r.value is None else _fmt(r.value),
                *(_fmt(r.params.get(p, "")) for p in params),
                str(r.steps),
            ]
            title = html.escape(r.note, quote=True)
            rows.append(f"<tr style='{weight}' title='{title}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        value = (
            "<table class='wb-sweep-table' style='border-collapse:collapse;font-size:12px'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
        if value != self.table.value:
            self.table.value = value

    def _draw_curves(self, results: list[TrialResult], best: TrialResult | None) -> None:
        key = tuple((r.number, r.state, len(r.curve)) for r in results) + ((best.number,) if best else ())
        if key == self._curve_key:
            return  # nothing new: send nothing
        self._curve_key = key
        traces = []
        for r in results:
            if not r.curve:
                continue
            is_best = best is not None and r.number == best.number
            steps, values = zip(*r.curve)
            traces.append(
                go.Scatter(
                    x=list(steps),
                    y=list(values),
                    mode="lines",
                    name=f"trial {r.number}",
                    line={"width": 3 if is_best else 1, "color": "#d62728" if is_best else _STATE_COLORS.get(r.state)},
                    opacity=1.0 if is_best else 0.45,
                )
            )
        fig = self.curves
        with fig.lock, fig.batch_update():
            fig.data = ()
            for trace in traces:
                fig.add_trace(trace)
        fig.sent()

    def _draw_importance(self) -> None:
        importances = self.sweep.importances()
        if not importances:
            return
        names = list(importances)[::-1]
        fig = self.importance
        with fig.lock, fig.batch_update():
            fig.data[0].x = [importances[n] for n in names]
            fig.data[0].y = names
        fig.sent()

    # -- the timer ------------------------------------------------------------------------------

    @property
    def timer_alive(self) -> bool:
        """True while the refresh thread runs (it ends after drawing a sweep that ended)."""
        return self._timer is not None and self._timer.is_alive()

    def _ensure_timer(self) -> None:
        with self._lock:
            if self._closed.is_set() or self.timer_alive or self.sweep.status not in _ACTIVE:
                return
            self._timer = threading.Thread(target=self._tick, name="workbench-sweep-view", daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        while not self._closed.wait(self.interval):
            status = self.sweep.status  # read first: once ended, this draw is the final state
            try:
                self.refresh()
            except Exception as exc:  # keep the timer alive, say what went wrong
                self.message.value = f"<span style='color:#cf222e'>refresh failed: {html.escape(repr(exc))}</span>"
            if status not in _ACTIVE:
                with self._lock:
                    if self.sweep.status not in _ACTIVE:
                        self._timer = None
                        return

    def _command(self, action: Any) -> None:
        try:
            action()
        except Exception as exc:
            self.message.value = f"<span style='color:#cf222e'>{html.escape(f'{type(exc).__name__}: {exc}')}</span>"
        else:
            self.message.value = ""
        self._ensure_timer()
        self.refresh()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop the refresh timer and close every widget of the view."""
        closed = getattr(self, "_closed", None)
        if closed is not None:
            closed.set()
        timer = getattr(self, "_timer", None)
        if timer is not None and timer is not threading.current_thread():
            timer.join(timeout=5)
        for value in [*getattr(self, "buttons", {}).values(), *vars(self).values()]:
            if isinstance(value, widgets.Widget) and value is not self:
                value.close()
        super().close()
