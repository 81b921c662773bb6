"""A small hybrid (parameterised) action task: move or shoot, with a step or a power.

:class:`MoveOrShootEnv` (id ``MoveOrShoot-v0``, registered when :mod:`workbench.envs` is imported): a target
sits ahead of the player on a line at a distance ``o`` drawn uniformly from [0, 2]; the observation is ``o``.
The action space is ``Tuple(Discrete(2), Dict({"move": Box(-1, 1, (1,)), "shoot": Box(0, 1, (1,))}))``, the
hybrid convention of :mod:`workbench.envs.composite`: the choice 0 moves (branch ``"move"``, the Dict's first
key) by its step ``d`` (``o -= d``: forwards when positive, backwards when negative; reward -0.1), the choice 1
shoots (branch ``"shoot"``) with its power ``p`` and ends the episode: in range (``|o| <= 1``) the shot earns
``1 - (p - |o|)²``, out of range nothing.
Only the chosen branch's parameter matters. After 5 steps the episode is truncated.

**Optimal return 0.95** (:data:`MOVE_OR_SHOOT_OPTIMUM`): a target in range (half the episodes) is shot at
once with ``p = |o|`` (return 1); one out of range is first approached by one move (any ``d`` with
``|o - d| <= 1``, -0.1), then shot (return 0.9). Shooting at once from out of range earns 0; a uniformly random
policy earns about 0.3.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["MOVE_OR_SHOOT_OPTIMUM", "MoveOrShootEnv"]

MOVE_OR_SHOOT_OPTIMUM = 0.95
"""The expected return of an optimal policy on ``MoveOrShoot-v0`` (see the module docstring)."""


class MoveOrShootEnv(gym.Env[np.ndarray, Any]):
    """Move (with a step) or shoot (with a power) at a target on a line; see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, max_steps: int = 5, move_cost: float = 0.1) -> None:
        self.max_steps = int(max_steps)
        self.move_cost = float(move_cost)
        self.observation_space = spaces.Box(-3.0, 3.0, (1,), np.float32)
        self.action_space = spaces.Tuple(
            (
                spaces.Discrete(2),
                spaces.Dict(
                    {
                        "move": spaces.Box(-1.0, 1.0, (1,), np.float32),
                        "shoot": spaces.Box(0.0, 1.0, (1,), np.float32),
                    }
                ),
            )
        )
        self._offset = 0.0
        self._steps = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._offset], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """A new target ahead, at a distance drawn uniformly from [0, 2]."""
        super().reset(seed=seed)
        self._offset = float(self.np_random.uniform(0.0, 2.0))
        self._steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Move by the step (choice 0) or shoot with the power (choice 1, ending the episode)."""
        choice, params = action
        self._steps += 1
        if int(choice) == 1:
            power = float(np.clip(np.asarray(params["shoot"]).reshape(-1)[0], 0.0, 1.0))
            distance = abs(self._offset)
            reward = 1.0 - (power - distance) ** 2 if distance <= 1.0 else 0.0
            return self._obs(), reward, True, False, {}
        step = float(np.clip(np.asarray(params["move"]).reshape(-1)[0], -1.0, 1.0))
        self._offset = float(np.clip(self._offset - step, -3.0, 3.0))
        return self._obs(), -self.move_cost, False, self._steps >= self.max_steps, {}
