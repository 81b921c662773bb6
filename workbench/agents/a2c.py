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
from .on_policy import OnPolicyAgent, OnPolicyConfig, RolloutBatch, run_layers

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

    def _numpy_update_nets(self, batch: RolloutBatch) -> tuple[NumpyMLP, NumpyMLP] | None:
        """The actor and critic as numpy passes when this update's gradient can be written out in
        numpy: one Discrete head (no masks) on plain, separate MLPs with no hooks (the acting test,
        :meth:`_numpy_nets`), float32 observations, every parameter trained and hook-free. None
        sends the update through autograd; the choice never depends on the run's progress, so a
        resumed run computes its gradients as an uninterrupted one does."""
        if self.action_kind != "discrete" or batch.masks is not None or batch.obs.dtype != torch.float32:
            return None
        nets = self._numpy_nets()
        if nets is None:
            return None
        for p in self._params:
            if not p.requires_grad or p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None):
                return None
        return nets

    def _gradient_step_in_numpy(self, batch: RolloutBatch, actor: NumpyMLP, critic: NumpyMLP) -> dict[str, float]:
        """The step of :meth:`_gradient_step_in_torch` with the loss and its gradient written out in
        numpy (the same formulas, equal to float32 rounding), then the same clipping and optimizer
        step in torch. The loss is ``policy_loss - ent_coef * entropy + vf_coef * value_loss`` with
        ``policy_loss = -mean(A * log pi(a|s))`` and ``value_loss = mean((V(s) - R)^2)``."""
        c = self.config
        obs = batch.obs.numpy()
        actions = batch.actions.numpy().reshape(-1)
        returns = batch.returns.numpy()
        advantages = batch.advantages.numpy()
        n = len(obs)
        if c.normalize_advantage and n > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std(ddof=1) + np.float32(1e-8))
        logits, actor_kept = actor.forward_keeping(obs)
        values, critic_kept = critic.forward_keeping(obs)
        shifted = logits - logits.max(axis=1, keepdims=True)
        weights = np.exp(shifted)
        totals = weights.sum(axis=1, keepdims=True)
        log_p = shifted - np.log(totals)
        probs = weights / totals
        rows = np.arange(n)
        entropy = -(probs * log_p).sum(axis=1)
        errors = values[:, 0] - returns
        policy_loss = -float((advantages * log_p[rows, actions]).mean())
        value_loss = float((errors * errors).mean())
        entropy_mean = float(entropy.mean())
        # d loss / d logits: the policy term's (A/n)(p - onehot(a)), the entropy term's
        # (ent_coef/n) p (log p + H); d loss / d value: vf_coef 2 (V - R) / n.
        scaled = advantages / np.float32(n)
        grad_logits = probs * scaled[:, None]
        grad_logits[rows, actions] -= scaled
        if c.ent_coef:
            grad_logits += np.float32(c.ent_coef / n) * probs * (log_p + entropy[:, None])
        grad_values = (np.float32(2 * c.vf_coef / n) * errors)[:, None]
        self._clear_grads()
        for net, kept, grad_out in ((actor, actor_kept, grad_logits), (critic, critic_kept, grad_values)):
            grads = []
            for weight, bias in net.linear_parameters():
                for p in (weight, bias):
                    if p.grad is None:
                        p.grad = torch.empty_like(p)
                grads.append((weight.grad.numpy(), bias.grad.numpy()))
            net.backward(kept, grad_out, grads)
        self._clip_and_step()
        loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss
        return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy_mean}
