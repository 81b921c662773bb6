"""QR-DQN: distributional Q-learning with quantile regression (Dabney et al. 2018).

Each action's return distribution is ``n_quantiles`` quantiles at the midpoints
``tau_i = (2i + 1) / (2N)``; the network learns them with the quantile Huber loss against the
Bellman target of every quantile of the next state, and acts on their mean.

Shared with DQN (``dqn.py``): replay (uniform or prioritized), n-step returns, epsilon-greedy or
noisy-network exploration, the dueling option, the target network and the update schedule. This
file adds the config, the head size, the value of an action and the loss. Defaults are
rl-baselines3-zoo's ``qrdqn.yml`` for CartPole-v1 (DQN's settings with 10 quantiles).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gymnasium import spaces

from ..memory.replay import ReplayBatch
from ..validation import checked, integer, number
from .base import register
from .dqn import DQN, DQNConfig

__all__ = ["QRDQN", "QRDQNConfig", "quantile_huber_loss"]


@dataclass
class QRDQNConfig(DQNConfig):
    """QR-DQN hyperparameters (defaults: rl-baselines3-zoo qrdqn.yml, CartPole-v1); the others are
    :class:`~workbench.agents.dqn.DQNConfig`'s."""

    # sb3-contrib's QR-DQN bootstraps from the target network's own greedy action:
    double_q: bool = False

    n_quantiles: int = checked(10, integer(min=1))
    """Quantiles per action (the zoo: 10 on CartPole, 25 on Acrobot and MountainCar)."""
    kappa: float = checked(1.0, number(min=0.0, min_open=True), live=True)
    """Huber threshold of the quantile loss (0: the plain quantile, "pinball", loss)."""


# -- the loss ---------------------------------------------------------------------------------------


def quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """The quantile Huber loss of each sample (Dabney et al. 2018, eq. 10), shape ``(batch,)``.

    ``quantiles`` ``(batch, N)`` are the current estimates at ``tau_i = (2i + 1) / (2N)``,
    ``targets`` ``(batch, M)`` samples of the target distribution. For every pair,
    ``u = target_j - quantile_i`` costs ``|tau_i - 1{u < 0}| * huber_kappa(u) / kappa`` (with kappa 0:
    ``|u|``); the sum over ``i`` is averaged over ``j``, as sb3-contrib does.
    """
    n = quantiles.shape[-1]
    tau, one_minus_tau = _quantile_levels(n, quantiles.dtype, quantiles.device)
    shape = (*quantiles.shape, targets.shape[-1])  # (batch, N, M)
    estimates = quantiles.unsqueeze(-1).expand(shape)
    samples = targets.unsqueeze(-2).expand(shape)
    if kappa > 0:
        # One fused op, forward and backward: the same values and gradients as writing the Huber
        # function of u out (its pieces are exact in floating point: halving, the sign, x / 1).
        huber = F.huber_loss(estimates, samples, reduction="none", delta=kappa)
        if kappa != 1.0:
            huber = huber / kappa
    else:
        huber = (samples - estimates).abs()
    with torch.no_grad():  # |tau - 1{u < 0}|: 1 - tau where the sample lies below the estimate
        weight = torch.where(samples < estimates, one_minus_tau, tau)
    return (weight * huber).sum(-2).mean(-1)


@functools.lru_cache(maxsize=32)
def _quantile_levels(n: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``tau_i = (2i + 1) / (2N)`` and ``1 - tau_i`` as ``(N, 1)`` columns on ``device`` (constants,
    never written)."""
    tau = ((torch.arange(n, dtype=dtype, device=device) + 0.5) / n).unsqueeze(-1)
    return tau, (tau - 1.0).abs()


@register
class QRDQN(DQN):
    """Quantile-regression DQN for Discrete action spaces.

    Example::

        agent = wb.QRDQN("CartPole-v1", n_quantiles=10)
        wb.Session(agent, "CartPole-v1").run(steps=50_000)
    """

    Config = QRDQNConfig
    action_spaces = (spaces.Discrete,)
    config: QRDQNConfig

    # -- networks: N quantiles per action ------------------------------------------------------

    def _atoms(self) -> int:
        if self.config.n_quantiles < 1:
            raise ValueError(f"QRDQN n_quantiles must be at least 1, got {self.config.n_quantiles}")
        return int(self.config.n_quantiles)

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        return out.mean(-1)  # the mean of the quantiles estimates the expected return

    # -- the update ----------------------------------------------------------------------------

    def _bootstrap_targets(self, batch: ReplayBatch, next_out: torch.Tensor) -> torch.Tensor:
        """The target distribution's samples, ``(batch, n_quantiles)``: r + discount * each
        quantile of the bootstrapped action in the next state."""
        n = self._atoms()
        next_actions = self._next_actions(batch, next_out)
        next_quantiles = next_out.gather(1, next_actions.unsqueeze(-1).expand(-1, 1, n)).squeeze(1)
        not_done = batch.discounts * (1.0 - batch.dones)
        return batch.rewards.unsqueeze(1) + not_done.unsqueeze(1) * next_quantiles

    def _td_loss(
        self, batch: ReplayBatch, next_out: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = self._atoms()
        if targets is None:
            with torch.no_grad():
                targets = self._bootstrap_targets(batch, next_out)
        out = self._outputs(self.q_net, batch.obs)
        quantiles = out.gather(1, batch.actions.view(-1, 1, 1).expand(-1, 1, n)).squeeze(1)
        loss = quantile_huber_loss(quantiles, targets, self.config.kappa)
        return loss, quantiles.detach().mean(-1), loss.detach()
