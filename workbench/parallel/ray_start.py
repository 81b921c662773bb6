"""Starting Ray for the Ray backends (``ray_acting="workers"`` and ``"learner"``) and Ray sweeps.

:func:`import_ray` gives the module (or says which extra to install), :func:`start_ray` starts a
private Ray on this machine or joins a cluster, and :func:`init_private_ray` is the ``ray.init``
of a private Ray: loopback sockets only, and lean imports (``ray_lean_imports/``) first on its
processes' ``PYTHONPATH``. Every use of Ray's private modules in this package is here.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..envs.core import EnvSource

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["LEAN_IMPORTS_DIR", "RAY_NOTICES", "import_ray", "init_private_ray", "quiet_ray_notices", "start_ray"]

# First on the PYTHONPATH of a private Ray's processes: stands in for packages whose import costs a
# Ray process far more than it uses them (see the folder's rfc3987_syntax/__init__.py).
LEAN_IMPORTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_lean_imports")


# Notices Ray logs while the project starts it, that ask nothing of the user (logger name: start of
# the message). The SIGTERM one comes from ray.init in a session's training thread (Ray sets its
# handler only from the main thread; a session stops its workers itself). The token one says that
# Ray turned token authentication on by default for a new local cluster, which stays on: only the
# notice goes (RAY_AUTH_MODE set by the user is respected, and Ray prints nothing then).
RAY_NOTICES = {
    "ray._private.worker": "SIGTERM handler is not set because current thread is not the main thread",
    "ray._private.authentication.authentication_token_setup": "Token authentication is enabled for this Ray cluster",
}


class _DropNotice(logging.Filter):
    """Drops the log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextlib.contextmanager
def quiet_ray_notices() -> Iterator[None]:
    """While Ray starts: :data:`RAY_NOTICES` are not logged (every other record is, warnings and
    errors included)."""
    installed = [(logging.getLogger(name), _DropNotice(prefix)) for name, prefix in RAY_NOTICES.items()]
    for logger, notice in installed:
        logger.addFilter(notice)
    try:
        yield
    finally:
        for logger, notice in installed:
            logger.removeFilter(notice)


def init_private_ray(ray: Any, options: dict[str, Any]) -> None:
    """``ray.init(**options)`` for a Ray that listens on the loopback interface only, and whose
    processes start faster.

    Ray turns ``_node_ip_address="127.0.0.1"`` into the machine's external address unless its
    cluster support is off (as on macOS and Windows), and with an external node address its servers
    listen on every interface. So the flag is turned off while this Ray starts, in this process
    (``ray_constants.ENABLE_RAY_CLUSTER``) and in the processes it starts (their environment).

    The processes it starts (its services, and through its raylet every actor) also get
    ``LEAN_IMPORTS_DIR`` first on ``PYTHONPATH``: where JupyterLab's dependencies are installed,
    that halves each Ray process's start (2.3 to 0.7 CPU seconds an actor, measured in
    ``benchmarks/ray_start.py``). This process's environment is restored once Ray has started.
    Ray's start-up notices that ask nothing of the user are not logged (:func:`quiet_ray_notices`).

    Its workers run at the learner's priority: Ray starts them at ``nice 15`` (its
    ``worker_niceness``), so that on a cluster's nodes its own services come first. On one machine
    that starves them: beside any busy process at normal priority (the learner's own updates, a
    notebook, another run) a niced worker gets about 3% of a core, and on a 2-core machine beside four
    busy processes a worker took over 120 s to build its env and agent (11.6 s at normal priority).
    ``RAY_worker_niceness`` set by the user is respected.
    """
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    niceness = ray_constants.RAY_WORKER_NICENESS  # read by the raylet as it starts (Ray's default: 15)
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    saved_env = {key: os.environ.get(key) for key in (name, "PYTHONPATH", niceness)}
    if options.get("_node_ip_address") in ("127.0.0.1", "localhost", "::1"):
        ray_constants.ENABLE_RAY_CLUSTER = False
        os.environ[name] = "0"
    os.environ.setdefault(niceness, "0")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (LEAN_IMPORTS_DIR, saved_env["PYTHONPATH"]) if p)
    try:
        with quiet_ray_notices():
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
    ray: Any,
    num_workers: int,
    cpus_per_worker: float,
    ray_address: str | None,
    ray_init: dict[str, Any] | None,
    learner_gpus: int = 0,
) -> bool:
    """Start Ray unless it runs already; True when this call started it (the runner then shuts it
    down when it closes). ``ray_address=None`` starts a private Ray on this machine (loopback
    only); an address joins a cluster. A cluster with too few CPUs for the workers, or fewer GPUs
    than ``learner_gpus``, is a ValueError."""
    owns_ray = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "logging_level": "warning"}
        if ray_address is None:
            cores = os.cpu_count() or 1
            options["num_cpus"] = max(cores, int(np.ceil(num_workers * cpus_per_worker)))
            options["_node_ip_address"] = "127.0.0.1"  # a private Ray: reachable from this machine only
            options.update(ray_init or {})
            init_private_ray(ray, options)
        else:
            options["address"] = ray_address
            options.update(ray_init or {})
            with quiet_ray_notices():
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
    gpus = ray.cluster_resources().get("GPU", 0.0)
    if learner_gpus > gpus:
        if owns_ray:
            ray.shutdown()
        raise ValueError(
            f"learner_gpus={learner_gpus} asks for a learner on a GPU, but the Ray cluster has {gpus:g} GPU(s) "
            f"(resources: {_resources_text(ray.cluster_resources())}): join a cluster with a GPU node "
            "(ray_address=...) or leave learner_gpus out"
        )
    return owns_ray


def _resources_text(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if k in ("CPU", "GPU", "memory")}
    return ", ".join(f"{k} {v:g}" for k, v in shown.items()) or "none"


def check_learner_gpus(learner_gpus: int, agent: Agent | None = None) -> None:
    """Where the learner of ``learner_gpus > 0`` runs: in the session's process, which must see that
    many CUDA GPUs; its agent then trains on ``cuda`` (an agent built with ``device="auto"`` is moved
    there; one built for another device is a ValueError). Env actors never ask Ray for a GPU."""
    if not learner_gpus:
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < learner_gpus:
        raise ValueError(
            f"learner_gpus={learner_gpus}: the learner runs in the session's own process, and this machine has "
            f"{count} CUDA GPU(s) (torch.cuda.is_available() is {torch.cuda.is_available()}). Start the session "
            "on a GPU node of the cluster (it joins with ray_address=...), or leave learner_gpus out to learn "
            "on the CPU"
        )
    if agent is None or agent.device.type == "cuda":
        return
    if agent.device_choice.requested != "auto":
        raise ValueError(
            f"learner_gpus={learner_gpus} puts the learner on a GPU, but the agent was built with "
            f"device={agent.device_choice.requested!r}: build it with device='cuda' (or 'auto'), or leave "
            "learner_gpus out"
        )
    agent.to("cuda", reason=f"learner_gpus={learner_gpus}: the Ray learner trains on the GPU")
