"""What an agent saves and restores: its declared state (networks, optimizer moments, counters, random
generators), its hyperparameters as JSON, and the glue to ``checkpoint`` (``save``) and ``export``.

:class:`Persistence` is a part of :class:`~workbench.agents.contract.Agent` (a base class of it).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import checkpoint
from .encoders import encoder_path

__all__ = ["AgentState", "Persistence"]


class AgentState(NamedTuple):
    """Everything an agent saves, as it declares it: see :meth:`Agent.state`."""

    tensors: dict[str, torch.Tensor]
    """Networks (``net/<name>/<key>``), optimizer moments (``optim/<name>/<param>/<key>``) and the
    torch generator (``rng/torch``)."""
    data: dict[str, Any]
    """JSON-ready: ``counters``, ``optimizers`` (their settings), ``agent_state`` (schedule
    positions and other algorithm state) and ``rng`` (the numpy generator)."""


def _check_moments(opt: torch.optim.Optimizer, moments: dict[int, dict[str, torch.Tensor]], name: str) -> None:
    """Every per-parameter tensor of a saved optimizer state (Adam's moments) has its parameter's
    shape: torch would accept a wrong one and silently never use it."""
    params = [p for group in opt.param_groups for p in group["params"]]
    for idx, entry in moments.items():
        if not 0 <= idx < len(params):
            raise ValueError(f"optimizer {name!r} has state for parameter {idx}, but it has {len(params)} parameters")
        want = tuple(params[idx].shape)
        for key, t in entry.items():
            if t.dim() > 0 and tuple(t.shape) != want:
                raise ValueError(
                    f"optimizer {name!r} state {idx}/{key} has shape {tuple(t.shape)}, its parameter has {want}"
                )


class Persistence:
    """The saving and restoring members of an agent (``self`` is the :class:`Agent`)."""

    def state(self) -> AgentState:
        """Everything this agent saves: its declared networks and optimizers (tensors), counters,
        schedule positions and random generators. Checkpoints write it; :meth:`restore` reads it.
        Algorithms with more state extend ``data["agent_state"]`` (and :meth:`restore` with it)."""
        tensors: dict[str, torch.Tensor] = {}
        groups: dict[str, Any] = {}
        for name, net in self.networks.items():
            for key, t in net.state_dict().items():
                tensors[f"net/{name}/{key}"] = _saved(t)
        for name, opt in self.optimizers.items():
            saved = opt.state_dict()
            for idx, entry in saved["state"].items():
                for key, t in entry.items():
                    t = t if isinstance(t, torch.Tensor) else torch.tensor(t)
                    tensors[f"optim/{name}/{idx}/{key}"] = _saved(t)
            groups[name] = checkpoint.json_ready(saved["param_groups"])
        tensors["rng/torch"] = self.generator.get_state().clone()
        data = {
            "counters": {
                "num_timesteps": self.num_timesteps,
                "num_updates": self.num_updates,
                "total_timesteps": self.total_timesteps,
            },
            "optimizers": groups,
            "agent_state": {},
            "rng": {"numpy": checkpoint.json_ready(self.rng.bit_generator.state)},
        }
        return AgentState(tensors, data)

    def restore(self, state: AgentState) -> None:
        """Load what :meth:`state` returned (from this agent or a saved one of the same build).
        Raises ``ValueError`` naming the network, optimizer or tensor that does not fit."""
        self.load_networks(state.tensors)
        tensors, groups = state.tensors, state.data.get("optimizers", {})
        for name, opt in self.optimizers.items():
            if name not in groups:
                raise ValueError(f"no optimizer state for {name!r}")
            prefix = f"optim/{name}/"
            moments: dict[int, dict[str, torch.Tensor]] = {}
            for k, v in tensors.items():
                if k.startswith(prefix):
                    idx, key = k[len(prefix) :].split("/", 1)
                    moments.setdefault(int(idx), {})[key] = v
            _check_moments(opt, moments, name)
            param_groups = []
            for g in groups[name]:
                g = dict(g)
                if "betas" in g:
                    g["betas"] = tuple(g["betas"])
                param_groups.append(g)
            opt.load_state_dict({"state": moments, "param_groups": param_groups})
        if "rng/torch" in tensors:
            self.generator.set_state(tensors["rng/torch"])
        counters = state.data.get("counters", {})
        self.num_timesteps = int(counters.get("num_timesteps", 0))
        self.num_updates = int(counters.get("num_updates", 0))
        self.total_timesteps = counters.get("total_timesteps")
        rng_state = state.data.get("rng", {}).get("numpy")
        if rng_state:
            self.rng.bit_generator.state = rng_state

    def network_weights(self) -> dict[str, dict[str, np.ndarray]]:
        """The declared networks' weights as numpy arrays (what acting needs, for Ray workers).

        Tensors that are not module state (gSDE's noise weights, one per env) are per-process
        acting state, which each worker draws for its own envs."""
        return {
            name: {k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}
            for name, net in self.networks.items()
        }

    def acting_weights(self) -> dict[str, torch.Tensor]:
        """A copy of the declared networks' weights as ``net/<name>/<key>`` CPU tensors (what
        acting needs, as :meth:`load_networks` takes them back), taken on the agent's lock so that
        no update is seen halfway: what a served session publishes to local-inference clients."""
        with self._lock:  # type: ignore[attr-defined]
            return {
                f"net/{name}/{key}": value.detach().to("cpu", copy=True).contiguous()
                for name, net in self.networks.items()
                for key, value in net.state_dict().items()
            }

    def load_networks(self, tensors: dict[str, Any]) -> None:
        """Load network weights given as ``net/<name>/<key>`` tensors (or ``{name: {key: array}}``
        as :meth:`network_weights` returns). Raises ``ValueError`` naming what does not fit."""
        for name, net in self.networks.items():
            if name in tensors and isinstance(tensors[name], dict):
                # Ray hands arrays over in read-only buffers; torch warns on those (and would share them),
                # so a read-only array is copied first: the weights are loaded by copy anyway.
                sd = {k: torch.as_tensor(_writable(v)) for k, v in tensors[name].items()}
            else:
                prefix = f"net/{name}/"
                sd = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            expected = net.state_dict()
            missing = sorted(set(expected) - set(sd))
            if missing:
                raise ValueError(f"network {name!r} lacks {', '.join(missing)}")
            for key, t in sd.items():
                if key in expected and tuple(expected[key].shape) != tuple(t.shape):
                    raise ValueError(
                        f"{name}.{key} has shape {tuple(t.shape)}, the agent expects {tuple(expected[key].shape)}"
                    )
            net.load_state_dict(sd)
        self._weights_loaded = True

    def hyperparameters(self) -> dict[str, Any]:
        """The config as JSON-ready data (schedules and exploration objects as dicts)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self.config):
            v = getattr(self.config, f.name)
            if f.name == "encoder" and isinstance(v, type):
                v = encoder_path(v)  # a user encoder is saved by its import path, never pickled
            out[f.name] = v.to_dict() if hasattr(v, "to_dict") else (list(v) if isinstance(v, tuple) else v)
        return out

    def describe(self) -> dict[str, Any]:
        """What rebuilds this agent, JSON-ready: algorithm, hyperparameters, spaces and seed."""
        return {
            "algorithm": self.algorithm,
            "hyperparameters": self.hyperparameters(),
            "observation_space": checkpoint.space_to_json(self.observation_space),
            "action_space": checkpoint.space_to_json(self.action_space),
            "seed": self.seed,
            "encoder": self.encoder_description,
        }

    def memory_arrays(self) -> dict[str, np.ndarray]:
        """The replay memory as arrays (for ``save(..., memory=True)``); raises ``ValueError``
        for an agent that has none."""
        memory = self.memory
        if memory is None:
            raise ValueError(f"{self.algorithm} has no replay memory to save; call save(path) without memory=True")
        return memory.state_arrays()

    def save(self, path: str | os.PathLike[str], *, memory: bool = False, overwrite: bool = False) -> str:
        """Save this agent alone (weights, optimizer, counters; replay memory with ``memory=True``)
        in the format ``wb.load`` reads. ``session.save`` also keeps the run's signals. An existing
        ``path`` is replaced only when it is a checkpoint, unless ``overwrite=True``."""
        state = self.state()
        return checkpoint.write_run(
            path,
            meta={**self.describe(), **state.data},
            tensors=state.tensors,
            memory=self.memory_arrays() if memory else None,
            overwrite=overwrite,
        )

    def export(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        action_mask: bool = False,
        overwrite: bool = False,
    ) -> str:
        """Write the deterministic policy (what ``act(obs, deterministic=True)`` does, with the
        observation normalization and the action scaling baked in) to run without this library,
        plus a JSON sidecar ``<path>.json`` of spaces, input/output, observation layout and versions.

        The format follows the suffix: ``.onnx`` (needs ``pip install 'rl-workbench[export]'``;
        run it with onnxruntime); ``format=`` overrides it. ``action_mask=True`` (Discrete and
        MultiDiscrete actions) adds a bool input ``action_mask`` restricting the action to the allowed
        ones. Written to temporary files and renamed into place; an earlier export is replaced, any
        other file only with ``overwrite=True``. Returns the model's path. See ``workbench.agents.export``."""
        from .export import export_policy

        return export_policy(self, path, format=format, action_mask=action_mask, overwrite=overwrite)


def _saved(t: torch.Tensor) -> torch.Tensor:
    """A tensor as a checkpoint holds it: detached, contiguous, its own copy, on the CPU (so a run
    trained on a GPU loads anywhere)."""
    t = t.detach()
    return t.contiguous().clone() if t.device.type == "cpu" else t.to("cpu").contiguous()


def _writable(value: Any) -> np.ndarray:
    """``value`` as an array torch can wrap without a warning: a read-only one is copied."""
    array = np.asarray(value)
    return array if array.flags.writeable else array.copy()
