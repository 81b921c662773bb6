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
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from .agents.base import AGENTS, Agent
from .exploration import exploration_from_dict
from .schedules import schedule_from_dict
from .signals import SignalSet

if TYPE_CHECKING:
    from .session import Session

__all__ = ["FORMAT_VERSION", "CheckpointError", "load", "load_session", "save_agent", "save_session"]

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


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def _versions() -> dict[str, str]:
    from . import __version__

    return {
        "workbench": __version__,
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


# -- agent state -----------------------------------------------------------------------------


def _agent_tensors(agent: Agent) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """All tensors of the agent (networks, optimizers, torch generator) and the optimizer groups."""
    tensors: dict[str, torch.Tensor] = {}
    groups: dict[str, Any] = {}
    for name, net in agent.networks.items():
        for key, t in net.state_dict().items():
            tensors[f"net/{name}/{key}"] = t.detach().contiguous().clone()
    for name, opt in agent.optimizers.items():
        state = opt.state_dict()
        for idx, entry in state["state"].items():
            for key, t in entry.items():
                if not isinstance(t, torch.Tensor):
                    t = torch.tensor(t)
                tensors[f"optim/{name}/{idx}/{key}"] = t.detach().contiguous().clone()
        groups[name] = _json_ready(state["param_groups"])
    tensors["rng/torch"] = agent.generator.get_state().clone()
    return tensors, groups


def _load_agent_tensors(agent: Agent, tensors: dict[str, torch.Tensor], groups: dict[str, Any], path: str) -> None:
    for name, net in agent.networks.items():
        prefix = f"net/{name}/"
        sd = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        expected = net.state_dict()
        missing = sorted(set(expected) - set(sd))
        if missing:
            raise CheckpointError(f"{path}: network {name!r} lacks {', '.join(missing)}")
        for key, t in sd.items():
            if key in expected and tuple(expected[key].shape) != tuple(t.shape):
                raise CheckpointError(
                    f"{path}: {name}.{key} has shape {tuple(t.shape)}, the agent expects "
                    f"{tuple(expected[key].shape)}"
                )
        net.load_state_dict(sd)
    for name, opt in agent.optimizers.items():
        if name not in groups:
            raise CheckpointError(f"{path}: no optimizer state for {name!r}")
        prefix = f"optim/{name}/"
        state: dict[int, dict[str, torch.Tensor]] = {}
        for k, v in tensors.items():
            if k.startswith(prefix):
                idx, key = k[len(prefix) :].split("/", 1)
                state.setdefault(int(idx), {})[key] = v
        param_groups = []
        for g in groups[name]:
            g = dict(g)
            if "betas" in g:
                g["betas"] = tuple(g["betas"])
            param_groups.append(g)
        opt.load_state_dict({"state": state, "param_groups": param_groups})
    if "rng/torch" in tensors:
        agent.generator.set_state(tensors["rng/torch"])
    agent._weights_loaded = True


def _agent_meta(agent: Agent) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "algorithm": agent.algorithm,
        "hyperparameters": agent.hyperparameters(),
        "observation_space": space_to_json(agent.observation_space),
        "action_space": space_to_json(agent.action_space),
        "counters": {
            "num_timesteps": agent.num_timesteps,
            "num_updates": agent.num_updates,
            "total_timesteps": agent.total_timesteps,
        },
        "agent_state": _json_ready(agent.extra_state()),
        "rng": {"numpy": _json_ready(agent.rng.bit_generator.state)},
        "seed": agent.seed,
        "versions": _versions(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _decode_hyperparameters(cls: type[Agent], hyper: dict[str, Any]) -> dict[str, Any]:
    import dataclasses

    out: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    for key, value in hyper.items():
        if key not in fields:
            continue  # a field dropped in a later version: keep the new default
        if isinstance(value, dict) and "type" in value:  # exploration objects name their type
            value = exploration_from_dict(value)
        elif isinstance(value, dict) and "schedule" in value:
            value = schedule_from_dict(value)
        elif isinstance(value, list):
            value = tuple(value)
        out[key] = value
    return out


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
        algorithm = str(meta.get("algorithm", "")).lower()
        if algorithm not in AGENTS:
            raise CheckpointError(
                f"{self.label(META)}: unknown algorithm {meta.get('algorithm')!r}; known: "
                f"{', '.join(sorted(c.__name__ for c in AGENTS.values()))}"
            )
        return meta

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _build_agent(opened: _Opened, meta: dict[str, Any], expected: type[Agent] | None = None) -> Agent:
    cls = AGENTS[meta["algorithm"].lower()]
    if expected is not None and cls is not expected:
        raise CheckpointError(
            f"{opened.label(META)}: holds a {cls.__name__} agent, not {expected.__name__}"
        )
    try:
        obs_space = space_from_json(meta["observation_space"])
        act_space = space_from_json(meta["action_space"])
        hyper = _decode_hyperparameters(cls, meta.get("hyperparameters", {}))
        agent = cls(observation_space=obs_space, action_space=act_space, seed=meta.get("seed"), **hyper)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{opened.label(META)}: cannot rebuild the agent ({exc})") from None
    tensors = _read_safetensors(opened.file(WEIGHTS))
    groups = meta.get("optimizers", {})
    try:
        _load_agent_tensors(agent, tensors, groups, opened.label(WEIGHTS))
    except CheckpointError:
        raise
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{opened.label(WEIGHTS)}: does not fit the agent ({exc})") from None
    counters = meta.get("counters", {})
    agent.num_timesteps = int(counters.get("num_timesteps", 0))
    agent.num_updates = int(counters.get("num_updates", 0))
    agent.total_timesteps = counters.get("total_timesteps")
    agent.load_extra_state(meta.get("agent_state", {}))
    rng_state = meta.get("rng", {}).get("numpy")
    if rng_state:
        agent.rng.bit_generator.state = rng_state
    return agent


def _load_memory(agent: Agent, opened: _Opened) -> None:
    path = opened.file(MEMORY)
    memory = getattr(agent, "memory", None)
    if memory is None or not os.path.exists(path):
        return
    memory.load_arrays(read_npz(path), opened.label(MEMORY))


def load(path: str | os.PathLike[str]) -> Agent:
    """Load a saved agent in play mode: deterministic, no exploration, no learning.

    ``path`` is a directory written by ``session.save`` or a ``.zip`` of one. Raises
    :class:`CheckpointError` naming the file and the problem when it cannot be read.
    """
    opened = _Opened(path)
    try:
        meta = opened.meta()
        agent = _build_agent(opened, meta)
    finally:
        opened.close()
    return agent.eval()


def load_session(path: str | os.PathLike[str], env: Any = None, **session_kwargs: Any) -> Session:
    """Rebuild a saved session to continue training (``Session.resume(path, env)``)."""
    from .session import Session

    opened = _Opened(path)
    try:
        meta = opened.meta()
        agent = _build_agent(opened, meta)
        _load_memory(agent, opened)
        signals_path = opened.file(SIGNALS)
        signals = SignalSet.from_csv(signals_path) if os.path.exists(signals_path) else SignalSet()
    finally:
        opened.close()
    agent.train()
    saved = meta.get("session", {})
    if env is None:
        env_id = saved.get("env_id")
        if env_id is None:
            raise ValueError(
                f"{path}: the run was trained on an env built by the application; pass it: "
                "Session.resume(path, env)"
            )
        env = env_id
    session_kwargs.setdefault("seed", saved.get("seed"))
    session = Session(agent, env, **session_kwargs)
    for name, sig in signals.items():
        steps, values, times = sig.snapshot()
        session.signals.signal(name).extend(steps, values, times)
    session.steps = int(saved.get("steps", agent.num_timesteps))
    session.episodes = int(saved.get("episodes", 0))
    session._time_offset = float(saved.get("elapsed", 0.0))
    session._seeded = True  # the generators continue from their saved states
    session.best_eval_reward = saved.get("best_eval_reward")
    session._last_eval_step = int(saved.get("last_eval_step", session.steps))
    session._last_checkpoint_step = session.steps
    return session


# -- writing ---------------------------------------------------------------------------------


def _write_run(
    directory: str, agent: Agent, extra_meta: dict[str, Any], signals: SignalSet | None, memory: bool
) -> None:
    from safetensors.torch import save_file

    tensors, groups = _agent_tensors(agent)
    save_file(tensors, os.path.join(directory, WEIGHTS))
    meta = _agent_meta(agent)
    meta["optimizers"] = groups
    meta.update(extra_meta)
    with open(os.path.join(directory, META), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    if signals is not None:
        signals.to_csv(os.path.join(directory, SIGNALS))
    if memory:
        mem = getattr(agent, "memory", None)
        if mem is None:
            raise ValueError(f"{agent.algorithm} has no replay memory to save; call save(path) without memory=True")
        np.savez(os.path.join(directory, MEMORY), **mem.state_arrays())


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


def _save(
    path: str | os.PathLike[str], agent: Agent, extra_meta: dict[str, Any], signals: SignalSet | None, memory: bool
) -> str:
    path = os.path.normpath(os.fspath(path))
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    try:
        _write_run(tmp_dir, agent, extra_meta, signals, memory)
        _commit(tmp_dir, path)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return path


def save_agent(agent: Agent, path: str | os.PathLike[str], *, memory: bool = False) -> str:
    """Save an agent alone (no session counters or signals)."""
    return _save(path, agent, {}, None, memory)


def save_session(session: Session, path: str | os.PathLike[str], *, memory: bool = False) -> str:
    """Save a session: its agent, counters, signals and (with ``memory=True``) replay memory."""
    extra = {
        "session": {
            "steps": session.steps,
            "episodes": session.episodes,
            "elapsed": session.elapsed,
            "seed": session.seed,
            "env_id": session.env_source.env_id,
            "env_name": session.env_source.name,
            "best_eval_reward": session.best_eval_reward,
            "last_eval_step": session._last_eval_step,
        }
    }
    return _save(path, session.agent, extra, session.signals, memory)

