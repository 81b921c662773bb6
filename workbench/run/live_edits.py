"""Steering a session while it trains: live hyperparameter edits and calls on the envs, recorded.

``session.set(**values)`` and ``session.call_env(name, *args, **kwargs)`` land here. Both work
while the session is idle, running or paused, from any thread:

* running: the request is queued and the training thread carries it out between two env steps
  (never during an update), outside the session's lock; the caller waits for it (60 s at most) and
  gets its result or its error. A ``stop(timeout=...)`` that times out while an env call hangs gives
  the run up as for a hung ``env.step``, and the caller gets a ``TimeoutError`` at once;
* idle, paused or ended: it is carried out at once, under the session's lock (a paused loop is
  waiting on that lock, so it cannot race).

An edit is checked as the agent's constructor checks its hyperparameters
(``workbench.agents.live``), applied to the learner, and sent to the backend's acting replicas
(Ray workers; in-process and local workers act with the learner itself). A call reaches every env
copy (``runner.call``). Each becomes an :class:`Event` in ``session.events``; an edit to a number
is also a signal ``set/<name>`` (its value at the step it changed, a schedule's current value) so
``signals.csv`` shows it; events are saved in ``meta.json`` (``session.events``, plain JSON) and
come back with ``Session.reopen``. See docs/live-edits.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..agents.live import apply_edits, check_edits, editable
from ..exploration import Exploration
from ..schedules import Schedule

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["SIGNAL_PREFIX", "Event", "LiveControl", "editable_hyperparameters"]

SIGNAL_PREFIX = "set/"
"""Signals named ``set/<hyperparameter>`` hold the value an edit set, at the step it was made (a
slash, as in ``worker_3/...``: every tracker takes it in a metric name, where a colon is not)."""

_TIMEOUT_S = 60.0  # longest a caller waits for the training thread to carry out its request


@dataclasses.dataclass(frozen=True)
class Event:
    """One change made to a run while it lived: ``kind`` ``"set"`` (a hyperparameter ``name``
    changed from ``old`` to ``new``) or ``"call_env"`` (method ``name`` called on every env copy,
    ``new`` holding its ``args`` and ``kwargs``), at env step ``step``, ``time`` seconds into the run.
    ``old`` and ``new`` are strict JSON data (a schedule or exploration as its dict, a NaN as
    ``"nan"``, an array as a list, a function as its repr: see ``_json``), so a save always loads."""

    kind: str
    step: int
    name: str
    old: Any
    new: Any
    time: float

    def to_dict(self) -> dict[str, Any]:
        """Plain, strict JSON data (what a checkpoint stores)."""
        return _json(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        """Read back what :meth:`to_dict` wrote."""
        return cls(
            kind=str(data["kind"]),
            step=int(data["step"]),
            name=str(data["name"]),
            old=data.get("old"),
            new=data.get("new"),
            time=float(data.get("time", 0.0)),
        )


def _json(value: Any, depth: int = 0) -> Any:
    """A value as strict JSON data, which every save writes and every load reads back: numbers,
    strings, bools and None as they are; a NaN or infinite number as the string ``"nan"``,
    ``"inf"`` or ``"-inf"``; lists, tuples, sets (sorted when they can be) and numpy arrays as
    lists; numpy and torch scalars as numbers; dicts with string keys; a schedule or an exploration
    as its ``to_dict()``; anything else (a function, an object) as its ``repr``."""
    if depth > _MAX_DEPTH:
        return repr(value)
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(float(value))
    if isinstance(value, np.generic | np.ndarray | torch.Tensor):
        return _json(value.tolist(), depth + 1)
    if callable(getattr(value, "to_dict", None)):  # a schedule, an exploration
        return _json(value.to_dict(), depth + 1)
    if isinstance(value, dict):
        return {str(k): _json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        try:
            value = sorted(value)
        except TypeError:
            value = list(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [_json(v, depth + 1) for v in value]
    return repr(value)


_MAX_DEPTH = 20  # deeper values are stored as their repr (a self-referencing list stays finite)


def _number(value: Any, progress: float) -> float | None:
    """The number an edit puts on the ``set/`` signal: the value, a schedule's or an exploration's
    current value, True/False as 1/0; None when it is not a number (``"auto"``, None)."""
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, Schedule):
        return float(value(progress))
    if isinstance(value, Exploration):
        return float(value.value(progress))  # its current strength (epsilon, noise stddev)
    return None


class _Request:
    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work
        self.started = False
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        self.started = True
        try:
            self.result = self.work()
        except BaseException as exc:  # handed to the caller; the run goes on
            self.error = exc
        self.done = True


class LiveControl:
    """A run's live edits and env calls: the queue the training thread serves, and the records."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx  # the run (workbench.run.context.RunContext): its state, control, runner, sinks
        self.pending: list[_Request] = []
        self.calls: list[tuple[str, tuple, dict[str, Any]]] = []  # replayed on env copies built later

    # -- carrying requests out -------------------------------------------------------------------

    def submit(self, work: Callable[[], Any]) -> Any:
        """Run ``work`` where it cannot race the training loop; return its result or raise its error."""
        control = self.ctx.control
        with control.cond:
            queued = (
                control.status == "running"
                and control.is_alive
                and not control.in_loop_thread()
                and not control.abandoned
            )
            if not queued:
                return work()
            request = _Request(work)
            self.pending.append(request)
            control.cond.notify_all()
            # The request runs outside the lock (see serve), so this wait ends on time, and at once
            # when a stop gives the run up meanwhile (a hung env call).
            if not control.cond.wait_for(lambda: request.done or control.abandoned, timeout=_TIMEOUT_S):
                if request in self.pending:
                    self.pending.remove(request)
                if request.started:
                    raise TimeoutError(
                        f"the training thread has been carrying this request out for over {_TIMEOUT_S:g} s (it is "
                        f"in {control.activity()}); it goes on there, and its result will not reach you"
                    )
                raise TimeoutError(
                    f"the training thread did not reach a step boundary within {_TIMEOUT_S:g} s (it is in "
                    f"{control.activity()}); nothing was changed"
                )
            if not request.done:
                if request in self.pending:
                    self.pending.remove(request)
                raise TimeoutError(
                    f"the run was given up while this request waited or ran ({control.error}); "
                    "its result will not reach you"
                )
        if request.error is not None:
            raise request.error
        return request.result

    def serve(self) -> None:
        """Carry out the queued requests (the training thread, between steps, or at the run's end),
        one at a time. A request runs outside the session's lock unless the caller holds it (a
        paused loop does): a slow env call then holds up neither ``stop(timeout=...)`` nor the
        caller's own wait, and ``stop`` can give the run up as for a hung ``env.step``."""
        control = self.ctx.control
        while True:
            with control.cond:
                if not self.pending:
                    control.cond.notify_all()
                    return
                request = self.pending.pop(0)
            request.run()
            with control.cond:
                control.cond.notify_all()

    # -- the commands ----------------------------------------------------------------------------

    def set(self, values: dict[str, Any]) -> dict[str, Any]:
        """``session.set``: check at once (in the caller's thread), apply where it cannot race."""
        agent = self.ctx.state.agent
        check_edits(agent, values, owner="Session.set")
        return self.submit(lambda: self._apply(dict(values)))

    def _apply(self, values: dict[str, Any]) -> dict[str, Any]:
        s = self.ctx.state
        agent = s.agent
        old = apply_edits(agent, values)
        runner = self.ctx.runner
        if runner is not None:
            runner.set_config(values)  # acting replicas (Ray workers) get the edit too
        step, now, progress = s.steps, s.elapsed, agent.progress
        for name, new in values.items():
            event = Event("set", step, name, _json(old[name]), _json(new), now)
            s.events.append(event)
            tracking = self.ctx.tracking
            if tracking is not None:  # trackers note the edit (workbench.tracking: log_event)
                tracking.log_event(step, name, event.old, event.new)
            number = _number(new, progress)
            if number is not None:
                s.signals.record(SIGNAL_PREFIX + name, step, number, now)
        return old

    def call_env(self, name: str, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        """``session.call_env``: the method on every env copy, between steps; the results in env order."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"call_env needs a method name such as 'set_difficulty', got {name!r}")
        return self.submit(lambda: self._call(name, tuple(args), dict(kwargs)))

    def _call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        s = self.ctx.state
        if s.env_source is None:
            raise ValueError(
                f"call_env({name!r}) calls a method on the session's env copies, but this session has none "
                "(the application owns the env): call the method on your env directly"
            )
        runner = self.ctx.ensure_runner()
        control = self.ctx.control
        if control.in_loop_thread():  # a stop that times out meanwhile names the call (RunControl.timed_out)
            with control.inside(f"call_env({name!r})"):
                results = runner.call(name, args, kwargs)
        else:
            results = runner.call(name, args, kwargs)
        self.calls.append((name, args, kwargs))
        s.events.append(
            Event("call_env", s.steps, name, None, {"args": _json(list(args)), "kwargs": _json(kwargs)}, s.elapsed)
        )
        return results

    def replay(self, runner: Any) -> None:
        """Make the calls of this run again, in order, on a runner's freshly built env copies
        (worker backends build new ones for every run), so every copy is configured alike."""
        for name, args, kwargs in self.calls:
            runner.call(name, args, kwargs)


def editable_hyperparameters(agent: Agent) -> dict[str, Any]:
    """The agent's editable hyperparameters and their current values (what a panel shows)."""
    return {name: getattr(agent.config, name) for name in editable(agent)}
