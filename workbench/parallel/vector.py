"""A runner over a vector env: the user's gymnasium ``VectorEnv`` or EnvPool env, or EnvPool envs
the session builds from an id (``backend="envpool"``).

The vector env steps its own envs (in this process for ``SyncVectorEnv``, in its subprocesses for
``AsyncVectorEnv``, in C++ threads for EnvPool); the learner decides for all of them at once through
``workbench.loop.env_step``, as with every runner. The autoreset rules that make any vector env look
like the library's own same-step ``VecEnv`` live in ``workbench.envs.VectorEnvAdapter``.

What a session gets from it: ``reset``, ``transitions``, ``call`` (``session.call_env`` through the
vector env's ``call``; EnvPool has none), ``close``, ``num_envs``, ``persistent`` and ``backend``
(the :class:`~workbench.parallel.runner.Runner` defaults for the rest). A user's vector env belongs
to the user: the runner never closes it; EnvPool envs built by the session
are closed with the run. There is no ``rng_states``: a resumed session resets the vector env with a
seed derived from its seed and step count (see docs/parallel.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..envs.core import EnvSource
from ..envs.vector import VectorEnvAdapter, check_envpool_spaces, check_vector_session, make_envpool
from ..loop import Transitions, env_step
from .errors import WorkerError
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["VectorRunner", "check_vector_options", "make_vector_runner"]

_T = TypeVar("_T")

# What a lost AsyncVectorEnv worker process looks like from the parent: its pipe is gone.
_PIPE_ERRORS = (ConnectionError, EOFError)


def dead_vector_worker(venv: Any, name: str, exc: BaseException) -> WorkerError | None:
    """The :class:`WorkerError` for a vector env whose worker process died under ``exc`` (a broken pipe,
    a reset connection, an end of file on its pipe): it names the worker (the env of that index),
    its exit code and the vector env; None when no worker of ``venv`` has died (``exc`` is then not one)."""
    processes = getattr(venv, "processes", None)
    if not isinstance(exc, _PIPE_ERRORS) or not processes:
        return None
    for process in processes:
        process.join(timeout=0.5)  # a worker that just died: let its exit code arrive
    dead = [(i, p.exitcode) for i, p in enumerate(processes) if not p.is_alive()]
    if not dead:
        return None
    i, code = dead[0]
    others = f" (and {len(dead) - 1} other worker(s))" if len(dead) > 1 else ""
    what = (
        f"of {name} died (exit code {code}){others}: its env {i} ran in that process, which the vector env does "
        f"not restart; the pipe to it raised {type(exc).__name__}. Fix the env (or pass an id or a factory with "
        "num_workers and restart_workers=True to have the session's own workers restarted)"
    )
    return WorkerError(i, what, envs=range(i, i + 1), died=True)


class VectorRunner(Runner):
    """Steps a vector env for the session's loop (see the module docstring).

    ``envs`` is the :class:`~workbench.envs.VectorEnvAdapter` over the vector env; ``owned`` says
    whether the runner built it (and so closes it); ``seed`` seeds the first reset (gymnasium
    vector envs: env ``i`` gets ``seed + i``; EnvPool takes its seed when it is made).
    """

    persistent = True  # the user's vector env lives on between two start() calls: episodes continue

    def __init__(
        self,
        envs: VectorEnvAdapter,
        *,
        seed: int | None = None,
        owned: bool = False,
        backend: str = "vector",
        name: str = "the vector env",
    ) -> None:
        self.envs = envs
        self.name = name
        self.num_envs = envs.num_envs
        self.observation_space, self.action_space = envs.observation_space, envs.action_space
        self.backend = backend
        self._seed = seed
        self._owned = owned

    def reset(self) -> np.ndarray:
        """Reset every env (seeded the first time only) and return the first observations."""
        seed, self._seed = self._seed, None
        return self._named(lambda: self.envs.reset(seed))

    def transitions(self, agent: Agent, obs: np.ndarray) -> tuple[Transitions, np.ndarray]:
        """One step of every env for the agent's decision on ``obs``; a worker process of the vector env
        that died is a :class:`WorkerError` naming it (not the bare pipe error its parent sees)."""
        return self._named(lambda: env_step(agent, self.envs, obs))

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``session.call_env``: the method on every env through the vector env's ``call``, in env order."""
        return self._named(lambda: self.envs.call(name, tuple(args), dict(kwargs or {})))

    def _named(self, work: Callable[[], _T]) -> _T:
        try:
            return work()
        except _PIPE_ERRORS as exc:
            error = dead_vector_worker(self.envs.venv, self.name, exc)
            if error is None:
                raise
            raise error from exc

    def close(self) -> None:
        """Close the envs this runner built (EnvPool from an id); a user's vector env stays open."""
        if self._owned:
            self.envs.close()


_UNSUPPORTED = ("restart_workers", "step_timeout", "envs_per_worker", "double_buffer")


def make_vector_runner(
    source: EnvSource,
    num_envs: int,
    *,
    seed: int | None = None,
    num_workers: int = 1,
    backend: str = "auto",
    **options: Any,
) -> VectorRunner:
    """The runner for a vector-env source, or EnvPool envs of ``source``'s id (``backend="envpool"``:
    ``num_envs`` envs, ``num_workers`` EnvPool threads, 0 for one per core)."""
    check_vector_session(source, num_envs, num_workers, backend, owner="make_runner")
    check_vector_options(source, backend, options)
    if backend == "envpool":
        assert source.env_id is not None  # check_vector_session said so
        threads = num_workers if num_workers > 1 else 0
        envs = make_envpool(source.env_id, num_envs, seed=seed, num_threads=threads)
        try:
            check_envpool_spaces(source, envs)
        except ValueError:
            envs.close()
            raise
        return VectorRunner(envs, owned=True, backend="envpool", name=f"EnvPool's {source.env_id!r}")
    return VectorRunner(VectorEnvAdapter(source.vector), seed=seed, backend="vector", name=source.name)


def check_vector_options(source: Any, backend: str, options: dict[str, Any]) -> None:
    """A ``ValueError`` for the worker options (``restart_workers``, ``step_timeout``, ``envs_per_worker``,
    ``double_buffer``)
    given with a vector env or ``backend="envpool"``, which step their own envs: the session's workers
    that the options steer do not exist there (``Session`` checks it when it is created)."""
    vector = getattr(source, "vector", None)  # an offline session's dataset source has no envs at all
    if vector is None and backend != "envpool":
        return
    for name in _UNSUPPORTED:
        if options.get(name):
            what = f"a vector env ({source.name})" if vector is not None else "backend='envpool'"
            raise ValueError(
                f"{name}={options[name]!r} applies to the session's worker processes, not to {what}, which steps "
                f"its own envs: leave {name} out"
            )
