"""The error a parallel run fails with when one of its workers raises or dies."""

from __future__ import annotations

__all__ = ["EnvStepError", "WorkerError"]


class EnvStepError(RuntimeError):
    """An env's ``step`` raised in the training thread. The message names the env class, its index
    and the step; the env's own exception is ``__cause__`` (and the traceback reaches into its code)."""


class WorkerError(RuntimeError):
    """A rollout worker's env raised, or the worker process (or Ray actor) died.

    ``worker`` is the worker's id (0-based), ``envs`` the range of env indices it stepped,
    ``died`` tells a lost process from an env that raised, ``timed_out`` a worker killed because
    its env's ``step`` did not return within ``step_timeout``, and ``remote_traceback`` holds the
    env's own traceback text from inside the worker (also part of the message).
    """

    def __init__(
        self,
        worker: int,
        what: str,
        *,
        envs: slice | range | None = None,
        died: bool = False,
        remote_traceback: str | None = None,
        timed_out: bool = False,
    ) -> None:
        self.worker = worker
        self.envs = range(envs.start, envs.stop) if isinstance(envs, slice) else envs
        self.died = died
        self.timed_out = timed_out
        self.remote_traceback = remote_traceback
        where = "" if self.envs is None else f" (envs {self.envs.start}-{self.envs.stop - 1})"
        message = f"worker {worker}{where} {what}"
        if remote_traceback:
            message += f"; the worker's traceback:\n{remote_traceback.rstrip()}"
        super().__init__(message)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keeps the keyword fields when the error crosses a process boundary.
        return (
            _rebuild,
            (self.worker, str(self), self.envs, self.died, self.remote_traceback, self.timed_out),
        )


def _rebuild(
    worker: int, message: str, envs: range | None, died: bool, tb: str | None, timed_out: bool = False
) -> WorkerError:
    err = WorkerError.__new__(WorkerError)
    RuntimeError.__init__(err, message)
    err.worker, err.envs, err.died, err.remote_traceback = worker, envs, died, tb
    err.timed_out = timed_out
    return err
