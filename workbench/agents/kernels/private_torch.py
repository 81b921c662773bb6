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

import sys
import types
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.optim.optimizer as _torch_optimizer
from torch import nn

__all__ = [
    "OK",
    "RECOMPILE_LIMIT",
    "adam_step",
    "allow_graph_variants",
    "build_optimizer",
    "foreach_add_",
    "foreach_copy_",
    "foreach_lerp_",
    "foreach_mul_",
    "foreach_norm",
    "global_hooks_set",
    "hooks_set",
    "mark_batch_dynamic",
    "module_hooks_set",
    "optimizer_hooks_set",
    "probe",
    "relu_backward_",
    "step",
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


# -- optimizers built and stepped before torch._dynamo is imported --------------------------------------
#
# torch.optim's Optimizer wraps ``add_param_group`` (so its constructor), ``zero_grad``, ``state_dict`` and
# ``load_state_dict`` in ``torch._disable_dynamo`` and ``step`` in ``_use_grad_for_differentiable``: each
# imports ``torch._dynamo`` on its first call, a second or more of imports before a newcomer's first
# cell can show anything (issue 40). Those wrappers only matter while torch.compile traces, and nothing
# can be traced before ``torch._dynamo`` is imported (torch.compile imports it). So until then an
# optimizer is built and stepped through the wrapped bodies, called as the wrappers call them; once
# ``torch._dynamo`` is loaded (by anyone), the public calls are taken again. The wrappers are recognised
# by their code objects, so a torch whose wrappers differ takes the public calls every time.

_Opt = TypeVar("_Opt", bound=torch.optim.Optimizer)


def _unused(*args: Any, **kwargs: Any) -> None:
    return None


def _code(wrap: Any) -> Any:
    try:
        return wrap(_unused).__code__
    except Exception:  # a torch without the wrapper
        return None


_DISABLE_DYNAMO_CODE = _code(getattr(torch, "_disable_dynamo", None))
_USE_GRAD_CODE = _code(getattr(_torch_optimizer, "_use_grad_for_differentiable", None))
_PROFILE_HOOK_CODE = _code(getattr(torch.optim.Optimizer, "profile_hook_step", None))


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def _unwrap(fn: Any, code: Any) -> Any:
    """The function ``fn`` wraps when ``fn`` is the wrapper whose code is ``code``, else None."""
    if code is not None and getattr(fn, "__code__", None) is code:
        return getattr(fn, "__wrapped__", None)
    return None


def build_optimizer(cls: type[_Opt], params: Any, **kwargs: Any) -> _Opt:
    """``cls(params, **kwargs)``; before ``torch._dynamo`` is imported, its parameter groups are added
    through ``Optimizer.add_param_group``'s own body (the same dictionary, the same checks), on this
    instance only, so building it imports nothing."""
    public = torch.optim.Optimizer.__dict__.get("add_param_group")
    body = _unwrap(public, _DISABLE_DYNAMO_CODE)
    if body is None or _dynamo_loaded() or getattr(cls, "add_param_group", None) is not public:
        return cls(params, **kwargs)
    optimizer = cls.__new__(cls)
    optimizer.__dict__["add_param_group"] = types.MethodType(body, optimizer)
    try:
        cls.__init__(optimizer, params, **kwargs)  # type: ignore[misc]
    finally:
        optimizer.__dict__.pop("add_param_group", None)
    return optimizer


def step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``. Before ``torch._dynamo`` is imported, with no step hook set, it calls the
    step's body as ``step()`` does (grad mode set to the optimizer's ``differentiable``, then restored)
    without the wrappers that import ``torch._dynamo`` and time the step for the profiler."""
    if _dynamo_loaded() or optimizer_hooks_set(optimizer):
        optimizer.step()
        return
    wrapper = type(optimizer).step
    if getattr(wrapper, "hooked", False):
        wrapper = _unwrap(wrapper, _PROFILE_HOOK_CODE)
    body = _unwrap(wrapper, _USE_GRAD_CODE)
    differentiable = optimizer.defaults.get("differentiable")
    if body is None or not isinstance(differentiable, bool):
        optimizer.step()
        return
    before = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(differentiable)
        body(optimizer)
    finally:
        torch.set_grad_enabled(before)
    optimizer._optimizer_step_code()


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
        step(optimizer)
        return
    group = optimizer.param_groups[0]
    params = [p for p in group["params"] if p.grad is not None]
    state = optimizer.state
    if not params or any(p not in state for p in params):
        step(optimizer)
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
            step(optimizer)


# -- the import-time probe --------------------------------------------------------------------------------


def _probe_fused_adam() -> bool:
    def run(direct: bool) -> torch.Tensor:
        gen = torch.Generator().manual_seed(0)
        p = nn.Parameter(torch.randn(5, generator=gen))
        opt = build_optimizer(torch.optim.Adam, [p], lr=0.1, fused=True)
        for _ in range(3):
            p.grad = torch.randn(5, generator=gen)
            if direct and p in opt.state:
                OK["fused_adam"] = True
                adam_step(opt)
                if not OK["fused_adam"]:
                    raise RuntimeError("fused Adam refused its arguments")
            else:
                step(opt)
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
        opt = build_optimizer(torch.optim.SGD, [nn.Parameter(torch.zeros(1))], lr=0.1)
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


# -- torch.compile's dynamo settings (what Agent's compile trace needs) ------------------------------

RECOMPILE_LIMIT = 64
"""The least ``torch._dynamo.config.recompile_limit`` an agent compiles under (PyTorch's default is 8)."""


def _dynamo() -> Any:
    try:
        import torch._dynamo as dynamo
    except Exception:  # a torch without dynamo: nothing to set, compiling fails and runs eagerly anyway
        return None
    return dynamo


def allow_graph_variants(limit: int = RECOMPILE_LIMIT) -> None:
    """Raise dynamo's per-function graph limit to ``limit`` (never lower it). Dynamo keeps compiled
    graphs per Python function, not per module: an agent's networks of one class (an online network
    and its target, the members of critic ensembles, the CNN encoder inside each) called with and
    without gradients, on the update's batch and the envs', under the session's thread count, all
    draw on one function's budget of 8 graphs. Past it dynamo runs that function eagerly for the rest
    of the process and only says so in a log line: a compiled agent silently slower than an eager one."""
    dynamo = _dynamo()
    config = getattr(dynamo, "config", None)
    if config is None:
        return
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # before PyTorch 2.6
    if getattr(config, name, limit) < limit:
        setattr(config, name, limit)


def mark_batch_dynamic(*tensors: torch.Tensor) -> None:
    """Mark the first dimension of ``tensors`` dynamic for ``torch.compile`` where it can stay so
    (``maybe_mark_dynamic``): the graph traced on them then serves other batch sizes too."""
    mark = getattr(_dynamo(), "maybe_mark_dynamic", None)
    if mark is None:
        return
    for tensor in tensors:
        mark(tensor, 0)
