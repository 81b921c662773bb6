"""The registries of agents by name, the hyperparameters every agent has, and the checks of an
agent's construction that name the agents that would fit instead.

``register`` files an agent class under its lower-case name in :data:`AGENTS`, :data:`OFFLINE_AGENTS`
or :data:`MULTI_AGENTS` (the CLI, presets, ``wb.load`` and the refusals below read them).
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from gymnasium import spaces

from ..envs.composite import ActionLayout, is_composite
from ..envs.core import describe_space
from ..envs.masks import mask_size
from ..validation import ArgumentError, any_of, checked, choice, flag, is_live, optional, validate_config
from .encoders import encoder_choice, json_object
from .networks import SimBa

if TYPE_CHECKING:
    from .contract import Agent

__all__ = [
    "AGENTS",
    "COMPILE_MODES",
    "MULTI_AGENTS",
    "OFFLINE_AGENTS",
    "PRECISIONS",
    "ActionMaskError",
    "AgentConfig",
    "CompileMode",
    "check_action_space",
    "config_values",
    "make_config",
    "mask_refusal",
    "register",
    "warn_template_overrides",
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

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
"""The ``torch.compile`` modes ``compile=`` takes by name (True is "default")."""
CompileMode = Literal["default", "reduce-overhead", "max-autotune"]
PRECISIONS = ("fp32", "bf16", "fp16")
"""What ``precision=`` takes."""


@dataclasses.dataclass
class AgentConfig:
    """Hyperparameters every agent has; each agent's ``Config`` dataclass extends this one."""

    networks: ClassVar[tuple[str, ...]] = ()
    """What the agent's ``network=`` may name (``workbench.agents.networks.NETWORKS``); none: it has no such
    setting (its networks are its own)."""
    network_note: ClassVar[str] = ""
    """Why an agent with a ``network`` setting keeps to the kinds of :attr:`networks` (said when refused)."""

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
    """No effect any more (kept so that runs saved with it load, and code passing it runs): "auto" and
    "off" both call the torch modules and optimizers as they are (docs/speed.md)."""
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
    if cls.offline:
        registry = OFFLINE_AGENTS
    elif cls.multi_agent_only:
        registry = MULTI_AGENTS
    else:
        registry = AGENTS
    registry[cls.__name__.lower()] = cls
    return cls


def warn_template_overrides(cls: type) -> None:
    """Tell an agent class, when it is made, that it overrides a template method outright.

    ``observe()`` and ``update()`` are template methods: an algorithm writes ``_observe()`` and
    ``_update()``. A subclass that overrides the public name still works when it calls ``super()``
    (the base's normalization, lock and clock then run there); one that replaces them outright skips
    them, so it is told once what to override instead."""
    for name in ("observe", "update"):
        if name in cls.__dict__ and not getattr(cls.__dict__[name], "_template_ok", False):
            does = (
                "normalizes the transitions, takes the agent's lock and advances the step clock"
                if name == "observe"
                else "takes the agent's lock"
            )
            warnings.warn(
                f"{cls.__qualname__} overrides {name}(): Agent.{name}() {does} around _{name}(), which is what "
                f"an algorithm implements. Override _{name}() instead, or call super().{name}(...) from your "
                f"{name}() so those still happen (see Agent's docstring)",
                UserWarning,
                stacklevel=3,
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

    if mask_size(action_space) is None and is_composite(action_space):
        return ActionMaskError(
            f"{algorithm} has no head to mask in the action space {describe_space(action_space)}: a composite "
            "space's masks apply to its Discrete and MultiDiscrete leaves, and it has none. Leave the mask out"
        )
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


def check_action_space(cls: type[Agent], action_space: spaces.Space) -> None:
    """A ``ValueError`` when ``cls`` cannot act in ``action_space``, naming the agents that can."""
    if not isinstance(action_space, cls.action_spaces):
        fitting = _agents_for(action_space)
        which = ", ".join(fitting) if fitting else "none of the built-in agents"
        kinds = " or ".join(t.__name__ for t in cls.action_spaces)
        raise ValueError(
            f"{cls.__name__} cannot act in the action space {describe_space(action_space)}: "
            f"it needs a {kinds} action space. Agents that fit this space: {which}."
        )
    if is_composite(action_space):
        ActionLayout(action_space)  # a leaf no head fits is refused here, by its path


def config_values(config: Any) -> dict[str, Any]:
    """A built ``Config``'s hyperparameters by name, as they are (not copied): what builds another agent
    of the same settings (an acting replica, a self-play opponent)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def make_config(cls: type[Agent], hyperparameters: dict[str, Any], *, images: bool = False) -> Any:
    """``cls.Config`` built from keyword hyperparameters: an unknown name is a ``TypeError`` that
    suggests close ones, and every field's declared constraint is checked here (named, at the door)
    rather than later inside the training thread. ``images``: the observations hold an image (a SimBa
    network then leaves observation normalization to the encoder's scaling)."""
    names = [f.name for f in dataclasses.fields(cls.Config)]
    hyperparameters = _network_spellings(cls, names, hyperparameters, images)
    unknown = [k for k in hyperparameters if k not in names]
    if unknown:
        key = unknown[0]
        _refuse_plug_in(cls, key)
        close = difflib.get_close_matches(key, names, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise TypeError(f"{cls.__name__} got an unknown hyperparameter {key!r}.{hint} Known: {', '.join(names)}.")
    config = cls.Config(**hyperparameters)
    validate_config(config, cls.__name__)
    return config


def _network_spellings(
    cls: type[Agent], names: list[str], hyperparameters: dict[str, Any], images: bool
) -> dict[str, Any]:
    """``network=wb.SimBa(width, blocks)``, ``net_arch="simba"`` and ``network="simba"`` as a config holds them:
    ``network="simba"`` with ``net_arch`` the blocks' widths (given, else ``wb.SimBa()``'s). A SimBa network
    normalizes vector observations (the paper's first part) unless told not to; images are scaled by the
    encoder instead."""
    spec, arch = hyperparameters.get("network"), hyperparameters.get("net_arch")
    arch_says_simba = isinstance(arch, str) and arch == "simba"
    if not (isinstance(spec, SimBa) or arch_says_simba or (isinstance(spec, str) and spec == "simba")):
        return hyperparameters
    if "simba" not in cls.Config.networks:
        takers = sorted(a.__name__ for a in AGENTS.values() if "simba" in a.Config.networks)
        if "network" in names:  # the config's own check says why (CrossQ, DroQ, RecurrentPPO)
            kept = {k: v for k, v in hyperparameters.items() if not (k == "net_arch" and arch_says_simba)}
            return {**kept, "network": "simba"}
        raise ArgumentError(
            f"{cls.__name__} has no SimBa network option: {', '.join(takers)} take it; leave network and "
            f"net_arch out for {cls.__name__}'s own network"
        )
    out = dict(hyperparameters)
    if arch_says_simba:
        if spec is not None and not isinstance(spec, SimBa) and spec != "simba":
            raise ArgumentError(f'{cls.__name__} got net_arch="simba" and network={spec!r}: leave one out')
        del out["net_arch"]
    if isinstance(spec, SimBa):
        if "net_arch" in out and tuple(out["net_arch"]) != spec.net_arch:
            raise ArgumentError(
                f"{cls.__name__} got network={spec!r} and net_arch={tuple(out['net_arch'])!r}: the SimBa gives the "
                "widths; leave net_arch out"
            )
        out["net_arch"] = spec.net_arch
    out["network"] = "simba"
    out.setdefault("net_arch", SimBa().net_arch)
    if not images:
        out.setdefault("normalize_observations", True)
    return out


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
