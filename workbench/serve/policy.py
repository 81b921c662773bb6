"""The learner's policy as a served session publishes it to local-inference clients.

A *version* is a copy of the acting networks' weights (``agent.acting_weights()``, taken on the agent's
lock, so never an update halfway), written as safetensors bytes, numbered from 1. The server publishes
a new version when the agent has updated since the last one, at most every ``publish_every`` seconds;
clients fetch ``GET /policy`` (what rebuilds the agent: its ``describe()``, as ``meta.json`` holds it,
and the extras its decisions carry), ``GET /policy/weights`` (the newest version) or
``GET /policy.onnx`` (for clients without torch: the deterministic policy, or an on-policy policy's acting
step with its critic), and hear of new versions over ``WS /policy/ws`` or by polling
``GET /policy/version``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from ..envs.masks import MASK_KEY, NEXT_MASK_KEY
from .batch import ExtrasSpec, action_arrays

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["PolicyPublisher", "local_inference_refusal"]

_ACTIONS = (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)


def local_inference_refusal(agent: Agent) -> str | None:
    """Why clients cannot act locally for ``agent`` (None when they can). A recurrent policy
    (``per_env_decisions``) is served: its clients keep each episode's memory (issue 52)."""
    if agent.multiagent_layout is not None or agent.offline:
        return f"{agent.algorithm} does not learn from a single-agent env's steps"
    if not isinstance(agent.action_space, _ACTIONS) and agent.action_layout is None:
        return (
            "experience batches carry Discrete, Box, MultiDiscrete or MultiBinary actions, or Dict / Tuple "
            f"ones of those (docs/actions.md), not {agent.action_space}"
        )
    return None


class PolicyPublisher:
    """The published versions of one agent's policy (thread-safe)."""

    def __init__(self, agent: Agent, every: float) -> None:
        self.agent = agent
        self.every = every
        self.version = 0
        """The newest version (0: none published yet)."""
        self.weights = b""
        """The newest version's weights, safetensors bytes."""
        self.counters: dict[str, Any] = {}
        self.published_at = 0.0
        """When the newest version was published (``time.time()``)."""
        self.extras: ExtrasSpec | None = None
        self._lock = threading.Lock()
        self._updates: int | None = None
        self._nets: list[Any] = []  # the networks the newest version was taken from
        self._acting: Agent | None = None
        self._onnx: tuple[int, bytes] | None = None
        self._acting_outputs: list[str] | None = None  # the served ONNX's outputs beside the action, if an acting step

    def publish(self, force: bool = False) -> bool:
        """Publish a new version if the agent updated since the last one (or ``force``); True if one was."""
        updates = self.agent.num_updates
        # A seeded run rebuilds an untrained agent's networks when it begins (Agent.reseed), maybe after
        # the first version was published: new network objects are a new policy, as an update is.
        nets = list(self.agent.networks.values())
        rebuilt = len(nets) != len(self._nets) or any(a is not b for a, b in zip(nets, self._nets, strict=False))
        if not force and updates == self._updates and not rebuilt:
            return False
        from safetensors.torch import save

        tensors = self.agent.acting_weights()
        data = save(tensors)
        extras = self.extras if self.extras is not None else self._extras_spec(tensors)
        with self._lock:
            self.version += 1
            self.weights = data
            self._updates = updates
            self._nets = nets
            self.counters = {
                "num_timesteps": self.agent.num_timesteps,
                "total_timesteps": self.agent.total_timesteps,
            }
            self.published_at = time.time()
            self.extras = extras
        return True

    def ensure(self) -> None:
        """Publish the first version now if none was."""
        if self.version == 0:
            self.publish(force=True)

    def _acting_copy(self, tensors: dict[str, Any]) -> Agent:
        from ..agents.saving import acting_agent

        if self._acting is None:
            self._acting = acting_agent(self.agent.describe(), tensors)
        else:
            self._acting.load_networks(tensors)
        return self._acting

    def _extras_spec(self, tensors: dict[str, Any]) -> ExtrasSpec:
        """The extras of one decision (their per-step shapes and kinds), from an acting copy's decision."""
        copy = self._acting_copy(tensors)
        space = copy.observation_space
        space.seed(0)
        step = copy.decide(space.sample())
        self._acting_outputs = self._acting_step(copy, step.extras)
        return {
            key: (tuple(np.asarray(value).shape[1:]), np.asarray(value).dtype.kind)
            for key, value in step.extras.items()
            if key not in (MASK_KEY, NEXT_MASK_KEY)
        }

    @staticmethod
    def _acting_step(copy: Agent, extras: Mapping[str, Any]) -> list[str] | None:
        """The served ONNX's outputs beside the action when it is the acting step (``export_policy(...,
        critic=True)``: an on-policy policy, whose steps carry values and log-probabilities), else None."""
        if "values" not in extras or "log_probs" not in extras:
            return None
        from ..agents.export import acting_outputs

        try:
            return acting_outputs(copy)
        except (TypeError, ValueError, NotImplementedError):  # a policy without an export: the greedy actor alone
            return None

    def describe(self) -> dict[str, Any]:
        """``GET /policy``: the newest version, what rebuilds the agent, and the extras its steps carry."""
        with self._lock:
            return {
                "version": self.version,
                "agent": self.agent.describe(),
                "on_policy": self.agent.on_policy,
                # A recurrent policy's clients hold each episode's memory and send the state each step
                # used, among the extras (docs/serve.md); "memory" says where it goes in and out of the ONNX.
                "recurrent": self.agent.per_env_decisions,
                "memory": self._memory(),
                # An on-policy policy's served ONNX is its acting step: what to sample from, and what to send.
                "acting": self._acting_description(),
                "actions": {name: [list(shape), kind] for name, (shape, kind) in action_arrays(self.agent).items()},
                "extras": {key: [list(shape), kind] for key, (shape, kind) in (self.extras or {}).items()},
                "counters": dict(self.counters),
                "obs_shape": list(self.agent.obs_shape),
                "obs_dtype": np.dtype(self.agent.obs_dtype).name,
            }

    def _memory(self) -> dict[str, Any] | None:
        """A recurrent policy's state as a client in another language runs it (``GET /policy``'s
        ``memory``): the extra it travels in, one step's shape, and the names of the served ONNX's
        (``GET /policy.onnx``, exported with ``critic=True``) inputs and outputs; None for a policy
        without memory. Called with the lock held."""
        if not self.agent.per_env_decisions or self.extras is None:
            return None
        from ..agents import export

        key = next((k for k in ("lstm_states", "memory_states") if k in self.extras), None)
        if key is None:
            return None
        return {
            # The agent's own description, as GET /policy's "agent" holds it (no probing of the agent).
            "kind": str(self.agent.describe()["hyperparameters"].get("memory", "lstm")),
            "extra": f"extras/{key}",
            "shape": list(self.extras[key][0]),
            "onnx": {
                "state": export.ACTING_STATE,
                "next_state": export.NEXT_ACTING_STATE,
                "episode_start": export.EPISODE_START,
                "policy_output": export.POLICY_OUTPUT,
                "value": export.VALUE_OUTPUT,
            },
        }

    def _acting_description(self) -> dict[str, Any] | None:
        """How a client in another language acts for an on-policy policy (``GET /policy``'s ``acting``): the
        served ONNX's (``GET /policy.onnx``, exported with ``critic=True``) outputs to sample from
        (``policy_output``; ``log_std`` for a Gaussian) and to record (``value``), what each step's extras
        are, and the distribution to sample; None when the served ONNX is the greedy actor alone. Called
        with the lock held."""
        names = self._acting_outputs
        if names is None:
            return None
        from ..agents import export

        space = self.agent.action_space
        if self.agent.action_layout is not None:
            distribution = "composite"
        elif isinstance(space, spaces.Discrete):
            distribution = "categorical"
        elif isinstance(space, spaces.Box):
            distribution = "gaussian"
        elif isinstance(space, spaces.MultiDiscrete):
            distribution = "multi_categorical"
        else:
            distribution = "bernoulli"
        return {
            "distribution": distribution,
            "onnx": {name: name for name in names},
            "extras": {
                "extras/values": export.VALUE_OUTPUT,
                "extras/log_probs": "the log-probability of the sampled action under policy_output (also log_prob)",
            },
        }

    def newest(self) -> tuple[int, bytes, dict[str, Any], float]:
        """The newest version: its number, weights, counters and publication time."""
        with self._lock:
            return self.version, self.weights, dict(self.counters), self.published_at

    def onnx(self) -> tuple[int, bytes]:
        """The newest version's deterministic policy as ONNX bytes (exported once per version); for an
        on-policy policy (PPO, A2C, RecurrentPPO) its acting step with the critic (``export_policy(...,
        critic=True)``: the actor's raw output to sample from and the value beside the action; a recurrent
        policy's state explicit), which a client in another language runs to send each step's extras."""
        from safetensors.torch import load

        from ..agents.export import export_policy

        version, weights, _, _ = self.newest()
        cached = self._onnx
        if cached is not None and cached[0] == version:
            return cached
        with self._lock:
            copy = self._acting_copy(load(weights))
            masked = self.agent.supports_action_masks and isinstance(self.agent.action_space, spaces.Discrete)
            with tempfile.TemporaryDirectory(prefix="workbench-policy-") as folder:
                path = os.path.join(folder, "policy.onnx")
                export_policy(copy, path, action_mask=masked, critic=self._acting_outputs is not None)
                with open(path, "rb") as f:
                    self._onnx = (version, f.read())
        return self._onnx
