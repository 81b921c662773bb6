"""Composite action spaces (``Dict`` and ``Tuple``, nested) as one flat row per action, and back.

The agents that act in a composite space (PPO, A2C, RecurrentPPO) keep each action as one float32 row:
the columns of every leaf one after the other, in the space's order (a Dict's keys as gymnasium sorts
them, a Tuple's entries in order). A leaf is ``Discrete`` (one column: the index from 0), ``MultiDiscrete``
(a flat ``nvec``: one column per dimension), ``MultiBinary`` (one column per bit) or ``Box`` (one column per
element). Rollouts, vector envs, workers, recordings and datasets hold these rows, so each leaf's actions are
its own columns; :class:`ActionLayout` turns a row into the structure gymnasium's ``step`` takes (a dict or
tuple of numpy values, Box leaves clipped to their bounds) and a structure (from an application, or JSON)
back into a row, checked leaf by leaf.

Each leaf has a path, its keys and indices joined by ``"/"`` (``"shoot/power"``, ``"1/0"``): the names of its
entropy signal (``entropy/<path>``) and of its ONNX output.

**Hybrid (parameterised) actions.** A ``Tuple`` of two entries whose first is ``Discrete(k)`` and whose
second is a ``Dict`` or ``Tuple`` of exactly ``k`` entries is a hybrid action: the discrete choice picks a
branch, and only the chosen branch's parameters count (H-PPO, Fan et al. 2019). Branch ``j`` is the second
entry's ``j``-th entry (a Dict's ``j``-th key in its sorted order). The env still receives every branch
(gymnasium's structure is complete); the unchosen branches' log-probabilities and entropies are left out of
the loss. This is the one way a head depends on another head.

**Masks per head.** A mask mirrors the action space: a structure of the same keys / positions with a bool
vector for each discrete leaf (``Discrete(n)``: ``n`` entries; ``MultiDiscrete``: ``sum(nvec)``), ``None`` or
absent for a leaf with no mask (every action allowed) and never one for a Box or MultiBinary leaf. Masks are
per state and do not depend on the other heads' choices; a hybrid branch's masks apply when that branch is
chosen (an unchosen branch's actions do not enter the loss). Inside, the masks are one bool row: the discrete
leaves' masks one after the other (:attr:`ActionLayout.mask_width`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

__all__ = ["LEAF_SPACES", "ActionLayout", "Leaf", "composite_layout", "is_composite"]

LEAF_SPACES: tuple[type[spaces.Space], ...] = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)
"""The spaces a composite action space's leaves may be."""


def is_composite(space: spaces.Space) -> bool:
    """True for a ``Dict`` or ``Tuple`` action space."""
    return isinstance(space, spaces.Dict | spaces.Tuple)


def composite_layout(space: spaces.Space) -> ActionLayout | None:
    """The layout of a composite space whose leaves the agents act in, else None."""
    if not is_composite(space):
        return None
    try:
        return ActionLayout(space)
    except ValueError:
        return None


class Leaf(NamedTuple):
    """One leaf of a composite action space."""

    path: str
    """Its keys and indices joined by ``"/"``."""
    space: spaces.Space
    """The leaf's space."""
    kind: str
    """"discrete", "multidiscrete", "multibinary" or "box"."""
    start: int
    """Its first column in the action row."""
    stop: int
    """One past its last column."""
    nvec: tuple[int, ...]
    """The choices of each of its categorical dimensions (Discrete: ``(n,)``; MultiBinary and Box: empty)."""
    outputs: int
    """Policy outputs it needs: logits (categorical), one per bit (MultiBinary), means (Box)."""
    mask_start: int
    """Its first entry in the mask row (discrete leaves; -1 for the others)."""
    branch: int | None
    """The hybrid branch it belongs to (its parameters count only when the choice is this), else None."""

    @property
    def width(self) -> int:
        """Its columns in the action row."""
        return self.stop - self.start

    @property
    def mask_width(self) -> int:
        """Its entries in the mask row (0 for Box and MultiBinary)."""
        return sum(self.nvec) if self.kind in ("discrete", "multidiscrete") else 0


def _kind(space: spaces.Space) -> str:
    if isinstance(space, spaces.Discrete):
        return "discrete"
    if isinstance(space, spaces.MultiDiscrete):
        return "multidiscrete"
    if isinstance(space, spaces.MultiBinary):
        return "multibinary"
    return "box"


class ActionLayout:
    """The flat row layout of a composite action space (see the module docstring); raises ``ValueError``
    naming the leaf for a leaf it cannot act in."""

    def __init__(self, space: spaces.Space) -> None:
        if not is_composite(space):
            raise ValueError(f"a composite action space is a Dict or Tuple, got {space}")
        self.space = space
        self.leaves: list[Leaf] = []
        self.hybrid = _is_hybrid(space)
        self._walk(space, (), None, top=True)
        if not self.leaves:
            raise ValueError(f"the action space {space} has no leaves: give it at least one action")
        self.width = self.leaves[-1].stop
        self.mask_width = sum(leaf.mask_width for leaf in self.leaves)
        self.n_outputs = sum(leaf.outputs for leaf in self.leaves)
        self._assemble = _assembler(space)  # leaf values in row order -> the structure
        self.box_columns = np.concatenate(
            [np.arange(leaf.start, leaf.stop) for leaf in self.leaves if leaf.kind == "box"] or [np.zeros(0, int)]
        )

    def _walk(self, space: spaces.Space, path: tuple[str, ...], branch: int | None, top: bool = False) -> None:
        if isinstance(space, spaces.Dict | spaces.Tuple):
            items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
            for i, (key, sub) in enumerate(items):
                if top and self.hybrid and i == 1:
                    for j, (k2, s2) in enumerate(_entries(sub)):
                        self._walk(s2, (*path, str(key), str(k2)), j)
                else:
                    self._walk(sub, (*path, str(key)), branch)
            return
        name = "/".join(path)
        if not isinstance(space, LEAF_SPACES):
            raise ValueError(
                f"the composite action space's leaf {name!r} is {space}: leaves may be Discrete, MultiDiscrete, "
                "MultiBinary or Box (nested Dict and Tuple around them)"
            )
        if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim != 1:
            raise ValueError(f"the action space's leaf {name!r} is {space}: a MultiDiscrete leaf needs a flat nvec")
        kind = _kind(space)
        start = self.leaves[-1].stop if self.leaves else 0
        mask_start = sum(leaf.mask_width for leaf in self.leaves)
        if kind == "discrete":
            nvec: tuple[int, ...] = (int(space.n),)  # type: ignore[attr-defined]
            width, outputs = 1, nvec[0]
        elif kind == "multidiscrete":
            nvec = tuple(int(n) for n in space.nvec)  # type: ignore[attr-defined]
            width, outputs = len(nvec), sum(nvec)
        else:
            nvec = ()
            width = outputs = int(np.prod(space.shape))  # type: ignore[arg-type]
        self.leaves.append(
            Leaf(name, space, kind, start, start + width, nvec, outputs, mask_start if nvec else -1, branch)
        )

    @property
    def paths(self) -> list[str]:
        """Every leaf's path, in row order."""
        return [leaf.path for leaf in self.leaves]

    # -- rows and structures ----------------------------------------------------------------------

    def structure(self, row: Any) -> Any:
        """One action row as the structure the env's ``step`` takes: a dict / tuple of numpy values
        (Discrete: an int shifted by its ``start``; Box: clipped to the bounds, in its dtype and shape)."""
        row = np.asarray(row).reshape(-1)
        return self._assemble(iter([_leaf_value(leaf, row[leaf.start : leaf.stop]) for leaf in self.leaves]))

    def structures(self, rows: np.ndarray) -> Any:
        """A batch of rows as a vector env's ``step`` takes it: the structure with a batch of each leaf."""
        rows = np.asarray(rows).reshape(len(rows), self.width)
        return self._assemble(iter([_leaf_batch(leaf, rows[:, leaf.start : leaf.stop]) for leaf in self.leaves]))

    def row(self, action: Any, where: str = "the action") -> np.ndarray:
        """A structure (dict / tuple, one action) as a float32 row, each leaf checked against its space;
        a row already (a flat sequence of ``width`` numbers) is checked for its length and returned."""
        if not isinstance(action, Mapping | tuple | list):
            arr = np.asarray(action, dtype=np.float32)
            if arr.shape != (self.width,):
                raise ValueError(
                    f"{where}: {action!r} is not an action of {self.space}: give a "
                    f"{'dict' if isinstance(self.space, spaces.Dict) else 'tuple'} with a value per leaf"
                )
            return arr
        if isinstance(action, list) and not isinstance(self.space, spaces.Tuple):
            arr = np.asarray(action, dtype=np.float32)
            if arr.shape == (self.width,):
                return arr
        out = np.zeros(self.width, dtype=np.float32)
        for leaf in self.leaves:
            value = _lookup(action, leaf.path.split("/"), self.space, where)
            out[leaf.start : leaf.stop] = _leaf_row(leaf, value, where)
        return out

    def rows(self, actions: Any, where: str = "the actions") -> np.ndarray:
        """A batch of actions (rows, or a list of structures) as ``(batch, width)`` float32 rows."""
        if isinstance(actions, np.ndarray) and actions.ndim == 2 and actions.shape[1] == self.width:
            return actions.astype(np.float32, copy=False)
        if isinstance(actions, Mapping | tuple):
            return self.row(actions, where)[None]
        return np.stack([self.row(a, where) for a in actions]) if len(actions) else np.zeros((0, self.width))

    # -- masks ----------------------------------------------------------------------------------

    def mask_row(self, mask: Any, where: str) -> np.ndarray:
        """A mask structure (or a flat row of ``mask_width`` entries) as one bool row; ``ValueError``
        naming the leaf for a mask that does not match the space."""
        structure = isinstance(mask, Mapping | tuple) or (
            isinstance(mask, list) and isinstance(self.space, spaces.Tuple)
        )
        if not structure:
            arr = np.asarray(mask)
            if arr.ndim == 1 and arr.shape[0] == self.mask_width:
                return _bools(arr, where)
            raise ValueError(
                f"{where}: a composite action space's mask mirrors the space ({self.space}), with a bool vector "
                f"per Discrete or MultiDiscrete leaf ({', '.join(self.mask_paths) or 'none'}), got {mask!r}"
            )
        _check_keys(mask, self.space, (), where, self.hybrid)
        out = np.ones(self.mask_width, dtype=bool)
        for leaf in self.leaves:
            value = _lookup(mask, leaf.path.split("/"), self.space, where, missing_ok=True)
            if value is None:
                continue
            if leaf.mask_width == 0:
                raise ValueError(
                    f"{where}: the leaf {leaf.path!r} is {leaf.space}, which takes no mask (only Discrete and "
                    "MultiDiscrete leaves do): leave it out or set it to None"
                )
            arr = _bools(np.asarray(value), f"{where} for {leaf.path!r}")
            if arr.shape != (leaf.mask_width,):
                raise ValueError(
                    f"{where} for the leaf {leaf.path!r} ({leaf.space}) has shape {arr.shape}, expected "
                    f"({leaf.mask_width},)"
                )
            out[leaf.mask_start : leaf.mask_start + leaf.mask_width] = arr
        return out

    def batched_mask_rows(self, masks: Any, n: int, where: str) -> np.ndarray:
        """A batch of masks as a vector env gives them (the structure with a ``(n, ...)`` array per leaf;
        gymnasium's ``_key`` flags ignored) as ``(n, mask_width)`` bool rows."""
        out = np.ones((n, self.mask_width), dtype=bool)
        for leaf in self.leaves:
            value = _lookup(masks, leaf.path.split("/"), self.space, where, missing_ok=True)
            if value is None or leaf.mask_width == 0:
                continue
            arr = _bools(np.asarray(value), f"{where} for {leaf.path!r}")
            if arr.shape != (n, leaf.mask_width):
                raise ValueError(
                    f"{where} for the leaf {leaf.path!r} ({leaf.space}) has shape {arr.shape}, expected "
                    f"({n}, {leaf.mask_width}): one mask per env"
                )
            out[:, leaf.mask_start : leaf.mask_start + leaf.mask_width] = arr
        return out

    @property
    def mask_paths(self) -> list[str]:
        """The paths of the leaves that take a mask."""
        return [leaf.path for leaf in self.leaves if leaf.mask_width]

    def mask_segments(self) -> list[tuple[int, int, str]]:
        """Each categorical dimension's slice of the mask row, with its leaf's path."""
        out = []
        for leaf in self.leaves:
            if leaf.mask_width:
                lo = leaf.mask_start
                for n in leaf.nvec:
                    out.append((lo, lo + n, leaf.path))
                    lo += n
        return out

    def sample(self, rng: np.random.Generator, mask: np.ndarray | None = None) -> np.ndarray:
        """A uniformly random action row (among the allowed ones given a mask row)."""
        row = np.zeros(self.width, dtype=np.float32)
        for leaf in self.leaves:
            if leaf.kind in ("discrete", "multidiscrete"):
                lo = leaf.mask_start
                for d, n in enumerate(leaf.nvec):
                    allowed = np.ones(n, bool) if mask is None else mask[lo : lo + n]
                    row[leaf.start + d] = rng.choice(np.flatnonzero(allowed))
                    lo += n
            elif leaf.kind == "multibinary":
                row[leaf.start : leaf.stop] = rng.integers(0, 2, leaf.width)
            else:
                box = leaf.space
                low = np.where(np.isfinite(box.low), box.low, -1.0).reshape(-1)  # type: ignore[attr-defined]
                high = np.where(np.isfinite(box.high), box.high, 1.0).reshape(-1)  # type: ignore[attr-defined]
                row[leaf.start : leaf.stop] = rng.uniform(low, high)
        return row


def _entries(space: spaces.Space) -> list[tuple[Any, spaces.Space]]:
    if isinstance(space, spaces.Dict):
        return list(space.spaces.items())
    return list(enumerate(space.spaces))  # type: ignore[attr-defined]


def _is_hybrid(space: spaces.Space) -> bool:
    """True for the hybrid convention: Tuple(Discrete(k), Dict/Tuple of k entries)."""
    if not isinstance(space, spaces.Tuple) or len(space.spaces) != 2:
        return False
    choice, branches = space.spaces
    return (
        isinstance(choice, spaces.Discrete)
        and isinstance(branches, spaces.Dict | spaces.Tuple)
        and len(branches.spaces) == int(choice.n)
    )


def _bools(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{where}: a mask holds True/False (or 1/0) per action, got {arr!r}")
    return arr.astype(bool)


def _leaf_value(leaf: Leaf, cols: np.ndarray) -> Any:
    space = leaf.space
    if leaf.kind == "discrete":
        return np.int64(int(cols[0]) + int(space.start))  # type: ignore[attr-defined]
    if leaf.kind == "box":
        box = space
        value = cols.astype(box.dtype).reshape(box.shape)  # type: ignore[arg-type, union-attr]
        return np.minimum(np.maximum(value, box.low), box.high)  # type: ignore[attr-defined]
    return cols.astype(space.dtype).reshape(space.shape)  # type: ignore[arg-type]


def _leaf_batch(leaf: Leaf, cols: np.ndarray) -> np.ndarray:
    space = leaf.space
    if leaf.kind == "discrete":
        return cols[:, 0].astype(np.int64) + int(space.start)  # type: ignore[attr-defined]
    if leaf.kind == "box":
        value = cols.astype(space.dtype).reshape(len(cols), *space.shape)  # type: ignore[arg-type, misc]
        return np.minimum(np.maximum(value, space.low), space.high)  # type: ignore[attr-defined]
    return cols.astype(space.dtype).reshape(len(cols), *space.shape)  # type: ignore[arg-type, misc]


def _leaf_row(leaf: Leaf, value: Any, where: str) -> np.ndarray:
    space = leaf.space
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: the leaf {leaf.path!r} ({space}) got {value!r}, which is not a number") from None
    if leaf.kind == "discrete":
        arr = arr.reshape(-1)
        start, n = int(space.start), int(space.n)  # type: ignore[attr-defined]
        if arr.shape != (1,) or arr[0] != int(arr[0]) or not start <= arr[0] < start + n:
            raise ValueError(
                f"{where}: the leaf {leaf.path!r} ({space}) takes an integer in [{start}, {start + n}), got {value!r}"
            )
        return np.asarray([arr[0] - start], dtype=np.float32)
    if arr.size != leaf.width:
        raise ValueError(f"{where}: the leaf {leaf.path!r} ({space}) takes {leaf.width} number(s), got {value!r}")
    arr = arr.reshape(-1)
    if not np.isfinite(arr).all():
        raise ValueError(f"{where}: the leaf {leaf.path!r} got a NaN or infinite value: {value!r}")
    if leaf.kind in ("multidiscrete", "multibinary"):
        highs = np.asarray(leaf.nvec if leaf.kind == "multidiscrete" else [2] * leaf.width)
        if (arr != np.round(arr)).any() or (arr < 0).any() or (arr >= highs).any():
            raise ValueError(f"{where}: the leaf {leaf.path!r} ({space}) got {value!r}, outside the space")
    return arr.astype(np.float32)


def _lookup(structure: Any, path: Sequence[str], space: spaces.Space, where: str, missing_ok: bool = False) -> Any:
    node: Any = structure
    for depth, key in enumerate(path):
        if node is None and missing_ok:
            return None
        here = "/".join(path[: depth + 1])
        if isinstance(node, Mapping):
            if key not in node:
                if missing_ok:
                    return None
                raise ValueError(f"{where}: {structure!r} has no value for the leaf {here!r} of {space}")
            node = node[key]
        elif isinstance(node, tuple | list):
            if not key.isdigit() or int(key) >= len(node):
                raise ValueError(f"{where}: {structure!r} has no entry for {here!r} of {space}")
            node = node[int(key)]
        else:
            raise ValueError(f"{where}: {structure!r} does not mirror {space} at {here!r}")
    return node


def _check_keys(mask: Any, space: spaces.Space, path: tuple[str, ...], where: str, hybrid: bool) -> None:
    """Unknown keys (or too many entries) in a mask structure are errors, named by their path."""
    if mask is None or not isinstance(space, spaces.Dict | spaces.Tuple):
        return
    entries = dict((str(k), s) for k, s in _entries(space))
    if isinstance(mask, Mapping):
        for key in mask:
            if str(key) not in entries:
                raise ValueError(
                    f"{where}: {'/'.join((*path, str(key)))!r} is not a part of the action space {space} "
                    f"(its entries: {', '.join(entries)})"
                )
            _check_keys(mask[key], entries[str(key)], (*path, str(key)), where, False)
    elif isinstance(mask, tuple | list) and isinstance(space, spaces.Tuple):
        if len(mask) != len(space.spaces):
            raise ValueError(
                f"{where}: {mask!r} has {len(mask)} entries at {'/'.join(path) or 'the top'}, "
                f"the action space {space} {len(space.spaces)}"
            )
        for i, sub in enumerate(mask):
            _check_keys(sub, space.spaces[i], (*path, str(i)), where, False)


def _assembler(space: spaces.Space) -> Callable[[Iterator[Any]], Any]:
    """A function that builds ``space``'s structure from its leaves' values, taken in row order."""
    if isinstance(space, spaces.Dict):
        keyed = [(key, _assembler(sub)) for key, sub in space.spaces.items()]
        return lambda values: {key: build(values) for key, build in keyed}
    if isinstance(space, spaces.Tuple):
        parts = [_assembler(sub) for sub in space.spaces]
        return lambda values: tuple(build(values) for build in parts)
    return next
