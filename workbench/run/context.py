"""What a loop sees of its run, and the training thread's body.

:class:`RunContext` composes one training run's machinery: its state
(:class:`~workbench.run.state.RunState`), its lifecycle (:class:`~workbench.run.control.RunControl`),
its loop (env, external or offline), the periodic jobs, the live edits, the sinks' feed and the
runner stepping its envs. A loop calls its public members (:meth:`RunContext.between_steps`,
:meth:`RunContext.update_once`, :meth:`RunContext.after_step`, :meth:`RunContext.ask_stop_when`);
:meth:`RunContext.train` is the body of the training thread that the lifecycle runs.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..loop import EpisodeTracker
from ..parallel import Runner
from ..validation import LossWatch
from .control import ACTIVE, RunControl
from .live_edits import LiveControl
from .loops import Loop
from .periodic import Periodic
from .persistence import rng_states
from .registry import ControlError, start_thread
from .state import RunState
from .videos import VideoJobs

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["SPS_INTERVAL_S", "RunContext", "StepRate", "run_facts", "training_threads"]

_VIDEO_WAIT_S = 30.0  # at a run's end, how long the sinks wait for videos still being written

SPS_INTERVAL_S = 1.0
"""How often ``steps_per_second`` is recorded."""


def training_threads(setting: Any, agent: Agent) -> Any:
    """The torch thread count a run trains under for a session's ``torch_threads``: ``"auto"`` is 1 for an
    agent of small MLPs (a second thread only contends with the envs and the dashboard for them) and
    None, torch's own count, for one with a CNN encoder (``agent.convolutional``), whose updates use the
    cores; any other setting as it is (None: torch's count; a bad value fails in ``torch.set_num_threads``)."""
    if isinstance(setting, str) and setting == "auto":
        return None if agent.convolutional else 1
    return setting


class StepRate:
    """The ``steps_per_second`` signal of a running loop: recorded every :data:`SPS_INTERVAL_S` seconds."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.restart()

    def restart(self) -> None:
        """Count from now (a loop's start, or the end of a pause)."""
        self.steps, self.time = self.state.steps, time.perf_counter()

    def tick(self, final: bool = False) -> None:
        """Record the rate when an interval has passed (``final``: whatever was counted since the last one)."""
        state, clock = self.state, time.perf_counter()
        due = clock > self.time and state.steps > self.steps if final else clock - self.time >= SPS_INTERVAL_S
        if due:
            rate = (state.steps - self.steps) / (clock - self.time)
            state.signals.record("steps_per_second", state.steps, rate, state.elapsed)
            self.steps, self.time = state.steps, clock


class RunContext:
    """One run's machinery: its ``state`` (:class:`~workbench.run.state.RunState`), ``loop``,
    ``control`` (the lifecycle), ``periodic``, ``live`` (its live edits), ``tracking`` (the feed of
    its sinks, or None), ``videos`` and the runner stepping its envs (:attr:`runner`, built on
    demand). ``owner`` is the object the user knows (what ``stop_when`` is called with and what
    the registry lists); nothing here reads it."""

    def __init__(self, owner: object, state: RunState, loop: Loop, sinks: Any = None) -> None:
        self.owner = owner
        self.state = state
        self.loop = loop
        # Experiment tracking (workbench.tracking): the sinks validated here, fed from the signals.
        self.tracking: Any = None
        if sinks is not None:
            from ..tracking.feed import SinkFeed  # the trackers load only for a run that has sinks

            self.tracking = SinkFeed(state.signals, sinks, facts=lambda: run_facts(state), steps=lambda: state.steps)
            state.sinks = self.tracking.sinks
        self.control = RunControl("session", lambda: self.runner)
        self.control.on_end = self._settle
        self.control.after_end = self._report_end
        self.periodic = Periodic(self)
        self.videos = VideoJobs(self)  # the run's videos and the thread writing them
        self.counters = state.counters
        self.live = LiveControl(self)
        self.runner: Runner | None = None
        self.fresh = False  # the runner's envs are built but not reset yet (see prepare_runner)
        self.obs: np.ndarray | None = None
        self.episodes: EpisodeTracker | None = None
        self.rate = StepRate(state)

    # -- the runner -------------------------------------------------------------------------------

    def ensure_runner(self) -> Runner:
        """The runner, built when there is none (its envs not reset yet: :meth:`prepare_runner` resets them)."""
        if self.runner is None:
            runner = self.loop.build_runner(self)
            if self.counters.env_rng:
                runner.set_rng_states(self.counters.env_rng)
            self.counters.env_rng = None
            self.runner, self.fresh = runner, True
            self.live.replay(runner)  # new env copies get this run's call_env calls again
        return self.runner

    def prepare_runner(self) -> tuple[Runner, np.ndarray, EpisodeTracker]:
        """The runner with its envs reset (once per runner), the observations to decide on and the episodes' tracker."""
        runner = self.ensure_runner()
        if self.fresh:
            self.fresh = False
            self.obs = runner.reset()
            self.episodes = EpisodeTracker(runner.num_envs)
            # Every env starts a new episode here (a resumed run too): an agent with per-episode
            # state (RecurrentPPO's LSTM state, an OU noise process) starts it afresh.
            if runner.starts_episodes:
                self.state.agent.begin_episode(np.ones(runner.num_envs, dtype=bool))
        assert self.obs is not None and self.episodes is not None
        return runner, self.obs, self.episodes

    def close_runner(self, force: bool = False) -> None:
        """Close the runner unless it persists between runs (``force``: close it anyway, a failed run)."""
        runner = self.runner
        if runner is not None and (force or not runner.persistent):
            if not force:
                # The envs' random streams outlive the runner: a save after the run continues them.
                self.counters.env_rng = rng_states(runner)
            self.runner = None
            runner.close()

    # -- what every loop calls --------------------------------------------------------------------

    def begin(self) -> None:
        """What every loop does first: start the run's clock (once), seed the agent (once: a
        resumed or saved run continues its generators) and start counting steps per second."""
        counters, state = self.counters, self.state
        counters.start_clock()
        if state.seed is not None and not counters.seeded:
            state.agent.reseed(state.seed)
        counters.seeded = True
        state.agent.prepare_compiled()  # under the run's thread count (after any rebuild), timed as compile time
        self.rate = StepRate(state)

    def between_steps(self) -> bool:
        """What every loop runs between two steps: the live edits and env calls queued meanwhile
        (``set``, ``call_env``), then a pause request (returns once resumed), then a stop
        request. True when the loop must stop."""
        live, control = self.live, self.control
        if live.pending:
            live.serve()
        if control.pause_requested:
            control.wait_while_paused(lambda: bool(live.pending), live.serve)
            self.rate.restart()  # the time paused is not counted in steps_per_second
        return control.stop_requested

    def update_once(self, losses: LossWatch) -> None:
        """One ``agent.update()``, its metrics checked (a NaN loss fails the run) and recorded as signals."""
        state = self.state
        agent = state.agent
        with self.control.inside("agent.update"):
            metrics = agent.update()
        losses.check(metrics, agent.num_updates, state.steps)
        if state.selfplay is not None:  # the league's snapshot rule, ratings and reference games
            metrics = {**metrics, **state.selfplay.after_update(agent)}
        now = state.elapsed
        for name, value in metrics.items():
            state.signals.record(name, state.steps, value, now)

    def after_step(self) -> bool:
        """What every loop runs after a step and its update: steps_per_second, then the periodic
        jobs that are due. True when an evaluation or an estimate ran."""
        self.rate.tick()
        return self.periodic.after_step(self)

    def ask_stop_when(self) -> bool:
        """The user's ``stop_when(owner)``; a control call that cannot work from the training
        thread (``wait()``) is a warning, not the run's failure. True ends the run (``stop_reason``
        ``"stop_when"``)."""
        stop_when = self.state.stop_when
        if stop_when is None:
            return False
        try:
            stop = bool(stop_when(self.owner))
        except ControlError as exc:
            warnings.warn(f"stop_when: {exc}", RuntimeWarning, stacklevel=2)
            return False
        if stop:
            self.control.stop_reason = "stop_when"
        return stop

    # -- the training thread ----------------------------------------------------------------------

    def start(self, steps: int) -> None:
        """Start a run of ``steps`` more steps in a new training thread (the facade's ``start``)."""
        state, control = self.state, self.control
        if self.tracking is not None and control.status not in ACTIVE:
            self.tracking.run_started()  # opens the sinks here, so their errors reach the caller
        target = state.steps + steps

        def launch(thread: threading.Thread) -> None:
            previous, state.target_steps = state.target_steps, target
            try:
                # Refuses (and starts nothing) when another live session trains this agent.
                start_thread(self.owner, thread, agent=state.agent)
            except BaseException:
                state.target_steps = previous
                raise

        control.start(
            lambda: self.train(target), name="workbench-session", launch=launch, started=self.loop.run_started
        )

    def train(self, target_steps: int) -> str:
        """The training thread's body: run the loop under the run's torch thread count; the final
        status (the lifecycle settles it: :meth:`_settle`, :meth:`_report_end`)."""
        state, control = self.state, self.control
        previous_threads = torch.get_num_threads()
        threads = training_threads(state.torch_threads, state.agent)
        try:  # whatever fails here, before the loop too, ends the run as failed
            if threads:
                torch.set_num_threads(threads)
            final = self.loop.run(self, target_steps)
        except BaseException:
            self.close_runner(force=True)
            raise
        finally:
            control.where = None
            if threads:
                torch.set_num_threads(previous_threads)
        if control.stop_reason is None:
            control.stop_reason = "stop" if final == "stopped" else "budget"
        return final

    def _settle(self, final: str) -> None:
        """Under the control lock as the run ends: a given-up run's envs are not reused; the loop
        hears of the end; edits and calls that arrived as the run ended are carried out now."""
        if self.control.abandoned:
            self.close_runner(force=True)  # the step it was stuck in returned after the run was given up
        self.loop.run_ended()
        self.live.serve()

    def _report_end(self, final: str) -> None:
        """After the status is set: the sinks hear how the run ended (the last video reaches them too)."""
        if self.tracking is not None:
            self.videos.videos.wait(_VIDEO_WAIT_S)
            self.tracking.run_ended(final, self.control.stop_reason, self.control.error)


def run_facts(state: RunState) -> dict[str, Any]:
    """What a tracker records of a run when it starts: algorithm, env, seed, hyperparameters."""
    agent = state.agent
    return {
        "algorithm": agent.algorithm,
        "env": state.env_source.name,
        "seed": state.seed,
        "hyperparameters": agent.hyperparameters(),
    }
