"""Hindsight Experience Replay (Andrychowicz et al. 2017) for the off-policy agents.

``wb.HerReplay(strategy="future", n_sampled_goal=4)`` is what the user passes (``replay=``): a
JSON-ready description, saved with the agent's hyperparameters. The agent builds a :class:`HerMemory`
from it for its goal env: a replay memory that keeps *whole episodes* and relabels goals *when it
samples*, so nothing is stored twice and every stored transition can be replayed with another goal.

How a sampled transition is relabelled: with probability ``n_sampled_goal / (n_sampled_goal + 1)``
(SB3's ``her_ratio``) its ``desired_goal`` (in the observation and the next observation) becomes a goal
the same episode achieved: at a later step (``"future"``), at its last step (``"final"``) or anywhere
in it (``"episode"``); its reward is then ``compute_reward(next achieved_goal, new goal, {})``.

Episode ends follow the library's rule: a terminated transition stops the bootstrap (``dones`` 1), a
truncated one (a time limit) bootstraps from its final observation (``dones`` 0); a relabelled
transition keeps its ``dones``. Transitions wait per env until their episode ends (a goal from a later
step needs the episode), then the episode enters the ring; when it overwrites part of an older
episode the rest of that episode is dropped too, so every stored episode is whole.

Saving (``memory.npz``, no pickle) writes the stored episodes oldest first, then each env's episode in
progress as a shorter episode, with their lengths in ``episode_lengths``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from ..checkpoint import read_npz, write_npz
from ..envs.goals import goal_env_problem
from ..envs.masks import strip_mask_space
from ..loop import Transitions
from ..validation import ArgumentError
from .replay import ReplayBatch, ReplayMemory, check_saved_transitions

__all__ = ["STRATEGIES", "HerMemory", "HerReplay", "env_compute_reward", "replay_from_dict"]

STRATEGIES = ("future", "final", "episode")
"""Where a relabelled goal comes from: a later step of the episode, its last step, or any step."""

RewardFn = Callable[[np.ndarray, np.ndarray, Any], Any]


@dataclasses.dataclass
class HerReplay:
    """Hindsight Experience Replay as an off-policy agent's replay memory (``replay=``).

    Example::

        env = gym.make("BitFlipping-v0", n_bits=15)
        agent = wb.DQN(env, replay=wb.HerReplay(strategy="future", n_sampled_goal=4))

    For goal envs (Dict observations with ``observation``, ``achieved_goal`` and ``desired_goal``) with a
    batched ``compute_reward(achieved_goal, desired_goal, info)``; the env's own (``env.unwrapped``) is
    used unless ``compute_reward=`` is given. Works with DQN, QRDQN, C51, Rainbow, SAC, TD3 and DDPG.
    """

    strategy: str = "future"
    """Where relabelled goals come from: "future", "final" or "episode"."""
    n_sampled_goal: int = 4
    """Relabelled transitions per real one: a fraction ``k / (k + 1)`` of each minibatch is relabelled."""
    compute_reward: RewardFn | None = None
    """The reward of (achieved goals, desired goals, infos), batched; None: the env's. Not saved: a
    loaded agent takes it from the env its session trains on."""

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ArgumentError(
                f"HerReplay got strategy={self.strategy!r}: strategy must be one of "
                f"{', '.join(repr(s) for s in STRATEGIES)}. Leave it out for the default ('future')."
            )
        k = self.n_sampled_goal
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            raise ArgumentError(
                f"HerReplay got n_sampled_goal={k!r}: n_sampled_goal must be an integer >= 0 "
                "(0 relabels nothing). Leave it out for the default (4)."
            )
        if self.compute_reward is not None and not callable(self.compute_reward):
            raise ArgumentError(
                f"HerReplay got compute_reward={self.compute_reward!r}: pass a function "
                "compute_reward(achieved_goal, desired_goal, info), or None for the env's own"
            )

    @property
    def her_ratio(self) -> float:
        """The fraction of each minibatch that is relabelled: ``k / (k + 1)``."""
        return self.n_sampled_goal / (self.n_sampled_goal + 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the saved hyperparameters (``compute_reward`` is not saved)."""
        return {"type": "HerReplay", "strategy": self.strategy, "n_sampled_goal": int(self.n_sampled_goal)}


def replay_from_dict(data: dict[str, Any]) -> HerReplay:
    """Rebuild a :class:`HerReplay` from its ``to_dict()``; ``ValueError`` for anything else."""
    data = dict(data)
    kind = data.pop("type", None)
    if kind != "HerReplay":
        raise ValueError(f"unknown replay type {kind!r}; known: 'HerReplay'")
    unknown = sorted(set(data) - {"strategy", "n_sampled_goal"})
    if unknown:
        raise ValueError(f"HerReplay has no key {unknown[0]!r}; its keys: strategy, n_sampled_goal")
    return HerReplay(**data)


def env_compute_reward(source: Any) -> RewardFn | None:
    """The ``compute_reward`` of the env an :class:`~workbench.envs.core.EnvSource` describes (its
    instance, one env of a vector env, or one built from the id or factory: building does not step
    it), or None when it has none."""
    env = getattr(source, "instance", None)
    if env is None and getattr(source, "vector", None) is not None:
        envs = getattr(source.vector, "envs", None)
        env = envs[0] if envs else None
    if env is None and getattr(source, "can_copy", False):
        env = source.make()
    if env is None:
        return None
    for candidate in (getattr(env, "unwrapped", None), env):
        fn = getattr(candidate, "compute_reward", None)
        if callable(fn):
            return fn
    return None


class HerMemory(ReplayMemory):
    """The replay memory of :class:`HerReplay`: whole episodes, goals relabelled at sampling time.

    ``observation_space`` is the env's Dict space; observations arrive flattened (the agent's flat
    rows), and ``achieved_goal`` / ``desired_goal`` are found in them by the Dict's layout.
    :meth:`add_steps` takes one step of every env (with ``terminated`` and ``truncated``); ``add``
    (pre-filling) is refused. ``len()`` counts the transitions of stored episodes.
    """

    EPISODES = "episode_lengths"

    def __init__(
        self,
        spec: HerReplay,
        capacity: int,
        observation_space: spaces.Space,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | type = np.int64,
        *,
        obs_dtype: np.dtype | type = np.float32,
        compute_reward: RewardFn | None = None,
        gamma: float = 0.99,
        **_: Any,
    ) -> None:
        super().__init__(capacity, obs_shape, action_shape, action_dtype, obs_dtype=obs_dtype)
        space = strip_mask_space(observation_space)
        problem = goal_env_problem(space)
        if problem is not None:
            raise ValueError(f"HerReplay needs a goal env: {problem}")
        assert isinstance(space, spaces.Dict)
        self.spec = spec
        self.gamma = float(gamma)
        self.compute_reward = spec.compute_reward or compute_reward
        at = 0
        slices: dict[str, slice] = {}
        for key, sub in space.spaces.items():  # gymnasium's flatten concatenates the keys in this order
            width = int(spaces.flatdim(sub))
            slices[key] = slice(at, at + width)
            at += width
        self.achieved, self.desired = slices["achieved_goal"], slices["desired_goal"]
        self.goal_shape = tuple(space.spaces["desired_goal"].shape or ())
        self.episode_start = np.zeros(self.capacity, dtype=np.int64)  # ring index of each row's first step
        self.episode_length = np.zeros(self.capacity, dtype=np.int64)
        self.valid = np.zeros(self.capacity, dtype=bool)
        self.n_valid = 0
        self._open_episodes: list[list[tuple]] = []  # each env's episode so far: (obs, action, reward, next_obs, done)
        self._reward_checked = False  # compute_reward tried on the first stored step's goals

    def __len__(self) -> int:
        return self.n_valid

    # -- storing ----------------------------------------------------------------------------------

    def add(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """Refused: HER stores whole episodes through :meth:`add_steps`."""
        raise TypeError(
            "a HerReplay memory stores whole episodes as they are played (add_steps with terminated and "
            "truncated); it cannot be pre-filled with loose transitions (load_dataset): use the default replay"
        )

    def add_steps(self, steps: Transitions) -> None:
        """One step of every env (rows in env order; actions as the agent stores them); an episode that
        ends enters the memory whole. The first step's goals are given to ``compute_reward`` once, so a
        function that returns strings, NaN or the wrong shape is found when the first transition is
        stored, not by a later update."""
        obs, actions, rewards, next_obs, terminated, truncated, _ = steps
        n = len(rewards)
        if not self._reward_checked and self.compute_reward is not None and n:
            next_rows = np.asarray(next_obs)
            self._rewards(next_rows[:, self.achieved], next_rows[:, self.desired])
            self._reward_checked = True
        if len(self._open_episodes) != n:
            if any(self._open_episodes):
                raise ValueError(f"HerReplay got {n} envs' steps after {len(self._open_episodes)} envs' steps")
            self._open_episodes = [[] for _ in range(n)]
        for i in range(n):
            pending = self._open_episodes[i]
            if pending and not np.array_equal(pending[-1][3], obs[i]):
                # The envs were reset under it (a new runner): the episode so far ends where it was cut.
                self._store_episode(pending)
                pending = self._open_episodes[i] = []
            pending.append((obs[i], actions[i], float(rewards[i]), next_obs[i], float(bool(terminated[i]))))
            if terminated[i] or truncated[i]:
                self._store_episode(self._open_episodes[i])
                self._open_episodes[i] = []

    def _store_episode(self, steps: list[tuple]) -> None:
        o, a, r, no, d = zip(*steps)
        self._write(np.stack(o), np.stack(a), np.asarray(r, np.float32), np.stack(no), np.asarray(d, np.float32))

    def _write(
        self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray, dones: np.ndarray
    ) -> None:
        length = len(rewards)
        if length > self.capacity:
            raise ValueError(
                f"an episode of {length} steps does not fit a HerReplay memory of {self.capacity} transitions: "
                "raise buffer_size above the longest episode"
            )
        rows = (self.pos + np.arange(length)) % self.capacity
        hit = rows[self.valid[rows]]
        if hit.size:  # older episodes lose these rows: drop the whole of each, keeping episodes whole
            for start in np.unique(self.episode_start[hit]):
                old = (start + np.arange(self.episode_length[start])) % self.capacity
                self.n_valid -= int(self.valid[old].sum())
                self.valid[old] = False
        super().add(obs, actions, rewards, next_obs, dones, self.gamma)  # the rows above, pos and size moved on
        self.episode_start[rows] = rows[0]
        self.episode_length[rows] = length
        self.valid[rows] = True
        self.n_valid += length

    def clear_pending(self) -> None:
        """Forget every env's episode in progress (the envs were reset)."""
        self._open_episodes = []

    # -- sampling ---------------------------------------------------------------------------------

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform indices of stored transitions (rows of dropped episodes are drawn again)."""
        if self.n_valid == 0:
            raise ValueError("cannot sample from an empty HerReplay memory: no episode has ended yet")
        idx = rng.integers(0, self.size, size=batch_size)
        for _ in range(32):
            bad = ~self.valid[idx]
            if not bad.any():
                return idx
            idx[bad] = rng.integers(0, self.size, size=int(bad.sum()))
        good = np.flatnonzero(self.valid)  # a memory mostly of dropped rows: draw among the stored ones
        bad = ~self.valid[idx]
        idx[bad] = good[rng.integers(0, len(good), size=int(bad.sum()))]
        return idx

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        """A minibatch of ``batch_size`` transitions, a fraction ``her_ratio`` of them relabelled."""
        idx = self.sample_indices(batch_size, rng)
        obs, next_obs = self.obs[idx], self.next_obs[idx]  # fancy indexing: copies
        rewards = self.rewards[idx]
        her = np.flatnonzero(rng.random(batch_size) < self.spec.her_ratio)
        if her.size:
            rows = idx[her]
            goals = self.next_obs[self._goal_rows(rows, rng), self.achieved]
            obs[her, self.desired] = goals
            next_obs[her, self.desired] = goals
            rewards[her] = self._rewards(next_obs[her, self.achieved], goals)
        return self.on_device(
            ReplayBatch(
                torch.from_numpy(obs),
                torch.from_numpy(self.actions[idx]),
                torch.from_numpy(np.ascontiguousarray(rewards, dtype=np.float32)),
                torch.from_numpy(next_obs),
                torch.from_numpy(self.dones[idx]),
                torch.from_numpy(self.discounts[idx]),
                torch.ones(batch_size, dtype=torch.float32),
                idx,
            )
        )

    def _goal_rows(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """For each row, the row whose next achieved goal becomes its new goal (by the strategy)."""
        start, length = self.episode_start[rows], self.episode_length[rows]
        t = (rows - start) % self.capacity
        strategy = self.spec.strategy
        if strategy == "final":
            pick = length - 1
        elif strategy == "episode":
            pick = (rng.random(len(rows)) * length).astype(np.int64)
        else:  # "future": this step or a later one of the same episode
            pick = t + (rng.random(len(rows)) * (length - t)).astype(np.int64)
        return (start + np.minimum(pick, length - 1)) % self.capacity

    def _rewards(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        fn = self.compute_reward
        if fn is None:
            raise RuntimeError(
                "HerReplay needs the env's compute_reward(achieved_goal, desired_goal, info) to relabel, and has "
                "none: the agent was built from spaces alone (a loaded run). Train it in a session with the goal "
                "env (Session(agent, env) finds it), or pass HerReplay(compute_reward=...)"
            )
        n = len(achieved)
        shape = (n, *self.goal_shape)
        raw = np.asarray(fn(achieved.reshape(shape), desired.reshape(shape), [{} for _ in range(n)]))
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        if raw.dtype.kind not in "biuf":  # strings, objects, None: numpy would fail (or parse text) inside the update
            raise TypeError(
                f"compute_reward ({name}) returned {raw.dtype} values (first: {raw.reshape(-1)[:1].tolist()!r}) for "
                f"a batch of {n} goals: it must return one number per row (gymnasium-robotics' GoalEnv convention)"
            )
        out = raw.astype(np.float32)
        if out.shape != (n,):
            out = out.reshape(-1)
            if out.shape != (n,):
                raise ValueError(
                    f"compute_reward ({name}) returned shape {out.shape} for a batch of {n} goals: it must return one "
                    "reward per row (gymnasium-robotics' GoalEnv convention)"
                )
        if not np.isfinite(out).all():
            bad = out[~np.isfinite(out)][0]
            raise ValueError(
                f"compute_reward ({name}) returned {bad} for some of a batch of {n} goals: relabelled rewards must be "
                "finite numbers (a NaN or inf would spread through the value targets)"
            )
        return out

    # -- saving -----------------------------------------------------------------------------------

    def _stored_order(self) -> np.ndarray:
        """The rows of stored episodes, oldest episode first, each episode's steps in order."""
        if self.size < self.capacity:
            order = np.arange(self.size)
        else:
            order = (self.pos + np.arange(self.capacity)) % self.capacity
        order = order[self.valid[order]]
        if order.size:  # an episode that wraps around the ring's end starts at the oldest rows' tail
            first = self.episode_start[order[0]]
            if first != order[0]:
                cut = int(np.argmax(self.episode_start[order] != first))
                order = np.concatenate([order[cut:], order[:cut]]) if cut else order
        return order

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Stored episodes oldest first, then each env's episode in progress; ``episode_lengths`` says
        where each starts. At most ``capacity`` rows: the oldest episodes give way."""
        order = self._stored_order()
        lengths = _run_lengths(self.episode_start[order]) if order.size else []
        arrays = {
            "obs": self.obs[order],
            "actions": self.actions[order],
            "rewards": self.rewards[order],
            "next_obs": self.next_obs[order],
            "dones": self.dones[order],
            "discounts": self.discounts[order],
        }
        pending = [steps for steps in self._open_episodes if steps]
        if pending:
            parts = {k: [v] for k, v in arrays.items()}
            for steps in pending:
                o, a, r, no, d = zip(*steps)
                parts["obs"].append(np.stack(o).astype(self.obs_dtype))
                parts["actions"].append(np.stack(a).astype(self.actions.dtype))
                parts["rewards"].append(np.asarray(r, np.float32))
                parts["next_obs"].append(np.stack(no).astype(self.obs_dtype))
                parts["dones"].append(np.asarray(d, np.float32))
                parts["discounts"].append(np.full(len(r), self.gamma, np.float32))
                lengths = [*lengths, len(r)]
            arrays = {k: np.concatenate(v) for k, v in parts.items()}
        lengths = list(lengths)
        while sum(lengths) > self.capacity:  # the newest episodes are kept
            first = lengths.pop(0)
            arrays = {k: v[first:] for k, v in arrays.items()}
        arrays[self.EPISODES] = np.asarray(lengths, dtype=np.int64)
        return arrays

    def load_arrays(
        self, arrays: dict[str, np.ndarray], source: str = "memory", *, action_space: gym.Space | None = None
    ) -> None:
        """Replace the contents with ``arrays`` (as :meth:`state_arrays` writes them), after checking them
        all: shapes, values (``ValueError`` naming ``source``, the array and the first bad row) and the
        episode lengths (positive, adding up to the number of transitions)."""
        missing = [f for f in (*self.FIELDS, self.EPISODES) if f not in arrays]
        if missing:
            raise ValueError(
                f"{source}: missing arrays {', '.join(missing)}"
                + (" (a memory saved without HerReplay cannot be loaded into one)" if self.EPISODES in missing else "")
            )
        rows = {name: getattr(self, name).shape[1:] for name in self.FIELDS}
        n = check_saved_transitions(arrays, rows, source, action_space)
        lengths = arrays[self.EPISODES]
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or (lengths < 1).any() or int(lengths.sum()) != n:
            raise ValueError(
                f"{source}: array {self.EPISODES!r} must hold positive episode lengths adding up to the {max(n, 0)} "
                f"transitions (got {lengths.size} values summing to {int(lengths.sum()) if lengths.size else 0})"
            )
        self.pos = self.size = self.n_valid = 0
        self.valid[:] = False
        self._open_episodes = []
        at = 0
        for length in lengths.tolist():
            part = slice(at, at + length)
            at += length
            if length > self.capacity:
                continue
            self._write(
                arrays["obs"][part],
                arrays["actions"][part],
                arrays["rewards"][part],
                arrays["next_obs"][part],
                arrays["dones"][part],
            )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the memory to ``path`` (``.npz``, no pickle)."""
        write_npz(path, self.state_arrays())

    def load(self, path: str | os.PathLike[str]) -> HerMemory:
        """Replace the contents with those saved at ``path``; returns self."""
        self.load_arrays(read_npz(path), os.fspath(path))
        return self

    def file_budget(self) -> int:
        """The most bytes a saved memory of this one can take."""
        return super().file_budget() + 8 * self.capacity + 2**16


def _run_lengths(keys: np.ndarray) -> list[int]:
    """Lengths of the runs of equal consecutive values in ``keys``."""
    change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = np.concatenate([[0], change, [len(keys)]])
    return np.diff(bounds).astype(int).tolist()
