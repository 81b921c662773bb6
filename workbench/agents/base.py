"""The agent interface every algorithm speaks, and what all agents share.

One loop (``Session``) drives every agent through four verbs:

* ``act(obs, deterministic=False) -> actions`` for one observation or a batch;
* ``observe(transitions)`` with a :class:`Transitions` batch, one row per env;
* ``ready() -> bool``: is there enough new data to learn?
* ``update() -> dict[str, float]``: learn, and return metrics that become signals.

This module also holds what every agent needs around those verbs: building from an env or its
spaces, checking the spaces, hyperparameters as a dataclass with clear errors, private random
generators (no global seeding), the training-progress clock for schedules, and ``play``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..envs import as_env_source, describe_space, flat_observation_space, observation_flattener
from ..normalization import ObservationNormalizer, RewardNormalizer

__all__ = ["AGENTS", "Agent", "AgentConfig", "EpisodeReturns", "Transitions", "register"]

AGENTS: dict[str, type[Agent]] = {}
"""Every agent class by its lower-case name (``"dqn"``, ``"ppo"``...), filled by :func:`register`."""


@dataclasses.dataclass
class AgentConfig:
    """Hyperparameters every agent has; each agent's ``Config`` dataclass extends this one."""

    normalize_observations: bool = False
    """Feed the networks observations standardized by running mean/std (saved, frozen in play)."""
    normalize_rewards: bool = False
    """Scale rewards by the running std of the discounted return (SB3 VecNormalize)."""


def register(cls: type[Agent]) -> type[Agent]:
    """Class decorator adding an agent to :data:`AGENTS` (used by the CLI, presets and tests).

    A ``Config`` that does not extend :class:`AgentConfig` gets its fields added here, so every
    registered agent takes ``normalize_observations=`` and ``normalize_rewards=``.
    """
    if not issubclass(cls.Config, AgentConfig):
        cls.Config = dataclasses.make_dataclass(
            cls.Config.__name__, [], bases=(cls.Config, AgentConfig), namespace={"__doc__": cls.Config.__doc__}
        )
    AGENTS[cls.__name__.lower()] = cls
    return cls


class Transitions(NamedTuple):
    """One env step of every env, as arrays with a leading ``num_envs`` axis.

    ``next_obs`` holds the true last observation for envs whose episode just ended (the env has
    already been reset; the session passes the new episode's first observation to the next ``act``).
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class EpisodeReturns(list):
    """The list of episode returns from :meth:`Agent.play`, with ``lengths`` and (when rendered)
    ``frames``: one list of RGB arrays per episode."""

    def __init__(self, returns: list[float], lengths: list[int], frames: list[list[np.ndarray]] | None):
        super().__init__(returns)
        self.lengths = lengths
        self.frames = frames


def _agents_for(action_space: spaces.Space) -> list[str]:
    return sorted(
        cls.__name__ for cls in AGENTS.values() if isinstance(action_space, cls.action_spaces)
    )


class Agent:
    """Base class of every algorithm. Subclasses set ``Config``, ``action_spaces`` and implement
    ``_build``, ``_act``, ``observe``, ``ready`` and ``update``.

    Build one from an env (instance, registered id or zero-argument factory) or from its spaces,
    with keyword hyperparameters that override the ``Config`` defaults::

        agent = wb.PPO("CartPole-v1", n_steps=64)
        agent = wb.DQN(observation_space=obs_space, action_space=act_space, seed=1)

    The env is only inspected for its spaces: nothing is reset or stepped here.
    """

    Config: ClassVar[type]
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Box)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Each algorithm writes its own observe(); wrap it so observation and reward normalization
        # happen here once, for every agent, before the algorithm sees the transitions.
        observe = cls.__dict__.get("observe")
        if observe is not None and not getattr(observe, "_normalizes", False):

            @functools.wraps(observe)
            def normalized_observe(self: Agent, transitions: Transitions) -> None:
                if self._in_observe:  # a subclass calling super().observe(): already normalized
                    return observe(self, transitions)
                self._in_observe = True
                try:
                    return observe(self, self._normalize_transitions(transitions))
                finally:
                    self._in_observe = False

            normalized_observe._normalizes = True  # type: ignore[attr-defined]
            cls.observe = normalized_observe  # type: ignore[method-assign]

    def __init__(
        self,
        env: Any = None,
        *,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        seed: int | None = None,
        **hyperparameters: Any,
    ) -> None:
        self.env_source = None
        if env is not None:
            self.env_source = as_env_source(env)
            observation_space, action_space = self.env_source.spaces()
        if observation_space is None or action_space is None:
            raise TypeError(
                f"{type(self).__name__} needs an env (instance, registered id or factory) or both "
                "observation_space= and action_space="
            )
        self._check_action_space(action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.flat_observation_space = flat_observation_space(observation_space)
        self.obs_shape: tuple[int, ...] = self.flat_observation_space.shape
        self._flatten = observation_flattener(observation_space)
        self.discrete = isinstance(action_space, spaces.Discrete)
        if not self.discrete:
            self.action_low = action_space.low.astype(np.float32)
            self.action_high = action_space.high.astype(np.float32)
        self.config = self._make_config(hyperparameters)
        self._in_observe = False
        # Running statistics are nn.Modules, so they are saved and loaded with the networks.
        if self.config.normalize_observations:
            self.obs_normalizer = ObservationNormalizer(self.obs_shape)
        if self.config.normalize_rewards:
            self.reward_normalizer = RewardNormalizer(float(getattr(self.config, "gamma", 0.99)))
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(
            int(seed) if seed is not None else int(self.rng.integers(2**62))
        )
        self.num_timesteps = 0  # env steps observed while training, over all envs
        self.num_updates = 0
        self.total_timesteps: int | None = None  # the budget schedules count against
        self.training = True
        self._weights_loaded = False  # set by checkpoint loading; keeps reseed() from rebuilding
        # Build networks under a private seed without disturbing torch's global generator,
        # so a second run in the same kernel is not affected by this one.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.generator.initial_seed()))
            self._build()

    def reseed(self, seed: int) -> None:
        """Reseed the agent's random generators; an agent that has not learned or loaded anything
        yet also rebuilds its networks under ``seed``, so a seeded session is reproducible."""
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        if self.num_timesteps == 0 and self.num_updates == 0 and not self._weights_loaded:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                self._build()

    # -- construction helpers -----------------------------------------------------------------

    @classmethod
    def _check_action_space(cls, action_space: spaces.Space) -> None:
        if not isinstance(action_space, cls.action_spaces):
            fitting = _agents_for(action_space)
            which = ", ".join(fitting) if fitting else "none of the built-in agents"
            kinds = " or ".join(t.__name__ for t in cls.action_spaces)
            raise ValueError(
                f"{cls.__name__} cannot act in the action space {describe_space(action_space)}: "
                f"it needs a {kinds} action space. Agents that fit this space: {which}."
            )

    def _make_config(self, hyperparameters: dict[str, Any]) -> Any:
        names = [f.name for f in dataclasses.fields(self.Config)]
        unknown = [k for k in hyperparameters if k not in names]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(key, names, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise TypeError(
                f"{type(self).__name__} got an unknown hyperparameter {key!r}.{hint} "
                f"Known: {', '.join(names)}."
            )
        return self.Config(**hyperparameters)

    def _build(self) -> None:
        """Create networks, optimizers and storage (called under the agent's private seed)."""
        raise NotImplementedError

    @property
    def algorithm(self) -> str:
        """The algorithm's name, e.g. ``"PPO"``."""
        return type(self).__name__

    @property
    def networks(self) -> dict[str, nn.Module]:
        """The agent's torch modules by name (saved in checkpoints)."""
        return {k: v for k, v in vars(self).items() if isinstance(v, nn.Module)}

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The agent's optimizers by name (saved in checkpoints)."""
        return {k: v for k, v in vars(self).items() if isinstance(v, torch.optim.Optimizer)}

    @property
    def progress(self) -> float:
        """Fraction of the training budget done, for schedules (0 before any budget is set)."""
        if not self.total_timesteps:
            return 0.0
        return min(self.num_timesteps / self.total_timesteps, 1.0)

    @property
    def num_envs(self) -> int:
        """How many envs the agent would like to train on (the session may use fewer)."""
        return int(getattr(self.config, "n_envs", 1))

    # -- the four verbs -----------------------------------------------------------------------

    def prepare_obs(self, obs: Any) -> tuple[np.ndarray, bool]:
        """Observations as a float32 batch, and whether a single observation was given."""
        if isinstance(obs, dict | tuple) and not isinstance(self.observation_space, spaces.Box):
            return self._flatten(obs)[None], True
        arr = np.asarray(obs, dtype=np.float32)
        if arr.shape == self.obs_shape:
            return arr[None], True
        if arr.shape[1:] != self.obs_shape:
            raise ValueError(
                f"observation of shape {arr.shape} does not fit the observation space "
                f"{describe_space(self.flat_observation_space)}: pass one observation of shape "
                f"{self.obs_shape} or a batch of shape (n, {', '.join(map(str, self.obs_shape))})"
            )
        return arr, False

    def act(self, obs: Any, deterministic: bool = False) -> Any:
        """Actions for one observation or a batch. ``deterministic`` (always so in play mode)
        takes the greedy / mean action with no exploration."""
        batch, single = self.prepare_obs(obs)
        if self.config.normalize_observations:
            batch = self.obs_normalizer(batch)
        actions = self._act(batch, deterministic or not self.training)
        return actions[0] if single else actions

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def _normalize_transitions(self, t: Transitions) -> Transitions:
        """The transitions as the algorithm should see them: observations standardized with the
        statistics ``act`` used, rewards scaled; the statistics then learn from this step."""
        c = self.config
        if not (c.normalize_observations or c.normalize_rewards):
            return t
        obs, rewards, next_obs = t.obs, t.rewards, t.next_obs
        if c.normalize_observations:
            norm = self.obs_normalizer
            obs, next_obs = norm(np.asarray(obs, dtype=np.float32)), norm(np.asarray(next_obs, dtype=np.float32))
            if self.training:
                norm.update(t.next_obs)
        if c.normalize_rewards:
            rewards = self.reward_normalizer(t.rewards, t.terminated | t.truncated, update=self.training)
        return Transitions(obs, t.actions, rewards, next_obs, t.terminated, t.truncated)

    def observe(self, transitions: Transitions) -> None:
        """Take one step of every env into memory."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True when enough new data has arrived for :meth:`update`."""
        raise NotImplementedError

    def update(self) -> dict[str, float]:
        """Learn from memory; return metrics (they become the session's signals)."""
        raise NotImplementedError

    def begin_episode(self, done: np.ndarray) -> None:
        """Called by the loop with the mask of envs whose episode just ended."""

    # -- modes --------------------------------------------------------------------------------

    def eval(self) -> Agent:
        """Play mode: deterministic actions, no exploration, no learning, networks in eval mode."""
        self.training = False
        for net in self.networks.values():
            net.eval()
        return self

    def train(self) -> Agent:
        """Training mode (the default for a new agent)."""
        self.training = True
        for net in self.networks.values():
            net.train()
        return self

    def extra_state(self) -> dict[str, Any]:
        """JSON-ready state beyond weights (exploration position, ...), saved in checkpoints."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""

    def hyperparameters(self) -> dict[str, Any]:
        """The config as JSON-ready data (schedules and exploration objects as dicts)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self.config):
            v = getattr(self.config, f.name)
            out[f.name] = v.to_dict() if hasattr(v, "to_dict") else (list(v) if isinstance(v, tuple) else v)
        return out

    def save(self, path: str, *, memory: bool = False, overwrite: bool = False) -> str:
        """Save this agent alone (weights, optimizer, counters; replay memory with ``memory=True``)
        in the format ``wb.load`` reads. ``session.save`` also keeps the run's signals. An existing
        ``path`` is replaced only when it is a checkpoint, unless ``overwrite=True``."""
        from ..checkpoint import save_agent

        return save_agent(self, path, memory=memory, overwrite=overwrite)

    # -- play ---------------------------------------------------------------------------------

    def check_spaces(self, env: gym.Env) -> None:
        """Raise ``ValueError`` naming the space that differs between ``env`` and this agent."""
        for label, mine, theirs in (
            ("observation", self.observation_space, env.observation_space),
            ("action", self.action_space, env.action_space),
        ):
            if mine != theirs:
                raise ValueError(
                    f"the env's {label} space {describe_space(theirs)} differs from the agent's "
                    f"{describe_space(mine)}: play it on the env it was trained on"
                )

    def play(
        self,
        env: Any,
        episodes: int = 1,
        *,
        render: str | None = None,
        deterministic: bool = True,
        seed: int | None = None,
        max_steps: int | None = None,
        viewer: bool = False,
    ) -> Any:
        """Play ``episodes`` episodes and return their returns (an :class:`EpisodeReturns` list).

        ``env`` is an instance, id or factory. With ``render="rgb_array"`` it returns
        ``(returns, frames)``: ``frames[i]`` is the list of RGB arrays of episode ``i``, one per
        step plus the first (an id is made with that render mode; an instance must have it).
        ``viewer=True`` shows the frames in a notebook widget and returns the viewer. Nothing
        is learned and no exploration is added.
        """
        if episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {episodes}")
        if render not in (None, "rgb_array"):
            raise ValueError(f"render must be None or 'rgb_array', got {render!r}")
        if viewer:
            from ..ui import PlayViewer

            return PlayViewer(self, env, episodes=episodes, seed=seed)
        source = as_env_source(env)
        if source.instance is not None:
            instance, owned = source.instance, False
            if render and instance.render_mode != render:
                raise ValueError(
                    f"render={render!r} needs an env made with render_mode={render!r}, "
                    f"this one has render_mode={instance.render_mode!r}"
                )
        else:
            instance = source.make(render_mode=render) if source.env_id else source.make()
            owned = True
        self.check_spaces(instance)
        was_training = self.training
        self.training = False
        returns: list[float] = []
        lengths: list[int] = []
        frames: list[list[np.ndarray]] | None = [] if render else None
        try:
            for episode in range(episodes):
                obs, _ = instance.reset(seed=None if seed is None else seed + episode)
                total, length, done = 0.0, 0, False
                episode_frames: list[np.ndarray] = []
                if frames is not None:
                    episode_frames.append(np.asarray(instance.render()))
                while not done:
                    action = self._env_action(self.act(obs, deterministic=deterministic))
                    obs, reward, terminated, truncated, _ = instance.step(action)
                    total += float(reward)
                    length += 1
                    done = terminated or truncated or (max_steps is not None and length >= max_steps)
                    if frames is not None:
                        episode_frames.append(np.asarray(instance.render()))
                returns.append(total)
                lengths.append(length)
                if frames is not None:
                    frames.append(episode_frames)
        finally:
            self.training = was_training
            if owned:
                instance.close()
        result = EpisodeReturns(returns, lengths, frames)
        if frames is not None:
            return result, frames
        return result

    def _require_bounded_actions(self) -> None:
        """For agents whose policy ends in tanh: the Box must have finite bounds to scale into."""
        if not (np.all(np.isfinite(self.action_low)) and np.all(np.isfinite(self.action_high))):
            raise ValueError(
                f"{self.algorithm} scales its tanh-squashed actions into the action space's bounds, but "
                f"{describe_space(self.action_space)} has infinite bounds (low={self.action_space.low}, "
                f"high={self.action_space.high}): wrap the env so its actions are bounded, or use PPO or A2C"
            )
        self._action_center = (self.action_high + self.action_low) / 2.0
        self._action_half_range = (self.action_high - self.action_low) / 2.0

    def _scale_action(self, squashed: np.ndarray) -> np.ndarray:
        """An action in [-1, 1] mapped onto the action space's bounds."""
        return (self._action_center + squashed * self._action_half_range).astype(np.float32)

    def _unscale_action(self, action: np.ndarray) -> np.ndarray:
        """An env action mapped back into [-1, 1] (what replay agents store)."""
        return np.clip((action - self._action_center) / self._action_half_range, -1.0, 1.0).astype(np.float32)

    def _env_action(self, action: Any) -> Any:
        if self.discrete:
            return int(action)
        return np.clip(np.asarray(action, dtype=np.float32), self.action_low, self.action_high)

    def __repr__(self) -> str:
        mode = "training" if self.training else "play"
        return (
            f"{self.algorithm}(obs={describe_space(self.observation_space)}, "
            f"action={describe_space(self.action_space)}, steps={self.num_timesteps}, {mode})"
        )

