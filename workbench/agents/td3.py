"""TD3: twin delayed deep deterministic policy gradient (Fujimoto et al. 2018), for Box actions.

Three changes to DDPG: twin critics whose minimum is the target (clipped double Q), target policy
smoothing (clipped noise on the target action) and delayed actor and target updates.
Reads top to bottom: hyperparameters, networks, acting, storing, the update.
Defaults are Stable-Baselines3's (net [400, 300]); ``wb.preset(env_id, "td3")`` gives the zoo's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..exploration import Exploration, GaussianNoise, OrnsteinUhlenbeckNoise
from ..memory.replay import ReplayMemory
from ..schedules import Schedule, as_schedule
from ..validation import Constraint, checked, choice, integer, number, optional
from .base import AgentState, register
from .heads import PolicyHead, ScaledIntoBounds, frozen
from .networks import NETWORKS, EnsembleMLP, check_network, drawn_like, make_adam, network
from .off_policy import OffPolicyAgent, OffPolicyConfig
from .updates import gradient_step, polyak_update

__all__ = ["TD3", "TD3Config"]


@dataclass
class TD3Config(OffPolicyConfig):
    """TD3 hyperparameters (defaults: Stable-Baselines3); the shared ones are :class:`OffPolicyConfig`'s."""

    # Stable-Baselines3's TD3 values for shared fields:
    learning_rate: float | Schedule = 1e-3
    net_arch: tuple[int, ...] = (400, 300)

    actor_lr: float | Schedule | None = checked(None, optional(number(0, min_open=True, schedule=True)), live=True)
    """The actor's learning rate when it differs from ``learning_rate``."""
    critic_lr: float | Schedule | None = checked(None, optional(number(0, min_open=True, schedule=True)), live=True)
    """The critics' learning rate when it differs from ``learning_rate``."""
    exploration: Exploration | None = checked(
        constraint=optional(
            Constraint(
                "additive action noise (wb.GaussianNoise, wb.OrnsteinUhlenbeckNoise, wb.TruncatedNormalNoise)",
                lambda v: isinstance(v, Exploration) and v.kind == "continuous",
            )
        ),
        default_factory=lambda: GaussianNoise(0.1),
        live=True,
    )
    """Noise added to actions while training (wb.GaussianNoise, OrnsteinUhlenbeckNoise, TruncatedNormalNoise)."""
    policy_delay: int = checked(2, integer(min=1), live=True)
    """Critic updates per actor and target update."""
    target_policy_noise: float = checked(0.2, number(0), live=True)
    """Std of the smoothing noise on target actions (in units of half the action range)."""
    target_noise_clip: float = checked(0.5, number(0), live=True)
    """Clip of the target smoothing noise."""
    n_critics: int = checked(2, integer(min=1))
    """Critics whose minimum is the target."""
    networks: ClassVar[tuple[str, ...]] = NETWORKS
    network: str = checked("mlp", choice(*NETWORKS))
    """The actor's and critics' network: "mlp" (ReLU layers of net_arch) or "simba" (Lee et al. 2025: residual
    blocks with layer norm, net_arch=(width,) * blocks, observations normalized); network=wb.SimBa(width, blocks)
    and net_arch="simba" say the same."""

    def __post_init__(self) -> None:
        check_network(self, type(self).__name__.removesuffix("Config"))


@register
class TD3(OffPolicyAgent):
    """Twin delayed DDPG for Box action spaces (bounded).

    Example::

        agent = wb.TD3("Pendulum-v1", exploration=wb.GaussianNoise(0.1), gamma=0.98)
        wb.Session(agent, "Pendulum-v1").run(steps=20_000)
    """

    Config = TD3Config
    default_plots = ("episode_reward", "critic_loss", "actor_loss")
    action_spaces = (spaces.Box,)
    network_names = ("actor", "actor_target", "critic", "critic_target")
    optimizer_names = ("actor_optimizer", "critic_optimizer")
    config: TD3Config

    # -- networks -----------------------------------------------------------------------------

    def _build(self) -> None:
        c = self.config
        self._require_bounded_actions()
        if c.exploration is not None and (
            not isinstance(c.exploration, Exploration) or c.exploration.kind != "continuous"
        ):
            raise TypeError(
                f"{self.algorithm} explores with additive action noise (wb.GaussianNoise, "
                f"wb.OrnsteinUhlenbeckNoise, wb.TruncatedNormalNoise) or None, got {c.exploration!r}"
            )
        if c.policy_delay < 1:
            raise ValueError(f"policy_delay must be at least 1, got {c.policy_delay}")
        self.act_dim = int(np.prod(self.action_space.shape))

        def actor() -> nn.Module:  # deterministic policy squashed into [-1, 1], after the encoder
            return self._encoded(lambda d: nn.Sequential(network(c.network, d, c.net_arch, self.act_dim), nn.Tanh()))

        self.actor = actor()
        self.actor_target = actor()
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_target.requires_grad_(False)
        enc, obs_dim = self._encoder()
        simba = c.network == "simba"
        self.critic = EnsembleMLP(c.n_critics, obs_dim + self.act_dim, c.net_arch, 1, encoder=enc, simba=simba)
        self.critic_target = EnsembleMLP(
            c.n_critics, obs_dim + self.act_dim, c.net_arch, 1, encoder=self._encoder()[0], simba=simba
        )
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)

        self._actor_lr = as_schedule(c.learning_rate if c.actor_lr is None else c.actor_lr)
        self._critic_lr = as_schedule(c.learning_rate if c.critic_lr is None else c.critic_lr)
        self.actor_optimizer = make_adam(self.actor.parameters(), lr=self._actor_lr(0.0))
        self.critic_optimizer = make_adam(self.critic.parameters(), lr=self._critic_lr(0.0))
        self.memory = ReplayMemory(
            c.buffer_size, self.obs_shape, self.action_space.shape, np.float32, **self._memory_options()
        )
        self._steps_since_update = 0

    @property
    def noise_stddev(self) -> float:
        """Current strength of the exploration noise (0 without exploration)."""
        e = self.config.exploration
        return 0.0 if e is None else e.value(self.progress)

    def policy_head(self) -> PolicyHead:
        """Export's head: the deterministic actor (tanh), scaled into the action bounds."""
        return PolicyHead(
            ScaledIntoBounds(frozen(self.actor), self._action_center, self._action_half_range),
            "deterministic actor (tanh), scaled into the action bounds",
        )

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        n = obs.shape[0]
        if deterministic:
            squashed = self._host(self.actor(self._tensor(obs)))
        elif self.num_timesteps < self.config.learning_starts:
            squashed = self.rng.uniform(-1.0, 1.0, size=(n, self.act_dim))
        else:
            squashed = self._host(self.actor(self._tensor(obs)))
            if self.config.exploration is not None:
                one = np.ones(self.act_dim, dtype=np.float32)
                squashed = self.config.exploration.perturb(squashed, -one, one, self.rng, self.progress)
        return self._scale_action(squashed).reshape(n, *self.action_space.shape)

    @property
    def decides_in_parts(self) -> bool:
        """False with Ornstein-Uhlenbeck noise: its state is one row per env of the decision it drew."""
        return not isinstance(self.config.exploration, OrnsteinUhlenbeckNoise)

    def begin_episode(self, done: np.ndarray) -> None:
        if self.config.exploration is not None:
            self.config.exploration.reset(done)  # Ornstein-Uhlenbeck restarts from its mean

    def apply_edits(self, changed: set[str]) -> None:
        """The actor's and critic's learning-rate schedules (``learning_rate`` is both unless
        ``actor_lr``/``critic_lr`` is set); the optimizers' rates at once."""
        super().apply_edits(changed)
        c = self.config
        if changed & {"learning_rate", "actor_lr", "critic_lr"}:
            self._actor_lr = as_schedule(c.learning_rate if c.actor_lr is None else c.actor_lr)
            self._critic_lr = as_schedule(c.learning_rate if c.critic_lr is None else c.critic_lr)
        progress = self.progress
        self._set_learning_rates(
            {"actor_optimizer": self._actor_lr(progress), "critic_optimizer": self._critic_lr(progress)}
        )

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        c = self.config
        steps = self._gradient_steps_due()
        actor_lr, critic_lr = self._actor_lr(self.progress), self._critic_lr(self.progress)
        for group in self.actor_optimizer.param_groups:
            group["lr"] = actor_lr
        for group in self.critic_optimizer.param_groups:
            group["lr"] = critic_lr
        critic_sum, q_sum = torch.zeros((), device=self.device), torch.zeros((), device=self.device)
        actor_sum, actor_updates = torch.zeros((), device=self.device), 0
        for _ in range(steps):
            batch = self.memory.sample(c.batch_size, self.rng)
            obs = batch.obs
            actions = batch.actions.reshape(len(obs), -1)
            with torch.no_grad():
                next_actions = self.actor_target(batch.next_obs)
                if c.target_policy_noise > 0:  # target policy smoothing
                    noise = drawn_like(torch.randn(next_actions.shape, generator=self.generator), next_actions)
                    noise = noise * c.target_policy_noise
                    next_actions = (next_actions + noise.clamp(-c.target_noise_clip, c.target_noise_clip)).clamp(-1, 1)
                next_q = self.critic_target(batch.next_obs, next_actions).min(0).values.squeeze(-1)
                target = batch.rewards + batch.discounts * (1.0 - batch.dones) * next_q
            q = self.critic(obs, actions).squeeze(-1)  # (n_critics, batch)
            critic_loss = (q - target).pow(2).mean(1).sum()
            gradient_step(self.critic_optimizer, critic_loss)
            critic_sum += critic_loss.detach()
            q_sum += q.detach().mean()

            self.num_updates += 1
            if self.num_updates % c.policy_delay == 0:
                # Gradients flow through the first critic's input only, not into its weights.
                self.critic.requires_grad_(False)
                actor_loss = -self.critic(obs, self.actor(obs), member=0).mean()
                gradient_step(self.actor_optimizer, actor_loss)
                self.critic.requires_grad_(True)
                polyak_update(self.critic_target, self.critic, c.tau)
                polyak_update(self.actor_target, self.actor, c.tau)
                actor_sum += actor_loss.detach()
                actor_updates += 1
        metrics = {
            "critic_loss": float(critic_sum) / steps,
            "q_mean": float(q_sum) / steps,
            "noise_stddev": self.noise_stddev,
            "learning_rate": critic_lr,
            "actor_learning_rate": actor_lr,
        }
        if actor_updates:
            metrics["actor_loss"] = float(actor_sum) / actor_updates
        return metrics

    def state(self) -> AgentState:
        state = super().state()
        e = self.config.exploration
        state.data["agent_state"]["exploration"] = {} if e is None else e.state()
        return state

    def restore(self, state: AgentState) -> None:
        super().restore(state)
        if self.config.exploration is not None:
            self.config.exploration.load_state(state.data.get("agent_state", {}).get("exploration", {}))
