"""The live sessions of this process: ``wb.sessions()``.

A session registers itself when it starts; the registry holds weak references only, so a session
nobody refers to any more is forgotten, and a run that ended drops out of the list. Starting a
second session while another still trains warns (in a notebook, re-running a training cell starts a
new session while the old one keeps training in the background, each at half speed).
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .session import Session

__all__ = ["register", "sessions"]

_lock = threading.Lock()
_started: list[weakref.ref[Session]] = []  # in start order; dead references are pruned on each use


def sessions() -> list[Session]:
    """The sessions of this process that are training now (running or paused), oldest first.

    Example::

        for s in wb.sessions():
            s.stop()
    """
    with _lock:
        alive = [s for s in (ref() for ref in _started) if s is not None]
        _started[:] = [weakref.ref(s) for s in alive]
    return [s for s in alive if s.status in ("running", "paused")]


def register(session: Session) -> None:
    """Record ``session`` as started (``Session.start`` calls this); warn when others still train."""
    others = [s for s in sessions() if s is not session]
    with _lock:
        if not any(ref() is session for ref in _started):
            _started.append(weakref.ref(session))
    if others:
        listing = "; ".join(repr(s) for s in others)
        warnings.warn(
            f"{len(others)} other session(s) still training in this process, sharing its CPU: {listing}. "
            "Stop the ones you no longer need (wb.sessions() lists them: for s in wb.sessions(): s.stop()).",
            RuntimeWarning,
            stacklevel=3,
        )
