"""What a loop sees of its session, and the training thread's body.

:class:`RunContext` composes one session's run machinery: its :class:`~workbench.run.control.RunControl`,
its loop (env, external or offline), the periodic jobs, the saved counters and the runner stepping
its envs. A loop calls its public members (:meth:`RunContext.between_steps`,
:meth:`RunContext.update_once`, :meth:`RunContext.after_step`, :meth:`RunContext.ask_stop_when`),
never the session's private state; :meth:`RunContext.train` is the training thread's target.
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
from .control import RunControl
from .loops import Loop
from .periodic import Periodic
from .persistence import Counters, rng_states
from .registry import ControlError, start_thread
from .videos import VideoJobs

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["SPS_INTERVAL_S", "RunContext", "StepRate", "training_threads"]

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

    def __init__(self, session: Any) -> None:
        self.session = session
        self.restart()

    def restart(self) -> None:
        """Count from now (a loop's start, or the end of a pause)."""
        self.steps, self.time = self.session.steps, time.perf_counter()

    def tick(self, final: bool = False) -> None:
        """Record the rate when an interval has passed (``final``: whatever was counted since the last one)."""
        session, clock = self.session, time.perf_counter()
        due = clock > self.time and session.steps > self.steps if final else clock - self.time >= SPS_INTERVAL_S
        if due:
            rate = (session.steps - self.steps) / (clock - self.time)
            session.signals.record("steps_per_second", session.steps, rate, session.elapsed)
            self.steps, self.time = session.steps, clock


class RunContext:
    """One session's run: ``session`` (the facade, through its public members), ``loop``,
    ``control``, ``periodic``, ``counters``, ``live`` (its live edits), ``tracking`` (the feed of
    its ``sinks``, or None) and the runner stepping its envs (:attr:`runner`, built on demand)."""

    def __init__(self, session: Any, loop: Loop, sinks: Any = None) -> None:
        self.session = session
        self.loop = loop
        # Experiment tracking (workbench.tracking): the sinks validated here, fed from the signals.
        self.tracking = None
        if sinks is not None:
            from ..tracking.feed import SinkFeed  # the trackers load only for a session that has sinks

            self.tracking = SinkFeed(session, sinks)
        self.control = RunControl(session, lambda: self.runner)
        self.periodic = Periodic(session)
        self.videos = VideoJobs(session, self)  # session.videos and the thread writing them
        self.counters = Counters()
        self.live: Any = None  # set by the session (workbench.run.live_edits.LiveControl)
        self.runner: Runner | None = None
        self.fresh = False  # the runner's envs are built but not reset yet (see prepare_runner)
        self.obs: np.ndarray | None = None
        self.episodes: EpisodeTracker | None = None
        self.rate = StepRate(session)

    # -- the runner -------------------------------------------------------------------------------

    def ensure_runner(self) -> Runner:
        """The runner, built when there is none (its envs not reset yet: :meth:`prepare_runner` resets them)."""
        if self.runner is None:
            runner = self.loop.build_runner(self)
            if self.counters.env_rng:
                runner.set_rng_states(self.counters.env_rng)
            self.counters.env_rng = None
            self.runner, self.fresh = runner, True
            if self.live is not None:
                self.live.replay(runner)  # new env copies get this session's call_env calls again
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
            self.session.agent.begin_episode(np.ones(runner.num_envs, dtype=bool))
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
        resumed or saved session continues its generators) and start counting steps per second."""
        counters, session = self.counters, self.session
        counters.start_clock()
        if session.seed is not None and not counters.seeded:
            session.agent.reseed(session.seed)
        counters.seeded = True
        session.agent.prepare_compiled()  # under the run's thread count (after any rebuild), timed as compile time
        self.rate = StepRate(session)

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
        session = self.session
        agent = session.agent
        with self.control.inside("agent.update"):
            metrics = agent.update()
        losses.check(metrics, agent.num_updates, session.steps)
        now = session.elapsed
        for name, value in metrics.items():
            session.signals.record(name, session.steps, value, now)

    def after_step(self) -> bool:
        """What every loop runs after a step and its update: steps_per_second, then the periodic
        jobs that are due. True when an evaluation or an estimate ran."""
        self.rate.tick()
        return self.periodic.after_step(self)

    def ask_stop_when(self) -> bool:
        """The user's ``stop_when(session)``; a control call that cannot work from the training
        thread (``wait()``) is a warning, not the run's failure."""
        session = self.session
        try:
            return bool(session.stop_when(session))
        except ControlError as exc:
            warnings.warn(f"stop_when: {exc}", RuntimeWarning, stacklevel=2)
            return False

    # -- the training thread ----------------------------------------------------------------------

    def start(self, steps: int) -> None:
        """Start a run of ``steps`` more steps in a new training thread (``Session.start``)."""
        session, control = self.session, self.control
        if self.tracking is not None and control.status not in ("running", "paused"):
            self.tracking.run_started()  # opens the sinks here, so their errors reach the caller
        with control.cond:
            control.refuse_if_running()
        control.join_previous()
        with control.cond:
            control.refuse_if_running()  # again: another thread may have started it meanwhile
            previous = (control.status, control.thread, session.target_steps, session.error, session.stop_reason)
            session.error = session.stop_reason = None
            session.target_steps = session.steps + steps
            thread = threading.Thread(
                target=self.train, args=(session.target_steps,), name="workbench-session", daemon=True
            )
            control.begin(thread)
            try:
                # Refuses (and starts nothing) when another live session trains this agent.
                start_thread(session, thread)
            except BaseException:
                control.status, control.thread, session.target_steps, session.error, session.stop_reason = previous
                control.ended.set()  # the new thread never ran; the previous one had ended
                raise
            self.loop.run_started()  # under the lock, so before the run can end

    def train(self, target_steps: int) -> None:
        """The training thread's body: run the loop, then settle the status, the runner and the
        sinks; last, tell waiters that the thread has ended (``RunControl.ended``)."""
        try:
            self._train(target_steps)
        finally:
            self.control.ended.set()

    def _train(self, target_steps: int) -> None:
        session, control = self.session, self.control
        previous_threads = torch.get_num_threads()
        threads = training_threads(session.torch_threads, session.agent)
        try:  # whatever fails here, before the loop too, ends the run as failed
            if threads:
                torch.set_num_threads(threads)
            final = self.loop.run(self, target_steps)
            if session.stop_reason is None:
                session.stop_reason = "stop" if final == "stopped" else "budget"
        except BaseException as exc:
            if not control.abandoned:  # a given-up run keeps the StuckError that explains it
                session.error = exc
            final = "failed"
            self.close_runner(force=True)
        finally:
            control.where = None
            if threads:
                torch.set_num_threads(previous_threads)
        with control.cond:
            if control.abandoned:
                # The stuck step returned after the run was given up: it stays failed, and the envs
                # it was stuck in are not reused.
                final = "failed"
                self.close_runner(force=True)
            control.pause_requested = False
            control.status = final
            self.loop.run_ended()
            self.live.serve()  # edits and calls that arrived as the run ended: carried out now
            control.cond.notify_all()
        if self.tracking is not None:
            self.videos.videos.wait(_VIDEO_WAIT_S)  # the last evaluation's video reaches the sinks too
            self.tracking.run_ended(final, session.stop_reason, session.error)
