"""Small network builders shared by the agents."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["ACTIVATIONS", "DuelingQNetwork", "EnsembleMLP", "make_adam", "mlp", "polyak_update"]

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    *,
    activation: str = "relu",
    ortho_init: bool = False,
    output_gain: float = 1.0,
) -> nn.Sequential:
    """A multilayer perceptron ``in_dim -> hidden... -> out_dim``.

    With ``ortho_init`` the hidden layers get orthogonal weights with gain sqrt(2) and the output
    layer ``output_gain`` (0.01 for a policy head, 1 for a value head), as in the PPO paper's code.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        linear = nn.Linear(last, width)
        if ortho_init:
            nn.init.orthogonal_(linear.weight, math.sqrt(2))
            nn.init.zeros_(linear.bias)
        layers += [linear, act()]
        last = width
    head = nn.Linear(last, out_dim)
    if ortho_init:
        nn.init.orthogonal_(head.weight, output_gain)
        nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


def make_adam(params: Sequence[torch.Tensor] | object, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fastest CPU kernel available (fused, else foreach)."""
    params = list(params)  # type: ignore[call-overload]
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch builds
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)  # type: ignore[arg-type]


def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * online`` for every parameter, in one fused op
    (``tau >= 1`` copies)."""
    with torch.no_grad():
        t_params = list(target.parameters())
        o_params = list(online.parameters())
        if tau >= 1.0:
            torch._foreach_copy_(t_params, o_params)
        else:
            torch._foreach_lerp_(t_params, o_params, tau)


class DuelingQNetwork(nn.Module):
    """Dueling architecture (Wang et al. 2016): a shared trunk, a state-value head and an advantage
    head, combined as ``Q = V + A - mean(A)`` so V and A are identifiable."""

    def __init__(self, in_dim: int, hidden: Sequence[int], n_actions: int, activation: str = "relu") -> None:
        super().__init__()
        if not hidden:
            raise ValueError("a dueling network needs at least one hidden layer (net_arch)")
        self.trunk = mlp(in_dim, hidden[:-1], hidden[-1], activation=activation)
        self.trunk.append(ACTIVATIONS[activation]())
        self.value = nn.Linear(hidden[-1], 1)
        self.advantage = nn.Linear(hidden[-1], n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values of every action, shape ``(batch, n_actions)``."""
        h = self.trunk(obs)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(-1, keepdim=True)


class EnsembleMLP(nn.Module):
    """``n`` independent MLPs evaluated together with batched matrix products.

    Twin critics (TD3, SAC) as one module: one ``baddbmm`` per layer instead of one ``linear`` per
    layer per critic, which halves the torch ops in the hot loop. Each member is initialized as
    ``nn.Linear`` would be. Input ``(batch, in_dim)`` (shared) or ``(n, batch, in_dim)``; output
    ``(n, batch, out_dim)``.
    """

    def __init__(self, n: int, in_dim: int, hidden: Sequence[int], out_dim: int, activation: str = "relu") -> None:
        super().__init__()
        self.n = n
        dims = [in_dim, *hidden, out_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(dims):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default init
            self.weights.append(nn.Parameter(torch.empty(n, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(n, 1, fan_out).uniform_(-bound, bound)))
        self.act = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs of every member, shape ``(n, batch, out_dim)``."""
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.n, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self.act(x)
        return x
