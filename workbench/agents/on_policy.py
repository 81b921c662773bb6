"""What the on-policy agents (PPO, A2C) share, written once.

Separate policy and value networks; sampling that returns each step's values and log-probabilities
as the step's ``extras`` (they come back to ``observe`` inside the transitions); rollout storage with
time-limit bootstrapping; and GAE over a full rollout. An
algorithm built on :class:`OnPolicyAgent` adds its config, its optimizer and its loss (``update``).

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

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..masks import MASK_KEY
from ..memory.rollout import RolloutBuffer, compute_gae
from ..schedules import Schedule
from ..validation import checked, choice, flag, integer, layer_widths, number
from .base import Agent, AgentConfig, Step, Transitions
from .encoders import DictEncoder, ImageEncoder, orthogonal_init, with_encoder
from .flat_rmsprop import FlatRMSprop
from .networks import (
    ACTIVATIONS,
    adam_step,
    clear_grads,
    clip_grad_norm,
    gaussian_policy_terms,
    global_hooks_set,
    mlp,
)
from .numpy_mlp import NumpyMLP

__all__ = [
    "OnPolicyAgent",
    "OnPolicyConfig",
    "RolloutBatch",
    "categorical_numpy",
    "categorical_terms",
    "masked_logits",
    "run_layers",
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
    log_prob = torch.zeros(logits.shape[0])
    entropy = torch.zeros(logits.shape[0])
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
        draws = torch.rand(logits.shape, generator=generator) < torch.sigmoid(logits)
        actions = draws.long()
        return actions, -F.binary_cross_entropy_with_logits(logits, draws.float(), reduction="none").sum(-1)
    parts = [logits] if kind == "discrete" else list(torch.split(logits, list(nvec), dim=-1))
    chosen, log_prob = [], torch.zeros(logits.shape[0])
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


def categorical_numpy(
    logits: np.ndarray, actions: np.ndarray, ent_coef: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A categorical head's terms in numpy, for the gradient steps written out there: the
    log-probabilities of ``actions``, the entropies, the probabilities, and the gradient of
    ``-ent_coef * mean(entropy)`` with respect to the logits, ``(ent_coef / n) p (log p + H)``
    (zero when ``ent_coef`` is)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    totals = weights.sum(axis=1, keepdims=True)
    log_p = shifted - np.log(totals)
    probs = weights / totals
    entropy = -(probs * log_p).sum(axis=1)
    if ent_coef:
        grad_entropy = np.float32(ent_coef / len(logits)) * probs * (log_p + entropy[:, None])
    else:
        grad_entropy = np.zeros_like(logits)
    return log_p[np.arange(len(logits)), actions], entropy, probs, grad_entropy


def run_layers(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``net(x)`` for acting, where it runs once per env step: a plain ``nn.Sequential`` runs its
    layers' ``forward`` one after another, as ``Sequential.forward`` does, without ``nn.Module.__call__``'s
    hook dispatch around each (about 0.8 µs a layer, a fifth of a small MLP's forward), and a
    ``Linear`` or ``Tanh`` as the op its ``forward`` calls (``F.linear``, ``torch.tanh``) with its
    parameters read from the module's own dict, not through ``Module.__getattr__``. The same ops
    in the same order, so the same numbers, with autograd as usual when gradients are on (the
    updates run their forward passes through it too); any forward hook (the net's, a layer's or a
    global one) takes the ordinary call instead."""
    if type(net) is not nn.Sequential or net._forward_hooks or net._forward_pre_hooks or global_hooks_set():
        return net(x)
    for layer in net._modules.values():
        kind = type(layer)
        if layer._forward_hooks or layer._forward_pre_hooks:
            x = layer(x)
        elif kind is nn.Linear:  # Linear.forward's own call, its parameters read without Module.__getattr__
            params = layer._parameters
            x = F.linear(x, params["weight"], params["bias"])
        elif kind is nn.Tanh:
            x = torch.tanh(x)
        else:
            x = layer.forward(x)
    return x


def sample_index(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of ``probs`` (rows of probabilities), drawn as
    ``torch.multinomial(probs, 1, generator=generator).squeeze(1)`` draws it: the same draws from the
    same generator, so the same actions. PyTorch samples one index by an exponential race
    (``argmax(probs / q)``, ``q ~ Exp(1)``); this runs that race without multinomial's checks of the
    probabilities (two reductions and two host syncs, more than half its time at acting sizes).
    The probabilities here come from a softmax of finite logits: NaN logits cannot reach acting in a
    session (the env's observations and every update's loss are checked)."""
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return probs.div_(q).argmax(-1)


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
    on_policy = True
    supports_action_masks = True
    _flat_rmsprop: FlatRMSprop | None = None
    """Set by an agent whose optimizer is RMSprop (A2C): its steps run on flat buffers."""

    # -- networks -----------------------------------------------------------------------------

    def _action_head(self) -> int:
        """Note the kind of action head (``action_kind``: discrete, multidiscrete, multibinary or
        box, and ``nvec``) and return the number of policy outputs it needs."""
        space = self.action_space
        self.nvec: tuple[int, ...] = ()
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
        self.actor = self._encoded(
            lambda d: mlp(d, c.net_arch, n_out, activation=c.activation, ortho_init=ortho, output_gain=0.01)
        )
        shared = self._shared_encoder()
        if shared is not None:  # one encoder, read by both heads (its features computed once a batch)
            shared.shared = True
            self.encoder_description += ", shared by the policy and value networks"
            self.critic = with_encoder(
                shared,
                mlp(int(shared.features_dim), c.net_arch, 1, activation=c.activation, ortho_init=ortho,
                    output_gain=1.0),
            )
        else:
            self.critic = self._encoded(
                lambda d: mlp(d, c.net_arch, 1, activation=c.activation, ortho_init=ortho, output_gain=1.0)
            )
        if ortho:  # the built-in CNN encoders too, as SB3 initializes its features extractor (gain sqrt 2)
            for net in (self.actor, self.critic) if shared is None else (self.actor,):
                if isinstance(net[0], ImageEncoder | DictEncoder):
                    orthogonal_init(net[0])
        # Each parameter once (a shared encoder is in both networks).
        params = list({id(p): p for p in [*self.actor.parameters(), *self.critic.parameters()]}.values())
        self.log_std: nn.Parameter | None = None
        if self.action_kind == "box":
            # gSDE learns one log std per (feature, action) pair: the noise weights' spread.
            shape = (c.net_arch[-1], n_out) if self.use_sde else (n_out,)
            self.log_std = nn.Parameter(torch.full(shape, float(c.log_std_init)))
            params.append(self.log_std)
        self._sde_weights: torch.Tensor | None = None  # gSDE noise weights W, one matrix per env
        self._sde_steps = 0  # acting steps since the weights were drawn
        self._params = params
        self.rollout: RolloutBuffer | None = None
        # Acting's caches, made on first use (attributes from the start: deciding adds none).
        self._numpy_acting: tuple[nn.Module, nn.Module, tuple[NumpyMLP, NumpyMLP] | None] | None = None
        self._numpy_grad_views: dict[int, tuple[list[tuple[torch.Tensor, torch.Tensor]], list]] = {}
        self._row_starts: tuple[tuple[int, int], np.ndarray] | None = None
        return params

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
        if masks is not None or self.action_kind in ("multidiscrete", "multibinary"):
            return categorical_terms(run_layers(self.actor, obs), actions, self.action_kind, self.nvec, masks)
        if self.use_sde:
            latent, mean = self._latent_and_mean(obs)
            return gaussian_policy_terms(mean, self._sde_action_std(latent).log(), actions, False)
        return gaussian_policy_terms(run_layers(self.actor, obs), self.log_std, actions, self.discrete)

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
            self._sde_weights = torch.randn((n, *std.shape), generator=self.generator) * std
            self._sde_steps = 0
        self._sde_steps += 1
        return torch.bmm(latent.unsqueeze(1), self._sde_weights).squeeze(1)

    # -- acting -------------------------------------------------------------------------------

    def _decide(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None = None) -> Step:
        if not deterministic and mask is None and not self.use_sde and obs.dtype == np.float32:
            nets = self._numpy_nets()
            if nets is not None:
                return self._decide_in_numpy(obs, *nets)
        return self._decide_in_torch(obs, deterministic, mask)

    @torch.no_grad()
    def _decide_in_torch(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None) -> Step:
        x = torch.from_numpy(obs)
        if mask is not None or self.action_kind in ("multidiscrete", "multibinary"):
            logits = masked_logits(run_layers(self.actor, x), None if mask is None else torch.from_numpy(mask))
            actions, chosen = sample_categorical(logits, self.action_kind, self.nvec, deterministic, self.generator)
            if chosen is None:
                return Step(actions.numpy())
            values = run_layers(self.critic, x).squeeze(-1).numpy()
            return Step(actions.numpy(), {"values": values, "log_probs": chosen.numpy()})
        if self.use_sde:
            latent, out = self._latent_and_mean(x)
        else:
            out = run_layers(self.actor, x)
        if deterministic:
            if self.discrete:
                return Step(out.argmax(-1).numpy())
            return Step(np.clip(out.numpy(), self.action_low, self.action_high))
        if self.discrete:
            log_p = F.log_softmax(out, dim=-1)
            actions = sample_index(log_p.exp(), self.generator)
            chosen = log_p.gather(1, actions.unsqueeze(1)).squeeze(1)
        elif self.use_sde:
            actions = out + self._sde_noise(latent)
            chosen, _ = gaussian_policy_terms(out, self._sde_action_std(latent).log(), actions, False)
        else:
            assert self.log_std is not None
            noise = torch.randn(out.shape, generator=self.generator)
            actions = out + self.log_std.exp() * noise
            chosen = (-0.5 * noise.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # What observe() stores with this step travels with it, as the step's extras.
        extras = {"values": run_layers(self.critic, x).squeeze(-1).numpy(), "log_probs": chosen.numpy()}
        return Step(actions.numpy(), extras)

    def _numpy_nets(self) -> tuple[NumpyMLP, NumpyMLP] | None:
        """The actor and critic as numpy forward passes (:mod:`.numpy_mlp`), for a Discrete or Box
        head on plain MLPs; None otherwise, or while a net has a hook."""
        if self.action_kind not in ("discrete", "box"):
            return None
        cached = self._numpy_acting
        if cached is None or cached[0] is not self.actor or cached[1] is not self.critic:
            actor, critic = NumpyMLP.of(self.actor), NumpyMLP.of(self.critic)
            pair = (actor, critic) if actor is not None and critic is not None else None
            cached = self._numpy_acting = (self.actor, self.critic, pair)
        pair = cached[2]
        if pair is None or not (pair[0].current() and pair[1].current()):
            return None
        return pair

    def _decide_in_numpy(self, obs: np.ndarray, actor: NumpyMLP, critic: NumpyMLP) -> Step:
        """The training step of the torch path below, its forward passes in numpy: the same
        formulas and the same draws from the agent's torch generator (so the same random stream)."""
        out = actor(obs)
        if self.discrete:
            n, k = out.shape
            shifted = out - out.max(axis=1, keepdims=True)
            weights = np.exp(shifted)  # the probabilities times each row's sum
            race = torch.empty((n, k), dtype=torch.float32).exponential_(1, generator=self.generator)
            # sample_index's exponential race; a row's common factor leaves its argmax as it is.
            actions = (weights / race.numpy()).argmax(axis=1)
            starts = self._row_starts  # where each row starts in the flat logits
            if starts is None or starts[0] != (n, k):
                starts = self._row_starts = ((n, k), np.arange(n) * k)
            chosen = shifted.ravel()[starts[1] + actions] - np.log(weights.sum(axis=1))
        else:
            assert self.log_std is not None
            log_std = self.log_std.detach().numpy()
            noise = torch.randn(out.shape, generator=self.generator).numpy()
            actions = out + np.exp(log_std) * noise
            chosen = (-0.5 * noise**2 - log_std - np.float32(0.5 * math.log(2 * math.pi))).sum(axis=-1)
        return Step(actions, {"values": critic(obs)[:, 0], "log_probs": chosen})

    # -- storing ------------------------------------------------------------------------------

    def observe(self, transitions: Transitions) -> None:
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
                final_values = run_layers(self.critic, torch.from_numpy(next_obs[cut])).squeeze(-1).numpy()
            rewards[cut] += self.config.gamma * final_values
        dones = (terminated | truncated).astype(np.float32)
        self.rollout.add(obs, actions, rewards, dones, extras["values"], extras["log_probs"], extras.get(MASK_KEY))
        self._next_obs = next_obs

    def _new_rollout(self, n_envs: int) -> RolloutBuffer:
        """Empty rollout storage for ``n_envs`` envs, its actions shaped and typed for the head."""
        action_shape = () if self.discrete else self.action_space.shape
        dtype = np.float32 if self.action_kind == "box" else np.int64
        return RolloutBuffer(self.config.n_steps, n_envs, self.obs_shape, action_shape, dtype, obs_dtype=self.obs_dtype)

    def ready(self) -> bool:
        return self.rollout is not None and self.rollout.full

    # -- learning helpers ---------------------------------------------------------------------

    def _rollout_batch(self) -> RolloutBatch:
        """The full rollout as flat tensors with GAE advantages and returns."""
        c = self.config
        rollout = self.rollout
        assert rollout is not None and rollout.full, "update() called before a rollout was full"
        with torch.no_grad():
            last_values = run_layers(self.critic, torch.from_numpy(self._next_obs)).squeeze(-1).numpy()
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.dones, last_values, c.gamma, c.gae_lambda
        )
        n_rows = rollout.n_steps * rollout.n_envs
        return RolloutBatch(
            obs=torch.from_numpy(rollout.obs.reshape(-1, *self.obs_shape)),
            actions=torch.from_numpy(rollout.actions.reshape(-1, *rollout.actions.shape[2:])),
            log_probs=torch.from_numpy(rollout.log_probs.reshape(-1)),
            advantages=torch.from_numpy(advantages.reshape(-1)),
            returns=torch.from_numpy(returns.reshape(-1)),
            values=rollout.values.copy(),
            returns_np=returns,
            masks=None if rollout.masks is None else torch.from_numpy(rollout.masks.reshape(n_rows, -1)),
        )

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

    def _actor_critic_step(
        self, policy_loss: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, returns: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step on ``policy_loss - ent_coef * entropy + vf_coef * MSE(values, returns)``,
        its gradient norm clipped (A2C, PPO and RecurrentPPO differ only in the policy loss).

        Returns (value loss, mean entropy, total loss)."""
        c = self.config
        value_loss = F.mse_loss(values, returns)
        entropy_mean = entropy.mean()
        if c.ent_coef:
            loss = policy_loss - c.ent_coef * entropy_mean + c.vf_coef * value_loss
        else:  # the same loss (x - 0 is x), without a backward pass through the entropy for a zero gradient
            loss = policy_loss + c.vf_coef * value_loss
        self._clear_grads()
        loss.backward()
        self._clip_and_step()
        return value_loss, entropy_mean, loss

    # -- gradient steps in numpy (A2C, PPO) -----------------------------------------------------

    def _numpy_update_nets(self, batch: RolloutBatch) -> tuple[NumpyMLP, NumpyMLP] | None:
        """The actor and critic as numpy passes when an update's gradient can be written out in
        numpy: one Discrete head (no masks) on plain, separate MLPs with no hooks (the acting test,
        :meth:`_numpy_nets`), float32 observations, every parameter trained and hook-free. None
        sends the update through autograd; the choice never depends on the run's progress, so a
        resumed run computes its gradients as an uninterrupted one does."""
        if self.action_kind != "discrete" or batch.masks is not None or batch.obs.dtype != torch.float32:
            return None
        nets = self._numpy_nets()
        if nets is None:
            return None
        for p in self._params:
            if not p.requires_grad or p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None):
                return None
        return nets

    def _numpy_step(
        self,
        actor: tuple[NumpyMLP, list[np.ndarray], np.ndarray],
        critic: tuple[NumpyMLP, list[np.ndarray], np.ndarray],
    ) -> None:
        """Write the gradients of each ``(net, kept, d loss / d output)`` into the parameters'
        ``grad`` (the flat buffer's views once bound), then clip and take the optimizer's step.

        :meth:`NumpyMLP.backward` overwrites every gradient it is given, so the ``grad`` tensors of
        the last step are written again rather than cleared and allocated anew (about 30 µs a step
        for PPO's twelve tensors); the flat buffer is still cleared, as its own step expects."""
        if self._flat_rmsprop is not None:
            self._flat_rmsprop.clear_grads()
        for which, (net, kept, grad_out) in enumerate((actor, critic)):
            net.backward(kept, grad_out, self._numpy_grads(which, net))
        self._clip_and_step()

    def _numpy_grads(self, which: int, net: NumpyMLP) -> list[tuple[np.ndarray, np.ndarray]]:
        """Numpy views of ``net``'s (the actor's, ``which`` 0, or the critic's, 1) Linear layers'
        ``(weight.grad, bias.grad)``: the views of the last call while every ``grad`` is the same
        tensor, else those of the existing contiguous ``grad`` tensors or of new ones."""
        pairs = net.linear_parameters()
        cached = self._numpy_grad_views.get(which)
        if cached is not None and all(
            w.grad is gw and b.grad is gb for (w, b), (gw, gb) in zip(pairs, cached[0], strict=True)
        ):
            return cached[1]
        for p in (p for pair in pairs for p in pair):
            if p.grad is None or not p.grad.is_contiguous() or p.grad.shape != p.shape:
                p.grad = torch.empty_like(p, memory_format=torch.contiguous_format)
        tensors = [(w.grad, b.grad) for w, b in pairs]
        views = [(gw.numpy(), gb.numpy()) for gw, gb in tensors]
        self._numpy_grad_views[which] = (tensors, views)
        return views

    def _normalized_numpy(self, advantages: np.ndarray) -> np.ndarray:
        """:meth:`_normalized` for a numpy array (``std`` with one degree of freedom, as torch's)."""
        if self.config.normalize_advantage and advantages.size > 1:
            return (advantages - advantages.mean()) / (advantages.std(ddof=1) + np.float32(1e-8))
        return advantages

    def _clear_grads(self) -> None:
        """Clear the gradients before a backward pass (on the flat buffer when there is one)."""
        if self._flat_rmsprop is not None:
            self._flat_rmsprop.clear_grads()
        else:
            clear_grads(self._params)

    def _clip_and_step(self) -> None:
        """Clip the gradients' norm to ``max_grad_norm`` and take the optimizer's step."""
        flat = self._flat_rmsprop
        if flat is not None:
            flat.clip_grad_norm(self.config.max_grad_norm)
            flat.step()
        else:
            clip_grad_norm(self._params, self.config.max_grad_norm)
            adam_step(self.optimizer)  # the fused kernel called directly; any other optimizer: step()

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
        return metrics

    @staticmethod
    def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
        """1 - Var(returns - values) / Var(returns): how much of the returns the critic explains."""
        var_returns = float(np.var(returns))
        return math.nan if var_returns == 0 else 1.0 - float(np.var(returns - values)) / var_returns
