"""rl-workbench: reinforcement learning where every training run is a live, controllable object.

Everything public is importable from here::

    import workbench as wb

    agent = wb.PPO("CartPole-v1")
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=100_000)
    session.save("runs/cartpole")
    wb.load("runs/cartpole").play("CartPole-v1", episodes=3)

The notebook parts (``Dashboard``, ``PlayViewer``, ``HumanPlay``, ``compare``), the experiment trackers
(``TensorBoard``, ``MLflow``, ``WandB``, ``Sink``), the sweeps (``sweep``, ``Sweep``, on Optuna),
population-based training (``pbt``, ``Population``), the
client of a served session (``RemoteSession``), the server stack and Ray load only when first used,
so ``import workbench`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__
from .agents import (
    A2C,
    AGENTS,
    BC,
    BCQ,
    C51,
    CQL,
    DDPG,
    DQN,
    IPPO,
    IQL,
    MAPPO,
    PPO,
    QRDQN,
    SAC,
    TD3,
    Agent,
    AgentState,
    EpisodeReturns,
    Rainbow,
    RecurrentPPO,
    Step,
    Transitions,
    load,
)
from .agents.intrinsic import ICM, RND
from .checkpoint import CheckpointError
from .envs.core import EnvMethodError, EnvOutputError, check_env
from .envs.multiagent import with_agent_ids
from .exploration import EpsilonGreedy, GaussianNoise, OrnsteinUhlenbeckNoise, TruncatedNormalNoise
from .memory import HerReplay, PrioritizedReplayMemory, ReplayMemory, RolloutBuffer
from .offline.datasets import Dataset, DatasetError
from .offline.ope import evaluate_offline
from .parallel import WorkerError
from .presets import PRESETS, Preset, preset
from .run.registry import sessions
from .schedules import Schedule, linear
from .session import Session, _warm_views
from .signals import Signal, SignalSet
from .validation import ArgumentError, NonFiniteLossError

# Names served on first use from modules that import heavy optional packages.
# Each: (module, attribute, the extra that installs what it needs).
_LAZY: dict[str, tuple[str, str, str]] = {
    "Dashboard": (".ui", "Dashboard", "notebook"),
    "HumanPlay": (".human", "HumanPlay", "notebook"),
    "MLflow": (".tracking", "MLflow", "mlflow"),
    "PlayViewer": (".ui", "PlayViewer", "notebook"),
    "Population": (".sweeps.pbt", "Population", "notebook"),
    "RemoteSession": (".serve", "RemoteSession", "serve"),
    "Sink": (".tracking", "Sink", "tracking"),
    "Sweep": (".sweeps", "Sweep", "optuna"),
    "TensorBoard": (".tracking", "TensorBoard", "tensorboard"),
    "WandB": (".tracking", "WandB", "wandb"),
    "compare": (".ui", "compare", "notebook"),
    "pbt": (".sweeps.pbt", "pbt", "notebook"),
    "sweep": (".sweeps", "sweep", "optuna"),
}

__all__ = [
    "A2C",
    "AGENTS",
    "Agent",
    "AgentState",
    "ArgumentError",
    "BC",
    "BCQ",
    "C51",
    "CQL",
    "CheckpointError",
    "DDPG",
    "DQN",
    "Dashboard",
    "Dataset",
    "DatasetError",
    "EnvMethodError",
    "EnvOutputError",
    "EpisodeReturns",
    "EpsilonGreedy",
    "GaussianNoise",
    "HerReplay",
    "HumanPlay",
    "ICM",
    "IPPO",
    "IQL",
    "MAPPO",
    "MLflow",
    "NonFiniteLossError",
    "OrnsteinUhlenbeckNoise",
    "PPO",
    "PRESETS",
    "PlayViewer",
    "Population",
    "Preset",
    "PrioritizedReplayMemory",
    "QRDQN",
    "RND",
    "Rainbow",
    "RecurrentPPO",
    "RemoteSession",
    "ReplayMemory",
    "RolloutBuffer",
    "SAC",
    "Schedule",
    "Session",
    "Signal",
    "SignalSet",
    "Sink",
    "Step",
    "Sweep",
    "TD3",
    "TensorBoard",
    "Transitions",
    "TruncatedNormalNoise",
    "WandB",
    "WorkerError",
    "__version__",
    "check_env",
    "compare",
    "evaluate_offline",
    "linear",
    "load",
    "pbt",
    "preset",
    "sessions",
    "sweep",
    "with_agent_ids",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attr, extra = _LAZY[name]
        try:
            module = importlib.import_module(module_name, __name__)
        except ImportError as exc:
            raise ImportError(
                f"workbench.{name} needs optional packages: pip install 'rl-workbench[{extra}]' ({exc})"
            ) from exc
        value = getattr(module, attr)
        globals()[name] = value
        return value
    if name == "testing_envs":  # the old home of workbench.envs.testing: importing it warns
        return importlib.import_module(".testing_envs", __name__)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


# In a Jupyter kernel the dashboard's modules start importing in the background now, beside the first cell's
# agent and session (issue 40: a newcomer's first paint); anywhere else this does nothing.
_warm_views()
