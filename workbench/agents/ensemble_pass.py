"""An :class:`~workbench.agents.networks.EnsembleMLP`'s forward and backward pass written out, for
batches of thousands of rows (CQL's critics on its sampled actions).

Continuous CQL runs its twin critics on 256 logged rows and 3 x 10 x 256 sampled-action rows each
gradient step, and at 64-wide layers most of its time is these passes. Through autograd each one
allocates every activation and every gradient afresh (megabytes a step, which the allocator hands
back to the system and takes again page by page), and computes the first layer's weight gradient as
``grad.T @ input``, a product with a 4-column output that runs at an eighth of the speed of the same
product taken the other way round (718 µs against 95 µs at 7,936 rows, measured on this project's
2-core machine). Here the activations and gradients live in buffers kept from one step to the next,
each weight gradient is ``(input.T @ grad).T``, and the ReLU's backward is applied in place: the same
arithmetic as autograd's, equal to float32 rounding (``tests/test_ensemble_pass.py``).

:meth:`EnsemblePass.of` returns None for any ensemble it cannot run (a shared encoder, an activation
other than ReLU, a hook, a frozen or non-float32 parameter); the caller then keeps autograd.
"""

from __future__ import annotations

import torch
from torch import nn

from .networks import EnsembleMLP, global_hooks_set

__all__ = ["EnsemblePass"]


def _relu_backward_in_place(grad: torch.Tensor, activation: torch.Tensor) -> None:
    """``grad[activation <= 0] = 0`` without allocating (autograd's own ReLU backward kernel)."""
    torch.ops.aten.threshold_backward.grad_input(grad, activation, 0.0, grad_input=grad)


class EnsemblePass:
    """Forward (keeping what the backward needs) and backward of a plain ReLU ``EnsembleMLP``,
    writing each parameter's ``.grad``; see the module docstring for why and when."""

    def __init__(self, ensemble: EnsembleMLP) -> None:
        self.ensemble = ensemble
        self._structure = self._layers_of(ensemble)
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._kept: list[list[torch.Tensor]] = []

    @classmethod
    def of(cls, ensemble: nn.Module) -> EnsemblePass | None:
        """A written-out pass of ``ensemble``, or None when it is not one this class can run."""
        if type(ensemble) is not EnsembleMLP or ensemble.encoder is not None or not cls._plain(ensemble):
            return None
        return cls(ensemble)

    @staticmethod
    def _layers_of(ensemble: EnsembleMLP) -> tuple[tuple[nn.Module, ...], ...]:
        return tuple(tuple(member._modules.values()) for member in ensemble.members)

    @classmethod
    def _plain(cls, ensemble: EnsembleMLP) -> bool:
        """Every member a ``Sequential`` of ``Linear`` layers with ReLU between them and a ``Linear``
        last; no hook anywhere; every parameter a trainable float32 CPU tensor."""
        if global_hooks_set() or ensemble._forward_hooks or ensemble._forward_pre_hooks:
            return False
        for member in ensemble.members:
            if type(member) is not nn.Sequential or member._forward_hooks or member._forward_pre_hooks:
                return False
            layers = list(member._modules.values())
            kinds = [type(layer) for layer in layers]
            if not layers or kinds[0::2] != [nn.Linear] * len(kinds[0::2]) or kinds[-1] is not nn.Linear:
                return False
            if any(kind is not nn.ReLU for kind in kinds[1::2]):
                return False
            for layer in layers:
                if layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks:
                    return False
            for p in member.parameters():
                if p.dtype != torch.float32 or p.device.type != "cpu" or not p.requires_grad or p._backward_hooks:
                    return False
            if any(layer.bias is None for layer in layers[0::2]):
                return False
        return True

    def usable(self) -> bool:
        """False once the ensemble changed in a way this pass does not follow (a layer replaced, a
        hook set, a parameter frozen); parameters updated or replaced in place are always read afresh."""
        return self._layers_of(self.ensemble) == self._structure and self._plain(self.ensemble)

    def _buffer(self, key: tuple, shape: tuple[int, ...]) -> torch.Tensor:
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != shape:
            buffer = self._buffers[key] = torch.empty(shape)
        return buffer

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every member's output for the rows ``x``, shape ``(n, rows, out_dim)``, as
        ``ensemble(x)`` gives it; keeps each layer's input for :meth:`backward` until the next call."""
        rows = x.shape[0]
        linears = [member[0::2] for member in self._structure]
        out = self._buffer(("out",), (len(linears), rows, linears[0][-1].out_features))
        self._kept = []
        for m, layers in enumerate(linears):
            kept = [x]
            for i, layer in enumerate(layers):
                last = i == len(layers) - 1
                y = out[m] if last else self._buffer(("act", m, i), (rows, layer.out_features))
                torch.addmm(layer.bias, kept[-1], layer.weight.t(), out=y)
                if not last:
                    y.relu_()
                    kept.append(y)
            self._kept.append(kept)
        return out

    @torch.no_grad()
    def backward(self, grad_out: torch.Tensor) -> None:
        """Set every parameter's ``.grad`` (overwriting it) to the gradient of the loss whose gradient
        with respect to :meth:`forward`'s output is ``grad_out`` (same shape)."""
        for m, member in enumerate(self._structure):
            layers, kept = member[0::2], self._kept[m]
            grad = grad_out[m]
            for i in range(len(layers) - 1, -1, -1):
                layer, inp = layers[i], kept[i]
                weight, bias = layer.weight, layer.bias
                for p in (weight, bias):
                    if p.grad is None or p.grad.shape != p.shape:
                        p.grad = torch.empty_like(p)
                # (input.T @ grad).T: the other order is several times slower for a narrow layer
                transposed = self._buffer(("dw", m, i), (layer.in_features, layer.out_features))
                torch.mm(inp.t(), grad, out=transposed)
                weight.grad.copy_(transposed.t())
                torch.sum(grad, 0, out=bias.grad)
                if i:
                    below = self._buffer(("grad", m, i), inp.shape)
                    torch.mm(grad, weight, out=below)
                    _relu_backward_in_place(below, inp)
                    grad = below
