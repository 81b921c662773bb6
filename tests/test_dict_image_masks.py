"""Image + vector + action-mask Dict observations: the encoders and the masks together."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.envs.testing import SeeTheSide

MASKED = 2


class MaskedSide(gym.Wrapper):
    """SeeTheSide's Dict (image + vector) with an ``action_mask`` key; action 2 of 3 is always masked
    and taking it raises, so a run that finishes never took it."""

    def __init__(self) -> None:
        super().__init__(SeeTheSide(dict_obs=True))
        parts = dict(self.env.observation_space.spaces)
        parts["action_mask"] = spaces.MultiBinary(3)
        self.observation_space = spaces.Dict(parts)
        self.action_space = spaces.Discrete(3)

    @staticmethod
    def _with_mask(obs: dict[str, Any]) -> dict[str, Any]:
        return {**obs, "action_mask": np.array([1, 1, 0], dtype=np.int8)}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict]:
        obs, info = self.env.reset(**kwargs)
        return self._with_mask(obs), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict]:
        if int(action) == MASKED:
            raise AssertionError("the agent took the masked action")
        obs, reward, terminated, truncated, info = self.env.step(int(action))
        return self._with_mask(obs), reward, terminated, truncated, info


@pytest.mark.parametrize(
    ("cls", "options"),
    [
        (wb.PPO, {"n_steps": 32, "batch_size": 32}),
        (wb.A2C, {}),
        (wb.DQN, {"learning_starts": 32, "batch_size": 16}),
        (wb.QRDQN, {"learning_starts": 32, "batch_size": 16}),
    ],
)
def test_image_vector_and_mask_dict_trains_saves_loads_and_plays(cls: type, options: dict, tmp_path) -> None:
    agent = cls(MaskedSide(), **options)
    assert "small_cnn" in repr(agent) and "action_mask" not in agent.encoder_description
    wb.Session(agent, MaskedSide, seed=0).run(steps=300)
    agent.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    returns = loaded.play(MaskedSide(), episodes=2)
    assert len(returns) == 2
    obs, _ = MaskedSide().reset(seed=1)
    assert loaded.act(obs, deterministic=True) != MASKED
