"""Rainbow: DQN with its six improvements together (Hessel et al. 2018).

Double Q-learning, prioritized replay, a dueling network, n-step returns, the categorical
distribution of C51 and noisy networks, each on by default and each switchable
(``double_q``, ``prioritized``, ``dueling``, ``n_step``, ``distributional``, ``noisy``). With noisy
networks exploring, epsilon-greedy is off (``EpsilonGreedy(0, 0)``) unless given.

Shared: everything but the config is C51's (``c51.py``) and DQN's (``dqn.py``); with
``distributional=False`` the head and loss are DQN's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..exploration import EpsilonGreedy
from ..memory.replay import ReplayBatch
from ..validation import checked, flag
from .base import register
from .c51 import C51, C51Config
from .dqn import DQN

__all__ = ["Rainbow", "RainbowConfig"]


@dataclass
class RainbowConfig(C51Config):
    """Rainbow hyperparameters: C51's and DQN's with every improvement on (defaults otherwise:
    rl-baselines3-zoo's DQN on CartPole-v1)."""

    dueling: bool = True
    n_step: int = 3
    prioritized: bool = True
    noisy: bool = True
    exploration: EpsilonGreedy = field(default_factory=lambda: EpsilonGreedy(start=0.0, end=0.0, fraction=0.1))

    distributional: bool = checked(True, flag())
    """Learn the categorical return distribution (C51); False: DQN's Q-values and Huber loss."""


@register
class Rainbow(C51):
    """Rainbow DQN for Discrete action spaces; each of its six parts can be switched off.

    Example::

        agent = wb.Rainbow("CartPole-v1")                       # all six parts
        agent = wb.Rainbow("CartPole-v1", noisy=False, exploration=wb.EpsilonGreedy(1.0, 0.04, 0.16))
    """

    Config = RainbowConfig
    config: RainbowConfig

    def _atoms(self) -> int:
        return super()._atoms() if self.config.distributional else 1

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        return super()._q_values(out) if self.config.distributional else out

    def _td_loss(
        self, batch: ReplayBatch, next_out: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.config.distributional:
            return super()._td_loss(batch, next_out, targets)
        return DQN._td_loss(self, batch, next_out, targets)
