"""A2C: synchronous advantage actor-critic (Mnih et al. 2016), on several envs at once.

Reads top to bottom: hyperparameters, then the update. Networks, acting, rollout storage and GAE
are shared with PPO in ``on_policy.py``.
Defaults are Stable-Baselines3's (RMSprop, 5 steps per env, no advantage normalization) with
rl-baselines3-zoo's CartPole-v1 choice of 8 envs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from ..schedules import as_schedule
from ..validation import checked, flag, number
from .base import register
from .flat_rmsprop import FlatRMSprop
from .networks import make_adam
from .numpy_mlp import NumpyMLP
from .on_policy import OnPolicyAgent, OnPolicyConfig, RolloutBatch, categorical_numpy, run_layers

__all__ = ["A2C", "A2CConfig"]


@dataclass
class A2CConfig(OnPolicyConfig):
    """A2C hyperparameters (defaults: Stable-Baselines3, 8 envs); the shared ones are
    :class:`OnPolicyConfig`'s."""

    use_rms_prop: bool = checked(True, flag())
    """RMSprop (alpha 0.99) as in the A3C paper; False uses Adam."""
    rms_prop_eps: float = checked(1e-5, number(0, min_open=True))
    """RMSprop epsilon."""


@register
class A2C(OnPolicyAgent):
    """Advantage actor-critic for Discrete, MultiDiscrete, MultiBinary and Box action spaces (action
    masks honoured for Discrete and MultiDiscrete), on several envs.

    Example::

        agent = wb.A2C("CartPole-v1")
        wb.Session(agent, "CartPole-v1").run(steps=500_000)
    """

    Config = A2CConfig
    action_spaces = (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)
    config: A2CConfig

    def _build(self) -> None:
        c = self.config
        params = self._build_actor_critic()
        self._lr = as_schedule(c.learning_rate)
        if c.use_rms_prop:
            self.optimizer: torch.optim.Optimizer = torch.optim.RMSprop(
                params, lr=self._lr(0.0), alpha=0.99, eps=c.rms_prop_eps, foreach=True
            )
            self._flat_rmsprop = FlatRMSprop(self.optimizer)
        else:
            self.optimizer = make_adam(params, lr=self._lr(0.0))

    # -- learning -----------------------------------------------------------------------------

    def update(self) -> dict[str, float]:
        batch = self._rollout_batch()
        lr = self._scheduled_lr()
        nets = self._numpy_update_nets(batch)
        if nets is not None:
            metrics = self._gradient_step_in_numpy(batch, *nets)
        else:
            metrics = self._gradient_step_in_torch(batch)
        metrics["learning_rate"] = lr
        metrics["explained_variance"] = self.explained_variance(batch.values, batch.returns_np)
        return self._end_update(metrics, batch)

    def _gradient_step_in_torch(self, batch: RolloutBatch) -> dict[str, float]:
        advantages = self._normalized(batch.advantages)
        log_prob, entropy = self._policy_terms(batch.obs, batch.actions, batch.masks)
        values = run_layers(self.critic, batch.obs).squeeze(-1)
        policy_loss = -(advantages * log_prob).mean()
        value_loss, entropy_mean, loss = self._actor_critic_step(policy_loss, entropy, values, batch.returns)
        loss_v, policy_loss_v, value_loss_v, entropy_v = (
            torch.stack([loss, policy_loss, value_loss, entropy_mean]).detach().tolist()
        )
        return {"loss": loss_v, "policy_loss": policy_loss_v, "value_loss": value_loss_v, "entropy": entropy_v}

    def _gradient_step_in_numpy(self, batch: RolloutBatch, actor: NumpyMLP, critic: NumpyMLP) -> dict[str, float]:
        """The step of :meth:`_gradient_step_in_torch` with the loss and its gradient written out in
        numpy (the same formulas, equal to float32 rounding), then the same clipping and optimizer
        step in torch. The loss is ``policy_loss - ent_coef * entropy + vf_coef * value_loss`` with
        ``policy_loss = -mean(A * log pi(a|s))`` and ``value_loss = mean((V(s) - R)^2)``."""
        c = self.config
        obs = batch.obs.numpy()
        actions = batch.actions.numpy().reshape(-1)
        returns = batch.returns.numpy()
        advantages = self._normalized_numpy(batch.advantages.numpy())
        n = len(obs)
        logits, actor_kept = actor.forward_keeping(obs)
        values, critic_kept = critic.forward_keeping(obs)
        log_prob, entropy, probs, grad_logits = categorical_numpy(logits, actions, c.ent_coef)
        errors = values[:, 0] - returns
        policy_loss = -float((advantages * log_prob).mean())
        value_loss = float((errors * errors).mean())
        entropy_mean = float(entropy.mean())
        # d policy_loss / d logits = (A/n)(p - onehot(a)); d value_loss / d V = 2 (V - R) / n.
        scaled = advantages / np.float32(n)
        grad_logits += probs * scaled[:, None]
        grad_logits[np.arange(n), actions] -= scaled
        grad_values = (np.float32(2 * c.vf_coef / n) * errors)[:, None]
        self._numpy_step((actor, actor_kept, grad_logits), (critic, critic_kept, grad_values))
        loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss
        return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy_mean}
