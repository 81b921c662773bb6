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

This module is the file format only: what goes into the files comes from the agent
(``Agent.describe()`` and ``Agent.state()``) and the session (``Session`` writes its counters
under ``meta["session"]``); it imports neither.
"""

from __future__ import annotations

import datetime as _dt
import glob
import json
import os
import platform
import shutil
import tempfile
import zipfile
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from ._version import __version__
from .signals import SignalSet

__all__ = ["FORMAT_VERSION", "CheckpointError", "SavedRun", "read_run", "write_run"]

FORMAT_VERSION = 1
FORMAT_NAME = "rl-workbench"
META, WEIGHTS, SIGNALS, MEMORY = "meta.json", "weights.safetensors", "signals.csv", "memory.npz"


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
        return spaces.Box(
            low=np.asarray(data["low"], dtype=dtype),
            high=np.asarray(data["high"], dtype=dtype),
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
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read an ``.npz`` with ``allow_pickle=False``; any problem is a :class:`CheckpointError`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: file not found")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise CheckpointError(
                f"{path}: holds pickled objects, which are refused (loading them could run code)"
            ) from None
        raise CheckpointError(f"{path}: not a readable .npz file ({exc})") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise CheckpointError(f"{path}: not a readable .npz file, possibly truncated ({exc})") from None


def _read_safetensors(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not os.path.exists(path):
        raise CheckpointError(f"{path}: file not found")
    with open(path, "rb") as f:
        head = f.read(9)
    # A safetensors file is an 8-byte header length then a JSON header ('{'); that length's low
    # byte may itself be 0x80 or spell "PK", so only a file that is not safetensors is suspected.
    if head[8:9] != b"{" and (head[:1] == b"\x80" or head[:2] == b"PK"):
        raise CheckpointError(
            f"{path}: looks like a pickle / torch.save file, which is refused (loading it could run "
            "code); a workbench checkpoint stores weights as safetensors"
        )
    try:
        return load_file(path)
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{path}: not a valid safetensors file, possibly truncated ({exc})") from None


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


# -- locating and reading a saved run --------------------------------------------------------


class _Opened:
    """A checkpoint directory ready to read (a ``.zip`` is unpacked to a temporary folder)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if os.path.isdir(self.path):
            self.dir = self.path
        elif os.path.isfile(self.path) and self.path.endswith(".zip"):
            self._tmp = tempfile.TemporaryDirectory(prefix="workbench-ckpt-")
            try:
                with zipfile.ZipFile(self.path) as zf:
                    for member in zf.namelist():
                        if member not in (META, WEIGHTS, SIGNALS, MEMORY):
                            raise CheckpointError(f"{self.path}: unexpected member {member!r} in the archive")
                    zf.extractall(self._tmp.name)
            except zipfile.BadZipFile as exc:
                raise CheckpointError(f"{self.path}: not a valid zip archive, possibly truncated ({exc})") from None
            self.dir = self._tmp.name
        elif os.path.isfile(self.path):
            raise CheckpointError(
                f"{self.path}: not a workbench checkpoint (expected a directory holding {META}, or a .zip of one)"
            )
        else:
            fallback = sorted(glob.glob(glob.escape(self.path) + ".old-*"))
            if fallback:  # a crash between the two renames of a save: the previous one survives
                self.dir = fallback[-1]
            else:
                raise CheckpointError(f"{self.path}: no such checkpoint")

    def file(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def label(self, name: str) -> str:
        return f"{self.path}/{name}" if self._tmp is None else f"{self.path}!{name}"

    def meta(self) -> dict[str, Any]:
        path = self.file(META)
        if not os.path.exists(path):
            raise CheckpointError(f"{self.label(META)}: file not found; is {self.path} a workbench checkpoint?")
        try:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{self.label(META)}: not valid JSON, possibly truncated ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise CheckpointError(f"{self.label(META)}: not a workbench checkpoint")
        version = meta.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise CheckpointError(
                f"{self.label(META)}: format version {version!r} is newer than this library reads "
                f"(up to {FORMAT_VERSION}); upgrade rl-workbench to load it"
            )
        return meta

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


class SavedRun(NamedTuple):
    """A saved run as read from disk (see :func:`read_run`)."""

    path: str
    """Where it was read from."""
    meta: dict[str, Any]
    """``meta.json``: the agent's description and state data, and ``session`` counters if any."""
    tensors: dict[str, torch.Tensor]
    """``weights.safetensors``."""
    memory: dict[str, np.ndarray] | None
    """``memory.npz`` when asked for and present."""
    signals: SignalSet | None
    """``signals.csv`` when asked for (empty when the file is absent)."""

    def label(self, name: str) -> str:
        """How errors name one of its files."""
        return f"{self.path}/{name}"


def read_run(path: str | os.PathLike[str], *, memory: bool = False, signals: bool = False) -> SavedRun:
    """Read a saved run (a directory or a ``.zip`` of one): meta and weights always, the replay
    memory and the signals when asked. Raises :class:`CheckpointError` naming the file."""
    opened = _Opened(path)
    try:
        meta = opened.meta()
        tensors = _read_safetensors(opened.file(WEIGHTS))
        arrays = None
        if memory and os.path.exists(opened.file(MEMORY)):
            arrays = read_npz(opened.file(MEMORY))
        run_signals = None
        if signals:
            signals_path = opened.file(SIGNALS)
            run_signals = SignalSet.from_csv(signals_path) if os.path.exists(signals_path) else SignalSet()
    finally:
        opened.close()
    return SavedRun(opened.path, meta, tensors, arrays, run_signals)


# -- writing ---------------------------------------------------------------------------------


def _write_run(
    directory: str,
    meta: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    signals: SignalSet | None,
    memory: dict[str, np.ndarray] | None,
) -> None:
    from safetensors.torch import save_file

    save_file(tensors, os.path.join(directory, WEIGHTS))
    full = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **json_ready(meta)}
    full.setdefault("versions", _versions())
    full.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    with open(os.path.join(directory, META), "w", encoding="utf-8") as f:
        json.dump(full, f, indent=1)
    if signals is not None:
        signals.to_csv(os.path.join(directory, SIGNALS))
    if memory is not None:
        np.savez(os.path.join(directory, MEMORY), **memory)


def _commit(tmp_dir: str, path: str) -> None:
    """Move a fully written checkpoint into place, keeping the old one until the new one is there."""
    if path.endswith(".zip"):
        fd, tmp_zip = tempfile.mkstemp(prefix=".tmp-", suffix=".zip", dir=os.path.dirname(os.path.abspath(path)))
        os.close(fd)
        with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in sorted(os.listdir(tmp_dir)):
                zf.write(os.path.join(tmp_dir, name), name)
        os.replace(tmp_zip, path)
        shutil.rmtree(tmp_dir)
        return
    old = None
    if os.path.exists(path):
        old = f"{path}.old-{os.getpid()}"
        os.replace(path, old)
    os.replace(tmp_dir, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_run(
    path: str | os.PathLike[str],
    *,
    meta: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    signals: SignalSet | None = None,
    memory: dict[str, np.ndarray] | None = None,
) -> str:
    """Write a saved run to ``path`` (a directory, or a ``.zip`` when it ends so), atomically:
    everything goes to a temporary name first and replaces the old checkpoint only when complete.
    ``meta`` gets the format name and version, library versions and the time. Returns the path."""
    path = os.path.normpath(os.fspath(path))
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    try:
        _write_run(tmp_dir, meta, tensors, signals, memory)
        _commit(tmp_dir, path)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return path
