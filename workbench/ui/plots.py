"""Pure-numpy helpers the plots share: smoothing, downsampling and the x axis of a signal.

Nothing here imports ipywidgets or plotly, so it is cheap to test and to reuse.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_POINTS", "X_AXES", "downsample", "moving_average", "x_values"]

MAX_POINTS = 2000
"""Most points one trace sends to the browser: a million-step run draws as fast as a short one."""

X_AXES = {"steps": "env steps", "episodes": "episodes", "time": "wall time (s)"}
"""The x axes a plot can use, with their axis titles."""


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` points; the first points average what exists so far.

    The result has the same length as ``values``, so it lines up with the same x values.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1 point, got {window}")
    values = np.asarray(values, dtype=np.float64)
    if window == 1 or values.size == 0:
        return values.copy()
    # Cumulative sums give every window's sum in O(n); the start uses a shorter window.
    csum = np.cumsum(np.insert(values, 0, 0.0))
    n = values.size
    idx = np.arange(1, n + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` of the points ``(x, y)``, chosen to keep the curve's shape.

    The points are cut into buckets of equal count and each bucket keeps its lowest and its
    highest point (in x order), so spikes survive where plain striding would drop them. The first
    and last points are always kept. Returns float64 arrays (plotly sends them as binary buffers).
    """
    if max_points < 4:
        raise ValueError(f"max_points must be at least 4, got {max_points}")
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D arrays of the same length, got shapes {x.shape} and {y.shape}")
    n = x.size
    if n <= max_points:
        return x, y
    buckets = (max_points - 2) // 2
    inner = y[1 : n - 1]
    size = -(-inner.size // buckets)  # ceil: every bucket but the last holds `size` points
    # Pad to a full rectangle; NaNs and padding never win a bucket's min or max.
    low = np.full(buckets * size, np.inf)
    high = np.full(buckets * size, -np.inf)
    low[: inner.size] = np.where(np.isnan(inner), np.inf, inner)
    high[: inner.size] = np.where(np.isnan(inner), -np.inf, inner)
    offsets = np.arange(buckets) * size + 1
    lows = offsets + low.reshape(buckets, size).argmin(axis=1)
    highs = offsets + high.reshape(buckets, size).argmax(axis=1)
    keep = np.unique(np.concatenate(([0, n - 1], lows, highs)))
    keep = keep[keep < n]  # the last bucket may be part padding
    return x[keep], y[keep]


def x_values(axis: str, steps: np.ndarray, times: np.ndarray, episode_steps: np.ndarray) -> np.ndarray:
    """The x value of each point for the chosen ``axis`` (one of :data:`X_AXES`).

    ``episodes`` counts the episodes that had ended when the point was recorded, found from
    ``episode_steps`` (the steps of the ``episode_reward`` points), so every signal can share it.
    """
    if axis == "steps":
        return np.asarray(steps, dtype=np.float64)
    if axis == "time":
        return np.asarray(times, dtype=np.float64)
    if axis == "episodes":
        return np.searchsorted(np.asarray(episode_steps), np.asarray(steps), side="right").astype(np.float64)
    raise ValueError(f"unknown x axis {axis!r}; choose one of {', '.join(X_AXES)}")
