"""Goal-based environments: the bit-flipping task of the HER paper, and what tells a goal env apart.

A goal env (gymnasium-robotics' ``GoalEnv`` convention) observes a Dict with three keys:
``observation``, ``achieved_goal`` (the goal the current state reaches) and ``desired_goal`` (the one
asked for), and has ``compute_reward(achieved_goal, desired_goal, info)`` that works on batches. That is
what Hindsight Experience Replay (``workbench.memory.her``) needs to relabel a transition with another
goal.

:class:`BitFlippingEnv` (Andrychowicz et al. 2017, section 3.1): ``n_bits`` bits, a random start and a
random target; each action flips one bit; the reward is -1 until the bits match the target, then 0 and
the episode ends; after ``n_bits`` steps it is truncated. With 15 bits or more a random walk almost
never sees the target, so DQN alone does not learn it and DQN with HER does. The id
``BitFlipping-v0`` makes it by name (``gym.make("BitFlipping-v0", n_bits=15)``; registered when this
module is imported, which ``import workbench`` does).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["GOAL_KEYS", "BitFlippingEnv", "goal_env_problem"]

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
"""The keys of a goal env's Dict observation."""


def goal_env_problem(space: spaces.Space) -> str | None:
    """Why ``space`` is not a goal env's observation space, in words (None when it is one): a Dict
    with ``observation``, ``achieved_goal`` and ``desired_goal``, both goals Box or MultiBinary of one shape."""
    if not isinstance(space, spaces.Dict):
        return f"its observation space is {type(space).__name__}, not a Dict"
    missing = [k for k in GOAL_KEYS if k not in space.spaces]
    if missing:
        return f"its Dict observation has no {', '.join(repr(k) for k in missing)} key (it has {sorted(space.spaces)})"
    achieved, desired = space.spaces["achieved_goal"], space.spaces["desired_goal"]
    for name, sub in (("achieved_goal", achieved), ("desired_goal", desired)):
        if not isinstance(sub, spaces.Box | spaces.MultiBinary):
            return f"its {name!r} is {type(sub).__name__}; HER relabels Box or MultiBinary goals"
    if achieved.shape != desired.shape:
        return f"its goals differ in shape (achieved {achieved.shape}, desired {desired.shape})"
    return None


class BitFlippingEnv(gym.Env):
    """Flip ``n_bits`` bits into a target pattern (the HER paper's task).

    Observation: a Dict of ``observation`` (the bits), ``achieved_goal`` (the same bits) and
    ``desired_goal`` (the target), each ``Box(0, 1, (n_bits,), float32)``. Action: ``Discrete(n_bits)``,
    the bit to flip; ``continuous=True`` gives ``Box(-1, 1, (n_bits,))`` and flips every bit whose action
    is positive (for SAC, TD3, DDPG). Reward -1 per step, 0 when the bits match (the episode then
    terminates, ``info["is_success"] = True``); truncated after ``max_steps`` (default ``n_bits``) steps.
    :meth:`compute_reward` takes batches, as HER needs.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}  # type: ignore[misc]  # gymnasium declares it per instance

    def __init__(self, n_bits: int = 8, continuous: bool = False, max_steps: int | None = None) -> None:
        if not isinstance(n_bits, int | np.integer) or isinstance(n_bits, bool) or n_bits < 1:
            raise ValueError(f"BitFlippingEnv needs n_bits >= 1 (an integer), got {n_bits!r}")
        if max_steps is not None and (not isinstance(max_steps, int | np.integer) or max_steps < 1):
            raise ValueError(f"BitFlippingEnv needs max_steps >= 1 or None (n_bits), got {max_steps!r}")
        self.n_bits = int(n_bits)
        self.continuous = bool(continuous)
        self.max_steps = self.n_bits if max_steps is None else int(max_steps)
        bits = spaces.Box(0.0, 1.0, (self.n_bits,), dtype=np.float32)
        self.observation_space = spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        if self.continuous:
            self.action_space: spaces.Space = spaces.Box(-1.0, 1.0, (self.n_bits,), dtype=np.float32)
        else:
            self.action_space = spaces.Discrete(self.n_bits)
        self._state = np.zeros(self.n_bits, dtype=np.float32)
        self._goal = np.zeros(self.n_bits, dtype=np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        state = self._state.copy()
        return {"observation": state, "achieved_goal": state.copy(), "desired_goal": self._goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """A random start and a different random target."""
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state
        while np.array_equal(self._goal, self._state):
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        """Flip the chosen bit (or, continuous, every bit whose action is positive)."""
        if self.continuous:
            flip = np.asarray(action, dtype=np.float32).reshape(self.n_bits) > 0
            self._state = np.where(flip, 1.0 - self._state, self._state).astype(np.float32)
        else:
            i = int(action)
            if not 0 <= i < self.n_bits:
                raise ValueError(f"BitFlippingEnv action {action!r} is outside Discrete({self.n_bits})")
            self._state = self._state.copy()
            self._state[i] = 1.0 - self._state[i]
        self._steps += 1
        reward = float(self.compute_reward(self._state, self._goal, {}))
        success = reward == 0.0
        truncated = not success and self._steps >= self.max_steps
        return self._obs(), reward, success, truncated, {"is_success": success}

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """0 where the bits match, -1 elsewhere; works on one goal or a batch (leading axis)."""
        achieved = np.asarray(achieved_goal)
        desired = np.asarray(desired_goal)
        return -(np.abs(achieved - desired) > 0.5).any(axis=-1).astype(np.float32)


if "BitFlipping-v0" not in gym.registry:
    # The env truncates itself after max_steps; no checker on top (its Dict space is checked by the tests).
    gym.register(
        "BitFlipping-v0",
        entry_point=BitFlippingEnv,  # type: ignore[arg-type]
        disable_env_checker=True,
    )
