"""The one seam for fast network passes and optimizer steps.

Every algorithm writes its loss once, in torch. What may be made faster sits here, behind two calls:

* ``forward(net, x, fast=...)``: ``net(x)``, through a written-out :class:`Pass` of the network body
  when :func:`body` has one (a plain MLP in numpy, a ReLU ensemble with kept buffers), inside autograd,
  so the loss above it and its gradient are the ordinary torch ones.
* ``gradient_step(optimizer, loss, max_grad_norm, fast=...)``: clear, backward, clip, step, with
  PyTorch's public calls or their bit-identical fast forms (a fused Adam's kernel called directly,
  RMSprop on flat buffers).

An agent's ``fast="auto"`` (the default) uses both; ``fast="off"`` calls the modules and optimizers
as they are. Every private PyTorch name lives in :mod:`.private_torch`, checked once at import.
"""

from __future__ import annotations

from . import private_torch
from .body import EnsemblePass, MLPPass, Pass, body, forward
from .optim import (
    FlatRMSprop,
    clear_grads,
    clip_grad_norm,
    gradient_step,
    optimizer_step,
    polyak_update,
    set_grad_scaler,
)

__all__ = [
    "EnsemblePass",
    "FlatRMSprop",
    "MLPPass",
    "Pass",
    "body",
    "clear_grads",
    "clip_grad_norm",
    "forward",
    "gradient_step",
    "optimizer_step",
    "polyak_update",
    "private_torch",
    "set_grad_scaler",
]
