"""A tiny PettingZoo-style ParallelEnv for tests, docs and the notebook (no pettingzoo needed to run it).

:class:`MatchTarget`: every agent sees a target (one-hot of 3) and is rewarded 1 for choosing it
(Discrete(3)), or ``-|action - target/2|`` with ``box=True`` (Box(-1, 1, (1,))). Options exercise
what multi-agent training must handle: ``masks`` (action 2 forbidden, through ``info[agent]["action_mask"]``,
or the Dict observation's ``"action_mask"`` with ``dict_obs``), ``leave`` (the last agent leaves after
step 3), ``state_space``/``state()`` for a centralised critic, and ``composite=True``: a composite action
``Dict({"choice": Discrete(3), "size": Box(-1, 1, (1,))})`` rewarded ``[choice == target] - |size - target/2|``
(best return ``length`` per agent), whose mask (with ``masks``) is ``{"choice": [1, 1, 0]}``. Its random
stream is ``np_random`` (PettingZoo's convention), so a saved run continues it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

__all__ = ["MatchTarget"]


class MatchTarget:
    """``n_agents`` agents, episodes of ``length`` steps (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "match_target_v0", "render_modes": ["rgb_array"]}

    def __init__(
        self,
        n_agents: int = 2,
        length: int = 8,
        *,
        masks: bool = False,
        dict_obs: bool = False,
        leave: bool = False,
        box: bool = False,
        composite: bool = False,
        render_mode: str | None = None,
    ) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        if composite and (box or dict_obs):
            raise ValueError("MatchTarget: composite=True takes neither box=True nor dict_obs=True")
        self.length, self.masks, self.dict_obs, self.leave, self.box = length, masks, dict_obs, leave, box
        self.composite = composite
        self.render_mode = render_mode
        obs: spaces.Space = spaces.Box(0.0, 1.0, (3,), np.float32)
        if dict_obs:
            obs = spaces.Dict({"observation": obs, "action_mask": spaces.MultiBinary(3)})
        self._obs_space = obs
        self._act_space: spaces.Space = spaces.Box(-1.0, 1.0, (1,), np.float32) if box else spaces.Discrete(3)
        if composite:
            self._act_space = spaces.Dict(
                {"choice": spaces.Discrete(3), "size": spaces.Box(-1.0, 1.0, (1,), np.float32)}
            )
        self.state_space = spaces.Box(0.0, 1.0, (3 * n_agents,), np.float32)
        self.np_random = np.random.default_rng()
        self._targets: dict[str, int] = {}
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        """Every agent's observation space."""
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        """Every agent's action space."""
        return self._act_space

    def _obs(self, agent: str) -> Any:
        vec = np.zeros(3, np.float32)
        vec[self._targets[agent]] = 1.0
        if self.dict_obs:
            return {"observation": vec, "action_mask": self._mask()}
        return vec

    def _mask(self) -> Any:
        mask = np.array([1, 1, 0 if self.masks else 1], dtype=np.int8)
        return {"choice": mask} if self.composite else mask

    def _info(self) -> dict[str, dict[str, Any]]:
        if self.masks and not self.dict_obs:
            return {a: {"action_mask": self._mask()} for a in self.agents}
        return {a: {} for a in self.agents}

    def _draw(self) -> None:
        top = 2 if self.masks else 3
        self._targets = {a: int(self.np_random.integers(top)) for a in self.possible_agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode with every agent present."""
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._draw()
        return {a: self._obs(a) for a in self.agents}, self._info()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Reward each present agent for its action; the last agent leaves after step 3 with ``leave``."""
        self._t += 1
        rewards: dict[str, float] = {}
        for a in self.agents:
            act = actions[a]
            if self.composite:
                if self.masks and int(act["choice"]) == 2:
                    raise ValueError(f"{a} chose the masked action 2")
                size = float(np.asarray(act["size"]).reshape(-1)[0])
                rewards[a] = float(int(act["choice"]) == self._targets[a]) - abs(size - self._targets[a] / 2.0)
            elif self.box:
                rewards[a] = -abs(float(np.asarray(act).reshape(-1)[0]) - self._targets[a] / 2.0)
            else:
                if self.masks and int(act) == 2:
                    raise ValueError(f"{a} chose the masked action 2")
                rewards[a] = 1.0 if int(act) == self._targets[a] else 0.0
        self._draw()
        done = self._t >= self.length
        leaving = self.possible_agents[-1] if self.leave and self._t == 3 and len(self.agents) > 1 else None
        obs = {a: self._obs(a) for a in self.agents}
        terminated = {a: a == leaving for a in self.agents}
        truncated = {a: done for a in self.agents}
        infos = self._info()
        self.agents = [] if done else [a for a in self.agents if a != leaving]
        return obs, rewards, terminated, truncated, infos

    def state(self) -> np.ndarray:
        """Every agent's target, one-hot, side by side."""
        out = np.zeros((len(self.possible_agents), 3), np.float32)
        for i, a in enumerate(self.possible_agents):
            out[i, self._targets.get(a, 0)] = 1.0
        return out.reshape(-1)

    def render(self) -> np.ndarray | None:
        """A small RGB frame: one column of colour per agent's target."""
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((16, 16 * len(self.possible_agents), 3), np.uint8)
        for i, a in enumerate(self.possible_agents):
            frame[:, 16 * i : 16 * (i + 1), self._targets.get(a, 0)] = 255
        return frame

    def close(self) -> None:
        """Nothing to release."""
