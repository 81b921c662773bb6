"""Agents from saved runs: ``wb.load`` and what ``Session.reopen`` builds on.

The file format is ``checkpoint.py``'s; what an agent saves is its own (``Agent.describe`` and
``Agent.state``). Here a saved run becomes an agent again: the class from the registry, the
hyperparameters decoded, the declared state restored. Nothing is half-loaded: a new agent is built
and returned only when all of it loaded.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ..checkpoint import MEMORY, META, WEIGHTS, CheckpointError, OpenRun, SavedRun, open_run, read_run, space_from_json
from ..devices import parse_device
from ..exploration import exploration_from_dict
from ..memory.her import replay_from_dict
from ..schedules import schedule_from_dict
from .base import AGENTS, MULTI_AGENTS, OFFLINE_AGENTS, Agent, AgentState
from .encoders import BUILTIN_ENCODERS, import_encoder
from .intrinsic import intrinsic_from_dict
from .registry import config_values

__all__ = [
    "acting_agent",
    "agent_from_run",
    "agent_like",
    "config_of",
    "known_algorithms",
    "load",
    "open_saved",
    "read_saved",
]


def config_of(algorithm: str) -> type | None:
    """The config dataclass of a saved algorithm name (None when no registered agent has it)."""
    cls = _registered(algorithm.lower())
    return None if cls is None else cls.Config


def _registered(name: str) -> type[Agent] | None:
    """The agent class saved under ``name`` (lower case), in whichever registry holds it."""
    return AGENTS.get(name) or OFFLINE_AGENTS.get(name) or MULTI_AGENTS.get(name)


def known_algorithms() -> str:
    """The registered agents' names, for messages."""
    registries = (AGENTS, OFFLINE_AGENTS, MULTI_AGENTS)
    return ", ".join(sorted(c.__name__ for registry in registries for c in registry.values()))


def open_saved(path: str | os.PathLike[str]) -> Any:
    """:func:`~workbench.checkpoint.open_run` for a saved agent: its algorithm must be a registered
    agent and its hyperparameters fit that agent's config."""
    return open_run(path, config_of, known_algorithms())


def read_saved(path: str | os.PathLike[str]) -> SavedRun:
    """:func:`~workbench.checkpoint.read_run` for a saved agent (meta and weights, validated
    against the registered agent's config)."""
    return read_run(path, config_of, known_algorithms())


def _user_encoder(path: str, allow: Sequence[str] | None, label: str) -> type:
    """The saved run's custom encoder class, imported only when the caller allows its path."""
    allowed = [allow] if isinstance(allow, str) else list(allow or [])
    if path not in allowed:
        raise CheckpointError(
            f"{label}: the agent was saved with the custom encoder {path!r}; building it imports and runs that "
            f"code, so it is refused unless you allow it: wb.load(path, allow_encoders=[{path!r}]) "
            "(or Session.reopen(path, env, allow_encoders=[...]); on the command line "
            f"`workbench play/export RUN --allow-encoder {path}`)"
        )
    try:
        return import_encoder(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise CheckpointError(f"{label}: cannot import the custom encoder {path!r} ({exc})") from None


# A field added after runs were saved, and the value that was in effect before it existed: a run
# saved without it keeps working as it did, with the networks it saved.
_BEFORE_THE_FIELD: dict[str, Any] = {
    "share_encoder": False,  # before PPO/A2C shared their CNN: one encoder per network
    "policy_average_tau": None,  # before CQL acted with its policy's moving average: the policy itself
}


def _decode_hyperparameters(
    cls: type[Agent], hyper: dict[str, Any], allow_encoders: Sequence[str] | None = None, label: str = META
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    for key, value in hyper.items():
        if key not in fields:
            continue  # a field dropped in a later version: keep the new default
        if isinstance(value, dict) and "type" in value:  # exploration objects (and plug-ins) name their type
            if key == "replay":
                value = replay_from_dict(value)
            elif key == "intrinsic":
                value = intrinsic_from_dict(value)
            else:
                value = exploration_from_dict(value)
        elif isinstance(value, dict) and "schedule" in value:
            value = schedule_from_dict(value)
        elif isinstance(value, list):
            value = tuple(value)
        elif key == "encoder" and isinstance(value, str) and value not in BUILTIN_ENCODERS:
            value = _user_encoder(value, allow_encoders, label)
        out[key] = value
    for key, value in _BEFORE_THE_FIELD.items():
        if key in fields and key not in hyper:
            out[key] = value
    return out


def _precision_for(hyper: dict[str, Any], target: Any, label: str) -> dict[str, Any]:
    """The saved hyperparameters with ``precision="fp16"`` (which needs a CUDA GPU) made "fp32" when
    the run is loaded elsewhere, with a warning: a run trained on a GPU still loads and plays."""
    if hyper.get("precision") != "fp16":
        return hyper
    on_cuda = torch.cuda.is_available() if target is None else target.type == "cuda"
    if on_cuda:
        return hyper
    warnings.warn(
        f"{label}: the run was trained with precision='fp16', which needs a CUDA GPU; "
        f"it is loaded on {'the CPU' if target is None else str(target)} with precision='fp32'",
        RuntimeWarning,
        stacklevel=3,
    )
    return {**hyper, "precision": "fp32"}


def agent_from_run(
    run: OpenRun | SavedRun,
    expected: type[Agent] | None = None,
    *,
    memory: bool = False,
    allow_encoders: Sequence[str] | None = None,
    device: Any = "cpu",
) -> Agent:
    """Rebuild the agent of a saved run (in training mode) with its state restored, and with
    ``memory=True`` its replay memory (from a run opened with :func:`open_saved`).
    ``allow_encoders`` lists the import paths of custom encoders it may import and build.
    ``device``: where the rebuilt agent lives (a saved run holds CPU tensors and no device, so a run
    trained on a GPU loads on a CPU-only machine and the reverse)."""
    target = parse_device(device, "wb.load")  # a bad device is the caller's error, not the file's
    meta = run.meta
    name = str(meta.get("algorithm", "")).lower()
    cls = _registered(name)
    if cls is None:
        raise CheckpointError(f"{run.label(META)}: unknown algorithm; known: {known_algorithms()}")
    if expected is not None and cls is not expected:
        raise CheckpointError(f"{run.label(META)}: holds a {cls.__name__} agent, not {expected.__name__}")
    try:
        obs_space = space_from_json(meta["observation_space"])
        act_space = space_from_json(meta["action_space"])
        hyper = _decode_hyperparameters(cls, meta.get("hyperparameters", {}), allow_encoders, run.label(META))
        hyper = _precision_for(hyper, target, run.label(META))
        agent = cls(observation_space=obs_space, action_space=act_space, seed=meta.get("seed"), device=device, **hyper)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{run.label(META)}: cannot rebuild the agent ({exc})") from None
    tensors = run.tensors()
    try:
        agent.restore(AgentState(tensors, meta))
    except CheckpointError:
        raise
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{run.label(WEIGHTS)}: {exc}; it does not fit the {cls.__name__} agent") from None
    replay = agent.memory
    if memory and replay is not None:
        # A saved memory of this agent is never larger than the one it just allocated for its spaces.
        budget = replay.file_budget()
        arrays = run.memory(budget)
        if arrays is not None:
            try:
                replay.load_arrays(arrays, run.label(MEMORY), action_space=agent.action_space)
            except CheckpointError:
                raise
            except ValueError as exc:
                raise CheckpointError(str(exc)) from None
    return agent


def acting_agent(description: dict[str, Any], tensors: dict[str, torch.Tensor], *, device: Any = "cpu") -> Agent:
    """An agent that acts as the one ``description`` (its :meth:`~Agent.describe`, as ``meta.json``
    holds it) and ``tensors`` (its :meth:`~Agent.acting_weights`) describe: in training mode (it explores
    as the learner does), with no optimizer state. What a local-inference client builds from a served
    session's policy. A custom encoder is refused (building it would import code named by the server)."""
    label = "the served policy"
    name = str(description.get("algorithm", "")).lower()
    cls = _registered(name)
    if cls is None:
        raise CheckpointError(f"{label}: unknown algorithm {name!r}; known: {known_algorithms()}")
    try:
        obs_space = space_from_json(description["observation_space"])
        act_space = space_from_json(description["action_space"])
        hyper = _decode_hyperparameters(cls, description.get("hyperparameters", {}), None, label)
        hyper = _precision_for(hyper, parse_device(device, label), label)
        agent = cls(observation_space=obs_space, action_space=act_space, device=device, **hyper)
        agent.load_networks(tensors)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{label}: cannot build the {cls.__name__} agent ({exc})") from None
    return agent


def agent_like(agent: Agent, *, device: Any = "cpu") -> Agent:
    """A new agent of ``agent``'s build (class, spaces, hyperparameters, seed) on ``device``, its
    networks freshly initialised: what holds another copy of its weights (self-play's opponents load
    snapshots into one). Built as a saved run is, so a custom encoder is taken from the agent itself."""
    target = parse_device(device, "agent_like")
    hyper = config_values(agent.config)
    hyper = _precision_for(hyper, target, type(agent).__name__)
    return type(agent)(
        observation_space=agent.observation_space,
        action_space=agent.action_space,
        seed=agent.seed,
        device=device,
        **hyper,
    )


def load(path: str | os.PathLike[str], *, allow_encoders: Sequence[str] | None = None, device: Any = "cpu") -> Agent:
    """Load a saved agent in play mode: deterministic, no exploration, no learning.

    ``device`` (default ``"cpu"``): where it lives, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or
    ``"auto"``; a saved run is device-free, so one trained on a GPU loads and plays on a CPU-only machine.

    ``path`` is a directory written by ``session.save`` or a ``.zip`` of one. Raises
    :class:`~workbench.checkpoint.CheckpointError` naming the file and the problem when it cannot be read.
    A run saved with a custom encoder (``encoder=MyModule``) stores its import path; loading it imports
    that code, so it happens only when the path is in ``allow_encoders``
    (``wb.load(path, allow_encoders=["mypkg.encoders.MyEncoder"])``).
    """
    parse_device(device, "wb.load")
    return agent_from_run(read_saved(path), allow_encoders=allow_encoders, device=device).eval()
