"""Agents from saved runs: ``wb.load`` and what ``Session.resume`` builds on.

The file format is ``checkpoint.py``'s; what an agent saves is its own (``Agent.describe`` and
``Agent.state``). Here a saved run becomes an agent again: the class from the registry, the
hyperparameters decoded, the declared state restored. Nothing is half-loaded: a new agent is built
and returned only when all of it loaded.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..checkpoint import META, WEIGHTS, CheckpointError, SavedRun, read_run, space_from_json
from ..exploration import exploration_from_dict
from ..schedules import schedule_from_dict
from .base import AGENTS, Agent, AgentState

__all__ = ["agent_from_run", "load"]


def _decode_hyperparameters(cls: type[Agent], hyper: dict[str, Any]) -> dict[str, Any]:
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


def agent_from_run(run: SavedRun, expected: type[Agent] | None = None) -> Agent:
    """Rebuild the agent of a saved run (in training mode) with its state restored; its replay
    memory too when the run was read with ``memory=True``."""
    meta = run.meta
    algorithm = str(meta.get("algorithm", "")).lower()
    if algorithm not in AGENTS:
        raise CheckpointError(
            f"{run.label(META)}: unknown algorithm {meta.get('algorithm')!r}; known: "
            f"{', '.join(sorted(c.__name__ for c in AGENTS.values()))}"
        )
    cls = AGENTS[algorithm]
    if expected is not None and cls is not expected:
        raise CheckpointError(f"{run.label(META)}: holds a {cls.__name__} agent, not {expected.__name__}")
    try:
        obs_space = space_from_json(meta["observation_space"])
        act_space = space_from_json(meta["action_space"])
        hyper = _decode_hyperparameters(cls, meta.get("hyperparameters", {}))
        agent = cls(observation_space=obs_space, action_space=act_space, seed=meta.get("seed"), **hyper)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{run.label(META)}: cannot rebuild the agent ({exc})") from None
    try:
        agent.restore(AgentState(run.tensors, meta))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{run.label(WEIGHTS)}: does not fit the agent ({exc})") from None
    memory = getattr(agent, "memory", None)
    if run.memory is not None and memory is not None:
        memory.load_arrays(run.memory, run.label("memory.npz"))
    return agent


def load(path: str | os.PathLike[str]) -> Agent:
    """Load a saved agent in play mode: deterministic, no exploration, no learning.

    ``path`` is a directory written by ``session.save`` or a ``.zip`` of one. Raises
    :class:`~workbench.checkpoint.CheckpointError` naming the file and the problem when it cannot be read.
    """
    return agent_from_run(read_run(path)).eval()
