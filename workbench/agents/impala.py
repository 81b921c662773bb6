"""IMPALA: importance-weighted actor-learner with V-trace targets (Espeholt et al. 2018).

Reads top to bottom: the V-trace computation (written once; APPO uses it too), hyperparameters, then
the update. Networks, acting, rollout storage and masks are shared with PPO and A2C in ``on_policy.py``.

An asynchronous agent learns from rollouts that envs stepped with weights a few updates old: the
behaviour policy's log-probabilities travel with every step in its ``extras`` (``log_probs``), and the
V-trace targets correct for the gap with truncated importance weights ``rho = min(rho_bar, pi/mu)`` and
trace cut ``c = lambda * min(c_bar, pi/mu)``. A session steps its envs in a sampler thread (local workers
or in-process) or on Ray actors while the learner updates; rollouts older than ``max_policy_lag``
learner updates are dropped (``workbench.parallel.asynchronous``). Defaults: RLlib's IMPALA
(``lr=5e-4``, ``vf_loss_coeff=0.5``, ``entropy_coeff=0.01``, ``grad_clip=40``, ``vtrace_clip_rho_threshold``
and ``vtrace_clip_pg_rho_threshold`` 1.0), with rollouts of 32 steps on 8 envs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..schedules import Schedule, as_schedule
from ..validation import checked, integer, number
from .base import register
from .networks import make_adam
from .on_policy import OnPolicyAgent, OnPolicyConfig

__all__ = ["IMPALA", "IMPALAConfig", "VTraceBatch", "vtrace"]


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    bootstrap: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages over ``(n_steps, n_envs)`` tensors (Espeholt et
    al. 2018, eq. 1 and section 4.2), computed backwards as ``vs_t - V(x_t) = delta_t + gamma c_t (vs_{t+1}
    - V(x_{t+1}))`` with ``delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))``.

    ``log_rhos``: ``log pi(a_t|x_t) - log mu(a_t|x_t)`` (target minus behaviour); ``values``: ``V(x_t)``;
    ``bootstrap``: ``V(x_T)`` after the last step; ``dones[t]`` 1 where the episode ended at step ``t``
    (nothing is bootstrapped across it; a time limit's bootstrap is already in its reward, as for GAE).
    ``rho = min(rho_bar, pi/mu)``, ``c = lam * min(c_bar, pi/mu)``. Returns ``(vs, pg_advantages)`` with
    ``pg_advantages_t = rho_t (r_t + gamma vs_{t+1} - V(x_t))``. On-policy (``log_rhos`` 0), ``vs`` are
    GAE(``lam``)'s returns, and with ``lam=1`` the advantages are the n-step advantages."""
    with torch.no_grad():
        rhos = log_rhos.exp()
        clipped_rhos = rhos.clamp(max=rho_bar)
        cs = lam * rhos.clamp(max=c_bar)
        discounts = gamma * (1.0 - dones)
        next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)])
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        vs_minus_v = torch.zeros_like(values)
        acc = torch.zeros_like(bootstrap)
        for t in reversed(range(values.shape[0])):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap.unsqueeze(0)])
        pg_advantages = clipped_rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages


class VTraceBatch(NamedTuple):
    """A rollout flattened over ``(n_steps * n_envs)`` rows with its V-trace targets."""

    obs: torch.Tensor
    actions: torch.Tensor
    behaviour_log_probs: torch.Tensor
    advantages: torch.Tensor
    """V-trace's policy-gradient advantages (``rho``-weighted)."""
    targets: torch.Tensor
    """V-trace's value targets ``vs``."""
    masks: torch.Tensor | None
    values: torch.Tensor
    """The learner's ``V(x_t)`` before the update (for explained variance)."""
    mean_rho: float
    """Mean importance weight ``pi/mu`` (unclipped): 1 when acting and learning weights agree."""


@dataclass
class IMPALAConfig(OnPolicyConfig):
    """IMPALA hyperparameters (defaults: RLlib's IMPALA, with 32-step rollouts on 8 envs); the shared ones
    are :class:`OnPolicyConfig`'s (``gae_lambda`` is V-trace's ``lambda`` in its trace cut)."""

    n_steps: int = 32
    learning_rate: float | Schedule = 5e-4
    ent_coef: float = 0.01
    max_grad_norm: float = 40.0

    rho_bar: float = checked(1.0, number(0, min_open=True), live=True)
    """V-trace's importance-weight clip for the value targets and the policy gradient (``rho_bar``)."""
    c_bar: float = checked(1.0, number(0, min_open=True), live=True)
    """V-trace's trace-cutting clip (``c_bar``): how far back an off-policy step's error travels."""
    max_policy_lag: int = checked(20, integer(min=0), live=True)
    """Learner updates a rollout may lag behind the learner (the weights that stepped it against the
    learner's now); older rollouts are dropped and counted (``batches_dropped``). 0: on-policy only."""


@register
class IMPALA(OnPolicyAgent):
    """V-trace actor-critic for Discrete, MultiDiscrete, MultiBinary and Box action spaces (masks
    honoured for Discrete and MultiDiscrete), learning while its envs step (``asynchronous``).

    Example::

        agent = wb.IMPALA("CartPole-v1")
        wb.Session(agent, "CartPole-v1", num_workers=2, backend="local").run(steps=200_000)
    """

    Config = IMPALAConfig
    asynchronous = True
    default_plots = ("episode_reward", "loss", "policy_lag")
    config: IMPALAConfig

    def _build(self) -> None:
        params = self._build_actor_critic()
        self._lr = as_schedule(self.config.learning_rate)
        self.optimizer = make_adam(params, lr=self._lr(0.0), eps=1e-5)

    @property
    def max_policy_lag(self) -> int | None:
        """``max_policy_lag``: the oldest rollout (in learner updates) it still learns from."""
        return int(self.config.max_policy_lag)

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        batch = self._vtrace_batch()
        lr = self._scheduled_lr()
        log_prob, entropy = self._policy_terms(batch.obs, batch.actions, batch.masks)
        values = self._values(batch.obs)
        policy_loss = -(self._normalized(batch.advantages) * log_prob).mean()
        value_loss, entropy_mean, loss = self._actor_critic_step(policy_loss, entropy, values, batch.targets)
        loss_v, policy_v, value_v, entropy_v = torch.stack([loss, policy_loss, value_loss, entropy_mean]).tolist()
        metrics = {"loss": loss_v, "policy_loss": policy_v, "value_loss": value_v, "entropy": entropy_v}
        return self._end_vtrace_update({**metrics, "learning_rate": lr}, batch)

    def _vtrace_batch(self) -> VTraceBatch:
        """The full rollout, flat, with V-trace targets from the learner's current networks and the
        behaviour log-probabilities the steps carried."""
        c = self.config
        rollout = self.rollout
        assert rollout is not None and rollout.full, "update() called before a rollout was full"
        n_steps, n_envs = rollout.n_steps, rollout.n_envs
        obs = self._tensor(rollout.obs.reshape(-1, *self.obs_shape))
        actions = self._tensor(rollout.actions.reshape(-1, *rollout.actions.shape[2:]))
        masks = None if rollout.masks is None else self._tensor(rollout.masks.reshape(n_steps * n_envs, -1))
        behaviour = self._tensor(rollout.log_probs.reshape(-1))
        with torch.no_grad():
            target, _ = self._policy_terms(obs, actions, masks)
            values = self._values(obs)
            bootstrap = self._values(self._tensor(self._next_obs))
        log_rhos = (target - behaviour).reshape(n_steps, n_envs)
        vs, advantages = vtrace(
            log_rhos,
            self._tensor(rollout.rewards),
            values.reshape(n_steps, n_envs),
            self._tensor(rollout.dones),
            bootstrap,
            c.gamma,
            rho_bar=c.rho_bar,
            c_bar=c.c_bar,
            lam=c.gae_lambda,
        )
        return VTraceBatch(
            obs=obs,
            actions=actions,
            behaviour_log_probs=behaviour,
            advantages=advantages.reshape(-1),
            targets=vs.reshape(-1),
            masks=masks,
            values=values,
            mean_rho=float(log_rhos.exp().mean()),
        )

    def _end_vtrace_update(self, metrics: dict[str, float], batch: VTraceBatch) -> dict[str, float]:
        """Start the next rollout, count the update; add explained variance and the mean importance weight."""
        metrics["explained_variance"] = self.explained_variance(
            self._host(batch.values), self._host(batch.targets).reshape(-1)
        )
        metrics["importance_weight"] = batch.mean_rho
        assert self.rollout is not None
        self.rollout.reset()
        self.num_updates += 1
        self._sde_weights = None
        if self.log_std is not None and not self.use_sde:
            metrics["policy_std"] = float(self.log_std.detach().exp().mean())
        if self.action_layout is not None:  # a composite space: each head's entropy signal, as PPO's
            with torch.no_grad():
                metrics.update(self._head_entropies(self._forward(self.actor, batch.obs), batch.actions, batch.masks))
        return metrics
