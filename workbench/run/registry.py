"""Keeping control of sessions when something goes wrong: a hung env, the interpreter ending, a
second session on a busy agent, ``wait()`` from the training thread.

* :class:`StuckError`: what a session reports when its training thread does not reach a step
  boundary within a control call's timeout (Python cannot interrupt a thread that is inside
  ``env.step``), naming what it is stuck in and for how long.
* :class:`ControlError`: a control call that cannot work from where it was made (``wait()`` from
  the training thread, which would wait for itself). It is raised to the caller; raised out of
  ``stop_when`` it does not fail the run.
* The live runs of this process (sessions, sweeps, populations; held weakly, in start order):
  ``wb.sessions()`` lists the sessions training; starting a session while others still train warns
  (in a notebook, re-running a training cell starts a new session while the old one keeps training,
  each at half speed); one agent trains in one session at a time; and an ``atexit`` hook, registered
  once, that stops every live run when the interpreter exits: a torch thread still running at
  interpreter teardown aborts the process (``terminate called without an active exception``, exit
  code 134), so the run is stopped and its thread joined first, and one line on stderr says which
  run stopped (a session: at which step).

Nothing here outlives what it tracks: the set of live sessions is weak, so a session that is
garbage collected leaves it, and a second run in the same kernel starts from a clean slate.
"""

from __future__ import annotations

import atexit
import sys
import threading
import warnings
import weakref
from typing import Any

__all__ = [
    "EXIT_TIMEOUT_S",
    "ControlError",
    "StuckError",
    "live_runs",
    "live_sessions",
    "sessions",
    "start_thread",
    "stop_all_at_exit",
]

EXIT_TIMEOUT_S = 5.0
"""Longest the exit hook waits for one session's training thread to end."""

_started: list[weakref.ref[Any]] = []  # live runs in start order; dead references pruned on each use
_lock = threading.RLock()
_hook_registered = False


class ControlError(RuntimeError):
    """A control call made where it cannot work, e.g. ``wait()`` from the session's own training
    thread (from ``stop_when`` or a signal subscriber). The run goes on; the message says what to do."""


class StuckError(RuntimeError):
    """The training thread did not come back from ``where`` (e.g. ``"env.step of env 0"``) within a
    control call's timeout. ``seconds`` is how long it had been inside it when the error was made."""

    def __init__(self, message: str, *, where: str, seconds: float) -> None:
        super().__init__(message)
        self.where = where
        self.seconds = seconds


def start_thread(run: Any, thread: threading.Thread, agent: Any = None) -> None:
    """Start ``run``'s ``thread`` (a session, a sweep or a population: anything with a
    ``run_control``) and add the run to this process's live runs (weakly), registering the exit hook
    the first time. A session passes its ``agent``: ``RuntimeError`` (and nothing started) when
    another live session trains the same agent, as two threads would share its memory; and a
    warning when other sessions still train beside it."""
    global _hook_registered
    with _lock:
        known = _known()
        if agent is not None:
            for other in known:
                if other is not run and _kind(other) == "session" and other.agent is agent and other.is_alive:
                    raise RuntimeError(
                        f"this {agent.algorithm} agent is already training in another session "
                        f"({other!r}): one agent trains in one session at a time. Stop that session first "
                        "(other.stop() or other.wait()), or train a separate agent in this one"
                    )
        if not _hook_registered:
            atexit.register(stop_all_at_exit)
            _hook_registered = True
        training = [s for s in known if s is not run and _kind(s) == "session" and s.status in ("running", "paused")]
        if not any(s is run for s in known):
            _started.append(weakref.ref(run))
        thread.start()
    if training and agent is not None:
        listing = "; ".join(repr(s) for s in training)
        warnings.warn(
            f"{len(training)} other session(s) still training in this process, sharing its CPU: {listing}. "
            "Stop the ones you no longer need (wb.sessions() lists them: for s in wb.sessions(): s.stop()).",
            RuntimeWarning,
            stacklevel=3,
        )


def _kind(run: Any) -> str:
    """``"session"``, ``"sweep"`` or ``"population"``: the kind its ``run_control`` names."""
    return str(run.run_control.kind)


def _known() -> list[Any]:
    """The runs started in this process that still exist, oldest first (call under the lock)."""
    alive = [s for s in (ref() for ref in _started) if s is not None]
    _started[:] = [weakref.ref(s) for s in alive]
    return alive


def sessions() -> list[Any]:
    """The sessions of this process that are training now (running or paused), oldest first.

    Example::

        for s in wb.sessions():
            s.stop()
    """
    with _lock:
        known = _known()
    return [s for s in known if _kind(s) == "session" and s.status in ("running", "paused")]


def live_sessions() -> list[Any]:
    """The sessions of this process whose training thread is alive (training, paused or stuck)."""
    return [s for s in live_runs() if _kind(s) == "session"]


def live_runs() -> list[Any]:
    """The runs of this process (sessions, sweeps, populations) whose thread is alive, oldest first."""
    with _lock:
        known = _known()
    return [s for s in known if s.is_alive]


def stop_all_at_exit(timeout: float = EXIT_TIMEOUT_S) -> None:
    """The ``atexit`` hook: stop every live run, oldest first (a sweep or a population before the
    sessions it runs, so that they end as stopped with it rather than one by one), join its thread
    (at most ``timeout`` seconds each) and write one line per run on stderr. The script's exit code
    is left as it is."""
    for run in live_runs():
        if not run.is_alive:  # ended with a run stopped before it (a member of a population)
            continue
        try:
            control = run.run_control
            control.stop_at_exit(timeout)
            if run.is_alive:
                line = f"workbench: at exit, could not stop {run!r} within {timeout:g} s ({control.activity()})"
            elif control.kind == "session":
                line = f"workbench: at exit, stopped {run!r} at step {run.steps}"
            else:
                line = f"workbench: at exit, stopped {run!r}"
        except Exception as exc:  # an exit hook must not raise: report and go on to the next run
            line = f"workbench: at exit, stopping {run!r} failed: {exc}"
        try:
            print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
