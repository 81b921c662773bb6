"""How an agent's networks meet its spaces: observations prepared as a batch in the agent's dtype, action
masks checked, the step decided on them under the agent's lock (``_locked_decide``), the encoder of each
network built from the observation space, Box actions scaled into and out of their bounds.

:class:`Shaping` is a part of :class:`~workbench.agents.contract.Agent` (a base class of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from torch import nn

from ..envs.core import describe_space
from ..envs.masks import MASK_KEY, check_masks, mask_size, strip_mask_space
from ..loop import Step, Transitions
from ..validation import check_rows
from .encoders import make_encoder, with_encoder
from .registry import mask_refusal

__all__ = ["Shaping"]


class Shaping:
    """The members that shape what goes into and comes out of the networks (``self`` is the :class:`Agent`)."""

    def _encoder(self) -> tuple[nn.Module | None, int]:
        """A fresh encoder for one network (see ``workbench.agents.encoders``) and the width of its
        features; ``(None, flat observation size)`` when the network reads the observation itself."""
        c = self.config
        enc = make_encoder(strip_mask_space(self.observation_space), c.encoder, c.encoder_kwargs)
        if enc is None:
            return None, int(np.prod(self.obs_shape))
        return enc, int(enc.features_dim)  # type: ignore[arg-type]

    def _encoded(self, build_head: Any) -> nn.Module:
        """``encoder -> build_head(features)`` as one network (the head alone for vector observations)."""
        enc, dim = self._encoder()
        return with_encoder(enc, build_head(dim))

    def prepare_obs(self, obs: Any) -> tuple[np.ndarray, bool]:
        """Observations as a batch in the agent's observation dtype (uint8 for images, else float32),
        and whether a single observation was given."""
        if isinstance(obs, dict | tuple) and not isinstance(self.observation_space, spaces.Box):
            if isinstance(obs, dict) or not isinstance(obs[0], dict):
                return self._flatten(obs)[None], True
            return np.stack([self._flatten(o) for o in obs]), False
        if isinstance(self.observation_space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
            raw = np.asarray(obs)
            if raw.shape == self.observation_space.shape:  # one raw observation: one-hot it
                return self._flatten(raw)[None], True
            if raw.shape[1:] == self.observation_space.shape and raw.shape[1:] != self.obs_shape:
                return np.stack([self._flatten(o) for o in raw]), False
        # Observations keep their own dtype (uint8 images stay uint8 up to the network's encoder).
        arr = np.asarray(obs, dtype=self.obs_dtype)
        if arr.shape == self.obs_shape:
            return arr[None], True
        if arr.shape[1:] != self.obs_shape:
            raise ValueError(
                f"observation of shape {arr.shape} does not fit the observation space "
                f"{describe_space(self.flat_observation_space)}: pass one observation of shape "
                f"{self.obs_shape} or a batch of shape (n, {', '.join(map(str, self.obs_shape))})"
            )
        return arr, False

    def _locked_decide(
        self, obs: Any, deterministic: bool, action_mask: Any, rows: Sequence[int] | None = None
    ) -> tuple[Step, np.ndarray | None, bool]:
        """What :meth:`decide` and :meth:`act` share: the step for ``obs`` taken on the agent's lock
        (observations normalized; greedy in play mode), the checked action mask (None without one),
        and whether ``obs`` was a single observation."""
        batch, single = self.prepare_obs(obs)
        mask = self._action_mask(obs, action_mask, len(batch))
        env_rows = None if rows is None or not self.per_env_decisions else check_rows(rows, len(batch), self.num_envs)
        with self._lock:
            if self.config.normalize_observations:
                batch = self.obs_normalizer(batch)
            greedy = deterministic or not self.training
            if env_rows is not None:  # a per-env agent's _decide_rows (RecurrentPPO): these envs' state only
                step = self._decide_rows(batch, greedy, mask, env_rows)
            else:
                step = self._decide(batch, greedy) if mask is None else self._decide(batch, greedy, mask)
        return step, mask, single

    def _action_mask(self, obs: Any, action_mask: Any, n: int) -> np.ndarray | None:
        """The checked ``(n, mask_size)`` bool masks for a decision (from ``action_mask`` or a Dict
        observation's key), or None."""
        if action_mask is None:
            if not (isinstance(obs, dict) and MASK_KEY in obs):
                return None
            action_mask = obs[MASK_KEY]
        if not self.supports_action_masks or mask_size(self.action_space) is None:
            raise mask_refusal(self.algorithm, self.action_space)
        mask = check_masks(action_mask, self.action_space, f"{self.algorithm}'s action_mask")
        if len(mask) != n:
            raise ValueError(f"action_mask has {len(mask)} rows for {n} observations: give one mask per observation")
        return mask

    def _normalize_transitions(self, t: Transitions) -> Transitions:
        """The transitions as the algorithm should see them: observations standardized with the
        statistics ``act`` used, rewards scaled; the statistics then learn from this step."""
        c = self.config
        if not (c.normalize_observations or c.normalize_rewards):
            return t
        obs, rewards, next_obs = t.obs, t.rewards, t.next_obs
        if c.normalize_observations:
            norm = self.obs_normalizer
            obs, next_obs = norm(np.asarray(obs, dtype=np.float32)), norm(np.asarray(next_obs, dtype=np.float32))
            if self.training:
                norm.update(t.next_obs)
        if c.normalize_rewards:
            rewards = self.reward_normalizer(t.rewards, t.terminated | t.truncated, update=self.training)
        return t._replace(obs=obs, rewards=rewards, next_obs=next_obs)

    def _require_bounded_actions(self) -> None:
        """For agents whose policy ends in tanh: the Box must have finite bounds to scale into."""
        if not (np.all(np.isfinite(self.action_low)) and np.all(np.isfinite(self.action_high))):
            raise ValueError(
                f"{self.algorithm} scales its tanh-squashed actions into the action space's bounds, but "
                f"{describe_space(self.action_space)} has infinite bounds (low={self.action_space.low}, "
                f"high={self.action_space.high}): wrap the env so its actions are bounded, or use PPO or A2C"
            )
        self._action_center = (self.action_high + self.action_low) / 2.0
        self._action_half_range = (self.action_high - self.action_low) / 2.0

    def _scale_action(self, squashed: np.ndarray) -> np.ndarray:
        """An action in [-1, 1] mapped onto the action space's bounds."""
        return (self._action_center + squashed * self._action_half_range).astype(np.float32)

    def _unscale_action(self, action: np.ndarray) -> np.ndarray:
        """An env action mapped back into [-1, 1] (what replay agents store)."""
        # np.minimum/np.maximum: np.clip's values at a fraction of its per-call cost.
        unit = (action - self._action_center) / self._action_half_range
        return np.minimum(np.maximum(unit, -1.0), 1.0).astype(np.float32)
