"""Uniform replay memory in preallocated numpy arrays, saveable without pickle."""

from __future__ import annotations

import os
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

from ..checkpoint import read_npz, write_npz

__all__ = ["ReplayBatch", "ReplayMemory", "check_transitions"]


class ReplayBatch(NamedTuple):
    """A sampled minibatch as torch tensors (``weights`` and ``indices`` matter for prioritized
    replay; uniform replay gives weights of one)."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    dones: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor
    indices: np.ndarray


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])


def check_transitions(
    arrays: dict[str, np.ndarray], fields: tuple[str, ...], source: str, action_space: gym.Space | None = None
) -> None:
    """Raise ``ValueError`` naming ``source``, the array and its first bad row when saved
    transitions hold what no run records: NaN or infinite numbers, ``dones`` other than 0 or 1,
    ``discounts`` outside [0, 1], or actions outside a discrete ``action_space``."""
    for name in fields:
        arr = arrays[name]
        if arr.dtype.kind == "f" and len(arr) and not np.isfinite(arr).all():
            raise ValueError(f"{source}: array {name!r} row {_first_bad(~np.isfinite(arr))} is NaN or infinite")
    dones, discounts = arrays["dones"], arrays["discounts"]
    if len(dones) and not np.isin(dones, (0, 1)).all():
        raise ValueError(f"{source}: array 'dones' row {_first_bad(~np.isin(dones, (0, 1)))} is not 0 or 1")
    outside = (discounts < 0) | (discounts > 1)
    if len(discounts) and outside.any():
        raise ValueError(f"{source}: array 'discounts' row {_first_bad(outside)} is outside [0, 1]")
    actions = arrays["actions"]
    if action_space is None or not len(actions):
        return
    if isinstance(action_space, gym.spaces.Discrete):
        # Stored as the index of the action (0 .. n-1), which the update uses to pick a Q-value.
        bad = (actions < 0) | (actions >= action_space.n)
        if actions.dtype.kind == "f":
            bad |= actions != np.round(actions)
        if bad.any():
            row = _first_bad(bad)
            action = actions.reshape(len(actions), -1)[row][0].item()
            raise ValueError(
                f"{source}: array 'actions' row {row} holds action {action!r}, "
                f"outside the action space {action_space}"
            )
    # Continuous actions are stored rescaled to [-1, 1] by the agent, so only their finiteness
    # (checked above) says anything about the space.


class ReplayMemory:
    """A ring buffer of transitions: ``obs, actions, rewards, next_obs, dones, discounts``.

    ``dones`` is 1 only when the episode *terminated* (a time-limit truncation still bootstraps).
    ``discounts`` is the factor applied to the bootstrapped value (``gamma ** n`` for n-step
    returns). ``save``/``load`` use ``.npz`` written with ``allow_pickle=False``.
    """

    FIELDS = ("obs", "actions", "rewards", "next_obs", "dones", "discounts")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | type = np.int64,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.obs_shape = tuple(obs_shape)
        self.action_shape = tuple(action_shape)
        self.obs = np.zeros((self.capacity, *self.obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((self.capacity, *self.obs_shape), dtype=np.float32)
        self.actions = np.zeros((self.capacity, *self.action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.dones = np.zeros(self.capacity, dtype=np.float32)
        self.discounts = np.zeros(self.capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        dones: np.ndarray,
        discounts: np.ndarray | float,
    ) -> np.ndarray:
        """Append a batch (leading axis = number of transitions); returns the slots written."""
        n = len(rewards)
        # A slice when the batch does not wrap around (the usual case): a view, no index array.
        end = self.pos + n
        idx = slice(self.pos, end) if end <= self.capacity else (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.next_obs[idx] = next_obs
        self.dones[idx] = dones
        self.discounts[idx] = discounts
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return np.arange(idx.start, idx.stop) if isinstance(idx, slice) else idx

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform indices into the filled part."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        return rng.integers(0, self.size, size=batch_size)

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        """A uniform minibatch of ``batch_size`` transitions."""
        idx = self.sample_indices(batch_size, rng)
        return self.gather(idx, np.ones(batch_size, dtype=np.float32))

    def gather(self, idx: np.ndarray, weights: np.ndarray) -> ReplayBatch:
        """The transitions at ``idx`` as tensors."""
        return ReplayBatch(
            torch.from_numpy(self.obs[idx]),
            torch.from_numpy(self.actions[idx]),
            torch.from_numpy(self.rewards[idx]),
            torch.from_numpy(self.next_obs[idx]),
            torch.from_numpy(self.dones[idx]),
            torch.from_numpy(self.discounts[idx]),
            torch.from_numpy(np.asarray(weights, dtype=np.float32)),
            idx,
        )

    # -- saving ---------------------------------------------------------------------------------

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The filled part as plain arrays, oldest first (what ``save`` writes)."""
        if self.size < self.capacity:
            order = np.arange(self.size)
        else:
            order = (self.pos + np.arange(self.capacity)) % self.capacity
        return {name: getattr(self, name)[order] for name in self.FIELDS}

    def load_arrays(
        self, arrays: dict[str, np.ndarray], source: str = "memory", *, action_space: gym.Space | None = None
    ) -> None:
        """Replace the contents with ``arrays`` (as written by :meth:`state_arrays`).

        Every array is checked before anything is replaced: shapes against this memory's, values
        for what a transition can hold (finite numbers, ``dones`` 0 or 1, ``discounts`` in [0, 1]) and,
        given ``action_space``, every action against it. A ``ValueError`` names ``source``, the array
        and the first bad row.
        """
        missing = [f for f in self.FIELDS if f not in arrays]
        if missing:
            raise ValueError(f"{source}: missing arrays {', '.join(missing)}")
        n = len(arrays["rewards"]) if np.ndim(arrays["rewards"]) else -1
        for name in self.FIELDS:
            arr = arrays[name]
            want = getattr(self, name)
            if arr.ndim == 0 or len(arr) != n or arr.shape[1:] != want.shape[1:]:
                raise ValueError(
                    f"{source}: array {name!r} has shape {arr.shape}, expected "
                    f"({max(n, 0)}, {', '.join(map(str, want.shape[1:]))}) for this agent's spaces"
                )
            if arr.dtype.kind not in "biuf":
                raise ValueError(f"{source}: array {name!r} has dtype {arr.dtype}, expected numbers")
        check_transitions(arrays, self.FIELDS, source, action_space)
        keep = min(n, self.capacity)  # a larger saved memory keeps its newest transitions
        for name in self.FIELDS:
            arr = getattr(self, name)
            arr[:keep] = arrays[name][n - keep :]
        self.size = keep
        self.pos = keep % self.capacity

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the memory to ``path`` (``.npz``, no pickle); atomic: a crash keeps the old file."""
        write_npz(path, self.state_arrays())

    def load(self, path: str | os.PathLike[str]) -> ReplayMemory:
        """Replace the contents with those saved at ``path``; returns self."""
        self.load_arrays(read_npz(path), os.fspath(path))
        return self
