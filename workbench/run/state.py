"""The run's state as one typed object: what it trains, how, and where it stands.

:class:`RunState` is what the run's machinery (loops, periodic jobs, live edits, persistence,
videos) reads and writes of a run: the agent and its envs, the settings the run was built with,
its signals, and its counters (episodes, the best evaluation, the step target, the live edits made,
the clock). The facade exposes it (``session.run_state``) and reads its public attributes from it;
the lifecycle (status, error, stop reason) lives on :class:`~workbench.run.control.RunControl`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..agents.base import Agent
    from ..envs.core import EnvSource
    from ..offline.recording import Recorder
    from ..selfplay import SelfPlay
    from ..signals import SignalSet
    from ..video import VideoSettings
    from .live_edits import Event

__all__ = ["Counters", "RunState"]


class Counters:
    """The run's clock and what a resumed run continues: ``time_offset`` (seconds of earlier
    runs), whether the agent's generators are seeded already, whether the run was reopened
    from disk, and the envs' saved random streams for the next runner's first reset."""

    def __init__(self) -> None:
        self.time_offset = 0.0
        self.clock_start: float | None = None
        self.seeded = False
        self.resumed_from_disk = False
        self.env_rng: list[Any] | None = None

    @property
    def elapsed(self) -> float:
        """Seconds since the run first started (continues across resumes from disk)."""
        if self.clock_start is None:
            return self.time_offset
        return self.time_offset + time.perf_counter() - self.clock_start

    def start_clock(self) -> None:
        """Start the clock, the first time only."""
        if self.clock_start is None:
            self.clock_start = time.perf_counter()


@dataclasses.dataclass(eq=False)
class RunState:
    """One run's state. The settings are the facade's arguments (see ``wb.Session``), checked there;
    the rest changes as the run goes."""

    agent: Agent
    env_source: EnvSource
    signals: SignalSet
    eval_source: EnvSource | None = None
    """The env evaluations play on: ``eval_env``, a copy of the run's env, or None (see ``evaluate``)."""
    seed: int | None = None
    stop_when: Callable[[Any], bool] | None = None
    """``fn(facade) -> bool``: the user's test, called with the object the user knows."""
    eval_every: int | None = None
    eval_episodes: int = 5
    keep_best: bool = False
    checkpoint_every: int | None = None
    checkpoint_dir: str | None = None
    video_every: int | None = None
    video_options: VideoSettings | None = None
    num_workers: int = 1
    backend: str = "auto"
    backend_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    torch_threads: int | str | None = "auto"
    ope_every: int | None = None
    ope_dataset: Any = None
    dataset: Any = None
    """The :class:`~workbench.Dataset` learned from or started with (a saved run names its path)."""
    recorder: Recorder | None = None
    selfplay: SelfPlay | None = None
    """A self-play run's :class:`~workbench.SelfPlay` env: its league snapshots after updates, saves with the run."""
    sinks: list[Any] = dataclasses.field(default_factory=list)
    episodes: int = 0
    """Episodes ended so far."""
    best_eval_reward: float | None = None
    target_steps: int | None = None
    """The step count the current (or last) run trains to."""
    events: list[Event] = dataclasses.field(default_factory=list)
    """What was changed while the run lived (``set`` and ``call_env``), oldest first."""
    counters: Counters = dataclasses.field(default_factory=Counters)

    @property
    def steps(self) -> int:
        """Env steps trained so far, over all envs: the agent's clock."""
        return self.agent.num_timesteps

    @property
    def elapsed(self) -> float:
        """Seconds since the run first started (continues across resumes from disk)."""
        return self.counters.elapsed
