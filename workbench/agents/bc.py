"""BC: behaviour cloning, supervised learning of the logged actions (Pomerleau 1991).

Discrete actions: a classifier (cross-entropy); continuous actions: a regressor onto the logged
actions rescaled to [-1, 1] (mean squared error through tanh). The simplest offline baseline:
it copies the behaviour policy, good and bad alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .base import register
from .networks import make_adam, mlp, multinomial
from .offline import OfflineAgent, OfflineBatch, OfflineConfig

__all__ = ["BC", "BCConfig"]


@dataclass
class BCConfig(OfflineConfig):
    """BC hyperparameters; the shared ones are :class:`OfflineConfig`'s."""

    learning_rate: float = 1e-3


@register
class BC(OfflineAgent):
    """Behaviour cloning, for Discrete and Box action spaces.

    Example::

        ds = wb.Dataset.load("data/cartpole")
        agent = wb.BC(dataset=ds)
        wb.Session(agent, dataset=ds, eval_env="CartPole-v1", eval_every=1000).run(steps=5000)
    """

    Config = BCConfig
    default_plots = ("eval_reward", "loss")
    network_names = ("policy",)
    config: BCConfig

    def _build(self) -> None:
        c = self.config
        obs_dim = int(np.prod(self.obs_shape))
        out = int(self.action_space.n) if self.discrete else int(np.prod(self.action_space.shape))
        self.policy = mlp(obs_dim, c.net_arch, out)
        self.optimizer = make_adam(self.policy.parameters(), lr=c.learning_rate)

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        out = self.policy(self._tensor(obs))
        if self.discrete:
            if deterministic:
                return self._host(out.argmax(-1))
            return self._host(multinomial(torch.softmax(out, -1), self.generator))
        return self._scale_action(self._host(torch.tanh(out)))

    def _learn(self, batch: OfflineBatch) -> dict[str, float]:
        out = self.policy(batch.obs)
        if self.discrete:
            loss = F.cross_entropy(out, batch.actions.long())
        else:
            loss = F.mse_loss(torch.tanh(out), batch.actions)
        self._step(self.optimizer, loss)
        return {"loss": float(loss.detach())}
