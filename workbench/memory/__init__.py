"""Replay and rollout storage, saveable without pickle."""

from .replay import ReplayBatch, ReplayMemory
from .rollout import RolloutBuffer, compute_gae

__all__ = ["ReplayBatch", "ReplayMemory", "RolloutBuffer", "compute_gae"]
