"""The agent interface every algorithm speaks, and what all agents share.

One loop (``workbench.loop``) drives every agent through four verbs:

* ``decide(obs, deterministic=False) -> Step(actions, extras)`` for a batch (``act`` returns the
  actions alone, for one observation or a batch);
* ``observe(transitions)`` with a :class:`Transitions` batch, one row per env, carrying the
  ``extras`` of the decision back: everything ``observe`` needs arrives as its argument;
* ``ready() -> bool``: is there enough new data to learn?
* ``update() -> dict[str, float]``: learn, and return metrics that become signals.

This module also holds what every agent needs around those verbs: building from an env or its
spaces, checking the spaces, hyperparameters as a dataclass with clear errors, private random
generators (no global seeding), the training-progress clock for schedules, the agent's declared
state (``state()`` / ``restore()``, used by checkpoints and by Ray's weight sync), and ``play``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import os
import time
import warnings
from typing import Any, ClassVar, Literal, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from .. import checkpoint
from ..devices import DeviceChoice, choose_device, parse_device, synchronize, to_device, uncompile
from ..envs.core import EnvSource, as_env_source, describe_space, flat_observation_space, observation_flattener
from ..envs.masks import MASK_KEY, check_masks, mask_size, strip_mask_space
from ..loop import NO_EXTRAS, Step, Transitions, play_episode
from ..normalization import ObservationNormalizer, RewardNormalizer
from ..validation import (
    any_of,
    check_arguments,
    check_value,
    checked,
    choice,
    flag,
    integer,
    is_live,
    optional,
    validate_config,
)
from .encoders import (
    describe_encoder,
    encoder_choice,
    encoder_path,
    is_image_space,
    json_object,
    make_encoder,
    with_encoder,
)
from .fairlock import FairRLock

__all__ = [
    "AGENTS",
    "MULTI_AGENTS",
    "OFFLINE_AGENTS",
    "Agent",
    "AgentConfig",
    "AgentState",
    "EpisodeReturns",
    "Step",
    "Transitions",
    "register",
]

AGENTS: dict[str, type[Agent]] = {}
"""Every agent class that trains on an env, by its lower-case name (``"dqn"``, ``"ppo"``...), filled by
:func:`register`."""
OFFLINE_AGENTS: dict[str, type[Agent]] = {}
"""The agents that learn from a dataset instead (``"bc"``, ``"bcq"``, ``"cql"``, ``"iql"``); ``wb.load``
finds saved agents in every registry."""
MULTI_AGENTS: dict[str, type[Agent]] = {}
"""The agents made for a PettingZoo ``ParallelEnv`` only (``"ippo"``, ``"mappo"``): apart from
:data:`AGENTS`, whose agents each fit a single-agent env (and the lists of agents that fit a space)."""

_SEED = optional(integer(min=0))
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
"""The ``torch.compile`` modes ``compile=`` takes by name (True is "default")."""
CompileMode = Literal["default", "reduce-overhead", "max-autotune"]
PRECISIONS = ("fp32", "bf16", "fp16")
"""What ``precision=`` takes."""
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
_PLAY_CHECKS = {
    "episodes": integer(min=1),
    "render": optional(choice("rgb_array")),
    "deterministic": flag(),
    "seed": _SEED,
    "max_steps": optional(integer(min=1)),
    "viewer": flag(),
}


@dataclasses.dataclass
class AgentConfig:
    """Hyperparameters every agent has; each agent's ``Config`` dataclass extends this one."""

    normalize_observations: bool = checked(False, flag())
    """Feed the networks observations standardized by running mean/std (saved, frozen in play)."""
    normalize_rewards: bool = checked(False, flag())
    """Scale rewards by the running std of the discounted return (SB3 VecNormalize)."""
    encoder: str | type = checked("auto", encoder_choice())
    """What turns observations into features: "auto" (from the space: a CNN for images, one encoder per
    Dict key, the MLP alone for vectors), "nature", "small", "flat", or your torch.nn.Module class,
    built as ``cls(observation_space, **encoder_kwargs)`` (see workbench.agents.encoders)."""
    encoder_kwargs: dict | None = checked(None, optional(json_object()))
    """Keyword arguments of the encoder (JSON values: they are saved with the run)."""
    fast: str = checked("auto", choice("auto", "off"))
    """"auto": written-out passes of plain network bodies and fused optimizer steps where they apply
    (``workbench.agents.kernels``; the losses stay the torch ones, and only on the CPU, never with
    ``compile`` or a lower ``precision``); "off": the torch modules and optimizers called as they are."""
    compile: bool | CompileMode = checked(False, any_of(flag(), choice(*COMPILE_MODES)))
    """True (or a ``torch.compile`` mode: "default", "reduce-overhead" for CUDA graphs where shapes are
    static, "max-autotune"): the networks run through ``torch.compile`` in updates and acting; the
    compile time is reported as the ``compile_time`` signal; a network that fails to compile runs
    eagerly, with a warning. False (the default): eager PyTorch. See docs/devices.md."""
    precision: str = checked("fp32", choice(*PRECISIONS))
    """"fp32" (the default); "bf16" (autocast, CPU or GPU) or "fp16" (autocast with a gradient
    scaler, GPU only) for the updates of agents with a CNN encoder (image observations)."""


def register(cls: type[Agent]) -> type[Agent]:
    """Class decorator adding an agent to :data:`AGENTS` (used by the CLI, presets and tests).

    A ``Config`` that does not extend :class:`AgentConfig` gets its fields added here, so every
    registered agent takes ``normalize_observations=`` and ``normalize_rewards=``. The config's
    docstring gets the list of its fields that may change mid-run (declared ``live=True``).
    """
    if not issubclass(cls.Config, AgentConfig):
        cls.Config = dataclasses.make_dataclass(
            cls.Config.__name__, [], bases=(cls.Config, AgentConfig), namespace={"__doc__": cls.Config.__doc__}
        )
    live = [f.name for f in dataclasses.fields(cls.Config) if is_live(cls.Config, f.name)]
    if live and "Live (" not in (cls.Config.__doc__ or ""):
        cls.Config.__doc__ = (cls.Config.__doc__ or "").rstrip() + (
            f"\n\n    Live (``session.set`` changes them mid-run, from the next update): {', '.join(live)}.\n"
        )
    if getattr(cls, "offline", False):
        registry = OFFLINE_AGENTS
    elif getattr(cls, "multi_agent_only", False):
        registry = MULTI_AGENTS
    else:
        registry = AGENTS
    registry[cls.__name__.lower()] = cls
    return cls


class AgentState(NamedTuple):
    """Everything an agent saves, as it declares it: see :meth:`Agent.state`."""

    tensors: dict[str, torch.Tensor]
    """Networks (``net/<name>/<key>``), optimizer moments (``optim/<name>/<param>/<key>``) and the
    torch generator (``rng/torch``)."""
    data: dict[str, Any]
    """JSON-ready: ``counters``, ``optimizers`` (their settings), ``agent_state`` (schedule
    positions and other algorithm state) and ``rng`` (the numpy generator)."""


def _has_image(space: spaces.Space) -> bool:
    if isinstance(space, spaces.Dict):
        return any(_has_image(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(_has_image(s) for s in space.spaces)
    return is_image_space(space)


class EpisodeReturns(list):
    """The list of episode returns from :meth:`Agent.play`, with ``lengths`` and (when rendered)
    ``frames``: one list of RGB arrays per episode."""

    def __init__(self, returns: list[float], lengths: list[int], frames: list[list[np.ndarray]] | None):
        super().__init__(returns)
        self.lengths = lengths
        self.frames = frames


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


def _agents_for(action_space: spaces.Space) -> list[str]:
    return sorted(cls.__name__ for cls in AGENTS.values() if isinstance(action_space, cls.action_spaces))


class ActionMaskError(TypeError, ValueError):
    """An action mask given to an agent or action space that takes none (a ``TypeError`` for the
    agent, a ``ValueError`` for the space: either ``except`` catches it)."""


def mask_refusal(algorithm: str, action_space: spaces.Space) -> ActionMaskError:
    """The one refusal of an action mask that ``algorithm`` cannot apply in ``action_space``, naming
    the agents that take masks there (or, for a space no mask fits, such as MultiBinary, the spaces
    and agents that take them)."""

    def takers(space: spaces.Space) -> str:
        names = sorted(
            c.__name__ for c in AGENTS.values() if c.supports_action_masks and isinstance(space, c.action_spaces)
        )
        return ", ".join(names) or "none of the built-in agents"

    if mask_size(action_space) is None:
        return ActionMaskError(
            f"{algorithm} does not take action masks in the action space {describe_space(action_space)}: "
            f"action masks need a Discrete or MultiDiscrete action space (agents that take them: Discrete: "
            f"{takers(spaces.Discrete(2))}; MultiDiscrete: {takers(spaces.MultiDiscrete([2]))}). Leave the mask "
            "out, or make the forbidden choices part of a Discrete or MultiDiscrete action space"
        )
    return ActionMaskError(
        f"{algorithm} does not take action masks: agents that take them in the action space "
        f"{describe_space(action_space)}: {takers(action_space)}"
    )


class Agent:
    """Base class of every algorithm. Subclasses set ``Config``, ``action_spaces`` and
    ``network_names``, and implement ``_build``, ``_act`` (or ``_decide`` when a step has extras),
    ``_observe``, ``ready`` and ``_update``.

    ``observe()`` and ``update()`` are template methods: the public ones normalize, take the lock and
    advance the clock, then call ``_observe()`` / ``_update()``. To change an algorithm, subclass it and
    override ``_observe``/``_update`` (calling ``super()._update()`` where it helps) or its loss; a
    subclass overriding the public ``observe``/``update`` gets a warning when its class is made, and
    must call ``super().observe(...)`` / ``super().update()`` for normalization, lock and clock to run.

    Build one from an env (instance, registered id or zero-argument factory) or from its spaces,
    with keyword hyperparameters that override the ``Config`` defaults::

        agent = wb.PPO("CartPole-v1", n_steps=64)
        agent = wb.DQN(observation_space=obs_space, action_space=act_space, seed=1)

    The env is only inspected for its spaces: nothing is reset or stepped here.
    """

    Config: ClassVar[type]
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Box)
    network_names: ClassVar[tuple[str, ...]] = ()
    """The attributes holding the agent's torch modules: what it saves and sends to workers."""
    optimizer_names: ClassVar[tuple[str, ...]] = ("optimizer",)
    """The attributes holding its optimizers (saved with their moments)."""
    supports_action_masks: ClassVar[bool] = False
    """True when ``decide``/``act`` honour ``action_mask=`` (``_decide``/``_act`` take ``mask``)."""
    on_policy: ClassVar[bool] = False
    """True when it learns only from data of its current weights (workers then collect whole
    rollouts with the newest weights); False when it learns from a replay memory."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # observe() and update() are template methods: an algorithm writes _observe() and _update().
        # A subclass that overrides the public name still works when it calls super() (the base's
        # normalization, lock and clock then run there); one that replaces them outright skips them,
        # so it is told once, when the class is made, what to override instead.
        for name in ("observe", "update"):
            if name in cls.__dict__ and not getattr(cls.__dict__[name], "_template_ok", False):
                warnings.warn(
                    f"{cls.__qualname__} overrides {name}(): Agent.{name}() "
                    + (
                        "normalizes the transitions, takes the agent's lock and advances the step clock"
                        if name == "observe"
                        else "takes the agent's lock"
                    )
                    + f" around _{name}(), which is what an algorithm implements. Override _{name}() "
                    f"instead, or call super().{name}(...) from your {name}() so those still happen "
                    "(see Agent's docstring)",
                    UserWarning,
                    stacklevel=2,
                )

    def __init__(
        self,
        env: Any = None,
        *,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        seed: int | None = None,
        device: Any = "auto",
        **hyperparameters: Any,
    ) -> None:
        self.env_source = None
        if env is not None:
            self.env_source = as_env_source(env)
            observation_space, action_space = self.env_source.spaces()
            hyperparameters = self.env_source.fit_hyperparameters(hyperparameters, self.Config, type(self).__name__)
        if observation_space is None or action_space is None:
            raise TypeError(
                f"{type(self).__name__} needs an env (instance, registered id or factory) or both "
                "observation_space= and action_space="
            )
        check_value(type(self).__name__, "seed", seed, _SEED, None)
        parse_device(device, type(self).__name__)  # an unknown or absent device fails here, before building
        self._check_action_space(action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.flat_observation_space = flat_observation_space(observation_space)
        self.obs_shape: tuple[int, ...] = self.flat_observation_space.shape
        self.obs_dtype = np.dtype(self.flat_observation_space.dtype)
        self._flatten = observation_flattener(observation_space)
        self.discrete = isinstance(action_space, spaces.Discrete)
        if isinstance(action_space, spaces.Box):
            self.action_low = action_space.low.astype(np.float32)
            self.action_high = action_space.high.astype(np.float32)
        self.config = self._make_config(hyperparameters)
        self._check_precision_fits()
        self._in_observe = False
        self.encoder_description = describe_encoder(
            strip_mask_space(observation_space), self.config.encoder, self.config.encoder_kwargs
        )
        if self.config.normalize_observations and _has_image(observation_space):
            raise ValueError(
                "normalize_observations=True standardizes vector observations, but "
                f"{describe_space(observation_space)} holds images, which the CNN encoder scales by 1/255 itself: "
                "drop normalize_observations"
            )
        # decide/act/observe/update hold it: one agent serves act() from many threads (docs/external.md).
        self._lock = FairRLock()  # first come, first served: an act waits for one update at most
        # Running statistics are nn.Modules, so they are saved and loaded with the networks.
        if self.config.normalize_observations:
            self.obs_dtype = np.dtype(np.float32)  # memories hold the standardized observations
            self.obs_normalizer = ObservationNormalizer(self.obs_shape)
        if self.config.normalize_rewards:
            self.reward_normalizer = RewardNormalizer(float(getattr(self.config, "gamma", 0.99)))
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(int(seed) if seed is not None else int(self.rng.integers(2**62)))
        self.num_timesteps = 0  # env steps observed while training, over all envs: the run's step clock
        self.num_updates = 0
        self.total_timesteps: int | None = None  # the budget schedules count against
        self.training = True
        self._weights_loaded = False  # set by checkpoint loading; keeps reseed() from rebuilding
        # Networks are built on the CPU (the same initial weights whatever the device), then moved.
        self.device = torch.device("cpu")
        self._moved = False
        self._compiled = False
        self.compile_time: float | None = None
        self._compiled_threads: set[int] = set()
        self._trace_calls: tuple[list[Any], list[Any]] = ([], [])
        self._compile_time_due = False
        self.compile_error: str | None = None
        # Build networks under a private seed without disturbing torch's global generator,
        # so a second run in the same kernel is not affected by this one.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.generator.initial_seed()))
            self._build()
            self._build_plug_ins()
        self.device_choice: DeviceChoice = choose_device(
            device, self._device_probe, self._probe_key(), owner=type(self).__name__
        )
        self.device = self.device_choice.device
        self._check_precision_device()
        self._after_build()

    def reseed(self, seed: int) -> None:
        """Reseed the agent's random generators; an agent that has not learned or loaded anything
        yet also rebuilds its networks under ``seed``, so a seeded session is reproducible."""
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        if self.num_timesteps == 0 and self.num_updates == 0 and not self._weights_loaded:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                self._build()
                self._build_plug_ins()
            self._after_build()

    # -- device, compile, precision -------------------------------------------------------------

    def _after_build(self) -> None:
        """Put what ``_build`` made on the agent's device, then compile it when asked."""
        self._place()
        self._compile()
        if self.config.precision == "fp16":
            from .kernels import set_grad_scaler

            for opt in self.optimizers.values():
                set_grad_scaler(opt, torch.amp.GradScaler(self.device.type))

    def _place(self) -> None:
        """Move the networks (and the normalizers' statistics, the optimizers' parameters) and every
        tensor the agent holds to :attr:`device`; the replay memory samples onto it."""
        device = self.device
        for store in (getattr(self, "memory", None), getattr(self, "data", None)):  # replay, offline dataset
            if store is not None and hasattr(store, "device"):
                store.device = device  # it stays in host RAM; its minibatches go to the device
        if device.type == "cpu" and not self._moved:
            return  # built there
        for net in self.networks.values():
            net.to(device)  # parameters keep their identity, so the optimizers still hold them
        for name, value in list(vars(self).items()):
            if isinstance(value, nn.Module):  # networks not declared for saving (an averaged actor...)
                value.to(device)
            elif isinstance(value, nn.Parameter) and value.device != device:
                value.data = value.data.to(device)
            elif isinstance(value, torch.Tensor) and value.device != device:
                setattr(self, name, value.to(device))

    def to(self, device: Any, *, reason: str = "moved there") -> Agent:
        """Move the agent to ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``): networks,
        optimizer state, every tensor it holds; its replay memory then samples onto it. Returns the
        agent. Compiled networks stay compiled (they compile again for the new device at their next
        call). Raises ``ValueError`` for an unknown or absent device, as ``device=`` does."""
        target = parse_device(device, f"{self.algorithm}.to")
        if target is None:
            raise ValueError(f"{self.algorithm}.to() needs a device, not 'auto': auto is chosen when an agent is built")
        choice = DeviceChoice(str(device), target, reason, {})
        self._check_precision_device(choice)  # before anything moves
        with self._lock:
            self.device, self.device_choice = target, choice
            self._moved = True  # a move back to the CPU moves everything back too
            self._place()
            for opt in self.optimizers.values():
                moves_step = _on_device_step(opt)
                for state in opt.state.values():
                    for key, value in state.items():
                        if isinstance(value, torch.Tensor) and (key != "step" or moves_step):
                            state[key] = value.to(target)
        return self

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """A host array as a tensor on the agent's device: shared with the array on the CPU, copied
        through pinned memory (``non_blocking``) to a GPU."""
        t = torch.from_numpy(array)
        return t if self.device.type == "cpu" else to_device(t, self.device)

    @staticmethod
    def _host(t: torch.Tensor) -> np.ndarray:
        """A tensor (already detached) as a numpy array on the host: a view on the CPU, a copy from a GPU;
        float32 when it was computed in lower precision (under ``precision=``'s autocast)."""
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()

    def _check_precision_fits(self) -> None:
        """``precision`` below fp32 is for CNN agents: refused, with why, for vector observations."""
        p = self.config.precision
        if p == "fp32":
            return
        if not self.convolutional:
            raise ValueError(
                f"{type(self).__name__} got precision={p!r}, which is for agents with a CNN encoder (image "
                f"observations), but {describe_space(self.observation_space)} holds no image: its small MLPs "
                "gain nothing from lower precision and lose accuracy. Leave precision='fp32'"
            )

    def _check_precision_device(self, choice: DeviceChoice | None = None) -> None:
        """fp16 (with a gradient scaler) needs a CUDA GPU; bf16 runs on the CPU or a CUDA GPU."""
        choice = self.device_choice if choice is None else choice
        p, device = self.config.precision, choice.device
        if p == "fp16" and device.type != "cuda":
            raise ValueError(
                f"{type(self).__name__} got precision='fp16' on device {str(device)!r} "
                f"({choice.reason}): fp16 with a gradient scaler needs a CUDA GPU. "
                "Use precision='bf16' (CPU or GPU), precision='fp32', or device='cuda' on a machine with one"
            )
        if p == "bf16" and device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"{type(self).__name__} got precision='bf16' on device {str(device)!r}: bf16 autocast runs on "
                "the CPU or a CUDA GPU. Use precision='fp32' there, or device='cpu'/'cuda'"
            )

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The update's autocast for ``precision`` (nothing for fp32)."""
        p = self.config.precision
        if p == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AUTOCAST[p])

    def _probe_key(self) -> tuple:
        """What a device measurement depends on: the networks, their sizes, and the batch."""
        params = sum(p.numel() for net in self.networks.values() for p in net.parameters())
        return (
            type(self).__name__,
            self.obs_shape,
            str(self.obs_dtype),
            self.encoder_description,
            self._probe_batch_size(),
            params,
        )

    def _probe_batch_size(self) -> int:
        """The batch an update's forward and backward passes see (``batch_size``, else a rollout)."""
        c = self.config
        size = getattr(c, "batch_size", None)
        if not size:
            size = int(getattr(c, "n_steps", 64)) * int(getattr(c, "n_envs", 1))
        return max(1, int(size))

    def _probe_calls(
        self, nets: dict[str, nn.Module], device: torch.device, batch: int, dynamic_batch: bool = False
    ) -> list[Any]:
        """Calls running each network of ``nets`` that takes an observation batch (or an observation
        and an action batch, as critics do) on zeros; networks taking other inputs are left out.
        ``dynamic_batch``: the batch dimension is marked dynamic for ``torch.compile``, so that the
        graph traced on it serves every batch size above one (an update's targets may run on several
        minibatches at once)."""
        obs = torch.zeros((batch, *self.obs_shape), dtype=_torch_dtype(self.obs_dtype), device=device)
        act_dim = int(np.prod(self.action_space.shape)) if isinstance(self.action_space, spaces.Box) else 1
        act = torch.zeros((batch, act_dim), device=device)
        if dynamic_batch and batch > 1:
            from .kernels.private_torch import mark_batch_dynamic

            mark_batch_dynamic(obs, act)
        calls = []
        for net in nets.values():
            for args in ((obs,), (obs, act)):
                try:
                    net(*args)
                except Exception:  # not this signature (or not a network with a forward)
                    continue
                calls.append(functools.partial(net, *args))
                if dynamic_batch and len(args) == 2:  # an actor's loss: the critic on actions carrying gradients
                    calls.append(functools.partial(net, obs, act.detach().clone().requires_grad_(True)))
                break
        return calls

    def _targets_batch_size(self) -> int:
        """The batch an update's no-grad passes (its targets) may see: an off-policy update draws the
        minibatches of all its gradient steps at once and runs the target network over them together."""
        steps = getattr(self.config, "gradient_steps", 1)
        return self._probe_batch_size() * (int(steps) if isinstance(steps, int) and steps > 1 else 1)

    def _device_probe(self, device: torch.device) -> Any:
        """A short update on ``device`` for ``"auto"`` to time: copies of the declared networks, one
        forward and backward pass on a batch of the update's size (the agent itself is untouched)."""
        nets = {
            name: copy.deepcopy(getattr(self, name)).to(device)
            for name in self.network_names
            if isinstance(getattr(self, name, None), nn.Module)
        }
        calls = self._probe_calls(nets, device, self._probe_batch_size())
        if not calls:
            raise RuntimeError("no network of this agent takes an observation batch")
        return functools.partial(_run_probe, calls)

    def _compile(self) -> None:
        """``compile``: each declared network through ``torch.compile`` (``module.compile()``, so its
        saved names stay), compiled at once by tracing passes (:meth:`_trace_compiled`) whose time is
        ``compile_time``; when that fails, the networks run eagerly and a warning says why."""
        mode = self.config.compile
        self._compiled = False
        self._compiled_threads = set()
        if mode is False:
            return
        mode = "default" if mode is True else str(mode)
        from .kernels.private_torch import allow_graph_variants

        allow_graph_variants()
        nets = self._declared_networks()
        with torch.no_grad():  # which networks take an observation batch, found eagerly
            batch, targets = self._probe_batch_size(), self._targets_batch_size()
            update_calls = self._probe_calls(nets, self.device, batch, dynamic_batch=True)
            no_grad_calls = list(update_calls)
            if targets != batch:
                # The graph traced with a dynamic batch serves every larger size, except across 16 for a CNN
                # (PyTorch's convolution picks another memory layout there): a size past both is enough,
                # never the whole (possibly huge: 64 x 128 steps) batch of targets.
                size = min(targets, max(2 * batch, 16))
                no_grad_calls += self._probe_calls(nets, self.device, size, dynamic_batch=True)
            no_grad_calls += self._probe_calls(nets, self.device, self.num_envs)
        self._trace_calls = (update_calls, no_grad_calls)
        start = time.perf_counter()
        for net in nets.values():
            net.compile(mode=mode)
        self._compiled = True  # the kernels' written-out passes would bypass the compiled forward
        try:
            if not update_calls:
                raise RuntimeError("no network of this agent takes an observation batch to compile with")
            self._trace_compiled()
        except Exception as exc:
            for net in nets.values():
                uncompile(net)
            self._compiled = False
            self.compile_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            warnings.warn(
                f"{type(self).__name__}: compile={self.config.compile!r} failed ({self.compile_error}); "
                "its networks run eagerly (compile=False gives the same results without trying)",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        # Every compilation of this agent counts (a rebuild under the session's seed compiles again).
        self.compile_time = (self.compile_time or 0.0) + time.perf_counter() - start
        self._compile_time_due = True

    def _declared_networks(self) -> dict[str, nn.Module]:
        return {
            name: getattr(self, name) for name in self.network_names if isinstance(getattr(self, name, None), nn.Module)
        }

    def _trace_compiled(self) -> None:
        """Run the compiled networks as training will, so that they compile now: the update's forward
        and backward pass on a batch of its size (its batch dimension dynamic), its no-grad passes (for
        targets, also on all gradient steps' minibatches at once), and acting's no-grad pass on the
        envs' batch. What compiled code is specialised to (grad mode, batch size, torch's thread count)
        is then seen before the first step; the thread count is recorded for :meth:`prepare_compiled`."""
        update_calls, no_grad_calls = self._trace_calls
        nets = self._declared_networks()
        try:
            with self._autocast():
                _run_probe(update_calls)
                with torch.no_grad():  # an update's targets (target networks, double-Q), then acting
                    for call in no_grad_calls:
                        call()
            synchronize(self.device)
        finally:
            for net in nets.values():
                for p in net.parameters():
                    p.grad = None
        self._compiled_threads.add(torch.get_num_threads())

    def prepare_compiled(self) -> None:
        """Compile again now, counted in ``compile_time``, when torch's thread count differs from every
        one the compiled networks were traced under (a session's ``torch_threads``): compiled code is
        specialised to it, and the first step would otherwise recompile, uncounted. Nothing when the
        agent is not compiled or the count was seen before."""
        if not self._compiled or torch.get_num_threads() in self._compiled_threads:
            return
        start = time.perf_counter()
        self._trace_compiled()
        self.compile_time = (self.compile_time or 0.0) + time.perf_counter() - start
        self._compile_time_due = True

    @property
    def convolutional(self) -> bool:
        """True when the networks read images through a CNN encoder (image observations, or an encoder
        class of the user's): what ``precision=`` is for, and what a session's ``torch_threads="auto"``
        gives torch's own thread count."""
        return _has_image(self.observation_space) or isinstance(self.config.encoder, type)

    @property
    def compiled(self) -> bool:
        """True when the networks run through ``torch.compile`` (``compile=`` set and it worked)."""
        return self._compiled

    # -- construction helpers -----------------------------------------------------------------

    @classmethod
    def _check_action_space(cls, action_space: spaces.Space) -> None:
        if not isinstance(action_space, cls.action_spaces):
            fitting = _agents_for(action_space)
            which = ", ".join(fitting) if fitting else "none of the built-in agents"
            kinds = " or ".join(t.__name__ for t in cls.action_spaces)
            raise ValueError(
                f"{cls.__name__} cannot act in the action space {describe_space(action_space)}: "
                f"it needs a {kinds} action space. Agents that fit this space: {which}."
            )

    def _encoder(self) -> tuple[nn.Module | None, int]:
        """A fresh encoder for one network (see ``workbench.agents.encoders``) and the width of its
        features; ``(None, flat observation size)`` when the network reads the observation itself."""
        c = self.config
        enc = make_encoder(strip_mask_space(self.observation_space), c.encoder, c.encoder_kwargs)
        if enc is None:
            return None, int(np.prod(self.obs_shape))
        return enc, int(enc.features_dim)  # type: ignore[arg-type]

    def _encoded(self, build_head: Any) -> nn.Module:
        """``encoder -> build_head(features)`` as one network (the head alone for vector observations)."""
        enc, dim = self._encoder()
        return with_encoder(enc, build_head(dim))

    def _make_config(self, hyperparameters: dict[str, Any]) -> Any:
        names = [f.name for f in dataclasses.fields(self.Config)]
        unknown = [k for k in hyperparameters if k not in names]
        if unknown:
            key = unknown[0]
            _refuse_plug_in(type(self), key)
            close = difflib.get_close_matches(key, names, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise TypeError(
                f"{type(self).__name__} got an unknown hyperparameter {key!r}.{hint} Known: {', '.join(names)}."
            )
        config = self.Config(**hyperparameters)
        # Every field's declared constraint (workbench.validation), so a bad value fails here,
        # named, and not later inside the training thread.
        validate_config(config, type(self).__name__)
        return config

    def _build(self) -> None:
        """Create networks, optimizers and storage (called under the agent's private seed)."""
        raise NotImplementedError

    def _build_plug_ins(self) -> None:
        """After :meth:`_build`, under the same seed: what a config plugs in on top of the algorithm.
        Here the intrinsic reward (``intrinsic=wb.RND()``, ``workbench.agents.intrinsic``); the off-policy
        agents add their replay memory's kind (``replay=wb.HerReplay()``)."""
        spec = getattr(self.config, "intrinsic", None)
        self.intrinsic = None if spec is None else spec.build(self)

    @property
    def algorithm(self) -> str:
        """The algorithm's name, e.g. ``"PPO"``."""
        return type(self).__name__

    @property
    def networks(self) -> dict[str, nn.Module]:
        """The agent's torch modules by name, as its class declares them (``network_names``, plus
        the normalizers' running statistics): saved in checkpoints, sent to Ray workers."""
        names = (*self.network_names, "obs_normalizer", "reward_normalizer", "intrinsic")
        return {name: getattr(self, name) for name in names if getattr(self, name, None) is not None}

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The agent's optimizers by name, as its class declares them (``optimizer_names``), and an
        intrinsic reward's (``intrinsic_optimizer``)."""
        opts = {name: getattr(self, name) for name in self.optimizer_names if getattr(self, name, None) is not None}
        if getattr(self, "intrinsic", None) is not None:
            opts["intrinsic_optimizer"] = self.intrinsic.optimizer
        return opts

    @property
    def _fast(self) -> bool:
        """True unless the config says ``fast="off"``: the kernels of ``workbench.agents.kernels`` may run.
        They are CPU-only fp32 passes, so never on another device, compiled or in lower precision."""
        return (
            self.config.fast != "off"
            and self.device.type == "cpu"
            and not self._compiled
            and self.config.precision == "fp32"
        )

    @property
    def progress(self) -> float:
        """Fraction of the training budget done, for schedules (0 before any budget is set)."""
        if not self.total_timesteps:
            return 0.0
        return min(self.num_timesteps / self.total_timesteps, 1.0)

    @property
    def num_envs(self) -> int:
        """How many envs the agent would like to train on (the session may use fewer)."""
        return int(getattr(self.config, "n_envs", 1))

    # -- the four verbs -----------------------------------------------------------------------

    def prepare_obs(self, obs: Any) -> tuple[np.ndarray, bool]:
        """Observations as a batch in the agent's observation dtype (uint8 for images, else float32),
        and whether a single observation was given."""
        if isinstance(obs, dict | tuple) and not isinstance(self.observation_space, spaces.Box):
            if isinstance(obs, dict) or not isinstance(obs[0], dict):
                return self._flatten(obs)[None], True
            return np.stack([self._flatten(o) for o in obs]), False
        if isinstance(self.observation_space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
            raw = np.asarray(obs)
            if raw.shape == self.observation_space.shape:  # one raw observation: one-hot it
                return self._flatten(raw)[None], True
            if raw.shape[1:] == self.observation_space.shape and raw.shape[1:] != self.obs_shape:
                return np.stack([self._flatten(o) for o in raw]), False
        # Observations keep their own dtype (uint8 images stay uint8 up to the network's encoder).
        arr = np.asarray(obs, dtype=self.obs_dtype)
        if arr.shape == self.obs_shape:
            return arr[None], True
        if arr.shape[1:] != self.obs_shape:
            raise ValueError(
                f"observation of shape {arr.shape} does not fit the observation space "
                f"{describe_space(self.flat_observation_space)}: pass one observation of shape "
                f"{self.obs_shape} or a batch of shape (n, {', '.join(map(str, self.obs_shape))})"
            )
        return arr, False

    def decide(self, obs: Any, deterministic: bool = False, action_mask: Any = None) -> Step:
        """The :class:`Step` for a batch of observations (one is taken as a batch of one): the
        actions, and the ``extras`` that :meth:`observe` will need with this step's transitions.
        ``deterministic`` (always so in play mode) takes the greedy / mean action, no exploration.
        ``action_mask`` (one bool row per observation, True where allowed; see ``workbench.envs.masks``)
        restricts the actions to the allowed ones and travels on in the extras as ``"action_mask"``;
        a Dict observation's ``"action_mask"`` key is used when it is not given.
        Thread-safe: concurrent calls take turns on the agent's lock (as ``act``, ``observe`` and
        ``update`` do), so they give the actions serial calls would."""
        batch, _ = self.prepare_obs(obs)
        mask = self._action_mask(obs, action_mask, len(batch))
        with self._lock:
            if self.config.normalize_observations:
                batch = self.obs_normalizer(batch)
            if mask is None:
                return self._decide(batch, deterministic or not self.training)
            step = self._decide(batch, deterministic or not self.training, mask)
        return Step(step.actions, {**step.extras, MASK_KEY: mask})

    def act(self, obs: Any, deterministic: bool = False, action_mask: Any = None) -> Any:
        """Actions for one observation or a batch (the actions of :meth:`decide`, ``action_mask``
        included); thread-safe, so a loaded agent serves concurrent requests
        (``wb.load(path).act(obs)`` from many threads)."""
        batch, single = self.prepare_obs(obs)
        mask = self._action_mask(obs, action_mask, len(batch))
        with self._lock:
            if self.config.normalize_observations:
                batch = self.obs_normalizer(batch)
            if mask is None:
                actions = self._decide(batch, deterministic or not self.training).actions
            else:
                actions = self._decide(batch, deterministic or not self.training, mask).actions
        return actions[0] if single else actions

    def _action_mask(self, obs: Any, action_mask: Any, n: int) -> np.ndarray | None:
        """The checked ``(n, mask_size)`` bool masks for a decision (from ``action_mask`` or a Dict
        observation's key), or None."""
        if action_mask is None:
            if not (isinstance(obs, dict) and MASK_KEY in obs):
                return None
            action_mask = obs[MASK_KEY]
        if not self.supports_action_masks or mask_size(self.action_space) is None:
            raise mask_refusal(self.algorithm, self.action_space)
        mask = check_masks(action_mask, self.action_space, f"{self.algorithm}'s action_mask")
        if len(mask) != n:
            raise ValueError(f"action_mask has {len(mask)} rows for {n} observations: give one mask per observation")
        return mask

    def _decide(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None = None) -> Step:
        """The step for a prepared batch (``mask``: checked bool masks, or None); agents whose steps
        carry extras override this."""
        if mask is None:
            return Step(self._act(obs, deterministic), NO_EXTRAS)
        return Step(self._act(obs, deterministic, mask), NO_EXTRAS)

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def _normalize_transitions(self, t: Transitions) -> Transitions:
        """The transitions as the algorithm should see them: observations standardized with the
        statistics ``act`` used, rewards scaled; the statistics then learn from this step."""
        c = self.config
        if not (c.normalize_observations or c.normalize_rewards):
            return t
        obs, rewards, next_obs = t.obs, t.rewards, t.next_obs
        if c.normalize_observations:
            norm = self.obs_normalizer
            obs, next_obs = norm(np.asarray(obs, dtype=np.float32)), norm(np.asarray(next_obs, dtype=np.float32))
            if self.training:
                norm.update(t.next_obs)
        if c.normalize_rewards:
            rewards = self.reward_normalizer(t.rewards, t.terminated | t.truncated, update=self.training)
        return t._replace(obs=obs, rewards=rewards, next_obs=next_obs)

    def observe(self, transitions: Transitions) -> None:
        """Take one step of every env into memory (with the extras its decision returned).

        Normalizes the observations and rewards (when configured), then calls the algorithm's
        :meth:`_observe` under the agent's lock and advances the step clock (``num_timesteps``) by
        the number of envs. Algorithms override :meth:`_observe`, not this."""
        with self._lock:
            if self._in_observe:  # observe() again from inside _observe(): already normalized and counted
                self._observe(transitions)
                return
            self._in_observe = True
            try:
                t = self._normalize_transitions(transitions)
                if self.intrinsic is not None and self.training:  # the exploration bonus (agents/intrinsic.py)
                    t = self.intrinsic.add_bonus(t, float(self.config.intrinsic_coef))
                self._observe(t)
            finally:
                self._in_observe = False
            self.num_timesteps += len(transitions.rewards)

    def _observe(self, transitions: Transitions) -> None:
        """The algorithm's part of :meth:`observe`: store the (normalized) transitions."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True when enough new data has arrived for :meth:`update`."""
        raise NotImplementedError

    def update(self) -> dict[str, float]:
        """Learn from memory; return metrics (they become the session's signals).

        Calls the algorithm's :meth:`_update` under the agent's lock, so an ``act()`` from another
        thread never sees weights halfway through an update. Algorithms override :meth:`_update`."""
        with self._lock:
            with self._autocast():
                metrics = self._update()
            if self.intrinsic is not None:  # the intrinsic reward learns from the steps since the last update
                metrics.update(self.intrinsic.learn(float(self.config.intrinsic_coef)))
            if self._compile_time_due:  # the compile time once, as its own signal
                self._compile_time_due = False
                metrics = {**metrics, "compile_time": float(self.compile_time or 0.0)}
            return metrics

    def _update(self) -> dict[str, float]:
        """The algorithm's part of :meth:`update`: learn, return the metrics."""
        raise NotImplementedError

    def begin_episode(self, done: np.ndarray) -> None:
        """Called by the loop with the mask of envs whose episode just ended."""

    # -- modes --------------------------------------------------------------------------------

    def eval(self) -> Agent:
        """Play mode: deterministic actions, no exploration, no learning, networks in eval mode."""
        self.training = False
        for net in self.networks.values():
            net.eval()
        return self

    def train(self) -> Agent:
        """Training mode (the default for a new agent)."""
        self.training = True
        for net in self.networks.values():
            net.train()
        return self

    # -- declared state ---------------------------------------------------------------------

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
        memory = getattr(self, "memory", None)
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

    # -- play ---------------------------------------------------------------------------------

    def check_spaces(self, env: gym.Env) -> None:
        """Raise ``ValueError`` naming the space that differs between ``env`` and this agent."""
        for label, mine, theirs in (
            ("observation", self.observation_space, env.observation_space),
            ("action", self.action_space, env.action_space),
        ):
            if mine != theirs:
                raise ValueError(
                    f"the env's {label} space {describe_space(theirs)} differs from the agent's "
                    f"{describe_space(mine)}: play it on the env it was trained on"
                )

    def play(
        self,
        env: Any,
        episodes: int = 1,
        *,
        render: str | None = None,
        deterministic: bool = True,
        seed: int | None = None,
        max_steps: int | None = None,
        viewer: bool = False,
    ) -> Any:
        """Play ``episodes`` episodes and return their returns (an :class:`EpisodeReturns` list).

        ``env`` is an instance, id or factory; a PettingZoo ParallelEnv or a zero-argument factory
        returning one plays every agent (``result.per_agent``). With ``render="rgb_array"`` it returns
        ``(returns, frames)``: ``frames[i]`` is the list of RGB arrays of episode ``i``, one per
        step plus the first (an id is made with that render mode; an instance must have it).
        ``viewer=True`` shows the frames in a notebook widget and returns the viewer. Nothing
        is learned and no exploration is added.
        """
        check_arguments(
            f"{self.algorithm}.play",
            {
                "episodes": episodes,
                "render": render,
                "deterministic": deterministic,
                "seed": seed,
                "max_steps": max_steps,
                "viewer": viewer,
            },
            _PLAY_CHECKS,
            {"episodes": 1, "render": None, "deterministic": True, "seed": None, "max_steps": None, "viewer": False},
        )
        if viewer:
            # The one place an agent shows itself in a notebook: the UI is imported when asked for.
            from ..ui import PlayViewer

            return PlayViewer(self, env, episodes=episodes, seed=seed, max_steps=max_steps)
        owner = f"{self.algorithm}.play"
        multi_only = getattr(self, "multi_agent_only", False)
        if multi_only and not isinstance(env, EnvSource) and not callable(env) and not hasattr(env, "possible_agents"):
            raise TypeError(
                f"{owner} plays a PettingZoo ParallelEnv: pass an instance or a zero-argument factory that returns "
                f"one (as for training), got {type(env).__name__}: {env!r}"
            )
        source = as_env_source(env)
        built = None
        if source.parallel is None and source.factory is not None and source.env_id is None:
            from ..envs.multiagent import build_for_play

            built = build_for_play(source.factory, source.name, owner)  # the user's factory, called once
        parallel = source.parallel
        if built is not None and not isinstance(built, gym.Env):
            parallel = built  # a factory of ParallelEnvs, as training takes: played on this copy, then closed
        if parallel is not None:  # a PettingZoo ParallelEnv: the agent decides for every agent
            try:
                return self._play_parallel(parallel, episodes, render, deterministic, seed, max_steps)
            finally:
                if built is not None:
                    built.close()
        if multi_only:
            if built is not None:
                built.close()
            raise TypeError(
                f"{owner} plays a PettingZoo ParallelEnv (an instance, or a zero-argument factory returning one), "
                f"but {source.name} is a single-agent env: use the ParallelEnv the agent was trained on"
            )
        if built is not None:
            instance, owned = built, True
        elif source.instance is not None:
            instance, owned = source.instance, False
            if render and instance.render_mode != render:
                raise ValueError(
                    f"render={render!r} needs an env made with render_mode={render!r}, "
                    f"this one has render_mode={instance.render_mode!r}"
                )
        else:
            instance = source.make(render_mode=render) if source.env_id else source.make()
            owned = True
        self.check_spaces(instance)
        was_training = self.training
        self.training = False
        returns: list[float] = []
        lengths: list[int] = []
        frames: list[list[np.ndarray]] | None = [] if render else None
        try:
            for episode in range(episodes):
                total, moment = 0.0, None
                episode_frames: list[np.ndarray] = []
                for moment in play_episode(
                    self,
                    instance,
                    seed=None if seed is None else seed + episode,
                    deterministic=deterministic,
                    max_steps=max_steps,
                    render=frames is not None,
                ):
                    total += moment.reward
                    if frames is not None:
                        episode_frames.append(np.asarray(moment.frame))
                assert moment is not None
                returns.append(total)
                lengths.append(moment.t)
                if frames is not None:
                    frames.append(episode_frames)
        finally:
            self.training = was_training
            if owned:
                instance.close()
        result = EpisodeReturns(returns, lengths, frames)
        if frames is not None:
            return result, frames
        return result

    def _play_parallel(
        self, env: Any, episodes: int, render: str | None, deterministic: bool, seed: int | None, max_steps: int | None
    ) -> Any:
        """``play`` on a PettingZoo ParallelEnv (``workbench.envs.multiagent``): team returns, each
        agent's in ``result.per_agent``."""
        from ..envs.multiagent import play_parallel

        if render and getattr(env, "render_mode", None) != render:
            raise ValueError(
                f"render={render!r} needs a ParallelEnv made with render_mode={render!r}, "
                f"this one has render_mode={getattr(env, 'render_mode', None)!r}"
            )
        was_training = self.training
        self.training = False
        try:
            returns, lengths, frames, per_agent = play_parallel(
                self,
                env,
                episodes,
                seed=seed,
                deterministic=deterministic,
                max_steps=max_steps,
                render=bool(render),
            )
        finally:
            self.training = was_training
        result = EpisodeReturns(returns, lengths, frames)
        result.per_agent = per_agent
        return (result, frames) if frames is not None else result

    def _require_bounded_actions(self) -> None:
        """For agents whose policy ends in tanh: the Box must have finite bounds to scale into."""
        if not (np.all(np.isfinite(self.action_low)) and np.all(np.isfinite(self.action_high))):
            raise ValueError(
                f"{self.algorithm} scales its tanh-squashed actions into the action space's bounds, but "
                f"{describe_space(self.action_space)} has infinite bounds (low={self.action_space.low}, "
                f"high={self.action_space.high}): wrap the env so its actions are bounded, or use PPO or A2C"
            )
        self._action_center = (self.action_high + self.action_low) / 2.0
        self._action_half_range = (self.action_high - self.action_low) / 2.0

    def _scale_action(self, squashed: np.ndarray) -> np.ndarray:
        """An action in [-1, 1] mapped onto the action space's bounds."""
        return (self._action_center + squashed * self._action_half_range).astype(np.float32)

    def _unscale_action(self, action: np.ndarray) -> np.ndarray:
        """An env action mapped back into [-1, 1] (what replay agents store)."""
        # np.minimum/np.maximum: np.clip's values at a fraction of its per-call cost.
        unit = (action - self._action_center) / self._action_half_range
        return np.minimum(np.maximum(unit, -1.0), 1.0).astype(np.float32)

    def __repr__(self) -> str:
        mode = "training" if self.training else "play"
        c = self.config
        compiled = f"compile={c.compile!r}"
        if c.compile is not False:
            compiled += (
                f" ({self.compile_time:.1f} s to compile)"
                if self._compiled
                else f" (failed, eager: {self.compile_error})"
            )
        return (
            f"{self.algorithm}(obs={describe_space(self.observation_space)}, "
            f"action={describe_space(self.action_space)}, encoder={self.encoder_description}, "
            f"fast={c.fast}, device={self.device} [{self.device_choice.reason}], {compiled}, "
            f"precision={c.precision}, steps={self.num_timesteps}, {mode})"
        )


def _saved(t: torch.Tensor) -> torch.Tensor:
    """A tensor as a checkpoint holds it: detached, contiguous, its own copy, on the CPU (so a run
    trained on a GPU loads anywhere)."""
    t = t.detach()
    return t.contiguous().clone() if t.device.type == "cpu" else t.to("cpu").contiguous()


def _on_device_step(opt: torch.optim.Optimizer) -> bool:
    """Whether ``opt`` keeps its step counts with the parameters (fused or capturable), not on the CPU."""
    return any(group.get("fused") or group.get("capturable") for group in opt.param_groups)


def _run_probe(calls: list[Any]) -> None:
    """One forward pass of each call and one backward pass of the sum of their outputs."""
    total: torch.Tensor | None = None
    for call in calls:
        out = call()
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                part = t.float().sum()
                total = part if total is None else total + part
    if total is not None and total.requires_grad:
        total.backward()


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, dtype=dtype)).dtype


def _refuse_plug_in(cls: type[Agent], key: str) -> None:
    """A clear ``TypeError`` for ``replay=`` or ``intrinsic=`` on an agent that does not take it."""
    if key in ("replay", "intrinsic", "intrinsic_coef"):
        takers = [a.__name__ for a in AGENTS.values() if key in {f.name for f in dataclasses.fields(a.Config)}]
        what = "a replay memory's kind (wb.HerReplay)" if key == "replay" else "an intrinsic reward (wb.RND, wb.ICM)"
        why = (
            " (it is on-policy: it learns from its own rollouts, not from a replay memory)"
            if (key == "replay" and cls.on_policy)
            else ""
        )
        raise TypeError(f"{cls.__name__} does not take {key}=: {what} plugs into {', '.join(sorted(takers))}{why}")


def _writable(value: Any) -> np.ndarray:
    """``value`` as an array torch can wrap without a warning: a read-only one is copied."""
    array = np.asarray(value)
    return array if array.flags.writeable else array.copy()
