"""A2C: synchronous advantage actor-critic (Mnih et al. 2016), on several envs at once.

Reads top to bottom: hyperparameters, then the update. Networks, acting, rollout storage and GAE
are shared with PPO in ``actor_critic.py``.
Defaults are Stable-Baselines3's (RMSprop, 5 steps per env, no advantage normalization) with
rl-baselines3-zoo's CartPole-v1 choice of 8 envs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..schedules import Schedule, as_schedule
from .actor_critic import ActorCritic
from .base import AgentConfig, register
from .networks import make_adam

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
    ortho_init: bool = True
    """Orthogonal weights (gain √2 hidden, 0.01 policy head, 1 value head); False: PyTorch's default."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    use_sde: bool = False
    """Box actions: state-dependent exploration (gSDE), noise smooth in time instead of per step."""
    sde_sample_freq: int = -1
    """With use_sde, env steps between new noise weights; -1: once per rollout."""


@register
class A2C(ActorCritic):
    """Advantage actor-critic for Discrete and Box action spaces, on several envs.

    Example::

        agent = wb.A2C("CartPole-v1")
        wb.Session(agent, "CartPole-v1").run(steps=500_000)
    """

    Config = A2CConfig
    action_spaces = (spaces.Discrete, spaces.Box)
    config: A2CConfig

    def _build(self) -> None:
        c = self.config
        params = self._build_actor_critic()
        self._lr = as_schedule(c.learning_rate)
        if c.use_rms_prop:
            self.optimizer: torch.optim.Optimizer = torch.optim.RMSprop(
                params, lr=self._lr(0.0), alpha=0.99, eps=c.rms_prop_eps, foreach=True
            )
        else:
            self.optimizer = make_adam(params, lr=self._lr(0.0))

    # -- learning -----------------------------------------------------------------------------

    def update(self) -> dict[str, float]:
        c = self.config
        batch = self._rollout_batch()
        advantages = batch.advantages
        if c.normalize_advantage and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

        lr = self._lr(self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        log_prob, entropy = self._policy_terms(batch.obs, batch.actions)
        values = self.critic(batch.obs).squeeze(-1)
        policy_loss = -(advantages * log_prob).mean()
        value_loss = F.mse_loss(values, batch.returns)
        entropy_mean = entropy.mean()
        loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self._params, c.max_grad_norm, foreach=True)
        self.optimizer.step()

        policy_loss_v, value_loss_v, entropy_v, loss_v = (
            torch.stack([policy_loss, value_loss, entropy_mean, loss]).detach().tolist()
        )
        return self._end_update(
            {
                "loss": loss_v,
                "policy_loss": policy_loss_v,
                "value_loss": value_loss_v,
                "entropy": entropy_v,
                "learning_rate": lr,
                "explained_variance": self.explained_variance(batch.values, batch.returns_np),
            },
            batch,
        )
