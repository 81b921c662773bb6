"""Schedules: a hyperparameter as a function of training progress (0 at the start, 1 at the end).

``wb.linear(1e-3, 0.0)`` is what rl-baselines3-zoo writes ``lin_1e-3``. Progress is the fraction of
the session's step budget done so far. Schedules are plain data, so they save to ``meta.json``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Constant", "Exponential", "Linear", "Schedule", "as_schedule", "linear", "schedule_from_dict"]


@dataclass(frozen=True)
class Schedule:
    """Base class: ``schedule(progress) -> value`` with ``progress`` in ``[0, 1]``."""

    def __call__(self, progress: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description, read back by :func:`schedule_from_dict`."""
        return {"schedule": type(self).__name__.lower(), **asdict(self)}


@dataclass(frozen=True)
class Constant(Schedule):
    """Always ``value``."""

    value: float

    def __call__(self, progress: float) -> float:
        return self.value


@dataclass(frozen=True)
class Linear(Schedule):
    """From ``start`` to ``end`` linearly over the first ``fraction`` of training, then ``end``."""

    start: float
    end: float
    fraction: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")

    def __call__(self, progress: float) -> float:
        t = min(max(progress, 0.0) / self.fraction, 1.0)
        return self.start + (self.end - self.start) * t


@dataclass(frozen=True)
class Exponential(Schedule):
    """From ``start`` to ``end`` geometrically over the first ``fraction`` of training."""

    start: float
    end: float
    fraction: float = 1.0

    def __post_init__(self) -> None:
        if self.start <= 0 or self.end <= 0:
            raise ValueError(
                f"an exponential schedule needs positive start and end, got {self.start}, {self.end}"
            )
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")

    def __call__(self, progress: float) -> float:
        t = min(max(progress, 0.0) / self.fraction, 1.0)
        return math.exp(math.log(self.start) + (math.log(self.end) - math.log(self.start)) * t)


def linear(start: float, end: float, fraction: float = 1.0) -> Linear:
    """A linear schedule from ``start`` to ``end`` (over the first ``fraction`` of training)."""
    return Linear(float(start), float(end), float(fraction))


def as_schedule(value: float | Schedule) -> Schedule:
    """A schedule from a number (constant) or a schedule (unchanged)."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, int | float):
        return Constant(float(value))
    raise TypeError(f"expected a number or a schedule such as wb.linear(1e-3, 0), got {value!r}")


_KINDS = {"constant": Constant, "linear": Linear, "exponential": Exponential}


def schedule_from_dict(data: dict[str, Any]) -> Schedule:
    """Rebuild a schedule written by :meth:`Schedule.to_dict`."""
    data = dict(data)
    kind = data.pop("schedule", None)
    if kind not in _KINDS:
        raise ValueError(f"unknown schedule kind {kind!r}; known: {', '.join(sorted(_KINDS))}")
    return _KINDS[kind](**data)
