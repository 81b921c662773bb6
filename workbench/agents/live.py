"""Hyperparameters that change while an agent trains: which ones, how they are checked, how they apply.

A config field declared ``checked(..., live=True)`` (``workbench.validation``) may change mid-run:
``session.set(learning_rate=1e-4)`` checks the new value exactly as the agent's constructor would,
then :func:`apply_edits` writes it into ``agent.config`` and the agent refreshes what it derived from
it when it was built (``Agent.apply_edits``, each algorithm its own: the learning-rate schedule and the
optimizers' ``param_groups``, PPO's clip schedule, prioritized replay's beta schedule, SAC's entropy
coefficient). A number replaces a schedule and a schedule a number.
Everything else the agent reads from ``agent.config`` at each step or update, so it takes effect at
the next one. A field that is not live (network sizes, ``n_envs``, ``buffer_size``...) is refused
with the reason.

This module knows agents only; the session applies edits on its training thread between steps
(``workbench.run.live_edits``) and Ray workers apply the same edits to their acting replicas.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..validation import ArgumentError, check_value, constraint_of, did_you_mean, is_live, validate_config

if TYPE_CHECKING:
    from .contract import Agent

__all__ = ["apply_edits", "check_edits", "editable", "why_fixed"]

# Why a field cannot change once the agent is built (the default covers the rest).
_FIXED: dict[str, str] = {
    "net_arch": "the networks were built with these layer sizes",
    "lstm_hidden_size": "the memories were built with this size",
    "memory": "the networks were built with this memory",
    "memory_length": "the GTrXL's window and position biases were built with this length",
    "memory_layers": "the GTrXL was built with this many layers",
    "attention_heads": "the GTrXL's attention was built with this many heads",
    "activation": "the networks were built with this activation",
    "ortho_init": "it only shaped the networks' initial weights",
    "log_std_init": "it only set the policy's initial log std, which is learned since",
    "n_envs": "the envs are built when the run starts; build a new session for another count",
    "n_steps": "the rollout storage is sized by it (and Ray workers collect chunks of it)",
    "buffer_size": "the replay memory was allocated with this capacity",
    "gamma": "the replay memory stores each transition's discount with it, so old and new ones would mix",
    "n_step": "the n-step returns in the replay memory were computed with it",
    "prioritized": "the replay memory was built uniform or prioritized",
    "prioritized_alpha": "the prioritized memory was built with this exponent",
    "dueling": "the Q-network was built with or without dueling heads",
    "noisy": "the Q-network was built with or without noisy layers",
    "distributional": "the Q-network's outputs were built for it",
    "n_quantiles": "the Q-network's outputs were built for this many quantiles",
    "n_atoms": "the Q-network's outputs were built for this many atoms",
    "v_min": "the support of atoms was built from it",
    "v_max": "the support of atoms was built from it",
    "n_critics": "the critics were built as this many networks",
    "critic_net_arch": "the critics were built with these layer sizes",
    "network": "the actor and critics were built as this kind of network",
    "layer_norm": "the critics were built with or without layer normalization",
    "batch_norm_momentum": "the batch renormalization layers were built with it",
    "batch_norm_eps": "the batch renormalization layers were built with it",
    "renorm_warmup_steps": "the batch renormalization layers were built with it",
    "use_sde": "the actor was built with or without state-dependent exploration",
    "use_rms_prop": "the optimizer was built as RMSprop or Adam",
    "rms_prop_eps": "the optimizer was built with it",
    "rms_prop_tf_like": "the optimizer was built as PyTorch's or TensorFlow's RMSprop",
    "normalize_observations": "the observation normalizer is built with the agent",
    "normalize_rewards": "the reward normalizer is built with the agent",
}


# Live fields that do something only when another field of the agent is set: (that field, how to set it).
_NEEDS: dict[str, tuple[str, str]] = {
    "intrinsic_coef": ("intrinsic", "build the agent with intrinsic=wb.RND() (or wb.ICM()) to have a bonus to weigh"),
}


def editable(agent_or_class: Any) -> tuple[str, ...]:
    """The names of the hyperparameters that may change while ``agent`` trains (its config's
    fields declared ``live=True``), in the config's order."""
    config = agent_or_class.Config
    return tuple(f.name for f in dataclasses.fields(config) if is_live(config, f.name))


def why_fixed(name: str) -> str:
    """Why hyperparameter ``name`` cannot change once the agent is built, in words."""
    return _FIXED.get(name, "the agent was built around it")


def check_edits(agent: Agent, values: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    """Check ``values`` (hyperparameter name -> new value) for ``agent`` as its constructor would;
    return them unchanged. Raises :class:`~workbench.validation.ArgumentError` (a ``ValueError``)
    for an unknown name (naming the editable ones), a field that cannot change mid-run (saying
    why) or a value its constraint refuses. Nothing is changed."""
    owner = owner or f"{agent.algorithm}.set"
    names = [f.name for f in dataclasses.fields(agent.config)]
    live = editable(agent)
    if not values:
        raise ArgumentError(
            f"{owner}() needs at least one hyperparameter, e.g. learning_rate=1e-4. Editable: {', '.join(live)}."
        )
    for name, value in values.items():
        if name not in names:
            raise ArgumentError(
                f"{owner} got an unknown hyperparameter {name!r}.{did_you_mean(name, live)} "
                f"{agent.algorithm}'s editable hyperparameters: {', '.join(live)}."
            )
        if name not in live:
            raise ArgumentError(
                f"{owner} cannot change {name} while the agent trains: {why_fixed(name)}. Build a new agent "
                f"with {name}={value!r} instead. Editable: {', '.join(live)}."
            )
        needed = _NEEDS.get(name)
        if needed is not None and getattr(agent.config, needed[0]) is None:
            raise ArgumentError(
                f"{owner} got {name}={value!r}, but this {agent.algorithm} has no {needed[0]}= and so nothing "
                f"{name} weighs: {needed[1]}."
            )
        constraint = constraint_of(type(agent.config), name)
        if constraint is not None:
            check_value(owner, name, value, constraint)
    # The whole config as it would be, checked as at construction (a __post_init__ included).
    validate_config(dataclasses.replace(agent.config, **values), owner)
    return values


def apply_edits(agent: Agent, values: dict[str, Any]) -> dict[str, Any]:
    """Check ``values`` (:func:`check_edits`), write them into ``agent.config`` and refresh what the
    agent derived from them; returns the old values. Call it between updates (the session does)."""
    check_edits(agent, values)
    config = agent.config
    old = {name: getattr(config, name) for name in values}
    for name, value in values.items():
        setattr(config, name, value)
    agent.apply_edits(set(values))
    return old
