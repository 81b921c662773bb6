"""The console view of a session: a tqdm progress bar that follows it from the caller's thread.

It draws the same view-model as the notebook dashboard (``view_model.snapshot``: status, counters,
rate, ETA, why the run ended), so both say the same thing in the same words. The training thread
never prints; this polls the session. Plain Python: importing it loads neither ipywidgets nor plotly.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from .view_model import DashboardView, format_rate, snapshot

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["follow", "postfix"]


def postfix(view: DashboardView) -> dict[str, str]:
    """What the bar shows after its count: mean reward of the last 10 episodes, rate, status or end reason."""
    fields: dict[str, str] = {}
    if view.reward_mean is not None:
        fields["reward"] = f"{view.reward_mean:.1f}"
    if view.steps_per_second:
        fields["sps"] = format_rate(view.steps_per_second).replace(" steps/s", "")
    fields["status"] = view.end_reason or view.status
    return fields


def follow(
    session: Session, *, interval: float = 0.25, file: Any = None, start_steps: int | None = None
) -> DashboardView:
    """Show a tqdm bar (steps, mean reward of the last 10 episodes, steps/second) until the run ends.

    ``start_steps``: the step count the run started from (``Session.run`` passes it: a short run may
    have ended before the bar is drawn); by default the session's steps now.
    Returns the last view drawn (its ``end_reason`` says why the run ended).
    """
    from tqdm.auto import tqdm

    total = session.target_steps
    start_steps = session.steps if start_steps is None else int(start_steps)
    with tqdm(
        total=None if total is None else total - start_steps,
        unit="step",
        unit_scale=True,
        dynamic_ncols=True,
        file=file or sys.stderr,
        desc=f"{session.agent.algorithm}",
    ) as bar:
        while True:
            alive = session.is_alive
            view = snapshot(session, plotted=(), since={})
            bar.update(view.steps - start_steps - bar.n)
            bar.set_postfix(postfix(view), refresh=False)
            if not alive:
                return view
            time.sleep(interval)
