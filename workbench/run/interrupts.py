"""Ctrl-C and SIGTERM while a caller waits on a run (``run``, ``wait``, ``evaluate``), for every run kind.

Python delivers both to the main thread, wherever it is: here, inside the wait of a session, a
sweep or a population (``RunControl.wait``). The run's thread must not outlive what follows (an
interpreter that exits while a torch thread runs native code aborts with "terminate called without
an active exception"), so before the interrupt reaches the caller the run is stopped and its thread
joined: status ``"stopped"``, ``stop_reason`` ``"interrupted"`` (Ctrl-C, re-raised as
``KeyboardInterrupt``: a script that does not catch it exits as Python does on Ctrl-C) or
``"terminated"`` (SIGTERM, raised as ``SystemExit(143)``, the exit code of a process ended by
SIGTERM, so ``finally`` blocks and exit hooks still run). More Ctrl-C during that join do not cut
it short. A checkpoint being written when the signal arrives is finished first (writes are atomic
renames anyway).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["INTERRUPT_STOP_TIMEOUT_S", "interruptible", "stop_for"]

INTERRUPT_STOP_TIMEOUT_S = 10.0
"""Longest an interrupted caller waits for the run to stop (a run stuck in a step is given up then)."""


class _Terminated(BaseException):
    """SIGTERM arrived while a caller waited on a run (raised by the handler :func:`interruptible` installs)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated


@contextlib.contextmanager
def interruptible(control: Any) -> Iterator[None]:
    """Stop the run of ``control`` (a :class:`~workbench.run.control.RunControl`) when Ctrl-C or
    SIGTERM arrives in the block."""
    previous: Any = None
    installed = False
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL:  # the application's own handler, if any, is left alone
            signal.signal(signal.SIGTERM, _raise_terminated)
            installed = True
    try:
        yield
    except KeyboardInterrupt:
        stop_for(control, "interrupted")
        raise
    except _Terminated:
        stop_for(control, "terminated")
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous)


def stop_for(control: Any, reason: str) -> None:
    """Stop the run (if it is going) with ``stop_reason`` ``reason`` and join its thread; more
    Ctrl-C meanwhile do not cut the join short (the thread must end before the caller goes on)."""
    if control.in_loop_thread():
        return
    with control.cond:
        if control.status in ("running", "paused") and not control.stop_requested:
            control.stop_reason = reason
    while True:
        try:
            control.stop(timeout=INTERRUPT_STOP_TIMEOUT_S)
            return
        except KeyboardInterrupt:
            continue
