"""PPO: proximal policy optimization with the clipped objective (Schulman et al. 2017).

Reads top to bottom: hyperparameters, networks, acting, storing a rollout, the update.
Defaults are rl-baselines3-zoo's tuned values for CartPole-v1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..memory.rollout import RolloutBuffer, compute_gae
from ..schedules import Schedule, as_schedule, linear
from .base import Agent, Transitions, register
from .networks import make_adam, mlp

__all__ = ["PPO", "PPOConfig"]


@dataclass
class PPOConfig:
    """PPO hyperparameters (defaults: rl-baselines3-zoo, CartPole-v1)."""

    n_envs: int = 8
    """Envs stepped together (copies are made when the env is an id or a factory)."""
    n_steps: int = 32
    """Steps per env in each rollout."""
    batch_size: int = 256
    """Minibatch size for the update."""
    n_epochs: int = 20
    """Passes over each rollout."""
    gamma: float = 0.98
    """Discount factor."""
    gae_lambda: float = 0.8
    """GAE lambda: bias/variance trade-off of the advantage estimate."""
    learning_rate: float | Schedule = field(default_factory=lambda: linear(1e-3, 0.0))
    """Adam learning rate, a number or a schedule of training progress."""
    clip_range: float | Schedule = field(default_factory=lambda: linear(0.2, 0.0))
    """PPO clip epsilon for the probability ratio."""
    ent_coef: float = 0.0
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    normalize_advantage: bool = True
    """Normalize advantages within each minibatch."""
    target_kl: float | None = None
    """Stop the epochs early when the approximate KL exceeds this."""
    net_arch: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and of the (separate) value network."""
    activation: str = "tanh"
    """Hidden activation."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""


@register
class PPO(Agent):
    """Proximal policy optimization for Discrete and Box action spaces, on several envs.

    Example::

        agent = wb.PPO("CartPole-v1")              # zoo-tuned defaults
        wb.Session(agent, "CartPole-v1").run(steps=100_000)
    """

    Config = PPOConfig
    action_spaces = (spaces.Discrete, spaces.Box)
    config: PPOConfig

    # -- networks -----------------------------------------------------------------------------

    def _build(self) -> None:
        c = self.config
        obs_dim = int(np.prod(self.obs_shape))
        if self.discrete:
            n_out = int(self.action_space.n)
        else:
            n_out = int(np.prod(self.action_space.shape))
        self.actor = mlp(obs_dim, c.net_arch, n_out, activation=c.activation, ortho_init=True, output_gain=0.01)
        self.critic = mlp(obs_dim, c.net_arch, 1, activation=c.activation, ortho_init=True, output_gain=1.0)
        params = list(self.actor.parameters()) + list(self.critic.parameters())
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((n_out,), float(c.log_std_init)))
            params.append(self.log_std)
        self._lr = as_schedule(c.learning_rate)
        self._clip = as_schedule(c.clip_range)
        self.optimizer = make_adam(params, lr=self._lr(0.0), eps=1e-5)
        self._params = params
        self.rollout: RolloutBuffer | None = None
        self._last_values: np.ndarray | None = None
        self._last_log_probs: np.ndarray | None = None

    @property
    def networks(self) -> dict[str, nn.Module]:
        nets = super().networks
        if not self.discrete:
            holder = nn.Module()
            holder.log_std = self.log_std
            nets["policy_log_std"] = holder
        return nets

    def _distribution_terms(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` and entropies, without torch.distributions overhead."""
        out = self.actor(obs)
        if self.discrete:
            log_p = F.log_softmax(out, dim=-1)
            chosen = log_p.gather(1, actions.long().unsqueeze(1)).squeeze(1)
            entropy = -(log_p.exp() * log_p).sum(-1)
            return chosen, entropy
        log_std = self.log_std.expand_as(out)
        z = (actions - out) / log_std.exp()
        log_prob = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return log_prob, entropy

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
            std = self.log_std.exp()
            noise = torch.randn(out.shape, generator=self.generator)
            actions = out + std * noise
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
        if self._last_values is None or len(self._last_values) != n_envs:
            raise RuntimeError("PPO.observe() must follow act() on the same observations")
        rewards = rewards.astype(np.float32, copy=True)
        if truncated.any():
            # A time limit is not a real end: bootstrap from the value of the last observation.
            with torch.no_grad():
                final_values = self.critic(torch.from_numpy(next_obs[truncated])).squeeze(-1).numpy()
            rewards[truncated & ~terminated] += self.config.gamma * final_values[~terminated[truncated]]
        dones = (terminated | truncated).astype(np.float32)
        self.rollout.add(obs, actions, rewards, dones, self._last_values, self._last_log_probs)
        self._next_obs = next_obs
        self.num_timesteps += n_envs

    def ready(self) -> bool:
        return self.rollout is not None and self.rollout.full

    # -- learning -----------------------------------------------------------------------------

    def update(self) -> dict[str, float]:
        c = self.config
        rollout = self.rollout
        assert rollout is not None and rollout.full, "update() called before a rollout was full"
        with torch.no_grad():
            last_values = self.critic(torch.from_numpy(self._next_obs)).squeeze(-1).numpy()
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.dones, last_values, c.gamma, c.gae_lambda
        )
        b_obs = torch.from_numpy(rollout.obs.reshape(-1, *self.obs_shape))
        b_actions = torch.from_numpy(rollout.actions.reshape(-1, *rollout.actions.shape[2:]))
        b_log_probs = torch.from_numpy(rollout.log_probs.reshape(-1))
        b_advantages = torch.from_numpy(advantages.reshape(-1))
        b_returns = torch.from_numpy(returns.reshape(-1))
        n = b_obs.shape[0]
        batch_size = min(c.batch_size, n)

        progress = self.progress
        lr = self._lr(progress)
        clip = self._clip(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        stats = torch.zeros(6)  # policy, value, entropy, kl, clip fraction, total loss
        n_minibatches = 0
        for _ in range(c.n_epochs):
            perm = torch.randperm(n, generator=self.generator)
            epoch_kl = 0.0
            for start in range(0, n, batch_size):
                mb = perm[start : start + batch_size]
                log_prob, entropy = self._distribution_terms(b_obs[mb], b_actions[mb])
                values = self.critic(b_obs[mb]).squeeze(-1)
                adv = b_advantages[mb]
                if c.normalize_advantage and len(mb) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                log_ratio = log_prob - b_log_probs[mb]
                ratio = log_ratio.exp()
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                value_loss = F.mse_loss(values, b_returns[mb])
                entropy_mean = entropy.mean()
                loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss

                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self._params, c.max_grad_norm, foreach=True)
                self.optimizer.step()

                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()
                    clipped = ((ratio - 1).abs() > clip).float().mean()
                    stats += torch.stack(
                        [policy_loss, value_loss, entropy_mean, approx_kl, clipped, loss]
                    ).detach()
                n_minibatches += 1
                epoch_kl = float(approx_kl)
            if c.target_kl is not None and epoch_kl > 1.5 * c.target_kl:
                break

        rollout.reset()
        self.num_updates += 1
        policy_loss, value_loss, entropy, kl, clip_fraction, loss = (stats / n_minibatches).tolist()
        var_returns = float(np.var(returns))
        explained = math.nan if var_returns == 0 else 1.0 - float(np.var(returns - rollout.values)) / var_returns
        metrics = {
            "loss": loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": kl,
            "clip_fraction": clip_fraction,
            "clip_range": clip,
            "learning_rate": lr,
            "explained_variance": explained,
        }
        if not self.discrete:
            metrics["policy_std"] = float(self.log_std.detach().exp().mean())
        return metrics
