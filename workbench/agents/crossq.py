"""CrossQ: SAC without target networks, with batch renormalization in the actor and critics.

Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater Sample Efficiency
and Simplicity".

The critics see the current state-actions ``(s, a)`` and the next ones ``(s', a' ~ pi(s'))`` in *one* forward
pass, concatenated into one batch, so the batch statistics their normalization layers use (and the running
statistics they keep) cover both distributions; the next state's values then serve as the target directly
(detached), with no target network. Each linear layer's input goes through a
:class:`~workbench.agents.batch_renorm.BatchRenorm1d`; Adam runs with ``betas=(0.5, 0.999)``, the actor is
updated every ``policy_delay`` gradient steps and the critics are wide (1024-1024).

Modes and order, as sb3-contrib's: the critics' joint pass runs in training mode (batch statistics, running
statistics updated), the next actions come from the actor in eval mode; only a gradient step that updates the
actor draws the policy's actions (actor in training mode), then steps the entropy coefficient and the actor,
whose loss reads the critics in eval mode. Acting, the log-density and export use eval mode (the running
statistics). Shared with SAC (``sac.py``): entropy tuning, the squashed
Gaussian, replay, the update schedule. Defaults are sb3-contrib's (``sb3_contrib.CrossQ``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from ..memory.replay import ReplayBatch
from ..schedules import Schedule
from ..validation import checked, integer, layer_widths, number
from .base import register
from .batch_renorm import BatchRenorm1d, in_mode
from .encoders import with_encoder
from .networks import EnsembleMLP, make_adam, mlp
from .sac import SAC, SACConfig, SDEActor

__all__ = ["CrossQ", "CrossQConfig"]

ADAM_BETAS = (0.5, 0.999)  # a lower first-moment decay, as the paper and sb3-contrib use with batch norm


@dataclass
class CrossQConfig(SACConfig):
    """CrossQ hyperparameters (defaults: sb3-contrib's CrossQ); the others are
    :class:`~workbench.agents.sac.SACConfig`'s (``tau`` and ``target_update_interval`` do nothing: there is no
    target network; ``net_arch`` is the actor's)."""

    networks: ClassVar[tuple[str, ...]] = ("mlp",)  # batch renormalization is its own normalization
    network_note: ClassVar[str] = "CrossQ's networks are MLPs with batch renormalization"

    learning_rate: float | Schedule = checked(1e-3, number(0, min_open=True, schedule=True), live=True)
    """Adam learning rate of every network; a number or a schedule of training progress."""
    critic_net_arch: tuple[int, ...] = checked((1024, 1024), layer_widths())
    """Hidden layer widths of each critic (the actor's are ``net_arch``)."""
    policy_delay: int = checked(3, integer(min=1), live=True)
    """Gradient steps per actor update (the critics learn at every one)."""
    batch_norm_momentum: float = checked(0.01, number(0, 1, min_open=True))
    """How fast the batch renormalization's running statistics follow the batches."""
    batch_norm_eps: float = checked(0.001, number(0, min_open=True))
    """Added to the variance before its square root."""
    renorm_warmup_steps: int = checked(100_000, integer(min=0))
    """Training batches of plain batch normalization before the renormalization's corrections start."""


@register
class CrossQ(SAC):
    """CrossQ for Box action spaces (bounded): SAC with batch renormalization and no target network.

    Example::

        agent = wb.CrossQ("Pendulum-v1")
        wb.Session(agent, "Pendulum-v1").run(steps=20_000)
    """

    Config = CrossQConfig
    config: CrossQConfig
    network_names = ("actor", "critic", "log_alpha")  # no target critics
    entropy_with_actor = True  # the policy's draw and alpha's step only with the actor's, as sb3-contrib's

    def _renorm(self) -> partial[nn.Module]:
        c = self.config
        return partial(
            BatchRenorm1d,
            momentum=c.batch_norm_momentum,
            eps=c.batch_norm_eps,
            warmup_steps=c.renorm_warmup_steps,
        )

    def _build_actor(self, obs_dim: int, encoder: nn.Module | None) -> nn.Module:
        """The squashed-Gaussian head with a batch renormalization before each linear layer (with gSDE, SAC's
        gSDE actor with the same normalization, its noise features normalized too, as sb3-contrib's)."""
        c = self.config
        if c.use_sde:
            return SDEActor(
                obs_dim,
                c.net_arch,
                self.act_dim,
                c.log_std_init,
                encoder,
                before=(self._renorm(),),
                use_expln=c.use_expln,
            )
        net = mlp(obs_dim, c.net_arch, 2 * self.act_dim, activation="relu", before=(self._renorm(),))
        return with_encoder(encoder, net)

    def _build_critics(self, obs_dim: int) -> None:
        """``n_critics`` critics with a batch renormalization before each linear layer; no targets."""
        c = self.config
        self.critic = EnsembleMLP(
            c.n_critics,
            obs_dim + self.act_dim,
            c.critic_net_arch,
            1,
            encoder=self._encoder()[0],
            before=(self._renorm(),),
        )

    def _adam(self, params: object, lr: float) -> torch.optim.Adam:
        return make_adam(params, lr=lr, betas=ADAM_BETAS)

    # -- acting: the running statistics -----------------------------------------------------------

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        with in_mode(self.actor, False):
            return super()._act(obs, deterministic)

    def _log_density(self, batch: np.ndarray, actions: np.ndarray) -> np.ndarray:
        with in_mode(self.actor, False):
            return super()._log_density(batch, actions)

    # -- learning ---------------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        # The update runs in training mode whatever mode acting left the modules in.
        with in_mode(self.actor, True), in_mode(self.critic, True):
            return super()._update()

    def _critic_loss(
        self, batch: ReplayBatch, actions: torch.Tensor, alpha: torch.Tensor, sde_weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Current and next state-actions through the critics in one pass (one set of batch statistics);
        the next ones' minimum, detached, is the bootstrap."""
        with torch.no_grad(), in_mode(self.actor, False):  # the next actions from the running statistics
            next_actions, next_log_prob = self._policy(batch.next_obs, sde_weights)
        both = self.critic(torch.cat([batch.obs, batch.next_obs]), torch.cat([actions, next_actions]))
        q, next_q = both.squeeze(-1).split(len(actions), dim=1)  # (n_critics, batch) each
        with torch.no_grad():
            target = self._soft_target(batch, next_q.min(0).values - alpha * next_log_prob)
        return 0.5 * (q - target).pow(2).mean(1).sum(), q.detach().mean()

    def _actor_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The critics' minimum, with their running statistics (eval mode), as sb3-contrib's."""
        with in_mode(self.critic, False):
            return super()._actor_q(obs, actions)

    def _actor_due(self) -> bool:
        return self.num_updates % self.config.policy_delay == 0

    def _update_target(self) -> None:
        """No target network."""
