"""Export a trained agent's deterministic policy, to run where neither Python pickles nor this
library are available: ``agent.export("policy.onnx")``.

The exported graph maps a batch of observations to the env's actions, exactly as
``agent.act(obs, deterministic=True)`` does:

1. the observations cast to float32 (a ``uint8`` image Box is fed as ``uint8``, cast inside; the
   CNN encoder of image observations, and its scaling by 1/255, is part of the graph);
2. observation normalization with the running statistics frozen as they are now, computed in
   float64 and clipped as :class:`~workbench.normalization.ObservationNormalizer` does;
3. the deterministic head of the algorithm's family: the argmax of the logits / Q-values for a
   Discrete action space (PPO, A2C, DQN), the Gaussian mean clipped to the Box bounds (PPO, A2C,
   with or without gSDE), the argmax of each dimension (MultiDiscrete) or the positive logits
   (MultiBinary) for PPO and A2C, the tanh-squashed mean (SAC, gSDE too) or the deterministic actor (TD3,
   DDPG) scaled into the Box bounds.

A recurrent policy (RecurrentPPO) is exported as one step of its LSTM actor with the state explicit
(:class:`ExportedRecurrentPolicy`): inputs ``obs``, ``lstm_h``, ``lstm_c`` (``(1, batch, hidden)``)
and ``episode_start`` (``(batch,)`` float32, 1.0 zeroes that env's state first), outputs
``action``, ``next_lstm_h``, ``next_lstm_c``; the sidecar's ``recurrent`` section says how to loop.
A GRU or GTrXL memory (``memory="gru"``/``"gtrxl"``) has one state tensor instead
(:class:`ExportedMemoryPolicy`): input ``memory_state`` ``(batch, rows, width)``, output
``next_memory_state``; for the GTrXL it holds the window of cached layer inputs.
``action_mask=True`` adds a bool input ``action_mask`` (Discrete, MultiDiscrete): the action is
the best allowed one, as ``act(obs, deterministic=True, action_mask=...)`` chooses it.

``critic=True`` (an on-policy policy only) writes the step a local-inference client acts with, what a
served session's ``GET /policy.onnx`` serves for it: the actor and the value network together, outputs
``action``, ``policy_output`` (the actor's raw output: a Discrete space's logits, to sample from; a Box
space's Gaussian mean), ``value`` and, for a Box space, ``log_std``. For PPO and A2C
(:class:`ExportedFeedForwardActingPolicy`) the input is ``obs`` alone; for a recurrent policy
(:class:`ExportedActingPolicy`) their state is one input ``state`` ``(batch, 2 * rows, width)`` in the
layout of the step's extras (``lstm_states`` / ``memory_states``: the actor's rows, then the critic's)
beside ``episode_start``, and ``next_state`` the last output.

Beside the model, ``<path>.json`` (the *sidecar*) describes the spaces, the input and output
(names, dtypes, shapes), where each part of a Dict/Tuple observation goes in the flat input vector
and how it is encoded, what was baked in, and the versions that wrote it. The same JSON is stored
in the ONNX model's metadata under the key ``workbench``.

Both files are written to temporary names beside the model (``.NAME.tmp-*``) and renamed into place
when complete: a failed export (a full disk) leaves an earlier one as it was. An export replaces
only an earlier export (the model's ONNX metadata, the sidecar's ``format``, say so) unless
``overwrite=True``.

Format: ``.onnx`` (the legacy TorchScript-based exporter of ``torch.onnx``, opset 17, dynamic
batch axis; needs the ``onnx`` package: ``pip install 'rl-workbench[export]'``). ``torch.export``'s
``.pt2`` archives are not offered: they carry their example inputs as a ``torch.save`` pickle, and
nothing this library writes for others to load may need unpickling.

Each algorithm picks its deterministic head in its own file (``Agent.policy_head()``, from the heads of
``workbench.agents.heads``); this module wraps it and writes it, and never imports the algorithms
(``Agent.export`` imports it lazily).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import platform
import time
import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from .. import checkpoint
from .._version import __version__
from ..envs.core import describe_space, flat_observation_space
from ..envs.masks import mask_size, strip_mask_space
from ..files import replacing
from ..validation import ArgumentError

if TYPE_CHECKING:
    from .contract import Agent

__all__ = [
    "EXPORT_FORMATS",
    "SIDECAR_SUFFIX",
    "ExportedActingPolicy",
    "ExportedFeedForwardActingPolicy",
    "ExportedPolicy",
    "ExportedRecurrentPolicy",
    "acting_outputs",
    "export_policy",
    "observation_layout",
    "policy_module",
    "write_model",
]

EXPORT_FORMATS: dict[str, str] = {".onnx": "onnx"}
"""File suffix -> format of :func:`export_policy`."""
SIDECAR_SUFFIX = ".json"
"""The sidecar is the model's path with this appended: ``policy.onnx`` -> ``policy.onnx.json``."""
SIDECAR_FORMAT = "rl-workbench-policy"
SIDECAR_VERSION = 1
ONNX_OPSET = 17
INPUT_NAME, OUTPUT_NAME = "obs", "action"
MASK_NAME = "action_mask"


# -- the policy as one module ------------------------------------------------------------------


class _FrozenNormalizer(nn.Module):
    """``clip((obs - mean) / std, -clip, clip)`` in float64, then float32: the arithmetic of
    ``ObservationNormalizer.__call__`` with its statistics frozen."""

    def __init__(self, normalizer: Any) -> None:
        super().__init__()
        rms = normalizer.rms
        self.register_buffer("mean", torch.from_numpy(np.array(rms._mean, dtype=np.float64)))
        self.register_buffer("std", torch.from_numpy(np.array(rms.std(normalizer.epsilon), dtype=np.float64)))
        self.clip = float(normalizer.clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalized float32 observations."""
        return ((obs.double() - self.mean) / self.std).clamp(-self.clip, self.clip).float()


class _ExportedHead(nn.Module):
    """What every exported policy does around its networks: cast and normalize the observations going in,
    run the head (with the action mask where one is given) and give its actions the action space's shape."""

    def __init__(
        self, head: nn.Module, normalizer: nn.Module | None, action_shape: tuple[int, ...], description: str = ""
    ) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.head = head
        self.action_shape = tuple(action_shape)
        self.description = description  # how the head makes actions, for the sidecar

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """The observations as the networks read them: float32, normalized when the agent normalizes."""
        x = obs.float()
        return x if self.normalizer is None else self.normalizer(x)

    def _actions(self, x: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The head's actions for ``x``, reshaped to the action space's shape (a composite space's head returns
        one tensor per leaf, each already shaped)."""
        actions = self.head(x) if action_mask is None else self.head(x, action_mask)
        if isinstance(actions, tuple):
            return actions
        if self.action_shape and tuple(actions.shape[1:]) != self.action_shape:
            actions = actions.reshape(-1, *self.action_shape)
        return actions


class ExportedPolicy(_ExportedHead):
    """Raw observation batch -> env actions, deterministic: cast, frozen normalization, head,
    reshape to the action space's shape."""

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Actions for a batch of observations (``(batch, *obs_shape)``, the input's dtype); with
        ``action_mask`` (bool ``(batch, mask_size)``, True where allowed) among the allowed actions only."""
        return self._actions(self._features(obs), action_mask)


class _ExportedRecurrentHead(_ExportedHead):
    """What the recurrent deterministic steps share: the recurrent actor beside the head, which unrolls
    ``(T, B, ...)`` observations from its ``(B, ...)`` state and ``(T, B)`` episode starts."""

    def __init__(
        self,
        actor: nn.Module,
        head: nn.Module,
        normalizer: nn.Module | None,
        action_shape: tuple[int, ...],
        description: str = "",
    ) -> None:
        super().__init__(head, normalizer, action_shape, description)
        self.actor = actor


class ExportedRecurrentPolicy(_ExportedRecurrentHead):
    """A recurrent (LSTM) policy's deterministic step, its state explicit:
    ``(obs, lstm_h, lstm_c, episode_start) -> (action, next_lstm_h, next_lstm_c)``.

    ``lstm_h`` and ``lstm_c`` are the actor LSTM's state, ``(1, batch, hidden)`` (num_layers,
    batch, hidden, as ``torch.nn.LSTM`` holds it); ``episode_start`` is ``(batch,)`` float32, 1.0
    for an env whose episode starts at this observation: its state is zeroed before the step, as
    the agent's ``begin_episode`` zeroes it. Start from zeros, feed the returned state back."""

    # The actor is a RecurrentNetwork: (B, H) states.

    def forward(
        self,
        obs: torch.Tensor,
        lstm_h: torch.Tensor,
        lstm_c: torch.Tensor,
        episode_start: torch.Tensor,
        action_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Actions (one tensor per leaf for a composite space) and the next state for one step of a batch
        of envs (among the allowed actions only with ``action_mask``)."""
        x = self._features(obs)
        starts = episode_start.float().unsqueeze(0)
        out, h, c = self.actor(x.unsqueeze(0), lstm_h[0], lstm_c[0], starts)
        actions = self._actions(out[0], action_mask)
        leaves = actions if isinstance(actions, tuple) else (actions,)
        return (*leaves, h.unsqueeze(0), c.unsqueeze(0))


class ExportedMemoryPolicy(_ExportedRecurrentHead):
    """A recurrent policy whose memory state is one tensor (RecurrentPPO's GRU or GTrXL), one
    deterministic step: ``(obs, memory_state, episode_start) -> (action, next_memory_state)``.

    ``memory_state`` is ``(batch, rows, width)`` float32, one env's state per row of the batch
    (the GRU's hidden vector; the GTrXL's count of window steps in the episode, then its cached
    window of each layer's inputs); ``episode_start`` zeroes an env's state before the step, as
    ``begin_episode`` does. Start from zeros, feed the returned state back."""

    # The actor is a MemoryNetwork: (B, rows, width) states.

    @property
    def state_shape(self) -> tuple[int, int]:
        """``memory_state``'s shape past the batch: the actor's ``(rows, width)``."""
        rows, width = self.actor.state_shape
        return (int(rows), int(width))

    def forward(
        self,
        obs: torch.Tensor,
        memory_state: torch.Tensor,
        episode_start: torch.Tensor,
        action_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Actions (one tensor per leaf for a composite space) and the next state for one step of a
        batch of envs."""
        x = self._features(obs)
        starts = episode_start.float()
        # Zeroed where an episode starts, then one step with no start flagged: what acting does.
        state = memory_state * (1.0 - starts).view(-1, 1, 1)
        out, state = self.actor.unroll(x.unsqueeze(0), state, torch.zeros_like(starts).unsqueeze(0))
        actions = self._actions(out[0], action_mask)
        leaves = actions if isinstance(actions, tuple) else (actions,)
        return (*leaves, state)


class _ExportedActing(_ExportedHead):
    """What the acting steps (:class:`ExportedActingPolicy`, :class:`ExportedFeedForwardActingPolicy`) share:
    the critic beside the actor, a Gaussian's log std where there is one, and their outputs beside the action
    (``policy_output``, ``value``, then ``log_std`` for a Gaussian policy)."""

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        head: nn.Module,
        normalizer: nn.Module | None,
        action_shape: tuple[int, ...],
        description: str = "",
        log_std: nn.Module | None = None,
    ) -> None:
        super().__init__(head, normalizer, action_shape, description)
        self.actor = actor
        self.critic = critic
        self.log_std = log_std  # (batch, n) from the actor's input (feed-forward) or output (recurrent)

    def _acting_outputs(
        self, out: torch.Tensor, value: torch.Tensor, log_std_input: torch.Tensor, action_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, ...]:
        """The action leaves, the actor's raw output ``out``, the ``value`` ``(batch,)`` and the log std."""
        actions = self._actions(out, action_mask)
        leaves = actions if isinstance(actions, tuple) else (actions,)
        spread = () if self.log_std is None else (self.log_std(log_std_input),)
        return (*leaves, out, value, *spread)


class ExportedActingPolicy(_ExportedActing):
    """A recurrent policy's acting step with its value network, for a local-inference client (another
    language's, from ``GET /policy.onnx``): ``(obs, state, episode_start) -> (action, policy_output,
    value, [log_std,] next_state)``.

    ``state`` is ``(batch, 2 * rows, width)`` float32, one env's whole acting state per row of the batch in
    the layout of the step's extras (``lstm_states``: actor h, c, critic h, c; ``memory_states``: the
    actor's GRU or GTrXL rows, then the critic's), zeroed where ``episode_start`` is 1.0, as
    ``begin_episode`` zeroes it. ``action`` is the deterministic action; ``policy_output`` the actor's raw
    output (a Discrete space's logits: sample from their softmax to explore as the learner does; a Box
    space's Gaussian mean); ``value`` the critic's value ``(batch,)``; ``log_std`` (a Box space only) the
    Gaussian's log standard deviations ``(batch, n)``; ``next_state`` the state after the step, to feed back."""

    # The actor is a RecurrentNetwork or MemoryNetwork: both unroll (T, B, ...) from (B, rows, width).

    @property
    def rows(self) -> int:
        """The actor's state rows; the critic's follow them in ``state``."""
        return int(self.actor.state_shape[0])

    @property
    def state_shape(self) -> tuple[int, int]:
        """``state``'s shape past the batch: the actor's rows, then the critic's."""
        return (2 * self.rows, int(self.actor.state_shape[1]))

    def forward(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        episode_start: torch.Tensor,
        action_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Actions (one tensor per leaf for a composite space), the actor's output, the value (the log std)
        and the next state for one step of a batch of envs."""
        x = self._features(obs).unsqueeze(0)
        starts = episode_start.float()
        state = state * (1.0 - starts).view(-1, 1, 1)
        none = torch.zeros_like(starts).unsqueeze(0)
        out, actor_state = self.actor.unroll(x, state[:, : self.rows], none)
        value, critic_state = self.critic.unroll(x, state[:, self.rows :], none)
        outputs = self._acting_outputs(out[0], value[0, :, 0], out[0], action_mask)
        return (*outputs, torch.cat([actor_state, critic_state], dim=1))


class ExportedFeedForwardActingPolicy(_ExportedActing):
    """A feed-forward on-policy policy's acting step with its value network (PPO, A2C), for a local-inference
    client (another language's, from ``GET /policy.onnx``): ``obs -> (action, policy_output, value[,
    log_std])``, the actor run once for both the action and its raw output.

    ``action`` is the deterministic action; ``policy_output`` the actor's raw output (a Discrete space's
    logits: sample from their softmax to explore as the learner does, and send the sample's log-probability
    and ``value`` among the step's extras; a Box space's Gaussian mean); ``value`` the critic's value
    ``(batch,)``; ``log_std`` (a Box space only) the Gaussian's log standard deviations ``(batch, n)``:
    sample ``mean + exp(log_std) * noise`` (unclipped: the env clips), log-probability
    ``sum(-noise² / 2 - log_std - log(2π) / 2)``. gSDE's ``log_std`` depends on the observation."""

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Actions (one tensor per leaf for a composite space), the actor's output, the value (and the log
        std) for a batch of observations."""
        x = self._features(obs)
        return self._acting_outputs(self.actor(x), self.critic(x)[:, 0], x, action_mask)


STATE_INPUTS = ("lstm_h", "lstm_c")
STATE_OUTPUTS = ("next_lstm_h", "next_lstm_c")
MEMORY_INPUT = "memory_state"
MEMORY_OUTPUT = "next_memory_state"
EPISODE_START = "episode_start"
ACTING_STATE, NEXT_ACTING_STATE = "state", "next_state"
POLICY_OUTPUT, VALUE_OUTPUT, LOG_STD_OUTPUT = "policy_output", "value", "log_std"


def _input_dtype(agent: Agent) -> np.dtype:
    """The dtype the exported model takes: a Box's own dtype (e.g. uint8 images, cast inside),
    for everything flattened (Discrete one-hot, Dict, Tuple...) the flat dtype the agent reads
    (uint8 for a Dict of uint8 images, else float32)."""
    space = agent.observation_space
    if isinstance(space, spaces.Box) and space.dtype is not None and np.dtype(space.dtype) != np.dtype(np.bool_):
        return np.dtype(space.dtype)
    return np.dtype(flat_observation_space(space).dtype)


def _check_exportable(agent: Agent) -> None:
    if len(agent.obs_shape) > 1 and agent.encoder_description == "mlp":
        raise ValueError(
            f"{agent.algorithm} cannot export a policy over the observation space "
            f"{describe_space(agent.observation_space)}: its MLP takes a vector, and this space is not an image "
            "(uint8, 3 dimensions, bounds 0 and 255). Flatten it (gymnasium.wrappers.FlattenObservation)"
        )


def policy_module(
    agent: Agent, critic: bool = False
) -> (
    ExportedPolicy
    | ExportedRecurrentPolicy
    | ExportedMemoryPolicy
    | ExportedActingPolicy
    | ExportedFeedForwardActingPolicy
):
    """The deterministic policy of ``agent`` as a standalone torch module: observation batch of the
    input dtype (see the sidecar) -> env actions, normalization and action scaling baked in; for a
    recurrent agent (RecurrentPPO) an :class:`ExportedRecurrentPolicy`, whose LSTM state goes in
    and comes out (an :class:`ExportedMemoryPolicy` for a GRU or GTrXL memory); with ``critic=True``
    (an on-policy agent only) the step a local-inference client acts with: an :class:`ExportedActingPolicy`
    for a recurrent agent, an :class:`ExportedFeedForwardActingPolicy` for PPO and A2C.

    The module holds copies of the networks and of the normalization statistics as they are now;
    later training of the agent does not change it. It is on the CPU whatever the agent's device."""
    _check_exportable(agent)
    head = agent.policy_head()
    normalizer = None
    if agent.config.normalize_observations:
        normalizer = _FrozenNormalizer(agent.obs_normalizer)
    action_shape = () if agent.discrete or agent.action_layout is not None else tuple(agent.action_space.shape)
    if critic:
        if head.recurrent_actor is not None and head.recurrent_critic is not None:
            acting = ExportedActingPolicy(
                head.recurrent_actor,
                head.recurrent_critic,
                head.module,
                normalizer,
                action_shape,
                head.description,
                head.log_std,
            )
            return acting.eval().cpu()
        if head.actor is not None and head.critic is not None and head.acting_head is not None:
            step = ExportedFeedForwardActingPolicy(
                head.actor, head.critic, head.acting_head, normalizer, action_shape, head.description, head.log_std
            )
            return step.eval().cpu()
        raise TypeError(
            f"{agent.algorithm} exports no acting step with its critic (critic=True): that is for an on-policy "
            "policy (PPO, A2C, RecurrentPPO), whose local-inference clients send each step's value and "
            "log-probability; export with critic=False"
        )
    if head.recurrent_actor is not None and head.memory_state_shape is not None:
        memory = ExportedMemoryPolicy(head.recurrent_actor, head.module, normalizer, action_shape, head.description)
        if memory.state_shape != tuple(head.memory_state_shape):  # the file's inputs are sized by the actor
            raise ValueError(
                f"{agent.algorithm}'s policy_head() gives memory_state_shape={tuple(head.memory_state_shape)}, but "
                f"its recurrent actor's state is {memory.state_shape}: make the head report the actor's state_shape"
            )
        return memory.eval().cpu()
    if head.recurrent_actor is not None:
        module = ExportedRecurrentPolicy(head.recurrent_actor, head.module, normalizer, action_shape, head.description)
        return module.eval().cpu()
    return ExportedPolicy(head.module, normalizer, action_shape, head.description).eval().cpu()


def acting_outputs(agent: Agent) -> list[str] | None:
    """The outputs beside the action of the step ``export_policy(agent, ..., critic=True)`` writes
    (``policy_output``, ``value``, then ``log_std`` for a Gaussian policy), or None when it writes none: an
    on-policy agent's (PPO, A2C, RecurrentPPO), whose steps carry the values and log-probabilities a
    local-inference client sends, has one. (A recurrent step also has ``next_state``, not listed here.)"""
    head = agent.policy_head()
    if head.recurrent_actor is not None:
        ok = head.recurrent_critic is not None
    else:
        ok = head.actor is not None and head.critic is not None and head.acting_head is not None
    if not ok:
        return None
    return [POLICY_OUTPUT, VALUE_OUTPUT, *([LOG_STD_OUTPUT] if head.log_std is not None else [])]


# -- the sidecar -------------------------------------------------------------------------------


def observation_layout(space: spaces.Space) -> list[dict[str, Any]]:
    """Where each part of an observation of ``space`` goes in the flat input vector, and how it is
    encoded: the order of ``gymnasium.spaces.flatten`` (a Dict's keys in its own order, which
    gymnasium sorts; a Tuple's items in order), as ``{"path", "space", "offset", "size", "encoding"}``."""
    out: list[dict[str, Any]] = []

    def visit(s: spaces.Space, path: list[str | int]) -> None:
        if isinstance(s, spaces.Dict):
            for key, sub in s.spaces.items():
                visit(sub, [*path, key])
            return
        if isinstance(s, spaces.Tuple):
            for i, sub in enumerate(s.spaces):
                visit(sub, [*path, i])
            return
        if isinstance(s, spaces.Box):
            size, encoding = int(np.prod(s.shape)), "values, flattened in C (row-major) order, as float32"
        elif isinstance(s, spaces.Discrete):
            size, encoding = int(s.n), f"one-hot of (value - {int(s.start)})"
        elif isinstance(s, spaces.MultiBinary):
            size, encoding = int(np.prod(s.n)), "values, flattened in C order, as float32"
        elif isinstance(s, spaces.MultiDiscrete):
            size = int(np.sum(s.nvec))
            encoding = "one one-hot of (value_i - start_i) per component, concatenated in C order"
        else:
            raise ValueError(f"cannot describe the layout of an observation space {describe_space(s)}")
        offset = out[-1]["offset"] + out[-1]["size"] if out else 0
        out.append({"path": path, "space": describe_space(s), "offset": offset, "size": size, "encoding": encoding})

    visit(strip_mask_space(space), [])  # a Dict's action mask is not part of the input
    return out


def _versions(fmt: str) -> dict[str, str]:
    versions = {
        "workbench": __version__,
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    if fmt == "onnx":
        import onnx

        versions["onnx"] = onnx.__version__
        versions["onnx_opset"] = str(ONNX_OPSET)
    return versions


def _sidecar(
    agent: Agent,
    path: str,
    fmt: str,
    action_head: str,
    action_mask: bool = False,
    recurrent: bool = False,
    memory_state_shape: tuple[int, int] | None = None,
    acting_state_shape: tuple[int, int] | None = None,
    acting_log_std: bool | None = None,
) -> dict[str, Any]:
    obs_space = agent.observation_space
    in_dtype = _input_dtype(agent)
    flat = not isinstance(obs_space, spaces.Box)
    if flat:
        preparation = (
            f"gymnasium.spaces.flatten(observation_space, obs) as {in_dtype.name}, one row per observation; "
            "observation_layout says where each part goes and how it is encoded"
        )
    else:
        preparation = f"the raw observations as {in_dtype.name}, stacked along a first (batch) axis"
    norm = None
    if agent.config.normalize_observations:
        n = agent.obs_normalizer
        norm = {"clip": float(n.clip), "epsilon": float(n.epsilon), "statistics_at_step": int(agent.num_timesteps)}
    outputs = None
    if agent.action_layout is not None:  # one output per leaf, named by its path
        out_dtype, out_shape, outputs = "", [], composite_outputs(agent)
    elif agent.discrete:
        out_dtype, out_shape = "int64", ["batch"]
    elif isinstance(agent.action_space, spaces.MultiDiscrete | spaces.MultiBinary):
        out_dtype, out_shape = "int64", ["batch", *map(int, agent.action_space.shape)]
    else:
        out_dtype, out_shape = "float32", ["batch", *map(int, agent.action_space.shape)]
    return {
        "format": SIDECAR_FORMAT,
        "format_version": SIDECAR_VERSION,
        "model": os.path.basename(path),
        "model_format": fmt,
        "algorithm": agent.algorithm,
        "deterministic": True,
        "num_timesteps": int(agent.num_timesteps),
        "input": {"name": INPUT_NAME, "dtype": in_dtype.name, "shape": ["batch", *map(int, agent.obs_shape)]},
        "output": {"name": OUTPUT_NAME, "dtype": out_dtype, "shape": out_shape} if outputs is None else None,
        **({"outputs": outputs} if outputs is not None else {}),
        "observation_space": checkpoint.space_to_json(obs_space),
        "action_space": checkpoint.space_to_json(agent.action_space),
        "observation_preparation": preparation,
        "observation_layout": observation_layout(obs_space),
        "baked_in": {"observation_normalization": norm, "action": action_head},
        "action_mask": _mask_sidecar(agent) if action_mask else None,
        **(
            {"recurrent": _recurrent_sidecar(agent, memory_state_shape)} if recurrent and not acting_state_shape else {}
        ),
        **(
            {"recurrent": _acting_sidecar(agent, acting_state_shape, bool(acting_log_std))}
            if acting_state_shape
            else {}
        ),
        **({"acting": _acting_step_sidecar(bool(acting_log_std))} if acting_log_std is not None else {}),
        "versions": _versions(fmt),
    }


def composite_outputs(agent: Agent) -> list[dict[str, Any]]:
    """A composite action space's outputs, one per leaf in the layout's order: its name (the leaf's path in
    the space, ``"kind"``, ``"1/shoot"``), dtype and shape (docs/actions.md shows how to rebuild the action)."""
    assert agent.action_layout is not None
    out = []
    for leaf in agent.action_layout.leaves:
        dtype = "float32" if leaf.kind == "box" else "int64"
        shape = ["batch"] if leaf.kind == "discrete" else ["batch", *map(int, leaf.space.shape or ())]
        out.append({"name": leaf.path, "dtype": dtype, "shape": shape, "space": checkpoint.space_to_json(leaf.space)})
    return out


def _mask_sidecar(agent: Agent) -> dict[str, Any]:
    """The optional action-mask input: its name, dtype, shape and meaning."""
    return {
        "name": MASK_NAME,
        "dtype": "bool",
        "shape": ["batch", int(mask_size(agent.action_space))],  # type: ignore[arg-type]
        "meaning": "True where an action is allowed (MultiDiscrete: the dimensions' masks concatenated, as "
        "workbench.envs.masks lays them out); the action is the best allowed one; every row allows at least one "
        "action (per dimension)",
    }


def _episode_start_sidecar() -> dict[str, Any]:
    """The ``episode_start`` input every recurrent export takes, as the sidecar describes it."""
    return {
        "name": EPISODE_START,
        "dtype": "float32",
        "shape": ["batch"],
        "meaning": "1.0 for an env whose episode starts with this observation (its state is zeroed "
        "before the step), else 0.0",
    }


def _recurrent_sidecar(agent: Agent, memory_state_shape: tuple[int, int] | None = None) -> dict[str, Any]:
    """The recurrent state's inputs and outputs of a recurrent policy, and how to loop over them: the
    LSTM's ``h`` and ``c``, or the one ``memory_state`` of a GRU or GTrXL memory."""
    names: tuple[tuple[str, ...], tuple[str, ...]]
    if memory_state_shape is None:
        shape: list[Any] = [1, "batch", int(agent.config.lstm_hidden_size)]
        names = STATE_INPUTS, STATE_OUTPUTS
    else:
        shape = ["batch", *map(int, memory_state_shape)]
        names = (MEMORY_INPUT,), (MEMORY_OUTPUT,)
    feeds = ", ".join(f"{out} -> {name}" for out, name in zip(names[1], names[0], strict=True))
    return {
        "memory": "lstm" if memory_state_shape is None else str(agent.config.memory),
        "state_inputs": [{"name": name, "dtype": "float32", "shape": shape} for name in names[0]],
        "state_outputs": [
            {"name": out, "dtype": "float32", "shape": shape, "feeds": name}
            for out, name in zip(names[1], names[0], strict=True)
        ],
        "episode_start": _episode_start_sidecar(),
        "initial_state": "zeros",
        "loop": (
            "state inputs start as zeros of their shape; each step feeds obs, the state and episode_start "
            "(1.0 on an episode's first observation), and the next step's state inputs are this step's "
            f"state outputs ({feeds}); one row per env, envs independent"
        ),
    }


def _acting_sidecar(agent: Agent, state_shape: tuple[int, int], log_std: bool = False) -> dict[str, Any]:
    """The acting export's state (``critic=True``): one ``state`` in the layout of the step's extras, and
    the outputs beside the action that a local-inference client records (``policy_output``, ``value``)."""
    extra = "lstm_states" if str(agent.config.memory) == "lstm" else "memory_states"
    shape: list[Any] = ["batch", *map(int, state_shape)]
    return {
        "memory": str(agent.config.memory),
        "extras_key": extra,
        "state_inputs": [{"name": ACTING_STATE, "dtype": "float32", "shape": shape}],
        "state_outputs": [{"name": NEXT_ACTING_STATE, "dtype": "float32", "shape": shape, "feeds": ACTING_STATE}],
        "episode_start": _episode_start_sidecar(),
        "initial_state": "zeros",
        "state_layout": f"one env's acting state, as the step's extras/{extra} holds it: the actor's "
        f"{state_shape[0] // 2} rows, then the critic's (the LSTM: h, c, h, c)",
        "other_outputs": _acting_outputs_sidecar(log_std),
        "loop": (
            f"{ACTING_STATE} starts as zeros of its shape; each step feeds obs, {ACTING_STATE} and episode_start "
            f"(1.0 on an episode's first observation), records {ACTING_STATE} as the state the step used, and "
            f"feeds {NEXT_ACTING_STATE} as the next step's {ACTING_STATE}; one row per env, envs independent"
        ),
    }


def _acting_outputs_sidecar(log_std: bool) -> list[dict[str, Any]]:
    """The acting step's outputs beside the action (``critic=True``), which a local-inference client
    samples from and records."""
    outputs: list[dict[str, Any]] = [
        {
            "name": POLICY_OUTPUT,
            "dtype": "float32",
            "shape": ["batch", "n"],
            "meaning": "the actor's raw output: a Discrete space's logits (sample from their softmax to "
            "explore as the learner does), a Box space's Gaussian mean",
        },
        {"name": VALUE_OUTPUT, "dtype": "float32", "shape": ["batch"], "meaning": "the critic's value of obs"},
    ]
    if log_std:
        outputs.append(
            {
                "name": LOG_STD_OUTPUT,
                "dtype": "float32",
                "shape": ["batch", "n"],
                "meaning": "the Gaussian policy's log standard deviations (a Box space; a composite space's "
                "Box elements in the layout's order)",
            }
        )
    return outputs


def _acting_step_sidecar(log_std: bool) -> dict[str, Any]:
    """The acting step's section (``critic=True``): its outputs beside the action, how to sample from them,
    and the extras a step of an experience batch carries."""
    return {
        "other_outputs": _acting_outputs_sidecar(log_std),
        "sampling": (
            "Discrete: an action drawn from softmax(policy_output), its log-probability "
            "log_softmax(policy_output)[action]; Box: policy_output + exp(log_std) * noise, noise ~ N(0, 1) "
            "per element, unclipped, log-probability sum(-noise^2 / 2 - log_std - log(2 pi) / 2)"
        ),
        "extras": {
            "values": f"the step's {VALUE_OUTPUT}",
            "log_probs": "the log-probability of the sampled action (also the batch's log_prob)",
        },
    }


# -- writing -----------------------------------------------------------------------------------


def _format_of(path: str, format: str | None) -> str:
    suffix = os.path.splitext(path)[1].lower()
    if format is None:
        if suffix not in EXPORT_FORMATS:
            raise ValueError(
                f"cannot tell the export format from {path!r}: name the file with one of "
                f"{', '.join(EXPORT_FORMATS)} (ONNX), e.g. agent.export('policy.onnx')"
            )
        return EXPORT_FORMATS[suffix]
    known = {f: f for f in EXPORT_FORMATS.values()}
    fmt = known.get(format.lower().lstrip(".")) if isinstance(format, str) else None
    if fmt is None:
        shown = repr(format) if isinstance(format, str) else f"{format!r} (a {type(format).__name__})"
        raise ArgumentError(
            f"unknown export format {shown}: format= must be one of {', '.join(map(repr, known))} or None (the "
            f"format taken from the file's suffix). Pass format='onnx', or leave format out and name the file "
            f"{' or '.join(EXPORT_FORMATS)}"
        )
    return fmt


def _check_flags(action_mask: Any, overwrite: Any) -> None:
    for name, value in (("action_mask", action_mask), ("overwrite", overwrite)):
        if not isinstance(value, bool):
            raise ArgumentError(
                f"export got {name}={value!r} (a {type(value).__name__}): {name} must be True or False. Pass "
                f"such a value, or leave {name} out for its default (False)."
            )


# -- what an export may replace ------------------------------------------------------------------

_MAX_MODEL_BYTES = 2**31  # protobuf's limit: a larger file is no ONNX model this library wrote


def _is_our_sidecar(path: str) -> bool:
    """Whether ``path`` is a regular file holding a sidecar this module wrote."""
    try:
        if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > 64 * 2**20:
            return False
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") == SIDECAR_FORMAT


def _is_our_model(path: str) -> bool:
    """Whether ``path`` is a regular file holding an ONNX model this module wrote (its metadata
    carries the sidecar under the key ``workbench``)."""
    if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > _MAX_MODEL_BYTES:
        return False
    try:
        import onnx

        model = onnx.load(path, load_external_data=False)
    except Exception:  # not a protobuf, not ONNX: not ours either way
        return False
    for entry in model.metadata_props:
        if entry.key == "workbench":
            try:
                meta = json.loads(entry.value)
            except ValueError:
                return False
            return isinstance(meta, dict) and meta.get("format") == SIDECAR_FORMAT
    return False


def _check_replaceable(path: str, overwrite: bool) -> None:
    """Refuse to replace a model path or its sidecar that holds something other than an earlier
    export, unless ``overwrite``; a directory is never replaced."""
    sidecar = path + SIDECAR_SUFFIX
    for target, label in ((path, "the model path"), (sidecar, "the sidecar path")):
        if os.path.isdir(target) and not os.path.islink(target):
            raise IsADirectoryError(
                f"{target}: {label} of this export is a directory; choose another file name for the export"
            )
    if overwrite:
        return
    for target, ours, what in (
        (path, _is_our_model, "an ONNX model written by agent.export"),
        (sidecar, _is_our_sidecar, "a sidecar written by agent.export"),
    ):
        if os.path.lexists(target) and not ours(target):
            kind = "a symbolic link" if os.path.islink(target) else f"a file that is not {what}"
            raise FileExistsError(
                f"{target}: exists and is {kind}; export() replaces only an earlier export (the model and its "
                f"{SIDECAR_SUFFIX} sidecar). Choose another path, or pass overwrite=True (workbench export "
                "--overwrite) to replace it"
            )


def _check_maskable(agent: Agent) -> None:
    if not agent.supports_action_masks or mask_size(agent.action_space) is None:
        raise TypeError(
            f"{agent.algorithm} cannot export an action_mask input for the action space "
            f"{describe_space(agent.action_space)}: masks apply to Discrete and MultiDiscrete actions of the "
            "agents that take them (PPO, A2C, RecurrentPPO, the DQN family); export with action_mask=False"
        )


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ImportError(
            "exporting to ONNX needs the onnx package: pip install 'rl-workbench[export]' "
            "(installs onnx and onnxruntime; or pip install onnx)"
        ) from None


def _remove_leftovers(path: str) -> None:
    """Remove what killed exports to ``path`` left: ``.NAME.tmp-*`` files beside it, untouched for
    an hour (a younger one may be another export to the same path, still writing)."""
    folder, base = os.path.split(os.path.abspath(path))
    for stale in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(base)}.tmp-*")):
        with contextlib.suppress(OSError):
            if time.time() - os.lstat(stale).st_mtime > 3600:
                os.unlink(stale)


def export_policy(
    agent: Agent,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    action_mask: bool = False,
    overwrite: bool = False,
    critic: bool = False,
) -> str:
    """Write ``agent``'s deterministic policy to ``path`` and its sidecar to ``path + ".json"``;
    returns the model's path. See the module docstring for what the files hold.

    ``format`` is taken from the suffix (``.onnx``) unless given (``"onnx"``). ``action_mask=True``
    (Discrete and MultiDiscrete actions of an agent that takes masks) adds an input ``action_mask``
    (bool, ``(batch, mask_size)``, True where allowed): the action is then the best allowed one, as
    ``agent.act(obs, deterministic=True, action_mask=mask)`` chooses it. ``critic=True`` (an on-policy
    policy only: PPO, A2C, RecurrentPPO) writes the acting step of a local-inference client instead
    (:class:`ExportedFeedForwardActingPolicy`, :class:`ExportedActingPolicy` with the state in the extras'
    layout: the actor's output, the value and a Gaussian's log std beside the action).

    Both files are written to temporary names beside ``path`` and renamed into place only once
    complete, so a failed export (a full disk) leaves an earlier export as it was. ``path`` and its
    sidecar may replace only an earlier export unless ``overwrite=True``.

    Raises ``ValueError`` for an unknown suffix or format (an ``ArgumentError``, also a
    ``TypeError``, for a ``format`` that is not a string), ``TypeError`` for an agent of no known
    family or a mask it cannot take, ``FileExistsError`` for a file that is not an export,
    ``ImportError`` naming the extra to install when onnx is missing, the ``OSError`` of a failed
    write.
    """
    path = os.fspath(path)
    fmt = _format_of(path, format)
    _check_flags(action_mask, overwrite)
    if not isinstance(critic, bool):
        raise ArgumentError(f"export got critic={critic!r}: critic must be True or False")
    if action_mask:
        _check_maskable(agent)
    _require_onnx()
    _check_replaceable(path, overwrite)
    module = policy_module(agent, critic=critic)
    in_dtype = _input_dtype(agent)
    obs = torch.from_numpy(np.zeros((2, *agent.obs_shape), dtype=in_dtype))
    recurrent = isinstance(module, ExportedRecurrentPolicy | ExportedMemoryPolicy | ExportedActingPolicy)
    memory_shape = module.state_shape if isinstance(module, ExportedMemoryPolicy) else None
    acting_shape = module.state_shape if isinstance(module, ExportedActingPolicy) else None
    acting_log_std = module.log_std is not None if isinstance(module, _ExportedActing) else None
    sidecar = _sidecar(
        agent, path, fmt, module.description, action_mask, recurrent, memory_shape, acting_shape, acting_log_std
    )
    spread = [LOG_STD_OUTPUT] if acting_log_std else []
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    batch = {0: "batch"}
    example: tuple[torch.Tensor, ...]
    if acting_shape is not None:
        example = (obs, torch.zeros(2, *acting_shape), torch.zeros(2))
        leaves = [OUTPUT_NAME] if agent.action_layout is None else agent.action_layout.paths
        inputs = [INPUT_NAME, ACTING_STATE, EPISODE_START]
        outputs = [*leaves, POLICY_OUTPUT, VALUE_OUTPUT, *spread, NEXT_ACTING_STATE]
        axes = {name: batch for name in (*inputs, *outputs)}
    elif acting_log_std is not None:
        leaves = [OUTPUT_NAME] if agent.action_layout is None else agent.action_layout.paths
        example, inputs, outputs = (obs,), [INPUT_NAME], [*leaves, POLICY_OUTPUT, VALUE_OUTPUT, *spread]
        axes = {name: batch for name in (*inputs, *outputs)}
    elif memory_shape is not None:
        example = (obs, torch.zeros(2, *memory_shape), torch.zeros(2))
        leaves = [OUTPUT_NAME] if agent.action_layout is None else agent.action_layout.paths
        inputs, outputs = [INPUT_NAME, MEMORY_INPUT, EPISODE_START], [*leaves, MEMORY_OUTPUT]
        axes = {name: batch for name in (*inputs, *outputs)}
    elif recurrent:
        state = torch.zeros(1, 2, int(agent.config.lstm_hidden_size))
        example = (obs, state, state.clone(), torch.zeros(2))
        leaves = [OUTPUT_NAME] if agent.action_layout is None else agent.action_layout.paths
        inputs, outputs = [INPUT_NAME, *STATE_INPUTS, EPISODE_START], [*leaves, *STATE_OUTPUTS]
        axes = {name: ({1: "batch"} if "lstm" in name else batch) for name in (*inputs, *outputs)}
    else:
        leaves = [OUTPUT_NAME] if agent.action_layout is None else agent.action_layout.paths
        example, inputs, outputs = (obs,), [INPUT_NAME], list(leaves)
        axes = {INPUT_NAME: batch, **{name: batch for name in leaves}}
    if action_mask:
        example = (*example, torch.ones(2, int(mask_size(agent.action_space)), dtype=torch.bool))  # type: ignore[arg-type]
        inputs.append(MASK_NAME)
        axes[MASK_NAME] = batch
    write_model(module, example, path, sidecar, inputs, outputs, axes)
    return path


def write_model(
    module: nn.Module,
    example: tuple[torch.Tensor, ...],
    path: str,
    sidecar: dict[str, Any],
    inputs: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
) -> None:
    """Write ``module`` as ONNX to ``path`` and ``sidecar`` beside it, through temporary files renamed
    into place (the model last); what :func:`export_policy` and the multi-agent per-policy export
    (``workbench.agents.multiagent.export_policies``) share."""
    import onnx

    _remove_leftovers(path)
    _remove_leftovers(path + SIDECAR_SUFFIX)
    # The callers checked what the two paths may replace (_check_replaceable, with their overwrite=);
    # workbench.files writes both through new temporary files and renames them in, never following a link.
    # The model last (the inner block ends first): until it is in place, an earlier export's model still loads.
    with (
        replacing(path, owner="export()", overwrite=True) as tmp_model,
        replacing(path + SIDECAR_SUFFIX, owner="export()", overwrite=True) as tmp_sidecar,
    ):
        with warnings.catch_warnings():
            # torch >= 2.9 warns that the TorchScript-based exporter is the legacy one; it is the one that
            # needs neither onnxscript nor a network, and it handles this small graph exactly.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                example,
                tmp_model,
                dynamo=False,
                opset_version=ONNX_OPSET,
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=axes,
            )
        model = onnx.load(tmp_model)
        onnx.checker.check_model(model)
        model.doc_string = f"rl-workbench {sidecar['algorithm']} deterministic policy"
        entry = model.metadata_props.add()
        entry.key, entry.value = "workbench", json.dumps(sidecar)
        onnx.save(model, tmp_model)
        with open(tmp_sidecar, "w", encoding="utf-8") as f:
            json.dump(sidecar, f, indent=2)
            f.write("\n")
