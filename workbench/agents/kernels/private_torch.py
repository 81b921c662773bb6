"""Every private PyTorch name the package uses, in one module, each behind a fallback.

Everything else runs on PyTorch's public API. What is left here is what ``compile=`` needs (dynamo's
graph limit, a dynamic batch dimension, undoing ``module.compile()``) and the one version counter the
shared image encoder keys its feature cache on. Each function does nothing, or the plain thing, on a
torch that lacks the name it reads: a PyTorch upgrade can cost a compiled agent speed or a shared
encoder its cache, never a result.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = [
    "RECOMPILE_LIMIT",
    "allow_graph_variants",
    "eager_copy",
    "mark_batch_dynamic",
    "uncompile",
    "weights_version",
]

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


# ``module.compile()`` keeps its compiled call in ``_compiled_call_impl``; PyTorch has no public way to undo it.


def uncompile(net: nn.Module) -> None:
    """Undo ``net.compile()`` on ``net`` and its submodules: their calls run the eager modules again
    (nothing to undo on a torch that keeps the compiled call elsewhere)."""
    for module in net.modules():
        if getattr(module, "_compiled_call_impl", None) is not None:
            module._compiled_call_impl = None


def eager_copy(net: nn.Module) -> nn.Module:
    """A deep copy of ``net`` without its ``torch.compile`` wrappers (those stay bound to the original
    module): what export uses for a compiled agent's networks."""
    memo: dict[int, Any] = {}
    for module in net.modules():
        compiled = getattr(module, "_compiled_call_impl", None)
        if compiled is not None:
            memo[id(compiled)] = None
    return copy.deepcopy(net, memo)


def weights_version(params: Iterable[torch.Tensor]) -> int | None:
    """A number that changes whenever any of ``params`` is written in place (an optimizer step, a load):
    the sum of their version counters (``Tensor._version``). None on a torch without them: the caller
    then keeps nothing that depends on the weights staying the same."""
    try:
        return sum(int(p._version) for p in params)
    except (AttributeError, TypeError):
        return None
