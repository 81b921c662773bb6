"""IQL: implicit Q-learning (Kostrikov et al. 2022), for continuous and discrete actions.

IQL never evaluates an action the data does not hold. A value network learns an upper expectile
of the logged actions' Q-values (``expectile`` > 0.5 approaches the best in-data action's value), the
Q-networks learn ``r + gamma * V(s')``, and the policy is extracted by advantage-weighted regression:
the logged actions are imitated with weights ``exp(beta * (Q(s, a) - V(s)))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..validation import checked, number
from .base import register
from .networks import EnsembleMLP, drawn_like, make_adam, mlp, multinomial
from .offline import OfflineAgent, OfflineBatch, OfflineConfig
from .updates import polyak_update

__all__ = ["IQL", "IQLConfig"]


class TanhMeanGaussian(nn.Module):
    """A Gaussian policy whose mean is squashed into [-1, 1], with a state-independent std (IQL's)."""

    def __init__(self, obs_dim: int, net_arch: tuple[int, ...], act_dim: int) -> None:
        super().__init__()
        self.mean = mlp(obs_dim, net_arch, act_dim)
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action, in [-1, 1]."""
        return torch.tanh(self.mean(obs))

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of ``actions`` (in [-1, 1])."""
        log_std = self.log_std.clamp(-5.0, 2.0)
        z = (actions - self(obs)) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


@dataclass
class IQLConfig(OfflineConfig):
    """IQL hyperparameters (defaults: the paper's locomotion values); the shared ones are
    :class:`OfflineConfig`'s. Measured with them (docs/offline.md): 5000 gradient steps on 20k Pendulum
    transitions of a half-trained SAC (behaviour -533.7) play -530 to -405 over 5 seeds."""

    expectile: float = checked(0.7, number(0.5, 1, max_open=True))
    """Expectile of the value network (0.5: the mean, SARSA-like; toward 1: the best in-data action)."""
    beta: float = checked(3.0, number(0))
    """Inverse temperature of advantage-weighted regression (0: behaviour cloning)."""
    max_weight: float = checked(100.0, number(0, min_open=True))
    """Upper clip of the regression weights."""
    tau: float = checked(0.005, number(0, 1, min_open=True))
    """Target Q-network update rate, every gradient step."""
    actor_lr: float = checked(3e-4, number(0, min_open=True))
    """The policy's learning rate."""


@register
class IQL(OfflineAgent):
    """Implicit Q-learning (offline) for Box and Discrete action spaces.

    Example::

        agent = wb.IQL(dataset=ds)
        wb.Session(agent, dataset=ds, eval_env="Pendulum-v1", eval_every=5000).run(steps=50_000)
    """

    Config = IQLConfig
    default_plots = ("eval_reward", "critic_loss", "actor_loss")
    network_names = ("value", "critic", "critic_target", "actor")
    optimizer_names = ("optimizer", "actor_optimizer")
    config: IQLConfig

    def _build(self) -> None:
        c = self.config
        obs_dim = int(np.prod(self.obs_shape))
        self.value = mlp(obs_dim, c.net_arch, 1)
        if self.discrete:
            n = int(self.action_space.n)
            self.critic = EnsembleMLP(2, obs_dim, c.net_arch, n)
            self.critic_target = EnsembleMLP(2, obs_dim, c.net_arch, n)
            self.actor: nn.Module = mlp(obs_dim, c.net_arch, n)
        else:
            act_dim = int(np.prod(self.action_space.shape))
            self.critic = EnsembleMLP(2, obs_dim + act_dim, c.net_arch, 1)
            self.critic_target = EnsembleMLP(2, obs_dim + act_dim, c.net_arch, 1)
            self.actor = TanhMeanGaussian(obs_dim, c.net_arch, act_dim)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        self.optimizer = make_adam([*self.value.parameters(), *self.critic.parameters()], lr=c.learning_rate)
        self.actor_optimizer = make_adam(self.actor.parameters(), lr=c.actor_lr)

    def _q(self, net: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Both Q-networks' values of ``actions``, shape ``(2, batch)``."""
        if self.discrete:
            idx = actions.long().view(1, -1, 1).expand(2, -1, 1)
            return net(obs).gather(2, idx).squeeze(-1)
        return net(torch.cat([obs, actions], -1)).squeeze(-1)

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        x = self._tensor(obs)
        if self.discrete:
            logits = self.actor(x)
            if deterministic:
                return self._host(logits.argmax(-1))
            return self._host(multinomial(torch.softmax(logits, -1), self.generator))
        mean = self.actor(x)
        if not deterministic:
            std = self.actor.log_std.clamp(-5.0, 2.0).exp()
            noise = drawn_like(torch.randn(mean.shape, generator=self.generator), mean)
            mean = (mean + std * noise).clamp(-1.0, 1.0)
        return self._scale_action(self._host(mean))

    def _learn(self, batch: OfflineBatch) -> dict[str, float]:
        c = self.config
        actions = batch.actions if self.discrete else batch.actions.float()
        with torch.no_grad():
            q_target = self._q(self.critic_target, batch.obs, actions).min(0).values
            next_v = self.value(batch.next_obs).squeeze(-1)
            target = batch.rewards + c.gamma * (1.0 - batch.dones) * next_v
        v = self.value(batch.obs).squeeze(-1)
        diff = q_target - v
        weight = torch.abs(c.expectile - (diff < 0).float())
        value_loss = (weight * diff.pow(2)).mean()
        q = self._q(self.critic, batch.obs, actions)
        q_loss = 0.5 * (q - target).pow(2).mean(1).sum()
        self._step(self.optimizer, value_loss + q_loss)

        advantage = q_target - v.detach()
        weights = torch.exp(c.beta * advantage).clamp(max=c.max_weight)
        if self.discrete:
            log_prob = -F.cross_entropy(self.actor(batch.obs), actions.long(), reduction="none")
        else:
            log_prob = self.actor.log_prob(batch.obs, actions)
        actor_loss = -(weights * log_prob).mean()
        self._step(self.actor_optimizer, actor_loss)
        polyak_update(self.critic_target, self.critic, c.tau)
        return {
            "value_loss": float(value_loss.detach()),
            "critic_loss": float(q_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "q_mean": float(q.detach().mean()),
        }
