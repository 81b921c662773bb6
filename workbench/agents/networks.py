"""Small network builders shared by the agents."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["ACTIVATIONS", "make_adam", "mlp"]



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
