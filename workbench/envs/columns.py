"""Observation rows whose columns keep their own dtype: a Dict of an image and a float vector held as
bytes for the image's columns and float32 for the rest (``workbench.envs.core.byte_columns``).

Replay memory holds such observations in a :class:`ColumnStore` instead of one float32 array, so their
frames take one byte a pixel as an image-only observation's do; reading rows gives the float32 rows the
networks read, exactly what was stored (uint8 values are exact in float32). Saved memories
(``memory.npz``) and datasets (``arrays.npz``) write the two parts as arrays of their own
(:func:`split_columns`, :func:`join_columns`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ColumnStore", "join_columns", "split_columns"]


def _as_index(columns: np.ndarray) -> slice | np.ndarray:
    """A slice for a run of consecutive columns (a view, no copy), else the index array."""
    if len(columns) and np.array_equal(columns, np.arange(columns[0], columns[0] + len(columns))):
        return slice(int(columns[0]), int(columns[0]) + len(columns))
    return columns


class ColumnStore:
    """``rows`` rows of ``width`` float32 columns, the ``byte_columns`` among them held as uint8.

    Indexing reads and writes like a ``(rows, width)`` float32 array along the first axis:
    ``store[idx]`` is a new float32 array, ``store[idx] = values`` stores (the byte columns cast to uint8).
    """

    def __init__(self, rows: int, width: int, byte_columns: np.ndarray) -> None:
        byte_columns = np.asarray(byte_columns, dtype=np.int64)
        if byte_columns.ndim != 1 or len(byte_columns) == 0 or byte_columns.min() < 0 or byte_columns.max() >= width:
            raise ValueError(f"byte columns must be indices into {width} columns, got {byte_columns!r}")
        keep = np.ones(width, dtype=bool)
        keep[byte_columns] = False
        self.width = int(width)
        self.byte_columns = byte_columns
        self.float_columns = np.flatnonzero(keep)
        self._b, self._f = _as_index(self.byte_columns), _as_index(self.float_columns)
        self.bytes = np.zeros((rows, len(byte_columns)), dtype=np.uint8)
        self.floats = np.zeros((rows, len(self.float_columns)), dtype=np.float32)

    dtype = np.dtype(np.float32)
    """What reading gives (the networks' dtype)."""

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, width)``, as the float32 array this stands for."""
        return (len(self.bytes), self.width)

    @property
    def ndim(self) -> int:
        """Two, as the float32 array this stands for."""
        return 2

    @property
    def nbytes(self) -> int:
        """Bytes held: one per byte column, four per float column, per row."""
        return int(self.bytes.nbytes + self.floats.nbytes)

    def __len__(self) -> int:
        return len(self.bytes)

    def __getitem__(self, idx: Any) -> np.ndarray:
        b, f = self.bytes[idx], self.floats[idx]
        out = np.empty((*b.shape[:-1], self.width), dtype=np.float32)
        out[..., self._b] = b
        out[..., self._f] = f
        return out

    def __setitem__(self, idx: Any, values: Any) -> None:
        values = np.asarray(values)
        self.bytes[idx] = values[..., self._b]
        self.floats[idx] = values[..., self._f]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)


def split_columns(arrays: dict[str, Any], name: str, byte_columns: np.ndarray | None) -> dict[str, Any]:
    """``arrays`` with ``arrays[name]`` written as its own dtypes: ``{name}_uint8`` (the byte columns),
    ``{name}_float32`` (the others) and ``{name}_byte_columns`` (which columns those are), for a file
    that keeps a Dict's frames one byte a pixel; unchanged without ``byte_columns``."""
    if byte_columns is None or name not in arrays:
        return arrays
    arrays = dict(arrays)
    value = arrays.pop(name)
    store = value if isinstance(value, ColumnStore) else None
    if store is None:
        flat = np.asarray(value)
        store = ColumnStore(len(flat), flat.shape[1], byte_columns)
        store[:] = flat.reshape(len(flat), -1)
    arrays[f"{name}_uint8"] = store.bytes
    arrays[f"{name}_float32"] = store.floats
    arrays[f"{name}_byte_columns"] = store.byte_columns
    return arrays


def join_columns(arrays: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    """``arrays`` with ``{name}_uint8`` / ``{name}_float32`` / ``{name}_byte_columns`` (as
    :func:`split_columns` writes them) joined back into the float32 array ``arrays[name]``; unchanged
    when the file holds ``name`` itself (as files before issue 41 do). A ``ValueError`` naming
    ``source`` when the parts do not fit together."""
    parts = [f"{name}_uint8", f"{name}_float32", f"{name}_byte_columns"]
    if name in arrays or not any(p in arrays for p in parts):
        return arrays
    missing = [p for p in parts if p not in arrays]
    if missing:
        present = ", ".join(p for p in parts if p in arrays)
        raise ValueError(f"{source}: array {missing[0]!r} is missing beside {present}")
    arrays = dict(arrays)
    b, f, cols = (np.asarray(arrays.pop(p)) for p in parts)
    width = (b.shape[1] if b.ndim == 2 else -1) + (f.shape[1] if f.ndim == 2 else -1)
    if (
        b.ndim != 2
        or f.ndim != 2
        or len(b) != len(f)
        or b.dtype != np.uint8
        or cols.shape != (b.shape[1],)
        or cols.dtype.kind not in "iu"
        or (len(cols) and (cols.min() < 0 or cols.max() >= width))
        or len(np.unique(cols)) != len(cols)
    ):
        raise ValueError(
            f"{source}: arrays {', '.join(parts)} do not fit together (shapes {b.shape}, {f.shape}, {cols.shape}; "
            f"dtypes {b.dtype}, {f.dtype}, {cols.dtype})"
        )
    out = np.empty((len(b), width), dtype=np.float32)
    keep = np.ones(width, dtype=bool)
    keep[cols] = False
    out[:, cols] = b
    out[:, keep] = f
    arrays[name] = out
    return arrays
