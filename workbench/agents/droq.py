"""DroQ: SAC at a high update-to-data ratio whose critics carry dropout and layer normalization.

Hiraoka et al. 2022, "Dropout Q-Functions for Doubly Efficient Reinforcement Learning".

REDQ reached SAC's returns in far fewer env steps with many gradient steps per env step and a large critic
ensemble; DroQ gets there with a small ensemble (two critics) made robust by dropout and layer normalization
after each hidden linear layer (``Linear -> Dropout -> LayerNorm -> ReLU``). The ratio is ``gradient_steps``
(20 gradient steps per env step); the actor is updated once per ``policy_delay`` of them (as REDQ's and SBX's
code do). The dropout masks are drawn from the agent's own generator (saved with it), so a seeded run repeats;
dropout is active in the critics and their targets while learning, as in the paper.

Shared with SAC (``sac.py``): entropy tuning, the squashed Gaussian, replay, the target critics, the update
schedule. Defaults are the paper's (dropout 0.01, 20 updates per step, 2 critics) on SAC's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..validation import checked, flag, integer, number
from .base import register
from .networks import EnsembleMLP, drawn_like
from .sac import SAC, SACConfig

__all__ = ["DroQ", "DroQConfig", "GeneratorDropout"]


class GeneratorDropout(nn.Module):
    """Dropout whose masks come from a ``torch.Generator`` the owner sets (``generator``), so the masks are
    part of the agent's saved random state; with none, torch's global generator. Inverted dropout: kept
    units scale by ``1 / (1 - p)``; identity in eval mode or with ``p == 0``."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with each unit zeroed with probability ``p`` (training mode)."""
        if not self.training or self.p <= 0.0:
            return x
        keep = 1.0 - self.p
        drawn = torch.rand(x.shape, generator=self.generator, dtype=x.dtype)
        return x * drawn_like((drawn < keep).to(x.dtype) / keep, x)

    def extra_repr(self) -> str:
        return f"p={self.p}"


@dataclass
class DroQConfig(SACConfig):
    """DroQ hyperparameters (defaults: the paper's, on SAC's); the others are
    :class:`~workbench.agents.sac.SACConfig`'s."""

    networks: ClassVar[tuple[str, ...]] = ("mlp",)  # dropout critics
    network_note: ClassVar[str] = "DroQ's critics are MLPs with dropout and layer norm"

    gradient_steps: int = checked(20, integer(min=1, also=(-1,)), live=True)
    """Gradient steps per update: the update-to-data ratio (20 in the paper)."""
    policy_delay: int = checked(20, integer(min=1), live=True)
    """Gradient steps per actor update (the critics learn at every one)."""
    dropout_rate: float = checked(0.01, number(0, 1, max_open=True), live=True)
    """Probability that dropout zeroes a critic's hidden unit while learning."""
    layer_norm: bool = checked(True, flag())
    """Layer normalization after each hidden layer's dropout (the paper's; without it DroQ is unstable)."""


@register
class DroQ(SAC):
    """DroQ for Box action spaces (bounded): SAC with dropout critics at a high update-to-data ratio.

    Example::

        agent = wb.DroQ("Pendulum-v1", gradient_steps=20)
        wb.Session(agent, "Pendulum-v1").run(steps=10_000)
    """

    Config = DroQConfig
    config: DroQConfig

    def _build_critics(self, obs_dim: int) -> None:
        """Critics and targets with ``Linear -> Dropout -> LayerNorm -> ReLU`` hidden layers."""
        c = self.config
        after = [lambda width: GeneratorDropout(c.dropout_rate)]
        if c.layer_norm:
            after.append(nn.LayerNorm)
        in_dim = obs_dim + self.act_dim
        self.critic = EnsembleMLP(c.n_critics, in_dim, c.net_arch, 1, encoder=self._encoder()[0], after=after)
        self.critic_target = EnsembleMLP(c.n_critics, in_dim, c.net_arch, 1, encoder=self._encoder()[0], after=after)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)

    def _dropouts(self) -> list[GeneratorDropout]:
        nets = (self.critic, self.critic_target)
        return [m for net in nets for m in net.modules() if isinstance(m, GeneratorDropout)]

    def _update(self) -> dict[str, float]:
        # The agent's generator may have been replaced (reseed) since the build: hand the current one over.
        for dropout in self._dropouts():
            dropout.generator = self.generator
        return super()._update()

    def _actor_due(self) -> bool:
        return self.num_updates % self.config.policy_delay == 0

    def apply_edits(self, changed: set[str]) -> None:
        """SAC's edits and the dropout rate (``policy_delay`` and ``gradient_steps`` are read at each update)."""
        super().apply_edits(changed)
        if "dropout_rate" in changed:
            for dropout in self._dropouts():
                dropout.p = float(self.config.dropout_rate)
