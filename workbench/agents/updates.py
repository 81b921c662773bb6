"""A gradient step and a Polyak update, written once for every agent, with PyTorch's public calls only.

:func:`gradient_step` is what every agent's update does with a loss: ``optimizer.zero_grad()``,
``loss.backward()``, ``clip_grad_norm_`` when a bound is given, ``optimizer.step()`` (through a gradient
scaler under ``precision="fp16"``). The networks run as the modules they are and autograd takes the
backward pass, so a subclass that changes a network's ``forward`` or a loss gets exactly what it wrote.
The speed comes from how the optimizers are built (``torch.optim.Adam(..., fused=True)``,
:func:`~workbench.agents.networks.make_adam`; docs/speed.md).
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

__all__ = ["gradient_step", "polyak_update", "set_grad_scaler"]

_SCALERS: weakref.WeakKeyDictionary[torch.optim.Optimizer, torch.amp.GradScaler] = weakref.WeakKeyDictionary()


def set_grad_scaler(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> None:
    """Make :func:`gradient_step` scale ``optimizer``'s losses with ``scaler`` (``precision="fp16"``):
    the loss scaled before backward, the gradients unscaled before clipping, the step skipped when
    they overflowed. None removes it."""
    if scaler is None:
        _SCALERS.pop(optimizer, None)
    else:
        _SCALERS[optimizer] = scaler


def gradient_step(
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    max_grad_norm: float | None = None,
    *,
    only_optimized: bool = False,
) -> None:
    """One step of ``optimizer`` on ``loss``: clear its parameters' gradients, ``loss.backward()``,
    clip the gradients' total norm to ``max_grad_norm`` (when given), step. ``only_optimized``
    computes gradients for the optimizer's own trainable parameters only (``backward(inputs=...)``),
    so other networks the loss went through get none."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    scaler = _SCALERS.get(optimizer)
    optimizer.zero_grad(set_to_none=True)
    scaled = loss if scaler is None else scaler.scale(loss)
    if only_optimized:
        trained = [p for p in params if p.requires_grad]
        if trained:
            scaled.backward(inputs=trained)
    else:
        scaled.backward()
    if max_grad_norm is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * online`` for every parameter (``tau >= 1`` copies)."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        if tau >= 1.0:
            t.copy_(o)
        else:
            t.lerp_(o, tau)
