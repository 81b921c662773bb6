"""N-step returns for replay agents: turns one-step transitions into ``n``-step ones per env."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..loop import Transitions

__all__ = ["NStepAccumulator"]


class NStepAccumulator:
    """Holds the last ``n`` steps of each env and emits ``(obs, action, R, next_obs, done, discount)``
    with ``R = r_0 + gamma r_1 + ... + gamma^(k-1) r_(k-1)`` and ``discount = gamma^k``.

    ``k`` is ``n`` in mid-episode; when an episode ends every pending step is emitted with the
    steps left, so nothing bootstraps across an episode boundary. ``done`` is 1 only for a real
    termination: a time-limit truncation still bootstraps from the final observation.
    """

    def __init__(self, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n_step must be at least 1, got {n}")
        self.n = int(n)
        self.gamma = float(gamma)
        self._pending: list[deque] = []

    def add(self, steps: Transitions, next_masks: np.ndarray | None = None) -> tuple[np.ndarray, ...] | None:
        """Take one step of every env; return the n-step transitions now complete (or None).
        Given ``next_masks`` (the next states' action masks), a seventh array holds the mask of
        each emitted transition's next state."""
        obs, actions, rewards, next_obs, terminated, truncated, _ = steps
        n_envs = len(rewards)
        if len(self._pending) != n_envs:
            self._pending = [deque() for _ in range(n_envs)]
        out: list[tuple] = []
        for i in range(n_envs):
            pending = self._pending[i]
            pending.append((obs[i], actions[i], float(rewards[i])))
            mask = None if next_masks is None else next_masks[i]
            if terminated[i] or truncated[i]:
                while pending:
                    out.append((*self._emit(pending, next_obs[i], float(terminated[i])), mask))
                    pending.popleft()
            elif len(pending) == self.n:
                out.append((*self._emit(pending, next_obs[i], 0.0), mask))
                pending.popleft()
        if not out:
            return None
        o, a, r, no, d, g, m = zip(*out)
        fields = (
            np.stack(o),
            np.stack(a),
            np.asarray(r, dtype=np.float32),
            np.stack(no),
            np.asarray(d, dtype=np.float32),
            np.asarray(g, dtype=np.float32),
        )
        return fields if next_masks is None else (*fields, np.stack(m))

    def _emit(self, pending: deque, next_obs: np.ndarray, done: float) -> tuple:
        ret = 0.0
        for k, (_, _, r) in enumerate(pending):
            ret += self.gamma**k * r
        first_obs, first_action, _ = pending[0]
        return first_obs, first_action, ret, next_obs, done, self.gamma ** len(pending)

    def clear(self) -> None:
        """Forget every pending step."""
        self._pending = []
