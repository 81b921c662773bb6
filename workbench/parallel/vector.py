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

from typing import TYPE_CHECKING, Any

import numpy as np

from ..envs.core import EnvSource
from ..envs.vector import VectorEnvAdapter, check_vector_session, make_envpool
from ..loop import Transitions, env_step
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["VectorRunner", "make_vector_runner"]


class VectorRunner(Runner):
    """Steps a vector env for the session's loop (see the module docstring).

    ``envs`` is the :class:`~workbench.envs.VectorEnvAdapter` over the vector env; ``owned`` says
    whether the runner built it (and so closes it); ``seed`` seeds the first reset (gymnasium
    vector envs: env ``i`` gets ``seed + i``; EnvPool takes its seed when it is made).
    """

    persistent = True  # the user's vector env lives on between two start() calls: episodes continue

    def __init__(
        self, envs: VectorEnvAdapter, *, seed: int | None = None, owned: bool = False, backend: str = "vector"
    ) -> None:
        self.envs = envs
        self.num_envs = envs.num_envs
        self.observation_space, self.action_space = envs.observation_space, envs.action_space
        self.backend = backend
        self._seed = seed
        self._owned = owned

    def reset(self) -> np.ndarray:
        """Reset every env (seeded the first time only) and return the first observations."""
        seed, self._seed = self._seed, None
        return self.envs.reset(seed)

    def transitions(self, agent: Agent, obs: np.ndarray) -> tuple[Transitions, np.ndarray]:
        """One step of every env for the agent's decision on ``obs``."""
        return env_step(agent, self.envs, obs)

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``session.call_env``: the method on every env through the vector env's ``call``, in env order."""
        return self.envs.call(name, tuple(args), dict(kwargs or {}))

    def close(self) -> None:
        """Close the envs this runner built (EnvPool from an id); a user's vector env stays open."""
        if self._owned:
            self.envs.close()


_UNSUPPORTED = ("restart_workers", "step_timeout", "envs_per_worker")


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
    for name in _UNSUPPORTED:
        if options.get(name):
            raise ValueError(
                f"{name}={options[name]!r} applies to the session's worker processes, not to a vector env "
                f"({source.name}), which steps its own envs: leave {name} out"
            )
    if backend == "envpool":
        assert source.env_id is not None  # check_vector_session said so
        threads = num_workers if num_workers > 1 else 0
        envs = make_envpool(source.env_id, num_envs, seed=seed, num_threads=threads)
        obs_space, act_space = source.spaces()
        if (envs.observation_space, envs.action_space) != (obs_space, act_space):
            envs.close()
            raise ValueError(
                f"EnvPool's {source.env_id!r} has the spaces {envs.observation_space} and {envs.action_space}, "
                f"gymnasium's {obs_space} and {act_space}: use backend='local' for this id"
            )
        return VectorRunner(envs, owned=True, backend="envpool")
    return VectorRunner(VectorEnvAdapter(source.vector), seed=seed, backend="vector")
