"""The one lifecycle of a run: status, start, pause, resume, stop, wait, Ctrl-C and SIGTERM.

:class:`RunControl` is shared by the three run kinds, a session, a sweep and a population: each
facade's ``status``, ``start``, ``pause``, ``resume``, ``stop`` and ``wait`` are this class's, with
one behaviour (which statuses a command acts in, what it waits for, a second Ctrl-C, SIGTERM,
the training error re-raised by ``wait``, the exit hook of ``workbench.run.registry``). What differs
between the kinds is what the run's thread does (its ``body``) and where a pause lands:

* a session's loop pauses itself between two steps (:meth:`RunControl.wait_while_paused`): a pause
  returns once the loop has acknowledged it, and a loop stuck in an env step is given up after the
  call's timeout (:meth:`RunControl.timed_out`);
* a sweep's trials and a population's members run elsewhere (worker processes, member sessions):
  the status changes at once and the ``on_pause``/``on_resume``/``on_stop`` hooks carry the
  command there (under :attr:`RunControl.cond`, so a pause and a resume land in order).

Every thread that steers or watches a run goes through it: the facade's commands, the loop between
two steps, live edits (``workbench.run.live_edits``, which queue work for the loop under
:attr:`RunControl.cond`) and the exit hook (:meth:`RunControl.stop_at_exit`, :meth:`RunControl.activity`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .interrupts import interruptible
from .registry import ControlError, StuckError

_POLL_S = 0.01
"""How often the main thread looks at a run's end flag while it waits (:meth:`RunControl.wait_ended`)."""

__all__ = ["ACTIVE", "CONTROL_TIMEOUT_S", "STATUSES", "Controlled", "RunControl"]

STATUSES = ("idle", "running", "paused", "stopped", "finished", "failed")
"""Every value the ``status`` of a session, a sweep or a population can take."""

ACTIVE = ("running", "paused")
"""The statuses of a run that is going: ``start`` refuses, ``stop`` acts."""

# What the loop may be stuck in inside the env's own code: a control call that times out there
# gives the run up (Python cannot interrupt it); elsewhere (an update) it lands when that returns.
_ENV_CODE = ("env.step", "call_env")

CONTROL_TIMEOUT_S = 60.0
"""Longest a control call waits for the loop to acknowledge it, by default."""

Hook = Callable[[], None]


class RunControl:
    """Status, pause/stop/abandon flags, the run's thread, its error and why it stopped, for one run.

    Parameters:
        kind: ``"session"``, ``"sweep"`` or ``"population"``: named in messages and by the registry.
        runner: a session's: returns the runner stepping its envs now (or None), to say which env
            a stuck step is in and to interrupt worker backends.
        loop_pauses: True (a session) when the run's own loop acknowledges a pause between two
            steps; False when the status changes at once and the hooks carry the command.
        on_pause, on_resume, on_stop: called under :attr:`cond` when the command takes effect.

    Example::

        control = session.run_control
        control.status                 # "running"
        control.activity()             # "env.step of env 2 for 61.0 s"
    """

    def __init__(
        self,
        kind: str = "session",
        runner: Callable[[], Any] | None = None,
        *,
        loop_pauses: bool = True,
        on_pause: Hook | None = None,
        on_resume: Hook | None = None,
        on_stop: Hook | None = None,
    ) -> None:
        self.kind = kind
        self.runner = runner if runner is not None else _no_runner
        self.loop_pauses = loop_pauses
        self.on_pause, self.on_resume, self.on_stop = on_pause, on_resume, on_stop
        self.on_end: Callable[[str], None] | None = None
        """Called with the final status under :attr:`cond` as the run ends, before waiters wake."""
        self.after_end: Callable[[str], None] | None = None
        """Called with the final status after the status is set, before :attr:`ended` (outside the lock)."""
        self.cond = threading.Condition(threading.RLock())
        """Guards everything here; notified on every change."""
        self.status = "idle"
        self.pause_requested = False
        self.stop_requested = False
        self.abandoned = False
        """A control call gave the run up: its thread is stuck in a step (see :meth:`timed_out`)."""
        self.error: BaseException | None = None
        """What the last run failed with (re-raised by :meth:`wait`), or None."""
        self.stop_reason: str | None = None
        """Why the last run ended: ``"budget"``, ``"stop"``, ``"stop_when"``, ``"interrupted"``
        (Ctrl-C), ``"terminated"`` (SIGTERM), ``"stuck"``; None while it runs."""
        self.thread: threading.Thread | None = None
        self.ended = threading.Event()
        """Set by the run's thread as its last act. Waiting on it, not on ``Thread.join``: a
        ``Thread.join`` cut short by Ctrl-C can leave a thread that still runs marked as stopped
        (CPython before 3.13), and a stop would then return while the run goes on."""
        self.ended.set()
        self.where: tuple[str, float] | None = None
        """What the loop thread is inside (``"env.step"``, ``"agent.update"``...), and since when."""

    # -- state ----------------------------------------------------------------------------------

    @property
    def is_alive(self) -> bool:
        """True while the run's thread runs (also while paused, or stuck)."""
        return self.thread is not None and self.thread.ident is not None and not self.ended.is_set()

    def in_loop_thread(self) -> bool:
        """True when called from the run's thread itself."""
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
        """What the run's thread is inside now, for messages: "env.step of env 2 for 61.0 s"."""
        where = self.where
        if where is None or not self.is_alive:
            return "no step (between steps)" if self.loop_pauses else f"the {self.kind}'s work in flight"
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
        if self.status in ACTIVE:
            raise RuntimeError(
                f"this {self.kind} is already {self.status}: call stop() (or wait()) before starting it again"
            )

    def join_previous(self) -> None:
        """Before a new start: a run that has just ended finishes its last lines; a run whose
        thread a control call gave up on (stuck in ``env.step``) cannot be started again."""
        if not self.is_alive or self.in_loop_thread():
            return
        if self.abandoned:
            raise RuntimeError(
                f"this {self.kind}'s previous run is still stuck in {self.activity()}: Python cannot "
                "interrupt it, and a new run would share its envs. Start again once that step has "
                f"returned ({self.kind}.is_alive turns False), or build a new one with a fresh env; "
                "run the env in worker processes with step_timeout= to have a hung env killed"
            )
        self.wait_ended(CONTROL_TIMEOUT_S)

    def begin(self, thread: threading.Thread) -> None:
        """A new run on ``thread`` (not started yet): flags cleared, status ``running`` (under :attr:`cond`)."""
        self.pause_requested = self.stop_requested = self.abandoned = False
        self.error = self.stop_reason = None
        self.status = "running"
        self.thread = thread
        self.ended = threading.Event()

    def start(
        self,
        body: Callable[[], str],
        *,
        name: str,
        launch: Callable[[threading.Thread], None] | None = None,
        started: Hook | None = None,
    ) -> None:
        """Start a run: ``body()`` in a new daemon thread ``name``; returns at once.

        ``body`` returns the final status (``"finished"`` or ``"stopped"``); an exception it raises
        fails the run (status ``failed``, :attr:`error` set, re-raised by :meth:`wait`).
        ``launch(thread)`` starts the thread (default: ``thread.start()``) under :attr:`cond`; when
        it raises, nothing changed and the error reaches the caller. ``started()`` follows it,
        still under the lock (before the run can end). Raises ``RuntimeError`` when a run is going.
        """
        with self.cond:
            self.refuse_if_running()
        self.join_previous()
        with self.cond:
            self.refuse_if_running()  # again: another thread may have started it meanwhile
            previous = (self.status, self.thread, self.ended, self.error, self.stop_reason)
            thread = threading.Thread(target=self._main, args=(body,), name=name, daemon=True)
            self.begin(thread)
            try:
                (launch or threading.Thread.start)(thread)
            except BaseException:
                self.status, self.thread, self.ended, self.error, self.stop_reason = previous
                raise
            if started is not None:
                started()

    def _main(self, body: Callable[[], str]) -> None:
        """The run's thread: the body, then the final status, the end hooks, and last :attr:`ended`."""
        try:
            try:
                final = body()
            except BaseException as exc:
                if not self.abandoned:  # a given-up run keeps the StuckError that explains it
                    self.error = exc
                final = "failed"
            self.where = None
            with self.cond:
                if self.abandoned:  # the stuck step returned after the run was given up: it stays failed
                    final = "failed"
                self.pause_requested = False
                self.status = final
                if self.on_end is not None:
                    self.on_end(final)
                self.cond.notify_all()
            if self.after_end is not None:
                self.after_end(final)
        finally:
            self.ended.set()

    # -- commands ---------------------------------------------------------------------------------

    def pause(self, timeout: float = CONTROL_TIMEOUT_S) -> None:
        """Pause a running run; does nothing in any other status. A loop that pauses itself is
        waited for (``timeout`` seconds at most, see :meth:`timed_out`); otherwise the status is
        ``paused`` at once and ``on_pause`` carries the pause to where the work runs."""
        with self.cond:
            if self.status != "running":
                return
            self.pause_requested = True
            self.cond.notify_all()
            if not self.loop_pauses:
                self.status = "paused"
                self._hook(self.on_pause)
                return
            if self.in_loop_thread():
                return
            if self.cond.wait_for(lambda: self.status != "running", timeout=timeout):
                return
        self.timed_out("pause", timeout)

    def resume(self) -> None:
        """Let a paused run continue; waits until its loop has (does nothing unless paused)."""
        with self.cond:
            self.pause_requested = False
            self.cond.notify_all()
            if self.status != "paused":
                return
            if not self.loop_pauses:
                self.status = "running"
                self._hook(self.on_resume)
            elif not self.in_loop_thread():
                self.cond.wait_for(lambda: self.status != "paused", timeout=CONTROL_TIMEOUT_S)

    def stop(self, timeout: float | None = CONTROL_TIMEOUT_S) -> None:
        """Stop a running or paused run and wait for its thread to end; after ``timeout``
        seconds a run stuck in a step is given up, any other is left to end (see :meth:`timed_out`)."""
        with self.cond:
            if self.status not in ACTIVE:
                return
            self.stop_requested = True
            self.cond.notify_all()
            self._hook(self.on_stop)
        if self.thread is not None and not self.in_loop_thread():
            self.wait_ended(timeout)
            if self.is_alive and timeout is not None:
                self.timed_out("stop", timeout)

    def stop_at_exit(self, timeout: float) -> None:
        """The exit hook's stop (``workbench.run.registry``): stop quietly within ``timeout`` seconds."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.stop(timeout=timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; True when it has, False when ``timeout`` passed first.

        Re-raises the run's error (with its traceback). Ctrl-C or SIGTERM meanwhile stops the run
        and joins its thread before the interrupt reaches the caller (``workbench.run.interrupts``;
        more Ctrl-C during that join do not cut it short). From the run's own thread it raises
        :class:`ControlError` instead of waiting for itself."""
        with interruptible(self):
            if not self.wait_until_ended(timeout):
                return False
        if self.error is not None:
            raise self.error
        return True

    def wait_until_ended(self, timeout: float | None = None) -> bool:
        """:meth:`wait` without the interrupts and the error: True once the run has ended, False
        when ``timeout`` passed first. Raises :class:`ControlError` from the run's own thread."""
        if self.in_loop_thread():
            raise ControlError(
                f"wait() was called from the {self.kind}'s own {self._thread_name} (from stop_when or a signal "
                "subscriber), where it would wait for itself forever; the run goes on. To end the run "
                f"there, return True from stop_when or call {self.kind}.stop()"
            )
        # Wait in slices so Ctrl-C reaches the caller promptly.
        deadline = None if timeout is None else time.monotonic() + timeout
        # A given-up run (stuck in env.step) has ended for its owner, whatever its thread does.
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
        the run's thread's last act (``ended.set()``) and every later wait block on it for good (a
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

    @property
    def _thread_name(self) -> str:
        return "training thread" if self.loop_pauses else "thread"

    def _hook(self, hook: Hook | None) -> None:
        if hook is not None:
            hook()

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
                f"{call}() waited {timeout:g} s for the {self.kind}'s {self._thread_name}, which is still in "
                f"{self.activity()}; the {call} takes effect when that returns",
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
            self.error = error
            self.stop_reason = "stuck"
            self.status = "failed"
            self.cond.notify_all()
        if interrupt:
            runner.interrupt()  # a blocked receive from a killed worker returns at once, with an error
            self.wait_ended(5.0)
        warnings.warn(str(error), RuntimeWarning, stacklevel=4)


class Controlled:
    """What every run kind shows of its lifecycle (``self._control``, a :class:`RunControl`): its
    status, whether its thread is alive, its error, ``resume`` and ``wait``. A sweep and a population
    are built on it; their ``start``, ``pause`` and ``stop`` call the same lifecycle."""

    _control: RunControl

    @property
    def status(self) -> str:
        """One of ``idle, running, paused, stopped, finished, failed``."""
        return self._control.status

    @property
    def is_alive(self) -> bool:
        """True while the run's thread runs (also while paused)."""
        return self._control.is_alive

    @property
    def error(self) -> BaseException | None:
        """What the last run failed with (``wait()`` re-raises it), or None."""
        return self._control.error

    @property
    def run_control(self) -> RunControl:
        """The run's lifecycle (:class:`RunControl`, the same class for sessions, sweeps and populations)."""
        return self._control

    def resume(self) -> None:
        """Continue after ``pause()`` (does nothing unless paused)."""
        self._control.resume()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; re-raise its error. False when ``timeout`` passed first.

        Ctrl-C (or SIGTERM) stops the run before ``KeyboardInterrupt`` (``SystemExit(143)``) reaches
        the caller; more Ctrl-C meanwhile do not cut that short (``workbench.run.interrupts``)."""
        return self._control.wait(timeout)


def _no_runner() -> Any:
    return None
