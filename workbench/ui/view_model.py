"""The dashboard's view-model: a frozen snapshot of a session, computed by plain code.

:func:`snapshot` reads a session (or anything shaped like one: ``status``, ``steps``, ``episodes``,
``target_steps``, ``elapsed``, ``error``, ``stop_reason``, ``signals`` and ``agent.algorithm``) once
and returns a :class:`DashboardView`: the status and counters, the texts the status line shows, which
buttons make sense, the signal names, and each plotted series already downsampled (or only the points
added since the previous snapshot, so a view can append them). The widgets (``dashboard.py``) and the
console bar (``console.py``) only draw it. Nothing here imports ipywidgets or plotly, so it is tested
without widgets and without training.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .plots import MAX_POINTS, X_AXES, downsample, moving_average, x_values

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = [
    "ACTIVE",
    "ENDED",
    "MAX_HEAD_PLOTS",
    "SERVED_PLOTS",
    "DashboardView",
    "SeriesView",
    "default_signals",
    "end_reason",
    "event_label",
    "event_markers",
    "format_ago",
    "format_duration",
    "format_rate",
    "series_view",
    "snapshot",
]

ACTIVE = ("running", "paused")
"""Statuses of a run that is still going (its thread is alive)."""

ENDED = ("stopped", "finished", "failed")
"""Statuses of a run that has ended."""

COMPANIONS: dict[str, tuple[str, ...]] = {"episode_reward": ("eval_reward",), "ope_dr": ("ope_wis", "ope_sdr")}
"""Series drawn in the same plot as another (``eval_reward`` beside ``episode_reward``)."""

_LOSS_NAMES = ("loss", "critic_loss", "actor_loss", "policy_loss", "value_loss")


def default_signals(algorithm: Agent | str, recorded: Iterable[str] = ()) -> tuple[str, ...]:
    """The signals a dashboard plots at first for ``algorithm`` (an agent, or a registered algorithm's name),
    given the signals recorded so far.

    An agent that declares its ``default_plots`` gets them, so its losses show before the first update
    records them; another one gets ``episode_reward`` and the loss-like signals it has recorded
    (``loss`` when it recorded none yet). A served session that takes experience batches from
    local-inference clients adds its ingestion rate and the batches' staleness (``serve_ingested_per_second``,
    ``serve_policy_lag``) once they are recorded. A composite (Dict / Tuple) action space adds a plot per
    head, its entropy ``entropy/<path>`` (the first :data:`MAX_HEAD_PLOTS` heads), once recorded.
    """
    names = set(recorded)
    served = tuple(name for name in SERVED_PLOTS if name in names)
    heads = tuple(sorted(name for name in names if name.startswith("entropy/")))[:MAX_HEAD_PLOTS]
    return _algorithm_signals(algorithm, names) + heads + served


MAX_HEAD_PLOTS = 4
"""The most per-head entropy plots a dashboard shows at first (more heads: pick them with ``signals=``)."""


SERVED_PLOTS = ("serve_ingested_per_second", "serve_policy_lag")
"""The signals of a served session's local-inference clients that a dashboard plots when recorded."""


def _algorithm_signals(algorithm: Agent | str, recorded: Iterable[str]) -> tuple[str, ...]:
    if isinstance(algorithm, str):
        from ..agents.registry import AGENTS, MULTI_AGENTS, OFFLINE_AGENTS  # lazily: torch, for a name alone

        name = algorithm.lower()
        cls = AGENTS.get(name) or OFFLINE_AGENTS.get(name) or MULTI_AGENTS.get(name)
        plots: tuple[str, ...] = cls.default_plots if cls is not None else ()
    else:
        plots = algorithm.default_plots
    if plots:
        return tuple(plots)
    names = set(recorded)
    losses = tuple(name for name in _LOSS_NAMES if name in names)
    return ("episode_reward", *(losses[:2] or ("loss",)))


def format_duration(seconds: float | None) -> str:
    """``m:ss`` or ``h:mm:ss``; ``–`` for an unknown duration."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = round(max(seconds, 0.0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_rate(rate: float | None) -> str:
    """Steps per second for a status line (``– steps/s`` when unknown)."""
    if rate is None or not math.isfinite(rate) or rate <= 0:
        return "– steps/s"
    return f"{rate:,.0f} steps/s"


def format_ago(seconds: float) -> str:
    """How long ago something happened, in words a status line can show (``1 s ago``, ``3 min ago``)."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{int(seconds)} s ago"
    if seconds < 5400:
        return f"{int(seconds // 60)} min ago"
    return f"{int(seconds // 3600)} h ago"


def end_reason(status: str, stop_reason: str | None, error: BaseException | None = None) -> str | None:
    """Why a run ended, in words (None while it has not ended)."""
    if status not in ENDED:
        return None
    if status == "failed" or error is not None:
        return "ended by an error" + (f" ({type(error).__name__})" if error is not None else "")
    if stop_reason == "stop_when":
        return "ended by stop_when"
    if stop_reason == "stop" or status == "stopped":
        return "ended by stop()"
    if stop_reason == "budget" or status == "finished":
        return "ended: steps reached"
    return f"ended ({stop_reason})"


@dataclass(frozen=True)
class SeriesView:
    """One plotted series: raw points and (with smoothing) their moving average, downsampled.

    ``full`` True: ``x``/``y`` are the whole series (a view draws them afresh). False: they are only
    the points recorded after the previous snapshot's ``cursor`` (a view appends them).
    ``cursor`` is what to pass back as ``since`` for the next snapshot.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    smooth_y: np.ndarray | None
    full: bool
    cursor: tuple[int, int]
    total: int

    @property
    def points(self) -> int:
        """Points this snapshot carries for the series."""
        return int(self.x.size)


@dataclass(frozen=True)
class DashboardView:
    """A frozen snapshot of a session, everything a dashboard or console bar draws."""

    algorithm: str
    status: str
    steps: int
    target_steps: int | None
    episodes: int
    elapsed: float
    steps_per_second: float | None
    eta: float | None
    fraction: float
    end_reason: str | None
    error: str | None
    reward_mean: float | None
    signal_names: tuple[str, ...]
    plotted: tuple[str, ...]
    enabled: Mapping[str, bool]
    series: Mapping[str, SeriesView] = field(default_factory=dict)
    device: str = ""
    """Where the agent trains (``"cpu"``, ``"cuda:0"``...; empty when unknown), shown in the header."""
    device_reason: str = ""
    """Why that device (``agent.device_choice.reason``), e.g. what ``device="auto"`` measured."""

    @property
    def active(self) -> bool:
        """True while the run is running or paused."""
        return self.status in ACTIVE

    @property
    def ended(self) -> bool:
        """True once the run stopped, finished or failed."""
        return self.status in ENDED

    def parts(self) -> list[str]:
        """The status line's pieces as plain text, in order (the widgets add colour and markup)."""
        target = f" / {self.target_steps:,}" if self.target_steps else ""
        parts = [
            self.status,
            f"steps {self.steps:,}{target}",
            f"episodes {self.episodes:,}",
            *((f"on {self.device}",) if self.device else ()),
            *(() if self.ended else (format_rate(self.steps_per_second),)),
            f"elapsed {format_duration(self.elapsed)}",
        ]
        if self.active:
            parts.append(f"ETA {format_duration(self.eta)}")
        if self.end_reason:
            parts.append(self.end_reason)
        return parts

    def line(self) -> str:
        """The status line as plain text (what the console bar and tests read)."""
        return " · ".join(self.parts())


def series_view(
    signals: Any,
    name: str,
    *,
    x_axis: str,
    smoothing: int,
    max_points: int,
    episode_steps: np.ndarray,
    since: tuple[int, int] | None,
) -> SeriesView | None:
    """The series ``name`` of ``signals`` for a plot: whole and downsampled, or only the points after ``since``.

    ``episode_steps`` are the steps of the ``episode_reward`` points (for ``x_axis="episodes"``);
    ``since`` is the ``cursor`` of the previous view of this series (None: the whole series).
    Returns None while the signal has no points.
    """
    sig = signals.get(name)
    if sig is None or len(sig) == 0:
        return None
    steps, values, times = sig.snapshot()
    count = int(getattr(sig, "count", len(steps)))
    cursor = (count, len(steps))
    values = values.astype(np.float64)
    x = x_values(x_axis, steps, times, episode_steps)
    # Appending is exact only while the signal kept every point (no decimation since `since`).
    start = None
    if since is not None and since[0] == since[1] and count == len(steps) and 0 <= since[0] <= len(steps):
        start = since[0]
    if start is not None:
        new_x, new_y = x[start:], values[start:]
        smooth = None
        if smoothing > 1:
            lead = max(start - smoothing + 1, 0)  # the window reaching back before the new points
            smooth = moving_average(values[lead:], smoothing)[start - lead :]
        return SeriesView(name, new_x, new_y, smooth, False, cursor, count)
    xs, ys = downsample(x, values, max_points)
    smooth = None
    if smoothing > 1:
        sx, smooth = downsample(x, moving_average(values, smoothing), max_points)
        if sx.size != xs.size or not np.array_equal(sx, xs):
            # Keep one x per point for both traces: sample the smoothed curve at the raw points' x.
            smooth = np.interp(xs, sx, smooth)
    return SeriesView(name, xs, ys, smooth, True, cursor, count)


def snapshot(
    session: Any,
    *,
    plotted: Iterable[str] | None = None,
    x_axis: str = "steps",
    smoothing: int = 1,
    max_points: int = MAX_POINTS,
    since: Mapping[str, tuple[int, int]] | None = None,
    steps_per_second: float | None = None,
) -> DashboardView:
    """A frozen :class:`DashboardView` of ``session`` as it is now.

    Parameters:
        session: a ``wb.Session`` or any object with its attributes (tests pass a plain namespace).
        plotted: the plots shown (each brings its companions, e.g. ``eval_reward``); default per algorithm.
        x_axis: ``"steps"``, ``"episodes"`` or ``"time"``.
        smoothing: moving-average window in points (1: none).
        max_points: most points of a series drawn afresh.
        since: per series, the ``cursor`` of the previous snapshot: only newer points are returned
            (``full`` False) when that is exact; a series missing here comes whole.
        steps_per_second: the rate measured by the caller; default the session's own signal.
    """
    if x_axis not in X_AXES:
        raise ValueError(f"unknown x_axis {x_axis!r}; choose one of {', '.join(X_AXES)}")
    if smoothing < 1:
        raise ValueError(f"smoothing must be a window of at least 1 point, got {smoothing!r}")
    status = str(session.status)
    steps, episodes = int(session.steps), int(session.episodes)
    target = session.target_steps
    signals = session.signals
    names = tuple(sorted(signals.names()))
    agent = session.agent
    algorithm = agent.algorithm
    choice = agent.device_choice
    plots = tuple(plotted) if plotted is not None else default_signals(agent, names)

    rate = steps_per_second
    if rate is None and status == "running":
        sig = signals.get("steps_per_second")
        rate = sig.last if sig is not None and len(sig) else None
    if status != "running":
        rate = rate if status == "paused" else None
    eta = None
    if status == "running" and target and rate:
        eta = max(target - steps, 0) / rate
    fraction = min(steps / target, 1.0) if target else 0.0
    error = getattr(session, "error", None)
    error_text = f"{type(error).__name__}: {error}" if error is not None and status == "failed" else None
    rewards = signals.get("episode_reward")
    reward_mean = rewards.mean(last=10) if rewards is not None and len(rewards) else None

    rewards_steps = rewards.snapshot()[0] if rewards is not None else np.zeros(0, dtype=np.int64)
    series: dict[str, SeriesView] = {}
    for plot in plots:
        for name in (plot, *COMPANIONS.get(plot, ())):
            if name in series:
                continue
            view = series_view(
                signals,
                name,
                x_axis=x_axis,
                smoothing=smoothing,
                max_points=max_points,
                episode_steps=rewards_steps,
                since=None if since is None else since.get(name),
            )
            if view is not None:
                series[name] = view

    enabled = {
        "start": status not in ACTIVE,
        "pause": status == "running",
        "resume": status == "paused",
        "stop": status in ACTIVE,
        "save": steps > 0,
    }
    return DashboardView(
        device="" if choice is None else str(choice.device),
        device_reason="" if choice is None else str(choice.reason),
        algorithm=algorithm,
        status=status,
        steps=steps,
        target_steps=int(target) if target else None,
        episodes=episodes,
        elapsed=float(session.elapsed),
        steps_per_second=rate,
        eta=eta,
        fraction=fraction,
        end_reason=end_reason(status, getattr(session, "stop_reason", None), error),
        error=error_text,
        reward_mean=reward_mean,
        signal_names=tuple(sorted(set(names) | set(plots))),
        plotted=plots,
        enabled=enabled,
        series=series,
    )


def event_label(event: Any) -> str:
    """A short text for a live edit or env call (``workbench.run.live_edits.Event``):
    ``learning_rate 0.001 → 0.0001``, ``set_difficulty(3)``."""

    def short(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, dict) and "schedule" in value:
            return f"{value['schedule']}({value.get('start', value.get('value'))}→{value.get('end', '')})"
        if isinstance(value, dict) and "type" in value:
            return str(value["type"])
        text = repr(value) if isinstance(value, str) else str(value)
        return text if len(text) <= 24 else text[:21] + "..."

    if event.kind == "call_env":
        new = event.new or {}
        parts = [short(a) for a in new.get("args", [])] + [f"{k}={short(v)}" for k, v in new.get("kwargs", {}).items()]
        return f"{event.name}({', '.join(parts)})"
    return f"{event.name} {short(event.old)} → {short(event.new)}"


def event_markers(events: Iterable[Any], axis: str, episode_steps: np.ndarray) -> list[tuple[float, str]]:
    """Where the plots mark each event (live edits, env calls) on the x axis ``axis``, with its
    label; events at the same x share one marker (their labels joined)."""
    merged: dict[float, list[str]] = {}
    for event in events:
        if axis == "time":
            x = float(event.time)
        else:
            x = float(x_values(axis, np.asarray([event.step]), np.zeros(1), episode_steps)[0])
        merged.setdefault(x, []).append(event_label(event))
    return [(x, "; ".join(labels)) for x, labels in sorted(merged.items())]
