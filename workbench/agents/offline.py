"""What the agents that learn from a logged dataset (BC, BCQ, CQL, IQL) share, written once.

An offline agent never steps an env while it learns: it is given a :class:`~workbench.Dataset`
(``wb.BCQ(dataset=ds)``, ``agent.load_dataset(ds)`` or ``wb.Session(agent, dataset=ds)``), and each
``update()`` is one gradient step on a minibatch drawn from it. In a session its step counter
counts those gradient steps. It plays, saves, loads and exports like any agent.

The dataset is held as tensors in ``self.data`` (observations normalized when
``normalize_observations``; continuous actions rescaled to [-1, 1], as replay agents store them).
It is not saved with the agent: pass the dataset again to continue training a loaded one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import nn

from ..devices import to_device
from ..offline.datasets import Dataset
from ..validation import checked, integer, layer_widths, number
from .base import Agent, AgentConfig, Transitions
from .networks import mlp
from .updates import gradient_step

__all__ = ["OfflineAgent", "OfflineBatch", "OfflineConfig", "OfflineData", "SquashedGaussianActor"]


@dataclass
class OfflineConfig(AgentConfig):
    """Hyperparameters every offline agent has (each algorithm sets its own defaults)."""

    learning_rate: float = checked(3e-4, number(0, min_open=True))
    """Adam learning rate of every network."""
    batch_size: int = checked(256, integer(min=1))
    """Minibatch size of each gradient step."""
    gamma: float = checked(0.99, number(0, 1))
    """Discount factor."""
    net_arch: tuple[int, ...] = checked((256, 256), layer_widths())
    """Hidden layer widths of each network."""


class OfflineBatch(NamedTuple):
    """A minibatch of the dataset as tensors."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    dones: torch.Tensor


class OfflineData:
    """A dataset as tensors in host RAM (``rows``: every transition), sampled uniformly with the agent's
    generator; minibatches go to ``device`` (the agent's)."""

    def __init__(self, rows: OfflineBatch, device: torch.device | None = None) -> None:
        self.rows = rows
        self.device = torch.device("cpu") if device is None else device

    def __len__(self) -> int:
        return len(self.rows.rewards)

    def sample(self, batch_size: int, rng: np.random.Generator) -> OfflineBatch:
        """A uniform minibatch (with replacement)."""
        idx = torch.from_numpy(rng.integers(0, len(self), size=batch_size))
        batch = OfflineBatch(*(column[idx] for column in self.rows))
        if self.device.type == "cpu":
            return batch
        return OfflineBatch(*(to_device(t, self.device) for t in batch))


class SquashedGaussianActor(nn.Module):
    """A Gaussian policy squashed by tanh (SAC's), outputs in [-1, 1]."""

    def __init__(self, obs_dim: int, net_arch: tuple[int, ...], act_dim: int) -> None:
        super().__init__()
        self.net = mlp(obs_dim, net_arch, 2 * act_dim)
        self.act_dim = act_dim

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-std (clamped to [-20, 2]) before squashing."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(-20.0, 2.0)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A squashed action and its log-probability (with tanh's change of variables)."""
        return self.squashed_sample(*self(obs), generator)

    @staticmethod
    def squashed_sample(
        mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample` from the policy's ``(mean, log_std)`` for some states, as :meth:`forward`
        gives them (repeat them to draw several actions per state from one forward pass)."""
        std = log_std.exp()
        noise = torch.randn(mean.shape, generator=generator)
        noise = noise if noise.device == mean.device else noise.to(mean.device)
        pre = mean + std * noise
        action = torch.tanh(pre)
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - pre - nn.functional.softplus(-2 * pre))).sum(-1)
        return action, log_prob

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Log-probability of squashed ``action`` (in [-1, 1]) under the policy."""
        mean, log_std = self(obs)
        a = action.clamp(-0.999999, 0.999999)
        pre = torch.atanh(a)
        z = (pre - mean) / log_std.exp()
        log_prob = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return log_prob - torch.log1p(-a.pow(2) + 1e-6).sum(-1)


class OfflineAgent(Agent):
    """Base of the offline agents: taking a dataset, drawing minibatches, one gradient step per
    ``update()``. Subclasses implement ``_build``, ``_act`` and ``_learn(batch) -> metrics``."""

    offline: ClassVar[bool] = True
    takes_dataset: ClassVar[bool] = True
    """Learns from a dataset, not from env steps (a session then counts gradient steps)."""
    data: OfflineData | None

    def __init__(self, env: Any = None, *, dataset: Dataset | None = None, **kwargs: Any) -> None:
        if env is None and dataset is not None and "observation_space" not in kwargs:
            kwargs["observation_space"] = dataset.observation_space
            kwargs["action_space"] = dataset.action_space
        super().__init__(env, **kwargs)
        if not self.discrete:
            self._require_bounded_actions()
        self.data = None
        if dataset is not None:
            self.load_dataset(dataset)

    def load_dataset(self, dataset: Dataset) -> None:
        """Learn from ``dataset`` from now on (replacing any earlier one). Raises ``ValueError``
        naming the space that does not fit the agent's."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"{self.algorithm}.load_dataset needs a wb.Dataset, got {type(dataset).__name__}")
        dataset.check_fits(self.obs_shape, self.action_space, self.algorithm)
        obs, next_obs = dataset.observations, dataset.next_observations
        if self.config.normalize_observations:
            if self.num_updates == 0 and not self._weights_loaded:
                self.obs_normalizer.update(obs)
            obs, next_obs = self.obs_normalizer(obs), self.obs_normalizer(next_obs)
        actions = dataset.actions if self.discrete else self._unscale_action(dataset.actions)
        rows = OfflineBatch(
            torch.as_tensor(obs, dtype=torch.float32),
            torch.as_tensor(actions),
            torch.as_tensor(dataset.rewards, dtype=torch.float32),
            torch.as_tensor(next_obs, dtype=torch.float32),
            torch.as_tensor(dataset.terminated, dtype=torch.float32),
        )
        self.data = OfflineData(rows, device=self.device)

    def _observe(self, transitions: Transitions) -> None:
        raise TypeError(
            f"{self.algorithm} learns from a dataset, not from env steps: train it with "
            "wb.Session(agent, dataset=ds) (or wb.Session(agent, dataset=ds, eval_env=env, eval_every=...))"
        )

    def ready(self) -> bool:
        return self.data is not None

    def _update(self) -> dict[str, float]:
        """One gradient step on a minibatch of the dataset; advances the step clock by one."""
        if self.data is None:
            raise RuntimeError(
                f"{self.algorithm} has no dataset to learn from: pass dataset= to the agent or the session"
            )
        metrics = self._learn(self.data.sample(self.config.batch_size, self.rng))
        self.num_updates += 1
        self.num_timesteps += 1
        return metrics

    def _learn(self, batch: OfflineBatch) -> dict[str, float]:
        raise NotImplementedError

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """One optimizer step on ``loss``; gradients reach only ``optimizer``'s parameters (autograd
        skips the weight gradients of any other network the loss went through)."""
        gradient_step(optimizer, loss, only_optimized=True)
