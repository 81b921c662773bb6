"""Proportional prioritized replay (Schaul et al. 2016) on a sum-tree: O(log n) sampling and updates.

Transition ``i`` is drawn with probability ``p_i ** alpha / sum_k p_k ** alpha``, where ``p_i`` is
its last absolute TD error plus a small epsilon (new transitions get the largest priority seen so
far, so each is replayed at least once soon). The bias this sampling adds is corrected with
importance weights ``(N * P(i)) ** -beta``, divided by the largest weight in the minibatch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .replay import ReplayBatch, ReplayMemory

__all__ = ["PrioritizedReplayMemory", "SumTree"]


class SumTree:
    """A binary tree in one array whose every node holds the sum of its two children.

    Leaves hold the priorities (``capacity`` rounded up to a power of two); node 1 is the total.
    Updates and lookups of a whole batch walk the ``log2(capacity)`` levels with numpy, so a batch
    costs ``O(batch * log n)`` with a handful of numpy calls per level.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"sum-tree capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.depth = max(1, int(np.ceil(np.log2(self.capacity))))
        self.n_leaves = 1 << self.depth
        self.nodes = np.zeros(2 * self.n_leaves, dtype=np.float64)

    @property
    def leaves(self) -> np.ndarray:
        """The priorities, one per slot (a view: write then call :meth:`rebuild`)."""
        return self.nodes[self.n_leaves : self.n_leaves + self.capacity]

    @property
    def total(self) -> float:
        """Sum of all priorities."""
        return float(self.nodes[1])

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of slots ``indices`` and refresh their ancestors."""
        idx = np.asarray(indices, dtype=np.int64) + self.n_leaves
        self.nodes[idx] = priorities
        for _ in range(self.depth):
            idx = np.unique(idx >> 1)
            self.nodes[idx] = self.nodes[2 * idx] + self.nodes[2 * idx + 1]

    def rebuild(self) -> None:
        """Recompute every inner node from the leaves (after writing :attr:`leaves` directly)."""
        for level in range(self.depth - 1, -1, -1):
            start, stop = 1 << level, 1 << (level + 1)
            self.nodes[start:stop] = self.nodes[2 * start : 2 * stop : 2] + self.nodes[2 * start + 1 : 2 * stop : 2]

    def find(self, values: np.ndarray) -> np.ndarray:
        """The slot whose cumulative priority range holds each value in ``[0, total)``."""
        values = np.array(values, dtype=np.float64)
        idx = np.ones(len(values), dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * idx
            left_sum = self.nodes[left]
            go_right = values >= left_sum
            values -= left_sum * go_right
            idx = left + go_right
        return idx - self.n_leaves

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` slots drawn in proportion to their priority, one from each of
        ``batch_size`` equal strata of the total (lower variance than independent draws)."""
        total = self.total
        if total <= 0:
            raise ValueError("cannot sample from a sum-tree whose priorities are all zero")
        bounds = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        slots = self.find(np.minimum(bounds, np.nextafter(total, 0)))
        # Rounding can land on an empty leaf just past the filled ones: step back to a filled one.
        empty = self.nodes[slots + self.n_leaves] <= 0
        if empty.any():
            filled = np.flatnonzero(self.leaves > 0)
            slots[empty] = filled[np.searchsorted(filled, slots[empty]).clip(0, len(filled) - 1)]
        return slots


class PrioritizedReplayMemory(ReplayMemory):
    """Replay memory sampling transitions in proportion to ``priority ** alpha``.

    ``sample(batch_size, rng, beta)`` returns importance ``weights``; after learning, pass the
    batch's absolute TD errors to :meth:`update_priorities`. Priorities are saved with the memory.
    """

    FIELDS = (*ReplayMemory.FIELDS, "priorities")

    def __init__(self, *args: Any, alpha: float = 0.6, epsilon: float = 1e-6, **kwargs: Any) -> None:
        """``alpha``: how much priorities count (0: uniform); ``epsilon``: added to every priority. The
        other arguments are :class:`ReplayMemory`'s."""
        if alpha < 0:
            raise ValueError(f"prioritized replay alpha must be >= 0, got {alpha}")
        super().__init__(*args, **kwargs)
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0

    @property
    def priorities(self) -> np.ndarray:
        """``priority ** alpha`` of every slot (the sum-tree's leaves)."""
        return self.tree.leaves

    def add(self, obs, actions, rewards, next_obs, dones, discounts, next_masks=None) -> np.ndarray:  # type: ignore[no-untyped-def]
        """Append a batch with the largest priority seen so far; returns the slots written."""
        idx = super().add(obs, actions, rewards, next_obs, dones, discounts, next_masks)
        self.tree.update(idx, np.full(len(idx), self.max_priority**self.alpha))
        return idx

    def sample(self, batch_size: int, rng: np.random.Generator, beta: float = 0.4) -> ReplayBatch:
        """A prioritized minibatch with importance weights ``(N * P(i)) ** -beta / max``."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        idx = self.tree.sample(batch_size, rng)
        probs = self.tree.nodes[idx + self.tree.n_leaves] / self.tree.total
        weights = (self.size * probs) ** (-beta)
        weights /= weights.max()
        return self.gather(idx, weights.astype(np.float32))

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities ``|td_error| + epsilon`` for the sampled slots."""
        priorities = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.epsilon
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(indices, priorities**self.alpha)

    def load_arrays(self, arrays: dict[str, np.ndarray], source: str = "memory", *, action_space: Any = None) -> None:
        """Replace the contents (priorities included) and rebuild the sum-tree."""
        if "priorities" in arrays and len(arrays["priorities"]) and (np.asarray(arrays["priorities"]) < 0).any():
            raise ValueError(f"{source}: array 'priorities' holds negative priorities")
        self.tree.leaves[:] = 0.0
        super().load_arrays(arrays, source, action_space=action_space)
        self.tree.rebuild()
        if self.size:
            self.max_priority = max(1.0, float(self.priorities[: self.size].max()) ** (1.0 / max(self.alpha, 1e-8)))
