"""Running mean / standard deviation, for ``normalize_observations=True`` and ``normalize_rewards=True``.

The statistics live in :class:`torch.nn.Module` buffers, so an agent that holds them saves and loads
them with its networks (``weights.safetensors``) and nothing extra is needed in the file format.
They are updated only while the agent trains: a loaded agent in play mode uses them frozen.
They follow the agent's device like its networks; the arithmetic stays in numpy on the host, where
the observations arrive (on a GPU the buffers are read back and written to once a call).

Rewards are scaled as Stable-Baselines3's ``VecNormalize`` does: divided by the running standard
deviation of the discounted return (not of the reward), never shifted, so the sign of every reward
is kept.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["ObservationNormalizer", "RewardNormalizer", "RunningMeanStd"]


class RunningMeanStd(nn.Module):
    """Mean and variance of a stream of batches, merged with Chan et al.'s parallel algorithm.

    Kept in float64 so a long run does not drift; ``count`` starts at a tiny value (as in SB3)
    so the first batch is taken almost at face value without dividing by zero.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    # numpy views of the buffers' memory, so updates and lookups stay in numpy (no torch op per
    # step); made afresh on each use, so they stay right after loading, copying or unpickling.
    # On another device (the agent's GPU) they are host copies, and update() writes the buffers back.
    @property
    def _mean(self) -> np.ndarray:
        return self.mean.numpy() if self.mean.device.type == "cpu" else self.mean.cpu().numpy()

    @property
    def _var(self) -> np.ndarray:
        return self.var.numpy() if self.var.device.type == "cpu" else self.var.cpu().numpy()

    @property
    def _count(self) -> np.ndarray:
        return self.count.numpy() if self.count.device.type == "cpu" else self.count.cpu().numpy()

    def update(self, batch: np.ndarray) -> None:
        """Merge a batch (leading axis = samples) into the statistics."""
        batch = np.asarray(batch, dtype=np.float64)
        n = batch.shape[0]
        if n == 0:
            return
        b_mean = batch.mean(axis=0)
        b_var = batch.var(axis=0)
        count = float(self._count)
        total = count + n
        mean, var = self._mean, self._var
        delta = b_mean - mean
        new_mean = mean + delta * n / total
        m2 = var * count + b_var * n + delta**2 * count * n / total
        if self.mean.device.type == "cpu":
            self._mean[...] = new_mean
            self._var[...] = m2 / total
            self._count[...] = total
        else:
            self.mean.copy_(torch.from_numpy(np.asarray(new_mean, dtype=np.float64)))
            self.var.copy_(torch.from_numpy(np.asarray(m2 / total, dtype=np.float64)))
            self.count.fill_(total)

    def std(self, epsilon: float = 1e-8) -> np.ndarray:
        """The running standard deviation."""
        return np.sqrt(self._var + epsilon)


class ObservationNormalizer(nn.Module):
    """``clip((obs - mean) / std, -clip, clip)`` with running statistics of the observations seen."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.rms = RunningMeanStd(shape)
        self.clip = clip
        self.epsilon = epsilon

    def update(self, obs: np.ndarray) -> None:
        """Merge a batch of raw observations into the statistics."""
        self.rms.update(obs)

    def __call__(self, obs: np.ndarray) -> np.ndarray:  # type: ignore[override]
        """Normalized float32 copy of a batch of raw observations."""
        out = (obs - self.rms._mean) / self.rms.std(self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)


class RewardNormalizer(nn.Module):
    """Scales rewards by the running std of each env's discounted return (SB3 ``VecNormalize``)."""

    def __init__(self, gamma: float, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.rms = RunningMeanStd(())
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        self._returns: np.ndarray | None = None

    def __call__(self, rewards: np.ndarray, done: np.ndarray, update: bool = True) -> np.ndarray:  # type: ignore[override]
        """Scaled float32 rewards; with ``update`` the return statistics learn from this step first."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if update:
            if self._returns is None or self._returns.shape != rewards.shape:
                self._returns = np.zeros_like(rewards)
            self._returns = self._returns * self.gamma + rewards
            self.rms.update(self._returns)
            self._returns[np.asarray(done, dtype=bool)] = 0.0
        out = rewards / self.rms.std(self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)
