"""The runners over a PettingZoo ParallelEnv: one slot per agent, in the training thread, in local worker
processes or in Ray actors (each worker holds its own copies, built from the user's factory).

The slots come from ``workbench.envs.multiagent.ParallelEnvAdapter``; the observation rows are laid
out as the agent expects (:func:`layout_for`: its own observation, the global state for a centralised
critic, the agent's one-hot id). Episodes are the team's (``episode_reward`` is the sum over agents);
each agent's return is the signal ``episode_reward/<agent>`` and each group's (IPPO's ``groups``)
``episode_reward/<group>``, both through :meth:`Runner.drain_signals`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from ..envs.core import EnvSource
from ..envs.masks import MASK_KEY
from ..envs.multiagent import (
    ALIVE_KEY,
    ParallelVec,
    check_agent_fits,
    ended_from_slot_info,
    layout_for,
    make_parallel,
    parallel_spaces,
)
from ..loop import Episode, Transitions, env_step
from .local import LocalRunner
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = [
    "MultiAgentLocalRunner",
    "MultiAgentRunner",
    "check_agent_fits",
    "external_act",
    "external_feedback",
    "is_agent_dict",
    "make_multiagent_runner",
]


class _SlotEpisodes:
    """The team episodes and per-agent signals of ParallelEnv slots, read from ``slot_info`` rows
    (:class:`~workbench.envs.multiagent.ParallelVec`): the same accounting in the training thread and
    for rows stepped in workers."""

    agents: list[str]
    groups: dict[str, list[str]]
    _ended: list[Episode]
    _signals: list[tuple[str, float]]

    def _init_slots(self, agent: Agent | None, env: Any) -> None:
        self.agents = list(env.possible_agents)
        groups = dict(agent.agent_groups) if agent is not None else {}
        # IPPO's default groups are the agents themselves: their signal is the agent's, recorded once.
        self.groups = {g: m for g, m in groups.items() if g not in self.agents}
        self._ended = []
        self._signals = []

    def _record(self, slot_info: np.ndarray) -> None:
        self._ended = []
        for first, team, length, per_agent in ended_from_slot_info(slot_info, self.agents):
            self._ended.append(Episode(first, team, length))
            self._signals.extend((f"episode_reward/{a}", r) for a, r in per_agent.items())
            for group, members in self.groups.items():
                self._signals.append((f"episode_reward/{group}", float(sum(per_agent[a] for a in members))))

    @staticmethod
    def _with_alive(t: Transitions, alive: np.ndarray) -> Transitions:
        return t._replace(extras={**t.extras, ALIVE_KEY: alive})

    def ended_episodes(self) -> list[Episode]:
        """The team episodes the last step ended (``episode_reward`` is the team's return; ``env`` is the
        copy's first row, so a worker backend names the worker it ran in)."""
        return self._ended

    def drain_signals(self) -> list[tuple[str, float]]:
        """Each agent's (and group's) return of the episodes ended since the last call, after the
        backend's own signals."""
        out, self._signals = self._signals, []
        return [*super().drain_signals(), *out]  # type: ignore[misc]  # the runner's own (Runner: none)


class MultiAgentRunner(_SlotEpisodes, Runner):
    """Steps a ParallelEnv for the session's loop in the training thread, one row per agent: the user's
    instance, or ``copies`` copies built from the source's factory (closed with the runner)."""

    persistent = True  # the user's ParallelEnv lives on between two start() calls: episodes continue
    backend = "inprocess"

    def __init__(self, source: EnvSource, agent: Agent | None, *, seed: int | None = None, copies: int = 1) -> None:
        env = source.parallel
        self._owned = source.factory is not None
        envs = [make_parallel(source.factory, source.name) for _ in range(copies)] if self._owned else [env]
        self.envs = ParallelVec(envs, layout_for(agent, env), seed=seed)
        self.num_envs = self.envs.num_envs
        self._init_slots(agent, env)

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

    def transitions(self, agent: Agent, obs: Any) -> tuple[Transitions, Any]:
        """One step of every agent; the rows of absent agents carry ``"alive"`` 0 in the extras."""
        alive = self.envs.alive.astype(np.float32)
        t, next_obs = env_step(agent, self.envs, obs)
        self._record(self.envs.slot_info)
        return self._with_alive(t, alive), next_obs

    def rng_states(self) -> list[Any]:
        """Every copy's random stream, saved with a run (``ParallelVec.rng_states``)."""
        return self.envs.rng_states()

    def set_rng_states(self, states: list[Any]) -> None:
        """Continue these streams at the next :meth:`reset`."""
        self.envs.set_rng_states(states)

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``session.call_env``: the method on the ParallelEnv (one result per copy)."""
        return self.envs.call(name, tuple(args), dict(kwargs or {}))

    def close(self) -> None:
        """Copies built from a factory are closed; a user's ParallelEnv instance stays open."""
        if self._owned:
            self.envs.close()


class _WorkerSlots(_SlotEpisodes):
    """ParallelEnv copies in worker processes (local) or Ray actors: each worker builds ``copies``
    ParallelEnvs from the user's factory and steps them as a :class:`~workbench.envs.multiagent.ParallelVec`
    (``_worker.py``); its step answers carry the slots' ``slot_info`` (who is present, the returns of
    ended team episodes), so the learner keeps the same accounting as in-process."""

    _slot_columns = ParallelVec.SLOT_COLUMNS
    num_envs: int

    def __init__(self, source: EnvSource, agent: Agent | None, num_workers: int, copies: int, **options: Any) -> None:
        env = source.parallel
        self._layout = layout_for(agent, env)
        self._act_space = parallel_spaces(env, same_obs=False)[1]
        self._init_slots(agent, env)
        self.copies_per_worker = copies
        super().__init__(source, num_workers, copies * len(self.agents), **options)  # type: ignore[call-arg]
        self.slot_info = np.full((self.num_envs, ParallelVec.SLOT_COLUMNS), np.nan, np.float32)
        self.slot_info[:, 0] = 1.0

    def _spaces(self, source: EnvSource) -> tuple[spaces.Space, spaces.Space]:
        return spaces.Box(-np.inf, np.inf, (self._layout.size,), np.float32), self._act_space

    def _send_init(self, w: Any, seed: int | None) -> None:
        copies = w.num_envs // len(self.agents)
        worker_seed = None if seed is None else seed + 100_003 * w.id
        layout = dataclasses.asdict(self._layout)
        w.conn.send(("init", self._blob, None, copies, worker_seed, layout))  # type: ignore[attr-defined]

    def _store_slot_info(self, envs: slice, info: np.ndarray | None) -> None:
        if info is None:  # a restarted worker: its copies start afresh, every agent present
            self.slot_info[envs] = (1.0, np.nan, np.nan)
        else:
            self.slot_info[envs] = info

    def reset(self) -> np.ndarray:
        """Reset every copy in every worker; the rows, and who is present in each copy."""
        obs = super().reset()  # type: ignore[misc]
        rows = self.call(ParallelVec.ALIVE_CALL)  # type: ignore[attr-defined]
        self.slot_info[:] = np.asarray(rows, np.float32).reshape(self.num_envs, -1)
        return obs

    def transitions(self, agent: Agent, obs: Any) -> tuple[Transitions, Any]:
        """One step of every agent in every worker; absent agents' rows carry ``"alive"`` 0."""
        alive = self.slot_info[:, 0].astype(np.float32)
        t, next_obs = env_step(agent, self, obs)  # type: ignore[arg-type]
        self._record(self.slot_info)
        return self._with_alive(t, alive), next_obs


class MultiAgentLocalRunner(_WorkerSlots, LocalRunner):
    """``num_workers`` worker processes, each stepping ``copies`` ParallelEnvs built from the user's factory
    (``Session(agent, make_env, num_workers=N, backend="local")``)."""


def _ray_runner(source: EnvSource, agent: Agent | None, num_workers: int, copies: int, **options: Any) -> Runner:
    from .ray_envs import RayEnvRunner

    class MultiAgentRayRunner(_WorkerSlots, RayEnvRunner):
        """Ray actors, each stepping ``copies`` ParallelEnvs built from the user's factory, for the learner's
        actions (``backend="ray"``: the actors step envs, the learner acts for every agent)."""

    return MultiAgentRayRunner(source, agent, num_workers, copies, **options)


def make_multiagent_runner(
    source: EnvSource,
    agent: Agent | None,
    *,
    seed: int | None,
    num_workers: int,
    backend: str,
    envs_per_worker: int | None,
    restart_workers: bool,
    step_timeout: float | None,
    **options: Any,
) -> Runner:
    """The runner for a PettingZoo ParallelEnv source (``make_runner``'s branch): in the training thread
    (one worker; the user's instance, or a copy from a factory), or ``num_workers`` local worker processes
    or Ray actors each holding ``envs_per_worker`` copies (default 1) built from a factory. Backend
    ``"auto"`` with several workers is local workers; ``"inprocess"`` with several steps
    ``num_workers * envs_per_worker`` copies in the training thread."""
    copies = 1 if envs_per_worker is None else int(envs_per_worker)
    workers = num_workers > 1 or backend in ("local", "ray") or step_timeout is not None
    if backend == "envpool":
        raise ValueError(f"backend='envpool' steps EnvPool's own envs, not the PettingZoo ParallelEnv {source.name}")
    if workers and backend != "inprocess" and source.factory is None:
        raise ValueError(
            f"num_workers={num_workers} with backend={backend!r} builds the ParallelEnv in each worker, but an env "
            f"instance ({source.name}) cannot be copied to another process. Pass a zero-argument factory instead: "
            "Session(agent, lambda: simple_spread_v3.parallel_env(), num_workers=..., backend='local')"
        )
    if not workers or backend == "inprocess":
        if source.factory is None and num_workers * copies > 1:
            raise ValueError(
                f"backend='inprocess' with {num_workers * copies} copies of the ParallelEnv needs a zero-argument "
                f"factory to build them; got the instance {source.name}"
            )
        return MultiAgentRunner(source, agent, seed=seed, copies=num_workers * copies if workers else 1)
    common: dict[str, Any] = {"seed": seed, "restart_workers": restart_workers, "step_timeout": step_timeout}
    if backend in ("auto", "local"):
        return MultiAgentLocalRunner(source, agent, num_workers, copies, **common)
    acting = options.pop("ray_acting", None)
    if acting == "workers" or options.get("sync_every") is not None:
        raise ValueError(
            "with a PettingZoo ParallelEnv, Ray actors step the envs and the learner acts for every agent "
            "(what ray_acting='learner' does for single-agent envs): leave ray_acting and sync_every out"
        )
    options.pop("sync_every", None)
    return _ray_runner(source, agent, num_workers, copies, **common, **options)


# -- an external session with several agents (Session.act / Session.feedback with dicts) ------------


def is_agent_dict(agent: Agent, obs: Any) -> bool:
    """True when ``obs`` given to an external session's ``act`` is ``{agent_id: observation}`` rather
    than one observation (a Dict observation has the observation space's keys)."""
    if not isinstance(obs, Mapping):
        return False
    space = agent.observation_space
    return not (isinstance(space, spaces.Dict) and set(obs) == set(space.spaces))


def _rows(agent: Agent, obs: Mapping[Any, Any]) -> dict[Any, Any]:
    """Each agent's row as ``agent`` reads it: the observation itself for a shared policy; for IPPO
    and MAPPO the padded observation, the state (the observations side by side) and the one-hot id."""
    lay = agent.multiagent_layout
    if lay is None:
        return dict(obs)
    names = list(agent.multiagent_agents or ())
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


def external_act(runner: Any, agent: Agent, obs: Any, episode: Any, action_mask: Any) -> Any:
    """``Session.act``: ``{agent_id: action}`` for ``{agent_id: obs}``, each agent of ``episode`` being the
    external episode ``(episode, agent_id)`` of ``runner`` (one slot each); one observation's action otherwise."""
    if not is_agent_dict(agent, obs):
        return runner.act(obs, episode, action_mask)
    rows = _rows(agent, obs)
    masks = action_mask or {}
    if not isinstance(masks, Mapping):
        raise TypeError(f"act() got observations per agent, so action_mask must be a dict per agent too, got {masks!r}")
    unknown = [a for a in masks if a not in rows]
    if unknown:
        raise ValueError(f"act(): action_mask names {unknown!r}, which have no observation here ({list(rows)})")
    names = list(rows)
    # One call for every agent: a refused entry (a bad observation or mask, an agent awaiting its feedback)
    # refuses them all, so no other agent's episode is opened by an act that failed.
    actions = runner.act_many(
        [rows[a] for a in names],
        [(episode, a) for a in names],
        [masks.get(a, _mask_of(obs[a], None)) for a in names],
    )
    return dict(zip(names, actions))


def external_feedback(
    runner: Any, agent: Agent, rewards: Any, next_obs: Any, terminated: Any, truncated: Any, episode: Any, info: Any
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
