"""SAC: soft actor-critic (Haarnoja et al. 2018) with twin critics, target critics and automatic
entropy tuning, for Box action spaces; optionally with generalized state-dependent exploration
(gSDE, Raffin et al. 2022), as the zoo uses on MountainCarContinuous.

Reads top to bottom: hyperparameters, networks, acting, storing, the update.
Defaults are Stable-Baselines3's; ``wb.preset(env_id, "sac")`` gives rl-baselines3-zoo's tuning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..memory.replay import ReplayBatch, ReplayMemory
from ..schedules import as_schedule
from ..validation import Constraint, any_of, checked, choice, flag, integer, number, optional
from .base import Transitions, register
from .encoders import with_encoder
from .heads import PolicyHead, ScaledIntoBounds, SquashedMean, frozen
from .networks import (
    NETWORKS,
    EnsembleMLP,
    LayerFactory,
    ScalarParameter,
    check_network,
    drawn_like,
    make_adam,
    mlp,
    network,
)
from .off_policy import OffPolicyAgent, OffPolicyConfig
from .updates import gradient_step, polyak_update

__all__ = ["SAC", "SACConfig"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # keeps the Gaussian from collapsing or exploding (SB3, spinning-up)


def squashed_gaussian_log_prob(z: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The log-density of ``tanh(u)`` where ``u = mean + exp(log_std) * z`` is Gaussian: log N(u) minus
    log|d tanh(u)/du|, the latter written stably as 2 (log 2 - u - softplus(-2u)), summed over the last axis.
    The one formula both the actor's reparameterised draw and :meth:`SAC.log_density` use."""
    log_prob = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


def _is_auto(value: object) -> bool:
    if not isinstance(value, str) or not value.startswith("auto"):
        return False
    if value == "auto":
        return True
    start = value.removeprefix("auto_")
    return start != value and number(0, min_open=True)(float(start))


_AUTO_ENT_COEF = Constraint('"auto" (learned, starting at 1) or "auto_<start>" such as "auto_0.1"', _is_auto)


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC hyperparameters (defaults: Stable-Baselines3); the shared ones are :class:`OffPolicyConfig`'s."""

    ent_coef: float | str = checked("auto", any_of(number(0, min_open=True), _AUTO_ENT_COEF), live=True)
    """Entropy coefficient alpha: a number, "auto" (learned, starts at 1) or "auto_0.1" (learned, starts at 0.1)."""
    target_entropy: float | None = checked(None, optional(number()), live=True)
    """Entropy the automatic tuning aims for; None means -dim(action)."""
    target_update_interval: int = checked(1, integer(min=1), live=True)
    """Gradient steps between target critic updates."""
    n_critics: int = checked(2, integer(min=1))
    """Critics whose minimum is the target (clipped double Q)."""
    use_sde: bool = checked(False, flag())
    """Generalized state-dependent exploration: noise linear in the actor's features, smooth in time."""
    sde_sample_freq: int = checked(-1, integer(min=1, also=(-1,)), live=True)
    """With use_sde, env steps between new noise weights; -1: once per update."""
    log_std_init: float = checked(-3.0, number())
    """With use_sde, initial log std of the noise weights."""
    use_expln: bool = checked(False, flag())
    """With use_sde, the noise weights' std is expln(log_std) (exp up to 0, log1p + 1 above: it grows slowly),
    as SB3's use_expln; False: exp(log_std)."""
    networks: ClassVar[tuple[str, ...]] = NETWORKS
    network: str = checked("mlp", choice(*NETWORKS))
    """The actor's and critics' network: "mlp" (ReLU layers of net_arch) or "simba" (Lee et al. 2025: residual
    blocks with layer norm, net_arch=(width,) * blocks, observations normalized); network=wb.SimBa(width, blocks)
    and net_arch="simba" say the same."""

    def __post_init__(self) -> None:
        check_network(self, type(self).__name__.removesuffix("Config"), use_sde=self.use_sde is True)


class SDEActor(nn.Module):
    """The actor for gSDE: hidden features, a mean head clipped to [-2, 2] (as SB3 does, so tanh
    does not saturate), and a learned log std per (feature, action) pair. The noise of an action is
    ``features @ W`` with ``W ~ N(0, noise_std()^2)`` held fixed between resamplings.

    ``before`` builds layers placed before every linear layer and after the last hidden one (CrossQ's batch
    renormalization: the features the noise is built from are normalized too, as sb3-contrib's). With
    ``use_expln`` the noise std is SB3's ``expln(log_std)``: ``exp`` up to 0, ``log1p(log_std) + 1`` above,
    so it grows slowly rather than exponentially."""

    def __init__(
        self,
        obs_dim: int,
        net_arch: tuple[int, ...],
        act_dim: int,
        log_std_init: float,
        encoder: nn.Module | None = None,
        *,
        before: Sequence[LayerFactory] = (),
        use_expln: bool = False,
    ) -> None:
        super().__init__()
        if not net_arch:
            raise ValueError("use_sde needs at least one hidden layer (net_arch)")
        width = net_arch[-1]
        trunk = nn.Sequential(mlp(obs_dim, net_arch[:-1], width, before=before), nn.ReLU(), *(b(width) for b in before))
        self.trunk = with_encoder(encoder, trunk)
        self.mu = nn.Linear(width, act_dim)
        self.log_std = nn.Parameter(torch.full((width, act_dim), float(log_std_init)))
        self.use_expln = use_expln

    def noise_std(self) -> torch.Tensor:
        """The std of each noise weight, ``(features, actions)``: ``exp(log_std)``, or with ``use_expln``
        ``exp`` where ``log_std <= 0`` and ``log1p(log_std) + 1`` above (SB3's expln, continuous at 0)."""
        if not self.use_expln:
            return self.log_std.exp()
        below = torch.exp(self.log_std) * (self.log_std <= 0)
        safe = self.log_std * (self.log_std > 0) + 1e-6
        return below + (torch.log1p(safe) + 1.0) * (self.log_std > 0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean actions (before tanh) and the features the noise is built from."""
        features = self.trunk(obs)
        return self.mu(features).clamp(-2.0, 2.0), features

    def action_std(self, features: torch.Tensor) -> torch.Tensor:
        """Each action's standard deviation given the state's features: its variance is
        sum_l features_l^2 std_la^2 (a Gaussian in the pre-tanh action given the state)."""
        return ((features.pow(2) @ self.noise_std().pow(2)) + 1e-6).sqrt()


@register
class SAC(OffPolicyAgent):
    """Soft actor-critic for Box action spaces (bounded).

    Example::

        agent = wb.SAC("Pendulum-v1", learning_rate=1e-3)
        wb.Session(agent, "Pendulum-v1").run(steps=20_000)
    """

    Config = SACConfig
    default_plots = ("episode_reward", "critic_loss", "actor_loss")
    action_spaces = (spaces.Box,)
    network_names = ("actor", "critic", "critic_target", "log_alpha")
    optimizer_names = ("actor_optimizer", "critic_optimizer", "alpha_optimizer")
    config: SACConfig
    log_alpha: ScalarParameter | None = None  # learned entropy coefficient (ent_coef="auto"), else None
    entropy_with_actor: ClassVar[bool] = False
    """False: the policy's draw and the entropy coefficient's step come first in every gradient step (SAC, SB3);
    True: only in the steps that update the actor, after the critics' step (CrossQ, as sb3-contrib's)."""
    alpha_optimizer: torch.optim.Optimizer | None = None

    # -- networks -----------------------------------------------------------------------------

    def _build(self) -> None:
        c = self.config
        self._require_bounded_actions()
        self.act_dim = int(np.prod(self.action_space.shape))
        enc, obs_dim = self._encoder()  # a CNN for images, none for vectors
        self.actor: nn.Module = self._build_actor(obs_dim, enc)
        self._build_critics(obs_dim)

        self._lr = as_schedule(c.learning_rate)
        lr0 = self._lr(0.0)
        self.actor_optimizer = self._adam(self.actor.parameters(), lr0)
        self.critic_optimizer = self._adam(self.critic.parameters(), lr0)

        self.target_entropy = float(-self.act_dim if c.target_entropy is None else c.target_entropy)
        if isinstance(c.ent_coef, str):
            if not c.ent_coef.startswith("auto"):
                raise ValueError(f'SAC ent_coef must be a number, "auto" or "auto_0.1", got {c.ent_coef!r}')
            init = float(c.ent_coef.split("_", 1)[1]) if "_" in c.ent_coef else 1.0
            self.log_alpha = ScalarParameter(math.log(init))
            self.alpha_optimizer = make_adam(self.log_alpha.parameters(), lr=lr0)
            self._auto_alpha = True
        else:
            self._fixed_alpha = torch.tensor(float(c.ent_coef))
            self._auto_alpha = False

        self.memory = ReplayMemory(
            c.buffer_size, self.obs_shape, self.action_space.shape, np.float32, **self._memory_options()
        )
        self._steps_since_update = 0
        self._sde_weights: torch.Tensor | None = None  # exploration noise weights, one set per env
        self._sde_steps = 0
        self._last_actor_loss = 0.0
        self._last_entropy = 0.0

    # The hooks the SAC family (TQC, CrossQ, DroQ) overrides; SAC's own are the plain ones.

    def _build_actor(self, obs_dim: int, encoder: nn.Module | None) -> nn.Module:
        """The actor: gSDE's, or one MLP head giving the mean and log-std of a Gaussian that tanh squashes
        into [-1, 1]."""
        c = self.config
        if c.use_sde:
            return SDEActor(obs_dim, c.net_arch, self.act_dim, c.log_std_init, encoder, use_expln=c.use_expln)
        return with_encoder(encoder, network(c.network, obs_dim, c.net_arch, 2 * self.act_dim))

    def _build_critics(self, obs_dim: int) -> None:
        """``self.critic`` and ``self.critic_target``: ``n_critics`` Q-networks of one output each."""
        c = self.config
        simba = c.network == "simba"
        in_dim = obs_dim + self.act_dim
        self.critic = EnsembleMLP(c.n_critics, in_dim, c.net_arch, 1, encoder=self._encoder()[0], simba=simba)
        self.critic_target = EnsembleMLP(c.n_critics, in_dim, c.net_arch, 1, encoder=self._encoder()[0], simba=simba)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)

    def _adam(self, params: object, lr: float) -> torch.optim.Adam:
        """The actor's and the critics' optimizer (CrossQ's have other betas)."""
        return make_adam(params, lr=lr)

    def _critic_loss(
        self, batch: ReplayBatch, actions: torch.Tensor, alpha: torch.Tensor, sde_weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critics' loss on one batch and their mean estimate (for ``q_mean``): each critic's squared
        error against the soft Bellman target of the target critics' minimum (clipped double Q)."""
        with torch.no_grad():
            next_actions, next_log_prob = self._policy(batch.next_obs, sde_weights)
            next_q = self.critic_target(batch.next_obs, next_actions).min(0).values.squeeze(-1)
            target = self._soft_target(batch, next_q - alpha * next_log_prob)
        q = self.critic(batch.obs, actions).squeeze(-1)  # (n_critics, batch)
        return 0.5 * (q - target).pow(2).mean(1).sum(), q.detach().mean()

    @staticmethod
    def _soft_target(batch: ReplayBatch, soft_value: torch.Tensor) -> torch.Tensor:
        """``r + discount * (1 - done) * soft_value`` (the soft value may have a trailing quantile axis)."""
        not_done = batch.discounts * (1.0 - batch.dones)
        if soft_value.dim() > 1:
            return batch.rewards.unsqueeze(-1) + not_done.unsqueeze(-1) * soft_value
        return batch.rewards + not_done * soft_value

    def _actor_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The value the actor climbs, per sample: the critics' minimum."""
        return self.critic(obs, actions).min(0).values.squeeze(-1)

    def _alpha_step(self, log_prob: torch.Tensor) -> None:
        """One step of the learned entropy coefficient toward ``target_entropy`` (none when it is fixed)."""
        if self._auto_alpha:
            alpha_loss = -(self.log_alpha.value * (log_prob.detach() + self.target_entropy)).mean()
            gradient_step(self.alpha_optimizer, alpha_loss)

    def _actor_due(self) -> bool:
        """Whether this gradient step also updates the actor (CrossQ and DroQ delay it)."""
        return True

    def _update_target(self) -> None:
        """The target critics follow the critics (Polyak averaging)."""
        polyak_update(self.critic_target, self.critic, self.config.tau)

    def _sample_sde_weights(self, *batch: int) -> torch.Tensor:
        """Noise weights ``W ~ N(0, std^2)``, reparameterized so gradients reach ``log_std``."""
        std = self.actor.noise_std()
        return std * drawn_like(torch.randn((*batch, *std.shape), generator=self.generator), std)

    def _policy(self, obs: torch.Tensor, sde_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized squashed-Gaussian actions in [-1, 1] and their log-probabilities."""
        if self.config.use_sde:
            mean, features = self.actor(obs)
            weights = self._sample_sde_weights() if sde_weights is None else sde_weights
            if weights.dim() == 3:  # one set per env while acting
                noise_term = torch.einsum("bl,bla->ba", features, weights)
            else:
                noise_term = features @ weights
            u = mean + noise_term
            std = self.actor.action_std(features)
            z = noise_term / std
            log_std = std.log()
        else:
            mean, log_std = self.actor(obs).chunk(2, dim=-1)
            log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
            z = drawn_like(torch.randn(mean.shape, generator=self.generator), mean)
            u = mean + log_std.exp() * z
        # The log-probability before tanh: the order the graph is built in is the order autograd adds the two
        # gradients reaching u, and the reference weight hashes were made with this one.
        log_prob = squashed_gaussian_log_prob(z, log_std, u)
        return torch.tanh(u), log_prob

    def _mean_action(self, obs: torch.Tensor) -> torch.Tensor:
        if self.config.use_sde:
            return torch.tanh(self.actor(obs)[0])
        return torch.tanh(self.actor(obs)[:, : self.act_dim])

    def behaviour_log_probs(self, t: Transitions) -> np.ndarray | None:
        """The log-density of each taken action (:meth:`log_density`)."""
        return np.asarray(self.log_density(t.obs, t.actions), dtype=np.float64).reshape(-1)

    def log_density(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The log-density with which this agent, acting to learn (not deterministically), draws each of
        ``actions`` (env actions, in the action space's bounds) in the matching observation of ``obs`` (one or
        a batch, as :meth:`act` takes them): what a
        recorded dataset keeps as the behaviour's ``log_probs`` so that off-policy evaluation can weight it.

        Before ``learning_starts`` the agent draws uniformly in the bounds. Actions on a bound are taken a
        hair inside it (the squashed Gaussian's density is zero exactly there)."""
        batch, _ = self.prepare_obs(obs)
        with self._lock:
            if self.config.normalize_observations:
                batch = self.obs_normalizer(batch)
            return self._log_density(np.ascontiguousarray(batch), actions)

    @torch.no_grad()
    def _log_density(self, batch: np.ndarray, actions: np.ndarray) -> np.ndarray:
        obs_t = self._tensor(batch)
        unit = np.asarray(actions, dtype=np.float64).reshape(len(obs_t), -1)
        unit = (unit - self._action_center.reshape(-1)) / self._action_half_range.reshape(-1)
        # d(action)/d(unit action) is the half range in each dimension.
        log_scale = float(np.log(self._action_half_range).sum())
        if self.num_timesteps < self.config.learning_starts:
            return np.full(len(unit), -self.act_dim * np.log(2.0) - log_scale)
        u = torch.as_tensor(np.arctanh(np.clip(unit, -1 + 1e-6, 1 - 1e-6)), dtype=torch.float32)
        u = u.to(obs_t.device)
        if self.config.use_sde:
            mean, features = self.actor(obs_t)
            log_std = self.actor.action_std(features).log()
        else:
            mean, log_std = self.actor(obs_t).chunk(2, dim=-1)
            log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        log_prob = squashed_gaussian_log_prob((u - mean) / log_std.exp(), log_std, u)
        return self._host(log_prob).astype(np.float64).reshape(-1) - log_scale

    def _alpha(self) -> torch.Tensor:
        return self.log_alpha.value.detach().exp() if self._auto_alpha else self._fixed_alpha

    def policy_head(self) -> PolicyHead:
        """Export's head: tanh of the Gaussian mean, scaled into the action bounds."""
        squashed = SquashedMean(frozen(self.actor), self.act_dim, bool(self.config.use_sde))
        return PolicyHead(
            ScaledIntoBounds(squashed, self._action_center, self._action_half_range),
            "tanh of the Gaussian mean, scaled into the action bounds",
        )

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        c = self.config
        if deterministic:
            return self._scale_action(self._host(self._mean_action(self._tensor(obs))))
        if self.num_timesteps < c.learning_starts:
            squashed = self.rng.uniform(-1.0, 1.0, size=(obs.shape[0], self.act_dim))
        elif c.use_sde:
            resample = c.sde_sample_freq > 0 and self._sde_steps % c.sde_sample_freq == 0
            if resample or self._sde_weights is None or len(self._sde_weights) != len(obs):
                self._sde_weights = self._sample_sde_weights(len(obs))
            self._sde_steps += 1
            squashed = self._host(self._policy(self._tensor(obs), self._sde_weights)[0])
        else:
            squashed = self._host(self._policy(self._tensor(obs))[0])
        return self._scale_action(squashed).reshape(obs.shape[0], *self.action_space.shape)

    def apply_edits(self, changed: set[str]) -> None:
        """The learning-rate schedule, the entropy coefficient (a number, or ``"auto"`` / ``"auto_0.1"``
        to learn it from that start) and the target entropy; every optimizer's rate at once."""
        super().apply_edits(changed)
        c = self.config
        if "ent_coef" in changed:
            self._set_alpha(c.ent_coef)
        if "target_entropy" in changed:
            self.target_entropy = float(-self.act_dim if c.target_entropy is None else c.target_entropy)
        self._lr = self._edit_learning_rate(changed, self._lr)  # after _set_alpha: a new alpha optimizer too

    def _set_alpha(self, ent_coef: float | str) -> None:
        """The entropy coefficient: a fixed number, or learned from a start (``"auto_0.1"``)."""
        if isinstance(ent_coef, str):
            start = float(ent_coef.split("_", 1)[1]) if "_" in ent_coef else 1.0
            if self.log_alpha is None:
                self.log_alpha = ScalarParameter(math.log(start))
            else:  # learning restarts from the given start, with fresh optimizer moments
                with torch.no_grad():
                    self.log_alpha.value.fill_(math.log(start))
            self.alpha_optimizer = make_adam(self.log_alpha.parameters(), lr=self._lr(self.progress))
            self._auto_alpha = True
        else:
            self._fixed_alpha = torch.tensor(float(ent_coef), device=self.device)
            self._auto_alpha = False
            # A SAC built with a fixed coefficient has neither: a save now loads like one.
            self.log_alpha = None
            self.alpha_optimizer = None

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        c = self.config
        steps = self._gradient_steps_due()
        lr = self._lr(self.progress)
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                group["lr"] = lr
        stats = torch.zeros(3, device=self.device)  # critic loss, q mean, alpha
        actor_stats = torch.zeros(4, device=self.device)  # actor loss, entropy summed; actor steps, policy draws
        for _ in range(steps):
            batch = self.memory.sample(c.batch_size, self.rng)
            obs = batch.obs
            actions = batch.actions.reshape(len(obs), -1)
            self.num_updates += 1
            actor_due = self._actor_due()
            # With gSDE one set of noise weights serves the whole gradient step (as in SB3).
            sde_weights = self._sample_sde_weights() if c.use_sde else None
            if not self.entropy_with_actor:
                pi_actions, log_prob = self._policy(obs, sde_weights)
                # Entropy coefficient first, so the losses below use the updated alpha (as SB3 does).
                self._alpha_step(log_prob)
            alpha = self._alpha()

            critic_loss, q_mean = self._critic_loss(batch, actions, alpha, sde_weights)
            gradient_step(self.critic_optimizer, critic_loss)

            if actor_due:
                if self.entropy_with_actor:  # the policy's draw and alpha's step after the critics' (CrossQ)
                    pi_actions, log_prob = self._policy(obs, sde_weights)
                    self._alpha_step(log_prob)
                # The actor's loss needs gradients through the critic's input only, not its weights.
                self.critic.requires_grad_(False)
                actor_loss = (alpha * log_prob - self._actor_q(obs, pi_actions)).mean()
                gradient_step(self.actor_optimizer, actor_loss)
                self.critic.requires_grad_(True)
                one = alpha.new_ones(())
                actor_stats += torch.stack([actor_loss.detach(), -log_prob.detach().mean(), one, one])
            elif not self.entropy_with_actor:
                zero = alpha.new_zeros(())
                actor_stats += torch.stack([zero, -log_prob.detach().mean(), zero, zero + 1])

            if self.num_updates % c.target_update_interval == 0:
                self._update_target()
            stats += torch.stack([critic_loss.detach(), q_mean, alpha])
        if c.use_sde and c.sde_sample_freq <= 0:
            self._sde_weights = None  # new exploration noise for the next rollout
        critic_loss, q_mean, alpha = (stats / steps).tolist()
        actor_sum, entropy_sum, actor_count, draws = actor_stats.tolist()
        # With a delayed actor an update may have no actor step: it reports the last actor loss and entropy.
        if actor_count:
            self._last_actor_loss = actor_sum / actor_count
        if draws:
            self._last_entropy = entropy_sum / draws
        actor_loss, entropy = self._last_actor_loss, self._last_entropy
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "q_mean": q_mean,
            "entropy": entropy,
            "alpha": alpha,
            "learning_rate": lr,
        }
