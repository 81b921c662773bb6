"""PettingZoo's parallel API as the library's vector of envs: one slot per agent.

A PettingZoo ``ParallelEnv`` steps several agents at once with dicts keyed by agent name. The
library's loop steps vectors of envs (``workbench.loop.env_step``), so :class:`ParallelEnvAdapter`
presents the ParallelEnv as one *slot* per possible agent (``env.possible_agents``, in order):
row ``i`` of every batch is agent ``i``'s observation, action, reward and episode end. One policy
deciding for every row is parameter sharing (``wb.PPO``); ``wb.IPPO`` and ``wb.MAPPO``
(``workbench.agents.multiagent``) route rows to per-group networks and give the critic the global
state, through the :class:`Layout` of the observations the adapter builds.

Agents that are not in ``env.agents`` (not yet arrived, or gone mid-episode) keep their slot: its
observation is zeros, its action is not sent to the env, its reward is 0, and every step it is dead
is marked terminated, with the extras key ``"alive"`` 0, so on-policy agents leave those rows out of
their updates. An agent's own end (terminated, truncated, or dropped from ``env.agents``) ends its
slot's episode; the env is reset when no agent is left (same-step autoreset, as the library's
``VecEnv``).

Action masks: ``info[agent]["action_mask"]`` or a Dict observation's ``"action_mask"`` key.
Observations: each agent's space flattened (``flat_observation_space``; a Dict's mask key left out).

Random streams: a ParallelEnv's generator (``np_random`` on ``env.unwrapped``, where PettingZoo's envs
keep it; :func:`parallel_rng_state`) is saved with a run and continued by a reopened one, as the
single-agent ``VecEnv`` does with ``env.np_random``.

Episodes: the team's return (the sum over agents) and length are what ``episode_reward`` and
``episode_length`` record; each agent's return is the signal ``episode_reward/<agent>``, and with
``groups`` each group's sum is ``episode_reward/<group>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from .actions import env_action_converter
from .composite import composite_layout
from .masks import MASK_KEY, check_masks, mask_size, strip_mask_space

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = [
    "ALIVE_KEY",
    "Layout",
    "ParallelEnvAdapter",
    "ParallelVec",
    "build_for_play",
    "check_agent_fits",
    "check_parallel_env",
    "is_aec_env",
    "is_parallel_env",
    "layout_for",
    "make_parallel",
    "parallel_episode",
    "parallel_rng_state",
    "parallel_spaces",
    "play_parallel",
    "set_parallel_rng_state",
    "with_agent_ids",
]

ALIVE_KEY = "alive"
"""The extras key that marks the rows of agents present in the env when the step was decided (1) or
absent (0: their slot's transition is filler, left out of on-policy updates)."""


def _is_pettingzoo(env: Any, kind: str) -> bool:
    """Whether ``env`` is an instance of PettingZoo's class ``kind`` (False without pettingzoo: an extra,
    whose API is then recognised by its members)."""
    try:
        from pettingzoo.utils import env as pettingzoo_env
    except ImportError:
        return False
    return isinstance(env, getattr(pettingzoo_env, kind))


def _is_aec_class(env: Any) -> bool:
    """Whether ``env``'s class has the AEC API (read on the class: PettingZoo's wrappers raise on
    ``agent_selection`` before the first reset, so ``hasattr`` on the instance cannot see it)."""
    kind = type(env)
    return callable(getattr(kind, "last", None)) and callable(getattr(kind, "agent_iter", None))


def is_parallel_env(env: Any) -> bool:
    """True for a PettingZoo ``ParallelEnv`` (or anything with its API: ``possible_agents``,
    ``observation_space(agent)``, ``action_space(agent)``, dict-valued ``reset``/``step``)."""
    if not hasattr(env, "possible_agents"):  # not a PettingZoo env: pettingzoo is not imported for it
        return False
    if _is_pettingzoo(env, "ParallelEnv"):
        return True
    return (
        not is_aec_env(env)
        and callable(getattr(env, "observation_space", None))
        and callable(getattr(env, "action_space", None))
        and hasattr(env, "step")
        and hasattr(env, "reset")
    )


def is_aec_env(env: Any) -> bool:
    """True for a PettingZoo AEC env (agents take turns: ``agent_selection``, ``last()``), reset or not."""
    if not hasattr(env, "possible_agents"):
        return False
    if _is_pettingzoo(env, "AECEnv"):
        return True
    return _is_aec_class(env) or (hasattr(env, "agent_selection") and hasattr(env, "last"))


def check_parallel_env(env: Any) -> None:
    """Raise a ``TypeError`` that says how to convert an AEC env; a ``ValueError`` for a ParallelEnv
    with no agents or with an agent name listed twice."""
    if is_aec_env(env):
        raise TypeError(
            f"{type(env).__name__} is a PettingZoo AEC env (agents take turns); the workbench trains on the "
            "parallel API: convert it with `from pettingzoo.utils import aec_to_parallel; "
            "env = aec_to_parallel(env)` (or build it with the module's parallel_env())"
        )
    agents = list(getattr(env, "possible_agents", []))
    if not agents:
        raise ValueError(f"the ParallelEnv {type(env).__name__} has no possible_agents: it must list its agents")
    twice = sorted({str(a) for a in agents if agents.count(a) > 1})
    if twice:
        raise ValueError(
            f"the ParallelEnv {type(env).__name__} lists the agent name(s) {twice} more than once in possible_agents "
            f"{agents}: every agent needs its own name (its observations, rewards and actions are keyed by it)"
        )


@dataclass(frozen=True)
class Layout:
    """What one slot's observation row holds, in order: the agent's own observation (padded with
    zeros to ``obs_dim``), then the global state when ``state`` is ``"state"`` (``env.state()``) or
    ``"concat"`` (every agent's observation), then the agent's one-hot id when ``agent_ids``."""

    obs_dim: int
    n_agents: int
    agent_ids: bool = False
    state: str | None = None
    state_dim: int = 0

    @property
    def size(self) -> int:
        """The length of a row."""
        return self.obs_dim + self.state_dim + (self.n_agents if self.agent_ids else 0)


class _WithAgentIds:
    """A ParallelEnv whose agents' rows end with their one-hot id (see :func:`with_agent_ids`)."""

    agent_ids = True

    def __init__(self, env: Any) -> None:
        check_parallel_env(env)
        self.env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    @property
    def unwrapped(self) -> Any:
        """The ParallelEnv itself."""
        return getattr(self.env, "unwrapped", self.env)


def with_agent_ids(env: Any) -> Any:
    """``env`` (a PettingZoo ParallelEnv) for an agent that should see which agent it decides for: a
    shared-parameter ``wb.PPO(wb.with_agent_ids(env))`` gets each agent's one-hot id appended to its
    observation. The session may be given either ``env`` or the wrapped one: the rows follow the agent."""
    return env if getattr(env, "agent_ids", False) else _WithAgentIds(env)


def _agent_spaces(env: Any) -> tuple[list[str], list[spaces.Space], list[spaces.Space]]:
    agents = list(env.possible_agents)
    return agents, [env.observation_space(a) for a in agents], [env.action_space(a) for a in agents]


def _flat_dim(space: spaces.Space) -> int:
    space = strip_mask_space(space)
    if isinstance(space, spaces.Dict) and "observation" in space.spaces and len(space.spaces) == 1:
        space = space.spaces["observation"]
    return int(spaces.flatdim(space))


def parallel_spaces(
    env: Any, *, agent_ids: bool = False, state: str | None = None, same_obs: bool = True
) -> tuple[spaces.Box, spaces.Space, Layout]:
    """The slot spaces of a ParallelEnv: a flat float32 Box for the rows the adapter builds, the
    agents' (common) action space, and the :class:`Layout`. ``same_obs`` (parameter sharing) asks
    every agent to have the same observation size; otherwise rows are padded to the largest."""
    check_parallel_env(env)
    agent_ids = agent_ids or bool(getattr(env, "agent_ids", False))
    agents, obs_spaces, act_spaces = _agent_spaces(env)
    first = act_spaces[0]
    for a, s in zip(agents, act_spaces):
        if s != first:
            raise ValueError(
                f"the agents' action spaces differ ({agents[0]}: {first}, {a}: {s}): one policy head serves every "
                "slot here; wrap the env so the agents share an action space (pad Discrete actions and mask them)"
            )
    simple = isinstance(first, spaces.Discrete | spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary)
    if not simple and composite_layout(first) is None:
        raise ValueError(
            f"the agents' action space {first} is not supported: use Discrete, Box, MultiDiscrete, MultiBinary, "
            "or a Dict / Tuple of them (composite actions: wb.PPO, wb.IPPO, wb.MAPPO)"
        )
    dims = [_flat_dim(s) for s in obs_spaces]
    if same_obs and len(set(dims)) > 1:
        sizes = ", ".join(f"{a}: {d}" for a, d in zip(agents, dims))
        raise ValueError(
            f"parameter sharing (wb.PPO) needs every agent's observation to have one size, got {sizes}: "
            "use wb.IPPO(env, groups={...}) with one group per observation size, or wb.MAPPO(env)"
        )
    if state not in (None, "state", "concat"):
        raise ValueError(
            f"state must be None, 'state' (env.state()) or 'concat' (every agent's observation), got {state!r}"
        )
    state_dim = 0
    if state == "state":
        space = getattr(env, "state_space", None)
        if space is None:
            raise ValueError(
                f"the ParallelEnv {type(env).__name__} has no state_space, so env.state() cannot be the critic's "
                "input: use critic_input='concat' (the agents' observations side by side)"
            )
        state_dim = int(spaces.flatdim(space))
    elif state == "concat":
        state_dim = len(agents) * max(dims)
    layout = Layout(max(dims), len(agents), agent_ids, state, state_dim)
    box = spaces.Box(-np.inf, np.inf, (layout.size,), np.float32)
    return box, first, layout


def _flatten_obs(space: spaces.Space, obs: Any, dim: int) -> np.ndarray:
    stripped = strip_mask_space(space)
    if isinstance(obs, Mapping) and MASK_KEY in obs:
        obs = {k: v for k, v in obs.items() if k != MASK_KEY}
        if isinstance(stripped, spaces.Dict) and list(stripped.spaces) == ["observation"]:
            stripped, obs = stripped.spaces["observation"], obs["observation"]
    flat = np.asarray(spaces.flatten(stripped, obs), dtype=np.float32).reshape(-1)
    if flat.shape[0] < dim:
        flat = np.concatenate([flat, np.zeros(dim - flat.shape[0], np.float32)])
    return flat


def layout_for(agent: Agent | None, env: Any) -> Layout:
    """The row layout ``agent`` was built for on ``env``: the agent's own (IPPO, MAPPO: its
    ``multiagent_layout``), else plain observations, with one-hot ids when the agent's observation
    size says so (a shared policy built on ``wb.with_agent_ids(env)``)."""
    own = agent.multiagent_layout if agent is not None else None
    if own is not None:
        return own
    _, _, plain = parallel_spaces(env)
    size = int(np.prod(agent.obs_shape)) if agent is not None else plain.size
    if size == plain.size:
        return plain
    if size == plain.size + plain.n_agents:
        return Layout(plain.obs_dim, plain.n_agents, agent_ids=True)
    raise ValueError(
        f"{type(agent).__name__} observes rows of {size} numbers, but the ParallelEnv {type(env).__name__} gives "
        f"{plain.size} per agent ({plain.size + plain.n_agents} with agent ids): build the agent on this env"
    )


def check_agent_fits(agent: Agent, env: Any) -> None:
    """Raise a ``ValueError`` when ``agent`` was not built for the ParallelEnv ``env`` (its agents, its
    action space, the size of its observation rows): what a session and ``agent.play`` check first."""
    lay = layout_for(agent, env)
    own = agent.multiagent_agents
    agents = list(env.possible_agents)
    if own is not None and list(own) != agents:
        raise ValueError(
            f"{type(agent).__name__} was built for the agents {own}, the env has {agents}: "
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


def _generator(env: Any) -> tuple[str | None, np.random.Generator | None]:
    """The attribute of ``env.unwrapped`` that holds its numpy generator, and the generator (read from
    the instance's own attributes, so a gymnasium-style ``np_random`` property is not made to create one)."""
    raw = getattr(env, "unwrapped", env)
    own = getattr(raw, "__dict__", {})
    for name in ("np_random", "_np_random"):
        found = own.get(name)
        if isinstance(found, np.random.Generator):
            return name, found
    return None, None


def parallel_rng_state(env: Any) -> dict[str, Any] | None:
    """The state of a ParallelEnv's random generator (``np_random``, or gymnasium's ``_np_random``, on
    ``env.unwrapped``: where PettingZoo's envs such as MPE keep it), or None when it has none."""
    _, generator = _generator(env)
    return None if generator is None else dict(generator.bit_generator.state)


def set_parallel_rng_state(env: Any, state: dict[str, Any]) -> bool:
    """Give ``env`` a generator in ``state`` (from :func:`parallel_rng_state`), in the attribute its own
    generator is in; False (nothing changed) when it has none or numpy cannot rebuild the state."""
    name, _ = _generator(env)
    if name is None:
        return False
    try:
        bit_generator = getattr(np.random, state["bit_generator"])()
        bit_generator.state = state
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    setattr(getattr(env, "unwrapped", env), name, np.random.Generator(bit_generator))
    return True


class ParallelEnvAdapter:
    """A ParallelEnv stepped as one slot per possible agent (see the module docstring).

    ``step(actions)`` returns ``(obs, rewards, terminated, truncated, final_obs)`` as the library's
    ``VecEnv`` does; ``masks``/``final_masks`` hold the action masks when the env gives them;
    ``alive`` says which slots' current observations belong to an agent in the env; ``ended`` lists
    the team episodes that the last step ended as ``(team_return, length, {agent: return})``.
    :meth:`rng_state` / :meth:`set_rng_state` carry the env's random stream across a save and reopen.
    """

    game_ends = None
    successes = None  # no goal envs' info["is_success"] per agent (the step protocol's attribute)

    def __init__(self, env: Any, layout: Layout, *, seed: int | None = None) -> None:
        check_parallel_env(env)
        self.env = env
        self.layout = layout
        self.agents, self.obs_spaces, act_spaces = _agent_spaces(env)
        self.action_space = act_spaces[0]
        self.num_envs = len(self.agents)
        self.step_count = 0
        self._seed = seed
        self._convert = _action_converter(self.action_space)
        self._mask_n = mask_size(self.action_space)
        self._uses_masks: bool | None = None
        self.masks: np.ndarray | None = None
        self.final_masks: np.ndarray | None = None
        self.alive = np.zeros(self.num_envs, dtype=bool)
        self.returns = np.zeros(self.num_envs, dtype=np.float64)
        self.length = 0
        self.ended: list[tuple[float, int, dict[str, float]]] = []
        self.finished = False  # the last step ended the team's episode
        self.autoreset = True
        self._eye = np.eye(self.num_envs, dtype=np.float32)
        # The env's random stream before its last reset, and whether it has stepped since: a save right
        # after a reset keeps the stream that drew that episode, so a reopened run draws it again.
        self._pre_reset: dict[str, Any] | None = None
        self._fresh = False
        self._restore: dict[str, Any] | None = None

    # -- rows ------------------------------------------------------------------------------------

    def _rows(self, obs: Mapping[str, Any], present: Sequence[str]) -> np.ndarray:
        lay = self.layout
        local = np.zeros((self.num_envs, lay.obs_dim), np.float32)
        for i, a in enumerate(self.agents):
            if a in present and a in obs:
                local[i] = _flatten_obs(self.obs_spaces[i], obs[a], lay.obs_dim)
        parts = [local]
        if lay.state == "state":
            state = np.asarray(self.env.state(), np.float32).reshape(-1)
            parts.append(np.broadcast_to(state, (self.num_envs, state.shape[0])))
        elif lay.state == "concat":
            parts.append(np.broadcast_to(local.reshape(-1), (self.num_envs, lay.state_dim)))
        if lay.agent_ids:
            parts.append(self._eye)
        return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)

    def _read_masks(
        self, obs: Mapping[str, Any], info: Mapping[str, Any], present: Sequence[str], *, final: bool
    ) -> np.ndarray | None:
        if self._mask_n is None:
            return None
        rows = np.ones((self.num_envs, self._mask_n), dtype=bool)
        found = False
        for i, a in enumerate(self.agents):
            if a not in present:
                continue
            mask = None
            agent_info = info.get(a) if isinstance(info, Mapping) else None
            if isinstance(agent_info, Mapping) and MASK_KEY in agent_info:
                mask = agent_info[MASK_KEY]
            elif isinstance(obs.get(a), Mapping) and MASK_KEY in obs[a]:
                mask = obs[a][MASK_KEY]
            if mask is not None:
                found = True
                rows[i] = check_masks(
                    mask, self.action_space, f"{a}'s action mask at step {self.step_count}", allow_empty=final
                )[0]
        if self._uses_masks is None:
            self._uses_masks = found
        return rows if self._uses_masks else None

    def _check_answer(
        self,
        call: str,
        present: Sequence[str],
        obs: Any,
        rew: Any = None,
        term: Any = None,
        trunc: Any = None,
        *,
        acted: Sequence[str] = (),
    ) -> None:
        """Refuse a ``reset``/``step`` answer that breaks PettingZoo's parallel API, naming the agent: an
        agent that is not in ``possible_agents``, a present agent without an observation, an agent that
        acted without a reward, termination and truncation (a silent 0 or "not done" would train on it)."""
        where = f"{type(self.env).__name__}.{call}()" + (f" at step {self.step_count}" if call == "step" else "")
        answers: list[tuple[str, Any]] = [("observations", obs)]
        if call == "step":
            answers += [("rewards", rew), ("terminations", term), ("truncations", trunc)]
        for name, value in answers:
            if not isinstance(value, Mapping):
                raise TypeError(
                    f"{where} returned {name} of type {type(value).__name__}: a ParallelEnv returns a dict keyed by "
                    "agent name (for an AEC env, convert it with pettingzoo.utils.aec_to_parallel)"
                )
        listed = f"not in possible_agents {self.agents}: every agent the env reports must be listed there"
        checks = [
            (f"returned {name} for", [a for a in value if a not in self.agents], listed) for name, value in answers
        ]
        checks.append(
            (f"left env.agents = {list(present)}, with", [a for a in present if a not in self.agents], listed)
        )
        checks.append(
            (
                "gave no observation for the present agent(s)",
                [a for a in present if a not in obs],
                "a ParallelEnv returns an observation for every agent in env.agents",
            )
        )
        checks += [
            (
                f"returned {name} {dict(value)!r}, without the agent(s) that acted",
                [a for a in acted if a not in value],
                "a ParallelEnv's step returns a reward, termination and truncation for every agent that acted",
            )
            for name, value in answers[1:]
        ]
        for said, agents, rule in checks:
            if agents:
                raise ValueError(f"{where} {said} {agents!r}: {rule}")

    # -- the VecEnv interface -------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset the env (seeded with ``seed``, or the adapter's seed the first time, or continuing the
        stream given to :meth:`set_rng_state`) and return the rows."""
        if seed is None:
            seed, self._seed = self._seed, None
        restore, self._restore = self._restore, None
        if restore is not None and set_parallel_rng_state(self.env, restore):
            seed = None
        self._pre_reset = parallel_rng_state(self.env)
        self._fresh = seed is None
        result = self.env.reset(seed=seed)
        obs, info = result if isinstance(result, tuple) else (result, {})
        present = list(self.env.agents)
        self._check_answer("reset", present, obs)
        self.alive = np.array([a in present for a in self.agents])
        self.returns[:] = 0.0
        self.length = 0
        self.masks = self._read_masks(obs, info, present, final=False)
        return self._rows(obs, present)

    def _step_no_reset(self, actions: np.ndarray) -> np.ndarray:
        """Play: one step, no reset at the end (``finished`` says whether every agent is done)."""
        self.autoreset = False
        try:
            return self.step(actions)[0]
        finally:
            self.autoreset = True

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step the live agents with their rows' actions; same-step reset when no agent is left."""
        self.step_count += 1
        self.ended = []
        self._fresh = False
        before = self.alive.copy()
        act = {a: self._convert(actions[i]) for i, a in enumerate(self.agents) if before[i]}
        obs, rew, term, trunc, info = self.env.step(act)
        present = list(self.env.agents)
        self._check_answer("step", present, obs, rew, term, trunc, acted=list(act))
        n = self.num_envs
        rewards = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        for i, a in enumerate(self.agents):
            if not before[i]:
                terminated[i] = True  # filler: no bootstrapping through a slot nobody acts in
                continue
            rewards[i] = _reward(rew[a], a, self.step_count, self.env)
            terminated[i] = bool(term[a]) or (a not in present and not trunc[a])
            truncated[i] = bool(trunc[a])
        self.returns += rewards
        self.length += 1
        # An agent that left keeps reporting nothing: its row is the last observation it had.
        final_obs = self._rows(obs, [a for i, a in enumerate(self.agents) if before[i]])
        self.final_masks = self._read_masks(obs, info, present, final=True)
        self.finished = not present
        if not present and not self.autoreset:
            return final_obs, rewards, terminated, truncated, final_obs
        if not present:  # everyone is done: the team's episode ends, the env starts another
            per_agent = {a: float(self.returns[i]) for i, a in enumerate(self.agents)}
            self.ended.append((float(self.returns.sum()), self.length, per_agent))
            next_obs = self.reset()
            return next_obs, rewards, terminated, truncated, final_obs
        self.alive = np.array([a in present for a in self.agents])
        self.masks = self._read_masks(obs, info, present, final=False)
        next_obs = self._rows(obs, present)
        return next_obs, rewards, terminated, truncated, final_obs

    def rng_state(self) -> dict[str, Any] | None:
        """The env's random stream (:func:`parallel_rng_state`) at the point an uninterrupted run would
        continue from: right after a reset, the state that drew that reset, so a reopened run redraws it."""
        if self._fresh and self._pre_reset is not None:
            return self._pre_reset
        return parallel_rng_state(self.env)

    def set_rng_state(self, state: dict[str, Any] | None) -> None:
        """Continue this stream (from :meth:`rng_state`) at the next :meth:`reset` instead of seeding
        (None: seeded as usual)."""
        self._restore = state

    def call(self, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``env.name(*args, **kwargs)`` (or the attribute) on the ParallelEnv; one result."""
        attr = getattr(self.env, name)
        return [attr(*args, **(kwargs or {})) if callable(attr) else attr]

    def close(self) -> None:
        """Close the ParallelEnv."""
        self.env.close()


class ParallelVec:
    """Copies of a ParallelEnv side by side as one vector of slots: copy ``c``'s agent ``i`` is row
    ``c * n_agents + i``. What the runners step, in the training thread or in a worker process
    (``workbench/parallel/_worker.py`` builds one from the user's factory), so the rows, the autoreset
    and the episode accounting are the same wherever the env runs.

    After every :meth:`reset` and :meth:`step`, :attr:`slot_info` (``(num_envs, 3)`` float32) says per
    row whether its agent is present for the next decision (column 0), and, for the copies whose team
    episode the step ended, the agent's return (column 1) and the team episode's length (column 2), NaN
    elsewhere: a worker sends it with the step's answer (a few floats, no pickle).
    """

    game_ends = None  # the step protocol's attributes that a ParallelEnv never has
    successes = None
    SLOT_COLUMNS = 3
    ALIVE_CALL = "_workbench_slot_info"
    """The name :meth:`call` answers with :attr:`slot_info` rows (a worker's parent asks after a reset)."""

    def __init__(self, envs: Sequence[Any], layout: Layout, *, seed: int | None = None) -> None:
        if not envs:
            raise ValueError("ParallelVec needs at least one ParallelEnv")
        seeds = [None if seed is None else seed + 1_000 * i for i in range(len(envs))]
        self.copies = [ParallelEnvAdapter(env, layout, seed=s) for env, s in zip(envs, seeds)]
        self.layout = layout
        first = self.copies[0]
        self.agents = first.agents
        self.n_agents = first.num_envs
        self.num_envs = self.n_agents * len(self.copies)
        self.action_space = first.action_space
        self.observation_space = spaces.Box(-np.inf, np.inf, (layout.size,), np.float32)
        self.slot_info = np.full((self.num_envs, self.SLOT_COLUMNS), np.nan, np.float32)
        self.masks: np.ndarray | None = None
        self.final_masks: np.ndarray | None = None
        self.stepping: int | None = None
        self.step_count = 0

    def _slices(self) -> list[slice]:
        n = self.n_agents
        return [slice(c * n, (c + 1) * n) for c in range(len(self.copies))]

    @property
    def alive(self) -> np.ndarray:
        """Which rows' agents are present for the next decision."""
        return np.concatenate([c.alive for c in self.copies])

    def _gather_masks(self, final: bool) -> np.ndarray | None:
        parts = [c.final_masks if final else c.masks for c in self.copies]
        if all(p is None for p in parts):
            return None
        n = mask_size(self.action_space) or 0
        return np.concatenate([np.ones((self.n_agents, n), bool) if p is None else p for p in parts])

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every copy (copy ``c`` seeded ``seed + 1000 c`` when given); the rows."""
        rows = [c.reset(None if seed is None else seed + i * 1_000) for i, c in enumerate(self.copies)]
        self.slot_info[:, 0] = self.alive
        self.slot_info[:, 1:] = np.nan
        self.masks = self._gather_masks(False)
        return np.concatenate(rows)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every copy (same-step reset of a copy whose agents are all done); see :class:`ParallelEnvAdapter`."""
        self.step_count += 1
        self.slot_info[:, 1:] = np.nan
        outs = []
        for c, (copy, s) in enumerate(zip(self.copies, self._slices())):
            self.stepping = c
            outs.append(copy.step(actions[s]))
            for _team, length, per_agent in copy.ended:
                self.slot_info[s, 1] = [per_agent[a] for a in self.agents]
                self.slot_info[s, 2] = length
        self.stepping = None
        self.slot_info[:, 0] = self.alive
        obs, rewards, terminated, truncated, final = (np.concatenate(parts) for parts in zip(*outs))
        self.masks = self._gather_masks(False)
        self.final_masks = self._gather_masks(True)
        # Same rows (no agent left, no team episode ended): the one array, so a worker sends it once.
        return obs, rewards, terminated, truncated, obs if np.array_equal(final, obs) else final

    def ended(self) -> list[tuple[int, float, int, dict[str, float]]]:
        """The team episodes the last step ended, read from :attr:`slot_info`: ``(first_row, team_return,
        length, {agent: return})``."""
        return ended_from_slot_info(self.slot_info, self.agents)

    def rng_states(self) -> list[Any]:
        """Every copy's random stream (:meth:`ParallelEnvAdapter.rng_state`), one entry per row as the
        runners carry them: copy ``c``'s in row ``c * n_agents``, None in its other rows."""
        states: list[Any] = [None] * self.num_envs
        for c, copy in enumerate(self.copies):
            states[c * self.n_agents] = copy.rng_state()
        return states

    def set_rng_states(self, states: Sequence[Any]) -> None:
        """Continue these streams (from :meth:`rng_states`) at the next :meth:`reset`; copies without one
        (None, or beyond the list) are seeded as usual."""
        for c, copy in enumerate(self.copies):
            row = c * self.n_agents
            copy.set_rng_state(states[row] if row < len(states) else None)

    def call(self, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``env.name(*args, **kwargs)`` on every copy, one result per copy; :data:`ALIVE_CALL` gives the
        :attr:`slot_info` rows."""
        if name == self.ALIVE_CALL:
            return [row for row in self.slot_info.copy()]
        out: list[Any] = []
        for c in self.copies:
            out.extend(c.call(name, args, kwargs))
        return out

    def close(self) -> None:
        """Close every copy."""
        for c in self.copies:
            c.close()


def ended_from_slot_info(info: np.ndarray, agents: Sequence[str]) -> list[tuple[int, float, int, dict[str, float]]]:
    """The team episodes recorded in :attr:`ParallelVec.slot_info` rows (several copies, one after another):
    ``(first_row, team_return, length, {agent: return})``."""
    n = len(agents)
    out = []
    for first in range(0, info.shape[0], n):
        rows = info[first : first + n]
        if np.isnan(rows[0, 2]):
            continue
        per_agent = {a: float(r) for a, r in zip(agents, rows[:, 1])}
        out.append((first, float(sum(per_agent.values())), int(rows[0, 2]), per_agent))
    return out


def make_parallel(factory: Any, name: str = "the env factory") -> Any:
    """``factory()``, checked to be a PettingZoo ParallelEnv (a ``TypeError`` that says what it returned)."""
    env = factory()
    if is_aec_env(env):
        check_parallel_env(env)  # says how to convert it
    if not is_parallel_env(env):
        raise TypeError(
            f"{name} returned {type(env).__name__}, not a PettingZoo ParallelEnv; it must take no arguments and "
            "return a new ParallelEnv each time (for example `lambda: simple_spread_v3.parallel_env()`)"
        )
    return env


def _required_parameters(factory: Any) -> list[str]:
    """The parameters ``factory`` cannot be called without (none when its signature cannot be read)."""
    import inspect

    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]


def build_for_play(factory: Any, name: str, owner: str) -> Any:
    """``factory()`` for ``agent.play``: a PettingZoo ParallelEnv or a gymnasium.Env, built once; a
    ``TypeError`` at the call that says what was wrong (a factory that needs arguments, an AEC env, or
    something that is neither)."""
    import gymnasium as gym

    required = _required_parameters(factory)
    if required:
        raise TypeError(
            f"{owner} got the factory {name}, which needs arguments ({', '.join(required)}): pass an env instance, "
            "a registered id, or a zero-argument factory such as `lambda: simple_spread_v3.parallel_env()` "
            'or `lambda: gym.make("CartPole-v1")`'
        )
    env = factory()
    if is_aec_env(env):
        check_parallel_env(env)  # says how to convert it
    if isinstance(env, gym.Env) or is_parallel_env(env):
        return env
    raise TypeError(
        f"{owner}: the factory {name} returned {type(env).__name__}, not a gymnasium.Env or a PettingZoo "
        "ParallelEnv; it must take no arguments and return a new env each time "
        '(for example `lambda: simple_spread_v3.parallel_env()` or `lambda: gym.make("CartPole-v1")`)'
    )


def _reward(value: Any, agent: str, step: int, env: Any) -> float:
    """``value`` as the float reward of ``agent``; a clear error for a string, None or non-number."""
    said = f"{type(env).__name__}.step() at step {step} gave agent {agent!r} the reward {value!r}"
    if isinstance(value, str | bytes) or value is None:
        raise TypeError(f"{said}: a reward is a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{said}, which is not a number") from None


def _action_converter(space: spaces.Space) -> Any:
    """A slot's action row as what the agent's ``step`` takes: :func:`~workbench.envs.core.env_action_converter`'s
    (Box clipped, composite rows as the space's dict / tuple), a Discrete index shifted by the space's ``start``."""
    if isinstance(space, spaces.Discrete):
        return lambda a: int(a) + int(space.start)
    return env_action_converter(space)


def parallel_episode(
    agent: Agent,
    adapter: ParallelEnvAdapter,
    *,
    seed: int | None = None,
    deterministic: bool = True,
    max_steps: int | None = None,
    render: bool = False,
) -> Iterator[tuple[np.ndarray | None, float]]:
    """One team episode of the ParallelEnv behind ``adapter``, ``agent`` deciding for every agent: yields
    ``(frame, team reward)`` after the reset (reward 0) and after each step, ``frame`` being
    ``env.render()`` when ``render`` (else None). The one play loop of a ParallelEnv: ``agent.play`` and the
    notebook's play viewer both use it. ``adapter.returns`` holds each agent's return when it ends."""
    obs = adapter.reset(seed)
    yield (np.asarray(adapter.env.render()) if render else None), 0.0
    before = 0.0
    t = 0
    while True:
        step = agent.decide(obs, deterministic=deterministic, action_mask=adapter.masks)
        obs = adapter._step_no_reset(step.actions)
        t += 1
        total = float(adapter.returns.sum())
        yield (np.asarray(adapter.env.render()) if render else None), total - before
        before = total
        if adapter.finished or (max_steps is not None and t >= max_steps):
            return


def play_parallel(
    agent: Agent, env: Any, episodes: int, *, seed: int | None = None, render: bool = False, **options: Any
) -> tuple[list[float], list[int], list[list[np.ndarray]] | None, list[dict[str, float]]]:
    """Play ``episodes`` team episodes of the ParallelEnv ``env`` with ``agent`` deciding for every agent
    (``Agent.play`` on a ParallelEnv), episode ``i`` seeded ``seed + i``. Returns the team returns, the
    lengths, the frames (``render``: ``env.render()`` after the reset and after every step) and each agent's
    returns. ``options``: :func:`parallel_episode`'s (``deterministic``, ``max_steps``)."""
    check_agent_fits(agent, env)
    adapter = ParallelEnvAdapter(env, layout_for(agent, env))
    returns: list[float] = []
    lengths: list[int] = []
    per_agent: list[dict[str, float]] = []
    frames: list[list[np.ndarray]] | None = [] if render else None
    for episode in range(episodes):
        shots: list[np.ndarray] = []
        t = -1
        moments = parallel_episode(
            agent, adapter, seed=None if seed is None else seed + episode, render=render, **options
        )
        for frame, _reward in moments:
            t += 1
            if frame is not None:
                shots.append(frame)
        returns.append(float(adapter.returns.sum()))
        lengths.append(t)
        per_agent.append({a: float(adapter.returns[i]) for i, a in enumerate(adapter.agents)})
        if frames is not None:
            frames.append(shots)
    return returns, lengths, frames, per_agent
