"""RMSprop steps over flat buffers: A2C's gradient step at a few ops instead of a few dozen.

PyTorch's ``foreach`` ops have no fused kernel on the CPU: each runs its op once per tensor, so a
``foreach`` RMSprop step over a 64-64 actor and critic (12 tensors, 6 ops) is about 70 kernel calls,
~130-230 µs, a fifth of A2C's whole CartPole update. :class:`FlatRMSprop` keeps the parameters, their
gradients and the optimizer's state as views into one contiguous buffer each, so the step is six
ops on one tensor (~20 µs), computing every element exactly as ``torch.optim.RMSprop`` does (the
same element-wise ops in the same order: the same trained weights, bit for bit).

The ``torch.optim.RMSprop`` stays the owner of the state: its ``state_dict()`` saves and loads as
before, and a checkpoint is unchanged. Whatever replaces a bound tensor (a ``load_state_dict``, a
``p.grad = None``, a parameter's ``.data``) is noticed before the next step, which then takes the
ordinary ``optimizer.step()`` and binds anew, copying the current values: never a stale number.

One difference from ``zero_grad(set_to_none=True)``: between steps the gradients are zeroed, not
dropped, so a parameter that gets no gradient in a step is still stepped (its running average
decays; its value moves by 0), as with ``set_to_none=False``. Every parameter of A2C's networks
is in its loss, so this never arises there.
"""

from __future__ import annotations

import torch
import torch.optim.optimizer as _torch_optimizer

from .networks import clip_grad_norm

__all__ = ["FlatRMSprop"]

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
        g["momentum"] or g["centered"] or g["weight_decay"] or g.get("maximize") or g.get("differentiable")
        or g.get("capturable") or isinstance(g["lr"], torch.Tensor)
    ):
        return False
    # Hooks, the optimizer's or global ones, only run through optimizer.step(). Private names of
    # PyTorch's: a version without them takes the ordinary step (speed lost, never correctness).
    if getattr(optimizer, "_optimizer_step_pre_hooks", True) or getattr(optimizer, "_optimizer_step_post_hooks", True):
        return False
    if getattr(_torch_optimizer, "_global_optimizer_pre_hooks", True):
        return False
    if getattr(_torch_optimizer, "_global_optimizer_post_hooks", True):
        return False
    return all(p.device.type == "cpu" and p.dtype == torch.float32 and p.requires_grad for p in g["params"])


class FlatRMSprop:
    """Gradient clearing, clipping and stepping of ``optimizer`` (a ``torch.optim.RMSprop``) on
    flat buffers once its state exists; any other optimizer, or one with settings the flat step
    does not write out, takes the ordinary calls.

    Use it where the three calls would be::

        flat = FlatRMSprop(optimizer)
        flat.clear_grads(); loss.backward(); flat.clip_grad_norm(0.5); flat.step()
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.params: list[torch.Tensor] = [p for g in optimizer.param_groups for p in g["params"]]
        self._bound = False

    # -- the three calls -------------------------------------------------------------------------

    def clear_grads(self) -> None:
        """Zero the flat gradient buffer when bound (backward then adds into it), else drop every
        parameter's gradient (``zero_grad(set_to_none=True)``).

        The bindings are checked here, once per gradient step: between this call and
        :meth:`step` only the backward pass runs, which adds into the bound gradients in place."""
        if self._still_bound():
            self._grad.zero_()
            return
        for p in self.params:
            p.grad = None

    def clip_grad_norm(self, max_norm: float) -> None:
        """Scale the gradients so their total 2-norm is at most ``max_norm``, as
        ``clip_grad_norm_(..., foreach=True)`` does (the same norms; the scaling one op)."""
        if not self._bound:
            clip_grad_norm(self.params, max_norm)
            return
        with torch.no_grad():
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(self._grads, 2.0)), 2.0)
            self._grad.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))

    def step(self) -> None:
        """One RMSprop step: on the flat buffers when bound, else ``optimizer.step()`` (which
        creates the state on the first step), after which the buffers are bound."""
        if not self._bound:
            self.optimizer.step()
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

    # -- binding ---------------------------------------------------------------------------------

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

