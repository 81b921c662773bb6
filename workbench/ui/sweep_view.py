"""The live notebook view of a :class:`~workbench.Sweep`: controls, the trials table, curves, importances.

Like the session dashboard it is a :class:`~workbench.ui.run_view.RunView`: it only observes (the sweep's
status and its study), its buttons call the sweep's public commands, and it redraws on a timer in a thread
it owns. Its two plots are :class:`~workbench.ui.live_plot.LivePlot`, sent whole when what they show changed
or a page (a reload, the cell shown again) asks for the data.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import numpy as np

from .run_view import fmt as _fmt
from .run_view import line_trace, plot_layout
from .search_view import SearchView

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
_BAR = {"type": "bar", "orientation": "h", "marker": {"color": "#1f77b4"}}


class SweepDashboard(SearchView):
    """Start/Pause/Resume/Stop buttons, status, the table of trials, the curve of every trial with
    the best so far drawn bold, and the parameters' importances once enough trials completed.

    Example::

        view = wb.sweep(...).dashboard()   # or show the sweep itself in a cell
        view.close()                       # stop its timer and remove its widgets

    Parameters:
        sweep: the sweep to show.
        interval: seconds between refreshes while the sweep runs.
    """

    plot_class = "wb-sweep"

    def __init__(self, sweep: Sweep, interval: float = 1.0) -> None:
        self.sweep = sweep
        super().__init__(sweep, interval, "workbench-sweep-view")
        self.table = widgets.HTML(layout=widgets.Layout(max_height="320px", overflow="auto"))
        self._plots = {
            "curves": self._new_plot([], self._curves_layout(), height=300, classes=("wb-sweep-curves",)),
            "importance": self._new_plot(
                [_BAR], self._importance_layout([]), height=300, classes=("wb-sweep-importance",)
            ),
        }
        self._curve_key: tuple[Any, ...] = ()
        self._importance_key: tuple[Any, ...] = ()
        self._show_run(self.table, "wb-sweep-dashboard")

    @property
    def importance(self) -> Any:
        """The plot of the parameters' importances (a :class:`~workbench.ui.live_plot.LivePlot`)."""
        return self._plots["importance"]

    def _curves_layout(self) -> dict[str, Any]:
        return plot_layout(f"{self.sweep.metric} by trial (best so far in bold)", x_title="env steps")

    def _importance_layout(self, names: list[str]) -> dict[str, Any]:
        layout = plot_layout("parameter importance (after a few complete trials)", margin_left=110)
        layout["xaxis"]["range"] = [0, 1]
        layout["yaxis"].update(tickvals=list(range(len(names))), ticktext=names)
        return layout

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
        ended = sum(r.state in ("complete", "pruned", "failed") for r in results)
        running = sum(r.state == "running" for r in results)
        best_text = "" if best is None else f", best {s.metric} <b>{best.value:.4g}</b> (trial {best.number})"
        self._draw_status_line(
            f"<span class='wb-sweep-status'><b>{s.status}</b>: {ended} of {s.trials} trials ended, "
            f"{running} running{best_text}</span>"
        )
        self._draw_controls(self._run_buttons())

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
        if key != self._curve_key:
            self._curve_key = key
            traces, data = [], []
            for r in results:
                if not r.curve:
                    continue
                is_best = best is not None and r.number == best.number
                color = "#d62728" if is_best else _STATE_COLORS.get(r.state, "#555")
                traces.append(line_trace(f"trial {r.number}", color, bold=is_best, faint=0.45))
                steps, values = zip(*r.curve, strict=True)
                data.append((np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)))
            self.curves.set_whole(traces, data)
        self.curves.send_whole()

    def _draw_importance(self) -> None:
        importances = self.sweep.importances()
        names = list(importances)[::-1]
        key = tuple((n, importances[n]) for n in names)
        if importances and key != self._importance_key:
            self._importance_key = key
            data = [(np.array([importances[n] for n in names], dtype=np.float64), np.arange(len(names), dtype=float))]
            self.importance.set_whole([_BAR], data, self._importance_layout(names))
        self.importance.send_whole()
