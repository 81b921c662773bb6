"""The run: a live, controllable training session.

A :class:`Session` owns the training loop thread, its control events (pause, resume, stop), the
user's ``stop_when`` rule, periodic evaluation, checkpoints and the run's signals. The loop is
written once and drives every agent through ``act``/``observe``/``ready``/``update``.

The training thread never prints and never touches a widget: observers (the dashboard, a CLI
progress bar) read ``status``, ``steps`` and ``signals`` from their own threads.

A session also owns its part of a saved run: it writes its counters beside the agent's state and
rebuilds itself from them (``save`` and ``Session.resume``); ``checkpoint.py`` is only the format.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import torch

from . import checkpoint, control, offline_loop
from .agents.base import Agent
from .agents.saving import agent_from_run, open_saved
from .atari import GAME_END_KEY
from .envs import EnvSource, as_env_source, check_vector_session, describe_space
from .live_edits import Event, LiveControl
from .loop import EpisodeTracker
from .parallel import check_runner_options, make_runner
from .recording import Recorder
from .signals import DEFAULT_MAX_POINTS, SignalSet
from .validation import (
    ArgumentError,
    LossWatch,
    check_arguments,
    check_env_batch,
    check_value,
    flag,
    function_of,
    integer,
    optional,
    path_like,
)

__all__ = ["STATUSES", "Session"]

STATUSES = ("idle", "running", "paused", "stopped", "finished", "failed")
"""Every value ``Session.status`` can take."""

_SPS_INTERVAL_S = 1.0  # how often steps_per_second is recorded
_CONTROL_TIMEOUT_S = 60.0  # longest a control call waits for the loop to acknowledge
_FEEDBACK_WAIT_S = 0.05  # an external session's loop checks pause/stop this often while it waits

# What each argument of Session may be (workbench.validation); num_workers, backend and the backend
# options are checked by the parallel package, as make_runner takes them.
_ARGUMENT_CHECKS = {
    "seed": optional(integer(min=0)),
    "stop_when": optional(function_of(1, "the session")),
    "eval_every": optional(integer(min=1)),
    "eval_episodes": integer(min=1),
    "checkpoint_every": optional(integer(min=1)),
    "checkpoint_dir": optional(path_like()),
    "keep_best": flag(),
    "torch_threads": optional(integer(min=1)),
    "max_signal_points": integer(min=2),
    "record": optional(path_like()),
    "ope_every": optional(integer(min=1)),
}
_STEPS = integer(min=1)


class _ResumeMethod:
    """``session.resume()`` continues a paused run; ``Session.resume(path, env)`` reopens a saved one.

    Both names are in the public contract, so one descriptor dispatches on how it is reached.
    """

    def __get__(self, obj: Session | None, owner: type[Session]) -> Callable[..., Any]:
        if obj is None:
            return owner._resume_saved
        return obj._resume_paused


class Session:
    """A training run you can start, pause, resume, stop, inspect and save while it trains.

    Example::

        agent = wb.PPO(env)
        session = wb.Session(agent, env, seed=0,
                             stop_when=lambda s: s.signals["episode_reward"].mean(last=10) > 475)
        session.start(steps=100_000)   # returns at once; trains in a background thread
        session.pause(); session.resume(); session.stop()
        session.wait()                 # re-raises the training error, if any

    Parameters:
        agent: the agent to train.
        env: an env instance, registered id or zero-argument factory; defaults to the env the
            agent was built from. An instance is used as it is (one env); an id or a factory
            gives ``agent``'s preferred number of env copies (``n_envs``).
        seed: seeds the envs (``seed + i`` for env ``i``) and the agent's generators.
        stop_when: ``fn(session) -> bool``, checked after every episode; True ends the run.
        eval_every: run an evaluation every this many env steps (None: never).
        eval_episodes: episodes per evaluation, deterministic policy; writes ``eval_reward``.
        eval_env: the env to evaluate on; needed when ``env`` is an instance (it cannot be copied).
        checkpoint_every: save a checkpoint to ``checkpoint_dir`` every this many env steps.
        checkpoint_dir: where periodic checkpoints go (``latest/`` and, with ``keep_best``, ``best/``);
            default ``runs/<algorithm>-<date>-<time>``.
        keep_best: also keep the checkpoint with the best ``eval_reward``.
        num_workers, backend: where env steps run (see ``workbench.parallel`` and docs/parallel.md):
            ``"auto"``, ``"inprocess"``, ``"local"`` (worker processes) or ``"ray"``.
        backend_options: ``envs_per_worker``, ``restart_workers`` (start a dead worker again instead
            of failing), ``step_timeout`` (seconds: kill a worker whose env's step hangs), and for
            Ray ``ray_address``, ``sync_every``, ``cpus_per_worker``, ``ray_init``, ``ray_acting``
            (``"workers"``: each actor acts with an agent replica; ``"learner"``: actors only step
            envs, the learner acts for all of them, actors start without torch).
        torch_threads: torch intra-op threads while training (1 is fastest for small networks).
        sinks: experiment trackers fed from the signals, off the training loop, e.g.
            ``[wb.TensorBoard("runs/tb"), wb.MLflow(), wb.WandB(offline=True)]`` (docs/tracking.md).
        dataset: a :class:`~workbench.Dataset`: an offline agent (BC, BCQ, CQL, IQL) learns from it
            with no env (``steps`` then counts gradient steps; ``eval_env`` evaluates on an env); a
            replay agent (DQN, SAC...) starts with it in its memory, then trains on ``env``.
        record: a directory to record the run's transitions to, as a dataset (``workbench.recording``).
        ope_every: an offline agent's off-policy estimates (``ope_dr``...) every this many steps,
            on ``ope_dataset`` or else on 10% of ``dataset``'s episodes held out (docs/offline.md).
    """

    resume = _ResumeMethod()

    # Control state kept beside __init__'s (class defaults; set on the instance when they change).
    _abandoned = False  # a control call gave the run up: its thread is stuck (see _timed_out)
    _where: tuple[str, float] | None = None  # what the loop thread is inside, and since when
    _env_rng: list[Any] | None = None  # saved env random streams, for the next runner's first reset
    _resumed_from_disk = False
    _external: Any = None  # an env-less session's ExternalRunner (Session.external)
    _runner_fresh = False  # the runner's envs are built but not reset yet (see _ensure_runner)

    def __init__(
        self,
        agent: Agent,
        env: Any = None,
        *,
        seed: int | None = None,
        stop_when: Callable[[Session], bool] | None = None,
        eval_every: int | None = None,
        eval_episodes: int = 5,
        eval_env: Any = None,
        checkpoint_every: int | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        keep_best: bool = False,
        num_workers: int = 1,
        backend: str = "auto",
        torch_threads: int | None = 1,
        max_signal_points: int = DEFAULT_MAX_POINTS,
        sinks: Sequence[Any] | None = None,
        dataset: Any = None,
        record: str | os.PathLike[str] | None = None,
        ope_every: int | None = None,
        ope_dataset: Any = None,
        **backend_options: Any,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(
                f"Session needs an agent such as wb.PPO(env) as its first argument, got {type(agent).__name__}"
            )
        if getattr(agent, "offline", False):
            source = offline_loop.offline_source(agent, env, dataset, eval_env)
        elif env is None:
            if agent.env_source is None:
                raise TypeError("Session needs an env: the agent was built from spaces alone")
            source = agent.env_source
        else:
            source = as_env_source(env)
            obs_space, act_space = source.spaces()
            _check_same_spaces(agent, obs_space, act_space)
        arguments = {
            "seed": seed, "stop_when": stop_when, "eval_every": eval_every, "eval_episodes": eval_episodes,
            "checkpoint_every": checkpoint_every, "checkpoint_dir": checkpoint_dir, "keep_best": keep_best,
            "torch_threads": torch_threads, "max_signal_points": max_signal_points,
            "record": record, "ope_every": ope_every,
        }
        check_arguments("Session", arguments, _ARGUMENT_CHECKS, _session_defaults())
        check_runner_options(backend, num_workers, backend_options, owner="Session")
        check_vector_session(source, agent.num_envs, num_workers, backend)  # vector envs, backend="envpool"
        if num_workers > 1 and source.instance is not None:
            raise ValueError(
                f"num_workers={num_workers} needs a way to build the env in each worker, but an env "
                "instance cannot be copied to another process. Pass a zero-argument factory instead: "
                "Session(agent, lambda: MyEnv(...), num_workers=...)"
            )
        eval_source = None
        if eval_env is not None:
            try:
                eval_source = as_env_source(eval_env)
            except (TypeError, ValueError) as exc:
                raise ArgumentError(f"Session got eval_env={eval_env!r}: {exc}") from None
        self._eval_source: EnvSource | None = None
        if eval_source is not None:
            self._eval_source = eval_source  # evaluate() plays on it, with or without eval_every
        if eval_every is not None:
            if eval_source is not None:
                self._eval_source = eval_source
            elif source.can_copy:
                self._eval_source = source
            else:
                raise ValueError(
                    "eval_every needs a separate env to evaluate on, and an env instance cannot be "
                    "copied: pass eval_env=MyEnv(...) (or give the session a factory)"
                )
        if checkpoint_every is not None and checkpoint_dir is None:
            # A sensible place by default; session.checkpoint_dir says where it went.
            checkpoint_dir = os.path.join("runs", f"{agent.algorithm.lower()}-{time.strftime('%Y%m%d-%H%M%S')}")

        self.agent = agent
        self.env_source = source
        self.seed = seed
        self.stop_when = stop_when
        self.eval_every = eval_every
        self.eval_episodes = eval_episodes
        self.checkpoint_every = checkpoint_every
        self.checkpoint_dir = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
        self.keep_best = keep_best
        self.num_workers = num_workers
        self.backend = backend
        self.backend_options = backend_options
        self.torch_threads = torch_threads
        self.signals = SignalSet(max_points=max_signal_points)
        # Learning from logged data (workbench.offline_loop) and recording a dataset (workbench.recording).
        self.ope_every = ope_every
        self.ope_dataset = offline_loop.attach_dataset(agent, dataset, ope_every, ope_dataset)
        self._ope: Any = None
        self._last_ope_step = self.steps
        self.recorder = None if record is None else Recorder(record, agent)

        self.episodes = 0
        self.error: BaseException | None = None
        self.stop_reason: str | None = None
        self.best_eval_reward: float | None = None
        self.target_steps: int | None = None
        self.events: list[Event] = []
        """What was changed while the run lived (``set`` and ``call_env``), oldest first."""
        self._live = LiveControl(self)

        self._status = "idle"
        self._cond = threading.Condition(threading.RLock())
        self._pause_requested = False
        self._stop_requested = False
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._obs: np.ndarray | None = None
        self._episodes: EpisodeTracker | None = None
        self._time_offset = 0.0  # seconds of earlier runs (a resumed session continues its clock)
        self._clock_start: float | None = None
        self._seeded = False
        self._rate = _StepRate(self)  # steps_per_second, restarted by each loop
        self._last_eval_step = self.steps
        self._last_checkpoint_step = self.steps

        # Experiment tracking (workbench/tracking): validated here, fed from the signals off the loop.
        self._tracking: Any = None
        if sinks is not None:
            from .tracking.feed import SinkFeed

            self._tracking = SinkFeed(self, sinks)
        self.sinks = [] if self._tracking is None else self._tracking.sinks

    # -- state ----------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Env steps trained so far, over all envs: the run's one step counter (the agent's clock,
        which its schedules read, advances with it as the agent observes each step)."""
        return self.agent.num_timesteps

    @property
    def status(self) -> str:
        """One of ``idle, running, paused, stopped, finished, failed``."""
        return self._status

    @property
    def elapsed(self) -> float:
        """Seconds since the run first started (continues across resumes from disk)."""
        if self._clock_start is None:
            return self._time_offset
        return self._time_offset + time.perf_counter() - self._clock_start

    @property
    def is_alive(self) -> bool:
        """True while the training thread runs (also while paused)."""
        return self._thread is not None and self._thread.is_alive()

    def _set_status(self, status: str) -> None:
        with self._cond:
            self._status = status
            self._cond.notify_all()

    def _in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def __repr__(self) -> str:
        target = "" if self.target_steps is None else f"/{self.target_steps}"
        return (
            f"<Session {self.agent.algorithm} on {self.env_source.name}: {self.status}, "
            f"steps={self.steps}{target}, episodes={self.episodes}>"
        )

    # -- commands -------------------------------------------------------------------------------

    def start(self, steps: int) -> Session:
        """Train for ``steps`` more env steps in a background thread; returns at once.

        Raises ``RuntimeError`` when the session is already running or paused.
        """
        check_value("Session.start", "steps", steps, _STEPS)
        if self._tracking is not None and self._status not in ("running", "paused"):
            self._tracking.run_started()  # opens the sinks here, so their errors reach the caller
        with self._cond:
            self._refuse_if_running()
        self._join_previous_thread()
        with self._cond:
            self._refuse_if_running()  # again: another thread may have started it meanwhile
            previous = (self._status, self._thread, self.target_steps, self.error, self.stop_reason)
            self.error = None
            self.stop_reason = None
            self._pause_requested = False
            self._stop_requested = False
            self._abandoned = False
            self.target_steps = self.steps + int(steps)
            self._status = "running"
            self._thread = threading.Thread(
                target=self._train, args=(self.target_steps,), name="workbench-session", daemon=True
            )
            try:
                # Refuses (and starts nothing) when another live session trains this agent.
                control.start_thread(self, self._thread)
            except BaseException:
                self._status, self._thread, self.target_steps, self.error, self.stop_reason = previous
                raise
            if self._external is not None:  # under the lock, so before the run can end
                self._external.run_started()
        return self

    def _refuse_if_running(self) -> None:
        if self._status in ("running", "paused"):
            raise RuntimeError(
                f"this session is already {self._status}: call stop() (or wait()) before starting it again"
            )

    def _join_previous_thread(self) -> None:
        """Before a new start: a run that has just ended finishes its last lines; a run whose
        thread a control call gave up on (stuck in ``env.step``) cannot be started again."""
        thread = self._thread
        if thread is None or not thread.is_alive() or self._in_loop_thread():
            return
        if self._abandoned:
            raise RuntimeError(
                f"this session's previous run is still stuck in {self._activity()}: Python cannot "
                "interrupt it, and a new run would share its envs. Start again once that step has "
                "returned (session.is_alive turns False), or build a new Session with a fresh env; "
                "run the env in worker processes with step_timeout= to have a hung env killed"
            )
        thread.join(timeout=_CONTROL_TIMEOUT_S)

    def run(self, steps: int, *, progress: bool = False) -> Session:
        """Train for ``steps`` env steps and return when done (blocking variant of ``start``).

        Ctrl-C stops the run cleanly (status ``stopped``) instead of killing it midway. A training
        error is re-raised. ``progress=True`` shows a console progress bar.
        """
        first = self.steps
        self.start(steps)
        try:
            if progress:
                _views().follow(self, start_steps=first)  # the run may end before the bar is drawn
            self.wait()
        except KeyboardInterrupt:
            self.stop()
        return self

    def pause(self, timeout: float = _CONTROL_TIMEOUT_S) -> None:
        """Pause after the current env step (or update); returns once the loop has paused.

        When the loop has not paused within ``timeout`` seconds because it is stuck inside
        ``env.step``, the run is given up: status ``failed``, ``error`` a
        :class:`~workbench.control.StuckError` naming the env and for how long, and a
        ``RuntimeWarning`` with the same words (see :meth:`stop`).
        """
        with self._cond:
            if self._status != "running":
                return
            self._pause_requested = True
            self._cond.notify_all()
            if self._in_loop_thread():
                return
            if self._cond.wait_for(lambda: self._status != "running", timeout=timeout):
                return
        self._timed_out("pause", timeout)

    def _resume_paused(self) -> None:
        """Continue a paused run (``session.resume()``); does nothing unless paused."""
        with self._cond:
            self._pause_requested = False
            self._cond.notify_all()
            if self._status == "paused" and not self._in_loop_thread():
                self._cond.wait_for(lambda: self._status != "paused", timeout=_CONTROL_TIMEOUT_S)

    def stop(self, timeout: float = _CONTROL_TIMEOUT_S) -> None:
        """Stop after the current env step (or update); returns once the loop has ended.

        Safe from any thread, including from ``stop_when`` or a signal subscriber. Returns after
        at most ``timeout`` seconds: when the loop is stuck inside ``env.step`` by then (an env
        whose ``step`` never returns), Python cannot interrupt it, so the run is given up: status
        ``failed``, ``error`` a :class:`~workbench.control.StuckError` saying "stuck in env.step of
        env i for N s", a ``RuntimeWarning`` with the same words, and local or Ray workers are
        killed. The thread ends if the step ever returns; until then ``start`` refuses.
        """
        with self._cond:
            if self._status not in ("running", "paused"):
                return
            self._stop_requested = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and not self._in_loop_thread():
            thread.join(timeout=timeout)
            if thread.is_alive():
                self._timed_out("stop", timeout)

    def _activity(self) -> str:
        """What the training thread is inside now, for messages: "env.step of env 2 for 61.0 s"."""
        where = self._where
        if where is None or not self.is_alive:
            return "no step (between steps)"
        name, since = where
        seconds = time.monotonic() - since
        if name == "env.step":
            name = _stepping(self._runner)
        return f"{name} for {seconds:.1f} s"

    def _timed_out(self, call: str, timeout: float) -> None:
        """A control call waited ``timeout`` s for the loop: give the run up when the loop is stuck
        in an env step (it cannot be interrupted), otherwise say where it is and let the call land later."""
        where = self._where
        if where is None or where[0] != "env.step":
            warnings.warn(
                f"{call}() waited {timeout:g} s for the training thread, which is still in {self._activity()}; "
                f"the {call} takes effect when that returns",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        seconds = time.monotonic() - where[1]
        stuck = _stepping(self._runner)
        runner = self._runner
        interrupt = getattr(runner, "interrupt", None)
        then = (
            f"its {runner.backend} workers were killed"
            if interrupt is not None
            else "Python cannot interrupt a thread inside env.step, so its thread ends only if the step returns"
        )
        error = control.StuckError(
            f"{call}() waited {timeout:g} s, but the training thread is stuck in {stuck} (for {seconds:.1f} s): "
            f"the run is given up (status 'failed') and {then}. Run the env in worker processes with "
            "step_timeout= (backend='local' or 'ray') to have a hung env killed and named",
            where=stuck,
            seconds=seconds,
        )
        with self._cond:
            if not self.is_alive or self._where is not where:
                return  # the step returned meanwhile: the call lands as usual
            self._abandoned = True
            self._stop_requested = True
            self._pause_requested = False
            self.error = error
            self.stop_reason = "stuck"
            self._status = "failed"
            self._cond.notify_all()
        if interrupt is not None:
            interrupt()  # a blocked receive from a killed worker returns at once, with an error
            if self._thread is not None:
                self._thread.join(timeout=5.0)
        warnings.warn(str(error), RuntimeWarning, stacklevel=3)

    def _stop_at_exit(self, timeout: float) -> None:
        """The exit hook's stop (``workbench.control``): stop quietly within ``timeout`` seconds."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.stop(timeout=timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; re-raise its error with the original traceback.

        Returns True when the run has ended, False when ``timeout`` seconds passed first.
        A run given up by ``stop``/``pause`` (stuck in ``env.step``) raises its ``StuckError`` at
        once. From the training thread itself (``stop_when``, a signal subscriber) it raises
        :class:`~workbench.control.ControlError` instead of waiting for itself; the run goes on.
        """
        if self._in_loop_thread():
            raise control.ControlError(
                "wait() was called from the session's own training thread (from stop_when or a signal "
                "subscriber), where it would wait for itself forever; the run goes on. To end the run "
                "there, return True from stop_when or call session.stop()"
            )
        thread = self._thread
        if thread is not None:
            # Join in slices so Ctrl-C reaches the caller promptly.
            deadline = None if timeout is None else time.monotonic() + timeout
            # A given-up run (stuck in env.step) has ended for the session, whatever its thread does.
            while thread.is_alive() and not self._abandoned:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                thread.join(0.1 if remaining is None else min(0.1, remaining))
        if self.error is not None:
            raise self.error
        return True

    def set(self, **values: Any) -> dict[str, Any]:
        """Change hyperparameters while the run is idle, running or paused, from any thread:
        ``session.set(learning_rate=1e-4, ent_coef=0.01)``. Returns the old values.

        Values are checked as the agent's constructor checks them (a number may replace a
        schedule and a schedule a number); a name that is unknown or cannot change mid-run (network
        sizes, ``n_envs``...) is an ``ArgumentError`` (a ``ValueError``) saying why and naming the
        editable ones; nothing changes then. A running session applies the edit on its training
        thread between two steps, so it takes effect at the next update (the optimizers' learning
        rates too) and reaches Ray workers' exploration. Each change is recorded in
        :attr:`events` and as a ``set/<name>`` signal. See docs/live-edits.md."""
        return self._live.set(values)

    def call_env(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``env.name(*args, **kwargs)`` on every env copy (in-process, local workers, Ray
        actors) between two steps; returns the results, one per env copy, in env order.

        ``session.call_env("set_difficulty", 3)`` is curriculum learning without hacks. Works
        idle, running or paused; before the first run it builds the envs (without resetting them).
        Env copies built later in this session (worker backends build new ones for each run) get
        the calls made so far again, in order. An env without the method raises
        :class:`~workbench.envs.EnvMethodError` naming the env class; an exception the method raises
        reaches the caller (from a worker as a ``WorkerError`` with its traceback) and the run goes
        on. Each call is recorded in :attr:`events`."""
        return self._live.call_env(name, args, kwargs)

    def log(self, name: str, value: float, step: int | None = None) -> None:
        """Record a user signal ``name`` beside the built-in ones (at the current step by default)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a signal name must be a non-empty string, got {name!r}")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"signal {name!r} needs a number, got {value!r}") from None
        self.signals.record(name, self.steps if step is None else int(step), value, self.elapsed)

    def evaluate(self, episodes: int | None = None) -> float:
        """Play ``episodes`` deterministic episodes on the evaluation env; record and return the mean."""
        source = self._eval_source
        if source is None:
            if self._external is not None:
                raise ValueError(
                    "evaluate() needs an env to play on, and an external session has none (the application owns "
                    "it): build the session with Session.external(agent, eval_env=make_env)"
                )
            if not self.env_source.can_copy:
                raise ValueError("evaluate() needs eval_env= when the session's env is an instance")
            source = self.env_source
        seed = None if self.seed is None else self.seed + 10_000 + self.steps
        returns = self.agent.play(source, episodes=episodes or self.eval_episodes, seed=seed)
        mean = float(np.mean(returns))
        self.signals.record("eval_reward", self.steps, mean, self.elapsed)
        return mean

    def save(self, path: str | os.PathLike[str], *, memory: bool = False, overwrite: bool = False) -> str:
        """Save the run (weights, optimizer, counters, schedules, signals; replay memory with
        ``memory=True``) to a directory, or a ``.zip`` when ``path`` ends so. Returns the path.
        An existing ``path`` is replaced only when it is a checkpoint (or an empty directory), unless
        ``overwrite=True``; saves to one path from several threads take turns."""
        with self._cond:
            # Save a consistent state: a running session is paused for the write, then continues.
            was_running = self._status == "running" and not self._in_loop_thread()
            if was_running:
                self.pause()
        try:
            return self._write(path, memory=memory, overwrite=overwrite)
        finally:
            if was_running:
                self._resume_paused()

    def _write(self, path: str | os.PathLike[str], *, memory: bool = False, overwrite: bool = False) -> str:
        """Write the agent's state and this session's counters and signals to ``path``."""
        agent = self.agent
        state = agent.state()
        meta = {
            **agent.describe(),
            **state.data,
            "session": {
                "steps": self.steps,
                "episodes": self.episodes,
                "elapsed": self.elapsed,
                "seed": self.seed,
                "env_id": self.env_source.env_id,
                "env_name": self.env_source.name,
                "best_eval_reward": self.best_eval_reward,
                "last_eval_step": self._last_eval_step,
                "target_steps": self.target_steps,
                # Each env's random stream (None where the env has no np_random), so a resumed run
                # continues the streams instead of replaying its first episodes.
                "env_rng": _rng_states(self._runner) if self._runner is not None else self._env_rng,
                "external": self._external is not None,
                # Live edits and env calls (workbench.live_edits.Event), plain JSON.
                "events": [event.to_dict() for event in self.events],
            },
        }
        return checkpoint.write_run(
            path,
            meta=meta,
            tensors=state.tensors,
            signals=self.signals,
            memory=agent.memory_arrays() if memory else None,
            overwrite=overwrite,
        )

    @classmethod
    def _resume_saved(
        cls,
        path: str | os.PathLike[str],
        env: Any = None,
        *,
        external: bool = False,
        allow_encoders: Any = None,
        **kwargs: Any,
    ) -> Session:
        """Rebuild a saved session (``Session.resume(path, env)``) to continue training exactly
        where it stopped: counters, optimizer moments, schedules, signals and saved memory.
        ``Session.resume(path, external=True)`` continues it as an env-less session driven by the
        application (:meth:`external`; any saved run, whatever trained it).
        ``allow_encoders`` lists the custom encoders' import paths it may build (see ``wb.load``)."""
        with open_saved(path) as run:
            agent = agent_from_run(run, memory=True, allow_encoders=allow_encoders).train()
            signals = run.signals()
        saved = run.meta.get("session", {})
        if env is not None and external:
            raise TypeError("Session.resume got an env and external=True: an external session has no env")
        offline = bool(getattr(agent, "offline", False))
        if offline:  # it learns from dataset=; the saved env was its evaluation env
            if env is not None or saved.get("env_id"):
                kwargs.setdefault("eval_env", env if env is not None else saved.get("env_id"))
        elif env is None and not external:
            env = saved.get("env_id")
            if env is None:
                hint = (
                    "it was an external session: Session.resume(path, external=True)"
                    if saved.get("external")
                    else "pass it: Session.resume(path, env)"
                )
                raise ValueError(f"{path}: the run was trained on an env built by the application; {hint}")
        kwargs.setdefault("seed", saved.get("seed"))
        if external:
            session = cls.external(agent, **kwargs)
        else:
            session = cls(agent, None if offline else env, **kwargs)
        for name, sig in signals.items():
            session.signals.signal(name).extend(*sig.snapshot())
        session.episodes = int(saved.get("episodes", 0))
        session._time_offset = float(saved.get("elapsed", 0.0))
        session._seeded = True  # the generators continue from their saved states
        session.best_eval_reward = saved.get("best_eval_reward")
        session._last_eval_step = int(saved.get("last_eval_step", session.steps))
        session._last_checkpoint_step = session.steps
        session.target_steps = saved.get("target_steps")
        session._env_rng = saved.get("env_rng")
        session.events = [Event.from_dict(e) for e in saved.get("events", [])]
        session._resumed_from_disk = True
        return session

    # -- an env-less session, driven by the application ----------------------------------------

    @classmethod
    def external(cls, agent: Agent, *, max_lag: int | None = None, **options: Any) -> Session:
        """A session whose env lives in the application: it asks for actions and reports rewards.

        Example::

            session = wb.Session.external(wb.DQN(observation_space=obs_space, action_space=act_space),
                                          seed=0, stop_when=...)
            session.start(steps=50_000)        # learns in the background from the feedback below
            action = session.act(obs)          # from any thread; episode= keys concurrent episodes
            session.feedback(reward, next_obs, terminated, truncated)

        ``options`` are those of :class:`Session` that need no env of the session's own: ``seed``,
        ``stop_when``, ``eval_every`` with ``eval_env=`` (an env to evaluate on), ``eval_episodes``,
        ``checkpoint_every``, ``checkpoint_dir``, ``keep_best``, ``torch_threads``,
        ``max_signal_points``, ``sinks``. ``start(steps=N)`` means N more transitions learned from.
        ``max_lag``: when set, ``feedback`` waits during a run (paused too) while more than
        ``max_lag`` transitions await learning, for an application that can outrun learning (a
        fast simulator: ``max_lag=0`` keeps it in step, and ``pause()`` then pauses it too);
        None (the default) never holds up the caller, as a service needs.
        Status, pause, resume, stop, signals, the dashboard, ``stop_when``, ``save``, ``wb.load`` and
        ``Session.resume(path, external=True)`` work as in every session (episodes still live at a
        save are not saved: the resumed session starts with none).

        Episodes and the agent's env slots: each episode holds one of the agent's ``n_envs`` slots
        from its first ``act`` to the feedback that ends it, and the agent learns from one
        transition of every slot at a time, as from a vector env. So at most ``n_envs`` episodes
        run at once (one more is a ``RuntimeError`` at its first ``act``), and learning waits until
        every slot has fed back: drive ``n_envs`` episodes at once, or build the agent with
        ``n_envs=1`` for a single stream. See ``workbench.parallel.external`` and docs/external.md.
        """
        from .parallel.external import ExternalRunner, ExternalSource, refuse_env_options

        if not isinstance(agent, Agent):
            raise TypeError(
                "Session.external needs an agent such as wb.DQN(observation_space=..., action_space=...) "
                f"as its first argument, got {type(agent).__name__}"
            )
        refuse_env_options(agent, options)
        check_value("Session.external", "max_lag", max_lag, optional(integer(min=0)))
        runner = ExternalRunner(agent, max_lag=max_lag)
        source = ExternalSource(
            name="the application", observation_space=agent.observation_space, action_space=agent.action_space
        )
        session = cls(agent, source, **options)
        session._external = runner
        return session

    def _external_runner(self, call: str) -> Any:
        if self._external is None:
            raise RuntimeError(
                f"{call}() is for sessions driven by the application: build one with "
                "wb.Session.external(agent); this session steps its own env"
            )
        return self._external

    def act(self, obs: Any, episode: Any = None, action_mask: Any = None) -> Any:
        """The action for ``obs`` in ``episode`` (an external session; safe from any thread).

        ``episode`` is any hashable id (a user, a connection); omitted, one default episode. The
        first ``act`` of an episode starts it; every ``act`` must be followed by :meth:`feedback`
        for the same episode before the next (a ``RuntimeError`` naming the episode otherwise).
        The action is decided with the current weights, exploring as training does, in every
        status: also while paused, stopped or before ``start`` (nothing waits for the loop).
        ``action_mask`` (True where allowed), or a Dict observation's ``"action_mask"`` key,
        restricts the action as in ``agent.decide``.
        """
        runner = self._external_runner("act")
        return runner.act(obs, _episode_key(episode), action_mask)

    def feedback(
        self,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        episode: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        """Report what followed the last :meth:`act` of ``episode`` (an external session).

        ``terminated``/``truncated`` as gymnasium's ``step`` returns them: either ends the episode
        (its ``episode_reward`` and ``episode_length`` are recorded when the agent learns its last
        step), and the id may then start a new one. The transition is queued for the training
        loop before a run starts, while it runs and while paused; once the run has stopped, finished
        or failed, feedback still ends episodes but its transitions are dropped, not learned from.
        ``info`` is the env's info dict: its ``"action_mask"`` is the mask of ``next_obs`` for an
        episode whose actions are masked (see :meth:`act`).
        A feedback without an ``act`` awaiting it is a ``RuntimeError`` naming the episode.
        """
        runner = self._external_runner("feedback")
        if info is not None and not isinstance(info, dict):
            raise TypeError(f"feedback() got info={info!r}: pass the env's info dict or leave it out")
        runner.feedback(reward, next_obs, terminated, truncated, _episode_key(episode), info)

    @property
    def live_episodes(self) -> list[Any]:
        """An external session's episodes started and not yet ended (the default one as None)."""
        from .parallel.external import DEFAULT_EPISODE

        runner = self._external_runner("live_episodes")
        return [None if e is DEFAULT_EPISODE else e for e in runner.live_episodes]

    def dashboard(self) -> Any:
        """The live notebook dashboard for this session (an ipywidgets widget)."""
        return _views().Dashboard(self)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # Showing the session again while its dashboard is live shows that dashboard in one more
        # place: one refresh timer per session however often a cell shows it. A dashboard whose
        # timer has stopped (the run ended) or that was closed is replaced by a fresh one.
        shown = getattr(self, "_shown_dashboard", None)
        if shown is None or shown.closed or not shown.timer_alive:
            shown = self._shown_dashboard = self.dashboard()
        display(shown)

    # -- the loop -------------------------------------------------------------------------------

    def _train(self, target_steps: int) -> None:
        previous_threads = torch.get_num_threads()
        try:  # whatever fails here, before the loop too, ends the run as failed
            if self.torch_threads:
                torch.set_num_threads(self.torch_threads)
            final = self._loop(target_steps)
        except BaseException as exc:
            if not self._abandoned:  # a given-up run keeps the StuckError that explains it
                self.error = exc
            final = "failed"
            self._close_runner(force=True)
        finally:
            self._where = None
            if self.torch_threads:
                torch.set_num_threads(previous_threads)
        with self._cond:
            if self._abandoned:
                # The stuck step returned after the run was given up: it stays failed, and the envs
                # it was stuck in are not reused.
                final = "failed"
                self._close_runner(force=True)
            self._pause_requested = False
            self._status = final
            if self._external is not None:
                self._external.run_ended()  # later feedback is not learned from (Session.feedback)
            self._live.serve()  # edits and calls that arrived as the run ended: carried out now
            self._cond.notify_all()
        if self._tracking is not None:
            self._tracking.run_ended(final, self.stop_reason, self.error)

    def _begin_loop(self) -> None:
        """What every loop (env, offline) does first: start the run's clock (once), seed the agent
        (once: a resumed or saved session continues its generators) and start counting steps per second."""
        if self._clock_start is None:
            self._clock_start = time.perf_counter()
        if self.seed is not None and not self._seeded:
            self.agent.reseed(self.seed)
        self._seeded = True
        self._rate = _StepRate(self)

    def _prepare(self) -> None:
        agent = self.agent
        self._ensure_runner()
        if self._runner_fresh:
            self._runner_fresh = False
            self._obs = self._runner.reset()
            self._episodes = EpisodeTracker(self._runner.num_envs)
            # Every env starts a new episode here (a resumed run too): an agent with per-episode
            # state (RecurrentPPO's LSTM state, an OU noise process) starts it afresh.
            agent.begin_episode(np.ones(self._runner.num_envs, dtype=bool))

    def _ensure_runner(self) -> Any:
        """The runner, built when there is none (its envs not reset yet: ``_prepare`` resets them)."""
        if self._runner is None and self._external is not None:
            # The application's episodes (Session.external): nothing to build; its reset is a placeholder.
            self._runner, self._runner_fresh = self._external, True
        if self._runner is None:
            agent = self.agent
            seed = self.seed
            if self._resumed_from_disk and seed is not None:
                # A resumed run must not replay its first episodes: envs whose random streams were
                # saved continue them (below); the others get seeds derived from the step count.
                seed = int(np.random.SeedSequence([seed, self.steps]).generate_state(1)[0])
            runner = make_runner(
                self.env_source,
                agent.num_envs,
                seed=seed,
                num_workers=self.num_workers,
                backend=self.backend,
                agent=agent,
                **self.backend_options,
            )
            if self._env_rng and hasattr(runner, "set_rng_states"):
                runner.set_rng_states(self._env_rng)
            self._env_rng = None
            self._runner, self._runner_fresh = runner, True
            self._live.replay(runner)  # new env copies get this session's call_env calls again
        return self._runner

    def _close_runner(self, force: bool = False) -> None:
        runner = self._runner
        if runner is not None and (force or not runner.persistent):
            if not force:
                # The envs' random streams outlive the runner: a save after the run continues them.
                self._env_rng = _rng_states(runner)
            self._runner = None
            runner.close()

    def _wait_while_paused(self) -> None:
        with self._cond:
            if not self._pause_requested or self._stop_requested:
                return
            self._status = "paused"
            self._cond.notify_all()
            live = self._live
            while True:
                self._cond.wait_for(lambda: not self._pause_requested or self._stop_requested or bool(live.pending))
                if not live.pending:
                    break
                live.serve()  # queued just before the pause landed
            self._status = "running"
            self._cond.notify_all()

    def _loop(self, target_steps: int) -> str:
        agent = self.agent
        if getattr(agent, "offline", False):
            ended = offline_loop.run_offline(self, target_steps)
        else:
            try:
                ended = self._env_loop(target_steps)
            finally:
                if self.recorder is not None:
                    self.recorder.write()
        if self.stop_reason is None:
            self.stop_reason = "stop" if ended == "stopped" else "budget"
        return ended

    def _between_steps(self) -> bool:
        """What every loop (env, external, offline) runs between two steps: the live edits and env
        calls queued meanwhile (``set``, ``call_env``: workbench.live_edits), then a pause request
        (returns once resumed), then a stop request. True when the loop must stop."""
        if self._live.pending:
            self._live.serve()
        if self._pause_requested:
            self._wait_while_paused()
            self._rate.restart()  # the time paused is not counted in steps_per_second
        return self._stop_requested

    def _after_step(self) -> bool:
        """What every loop runs after a step and its update: steps_per_second, then what is due of
        the periodic evaluation, the off-policy estimates (an offline session's ``ope_every``) and
        the checkpoint, in that order. True when an evaluation or an estimate ran."""
        self._rate.tick()
        asked = False
        if self.eval_every is not None and self.steps - self._last_eval_step >= self.eval_every:
            self._last_eval_step = self.steps
            self._periodic_eval()
            asked = True
        if self.ope_every is not None and self.steps - self._last_ope_step >= self.ope_every:
            self._last_ope_step = self.steps
            offline_loop.record_estimates(self)
            asked = True
        if self.checkpoint_every is not None and self.steps - self._last_checkpoint_step >= self.checkpoint_every:
            self._last_checkpoint_step = self.steps
            self._periodic_checkpoint()
        return asked

    def _update_once(self, losses: LossWatch) -> None:
        """One ``agent.update()``, its metrics checked (a NaN loss fails the run) and recorded as
        signals: the env loop and the offline loop (workbench.offline_loop) both learn through it."""
        agent = self.agent
        self._where = ("agent.update", time.monotonic())
        metrics = agent.update()
        self._where = None
        losses.check(metrics, agent.num_updates, self.steps)
        now = self.elapsed
        for name, value in metrics.items():
            self.signals.record(name, self.steps, value, now)

    def _env_loop(self, target_steps: int) -> str:
        agent = self.agent
        self._begin_loop()
        self._prepare()
        agent.train()
        # Schedules count against the furthest target planned so far: a run stopped (or saved)
        # and continued to its planned end follows an uninterrupted run's schedule exactly.
        agent.total_timesteps = max(target_steps, agent.total_timesteps or 0)
        runner = self._runner
        record = self.signals.record
        obs = self._obs
        episodes = self._episodes
        assert obs is not None and episodes is not None
        ended = "finished"
        # Worker backends name the worker an episode ran in; they may report signals of their own.
        per_worker = getattr(runner, "envs_per_worker", None)
        drain_signals = getattr(runner, "drain_signals", None)
        # An external session's runner waits for the application's feedback and counts its episodes.
        wait_ready = getattr(runner, "wait_ready", None)
        ended_episodes = getattr(runner, "ended_episodes", None)
        # What the envs return and what the updates return are checked on every batch (cheaply):
        # a NaN fails the run naming its source instead of silently breaking the weights.
        check_env_batch(self.steps, obs)
        losses = LossWatch(agent.algorithm)

        while self.steps < target_steps:
            if self._between_steps():
                ended = "stopped"
                break
            if wait_ready is not None and not wait_ready(_FEEDBACK_WAIT_S):
                continue  # no transition in every slot yet: check pause and stop again

            # The one step function (workbench.loop.env_step), here or in the runner's workers.
            # _where lets a control call that times out say what the loop is stuck in.
            self._where = ("env.step", time.monotonic())
            transitions, obs = runner.transitions(agent, obs)
            self._where = None
            if self._abandoned:
                break  # given up while this step hung: nothing more is learned or counted
            t = transitions
            check_env_batch(self.steps, obs, t.rewards, t.next_obs, t.terminated, t.truncated)
            if self.recorder is not None:
                self.recorder.add(transitions)
            agent.observe(transitions)
            self._obs = obs

            done = transitions.terminated | transitions.truncated
            if ended_episodes is not None:
                finished = ended_episodes()
            elif GAME_END_KEY in t.extras:  # Atari training: whole games' raw scores (workbench.atari)
                finished = EpisodeTracker.games(t.extras[GAME_END_KEY])
            else:
                finished = episodes.add(transitions.rewards, done)
            if finished:
                now = self.elapsed
                for episode in finished:
                    self.episodes += 1
                    record("episode_reward", self.steps, episode.reward, now)
                    record("episode_length", self.steps, float(episode.length), now)
                    if per_worker:
                        record(f"worker_{episode.env // per_worker}/episode_reward", self.steps, episode.reward, now)
                if self.stop_when is not None and self._ask_stop_when():
                    self.stop_reason = "stop_when"
                    break

            if drain_signals is not None:
                for name, value in drain_signals():
                    record(name, self.steps, value, self.elapsed)

            if agent.ready():
                self._update_once(losses)
            self._after_step()  # the env loop asks stop_when after episodes, not after evaluations

        self._rate.tick(final=True)
        self._close_runner()
        return ended

    def _ask_stop_when(self) -> bool:
        try:
            return bool(self.stop_when(self))  # type: ignore[misc]
        except control.ControlError as exc:
            # A control call that cannot work from here (wait()) is the caller's mistake, not the run's.
            warnings.warn(f"stop_when: {exc}", RuntimeWarning, stacklevel=2)
            return False

    def _periodic_eval(self) -> None:
        mean = self.evaluate()
        if self.best_eval_reward is None or mean > self.best_eval_reward:
            self.best_eval_reward = mean
            if self.keep_best and self.checkpoint_dir is not None:
                self._write(os.path.join(self.checkpoint_dir, "best"))

    def _periodic_checkpoint(self) -> None:
        assert self.checkpoint_dir is not None
        self._write(os.path.join(self.checkpoint_dir, "latest"))


class _StepRate:
    """The ``steps_per_second`` signal of a running loop: recorded every ``_SPS_INTERVAL_S`` seconds."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.restart()

    def restart(self) -> None:
        """Count from now (a loop's start, or the end of a pause)."""
        self.steps, self.time = self.session.steps, time.perf_counter()

    def tick(self, final: bool = False) -> None:
        """Record the rate when an interval has passed (``final``: whatever was counted since the last one)."""
        session, clock = self.session, time.perf_counter()
        due = clock > self.time and session.steps > self.steps if final else clock - self.time >= _SPS_INTERVAL_S
        if due:
            rate = (session.steps - self.steps) / (clock - self.time)
            session.signals.record("steps_per_second", session.steps, rate, session.elapsed)
            self.steps, self.time = session.steps, clock


def _episode_key(episode: Any) -> Any:
    from .parallel.external import DEFAULT_EPISODE

    return DEFAULT_EPISODE if episode is None else episode


def _views() -> ModuleType:
    """The views of a session (``workbench.ui``: dashboard, console progress bar).

    The one place where the session layer reaches up to the views, so that a session can show
    itself when a notebook displays it; imported on first use, so ``import workbench`` stays light."""
    from . import ui

    return ui


def _stepping(runner: Any) -> str:
    """Which env step the loop is inside, as precisely as the runner knows it."""
    stepping = getattr(runner, "stepping", None)
    if stepping is not None:
        return f"env.step of env {stepping}"
    backend = getattr(runner, "backend", None)
    if backend in ("local", "ray"):
        return f"env.step ({backend} workers)"
    return "the agent's decision or env.step"


def _rng_states(runner: Any) -> list[Any] | None:
    """The runner's envs' random streams, JSON-ready (None when the runner cannot tell)."""
    get = getattr(runner, "rng_states", None)
    if get is None:
        return None
    try:
        return checkpoint.json_ready(get())
    except Exception:  # a broken runner (a worker gone) has no streams to continue
        return None


def _session_defaults() -> dict[str, Any]:
    """The defaults of ``Session``'s arguments, for error messages."""
    import inspect

    parameters = inspect.signature(Session.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _check_same_spaces(agent: Agent, obs_space: Any, act_space: Any) -> None:
    if obs_space != agent.observation_space:
        raise ValueError(
            f"the env's observation space {describe_space(obs_space)} differs from the agent's "
            f"{describe_space(agent.observation_space)}: build the agent from the same env"
        )
    if act_space != agent.action_space:
        raise ValueError(
            f"the env's action space {describe_space(act_space)} differs from the agent's "
            f"{describe_space(agent.action_space)}: build the agent from the same env"
        )
