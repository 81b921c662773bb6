"""What the on-policy agents (PPO, A2C) share, written once.

Separate policy and value networks; sampling that caches each step's values and log-probabilities
for ``observe``; rollout storage with time-limit bootstrapping; and GAE over a full rollout. An
algorithm built on :class:`ActorCritic` adds its config, its optimizer and its loss (``update``).

The config of such an agent has the fields ``n_steps``, ``gamma``, ``gae_lambda``, ``net_arch``,
``activation`` and ``log_std_init``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..memory.rollout import RolloutBuffer, compute_gae
from .base import Agent, Transitions
from .networks import gaussian_policy_terms, mlp

__all__ = ["ActorCritic", "RolloutBatch"]


class RolloutBatch(NamedTuple):
    """A full rollout flattened over ``(n_steps * n_envs)``, with its advantages and returns."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: np.ndarray  # the critic's estimates when acting, for explained variance
    returns_np: np.ndarray


class ActorCritic(Agent):
    """Base of the on-policy agents: networks, acting, storing a rollout, advantages."""

    # -- networks -----------------------------------------------------------------------------

    def _build_actor_critic(self) -> list[nn.Parameter]:
        """Create the policy and value networks (and the Gaussian policy's log std); returns
        every trainable parameter, for the optimizer."""
        c = self.config
        obs_dim = int(np.prod(self.obs_shape))
        n_out = int(self.action_space.n) if self.discrete else int(np.prod(self.action_space.shape))
        self.actor = mlp(obs_dim, c.net_arch, n_out, activation=c.activation, ortho_init=True, output_gain=0.01)
        self.critic = mlp(obs_dim, c.net_arch, 1, activation=c.activation, ortho_init=True, output_gain=1.0)
        params = list(self.actor.parameters()) + list(self.critic.parameters())
        self.log_std: nn.Parameter | None = None
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((n_out,), float(c.log_std_init)))
            params.append(self.log_std)
        self._params = params
        self.rollout: RolloutBuffer | None = None
        # What act() computed for the step observe() stores next (one row per env). Parallel
        # runners whose workers act set these too, so they keep the _last_ prefix.
        self._last_values: np.ndarray | None = None
        self._last_log_probs: np.ndarray | None = None
        return params

    @property
    def networks(self) -> dict[str, nn.Module]:
        nets = super().networks
        if self.log_std is not None:
            holder = nn.Module()  # a module, so the log std saves and loads like the networks
            holder.log_std = self.log_std
            nets["policy_log_std"] = holder
        return nets

    def _policy_terms(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` under the current policy, and its entropies."""
        return gaussian_policy_terms(self.actor(obs), self.log_std, actions, self.discrete)

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        x = torch.from_numpy(obs)
        out = self.actor(x)
        if self.discrete:
            if deterministic:
                return out.argmax(-1).numpy()
            log_p = F.log_softmax(out, dim=-1)
            actions = torch.multinomial(log_p.exp(), 1, generator=self.generator).squeeze(1)
            chosen = log_p.gather(1, actions.unsqueeze(1)).squeeze(1)
        else:
            if deterministic:
                return np.clip(out.numpy(), self.action_low, self.action_high)
            assert self.log_std is not None
            noise = torch.randn(out.shape, generator=self.generator)
            actions = out + self.log_std.exp() * noise
            chosen = (-0.5 * noise.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # Cache what observe() stores with this step (the loop always calls act then observe).
        self._last_values = self.critic(x).squeeze(-1).numpy()
        self._last_log_probs = chosen.numpy()
        return actions.numpy()

    # -- storing ------------------------------------------------------------------------------

    def observe(self, transitions: Transitions) -> None:
        obs, actions, rewards, next_obs, terminated, truncated = transitions
        n_envs = len(rewards)
        if self.rollout is None or self.rollout.n_envs != n_envs:
            action_shape = () if self.discrete else self.action_space.shape
            dtype = np.int64 if self.discrete else np.float32
            self.rollout = RolloutBuffer(self.config.n_steps, n_envs, self.obs_shape, action_shape, dtype)
        if self._last_values is None or self._last_log_probs is None or len(self._last_values) != n_envs:
            raise RuntimeError(f"{self.algorithm}.observe() must follow act() on the same observations")
        rewards = rewards.astype(np.float32, copy=True)
        cut = truncated & ~terminated
        if cut.any():
            # A time limit is not a real end: bootstrap from the value of the last observation.
            with torch.no_grad():
                final_values = self.critic(torch.from_numpy(next_obs[cut])).squeeze(-1).numpy()
            rewards[cut] += self.config.gamma * final_values
        dones = (terminated | truncated).astype(np.float32)
        self.rollout.add(obs, actions, rewards, dones, self._last_values, self._last_log_probs)
        self._next_obs = next_obs
        self.num_timesteps += n_envs

    def ready(self) -> bool:
        return self.rollout is not None and self.rollout.full

    # -- learning helpers ---------------------------------------------------------------------

    def _rollout_batch(self) -> RolloutBatch:
        """The full rollout as flat tensors with GAE advantages and returns."""
        c = self.config
        rollout = self.rollout
        assert rollout is not None and rollout.full, "update() called before a rollout was full"
        with torch.no_grad():
            last_values = self.critic(torch.from_numpy(self._next_obs)).squeeze(-1).numpy()
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.dones, last_values, c.gamma, c.gae_lambda
        )
        return RolloutBatch(
            obs=torch.from_numpy(rollout.obs.reshape(-1, *self.obs_shape)),
            actions=torch.from_numpy(rollout.actions.reshape(-1, *rollout.actions.shape[2:])),
            log_probs=torch.from_numpy(rollout.log_probs.reshape(-1)),
            advantages=torch.from_numpy(advantages.reshape(-1)),
            returns=torch.from_numpy(returns.reshape(-1)),
            values=rollout.values.copy(),
            returns_np=returns,
        )

    def _end_update(self, metrics: dict[str, float]) -> dict[str, float]:
        """Start the next rollout, count the update, add the metrics every on-policy agent reports."""
        assert self.rollout is not None
        self.rollout.reset()
        self.num_updates += 1
        if self.log_std is not None:
            metrics["policy_std"] = float(self.log_std.detach().exp().mean())
        return metrics

    @staticmethod
    def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
        """1 - Var(returns - values) / Var(returns): how much of the returns the critic explains."""
        var_returns = float(np.var(returns))
        return math.nan if var_returns == 0 else 1.0 - float(np.var(returns - values)) / var_returns
