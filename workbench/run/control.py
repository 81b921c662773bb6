"""The run's control state: status, the pause and stop requests, what the loop is inside, timeouts.

:class:`RunControl` is the one place a session's status and its control flags live. Every thread
that steers or watches a run goes through it: the session's commands (``pause``, ``resume``,
``stop``, ``wait``), the loop between two steps (:meth:`RunControl.wait_while_paused`), live edits
(``workbench.run.live_edits``, which queue work for the loop under :attr:`RunControl.cond`) and the
exit hook of ``workbench.run.registry`` (:meth:`RunControl.stop_at_exit`, :meth:`RunControl.activity`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .registry import ControlError, StuckError

_POLL_S = 0.01
"""How often the main thread looks at a run's end flag while it waits (:meth:`RunControl.wait_ended`)."""

__all__ = ["CONTROL_TIMEOUT_S", "STATUSES", "RunControl"]

STATUSES = ("idle", "running", "paused", "stopped", "finished", "failed")
"""Every value ``Session.status`` can take."""

# What the loop may be stuck in inside the env's own code: a control call that times out there
# gives the run up (Python cannot interrupt it); elsewhere (an update) it lands when that returns.
_ENV_CODE = ("env.step", "call_env")

CONTROL_TIMEOUT_S = 60.0
"""Longest a control call waits for the loop to acknowledge it, by default."""


class RunControl:
    """Status, pause/stop/abandon flags, the training thread and what it is inside, for one session.

    ``owner`` is the session (its public ``error`` and ``stop_reason`` are set when a run is given
    up); ``runner`` returns the runner stepping its envs now (or None), to say which env a stuck
    step is in and to interrupt worker backends.

    Example::

        control = session.run_control
        control.status                 # "running"
        control.activity()             # "env.step of env 2 for 61.0 s"
    """

    def __init__(self, owner: Any, runner: Callable[[], Any]) -> None:
        self.owner = owner
        self.runner = runner
        self.cond = threading.Condition(threading.RLock())
        """Guards everything here; notified on every change."""
        self.status = "idle"
        self.pause_requested = False
        self.stop_requested = False
        self.abandoned = False
        """A control call gave the run up: its thread is stuck in a step (see :meth:`timed_out`)."""
        self.thread: threading.Thread | None = None
        self.ended = threading.Event()
        """Set by the training thread as its last act. Waiting on it, not on ``Thread.join``: a
        ``Thread.join`` cut short by Ctrl-C can leave a thread that still runs marked as stopped
        (CPython before 3.13), and a stop would then return while the run goes on."""
        self.ended.set()
        self.where: tuple[str, float] | None = None
        """What the loop thread is inside (``"env.step"``, ``"agent.update"``...), and since when."""

    # -- state ----------------------------------------------------------------------------------

    @property
    def is_alive(self) -> bool:
        """True while the training thread runs (also while paused, or stuck)."""
        return self.thread is not None and self.thread.ident is not None and not self.ended.is_set()

    def in_loop_thread(self) -> bool:
        """True when called from the training thread itself."""
        return self.thread is not None and threading.current_thread() is self.thread

    def set_status(self, status: str) -> None:
        """Set the status and wake every thread waiting on it."""
        with self.cond:
            self.status = status
            self.cond.notify_all()

    @contextlib.contextmanager
    def inside(self, name: str) -> Iterator[tuple[str, float]]:
        """``with control.inside("agent.update"):`` notes what the loop is doing, for messages."""
        where = self.where = (name, time.monotonic())
        try:
            yield where
        finally:
            self.where = None

    def activity(self) -> str:
        """What the training thread is inside now, for messages: "env.step of env 2 for 61.0 s"."""
        where = self.where
        if where is None or not self.is_alive:
            return "no step (between steps)"
        name, since = where
        if name == "env.step":
            name = self.stepping()
        return f"{name} for {time.monotonic() - since:.1f} s"

    def stepping(self) -> str:
        """Which env step the loop is inside, as precisely as the runner knows it."""
        runner = self.runner()
        if runner is not None and runner.stepping is not None:
            return f"env.step of env {runner.stepping}"
        if runner is not None and runner.backend in ("local", "ray"):
            return f"env.step ({runner.backend} workers)"
        return "the agent's decision or env.step"

    # -- starting ---------------------------------------------------------------------------------

    def refuse_if_running(self) -> None:
        """A ``RuntimeError`` when a run is going (running or paused)."""
        if self.status in ("running", "paused"):
            raise RuntimeError(
                f"this session is already {self.status}: call stop() (or wait()) before starting it again"
            )

    def join_previous(self) -> None:
        """Before a new start: a run that has just ended finishes its last lines; a run whose
        thread a control call gave up on (stuck in ``env.step``) cannot be started again."""
        if not self.is_alive or self.in_loop_thread():
            return
        if self.abandoned:
            raise RuntimeError(
                f"this session's previous run is still stuck in {self.activity()}: Python cannot "
                "interrupt it, and a new run would share its envs. Start again once that step has "
                "returned (session.is_alive turns False), or build a new Session with a fresh env; "
                "run the env in worker processes with step_timeout= to have a hung env killed"
            )
        self.wait_ended(CONTROL_TIMEOUT_S)

    def begin(self, thread: threading.Thread) -> None:
        """A new run on ``thread`` (not started yet): flags cleared, status ``running`` (under :attr:`cond`)."""
        self.pause_requested = self.stop_requested = self.abandoned = False
        self.status = "running"
        self.thread = thread
        self.ended = threading.Event()

    # -- commands ---------------------------------------------------------------------------------

    def pause(self, timeout: float = CONTROL_TIMEOUT_S) -> None:
        """Ask the loop to pause and wait until it has (see ``Session.pause``)."""
        with self.cond:
            if self.status != "running":
                return
            self.pause_requested = True
            self.cond.notify_all()
            if self.in_loop_thread():
                return
            if self.cond.wait_for(lambda: self.status != "running", timeout=timeout):
                return
        self.timed_out("pause", timeout)

    def release(self) -> None:
        """Let a paused loop continue (``session.resume()``); waits until it has."""
        with self.cond:
            self.pause_requested = False
            self.cond.notify_all()
            if self.status == "paused" and not self.in_loop_thread():
                self.cond.wait_for(lambda: self.status != "paused", timeout=CONTROL_TIMEOUT_S)

    def stop(self, timeout: float = CONTROL_TIMEOUT_S) -> None:
        """Ask the loop to stop and join its thread, giving the run up after ``timeout`` seconds
        when it is stuck in a step (see ``Session.stop``)."""
        with self.cond:
            if self.status not in ("running", "paused"):
                return
            self.stop_requested = True
            self.cond.notify_all()
        if self.thread is not None and not self.in_loop_thread():
            self.wait_ended(timeout)
            if self.is_alive:
                self.timed_out("stop", timeout)

    def stop_at_exit(self, timeout: float) -> None:
        """The exit hook's stop (``workbench.run.registry``): stop quietly within ``timeout`` seconds."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.stop(timeout=timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; True when it has, False when ``timeout`` passed first.
        Raises :class:`ControlError` from the training thread itself."""
        if self.in_loop_thread():
            raise ControlError(
                "wait() was called from the session's own training thread (from stop_when or a signal "
                "subscriber), where it would wait for itself forever; the run goes on. To end the run "
                "there, return True from stop_when or call session.stop()"
            )
        # Wait in slices so Ctrl-C reaches the caller promptly.
        deadline = None if timeout is None else time.monotonic() + timeout
        # A given-up run (stuck in env.step) has ended for the session, whatever its thread does.
        while self.is_alive and not self.abandoned:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self.wait_ended(0.1 if remaining is None else min(0.1, remaining))
        return True

    def wait_ended(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: as long as it takes) for :attr:`ended`; True once it is set.

        In the main thread this polls the flag between short sleeps instead of ``Event.wait``: Ctrl-C
        lands in the main thread, and CPython can raise it just after ``Event.wait`` has taken the event's
        internal lock and before the ``with`` that releases it is entered; that lock then stays held, and
        the training thread's last act (``ended.set()``) and every later wait block on it for good (a
        Ctrl-C that hung a script under load). A sleep that Ctrl-C cuts short holds no lock."""
        ended = self.ended
        if threading.current_thread() is not threading.main_thread():
            return ended.wait(timeout)
        # 10 ms slices: each wake-up takes the GIL from the training thread for a moment, so not much finer.
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ended.is_set():
            remaining = _POLL_S if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(_POLL_S, remaining))
        return True

    # -- the loop's side --------------------------------------------------------------------------

    def wait_while_paused(self, pending: Callable[[], bool], serve: Callable[[], None]) -> None:
        """In the loop thread: when a pause is asked, wait until resumed or stopped, carrying out
        the live requests that arrive meanwhile (``pending``/``serve``)."""
        with self.cond:
            if not self.pause_requested or self.stop_requested:
                return
            self.status = "paused"
            self.cond.notify_all()
            while True:
                self.cond.wait_for(lambda: not self.pause_requested or self.stop_requested or pending())
                if not pending():
                    break
                serve()  # queued just before the pause landed
            self.status = "running"
            self.cond.notify_all()

    def timed_out(self, call: str, timeout: float) -> None:
        """A control call waited ``timeout`` s for the loop: give the run up when the loop is stuck
        in an env step (it cannot be interrupted), otherwise say where it is and let the call land later."""
        where = self.where
        if where is None or not where[0].startswith(_ENV_CODE):
            warnings.warn(
                f"{call}() waited {timeout:g} s for the training thread, which is still in {self.activity()}; "
                f"the {call} takes effect when that returns",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        seconds = time.monotonic() - where[1]
        stuck = self.stepping() if where[0] == "env.step" else where[0]
        runner = self.runner()
        interrupt = runner is not None and runner.can_interrupt
        then = (
            f"its {runner.backend} workers were killed"
            if interrupt
            else "Python cannot interrupt a thread inside the env, so its thread ends only if the call returns"
        )
        error = StuckError(
            f"{call}() waited {timeout:g} s, but the training thread is stuck in {stuck} (for {seconds:.1f} s): "
            f"the run is given up (status 'failed') and {then}. Run the env in worker processes with "
            "step_timeout= (backend='local' or 'ray') to have a hung env killed and named",
            where=stuck,
            seconds=seconds,
        )
        with self.cond:
            if not self.is_alive or self.where is not where:
                return  # the step returned meanwhile: the call lands as usual
            self.abandoned = True
            self.stop_requested = True
            self.pause_requested = False
            self.owner.error = error
            self.owner.stop_reason = "stuck"
            self.status = "failed"
            self.cond.notify_all()
        if interrupt:
            runner.interrupt()  # a blocked receive from a killed worker returns at once, with an error
            self.wait_ended(5.0)
        warnings.warn(str(error), RuntimeWarning, stacklevel=4)
