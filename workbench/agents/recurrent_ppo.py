"""RecurrentPPO: PPO with an LSTM policy and an LSTM value network, for partially observed tasks
(``memory="gru"`` or ``"gtrxl"``: a GRU or a gated Transformer-XL instead, ``memory_nets.py``; their
state travels, is stored and replays exactly as the LSTM's, under the extras key ``memory_states``).

Shared parts: PPO's hyperparameters and clipped loss (``ppo.py``), the on-policy networks' policy
terms, log std and GAE (``on_policy.py``, ``memory/rollout.py``).

The LSTM state travels as the step contract asks (``workbench.loop``): ``decide`` returns, as the
step's extras, the state it *used* (``lstm_states``, ``(n_envs, 4, lstm_hidden_size)``: actor h, c,
critic h, c) next to PPO's ``values`` and ``log_probs``; the running state of each env is acting
state, advanced by every decision and zeroed by ``begin_episode`` when that env's episode ends
(play keeps its own, so an evaluation in the middle of training does not disturb it). ``observe``
stores the extras in the rollout; the update unrolls each env's sequence from the state stored at
its first step, zeroing the state where an episode begins, so no sequence runs across an episode
boundary, and backpropagates through the whole rollout.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..envs.masks import MASK_KEY
from ..memory.rollout import RolloutBuffer, compute_gae
from ..schedules import as_schedule
from ..validation import checked, choice, integer
from .base import AgentState, Step, Transitions, register
from .composite import composite_terms, sample_composite
from .heads import ConstantLogStd, PolicyHead, frozen
from .memory_nets import GRUMemory, GTrXLMemory, MemoryNetwork
from .networks import drawn_like as _from_generator
from .networks import gaussian_policy_terms, make_adam, mlp
from .networks import multinomial as _multinomial
from .on_policy import OnPolicyAgent, categorical_terms, masked_logits, sample_categorical
from .ppo import PPOConfig, clipped_epochs, clipped_metrics, clipped_step

__all__ = ["RecurrentNetwork", "RecurrentPPO", "RecurrentPPOConfig"]


@dataclass
class RecurrentPPOConfig(PPOConfig):
    """RecurrentPPO hyperparameters; the rest are :class:`~workbench.agents.ppo.PPOConfig`'s
    (defaults: rl-baselines3-zoo's ppo_lstm on CartPoleNoVel-v1, which are PPO's CartPole ones)."""

    networks: ClassVar[tuple[str, ...]] = ("mlp",)  # a memory, then MLP heads
    network_note: ClassVar[str] = "its networks are a memory (memory=) and MLP heads"
    net_arch: tuple[int, ...] = (64,)
    """Hidden layer widths of the policy and value heads, after their LSTMs."""
    lstm_hidden_size: int = checked(64, integer(min=1))
    """Units of each memory (one for the policy, one for the value): the LSTM's or GRU's hidden
    size, the GTrXL's width (a multiple of ``attention_heads``)."""
    memory: str = checked("lstm", choice("lstm", "gru", "gtrxl"))
    """The networks' memory: ``"lstm"``, ``"gru"``, or ``"gtrxl"`` (a gated Transformer-XL,
    Parisotto et al. 2020, attending over a window of past steps; ``memory_nets.py``)."""
    memory_length: int = checked(32, integer(min=1))
    """GTrXL: the past steps of the episode each step attends to (the window cached per env)."""
    memory_layers: int = checked(1, integer(min=1))
    """GTrXL: its gated transformer layers."""
    attention_heads: int = checked(4, integer(min=1))
    """GTrXL: the attention heads of each layer (they divide ``lstm_hidden_size``)."""


# -- networks -----------------------------------------------------------------------------------


class RecurrentNetwork(nn.Module):
    """An LSTM then an MLP head: ``(T, B, in_dim)`` sequences to ``(T, B, out_dim)`` outputs."""

    def __init__(
        self,
        in_dim: int,
        lstm_hidden: int,
        net_arch: tuple[int, ...],
        out_dim: int,
        encoder: nn.Module | None = None,
        **mlp_options: object,
    ):
        super().__init__()
        self.encoder = encoder  # None for vector observations (the LSTM reads them directly)
        self.lstm = nn.LSTM(in_dim, lstm_hidden)
        self.head = mlp(lstm_hidden, net_arch, out_dim, **mlp_options)  # type: ignore[arg-type]
        self.state_shape = (2, lstm_hidden)  # h then c (the memories' interface, ``memory_nets.py``)

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` with the state as one ``(B, 2, H)`` tensor, as the other memories take it."""
        out, h, c = self(obs, state[:, 0], state[:, 1], starts)
        return out, torch.stack([h, c], dim=1)

    def forward(
        self, obs: torch.Tensor, h: torch.Tensor, c: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unroll from the state ``(h, c)`` (each ``(B, H)``); ``starts[t]`` is 1 where an episode
        begins at step ``t`` (its state is zeroed first). Returns the outputs and the last state."""
        if self.encoder is not None:
            obs = self.encoder(obs)
        steps = obs.shape[0]
        if steps == 1:  # acting: one step, the state already reset by begin_episode
            keep = (1.0 - starts[0]).unsqueeze(-1)
            out, (h1, c1) = self.lstm(obs, ((h * keep).unsqueeze(0), (c * keep).unsqueeze(0)))
            return self.head(out), h1[0], c1[0]
        # Between two episode starts of any env the LSTM runs the whole stretch in one call.
        cuts = [0, *(torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist(), steps]
        h, c = h.unsqueeze(0), c.unsqueeze(0)
        outs = []
        for a, b in pairwise(cuts):
            if b <= a:
                continue
            keep = (1.0 - starts[a]).view(1, -1, 1)
            h, c = h * keep, c * keep
            out, (h, c) = self.lstm(obs[a:b], (h, c))
            outs.append(out)
        return self.head(torch.cat(outs)), h[0], c[0]


@register
class RecurrentPPO(OnPolicyAgent):
    """PPO with LSTM policy and value networks, for Discrete, MultiDiscrete, MultiBinary and Box
    actions and Dict / Tuple ones of those (docs/actions.md), with action masks for the discrete heads,
    on several envs.

    Example::

        from workbench.wrappers import MaskVelocity
        agent = wb.RecurrentPPO(lambda: MaskVelocity(gym.make("CartPole-v1")), normalize_observations=True)
        wb.Session(agent, lambda: MaskVelocity(gym.make("CartPole-v1"))).run(steps=100_000)
    """

    Config = RecurrentPPOConfig
    config: RecurrentPPOConfig
    per_env_decisions = True
    """Its decisions carry each env's LSTM state from call to call (Session.external refuses it)."""

    def _build(self) -> None:
        c = self.config
        if c.use_sde:
            raise ValueError("RecurrentPPO explores with a Gaussian policy: use_sde=True is not supported")
        if c.lstm_hidden_size < 1:
            raise ValueError(f"lstm_hidden_size must be at least 1, got {c.lstm_hidden_size}")
        self.use_sde = False
        n_out = self._action_head()
        options = dict(activation=c.activation, ortho_init=bool(c.ortho_init))
        enc, dim = self._encoder()
        self.actor = self._memory_network(dim, n_out, enc, output_gain=0.01, **options)
        enc, dim = self._encoder()
        self.critic = self._memory_network(dim, 1, enc, output_gain=1.0, **options)
        # One env's acting state: the actor's rows then the critic's ((4, H) for the LSTM: h, c, h, c).
        self._rows, self._width = self.actor.state_shape
        self._state_key = "lstm_states" if c.memory == "lstm" else "memory_states"
        params = list(self.actor.parameters()) + list(self.critic.parameters())
        self.log_std: nn.Parameter | None = None
        if self.action_kind == "box":
            self.log_std = nn.Parameter(torch.full((n_out,), float(c.log_std_init)))
            params.append(self.log_std)
        elif self.action_layout is not None and len(self.action_layout.box_columns):
            self.log_std = nn.Parameter(torch.full((len(self.action_layout.box_columns),), float(c.log_std_init)))
            params.append(self.log_std)
        self._params = params
        self._sde_weights = None
        self.rollout: RolloutBuffer | None = None
        # (n_steps, n_envs, 2 * rows, width): the state each step used ((.., 4, H) for the LSTM).
        self.rollout_states: np.ndarray | None = None
        # Acting state: the running memory state of each env, one for training and one for play.
        self._acting_states: dict[bool, torch.Tensor] = {}
        self._lr = as_schedule(c.learning_rate)
        self._clip = as_schedule(c.clip_range)
        self.optimizer = make_adam(params, lr=self._lr(0.0), eps=1e-5)

    def _memory_network(
        self, in_dim: int, out_dim: int, encoder: nn.Module | None, **options: Any
    ) -> RecurrentNetwork | MemoryNetwork:
        """The policy's or value's network with the configured memory."""
        c = self.config
        if c.memory == "lstm":
            return RecurrentNetwork(in_dim, c.lstm_hidden_size, c.net_arch, out_dim, encoder, **options)
        memory: nn.Module
        if c.memory == "gru":
            memory = GRUMemory(in_dim, c.lstm_hidden_size)
        else:
            memory = GTrXLMemory(in_dim, c.lstm_hidden_size, c.memory_layers, c.attention_heads, c.memory_length)
        return MemoryNetwork(memory, c.net_arch, out_dim, encoder, **options)

    def _probe_calls(
        self, nets: dict[str, nn.Module], device: torch.device, batch: int, dynamic_batch: bool = False
    ) -> list[Any]:
        """The LSTM networks unrolled over ``n_steps`` for the envs of one minibatch (for ``device="auto"``
        and ``compile``), from zero states. ``dynamic_batch`` changes nothing: every minibatch unrolls
        the same number of envs."""
        steps = self.config.n_steps
        envs = max(1, batch // steps)
        obs = torch.zeros(
            (steps, envs, *self.obs_shape), dtype=torch.from_numpy(np.zeros(1, self.obs_dtype)).dtype, device=device
        )
        starts = torch.zeros(steps, envs, device=device)
        if self.config.memory != "lstm":
            memory_state = torch.zeros(envs, self._rows, self._width, device=device)
            return [
                functools.partial(net, obs, memory_state, starts)
                for net in nets.values()
                if isinstance(net, MemoryNetwork)
            ]
        state = torch.zeros(envs, self.config.lstm_hidden_size, device=device)
        return [
            functools.partial(net, obs, state, state, starts)
            for net in nets.values()
            if isinstance(net, RecurrentNetwork)
        ]

    # -- acting -------------------------------------------------------------------------------

    def _state_for(self, n: int) -> torch.Tensor:
        """The running state of ``n`` envs in the current mode (zeros for a new batch size)."""
        state = self._acting_states.get(self.training)
        if state is None or state.shape[0] != n:
            state = torch.zeros(n, 2 * self._rows, self._width, device=self.device)
            self._acting_states[self.training] = state
        return state

    def begin_episode(self, done: np.ndarray) -> None:
        """Zero the memory state of the envs whose episode just ended (in the current mode)."""
        state = self._acting_states.get(self.training)
        if state is not None and state.shape[0] == len(done):
            state[self._tensor(np.asarray(done, dtype=bool))] = 0.0

    def _decide(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None = None) -> Step:
        return self._decide_rows(obs, deterministic, mask, None)

    @torch.no_grad()
    def _decide_rows(
        self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None, env_rows: np.ndarray | None
    ) -> Step:
        """One step of the envs ``env_rows`` of the ``num_envs`` (None: the batch is every env): their
        memory state is used and moved on, the other envs' stays as it was."""
        if env_rows is None:
            state = self._state_for(obs.shape[0])
            used = state.clone()
        else:
            full = self._state_for(self.num_envs)
            index = torch.as_tensor(env_rows, device=full.device)
            used = full[index]
            state = used.clone()
        x = self._tensor(obs).unsqueeze(0)
        no_starts = torch.zeros(1, obs.shape[0], device=self.device)
        rows = self._rows
        out, state[:, :rows] = self.actor.unroll(x, used[:, :rows], no_starts)
        out = out[0]
        if self.action_layout is not None:  # a composite space: one head per leaf (workbench.agents.composite)
            masks = None if mask is None else self._tensor(mask)
            layout = self.action_layout
            actions, chosen = sample_composite(out, self.log_std, layout, masks, deterministic, self.generator)
            if self.training:
                values, state[:, rows:] = self.critic.unroll(x, used[:, rows:], no_starts)
            if env_rows is not None:
                full[index] = state
            if not self.training:
                return Step(self._host(actions))
            if chosen is None:  # deterministic while training (evaluation): the log-probabilities of the modes
                chosen, _ = composite_terms(out, self.log_std, actions, layout, masks)
            extras = {"values": self._host(values[0, :, 0]), "log_probs": self._host(chosen)}
            return Step(self._host(actions), {**extras, self._state_key: self._host(used)})
        categorical = mask is not None or self.action_kind in ("multidiscrete", "multibinary")
        masks = None if mask is None else self._tensor(mask)
        if categorical:
            kind, nvec = self.action_kind, self.nvec
            actions, _ = sample_categorical(masked_logits(out, masks), kind, nvec, deterministic, self.generator)
        elif deterministic:
            actions = (
                out.argmax(-1)
                if self.discrete
                else out.clamp(self._tensor(self.action_low), self._tensor(self.action_high))
            )
        elif self.discrete:
            log_p = F.log_softmax(out, dim=-1)
            actions = _multinomial(log_p.exp(), self.generator)
        else:
            assert self.log_std is not None
            noise = _from_generator(torch.randn(out.shape, generator=self.generator), out)
            actions = out + self.log_std.exp() * noise
        if self.training:
            values, state[:, rows:] = self.critic.unroll(x, used[:, rows:], no_starts)
        if env_rows is not None:
            full[index] = state
        if not self.training:  # play: the policy alone, nothing to store
            return Step(self._host(actions))
        if categorical:
            chosen, _ = categorical_terms(out, actions, self.action_kind, self.nvec, masks)
        else:
            chosen, _ = gaussian_policy_terms(out, self.log_std, actions, self.discrete)
        extras = {
            "values": self._host(values[0, :, 0]),
            "log_probs": self._host(chosen),
            self._state_key: self._host(used),
        }
        return Step(self._host(actions), extras)

    def policy_head(self) -> PolicyHead:
        """Export's head: one step of the memory actor (its state explicit), then the on-policy head."""
        head, description = self._deterministic_head(nn.Identity())
        log_std = None if self.log_std is None else ConstantLogStd(self.log_std)
        if self.config.memory == "lstm":
            return PolicyHead(
                head,
                f"LSTM actor, then the {description}",
                recurrent_actor=frozen(self.actor),
                recurrent_critic=frozen(self.critic),
                log_std=log_std,
            )
        memory = {"gru": "GRU", "gtrxl": "GTrXL"}[self.config.memory]
        return PolicyHead(
            head,
            f"{memory} actor, then the {description}",
            recurrent_actor=frozen(self.actor),
            memory_state_shape=(self._rows, self._width),
            recurrent_critic=frozen(self.critic),
            log_std=log_std,
        )

    # -- storing ------------------------------------------------------------------------------

    def _observe(self, transitions: Transitions) -> None:
        obs, actions, rewards, next_obs = transitions[:4]
        terminated, truncated, extras = transitions[4:]
        key, rows = self._state_key, self._rows
        missing = {"values", "log_probs", key} - set(extras)
        if missing:
            raise ValueError(
                f"RecurrentPPO.observe() needs the extras 'values', 'log_probs' and {key!r} of the step "
                f"that chose these actions (missing {sorted(missing)}): pass Transitions(..., extras=step.extras) "
                "with the Step that RecurrentPPO.decide(obs) returned"
            )
        n_envs = len(rewards)
        c = self.config
        if self.rollout is None or self.rollout.n_envs != n_envs:
            self.rollout = self._new_rollout(n_envs)
            self.rollout_states = np.zeros((c.n_steps, n_envs, 2 * rows, self._width), dtype=np.float32)
        assert self.rollout_states is not None
        states = np.asarray(extras[key], dtype=np.float32)
        rewards = rewards.astype(np.float32, copy=True)
        cut = truncated & ~terminated
        if cut.any():
            # A time limit is not a real end: bootstrap from the value of the last observation,
            # seen with the critic's state after this step.
            with torch.no_grad():
                s = self._tensor(states[cut])
                zero = torch.zeros(1, int(cut.sum()), device=self.device)
                _, after = self.critic.unroll(self._tensor(np.asarray(obs[cut], np.float32))[None], s[:, rows:], zero)
                final, _ = self.critic.unroll(self._tensor(np.asarray(next_obs[cut], np.float32))[None], after, zero)
            rewards[cut] += c.gamma * self._host(final[0, :, 0])
        self.rollout_states[self.rollout.pos] = states
        dones = (terminated | truncated).astype(np.float32)
        self.rollout.add(obs, actions, rewards, dones, extras["values"], extras["log_probs"], extras.get(MASK_KEY))
        self._next_obs = next_obs

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        c = self.config
        rollout, states = self.rollout, self.rollout_states
        assert rollout is not None and rollout.full and states is not None, "update() called before a rollout was full"
        steps, n_envs = rollout.rewards.shape
        obs = self._tensor(rollout.obs)
        actions = self._tensor(rollout.actions)
        starts = torch.zeros(steps, n_envs, device=self.device)
        starts[1:] = self._tensor(rollout.dones[:-1])  # an episode begins after each end
        first = self._tensor(states[0])  # (n_envs, 2 * rows, width): where each sequence starts
        rows = self._rows
        resume = self._resumes(states, rollout.dones)
        actor, critic = slice(0, rows), slice(rows, None)
        with torch.no_grad():
            _, after = self._replay(self.critic, obs, first[:, critic], starts, resume, critic)
            last_starts = self._tensor(rollout.dones[-1:])
            next_obs = self._tensor(np.asarray(self._next_obs, np.float32))[None]
            last, _ = self.critic.unroll(next_obs, after, last_starts)
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.dones, self._host(last[0, :, 0]), c.gamma, c.gae_lambda
        )
        adv_all, ret_all = self._tensor(advantages), self._tensor(returns)
        old_log_probs = self._tensor(rollout.log_probs)

        lr, clip = self._scheduled_lr(), self._clip(self.progress)
        # Minibatches are whole env sequences: batch_size // n_steps envs each (at least one).
        envs_per_batch = max(1, min(n_envs, c.batch_size // steps))

        def minibatch(e: torch.Tensor) -> torch.Tensor:
            out, _ = self._replay(self.actor, obs[:, e], first[e, actor], starts[:, e], resume, actor, e)
            values, _ = self._replay(self.critic, obs[:, e], first[e, critic], starts[:, e], resume, critic, e)
            mb_actions = actions[:, e].reshape(-1, *actions.shape[2:])
            if self.action_layout is not None:
                mb_masks = None if rollout.masks is None else self._tensor(rollout.masks[:, self._host(e)])
                mb_masks = None if mb_masks is None else mb_masks.reshape(-1, mb_masks.shape[-1])
                log_prob, entropy = composite_terms(
                    out.flatten(0, 1), self.log_std, mb_actions, self.action_layout, mb_masks
                )
            elif rollout.masks is not None or self.action_kind in ("multidiscrete", "multibinary"):
                mb_masks = None if rollout.masks is None else self._tensor(rollout.masks[:, self._host(e)])
                mb_masks = None if mb_masks is None else mb_masks.reshape(-1, mb_masks.shape[-1])
                flat_out = out.flatten(0, 1)
                log_prob, entropy = categorical_terms(flat_out, mb_actions, self.action_kind, self.nvec, mb_masks)
            else:
                flat_out = out.flatten(0, 1)
                log_prob, entropy = gaussian_policy_terms(flat_out, self.log_std, mb_actions, self.discrete)
            return clipped_step(
                self,
                log_prob,
                entropy,
                values.reshape(-1),
                adv_all[:, e].reshape(-1),
                old_log_probs[:, e].reshape(-1),
                ret_all[:, e].reshape(-1),
                clip,
            )

        mean_row = clipped_epochs(self, n_envs, envs_per_batch, minibatch)
        rollout.reset()
        self.num_updates += 1
        metrics = clipped_metrics(mean_row, clip, lr)
        metrics["explained_variance"] = self.explained_variance(rollout.values, returns)
        if self.log_std is not None:
            metrics["policy_std"] = float(self.log_std.detach().exp().mean())
        if self.action_layout is not None:
            with torch.no_grad():
                out, _ = self._replay(self.actor, obs, first[:, actor], starts, resume, actor)
                masks = None if rollout.masks is None else self._tensor(rollout.masks.reshape(steps * n_envs, -1))
                metrics.update(self._head_entropies(out.flatten(0, 1), actions.flatten(0, 1), masks))
        return metrics

    def _resumes(self, states: np.ndarray, dones: np.ndarray) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """The steps where an env's sequence resumes from its stored state instead of starting from
        zeros: right after a done whose next step's stored state is not zero. In process that never
        happens (``begin_episode`` zeroed the state after every done, so the replay is the one it was);
        a served session's local-inference client sends an episode in pieces, and a piece that goes on
        with its episode follows another piece's cut (marked truncated) in its column, with the state
        its client reached there (issue 52). Step -> (which envs resume, the stored states at that step)."""
        after_done = dones[:-1] > 0
        if not after_done.any():
            return {}
        resumed = np.zeros_like(after_done)
        resumed[after_done] = np.abs(states[1:][after_done]).reshape(int(after_done.sum()), -1).max(axis=1) > 0
        return {
            int(t) + 1: (torch.as_tensor(resumed[t], device=self.device), self._tensor(states[t + 1]))
            for t in np.flatnonzero(resumed.any(axis=1))
        }

    def _replay(
        self,
        net: nn.Module,
        obs: torch.Tensor,
        state: torch.Tensor,
        starts: torch.Tensor,
        resume: dict[int, tuple[torch.Tensor, torch.Tensor]],
        part: slice,
        envs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``net.unroll`` over the rollout (the envs ``envs`` of it, None: all), cut where some env
        resumes from its stored state (:meth:`_resumes`; ``part``: the net's rows of that state):
        each stretch between two such steps is one unroll, so the network's own math runs unchanged."""
        if not resume:
            return net.unroll(obs, state, starts)  # type: ignore[operator]
        outs = []
        cuts = [0, *resume, obs.shape[0]]
        for a, b in pairwise(cuts):
            stretch = starts[a:b]
            if a in resume:
                which, stored = resume[a]
                if envs is not None:
                    which, stored = which[envs], stored[envs]
                state = torch.where(which.view(-1, 1, 1), stored[:, part], state)
                stretch = stretch.clone()
                stretch[0] = stretch[0] * ~which  # a resumed sequence goes on: no episode begins here
            out, state = net.unroll(obs[a:b], state, stretch)  # type: ignore[operator]
            outs.append(out)
        return torch.cat(outs), state

    # -- declared state -----------------------------------------------------------------------

    def state(self) -> AgentState:
        state = super().state()
        training_state = self._acting_states.get(True)
        if training_state is not None:
            state.tensors[f"acting/{self._state_key}"] = training_state.detach().to("cpu", copy=True)
        return state

    def restore(self, state: AgentState) -> None:
        super().restore(state)
        saved = state.tensors.get(f"acting/{self._state_key}")
        self._acting_states = {} if saved is None else {True: saved.clone().float().to(self.device)}
