"""A2C: synchronous advantage actor-critic (Mnih et al. 2016), on several envs at once.

Reads top to bottom: hyperparameters, networks, acting, storing a rollout, the update.
Defaults are Stable-Baselines3's (RMSprop, 5 steps per env, no advantage normalization) with
rl-baselines3-zoo's CartPole-v1 choice of 8 envs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..memory.rollout import RolloutBuffer, compute_gae
from ..schedules import Schedule, as_schedule
from .base import Agent, AgentConfig, Transitions, register
from .networks import gaussian_policy_terms, make_adam, mlp

__all__ = ["A2C", "A2CConfig"]


@dataclass
class A2CConfig(AgentConfig):
    """A2C hyperparameters (defaults: Stable-Baselines3, 8 envs)."""

    n_envs: int = 8
    """Envs stepped together (copies are made when the env is an id or a factory)."""
    n_steps: int = 5
    """Steps per env in each rollout (one update per rollout)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda (1: plain n-step advantages)."""
    learning_rate: float | Schedule = 7e-4
    """Optimizer learning rate, a number or a schedule of training progress."""
    ent_coef: float = 0.0
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    use_rms_prop: bool = True
    """RMSprop (alpha 0.99) as in the A3C paper; False uses Adam."""
    rms_prop_eps: float = 1e-5
    """RMSprop epsilon."""
    normalize_advantage: bool = False
    """Normalize advantages within each rollout."""
    net_arch: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and of the (separate) value network."""
    activation: str = "tanh"
    """Hidden activation."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""


@register
class A2C(Agent):
    """Advantage actor-critic for Discrete and Box action spaces, on several envs.

    Example::

        agent = wb.A2C("CartPole-v1")
        wb.Session(agent, "CartPole-v1").run(steps=500_000)
    """

    Config = A2CConfig
    action_spaces = (spaces.Discrete, spaces.Box)
    config: A2CConfig

    # -- networks -----------------------------------------------------------------------------

    def _build(self) -> None:
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
        self._lr = as_schedule(c.learning_rate)
        if c.use_rms_prop:
            self.optimizer: torch.optim.Optimizer = torch.optim.RMSprop(
                params, lr=self._lr(0.0), alpha=0.99, eps=c.rms_prop_eps, foreach=True
            )
        else:
            self.optimizer = make_adam(params, lr=self._lr(0.0))
        self.rollout: RolloutBuffer | None = None
        self._last_values: np.ndarray | None = None

    @property
    def networks(self) -> dict[str, nn.Module]:
        nets = super().networks
        if self.log_std is not None:
            holder = nn.Module()
            holder.log_std = self.log_std
            nets["policy_log_std"] = holder
        return nets

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        x = torch.from_numpy(obs)
        out = self.actor(x)
        if self.discrete:
            if deterministic:
                return out.argmax(-1).numpy()
            actions = torch.multinomial(F.softmax(out, dim=-1), 1, generator=self.generator).squeeze(1)
        else:
            if deterministic:
                return np.clip(out.numpy(), self.action_low, self.action_high)
            assert self.log_std is not None
            actions = out + self.log_std.exp() * torch.randn(out.shape, generator=self.generator)
        # Cache the values observe() stores with this step (the loop always calls act then observe).
        self._last_values = self.critic(x).squeeze(-1).numpy()
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
            raise RuntimeError("A2C.observe() must follow act() on the same observations")
        rewards = rewards.astype(np.float32, copy=True)
        cut = truncated & ~terminated
        if cut.any():
            # A time limit is not a real end: bootstrap from the value of the last observation.
            with torch.no_grad():
                rewards[cut] += self.config.gamma * self.critic(torch.from_numpy(next_obs[cut])).squeeze(-1).numpy()
        dones = (terminated | truncated).astype(np.float32)
        self.rollout.add(obs, actions, rewards, dones, self._last_values, np.zeros(n_envs, dtype=np.float32))
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
        b_advantages = torch.from_numpy(advantages.reshape(-1))
        b_returns = torch.from_numpy(returns.reshape(-1))
        if c.normalize_advantage and len(b_advantages) > 1:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)

        lr = self._lr(self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        log_prob, entropy = gaussian_policy_terms(self.actor(b_obs), self.log_std, b_actions, self.discrete)
        values = self.critic(b_obs).squeeze(-1)
        policy_loss = -(b_advantages * log_prob).mean()
        value_loss = F.mse_loss(values, b_returns)
        entropy_mean = entropy.mean()
        loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self._params, c.max_grad_norm, foreach=True)
        self.optimizer.step()

        rollout.reset()
        self.num_updates += 1
        policy_loss_v, value_loss_v, entropy_v, loss_v = torch.stack(
            [policy_loss, value_loss, entropy_mean, loss]
        ).detach().tolist()
        metrics = {
            "loss": loss_v,
            "policy_loss": policy_loss_v,
            "value_loss": value_loss_v,
            "entropy": entropy_v,
            "learning_rate": lr,
        }
        if self.log_std is not None:
            metrics["policy_std"] = float(self.log_std.detach().exp().mean())
        return metrics
