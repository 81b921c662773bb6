"""Tiny environments whose best return is known, for checking that an agent learns at all.

Shipped in the package (as Stable-Baselines3 ships its identity envs) so users can check a custom
agent the same way the test suite checks the built-in ones:

* :class:`OneStepBandit`: one step, one right answer (return 1 when found).
* :class:`TwoStateChain`: a tempting 0.5 now, or 0 now and 1 one step later; the best return is 1
  and needs a value carried back across a step.

``continuous=True`` gives each a ``Box(-1, 1, (1,))`` action space instead of ``Discrete(2)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["OneStepBandit", "TwoStateChain"]


class OneStepBandit(gym.Env):
    """One step per episode. Discrete: action 1 pays 1, action 0 pays 0. Continuous: action ``a``
    pays ``1 - (a - 0.5) ** 2``, best at ``a = 0.5``. The observation is always ``[1]``."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention
    TARGET = 0.5

    def __init__(self, continuous: bool = False) -> None:
        self.continuous = continuous
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32) if continuous else spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.ones(1, dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.continuous:
            a = float(np.asarray(action).reshape(-1)[0])
            reward = 1.0 - (a - self.TARGET) ** 2
        else:
            reward = 1.0 if int(action) == 1 else 0.0
        return np.ones(1, dtype=np.float32), reward, True, False, {}


class TwoStateChain(gym.Env):
    """Two states, observed one-hot. In state 0, "stay" (action 0, or ``a <= 0``) ends the episode
    paying 0.5; "go" (action 1, or ``a > 0``) moves to state 1 paying 0. In state 1 the episode ends:
    discrete action 1 pays 1 and action 0 pays 0; a continuous action ``a`` pays
    ``1 - (a - 0.5) ** 2 / 2``. The best return is 1 (go, then the right answer); a myopic agent
    settles for 0.5.

    Continuous "stay" pays ``0.5 + 0.2 * a`` (at most 0.5, at the border): a flat payoff would leave
    a deterministic policy gradient no slope to climb back out of an early wrong turn, made while
    the value of going on has not yet been learned, and the test would be one of luck.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self, continuous: bool = False) -> None:
        self.continuous = continuous
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32) if continuous else spaces.Discrete(2)
        self._state = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(2, dtype=np.float32)
        obs[self._state] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._state = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = float(np.asarray(action).reshape(-1)[0])
        go = a > 0 if self.continuous else int(a) == 1
        if self._state == 0:
            if not go:
                return self._obs(), 0.5 + 0.2 * a if self.continuous else 0.5, True, False, {}
            self._state = 1
            return self._obs(), 0.0, False, False, {}
        reward = 1.0 - (a - 0.5) ** 2 / 2 if self.continuous else (1.0 if go else 0.0)
        return self._obs(), reward, True, False, {}
