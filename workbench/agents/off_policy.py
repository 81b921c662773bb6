"""What the agents that learn from a replay memory (DQN, DDPG, TD3, SAC) share, written once.

The training schedule: nothing is learned before ``learning_starts`` env steps; after that an update
runs every ``train_freq`` env steps and takes ``gradient_steps`` gradient steps (-1: as many as env
steps since the last update). And storing: transitions go to ``self.memory``, continuous actions
squashed to [-1, 1], with only a real termination stopping the bootstrap (a time limit does not).

Their hyperparameters in common are :class:`OffPolicyConfig`'s, written once (defaults:
Stable-Baselines3's SAC); each algorithm adds its own and sets its own defaults. Its ``_build``
creates ``self.memory`` and sets ``self._steps_since_update = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..envs.core import byte_columns
from ..envs.goals import goal_env_problem
from ..envs.masks import strip_mask_space
from ..memory.her import HerMemory, HerReplay, env_compute_reward
from ..schedules import Schedule
from ..validation import Constraint, checked, flag, integer, layer_widths, number, optional
from .base import Agent, AgentConfig, AgentState, Transitions

__all__ = ["OffPolicyAgent", "OffPolicyConfig"]


@dataclass
class OffPolicyConfig(AgentConfig):
    """Hyperparameters every replay-memory agent has (each algorithm sets its own defaults)."""

    learning_rate: float | Schedule = checked(3e-4, number(0, min_open=True, schedule=True), live=True)
    """Adam learning rate of every network; a number or a schedule of training progress."""
    buffer_size: int = checked(1_000_000, integer(min=1))
    """Replay memory capacity, in transitions."""
    learning_starts: int = checked(100, integer(min=0), live=True)
    """Env steps of random actions before learning begins."""
    batch_size: int = checked(256, integer(min=1), live=True)
    """Minibatch size."""
    tau: float = checked(0.005, number(0, 1, min_open=True), live=True)
    """Target network update rate: 1 copies the online networks, less blends them in (Polyak)."""
    gamma: float = checked(0.99, number(0, 1))
    """Discount factor."""
    train_freq: int = checked(1, integer(min=1), live=True)
    """Env steps between updates."""
    gradient_steps: int = checked(1, integer(min=1, also=(-1,)), live=True)
    """Gradient steps per update; -1 means as many as env steps since the last update."""
    net_arch: tuple[int, ...] = checked((256, 256), layer_widths())
    """Hidden layer widths of each network (the Q-network; the actor and each critic)."""
    n_envs: int = checked(1, integer(min=1))
    """Envs stepped together."""
    optimize_memory_usage: bool = checked(False, flag())
    """Store each observation once in the replay memory (the next observation is the following row's),
    as SB3's option: about half the memory for image observations."""
    replay: HerReplay | None = checked(
        None, optional(Constraint("a wb.HerReplay(...)", lambda v: isinstance(v, HerReplay)))
    )
    """The replay memory's kind: None for uniform replay, ``wb.HerReplay(...)`` for Hindsight Experience
    Replay on a goal env (``workbench.memory.her``)."""


class OffPolicyAgent(Agent):
    """Base of the replay-memory agents: storing transitions and the update schedule."""

    takes_dataset: ClassVar[bool] = True  # load_dataset pre-fills the replay memory
    _steps_since_update: int

    def _memory_options(self) -> dict:
        """The replay memory's observation options: dtype, optimize_memory_usage, rows per add, and the
        columns a Dict's frames take in its float32 rows (held as uint8; not for standardized observations)."""
        c = self.config
        columns = None if c.normalize_observations else byte_columns(self.observation_space)
        return {
            "obs_dtype": self.obs_dtype,
            "optimize_memory_usage": c.optimize_memory_usage,
            "stride": c.n_envs,
            "obs_byte_columns": columns,
        }

    def _build_plug_ins(self) -> None:
        super()._build_plug_ins()
        spec = self.config.replay
        if spec is not None:
            self._use_her(spec)

    def _use_her(self, spec: HerReplay) -> None:
        """Replace the memory ``_build`` made with a :class:`~workbench.memory.her.HerMemory` of the same
        capacity and action layout; refuse what HER cannot combine with, naming it."""
        c = self.config
        owner = f"{self.algorithm}(replay=HerReplay(...))"
        clashes = [
            (getattr(c, "prioritized", False), "prioritized=True"),
            (getattr(c, "n_step", 1) > 1, f"n_step={getattr(c, 'n_step', 1)}"),
            (c.optimize_memory_usage, "optimize_memory_usage=True"),
            (c.normalize_observations, "normalize_observations=True (goals are relabelled in the raw observations)"),
        ]
        for clash, name in clashes:
            if clash:
                raise ValueError(f"{owner} cannot be combined with {name}: leave it out, or use the default replay")
        problem = goal_env_problem(strip_mask_space(self.observation_space))
        if problem is not None:
            raise ValueError(
                f"{owner} needs a goal env (a Dict observation with 'observation', 'achieved_goal' and "
                f"'desired_goal', and compute_reward), but {problem}: drop replay= for this env"
            )
        fn = spec.compute_reward or getattr(self, "_compute_reward", None)
        if fn is None and self.env_source is not None:
            fn = env_compute_reward(self.env_source)
            if fn is None:
                raise ValueError(
                    f"{owner} relabels rewards with the env's compute_reward(achieved_goal, desired_goal, info), "
                    f"and the env {self.env_source.name} has none: add one to the env, or pass "
                    "HerReplay(compute_reward=...)"
                )
        self._compute_reward = fn
        old = self.memory
        self.memory = HerMemory(
            spec,
            c.buffer_size,
            self.observation_space,
            self.obs_shape,
            old.action_shape,
            old.actions.dtype,
            obs_dtype=self.obs_dtype,
            compute_reward=fn,
            gamma=c.gamma,
        )

    def bind_env(self, source: Any) -> None:
        """The session tells the agent which env it trains on (an ``EnvSource``): a HER memory without a
        ``compute_reward`` (an agent built from spaces, a loaded run) takes the env's."""
        memory = self.memory
        if isinstance(memory, HerMemory) and memory.compute_reward is None:
            fn = env_compute_reward(source)
            if fn is None:
                raise ValueError(
                    f"{self.algorithm} with HerReplay relabels rewards with the env's compute_reward, and the env "
                    f"{source.name} has none: add one, or build the agent with HerReplay(compute_reward=...)"
                )
            memory.compute_reward = self._compute_reward = fn

    def _observe(self, transitions: Transitions) -> None:
        t = transitions
        stored = t.actions if self.discrete else self._unscale_action(np.asarray(t.actions, dtype=np.float32))
        if isinstance(self.memory, HerMemory):  # whole episodes: it needs the truncations too
            self.memory.add_steps(t._replace(actions=stored))
        else:
            self.memory.add(t.obs, stored, t.rewards, t.next_obs, t.terminated.astype(np.float32), self.config.gamma)
        self._steps_since_update += len(t.rewards)

    @property
    def observes_unordered(self) -> bool:
        """One-step transitions go into the replay memory row by row; HER's whole episodes do not."""
        return not isinstance(self.memory, HerMemory)

    @property
    def observe_rows(self) -> int:
        """``train_freq`` steps (or one step of every env): an update's gradient steps follow as many env
        steps as in process, whatever the size of the batches clients send."""
        return max(self.num_envs, int(self.config.train_freq))

    def load_dataset(self, dataset: Any) -> None:
        """Pre-fill the replay memory with a :class:`~workbench.Dataset`'s transitions (one-step,
        terminations stop the bootstrap), then train online as usual: with ``learning_starts=0``
        learning starts at the first env step. Raises ``DatasetError`` when the spaces differ."""
        dataset.check_fits(self.obs_shape, self.action_space, self.algorithm)
        obs, next_obs = dataset.observations, dataset.next_observations
        if self.config.normalize_observations:
            self.obs_normalizer.update(obs)
            obs, next_obs = self.obs_normalizer(obs), self.obs_normalizer(next_obs)
        actions = dataset.actions if self.discrete else self._unscale_action(dataset.actions)
        dones = dataset.terminated.astype(np.float32)
        self.memory.add(obs, actions, dataset.rewards, next_obs, dones, self.config.gamma)

    def reseed(self, seed: int) -> None:
        """Reseed (and rebuild the networks of an agent that has not learned yet, as every agent
        does) keeping the replay memory a dataset pre-filled: a seeded session starts from it."""
        memory = self.memory
        super().reseed(seed)
        if len(memory):
            self.memory = memory
            memory.device = self.device

    def ready(self) -> bool:
        c = self.config
        return (
            self.num_timesteps >= c.learning_starts
            and self._steps_since_update >= c.train_freq
            and len(self.memory) > 0
        )

    def _gradient_steps_due(self) -> int:
        """How many gradient steps this update takes; starts counting toward the next update."""
        c = self.config
        steps = max(1, c.gradient_steps if c.gradient_steps > 0 else self._steps_since_update)
        self._steps_since_update = 0
        return steps

    def state(self) -> AgentState:
        state = super().state()
        state.data["agent_state"]["steps_since_update"] = self._steps_since_update
        return state

    def restore(self, state: AgentState) -> None:
        super().restore(state)
        self._steps_since_update = int(state.data.get("agent_state", {}).get("steps_since_update", 0))
