"""APPO: asynchronous PPO, PPO's clipped surrogate on V-trace advantages (RLlib's and Sample Factory's APPO).

Reads top to bottom: hyperparameters, then the update. The V-trace targets are IMPALA's
(:func:`workbench.agents.impala.vtrace`), computed once per rollout with the learner's weights before
the epochs; each minibatch then takes one step of PPO's clipped objective (``workbench.agents.ppo``'s
:func:`~workbench.agents.ppo.clipped_step`, written once), its probability ratio taken against the
behaviour policy's log-probabilities that travelled with the steps in their ``extras``. Defaults: the
PPO settings for CartPole-v1 (rl-baselines3-zoo's: ``n_steps=32``, ``gamma=0.98``, ``lambda=0.8``,
``batch_size=256``, learning rate 1e-3 and clip 0.2 both decaying linearly to 0) with 10 epochs a rollout
instead of 20: the learner must keep up with envs that do not wait for it (RLlib's APPO takes one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..schedules import Schedule, as_schedule, linear
from ..validation import checked, integer
from .base import register
from .impala import IMPALA, IMPALAConfig
from .networks import make_adam
from .ppo import ClippedSurrogateConfig, clipped_epochs, clipped_metrics, clipped_step

__all__ = ["APPO", "APPOConfig"]


@dataclass
class APPOConfig(ClippedSurrogateConfig, IMPALAConfig):
    """APPO hyperparameters; the V-trace ones (``rho_bar``, ``c_bar``, ``max_policy_lag``) are
    :class:`~workbench.agents.impala.IMPALAConfig`'s."""

    gamma: float = 0.98
    gae_lambda: float = 0.8
    learning_rate: float | Schedule = field(default_factory=lambda: linear(1e-3, 0.0))
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True

    n_epochs: int = checked(10, integer(min=1), live=True)
    """Passes over each rollout."""


@register
class APPO(IMPALA):
    """Asynchronous PPO: the clipped surrogate on V-trace advantages, for the action spaces PPO takes,
    learning while its envs step (``asynchronous``).

    Example::

        agent = wb.APPO("CartPole-v1")
        wb.Session(agent, "CartPole-v1", num_workers=2, backend="local").run(steps=100_000)
    """

    Config = APPOConfig
    config: APPOConfig  # type: ignore[assignment]

    def _build(self) -> None:
        params = self._build_actor_critic()
        self._lr = as_schedule(self.config.learning_rate)
        self._clip = as_schedule(self.config.clip_range)
        self.optimizer = make_adam(params, lr=self._lr(0.0), eps=1e-5)

    def _update(self) -> dict[str, float]:
        c = self.config
        batch = self._vtrace_batch()
        n = batch.obs.shape[0]
        lr = self._scheduled_lr()
        clip = self._clip(self.progress)

        def minibatch(mb: torch.Tensor) -> torch.Tensor:
            obs = batch.obs[mb]
            masks = None if batch.masks is None else batch.masks[mb]
            log_prob, entropy = self._policy_terms(obs, batch.actions[mb], masks)
            values = self._values(obs)
            return clipped_step(
                self,
                log_prob,
                entropy,
                values,
                batch.advantages[mb],
                batch.behaviour_log_probs[mb],
                batch.targets[mb],
                clip,
            )

        metrics = clipped_metrics(clipped_epochs(self, n, min(c.batch_size, n), minibatch), clip, lr)
        return self._end_vtrace_update(metrics, batch)
