"""The algorithms, one file each, and the registry of agents by name."""

from .a2c import A2C, A2CConfig
from .appo import APPO, APPOConfig
from .base import AGENTS, MULTI_AGENTS, Agent, AgentConfig, AgentState, EpisodeReturns, Step, Transitions, register
from .bc import BC, BCConfig
from .bcq import BCQ, BCQConfig
from .c51 import C51, C51Config
from .cql import CQL, CQLConfig
from .crossq import CrossQ, CrossQConfig
from .ddpg import DDPG, DDPGConfig
from .dqn import DQN, DQNConfig
from .droq import DroQ, DroQConfig
from .impala import IMPALA, IMPALAConfig
from .iql import IQL, IQLConfig
from .multiagent import IPPO, MAPPO, IPPOConfig, MAPPOConfig
from .networks import SimBa
from .ppo import PPO, PPOConfig
from .qrdqn import QRDQN, QRDQNConfig
from .rainbow import Rainbow, RainbowConfig
from .recurrent_ppo import RecurrentPPO, RecurrentPPOConfig
from .sac import SAC, SACConfig
from .saving import load
from .td3 import TD3, TD3Config
from .tqc import TQC, TQCConfig

__all__ = [
    "A2C",
    "A2CConfig",
    "AGENTS",
    "APPO",
    "APPOConfig",
    "Agent",
    "AgentConfig",
    "AgentState",
    "BC",
    "BCConfig",
    "BCQ",
    "BCQConfig",
    "C51",
    "C51Config",
    "CQL",
    "CQLConfig",
    "CrossQ",
    "CrossQConfig",
    "DDPG",
    "DDPGConfig",
    "DQN",
    "DQNConfig",
    "DroQ",
    "DroQConfig",
    "EpisodeReturns",
    "IMPALA",
    "IMPALAConfig",
    "IPPO",
    "IPPOConfig",
    "IQL",
    "IQLConfig",
    "MAPPO",
    "MAPPOConfig",
    "MULTI_AGENTS",
    "PPO",
    "PPOConfig",
    "QRDQN",
    "QRDQNConfig",
    "Rainbow",
    "RainbowConfig",
    "RecurrentPPO",
    "RecurrentPPOConfig",
    "SAC",
    "SACConfig",
    "SimBa",
    "Step",
    "TD3",
    "TD3Config",
    "TQC",
    "TQCConfig",
    "Transitions",
    "load",
    "register",
]
