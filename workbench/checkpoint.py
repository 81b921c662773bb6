"""The on-disk format of a saved run. No pickle, ever.

A saved run is a directory (or a ``.zip`` of one) holding:

* ``meta.json``: format version, algorithm, hyperparameters, observation and action spaces,
  counters, exploration and random-generator states, optimizer settings, library versions;
* ``weights.safetensors``: every network, target network and optimizer tensor;
* ``signals.csv``: the run's signals (``signal,step,value,time`` rows);
* ``memory.npz`` (only with ``memory=True``): the replay memory, written with ``allow_pickle=False``.

Loading never unpickles: JSON, safetensors and ``np.load(allow_pickle=False)`` cannot run code,
so opening a file from someone else is safe. Writes go to a temporary name and are renamed into
place, so a crash mid-save leaves the previous checkpoint intact. A missing, corrupt, truncated,
newer-version or other-algorithm file raises :class:`CheckpointError` naming the file and the
problem, and nothing is half-loaded: a new agent is built and only returned when all of it loaded.

Saving replaces only an earlier checkpoint (any other existing file or non-empty folder is refused,
named, unless ``overwrite=True``), takes turns with other saves to the same folder, removes what
earlier killed saves left, and gives every file the modes the umask asks for.

Loading trusts nothing in the file: only regular files inside the checkpoint are read, ``.zip``
members and ``.npy`` headers are checked by size before anything is extracted or allocated, every
field of ``meta.json`` is checked for type and range (:func:`validate_meta`), sizes the file asks for
are held to the ``MAX_*`` limits below and this machine's memory, optimizer moments to their
parameters' shapes and a replay memory to the agent's spaces. Messages never quote file contents.

This module is the file format only: what goes into the files comes from the agent
(``Agent.describe()`` and ``Agent.state()``) and the session (it writes its counters under
``meta["session"]``); it imports neither. Which agent a saved algorithm name means, and what
its hyperparameters are, the caller says (``config_of``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import glob
import itertools
import json
import math
import os
import platform
import re
import shutil
import stat
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from ._version import __version__
from .files import follow_umask, replacing
from .signals import SignalSet

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "FieldChecks",
    "OpenRun",
    "SavedRun",
    "check_save_path",
    "check_space",
    "json_ready",
    "open_run",
    "read_json",
    "read_meta",
    "read_run",
    "validate_meta",
    "validate_session",
    "write_run",
]

ConfigOf = Callable[[str], "type | None"]
"""Maps a saved algorithm name to its config dataclass (None: not an algorithm this library knows)."""

FORMAT_VERSION = 1
FORMAT_NAME = "rl-workbench"
META, WEIGHTS, SIGNALS, MEMORY = "meta.json", "weights.safetensors", "signals.csv", "memory.npz"

# -- what a checkpoint may ask for: checked before anything is allocated, extracted or read --------
# A file from someone else can declare any size; these bound what loading it may cost.
MAX_META_BYTES = 64 * 2**20  # meta.json: a Box of a million bounds is ~40 MB of JSON
MAX_SIGNALS_BYTES = 4 * 2**30  # signals.csv: 4M points per signal (their cap) x ~40 bytes x ~25 signals
MAX_WEIGHTS_BYTES = 16 * 2**30  # weights: several MAX_NETWORK_PARAMETERS nets, targets and Adam moments
MAX_JSON_DEPTH = 32  # meta.json nests ~6 levels (a Dict of Tuple spaces a few more); deeper is not ours
MAX_INT_DIGITS = 40  # enough for a 128-bit random-generator state (39 digits); 5000-digit ints are refused
MAX_COUNTER = 2**62  # steps, updates, episodes: far beyond any run, and still an int64
MAX_BUFFER_SIZE = 100_000_000  # replay transitions: 100x the largest replay of the zoo presets (1e6)
MAX_NETWORK_PARAMETERS = 100_000_000  # per MLP from net_arch (400 MB of float32): ~50x the zoo's largest
MAX_SPACE_ELEMENTS = 2**24  # elements of one observation or action (a 2048x2048x4 image)
MAX_ENVS = 4096  # n_envs: vectorised envs of one agent
MAX_CRITICS = 64  # n_critics of an ensemble critic (TD3 and SAC use 2, REDQ-style ensembles 10)
MAX_QUANTILES = 10_000  # n_quantiles of QR-DQN or TQC (the zoo's and the papers' use 10 to 200)


class CheckpointError(ValueError):
    """A saved run could not be read: the message names the file and what is wrong with it."""


# -- spaces as JSON --------------------------------------------------------------------------


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """A JSON description of a gymnasium space (Box, Discrete, MultiBinary, MultiDiscrete,
    Dict, Tuple)."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(s) for s in space.spaces]}
    raise CheckpointError(f"cannot save a space of type {type(space).__name__}")


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """Rebuild a space written by :func:`space_to_json`."""
    kind = data["type"]
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        low, high = np.asarray(data["low"], dtype=dtype), np.asarray(data["high"], dtype=dtype)
        return spaces.Box(
            low=low.item() if low.ndim == 0 else low,  # a scalar bound applies to every element
            high=high.item() if high.ndim == 0 else high,
            shape=tuple(data["shape"]),
            dtype=dtype,
        )
    if kind == "Discrete":
        return spaces.Discrete(data["n"], start=data.get("start", 0))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(data["nvec"])
    if kind == "Dict":
        return spaces.Dict({k: space_from_json(v) for k, v in data["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([space_from_json(s) for s in data["spaces"]])
    raise ValueError(f"unknown space type {kind!r}")


# -- small safe readers and writers ----------------------------------------------------------


def write_npz(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` as ``.npz`` atomically (temporary name, then rename)."""
    path = os.fspath(path)
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise CheckpointError(f"{path}: array {name!r} has dtype object, which would need pickle")
    # The caller named this file: whatever regular file is there goes (a link is replaced, not followed).
    with replacing(path, owner="saving arrays") as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub reads allow_pickle into **kwds


def _physical_memory() -> int:
    """Bytes of RAM on this machine (a generous 1 TiB where it cannot be told)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 2**40


def _check_regular(path: str, label: str, limit: int) -> int:
    """Size of ``path``, after making sure it is a regular file (not a link, FIFO or device) of at
    most ``limit`` bytes; otherwise a :class:`CheckpointError`. Never opens anything but a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{label}: file not found") from None
    except OSError as exc:
        raise CheckpointError(f"{label}: cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise CheckpointError(
            f"{label}: is a symbolic link; a checkpoint holds regular files only (copy the file in instead)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{label}: is not a regular file (a FIFO, device or directory), so it is not read")
    if st.st_size > limit:
        raise CheckpointError(
            f"{label}: is {st.st_size} bytes, more than the {limit} a checkpoint file of this kind may hold"
        )
    return st.st_size


def _npz_headers(path: str, label: str, max_bytes: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every array of an ``.npz``, read from the ``.npy`` headers alone.

    Each header must describe exactly the bytes its member holds, and all of them together at most
    ``max_bytes``, so that a header declaring a 1 TiB array is refused before anything is allocated.
    """
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    total = 0
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise CheckpointError(f"{label}: holds the same array name twice")
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            total += info.file_size
            if total > max_bytes:
                raise CheckpointError(
                    f"{label}: its arrays inflate to more than {max_bytes} bytes, more than this agent's "
                    "replay memory can hold; it was not written for this agent"
                )
            with zf.open(info) as f:
                try:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
                except ValueError:
                    raise CheckpointError(f"{label}: array {name!r} has no valid .npy header") from None
                header = f.tell()
            if dtype.hasobject:
                raise CheckpointError(
                    f"{label}: array {name!r} holds pickled objects, which are refused (loading them could run code)"
                )
            declared = math.prod(shape) * dtype.itemsize
            if declared + header != info.file_size:
                raise CheckpointError(
                    f"{label}: array {name!r} declares shape {tuple(shape)} of {dtype} ({declared} bytes) but "
                    f"holds {info.file_size - header} bytes"
                )
            out[name] = (tuple(shape), dtype)
    return out


def read_npz(
    path: str | os.PathLike[str], label: str | None = None, *, max_bytes: int | None = None
) -> dict[str, np.ndarray]:
    """Read an ``.npz`` with ``allow_pickle=False``; any problem is a :class:`CheckpointError`
    naming ``label`` (default: the path). Every array's header is checked against the bytes it
    holds, and all of them together against ``max_bytes`` (default: this machine's RAM), before
    anything is read."""
    path = os.fspath(path)
    label = label or path
    limit = _physical_memory() if max_bytes is None else int(max_bytes)
    _check_regular(path, label, max(limit, 2**20) * 2)  # compressed never exceeds twice the data
    try:
        _npz_headers(path, label, limit)
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except CheckpointError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise CheckpointError(
                f"{label}: holds pickled objects, which are refused (loading them could run code)"
            ) from None
        raise CheckpointError(f"{label}: not a readable .npz file ({type(exc).__name__})") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise CheckpointError(f"{label}: not a readable .npz file, possibly truncated ({type(exc).__name__})") from None


def _read_safetensors(path: str, label: str | None = None) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    label = label or path
    _check_regular(path, label, MAX_WEIGHTS_BYTES)
    with open(path, "rb") as f:
        head = f.read(9)
    # A safetensors file is an 8-byte header length then a JSON header ('{'); that length's low
    # byte may itself be 0x80 or spell "PK", so only a file that is not safetensors is suspected.
    if head[8:9] != b"{" and (head[:1] == b"\x80" or head[:2] == b"PK"):
        raise CheckpointError(
            f"{label}: looks like a pickle / torch.save file, which is refused (loading it could run "
            "code); a workbench checkpoint stores weights as safetensors"
        )
    try:
        return load_file(path)
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{label}: not a valid safetensors file, possibly truncated ({exc})") from None


# Tensors of a checkpoint whose rank and dtype the format fixes (networks and optimizer moments are
# checked against the agent that loads them): a tensor of the right size but another shape would load.
_FIXED_TENSORS: dict[str, tuple[int, tuple[torch.dtype, ...]]] = {
    "rng/torch": (1, (torch.uint8,)),  # torch.Generator.get_state(): a flat byte string
    "acting/lstm_states": (3, (torch.float16, torch.bfloat16, torch.float32, torch.float64)),
    "acting/memory_states": (3, (torch.float16, torch.bfloat16, torch.float32, torch.float64)),
}


def _check_tensors(tensors: dict[str, torch.Tensor], label: str) -> dict[str, torch.Tensor]:
    """``tensors`` (of ``weights.safetensors``) after checking the ones whose shape the format
    fixes; a ``CheckpointError`` names the file, the tensor and the shape it should have."""
    for name, (ndim, dtypes) in _FIXED_TENSORS.items():
        t = tensors.get(name)
        if t is not None and (t.dim() != ndim or t.dtype not in dtypes):
            raise CheckpointError(
                f"{label}: tensor {name!r} has shape {tuple(t.shape)} and dtype {t.dtype}; a checkpoint holds it "
                f"as a {ndim}-dimensional {' or '.join(str(d) for d in dtypes)} tensor"
            )
    return tensors


def json_ready(value: Any) -> Any:
    """``value`` with numpy scalars and tensors turned into plain Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def _versions() -> dict[str, str]:
    return {
        "workbench": __version__,
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


# -- agent state -----------------------------------------------------------------------------


# -- meta.json: parsed within bounds, then every field checked -------------------------------


def _shown(value: Any) -> str:
    """A value for an error message, never long: a file's contents are not echoed."""
    if value is None or isinstance(value, bool | int | float):
        text = repr(value)
        return text if len(text) <= 24 else f"an integer of {len(text)} digits"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    return f"a {type(value).__name__.replace('dict', 'JSON object').replace('list', 'JSON list')}"


def _json_constant(name: str) -> float:
    if name == "NaN":
        raise CheckpointError("NaN")
    return math.inf if name == "Infinity" else -math.inf


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise CheckpointError(f"an integer of {len(text)} digits")
    return int(text)


def read_json(path: str, label: str | None = None, max_bytes: int = MAX_META_BYTES) -> Any:
    """Parse a JSON file of this library's formats (a checkpoint's ``meta.json``, a dataset's
    ``dataset.json``) within bounds: a regular file of at most ``max_bytes``, no NaN, integers of
    at most ``MAX_INT_DIGITS`` digits, nesting bounded. Any problem is a :class:`CheckpointError`
    naming ``label``; the file's contents are never quoted."""
    label = label or path
    _check_regular(path, label, max_bytes)
    try:
        with open(path, "rb") as f:
            text = f.read(max_bytes + 1).decode("utf-8")
        return json.loads(text, parse_constant=_json_constant, parse_int=_json_int)
    except CheckpointError as exc:
        raise CheckpointError(f"{label}: holds {exc}, which this library never writes") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{label}: not valid JSON, possibly truncated (line {exc.lineno}, column {exc.colno})"
        ) from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{label}: not UTF-8 text, so not a file this library wrote") from None
    except RecursionError:
        raise CheckpointError(f"{label}: nested too deeply to be a file this library wrote") from None
    except ValueError as exc:  # e.g. Python's limit on integer digits
        raise CheckpointError(f"{label}: not readable JSON ({type(exc).__name__})") from None


def read_meta_json(path: str, label: str | None = None) -> dict[str, Any]:
    """Parse a ``meta.json`` with :func:`read_json`'s bounds and check it is a workbench
    checkpoint's. Any problem is a :class:`CheckpointError` naming ``label``."""
    label = label or path
    meta = read_json(path, label, MAX_META_BYTES)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{label}: not a workbench checkpoint")
    return meta


def check_space(value: Any, label: str, where: str) -> spaces.Space:
    """The gymnasium space that the JSON ``value`` (written by :func:`space_to_json`) describes,
    after checking every part of it for type and size (at most ``MAX_SPACE_ELEMENTS`` elements, a
    numeric dtype, bounds of its shape, nesting bounded) before anything is allocated. Any problem
    is a :class:`CheckpointError` naming ``label`` and the field ``where``."""
    _Fields(label).space(value, where)
    try:
        return space_from_json(value)
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise CheckpointError(f"{label}: field {where!r} is not a space this library can rebuild ({exc})") from None


def _path(where: str) -> str:
    """A field's dotted path for a message, its middle left out when it is long (deep nesting)."""
    return where if len(where) <= 80 else f"{where[:40]}...{where[-30:]}"


class FieldChecks:
    """Checks of the fields of one JSON file of this library's formats (a checkpoint's
    ``meta.json``, a dataset's ``dataset.json``); every error is a :class:`CheckpointError` naming
    the file and the field (``counters.num_updates``) and describing, never echoing, the value."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, where: str, value: Any, expected: str) -> CheckpointError:
        """The error for field ``where`` holding ``value`` (described) where ``expected`` belongs."""
        return CheckpointError(f"{self.label}: field {where!r} is {_shown(value)}, expected {expected}")

    def version(self, value: Any, where: str, newest: int) -> int:
        """A format version this library reads: a positive integer up to ``newest``."""
        if type(value) is not int or value < 1:
            raise self.fail(where, value, "a positive integer")
        if value > newest:
            raise CheckpointError(
                f"{self.label}: format version {value} is newer than this library reads "
                f"(up to {newest}); upgrade rl-workbench to load it"
            )
        return value

    def obj(self, value: Any, where: str, *, optional: bool = False) -> dict[str, Any]:
        """``value`` when it is a JSON object (``{}`` for None when ``optional``)."""
        if value is None and optional:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, value, "a JSON object")
        return value

    def integer(self, value: Any, where: str, lo: int = 0, hi: int = MAX_COUNTER, *, optional: bool = False) -> None:
        """An integer (not a bool) from ``lo`` to ``hi`` (or None when ``optional``)."""
        if value is None and optional:
            return
        if type(value) is not int or not lo <= value <= hi:
            raise self.fail(where, value, f"an integer from {lo} to {hi}" + (" or null" if optional else ""))

    def num(
        self, value: Any, where: str, lo: float = -math.inf, hi: float = math.inf, *, optional: bool = False
    ) -> None:
        """A finite number from ``lo`` to ``hi`` (or None when ``optional``)."""
        if value is None and optional:
            return
        if type(value) not in (int, float) or not math.isfinite(value) or not lo <= value <= hi:
            raise self.fail(where, value, "a finite number" + (f" from {lo:g} to {hi:g}" if lo > -math.inf else ""))

    def text(self, value: Any, where: str, *, optional: bool = False) -> None:
        """A string (or None when ``optional``)."""
        if value is None and optional:
            return
        if not isinstance(value, str):
            raise self.fail(where, value, "a string" + (" or null" if optional else ""))

    def plain(self, value: Any, where: str, depth: int = 0) -> None:
        """JSON data of finite numbers, strings, booleans and nulls, nested at most MAX_JSON_DEPTH."""
        if depth > MAX_JSON_DEPTH:
            raise CheckpointError(f"{self.label}: field {_path(where)!r} is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            for k, v in value.items():
                self.plain(v, f"{where}.{k}", depth + 1)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.plain(v, f"{where}[{i}]", depth + 1)
        elif isinstance(value, float) and not math.isfinite(value):
            raise self.fail(where, value, "a finite number")

    def space(self, value: Any, where: str, depth: int = 0) -> None:
        """A space as :func:`space_to_json` writes it, within the size limits above."""
        if depth > MAX_JSON_DEPTH:
            raise CheckpointError(f"{self.label}: field {_path(where)!r} is nested deeper than {MAX_JSON_DEPTH} levels")
        value = self.obj(value, where)
        kind = value.get("type")
        if kind == "Box":
            shape = value.get("shape")
            if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= MAX_SPACE_ELEMENTS for d in shape):
                raise self.fail(f"{where}.shape", shape, "a list of non-negative integers")
            if math.prod(shape) > MAX_SPACE_ELEMENTS:
                raise self.fail(f"{where}.shape", shape, f"at most {MAX_SPACE_ELEMENTS} elements")
            try:
                dtype = np.dtype(value.get("dtype"))
            except TypeError:
                dtype = np.dtype(object)
            if dtype.kind not in "fiub" or not isinstance(value.get("dtype"), str):
                raise self.fail(f"{where}.dtype", value.get("dtype"), "a numeric dtype name such as 'float32'")
            for bound in ("low", "high"):
                b = value.get(bound)
                try:
                    arr = np.asarray(b, dtype=np.float64)
                except (TypeError, ValueError, RecursionError):
                    raise self.fail(f"{where}.{bound}", b, f"numbers in the shape {shape}") from None
                if arr.shape not in ((), tuple(shape)) or np.isnan(arr).any():
                    raise self.fail(f"{where}.{bound}", b, f"a number or numbers in the shape {shape}")
        elif kind == "Discrete":
            self.integer(value.get("n"), f"{where}.n", 1, 2**31)
            self.integer(value.get("start", 0), f"{where}.start", -(2**31), 2**31)
        elif kind == "MultiBinary":
            n = value.get("n")
            ns = n if isinstance(n, list) else [n]
            for i, d in enumerate(ns):
                self.integer(d, f"{where}.n" + (f"[{i}]" if isinstance(n, list) else ""), 1, MAX_SPACE_ELEMENTS)
            if math.prod(ns) > MAX_SPACE_ELEMENTS:
                raise self.fail(f"{where}.n", n, f"at most {MAX_SPACE_ELEMENTS} elements")
        elif kind == "MultiDiscrete":
            try:
                nvec = np.asarray(value.get("nvec"))
            except (TypeError, ValueError, RecursionError):
                nvec = np.asarray(None)
            if nvec.dtype.kind not in "iu" or nvec.size > MAX_SPACE_ELEMENTS or (nvec < 1).any() or nvec.ndim == 0:
                raise self.fail(f"{where}.nvec", value.get("nvec"), "a list of positive integers")
        elif kind == "Dict":
            for k, v in self.obj(value.get("spaces"), f"{where}.spaces").items():
                self.space(v, f"{where}.spaces.{k}", depth + 1)
        elif kind == "Tuple":
            sub = value.get("spaces")
            if not isinstance(sub, list):
                raise self.fail(f"{where}.spaces", sub, "a list of spaces")
            for i, v in enumerate(sub):
                self.space(v, f"{where}.spaces[{i}]", depth + 1)
        else:
            raise self.fail(f"{where}.type", kind, "one of Box, Discrete, MultiBinary, MultiDiscrete, Dict, Tuple")


_Fields = FieldChecks


def _mlp_parameters(n_in: int, widths: list[int], n_out: int) -> int:
    sizes = [n_in, *widths, n_out]
    return sum((a + 1) * b for a, b in itertools.pairwise(sizes))


def _check_hyperparameters(f: _Fields, hyper: dict[str, Any], config: type, meta: dict[str, Any]) -> None:
    """Each saved hyperparameter passes its config field's own declared constraint (``checked`` in
    ``workbench.validation``, as the agent's constructor checks it), rebuilt from JSON as loading rebuilds it
    (a schedule or exploration from its dict, a list as a tuple), and the sizes it asks for (replay memory,
    networks, envs) stay within the limits above and this machine's memory."""
    import dataclasses

    from .validation import constraint_of

    for field in dataclasses.fields(config):
        if field.name not in hyper:
            continue
        value, where = hyper[field.name], f"hyperparameters.{field.name}"
        f.plain(value, where)
        if type(value) is int:
            f.integer(value, where, -1, MAX_COUNTER)
        constraint = constraint_of(config, field.name)
        if constraint is None or field.name in _REBUILT_ELSEWHERE:
            continue
        if isinstance(value, dict) and ("schedule" in value or "type" in value) and not constraint(value):
            rebuilt = _check_rebuildable(f, value, where)  # a schedule or exploration, rebuilt as loading does
            if not constraint(rebuilt):
                values = getattr(rebuilt, "key_values", None)
                shown = type(rebuilt).__name__
                if values is not None:
                    ends = values()
                    shown = f"a {shown.lower()} schedule from {ends[0]:g} to {ends[-1]:g}"
                raise CheckpointError(
                    f"{f.label}: field {where!r} is {shown}, but {field.name} must be {constraint.allowed}"
                )
            continue
        if constraint(tuple(value) if isinstance(value, list) else value):
            continue
        raise f.fail(where, value, constraint.allowed)
    try:
        obs = space_from_json(meta["observation_space"])
        act = space_from_json(meta["action_space"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{f.label}: the saved spaces cannot be rebuilt ({type(exc).__name__})") from None
    obs_dim, act_dim = gym.spaces.flatdim(obs), gym.spaces.flatdim(act)
    ram = _physical_memory()
    if "buffer_size" in hyper:
        f.integer(hyper["buffer_size"], "hyperparameters.buffer_size", 1, MAX_BUFFER_SIZE)
        row = 2 * 4 * obs_dim + 8 * max(act_dim, 1) + 4 * 4  # obs, next_obs, actions, 4 float32 columns
        need = hyper["buffer_size"] * row
        if need > ram:
            raise CheckpointError(
                f"{f.label}: field 'hyperparameters.buffer_size' is {hyper['buffer_size']}, a replay memory of "
                f"{need / 2**30:.1f} GiB for these spaces, more than this machine's {ram / 2**30:.1f} GiB"
            )
    if "n_quantiles" in hyper:  # the critics' (or Q-network's) outputs per action
        f.integer(hyper["n_quantiles"], "hyperparameters.n_quantiles", 1, MAX_QUANTILES)
    for arch in ("net_arch", "critic_net_arch"):  # critic_net_arch: CrossQ's critics
        if isinstance(hyper.get(arch), list):
            params = _mlp_parameters(obs_dim + act_dim, hyper[arch], max(act_dim, 1) * 2)
            if params > MAX_NETWORK_PARAMETERS:
                raise CheckpointError(
                    f"{f.label}: field 'hyperparameters.{arch}' asks for networks of {params} parameters each, "
                    f"more than the {MAX_NETWORK_PARAMETERS} a checkpoint may ask for"
                )
    if "n_envs" in hyper:
        f.integer(hyper["n_envs"], "hyperparameters.n_envs", 1, MAX_ENVS)
    if "n_critics" in hyper:
        f.integer(hyper["n_critics"], "hyperparameters.n_critics", 1, MAX_CRITICS)
    if "n_steps" in hyper:
        rollout = hyper["n_steps"] * hyper.get("n_envs", 1) * (obs_dim + act_dim + 8) * 4
        if rollout > ram:
            raise CheckpointError(
                f"{f.label}: field 'hyperparameters.n_steps' is {hyper['n_steps']}, a rollout of "
                f"{rollout / 2**30:.1f} GiB, more than this machine's {ram / 2**30:.1f} GiB"
            )


def _check_numpy_rng(f: _Fields, state: Any, where: str) -> None:
    f.obj(state, where)
    f.plain(state, where)
    try:
        np.random.Generator(np.random.PCG64()).bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError):
        raise CheckpointError(f"{f.label}: field {where!r} is not the state of a PCG64 random generator") from None


# Fields whose saved form only their own reader rebuilds (a user encoder's import path, a replay memory's
# or intrinsic reward's kind): plain JSON here, checked whole when the agent is built from them.
_REBUILT_ELSEWHERE = ("encoder", "replay", "intrinsic")


def _check_rebuildable(f: _Fields, value: dict[str, Any], where: str) -> Any:
    """The saved schedule (``{"schedule": ...}``) or exploration (``{"type": ...}``) rebuilt; when
    its reader cannot, an error naming the field and what is wrong with it."""
    from .exploration import exploration_from_dict
    from .schedules import schedule_from_dict

    if "type" in value:
        what, rebuild = "an exploration", exploration_from_dict
    elif "schedule" in value:
        what, rebuild = "a schedule", schedule_from_dict  # type: ignore[assignment]
    else:
        raise f.fail(where, value, 'a schedule ({"schedule": "linear", ...}) or an exploration ({"type": ...})')
    try:
        return rebuild(value)
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        reason = str(exc)
        reason = reason if len(reason) <= 160 else reason[:157] + "..."
        raise CheckpointError(f"{f.label}: field {where!r} is not {what} this library can rebuild: {reason}") from None


EVENT_KINDS = ("set", "call_env")
"""The kinds of ``session.events`` entries (``workbench.run.live_edits.Event``)."""
MAX_EVENTS = 1_000_000  # live edits and env calls of one run: far more than anyone makes by hand
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _check_env_rng(f: _Fields, states: Any, where: str) -> None:
    if states is None:
        return
    if not isinstance(states, list) or len(states) > MAX_ENVS:
        raise f.fail(where, states, f"null or a list of at most {MAX_ENVS} random-generator states")
    for i, state in enumerate(states):
        at = f"{where}[{i}]"
        if state is None:
            continue
        f.obj(state, at)
        f.plain(state, at)
        name = state.get("bit_generator")
        if name not in _BIT_GENERATORS:
            raise f.fail(f"{at}.bit_generator", name, f"one of {', '.join(_BIT_GENERATORS)}")
        try:
            getattr(np.random, name)().state = state
        except (TypeError, ValueError, KeyError, OverflowError):
            raise CheckpointError(f"{f.label}: field {at!r} is not the state of a {name} random generator") from None


def validate_session(session: Any, label: str) -> None:
    """Check ``meta["session"]``, what a session saved of itself, field by field: its counters,
    ``seed``, ``env_id``, ``best_eval_reward``, ``target_steps``, ``external``, ``env_rng`` (each
    env's random stream) and ``events`` (live edits and env calls, as
    ``workbench.run.live_edits.Event.to_dict`` writes them). :func:`validate_meta` calls it, so a
    resumed session receives valid data; any problem is a :class:`CheckpointError` naming
    ``label`` and the field (``session.events[3].step``)."""
    f = _Fields(label)
    session = f.obj(session, "session")
    for key in ("steps", "episodes", "last_eval_step"):
        f.integer(session.get(key, 0), f"session.{key}")
    f.num(session.get("elapsed", 0.0), "session.elapsed", 0.0)
    f.integer(session.get("seed"), "session.seed", 0, 2**64 - 1, optional=True)
    f.text(session.get("env_id"), "session.env_id", optional=True)
    f.text(session.get("env_name"), "session.env_name", optional=True)
    f.text(session.get("dataset"), "session.dataset", optional=True)
    f.text(session.get("ope_dataset"), "session.ope_dataset", optional=True)
    f.num(session.get("best_eval_reward"), "session.best_eval_reward", optional=True)
    f.integer(session.get("target_steps"), "session.target_steps", optional=True)
    external = session.get("external", False)
    if not isinstance(external, bool):
        raise f.fail("session.external", external, "true or false")
    _check_env_rng(f, session.get("env_rng"), "session.env_rng")
    events = session.get("events", [])
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise f.fail("session.events", events, f"a list of at most {MAX_EVENTS} events")
    for i, event in enumerate(events):
        where = f"session.events[{i}]"
        f.obj(event, where)
        kind = event.get("kind")
        if kind not in EVENT_KINDS:
            raise f.fail(f"{where}.kind", kind, " or ".join(repr(k) for k in EVENT_KINDS))
        f.integer(event.get("step"), f"{where}.step")
        name = event.get("name")
        if not isinstance(name, str) or not name:
            raise f.fail(f"{where}.name", name, "a hyperparameter or method name")
        f.num(event.get("time", 0.0), f"{where}.time", 0.0)
        for key in ("old", "new"):
            f.plain(event.get(key), f"{where}.{key}")


def validate_meta(meta: dict[str, Any], label: str, config: type | None = None) -> None:
    """Check every field of a parsed ``meta.json`` for type and range before any of it is used.

    ``config`` is the agent's config dataclass: its fields' types check the saved hyperparameters.
    Any problem is a :class:`CheckpointError` naming ``label`` and the field.
    """
    f = _Fields(label)
    f.version(meta.get("format_version"), "format_version", FORMAT_VERSION)
    f.text(meta.get("algorithm"), "algorithm")
    f.space(meta.get("observation_space"), "observation_space")
    f.space(meta.get("action_space"), "action_space")
    counters = f.obj(meta.get("counters"), "counters", optional=True)
    f.integer(counters.get("num_timesteps", 0), "counters.num_timesteps")
    f.integer(counters.get("num_updates", 0), "counters.num_updates")
    f.integer(counters.get("total_timesteps"), "counters.total_timesteps", optional=True)
    f.integer(meta.get("seed"), "seed", 0, 2**64 - 1, optional=True)
    rng = f.obj(meta.get("rng"), "rng", optional=True)
    if rng.get("numpy"):
        _check_numpy_rng(f, rng["numpy"], "rng.numpy")
    agent_state = f.obj(meta.get("agent_state"), "agent_state", optional=True)
    f.plain(agent_state, "agent_state")
    for key, value in agent_state.items():
        if key.startswith("steps_"):
            f.integer(value, f"agent_state.{key}")
        elif key == "exploration":
            f.obj(value, "agent_state.exploration")
    if "session" in meta:
        validate_session(meta["session"], label)
    optimizers = f.obj(meta.get("optimizers"), "optimizers", optional=True)
    for name, groups in optimizers.items():
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise f.fail(f"optimizers.{name}", groups, "a list of parameter groups")
        for i, g in enumerate(groups):
            where = f"optimizers.{name}[{i}]"
            f.plain(g, where)
            params = g.get("params")
            if not isinstance(params, list) or not all(type(p) is int and 0 <= p < 2**31 for p in params):
                raise f.fail(f"{where}.params", params, "a list of parameter indices")
            if "lr" in g:
                f.num(g["lr"], f"{where}.lr", 0.0)
            betas = g.get("betas", [0.9, 0.999])
            if not (isinstance(betas, list) and len(betas) == 2 and all(type(b) in (int, float) for b in betas)):
                raise f.fail(f"{where}.betas", g["betas"], "two numbers")
    hyper = f.obj(meta.get("hyperparameters"), "hyperparameters", optional=True)
    if config is not None:
        _check_hyperparameters(f, hyper, config, meta)


# -- locating and reading a saved run --------------------------------------------------------


_MEMBER_LIMITS = {META: MAX_META_BYTES, WEIGHTS: MAX_WEIGHTS_BYTES, SIGNALS: MAX_SIGNALS_BYTES}


def _latest_fallback(path: str) -> str | None:
    """The most recent ``PATH.old-PID`` a crashed save left, by when it was written (not by PID)."""

    def written(candidate: str) -> tuple[float, int]:
        meta = os.path.join(candidate, META) if os.path.isdir(candidate) else candidate
        try:
            when = os.lstat(meta).st_mtime
        except OSError:
            when = 0.0
        suffix = candidate.rsplit(".old-", 1)[-1]
        return when, int(suffix) if suffix.isdigit() else -1

    candidates = glob.glob(glob.escape(path) + ".old-*")
    return max(candidates, key=written) if candidates else None


def _zip_members(path: str) -> dict[str, zipfile.ZipInfo]:
    """The members of a checkpoint ``.zip``, checked by name and declared size before anything is
    extracted (the declared size bounds what extraction writes: zipfile stops there)."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        if name not in (META, WEIGHTS, SIGNALS, MEMORY):
            raise CheckpointError(
                f"{path}: unexpected member {_shown(name)} in the archive; a checkpoint holds only "
                f"{META}, {WEIGHTS}, {SIGNALS} and {MEMORY}"
            )
        if name in members:
            raise CheckpointError(f"{path}: member {name} appears twice in the archive")
        limit = _MEMBER_LIMITS.get(name, _physical_memory())
        if info.file_size > limit:
            raise CheckpointError(
                f"{path}!{name}: inflates to {info.file_size} bytes, more than the {limit} a checkpoint file of "
                "this kind may hold; it is not extracted"
            )
        members[name] = info
    return members


class _Opened:
    """A checkpoint directory ready to read. Of a ``.zip`` only the members that are asked for
    are extracted (to a temporary folder), each after its name and size were checked."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._members: dict[str, zipfile.ZipInfo] | None = None
        if os.path.isdir(self.path):
            self.dir = self.path
        elif os.path.isfile(self.path) and self.path.endswith(".zip"):
            self._open_zip()
        elif os.path.isfile(self.path):
            raise CheckpointError(
                f"{self.path}: not a workbench checkpoint (expected a directory holding {META}, or a .zip of one)"
            )
        elif os.path.exists(self.path):
            raise CheckpointError(f"{self.path}: not a directory, .zip or regular file, so it is not read")
        else:
            fallback = _latest_fallback(self.path)
            if fallback is None:
                raise CheckpointError(f"{self.path}: no such checkpoint")
            # A crash between the two renames of a save: the previous checkpoint survives there.
            self.path = fallback
            if os.path.isdir(fallback):
                self.dir = fallback
            else:
                self._open_zip()

    def _open_zip(self) -> None:
        try:
            self._members = _zip_members(self.path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise CheckpointError(f"{self.path}: not a valid zip archive, possibly truncated ({exc})") from None
        self._tmp = tempfile.TemporaryDirectory(prefix="workbench-ckpt-")
        self.dir = self._tmp.name

    def file(self, name: str, limit: int | None = None) -> str:
        """The path of ``name`` inside the checkpoint: a regular file of at most ``limit`` bytes
        (default: the limit for its kind), or a path that does not exist when it is absent."""
        path = os.path.join(self.dir, name)
        limit = _MEMBER_LIMITS.get(name, _physical_memory()) if limit is None else limit
        if self._members is not None:
            info = self._members.get(name)
            if info is None or os.path.exists(path):
                return path
            if info.file_size > limit:
                raise CheckpointError(
                    f"{self.label(name)}: inflates to {info.file_size} bytes, more than the {limit} it may hold "
                    "here; it is not extracted"
                )
            try:
                with zipfile.ZipFile(self.path) as zf, zf.open(info) as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst, 2**20)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                _remove(path)
                raise CheckpointError(f"{self.label(name)}: cannot be extracted, possibly truncated ({exc})") from None
            return path
        if os.path.lexists(path):
            _check_regular(path, self.label(name), limit)
        return path

    def label(self, name: str) -> str:
        """How messages name the file ``name`` of this checkpoint."""
        return f"{self.path}/{name}" if self._tmp is None else f"{self.path}!{name}"

    def meta(self, config_of: ConfigOf | None = None, known: str = "") -> dict[str, Any]:
        """The parsed and validated ``meta.json``; with ``config_of``, its algorithm must be one it
        knows (``known`` lists them for the message) and the hyperparameters fit that config."""
        label = self.label(META)
        path = self.file(META)
        if not os.path.exists(path):
            raise CheckpointError(f"{label}: file not found; is {self.path} a workbench checkpoint?")
        meta = read_meta_json(path, label)
        config = None
        if config_of is not None:
            algorithm = meta.get("algorithm")
            config = config_of(algorithm) if isinstance(algorithm, str) else None
            if config is None:
                raise CheckpointError(f"{label}: unknown algorithm {_shown(algorithm)}; known: {known}")
        validate_meta(meta, label, config)
        return meta

    def close(self) -> None:
        """Remove what was extracted."""
        if self._tmp is not None:
            self._tmp.cleanup()


def _read_signals(opened: _Opened) -> SignalSet:
    """The run's signals, or none when the checkpoint has no signals.csv."""
    # Parsing holds each row as Python objects (~4x the file): keep that well inside this machine's RAM.
    path = opened.file(SIGNALS, limit=min(MAX_SIGNALS_BYTES, _physical_memory() // 8))
    if not os.path.exists(path):
        return SignalSet()
    try:
        return SignalSet.from_csv(path)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{opened.label(SIGNALS)}: {str(exc).split(': ', 1)[-1]}") from None


class OpenRun:
    """A saved run open for reading (see :func:`open_run`): its validated ``meta``, and each of its
    other files read on demand, within limits, naming the file in every error."""

    def __init__(self, opened: _Opened, meta: dict[str, Any]) -> None:
        self._opened = opened
        self.path = opened.path
        self.meta = meta

    def label(self, name: str) -> str:
        """How errors name one of its files."""
        return self._opened.label(name)

    def tensors(self) -> dict[str, torch.Tensor]:
        """``weights.safetensors``, the tensors whose shape the format fixes checked."""
        return _check_tensors(_read_safetensors(self._opened.file(WEIGHTS), self.label(WEIGHTS)), self.label(WEIGHTS))

    def memory(self, max_bytes: int) -> dict[str, np.ndarray] | None:
        """``memory.npz`` (None when the run has none), refused when it would take more than
        ``max_bytes`` (the caller knows how large a memory its agent can hold)."""
        path = self._opened.file(MEMORY, limit=max_bytes)
        if not os.path.exists(path):
            return None
        return read_npz(path, self.label(MEMORY), max_bytes=max_bytes)

    def signals(self) -> SignalSet:
        """``signals.csv`` (empty when the run has none)."""
        return _read_signals(self._opened)


@contextlib.contextmanager
def open_run(path: str | os.PathLike[str], config_of: ConfigOf | None = None, known: str = "") -> Iterator[OpenRun]:
    """Open a saved run (a directory, or a ``.zip`` of which only the members read are extracted)
    for the duration of a ``with`` block. ``meta.json`` is read and validated at once (against the
    algorithm's config when ``config_of`` is given; ``known`` names the algorithms for the message)."""
    opened = _Opened(path)
    try:
        yield OpenRun(opened, opened.meta(config_of, known))
    finally:
        opened.close()


class SavedRun(NamedTuple):
    """A saved run's meta and weights, read at once (see :func:`read_run`)."""

    path: str
    """Where it was read from."""
    meta: dict[str, Any]
    """``meta.json``: the agent's description and state data, and ``session`` counters if any."""
    weights: dict[str, torch.Tensor]
    """``weights.safetensors``."""

    def label(self, name: str) -> str:
        """How errors name one of its files."""
        return f"{self.path}/{name}"

    def tensors(self) -> dict[str, torch.Tensor]:
        """``weights.safetensors`` (as :meth:`OpenRun.tensors`)."""
        return self.weights

    def memory(self, max_bytes: int) -> None:
        """A run read with :func:`read_run` carries no replay memory (use :func:`open_run`)."""
        return None


def read_run(path: str | os.PathLike[str], config_of: ConfigOf | None = None, known: str = "") -> SavedRun:
    """Read a saved run's ``meta.json`` and weights (what playing needs; never the replay memory)."""
    with open_run(path, config_of, known) as run:
        return SavedRun(run.path, run.meta, run.tensors())


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated ``meta.json`` of a saved run (directory or ``.zip``), e.g. for the env id the
    run was trained on: ``read_meta(path).get("session", {}).get("env_id")``."""
    opened = _Opened(path)
    try:
        return opened.meta()
    finally:
        opened.close()


def check_save_path(path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
    """Raise now what saving to ``path`` would raise later: it exists and is not a checkpoint
    (unless ``overwrite``), or its folder cannot be created or written. Returns the normalised path.
    The command line calls this before training, so a bad ``--out`` never costs a run."""
    path = os.path.normpath(os.fspath(path))
    _check_replaceable(path, overwrite)
    probe = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise NotADirectoryError(f"{path}: cannot be created, {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"{path}: cannot be created, {probe} is not writable")
    return path


# -- writing ---------------------------------------------------------------------------------


def _save_safetensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    """``safetensors.torch.save_file``, whose failed writes (a full disk) raise safetensors' own
    error type: those become the ``OSError`` (``errno`` set) that every other file of a save
    raises, so ``except OSError`` catches a full disk whichever file filled it."""
    from safetensors.torch import save_file

    try:
        save_file(tensors, path)
    except OSError:
        raise
    except Exception as exc:  # safetensors' SafetensorError: "... I/O error: ... (os error 28)"
        found = re.search(r"\(os error (\d+)\)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, f"{os.strerror(code)} (while writing {os.path.basename(path)})", path) from exc


def _write_run(
    directory: str,
    meta: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    signals: SignalSet | None,
    memory: dict[str, np.ndarray] | None,
) -> None:
    _save_safetensors(tensors, os.path.join(directory, WEIGHTS))
    full = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **json_ready(meta)}
    full.setdefault("versions", _versions())
    full.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    with open(os.path.join(directory, META), "w", encoding="utf-8") as f:
        json.dump(full, f, indent=1)
    if signals is not None:
        signals.to_csv(os.path.join(directory, SIGNALS))
    if memory is not None:
        np.savez(os.path.join(directory, MEMORY), **memory)  # type: ignore[arg-type]  # as above


def _is_checkpoint(path: str) -> tuple[bool, str]:
    """Whether ``path`` (which exists) is something :func:`save` may replace, and if not, why."""
    names = (META, WEIGHTS, SIGNALS, MEMORY)
    if os.path.islink(path):
        return False, "a symbolic link"
    if os.path.isdir(path):
        entries = sorted(os.listdir(path))
        if not entries:
            return True, ""
        others = [e for e in entries if e not in names]
        if others:
            shown = ", ".join(repr(e) for e in others[:5]) + (", ..." if len(others) > 5 else "")
            return False, f"a directory holding files that are not part of a checkpoint ({shown})"
        if META not in entries:
            return False, f"a directory without {META}"
        return True, ""
    if os.path.isfile(path) and path.endswith(".zip") and zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                members = zf.namelist()
        except (OSError, zipfile.BadZipFile):
            return False, "a damaged zip archive"
        if META in members and set(members) <= set(names):
            return True, ""
        return False, "a zip archive that is not a workbench checkpoint"
    return False, "a file that is not a workbench checkpoint" if os.path.isfile(path) else "not a regular file"


def _check_replaceable(path: str, overwrite: bool) -> None:
    """Refuse to replace anything but a checkpoint (or an empty directory) unless ``overwrite``."""
    if overwrite or not os.path.lexists(path):
        return
    ok, what = _is_checkpoint(path)
    if not ok:
        raise FileExistsError(
            f"{path}: exists and is {what}; save() replaces only a workbench checkpoint. Choose another "
            "path, or pass overwrite=True to replace it (its contents are deleted)"
        )


def _leftovers(path: str) -> list[str]:
    """What interrupted saves to ``path`` left behind: temporary entries and ``.old-PID`` copies."""
    parent, base = os.path.split(os.path.abspath(path))
    tmp = glob.glob(os.path.join(glob.escape(parent), f".{glob.escape(base)}.tmp-*"))
    return tmp + glob.glob(glob.escape(os.path.abspath(path)) + ".old-*")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


_PATH_LOCKS: dict[str, threading.Lock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _save_lock(path: str) -> Iterator[None]:
    """Serialize saves to ``path``: threads of this process by a lock, other processes by
    ``flock`` on the parent directory (saves to one directory take turns; nothing is left on disk)."""
    key = os.path.abspath(path)
    with _PATH_LOCKS_GUARD:
        lock = _PATH_LOCKS.setdefault(key, threading.Lock())
    with lock:
        fd = -1
        try:
            import fcntl

            fd = os.open(os.path.dirname(key), os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):  # no flock here (Windows, some network file systems): threads only
            if fd >= 0:
                os.close(fd)
            fd = -1
        try:
            yield
        finally:
            if fd >= 0:
                os.close(fd)  # releases the flock


def _write_zip(tmp_dir: str, path: str) -> str:
    """Zip ``tmp_dir`` to a temporary file beside ``path``; a failed write (a full disk) removes it."""
    parent, base = os.path.split(os.path.abspath(path))
    fd, tmp_zip = tempfile.mkstemp(prefix=f".{base}.tmp-", suffix=".zip", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in sorted(os.listdir(tmp_dir)):
                zf.write(os.path.join(tmp_dir, name), name)
        follow_umask(tmp_zip)
    except BaseException:
        _remove(tmp_zip)
        raise
    return tmp_zip


def _commit(tmp_dir: str, path: str) -> None:
    """Move a fully written checkpoint into place, keeping the old one until the new one is there.

    Runs under :func:`_save_lock`. A file replacing a file is one atomic rename; otherwise the old
    entry is first renamed to ``PATH.old-PID`` (which ``load`` falls back to when a crash hits
    between the two renames) and deleted once the new one is in place.
    """
    follow_umask(tmp_dir)
    new = _write_zip(tmp_dir, path) if path.endswith(".zip") else tmp_dir
    try:
        if new != tmp_dir and os.path.isfile(path) and not os.path.islink(path):
            os.replace(new, path)  # a file over a file: one atomic rename
        else:
            if os.path.lexists(path):
                old = f"{path}.old-{os.getpid()}"
                _remove(old)
                os.replace(path, old)  # removed by _save once the new one is in place
            os.replace(new, path)
    except BaseException:
        if new != tmp_dir:
            _remove(new)
        raise
    finally:
        if new != tmp_dir:
            shutil.rmtree(tmp_dir, ignore_errors=True)


def write_run(
    path: str | os.PathLike[str],
    *,
    meta: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    signals: SignalSet | None = None,
    memory: dict[str, np.ndarray] | None = None,
    overwrite: bool = False,
) -> str:
    """Write a saved run to ``path`` (a directory, or a ``.zip`` when it ends so), atomically:
    everything goes to a temporary name first and replaces the old checkpoint only when complete.
    ``path`` may replace only an earlier checkpoint (or an empty directory) unless ``overwrite=True``;
    saves to one path take turns, and what crashed saves left there is removed. ``meta`` gets the
    format name and version, library versions and the time. Returns the path."""
    path = os.path.normpath(os.fspath(path))
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with _save_lock(path):
        _check_replaceable(path, overwrite)
        # Under the lock every temporary entry of this path is from a save that died: remove them
        # first (they may be what filled the disk). A fallback copy goes only after the new save.
        for stale in _leftovers(path):
            if ".old-" not in os.path.basename(stale):
                _remove(stale)
        tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
        try:
            _write_run(tmp_dir, meta, tensors, signals, memory)
            _commit(tmp_dir, path)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        for stale in _leftovers(path):
            _remove(stale)
    return path
