"""A reentrant lock that hands itself to the threads waiting for it in the order they came.

``threading.RLock`` is not fair: a thread that releases it and takes it again at once (a session's
loop: observe, update, observe...) usually wins against a thread that was already waiting, so an
``act`` from another thread may wait for many updates. :class:`FairRLock` passes the lock on release
to the longest waiter, so an ``act`` made while the session learns waits for one update at most.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

__all__ = ["FairRLock"]


class FairRLock:
    """A reentrant lock with first-come, first-served hand-off (the ``threading.RLock`` interface:
    ``acquire(blocking, timeout)``, ``release()``, a ``with`` block)."""

    __slots__ = ("_count", "_mutex", "_owner", "_waiters")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._owner: int | None = None
        self._count = 0
        self._waiters: deque[tuple[int, threading.Lock]] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (again, in the thread that holds it); waiters are served in arrival order."""
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._count += 1
                return True
            if self._owner is None and not self._waiters:
                self._owner, self._count = me, 1
                return True
            if not blocking:
                return False
            gate = threading.Lock()
            gate.acquire()
            entry = (me, gate)
            self._waiters.append(entry)
        if gate.acquire(timeout=timeout if timeout is not None and timeout >= 0 else -1):
            return True  # handed over: the releasing thread made this one the owner
        with self._mutex:
            if self._owner == me:  # handed over just as the wait timed out
                return True
            self._waiters.remove(entry)
            return False

    def release(self) -> None:
        """Release once; the last release hands the lock to the longest waiter."""
        with self._mutex:
            if self._owner != threading.get_ident():
                raise RuntimeError("cannot release a FairRLock this thread does not hold")
            self._count -= 1
            if self._count:
                return
            if self._waiters:
                owner, gate = self._waiters.popleft()
                self._owner, self._count = owner, 1
                gate.release()
            else:
                self._owner = None

    def locked(self) -> bool:
        """True while a thread holds it."""
        return self._owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<FairRLock {'held' if self._owner is not None else 'free'}, {len(self._waiters)} waiting>"
