"""The sink interface: where a session's signals, live edits and run ends go besides the dashboard.

A :class:`Sink` receives batches of points, never single points from the training thread: the
session's subscriber only queues each point, and a flusher thread hands the sink everything that
arrived since the last batch (see :mod:`workbench.tracking.feed`). Write your own by subclassing::

    class PrintSink(wb.Sink):
        def write(self, points):
            for p in points:
                print(p.name, p.step, p.value)

    wb.Session(agent, env, sinks=[PrintSink()])
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["Point", "RunInfo", "Sink", "flat_params"]


class Point(NamedTuple):
    """One recorded value: signal ``name`` at env step ``step``; ``time`` is Unix time (seconds)."""

    name: str
    step: int
    value: float
    time: float


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a sink knows about the run it records, given to :meth:`Sink.open`.

    ``run_id`` is the same for every ``start()`` of one session, so a sink can continue the run it
    recorded before (a restarted session) instead of starting another one.
    """

    run_id: str
    """Stable id of the session (hex), the same across its starts."""
    name: str
    """Human-readable run name, e.g. ``ppo-CartPole-v1-20250101-120000``."""
    algorithm: str
    """The agent's algorithm, e.g. ``PPO``."""
    env: str
    """The env's id or name."""
    seed: int | None
    """The session's seed."""
    hyperparameters: dict[str, Any]
    """The agent's hyperparameters as JSON-ready data."""
    start_step: int
    """The session's env step counter when this start began."""


class Sink:
    """Receives a session's signals in batches, its live edits and how each run ended.

    Every method runs in the feed's flusher thread (or, for :meth:`open`, in the thread that called
    ``session.start``), never in the training loop. Subclasses implement :meth:`write` and may
    override the others; an exception from a sink switches that sink off for the rest of the run
    (with a warning) and never stops training.
    """

    def open(self, run: RunInfo) -> None:
        """Called when a run starts (each ``session.start``), before any :meth:`write` of it."""

    def write(self, points: Sequence[Point]) -> None:
        """Record a batch of points, in the order they were recorded."""
        raise NotImplementedError(f"{type(self).__name__} must implement write(points)")

    def log_event(self, step: int, name: str, old: Any, new: Any) -> None:
        """Record a live edit: setting ``name`` changed from ``old`` to ``new`` at env step ``step``."""

    def log_video(self, step: int, video: Any) -> None:
        """Record an evaluation video (a :class:`~workbench.video.Video`: ``path``, ``fps``...) recorded
        at env step ``step``; sinks whose tool shows videos override this (the default ignores it)."""

    def log_end(self, step: int, status: str, reason: str | None) -> None:
        """Record how the run ended: ``status`` (finished, stopped, failed) and ``reason`` at ``step``."""

    def close(self) -> None:
        """Flush and release files or connections; called when the run ends (``open`` may follow)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def flat_params(hyperparameters: dict[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """Flatten nested hyperparameters to ``{"a.b": scalar}``; lists and other values become JSON text.

    Tracking tools take flat scalar parameters; ``None`` and non-finite floats become strings.
    """
    out: dict[str, str | int | float | bool] = {}
    for key, value in hyperparameters.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, prefix=f"{name}."))
        elif isinstance(value, bool | int | str):
            out[name] = value
        elif isinstance(value, float):
            out[name] = value if math.isfinite(value) else str(value)
        else:
            out[name] = json.dumps(value, default=str)
    return out
