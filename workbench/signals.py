"""Signals: named, thread-safe time series that a run records and anyone may read.

A :class:`Signal` is one series (``episode_reward``, ``loss``, a user's own ``compression_ratio``...).
Each point has the env step it was recorded at, its value and the wall time since the run began.
The training thread appends; the dashboard, the app and the CSV exporter read snapshots.

Memory stays bounded on long runs. A point costs 24 bytes (int64 step, float64 value, float64
time), storage grows by doubling, and a signal holds at most ``max_points`` points (4 million by
default, 96 MB). When it is full it keeps every second point and from then on records every second
value (then every fourth, ...), so its span always reaches back to the first point at a coarser
resolution. 10 million values recorded into one signal therefore cost at most 96 MB; the same
values recorded into ten signals cost 10 x 24 bytes x 1 million = 240 MB.

Values are stored as float64, Python's own float, so a value reads back exactly as it was recorded
(``session.log("compression_ratio", 0.41)`` reads back 0.41, not float32's 0.4099999964).
"""

from __future__ import annotations

import csv
import inspect
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .files import replacing

if TYPE_CHECKING:  # pandas is optional and only needed for to_pandas()
    import pandas as pd

__all__ = ["Signal", "SignalSet"]

_INITIAL_CAPACITY = 256
_MAX_STEP = 2**63 - 1  # steps are held as int64
_MIN_STEP = -(2**63)
DEFAULT_MAX_POINTS = 4_000_000

Subscriber = Callable[[str, int, float], Any]


def _adapt_subscriber(fn: Callable[..., Any]) -> Subscriber:
    """Wrap ``fn`` so it is called as ``fn(name, step, value)`` whatever of those it takes."""
    if not callable(fn):
        raise TypeError(f"subscribe() needs a function, got {fn!r}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: pass everything
        return fn
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return fn
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3:
        return fn
    if len(positional) == 2:
        return lambda name, step, value: fn(step, value)
    if len(positional) == 1:
        return lambda name, step, value: fn(value)
    raise TypeError(f"a subscriber takes (name, step, value), (step, value) or (value); {fn!r} takes none")


class Signal:
    """One named time series: ``steps``, ``values`` and ``times`` as numpy arrays.

    Example::

        loss = session.signals["loss"]
        loss.last, loss.mean(last=100), loss.to_pandas()

    Appending is O(1) amortised and holds a lock only for the copy into the preallocated arrays.
    Readers get copies, so a snapshot never changes under them.
    """

    def __init__(self, name: str, *, max_points: int = DEFAULT_MAX_POINTS) -> None:
        if max_points < 2:
            raise ValueError(f"max_points must be at least 2, got {max_points}")
        self.name = name
        self.max_points = int(max_points)
        self._lock = threading.Lock()
        self._steps = np.empty(_INITIAL_CAPACITY, dtype=np.int64)
        self._values = np.empty(_INITIAL_CAPACITY, dtype=np.float64)
        self._times = np.empty(_INITIAL_CAPACITY, dtype=np.float64)
        self._size = 0
        self._stride = 1  # record every stride-th value once decimation has started
        self._skipped = 0
        self._count = 0  # values ever recorded, including those thinned out
        self._subscribers: list[Subscriber] = []

    # -- writing -------------------------------------------------------------------------------

    def append(self, step: int, value: float, time_s: float | None = None) -> None:
        """Record ``value`` at env step ``step`` (``time_s``: seconds since the run began).
        A step beyond a 64-bit integer is a ``ValueError`` naming the signal."""
        value = float(value)
        if not _MIN_STEP <= step <= _MAX_STEP:
            raise ValueError(
                f"signal {self.name!r}: step {step} is beyond what a signal holds (a 64-bit integer, at most "
                f"{_MAX_STEP}); record it at the run's step (session.log(name, value) without step=)"
            )
        with self._lock:
            self._count += 1
            if self._stride > 1:
                self._skipped += 1
                if self._skipped < self._stride:
                    return
                self._skipped = 0
            if self._size == self.max_points:
                self._decimate()
            if self._size == len(self._steps):
                self._grow()
            i = self._size
            self._steps[i] = step
            self._values[i] = value
            self._times[i] = time.perf_counter() if time_s is None else time_s
            self._size = i + 1
            subscribers = self._subscribers
        for fn in subscribers:
            fn(self.name, int(step), value)

    def extend(self, steps: np.ndarray, values: np.ndarray, times: np.ndarray) -> None:
        """Append many points at once, with the same thinning as :meth:`append` (vectorised).

        Subscribers are not called for bulk appends (used when loading a saved run).
        """
        steps = np.asarray(steps, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        times = np.asarray(times, dtype=np.float64)
        if not len(steps) == len(values) == len(times):
            raise ValueError(
                f"steps, values and times must have the same length, got {len(steps)}, {len(values)}, {len(times)}"
            )
        n = len(steps)
        with self._lock:
            self._count += n
            i = 0
            while i < n:
                stride = self._stride
                first = i + stride - 1 - self._skipped  # index of the next point this stride keeps
                if first >= n:
                    self._skipped += n - i
                    break
                room = self.max_points - self._size
                if room == 0:  # as in append(): thin out, then keep this point
                    self._decimate()
                    if self._size == len(self._steps):
                        self._grow()
                    j = self._size
                    self._steps[j], self._values[j], self._times[j] = steps[first], values[first], times[first]
                    self._size = j + 1
                    i = first + 1
                    continue
                end = min(n, first + room * stride)
                kept = np.arange(first, end, stride)
                while self._size + len(kept) > len(self._steps):
                    self._grow()
                a, b = self._size, self._size + len(kept)
                self._steps[a:b] = steps[kept]
                self._values[a:b] = values[kept]
                self._times[a:b] = times[kept]
                self._size = b
                self._skipped = end - 1 - int(kept[-1])
                i = end

    def _grow(self) -> None:
        capacity = min(max(2 * len(self._steps), _INITIAL_CAPACITY), self.max_points)
        for attr in ("_steps", "_values", "_times"):
            old = getattr(self, attr)
            new = np.empty(capacity, dtype=old.dtype)
            new[: self._size] = old[: self._size]
            setattr(self, attr, new)

    def _decimate(self) -> None:
        keep = slice(0, self._size, 2)
        n = len(range(*keep.indices(self._size)))
        for attr in ("_steps", "_values", "_times"):
            arr = getattr(self, attr)
            arr[:n] = arr[keep]
        self._size = n
        self._stride *= 2
        self._skipped = 0

    def subscribe(self, fn: Callable[..., Any]) -> Callable[[], None]:
        """Call ``fn`` after every append; returns a function that unsubscribes.

        ``fn`` may take ``(name, step, value)``, ``(step, value)`` or ``(value)``, by how many
        positional arguments it accepts. It runs in the thread that records (usually the training
        thread): keep it short and never touch widgets from it. An exception it raises propagates
        to the recorder, which for a training run means the run fails with that error.
        """
        fn = _adapt_subscriber(fn)
        with self._lock:
            self._subscribers = [*self._subscribers, fn]

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [f for f in self._subscribers if f is not fn]

        return unsubscribe

    # -- reading -------------------------------------------------------------------------------

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of ``(steps, values, times)`` taken under one lock, so they line up."""
        with self._lock:
            n = self._size
            return self._steps[:n].copy(), self._values[:n].copy(), self._times[:n].copy()

    @property
    def steps(self) -> np.ndarray:
        """Env step of each point (int64)."""
        return self.snapshot()[0]

    @property
    def values(self) -> np.ndarray:
        """Value of each point (float64: exactly what was recorded)."""
        return self.snapshot()[1]

    @property
    def times(self) -> np.ndarray:
        """Seconds since the run began, for each point (float64)."""
        return self.snapshot()[2]

    @property
    def last(self) -> float | None:
        """The most recent value, or None when nothing was recorded."""
        with self._lock:
            return float(self._values[self._size - 1]) if self._size else None

    @property
    def count(self) -> int:
        """How many values were ever recorded, including points thinned out to bound memory."""
        return self._count

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        return self._steps.nbytes + self._values.nbytes + self._times.nbytes

    def _reduce(self, last: int | None, reduce: Callable[[np.ndarray], Any]) -> float:
        """``reduce`` of the last ``last`` values (all when None); NaN when empty."""
        if last is not None and last <= 0:
            raise ValueError(f"last must be a positive number of points, got {last}")
        with self._lock:
            start = 0 if last is None else max(0, self._size - last)
            tail = self._values[start : self._size].astype(np.float64)
        return float(reduce(tail)) if tail.size else math.nan

    def mean(self, last: int | None = None) -> float:
        """Mean of the last ``last`` values (all when None); NaN when empty."""
        return self._reduce(last, np.mean)

    def std(self, last: int | None = None) -> float:
        """Standard deviation of the last ``last`` values (all when None); NaN when empty."""
        return self._reduce(last, np.std)

    def min(self, last: int | None = None) -> float:
        """Smallest of the last ``last`` values (all when None); NaN when empty."""
        return self._reduce(last, np.min)

    def max(self, last: int | None = None) -> float:
        """Largest of the last ``last`` values (all when None); NaN when empty."""
        return self._reduce(last, np.max)

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        last = self.last
        shown = "empty" if last is None else f"last={last:.4g}"
        return f"Signal({self.name!r}, {len(self)} points, {shown})"

    def to_pandas(self) -> pd.DataFrame:
        """A DataFrame with columns ``step``, ``value``, ``time`` (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError("to_pandas() needs pandas: pip install pandas") from exc
        steps, values, times = self.snapshot()
        return pd.DataFrame({"step": steps, "value": values, "time": times})


class SignalSet:
    """The signals of one run, by name. ``signals["loss"]`` is a :class:`Signal`.

    Reading a name that was never recorded raises ``KeyError`` listing those that exist;
    ``signals.get(name)`` returns None instead.
    """

    def __init__(self, *, max_points: int = DEFAULT_MAX_POINTS) -> None:
        self._signals: dict[str, Signal] = {}
        self._lock = threading.Lock()
        self._max_points = max_points
        self._subscribers: list[Subscriber] = []

    def signal(self, name: str) -> Signal:
        """The signal ``name``, created empty when it does not exist yet."""
        sig = self._signals.get(name)
        if sig is None:
            with self._lock:
                sig = self._signals.get(name)
                if sig is None:
                    sig = Signal(name, max_points=self._max_points)
                    for fn in self._subscribers:
                        sig.subscribe(fn)
                    self._signals = {**self._signals, name: sig}
        return sig

    def record(self, name: str, step: int, value: float, time_s: float | None = None) -> None:
        """Append ``value`` at ``step`` to the signal ``name``, creating it if needed."""
        self.signal(name).append(step, value, time_s)

    def subscribe(self, fn: Subscriber) -> None:
        """Call ``fn(name, step, value)`` for every point of every signal, present and future
        (fewer arguments work as in :meth:`Signal.subscribe`)."""
        fn = _adapt_subscriber(fn)
        with self._lock:
            self._subscribers.append(fn)
            signals = list(self._signals.values())
        for sig in signals:
            sig.subscribe(fn)

    def __getitem__(self, name: str) -> Signal:
        try:
            return self._signals[name]
        except KeyError:
            known = ", ".join(sorted(self._signals)) or "none yet"
            raise KeyError(f"no signal named {name!r}; recorded so far: {known}") from None

    def get(self, name: str) -> Signal | None:
        """The signal ``name``, or None when nothing was recorded under it."""
        return self._signals.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._signals

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._signals))

    def __len__(self) -> int:
        return len(self._signals)

    def names(self) -> list[str]:
        """Sorted names of the recorded signals."""
        return sorted(self._signals)

    def items(self) -> list[tuple[str, Signal]]:
        """``(name, signal)`` pairs, sorted by name."""
        return [(n, self._signals[n]) for n in self.names()]

    def __repr__(self) -> str:
        return f"SignalSet({', '.join(self.names())})"

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write every point to ``path`` as CSV rows ``signal,step,value,time`` (long format),
        through a temporary file renamed into place (``workbench.files``: a link is never followed)."""
        with replacing(os.fspath(path), owner="SignalSet.to_csv") as tmp, open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["signal", "step", "value", "time"])
            for name, sig in self.items():
                steps, values, times = sig.snapshot()
                for s, v, t in zip(steps.tolist(), values.tolist(), times.tolist()):
                    writer.writerow([name, s, repr(v), repr(t)])

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str]) -> SignalSet:
        """Read a file written by :meth:`to_csv`; raises ``ValueError`` naming the file and line
        (never quoting the file's contents, which may not be a signals file at all)."""
        path = os.fspath(path)
        out = cls()
        columns: dict[str, tuple[list[int], list[float], list[float]]] = {}
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header != ["signal", "step", "value", "time"]:
                raise ValueError(f"{path}: not a signals file (its first line is not signal,step,value,time)")
            for lineno, row in enumerate(reader, start=2):
                try:
                    name, step, value, t = row
                    if len(step) > 19 or not -(2**63) <= int(step) < 2**63:
                        raise ValueError("step out of range")
                    col = columns.setdefault(name, ([], [], []))
                    col[0].append(int(step))
                    col[1].append(float(value))
                    col[2].append(float(t))
                except ValueError as exc:
                    raise ValueError(
                        f"{path}, line {lineno}: malformed row (expected name, integer step, value, time)"
                    ) from exc
        for name, (steps, values, times) in columns.items():
            sig = out.signal(name)
            for step_, value_, time_ in zip(steps, values, times):
                sig.append(step_, value_, time_)
        return out

    def to_pandas(self) -> pd.DataFrame:
        """All signals in one long DataFrame with columns ``signal, step, value, time``."""
        import pandas as pd

        frames = [sig.to_pandas().assign(signal=name) for name, sig in self.items()]
        if not frames:
            return pd.DataFrame(columns=["signal", "step", "value", "time"])
        return pd.concat(frames, ignore_index=True)[["signal", "step", "value", "time"]]
