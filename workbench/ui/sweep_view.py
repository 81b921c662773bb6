"""The live notebook view of a :class:`~workbench.Sweep`: controls, the trials table, curves, importances.

Like the session dashboard it only observes (the sweep's status and its study) and its buttons call
the sweep's public commands. It redraws on a timer in a thread it owns: one update per widget per
refresh (``hold_sync`` for the controls and the table, ``batch_update`` for each figure).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import plotly.graph_objects as go

from .live import LiveFigure
from .run_view import RunView
from .run_view import fmt as _fmt

if TYPE_CHECKING:
    from ..sweeps.sweep import Sweep, TrialResult

__all__ = ["SweepDashboard"]

_STATE_COLORS = {
    "complete": "#0550ae",
    "pruned": "#b35900",
    "failed": "#cf222e",
    "interrupted": "#555",
    "running": "#1a7f37",
    "waiting": "#555",
}
_MAX_ROWS = 200  # rows drawn in the table (the newest); sweep.table() has them all


class SweepDashboard(RunView):
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
        super().__init__(sweep, interval, "workbench-sweep-view")
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
        self._show([widgets.HBox([self.curves, self.importance]), self.table], "wb-sweep-dashboard")

    # -- drawing --------------------------------------------------------------------------------

    def _draw(self) -> None:
        results = self.sweep.results()
        best = self.sweep.best
        self._draw_status(results, best)
        self._draw_table(results, best)
        self._draw_curves(results, best)
        self._draw_importance()

    def _draw_status(self, results: list[TrialResult], best: TrialResult | None) -> None:
        s = self.sweep
        status = s.status
        ended = sum(r.state in ("complete", "pruned", "failed") for r in results)
        running = sum(r.state == "running" for r in results)
        best_text = "" if best is None else f", best {s.metric} <b>{best.value:.4g}</b> (trial {best.number})"
        self._draw_controls(
            f"<span class='wb-sweep-status'><b>{status}</b>: {ended} of {s.trials} trials ended, "
            f"{running} running{best_text}</span>"
        )

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
