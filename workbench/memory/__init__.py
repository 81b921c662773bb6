"""Replay and rollout storage, saveable without pickle."""

from .her import HerMemory, HerReplay
from .nstep import NStepAccumulator
from .prioritized import PrioritizedReplayMemory, SumTree
from .replay import ReplayBatch, ReplayMemory
from .rollout import RolloutBuffer, compute_gae

__all__ = [
    "HerMemory",
    "HerReplay",
    "NStepAccumulator",
    "PrioritizedReplayMemory",
    "ReplayBatch",
    "ReplayMemory",
    "RolloutBuffer",
    "SumTree",
    "compute_gae",
]
