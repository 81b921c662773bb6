"""The heads of a composite action space (``Dict`` / ``Tuple``, :mod:`workbench.envs.composite`) on one policy
network, written once for PPO, A2C and RecurrentPPO.

The policy network's last layer holds every leaf's outputs one after the other (logits for a Discrete or
MultiDiscrete leaf, one logit per bit for MultiBinary, the means for Box, whose log std is the agent's
state-independent ``log_std``, one entry per Box element). The joint log-probability and entropy are the
sums over the heads; in a hybrid space (``Tuple(Discrete(k), <k branches>)``) a branch's heads count only
in the rows that chose that branch (H-PPO, Fan et al. 2019): the unchosen parameters do not enter the loss.
Masks are one bool row per state, the discrete leaves' masks one after the other.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..envs.composite import ActionLayout, Leaf
from .networks import drawn_like, sample_index

__all__ = ["CompositeMode", "HeadTerms", "composite_terms", "head_terms", "sample_composite"]

_MASKED_LOGIT = -1e8  # on_policy.MASKED_LOGIT (a test checks they agree)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class HeadTerms(NamedTuple):
    """One head's log-probabilities of the actions, its entropies and its weight in each row (1, or 0 for a
    hybrid branch the row did not choose)."""

    log_prob: torch.Tensor
    entropy: torch.Tensor
    weight: torch.Tensor | None


def _slices(layout: ActionLayout) -> list[tuple[Leaf, int, int]]:
    """Each leaf with its first policy output and its first ``log_std`` entry (Box leaves)."""
    out, o, b = [], 0, 0
    for leaf in layout.leaves:
        out.append((leaf, o, b))
        o += leaf.outputs
        b += leaf.width if leaf.kind == "box" else 0
    return out


def _logits(out: torch.Tensor, leaf: Leaf, o: int, masks: torch.Tensor | None) -> torch.Tensor:
    logits = out[:, o : o + leaf.outputs]
    if masks is not None and leaf.mask_width:
        logits = logits.masked_fill(~masks[:, leaf.mask_start : leaf.mask_start + leaf.mask_width], _MASKED_LOGIT)
    return logits


def _weight(layout: ActionLayout, leaf: Leaf, actions: torch.Tensor) -> torch.Tensor | None:
    if leaf.branch is None:
        return None
    return (actions[:, 0].long() == leaf.branch).to(actions.dtype)


def head_terms(
    out: torch.Tensor,
    log_std: torch.Tensor | None,
    actions: torch.Tensor,
    layout: ActionLayout,
    masks: torch.Tensor | None = None,
) -> list[HeadTerms]:
    """Every head's :class:`HeadTerms` for ``actions`` (rows of the layout) under the policy outputs ``out``."""
    terms = []
    for leaf, o, b in _slices(layout):
        a = actions[:, leaf.start : leaf.stop]
        if leaf.kind == "box":
            assert log_std is not None
            mean, ls = out[:, o : o + leaf.outputs], log_std[b : b + leaf.width].expand(out.shape[0], -1)
            z = (a - mean) / ls.exp()
            log_prob = (-0.5 * z.pow(2) - ls - _HALF_LOG_2PI).sum(-1)
            entropy = (0.5 + _HALF_LOG_2PI + ls).sum(-1)
        elif leaf.kind == "multibinary":
            logits = out[:, o : o + leaf.outputs]
            log_prob = -F.binary_cross_entropy_with_logits(logits, a, reduction="none").sum(-1)
            entropy = F.binary_cross_entropy_with_logits(logits, torch.sigmoid(logits), reduction="none").sum(-1)
        else:
            logits = _logits(out, leaf, o, masks)
            log_prob = torch.zeros(out.shape[0], device=out.device)
            entropy = torch.zeros(out.shape[0], device=out.device)
            for d, part in enumerate(torch.split(logits, list(leaf.nvec), dim=-1)):
                log_p = torch.log_softmax(part, dim=-1)
                log_prob = log_prob + log_p.gather(1, a[:, d].long().reshape(-1, 1)).squeeze(1)
                entropy = entropy - (log_p.exp() * log_p).sum(-1)
        terms.append(HeadTerms(log_prob, entropy, _weight(layout, leaf, actions)))
    return terms


def composite_terms(
    out: torch.Tensor,
    log_std: torch.Tensor | None,
    actions: torch.Tensor,
    layout: ActionLayout,
    masks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The joint log-probabilities of ``actions`` and the joint entropies: sums over the heads (a hybrid
    branch's heads only where it was chosen)."""
    log_prob = torch.zeros(out.shape[0], device=out.device)
    entropy = torch.zeros(out.shape[0], device=out.device)
    for t in head_terms(out, log_std, actions, layout, masks):
        log_prob = log_prob + (t.log_prob if t.weight is None else t.log_prob * t.weight)
        entropy = entropy + (t.entropy if t.weight is None else t.entropy * t.weight)
    return log_prob, entropy


def sample_composite(
    out: torch.Tensor,
    log_std: torch.Tensor | None,
    layout: ActionLayout,
    masks: torch.Tensor | None,
    deterministic: bool,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Action rows from the policy outputs ``out`` and their joint log-probabilities: each head's mode when
    ``deterministic`` (log-probabilities None), else a draw of each head in turn from ``generator`` (a
    categorical dimension drawn as :func:`~workbench.agents.networks.sample_index` draws it, so a Dict of
    Discrete leaves draws what the MultiDiscrete it spells out draws)."""
    columns: list[torch.Tensor] = []
    log_prob = None if deterministic else torch.zeros(out.shape[0], device=out.device)
    choice: torch.Tensor | None = None
    for leaf, o, b in _slices(layout):
        head_lp = None
        if leaf.kind == "box":
            mean = out[:, o : o + leaf.outputs]
            if deterministic:
                columns.append(mean)
                continue
            assert log_std is not None
            ls = log_std[b : b + leaf.width]
            noise = drawn_like(torch.randn(mean.shape, generator=generator), mean)
            columns.append(mean + ls.exp() * noise)
            head_lp = (-0.5 * noise.pow(2) - ls - _HALF_LOG_2PI).sum(-1)
        elif leaf.kind == "multibinary":
            logits = out[:, o : o + leaf.outputs]
            if deterministic:
                columns.append((logits > 0).to(out.dtype))
                continue
            draws = (drawn_like(torch.rand(logits.shape, generator=generator), logits) < torch.sigmoid(logits)).float()
            columns.append(draws)
            head_lp = -F.binary_cross_entropy_with_logits(logits, draws, reduction="none").sum(-1)
        else:
            logits = _logits(out, leaf, o, masks)
            for part in torch.split(logits, list(leaf.nvec), dim=-1) if len(leaf.nvec) > 1 else (logits,):
                if deterministic:
                    columns.append(part.argmax(-1, keepdim=True).to(out.dtype))
                    continue
                log_p = F.log_softmax(part, dim=-1)
                a = sample_index(log_p.exp(), generator)
                lp = log_p.gather(1, a.unsqueeze(1)).squeeze(1)
                head_lp = lp if head_lp is None else head_lp + lp
                columns.append(a.unsqueeze(1).to(out.dtype))
            if leaf.start == 0 and layout.hybrid:
                choice = columns[0][:, 0]
        if log_prob is not None and head_lp is not None:
            if leaf.branch is not None:  # a hybrid branch counts where it was chosen
                assert choice is not None
                head_lp = head_lp * (choice.long() == leaf.branch).to(head_lp.dtype)
            log_prob = log_prob + head_lp
    return torch.cat(columns, dim=1), log_prob


class CompositeMode(nn.Module):
    """Export's head for a composite action space: each head's most likely action, one output per leaf in the
    layout's order (Discrete: int64 ``(batch,)`` shifted by the space's ``start``; MultiDiscrete and MultiBinary:
    int64 ``(batch, n)``; Box: float32 in the leaf's shape, the mean clipped to its bounds), among the allowed
    actions when a mask row is given."""

    def __init__(self, net: nn.Module, layout: ActionLayout) -> None:
        super().__init__()
        self.net = net
        self.layout = layout
        self.slices = _slices(layout)
        for leaf, _, _ in self.slices:
            if leaf.kind == "box":
                low = torch.as_tensor(leaf.space.low, dtype=torch.float32).reshape(-1)  # type: ignore[attr-defined]
                high = torch.as_tensor(leaf.space.high, dtype=torch.float32).reshape(-1)  # type: ignore[attr-defined]
                self.register_buffer(f"low_{leaf.start}", low)
                self.register_buffer(f"high_{leaf.start}", high)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """One tensor per leaf (see the class docstring)."""
        out = self.net(x)
        outputs = []
        for leaf, o, _ in self.slices:
            if leaf.kind == "box":
                mean = out[:, o : o + leaf.outputs]
                low, high = getattr(self, f"low_{leaf.start}"), getattr(self, f"high_{leaf.start}")
                outputs.append(torch.minimum(torch.maximum(mean, low), high).reshape(-1, *leaf.space.shape))
            elif leaf.kind == "multibinary":
                outputs.append((out[:, o : o + leaf.outputs] > 0).long().reshape(-1, *leaf.space.shape))
            else:
                parts = torch.split(_logits(out, leaf, o, mask), list(leaf.nvec), dim=-1)
                if leaf.kind == "discrete":
                    outputs.append(parts[0].argmax(-1) + int(leaf.space.start))  # type: ignore[attr-defined]
                else:
                    outputs.append(torch.stack([p.argmax(-1) for p in parts], dim=-1))
        return tuple(outputs)
