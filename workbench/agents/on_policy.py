"""What the on-policy agents (PPO, A2C) share, written once.

Separate policy and value networks; sampling that returns each step's values and log-probabilities
as the step's ``extras`` (they come back to ``observe`` inside the transitions); rollout storage with
time-limit bootstrapping; and GAE over a full rollout. An
algorithm built on :class:`OnPolicyAgent` adds its config, its optimizer and its policy loss (``_update``);
the rest of the loss is :meth:`OnPolicyAgent._loss`, and every network runs as the module it is.

Their hyperparameters in common are :class:`OnPolicyConfig`'s, written once; PPO and A2C add their
own and set their own defaults.

Box actions explore either with a state-independent Gaussian (a learned log std per action) or,
with ``use_sde=True``, with generalized state-dependent exploration (gSDE, Raffin et al. 2022): the
noise is ``latent @ W``, a linear function of the policy's last hidden features with weights ``W``
drawn from N(0, exp(log_std)) and held for ``sde_sample_freq`` steps (-1: a whole rollout), so the
exploration is smooth in time. Each action is then Gaussian around the mean with variance
``latent² @ exp(log_std)²``, which is what the update's log-probabilities and entropy use.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..envs.masks import MASK_KEY
from ..envs.multiagent import ALIVE_KEY
from ..memory.rollout import RolloutBuffer, compute_gae
from ..schedules import Schedule, as_schedule
from ..validation import checked, choice, flag, integer, layer_widths, number
from .base import Agent, AgentConfig, Step, Transitions
from .composite import CompositeMode, composite_terms, head_terms, sample_composite
from .encoders import DictEncoder, ImageEncoder, orthogonal_init, with_encoder
from .heads import (
    Argmax,
    ArgmaxPerDimension,
    ClippedMean,
    ConstantLogStd,
    PolicyHead,
    PositiveLogits,
    SdeLogStd,
    frozen,
)
from .intrinsic import INTRINSIC, IntrinsicReward
from .networks import ACTIVATIONS, NETWORKS, SimBaNetwork, check_network, gaussian_policy_terms, mlp, sample_index
from .networks import drawn_like as _from_generator
from .updates import gradient_step

__all__ = [
    "OnPolicyAgent",
    "OnPolicyConfig",
    "RolloutBatch",
    "categorical_terms",
    "masked_logits",
    "sample_index",
]

MASKED_LOGIT = -1e8
"""The logit a masked action gets (sb3-contrib's value): its probability is exactly 0, and the
entropy's ``p * log p`` stays finite (0), which ``-inf`` would make NaN."""


def masked_logits(logits: torch.Tensor, masks: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with every masked action's logit set to :data:`MASKED_LOGIT`."""
    if masks is None:
        return logits
    return logits.masked_fill(~masks, MASKED_LOGIT)


def categorical_terms(
    logits: torch.Tensor, actions: torch.Tensor, kind: str, nvec: tuple[int, ...], masks: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``actions`` and entropies of a discrete policy head: one categorical
    (``kind="discrete"``), independent categoricals over the splits ``nvec`` of the logits with
    log-probabilities and entropies summed (``"multidiscrete"``), or independent Bernoullis
    (``"multibinary"``). ``masks`` (bool, like the logits) zeroes the masked actions' probability."""
    logits = masked_logits(logits, masks)
    if kind == "multibinary":
        actions = actions.float()
        log_prob = -F.binary_cross_entropy_with_logits(logits, actions, reduction="none").sum(-1)
        entropy = F.binary_cross_entropy_with_logits(logits, torch.sigmoid(logits), reduction="none").sum(-1)
        return log_prob, entropy
    if kind == "discrete":
        parts, acts = [logits], [actions.long().reshape(-1, 1)]
    else:
        parts, acts = list(torch.split(logits, list(nvec), dim=-1)), list(actions.long().unbind(-1))
    log_prob = torch.zeros(logits.shape[0], device=logits.device)
    entropy = torch.zeros(logits.shape[0], device=logits.device)
    for part, a in zip(parts, acts, strict=True):
        log_p = torch.log_softmax(part, dim=-1)
        log_prob = log_prob + log_p.gather(1, a.reshape(-1, 1)).squeeze(1)
        entropy = entropy - (log_p.exp() * log_p).sum(-1)
    return log_prob, entropy


def sample_categorical(
    logits: torch.Tensor, kind: str, nvec: tuple[int, ...], deterministic: bool, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Actions of a discrete head from (already masked) ``logits`` and their log-probabilities:
    the most likely ones when ``deterministic`` (log-probabilities None), else sampled."""
    if kind == "multibinary":
        if deterministic:
            return (logits > 0).long(), None
        draws = _from_generator(torch.rand(logits.shape, generator=generator), logits) < torch.sigmoid(logits)
        actions = draws.long()
        return actions, -F.binary_cross_entropy_with_logits(logits, draws.float(), reduction="none").sum(-1)
    parts = [logits] if kind == "discrete" else list(torch.split(logits, list(nvec), dim=-1))
    chosen, log_prob = [], torch.zeros(logits.shape[0], device=logits.device)
    for part in parts:
        if deterministic:
            chosen.append(part.argmax(-1))
            continue
        log_p = F.log_softmax(part, dim=-1)
        a = sample_index(log_p.exp(), generator)
        log_prob = log_prob + log_p.gather(1, a.unsqueeze(1)).squeeze(1)
        chosen.append(a)
    actions = chosen[0] if kind == "discrete" else torch.stack(chosen, dim=-1)
    return actions, None if deterministic else log_prob


@dataclass
class OnPolicyConfig(AgentConfig):
    """Hyperparameters every on-policy agent has (PPO and A2C set their own defaults)."""

    n_envs: int = checked(8, integer(min=1))
    """Envs stepped together (copies are made when the env is an id or a factory)."""
    n_steps: int = checked(5, integer(min=1))
    """Steps per env in each rollout (one update per rollout)."""
    gamma: float = checked(0.99, number(0, 1), live=True)
    """Discount factor."""
    gae_lambda: float = checked(1.0, number(0, 1), live=True)
    """GAE lambda: bias/variance trade-off of the advantage estimate (1: plain n-step advantages)."""
    learning_rate: float | Schedule = checked(7e-4, number(0, min_open=True, schedule=True), live=True)
    """Optimizer learning rate, a number or a schedule of training progress."""
    ent_coef: float = checked(0.0, number(0), live=True)
    """Entropy bonus weight."""
    vf_coef: float = checked(0.5, number(0), live=True)
    """Value loss weight."""
    max_grad_norm: float = checked(0.5, number(0, min_open=True), live=True)
    """Gradient norm clip."""
    normalize_advantage: bool = checked(False, flag(), live=True)
    """Normalize advantages (within each minibatch for PPO, each rollout for A2C)."""
    net_arch: tuple[int, ...] = checked((64, 64), layer_widths())
    """Hidden layer widths of the policy and of the (separate) value network."""
    activation: str = checked("tanh", choice(*ACTIVATIONS))
    """Hidden activation."""
    ortho_init: bool = checked(True, flag())
    """Orthogonal weights (gain √2 hidden, 0.01 policy head, 1 value head); False: PyTorch's default."""
    share_encoder: bool = checked(True, flag())
    """Image (or Dict with an image) observations: the policy and value heads read one CNN encoder
    (SB3's ``share_features_extractor``), run once per batch and trained by both losses; False: one
    encoder each. Vector observations have no encoder to share. RecurrentPPO keeps one per network."""
    log_std_init: float = checked(0.0, number())
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    use_sde: bool = checked(False, flag())
    """Box actions: state-dependent exploration (gSDE), noise smooth in time instead of per step."""
    sde_sample_freq: int = checked(-1, integer(min=1, also=(-1,)), live=True)
    """With use_sde, env steps between new noise weights; -1: once per rollout."""
    intrinsic: IntrinsicReward | None = checked(None, INTRINSIC)
    """An intrinsic reward for exploration: wb.RND(...) or wb.ICM(...) (None: the env's reward alone).
    Its bonus is added to the rewards while training, never used in play (``workbench.agents.intrinsic``)."""
    intrinsic_coef: float = checked(1.0, number(0), live=True)
    """Weight of the intrinsic reward's normalised bonus in the rewards learned from."""
    networks: ClassVar[tuple[str, ...]] = NETWORKS
    network: str = checked("mlp", choice(*NETWORKS))
    """The policy and value networks: "mlp" (layers of net_arch with activation) or "simba" (Lee et al. 2025:
    residual blocks with layer norm, net_arch=(width,) * blocks, observations normalized; activation does not
    apply); network=wb.SimBa(width, blocks) and net_arch="simba" say the same."""

    def __post_init__(self) -> None:
        check_network(self, type(self).__name__.removesuffix("Config"), use_sde=self.use_sde is True)


class RolloutBatch(NamedTuple):
    """A full rollout flattened over ``(n_steps * n_envs)``, with its advantages and returns."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: np.ndarray  # the critic's estimates when acting, for explained variance
    returns_np: np.ndarray
    masks: torch.Tensor | None = None  # the action masks each step decided under, if any


class OnPolicyAgent(Agent):
    """Base of the on-policy agents: networks, acting, storing a rollout, advantages."""

    network_names = ("actor", "critic")
    action_spaces = (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict, spaces.Tuple)
    on_policy = True
    supports_action_masks = True

    # -- networks -----------------------------------------------------------------------------

    def _action_head(self) -> int:
        """Note the kind of action head (``action_kind``: discrete, multidiscrete, multibinary, box or
        composite, and ``nvec``) and return the number of policy outputs it needs."""
        space = self.action_space
        self.nvec: tuple[int, ...] = ()
        if self.action_layout is not None:  # Dict / Tuple: one head per leaf (workbench.agents.composite)
            self.action_kind = "composite"
            return self.action_layout.n_outputs
        if isinstance(space, spaces.Discrete):
            self.action_kind = "discrete"
            return int(space.n)
        if isinstance(space, spaces.MultiDiscrete):
            if space.nvec.ndim != 1 or np.any(space.start != 0):
                raise ValueError(
                    f"{self.algorithm} takes MultiDiscrete action spaces with a flat nvec and start 0, got {space}: "
                    "flatten the action space or shift the actions in a wrapper"
                )
            self.action_kind = "multidiscrete"
            self.nvec = tuple(int(n) for n in space.nvec)
            return int(np.sum(space.nvec))
        if isinstance(space, spaces.MultiBinary):
            self.action_kind = "multibinary"
            return int(np.prod(space.shape))
        self.action_kind = "box"
        return int(np.prod(space.shape))

    def _build_actor_critic(self) -> list[nn.Parameter]:
        """Create the policy and value networks (and the Gaussian policy's log std); returns
        every trainable parameter, for the optimizer."""
        c = self.config
        n_out = self._action_head()
        self.use_sde = bool(c.use_sde)
        if self.use_sde and self.action_kind != "box":
            raise ValueError(
                f"use_sde=True (state-dependent exploration) needs a Box action space, got {self.action_space}; "
                "a Discrete policy explores by sampling its categorical distribution, so drop use_sde"
            )
        if self.use_sde and not c.net_arch:
            raise ValueError("use_sde=True needs at least one hidden layer: the noise is a function of its features")
        if c.sde_sample_freq == 0 or c.sde_sample_freq < -1:
            raise ValueError(
                f"sde_sample_freq must be a positive number of steps or -1 (once per rollout), got {c.sde_sample_freq}"
            )
        ortho = bool(c.ortho_init)
        self.actor = self._encoded(lambda d: self._network(d, n_out, output_gain=0.01))
        shared = self._shared_encoder()
        if shared is not None:  # one encoder, read by both heads (its features computed once a batch)
            shared.shared = True
            note = ", shared by the policy and value networks"
            if not self.encoder_description.endswith(note):  # a rebuild (reseed, load) builds the networks again
                self.encoder_description += note
            self.critic = with_encoder(shared, self._network(int(shared.features_dim), 1, output_gain=1.0))
        else:
            self.critic = self._encoded(lambda d: self._network(d, 1, output_gain=1.0))
        if ortho:  # the built-in CNN encoders too, as SB3 initializes its features extractor (gain sqrt 2)
            for net in (self.actor, self.critic) if shared is None else (self.actor,):
                if isinstance(net, nn.Sequential) and isinstance(net[0], ImageEncoder | DictEncoder):
                    orthogonal_init(net[0])
        # Each parameter once (a shared encoder is in both networks).
        params = list({id(p): p for p in [*self.actor.parameters(), *self.critic.parameters()]}.values())
        self.log_std: nn.Parameter | None = None
        if self.action_kind == "box":
            # gSDE learns one log std per (feature, action) pair: the noise weights' spread.
            shape = (c.net_arch[-1], n_out) if self.use_sde else (n_out,)
            self.log_std = nn.Parameter(torch.full(shape, float(c.log_std_init)))
            params.append(self.log_std)
        elif self.action_layout is not None and len(self.action_layout.box_columns):
            # The composite space's Box leaves: one log std per Box element, in the layout's order.
            self.log_std = nn.Parameter(torch.full((len(self.action_layout.box_columns),), float(c.log_std_init)))
            params.append(self.log_std)
        self._sde_weights: torch.Tensor | None = None  # gSDE noise weights W, one matrix per env
        self._sde_steps = 0  # acting steps since the weights were drawn
        self._params = params
        self.rollout: RolloutBuffer | None = None
        return params

    def _network(self, in_dim: int, out_dim: int, output_gain: float) -> nn.Module:
        """A policy (``output_gain`` 0.01) or value (1.0) network after the encoder: an MLP of ``net_arch``
        with ``activation``, or a SimBa network; with ``ortho_init`` its output layer is orthogonal at that gain."""
        c = self.config
        if c.network == "simba":
            net = SimBaNetwork(in_dim, c.net_arch, out_dim)
            if c.ortho_init:  # as the MLP's output layer: a near-uniform first policy, a unit-scale value
                nn.init.orthogonal_(net.head.weight, gain=output_gain)
                nn.init.zeros_(net.head.bias)
            return net
        return mlp(
            in_dim, c.net_arch, out_dim, activation=c.activation, ortho_init=bool(c.ortho_init), output_gain=output_gain
        )

    def _shared_encoder(self) -> nn.Module | None:
        """The actor's encoder when the critic should read it too (``share_encoder`` and an
        encoder that holds a CNN), else None."""
        if not self.config.share_encoder or not isinstance(self.actor, nn.Sequential):
            return None
        enc = self.actor[0]
        if isinstance(enc, ImageEncoder | DictEncoder) and any(isinstance(m, ImageEncoder) for m in enc.modules()):
            return enc
        return None

    @property
    def encoder_shared(self) -> bool:
        """True when the policy and value networks read one encoder (see ``share_encoder``)."""
        return isinstance(self.critic, nn.Sequential) and len(self.critic) > 0 and self.critic[0] is self.actor[0]

    @property
    def networks(self) -> dict[str, nn.Module]:
        nets = super().networks
        if self.log_std is not None:
            holder = nn.Module()  # a module, so the log std saves and loads like the networks
            holder.log_std = self.log_std
            nets["policy_log_std"] = holder
        return nets

    def _policy_terms(
        self, obs: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` under the current policy (restricted to the allowed
        actions by ``masks``), and its entropies."""
        if self.action_layout is not None:
            out = self._forward(self.actor, obs)
            return composite_terms(out, self.log_std, actions, self.action_layout, masks)
        if masks is not None or self.action_kind in ("multidiscrete", "multibinary"):
            return categorical_terms(self._forward(self.actor, obs), actions, self.action_kind, self.nvec, masks)
        if self.use_sde:
            latent, mean = self._latent_and_mean(obs)
            return gaussian_policy_terms(mean, self._sde_action_std(latent).log(), actions, False)
        return gaussian_policy_terms(self._forward(self.actor, obs), self.log_std, actions, self.discrete)

    def _forward(self, net: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``net(x)`` (the actor's or the critic's): the one place the update and acting call a network,
        so a subclass routing its networks (IPPO's :class:`~workbench.agents.multiagent.SlotNet`) overrides it."""
        return net(x)

    def _values(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's value of each observation, shape ``(batch,)``."""
        return self._forward(self.critic, obs).squeeze(-1)

    def _latent_and_mean(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's last hidden features and its mean action (the head applied to them)."""
        latent = self.actor[:-1](obs)
        return latent, self.actor[-1](latent)

    def _sde_action_std(self, latent: torch.Tensor) -> torch.Tensor:
        """Standard deviation of each action under gSDE: sqrt(latent² @ exp(log_std)²).

        The features are detached, as in the gSDE paper's default: the noise scale is learned
        through ``log_std`` only, and the features stay shaped by the mean's gradient."""
        assert self.log_std is not None
        variance = latent.detach().pow(2) @ self.log_std.exp().pow(2)
        return torch.sqrt(variance + 1e-6)

    def _sde_noise(self, latent: torch.Tensor) -> torch.Tensor:
        """The exploration noise ``latent @ W`` for each env, drawing new weights when due."""
        assert self.log_std is not None
        c = self.config
        n = latent.shape[0]
        # -1 draws once per rollout; counting acting steps also keeps Ray's acting replicas
        # (which never run update()) on that rhythm.
        period = c.sde_sample_freq if c.sde_sample_freq > 0 else c.n_steps
        if self._sde_weights is None or self._sde_weights.shape[0] != n or self._sde_steps % period == 0:
            std = self.log_std.exp()
            self._sde_weights = _from_generator(torch.randn((n, *std.shape), generator=self.generator), std) * std
            self._sde_steps = 0
        self._sde_steps += 1
        return torch.bmm(latent.unsqueeze(1), self._sde_weights).squeeze(1)

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def _decide(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None = None) -> Step:
        x = self._tensor(obs)  # one observation batch per step to the device
        # Deterministic actions (play, evaluation) run the module itself, as export does.
        policy = self.actor if deterministic else functools.partial(self._forward, self.actor)
        if self.action_layout is not None:
            masks = None if mask is None else self._tensor(mask)
            rows, chosen = sample_composite(
                policy(x), self.log_std, self.action_layout, masks, deterministic, self.generator
            )
            if chosen is None:
                return Step(self._host(rows))
            return Step(self._host(rows), {"values": self._host(self._values(x)), "log_probs": self._host(chosen)})
        if mask is not None or self.action_kind in ("multidiscrete", "multibinary"):
            logits = masked_logits(policy(x), None if mask is None else self._tensor(mask))
            actions, chosen = sample_categorical(logits, self.action_kind, self.nvec, deterministic, self.generator)
            if chosen is None:
                return Step(self._host(actions))
            return Step(self._host(actions), {"values": self._host(self._values(x)), "log_probs": self._host(chosen)})
        if self.use_sde:
            latent, out = self._latent_and_mean(x)
        else:
            out = policy(x)
        if deterministic:
            if self.discrete:
                return Step(self._host(out.argmax(-1)))
            return Step(np.clip(self._host(out), self.action_low, self.action_high))
        if self.discrete:
            log_p = F.log_softmax(out, dim=-1)
            actions = sample_index(log_p.exp(), self.generator)
            chosen = log_p.gather(1, actions.unsqueeze(1)).squeeze(1)
        elif self.use_sde:
            actions = out + self._sde_noise(latent)
            chosen, _ = gaussian_policy_terms(out, self._sde_action_std(latent).log(), actions, False)
        else:
            assert self.log_std is not None
            noise = _from_generator(torch.randn(out.shape, generator=self.generator), out)
            actions = out + self.log_std.exp() * noise
            chosen = (-0.5 * noise.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # What observe() stores with this step travels with it, as the step's extras.
        extras = {"values": self._host(self._values(x)), "log_probs": self._host(chosen)}
        return Step(self._host(actions), extras)

    @property
    def rollout_steps(self) -> int | None:
        """``n_steps``: what each env steps between updates (Ray workers collect chunks of it)."""
        return int(self.config.n_steps)

    def policy_head(self) -> PolicyHead:
        """Export's head: the most likely action of the policy (gSDE only changes exploration: the
        deterministic action is the actor's mean either way); with the same frozen actor, its head over the
        actor's raw output, the frozen critic and a Gaussian's log std, for the acting export (``critic=True``)."""
        actor = frozen(self.actor)
        head, description = self._deterministic_head(actor)
        return PolicyHead(
            head,
            description,
            actor=actor,
            acting_head=self._deterministic_head(nn.Identity())[0],
            critic=frozen(self.critic),
            log_std=self._acting_log_std(actor),
        )

    def _acting_log_std(self, actor: nn.Module) -> nn.Module | None:
        """The acting export's log std over ``actor`` (a frozen copy): gSDE's state-dependent one, the learned
        constant one of a Box (or a composite space's Box leaves), or None for a policy without a Gaussian."""
        if self.log_std is None:
            return None
        if self.use_sde:
            return SdeLogStd(actor[:-1], self.log_std)
        return ConstantLogStd(self.log_std)

    def _deterministic_head(self, net: nn.Module) -> tuple[nn.Module, str]:
        """The head over ``net``'s logits or means (the recurrent policy passes an identity: its LSTM
        actor runs before the head)."""
        if self.action_layout is not None:
            paths = ", ".join(self.action_layout.paths)
            head = CompositeMode(net, self.action_layout)
            return head, f"each head's most likely action, one output per leaf ({paths})"
        if self.discrete:
            return Argmax(net), "argmax of the policy logits"
        if self.action_kind == "multidiscrete":
            return ArgmaxPerDimension(net, self.nvec), "argmax of each action dimension's logits"
        if self.action_kind == "multibinary":
            return PositiveLogits(net), "1 where a bit's Bernoulli logit is positive, else 0"
        return ClippedMean(net, self.action_low, self.action_high), "Gaussian mean clipped to the action bounds"

    # -- storing ------------------------------------------------------------------------------

    def _observe(self, transitions: Transitions) -> None:
        obs, actions, rewards, next_obs = transitions[:4]
        terminated, truncated, extras = transitions[4:]
        n_envs = len(rewards)
        if self.rollout is None or self.rollout.n_envs != n_envs:
            self.rollout = self._new_rollout(n_envs)
        if "values" not in extras or "log_probs" not in extras:
            raise ValueError(
                f"{self.algorithm}.observe() needs the extras 'values' and 'log_probs' of the step that chose "
                "these actions: pass Transitions(..., extras=step.extras) with the Step that "
                f"{self.algorithm}.decide(obs) returned (got extras {sorted(extras)})"
            )
        rewards = rewards.astype(np.float32, copy=True)
        cut = truncated & ~terminated
        if cut.any():
            # A time limit is not a real end: bootstrap from the value of the last observation.
            with torch.no_grad():
                final_values = self._host(self._values(self._tensor(next_obs[cut])))
            rewards[cut] += self.config.gamma * final_values
        dones = (terminated | truncated).astype(np.float32)
        alive = extras.get(ALIVE_KEY)  # multi-agent slots of absent agents (workbench.envs.multiagent)
        if alive is not None:
            if getattr(self, "_alive", None) is None or self._alive.shape != self.rollout.rewards.shape:
                self._alive = np.ones_like(self.rollout.rewards)
            self._alive[self.rollout.pos] = alive
        self.rollout.add(obs, actions, rewards, dones, extras["values"], extras["log_probs"], extras.get(MASK_KEY))
        self._next_obs = next_obs

    def _new_rollout(self, n_envs: int) -> RolloutBuffer:
        """Empty rollout storage for ``n_envs`` envs, its actions shaped and typed for the head."""
        if self.action_layout is not None:  # one float32 row per action, each leaf its columns
            action_shape: tuple[int, ...] = (self.action_layout.width,)
        else:
            action_shape = () if self.discrete else self.action_space.shape
        dtype = np.float32 if self.action_kind in ("box", "composite") else np.int64
        return RolloutBuffer(self.config.n_steps, n_envs, self.obs_shape, action_shape, dtype, obs_dtype=self.obs_dtype)

    def ready(self) -> bool:
        return self.rollout is not None and self.rollout.full

    def apply_edits(self, changed: set[str]) -> None:
        """A learning-rate edit replaces the schedule, every optimizer taking its rate at once; a clip-range
        edit (PPO's, RecurrentPPO's: the only ones that have it) the clip schedule."""
        super().apply_edits(changed)
        if "clip_range" in changed:
            self._clip = as_schedule(self.config.clip_range)
        self._lr = self._edit_learning_rate(changed, self._lr)

    # -- learning helpers ---------------------------------------------------------------------

    def _rollout_batch(self) -> RolloutBatch:
        """The full rollout as flat tensors with GAE advantages and returns."""
        c = self.config
        rollout = self.rollout
        assert rollout is not None and rollout.full, "update() called before a rollout was full"
        with torch.no_grad():
            last_values = self._host(self._values(self._tensor(self._next_obs)))
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.dones, last_values, c.gamma, c.gae_lambda
        )
        n_rows = rollout.n_steps * rollout.n_envs
        batch = RolloutBatch(
            obs=self._tensor(rollout.obs.reshape(-1, *self.obs_shape)),
            actions=self._tensor(rollout.actions.reshape(-1, *rollout.actions.shape[2:])),
            log_probs=self._tensor(rollout.log_probs.reshape(-1)),
            advantages=self._tensor(advantages.reshape(-1)),
            returns=self._tensor(returns.reshape(-1)),
            values=rollout.values.copy(),
            returns_np=returns,
            masks=None if rollout.masks is None else self._tensor(rollout.masks.reshape(n_rows, -1)),
        )
        alive = getattr(self, "_alive", None)
        if alive is not None and alive.shape == rollout.rewards.shape and not alive.all():
            # Rows of absent agents are filler (their slot's steps are cut as episode ends): left out.
            keep = torch.from_numpy(np.flatnonzero(alive.reshape(-1)))
            batch = batch._replace(
                **{
                    name: getattr(batch, name)[keep]
                    for name in ("obs", "actions", "log_probs", "advantages", "returns", "masks")
                    if getattr(batch, name) is not None
                }
            )
        return batch

    def _scheduled_lr(self) -> float:
        """This update's learning rate (the schedule ``_lr`` at the current progress), set on the optimizer."""
        lr = self._lr(self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _normalized(self, advantages: torch.Tensor) -> torch.Tensor:
        """The advantages scaled to mean 0 and std 1 when ``normalize_advantage`` (and there are several)."""
        if self.config.normalize_advantage and advantages.numel() > 1:
            return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages

    def _loss(
        self, policy_loss: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, returns: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The loss of one gradient step, ``policy_loss - ent_coef * entropy + vf_coef * MSE(values, returns)``
        (A2C, PPO and RecurrentPPO differ only in the policy loss): returns (loss, value loss, mean entropy).
        A subclass changing the loss overrides this (or the policy loss above it)."""
        c = self.config
        value_loss = F.mse_loss(values, returns)
        entropy_mean = entropy.mean()
        if c.ent_coef:
            loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss
        else:  # the same loss (x - 0 is x), without a backward pass through the entropy for a zero gradient
            loss = policy_loss + c.vf_coef * value_loss
        return loss, value_loss, entropy_mean

    def _actor_critic_step(
        self, policy_loss: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, returns: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step on :meth:`_loss`, its gradient norm clipped to ``max_grad_norm``.

        Returns (value loss, mean entropy, total loss)."""
        loss, value_loss, entropy_mean = self._loss(policy_loss, entropy, values, returns)
        gradient_step(self.optimizer, loss, self.config.max_grad_norm)
        return value_loss, entropy_mean, loss

    def _end_update(self, metrics: dict[str, float], batch: RolloutBatch) -> dict[str, float]:
        """Start the next rollout, count the update, add the metrics every on-policy agent reports."""
        assert self.rollout is not None
        self.rollout.reset()
        self.num_updates += 1
        self._sde_weights = None  # the next rollout explores with weights drawn from the new log std
        if self.use_sde:
            with torch.no_grad():
                latent, _ = self._latent_and_mean(batch.obs)
                metrics["policy_std"] = float(self._sde_action_std(latent).mean())
        elif self.log_std is not None:
            metrics["policy_std"] = float(self.log_std.detach().exp().mean())
        if self.action_layout is not None:
            with torch.no_grad():
                metrics.update(self._head_entropies(self._forward(self.actor, batch.obs), batch.actions, batch.masks))
        return metrics

    def _head_entropies(self, out: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor | None) -> dict[str, float]:
        """Each head's mean entropy over the rollout (policy outputs ``out`` for its ``actions``), as the
        signals ``entropy/<path>`` (a hybrid branch's heads over the rows that chose it)."""
        assert self.action_layout is not None
        with torch.no_grad():
            terms = head_terms(out, self.log_std, actions, self.action_layout, masks)
        metrics = {}
        for leaf, t in zip(self.action_layout.leaves, terms, strict=True):
            if t.weight is None:
                value = t.entropy.mean()
            else:
                value = (t.entropy * t.weight).sum() / t.weight.sum().clamp(min=1.0)
            metrics[f"entropy/{leaf.path}"] = float(value)
        return metrics

    @staticmethod
    def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
        """1 - Var(returns - values) / Var(returns): how much of the returns the critic explains."""
        var_returns = float(np.var(returns))
        return math.nan if var_returns == 0 else 1.0 - float(np.var(returns - values)) / var_returns
