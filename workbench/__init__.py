"""rl-workbench: reinforcement learning where every training run is a live, controllable object.

Everything public is importable from here::

    import workbench as wb

    agent = wb.PPO("CartPole-v1")
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=100_000)
    session.save("runs/cartpole")
    wb.load("runs/cartpole").play("CartPole-v1", episodes=3)

Every name loads on first use (module ``__getattr__``, as attrs and httpx do), so ``import workbench`` costs
about nothing: ``workbench --help`` and a worker process, which imports only ``workbench.envs``, never
import torch. The notebook parts (``Dashboard``, ``PlayViewer``, ``HumanPlay``, ``compare``), the
experiment trackers (``TensorBoard``, ``MLflow``, ``WandB``, ``Sink``), the sweeps (``sweep``, ``Sweep``,
on Optuna), population-based training (``pbt``, ``Population``), the client of a served session
(``RemoteSession``), the server stack and Ray load their optional packages only then; a missing one is
named with the extra that installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # what a type checker and an editor see; at run time __getattr__ below imports these
    from .agents import (
        A2C,
        AGENTS,
        APPO,
        BC,
        BCQ,
        C51,
        CQL,
        DDPG,
        DQN,
        IMPALA,
        IPPO,
        IQL,
        MAPPO,
        PPO,
        QRDQN,
        SAC,
        TD3,
        TQC,
        Agent,
        AgentState,
        CrossQ,
        DroQ,
        EpisodeReturns,
        Rainbow,
        RecurrentPPO,
        SimBa,
        Step,
        Transitions,
        load,
    )
    from .agents.intrinsic import ICM, RND
    from .checkpoint import CheckpointError
    from .envs.core import EnvMethodError, EnvOutputError, check_env
    from .envs.multiagent import with_agent_ids
    from .exploration import EpsilonGreedy, GaussianNoise, OrnsteinUhlenbeckNoise, TruncatedNormalNoise
    from .human import HumanPlay
    from .memory import HerReplay, PrioritizedReplayMemory, ReplayMemory, RolloutBuffer
    from .offline.datasets import Dataset, DatasetError
    from .offline.ope import evaluate_offline
    from .parallel import WorkerError
    from .presets import PRESETS, Preset, preset
    from .run.registry import sessions
    from .schedules import Schedule, linear
    from .selfplay import League, SelfPlay
    from .serve import RemoteSession
    from .session import Session
    from .signals import Signal, SignalSet
    from .sweeps.pbt import Population, pbt
    from .sweeps.sweep import Sweep, sweep
    from .tracking import MLflow, Sink, TensorBoard, WandB
    from .ui import Dashboard, PlayViewer, compare
    from .validation import ArgumentError, NonFiniteLossError

# Each public name and the module it is imported from on first use.
_NAMES: dict[str, str] = {
    "A2C": ".agents",
    "AGENTS": ".agents",
    "APPO": ".agents",
    "Agent": ".agents",
    "AgentState": ".agents",
    "ArgumentError": ".validation",
    "BC": ".agents",
    "BCQ": ".agents",
    "C51": ".agents",
    "CQL": ".agents",
    "CheckpointError": ".checkpoint",
    "CrossQ": ".agents",
    "DDPG": ".agents",
    "DQN": ".agents",
    "Dataset": ".offline.datasets",
    "DatasetError": ".offline.datasets",
    "DroQ": ".agents",
    "EnvMethodError": ".envs.core",
    "EnvOutputError": ".envs.core",
    "EpisodeReturns": ".agents",
    "EpsilonGreedy": ".exploration",
    "GaussianNoise": ".exploration",
    "HerReplay": ".memory",
    "ICM": ".agents.intrinsic",
    "IMPALA": ".agents",
    "IPPO": ".agents",
    "IQL": ".agents",
    "League": ".selfplay",
    "MAPPO": ".agents",
    "NonFiniteLossError": ".validation",
    "OrnsteinUhlenbeckNoise": ".exploration",
    "PPO": ".agents",
    "PRESETS": ".presets",
    "Preset": ".presets",
    "PrioritizedReplayMemory": ".memory",
    "QRDQN": ".agents",
    "RND": ".agents.intrinsic",
    "Rainbow": ".agents",
    "RecurrentPPO": ".agents",
    "ReplayMemory": ".memory",
    "RolloutBuffer": ".memory",
    "SAC": ".agents",
    "Schedule": ".schedules",
    "SelfPlay": ".selfplay",
    "Session": ".session",
    "SimBa": ".agents",
    "Signal": ".signals",
    "SignalSet": ".signals",
    "Step": ".agents",
    "TD3": ".agents",
    "TQC": ".agents",
    "Transitions": ".agents",
    "TruncatedNormalNoise": ".exploration",
    "WorkerError": ".parallel",
    "check_env": ".envs.core",
    "evaluate_offline": ".offline.ope",
    "linear": ".schedules",
    "load": ".agents",
    "preset": ".presets",
    "sessions": ".run.registry",
    "with_agent_ids": ".envs.multiagent",
}

# Names whose modules import optional packages: (module, the extra that installs what it needs).
_EXTRAS: dict[str, tuple[str, str]] = {
    "Dashboard": (".ui", "notebook"),
    "HumanPlay": (".human", "notebook"),
    "MLflow": (".tracking", "mlflow"),
    "PlayViewer": (".ui", "notebook"),
    "Population": (".sweeps.pbt", "notebook"),
    "RemoteSession": (".serve", "serve"),
    "Sink": (".tracking", "tracking"),
    "Sweep": (".sweeps.sweep", "optuna"),
    "TensorBoard": (".tracking", "tensorboard"),
    "WandB": (".tracking", "wandb"),
    "compare": (".ui", "notebook"),
    "pbt": (".sweeps.pbt", "notebook"),
    "sweep": (".sweeps.sweep", "optuna"),
}

__all__ = [
    "A2C",
    "AGENTS",
    "APPO",
    "Agent",
    "AgentState",
    "ArgumentError",
    "BC",
    "BCQ",
    "C51",
    "CQL",
    "CheckpointError",
    "CrossQ",
    "DDPG",
    "DQN",
    "Dashboard",
    "Dataset",
    "DatasetError",
    "DroQ",
    "EnvMethodError",
    "EnvOutputError",
    "EpisodeReturns",
    "EpsilonGreedy",
    "GaussianNoise",
    "HerReplay",
    "HumanPlay",
    "ICM",
    "IMPALA",
    "IPPO",
    "IQL",
    "League",
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
    "SelfPlay",
    "Session",
    "Signal",
    "SignalSet",
    "SimBa",
    "Sink",
    "Step",
    "Sweep",
    "TD3",
    "TQC",
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
    """Import a public name's module on first use and keep the name here, so the next use costs nothing."""
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name], __name__), name)
    elif name in _EXTRAS:
        module_name, extra = _EXTRAS[name]
        try:
            module = importlib.import_module(module_name, __name__)
        except ImportError as exc:
            raise ImportError(
                f"workbench.{name} needs optional packages: pip install 'rl-workbench[{extra}]' ({exc})"
            ) from exc
        value = getattr(module, name)
    elif name == "testing_envs" or (
        not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None
    ):
        # A subpackage or module read as an attribute (``wb.envs``), as when the eager imports made them
        # attributes; ``testing_envs``, the old home of workbench.envs.testing, warns when imported.
        return importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# In a Jupyter kernel the session and the dashboard's modules start importing now, the dashboard's in the
# background beside the first cell's agent and session (issue 40: a newcomer's first paint); anywhere else
# (scripts, the command line, worker processes) nothing more is imported.
if "ipykernel" in sys.modules:
    from .session import _warm_views

    _warm_views()
