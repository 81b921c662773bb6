"""Hyperparameters that change while an agent trains: which ones, how they are checked, how they apply.

A config field declared ``checked(..., live=True)`` (``workbench.validation``) may change mid-run:
``session.set(learning_rate=1e-4)`` checks the new value exactly as the agent's constructor would,
then :func:`apply_edits` writes it into ``agent.config`` and refreshes what the agent derived from it
when it was built: the learning-rate schedule and the optimizers' ``param_groups``, PPO's clip
schedule, prioritized replay's beta schedule, SAC's entropy coefficient (a number, or ``"auto"`` /
``"auto_0.1"`` to learn it from that start). A number replaces a schedule and a schedule a number.
Everything else the agent reads from ``agent.config`` at each step or update, so it takes effect at
the next one. A field that is not live (network sizes, ``n_envs``, ``buffer_size``...) is refused
with the reason.

This module knows agents only; the session applies edits on its training thread between steps
(``workbench.run.live_edits``) and Ray workers apply the same edits to their acting replicas.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any

import torch

from ..schedules import as_schedule
from ..validation import ArgumentError, check_value, constraint_of, is_live, validate_config
from .networks import ScalarParameter, make_adam

__all__ = ["apply_edits", "check_edits", "editable", "why_fixed"]

# Why a field cannot change once the agent is built (the default covers the rest).
_FIXED: dict[str, str] = {
    "net_arch": "the networks were built with these layer sizes",
    "lstm_hidden_size": "the LSTMs were built with this size",
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


def check_edits(agent: Any, values: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
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
            close = difflib.get_close_matches(name, live, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ArgumentError(
                f"{owner} got an unknown hyperparameter {name!r}.{hint} {agent.algorithm}'s editable "
                f"hyperparameters: {', '.join(live)}."
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


def apply_edits(agent: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Check ``values`` (:func:`check_edits`), write them into ``agent.config`` and refresh what the
    agent derived from them; returns the old values. Call it between updates (the session does)."""
    check_edits(agent, values)
    config = agent.config
    old = {name: getattr(config, name) for name in values}
    for name, value in values.items():
        setattr(config, name, value)
    _refresh(agent, set(values))
    return old


def _refresh(agent: Any, changed: set[str]) -> None:
    """Rebuild what ``agent`` computed from the changed fields when it was built."""
    c = agent.config
    if hasattr(agent, "_actor_lr") and changed & {"learning_rate", "actor_lr", "critic_lr"}:  # TD3, DDPG
        agent._actor_lr = as_schedule(c.learning_rate if c.actor_lr is None else c.actor_lr)
        agent._critic_lr = as_schedule(c.learning_rate if c.critic_lr is None else c.critic_lr)
    elif "learning_rate" in changed and hasattr(agent, "_lr"):
        agent._lr = as_schedule(c.learning_rate)
    if "clip_range" in changed and hasattr(agent, "_clip"):
        agent._clip = as_schedule(c.clip_range)
    if "prioritized_beta" in changed and hasattr(agent, "_beta"):
        agent._beta = as_schedule(c.prioritized_beta)
    if "gamma" in changed and getattr(agent, "reward_normalizer", None) is not None:
        agent.reward_normalizer.gamma = float(c.gamma)
    if "ent_coef" in changed and hasattr(agent, "_auto_alpha"):
        _set_sac_alpha(agent, c.ent_coef)
    if "target_entropy" in changed and hasattr(agent, "target_entropy"):
        agent.target_entropy = float(-agent.act_dim if c.target_entropy is None else c.target_entropy)
    _sync_learning_rates(agent)


def _sync_learning_rates(agent: Any) -> None:
    """The optimizers' ``param_groups`` at the learning rates the schedules give now (the next
    update sets them again; setting them here lets a reader see the edit at once)."""
    progress = agent.progress
    if hasattr(agent, "_actor_lr"):
        rates = {"actor_optimizer": agent._actor_lr(progress), "critic_optimizer": agent._critic_lr(progress)}
    elif hasattr(agent, "_lr"):
        rate = agent._lr(progress)
        rates = {name: rate for name in agent.optimizers}
    else:
        return
    for name, opt in agent.optimizers.items():
        if name in rates:
            for group in opt.param_groups:
                group["lr"] = rates[name]


def _set_sac_alpha(agent: Any, ent_coef: float | str) -> None:
    """SAC's entropy coefficient: a fixed number, or learned from a start (``"auto_0.1"``)."""
    if isinstance(ent_coef, str):
        start = float(ent_coef.split("_", 1)[1]) if "_" in ent_coef else 1.0
        if getattr(agent, "log_alpha", None) is None:
            agent.log_alpha = ScalarParameter(math.log(start))
            agent.alpha_optimizer = make_adam(agent.log_alpha.parameters(), lr=agent._lr(agent.progress))
        else:  # learning restarts from the given start, with fresh optimizer moments
            with torch.no_grad():
                agent.log_alpha.value.fill_(math.log(start))
            agent.alpha_optimizer = make_adam(agent.log_alpha.parameters(), lr=agent._lr(agent.progress))
        agent._auto_alpha = True
    else:
        agent._fixed_alpha = torch.tensor(float(ent_coef), device=agent.device)
        agent._auto_alpha = False
        # A SAC built with a fixed coefficient has neither: a save now loads like one.
        agent.log_alpha = None
        agent.alpha_optimizer = None
