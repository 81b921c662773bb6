"""Ray actors that only hold and step envs, while the learner acts: ``backend="ray"`` with
``ray_acting="learner"``.

The default Ray mode (``ray_acting="workers"``, :mod:`workbench.parallel.ray_backend`) gives every
actor a replica of the agent, so every actor imports torch: about 2 s of CPU each before it can
answer, 16 actors about 18 s on a 2-core machine. Here an actor is the local worker's program
(:class:`workbench.parallel._worker.RayEnvWorker`, the same :class:`~workbench.parallel._worker.Server`
and byte protocol as a local worker process) reached through Ray method calls instead of a socket:
it imports Ray, numpy, gymnasium and ``workbench.envs``, never torch, and the learner
chooses the actions of every env in one batched forward pass, exactly as with local workers. The
runner is :class:`~workbench.parallel.local.LocalRunner` with Ray actors for processes, so action
masks, extras, ``call_env``, ``step_timeout``, ``restart_workers``, per-worker signals, ``interrupt``
and close behave as they do locally, and a run gives the same data as ``backend="local"`` with the
same seed and worker layout.

The price: one Ray round trip per env step (a call per actor), so it suits one machine or a fast
network; on a cluster across a slow network, acting in the workers (the default) sends one chunk of
many steps per round trip instead.

Ray itself is started by :mod:`workbench.parallel.ray_start` (for both modes).
"""

from __future__ import annotations

import os
import time
import weakref
from collections import deque
from multiprocessing.reduction import ForkingPickler
from typing import Any

from ..envs.core import EnvSource
from . import _worker
from .local import LocalRunner, _shutdown, _Worker
from .ray_start import import_ray, start_ray

__all__ = ["RayEnvRunner"]

_START_TIMEOUT_S = 120.0  # actor start: a cluster may have to pull the environment first
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the workbench folder


class _ActorConnection:
    """A Ray actor seen as the parent's end of a worker connection: ``send_bytes`` starts a call of
    the actor's ``handle``, ``poll`` waits for its answer, ``recv_bytes`` returns it. A dead actor
    reads as a closed connection (EOFError), as a dead worker process does."""

    def __init__(self, ray: Any, actor: Any) -> None:
        self.ray = ray
        self.actor = actor
        self.pending: deque = deque()

    def send_bytes(self, raw: Any) -> None:
        self.pending.append(self.actor.handle.remote(bytes(raw)))

    def send(self, message: Any) -> None:
        self.send_bytes(ForkingPickler.dumps(message))

    def poll(self, timeout: float | None = None) -> bool:
        if not self.pending:
            return False
        ready, _ = self.ray.wait([self.pending[0]], timeout=timeout)
        return bool(ready)

    def recv_bytes(self) -> bytes:
        from ray.exceptions import RayActorError, RayTaskError

        if not self.pending:
            raise EOFError("nothing was asked of this actor")
        ref = self.pending.popleft()
        try:
            reply = self.ray.get(ref)
        except (RayActorError, RayTaskError) as exc:
            raise EOFError(f"Ray actor died ({type(exc).__name__})") from exc
        if reply is None:
            raise EOFError("the actor closed")
        return reply

    def close(self) -> None:
        self.pending.clear()


class _RayWorker(_Worker):
    """One worker as a Ray actor (:class:`workbench.parallel._worker.RayEnvWorker`)."""

    def __init__(self, worker_id: int, first_env: int, num_envs: int, ray: Any, actor_cls: Any) -> None:
        super().__init__(worker_id, first_env, num_envs)
        self.ray = ray
        self.actor_cls = actor_cls
        self.actor: Any = None
        self._pid: int | None = None

    def start(self) -> None:
        self.actor = self.actor_cls.remote(_PACKAGE_DIR)
        self.conn = _ActorConnection(self.ray, self.actor)
        self._pid = None

    @property
    def pid(self) -> int | None:
        """The actor's process id (asked once, after it answered its first request)."""
        if self._pid is None and self.actor is not None:
            try:
                self._pid = self.ray.get(self.actor.pid.remote(), timeout=_START_TIMEOUT_S)
            except Exception:
                return None
        return self._pid

    def stepping(self) -> int | None:
        try:
            index = self.ray.get(self.actor.stepping.remote(), timeout=0.5)
        except Exception:
            return None
        return None if index < 0 else self.first_env + index

    def kill(self) -> None:
        if self.actor is not None:
            try:
                self.ray.kill(self.actor, no_restart=True)
            except Exception:
                pass

    def death(self) -> str:
        return "Ray actor died"

    def ask_close(self) -> None:
        if self.conn is not None and self.ray.is_initialized():
            try:
                self.conn.send(("close",))
            except Exception:
                pass

    def finish_close(self, deadline: float) -> None:
        # The close request lets the envs close; the actor process goes with ray.kill.
        if self.conn is not None and self.conn.pending and self.ray.is_initialized():
            try:
                pending = list(self.conn.pending)
                self.ray.wait(pending, num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
        if self.ray.is_initialized():
            self.kill()
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.actor = None


def _shutdown_ray(workers: list[_Worker], ray: Any, owns_ray: bool) -> None:
    _shutdown(workers)
    if owns_ray and ray.is_initialized():
        ray.shutdown()


class RayEnvRunner(LocalRunner):
    """``num_workers`` Ray actors stepping ``envs_per_worker`` envs each for the learner's actions
    (``Session(..., backend="ray", ray_acting="learner")``); see the module's docstring.

    Everything :class:`~workbench.parallel.local.LocalRunner` says holds (seeds ``seed + i``,
    ``restart_workers``, ``step_timeout``), plus the Ray options ``ray_address``, ``cpus_per_worker``
    and ``ray_init`` of :class:`~workbench.parallel.ray_backend.RayRunner`.
    """

    backend = "ray"
    _start_timeout = _START_TIMEOUT_S

    def __init__(
        self,
        source: EnvSource,
        num_workers: int,
        envs_per_worker: int,
        *,
        ray_address: str | None = None,
        cpus_per_worker: float = 1.0,
        ray_init: dict[str, Any] | None = None,
        learner_gpus: int = 0,
        **options: Any,
    ) -> None:
        """``options``: :class:`LocalRunner`'s (``seed``, ``restart_workers``, ``step_timeout``)."""
        ray = import_ray(source)
        self._ray = ray
        self._owns_ray = start_ray(ray, num_workers, cpus_per_worker, ray_address, ray_init, learner_gpus)
        # The actor's class travels by value (with the rest of _worker.py it uses), so an actor
        # never imports torch to unpickle it (only workbench.envs, for the envs it steps).
        ray.cloudpickle.register_pickle_by_value(_worker)
        actor_options: dict[str, Any] = {"num_cpus": cpus_per_worker, "num_gpus": 0, "max_restarts": 0}
        if options.get("step_timeout") is not None:
            actor_options["max_concurrency"] = 2  # stepping() answers while handle() steps
        self._actor_cls = ray.remote(_worker.RayEnvWorker).options(**actor_options)
        try:
            super().__init__(source, num_workers, envs_per_worker, **options)
        except BaseException:
            if self._owns_ray and ray.is_initialized():
                ray.shutdown()
            raise

    def _new_worker(self, worker_id: int, first_env: int, num_envs: int) -> _Worker:
        return _RayWorker(worker_id, first_env, num_envs, self._ray, self._actor_cls)

    def _make_finalizer(self) -> weakref.finalize:
        return weakref.finalize(self, _shutdown_ray, self._workers, self._ray, self._owns_ray)
