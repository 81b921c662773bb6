"""Small network builders shared by the agents."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..validation import ArgumentError

__all__ = [
    "ACTIVATIONS",
    "DuelingQNetwork",
    "EnsembleMLP",
    "LayerFactory",
    "NoisyLinear",
    "ScalarParameter",
    "NETWORKS",
    "SimBa",
    "SimBaNetwork",
    "check_network",
    "drawn_like",
    "gaussian_policy_terms",
    "make_adam",
    "mlp",
    "multinomial",
    "network",
    "noise_off",
    "reset_noise",
    "sample_index",
]

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}

NETWORKS = ("mlp", "simba")
"""What an actor-critic agent's ``network=`` names: ``"mlp"`` (layers of ``net_arch``) or ``"simba"``
(:class:`SimBaNetwork`, one block per entry of ``net_arch``)."""

LayerFactory = Callable[[int], nn.Module]
"""Builds one layer for a given feature width (``nn.LayerNorm``, ``BatchRenorm1d``, a dropout that ignores it)."""


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    *,
    activation: str = "relu",
    ortho_init: bool = False,
    output_gain: float = 1.0,
    noisy: bool = False,
    before: Sequence[LayerFactory] = (),
    after: Sequence[LayerFactory] = (),
) -> nn.Sequential:
    """A multilayer perceptron ``in_dim -> hidden... -> out_dim``.

    ``before`` builds layers placed before every linear layer, the output layer included (CrossQ's batch
    renormalization of each layer's input); ``after`` builds layers between every hidden linear layer and
    its activation (DroQ's dropout and layer norm). Each is called with the width it sees; both are empty
    by default, which builds exactly the plain stack (same modules, same initial weights).

    With ``ortho_init`` the hidden layers get orthogonal weights with gain sqrt(2) and the output
    layer ``output_gain`` (0.01 for a policy head, 1 for a value head), as in the PPO paper's code.
    With ``noisy`` every layer but the first is a :class:`NoisyLinear` (the first embeds the input,
    as the convolutions do in the Rainbow paper, where only the fully connected layers are noisy).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    last = in_dim
    for i, width in enumerate(hidden):
        layers += [make(last) for make in before]
        linear = NoisyLinear(last, width) if noisy and i > 0 else nn.Linear(last, width)
        if ortho_init:
            nn.init.orthogonal_(linear.weight, math.sqrt(2))
            nn.init.zeros_(linear.bias)
        layers += [linear, *(make(width) for make in after), act()]
        last = width
    layers += [make(last) for make in before]
    head = NoisyLinear(last, out_dim) if noisy and hidden else nn.Linear(last, out_dim)
    if ortho_init and not isinstance(head, NoisyLinear):
        nn.init.orthogonal_(head.weight, output_gain)
        nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


def make_adam(
    params: Sequence[torch.Tensor] | object,
    lr: float,
    eps: float = 1e-8,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.Adam:
    """``torch.optim.Adam`` with its fused kernel (one kernel for every parameter's update, the fastest
    on the CPU at these sizes: docs/speed.md), else its ``foreach`` form where this torch has no fused one.
    ``betas`` are Adam's moment decays (CrossQ uses (0.5, 0.999): Bhatt et al. 2024)."""
    params = list(params)  # type: ignore[call-overload]
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, betas=betas, fused=True)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch builds
        return torch.optim.Adam(params, lr=lr, eps=eps, betas=betas, foreach=True)


class _ResidualBlock(nn.Module):
    """SimBa's block: ``x + W2 relu(W1 LayerNorm(x))``, the inner layer four times as wide."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.inner = nn.Linear(width, 4 * width)
        self.outer = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's input plus its residual."""
        return x + self.outer(torch.relu(self.inner(self.norm(x))))


@dataclasses.dataclass(frozen=True)
class SimBa:
    """The SimBa network as an agent's setting: ``network=wb.SimBa(width, blocks)`` (Lee et al. 2025).

    The agent stores it as ``network="simba"`` with ``net_arch=(width,) * blocks``; ``net_arch="simba"`` is
    ``network=wb.SimBa()``. Vector observations are normalized by running statistics (the agent's
    ``normalize_observations``, which SimBa turns on unless set; images are scaled by the encoder). Example::

        agent = wb.SAC("Pendulum-v1", network=wb.SimBa(width=128, blocks=2))
    """

    width: int = 256
    """Features of every residual block (the inner layer of each block is four times as wide)."""
    blocks: int = 2
    """Residual blocks, each ``x + W2 relu(W1 LayerNorm(x))``."""

    def __post_init__(self) -> None:
        for name in ("width", "blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(
                    f"SimBa got {name}={value!r}: {name} must be an integer >= 1, such as SimBa(256, 2)"
                )

    @property
    def net_arch(self) -> tuple[int, ...]:
        """The widths as an agent's ``net_arch`` holds them: ``(width,) * blocks``."""
        return (self.width,) * self.blocks


def check_network(config: Any, owner: str, use_sde: bool = False) -> None:
    """The rules of ``network=`` every actor-critic config checks: a kind the agent takes (its ``networks``),
    and for ``"simba"`` no gSDE (its noise reads an MLP's last hidden layer) and one width for every block.
    (Observation normalization, the paper's first part, is turned on where SimBa is chosen for vector
    observations, unless ``normalize_observations=False``.)"""
    if config.network in NETWORKS and config.network not in type(config).networks:
        raise ArgumentError(
            f"{owner} got network={config.network!r}: {type(config).network_note}; leave network out (the other "
            'actor-critic agents take network="simba")'
        )
    if config.network != "simba":
        return
    if use_sde:
        raise ArgumentError(f'{owner} got network="simba" and use_sde=True: gSDE needs an MLP; leave one out')
    widths = config.net_arch
    if isinstance(widths, tuple | list) and len(set(widths)) != 1:
        raise ArgumentError(
            f'{owner} got network="simba" with net_arch={tuple(widths)!r}: SimBa takes one width repeated once per '
            "residual block, such as (256, 256) for two blocks of width 256 (or network=wb.SimBa(256, 2))"
        )


class SimBaNetwork(nn.Module):
    """The SimBa network (Lee et al. 2025, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep
    Reinforcement Learning"): a linear embedding to ``width``, ``blocks`` residual feed-forward blocks with layer
    normalization before each, a final layer norm, then the linear output. The paper's third part, running
    observation normalization, is the agent's ``normalize_observations``, which choosing SimBa turns on for vector
    observations.

    Built from ``net_arch`` as the agents take it: ``net_arch=(256, 256)`` is width 256 with two blocks (every
    width the same). Its residual path keeps the network close to a simple (linear) function as it grows, which
    is what lets it scale in width and depth where a plain MLP overfits."""

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int) -> None:
        super().__init__()
        widths = set(hidden)
        if len(widths) != 1:
            raise ValueError(
                f"a SimBa network takes net_arch as one width repeated once per residual block, such as (256, 256); "
                f"got {tuple(hidden)}"
            )
        width = widths.pop()
        self.embed = nn.Linear(in_dim, width)
        self.blocks = nn.Sequential(*(_ResidualBlock(width) for _ in hidden))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs, ``(batch, out_dim)``."""
        return self.head(self.norm(self.blocks(self.embed(x))))


def network(kind: str, in_dim: int, hidden: Sequence[int], out_dim: int) -> nn.Module:
    """The network an agent's ``network=`` names: ``"mlp"`` (:func:`mlp`, ReLU) or ``"simba"``
    (:class:`SimBaNetwork`)."""
    if kind == "simba":
        return SimBaNetwork(in_dim, hidden, out_dim)
    if kind == "mlp":
        return mlp(in_dim, hidden, out_dim, activation="relu")
    raise ValueError(f"unknown network {kind!r}; choose from mlp, simba")


class DuelingQNetwork(nn.Module):
    """Dueling architecture (Wang et al. 2016): a shared trunk, a state-value head and an advantage
    head, combined as ``Q = V + A - mean(A)`` so V and A are identifiable.

    With ``atoms > 1`` (distributional agents) each action has ``atoms`` outputs (quantiles or
    logits) and the combination is made per atom, as in Rainbow; the output is then flat,
    ``(batch, n_actions * atoms)``. ``noisy`` makes the heads (and trunk layers after the first)
    :class:`NoisyLinear`."""

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int],
        n_actions: int,
        activation: str = "relu",
        *,
        atoms: int = 1,
        noisy: bool = False,
    ) -> None:
        super().__init__()
        if not hidden:
            raise ValueError("a dueling network needs at least one hidden layer (net_arch)")
        self.n_actions, self.atoms = n_actions, atoms
        self.trunk = mlp(in_dim, hidden[:-1], hidden[-1], activation=activation, noisy=noisy)
        self.trunk.append(ACTIVATIONS[activation]())
        head = NoisyLinear if noisy else nn.Linear
        self.value = head(hidden[-1], atoms)
        self.advantage = head(hidden[-1], n_actions * atoms)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values of every action, shape ``(batch, n_actions)`` (``(batch, n_actions * atoms)``)."""
        h = self.trunk(obs)
        if self.atoms == 1:
            adv = self.advantage(h)
            return self.value(h) + adv - adv.mean(-1, keepdim=True)
        adv = self.advantage(h).view(-1, self.n_actions, self.atoms)
        out = self.value(h).unsqueeze(1) + adv - adv.mean(1, keepdim=True)
        return out.flatten(1)


class NoisyLinear(nn.Module):
    """A linear layer with learned, factorised Gaussian noise on its weights (Fortunato et al. 2018,
    "Noisy Networks for Exploration"): ``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b``
    with ``eps_w = f(eps_out) f(eps_in)^T`` and ``f(x) = sign(x) sqrt(|x|)``.

    The noise is drawn by :meth:`reset_noise` (the agent calls it with its own generator) and held
    until the next call; it is not module state, so checkpoints and Ray weights carry only the
    learned ``mu`` and ``sigma``. In eval mode the layer is deterministic: ``y = mu_w x + mu_b``.
    """

    def __init__(self, in_features: int, out_features: int, sigma_init: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma_init * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma_init * bound))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)

    @staticmethod
    def _scaled(noise: torch.Tensor) -> torch.Tensor:
        return noise.sign() * noise.abs().sqrt()

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new factorised noise (held until the next call)."""
        self.eps_in.copy_(self._scaled(torch.randn(self.in_features, generator=generator)))
        self.eps_out.copy_(self._scaled(torch.randn(self.out_features, generator=generator)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Noisy in training mode, the mean weights in eval mode."""
        if not self.training:
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return nn.functional.linear(x, weight, self.bias_mu + self.bias_sigma * self.eps_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def reset_noise(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """New noise in every :class:`NoisyLinear` of ``module``."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, NoisyLinear):
                m.reset_noise(generator)


@contextlib.contextmanager
def noise_off(module: nn.Module) -> Iterator[None]:
    """Within the block, every :class:`NoisyLinear` of ``module`` uses its mean weights (greedy,
    deterministic acting), whatever the module's mode."""
    noisy = [m for m in module.modules() if isinstance(m, NoisyLinear) and m.training]
    for m in noisy:
        m.training = False
    try:
        yield
    finally:
        for m in noisy:
            m.training = True


class EnsembleMLP(nn.Module):
    """``n`` independent MLPs on the same input (twin critics for TD3 and SAC), outputs stacked;
    ``before`` and ``after`` as :func:`mlp`'s; ``simba`` makes each member a :class:`SimBaNetwork`.

    Measured on 2 CPU cores, ``n`` plain ``nn.Linear`` stacks beat one batched-matmul ensemble
    (``baddbmm``'s backward is slower than ``addmm``'s), so this is a thin ``ModuleList``.
    Input ``(batch, in_dim)``; output ``(n, batch, out_dim)``.
    """

    def __init__(
        self,
        n: int,
        in_dim: int,
        hidden: Sequence[int],
        out_dim: int,
        activation: str = "relu",
        *,
        encoder: nn.Module | None = None,
        before: Sequence[LayerFactory] = (),
        after: Sequence[LayerFactory] = (),
        simba: bool = False,
    ) -> None:
        super().__init__()
        if n < 1:
            raise ValueError(f"an ensemble needs at least one member, got n={n}")
        self.n = n
        if simba:  # SimBa members (its own normalization: no layers before or after)
            self.members = nn.ModuleList(SimBaNetwork(in_dim, hidden, out_dim) for _ in range(n))
        else:
            self.members = nn.ModuleList(
                mlp(in_dim, hidden, out_dim, activation=activation, before=before, after=after) for _ in range(n)
            )
        # An observation encoder shared by the members (a CNN for images); None for vectors.
        self.encoder = encoder

    def forward(self, x: torch.Tensor, actions: torch.Tensor | None = None, member: int | None = None) -> torch.Tensor:
        """Outputs of every member, shape ``(n, batch, out_dim)``; with ``actions`` the input is
        ``(encoded observations, actions)`` concatenated (critics); ``member=i`` gives that member's
        output alone, ``(batch, out_dim)``."""
        if actions is not None:
            if self.encoder is not None:
                x = self.encoder(x)
            x = torch.cat([x, actions], -1)
        if member is not None:
            return self.members[member](x)
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


def drawn_like(drawn: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Random numbers drawn from an agent's generator (which stays on the CPU, saved with the agent,
    so a run draws the same numbers on every device), on ``like``'s device."""
    return drawn if drawn.device == like.device else drawn.to(like.device)


def multinomial(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of ``probs``: ``torch.multinomial(probs, 1, generator=generator).squeeze(1)``,
    drawn on the CPU generator's device and moved back when ``probs`` is elsewhere."""
    if probs.device == generator.device:
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(probs.device)


def sample_index(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of ``probs`` (rows of probabilities), drawn as
    ``torch.multinomial(probs, 1, generator=generator).squeeze(1)`` draws it: the same draws from the
    same generator, so the same actions. PyTorch samples one index by an exponential race
    (``argmax(probs / q)``, ``q ~ Exp(1)``); this runs that race without multinomial's checks of the
    probabilities (two reductions and two host syncs, more than half its time at acting sizes).
    The probabilities here come from a softmax of finite logits: NaN logits cannot reach acting in a
    session (the env's observations and every update's loss are checked)."""
    if probs.device == generator.device:
        q = torch.empty_like(probs).exponential_(1, generator=generator)
    else:  # the agent's generator stays on the CPU (saved with it): draw there, then move
        q = torch.empty(probs.shape, dtype=probs.dtype).exponential_(1, generator=generator).to(probs.device)
    return probs.div_(q).argmax(-1)
