"""BCQ for discrete actions: batch-constrained double Q-learning (Fujimoto et al. 2019, "Benchmarking
Batch Deep Reinforcement Learning Algorithms"; Coach's DDQN-BCQ).

Beside the Q-network a behaviour model (a classifier of the logged actions) learns which actions
the data supports. Both the Q-learning target and acting choose only among actions whose
behaviour probability, relative to the most likely action's, reaches ``threshold``: the agent never
bootstraps from (or takes) actions the data never tried, which is what breaks plain DQN offline.
``threshold=0`` is offline double DQN; ``threshold=1`` is behaviour cloning's greedy action.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from ..validation import checked, integer, number
from .base import register
from .networks import make_adam, mlp
from .offline import OfflineAgent, OfflineBatch, OfflineConfig
from .updates import gradient_step, polyak_update

__all__ = ["BCQ", "BCQConfig"]


@dataclass
class BCQConfig(OfflineConfig):
    """Discrete BCQ hyperparameters; the shared ones are :class:`OfflineConfig`'s.

    Defaults: Fujimoto et al.'s discrete BCQ (threshold 0.3, Huber loss, soft target updates with
    tau 0.005 every step, the 1e-2 logit penalty) with lr 1e-3, batch 256 and (256, 256) networks.
    Measured with them (docs/offline.md, ``benchmarks/offline.py``): from 50k CartPole transitions of
    an epsilon-greedy DQN averaging 102-114, 5000 gradient steps play 500 on 5 of 5 seeds
    (10 deterministic episodes)."""

    learning_rate: float = 1e-3
    threshold: float = checked(0.3, number(0, 1))
    """Keep actions whose behaviour probability is at least this fraction of the likeliest one's."""
    tau: float = checked(0.005, number(0, 1, min_open=True))
    """Target network update rate per target update (1 copies)."""
    target_update_interval: int = checked(1, integer(min=1))
    """Gradient steps between target network updates."""
    imitation_weight: float = checked(1.0, number(0))
    """Weight of the behaviour model's cross-entropy in the loss."""
    logit_penalty: float = checked(1e-2, number(0))
    """Penalty on the behaviour model's squared logits (the paper's regulariser)."""
    max_grad_norm: float = checked(10.0, number(0, min_open=True))
    """Gradient norm clip."""


@register
class BCQ(OfflineAgent):
    """Batch-constrained deep Q-learning for Discrete action spaces (offline).

    Example::

        agent = wb.BCQ(dataset=ds, threshold=0.3)
        wb.Session(agent, dataset=ds, eval_env="CartPole-v1", eval_every=2000).run(steps=20_000)
    """

    Config = BCQConfig
    default_plots = ("eval_reward", "loss", "ope_dr")
    action_spaces = (spaces.Discrete,)
    network_names = ("q_net", "q_target", "behaviour")
    config: BCQConfig

    def _build(self) -> None:
        c = self.config
        obs_dim = int(np.prod(self.obs_shape))
        self.n_actions = int(self.action_space.n)
        self.q_net = mlp(obs_dim, c.net_arch, self.n_actions)
        self.q_target = mlp(obs_dim, c.net_arch, self.n_actions)
        self.q_target.load_state_dict(self.q_net.state_dict())
        self.q_target.requires_grad_(False)
        self.behaviour = mlp(obs_dim, c.net_arch, self.n_actions)
        self._params = [*self.q_net.parameters(), *self.behaviour.parameters()]
        self.optimizer = make_adam(self._params, lr=c.learning_rate)

    def _allowed(self, obs: torch.Tensor) -> torch.Tensor:
        """Mask of the actions the data supports in each state (ratio to the likeliest >= threshold)."""
        log_p = torch.log_softmax(self.behaviour(obs), -1)
        return (log_p - log_p.max(-1, keepdim=True).values) >= np.log(max(self.config.threshold, 1e-12))

    def _constrained_greedy(self, obs: torch.Tensor) -> torch.Tensor:
        q = self.q_net(obs)
        return q.masked_fill(~self._allowed(obs), float("-inf")).argmax(-1)

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self._host(self._constrained_greedy(self._tensor(obs)))

    def _learn(self, batch: OfflineBatch) -> dict[str, float]:
        c = self.config
        with torch.no_grad():
            next_actions = self._constrained_greedy(batch.next_obs).unsqueeze(1)
            next_value = self.q_target(batch.next_obs).gather(1, next_actions).squeeze(1)
            target = batch.rewards + c.gamma * (1.0 - batch.dones) * next_value
        actions = batch.actions.long()
        q = self.q_net(batch.obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        q_loss = F.smooth_l1_loss(q, target)
        logits = self.behaviour(batch.obs)
        imitation = F.cross_entropy(logits, actions)
        loss = q_loss + c.imitation_weight * imitation + c.logit_penalty * logits.pow(2).mean()
        gradient_step(self.optimizer, loss, c.max_grad_norm)
        if (self.num_updates + 1) % c.target_update_interval == 0:
            polyak_update(self.q_target, self.q_net, c.tau)
        return {
            "loss": float(q_loss.detach()),
            "imitation_loss": float(imitation.detach()),
            "q_mean": float(q.detach().mean()),
        }
