"""APPO: asynchronous PPO, PPO's clipped surrogate on V-trace advantages (RLlib's and Sample Factory's APPO).

Reads top to bottom: hyperparameters, then the update. The V-trace targets are IMPALA's
(:func:`workbench.agents.impala.vtrace`), computed once per rollout with the learner's weights before
the epochs; then PPO's own update runs on them (``workbench.agents.ppo``'s
:func:`~workbench.agents.ppo.clipped_update`, written once), its probability ratio taken against the
behaviour policy's log-probabilities that travelled with the steps in their ``extras``. Defaults: the
PPO settings for CartPole-v1 (rl-baselines3-zoo's: ``n_steps=32``, ``gamma=0.98``, ``lambda=0.8``,
``batch_size=256``, learning rate 1e-3 and clip 0.2 both decaying linearly to 0) with 10 epochs a rollout
instead of 20: the learner must keep up with envs that do not wait for it (RLlib's APPO takes one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..schedules import Schedule, linear
from ..validation import checked, integer
from .base import register
from .impala import IMPALA, IMPALAConfig
from .ppo import ClippedSurrogateConfig, build_clipped, clipped_update

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
        build_clipped(self)

    def _update(self) -> dict[str, float]:
        batch = self._vtrace_batch()
        metrics = clipped_update(
            self, batch.obs, batch.actions, batch.masks, batch.advantages, batch.behaviour_log_probs, batch.targets
        )
        return self._end_vtrace_update(metrics, batch)
