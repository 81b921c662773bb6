"""The runner over a PettingZoo ParallelEnv: one slot per agent, stepped in the training thread.

The slots come from ``workbench.envs.multiagent.ParallelEnvAdapter``; the observation rows are laid
out as the agent expects (:func:`layout_for`: its own observation, the global state for a centralised
critic, the agent's one-hot id). Episodes are the team's (``episode_reward`` is the sum over agents);
each agent's return is the signal ``episode_reward/<agent>`` and each group's (IPPO's ``groups``)
``episode_reward/<group>``, both through :meth:`Runner.drain_signals`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..envs.core import EnvSource
from ..envs.multiagent import ALIVE_KEY, ParallelEnvAdapter, layout_for, parallel_spaces
from ..loop import Episode, Transitions, env_step
from .runner import Runner

__all__ = ["MultiAgentRunner", "check_agent_fits", "layout_for"]


def check_agent_fits(agent: Any, env: Any) -> None:
    """Raise a ``ValueError`` when ``agent`` was not built for the ParallelEnv ``env`` (its agents, its
    action space, the size of its observation rows)."""
    lay = layout_for(agent, env)
    own = getattr(getattr(agent, "config", None), "layout", None)
    agents = list(env.possible_agents)
    if isinstance(own, dict) and list(own.get("agents", [])) != agents:
        raise ValueError(
            f"{type(agent).__name__} was built for the agents {own['agents']}, the env has {agents}: "
            "build the agent from the same env"
        )
    _, act_space, _ = parallel_spaces(env, same_obs=False)
    if act_space != agent.action_space:
        raise ValueError(
            f"the agents' action space {act_space} differs from {type(agent).__name__}'s {agent.action_space}: "
            "build the agent from the same env"
        )
    if int(np.prod(agent.obs_shape)) != lay.size:
        raise ValueError(
            f"{type(agent).__name__} observes rows of {int(np.prod(agent.obs_shape))} numbers, the env's agents give "
            f"{lay.size}: build the agent from the same env"
        )


class MultiAgentRunner(Runner):
    """Steps a ParallelEnv for the session's loop, one row per agent."""

    persistent = True  # the user's ParallelEnv lives on between two start() calls: episodes continue
    backend = "inprocess"

    def __init__(self, source: EnvSource, agent: Any, *, seed: int | None = None) -> None:
        env = source.parallel
        self.envs = ParallelEnvAdapter(env, layout_for(agent, env), seed=seed)
        self.num_envs = self.envs.num_envs
        self.groups: dict[str, list[str]] = dict(getattr(getattr(agent, "config", None), "groups", None) or {})
        self._ended: list[Episode] = []
        self._signals: list[tuple[str, float]] = []

    @property
    def masks(self) -> np.ndarray | None:  # type: ignore[override]
        """The agents' current action masks (None when the env gives none)."""
        return self.envs.masks

    @property
    def final_masks(self) -> np.ndarray | None:  # type: ignore[override]
        """The masks of the states the last step reached."""
        return self.envs.final_masks

    def reset(self) -> np.ndarray:
        """Reset the ParallelEnv; one row per agent."""
        return self.envs.reset()

    def transitions(self, agent: Any, obs: Any) -> tuple[Transitions, Any]:
        """One step of every agent; the rows of absent agents carry ``"alive"`` 0 in the extras."""
        alive = self.envs.alive.astype(np.float32)
        t, next_obs = env_step(agent, self.envs, obs)
        t = t._replace(extras={**t.extras, ALIVE_KEY: alive})
        self._ended = []
        for team, length, per_agent in self.envs.ended:
            self._ended.append(Episode(0, team, length))
            self._signals.extend((f"episode_reward/{a}", r) for a, r in per_agent.items())
            for group, members in self.groups.items():
                self._signals.append((f"episode_reward/{group}", float(sum(per_agent[a] for a in members))))
        return t, next_obs

    def ended_episodes(self) -> list[Episode]:
        """The team episodes the last step ended (``episode_reward`` is the team's return)."""
        return self._ended

    def drain_signals(self) -> list[tuple[str, float]]:
        """Each agent's (and group's) return of the episodes ended since the last call."""
        out, self._signals = self._signals, []
        return out

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``session.call_env``: the method on the ParallelEnv."""
        return self.envs.call(name, tuple(args), dict(kwargs or {}))

    def close(self) -> None:
        """The ParallelEnv belongs to the application: it stays open."""
