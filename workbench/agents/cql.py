"""CQL: conservative Q-learning (Kumar et al. 2020), for discrete and continuous actions.

Offline, a Q-function overestimates the actions the data never tried, and a greedy policy picks
exactly those. CQL adds to the temporal-difference loss a term that pushes Q down on all actions
(a soft maximum, ``logsumexp``) and up on the logged ones, so the learned values are conservative
outside the data.

* Discrete actions: double DQN + ``cql_weight * (logsumexp_a Q(s, a) - Q(s, a_data))`` (CQL(H)).
* Box actions: SAC (twin critics, learned entropy coefficient) + the same term, the ``logsumexp``
  estimated from ``n_action_samples`` uniform actions and actions of the policy at ``s`` and ``s'``
  (the paper's importance-sampled CQL(H)). One critic pass covers the logged and all sampled rows.
  The policy that acts is an exponential moving average of the trained policy's weights
  (``policy_average_tau``; Polyak averaging of the iterates): the trained policy chases critics that
  keep moving, and its return swings from one thousand steps to the next; the average does not.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..validation import checked, flag, integer, number, optional
from .base import register
from .networks import EnsembleMLP, ScalarParameter, make_adam, mlp
from .offline import OfflineAgent, OfflineBatch, OfflineConfig, SquashedGaussianActor
from .updates import gradient_step, polyak_update

__all__ = ["CQL", "CQLConfig"]


@dataclass
class CQLConfig(OfflineConfig):
    """CQL hyperparameters; the shared ones are :class:`OfflineConfig`'s.

    Discrete defaults: double DQN with Huber loss, soft target updates (tau 0.005), lr 3e-4, batch
    256, ``cql_weight`` 1.0 (the paper's discrete CQL(H) weight). Measured with them (docs/offline.md,
    ``benchmarks/offline.py``): from 50k CartPole transitions of an epsilon-greedy DQN averaging
    102-114, 5000 gradient steps play 500 on 4 of 5 seeds (the fifth 354; 10 deterministic episodes).
    Box actions, on 20k Pendulum transitions of a half-trained SAC (behaviour -533.7), with
    ``learning_rate=1e-3, actor_lr=1e-3`` and 2000 steps: -399 to -664 over 5 seeds, better than the
    behaviour on 3 (the defaults learn slower: -748 at 2000 steps on seed 0); with
    ``net_arch=(64, 64)`` too and 6000 steps (about 75 CPU-seconds), acting with the policy's
    moving average (``policy_average_tau`` 0.02): mean -284 over 40 seeds, better than the behaviour
    on 38, at least d3rlpy's CQL at equal settings on 22 of 40 (its mean -295) in about half its
    wall time; the trained policy acting itself: mean -328, 34 of 40."""

    cql_weight: float | None = checked(None, optional(number(0)))
    """Weight of the conservative term; None: 1.0 for discrete actions, 5.0 for Box actions."""
    tau: float = checked(0.005, number(0, 1, min_open=True))
    """Target network update rate, every gradient step."""
    actor_lr: float = checked(1e-4, number(0, min_open=True))
    """Box actions: the policy's (and the entropy coefficient's) learning rate."""
    n_action_samples: int = checked(10, integer(min=1))
    """Box actions: sampled actions per state for the ``logsumexp`` estimate."""
    initial_alpha: float = checked(1.0, number(0, min_open=True))
    """Box actions: the entropy coefficient to start from (it is learned)."""
    max_grad_norm: float = checked(10.0, number(0, min_open=True))
    """Discrete actions: gradient norm clip."""
    entropy_backup: bool = checked(False, flag())
    """Box actions: subtract ``alpha * log pi(a'|s')`` from the next state's value in the TD target
    (SAC's soft backup). Off by default, as in d3rlpy (``soft_q_backup=False``) and CORL's CQL
    (``backup_entropy=False``); docs/offline.md compares the two on Pendulum."""
    bc_steps: int = checked(0, integer(min=0))
    """Box actions: for this many first gradient steps the policy imitates the logged actions (the
    paper's ``policy_eval_start``: a behaviour-cloning start while the critics learn), then it
    maximizes Q."""
    policy_average_tau: float | None = checked(0.02, optional(number(0, 1, min_open=True)))
    """Box actions: the policy that acts (``act``, ``play``, evaluation) is an exponential moving
    average of the trained policy's weights, moved this far towards them every gradient step; None:
    the trained policy acts itself. The trained policy follows critics that keep changing, and on
    Pendulum its return moves by about 120 from one thousand steps to the next; the average damps
    that: over 40 seeds, mean -284 at 0.02 against -328 with None (rates 0.001 to 0.1 in
    docs/offline.md). Runs saved before this option act as None."""


@register
class CQL(OfflineAgent):
    """Conservative Q-learning (offline) for Discrete and Box action spaces.

    Example::

        agent = wb.CQL(dataset=ds)                 # DQN + CQL on Discrete, SAC + CQL on Box actions
        wb.Session(agent, dataset=ds, eval_env="Pendulum-v1", eval_every=5000).run(steps=50_000)
    """

    Config = CQLConfig
    default_plots = ("eval_reward", "cql_loss", "ope_dr")
    network_names = ("q_net", "q_target", "actor", "actor_average", "critic", "critic_target", "log_alpha")
    optimizer_names = ("optimizer", "actor_optimizer", "alpha_optimizer")
    config: CQLConfig

    def _build(self) -> None:
        c = self.config
        obs_dim = int(np.prod(self.obs_shape))
        if c.cql_weight is None:
            self.cql_weight = 1.0 if self.discrete else 5.0
        else:
            self.cql_weight = float(c.cql_weight)
        if self.discrete:
            n = int(self.action_space.n)
            self.q_net = mlp(obs_dim, c.net_arch, n)
            self.q_target = mlp(obs_dim, c.net_arch, n)
            self.q_target.load_state_dict(self.q_net.state_dict())
            self.q_target.requires_grad_(False)
            self.optimizer = make_adam(self.q_net.parameters(), lr=c.learning_rate)
            return
        self.act_dim = int(np.prod(self.action_space.shape))
        self.actor = SquashedGaussianActor(obs_dim, c.net_arch, self.act_dim)
        self.actor_average = None
        if c.policy_average_tau is not None:
            self.actor_average = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = EnsembleMLP(2, obs_dim + self.act_dim, c.net_arch, 1)
        self.critic_target = EnsembleMLP(2, obs_dim + self.act_dim, c.net_arch, 1)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        self.log_alpha = ScalarParameter(math.log(c.initial_alpha))
        self.target_entropy = -float(self.act_dim)
        self.optimizer = make_adam(self.critic.parameters(), lr=c.learning_rate)
        self.actor_optimizer = make_adam(self.actor.parameters(), lr=c.actor_lr)
        self.alpha_optimizer = make_adam(self.log_alpha.parameters(), lr=c.actor_lr)

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        x = self._tensor(obs)
        if self.discrete:
            return self._host(self.q_net(x).argmax(-1))
        actor = self.actor if self.actor_average is None else self.actor_average  # policy_average_tau
        if deterministic:
            return self._scale_action(self._host(torch.tanh(actor(x)[0])))
        return self._scale_action(self._host(actor.sample(x, self.generator)[0]))

    def _learn(self, batch: OfflineBatch) -> dict[str, float]:
        return self._learn_discrete(batch) if self.discrete else self._learn_continuous(batch)

    def _learn_discrete(self, batch: OfflineBatch) -> dict[str, float]:
        c = self.config
        with torch.no_grad():
            next_actions = self.q_net(batch.next_obs).argmax(-1, keepdim=True)
            next_value = self.q_target(batch.next_obs).gather(1, next_actions).squeeze(1)
            target = batch.rewards + c.gamma * (1.0 - batch.dones) * next_value
        all_q = self.q_net(batch.obs)
        q = all_q.gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)
        td = F.smooth_l1_loss(q, target)
        conservative = (torch.logsumexp(all_q, -1) - q).mean()
        loss = td + self.cql_weight * conservative
        gradient_step(self.optimizer, loss, c.max_grad_norm)
        polyak_update(self.q_target, self.q_net, c.tau)
        return {
            "loss": float(td.detach()),
            "cql_loss": float(conservative.detach()),
            "q_mean": float(q.detach().mean()),
        }

    def _q(self, net: torch.nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Both critics' values, shape ``(2, batch)``."""
        return net(torch.cat([obs, actions], -1)).squeeze(-1)

    def _critic_rows(
        self, obs: torch.Tensor, actions: torch.Tensor, pi_actions: torch.Tensor, next_pi_actions: torch.Tensor
    ) -> torch.Tensor:
        """The critics' input rows of one step: the logged ``(s, a)``, then for each state ``n``
        uniform actions, ``n`` of the policy at ``s`` and ``n`` of the policy at ``s'`` (all at ``s``),
        shape ``(b + 3 b n, obs_dim + act_dim)``: one pass of the critics covers them all."""
        b, d = obs.shape
        n, width = self.config.n_action_samples, d + self.act_dim
        rows = torch.empty((b * (1 + 3 * n), width), device=obs.device)
        rows[:b, :d] = obs
        rows[:b, d:] = actions
        sampled = rows[b:].view(3, b, n, width)
        sampled[..., :d] = obs.unsqueeze(1)
        uniform = sampled[0, ..., d:]
        if uniform.device == self.generator.device:
            uniform.uniform_(-1.0, 1.0, generator=self.generator)
        else:  # drawn on the agent's CPU generator (the same numbers on every device), then copied
            uniform.copy_(torch.empty(uniform.shape).uniform_(-1.0, 1.0, generator=self.generator))
        sampled[1, ..., d:] = pi_actions.view(b, n, self.act_dim)
        sampled[2, ..., d:] = next_pi_actions.view(b, n, self.act_dim)
        return rows

    def _learn_continuous(self, batch: OfflineBatch) -> dict[str, float]:
        c = self.config
        alpha = self.log_alpha().exp().detach()
        obs, actions = batch.obs, batch.actions.float()
        b, n = len(obs), c.n_action_samples
        sample = self.actor.squashed_sample
        with torch.no_grad():
            # one policy pass per state, repeated for its n sampled actions
            next_mean, next_log_std = self.actor(batch.next_obs)
            next_a, next_logp = sample(next_mean, next_log_std, self.generator)
            next_q = self._q(self.critic_target, batch.next_obs, next_a).min(0).values
            if c.entropy_backup:
                next_q = next_q - alpha * next_logp
            target = batch.rewards + c.gamma * (1.0 - batch.dones) * next_q
            mean, log_std = self.actor(obs)
            pi_a, pi_logp = sample(mean.repeat_interleave(n, 0), log_std.repeat_interleave(n, 0), self.generator)
            npi_a, npi_logp = sample(
                next_mean.repeat_interleave(n, 0), next_log_std.repeat_interleave(n, 0), self.generator
            )
            rows = self._critic_rows(obs, actions, pi_a, npi_a)
            # each sampled action's log-density, subtracted from its value (importance sampling)
            log_density = torch.stack(
                [
                    torch.full((b, n), self.act_dim * math.log(0.5), device=obs.device),
                    pi_logp.view(b, n),
                    npi_logp.view(b, n),
                ]
            )
        q_all = self.critic(rows).squeeze(-1)
        q = q_all[:, :b]
        td = (q - target).pow(2).mean(1).sum()  # each critic's MSE (the paper's, d3rlpy's)
        samples = q_all[:, b:].view(2, 3, b, n) - log_density
        conservative = (torch.logsumexp(samples, (1, 3)) - math.log(3 * n) - q).mean(1).sum()
        loss = td + self.cql_weight * conservative
        self._step(self.optimizer, loss)

        new_a, logp = self.actor.sample(obs, self.generator)
        if self.num_updates < c.bc_steps:  # imitate the data first (the paper's policy_eval_start)
            actor_loss = (alpha * logp - self.actor.log_prob(obs, actions)).mean()
        else:
            actor_loss = (alpha * logp - self._q(self.critic, obs, new_a).min(0).values).mean()
        self._step(self.actor_optimizer, actor_loss)
        alpha_loss = -(self.log_alpha() * (logp.detach() + self.target_entropy)).mean()
        self._step(self.alpha_optimizer, alpha_loss)
        polyak_update(self.critic_target, self.critic, c.tau)
        if self.actor_average is not None:
            polyak_update(self.actor_average, self.actor, c.policy_average_tau)
        return {
            "critic_loss": float(td.detach()),
            "cql_loss": float(conservative.detach()),
            "actor_loss": float(actor_loss.detach()),
            "alpha": float(alpha),
            "q_mean": float(q.detach().mean()),
        }
