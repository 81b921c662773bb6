"""PPO: proximal policy optimization with the clipped objective (Schulman et al. 2017).

Reads top to bottom: hyperparameters, then the update. Networks, acting, rollout storage and GAE
are shared with A2C in ``on_policy.py``. Defaults are rl-baselines3-zoo's tuned values for
CartPole-v1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..schedules import Schedule, as_schedule, linear
from ..validation import checked, integer, number, optional
from .base import register
from .networks import make_adam
from .on_policy import OnPolicyAgent, OnPolicyConfig

__all__ = ["PPO", "ClippedSurrogateConfig", "PPOConfig", "clipped_epochs", "clipped_metrics", "clipped_step"]


@dataclass
class ClippedSurrogateConfig:
    """The clipped surrogate's hyperparameters, shared by PPO and APPO (a mixin: listed before the base
    config, its fields come after the base's)."""

    batch_size: int = checked(256, integer(min=1), live=True)
    """Minibatch size for the update."""
    n_epochs: int = checked(20, integer(min=1), live=True)
    """Passes over each rollout."""
    clip_range: float | Schedule = checked(
        constraint=number(0, min_open=True, schedule=True), default_factory=lambda: linear(0.2, 0.0), live=True
    )
    """PPO clip epsilon for the probability ratio (APPO's: against the behaviour policy)."""
    target_kl: float | None = checked(None, optional(number(0, min_open=True)), live=True)
    """Stop the epochs early when the approximate KL exceeds this."""


@dataclass
class PPOConfig(ClippedSurrogateConfig, OnPolicyConfig):
    """PPO hyperparameters (defaults: rl-baselines3-zoo, CartPole-v1); the shared ones are
    :class:`OnPolicyConfig`'s."""

    # The zoo's CartPole values for shared fields:
    n_steps: int = 32
    gamma: float = 0.98
    gae_lambda: float = 0.8
    learning_rate: float | Schedule = field(default_factory=lambda: linear(1e-3, 0.0))
    normalize_advantage: bool = True


@register
class PPO(OnPolicyAgent):
    """Proximal policy optimization for Discrete, MultiDiscrete, MultiBinary and Box action spaces, and Dict /
    Tuple ones of those (one head per leaf, hybrid actions: docs/actions.md), with action masks honoured for
    the discrete heads, on several envs.

    Example::

        agent = wb.PPO("CartPole-v1")              # zoo-tuned defaults
        wb.Session(agent, "CartPole-v1").run(steps=100_000)
    """

    Config = PPOConfig
    default_plots = ("episode_reward", "loss")
    config: PPOConfig

    def _build(self) -> None:
        build_clipped(self)

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        batch = self._rollout_batch()
        metrics = clipped_update(
            self, batch.obs, batch.actions, batch.masks, batch.advantages, batch.log_probs, batch.returns
        )
        metrics["explained_variance"] = self.explained_variance(batch.values, batch.returns_np)
        return self._end_update(metrics, batch)


def build_clipped(agent: OnPolicyAgent) -> None:
    """The networks and optimizer of a clipped-surrogate agent (PPO and APPO build alike): the actor-critic,
    the learning-rate and clip-range schedules, and Adam with PPO's epsilon of 1e-5."""
    params = agent._build_actor_critic()
    agent._lr = as_schedule(agent.config.learning_rate)
    agent._clip = as_schedule(agent.config.clip_range)
    agent.optimizer = make_adam(params, lr=agent._lr(0.0), eps=1e-5)


def clipped_update(
    agent: OnPolicyAgent,
    obs: torch.Tensor,
    actions: torch.Tensor,
    masks: torch.Tensor | None,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    returns: torch.Tensor,
) -> dict[str, float]:
    """One update of PPO's clipped objective over a batch of rows, flat (PPO's rollout, APPO's V-trace batch:
    ``old_log_probs`` are the behaviour policy's, ``returns`` the value targets): this update's learning
    rate and clip range, then :func:`clipped_epochs` of :func:`clipped_step`; returns
    :func:`clipped_metrics`."""
    n = obs.shape[0]
    batch_size = min(agent.config.batch_size, n)
    lr = agent._scheduled_lr()
    clip = agent._clip(agent.progress)

    def minibatch(mb: torch.Tensor) -> torch.Tensor:
        mb_obs = obs[mb]
        mb_masks = None if masks is None else masks[mb]
        log_prob, entropy = agent._policy_terms(mb_obs, actions[mb], mb_masks)
        values = agent._values(mb_obs)
        return clipped_step(agent, log_prob, entropy, values, advantages[mb], old_log_probs[mb], returns[mb], clip)

    return clipped_metrics(clipped_epochs(agent, n, batch_size, minibatch), clip, lr)


def clipped_epochs(
    agent: OnPolicyAgent, n: int, batch_size: int, minibatch: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """PPO's epochs (PPO and RecurrentPPO share them): ``n_epochs`` passes over a fresh permutation of
    ``range(n)`` in slices of ``batch_size``, ``minibatch(indices)`` taking one :func:`clipped_step` on each;
    the epochs stop early when an epoch's last minibatch's approximate KL passes ``1.5 * target_kl``.
    Returns the mean of the rows."""
    c = agent.config
    stats = torch.zeros(6, device=agent.device)  # policy, value, entropy, kl, clip fraction, total loss
    n_minibatches = 0
    for _ in range(c.n_epochs):
        # Drawn on the agent's CPU generator (the same permutation on every device), then moved.
        perm = torch.randperm(n, generator=agent.generator).to(agent.device)
        row = None
        for start in range(0, n, batch_size):
            row = minibatch(perm[start : start + batch_size])
            stats += row
            n_minibatches += 1
        # The epoch's last minibatch's KL, read once an epoch (a GPU waits for it only here).
        epoch_kl = 0.0 if row is None else float(row[3])
        if c.target_kl is not None and epoch_kl > 1.5 * c.target_kl:
            break
    return stats / n_minibatches


def clipped_step(
    agent: OnPolicyAgent,
    log_prob: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    adv: torch.Tensor,
    old_log_prob: torch.Tensor,
    returns: torch.Tensor,
    clip: float,
) -> torch.Tensor:
    """One gradient step on PPO's clipped objective for a minibatch (PPO and RecurrentPPO share it).

    Returns the detached row (policy loss, value loss, entropy, approximate KL, clip fraction, loss)."""
    adv = agent._normalized(adv)
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
    value_loss, entropy_mean, loss = agent._actor_critic_step(policy_loss, entropy, values, returns)

    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipped = ((ratio - 1).abs() > clip).float().mean()
        return torch.stack([policy_loss, value_loss, entropy_mean, approx_kl, clipped, loss]).detach()


def clipped_metrics(row: torch.Tensor, clip: float, lr: float) -> dict[str, float]:
    """An update's metrics from the mean of its :func:`clipped_step` rows (PPO and RecurrentPPO share them)."""
    policy_loss, value_loss, entropy, kl, clip_fraction, loss = row.tolist()
    return {
        "loss": loss,
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": kl,
        "clip_fraction": clip_fraction,
        "clip_range": clip,
        "learning_rate": lr,
    }
