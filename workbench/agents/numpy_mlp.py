"""A small MLP's forward pass in numpy, for acting on a few envs at a time.

At acting sizes (8 envs, 64-wide layers) a PyTorch op costs a few microseconds of dispatch for
nanoseconds of arithmetic, and an on-policy agent runs two MLPs per env step. The same forward pass
in numpy costs about a third: A2C's per-step decision on CartPole goes from ~50 to ~30 µs, a tenth
of its whole training time. The arrays are views of the torch parameters' own memory, so they
always hold the current weights (every optimizer writes in place); a parameter whose tensor was
replaced is noticed at the next call, which then reads the new one.

The numbers are the same to float32 rounding (numpy's matrix kernel is not PyTorch's, so the last
bits may differ), which is why only the stochastic acting of training uses it: play, the
deterministic actions and export keep PyTorch's own forward pass.

:meth:`NumpyMLP.forward_keeping` and :meth:`NumpyMLP.backward` give the same net's gradients for a
batch, for A2C's update (``a2c.py``): at a batch of 40 rows an autograd pass through two 64-64 MLPs
is a few hundred microseconds of per-op dispatch, the same arithmetic in numpy a few dozen.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .networks import global_hooks_set

__all__ = ["NumpyMLP", "matmul"]

_NUMPY_MATMUL_MAX_WORK = 65536 * 4
"""The largest ``m * k * n`` product a matrix product here leaves to numpy. Up to it OpenBLAS (the
BLAS of numpy's wheels on Linux and Windows) multiplies on one thread; above it OpenBLAS starts its
own threads, which on a busy machine spin against the training thread for milliseconds a product
(a PPO minibatch of 256 rows through 64-wide layers: 14 ms instead of 15 µs, measured on 2 loaded
cores). Larger products go to ``torch.mm``, which keeps to the session's torch thread count."""


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` for 2-d float32 arrays (into ``out`` when given): numpy for small products, torch above
    :data:`_NUMPY_MATMUL_MAX_WORK`."""
    if a.shape[0] * a.shape[1] * b.shape[1] <= _NUMPY_MATMUL_MAX_WORK:
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
    if out is None:
        return torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    torch.mm(torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(out))
    return out


_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out: np.maximum(x, 0, out=out)}


class NumpyMLP:
    """``net``'s forward pass for float32 batches, when ``net`` is a plain ``nn.Sequential`` of
    ``Linear``, ``Tanh`` and ``ReLU`` layers on the CPU with no hooks; :meth:`of` returns None for any
    other net (the caller then runs the net itself)."""

    def __init__(self, net: nn.Sequential) -> None:
        self.net = net
        self._layers = tuple(net._modules.values())
        self._bind()

    @classmethod
    def of(cls, net: nn.Module) -> NumpyMLP | None:
        """A numpy forward pass of ``net``, or None when ``net`` is not a plain MLP it can run."""
        if type(net) is not nn.Sequential or not cls._plain(net):
            return None
        return cls(net)

    @staticmethod
    def _plain(net: nn.Sequential) -> bool:
        layers = list(net._modules.values())
        if not layers or type(layers[-1]) is not nn.Linear:
            return False
        for layer in layers:
            if type(layer) not in (nn.Linear, *_ACTIVATIONS) or layer._forward_hooks or layer._forward_pre_hooks:
                return False
            if type(layer) is nn.Linear and (
                layer.weight.dtype != torch.float32 or layer.weight.device.type != "cpu" or layer.bias is None
            ):
                return False
        return not net._forward_hooks and not net._forward_pre_hooks

    def _bind(self) -> None:
        """Numpy views of every layer's (transposed) weight and bias, and what they were made from."""
        self._ops: list[tuple] = []
        self._sources: list[tuple[nn.Linear, torch.Tensor, torch.Tensor, int, int]] = []
        for layer in self._layers:
            if type(layer) is nn.Linear:
                w, b = layer._parameters["weight"], layer._parameters["bias"]
                self._ops.append((w.detach().numpy().T, b.detach().numpy()))
                self._sources.append((layer, w, b, w.data_ptr(), b.data_ptr()))
            else:
                self._ops.append((_ACTIVATIONS[type(layer)],))

    def current(self) -> bool:
        """False when the net changed in a way its views cannot follow (a layer added or removed,
        a hook set); a parameter or its tensor replaced is rebound here, and True returned."""
        net = self.net
        if net._forward_hooks or net._forward_pre_hooks or global_hooks_set():
            return False
        if tuple(net._modules.values()) != self._layers:
            return False
        for layer in self._layers:
            if layer._forward_hooks or layer._forward_pre_hooks:
                return False
        for layer, w, b, w_ptr, b_ptr in self._sources:
            p = layer._parameters
            if p["weight"] is not w or p["bias"] is not b or w.data_ptr() != w_ptr or b.data_ptr() != b_ptr:
                if not self._plain(net):
                    return False
                self._bind()
                break
        return True

    def forward_keeping(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The net's output for the float32 batch ``x`` and what :meth:`backward` needs: the input
        of every layer (each activation is applied in place to its Linear's output, so entry ``i + 1``
        is also the output of an activation at ``i``)."""
        kept = [x]
        for op in self._ops:
            if len(op) == 2:
                x = matmul(x, op[0])
                x += op[1]
            else:
                op[0](x, out=x)
            kept.append(x)
        return x, kept

    def backward(
        self, kept: list[np.ndarray], grad_out: np.ndarray, grads: list[tuple[np.ndarray, np.ndarray]]
    ) -> None:
        """Write the gradients of the Linear layers' weights and biases into ``grads`` (one
        ``(weight, bias)`` pair of arrays per Linear, in order, shaped like the parameters) for the
        loss whose gradient with respect to the output of :meth:`forward_keeping` is ``grad_out``."""
        dy = grad_out
        k = len(grads)
        for i in range(len(self._ops) - 1, -1, -1):
            op = self._ops[i]
            if len(op) == 2:
                k -= 1
                d_weight, d_bias = grads[k]
                matmul(dy.T, kept[i], out=d_weight)  # (out, batch) @ (batch, in): the weight's layout
                np.sum(dy, axis=0, out=d_bias)
                if i:
                    dy = matmul(dy, op[0].T)  # op[0] is the transposed weight
            elif op[0] is np.tanh:
                y = kept[i + 1]
                dy = dy * (1 - y * y)
            else:  # ReLU
                dy = dy * (kept[i + 1] > 0)

    def linear_parameters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every Linear layer's (weight, bias) parameters, in order."""
        return [(layer._parameters["weight"], layer._parameters["bias"]) for layer, *_ in self._sources]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The net's output for the float32 batch ``x`` (rows of inputs)."""
        for op in self._ops:
            if len(op) == 2:
                x = matmul(x, op[0])
                x += op[1]
            else:
                op[0](x, out=x)
        return x
