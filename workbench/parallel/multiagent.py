"""The runner over a PettingZoo ParallelEnv: one slot per agent, stepped in the training thread.

The slots come from ``workbench.envs.multiagent.ParallelEnvAdapter``; the observation rows are laid
out as the agent expects (:func:`layout_for`: its own observation, the global state for a centralised
critic, the agent's one-hot id). Episodes are the team's (``episode_reward`` is the sum over agents);
each agent's return is the signal ``episode_reward/<agent>`` and each group's (IPPO's ``groups``)
``episode_reward/<group>``, both through :meth:`Runner.drain_signals`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from ..envs.core import EnvSource
from ..envs.masks import MASK_KEY
from ..envs.multiagent import ALIVE_KEY, ParallelEnvAdapter, layout_for, parallel_spaces
from ..loop import Episode, Transitions, env_step
from .runner import Runner

__all__ = ["MultiAgentRunner", "check_agent_fits", "external_act", "external_feedback", "is_agent_dict"]


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


# -- an external session with several agents (Session.act / Session.feedback with dicts) ------------


def is_agent_dict(agent: Any, obs: Any) -> bool:
    """True when ``obs`` given to an external session's ``act`` is ``{agent_id: observation}`` rather
    than one observation (a Dict observation has the observation space's keys)."""
    if not isinstance(obs, Mapping):
        return False
    space = agent.observation_space
    return not (isinstance(space, spaces.Dict) and set(obs) == set(space.spaces))


def _rows(agent: Any, obs: Mapping[Any, Any]) -> dict[Any, Any]:
    """Each agent's row as ``agent`` reads it: the observation itself for a shared policy; for IPPO
    and MAPPO the padded observation, the state (the observations side by side) and the one-hot id."""
    lay = getattr(agent, "multiagent_layout", None)
    if lay is None:
        return dict(obs)
    names = list(agent.config.layout["agents"])
    unknown = [a for a in obs if a not in names]
    if unknown:
        raise ValueError(f"{agent.algorithm} was built for the agents {names}; got observations of {unknown}")
    if lay.state == "state":
        raise ValueError(
            f"{agent.algorithm}'s critic reads env.state(), which an external session does not receive: build it "
            "with critic_input='concat' (the agents' observations side by side) to drive it through act/feedback"
        )
    local = np.zeros((len(names), lay.obs_dim), np.float32)
    for a, o in obs.items():
        if isinstance(o, Mapping) and MASK_KEY in o:
            o = o["observation"] if "observation" in o else {k: v for k, v in o.items() if k != MASK_KEY}
        flat = np.asarray(o, np.float32).reshape(-1)
        local[names.index(a), : flat.shape[0]] = flat
    eye = np.eye(len(names), dtype=np.float32)
    out = {}
    for a in obs:
        i = names.index(a)
        parts = [local[i]]
        if lay.state == "concat":
            parts.append(local.reshape(-1))
        parts.append(eye[i])
        out[a] = np.concatenate(parts)
    return out


def _mask_of(obs: Any, info: Any) -> Any:
    if isinstance(info, Mapping) and MASK_KEY in info:
        return info[MASK_KEY]
    if isinstance(obs, Mapping) and MASK_KEY in obs:
        return obs[MASK_KEY]
    return None


def _per_agent(value: Any, agent_id: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        if agent_id not in value:
            raise ValueError(f"feedback(): {name} has no entry for agent {agent_id!r}: give one per agent, or one bool")
        return value[agent_id]
    return value


def external_act(runner: Any, agent: Any, obs: Any, episode: Any, action_mask: Any) -> Any:
    """``Session.act``: ``{agent_id: action}`` for ``{agent_id: obs}``, each agent of ``episode`` being the
    external episode ``(episode, agent_id)`` of ``runner`` (one slot each); one observation's action otherwise."""
    if not is_agent_dict(agent, obs):
        return runner.act(obs, episode, action_mask)
    rows = _rows(agent, obs)
    masks = action_mask or {}
    return {a: runner.act(row, (episode, a), masks.get(a, _mask_of(obs[a], None))) for a, row in rows.items()}


def external_feedback(
    runner: Any, agent: Any, rewards: Any, next_obs: Any, terminated: Any, truncated: Any, episode: Any, info: Any
) -> None:
    """``Session.feedback``: what followed :func:`external_act`; with ``rewards`` a dict, per agent its reward,
    next observation and end (a bool for all agents, or a dict per agent), ``info`` per agent (its
    ``"action_mask"``)."""
    if not isinstance(rewards, Mapping):
        runner.feedback(rewards, next_obs, terminated, truncated, episode, info)
        return
    if not isinstance(next_obs, Mapping):
        raise TypeError(f"feedback() got rewards per agent, so next_obs must be a dict per agent too, got {next_obs!r}")
    if set(rewards) != set(next_obs):
        raise ValueError(
            f"feedback(): rewards are for {sorted(map(str, rewards))} and next observations for "
            f"{sorted(map(str, next_obs))}: give both for the agents that acted"
        )
    rows = _rows(agent, next_obs)
    for a, reward in rewards.items():
        agent_info = (info or {}).get(a)
        mask = _mask_of(next_obs[a], agent_info)
        runner.feedback(
            reward,
            rows[a],
            bool(_per_agent(terminated, a, "terminated")),
            bool(_per_agent(truncated, a, "truncated")),
            (episode, a),
            None if mask is None else {MASK_KEY: mask},
        )
