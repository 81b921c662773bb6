"""Tiny environments whose best return is known, for checking that an agent learns at all.

Shipped in the package (as Stable-Baselines3 ships its identity envs) so users can check a custom
agent the same way the test suite checks the built-in ones:

* :class:`OneStepBandit`: one step, one right answer (return 1 when found).
* :class:`TwoStateChain`: a tempting 0.5 now, or 0 now and 1 one step later; the best return is 1
  and needs a value carried back across a step.
* :class:`RememberTheCue`: a cue shown at the first step names the action that pays at the second,
  where the observation is blank; the best return is 1 with memory, 0.5 in expectation without.

``continuous=True`` gives each a ``Box(-1, 1, (1,))`` action space instead of ``Discrete(2)``.

For action masks and multi-dimensional actions:

* :class:`MaskedTarget`: several actions are invalid in every state (a new set every step) and
  the env raises :class:`MaskedActionError` when one is taken; the valid target shown in the
  observation pays 1. The mask comes from ``action_masks()``, ``info["action_mask"]`` or a Dict
  observation key (``mask_in=``); ``dims=2`` makes the actions MultiDiscrete, one target per dimension.
* :class:`BitMatch`: MultiBinary actions that pay for copying the observed bits.

And for image and Dict observations (the CNN encoders):

* :class:`SeeTheSide`: a 16x16x3 ``uint8`` image with a bright square on the left or the right; the
  action naming that side pays 1 (``channels_first=True`` gives ``(3, 16, 16)``, ``dict_obs=True`` a
  Dict of the image and a small vector).

And partially observed classic-control tasks, for agents with memory (``RecurrentPPO``):

* :class:`MaskVelocity` hides the velocities of CartPole, Pendulum, MountainCar or Acrobot;
* the ids ``CartPoleNoVel-v1`` and ``PendulumNoVel-v1`` (registered with gymnasium by
  :mod:`workbench.envs`, which every agent, session and worker imports) make the masked tasks by name.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "BitMatch",
    "DictOfDiscretes",
    "MaskVelocity",
    "MaskedActionError",
    "MaskedTarget",
    "OneStepBandit",
    "RememberTheCue",
    "SeeTheSide",
    "TwoStateChain",
    "cartpole_no_velocity",
    "pendulum_no_velocity",
]


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


class RememberTheCue(gym.Env):
    """Two steps. The first observation is ``[cue, 1]`` with ``cue`` 0 or 1 at random; whatever the
    first action, it pays 0 and the second observation is ``[0, 0]``. The second action pays 1 when
    it equals the cue and ends the episode. Only an agent that remembers scores 1 every time."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._cue, self._t = 0, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(2)), 0
        return np.array([self._cue, 1.0], dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._t == 0:
            self._t = 1
            return np.zeros(2, dtype=np.float32), 0.0, False, False, {}
        return np.zeros(2, dtype=np.float32), float(int(action) == self._cue), True, False, {}


class MaskedActionError(RuntimeError):
    """Raised by :class:`MaskedTarget` when an agent takes an action its mask forbids."""


class MaskedTarget(gym.Env):
    """Pick the target action among ``n_actions``, ``n_invalid`` of which are forbidden in every state.

    Every step draws a new target and a new set of ``n_invalid`` forbidden actions (never the
    target); the observation shows the target one-hot (per dimension, concatenated). The right
    action pays 1 (with ``dims > 1``, the fraction of dimensions right); another allowed action
    pays 0; a forbidden one raises :class:`MaskedActionError`, so a test over many steps proves
    that an agent never takes one. Episodes last ``episode_length`` steps.

    ``mask_in`` says where the mask is: ``"method"`` (``env.action_masks()``, sb3-contrib's
    convention), ``"info"`` (``info["action_mask"]``) or ``"obs"`` (a Dict observation
    ``{"obs": ..., "action_mask": ...}``); None with ``n_invalid=0`` gives none (a plain task).
    ``dims=None`` gives a ``Discrete`` action space; an integer gives ``MultiDiscrete([n_actions] * dims)``
    with the per-dimension masks concatenated.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        n_actions: int = 6,
        n_invalid: int = 3,
        *,
        dims: int | None = None,
        mask_in: str | None = "method",
        episode_length: int = 10,
    ) -> None:
        if not 0 <= n_invalid < n_actions:
            raise ValueError(f"n_invalid must be in [0, n_actions), got {n_invalid} for {n_actions} actions")
        if mask_in not in ("method", "info", "obs", None):
            raise ValueError(f"mask_in must be 'method', 'info', 'obs' or None, got {mask_in!r}")
        if mask_in is None and n_invalid:
            raise ValueError("mask_in=None (no mask given) needs n_invalid=0")
        self.n_actions, self.n_invalid, self.dims, self.mask_in = n_actions, n_invalid, dims, mask_in
        self.episode_length = episode_length
        k = dims or 1
        self.action_space = spaces.Discrete(n_actions) if dims is None else spaces.MultiDiscrete([n_actions] * k)
        vector = spaces.Box(0.0, 1.0, shape=(n_actions * k,), dtype=np.float32)
        if mask_in == "obs":
            self.observation_space = spaces.Dict({"obs": vector, "action_mask": spaces.MultiBinary(n_actions * k)})
        else:
            self.observation_space = vector
        self._target = np.zeros(k, dtype=np.int64)
        self._mask = np.ones(n_actions * k, dtype=bool)
        self._t = 0
        if mask_in == "method":
            # Only this variant offers action_masks() (sb3-contrib's convention), so the other
            # variants really test their own source.
            self.action_masks = self.current_mask

    def current_mask(self) -> np.ndarray:
        """The mask of the current state (True: allowed)."""
        return self._mask.copy()

    def _draw(self) -> None:
        k, n = self.dims or 1, self.n_actions
        self._target = self.np_random.integers(0, n, size=k)
        self._mask = np.ones(n * k, dtype=bool)
        for d in range(k):
            others = np.delete(np.arange(n), self._target[d])
            self._mask[d * n + self.np_random.choice(others, size=self.n_invalid, replace=False)] = False

    def _observe(self) -> tuple[Any, dict]:
        n = self.n_actions
        vec = np.zeros(n * (self.dims or 1), dtype=np.float32)
        vec[np.arange(len(self._target)) * n + self._target] = 1.0
        info: dict[str, Any] = {}
        if self.mask_in == "info":
            info["action_mask"] = self._mask.copy()
        if self.mask_in == "obs":
            return {"obs": vec, "action_mask": self._mask.astype(np.int8)}, info
        return vec, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._draw()
        return self._observe()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.int64).reshape(-1)
        n = self.n_actions
        chosen = np.arange(len(a)) * n + a
        if len(a) != len(self._target) or not self._mask[chosen].all():
            raise MaskedActionError(f"action {action} is masked at step {self._t} (mask {self._mask.astype(int)})")
        reward = float(np.mean(a == self._target))
        self._t += 1
        self._draw()
        obs, info = self._observe()
        return obs, reward, False, self._t >= self.episode_length, info


class BitMatch(gym.Env):
    """MultiBinary actions: copy the ``n_bits`` bits of the observation. Each step pays the fraction
    of bits copied right (random play: 0.5); episodes last ``episode_length`` steps."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self, n_bits: int = 4, episode_length: int = 10) -> None:
        self.n_bits, self.episode_length = n_bits, episode_length
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_bits,), dtype=np.float32)
        self.action_space = spaces.MultiBinary(n_bits)
        self._bits = np.zeros(n_bits, dtype=np.int8)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._bits = self.np_random.integers(0, 2, size=self.n_bits).astype(np.int8)
        return self._bits.astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(np.mean(np.asarray(action).reshape(-1) == self._bits))
        self._t += 1
        self._bits = self.np_random.integers(0, 2, size=self.n_bits).astype(np.int8)
        return self._bits.astype(np.float32), reward, False, self._t >= self.episode_length, {}


class SeeTheSide(gym.Env):
    """A small image task: each step shows a ``size x size x 3`` uint8 image, black but for a bright
    square on its left or right half; Discrete action 0 (left) or 1 (right) pays 1 when it names
    that side (continuous: action ``a`` pays ``1 - (a - t) ** 2``, ``t`` = -0.5 left, +0.5 right).
    Episodes last ``length`` steps (truncated), so the best return is ``length``.

    ``channels_first=True`` gives ``(3, size, size)`` images; ``dict_obs=True`` a Dict observation
    ``{"image": ..., "vector": Box(-1, 1, (2,))}`` whose vector holds the time left and a constant."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        size: int = 16,
        length: int = 8,
        continuous: bool = False,
        channels_first: bool = False,
        dict_obs: bool = False,
        render_mode: str | None = None,
    ) -> None:
        self.size, self.length, self.continuous = size, length, continuous
        self.channels_first, self.dict_obs, self.render_mode = channels_first, dict_obs, render_mode
        shape = (3, size, size) if channels_first else (size, size, 3)
        image = spaces.Box(0, 255, shape=shape, dtype=np.uint8)
        self.observation_space: spaces.Space = (
            spaces.Dict({"image": image, "vector": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)})
            if dict_obs
            else image
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32) if continuous else spaces.Discrete(2)
        self._side, self._t = 0, 0

    def _image(self) -> np.ndarray:
        img = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        half, q = self.size // 2, self.size // 4
        x0 = self._side * half + q // 2
        img[q : q + half, x0 : x0 + q] = (255, 200, 50)
        return img

    def _obs(self) -> Any:
        img = self._image()
        if self.channels_first:
            img = np.ascontiguousarray(img.transpose(2, 0, 1))
        if not self.dict_obs:
            return img
        return {"image": img, "vector": np.array([1.0 - self._t / self.length, 0.5], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._side = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.continuous:
            a = float(np.asarray(action).reshape(-1)[0])
            reward = 1.0 - (a - (0.5 if self._side else -0.5)) ** 2
        else:
            reward = 1.0 if int(action) == self._side else 0.0
        self._t += 1
        self._side = int(self.np_random.integers(2))
        return self._obs(), reward, False, self._t >= self.length, {}

    def render(self) -> np.ndarray:
        """The image, HWC (what a viewer shows)."""
        return self._image()


class MaskVelocity(gym.ObservationWrapper):
    """Keeps only the positions of a classic-control observation, so the task needs memory.

    CartPole keeps cart position and pole angle (drops both velocities); Pendulum keeps cos and
    sin of the angle (drops the angular velocity); MountainCar keeps the position; Acrobot keeps
    the cos and sin of both angles. ``keep`` gives the indices for any other Box observation.
    """

    KEEP: dict[str, tuple[int, ...]] = {  # noqa: RUF012 - read-only table
        "CartPole": (0, 2),
        "Pendulum": (0, 1),
        "MountainCar": (0,),
        "MountainCarContinuous": (0,),
        "Acrobot": (0, 1, 2, 3),
    }

    def __init__(self, env: gym.Env, keep: tuple[int, ...] | None = None) -> None:
        super().__init__(env)
        if keep is None:
            name = env.spec.id.split("-")[0] if env.spec is not None else ""
            if name not in self.KEEP:
                raise ValueError(
                    f"MaskVelocity knows {', '.join(self.KEEP)}; for {name or type(env.unwrapped).__name__} "
                    "pass keep=(indices of the observation to keep)"
                )
            keep = self.KEEP[name]
        self.keep = np.asarray(keep, dtype=np.int64)
        box = env.observation_space
        assert isinstance(box, spaces.Box)
        self.observation_space = spaces.Box(box.low[self.keep], box.high[self.keep], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The kept entries."""
        return np.asarray(observation, dtype=np.float32)[self.keep]


def cartpole_no_velocity(**kwargs: Any) -> gym.Env:
    """CartPole-v1 without the velocities (``CartPoleNoVel-v1``)."""
    return MaskVelocity(gym.make("CartPole-v1", **kwargs))


def pendulum_no_velocity(**kwargs: Any) -> gym.Env:
    """Pendulum-v1 without the angular velocity (``PendulumNoVel-v1``)."""
    return MaskVelocity(gym.make("Pendulum-v1", **kwargs))


class DictOfDiscretes(gym.ActionWrapper):
    """A ``MultiDiscrete`` env whose action space becomes a ``Dict`` of one ``Discrete`` leaf per dimension
    (keys ``"d0"``, ``"d1"``... in the dimensions' order): the composite space equivalent to the MultiDiscrete,
    on which PPO's heads, draws and losses match the MultiDiscrete's (``benchmarks/composite.py``). Its masks
    (the env's flat rows) are the composite space's flat mask rows unchanged."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        nvec = np.asarray(env.action_space.nvec).reshape(-1)  # type: ignore[attr-defined]
        if len(nvec) > 10:
            raise ValueError(
                f"DictOfDiscretes keys its leaves d0..d9 (sorted as the dimensions): {len(nvec)} is too many"
            )
        self.action_space = spaces.Dict({f"d{i}": spaces.Discrete(int(n)) for i, n in enumerate(nvec)})

    def action(self, action: Any) -> np.ndarray:
        """The Dict action as the wrapped env's MultiDiscrete array."""
        return np.array([int(action[f"d{i}"]) for i in range(len(self.action_space.spaces))], dtype=np.int64)  # type: ignore[attr-defined]
