"""DDPG: deep deterministic policy gradient (Lillicrap et al. 2016), for Box actions.

DDPG is TD3 without its three additions: one critic, no target policy smoothing, and the actor
and targets updated after every critic update. So, as in Stable-Baselines3, it is TD3 with those
settings; the update itself is in ``td3.py``. Defaults are SB3's (net [400, 300]).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import register
from .td3 import TD3, TD3Config

__all__ = ["DDPG", "DDPGConfig"]


@dataclass
class DDPGConfig(TD3Config):
    """DDPG hyperparameters (defaults: Stable-Baselines3); all of TD3's fields, set to plain DDPG."""

    policy_delay: int = 1
    """Critic updates per actor and target update (1: every time)."""
    target_policy_noise: float = 0.0
    """Std of the smoothing noise on target actions (0: none)."""
    n_critics: int = 1
    """Critics whose minimum is the target (1: plain DDPG)."""


@register
class DDPG(TD3):
    """Deep deterministic policy gradient for Box action spaces (bounded).

    Example (the application-as-environment use case)::

        agent = wb.DDPG(env, exploration=wb.TruncatedNormalNoise(stddev=0.1), learning_rate=1e-4)
        wb.Session(agent, env).run(steps=50_000)
    """

    Config = DDPGConfig
    config: DDPGConfig
