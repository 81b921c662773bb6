"""Every private PyTorch name the agents use, in one module, each checked once against the running torch.

The fast paths call a few kernels PyTorch does not promise to keep (``torch._fused_adam_``,
``torch._foreach_*``, ``torch.ops.aten.threshold_backward``) and read a few private attributes (the
hook dictionaries of modules, parameters and optimizers). Each is probed once at import on small tensors
against the public call it stands for; any mismatch (a missing name, a changed signature, a
``TypeError`` from its keyword arguments, a different result) switches that piece to the public call
for the rest of the process. A call that still fails at run time falls back before any state has
changed (the Adam step counts a failed fused step undoes are restored). So a PyTorch upgrade can cost
speed here, never correctness (``tests/test_kernels.py`` forces each fallback).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.optim.optimizer as _torch_optimizer
from torch import nn

__all__ = [
    "OK",
    "adam_step",
    "foreach_add_",
    "foreach_copy_",
    "foreach_lerp_",
    "foreach_mul_",
    "foreach_norm",
    "global_hooks_set",
    "hooks_set",
    "module_hooks_set",
    "optimizer_hooks_set",
    "probe",
    "relu_backward_",
]

OK: dict[str, bool] = {}
"""Which private pieces passed the import-time probe (name -> usable); :func:`probe` fills it."""

# The private kernels, looked up once (None where this torch lacks one); the probe checks them.
_foreach_norm = getattr(torch, "_foreach_norm", None)
_foreach_mul_ = getattr(torch, "_foreach_mul_", None)
_foreach_add_ = getattr(torch, "_foreach_add_", None)
_foreach_copy_ = getattr(torch, "_foreach_copy_", None)
_foreach_lerp_ = getattr(torch, "_foreach_lerp_", None)
_fused_adam_ = getattr(torch, "_fused_adam_", None)


# -- hooks: private attributes of modules, parameters and optimizers ---------------------------------


def global_hooks_set() -> bool:
    """True when a global module hook is set (``register_module_forward_hook`` and its kin), or when
    this torch keeps them under other names (then every fast pass takes the ordinary call)."""
    if not OK.get("hook_names", False):
        return True
    module = torch.nn.modules.module
    return bool(
        module._global_forward_hooks
        or module._global_forward_pre_hooks
        or module._global_backward_hooks
        or module._global_backward_pre_hooks
    )


def module_hooks_set(module: nn.Module) -> bool:
    """True when ``module`` has a forward or backward hook of its own (or its hooks cannot be read)."""
    if not OK.get("hook_names", False):
        return True
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


def hooks_set(modules: tuple[nn.Module, ...]) -> bool:
    """True when any of ``modules`` has a hook of its own, or a global module hook is set (one call for
    a pass's check before each use)."""
    if not OK.get("hook_names", False):
        return True
    for m in modules:
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return True
    return global_hooks_set()


def optimizer_hooks_set(optimizer: torch.optim.Optimizer) -> bool:
    """True when ``optimizer`` or the global optimizer registry has a step hook (or they cannot be read)."""
    if not OK.get("optimizer_hook_names", False):
        return True
    return bool(
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _torch_optimizer._global_optimizer_pre_hooks
        or _torch_optimizer._global_optimizer_post_hooks
    )


# -- foreach kernels, each with its public loop ---------------------------------------------------------


def foreach_norm(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The 2-norm of each tensor (``_foreach_norm(tensors, 2.0)``)."""
    if OK.get("foreach_norm", False):
        return list(_foreach_norm(list(tensors), 2.0))
    return [torch.linalg.vector_norm(t, 2.0) for t in tensors]


def foreach_mul_(tensors: Sequence[torch.Tensor], scale: torch.Tensor) -> None:
    """Every tensor times the 0-d tensor ``scale``, in place."""
    if OK.get("foreach_mul_", False):
        _foreach_mul_(list(tensors), scale)
        return
    for t in tensors:
        t.mul_(scale)


def foreach_add_(tensors: Sequence[torch.Tensor], value: float) -> None:
    """``value`` added to every tensor, in place."""
    if OK.get("foreach_add_", False):
        _foreach_add_(list(tensors), value)
        return
    for t in tensors:
        t.add_(value)


def foreach_copy_(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """Each target overwritten by its source."""
    if OK.get("foreach_copy_", False):
        _foreach_copy_(list(targets), list(sources))
        return
    for t, s in zip(targets, sources, strict=True):
        t.copy_(s)


def foreach_lerp_(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], weight: float) -> None:
    """``target <- target + weight * (source - target)`` for each pair, in place."""
    if OK.get("foreach_lerp_", False):
        _foreach_lerp_(list(targets), list(sources), weight)
        return
    for t, s in zip(targets, sources, strict=True):
        t.lerp_(s, weight)


def relu_backward_(grad: torch.Tensor, activation: torch.Tensor) -> None:
    """``grad[activation <= 0] = 0`` in place (autograd's own ReLU backward kernel)."""
    if OK.get("threshold_backward", False):
        torch.ops.aten.threshold_backward.grad_input(grad, activation, 0.0, grad_input=grad)
        return
    grad.masked_fill_(activation <= 0, 0.0)


# -- Adam's fused kernel, called directly ---------------------------------------------------------------


def _plain_fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    groups = optimizer.param_groups
    group = groups[0]
    return (
        len(groups) == 1
        and isinstance(optimizer, torch.optim.Adam)
        and bool(group.get("fused"))
        and not group["amsgrad"]
        and not group["maximize"]
        and not group["weight_decay"]
        and not group.get("decoupled_weight_decay")
        and not isinstance(group["lr"], torch.Tensor)
        and not optimizer_hooks_set(optimizer)
    )


def adam_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``, for a fused Adam of one plain parameter group called straight into its
    kernel (the same kernel with the same arguments, so bit-identical results, without the step's
    per-call hooks, checks and grouping). Anything else, the first step (which creates the state) and
    any failure of the kernel's call take ``optimizer.step()``."""
    if not OK.get("fused_adam", False) or not _plain_fused_adam(optimizer):
        optimizer.step()
        return
    group = optimizer.param_groups[0]
    params = [p for p in group["params"] if p.grad is not None]
    state = optimizer.state
    if not params or any(p not in state for p in params):
        optimizer.step()
        return
    states = [state[p] for p in params]
    steps = [s["step"] for s in states]
    beta1, beta2 = group["betas"]
    with torch.no_grad():
        foreach_add_(steps, 1)
        try:
            _fused_adam_(
                params,
                [p.grad for p in params],
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
        except (TypeError, RuntimeError, AttributeError):
            # The call was refused before the kernel ran (its arguments did not fit this torch):
            # undo the step counts and take the public step, from now on every time.
            foreach_add_(steps, -1)
            OK["fused_adam"] = False
            optimizer.step()


# -- the import-time probe --------------------------------------------------------------------------------


def _probe_fused_adam() -> bool:
    def run(direct: bool) -> torch.Tensor:
        gen = torch.Generator().manual_seed(0)
        p = nn.Parameter(torch.randn(5, generator=gen))
        opt = torch.optim.Adam([p], lr=0.1, fused=True)
        for _ in range(3):
            p.grad = torch.randn(5, generator=gen)
            if direct and p in opt.state:
                OK["fused_adam"] = True
                adam_step(opt)
                if not OK["fused_adam"]:
                    raise RuntimeError("fused Adam refused its arguments")
            else:
                opt.step()
        return p.detach().clone()

    try:
        OK["fused_adam"] = True
        return bool(torch.equal(run(True), run(False)))
    finally:
        OK["fused_adam"] = False


def probe() -> dict[str, bool]:
    """Check every private piece against its public counterpart on the running torch; fill :data:`OK`."""
    a = [torch.tensor([3.0, 4.0]), torch.tensor([[1.0, -2.0]])]
    b = [torch.tensor([1.0, 1.0]), torch.tensor([[0.5, 0.5]])]

    def check(name: str, test) -> None:
        try:
            OK[name] = bool(test())
        except Exception:
            OK[name] = False

    def hook_names() -> bool:
        module = torch.nn.modules.module
        names = (
            "_global_forward_hooks",
            "_global_forward_pre_hooks",
            "_global_backward_hooks",
            "_global_backward_pre_hooks",
        )
        layer = nn.Linear(1, 1)
        return all(isinstance(getattr(module, n), dict) for n in names) and all(
            isinstance(getattr(layer, n), dict)
            for n in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
        )

    def optimizer_hook_names() -> bool:
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
        return all(
            isinstance(getattr(opt, n), dict) for n in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")
        ) and all(
            isinstance(getattr(_torch_optimizer, n), dict)
            for n in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")
        )

    def norm() -> bool:
        got = _foreach_norm(a, 2.0)
        return all(torch.equal(g, torch.linalg.vector_norm(t, 2.0)) for g, t in zip(got, a, strict=True))

    def mul() -> bool:
        x = [t.clone() for t in a]
        _foreach_mul_(x, torch.tensor(0.5))
        return all(torch.equal(g, t * 0.5) for g, t in zip(x, a, strict=True))

    def add() -> bool:
        x = [t.clone() for t in a]
        _foreach_add_(x, 1)
        return all(torch.equal(g, t + 1) for g, t in zip(x, a, strict=True))

    def copy() -> bool:
        x = [t.clone() for t in a]
        _foreach_copy_(x, b)
        return all(torch.equal(g, t) for g, t in zip(x, b, strict=True))

    def lerp() -> bool:
        x = [t.clone() for t in a]
        _foreach_lerp_(x, b, 0.25)
        return all(torch.equal(g, t.lerp(s, 0.25)) for g, t, s in zip(x, a, b, strict=True))

    def threshold() -> bool:
        grad, act = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 0.0, 2.0])
        torch.ops.aten.threshold_backward.grad_input(grad, act, 0.0, grad_input=grad)
        return torch.equal(grad, torch.tensor([0.0, 0.0, 3.0]))

    check("hook_names", hook_names)
    check("optimizer_hook_names", optimizer_hook_names)
    check("foreach_norm", norm)
    check("foreach_mul_", mul)
    check("foreach_add_", add)
    check("foreach_copy_", copy)
    check("foreach_lerp_", lerp)
    check("threshold_backward", threshold)
    fused = False
    try:
        fused = _probe_fused_adam()
    except Exception:
        fused = False
    OK["fused_adam"] = fused
    return dict(OK)


probe()
