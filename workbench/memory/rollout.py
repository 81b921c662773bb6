"""Rollout storage for on-policy agents (PPO, A2C): preallocated ``(n_steps, n_envs, ...)`` arrays."""

from __future__ import annotations

import numpy as np

__all__ = ["RolloutBuffer", "compute_gae"]


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation (Schulman et al. 2016) over ``(n_steps, n_envs)`` arrays.

    ``dones[t]`` is 1 when the episode ended at step ``t`` (its next state belongs to a new
    episode, so nothing is bootstrapped across it); time-limit truncations are handled by the
    caller, which adds ``gamma * V(final_obs)`` to the last reward. Returns ``(advantages, returns)``.
    """
    n_steps = rewards.shape[0]
    advantages = np.zeros_like(rewards)
    last_gae = np.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(n_steps)):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * not_done - values[t]
        last_gae = delta + gamma * gae_lambda * not_done * last_gae
        advantages[t] = last_gae
        next_values = values[t]
    return advantages, advantages + values


class RolloutBuffer:
    """``n_steps`` steps of ``n_envs`` envs: observations, actions, rewards, dones, values, log-probs."""

    def __init__(
        self,
        n_steps: int,
        n_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: np.dtype | type,
        *,
        obs_dtype: np.dtype | type = np.float32,
    ) -> None:
        self.n_steps = n_steps
        self.n_envs = n_envs
        self.obs = np.zeros((n_steps, n_envs, *obs_shape), dtype=obs_dtype)  # uint8 images stay uint8
        self.actions = np.zeros((n_steps, n_envs, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros((n_steps, n_envs), dtype=np.float32)
        self.dones = np.zeros((n_steps, n_envs), dtype=np.float32)
        self.values = np.zeros((n_steps, n_envs), dtype=np.float32)
        self.log_probs = np.zeros((n_steps, n_envs), dtype=np.float32)
        self.masks: np.ndarray | None = None  # (n_steps, n_envs, mask size) bool, with action masks
        self.pos = 0

    @property
    def full(self) -> bool:
        """True when ``n_steps`` steps have been stored."""
        return self.pos == self.n_steps

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        values: np.ndarray,
        log_probs: np.ndarray,
        masks: np.ndarray | None = None,
    ) -> None:
        """Store one step of every env (``masks``: the action masks it decided under, if any)."""
        t = self.pos
        self.obs[t] = obs
        self.actions[t] = actions
        self.rewards[t] = rewards
        self.dones[t] = dones
        self.values[t] = values
        self.log_probs[t] = log_probs
        if masks is not None:
            if self.masks is None:
                self.masks = np.ones((self.n_steps, self.n_envs, np.shape(masks)[-1]), dtype=bool)
            self.masks[t] = masks
        self.pos = t + 1

    def reset(self) -> None:
        """Start filling from the beginning again."""
        self.pos = 0
