"""Where an agent's tensors live: parsing ``device=``, and ``device="auto"``, which measures.

``device=`` takes ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``, a ``torch.device``, or ``"auto"``
(the default). :func:`parse_device` refuses an unknown or unavailable device by name, listing what
this machine has. :func:`choose_device` resolves ``"auto"``:

* with no accelerator (no CUDA, no MPS) it picks the CPU at once and says so: nothing is measured,
  so the default costs a CPU-only machine nothing;
* otherwise it times a short forward and backward pass of the agent's own networks on a batch of its
  own size on each available device (:func:`time_probe`), and keeps the CPU unless an accelerator is
  clearly faster (:data:`ACCELERATOR_MARGIN`): small MLPs stay on the CPU (a GPU's per-call
  overhead dominates them), CNNs and large batches go to the GPU. A measurement is kept per process
  for the same networks and batch (:func:`clear_measurements` forgets them).

:func:`to_device` moves a host tensor (a replay minibatch, a rollout) to a device: through pinned
memory with ``non_blocking=True`` on CUDA, as-is on the CPU. See docs/devices.md.
"""

from __future__ import annotations

import difflib
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

__all__ = [
    "ACCELERATOR_MARGIN",
    "DEVICE_KINDS",
    "DeviceChoice",
    "available_devices",
    "choose_device",
    "clear_measurements",
    "parse_device",
    "time_probe",
    "to_device",
]

DEVICE_KINDS = ("auto", "cpu", "cuda", "cuda:N", "mps")
"""The spellings ``device=`` takes (``N`` a GPU index), besides a ``torch.device``."""

ACCELERATOR_MARGIN = 0.75
"""``"auto"`` picks an accelerator only when its measured update takes at most this fraction of the
CPU's: acting then also moves every observation batch there and back, which the update alone does
not show, so a near tie stays on the CPU."""

_MEASURED: dict[tuple, DeviceChoice] = {}
_MEASURED_LOCK = threading.Lock()


class DeviceChoice(NamedTuple):
    """What ``device=`` asked for, the device chosen, why, and the timings behind ``"auto"``."""

    requested: str
    """What was asked for (``"auto"``, ``"cpu"``, ``"cuda:0"``...)."""
    device: torch.device
    """Where the agent's tensors live."""
    reason: str
    """Why this device, in words (shown in ``repr(agent)``, the session's meta and dashboard)."""
    timings: dict[str, float]
    """Seconds per probe update on each device measured (empty when nothing was measured)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for a session's meta and signals."""
        return {
            "requested": self.requested,
            "device": str(self.device),
            "reason": self.reason,
            "timings": {k: float(v) for k, v in self.timings.items()},
        }


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def available_devices() -> list[str]:
    """The devices this machine has, as ``device=`` spells them: ``"cpu"``, then ``"cuda:0"``...,
    then ``"mps"`` where PyTorch sees them."""
    found = ["cpu"]
    found += [f"cuda:{i}" for i in range(_cuda_count())]
    if _mps_available():
        found.append("mps")
    return found


def _available_text() -> str:
    return "this machine has " + ", ".join(repr(d) for d in available_devices())


def parse_device(value: Any, owner: str = "the agent") -> torch.device | None:
    """The ``torch.device`` that ``value`` names, or None for ``"auto"``.

    Raises ``ValueError`` naming ``value`` for an unknown spelling (with the spellings there are)
    or a device this machine does not have (with the ones it has), and ``TypeError`` for a value
    that is neither a string nor a ``torch.device``."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    if not isinstance(value, str | torch.device):
        raise TypeError(
            f"{owner} got device={value!r}: device must be a string ({', '.join(repr(k) for k in DEVICE_KINDS)}) "
            f"or a torch.device; {_available_text()}"
        )
    try:
        device = torch.device(value.strip().lower() if isinstance(value, str) else value)
    except (RuntimeError, ValueError):
        close = difflib.get_close_matches(str(value).lower(), ["auto", "cpu", "cuda", "mps"], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"{owner} got device={value!r}, which is no device PyTorch knows.{hint} Use one of "
            f"{', '.join(repr(k) for k in DEVICE_KINDS)}; {_available_text()}"
        ) from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda":
        count = _cuda_count()
        if count == 0:
            raise ValueError(
                f"{owner} got device={value!r}, but this machine has no CUDA GPU that PyTorch can use "
                f"(torch.cuda.is_available() is False; torch {torch.__version__}); {_available_text()}. "
                "Use device='cpu', or device='auto' to use a GPU where there is one"
            )
        index = 0 if device.index is None else device.index
        if index >= count:
            raise ValueError(
                f"{owner} got device={value!r}, but this machine has {count} CUDA GPU(s) "
                f"(cuda:0 to cuda:{count - 1}); {_available_text()}"
            )
        return torch.device("cuda", index)
    if device.type == "mps":
        if not _mps_available():
            raise ValueError(
                f"{owner} got device={value!r}, but Apple's MPS backend is not available here "
                f"(torch.backends.mps.is_available() is False); {_available_text()}"
            )
        return torch.device("mps")
    raise ValueError(
        f"{owner} got device={value!r}: agents run on {', '.join(repr(k) for k in DEVICE_KINDS)}, "
        f"not on {device.type!r}; {_available_text()}"
    )


def describe_requested(value: Any) -> str:
    """``value`` as ``DeviceChoice.requested`` keeps it: ``"auto"`` or the device's name."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return str(value)


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a no-op on the CPU), so a timing covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # pragma: no cover - Apple machines only
        torch.mps.synchronize()


def time_probe(probe: Callable[[torch.device], Callable[[], None]], device: torch.device, repeats: int = 3) -> float:
    """Seconds per call of the update ``probe(device)`` returns: one call to warm up (kernels load,
    memory is allocated), then the best of ``repeats`` timed calls, each synchronized."""
    step = probe(device)
    step()
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def choose_device(
    requested: Any,
    probe: Callable[[torch.device], Callable[[], None]] | None = None,
    key: tuple | None = None,
    *,
    owner: str = "the agent",
    candidates: list[torch.device] | None = None,
) -> DeviceChoice:
    """Resolve ``requested`` (see :func:`parse_device`) to a :class:`DeviceChoice`.

    For ``"auto"``: the CPU at once when there is no accelerator; otherwise each device in
    ``candidates`` (default: every available one) runs ``probe(device)()``, a short update of the
    agent's networks on its batch size, and the fastest wins, an accelerator only when it takes at
    most :data:`ACCELERATOR_MARGIN` of the CPU's time. A result is kept for the process under
    ``key`` (the networks' and batch's description), so the same agent built again is not measured
    again. A device whose probe fails is left out (its error in the reason)."""
    device = parse_device(requested, owner)
    if device is not None:
        return DeviceChoice(describe_requested(requested), device, "asked for", {})
    if candidates is None:
        candidates = [torch.device(d) for d in available_devices()]
    if len(candidates) <= 1 or probe is None:
        if len(candidates) <= 1:
            reason = "auto: no CUDA or MPS device on this machine, so the CPU (nothing to measure)"
        else:
            reason = "auto: nothing to measure this agent's update with, so the CPU"
        return DeviceChoice("auto", torch.device("cpu"), reason, {})
    cache_key = None if key is None else (*key, tuple(str(c) for c in candidates))
    if cache_key is not None:
        with _MEASURED_LOCK:
            kept = _MEASURED.get(cache_key)
        if kept is not None:
            return kept
    timings: dict[str, float] = {}
    failures: list[str] = []
    for candidate in candidates:
        try:
            timings[str(candidate)] = time_probe(probe, candidate)
        except Exception as exc:  # an accelerator that cannot run these networks is not chosen
            failures.append(f"{candidate} failed ({type(exc).__name__}: {exc})")
    choice = _decide(timings, failures)
    if cache_key is not None:
        with _MEASURED_LOCK:
            _MEASURED[cache_key] = choice
    return choice


def _decide(timings: dict[str, float], failures: list[str]) -> DeviceChoice:
    """The device of the measured ``timings`` that ``"auto"`` picks, and why."""
    shown = ", ".join(f"{d} {t * 1e3:.2f} ms" for d, t in timings.items())
    failed = f"; {'; '.join(failures)}" if failures else ""
    cpu = timings.get("cpu")
    others = {d: t for d, t in timings.items() if d != "cpu"}
    if not others:
        return DeviceChoice(
            "auto", torch.device("cpu"), f"auto: only the CPU could be measured ({shown}){failed}", timings
        )
    best = min(others, key=others.__getitem__)
    if cpu is None or others[best] <= ACCELERATOR_MARGIN * cpu:
        why = "faster" if cpu is not None else "the CPU could not be measured"
        return DeviceChoice(
            "auto", torch.device(best), f"auto: {best} measured {why} per update ({shown}){failed}", timings
        )
    return DeviceChoice(
        "auto",
        torch.device("cpu"),
        f"auto: the CPU, as {best} is not clearly faster per update for these networks and batch ({shown}){failed}",
        timings,
    )


def clear_measurements() -> None:
    """Forget the measurements ``"auto"`` kept (a later agent measures again)."""
    with _MEASURED_LOCK:
        _MEASURED.clear()


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``: unchanged for the CPU; through pinned memory with
    ``non_blocking=True`` for CUDA, so the copy overlaps with the work already queued."""
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def compiling() -> bool:
    """True while ``torch.compile`` traces (``torch.compiler.is_compiling``, PyTorch 2.3 on; False before):
    Python-side caches and per-call branches step aside then, as the traced graph cannot keep them."""
    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(check()) if check is not None else False
