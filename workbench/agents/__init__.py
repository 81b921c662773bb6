"""The algorithms, one file each, and the registry of agents by name."""

from .a2c import A2C, A2CConfig
from .base import AGENTS, Agent, AgentConfig, AgentState, EpisodeReturns, Step, Transitions, register
from .ddpg import DDPG, DDPGConfig
from .dqn import DQN, DQNConfig
from .ppo import PPO, PPOConfig
from .sac import SAC, SACConfig
from .saving import load
from .td3 import TD3, TD3Config

__all__ = [
    "A2C",
    "A2CConfig",
    "AGENTS",
    "Agent",
    "AgentConfig",
    "AgentState",
    "DDPG",
    "DDPGConfig",
    "DQN",
    "DQNConfig",
    "EpisodeReturns",
    "PPO",
    "PPOConfig",
    "SAC",
    "SACConfig",
    "Step",
    "TD3",
    "TD3Config",
    "Transitions",
    "load",
    "register",
]
