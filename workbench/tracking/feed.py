"""Feeding a run's sinks: a subscriber that only queues, and a flusher thread that batches.

The training thread records signals; the subscriber added here appends each point to a deque
(one allocation, no I/O, no lock held by anyone else), so the loop never waits on a file, a
database or a network. A flusher thread wakes every ``flush_every`` seconds, takes everything
queued and hands it to each sink as one batch. When the run ends the flusher is stopped, the rest
is written, the end is logged, and each sink is closed (flushed).

It takes the run's signals and facts, never the session itself. The run calls four methods:
:meth:`SinkFeed.run_started` (from ``start``), :meth:`SinkFeed.run_ended` (from the end of the
training thread), :meth:`SinkFeed.log_event` for live edits (``session.set``) and
:meth:`SinkFeed.log_video` for each evaluation video written.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .base import Point, RunInfo, Sink

if TYPE_CHECKING:
    from ..signals import SignalSet

__all__ = ["SinkFeed", "check_sinks"]

_MAX_QUEUED = 1_000_000  # points held while the sinks lag; the oldest go first beyond this
_CLOSE_TIMEOUT_S = 60.0


_METHODS = {"edit": "log_event", "end": "log_end", "video": "log_video"}


class _Event(tuple):
    """A live edit or a run end waiting in the queue (kept in order with the points)."""

    __slots__ = ()


def check_sinks(sinks: Any) -> list[Sink]:
    """Validate ``Session(sinks=...)``: a list of :class:`Sink` objects (each once)."""
    if isinstance(sinks, Sink):
        sinks = [sinks]
    if isinstance(sinks, str | bytes) or not isinstance(sinks, Iterable):
        raise TypeError(
            f"sinks must be a list of sinks such as [wb.TensorBoard('runs/tb'), wb.MLflow()], got {sinks!r}"
        )
    out: list[Sink] = []
    for i, sink in enumerate(sinks):
        if not isinstance(sink, Sink):
            hint = ""
            if isinstance(sink, type) and issubclass(sink, Sink):
                hint = f" (the class itself: write {sink.__name__}(...) to make one)"
            raise TypeError(
                f"sinks[{i}] is {sink!r}, not a sink{hint}; pass objects such as wb.TensorBoard('runs/tb'), "
                "wb.MLflow(), wb.WandB(offline=True), or your own wb.Sink subclass"
            )
        if any(s is sink for s in out):
            raise ValueError(f"sinks[{i}] ({sink!r}) is listed twice; list each sink once")
        out.append(sink)
    return out


class SinkFeed:
    """Moves one run's signals, live edits and run ends to its sinks, off the training loop.

    Parameters:
        signals: the run's signals (each new point is queued for the sinks).
        sinks: the sinks (validated by :func:`check_sinks`).
        facts: returns the run's facts when a run starts: ``algorithm``, ``env``, ``seed`` and
            ``hyperparameters`` (:class:`~workbench.tracking.base.RunInfo`'s fields).
        steps: returns the run's step counter now.
        flush_every: seconds between batches.
    """

    def __init__(
        self,
        signals: SignalSet,
        sinks: Any,
        *,
        facts: Callable[[], Mapping[str, Any]],
        steps: Callable[[], int],
        flush_every: float = 1.0,
    ) -> None:
        self.sinks = check_sinks(sinks)
        self.signals = signals
        self.facts = facts
        self.steps = steps
        self.flush_every = float(flush_every)
        self.run_id = uuid.uuid4().hex
        self.errors: list[tuple[Sink, BaseException]] = []
        """``(sink, error)`` for each sink that failed and was switched off."""
        self.dropped = 0
        """Points dropped because the sinks fell more than a million points behind."""
        self._queue: collections.deque[Any] = collections.deque()
        self._subscribed = False
        self._active: list[Sink] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._write_lock = threading.Lock()  # one batch at a time (flusher, final drain)
        first = facts()
        self._name = f"{str(first['algorithm']).lower()}-{first['env']}-{time.strftime('%Y%m%d-%H%M%S')}"

    # -- called by the run ----------------------------------------------------------------------

    def run_started(self) -> None:
        """Open every sink for a new run and start the flusher (``session.start`` calls this).

        A sink that cannot open raises here, in the caller's thread, before training begins.
        """
        if not self._subscribed:
            self.signals.subscribe(self._on_point)
            self._subscribed = True
        facts = self.facts()
        run = RunInfo(
            run_id=self.run_id,
            name=self._name,
            algorithm=facts["algorithm"],
            env=facts["env"],
            seed=facts["seed"],
            hyperparameters=facts["hyperparameters"],
            start_step=int(self.steps()),
        )
        opened: list[Sink] = []
        try:
            for sink in self.sinks:
                sink.open(run)
                opened.append(sink)
        except BaseException:
            for sink in opened:
                self._call(sink, "close")
            raise
        self._active = opened
        self._stop.clear()
        self._flusher = threading.Thread(target=self._flush_loop, name="workbench-sinks", daemon=True)
        self._flusher.start()

    def log_event(self, step: int, name: str, old: Any, new: Any) -> None:
        """Queue a live edit (``session.set``): setting ``name`` went from ``old`` to ``new``."""
        self._queue.append(_Event(("edit", int(step), name, old, new)))

    def log_video(self, step: int, video: Any) -> None:
        """Queue an evaluation video written at ``step`` (the video writer's thread calls this)."""
        self._queue.append(_Event(("video", int(step), video)))

    def run_ended(self, status: str, reason: str | None, error: BaseException | None = None) -> None:
        """Write what is queued, log the end, and close every sink (the training thread calls this last)."""
        if error is not None and reason is None:
            reason = f"error: {type(error).__name__}: {error}"
        self._queue.append(_Event(("end", int(self.steps()), status, reason)))
        # The flusher writes the rest, logs the end and closes the sinks: every sink call stays in its thread.
        self._join_flusher()
        if self._active:  # the flusher did not finish in time: close here rather than leave files open
            self._finish()

    # -- the queue ------------------------------------------------------------------------------

    def _on_point(self, name: str, step: int, value: float) -> None:
        # Runs in the recording thread: one append, nothing else.
        queue = self._queue
        if len(queue) >= _MAX_QUEUED:
            queue.popleft()
            self.dropped += 1
        queue.append(Point(name, step, value, time.time()))

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_every):
            self._drain()
        self._finish()

    def _finish(self) -> None:
        self._drain()
        with self._write_lock:
            active, self._active = self._active, []
            for sink in active:
                self._call(sink, "close")

    def _join_flusher(self) -> None:
        flusher = self._flusher
        if flusher is not None:
            self._stop.set()
            flusher.join(timeout=_CLOSE_TIMEOUT_S)
            self._flusher = None

    def _drain(self) -> None:
        with self._write_lock:
            queue = self._queue
            batch: list[Point] = []
            while queue:
                item = queue.popleft()
                if isinstance(item, Point):
                    batch.append(item)
                    continue
                if batch:
                    self._write(batch)
                    batch = []
                kind, *args = item
                for sink in list(self._active):
                    self._call(sink, _METHODS[kind], *args)
            if batch:
                self._write(batch)

    def _write(self, batch: list[Point]) -> None:
        for sink in list(self._active):
            self._call(sink, "write", batch)

    def _call(self, sink: Sink, method: str, *args: Any) -> None:
        try:
            getattr(sink, method)(*args)
        except Exception as exc:  # a sink never stops training: switch it off and say so
            self.errors.append((sink, exc))
            if sink in self._active:
                self._active = [s for s in self._active if s is not sink]
                try:
                    sink.close()
                except Exception:
                    pass
            warnings.warn(
                f"{sink!r} failed in {method}() and records nothing more of this run: {type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=1,
            )
