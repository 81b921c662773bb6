"""DQN: deep Q-learning (Mnih et al. 2015) with double Q-learning (van Hasselt et al. 2016),
a target network, the Huber loss and epsilon-greedy exploration. Options: a dueling network
(Wang et al. 2016), n-step returns, proportional prioritized replay (Schaul et al. 2016), noisy
networks for exploration (Fortunato et al. 2018).

Reads top to bottom: hyperparameters, networks, acting, storing, the update.
Defaults are rl-baselines3-zoo's tuned values for CartPole-v1.

The distributional members of the family (``qrdqn.py``, ``c51.py``, ``rainbow.py``) share all of
this and override three hooks: ``_atoms`` (outputs per action), ``_q_values`` (the expected value
of each action from the network's output) and ``_td_loss`` (the per-sample loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..envs.masks import NEXT_MASK_KEY, masked_choice
from ..exploration import EpsilonGreedy
from ..memory.her import HerMemory
from ..memory.nstep import NStepAccumulator
from ..memory.prioritized import PrioritizedReplayMemory
from ..memory.replay import ReplayBatch, ReplayMemory
from ..schedules import Schedule, as_schedule, linear
from ..validation import Constraint, checked, flag, integer, number
from .base import AgentState, Transitions, register
from .heads import MASKED_Q, Argmax, DistributionalArgmax, PolicyHead, frozen
from .intrinsic import INTRINSIC, IntrinsicReward
from .networks import DuelingQNetwork, make_adam, mlp, noise_off, reset_noise
from .off_policy import OffPolicyAgent, OffPolicyConfig
from .updates import gradient_step, polyak_update

__all__ = ["DQN", "DQNConfig"]


@dataclass
class DQNConfig(OffPolicyConfig):
    """DQN hyperparameters (defaults: rl-baselines3-zoo, CartPole-v1); the shared ones are
    :class:`OffPolicyConfig`'s."""

    # The zoo's CartPole values for shared fields:
    learning_rate: float | Schedule = 2.3e-3
    buffer_size: int = 100_000
    learning_starts: int = 1000
    batch_size: int = 64
    tau: float = 1.0
    train_freq: int = 256
    gradient_steps: int = 128

    target_update_interval: int = checked(10, integer(min=1), live=True)
    """Env steps between target network updates."""
    exploration: EpsilonGreedy = checked(
        constraint=Constraint("a wb.EpsilonGreedy(start, end, fraction)", lambda v: isinstance(v, EpsilonGreedy)),
        default_factory=lambda: EpsilonGreedy(start=1.0, end=0.04, fraction=0.16),
        live=True,
    )
    """Epsilon-greedy schedule over the training budget (live: a new one takes over at the next step)."""
    max_grad_norm: float = checked(10.0, number(0, min_open=True), live=True)
    """Gradient norm clip."""
    double_q: bool = checked(True, flag(), live=True)
    """Pick the next action with the online network, value it with the target network."""
    dueling: bool = checked(False, flag())
    """Dueling network: separate state-value and advantage heads."""
    n_step: int = checked(1, integer(min=1))
    """Bootstrap from the n-th next state (n-step returns)."""
    prioritized: bool = checked(False, flag())
    """Proportional prioritized replay with importance weights."""
    prioritized_alpha: float = checked(0.6, number(0))
    """How strongly priorities shape sampling (0: uniform)."""
    prioritized_beta: float | Schedule = checked(
        constraint=number(0, schedule=True), default_factory=lambda: linear(0.4, 1.0), live=True
    )
    """Importance-weight exponent, annealed to 1 over training."""
    noisy: bool = checked(False, flag())
    """Noisy networks: learned weight noise explores (new noise every step and gradient step); set
    ``exploration=wb.EpsilonGreedy(0.0, 0.0)`` to explore by the noise alone."""
    intrinsic: IntrinsicReward | None = checked(None, INTRINSIC)
    """An intrinsic reward for exploration: wb.RND(...) or wb.ICM(...) (None: the env's reward alone).
    Its bonus is added to the rewards while training, never used in play (``workbench.agents.intrinsic``)."""
    intrinsic_coef: float = checked(1.0, number(0), live=True)
    """Weight of the intrinsic reward's normalised bonus in the rewards learned from."""


@register
class DQN(OffPolicyAgent):
    """Deep Q-network for Discrete action spaces.

    Example::

        agent = wb.DQN("CartPole-v1", exploration=wb.EpsilonGreedy(1.0, 0.05, 0.2))
        wb.Session(agent, "CartPole-v1").run(steps=50_000)
    """

    Config = DQNConfig
    default_plots = ("episode_reward", "loss")
    action_spaces = (spaces.Discrete,)
    supports_action_masks = True
    network_names = ("q_net", "q_target")
    config: DQNConfig
    # Whether _bootstrap_targets exists for this class's loss, so an update without double Q or noise
    # (its targets then depend on the frozen target network only) computes them once for every minibatch.
    _batched_targets = True

    # -- networks -----------------------------------------------------------------------------

    def _build(self) -> None:
        c = self.config
        if not isinstance(c.exploration, EpsilonGreedy):
            raise TypeError(f"DQN explores with wb.EpsilonGreedy(...), got {type(c.exploration).__name__}")
        self.n_actions = int(self.action_space.n)
        if c.n_step < 1:
            raise ValueError(f"DQN n_step must be at least 1, got {c.n_step}")
        if c.optimize_memory_usage and c.n_step > 1:
            raise ValueError(
                f"optimize_memory_usage=True reads each next observation from the following row, but n_step={c.n_step} "
                "stores the observation n steps later: use one of the two"
            )

        atoms = self._atoms()
        if c.noisy and not c.net_arch:
            raise ValueError("noisy=True needs at least one hidden layer (net_arch): the first layer is not noisy")

        def q_head(obs_dim: int) -> nn.Module:
            if c.dueling:
                return DuelingQNetwork(obs_dim, c.net_arch, self.n_actions, atoms=atoms, noisy=c.noisy)
            return mlp(obs_dim, c.net_arch, self.n_actions * atoms, activation="relu", noisy=c.noisy)

        def q_network() -> nn.Module:  # encoder (CNN for images; none for vectors) then the head
            return self._encoded(q_head)

        self.q_net = q_network()
        self.q_target = q_network()
        self.q_target.load_state_dict(self.q_net.state_dict())
        self.q_target.requires_grad_(False)
        self._lr = as_schedule(c.learning_rate)
        self._beta = as_schedule(c.prioritized_beta)
        self.optimizer = make_adam(self.q_net.parameters(), lr=self._lr(0.0))
        self._params = list(self.q_net.parameters())
        if c.prioritized:
            self.memory: ReplayMemory = PrioritizedReplayMemory(
                c.buffer_size, self.obs_shape, alpha=c.prioritized_alpha, **self._memory_options()
            )
        else:
            self.memory = ReplayMemory(c.buffer_size, self.obs_shape, **self._memory_options())
        self._n_step = NStepAccumulator(c.n_step, c.gamma) if c.n_step > 1 else None
        self._steps_since_update = 0
        self._steps_since_target = 0
        self._reset_noise()

    # Hooks of the distributional agents (QR-DQN, C51): DQN has one output per action, its Q-value.

    def _atoms(self) -> int:
        """Network outputs per action (quantiles, support atoms; 1 for DQN)."""
        return 1

    def _outputs(self, net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """The network's output, ``(batch, n_actions)`` or ``(batch, n_actions, atoms)``."""
        out = net(obs)
        atoms = self._atoms()
        return out if atoms == 1 else out.view(-1, self.n_actions, atoms)

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        """Expected value of each action, ``(batch, n_actions)``, from :meth:`_outputs`."""
        return out

    def _reset_noise(self) -> None:
        """New weight noise in both networks (noisy networks only)."""
        if self.config.noisy:
            reset_noise(self.q_net, self.generator)
            reset_noise(self.q_target, self.generator)

    @property
    def epsilon(self) -> float:
        """Current exploration probability."""
        return self.config.exploration.value(self.progress)

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def _greedy(self, obs: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        q = self._q_values(self._outputs(self.q_net, self._tensor(obs)))
        if mask is not None:  # a masked action is never the greedy one
            q = q.masked_fill(~self._tensor(mask), -torch.inf)
        return self._host(q.argmax(-1))

    def _act(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is not None:
            return self._act_masked(obs, deterministic, mask)
        if deterministic:
            with noise_off(self.q_net):  # play and evaluation act on the mean weights
                return self._greedy(obs)
        if self.config.noisy:
            reset_noise(self.q_net, self.generator)
        n = obs.shape[0]
        if self.num_timesteps < self.config.learning_starts:
            return self.rng.integers(0, self.n_actions, size=n)
        eps = self.epsilon
        explore = self.rng.random(n) < eps
        if explore.all():  # no forward pass needed while every action is random
            return self.rng.integers(0, self.n_actions, size=n)
        actions = self._greedy(obs)
        if explore.any():
            actions[explore] = self.rng.integers(0, self.n_actions, size=int(explore.sum()))
        return actions

    def _act_masked(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray) -> np.ndarray:
        """:meth:`_act` among the allowed actions only: masked greedy, and random actions drawn
        uniformly from the allowed ones."""
        if deterministic:
            with noise_off(self.q_net):
                return self._greedy(obs, mask)
        if self.config.noisy:
            reset_noise(self.q_net, self.generator)
        if self.num_timesteps < self.config.learning_starts:
            return masked_choice(mask, self.rng)
        explore = self.rng.random(obs.shape[0]) < self.epsilon
        if explore.all():
            return masked_choice(mask, self.rng)
        actions = self._greedy(obs, mask)
        if explore.any():
            actions[explore] = masked_choice(mask[explore], self.rng)
        return actions

    def behaviour_log_probs(self, t: Transitions) -> np.ndarray | None:
        """Epsilon-greedy's probability of each taken action: ``eps / n + (1 - eps)`` for the greedy one,
        ``eps / n`` for the others, with this step's epsilon (1 before ``learning_starts``); None with
        noisy networks, whose exploration has no such probability."""
        if "log_probs" in t.extras or self.config.noisy:
            return super().behaviour_log_probs(t)
        n_actions = int(self.n_actions)
        eps = float(self.epsilon) if self.num_timesteps >= self.config.learning_starts else 1.0
        obs, _ = self.prepare_obs(t.obs)
        if self.config.normalize_observations:
            obs = self.obs_normalizer(obs)
        chosen = np.asarray(self._greedy(obs)).reshape(-1) == np.asarray(t.actions).reshape(-1)
        return np.log(np.where(chosen, 1.0 - eps + eps / n_actions, eps / n_actions))

    def policy_head(self) -> PolicyHead:
        """Export's head: the greedy action (frozen copies are in eval mode, so noisy layers act on their
        mean weights); QR-DQN's from the mean of each action's quantiles."""
        atoms = int(self._atoms())
        if atoms == 1:
            return PolicyHead(Argmax(frozen(self.q_net), MASKED_Q), "argmax of the Q-values")
        head = DistributionalArgmax(frozen(self.q_net), self.n_actions, atoms, None)
        return PolicyHead(head, "argmax over actions of the mean quantile")

    # -- storing ------------------------------------------------------------------------------

    @property
    def observes_unordered(self) -> bool:
        """n-step returns need each env's steps in order, one step of every env at a time."""
        return super().observes_unordered and self._n_step is None

    def _observe(self, transitions: Transitions) -> None:
        t = transitions
        # The next states' masks (from the loop) keep the targets' max among allowed actions.
        next_masks = t.extras.get(NEXT_MASK_KEY)
        # Only a real termination stops bootstrapping; a time-limit truncation does not.
        if isinstance(self.memory, HerMemory):  # whole episodes (workbench.memory.her): truncations too
            self.memory.add_steps(t)
        elif self._n_step is None:
            self.memory.add(
                t.obs,
                t.actions,
                t.rewards,
                t.next_obs,
                t.terminated.astype(np.float32),
                self.config.gamma,
                **({} if next_masks is None else {"next_masks": next_masks}),
            )
        else:
            ready = self._n_step.add(t, next_masks)
            if ready is not None:
                self.memory.add(*ready)
        n = len(t.rewards)
        self._steps_since_update += n
        self._steps_since_target += n
        if self._steps_since_target >= self.config.target_update_interval:
            self._steps_since_target = 0
            self._update_target()

    def _update_target(self) -> None:
        polyak_update(self.q_target, self.q_net, self.config.tau)

    def apply_edits(self, changed: set[str]) -> None:
        """The learning rate's and prioritized replay's beta schedules; the optimizer's rate at once."""
        super().apply_edits(changed)
        if "prioritized_beta" in changed:
            self._beta = as_schedule(self.config.prioritized_beta)
        self._lr = self._edit_learning_rate(changed, self._lr)

    # -- learning -----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        c = self.config
        steps = self._gradient_steps_due()
        lr = self._lr(self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=self.device)
        q_sum = torch.zeros((), device=self.device)
        prioritized = isinstance(self.memory, PrioritizedReplayMemory)
        beta = self._beta(self.progress)
        self._reset_noise()
        if prioritized:
            # Priorities change after every step, so each minibatch is drawn when it is used.
            for _ in range(steps):
                batch = self.memory.sample(c.batch_size, self.rng, beta)
                with torch.no_grad():
                    next_q = self._outputs(self.q_target, batch.next_obs)
                loss, q = self._gradient_step(batch, next_q)
                loss_sum += loss
                q_sum += q
        else:
            # Uniform minibatches can be drawn all at once, and the target network does not change
            # during one update (it is refreshed between env steps), so the targets' forward pass
            # runs once over every minibatch instead of once per gradient step: same maths, fewer ops.
            # Without double Q or noise the targets themselves depend on the target network only: they
            # are computed once too (row by row the same ops, so the same values bit for bit).
            everything = self.memory.sample(c.batch_size * steps, self.rng)
            targets_all = None
            with torch.no_grad():
                next_q_all = self._outputs(self.q_target, everything.next_obs)
                if self._batched_targets and not c.double_q and not c.noisy:
                    targets_all = self._bootstrap_targets(everything, next_q_all)
            for i in range(steps):
                part = slice(i * c.batch_size, (i + 1) * c.batch_size)
                batch = ReplayBatch(*(None if field is None else field[part] for field in everything))
                targets = None if targets_all is None else targets_all[part]
                loss, q = self._gradient_step(batch, next_q_all[part], targets)
                loss_sum += loss
                q_sum += q
        self.num_updates += 1
        metrics = {
            "loss": float(loss_sum) / steps,
            "q_mean": float(q_sum) / steps,
            "epsilon": self.epsilon,
            "learning_rate": lr,
        }
        if prioritized:
            metrics["prioritized_beta"] = beta
        return metrics

    def _next_actions(self, batch: ReplayBatch, next_out: torch.Tensor) -> torch.Tensor:
        """The action bootstrapped from in each next state, ``(batch, 1)``: chosen by the online
        network with ``double_q``, else by the target network's own values."""
        if self.config.double_q:
            chooser = self._q_values(self._outputs(self.q_net, batch.next_obs))
        else:
            chooser = self._q_values(next_out)
        if batch.next_masks is not None:  # the max runs over the next state's allowed actions only
            chooser = chooser.masked_fill(~batch.next_masks, -torch.inf)
        return chooser.argmax(-1, keepdim=True)

    def _bootstrap_targets(self, batch: ReplayBatch, next_out: torch.Tensor) -> torch.Tensor:
        """The regression targets of :meth:`_td_loss` (called without gradients). DQN:
        r + discount * Q_target(s', a'), ``(batch,)``."""
        next_value = next_out.gather(1, self._next_actions(batch, next_out)).squeeze(1)
        return batch.rewards + batch.discounts * (1.0 - batch.dones) * next_value

    def _td_loss(
        self, batch: ReplayBatch, next_out: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-sample loss, the taken actions' Q-values (for ``q_mean``) and the priorities' errors.
        DQN: the Huber loss between Q(s, a) and r + discount * Q_target(s', a'). ``targets``: those of
        :meth:`_bootstrap_targets` when the update computed them already."""
        if targets is None:
            with torch.no_grad():
                targets = self._bootstrap_targets(batch, next_out)
        q = self.q_net(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        return F.smooth_l1_loss(q, targets, reduction="none"), q.detach(), (q - targets).detach()

    def _gradient_step(
        self, batch: ReplayBatch, next_out: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on :meth:`_td_loss`; ``next_out`` is the target network's output for
        ``next_obs``, ``targets`` the precomputed targets if any. Returns the loss and the mean
        Q-value (detached)."""
        c = self.config
        if c.noisy:
            reset_noise(self.q_net, self.generator)  # new noise for every gradient step
        per_sample, q, errors = self._td_loss(batch, next_out, targets)
        if isinstance(self.memory, PrioritizedReplayMemory):
            # Importance weights undo the bias of prioritized sampling (Schaul et al. 2016).
            loss = (batch.weights * per_sample).mean()
            self.memory.update_priorities(batch.indices, self._host(errors))
        else:
            loss = per_sample.mean()
        gradient_step(self.optimizer, loss, c.max_grad_norm)
        return loss.detach(), q.detach().mean()

    def state(self) -> AgentState:
        state = super().state()
        state.data["agent_state"]["steps_since_target"] = self._steps_since_target
        return state

    def restore(self, state: AgentState) -> None:
        super().restore(state)
        self._steps_since_target = int(state.data.get("agent_state", {}).get("steps_since_target", 0))
