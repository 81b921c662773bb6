"""Uniform replay memory in preallocated numpy arrays, saveable without pickle."""

from __future__ import annotations

import os
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

from ..checkpoint import read_npz, write_npz
from ..devices import to_device
from ..envs.columns import ColumnStore, join_columns, split_columns

__all__ = ["ReplayBatch", "ReplayMemory", "check_saved_transitions", "check_transitions"]


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
    next_masks: torch.Tensor | None = None
    """The next states' action masks (bool, ``(batch, n_actions)``) when the env gives masks."""


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
                f"{source}: array 'actions' row {row} holds action {action!r}, outside the action space {action_space}"
            )
    # Continuous actions are stored rescaled to [-1, 1] by the agent, so only their finiteness
    # (checked above) says anything about the space.


def check_saved_transitions(
    arrays: dict[str, np.ndarray],
    rows: dict[str, tuple[int, ...]],
    source: str,
    action_space: gym.Space | None = None,
) -> int:
    """Check saved transitions before a memory loads them: each array named in ``rows`` holds numbers, one
    row per transition, each row of the shape ``rows`` gives (this memory's), and what
    :func:`check_transitions` checks. Returns the number of transitions (-1 when ``rewards`` is a scalar,
    already refused). A ``ValueError`` names ``source``, the array and what is wrong."""
    n = len(arrays["rewards"]) if np.ndim(arrays["rewards"]) else -1
    for name, row in rows.items():
        arr = arrays[name]
        if arr.ndim == 0 or len(arr) != n or arr.shape[1:] != row:
            raise ValueError(
                f"{source}: array {name!r} has shape {arr.shape}, expected "
                f"({max(n, 0)}, {', '.join(map(str, row))}) for this agent's spaces"
            )
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"{source}: array {name!r} has dtype {arr.dtype}, expected numbers")
    check_transitions(arrays, tuple(rows), source, action_space)
    return n


class ReplayMemory:
    """A ring buffer of transitions: ``obs, actions, rewards, next_obs, dones, discounts``.

    ``dones`` is 1 only when the episode *terminated* (a time-limit truncation still bootstraps).
    ``discounts`` is the factor applied to the bootstrapped value (``gamma ** n`` for n-step
    returns). ``save``/``load`` use ``.npz`` written with ``allow_pickle=False``.

    With action masks (``workbench.envs.masks``), ``next_masks`` holds each next state's mask (bool,
    allocated at the first ``add`` that brings masks), saved as the array ``next_action_masks``.

    Observations keep ``obs_dtype`` (uint8 frames stay 1 byte a pixel, in memory and in the file).
    With ``obs_byte_columns`` (``workbench.envs.core.byte_columns``: a Dict of an image and a float
    vector, float32 rows) those columns are held and saved as uint8, the rest as float32
    (:class:`~workbench.envs.columns.ColumnStore`); sampled batches are float32 rows as before.
    With ``optimize_memory_usage=True`` (Stable-Baselines3's option) next observations are not stored
    twice: rows arrive ``stride`` at a time (one per env, each add the envs' next step), so the next
    observation of row ``i`` is the observation of row ``i + stride``; where it is not (an episode
    ended: the final observation differs from the next episode's first) it is kept on the side, and
    the newest rows' next observations are held until the next add. Saved files are the same either way.
    """

    MASKS = "next_action_masks"

    FIELDS = ("obs", "actions", "rewards", "next_obs", "dones", "discounts")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | type = np.int64,
        *,
        obs_dtype: np.dtype | type = np.float32,
        optimize_memory_usage: bool = False,
        stride: int = 1,
        obs_byte_columns: np.ndarray | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.obs_shape = tuple(obs_shape)
        self.action_shape = tuple(action_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.stride = int(stride)
        self.obs_byte_columns = None
        if obs_byte_columns is not None and len(self.obs_shape) == 1 and self.obs_dtype == np.float32:
            self.obs_byte_columns = np.asarray(obs_byte_columns, dtype=np.int64)
        self.obs = self._obs_rows()
        if self.optimize_memory_usage:
            if self.capacity < 2 * self.stride:
                raise ValueError(
                    f"optimize_memory_usage needs a replay capacity of at least 2 x {self.stride} envs, got {capacity}"
                )
            self._pending: np.ndarray | None = None  # next observations of the newest rows
            self._finals: dict[int, np.ndarray] = {}  # next observations that are not the following row's
            self._has_final = np.zeros(self.capacity, dtype=bool)
        else:
            self.next_obs = self._obs_rows()
        self.actions = np.zeros((self.capacity, *self.action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.dones = np.zeros(self.capacity, dtype=np.float32)
        self.discounts = np.zeros(self.capacity, dtype=np.float32)
        self.next_masks: np.ndarray | None = None
        self.pos = 0
        self.size = 0
        self.device = torch.device("cpu")
        """Where sampled minibatches go (the agent's device); the memory itself stays in host RAM."""

    def __len__(self) -> int:
        return self.size

    def _obs_rows(self) -> np.ndarray | ColumnStore:
        """Storage for ``capacity`` observations: an array of ``obs_dtype``, or with byte columns a
        :class:`ColumnStore` (a Dict's frame columns as uint8 beside its float32 ones)."""
        if self.obs_byte_columns is not None:
            return ColumnStore(self.capacity, self.obs_shape[0], self.obs_byte_columns)
        return np.zeros((self.capacity, *self.obs_shape), dtype=self.obs_dtype)

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        dones: np.ndarray,
        discounts: np.ndarray | float,
        next_masks: np.ndarray | None = None,
    ) -> np.ndarray:
        """Append a batch (leading axis = number of transitions); returns the slots written.
        ``next_masks``: the next states' action masks, when the env gives masks."""
        n = len(rewards)
        # A slice when the batch does not wrap around (the usual case): a view, no index array.
        # optimize_memory_usage finds the previous rows from an index array.
        end = self.pos + n
        if end <= self.capacity and not self.optimize_memory_usage:
            idx: slice | np.ndarray = slice(self.pos, end)
        else:
            idx = (self.pos + np.arange(n)) % self.capacity
        if self.optimize_memory_usage:
            assert isinstance(idx, np.ndarray)
            self._add_obs(idx, obs, next_obs)
        else:
            self.obs[idx] = obs
            self.next_obs[idx] = next_obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.dones[idx] = dones
        self.discounts[idx] = discounts
        if next_masks is not None:
            if self.next_masks is None:
                self.next_masks = np.ones((self.capacity, np.shape(next_masks)[-1]), dtype=bool)
            self.next_masks[idx] = next_masks
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return np.arange(idx.start, idx.stop) if isinstance(idx, slice) else idx

    def _add_obs(self, idx: np.ndarray, obs: np.ndarray, next_obs: np.ndarray) -> None:
        n = len(idx)
        if n != self.stride:
            if self.size:
                raise ValueError(
                    f"a memory with optimize_memory_usage takes {self.stride} rows an add (one per env), got {n}"
                )
            self.stride = n
        for i in idx[self._has_final[idx]]:  # rows about to be overwritten
            del self._finals[int(i)]
        self._has_final[idx] = False
        obs = np.asarray(obs, dtype=self.obs_dtype)
        if self._pending is not None and self.size:
            prev = (idx - n) % self.capacity
            for j in range(n):
                if not np.array_equal(self._pending[j], obs[j]):  # an episode ended: keep its final obs
                    self._finals[int(prev[j])] = self._pending[j].copy()
                    self._has_final[prev[j]] = True
        self.obs[idx] = obs
        self._pending = np.array(next_obs, dtype=self.obs_dtype)

    def _next_obs(self, idx: np.ndarray) -> np.ndarray:
        """The next observations of rows ``idx`` (optimize_memory_usage: rebuilt, see the class)."""
        if not self.optimize_memory_usage:
            return self.next_obs[idx]
        n = self.stride
        out = self.obs[(idx + n) % self.capacity]
        newest = (self.pos - 1 - idx) % self.capacity < n
        if newest.any() and self._pending is not None:
            out[newest] = self._pending[(idx[newest] - self.pos + n) % self.capacity]
        for j in np.flatnonzero(self._has_final[idx]):
            out[j] = self._finals[int(idx[j])]
        return out

    def nbytes(self) -> int:
        """Bytes this memory holds (its arrays, and the side store of optimize_memory_usage)."""
        total = sum(a.nbytes for a in (self.obs, self.actions, self.rewards, self.dones, self.discounts))
        if self.optimize_memory_usage:
            total += sum(a.nbytes for a in self._finals.values()) + self._has_final.nbytes
            total += 0 if self._pending is None else self._pending.nbytes
        else:
            total += self.next_obs.nbytes
        return int(total)

    def file_budget(self) -> int:
        """The most bytes a saved memory of this one can take (for reading it back)."""
        per_row = sum(getattr(self, f)[:1].nbytes for f in self.FIELDS if f != "next_obs") + self.obs[:1].nbytes
        return per_row * self.capacity + 2**16 * len(self.FIELDS)

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
        """The transitions at ``idx`` as tensors on :attr:`device` (moved through pinned memory with
        ``non_blocking`` to a GPU; the rows are gathered on the host either way)."""
        batch = ReplayBatch(
            torch.from_numpy(self.obs[idx]),
            torch.from_numpy(self.actions[idx]),
            torch.from_numpy(self.rewards[idx]),
            torch.from_numpy(self._next_obs(idx)),
            torch.from_numpy(self.dones[idx]),
            torch.from_numpy(self.discounts[idx]),
            torch.from_numpy(np.asarray(weights, dtype=np.float32)),
            idx,
            None if self.next_masks is None else torch.from_numpy(self.next_masks[idx]),
        )
        return self.on_device(batch)

    def on_device(self, batch: ReplayBatch) -> ReplayBatch:
        """``batch`` (host tensors) with its tensors on :attr:`device` (unchanged on the CPU)."""
        if self.device.type == "cpu":
            return batch
        device = self.device
        return ReplayBatch(
            *(  # type: ignore[arg-type]  # the same fields, moved
                to_device(t, device) if isinstance(t, torch.Tensor) else t for t in batch
            )
        )

    # -- saving ---------------------------------------------------------------------------------

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The filled part as plain arrays, oldest first (what ``save`` writes)."""
        if self.size < self.capacity:
            order = np.arange(self.size)
        else:
            order = (self.pos + np.arange(self.capacity)) % self.capacity
        arrays = {
            name: self._next_obs(order) if name == "next_obs" else getattr(self, name)[order] for name in self.FIELDS
        }
        if self.next_masks is not None:
            arrays[self.MASKS] = self.next_masks[order]
        if self.optimize_memory_usage:  # how many rows an add held, for a memory that loads this one
            arrays["obs_stride"] = np.array([self.stride], dtype=np.int64)
        # A Dict's frame columns are written as uint8 beside its float32 ones (memory.npz keeps each dtype).
        for name in ("obs", "next_obs"):
            arrays = split_columns(arrays, name, self.obs_byte_columns)
        return arrays

    def load_arrays(
        self, arrays: dict[str, np.ndarray], source: str = "memory", *, action_space: gym.Space | None = None
    ) -> None:
        """Replace the contents with ``arrays`` (as written by :meth:`state_arrays`).

        Every array is checked before anything is replaced: shapes against this memory's, values
        for what a transition can hold (finite numbers, ``dones`` 0 or 1, ``discounts`` in [0, 1]) and,
        given ``action_space``, every action against it. A ``ValueError`` names ``source``, the array
        and the first bad row. Observations saved by columns (``obs_uint8``, ``obs_float32``,
        ``obs_byte_columns``; see :meth:`state_arrays`) and as one array (older files) both load.
        """
        for name in ("obs", "next_obs"):
            arrays = join_columns(arrays, name, source)
        missing = [f for f in self.FIELDS if f not in arrays]
        if missing:
            raise ValueError(f"{source}: missing arrays {', '.join(missing)}")
        rows = {name: (self.obs if name == "next_obs" else getattr(self, name)).shape[1:] for name in self.FIELDS}
        n = check_saved_transitions(arrays, rows, source, action_space)
        masks = arrays.get(self.MASKS)
        if masks is not None and (masks.dtype != bool or masks.ndim != 2 or len(masks) != n):
            raise ValueError(
                f"{source}: array {self.MASKS!r} has shape {masks.shape} and dtype {masks.dtype}, "
                f"expected bool of shape ({max(n, 0)}, n_actions)"
            )
        keep = min(n, self.capacity)  # a larger saved memory keeps its newest transitions
        for name in self.FIELDS:
            if name == "next_obs" and self.optimize_memory_usage:
                continue
            arr = getattr(self, name)
            arr[:keep] = arrays[name][n - keep :]
        self.next_masks = None
        if masks is not None:
            self.next_masks = np.ones((self.capacity, masks.shape[1]), dtype=bool)
            self.next_masks[:keep] = masks[n - keep :]
        self.size = keep
        self.pos = keep % self.capacity
        if self.optimize_memory_usage:
            stride = arrays.get("obs_stride")
            if stride is not None and np.size(stride) == 1 and 1 <= int(np.asarray(stride).reshape(-1)[0]) <= keep:
                self.stride = int(np.asarray(stride).reshape(-1)[0])
            self._load_next_obs(np.asarray(arrays["next_obs"][n - keep :], dtype=self.obs_dtype))

    def _load_next_obs(self, next_obs: np.ndarray) -> None:
        keep, k = len(next_obs), self.stride
        self._finals.clear()
        self._has_final[:] = False
        self._pending = next_obs[keep - k :].copy() if keep >= k else None
        for i in range(max(keep - k, 0)):
            if not np.array_equal(next_obs[i], self.obs[i + k]):
                self._finals[i] = next_obs[i].copy()
                self._has_final[i] = True

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the memory to ``path`` (``.npz``, no pickle); atomic: a crash keeps the old file."""
        write_npz(path, self.state_arrays())

    def load(self, path: str | os.PathLike[str]) -> ReplayMemory:
        """Replace the contents with those saved at ``path``; returns self."""
        self.load_arrays(read_npz(path), os.fspath(path))
        return self
