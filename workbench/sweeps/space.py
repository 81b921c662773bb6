"""The search-space language sweeps and population-based training share: ``(low, high)`` is a range,
``[a, b, ...]`` a choice."""

from __future__ import annotations

from typing import Any

__all__ = ["is_number", "range_bounds"]


def is_number(x: Any) -> bool:
    """True for an int or a float (a bool is neither here)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def range_bounds(label: str, name: str, spec: tuple[Any, ...], error: type[Exception]) -> tuple[Any, Any]:
    """``spec``'s ``(low, high)``; anything but two numbers is refused with ``error``, naming ``label[name]``."""
    if len(spec) != 2 or not all(is_number(x) for x in spec):
        raise error(
            f"{label}[{name!r}] = {spec!r}: a tuple is a range and needs exactly two numbers (low, high); "
            "use a list for a choice"
        )
    return spec[0], spec[1]
