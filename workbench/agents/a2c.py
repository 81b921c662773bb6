"""A2C: synchronous advantage actor-critic (Mnih et al. 2016), on several envs at once.

Reads top to bottom: hyperparameters, then the update. Networks, acting, rollout storage and GAE
are shared with PPO in ``on_policy.py``.
Defaults are Stable-Baselines3's (RMSprop, 5 steps per env, no advantage normalization) with
rl-baselines3-zoo's CartPole-v1 choice of 8 envs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..schedules import as_schedule
from ..validation import checked, flag, number
from .base import register
from .networks import make_adam
from .on_policy import OnPolicyAgent, OnPolicyConfig, RolloutBatch

__all__ = ["A2C", "A2CConfig", "RMSpropTFLike"]


@dataclass
class A2CConfig(OnPolicyConfig):
    """A2C hyperparameters (defaults: Stable-Baselines3, 8 envs); the shared ones are
    :class:`OnPolicyConfig`'s."""

    use_rms_prop: bool = checked(True, flag())
    """RMSprop (alpha 0.99) as in the A3C paper; False uses Adam."""
    rms_prop_eps: float = checked(1e-5, number(0, min_open=True))
    """RMSprop epsilon."""
    rms_prop_tf_like: bool = checked(False, flag())
    """With ``use_rms_prop``: Stable-Baselines3's ``RMSpropTFLike`` (TensorFlow's RMSprop, which the
    zoo's Atari A2C uses) instead of PyTorch's: epsilon inside the square root, squared averages
    starting at one (:class:`RMSpropTFLike`)."""


class RMSpropTFLike(torch.optim.Optimizer):
    """RMSprop as TensorFlow (and the original Stable-Baselines) computes it, as SB3's
    ``sb2_compat.RMSpropTFLike`` does without momentum or centering: ``v = alpha * v + (1 - alpha) * g**2``
    with ``v`` starting at one, then ``p -= lr * g / sqrt(v + eps)``. PyTorch's RMSprop starts ``v``
    at zero and divides by ``sqrt(v) + eps``, so its first steps are about ``1 / sqrt(1 - alpha)`` = 10
    times larger; the zoo tuned its Atari A2C with this one."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        """One update of every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            alpha, eps, lr = group["alpha"], group["eps"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(())
                    state["square_avg"] = torch.ones_like(p)
                state["step"] += 1
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).addcmul_(p.grad, p.grad, value=1 - alpha)
                p.addcdiv_(p.grad, square_avg.add(eps).sqrt_(), value=-lr)
        return loss


@register
class A2C(OnPolicyAgent):
    """Advantage actor-critic for Discrete, MultiDiscrete, MultiBinary and Box action spaces, and Dict /
    Tuple ones of those (one head per leaf, hybrid actions: docs/actions.md), with action masks honoured for
    the discrete heads, on several envs.

    Example::

        agent = wb.A2C("CartPole-v1")
        wb.Session(agent, "CartPole-v1").run(steps=500_000)
    """

    Config = A2CConfig
    default_plots = ("episode_reward", "loss")
    config: A2CConfig

    def _build(self) -> None:
        c = self.config
        params = self._build_actor_critic()
        self._lr = as_schedule(c.learning_rate)
        if c.use_rms_prop and c.rms_prop_tf_like:
            self.optimizer: torch.optim.Optimizer = RMSpropTFLike(
                params, lr=self._lr(0.0), alpha=0.99, eps=c.rms_prop_eps
            )
        elif c.use_rms_prop:
            self.optimizer = torch.optim.RMSprop(params, lr=self._lr(0.0), alpha=0.99, eps=c.rms_prop_eps, foreach=True)
        else:
            self.optimizer = make_adam(params, lr=self._lr(0.0))

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        batch = self._rollout_batch()
        lr = self._scheduled_lr()
        metrics = self._gradient_step(batch)
        metrics["learning_rate"] = lr
        metrics["explained_variance"] = self.explained_variance(batch.values, batch.returns_np)
        return self._end_update(metrics, batch)

    def _gradient_step(self, batch: RolloutBatch) -> dict[str, float]:
        """One step on ``-mean(A log pi(a|s)) - ent_coef * entropy + vf_coef * mean((V(s) - R)^2)`` over
        the whole rollout; returns the losses."""
        advantages = self._normalized(batch.advantages)
        log_prob, entropy = self._policy_terms(batch.obs, batch.actions, batch.masks)
        values = self._values(batch.obs)
        policy_loss = -(advantages * log_prob).mean()
        value_loss, entropy_mean, loss = self._actor_critic_step(policy_loss, entropy, values, batch.returns)
        loss_v, policy_loss_v, value_loss_v, entropy_v = (
            torch.stack([loss, policy_loss, value_loss, entropy_mean]).detach().tolist()
        )
        return {"loss": loss_v, "policy_loss": policy_loss_v, "value_loss": value_loss_v, "entropy": entropy_v}
