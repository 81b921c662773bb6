"""Envs: making them from an id, an instance or a factory, checking what they return, Atari and
MinAtar preprocessing, action masks, and the small test tasks (:mod:`workbench.envs.testing`).

The bottom layer: it imports nothing else of the package, so a worker process can load
:mod:`workbench.envs.core` without importing torch (``workbench/parallel/_worker.py``; ``import workbench``
loads its names on first use).

Importing it registers ``MoveOrShoot-v0`` (:mod:`workbench.envs.hybrid`, a hybrid discrete-continuous action task)
and the partially observed test tasks ``CartPoleNoVel-v1`` and ``PendulumNoVel-v1`` with
gymnasium (by name: :mod:`workbench.envs.testing` loads when one is made), so every agent, session and worker
process, which all import this package, can make them by id.
"""

import gymnasium as _gym

from .actions import env_action_converter
from .core import (
    EnvMethodError,
    EnvOutputError,
    EnvSource,
    MinAtarFrames,
    VecEnv,
    as_env_source,
    call_env_method,
    check_env,
    checked_reset,
    checked_step,
    describe_space,
    flat_observation_space,
    is_atari_id,
    is_image_space,
    is_minatar_id,
    is_vector_env,
    make_env,
)
from .vector import (
    VectorEnvAdapter,
    autoreset_mode,
    check_vector_session,
    make_envpool,
)

__all__ = [
    "EnvMethodError",
    "EnvOutputError",
    "EnvSource",
    "MinAtarFrames",
    "VecEnv",
    "VectorEnvAdapter",
    "as_env_source",
    "autoreset_mode",
    "call_env_method",
    "check_env",
    "check_vector_session",
    "checked_reset",
    "checked_step",
    "describe_space",
    "env_action_converter",
    "flat_observation_space",
    "is_atari_id",
    "is_image_space",
    "is_minatar_id",
    "is_vector_env",
    "make_env",
    "make_envpool",
]

for _id, _entry in (("CartPoleNoVel-v1", "cartpole_no_velocity"), ("PendulumNoVel-v1", "pendulum_no_velocity")):
    if _id not in _gym.registry:
        # The inner env already has its time limit; no checker on top of the inner env's one.
        _gym.register(_id, entry_point=f"workbench.envs.testing:{_entry}", disable_env_checker=True)
del _id, _entry
if "MoveOrShoot-v0" not in _gym.registry:  # the hybrid action task (workbench.envs.hybrid)
    _gym.register("MoveOrShoot-v0", entry_point="workbench.envs.hybrid:MoveOrShootEnv")
