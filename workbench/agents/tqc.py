"""TQC: truncated quantile critics, SAC with distributional critics whose largest target quantiles are dropped.

Kuznetsov et al. 2020, "Controlling Overestimation Bias with Truncated Mixture of Continuous Distributional
Quantile Critics".

SAC with distributional critics: each of ``n_critics`` critics gives ``n_quantiles`` quantiles of the return
at the midpoints ``tau_i = (2i + 1) / (2N)``. The target pools every target critic's quantiles of the next
state-action, sorts them and drops the ``top_quantiles_to_drop_per_net * n_critics`` largest: dropping the top
of the mixture controls overestimation more finely than SAC's minimum of two. Each critic learns with the
quantile Huber loss (the one :func:`~workbench.agents.qrdqn.quantile_huber_loss` QR-DQN uses); the actor climbs
the mean of all quantiles.

Shared with SAC (``sac.py``): entropy tuning, the squashed Gaussian (and gSDE), replay, the update schedule.
This file adds the config, the critics' shape, the target and the two losses. Defaults are sb3-contrib's
(``sb3_contrib.TQC``): 2 critics of 25 quantiles, 2 dropped per critic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..memory.replay import ReplayBatch
from ..validation import ArgumentError, checked, integer
from .base import register
from .networks import EnsembleMLP
from .qrdqn import quantile_huber_loss
from .sac import SAC, SACConfig

__all__ = ["TQC", "TQCConfig"]


@dataclass
class TQCConfig(SACConfig):
    """TQC hyperparameters (defaults: sb3-contrib's TQC); the others are :class:`~workbench.agents.sac.SACConfig`'s."""

    n_quantiles: int = checked(25, integer(min=1))
    """Quantiles of the return each critic estimates."""
    top_quantiles_to_drop_per_net: int = checked(2, integer(min=0), live=True)
    """How many of the largest pooled target quantiles are dropped, per critic (less than n_quantiles)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        drop, n = self.top_quantiles_to_drop_per_net, self.n_quantiles
        # Each field's own constraint is checked after this (validate_config): compare only two integers.
        if isinstance(drop, int) and isinstance(n, int) and n >= 1 and drop >= n:
            raise ArgumentError(
                f"TQC top_quantiles_to_drop_per_net={self.top_quantiles_to_drop_per_net} must be less than "
                f"n_quantiles={self.n_quantiles}: it would drop every target quantile"
            )


@register
class TQC(SAC):
    """Truncated quantile critics for Box action spaces (bounded).

    Example::

        agent = wb.TQC("Pendulum-v1", learning_rate=1e-3, top_quantiles_to_drop_per_net=2)
        wb.Session(agent, "Pendulum-v1").run(steps=20_000)
    """

    Config = TQCConfig
    config: TQCConfig

    def _build_critics(self, obs_dim: int) -> None:
        """``n_critics`` critics of ``n_quantiles`` outputs each, and their targets."""
        c = self.config
        in_dim, simba = obs_dim + self.act_dim, c.network == "simba"
        self.critic = EnsembleMLP(
            c.n_critics, in_dim, c.net_arch, c.n_quantiles, encoder=self._encoder()[0], simba=simba
        )
        self.critic_target = EnsembleMLP(
            c.n_critics, in_dim, c.net_arch, c.n_quantiles, encoder=self._encoder()[0], simba=simba
        )
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)

    def _kept_quantiles(self) -> int:
        """How many of the pooled target quantiles are kept (the smallest ones)."""
        c = self.config
        return c.n_critics * (c.n_quantiles - c.top_quantiles_to_drop_per_net)

    def truncated_target(self, next_quantiles: torch.Tensor) -> torch.Tensor:
        """The target critics' quantiles ``(n_critics, batch, n_quantiles)`` of the next state-action pooled
        per sample, sorted, with the ``top_quantiles_to_drop_per_net * n_critics`` largest dropped:
        ``(batch, kept)``."""
        pooled = next_quantiles.permute(1, 0, 2).reshape(next_quantiles.shape[1], -1)
        return pooled.sort(-1).values[:, : self._kept_quantiles()]

    def _critic_loss(
        self, batch: ReplayBatch, actions: torch.Tensor, alpha: torch.Tensor, sde_weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        with torch.no_grad():
            next_actions, next_log_prob = self._policy(batch.next_obs, sde_weights)
            kept = self.truncated_target(self.critic_target(batch.next_obs, next_actions))
            targets = self._soft_target(batch, kept - alpha * next_log_prob.unsqueeze(-1))  # (batch, kept)
        quantiles = self.critic(batch.obs, actions)  # (n_critics, batch, n_quantiles)
        # Each critic's quantiles against every kept target, averaged over critics, samples and quantiles (not
        # summed over quantiles as in the paper), as sb3-contrib does: the loss's scale does not grow with them.
        loss = quantile_huber_loss(quantiles, targets).mean() / c.n_quantiles
        return loss, quantiles.detach().mean()

    def _actor_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The mean of every critic's quantiles (the paper's actor objective)."""
        return self.critic(obs, actions).mean((0, 2))
