"""Network bodies whose forward and backward are written out, behind one seam: :func:`body` and :func:`forward`.

A fast path here replaces how a network *runs*, never what a loss computes: :func:`forward` returns the
same tensor ``net(x)`` would, inside autograd (an ``autograd.Function`` whose backward is the pass's
own), so every loss above it, an agent's or a subclass's, is the ordinary torch code and its gradient
reaches the parameters through autograd as usual (parameter hooks included).

``body(net)`` returns a :class:`Pass` for a network it can run, None for any other (the caller then
calls ``net(x)``):

* :class:`MLPPass`: a plain ``nn.Sequential`` of ``Linear`` (with bias), ``Tanh`` and ``ReLU`` layers,
  float32 on the CPU, no hooks: its forward and backward in numpy, on views of the parameters' own
  memory. At on-policy sizes (a few to a few hundred rows, 64-wide layers) a PyTorch op costs a few
  microseconds of dispatch for nanoseconds of arithmetic, and autograd's graph doubles that; numpy
  does the same arithmetic for less (docs/speed.md).
* :class:`EnsemblePass`: a plain ReLU :class:`~workbench.agents.networks.EnsembleMLP` (twin critics)
  at thousands of rows (CQL): buffers kept between steps, each weight gradient taken as
  ``(input.T @ grad).T``, the faster order for a narrow layer.

The numbers equal autograd's to float32 rounding (numpy's matrix kernel is not PyTorch's, so the last
bits may differ); ``fast="off"`` on an agent keeps the plain modules.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ..networks import EnsembleMLP
from . import private_torch

__all__ = ["EnsemblePass", "MLPPass", "Pass", "body", "forward"]


class Pass(Protocol):
    """What a written-out network body offers :func:`forward`."""

    params: list[torch.Tensor]
    """The parameters, in the order :meth:`backward` returns their gradients."""

    def usable(self) -> bool:
        """False once the network changed in a way this pass does not follow."""

    def forward_keeping(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The output for ``x``, and what :meth:`backward` needs."""

    def backward(self, kept: Any, grad_out: torch.Tensor, need_input: bool) -> tuple[torch.Tensor | None, list]:
        """Gradients of the input (when ``need_input``) and of each parameter, for the loss whose gradient
        with respect to the output is ``grad_out``."""


# -- the seam -----------------------------------------------------------------------------------------------


_PASSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def body(net: nn.Module) -> Pass | None:
    """A written-out pass of ``net`` (kept for it while it stays usable), or None when ``net`` is not a
    network this module runs (any other class, a hook, a frozen or non-float32 parameter...)."""
    found = _PASSES.get(net)
    if found is not None and found.usable():
        return found
    found = MLPPass.of(net) or EnsemblePass.of(net)
    if found is not None:
        _PASSES[net] = found
    return found


class _Body(torch.autograd.Function):
    """``net(x)`` through a pass's forward, its backward the pass's own."""

    @staticmethod
    def forward(ctx: Any, written: Pass, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        out, kept = written.forward_keeping(x)
        ctx.written, ctx.kept = written, kept
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        need = ctx.needs_input_grad
        grad_x, grads = ctx.written.backward(ctx.kept, grad_out, bool(need[1]))
        ctx.kept = None
        return (None, grad_x, *(g if n else None for g, n in zip(grads, need[2:], strict=True)))


def forward(net: nn.Module, x: torch.Tensor, *, fast: bool = True) -> torch.Tensor:
    """``net(x)``, through its written-out :func:`body` when ``fast`` and there is one (inside autograd
    when gradients are on), else the module's own call."""
    written = body(net) if fast else None
    if written is None:
        return net(x)
    if not torch.is_grad_enabled():
        return written.forward_keeping(x)[0]
    if x.requires_grad or any(p.requires_grad for p in written.params):
        return _Body.apply(written, x, *written.params)
    with torch.no_grad():
        return written.forward_keeping(x)[0]


# -- a plain MLP in numpy ------------------------------------------------------------------------------------

_NUMPY_MATMUL_MAX_WORK = 65536 * 4
"""The largest ``m * k * n`` product a matrix product here leaves to numpy. Up to it OpenBLAS (the
BLAS of numpy's wheels on Linux and Windows) multiplies on one thread; above it OpenBLAS starts its
own threads, which on a busy machine spin against the training thread (docs/speed.md). Larger
products go to ``torch.mm``, which keeps to the session's torch thread count."""


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-d float32 arrays: numpy for small products, ``torch.mm`` above
    :data:`_NUMPY_MATMUL_MAX_WORK`."""
    if a.shape[0] * a.shape[1] * b.shape[1] <= _NUMPY_MATMUL_MAX_WORK:
        return np.matmul(a, b)
    return torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()


_ACTIVATIONS = (nn.Tanh, nn.ReLU)


class MLPPass:
    """Forward and backward of a plain MLP (``nn.Sequential`` of ``Linear``, ``Tanh``, ``ReLU``, a
    ``Linear`` last) in numpy, on views of the parameters' memory (so always the current weights; a
    parameter whose tensor was replaced is rebound at the next :meth:`usable`)."""

    def __init__(self, net: nn.Sequential) -> None:
        self.net = net
        self._layers = tuple(net._modules.values())
        self._modules = (net, *self._layers)
        self._bind()

    @classmethod
    def of(cls, net: nn.Module) -> MLPPass | None:
        """A pass of ``net``, or None when it is not a plain MLP."""
        if type(net) is not nn.Sequential or not cls._plain(net):
            return None
        return cls(net)

    @staticmethod
    def _plain(net: nn.Sequential) -> bool:
        layers = list(net._modules.values())
        if not layers or type(layers[-1]) is not nn.Linear or "forward" in net.__dict__:
            return False
        if private_torch.global_hooks_set() or private_torch.module_hooks_set(net):
            return False
        for layer in layers:
            if type(layer) not in (nn.Linear, *_ACTIVATIONS) or private_torch.module_hooks_set(layer):
                return False
            if "forward" in layer.__dict__:
                return False
            if type(layer) is nn.Linear and (
                layer.bias is None
                or any(p.dtype != torch.float32 or p.device.type != "cpu" for p in (layer.weight, layer.bias))
            ):
                return False
        return True

    def _bind(self) -> None:
        self._ops: list[tuple] = []
        self._sources: list[tuple[nn.Linear, torch.Tensor, torch.Tensor, int, int]] = []
        self.params: list[torch.Tensor] = []
        for layer in self._layers:
            if type(layer) is nn.Linear:
                w, b = layer._parameters["weight"], layer._parameters["bias"]
                self._ops.append((w.detach().numpy().T, b.detach().numpy()))
                self._sources.append((layer, w, b, w.data_ptr(), b.data_ptr()))
                self.params += [w, b]
            else:
                self._ops.append((np.tanh if type(layer) is nn.Tanh else None,))

    def usable(self) -> bool:
        """False when the net changed in a way the views cannot follow (a layer added or replaced, a
        hook set); a parameter or its tensor replaced is rebound here (after the full check), and True
        returned. Runs before every pass, so it checks only what can change, cheaply."""
        net = self.net
        if tuple(net._modules.values()) != self._layers or private_torch.hooks_set(self._modules):
            return False
        for layer, w, b, w_ptr, b_ptr in self._sources:
            p = layer._parameters
            if p["weight"] is not w or p["bias"] is not b or w.data_ptr() != w_ptr or b.data_ptr() != b_ptr:
                if not self._plain(net):
                    return False
                self._bind()
                break
        return True

    def forward_keeping(self, x: torch.Tensor) -> tuple[torch.Tensor, list[np.ndarray]]:
        """The output for the float32 rows ``x`` and every layer's input (each activation is applied
        in place to its Linear's output, so entry ``i + 1`` is also the output of an activation at ``i``)."""
        a = (x if x.dtype == torch.float32 else x.float()).detach().numpy()
        kept = [a]
        for op in self._ops:
            if len(op) == 2:
                a = matmul(a, op[0])
                a += op[1]
            elif op[0] is None:
                np.maximum(a, 0, out=a)
            else:
                op[0](a, out=a)
            kept.append(a)
        return torch.from_numpy(a), kept

    def backward(
        self, kept: list[np.ndarray], grad_out: torch.Tensor, need_input: bool = False
    ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """The gradients of the input (when ``need_input``) and of every Linear layer's weight and bias,
        in :attr:`params` order, for the loss whose gradient with respect to the output is ``grad_out``."""
        dy = grad_out.detach().numpy()
        grads: list[torch.Tensor] = [None] * len(self.params)  # type: ignore[list-item]
        k = len(self.params)
        grad_x = None
        for i in range(len(self._ops) - 1, -1, -1):
            op = self._ops[i]
            if len(op) == 2:
                k -= 2
                grads[k] = torch.from_numpy(matmul(dy.T, kept[i]))  # (out, batch) @ (batch, in)
                grads[k + 1] = torch.from_numpy(dy.sum(axis=0))
                if i or need_input:
                    dy = matmul(dy, op[0].T)  # op[0] is the transposed weight
                    if not i:
                        grad_x = torch.from_numpy(dy)
            elif op[0] is None:  # ReLU
                dy = dy * (kept[i + 1] > 0)
            else:  # tanh
                y = kept[i + 1]
                dy = dy * (1 - y * y)
        return grad_x, grads


# -- an ensemble of ReLU MLPs in torch, with kept buffers -----------------------------------------------------


class EnsemblePass:
    """Forward and backward of a plain ReLU :class:`EnsembleMLP` for batches of thousands of rows
    (CQL's critics on its sampled actions): activations live in buffers kept from one step to the next,
    each weight gradient is ``(input.T @ grad).T`` (several times faster than ``grad.T @ input`` for a
    narrow first layer) and the ReLU's backward is applied in place."""

    def __init__(self, ensemble: EnsembleMLP) -> None:
        self.ensemble = ensemble
        self._structure = self._layers_of(ensemble)
        self._buffers: dict[tuple, torch.Tensor] = {}
        self.params = [p for member in self._structure for layer in member[0::2] for p in (layer.weight, layer.bias)]

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
        if private_torch.global_hooks_set() or private_torch.module_hooks_set(ensemble):
            return False
        if "forward" in ensemble.__dict__:
            return False
        for member in ensemble.members:
            if type(member) is not nn.Sequential or private_torch.module_hooks_set(member):
                return False
            layers = list(member._modules.values())
            kinds = [type(layer) for layer in layers]
            if not layers or kinds[0::2] != [nn.Linear] * len(kinds[0::2]) or kinds[-1] is not nn.Linear:
                return False
            if any(kind is not nn.ReLU for kind in kinds[1::2]):
                return False
            if any(private_torch.module_hooks_set(layer) for layer in layers):
                return False
            for p in member.parameters():
                if p.dtype != torch.float32 or p.device.type != "cpu" or not p.requires_grad:
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
    def forward_keeping(self, x: torch.Tensor) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        """Every member's output for the rows ``x``, shape ``(n, rows, out_dim)``, as ``ensemble(x)``
        gives it (in a buffer the next call overwrites), and each layer's input for :meth:`backward`."""
        rows = x.shape[0]
        linears = [member[0::2] for member in self._structure]
        out = self._buffer(("out",), (len(linears), rows, linears[0][-1].out_features))
        kept_all = []
        for m, layers in enumerate(linears):
            kept = [x]
            for i, layer in enumerate(layers):
                last = i == len(layers) - 1
                y = out[m] if last else self._buffer(("act", m, i), (rows, layer.out_features))
                torch.addmm(layer.bias, kept[-1], layer.weight.t(), out=y)
                if not last:
                    y.relu_()
                    kept.append(y)
            kept_all.append(kept)
        return out, kept_all

    @torch.no_grad()
    def backward(
        self, kept: list[list[torch.Tensor]], grad_out: torch.Tensor, need_input: bool = False
    ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """Each parameter's gradient (in :attr:`params` order) for the loss whose gradient with respect
        to the output is ``grad_out``; the input's gradient when ``need_input``."""
        grads: list[torch.Tensor] = []
        grad_x = None
        for m, member in enumerate(self._structure):
            layers = member[0::2]
            grad = grad_out[m]
            member_grads: list[torch.Tensor] = []
            for i in range(len(layers) - 1, -1, -1):
                layer, inp = layers[i], kept[m][i]
                transposed = self._buffer(("dw", m, i), (layer.in_features, layer.out_features))
                torch.mm(inp.t(), grad, out=transposed)
                member_grads[:0] = [transposed.t().contiguous(), grad.sum(0)]
                if i:
                    below = self._buffer(("grad", m, i), inp.shape)
                    torch.mm(grad, layer.weight, out=below)
                    private_torch.relu_backward_(below, inp)
                    grad = below
                elif need_input:
                    part = grad @ layer.weight
                    grad_x = part if grad_x is None else grad_x + part
            grads += member_grads
        return grad_x, grads
