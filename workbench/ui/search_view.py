"""What the sweep and population views share: named plots kept whole, rebuilt as copies when a page lost one.

:class:`~workbench.ui.sweep_view.SweepDashboard` and :class:`~workbench.ui.population_view.PopulationDashboard`
draw each plot whole (:meth:`~workbench.ui.live_plot.LivePlot.set_whole`), and both have a ``curves`` plot: the
score of every trial or member.
"""

from __future__ import annotations

from typing import Any

from .run_view import RunView

__all__ = ["SearchView"]


class SearchView(RunView):
    """A :class:`~workbench.ui.run_view.RunView` whose plots sit in ``_plots`` by name, each drawn whole;
    a subclass names its plots' CSS classes ``<plot_class>-<name>`` and keeps a ``"curves"`` plot."""

    plot_class = "wb-search"
    """The prefix of each plot's CSS class (``wb-sweep``, ``wb-pbt``), for the page and its tests."""

    @property
    def curves(self) -> Any:
        """The score curve of every trial or member (a :class:`~workbench.ui.live_plot.LivePlot`)."""
        return self._plots["curves"]

    def _rebuild_plot(self, name: str) -> Any:
        old = self._plots[name]
        fresh = self._plots[name] = self._new_plot(
            list(old.traces), dict(old.plot_layout), height=old.height, classes=(f"{self.plot_class}-{name}",)
        )
        fresh.set_whole(*old.whole)
        return fresh
