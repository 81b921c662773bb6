"""C51: distributional Q-learning on a fixed support of atoms (Bellemare et al. 2017).

Each action's return distribution is a categorical distribution over ``n_atoms`` evenly spaced
values from ``v_min`` to ``v_max``; the target distribution ``r + discount * Z(s', a')`` is projected
back onto the support (:func:`categorical_projection`) and learned with the cross-entropy.

Shared with DQN (``dqn.py``): replay (uniform or prioritized), n-step returns, epsilon-greedy or
noisy-network exploration, the dueling option, double Q-learning, the target network and the
update schedule. This file adds the config, the head size, the value of an action and the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gymnasium import spaces

from ..memory.replay import ReplayBatch
from ..validation import checked, integer, number
from .base import register
from .dqn import DQN, DQNConfig
from .heads import DistributionalArgmax, PolicyHead, frozen

__all__ = ["C51", "C51Config", "categorical_projection"]


@dataclass
class C51Config(DQNConfig):
    """C51 hyperparameters (the rest: :class:`~workbench.agents.dqn.DQNConfig`'s, zoo CartPole-v1)."""

    n_atoms: int = checked(51, integer(min=2))
    """Atoms of the support (51 in the paper, hence the name)."""
    v_min: float = checked(0.0, number())
    """Lowest value of the support (CartPole-v1's discounted returns lie in [0, 100]; Atari: -10)."""
    v_max: float = checked(100.0, number())
    """Highest value of the support (returns beyond it are clipped onto it; Atari: 10)."""


# -- the projection ---------------------------------------------------------------------------------


def categorical_projection(
    next_probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """The distribution of ``rewards + discounts * Z`` projected onto ``support`` (Bellemare et al.
    2017, Algorithm 1), shape ``(batch, n_atoms)``.

    ``next_probs`` ``(batch, n_atoms)`` is Z's probability on each atom; ``discounts`` ``(batch,)``
    is zero where the episode terminated. Each shifted atom is clipped into ``[v_min, v_max]`` and its
    mass split between the two atoms around it, in proportion to closeness.
    """
    next_probs = next_probs.float()  # in float32 also under a lower precision's autocast
    n = support.shape[0]
    v_min, v_max = float(support[0]), float(support[-1])
    delta = (v_max - v_min) / (n - 1)
    shifted = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
    b = ((shifted - v_min) / delta).clamp(0, n - 1)
    lower, upper = b.floor().long(), b.ceil().long()
    # Where b falls on an atom, lower == upper and both shares below are 0: give it the whole mass.
    lower_share = upper.to(b.dtype) - b + (lower == upper).to(b.dtype)
    projected = torch.zeros_like(next_probs)
    projected.scatter_add_(1, lower, next_probs * lower_share)
    projected.scatter_add_(1, upper, next_probs * (b - lower.to(b.dtype)))
    return projected


@register
class C51(DQN):
    """Categorical (distributional) DQN for Discrete action spaces.

    Example::

        agent = wb.C51("CartPole-v1", n_atoms=51, v_min=0.0, v_max=100.0)
        wb.Session(agent, "CartPole-v1").run(steps=50_000)
    """

    Config = C51Config
    action_spaces = (spaces.Discrete,)
    config: C51Config
    _batched_targets = False  # its projection is computed step by step in _td_loss

    # -- networks: one logit per atom and action -------------------------------------------------

    def _atoms(self) -> int:
        c = self.config
        if c.n_atoms < 2:
            raise ValueError(f"{self.algorithm} n_atoms must be at least 2, got {c.n_atoms}")
        if not c.v_min < c.v_max:
            raise ValueError(f"{self.algorithm} needs v_min < v_max, got v_min={c.v_min}, v_max={c.v_max}")
        return int(c.n_atoms)

    @property
    def support(self) -> torch.Tensor:
        """The atoms' values, ``linspace(v_min, v_max, n_atoms)``."""
        c = self.config
        return torch.linspace(c.v_min, c.v_max, c.n_atoms, device=self.device)

    def policy_head(self) -> PolicyHead:
        """Export's head: the greedy action by expected return (softmax over the atoms times their values);
        DQN's when there is one atom per action (Rainbow with ``distributional=False``)."""
        atoms = int(self._atoms())
        if atoms == 1:
            return super().policy_head()
        head = DistributionalArgmax(frozen(self.q_net), self.n_actions, atoms, self.support)
        return PolicyHead(
            head, "argmax over actions of the expected return (softmax over the atoms times their values)"
        )

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        return (F.softmax(out, dim=-1) * self.support).sum(-1)

    # -- the update ----------------------------------------------------------------------------

    def _td_loss(
        self, batch: ReplayBatch, next_out: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # ``targets`` is always None here (``_batched_targets`` is False): the projection is made below.
        n = self._atoms()
        support = self.support
        with torch.no_grad():
            next_actions = self._next_actions(batch, next_out)
            next_logits = next_out.gather(1, next_actions.unsqueeze(-1).expand(-1, 1, n)).squeeze(1)
            target = categorical_projection(
                F.softmax(next_logits, dim=-1), batch.rewards, batch.discounts * (1.0 - batch.dones), support
            )
        out = self._outputs(self.q_net, batch.obs)
        log_p = F.log_softmax(out.gather(1, batch.actions.view(-1, 1, 1).expand(-1, 1, n)).squeeze(1), dim=-1)
        loss = -(target * log_p).sum(-1)  # cross-entropy; prioritized replay uses it as the error
        return loss, (log_p.detach().exp() * support).sum(-1), loss.detach()
