"""Keeping control of sessions when something goes wrong: a hung env, the interpreter ending, a
second session on a busy agent, ``wait()`` from the training thread.

* :class:`StuckError`: what a session reports when its training thread does not reach a step
  boundary within a control call's timeout (Python cannot interrupt a thread that is inside
  ``env.step``), naming what it is stuck in and for how long.
* :class:`ControlError`: a control call that cannot work from where it was made (``wait()`` from
  the training thread, which would wait for itself). It is raised to the caller; raised out of
  ``stop_when`` it does not fail the run.
* The live sessions of this process (held weakly, in start order): ``wb.sessions()`` lists the ones
  training; starting a session while others still train warns (in a notebook, re-running a training
  cell starts a new session while the old one keeps training, each at half speed); one agent trains
  in one session at a time; and an ``atexit`` hook, registered once, that stops every live session when the
  interpreter exits: a torch thread still running at interpreter teardown aborts the process
  (``terminate called without an active exception``, exit code 134), so the run is stopped and its
  thread joined first, and one line on stderr says which session stopped at which step.

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
    "live_sessions",
    "sessions",
    "start_thread",
    "stop_all_at_exit",
]

EXIT_TIMEOUT_S = 5.0
"""Longest the exit hook waits for one session's training thread to end."""

_started: list[weakref.ref[Any]] = []  # live sessions in start order; dead references pruned on each use
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


def start_thread(session: Any, thread: threading.Thread) -> None:
    """Start ``session``'s training ``thread`` and add the session to this process's live sessions
    (weakly), registering the exit hook the first time. Raises ``RuntimeError`` (and starts
    nothing) when another live session trains the same agent: two threads would share its memory."""
    global _hook_registered
    with _lock:
        for other in _known():
            if other is not session and other.agent is session.agent and other.is_alive:
                raise RuntimeError(
                    f"this {session.agent.algorithm} agent is already training in another session "
                    f"({other!r}): one agent trains in one session at a time. Stop that session first "
                    "(other.stop() or other.wait()), or train a separate agent in this one"
                )
        if not _hook_registered:
            atexit.register(stop_all_at_exit)
            _hook_registered = True
        training = [s for s in _known() if s is not session and s.status in ("running", "paused")]
        if not any(s is session for s in _known()):
            _started.append(weakref.ref(session))
        thread.start()
    if training:
        listing = "; ".join(repr(s) for s in training)
        warnings.warn(
            f"{len(training)} other session(s) still training in this process, sharing its CPU: {listing}. "
            "Stop the ones you no longer need (wb.sessions() lists them: for s in wb.sessions(): s.stop()).",
            RuntimeWarning,
            stacklevel=3,
        )


def _known() -> list[Any]:
    """The sessions started in this process that still exist, oldest first (call under the lock)."""
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
    return [s for s in known if s.status in ("running", "paused")]


def live_sessions() -> list[Any]:
    """The sessions of this process whose training thread is alive (training, paused or stuck)."""
    with _lock:
        known = _known()
    return [s for s in known if s.is_alive]


def stop_all_at_exit(timeout: float = EXIT_TIMEOUT_S) -> None:
    """The ``atexit`` hook: stop every live session, join its thread (at most ``timeout`` seconds
    each) and write one line per session on stderr. The script's exit code is left as it is."""
    for session in live_sessions():
        try:
            control = session.run_control
            control.stop_at_exit(timeout)
            if session.is_alive:
                line = f"workbench: at exit, could not stop {session!r} within {timeout:g} s ({control.activity()})"
            else:
                line = f"workbench: at exit, stopped {session!r} at step {session.steps}"
        except Exception as exc:  # an exit hook must not raise: report and go on to the next session
            line = f"workbench: at exit, stopping {session!r} failed: {exc}"
        try:
            print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
