"""Where and how an agent's networks run: the device (chosen, probed, moved to), the precision of its
updates, and ``torch.compile`` with the tracing passes that compile it before the first step.

:class:`Execution` is a part of :class:`~workbench.agents.contract.Agent` (a base class of it); ``agent.device``
and ``agent.to()`` are read and called on the agent as before.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..devices import DeviceChoice, parse_device, synchronize, to_device
from ..envs.core import describe_space
from .encoders import is_image_space
from .kernels.private_torch import uncompile

if TYPE_CHECKING:
    from .contract import Agent

__all__ = ["Execution", "has_image"]

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def has_image(space: spaces.Space) -> bool:
    """True when ``space`` holds an image (uint8, 3 dimensions), itself or inside a Dict or Tuple."""
    if isinstance(space, spaces.Dict):
        return any(has_image(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(has_image(s) for s in space.spaces)
    return is_image_space(space)


class Execution:
    """The device, precision and compile members of an agent (``self`` is the :class:`Agent`)."""

    device: torch.device
    """Where the networks are and the updates run (``device=``; :meth:`to` moves them)."""
    device_choice: DeviceChoice
    """What ``device=`` asked for, what was chosen and why (what ``"auto"`` measured)."""
    compile_time: float | None
    """Seconds spent compiling (``compile=``), None when not compiled."""
    compile_error: str | None
    """Why ``compile=`` failed (the networks then run eagerly), else None."""
    _compiled_threads: set[int]  # torch thread counts the compiled networks were traced under

    def _init_execution(self) -> None:
        """Before the networks are built: on the CPU (they are built there, then moved), not compiled."""
        self.device = torch.device("cpu")
        self._moved = False
        self._compiled = False
        self.compile_time = None
        self._compiled_threads = set()
        self._trace_calls: tuple[list[Any], list[Any]] = ([], [])
        self._compile_time_due = False
        self.compile_error = None

    def _after_build(self) -> None:
        """Put what ``_build`` made on the agent's device, then compile it when asked."""
        self._place()
        self._compile()
        if self.config.precision == "fp16":
            from .updates import set_grad_scaler

            for opt in self.optimizers.values():
                set_grad_scaler(opt, torch.amp.GradScaler(self.device.type))

    def _place(self) -> None:
        """Move the networks (and the normalizers' statistics, the optimizers' parameters) and every
        tensor the agent holds to :attr:`device`; the replay memory samples onto it."""
        device = self.device
        for store in (getattr(self, "memory", None), getattr(self, "data", None)):  # replay, offline dataset
            if store is not None and hasattr(store, "device"):
                store.device = device  # it stays in host RAM; its minibatches go to the device
        if device.type == "cpu" and not self._moved:
            return  # built there
        for net in self.networks.values():
            net.to(device)  # parameters keep their identity, so the optimizers still hold them
        for name, value in list(vars(self).items()):
            if isinstance(value, nn.Module):  # networks not declared for saving (an averaged actor...)
                value.to(device)
            elif isinstance(value, nn.Parameter) and value.device != device:
                value.data = value.data.to(device)
            elif isinstance(value, torch.Tensor) and value.device != device:
                setattr(self, name, value.to(device))

    def to(self, device: Any, *, reason: str = "moved there") -> Agent:
        """Move the agent to ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``): networks,
        optimizer state, every tensor it holds; its replay memory then samples onto it. Returns the
        agent. Compiled networks stay compiled (they compile again for the new device at their next
        call). Raises ``ValueError`` for an unknown or absent device, as ``device=`` does."""
        target = parse_device(device, f"{self.algorithm}.to")
        if target is None:
            raise ValueError(f"{self.algorithm}.to() needs a device, not 'auto': auto is chosen when an agent is built")
        choice = DeviceChoice(str(device), target, reason, {})
        self._check_precision_device(choice)  # before anything moves
        with self._lock:
            self.device, self.device_choice = target, choice
            self._moved = True  # a move back to the CPU moves everything back too
            self._place()
            for opt in self.optimizers.values():
                moves_step = _on_device_step(opt)
                for state in opt.state.values():
                    for key, value in state.items():
                        if isinstance(value, torch.Tensor) and (key != "step" or moves_step):
                            state[key] = value.to(target)
        return self

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """A host array as a tensor on the agent's device: shared with the array on the CPU, copied
        through pinned memory (``non_blocking``) to a GPU."""
        t = torch.from_numpy(array)
        return t if self.device.type == "cpu" else to_device(t, self.device)

    @staticmethod
    def _host(t: torch.Tensor) -> np.ndarray:
        """A tensor (already detached) as a numpy array on the host: a view on the CPU, a copy from a GPU;
        float32 when it was computed in lower precision (under ``precision=``'s autocast)."""
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()

    def _check_precision_fits(self) -> None:
        """``precision`` below fp32 is for CNN agents: refused, with why, for vector observations."""
        p = self.config.precision
        if p == "fp32":
            return
        if not self.convolutional:
            raise ValueError(
                f"{type(self).__name__} got precision={p!r}, which is for agents with a CNN encoder (image "
                f"observations), but {describe_space(self.observation_space)} holds no image: its small MLPs "
                "gain nothing from lower precision and lose accuracy. Leave precision='fp32'"
            )

    def _check_precision_device(self, choice: DeviceChoice | None = None) -> None:
        """fp16 (with a gradient scaler) needs a CUDA GPU; bf16 runs on the CPU or a CUDA GPU."""
        choice = self.device_choice if choice is None else choice
        p, device = self.config.precision, choice.device
        if p == "fp16" and device.type != "cuda":
            raise ValueError(
                f"{type(self).__name__} got precision='fp16' on device {str(device)!r} "
                f"({choice.reason}): fp16 with a gradient scaler needs a CUDA GPU. "
                "Use precision='bf16' (CPU or GPU), precision='fp32', or device='cuda' on a machine with one"
            )
        if p == "bf16" and device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"{type(self).__name__} got precision='bf16' on device {str(device)!r}: bf16 autocast runs on "
                "the CPU or a CUDA GPU. Use precision='fp32' there, or device='cpu'/'cuda'"
            )

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The update's autocast for ``precision`` (nothing for fp32)."""
        p = self.config.precision
        if p == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AUTOCAST[p])

    def _probe_key(self) -> tuple:
        """What a device measurement depends on: the networks, their sizes, and the batch."""
        params = sum(p.numel() for net in self.networks.values() for p in net.parameters())
        return (
            type(self).__name__,
            self.obs_shape,
            str(self.obs_dtype),
            self.encoder_description,
            self._probe_batch_size(),
            params,
        )

    def _probe_batch_size(self) -> int:
        """The batch an update's forward and backward passes see (``batch_size``, else a rollout)."""
        c = self.config
        size = getattr(c, "batch_size", None)
        if not size:
            size = int(getattr(c, "n_steps", 64)) * int(getattr(c, "n_envs", 1))
        return max(1, int(size))

    def _probe_calls(
        self, nets: dict[str, nn.Module], device: torch.device, batch: int, dynamic_batch: bool = False
    ) -> list[Any]:
        """Calls running each network of ``nets`` that takes an observation batch (or an observation
        and an action batch, as critics do) on zeros; networks taking other inputs are left out.
        ``dynamic_batch``: the batch dimension is marked dynamic for ``torch.compile``, so that the
        graph traced on it serves every batch size above one (an update's targets may run on several
        minibatches at once)."""
        obs = torch.zeros((batch, *self.obs_shape), dtype=_torch_dtype(self.obs_dtype), device=device)
        act_dim = int(np.prod(self.action_space.shape)) if isinstance(self.action_space, spaces.Box) else 1
        act = torch.zeros((batch, act_dim), device=device)
        if dynamic_batch and batch > 1:
            from .kernels.private_torch import mark_batch_dynamic

            mark_batch_dynamic(obs, act)
        calls = []
        for net in nets.values():
            for args in ((obs,), (obs, act)):
                try:
                    net(*args)
                except Exception:  # not this signature (or not a network with a forward)
                    continue
                calls.append(functools.partial(net, *args))
                if dynamic_batch and len(args) == 2:  # an actor's loss: the critic on actions carrying gradients
                    calls.append(functools.partial(net, obs, act.detach().clone().requires_grad_(True)))
                break
        return calls

    def _targets_batch_size(self) -> int:
        """The batch an update's no-grad passes (its targets) may see: an off-policy update draws the
        minibatches of all its gradient steps at once and runs the target network over them together."""
        steps = getattr(self.config, "gradient_steps", 1)
        return self._probe_batch_size() * (int(steps) if isinstance(steps, int) and steps > 1 else 1)

    def _device_probe(self, device: torch.device) -> Any:
        """A short update on ``device`` for ``"auto"`` to time: copies of the declared networks, one
        forward and backward pass on a batch of the update's size (the agent itself is untouched)."""
        nets = {
            name: copy.deepcopy(getattr(self, name)).to(device)
            for name in self.network_names
            if isinstance(getattr(self, name, None), nn.Module)
        }
        calls = self._probe_calls(nets, device, self._probe_batch_size())
        if not calls:
            raise RuntimeError("no network of this agent takes an observation batch")
        return functools.partial(_run_probe, calls)

    def _compile(self) -> None:
        """``compile``: each declared network through ``torch.compile`` (``module.compile()``, so its
        saved names stay), compiled at once by tracing passes (:meth:`_trace_compiled`) whose time is
        ``compile_time``; when that fails, the networks run eagerly and a warning says why."""
        mode = self.config.compile
        self._compiled = False
        self._compiled_threads = set()
        if mode is False:
            return
        mode = "default" if mode is True else str(mode)
        from .kernels.private_torch import allow_graph_variants

        allow_graph_variants()
        nets = self._declared_networks()
        with torch.no_grad(), _buffers_kept(nets):  # which networks take an observation batch, found eagerly
            batch, targets = self._probe_batch_size(), self._targets_batch_size()
            update_calls = self._probe_calls(nets, self.device, batch, dynamic_batch=True)
            no_grad_calls = list(update_calls)
            if targets != batch:
                # The graph traced with a dynamic batch serves every larger size, except across 16 for a CNN
                # (PyTorch's convolution picks another memory layout there): a size past both is enough,
                # never the whole (possibly huge: 64 x 128 steps) batch of targets.
                size = min(targets, max(2 * batch, 16))
                no_grad_calls += self._probe_calls(nets, self.device, size, dynamic_batch=True)
            no_grad_calls += self._probe_calls(nets, self.device, self.num_envs)
        self._trace_calls = (update_calls, no_grad_calls)
        start = time.perf_counter()
        for net in nets.values():
            net.compile(mode=mode)
        self._compiled = True
        try:
            if not update_calls:
                raise RuntimeError("no network of this agent takes an observation batch to compile with")
            self._trace_compiled()
        except Exception as exc:
            for net in nets.values():
                uncompile(net)
            self._compiled = False
            self.compile_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            warnings.warn(
                f"{type(self).__name__}: compile={self.config.compile!r} failed ({self.compile_error}); "
                "its networks run eagerly (compile=False gives the same results without trying)",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        # Every compilation of this agent counts (a rebuild under the session's seed compiles again).
        self.compile_time = (self.compile_time or 0.0) + time.perf_counter() - start
        self._compile_time_due = True

    def _declared_networks(self) -> dict[str, nn.Module]:
        return {
            name: getattr(self, name) for name in self.network_names if isinstance(getattr(self, name, None), nn.Module)
        }

    def _trace_compiled(self) -> None:
        """Run the compiled networks as training will, so that they compile now: the update's forward
        and backward pass on a batch of its size (its batch dimension dynamic), its no-grad passes (for
        targets, also on all gradient steps' minibatches at once), and acting's no-grad pass on the
        envs' batch. What compiled code is specialised to (grad mode, batch size, torch's thread count)
        is then seen before the first step; the thread count is recorded for :meth:`prepare_compiled`.
        Every buffer gets its value back afterwards (:func:`_buffers_kept`)."""
        update_calls, no_grad_calls = self._trace_calls
        nets = self._declared_networks()
        try:
            with _buffers_kept(nets), self._autocast():
                _run_probe(update_calls)
                with torch.no_grad():  # an update's targets (target networks, double-Q), then acting
                    for call in no_grad_calls:
                        call()
            synchronize(self.device)
        finally:
            for net in nets.values():
                for p in net.parameters():
                    p.grad = None
        self._compiled_threads.add(torch.get_num_threads())

    def prepare_compiled(self) -> None:
        """Compile again now, counted in ``compile_time``, when torch's thread count differs from every
        one the compiled networks were traced under (a session's ``torch_threads``): compiled code is
        specialised to it, and the first step would otherwise recompile, uncounted. Nothing when the
        agent is not compiled or the count was seen before."""
        if not self._compiled or torch.get_num_threads() in self._compiled_threads:
            return
        start = time.perf_counter()
        self._trace_compiled()
        self.compile_time = (self.compile_time or 0.0) + time.perf_counter() - start
        self._compile_time_due = True

    @property
    def convolutional(self) -> bool:
        """True when the networks read images through a CNN encoder (image observations, or an encoder
        class of the user's): what ``precision=`` is for, and what a session's ``torch_threads="auto"``
        gives torch's own thread count."""
        return has_image(self.observation_space) or isinstance(self.config.encoder, type)

    @property
    def compiled(self) -> bool:
        """True when the networks run through ``torch.compile`` (``compile=`` set and it worked)."""
        return self._compiled

    def __repr__(self) -> str:
        mode = "training" if self.training else "play"
        c = self.config
        compiled = f"compile={c.compile!r}"
        if c.compile is not False:
            compiled += (
                f" ({self.compile_time:.1f} s to compile)"
                if self._compiled
                else f" (failed, eager: {self.compile_error})"
            )
        return (
            f"{self.algorithm}(obs={describe_space(self.observation_space)}, "
            f"action={describe_space(self.action_space)}, encoder={self.encoder_description}, "
            f"device={self.device} [{self.device_choice.reason}], {compiled}, "
            f"precision={c.precision}, steps={self.num_timesteps}, {mode})"
        )


def _on_device_step(opt: torch.optim.Optimizer) -> bool:
    """Whether ``opt`` keeps its step counts with the parameters (fused or capturable), not on the CPU."""
    return any(group.get("fused") or group.get("capturable") for group in opt.param_groups)


@contextlib.contextmanager
def _buffers_kept(nets: dict[str, nn.Module]) -> Iterator[None]:
    """Within the block the networks may run; afterwards every buffer has its value from before. Probing and
    tracing run them on zeros in training mode, and batch normalization's running statistics and counts
    (CrossQ's) must not learn from those passes."""
    kept = [(b, b.detach().clone()) for net in nets.values() for b in net.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in kept:
                buffer.copy_(value)


def _run_probe(calls: list[Any]) -> None:
    """One forward pass of each call and one backward pass of the sum of their outputs."""
    total: torch.Tensor | None = None
    for call in calls:
        out = call()
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                part = t.float().sum()
                total = part if total is None else total + part
    if total is not None and total.requires_grad:
        total.backward()


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, dtype=dtype)).dtype
