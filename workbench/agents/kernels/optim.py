"""Gradient steps: clearing, backward, clipping and the optimizer's step, written once for every agent.

:func:`gradient_step` is the one call every agent's update makes for a loss. With ``fast=False`` (an
agent's ``fast="off"``) it is exactly PyTorch's public sequence, ``zero_grad(set_to_none=True)``,
``loss.backward()``, ``clip_grad_norm_(..., foreach=True)``, ``optimizer.step()``. With ``fast=True`` the
same numbers come from fewer calls: gradients dropped without ``zero_grad``'s profiler hooks, the
clipping's per-tensor norms and one scaling without ``clip_grad_norm_``'s grouping, a fused Adam's
kernel called directly (:func:`.private_torch.adam_step`), and a plain RMSprop stepped on flat buffers
(:class:`FlatRMSprop`). Each is bit-identical to the public call (``tests/test_kernels.py``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

from . import private_torch

__all__ = [
    "FlatRMSprop",
    "clear_grads",
    "clip_grad_norm",
    "gradient_step",
    "optimizer_step",
    "polyak_update",
]


def clear_grads(params: Sequence[torch.Tensor]) -> None:
    """``optimizer.zero_grad(set_to_none=True)`` for ``params``, without its profiler hooks."""
    for p in params:
        p.grad = None


def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)``: the same ops in the same
    order, so bit-identical results, without its per-call grouping by device and dtype."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(private_torch.foreach_norm(grads)), 2.0)
        private_torch.foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


def polyak_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * online`` for every parameter (``tau >= 1`` copies)."""
    with torch.no_grad():
        t_params = list(target.parameters())
        o_params = list(online.parameters())
        if tau >= 1.0:
            private_torch.foreach_copy_(t_params, o_params)
        else:
            private_torch.foreach_lerp_(t_params, o_params, tau)


def optimizer_step(optimizer: torch.optim.Optimizer, *, fast: bool = True) -> None:
    """``optimizer.step()`` (a fused Adam's kernel called directly when ``fast``)."""
    if fast:
        private_torch.adam_step(optimizer)
    else:
        optimizer.step()


class _Stepper:
    """How one optimizer clears, clips and steps; :func:`_stepper` picks and keeps one per optimizer."""

    def __init__(self, optimizer: torch.optim.Optimizer, fast: bool) -> None:
        self.optimizer = optimizer
        self.fast = fast
        self.params = [p for g in optimizer.param_groups for p in g["params"]]

    def clear(self) -> None:
        if self.fast:
            clear_grads(self.params)
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def clip(self, max_norm: float) -> None:
        if self.fast:
            clip_grad_norm(self.params, max_norm)
        else:
            torch.nn.utils.clip_grad_norm_(self.params, max_norm, foreach=True)

    def step(self) -> None:
        optimizer_step(self.optimizer, fast=self.fast)


_STEPPERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _stepper(optimizer: torch.optim.Optimizer, fast: bool) -> _Stepper | FlatRMSprop:
    kept = _STEPPERS.get(optimizer)
    if kept is None:
        kept = _STEPPERS[optimizer] = {}
    stepper = kept.get(fast)
    if stepper is None or len(stepper.params) != sum(len(g["params"]) for g in optimizer.param_groups):
        if fast and isinstance(optimizer, torch.optim.RMSprop):
            stepper = FlatRMSprop(optimizer)
        else:
            stepper = _Stepper(optimizer, fast)
        kept[fast] = stepper
    return stepper


_SCALERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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
    fast: bool = True,
    only_optimized: bool = False,
) -> None:
    """One step of ``optimizer`` on ``loss``: clear its parameters' gradients, ``loss.backward()``,
    clip the gradients' total norm to ``max_grad_norm`` (when given), step. ``only_optimized``
    computes gradients for the optimizer's own trainable parameters only (``backward(inputs=...)``),
    so other networks the loss went through get none. ``fast=False``: PyTorch's public calls only."""
    scaler = _SCALERS.get(optimizer)
    if scaler is not None:
        _scaled_step(optimizer, scaler, loss, max_grad_norm, only_optimized)
        return
    stepper = _stepper(optimizer, fast)
    stepper.clear()
    if only_optimized:
        trained = [p for p in stepper.params if p.requires_grad]
        if trained:
            loss.backward(inputs=trained)
    else:
        loss.backward()
    if max_grad_norm is not None:
        stepper.clip(max_grad_norm)
    stepper.step()


def _scaled_step(
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    loss: torch.Tensor,
    max_grad_norm: float | None,
    only_optimized: bool,
) -> None:
    """:func:`gradient_step` through a gradient scaler, with PyTorch's public calls only."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    optimizer.zero_grad(set_to_none=True)
    scaled = scaler.scale(loss)
    if only_optimized:
        trained = [p for p in params if p.requires_grad]
        if trained:
            scaled.backward(inputs=trained)
    else:
        scaled.backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    scaler.step(optimizer)
    scaler.update()


# -- RMSprop on flat buffers ----------------------------------------------------------------------------

_ALIGN = 16
"""Each parameter's view starts on a multiple of 16 floats (64 bytes), where an allocation of its
own would start: matrix kernels may choose their path by alignment, and the same path gives the
same sums."""


def _plain_rmsprop(optimizer: torch.optim.Optimizer) -> bool:
    """True for a one-group, CPU, float32 RMSprop with no momentum, centering, weight decay,
    maximizing, tensor learning rate or hooks: the step :class:`FlatRMSprop` writes out."""
    if not isinstance(optimizer, torch.optim.RMSprop) or len(optimizer.param_groups) != 1:
        return False
    g = optimizer.param_groups[0]
    if (
        g["momentum"]
        or g["centered"]
        or g["weight_decay"]
        or g.get("maximize")
        or g.get("differentiable")
        or g.get("capturable")
        or isinstance(g["lr"], torch.Tensor)
    ):
        return False
    if private_torch.optimizer_hooks_set(optimizer):  # hooks only run through optimizer.step()
        return False
    return all(p.device.type == "cpu" and p.dtype == torch.float32 and p.requires_grad for p in g["params"])


class FlatRMSprop:
    """Gradient clearing, clipping and stepping of a ``torch.optim.RMSprop`` on flat buffers once its
    state exists: the parameters, their gradients and the optimizer's state become views into one
    contiguous buffer each, so a step is six ops on one tensor instead of six per parameter, computing
    every element exactly as ``torch.optim.RMSprop`` does (the same element-wise ops in the same order).

    The optimizer stays the owner of the state: its ``state_dict()`` saves and loads as before.
    Whatever replaces a bound tensor (a ``load_state_dict``, a ``p.grad = None``, a parameter's
    ``.data``) is noticed before the next step, which then takes ``optimizer.step()`` and binds anew.
    Between steps the gradients are zeroed, not dropped (``zero_grad(set_to_none=False)``), which
    differs only for a parameter that gets no gradient in a step. Any other optimizer, or one with
    settings the flat step does not write out, takes the ordinary calls::

        flat = FlatRMSprop(optimizer)
        flat.clear(); loss.backward(); flat.clip(0.5); flat.step()
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.params: list[torch.Tensor] = [p for g in optimizer.param_groups for p in g["params"]]
        self._bound = False

    def clear(self) -> None:
        """Zero the flat gradient buffer when bound (backward then adds into it), else drop every
        parameter's gradient. The bindings are checked here, once per gradient step."""
        if self._still_bound():
            self._grad.zero_()
            return
        clear_grads(self.params)

    def clip(self, max_norm: float) -> None:
        """Scale the gradients so their total 2-norm is at most ``max_norm``, as
        ``clip_grad_norm_(..., foreach=True)`` does (the same norms; the scaling one op)."""
        if not self._bound:
            clip_grad_norm(self.params, max_norm)
            return
        with torch.no_grad():
            total = torch.linalg.vector_norm(torch.stack(private_torch.foreach_norm(self._grads)), 2.0)
            self._grad.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))

    def step(self) -> None:
        """One RMSprop step: on the flat buffers when bound, else ``optimizer.step()`` (which
        creates the state on the first step), after which the buffers are bound."""
        if not self._bound:
            private_torch.step(self.optimizer)
            self._bind()
            return
        g = self.optimizer.param_groups[0]
        alpha = g["alpha"]
        with torch.no_grad():
            # torch.optim.RMSprop's _multi_tensor_rmsprop, element for element.
            self._step_count.add_(1.0)
            self._square_avg.mul_(alpha)
            self._square_avg.addcmul_(self._grad, self._grad, value=1 - alpha)
            avg = self._square_avg.sqrt()
            avg.add_(g["eps"])
            self._data.addcdiv_(self._grad, avg, value=-g["lr"])

    def _still_bound(self) -> bool:
        """True when every parameter, gradient and state tensor is still the view it was bound to."""
        if not self._bound:
            return False
        state = self.optimizer.state
        for i, p in enumerate(self.params):
            s = state.get(p)
            if (
                p.grad is not self._grads[i]
                or s is None
                or s.get("square_avg") is not self._square_avgs[i]
                or s.get("step") is not self._steps[i]
                or p.data_ptr() != self._pointers[i]
            ):
                self._bound = False
                return False
        return True

    def _bind(self) -> None:
        """Copy the parameters, gradients and RMSprop state into flat buffers and make each
        tensor a view of its part (only when the optimizer is plain and every state exists)."""
        self._bound = False
        if not _plain_rmsprop(self.optimizer):
            return
        state = self.optimizer.state
        params = self.params
        if any(p not in state or "square_avg" not in state[p] for p in params):
            return
        offsets, total = [], 0
        for p in params:
            offsets.append(total)
            total += -(-p.numel() // _ALIGN) * _ALIGN
        self._data = torch.zeros(total)
        self._grad = torch.zeros(total)
        self._square_avg = torch.zeros(total)
        self._step_count = torch.zeros(len(params))
        self._grads, self._square_avgs, self._steps, self._pointers = [], [], [], []
        with torch.no_grad():
            for i, (p, start) in enumerate(zip(params, offsets, strict=True)):
                n = p.numel()
                data = self._data[start : start + n].view_as(p)
                data.copy_(p)
                p.data = data
                grad = self._grad[start : start + n].view_as(p)
                if p.grad is not None:
                    grad.copy_(p.grad)
                p.grad = grad
                s = state[p]
                square_avg = self._square_avg[start : start + n].view_as(p)
                square_avg.copy_(s["square_avg"])
                s["square_avg"] = square_avg
                step = self._step_count[i]
                step.copy_(torch.as_tensor(s["step"], dtype=torch.float32))
                s["step"] = step
                self._grads.append(grad)
                self._square_avgs.append(square_avg)
                self._steps.append(step)
                self._pointers.append(p.data_ptr())
        self._bound = True

    @property
    def bound(self) -> bool:
        """True while the flat buffers hold the parameters, gradients and state (after the first step)."""
        return self._still_bound()
