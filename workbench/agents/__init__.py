"""The algorithms, one file each, and the registry of agents by name."""

from .a2c import A2C, A2CConfig
from .base import AGENTS, Agent, AgentConfig, EpisodeReturns, Transitions, register
from .ddpg import DDPG, DDPGConfig
from .dqn import DQN, DQNConfig
from .ppo import PPO, PPOConfig
from .sac import SAC, SACConfig
from .td3 import TD3, TD3Config

__all__ = [
    "A2C",
    "A2CConfig",
    "AGENTS",
    "Agent",
    "AgentConfig",
    "DDPG",
    "DDPGConfig",
    "DQN",
    "DQNConfig",
    "EpisodeReturns",
    "PPO",
    "PPOConfig",
    "SAC",
    "SACConfig",
    "TD3",
    "TD3Config",
    "Transitions",
    "register",
]
