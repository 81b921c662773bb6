"""The algorithms, one file each, and the registry of agents by name."""

from .base import AGENTS, Agent, EpisodeReturns, Transitions, register
from .dqn import DQN, DQNConfig
from .ppo import PPO, PPOConfig

__all__ = [
    "AGENTS",
    "DQN",
    "PPO",
    "Agent",
    "DQNConfig",
    "EpisodeReturns",
    "PPOConfig",
    "Transitions",
    "register",
]
