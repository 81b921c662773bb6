"""Small network builders shared by the agents."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = [
    "ACTIVATIONS",
    "DuelingQNetwork",
    "EnsembleMLP",
    "ScalarParameter",
    "gaussian_policy_terms",
    "make_adam",
    "mlp",
    "polyak_update",
]

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
    """``n`` independent MLPs on the same input (twin critics for TD3 and SAC), outputs stacked.

    Measured on 2 CPU cores, ``n`` plain ``nn.Linear`` stacks beat one batched-matmul ensemble
    (``baddbmm``'s backward is slower than ``addmm``'s), so this is a thin ``ModuleList``.
    Input ``(batch, in_dim)``; output ``(n, batch, out_dim)``.
    """

    def __init__(self, n: int, in_dim: int, hidden: Sequence[int], out_dim: int, activation: str = "relu") -> None:
        super().__init__()
        if n < 1:
            raise ValueError(f"an ensemble needs at least one member, got n={n}")
        self.n = n
        self.members = nn.ModuleList(mlp(in_dim, hidden, out_dim, activation=activation) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs of every member, shape ``(n, batch, out_dim)``."""
        return torch.stack([m(x) for m in self.members])


class ScalarParameter(nn.Module):
    """One learnable number as a module (e.g. SAC's log entropy coefficient), so checkpoints
    save it with the networks."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.tensor(float(value)))

    def forward(self) -> torch.Tensor:
        """The parameter itself."""
        return self.value


def gaussian_policy_terms(
    out: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor, discrete: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``actions`` and entropies for a categorical policy (``out`` = logits) or
    a diagonal Gaussian one (``out`` = mean, state-independent ``log_std``), without the overhead
    of ``torch.distributions``."""
    if discrete:
        log_p = torch.log_softmax(out, dim=-1)
        chosen = log_p.gather(1, actions.long().unsqueeze(1)).squeeze(1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        return chosen, entropy
    assert log_std is not None
    log_std = log_std.expand_as(out)
    z = (actions - out) / log_std.exp()
    log_prob = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
    return log_prob, entropy
