"""The live notebook view of a :class:`~workbench.Population`: the members' curves, their lineage,
each member's current values with a pause/resume and a stop button, and the population's controls.

Like the session dashboard and the sweep view it is a :class:`~workbench.ui.run_view.RunView`: it only
observes (the population's status, scores, lineage and values), its buttons call the population's public
commands, and it redraws on a timer in a thread it owns, sending only what changed. Its plots are
:class:`~workbench.ui.live_plot.LivePlot`: a page that opens one later (the notebook reloaded, the cell shown
again) gets the full current data; and since everything it draws is also in the population's
``population.json``, a population reopened from its directory draws the same.
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
    from ..sweeps.pbt import Population

__all__ = ["PopulationDashboard"]

_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_STATUS_COLORS = {
    "running": "#1a7f37",
    "paused": "#b35900",
    "waiting": "#555",
    "finished": "#0550ae",
    "retired": "#555",
    "failed": "#cf222e",
    "stopped": "#555",
    "idle": "#555",
}


def color(index: int) -> str:
    """The colour member ``index`` has in every figure of the view."""
    return _PALETTE[index % len(_PALETTE)]


class _MemberRow(widgets.HBox):
    """One member: its status, steps, score and values, and its Pause/Resume and Stop buttons."""

    def __init__(self, view: PopulationDashboard, index: int) -> None:
        self.index = index
        self.text = widgets.HTML(layout=widgets.Layout(width="640px"))
        self.pause = widgets.Button(description="Pause", layout=widgets.Layout(width="80px"))
        self.stop = widgets.Button(description="Stop", layout=widgets.Layout(width="70px"))
        self.pause.on_click(lambda _b: view._command(lambda: view._toggle(index)))
        self.stop.on_click(lambda _b: view._command(lambda: view.population.stop_member(index)))
        super().__init__([self.text, self.pause, self.stop])
        self.add_class("wb-pbt-member")


class PopulationDashboard(SearchView):
    """Start/Pause/Resume/Stop for the population, its members' score curves (the best drawn bold),
    a lineage chart (a line per member over env steps; an arrow from the member copied to the one
    that copied it at each exploit), and a row per member with its current values and its own
    Pause/Resume and Stop buttons (``population.pause_member``/``resume_member``/``stop_member``).

    Example::

        view = wb.pbt(...).dashboard()   # or show the population itself in a cell
        view.close()                     # stop its timer and remove its widgets

    Parameters:
        population: the population to show.
        interval: seconds between refreshes while it runs.
    """

    plot_class = "wb-pbt"

    def __init__(self, population: Population, interval: float = 1.0) -> None:
        self.population = population
        super().__init__(population, interval, "workbench-pbt-view")
        self._plots = {name: self._fresh_plot(name) for name in ("curves", "lineage")}
        self.rows = [_MemberRow(self, i) for i in range(len(population.members))]
        self._curve_key: tuple[Any, ...] = ()
        self._lineage_key: tuple[Any, ...] = ()
        self._show_run(widgets.VBox(self.rows), "wb-pbt-dashboard")

    @property
    def lineage(self) -> Any:
        """Who copied whom (a :class:`~workbench.ui.live_plot.LivePlot`)."""
        return self._plots["lineage"]

    def _fresh_plot(self, name: str) -> Any:
        if name == "curves":
            layout = plot_layout(f"{self.population.metric} by member (best in bold)", x_title="env steps")
        else:
            layout = plot_layout("lineage: who copied whom", x_title="env steps", y_title="member")
            layout["yaxis"].update(dtick=1, autorange="reversed")
        return self._new_plot([], layout, height=300, classes=(f"wb-pbt-{name}",))

    # -- drawing --------------------------------------------------------------------------------

    def _draw(self) -> None:
        best = self.population.best_index
        self._draw_status(best)
        self._draw_rows(best)
        self._draw_curves(best)
        self._draw_lineage()

    def _draw_status(self, best: int | None) -> None:
        p = self.population
        steps = sum(s.steps for s in p.members)
        exploits = sum(e.kind == "exploit" for e in p.events)
        best_text = "" if best is None else f", best {p.metric} <b>{p.scores[best]:.4g}</b> (member {best})"
        self._draw_status_line(
            f"<span class='wb-pbt-status'><b>{p.status}</b>: {len(p.members)} members, "
            f"{steps} of {p.steps * len(p.members)} env steps, {exploits} exploits{best_text}</span>"
        )
        self._draw_controls(self._run_buttons(startable=steps < p.steps * len(p.members)))

    def _draw_rows(self, best: int | None) -> None:
        p = self.population
        values = p.values()
        for row, score, vals in zip(self.rows, p.scores, values, strict=True):
            i = row.index
            status = p.member_status(i)
            parents = p.lineage()[i]
            origin = f", copied member {parents[-1][1]} at step {parents[-1][0]}" if parents else ""
            weight = "font-weight:bold;" if best == i else ""
            shown = ", ".join(f"{html.escape(k)}={_fmt(v)}" for k, v in vals.items())
            text = (
                f"<span style='{weight}'><span style='color:{color(i)}'>&#9632;</span> member {i} "
                f"<span style='color:{_STATUS_COLORS.get(status, '#555')}'>{status}</span>, "
                f"{p.members[i].steps} steps, {p.metric} {'' if score is None else _fmt(score)}: {shown}"
                f"{origin}</span>"
            )
            with row.hold_sync():
                if row.text.value != text:
                    row.text.value = text
                paused = status == "paused"
                label = "Resume" if paused else "Pause"
                if row.pause.description != label:
                    row.pause.description = label
                can_pause = paused or status in ("running", "waiting")
                if row.pause.disabled != (not can_pause):
                    row.pause.disabled = not can_pause
                can_stop = status in ("running", "paused", "waiting")
                if row.stop.disabled != (not can_stop):
                    row.stop.disabled = not can_stop

    def _draw_curves(self, best: int | None) -> None:
        curves = self.population.curves()
        key = (*(len(c) for c in curves), best)
        if key != self._curve_key:
            self._curve_key = key
            traces = [
                line_trace(f"member {i}", color(i), bold=i == best, mode="lines+markers", marker={"size": 4})
                for i in range(len(curves))
            ]
            self.curves.set_whole(traces, [_points(curve) for curve in curves])
        self.curves.send_whole()

    def _draw_lineage(self) -> None:
        p = self.population
        lineage = p.lineage()
        steps = [s.steps for s in p.members]
        key = (tuple(len(x) for x in lineage), tuple(n // max(p.interval, 1) for n in steps))
        if key != self._lineage_key:
            self._lineage_key = key
            # Each member's life, a line over the steps it trained; then one trace of arrows, from the
            # member copied to the one that copied it at each exploit (NaN between arrows: a gap).
            traces = [
                line_trace(f"member {i}", color(i), bold=True, hoverinfo="skip", line={"color": color(i), "width": 4})
                for i in range(len(steps))
            ]
            data = [(np.array([0.0, n]), np.array([float(i), float(i)])) for i, n in enumerate(steps)]
            xs: list[float] = []
            ys: list[float] = []
            texts: list[str | None] = []
            for i, parents in enumerate(lineage):
                for step, source in parents:
                    xs += [step, step, np.nan]
                    ys += [source, i, np.nan]
                    texts += [f"member {i} copied member {source} at step {step}"] * 2 + [None]
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": "exploits",
                    "line": {"color": "#444", "width": 1},
                    "marker": {"symbol": "arrow", "size": 9, "angleref": "previous", "color": "#444"},
                    "text": texts,
                    "hoverinfo": "text",
                }
            )
            data.append((np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64)))
            self.lineage.set_whole(traces, data)
        self.lineage.send_whole()

    def _toggle(self, index: int) -> None:
        p = self.population
        if p.member_status(index) == "paused":
            p.resume_member(index)
        else:
            p.pause_member(index)


def _points(curve: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """A curve of ``(step, value)`` pairs as the x and y arrays of a trace."""
    if not curve:
        return np.zeros(0), np.zeros(0)
    steps, values = zip(*curve, strict=True)
    return np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
