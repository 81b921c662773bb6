"""Schedules: a hyperparameter as a function of training progress (0 at the start, 1 at the end).

``wb.linear(1e-3, 0.0)`` is what rl-baselines3-zoo writes ``lin_1e-3``. Progress is the fraction of
the session's step budget done so far. Schedules are plain data, so they save to ``meta.json``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
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

    def key_values(self) -> tuple[float, ...]:
        """The values that bound this schedule: its start and end, and any breakpoints between.
        It never takes a value outside their range, so a hyperparameter's constraint checks these
        (``workbench.validation``). A schedule written elsewhere is asked at progress 0 and 1."""
        return (self(0.0), self(1.0))


@dataclass(frozen=True)
class Constant(Schedule):
    """Always ``value``."""

    value: float

    def __call__(self, progress: float) -> float:
        return self.value

    def key_values(self) -> tuple[float, ...]:
        """Its one value."""
        return (self.value,)


@dataclass(frozen=True)
class _Ramp(Schedule):
    """What :class:`Linear` and :class:`Exponential` share: from ``start`` to ``end`` over the first
    ``fraction`` of training, then ``end``."""

    start: float
    end: float
    fraction: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")

    def _done(self, progress: float) -> float:
        """How far along the ramp ``progress`` is, from 0 to 1."""
        return min(max(progress, 0.0) / self.fraction, 1.0)

    def key_values(self) -> tuple[float, ...]:
        """``(start, end)``: every value lies between them."""
        return (self.start, self.end)


@dataclass(frozen=True)
class Linear(_Ramp):
    """From ``start`` to ``end`` linearly over the first ``fraction`` of training, then ``end``."""

    def __call__(self, progress: float) -> float:
        return self.start + (self.end - self.start) * self._done(progress)


@dataclass(frozen=True)
class Exponential(_Ramp):
    """From ``start`` to ``end`` geometrically over the first ``fraction`` of training."""

    def __post_init__(self) -> None:
        if self.start <= 0 or self.end <= 0:
            raise ValueError(f"an exponential schedule needs positive start and end, got {self.start}, {self.end}")
        super().__post_init__()

    def __call__(self, progress: float) -> float:
        t = self._done(progress)
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


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def split_tagged(
    data: Any, tag: str, known: Mapping[str, Any], what: str, example: str, label: str
) -> tuple[str, dict[str, Any]]:
    """``(kind, the other keys)`` of saved JSON data ``{tag: kind, ...}`` whose kind is one of ``known``
    (a schedule's ``{"schedule": "linear", ...}``, an exploration's ``{"type": "EpsilonGreedy", ...}``).
    A ``ValueError`` says what ``what`` is (a JSON object such as ``{tag: example}``) or names the
    unknown ``label`` and the known ones."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} is a JSON object such as {{{tag!r}: {example!r}, ...}}, not a {type(data).__name__}")
    data = dict(data)
    kind = data.pop(tag, None)
    if kind not in known:
        shown = repr(kind) if isinstance(kind, str) and len(kind) <= 40 else f"a {type(kind).__name__}"
        raise ValueError(f"unknown {label} {shown}; known: {', '.join(sorted(known))}")
    return kind, data


def schedule_from_dict(data: dict[str, Any]) -> Schedule:
    """Rebuild a schedule written by :meth:`Schedule.to_dict`. Raises ``ValueError`` naming the
    key for an unknown kind, an unknown or missing key, or a value that is not a finite number."""
    kind, data = split_tagged(data, "schedule", _KINDS, "a schedule", "linear", "schedule kind")
    cls = _KINDS[kind]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in fields:
            shown = repr(key) if len(key) <= 40 else f"a key of {len(key)} characters"
            raise ValueError(f"a {kind} schedule has no key {shown}; its keys: {', '.join(fields)}")
        if not _is_number(value):
            raise ValueError(f"the {kind} schedule's {key!r} is not a finite number")
    missing = [name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"the {kind} schedule lacks {missing[0]!r}")
    return cls(**data)
