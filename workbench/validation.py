"""Argument checks, declared once next to what they check, and the checks of a run's numbers.

A constraint says what a value may be, in words and as a test. Config dataclasses declare it on
each field, ``n_epochs: int = checked(20, integer(min=1))``, and :func:`validate_config` runs every
field's constraint when the config is built (``Agent._make_config``), so every agent, and every
future one, refuses a bad hyperparameter at once, naming it::

    ArgumentError: PPO got n_epochs=0: n_epochs must be an integer >= 1. Pass such a value, or leave
    n_epochs out for its default (20).

A subclass that only changes a default (``n_steps: int = 32``) keeps the constraint its base
declared. Functions with keyword arguments (``Session``, ``Agent.play``) check them with
:func:`check_arguments` and a table of the same constraints.

:class:`ArgumentError` is both a ``ValueError`` and a ``TypeError``, so code catching either keeps
working. :class:`LossWatch` is the loop's check that an update's losses stay finite.

This module sits at the bottom of the layers: it knows numbers, schedules and dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .envs.core import EnvOutputError
from .schedules import Schedule

__all__ = [
    "ArgumentError",
    "Constraint",
    "LossWatch",
    "NonFiniteLossError",
    "any_of",
    "check_arguments",
    "check_env_batch",
    "check_rows",
    "check_value",
    "checked",
    "choice",
    "constraint_of",
    "flag",
    "function_of",
    "integer",
    "is_live",
    "layer_widths",
    "number",
    "optional",
    "path_like",
    "validate_config",
]


class ArgumentError(ValueError, TypeError):
    """An argument of the wrong type or out of range, named with its value and what is allowed.

    Both a ``ValueError`` and a ``TypeError``: ``except ValueError`` and ``except TypeError`` catch it.
    """


@dataclasses.dataclass(frozen=True)
class Constraint:
    """What a value may be: ``allowed`` in words (``"an integer >= 1"``) and ``test(value) -> bool``."""

    allowed: str
    test: Callable[[Any], bool]

    def __call__(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except Exception:  # a test that cannot even look at the value: the value is not allowed
            return False


def _is_int(value: Any) -> bool:
    # bool is an int to Python, but True is not a step count.
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_) and math.isfinite(float(value))


def _bounds(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high:g}"
    return ""


def _within(v: float, low: float | None, high: float | None, low_open: bool, high_open: bool) -> bool:
    if low is not None and (v <= low if low_open else v < low):
        return False
    return not (high is not None and (v >= high if high_open else v > high))


def integer(min: int | None = None, max: int | None = None, *, also: tuple[int, ...] = ()) -> Constraint:
    """An int (numpy ints too, never a bool) within ``[min, max]``, or one of the values ``also``."""
    words = f"an integer{_bounds(min, max, False, False)}"
    if also:
        words += " or " + " or ".join(map(str, also))
    return Constraint(words, lambda v: _is_int(v) and (int(v) in also or _within(int(v), min, max, False, False)))


def number(
    min: float | None = None,
    max: float | None = None,
    *,
    min_open: bool = False,
    max_open: bool = False,
    schedule: bool = False,
) -> Constraint:
    """A finite real number within the bounds (``min_open``: the bound itself excluded); with
    ``schedule=True`` also a schedule such as ``wb.linear(1e-3, 0)`` whose start and end (and any
    breakpoints: :meth:`Schedule.key_values`) are finite numbers within the bounds. A schedule may
    reach an open bound (a learning rate decaying to 0 at the very end), never cross it."""
    words = f"a finite number{_bounds(min, max, min_open, max_open)}"
    if schedule:
        ends = _bounds(min, max, False, False)
        words += f" or a schedule such as wb.linear(start, end) whose start and end are{ends}"

    def test(v: Any) -> bool:
        if schedule and isinstance(v, Schedule):
            return all(_is_real(x) and _within(float(x), min, max, False, False) for x in v.key_values())
        return _is_real(v) and _within(float(v), min, max, min_open, max_open)

    return Constraint(words, test)


def flag() -> Constraint:
    """True or False (not 0, 1 or a string)."""
    return Constraint("True or False", lambda v: isinstance(v, bool | np.bool_))


def choice(*options: Any) -> Constraint:
    """One of the strings ``options``."""
    return Constraint("one of " + ", ".join(repr(o) for o in options), lambda v: isinstance(v, str) and v in options)


def optional(constraint: Constraint) -> Constraint:
    """None or what ``constraint`` allows."""
    return Constraint(f"None or {constraint.allowed}", lambda v: v is None or constraint(v))


def any_of(*constraints: Constraint) -> Constraint:
    """What any one of ``constraints`` allows."""
    return Constraint(" or ".join(c.allowed for c in constraints), lambda v: any(c(v) for c in constraints))


def layer_widths() -> Constraint:
    """Hidden layer widths: a tuple or list of integers >= 1 (empty: no hidden layer)."""
    return Constraint(
        "a tuple of integers >= 1, one per hidden layer, such as (64, 64)",
        lambda v: isinstance(v, tuple | list) and all(_is_int(w) and w >= 1 for w in v),
    )


def path_like() -> Constraint:
    """A path: a string or an ``os.PathLike``."""
    return Constraint("a path (a string or os.PathLike)", lambda v: isinstance(v, str | os.PathLike))


def function_of(n_args: int, of: str) -> Constraint:
    """A callable that can be called with ``n_args`` positional arguments (``of`` names them)."""

    def test(v: Any) -> bool:
        if not callable(v):
            return False
        try:
            signature = inspect.signature(v)
        except (TypeError, ValueError):  # a builtin without a signature: trust it
            return True
        try:
            signature.bind(*([None] * n_args))
        except TypeError:
            return False
        return True

    return Constraint(f"a function taking {of} ({n_args} argument{'s' if n_args != 1 else ''})", test)


# -- running the checks ----------------------------------------------------------------------


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    if isinstance(value, bool | int | float | np.integer | np.floating) or value is None:
        return text
    return f"{text} (a {type(value).__name__})"


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` Did you mean a, b?`` with up to three of ``known`` close to a mistyped ``name``; empty when none
    is close (what an error message puts after the name it refuses)."""
    close = difflib.get_close_matches(name, known, n=3)
    return f" Did you mean {', '.join(close)}?" if close else ""


def check_value(owner: str, name: str, value: Any, constraint: Constraint, default: Any = dataclasses.MISSING) -> None:
    """Raise :class:`ArgumentError` unless ``constraint`` allows ``value``; the message names
    ``owner`` and the argument, the value, what is allowed and the default (when there is one)."""
    if constraint(value):
        return
    fix = "Pass such a value"
    if default is not dataclasses.MISSING:
        fix += f", or leave {name} out for its default ({default!r})"
    raise ArgumentError(f"{owner} got {name}={_show(value)}: {name} must be {constraint.allowed}. {fix}.")


def check_arguments(
    owner: str, values: Mapping[str, Any], checks: Mapping[str, Constraint], defaults: Mapping[str, Any] | None = None
) -> None:
    """Check each named value against its constraint in ``checks`` (see :func:`check_value`)."""
    defaults = defaults or {}
    for name, constraint in checks.items():
        check_value(owner, name, values[name], constraint, defaults.get(name, dataclasses.MISSING))


def checked(
    default: Any = dataclasses.MISSING, constraint: Constraint | None = None, *, live: bool = False, **kwargs: Any
) -> Any:
    """A dataclass field with its constraint: ``gamma: float = checked(0.99, number(0, 1))``.

    ``live=True`` marks a hyperparameter that may change while the agent trains
    (``session.set(name=value)``, see docs/live-edits.md): the change takes effect at the next
    update. Fields left ``live=False`` are fixed once the agent is built (they size its networks,
    memory or envs). Keyword arguments go to ``dataclasses.field`` (``default_factory=...``)."""
    assert constraint is not None, "checked() needs the constraint"
    return dataclasses.field(default=default, metadata={"check": constraint, "live": bool(live)}, **kwargs)


def is_live(cls: type, name: str) -> bool:
    """True when the config class ``cls`` declares field ``name`` with ``checked(..., live=True)``
    (the nearest declaration along its bases that says, as for constraints)."""
    for klass in cls.__mro__:
        field = getattr(klass, "__dataclass_fields__", {}).get(name)
        if field is not None and "live" in field.metadata:
            return bool(field.metadata["live"])
    return False


def constraint_of(cls: type, name: str) -> Constraint | None:
    # A subclass redeclaring a field to change its default gets a field without metadata:
    # the constraint is the nearest one declared along the class's bases.
    for klass in cls.__mro__:
        field = getattr(klass, "__dataclass_fields__", {}).get(name)
        if field is not None and "check" in field.metadata:
            return field.metadata["check"]
    return None


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def validate_config(config: Any, owner: str) -> None:
    """Check every field of the dataclass ``config`` against the constraint declared for it;
    raise :class:`ArgumentError` naming ``owner`` (``"PPO"``), the field, the value and what is allowed."""
    for field in dataclasses.fields(config):
        constraint = constraint_of(type(config), field.name)
        if constraint is not None:
            value = getattr(config, field.name)
            if not constraint(value):
                check_value(owner, field.name, value, constraint, _default_of(field))


# -- the numbers of a run --------------------------------------------------------------------


def check_rows(rows: Sequence[int], n: int, num_envs: int) -> np.ndarray:
    """``decide``'s ``rows`` (which of ``num_envs`` envs a batch of ``n`` observations comes from) as
    distinct env indices, one per observation; a ValueError naming the value otherwise."""
    env_rows = np.asarray(rows)
    if env_rows.shape != (n,) or env_rows.dtype.kind not in "iu":
        raise ValueError(f"decide() got rows={rows!r} for {n} observation(s): give one env index per observation")
    if len(np.unique(env_rows)) != n or (n and (env_rows.min() < 0 or env_rows.max() >= num_envs)):
        raise ValueError(
            f"decide() got rows={rows!r}: give distinct env indices in [0, {num_envs}) (num_envs={num_envs})"
        )
    return env_rows.astype(np.int64)


def check_env_batch(
    steps_before: int,
    next_obs: np.ndarray,
    rewards: np.ndarray | None = None,
    final_obs: np.ndarray | None = None,
    terminated: np.ndarray | None = None,
    truncated: np.ndarray | None = None,
) -> None:
    """Raise :class:`workbench.envs.EnvOutputError` when a step of the envs (or their first reset,
    with ``rewards`` None) returned a NaN or infinite reward or observation.

    Arrays have one row per env, as the runners return them: ``next_obs`` what the agent decides on
    next, ``final_obs`` the step's own observations (where an episode ended, ``next_obs`` came from
    ``env.reset``). ``steps_before`` is the run's step counter before this step. The common case
    costs two sums: only a non-finite sum looks further (a sum that overflowed is let through).
    """
    if rewards is None:
        if math.isfinite(_total(next_obs)):
            return
    elif (
        math.isfinite(_total(rewards))
        and math.isfinite(_total(next_obs))
        and (final_obs is None or final_obs is next_obs or math.isfinite(_total(final_obs)))
    ):
        return
    n = len(next_obs)
    step = steps_before // n + (0 if rewards is None else 1)

    def where(method: str, i: int) -> str:
        return f"{method} at step {step}" + (f" (env {i} of {n})" if n > 1 else "")

    fix = (
        "Fix the env so it returns finite numbers (wb.check_env(env) runs gymnasium's checker), "
        "or wrap it to replace or clip them."
    )
    if rewards is not None:
        bad = np.flatnonzero(~np.isfinite(rewards))
        if len(bad):
            i = int(bad[0])
            raise EnvOutputError(f"{where('env.step', i)} returned reward {rewards[i]}. {fix}")
        stepped = next_obs if final_obs is None else final_obs
        bad = np.flatnonzero(~np.isfinite(stepped.reshape(n, -1)).all(axis=1))
        if len(bad):
            i = int(bad[0])
            raise EnvOutputError(f"{where('env.step', i)} returned observation {_row(stepped[i])}. {fix}")
    bad = np.flatnonzero(~np.isfinite(next_obs.reshape(n, -1)).all(axis=1))
    if len(bad):
        i = int(bad[0])
        method = "env.reset"
        if (
            rewards is not None
            and not (terminated is not None and terminated[i])
            and not (truncated is not None and truncated[i])
        ):
            method = "env.step"
        raise EnvOutputError(f"{where(method, i)} returned observation {_row(next_obs[i])}. {fix}")


_ONES: dict[tuple[int, np.dtype], np.ndarray] = {}


def _total(x: np.ndarray) -> Any:
    """The sum of every entry of ``x``: NaN or infinite when one is (or when the sum overflows).
    A dot product with ones: for the few numbers of a step, numpy's fastest reduction (about
    twice as fast as ``x.sum()``, which goes through the ufunc machinery)."""
    flat = x.ravel()  # a view of a contiguous batch (reshape(-1) costs ten times more)
    key = (flat.size, flat.dtype)
    ones = _ONES.get(key)
    if ones is None:
        ones = _ONES[key] = np.ones(flat.size, dtype=flat.dtype)
    return flat.dot(ones)


def _row(obs: np.ndarray) -> str:
    flat = np.asarray(obs).ravel()
    bad = np.flatnonzero(~np.isfinite(flat))
    return f"{np.array2string(flat, threshold=8)} ({flat[bad[0]]} at index {int(bad[0])})"


class NonFiniteLossError(FloatingPointError):
    """An update returned a NaN or infinite loss; the message names the update and the last finite loss."""


class LossWatch:
    """Checks that the losses an update returns (metrics whose name ends in ``loss``) are finite.

    Remembers the last finite value of each, so the error can say where the run stood before it
    broke. Costs a few comparisons per update.
    """

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.last: dict[str, tuple[float, int, int]] = {}  # name -> (value, update, step)

    def check(self, metrics: Mapping[str, float], update: int, step: int) -> None:
        """Raise :class:`NonFiniteLossError` when a loss in ``metrics`` is NaN or infinite."""
        for name, value in metrics.items():
            if not name.endswith("loss"):
                continue
            if math.isfinite(value):
                self.last[name] = (float(value), update, step)
                continue
            if name in self.last:
                good, good_update, good_step = self.last[name]
                before = f"the last finite {name} was {good:.6g} (update {good_update}, step {good_step})"
            else:
                before = f"no earlier update returned a finite {name}"
            raise NonFiniteLossError(
                f"{self.algorithm} update {update} (at step {step}) returned {name} {value}; {before}. "
                "The networks' weights are no longer usable: check the env's rewards and observations "
                "(their scale as well as their values), or lower the learning rate, then train again "
                "from a saved checkpoint or a new agent."
            )


_constraint_of = constraint_of  # the name tests used before it was public
