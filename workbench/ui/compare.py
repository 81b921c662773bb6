"""Overlay several runs' signals in one figure: live sessions and saved runs alike.

Runs that share a label (several seeds of one setting, or the runs inside one folder) are drawn
as their mean with a min–max band, as the Coach dashboard did with directory groups.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from ..signals import SignalSet
from .plots import MAX_POINTS, X_AXES, downsample, moving_average, x_values

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["compare", "load_signals"]

_SIGNALS_FILE = "signals.csv"
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
_GRID_POINTS = 500  # points of the common x grid that grouped runs are averaged on


def load_signals(path: str | os.PathLike[str]) -> SignalSet:
    """The signals of a run saved with ``session.save(path)``: a folder or a ``.zip`` of one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        csv_path = os.path.join(path, _SIGNALS_FILE)
        if not os.path.isfile(csv_path):
            raise FileNotFoundError(f"{path}: no {_SIGNALS_FILE} here; is it a run saved with session.save(path)?")
        return SignalSet.from_csv(csv_path)
    if os.path.isfile(path) and path.endswith(".zip"):
        try:
            with zipfile.ZipFile(path) as zf:
                if _SIGNALS_FILE not in zf.namelist():
                    raise FileNotFoundError(f"{path}: the archive holds no {_SIGNALS_FILE}; is it a saved run?")
                with tempfile.TemporaryDirectory(prefix="workbench-compare-") as tmp:
                    return SignalSet.from_csv(zf.extract(_SIGNALS_FILE, tmp))
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{path}: not a valid zip archive, possibly truncated ({exc})") from None
    raise FileNotFoundError(f"{path}: no such saved run (expected a folder written by session.save, or a .zip of one)")


def _expand(run: Any, index: int) -> tuple[str, list[SignalSet]]:
    """A default label and the signal sets one argument stands for (a folder of runs gives several)."""
    from ..session import Session

    if isinstance(run, Session):
        seed = "" if run.seed is None else f" seed {run.seed}"
        return f"{run.agent.algorithm}{seed}", [run.signals]
    if isinstance(run, SignalSet):
        return f"run {index + 1}", [run]
    if isinstance(run, str | os.PathLike):
        path = os.fspath(run)
        label = os.path.basename(os.path.normpath(path))
        if label.endswith(".zip"):
            label = label[: -len(".zip")]
        if os.path.isdir(path) and not os.path.isfile(os.path.join(path, _SIGNALS_FILE)):
            # A folder of saved runs is one group, like Coach's experiment directories.
            members = sorted(
                os.path.join(path, name)
                for name in os.listdir(path)
                if os.path.isfile(os.path.join(path, name, _SIGNALS_FILE)) or name.endswith(".zip")
            )
            if not members:
                raise FileNotFoundError(
                    f"{path}: neither a saved run ({_SIGNALS_FILE} missing) nor a folder of saved runs"
                )
            return label, [load_signals(member) for member in members]
        return label, [load_signals(path)]
    raise TypeError(f"compare() takes sessions, SignalSets or paths of saved runs, got {type(run).__name__}: {run!r}")


def _series(signals: SignalSet, signal: str, x: str, smoothing: int, label: str) -> tuple[np.ndarray, np.ndarray]:
    sig = signals.get(signal)
    if sig is None or len(sig) == 0:
        known = ", ".join(signals.names()) or "none"
        raise ValueError(f"run {label!r} has no {signal!r} signal; it recorded: {known}")
    steps, values, times = sig.snapshot()
    rewards = signals.get("episode_reward")
    episode_steps = rewards.snapshot()[0] if rewards is not None else steps
    xs = x_values(x, steps, times, episode_steps)
    return xs, moving_average(values, smoothing)


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def compare(
    *runs: Session | SignalSet | str | os.PathLike[str],
    signal: str = "episode_reward",
    labels: list[str] | tuple[str, ...] | None = None,
    x: str = "steps",
    smoothing: int = 1,
    max_points: int = MAX_POINTS,
    title: str | None = None,
) -> go.Figure:
    """One figure overlaying ``signal`` from several runs.

    Example::

        wb.compare(session_a, session_b, "runs/ppo-seed0", "runs/ppo-seed1.zip",
                   labels=["A", "B", "PPO", "PPO"], smoothing=10)

    Parameters:
        runs: live sessions, ``SignalSet`` objects, saved runs by path (a folder or ``.zip``), or a
            folder holding several saved runs (drawn as one group, labelled by the folder's name).
        signal: the signal to plot, e.g. ``"episode_reward"``, ``"loss"`` or a user signal.
        labels: one label per run; runs sharing a label are drawn as their mean with a min–max band.
        x: ``"steps"`` (env steps), ``"episodes"`` or ``"time"`` (wall time in seconds).
        smoothing: moving-average window in points, applied to each run before grouping.
        max_points: most points per drawn line.
        title: the figure's title (default: the signal's name).
    """
    if not runs:
        raise ValueError("compare() needs at least one run: a session, a SignalSet or the path of a saved run")
    if x not in X_AXES:
        raise ValueError(f"unknown x axis {x!r}; choose one of {', '.join(X_AXES)}")
    if not isinstance(smoothing, int) or smoothing < 1:
        raise ValueError(f"smoothing must be a window of at least 1 point, got {smoothing!r}")
    if labels is not None:
        if isinstance(labels, str) or len(labels) != len(runs):
            raise ValueError(f"labels must give one label per run: {len(runs)} runs, got labels={labels!r}")
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for i, run in enumerate(runs):
        default, members = _expand(run, i)
        label = str(labels[i]) if labels is not None else default
        if labels is None and label in groups:  # two runs with the same default name stay apart
            label = f"{label} ({i + 1})"
        groups.setdefault(label, []).extend(_series(m, signal, x, smoothing, label) for m in members)

    def hover(name: str, band: bool = False) -> str:
        # Readable hover text: the run's name in full, the axes by name, numbers rounded.
        text = f"<b>{name}</b><br>{X_AXES[x]}: %{{x:,.6~g}}<br>{signal}: %{{y:,.5~g}}"
        if band:
            text += "<br>min–max: %{customdata[0]:,.5~g} to %{customdata[1]:,.5~g}"
        return text + "<extra></extra>"

    fig = go.Figure()
    for k, (label, series) in enumerate(groups.items()):
        color = _PALETTE[k % len(_PALETTE)]
        if len(series) == 1:
            xs, ys = downsample(*series[0], max_points)
            fig.add_trace(
                go.Scatter(x=xs, y=ys, mode="lines", name=label, line={"color": color}, hovertemplate=hover(label))
            )
            continue
        lo = min(float(s[0][0]) for s in series)
        hi = max(float(s[0][-1]) for s in series)
        grid = np.linspace(lo, hi, min(_GRID_POINTS, max_points))
        stack = np.full((len(series), grid.size), np.nan)
        for j, (xs, ys) in enumerate(series):
            inside = (grid >= xs[0]) & (grid <= xs[-1])  # no extrapolation past a run's own range
            stack[j, inside] = np.interp(grid[inside], xs, ys)
        present = ~np.all(np.isnan(stack), axis=0)
        grid, stack = grid[present], stack[:, present]
        mean = np.nanmean(stack, axis=0)
        low, high = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
        fig.add_trace(
            go.Scatter(
                x=grid, y=high, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip", legendgroup=label
            )
        )
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=low,
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=_rgba(color, 0.2),
                name=f"{label} min–max of {len(series)}",
                showlegend=True,  # the band has its own legend entry (clicking it hides the band)
                hoverinfo="skip",
                legendgroup=label,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=mean,
                mode="lines",
                name=f"{label} (mean of {len(series)})",
                line={"color": color},
                legendgroup=label,
                customdata=np.stack([low, high], axis=1),
                hovertemplate=hover(f"{label} (mean of {len(series)})", band=True),
            )
        )
    fig.update_layout(
        title=title or signal,
        xaxis_title=X_AXES[x],
        yaxis_title=signal,
        template="plotly_white",
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 45},
        hoverlabel={"namelength": -1},  # never cut a run's name
    )
    return fig
