"""The deterministic heads an agent's ``policy_head()`` returns for export: what turns a network's output into
the env's actions exactly as ``act(obs, deterministic=True)`` does (argmax, clipped or squashed means, actions
scaled into a Box's bounds), each a small ``nn.Module`` that ONNX traces.

An algorithm picks its head in its own file (``policy_head``); ``workbench.agents.export`` wraps it with the
frozen observation normalization and writes it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from .kernels.private_torch import eager_copy

__all__ = [
    "MASKED_LOGIT",
    "MASKED_Q",
    "Argmax",
    "ArgmaxPerDimension",
    "ClippedMean",
    "ConstantLogStd",
    "DistributionalArgmax",
    "PolicyHead",
    "PositiveLogits",
    "ScaledIntoBounds",
    "SdeLogStd",
    "SquashedMean",
    "frozen",
    "masked",
]


class PolicyHead(NamedTuple):
    """What ``Agent.policy_head()`` returns: the head export runs after the normalization, in words,
    and for a recurrent policy the actor run before it (its LSTM state explicit in the export)."""

    module: nn.Module
    """Normalized float32 observations (or the recurrent actor's output) -> env actions."""
    description: str
    """How the head makes actions, for the export's sidecar."""
    recurrent_actor: nn.Module | None = None
    """A recurrent policy's frozen actor (RecurrentPPO), else None."""
    memory_state_shape: tuple[int, int] | None = None
    """A recurrent actor whose state is one tensor (RecurrentPPO's GRU or GTrXL memory): one env's
    state shape ``(rows, width)``, which must equal the actor's ``state_shape`` (the export checks);
    None for the LSTM, whose state is ``h`` and ``c``."""
    recurrent_critic: nn.Module | None = None
    """A recurrent policy's frozen value network (RecurrentPPO), for the acting export a local-inference
    client runs (``export_policy(..., critic=True)``: the value and the critic's state); else None."""
    actor: nn.Module | None = None
    """A feed-forward on-policy policy's frozen actor (PPO, A2C): normalized observations -> its raw output
    (a Discrete space's logits, a Box space's Gaussian mean), for the acting export (``critic=True``), which
    runs it once and ``acting_head`` over its output; else None."""
    acting_head: nn.Module | None = None
    """With ``actor``: the deterministic head over the actor's raw output (``module`` without the actor)."""
    critic: nn.Module | None = None
    """With ``actor``: the frozen value network, normalized observations -> ``(batch, 1)``."""
    log_std: nn.Module | None = None
    """An on-policy Gaussian policy's log standard deviations for the acting export (:class:`ConstantLogStd`,
    or gSDE's state-dependent :class:`SdeLogStd`): normalized observations (a recurrent policy: its actor's
    output) -> ``(batch, n)``; None for a policy without Box actions."""


# What a masked action's logit / Q-value becomes before the argmax, as the agents mask them: the
# on-policy heads' ``on_policy.MASKED_LOGIT`` (a test checks they agree), the DQN family's -inf.
MASKED_LOGIT = -1e8
MASKED_Q = float("-inf")


def masked(values: torch.Tensor, mask: torch.Tensor | None, fill: float) -> torch.Tensor:
    """``values`` with the disallowed entries (``mask`` False) set to ``fill``; unchanged without a mask."""
    return values if mask is None else values.masked_fill(~mask, fill)


class Argmax(nn.Module):
    """The greedy action of a Discrete policy: argmax of the logits or Q-values (of the allowed
    actions only when an action mask is given)."""

    def __init__(self, net: nn.Module, fill: float = MASKED_LOGIT) -> None:
        super().__init__()
        self.net = net
        self.fill = fill

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """int64 actions, shape ``(batch,)``."""
        return masked(self.net(x), mask, self.fill).argmax(-1)


class DistributionalArgmax(nn.Module):
    """The greedy action of the distributional DQN family: each action's expected return from its
    ``atoms`` outputs (the mean of QR-DQN's quantiles, or C51's softmax over the atoms weighted by
    ``support``), then the argmax, as the agent's ``_q_values`` computes it."""

    def __init__(self, net: nn.Module, n_actions: int, atoms: int, support: torch.Tensor | None) -> None:
        super().__init__()
        self.net = net
        self.n_actions, self.atoms = int(n_actions), int(atoms)
        self.categorical = support is not None
        self.register_buffer("support", support.clone() if support is not None else torch.zeros(0))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """int64 actions, shape ``(batch,)``."""
        out = self.net(x).reshape(-1, self.n_actions, self.atoms)
        q = (torch.softmax(out, dim=-1) * self.support).sum(-1) if self.categorical else out.mean(-1)
        return masked(q, mask, MASKED_Q).argmax(-1)


class ArgmaxPerDimension(nn.Module):
    """The most likely action of each dimension of a MultiDiscrete policy: argmax over each split
    ``nvec[i]`` of the logits."""

    def __init__(self, net: nn.Module, nvec: tuple[int, ...]) -> None:
        super().__init__()
        self.net = net
        self.nvec = [int(n) for n in nvec]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """int64 actions, shape ``(batch, len(nvec))``."""
        parts = torch.split(masked(self.net(x), mask, MASKED_LOGIT), self.nvec, dim=-1)
        return torch.stack([p.argmax(-1) for p in parts], dim=-1)


class PositiveLogits(nn.Module):
    """The most likely value of each bit of a MultiBinary policy: 1 where the logit is positive."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int64 actions (0 or 1), shape ``(batch, n)``."""
        return (self.net(x) > 0).long()


class ClippedMean(nn.Module):
    """The mean of a Gaussian policy clipped to the Box bounds (``np.clip`` = min(max(a, low), high))."""

    def __init__(self, net: nn.Module, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("low", torch.from_numpy(low.astype(np.float32).reshape(-1)))
        self.register_buffer("high", torch.from_numpy(high.astype(np.float32).reshape(-1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """float32 actions, shape ``(batch, action_dim)``."""
        return torch.minimum(torch.maximum(self.net(x), self.low), self.high)


class SquashedMean(nn.Module):
    """SAC's deterministic action in [-1, 1]: tanh of the Gaussian mean (gSDE's mean is the first
    output of its actor, already clipped to [-2, 2]; otherwise the first half of the head)."""

    def __init__(self, actor: nn.Module, act_dim: int, sde: bool) -> None:
        super().__init__()
        self.actor = actor
        self.act_dim = act_dim
        self.sde = sde

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Squashed actions in [-1, 1], shape ``(batch, action_dim)``."""
        out = self.actor(x)
        mean = out[0] if self.sde else out[:, : self.act_dim]
        return torch.tanh(mean)


class ScaledIntoBounds(nn.Module):
    """An action in [-1, 1] mapped onto the Box bounds: ``center + squashed * half_range``
    (``Agent._scale_action``)."""

    def __init__(self, squashed: nn.Module, center: np.ndarray, half_range: np.ndarray) -> None:
        super().__init__()
        self.squashed = squashed
        self.register_buffer("center", torch.from_numpy(center.astype(np.float32).reshape(-1)))
        self.register_buffer("half_range", torch.from_numpy(half_range.astype(np.float32).reshape(-1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """float32 actions within the bounds, shape ``(batch, action_dim)``."""
        return self.center + self.squashed(x) * self.half_range


class ConstantLogStd(nn.Module):
    """A state-independent Gaussian policy's log standard deviations (PPO's, A2C's, RecurrentPPO's learned
    ``log_std``, frozen), one row per input row: ``(batch, n)``."""

    def __init__(self, log_std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("log_std", log_std.detach().float().reshape(-1).clone().cpu())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The log standard deviations, ``(batch, n)`` for ``x`` of ``batch`` rows."""
        return self.log_std.unsqueeze(0).expand(x.shape[0], -1)


class SdeLogStd(nn.Module):
    """gSDE's state-dependent log standard deviation of each action, as the on-policy agents' update scores
    an action: ``log sqrt(latent² @ exp(log_std)² + 1e-6)``, ``latent`` the actor's last hidden features
    (``features``: the actor without its output layer)."""

    def __init__(self, features: nn.Module, log_std: torch.Tensor) -> None:
        super().__init__()
        self.features = features
        self.register_buffer("log_std", log_std.detach().float().clone().cpu())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The log standard deviations, ``(batch, n_actions)``."""
        variance = self.features(x).pow(2) @ self.log_std.exp().pow(2)
        return 0.5 * torch.log(variance + 1e-6)


def frozen(net: nn.Module) -> nn.Module:
    """A copy of ``net`` in eval mode without gradients, so exporting never touches the agent (eager
    even when the agent's networks are compiled)."""
    net = eager_copy(net).eval()
    net.requires_grad_(False)
    return net
