"""Exploration policies, passed to an agent as ``exploration=``.

Each has a schedule (its strength as a function of training progress, 0 at the start of the budget
and 1 at its end), reports its current strength as a signal (``epsilon`` or ``noise_stddev``) and
saves to plain JSON. Play mode uses none of them: a loaded agent acts deterministically.

* :class:`EpsilonGreedy` for discrete actions (DQN): a random action with probability epsilon.
* :class:`GaussianNoise` (additive), :class:`OrnsteinUhlenbeckNoise` (temporally correlated) and
  :class:`TruncatedNormalNoise` (bounded) for continuous actions (DDPG, TD3).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .schedules import Constant, Exponential, Linear, Schedule, as_schedule, schedule_from_dict, split_tagged

__all__ = [
    "EpsilonGreedy",
    "Exploration",
    "GaussianNoise",
    "OrnsteinUhlenbeckNoise",
    "TruncatedNormalNoise",
    "exploration_from_dict",
]


class Exploration:
    """Base class. ``signal_name`` is the signal the current strength is recorded under."""

    signal_name: ClassVar[str] = "exploration"
    kind: ClassVar[str] = "continuous"  # which action spaces it fits: "discrete" or "continuous"

    def value(self, progress: float) -> float:
        """Current strength (epsilon, or noise standard deviation) at ``progress`` in [0, 1]."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description, read back by :func:`exploration_from_dict`."""
        raise NotImplementedError

    def reset(self, done: np.ndarray | None = None) -> None:
        """Forget per-episode state for envs whose episode ended (``done`` mask; all when None)."""

    def state(self) -> dict[str, Any]:
        """Internal state to save with a checkpoint (JSON-ready)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state` returned."""


def _schedule_dict(s: Schedule) -> dict[str, Any] | float:
    return s.value if isinstance(s, Constant) else s.to_dict()


@dataclass
class EpsilonGreedy(Exploration):
    """Random action with probability epsilon, going from ``start`` to ``end`` over the first
    ``fraction`` of training, linearly (``schedule="linear"``) or geometrically ("exponential")."""

    start: float = 1.0
    end: float = 0.05
    fraction: float = 0.1
    schedule: str = "linear"

    signal_name: ClassVar[str] = "epsilon"
    kind: ClassVar[str] = "discrete"

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"EpsilonGreedy {name} must be a probability in [0, 1], got {v}")
        if self.schedule == "linear":
            self._schedule: Schedule = Linear(self.start, self.end, self.fraction)
        elif self.schedule == "exponential":
            self._schedule = Exponential(max(self.start, 1e-8), max(self.end, 1e-8), self.fraction)
        else:
            raise ValueError(f"EpsilonGreedy schedule must be 'linear' or 'exponential', got {self.schedule!r}")

    def value(self, progress: float) -> float:
        return float(self._schedule(progress))

    def select(self, greedy: np.ndarray, n_actions: int, rng: np.random.Generator, progress: float) -> np.ndarray:
        """Replace each greedy action by a uniform random one with probability epsilon."""
        eps = self.value(progress)
        explore = np.asarray(rng.random(greedy.shape[0]) < eps)
        if explore.any():
            greedy = greedy.copy()
            greedy[explore] = rng.integers(0, n_actions, size=int(explore.sum()))
        return greedy

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "EpsilonGreedy",
            "start": self.start,
            "end": self.end,
            "fraction": self.fraction,
            "schedule": self.schedule,
        }


class _ContinuousNoise(Exploration):
    """Shared parts of the continuous noises: a stddev schedule relative to the action range."""

    signal_name: ClassVar[str] = "noise_stddev"
    kind: ClassVar[str] = "continuous"
    _stddev: Schedule

    def value(self, progress: float) -> float:
        return float(self._stddev(progress))

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator, progress: float) -> np.ndarray:
        """Noise in units of half the action range (so stddev 0.1 means 10% of it)."""
        raise NotImplementedError

    def perturb(
        self,
        actions: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        rng: np.random.Generator,
        progress: float,
    ) -> np.ndarray:
        """Add noise scaled to the action range and clip to the bounds."""
        half_range = (high - low) / 2.0
        noisy = actions + self.noise(actions.shape, rng, progress) * half_range
        return np.clip(noisy, low, high).astype(np.float32)


@dataclass
class GaussianNoise(_ContinuousNoise):
    """Additive normal noise with standard deviation ``stddev`` (a number or a schedule),
    in units of half the action range."""

    stddev: float | Schedule = 0.1

    def __post_init__(self) -> None:
        self._stddev = as_schedule(self.stddev)
        if self._stddev(0.0) < 0:
            raise ValueError(f"GaussianNoise stddev must be >= 0, got {self.stddev}")

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator, progress: float) -> np.ndarray:
        return rng.normal(0.0, self.value(progress), size=shape)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "GaussianNoise", "stddev": _schedule_dict(self._stddev)}


@dataclass
class TruncatedNormalNoise(_ContinuousNoise):
    """Normal noise with standard deviation ``stddev``, redrawn until it lies in ``[low, high]``
    (in units of half the action range; defaults ``-2 * stddev`` and ``2 * stddev`` at start)."""

    stddev: float | Schedule = 0.1
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        self._stddev = as_schedule(self.stddev)
        s0 = self._stddev(0.0)
        if s0 < 0:
            raise ValueError(f"TruncatedNormalNoise stddev must be >= 0, got {self.stddev}")
        self._low = -2.0 * s0 if self.low is None else float(self.low)
        self._high = 2.0 * s0 if self.high is None else float(self.high)
        if not self._low < self._high:
            raise ValueError(f"TruncatedNormalNoise needs low < high, got {self._low}, {self._high}")

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator, progress: float) -> np.ndarray:
        std = self.value(progress)
        out = rng.normal(0.0, std, size=shape)
        if std == 0.0:
            return np.clip(out, self._low, self._high)
        bad = (out < self._low) | (out > self._high)
        for _ in range(100):  # rejection sampling; converges fast for sensible bounds
            if not bad.any():
                break
            out[bad] = rng.normal(0.0, std, size=int(bad.sum()))
            bad = (out < self._low) | (out > self._high)
        return np.clip(out, self._low, self._high)  # never leaves the bounds, whatever happened

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "TruncatedNormalNoise",
            "stddev": _schedule_dict(self._stddev),
            "low": self._low,
            "high": self._high,
        }


@dataclass
class OrnsteinUhlenbeckNoise(_ContinuousNoise):
    """Temporally correlated noise: ``x += theta * (mean - x) * dt + sigma * sqrt(dt) * N(0, 1)``,
    reset at the end of each episode. ``sigma`` may be a schedule."""

    theta: float = 0.15
    sigma: float | Schedule = 0.2
    dt: float = 1e-2
    mean: float = 0.0
    _x: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._stddev = as_schedule(self.sigma)
        if self.theta < 0:
            raise ValueError(f"OrnsteinUhlenbeckNoise theta must be >= 0, got {self.theta}")

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator, progress: float) -> np.ndarray:
        if self._x is None or self._x.shape != shape:
            self._x = np.full(shape, self.mean, dtype=np.float64)
        sigma = self.value(progress)
        self._x = (
            self._x + self.theta * (self.mean - self._x) * self.dt + sigma * np.sqrt(self.dt) * rng.normal(size=shape)
        )
        return self._x.copy()

    def reset(self, done: np.ndarray | None = None) -> None:
        if self._x is None:
            return
        if done is None:
            self._x[...] = self.mean
        else:
            self._x[np.asarray(done, dtype=bool)] = self.mean

    def state(self) -> dict[str, Any]:
        return {} if self._x is None else {"x": self._x.tolist()}

    def load_state(self, state: dict[str, Any]) -> None:
        if "x" in state:
            self._x = np.asarray(state["x"], dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "OrnsteinUhlenbeckNoise",
            "theta": self.theta,
            "sigma": _schedule_dict(self._stddev),
            "dt": self.dt,
            "mean": self.mean,
        }


_TYPES: dict[str, type[Exploration]] = {
    "EpsilonGreedy": EpsilonGreedy,
    "GaussianNoise": GaussianNoise,
    "TruncatedNormalNoise": TruncatedNormalNoise,
    "OrnsteinUhlenbeckNoise": OrnsteinUhlenbeckNoise,
}


def exploration_from_dict(data: dict[str, Any]) -> Exploration:
    """Rebuild an exploration policy written by its ``to_dict()``. Raises ``ValueError`` naming
    the key for an unknown type, an unknown key or a value of the wrong kind."""
    kind, data = split_tagged(data, "type", _TYPES, "an exploration", "EpsilonGreedy", "exploration type")
    fields = [f.name for f in dataclasses.fields(_TYPES[kind]) if not f.name.startswith("_")]  # type: ignore[arg-type]
    for key, value in data.items():
        if key not in fields:
            shown = repr(key) if len(key) <= 40 else f"a key of {len(key)} characters"
            raise ValueError(f"{kind} has no key {shown}; its keys: {', '.join(fields)}")
        if key in ("stddev", "sigma"):
            if isinstance(value, dict):
                try:
                    data[key] = schedule_from_dict(value)
                except ValueError as exc:
                    raise ValueError(f"{kind}'s {key!r}: {exc}") from None
                continue
        elif key == "schedule":
            if not isinstance(value, str):
                raise ValueError(f"{kind}'s 'schedule' is not a string such as 'linear'")
            continue
        elif key in ("low", "high") and value is None:
            continue
        if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)):
            raise ValueError(f"{kind}'s {key!r} is not a finite number")
    return _TYPES[kind](**data)
