"""Intrinsic rewards for exploration: Random Network Distillation and the Intrinsic Curiosity Module.

``wb.RND(...)`` and ``wb.ICM(...)`` are what the user passes to PPO, A2C or DQN as ``intrinsic=``: JSON-ready
descriptions, saved with the agent's hyperparameters. The agent builds an :class:`IntrinsicModule` from
one (its networks are saved and loaded with the agent's) and, while it trains:

* ``observe`` adds ``intrinsic_coef * bonus`` to each step's reward (``intrinsic_coef`` is the agent's
  hyperparameter, live: ``session.set(intrinsic_coef=0.1)``). The bonus is the module's prediction error
  on the step, divided by the running standard deviation of the discounted intrinsic return (Burda et
  al. 2018, section 2.4), so one coefficient suits both modules and any task;
* ``update`` then trains the module on the steps seen since the last update, with its own optimizer.

Neither acting nor play uses it: a loaded agent acts as it would without it.

Signals (every update): ``intrinsic_bonus`` (the mean bonus added to the rewards, coefficient applied),
``intrinsic_error`` (the mean raw prediction error, before normalisation), ``intrinsic_return_std`` (the
normalisation's running std), ``intrinsic_loss`` (the module's training loss) and ``intrinsic_coef``.

* **RND** (Burda et al. 2018, "Exploration by Random Network Distillation"): a fixed random *target*
  network and a trained *predictor*; the bonus is the predictor's squared error on the next observation
  (standardised by running statistics and clipped to [-5, 5], as in the paper): high on states seen rarely.
* **ICM** (Pathak et al. 2017, "Curiosity-driven Exploration by Self-supervised Prediction"): features
  learned by an inverse model (which action led from s to s'), a forward model predicting the next
  features from the features and the action; the bonus is the forward model's squared error.
  The loss is ``(1 - beta) * inverse + beta * forward``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from ..loop import Transitions
from ..normalization import ObservationNormalizer, RewardNormalizer
from ..validation import ArgumentError, Constraint, optional
from .networks import make_adam, mlp

if TYPE_CHECKING:
    from .contract import Agent

__all__ = ["ICM", "INTRINSIC", "RND", "IntrinsicModule", "IntrinsicReward", "intrinsic_from_dict"]

_MAX_ROWS = 65_536  # steps kept for the next update at most (DQN with a long train_freq keeps the newest)


def _positive_int(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ArgumentError(f"{owner} got {name}={value!r}: {name} must be an integer >= 1.")


def _positive(owner: str, name: str, value: Any, top: float | None = None) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float) and value > 0
    if ok and top is not None:
        ok = value <= top
    if not ok:
        limit = f" and <= {top}" if top is not None else ""
        raise ArgumentError(f"{owner} got {name}={value!r}: {name} must be a number > 0{limit}.")


@dataclasses.dataclass
class IntrinsicReward:
    """What RND and ICM share: their training and the bonus's normalisation."""

    learning_rate: float = 1e-3
    """Adam learning rate of the module's networks."""
    epochs: int = 4
    """Passes over the steps seen since the last update, at each update."""
    batch_size: int = 256
    """Minibatch size of those passes."""
    gamma: float = 0.99
    """Discount of the intrinsic return whose running std normalises the bonus."""
    normalize: bool = True
    """Divide the bonus by the running std of the discounted intrinsic return (False: the raw error)."""
    update_proportion: float = 1.0
    """The share of the steps seen since the last update that the module trains on, drawn at random
    (CleanRL's RND: 0.25): below 1 the module learns the visited states more slowly, so their bonus
    fades more slowly, and its training costs that share of the time."""

    warmup: int = 0
    """Steps per env at the start whose bonus is measured (the statistics learn from it, the module
    trains on it) but not added to the rewards. The running std that normalises the bonus is first
    taken from returns only a few steps long, so the first bonuses come out up to ``1 / (1 - gamma)``
    times too large; ``warmup=100`` (for ``gamma=0.99``) lets the statistics see a whole horizon first."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int | np.integer) or self.warmup < 0:
            raise ArgumentError(f"{owner} got warmup={self.warmup!r}: warmup must be an integer >= 0 (steps per env).")
        _positive(owner, "learning_rate", self.learning_rate)
        _positive_int(owner, "epochs", self.epochs)
        _positive_int(owner, "batch_size", self.batch_size)
        _positive(owner, "gamma", self.gamma, 1.0)
        _positive(owner, "update_proportion", self.update_proportion, 1.0)
        if not isinstance(self.normalize, bool):
            raise ArgumentError(f"{owner} got normalize={self.normalize!r}: normalize must be True or False.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the saved hyperparameters."""
        data = dataclasses.asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        return {"type": type(self).__name__, **data}

    def build(self, agent: Agent) -> IntrinsicModule:
        """The module for ``agent``'s spaces (networks, optimizer, running statistics)."""
        raise NotImplementedError


@dataclasses.dataclass
class RND(IntrinsicReward):
    """Random Network Distillation (Burda et al. 2018) as an intrinsic reward: ``intrinsic=wb.RND()``.

    Example::

        agent = wb.PPO("MountainCar-v0", intrinsic=wb.RND(), intrinsic_coef=1.0)

    The bonus is how badly a trained predictor matches a fixed random network on the next observation.
    """

    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the target and predictor networks."""
    features: int = 64
    """Output width of both networks."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.hidden = tuple(self.hidden)
        for width in self.hidden:
            _positive_int("RND", "hidden", width)
        _positive_int("RND", "features", self.features)

    def build(self, agent: Agent) -> IntrinsicModule:
        """The RND networks for ``agent``'s observations."""
        return RNDModule(self, int(np.prod(agent.obs_shape)))


@dataclasses.dataclass
class ICM(IntrinsicReward):
    """The Intrinsic Curiosity Module (Pathak et al. 2017) as an intrinsic reward: ``intrinsic=wb.ICM()``.

    Example::

        agent = wb.PPO("MountainCar-v0", intrinsic=wb.ICM(beta=0.2))

    The bonus is how badly a forward model predicts the next state's features, features that an inverse
    model learns (which action was taken); for Discrete, MultiBinary and Box actions.
    """

    hidden: int = 64
    """Hidden width of the feature, inverse and forward networks."""
    features: int = 32
    """Width of the learned features."""
    beta: float = 0.2
    """Weight of the forward loss against the inverse loss."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive_int("ICM", "hidden", self.hidden)
        _positive_int("ICM", "features", self.features)
        _positive("ICM", "beta", self.beta, 1.0)

    def build(self, agent: Agent) -> IntrinsicModule:
        """The ICM networks for ``agent``'s observations and actions."""
        space = agent.action_space
        if not isinstance(space, spaces.Discrete | spaces.Box | spaces.MultiBinary):
            raise ValueError(
                f"ICM's inverse model predicts the action, and {type(space).__name__} actions are not supported: "
                "use Discrete, MultiBinary or Box actions, or intrinsic=wb.RND() (which needs no action)"
            )
        return ICMModule(self, int(np.prod(agent.obs_shape)), space)


_TYPES: dict[str, type[IntrinsicReward]] = {"RND": RND, "ICM": ICM}

INTRINSIC = optional(Constraint("a wb.RND(...) or wb.ICM(...)", lambda v: isinstance(v, IntrinsicReward)))
"""The constraint of an agent's ``intrinsic=`` hyperparameter."""


def intrinsic_from_dict(data: dict[str, Any]) -> IntrinsicReward:
    """Rebuild an :class:`RND` or :class:`ICM` from its ``to_dict()``; ``ValueError`` naming the key otherwise."""
    data = dict(data)
    kind = data.pop("type", None)
    if kind not in _TYPES:
        raise ValueError(f"unknown intrinsic reward type {kind!r}; known: {', '.join(sorted(_TYPES))}")
    cls = _TYPES[kind]
    fields = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in fields:
            raise ValueError(f"{kind} has no key {key!r}; its keys: {', '.join(fields)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


class IntrinsicModule(nn.Module):
    """An intrinsic reward built for one agent: networks (an ``nn.Module``, saved with the agent's),
    ``optimizer``, the bonus's normalisation, and the steps seen since the last :meth:`learn`."""

    def __init__(self, spec: IntrinsicReward, obs_dim: int) -> None:
        super().__init__()
        self.spec = spec
        self.obs_dim = obs_dim
        self.obs_norm = ObservationNormalizer((obs_dim,), clip=5.0)  # RND's inputs: standardised, in [-5, 5]
        self.return_norm = RewardNormalizer(spec.gamma, clip=float("inf"))
        self._rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._stats = np.zeros(3)  # bonus sum (coefficient applied), raw error sum, count
        self.optimizer: torch.optim.Optimizer

    def _finish(self) -> None:
        """Create the optimizer once the networks exist."""
        params = [p for p in self.parameters() if p.requires_grad]
        self.optimizer = make_adam(params, lr=self.spec.learning_rate)

    def _inputs(self, obs: np.ndarray) -> torch.Tensor:
        """Observations flattened and standardised by the running statistics, clipped to [-5, 5]."""
        flat = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        return torch.from_numpy(self.obs_norm(flat)).to(self._device())

    def _actions(self, actions: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(actions)).to(self._device())

    def _device(self) -> torch.device:
        """Where the module's networks are (the agent's device: they move with its networks)."""
        return next(self.parameters()).device

    def errors(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """Per-step prediction errors (what the bonus is made of), with gradients."""
        raise NotImplementedError

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """The module's training loss on a minibatch (default: the mean error)."""
        return self.errors(obs, actions, next_obs).mean()

    def add_bonus(self, t: Transitions, coef: float) -> Transitions:
        """``t`` with ``coef`` times the normalised bonus added to its rewards; the steps are kept for
        the next :meth:`learn`."""
        next_flat = np.asarray(t.next_obs, dtype=np.float32).reshape(len(t.rewards), -1)
        self.obs_norm.update(next_flat)
        with torch.no_grad():
            raw = self.errors(self._inputs(t.obs), self._actions(t.actions), self._inputs(t.next_obs)).cpu().numpy()
        raw = raw.astype(np.float64)
        if self.spec.normalize:
            # Intrinsic returns do not end with episodes (Burda et al.): no dones reset them.
            bonus = self.return_norm(raw, np.zeros(len(raw), dtype=bool))
        else:
            bonus = raw.astype(np.float32)
        self._rows.append((np.asarray(t.obs), np.asarray(t.actions), np.asarray(t.next_obs)))
        # The observation statistics count every step seen (saved with the agent): the warm-up is over once
        # they hold ``warmup`` steps of each env.
        warming = self.spec.warmup > 0 and float(self.obs_norm.rms.count.item()) < self.spec.warmup * len(raw) + 1
        added = ((0.0 if warming else coef) * bonus).astype(np.float32)
        self._stats += (float(added.sum()), float(raw.sum()), len(raw))
        return t._replace(rewards=(np.asarray(t.rewards, dtype=np.float32) + added).astype(np.float32))

    def learn(self, coef: float) -> dict[str, float]:
        """Train on the steps kept since the last call (``epochs`` passes of ``batch_size`` minibatches);
        returns the signals."""
        metrics = {"intrinsic_coef": float(coef)}
        bonus, raw, count = self._stats
        if count:
            metrics["intrinsic_bonus"] = bonus / count
            metrics["intrinsic_error"] = raw / count
        if self.spec.normalize:
            metrics["intrinsic_return_std"] = float(self.return_norm.rms.std())
        self._stats = np.zeros(3)
        if not self._rows:
            return metrics
        obs = np.concatenate([r[0] for r in self._rows])[-_MAX_ROWS:]
        actions = np.concatenate([r[1] for r in self._rows])[-_MAX_ROWS:]
        next_obs = np.concatenate([r[2] for r in self._rows])[-_MAX_ROWS:]
        self._rows = []
        generator = torch.Generator().manual_seed(int(self.obs_norm.rms.count.item() * 1000) % (2**31))
        if self.spec.update_proportion < 1.0:
            keep = max(1, round(self.spec.update_proportion * len(obs)))
            chosen = torch.randperm(len(obs), generator=generator)[:keep].sort().values.numpy()
            obs, actions, next_obs = obs[chosen], actions[chosen], next_obs[chosen]
        x, a, nx = self._inputs(obs), self._actions(actions), self._inputs(next_obs)
        n = len(x)
        for group in self.optimizer.param_groups:  # its own rate, whatever edits set on the agent's
            group["lr"] = self.spec.learning_rate
        total, steps = 0.0, 0
        for _ in range(self.spec.epochs):
            perm = torch.randperm(n, generator=generator)
            for start in range(0, n, self.spec.batch_size):
                mb = perm[start : start + self.spec.batch_size]
                loss = self.loss(x[mb], a[mb], nx[mb])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                total += float(loss.detach())
                steps += 1
        metrics["intrinsic_loss"] = total / max(steps, 1)
        return metrics

    def forget(self) -> None:
        """Drop the steps kept for the next update (a reseed, a loaded agent)."""
        self._rows = []
        self._stats = np.zeros(3)


class RNDModule(IntrinsicModule):
    """RND's fixed random target and trained predictor (the predictor one layer deeper, as in the paper)."""

    def __init__(self, spec: RND, obs_dim: int) -> None:
        super().__init__(spec, obs_dim)
        self.target = mlp(obs_dim, spec.hidden, spec.features, activation="relu")
        self.target.requires_grad_(False)
        self.predictor = mlp(
            obs_dim, (*spec.hidden, spec.hidden[-1] if spec.hidden else spec.features), spec.features, activation="relu"
        )
        self._finish()

    def errors(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """The predictor's squared error against the target on the next observations."""
        with torch.no_grad():
            target = self.target(next_obs)
        return (self.predictor(next_obs) - target).pow(2).mean(-1)


class ICMModule(IntrinsicModule):
    """ICM's feature, inverse and forward networks."""

    def __init__(self, spec: ICM, obs_dim: int, action_space: spaces.Space) -> None:
        super().__init__(spec, obs_dim)
        self.beta = spec.beta
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.action_dim = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        self.encoder = mlp(obs_dim, (spec.hidden,), spec.features, activation="relu")
        self.inverse = mlp(2 * spec.features, (spec.hidden,), self.action_dim, activation="relu")
        self.forward_model = mlp(spec.features + self.action_dim, (spec.hidden,), spec.features, activation="relu")
        self._finish()

    def _actions(self, actions: np.ndarray) -> torch.Tensor:
        a = torch.from_numpy(np.asarray(actions)).to(self._device())
        if self.discrete:
            return a.long().reshape(-1)
        return a.float().reshape(len(a), -1)

    def _action_input(self, actions: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return F.one_hot(actions, self.action_dim).float()
        return actions

    def errors(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """The forward model's squared error on the next state's features."""
        phi, next_phi = self.encoder(obs), self.encoder(next_obs)
        predicted = self.forward_model(torch.cat([phi, self._action_input(actions)], dim=-1))
        return 0.5 * (predicted - next_phi.detach()).pow(2).sum(-1)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """``(1 - beta) * inverse loss + beta * forward loss``."""
        phi, next_phi = self.encoder(obs), self.encoder(next_obs)
        predicted = self.forward_model(torch.cat([phi, self._action_input(actions)], dim=-1))
        forward = 0.5 * (predicted - next_phi.detach()).pow(2).sum(-1).mean()
        guess = self.inverse(torch.cat([phi, next_phi], dim=-1))
        if self.discrete:
            inverse = F.cross_entropy(guess, actions)
        else:
            inverse = F.mse_loss(guess, actions)
        return (1 - self.beta) * inverse + self.beta * forward
