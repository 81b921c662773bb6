"""Ray actors that only hold and step envs, while the learner acts: ``backend="ray"`` with
``ray_acting="learner"``.

The default Ray mode (``ray_acting="workers"``, :mod:`workbench.parallel.ray_backend`) gives every
actor a replica of the agent, so every actor imports torch: about 2 s of CPU each before it can
answer, 16 actors about 18 s on a 2-core machine. Here an actor is the local worker's program
(:class:`workbench.parallel._worker.RayEnvWorker`, the same :class:`~workbench.parallel._worker.Server`
and byte protocol as a local worker process) reached through Ray method calls instead of a socket:
it imports Ray, numpy and gymnasium, never torch or the ``workbench`` package, and the learner
chooses the actions of every env in one batched forward pass, exactly as with local workers. The
runner is :class:`~workbench.parallel.local.LocalRunner` with Ray actors for processes, so action
masks, extras, ``call_env``, ``step_timeout``, ``restart_workers``, per-worker signals, ``interrupt``
and close behave as they do locally, and a run gives the same data as ``backend="local"`` with the
same seed and worker layout.

The price: one Ray round trip per env step (a call per actor), so it suits one machine or a fast
network; on a cluster across a slow network, acting in the workers (the default) sends one chunk of
many steps per round trip instead.

This module also starts Ray for both modes (:func:`start_ray`).
"""

from __future__ import annotations

import os
import time
import weakref
from collections import deque
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from ..envs import EnvSource
from . import _worker
from .local import LocalRunner, _shutdown, _Worker

__all__ = ["RayEnvRunner", "start_ray"]

_START_TIMEOUT_S = 120.0  # actor start: a cluster may have to pull the environment first
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the workbench folder
# First on the PYTHONPATH of a private Ray's processes: stands in for packages whose import costs a
# Ray process far more than it uses them (see the folder's rfc3987_syntax/__init__.py).
_LEAN_IMPORTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_lean_imports")


def _init_private_ray(ray: Any, options: dict[str, Any]) -> None:
    """``ray.init(**options)`` for a Ray that listens on the loopback interface only, and whose
    processes start faster.

    Ray turns ``_node_ip_address="127.0.0.1"`` into the machine's external address unless its
    cluster support is off (as on macOS and Windows), and with an external node address its servers
    listen on every interface. So the flag is turned off while this Ray starts, in this process
    (``ray_constants.ENABLE_RAY_CLUSTER``) and in the processes it starts (their environment).

    The processes it starts (its services, and through its raylet every actor) also get
    ``_LEAN_IMPORTS_DIR`` first on ``PYTHONPATH``: where JupyterLab's dependencies are installed,
    that halves each Ray process's start (2.3 to 0.7 CPU seconds an actor, measured in
    ``benchmarks/ray_start.py``). This process's environment is restored once Ray has started.
    """
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    saved_env = {key: os.environ.get(key) for key in (name, "PYTHONPATH")}
    if options.get("_node_ip_address") in ("127.0.0.1", "localhost", "::1"):
        ray_constants.ENABLE_RAY_CLUSTER = False
        os.environ[name] = "0"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_LEAN_IMPORTS_DIR, saved_env["PYTHONPATH"]) if p)
    try:
        ray.init(**options)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def import_ray(source: EnvSource) -> Any:
    """The ``ray`` module for Ray runners over ``source``: an ImportError that says which extra to
    install without Ray, a ValueError when ``source`` cannot be built again in an actor (an env
    instance, not a factory)."""
    if source.factory is None:
        raise ValueError(
            "Ray workers need a way to build the env: pass a zero-argument factory such as "
            "`lambda: MyEnv(...)` or a registered id, not an env instance"
        )
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs Ray: pip install 'rl-workbench[ray]'") from exc
    return ray


def start_ray(
    ray: Any, num_workers: int, cpus_per_worker: float, ray_address: str | None, ray_init: dict[str, Any] | None
) -> bool:
    """Start Ray unless it runs already; True when this call started it (the runner then shuts it
    down when it closes). ``ray_address=None`` starts a private Ray on this machine (loopback
    only); an address joins a cluster. A cluster with too few CPUs for the workers is a ValueError."""
    owns_ray = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "logging_level": "warning"}
        if ray_address is None:
            cores = os.cpu_count() or 1
            options["num_cpus"] = max(cores, int(np.ceil(num_workers * cpus_per_worker)))
            options["_node_ip_address"] = "127.0.0.1"  # a private Ray: reachable from this machine only
            options.update(ray_init or {})
            _init_private_ray(ray, options)
        else:
            options["address"] = ray_address
            options.update(ray_init or {})
            ray.init(**options)
        owns_ray = True
    total = ray.cluster_resources().get("CPU", 0.0)
    if total < num_workers * cpus_per_worker:
        if owns_ray:
            ray.shutdown()
        raise ValueError(
            f"num_workers={num_workers} with cpus_per_worker={cpus_per_worker} needs "
            f"{num_workers * cpus_per_worker:g} Ray CPUs, but the cluster has {total:g}: lower "
            "cpus_per_worker (e.g. 0.25 for workers that mostly wait) or start Ray with more num_cpus"
        )
    return owns_ray


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
        seed: int | None = None,
        restart_workers: bool = False,
        step_timeout: float | None = None,
        ray_address: str | None = None,
        cpus_per_worker: float = 1.0,
        ray_init: dict[str, Any] | None = None,
    ) -> None:
        ray = import_ray(source)
        self._ray = ray
        self._owns_ray = start_ray(ray, num_workers, cpus_per_worker, ray_address, ray_init)
        # The actor's class travels by value (with the rest of _worker.py it uses), so an actor
        # never imports the workbench package, and with it torch, to unpickle it.
        ray.cloudpickle.register_pickle_by_value(_worker)
        options: dict[str, Any] = {"num_cpus": cpus_per_worker, "max_restarts": 0}
        if step_timeout is not None:
            options["max_concurrency"] = 2  # stepping() answers while handle() steps
        self._actor_cls = ray.remote(_worker.RayEnvWorker).options(**options)
        try:
            super().__init__(
                source, num_workers, envs_per_worker, seed=seed, restart_workers=restart_workers,
                step_timeout=step_timeout,
            )
        except BaseException:
            if self._owns_ray and ray.is_initialized():
                ray.shutdown()
            raise

    def _new_worker(self, worker_id: int, first_env: int, num_envs: int) -> _Worker:
        return _RayWorker(worker_id, first_env, num_envs, self._ray, self._actor_cls)

    def _make_finalizer(self) -> weakref.finalize:
        return weakref.finalize(self, _shutdown_ray, self._workers, self._ray, self._owns_ray)
