"""The run: a live, controllable training session.

A :class:`Session` is the facade users know: the constructor, the commands (``start``, ``run``,
``pause``, ``resume``, ``stop``, ``wait``), ``signals``, ``set``, ``call_env``, ``save``,
``Session.reopen``, ``Session.external`` and the dashboard. It composes the run's machinery of
``workbench.run``: a :class:`~workbench.run.RunControl` (status, pause and stop), one loop chosen by
the kind of session (:class:`~workbench.run.EnvLoop`, :class:`~workbench.run.ExternalLoop` or
:class:`~workbench.run.OfflineLoop`), the periodic jobs (evaluation, estimates, checkpoints) and the
counters it saves beside the agent's state.

The training thread never prints and never touches a widget: observers (the dashboard, a CLI
progress bar) read ``status``, ``steps`` and ``signals`` from their own threads.
"""

from __future__ import annotations

import inspect
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import views
from .agents.base import Agent
from .envs.core import EnvSource, as_env_source, describe_space
from .envs.vector import check_vector_session
from .files import check_folder
from .offline import source as offline_loop
from .offline.recording import Recorder
from .parallel import check_double_buffering, check_runner_options, check_worker_env
from .parallel.external import DEFAULT_EPISODE, ExternalSource, external_source
from .parallel.multiagent import external_act, external_feedback
from .run import STATUSES, EnvLoop, ExternalLoop, Loop, OfflineLoop, RunContext, RunControl, RunState
from .run.control import CONTROL_TIMEOUT_S
from .run.interrupts import interruptible
from .run.persistence import read_saved, restore, write_run
from .run.videos import eval_source, evaluate, video_folder
from .selfplay import SelfPlay
from .signals import DEFAULT_MAX_POINTS, SignalSet
from .validation import (
    ArgumentError,
    any_of,
    check_arguments,
    check_value,
    choice,
    flag,
    function_of,
    integer,
    optional,
    path_like,
)
from .video import Videos, check_renders, video_settings

__all__ = ["STATUSES", "Session"]

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
    "torch_threads": optional(any_of(integer(min=1), choice("auto"))),
    "max_signal_points": integer(min=2),
    "record": optional(path_like()),
    "ope_every": optional(integer(min=1)),
    "video_every": optional(integer(min=1)),
}
_STEPS = integer(min=1)


class _ResumeMethod:
    """``session.resume()`` continues a paused run; ``Session.resume(path, env)``, the old spelling
    of :meth:`Session.reopen`, still reopens a saved one (with a ``DeprecationWarning``)."""

    def __get__(self, obj: Session | None, owner: type[Session]) -> Callable[..., Any]:
        if obj is not None:
            return obj._resume_paused

        def resume(path: str | os.PathLike[str], env: Any = None, **kwargs: Any) -> Session:
            warnings.warn(
                "Session.resume(path, env) is deprecated: use Session.reopen(path, env) to reopen a saved "
                "run (session.resume() continues a paused one)",
                DeprecationWarning,
                stacklevel=2,
            )
            return owner.reopen(path, env, **kwargs)

        return resume


class _InState:
    """A public attribute of a session that lives in its run's state (``session.run_state``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Session | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj._ctx.state, self.name)

    def __set__(self, obj: Session, value: Any) -> None:
        setattr(obj._ctx.state, self.name, value)


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
        num_workers: how many workers step the envs (1: in the training thread).
        backend: where env steps run (see ``workbench.parallel`` and docs/parallel.md):
            ``"auto"``, ``"inprocess"``, ``"local"`` (worker processes) or ``"ray"``.
        backend_options: ``envs_per_worker``, ``restart_workers`` (start a dead worker again instead
            of failing), ``step_timeout`` (seconds: kill a worker whose env's step hangs),
            ``double_buffer`` (``backend="local"``, an even ``envs_per_worker``: each worker steps half of its
            envs while the learner decides the other half's actions; docs/parallel.md), and for
            Ray ``ray_address``, ``sync_every``, ``cpus_per_worker``, ``ray_init``, ``ray_acting``
            (``"workers"``: each actor acts with an agent replica; ``"learner"``: actors only step
            envs, the learner acts for all of them, actors start without torch).
        torch_threads: torch threads while training: ``"auto"``, 1 for MLP agents, torch's own for CNN ones.
        sinks: experiment trackers fed from the signals, off the training loop, e.g.
            ``[wb.TensorBoard("runs/tb"), wb.MLflow(), wb.WandB(offline=True)]`` (docs/tracking.md).
        dataset: a :class:`~workbench.Dataset`: an offline agent (BC, BCQ, CQL, IQL) learns from it
            with no env (``steps`` then counts gradient steps; ``eval_env`` evaluates on an env); a
            replay agent (DQN, SAC...) starts with it in its memory, then trains on ``env``.
        record: a directory to record the run's transitions to, as a dataset (``workbench.offline.recording``).
        ope_every: an offline agent's off-policy estimates (``ope_dr``...) every this many steps,
            on ``ope_dataset`` or else on 10% of ``dataset``'s episodes held out (docs/offline.md).
        video_every: an evaluation with a video every this many env steps, into ``checkpoint_dir/videos``.
        video_options: the videos' bounds (frame skip, size, seconds, fps; docs/videos.md).
    """

    resume = _ResumeMethod()
    """``session.resume()`` continues a paused run (the Resume button calls it)."""

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
        torch_threads: int | str | None = "auto",
        max_signal_points: int = DEFAULT_MAX_POINTS,
        sinks: Sequence[Any] | None = None,
        dataset: Any = None,
        record: str | os.PathLike[str] | None = None,
        ope_every: int | None = None,
        ope_dataset: Any = None,
        video_every: int | None = None,
        video_options: Any = None,
        **backend_options: Any,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(
                f"Session needs an agent such as wb.PPO(env) as its first argument, got {type(agent).__name__}"
            )
        source, loop = _source_and_loop(agent, env, dataset, eval_env)
        selfplay = _selfplay_env(agent, source, num_workers)
        if isinstance(source, EnvSource):  # HER takes the env's compute_reward
            agent.bind_env(source)
        arguments = {name: value for name, value in locals().items() if name in _ARGUMENT_CHECKS}
        check_arguments("Session", arguments, _ARGUMENT_CHECKS, _session_defaults())
        check_runner_options(backend, num_workers, backend_options, owner="Session")
        check_double_buffering(source, agent, backend, num_workers, backend_options, owner="Session")
        check_vector_session(source, agent.num_envs, num_workers, backend)  # vector envs, backend="envpool"
        check_worker_env(source, num_workers, backend, backend_options)  # worker options with a vector env too
        # The run's state (workbench.run.RunState) and machinery; the attributes below read it.
        state = RunState(
            agent=agent,
            env_source=source,
            signals=SignalSet(max_points=max_signal_points),
            eval_source=_eval_source(source, eval_env, eval_every, video_every),
            seed=seed,
            stop_when=stop_when,
            eval_every=eval_every,
            eval_episodes=eval_episodes,
            keep_best=keep_best,
            checkpoint_every=checkpoint_every,
            checkpoint_dir=_checkpoint_dir(agent, checkpoint_every or video_every, checkpoint_dir),
            video_every=video_every,
            video_options=video_settings(video_options),  # a VideoSettings (workbench.video)
            num_workers=num_workers,
            backend=backend,
            backend_options=backend_options,
            torch_threads=torch_threads,
            # Learning from logged data (workbench.offline.source), recording a dataset (offline.recording).
            ope_every=ope_every,
            ope_dataset=offline_loop.attach_dataset(agent, dataset, ope_every, ope_dataset),
            dataset=dataset,
            recorder=None if record is None else Recorder(record, agent),
            selfplay=selfplay,
        )
        self._ctx = RunContext(self, state, loop, sinks)  # experiment trackers are fed from the signals
        _warm_views()

    # -- what the run is, and where it stands (the run's state: workbench.run.RunState) --------------

    agent = _InState()
    """The agent being trained."""
    env_source = _InState()
    """Where the envs come from (a :class:`~workbench.envs.EnvSource`)."""
    signals = _InState()
    """The run's signals (:class:`~workbench.signals.SignalSet`): losses, rewards, evaluations, your ``log``."""
    seed, stop_when, eval_every, eval_episodes, keep_best = _InState(), _InState(), _InState(), _InState(), _InState()
    """The constructor's arguments of the same names."""
    checkpoint_every, checkpoint_dir, video_every, video_options = _InState(), _InState(), _InState(), _InState()
    """When and where checkpoints and videos go (``video_options``: a :class:`~workbench.video.VideoSettings`)."""
    num_workers, backend, backend_options, torch_threads = _InState(), _InState(), _InState(), _InState()
    """Where env steps run, and the torch threads of training."""
    ope_every, ope_dataset, dataset, recorder, sinks = _InState(), _InState(), _InState(), _InState(), _InState()
    """Off-policy estimates, the dataset learned from, the run's recorder and its experiment trackers."""
    episodes = _InState()
    """Episodes ended so far."""
    best_eval_reward = _InState()
    """The best ``eval_reward`` so far (None before an evaluation)."""
    target_steps = _InState()
    """The step count the current (or last) run trains to."""
    events = _InState()
    """What was changed while the run lived (``set`` and ``call_env``), oldest first."""

    @property
    def run_state(self) -> RunState:
        """The run's state as one typed object (``workbench.run.RunState``), which the attributes above read."""
        return self._ctx.state

    @property
    def error(self) -> BaseException | None:
        """What the last run failed with (``wait()`` re-raises it), or None."""
        return self._ctx.control.error

    @property
    def stop_reason(self) -> str | None:
        """Why the last run ended: ``"budget"``, ``"stop"``, ``"stop_when"``, ``"interrupted"``
        (Ctrl-C), ``"terminated"`` (SIGTERM) or ``"stuck"``; None while it runs."""
        return self._ctx.control.stop_reason

    # -- state ----------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Env steps trained so far, over all envs: the run's one step counter (the agent's clock,
        which its schedules read, advances with it as the agent observes each step)."""
        return self.agent.num_timesteps

    @property
    def status(self) -> str:
        """One of ``idle, running, paused, stopped, finished, failed``."""
        return self._ctx.control.status

    @property
    def elapsed(self) -> float:
        """Seconds since the run first started (continues across resumes from disk)."""
        return self._ctx.state.elapsed

    @property
    def is_alive(self) -> bool:
        """True while the training thread runs (also while paused)."""
        return self._ctx.control.is_alive

    @property
    def run_control(self) -> RunControl:
        """The run's lifecycle (``workbench.run.RunControl``, shared with sweeps and populations):
        status, pause and stop requests, what the training thread is inside
        (:meth:`~workbench.run.RunControl.activity`)."""
        return self._ctx.control

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
        self._ctx.start(int(steps))
        return self

    def run(self, steps: int, *, progress: bool = False) -> Session:
        """Train for ``steps`` env steps and return when done (blocking variant of ``start``).

        Ctrl-C stops the run cleanly, then reaches the caller: the run is stopped and its thread
        joined (status ``stopped``, ``stop_reason`` ``"interrupted"``) before ``KeyboardInterrupt``
        is raised, so a script that does not catch it exits as Python does on Ctrl-C. SIGTERM stops
        it the same way (``stop_reason`` ``"terminated"``) and raises ``SystemExit(143)``. A
        training error is re-raised. ``progress=True`` shows a console progress bar.
        """
        first = self.steps
        with interruptible(self._ctx.control):
            self.start(steps)
            if progress:
                views.follow(self, start_steps=first)  # the run may end before the bar is drawn
            self.wait()
        return self

    def pause(self, timeout: float = CONTROL_TIMEOUT_S) -> None:
        """Pause after the current env step (or update); returns once the loop has paused.

        When the loop has not paused within ``timeout`` seconds because it is stuck inside
        ``env.step``, the run is given up: status ``failed``, ``error`` a
        :class:`~workbench.run.registry.StuckError` naming the env and for how long, and a
        ``RuntimeWarning`` with the same words (see :meth:`stop`).
        """
        self._ctx.control.pause(timeout)

    def _resume_paused(self) -> None:
        """Continue a paused run (``session.resume()``); does nothing unless paused."""
        self._ctx.control.resume()

    def stop(self, timeout: float = CONTROL_TIMEOUT_S) -> None:
        """Stop after the current env step (or update); returns once the loop has ended.

        Safe from any thread. Returns after at most ``timeout`` seconds: a loop stuck inside
        ``env.step`` (or a live call) by then is given up: status ``failed``, ``error`` a
        :class:`~workbench.run.registry.StuckError` naming what it is stuck in, a ``RuntimeWarning`` with the
        same words, and local or Ray workers are killed (docs/faults.md).
        """
        self._ctx.control.stop(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; re-raise its error with the original traceback.

        Returns True when the run has ended, False when ``timeout`` seconds passed first.
        A run given up by ``stop``/``pause`` (stuck in ``env.step``) raises its ``StuckError`` at
        once. From the training thread itself (``stop_when``, a signal subscriber) it raises
        :class:`~workbench.run.registry.ControlError` instead of waiting for itself; the run goes on.
        """
        return self._ctx.control.wait(timeout)  # Ctrl-C: the run stops, then the interrupt goes on

    def set(self, **values: Any) -> dict[str, Any]:
        """Change hyperparameters while the run is idle, running or paused, from any thread:
        ``session.set(learning_rate=1e-4, ent_coef=0.01)``. Returns the old values.

        Values are checked as the constructor checks them; a name that is unknown or fixed mid-run is an
        ``ArgumentError`` naming the editable ones, and nothing changes. A running session applies the
        edit between two steps (at the next update). Recorded in :attr:`events` and as a ``set/<name>``
        signal. See docs/live-edits.md."""
        return self._ctx.live.set(values)

    def call_env(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``env.name(*args, **kwargs)`` on every env copy (in-process, local workers, Ray
        actors) between two steps; returns the results, one per env copy, in env order.

        ``session.call_env("set_difficulty", 3)``: curriculum learning. Works idle, running or paused;
        env copies built later get the calls made so far again, in order. An env without the method
        raises :class:`~workbench.envs.EnvMethodError`; the method's own exception reaches the caller
        and the run goes on. Recorded in :attr:`events` (docs/live-edits.md, docs/faults.md)."""
        return self._ctx.live.call_env(name, args, kwargs)

    def log(self, name: str, value: float, step: int | None = None) -> None:
        """Record a user signal ``name`` beside the built-in ones (at the current step by default,
        else at ``step``, an integer >= 0); ``value`` is a number (numpy numbers too, not a string)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a signal name must be a non-empty string, got {name!r}")
        check_value("Session.log", "step", step, optional(integer(min=0)))
        self.signals.record(name, self.steps if step is None else int(step), _log_value(name, value), self.elapsed)

    def evaluate(self, episodes: int | None = None, *, record_video: bool = False) -> float:
        """Play ``episodes`` deterministic episodes on the evaluation env; record and return the mean.
        ``record_video=True`` renders the first one into a video (:attr:`videos`, docs/videos.md)."""
        check_value("Session.evaluate", "record_video", record_video, flag())
        return evaluate(self._ctx, episodes, record_video)

    @property
    def videos(self) -> Videos:
        """The run's evaluation videos, oldest first (:class:`~workbench.video.Video`: ``path``,
        ``step``, ``episode_return``...); they join once written. ``videos.wait()`` waits for those
        being written. Recorded by ``video_every`` and ``evaluate(record_video=True)``."""
        return self._ctx.videos.videos

    def card(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        episodes: int | None = None,
        seed: int = 0,
        overwrite: bool = False,
    ) -> Any:
        """Write the run's model card, ``README.md`` in ``path`` (default: ``checkpoint_dir``) and
        return it (a :class:`~workbench.card.ModelCard`, shown as Markdown in a notebook): agent, env,
        hyperparameters, device, versions; ``episodes`` deterministic episodes (default
        ``eval_episodes``) from ``seed`` as the evaluation table; the curves; the last video; how to
        load and play it. Unless ``path`` holds a saved run, the run is saved to ``path/latest`` first.

        A ``README.md`` or ``curves.png`` there that the card did not write (or a link) is refused
        with ``FileExistsError`` before anything is saved or played, unless ``overwrite=True``."""
        from .card import CARD_NAME, check_card_folder, write_card

        if episodes is not None and (not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1):
            raise ValueError(f"card: episodes must be an integer >= 1, got {episodes!r}")
        state = self._ctx.state
        folder = os.fspath(path) if path is not None else os.path.dirname(video_folder(state))
        check_card_folder(folder, overwrite=overwrite)
        if not os.path.isfile(os.path.join(folder, "meta.json")):
            self.save(os.path.join(folder, "latest"))
        self.videos.wait()
        source = eval_source(state)
        card = write_card(
            folder,
            env=source,
            episodes=episodes or self.eval_episodes,
            seed=seed,
            evaluate=source is not None,
            signals=self.signals,
            videos=list(self.videos),
            overwrite=overwrite,
        )
        assert card.path.endswith(CARD_NAME)
        return card

    def save(self, path: str | os.PathLike[str], *, memory: bool = False, overwrite: bool = False) -> str:
        """Save the run (weights, optimizer, counters, schedules, signals; replay memory with
        ``memory=True``) to a directory, or a ``.zip`` when ``path`` ends so. Returns the path.
        An existing ``path`` is replaced only when it is a checkpoint (or an empty directory), unless
        ``overwrite=True``; saves to one path from several threads take turns."""
        c = self._ctx.control
        with c.cond:
            # Save a consistent state: a running session is paused for the write, then continues.
            was_running = c.status == "running" and not c.in_loop_thread()
            if was_running:
                c.pause()
        try:
            return write_run(self._ctx, path, memory=memory, overwrite=overwrite)
        finally:
            if was_running:
                c.resume()

    @classmethod
    def reopen(
        cls,
        path: str | os.PathLike[str],
        env: Any = None,
        *,
        external: bool = False,
        allow_encoders: Any = None,
        device: Any = "auto",
        **kwargs: Any,
    ) -> Session:
        """Rebuild a saved session to continue training exactly where it stopped: counters,
        optimizer moments, schedules, signals and saved memory (``wb.Session.reopen(path, env)``).
        ``Session.reopen(path, external=True)`` continues it as an env-less session driven by the
        application (:meth:`external`; any saved run, whatever trained it). ``allow_encoders``
        lists the custom encoders' import paths it may build (see ``wb.load``); ``kwargs`` are
        :class:`Session`'s (the saved seed by default). ``device`` is where the agent trains on
        (``"auto"`` by default; a saved run holds no device, see docs/devices.md).
        ``Session.resume(path, env)`` is the old, deprecated spelling."""
        saved = read_saved(path, env, external, allow_encoders, device, kwargs)
        if external:
            session = cls.external(saved.agent, **saved.kwargs)
        else:
            session = cls(saved.agent, saved.env, **saved.kwargs)
        restore(session._ctx, saved)
        return session

    # -- an env-less session, driven by the application ----------------------------------------

    @classmethod
    def external(
        cls, agent: Agent, *, max_lag: int | None = None, max_queued: int = 100_000, **options: Any
    ) -> Session:
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
        None (the default) never holds up the caller, as a service needs. ``max_queued`` bounds the
        unlearned backlog: transitions kept per env slot at most (more are dropped, counted in the
        runner's ``dropped``); its memory is about ``max_queued * n_envs`` transitions (docs/external.md).
        Status, pause, resume, stop, signals, the dashboard, ``stop_when``, ``save``, ``wb.load`` and
        ``Session.reopen(path, external=True)`` work as in every session (episodes still live at a
        save are not saved: the resumed session starts with none).

        Each episode holds one of the agent's ``n_envs`` env slots from its first ``act`` to the
        feedback that ends it (at most ``n_envs`` at once): see docs/external.md.
        """
        return cls(agent, external_source(agent, max_lag, max_queued, options), **options)

    def serve(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None, **options: Any) -> Any:
        """Serve this external session's ``act``/``feedback`` over HTTP and WebSocket from a background
        thread; returns the server (``server.url``: the bound address, ``port=0`` a free port). Another
        interface than loopback needs ``token=``. ``options`` (limits, timeouts, batching): docs/serve.md."""
        try:
            from .serve.server import serve
        except ImportError as exc:
            raise ImportError(f"serve() needs the server stack: pip install 'rl-workbench[serve]' ({exc})") from exc
        return serve(self, host, port, token, **options)

    def act(self, obs: Any, episode: Any = None, action_mask: Any = None) -> Any:
        """The action for ``obs`` in ``episode`` (an external session; safe from any thread).

        ``episode`` is any hashable id (a user, a connection); omitted, one default episode. The
        first ``act`` of an episode starts it; every ``act`` must be followed by :meth:`feedback`
        for the same episode before the next (a ``RuntimeError`` naming the episode otherwise).
        The action is decided with the current weights, exploring as training does, in every
        status: also while paused, stopped or before ``start`` (nothing waits for the loop).
        ``action_mask`` (True where allowed), or a Dict observation's ``"action_mask"`` key,
        restricts the action as in ``agent.decide``.
        Several agents: ``act({agent_id: obs}, episode=...)`` -> ``{agent_id: action}`` (docs/multi_agent.md).
        """
        return external_act(self._ctx.loop.external_runner("act"), self.agent, obs, _episode_key(episode), action_mask)

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
        Several agents: ``feedback({agent_id: reward}, {agent_id: next_obs}, ...)`` (docs/multi_agent.md).
        """
        external = self._ctx.loop.external_runner("feedback")
        if info is not None and not isinstance(info, dict):
            raise TypeError(f"feedback() got info={info!r}: pass the env's info dict or leave it out")
        external_feedback(external, self.agent, reward, next_obs, terminated, truncated, _episode_key(episode), info)

    @property
    def live_episodes(self) -> list[Any]:
        """An external session's episodes started and not yet ended (the default one as None)."""
        external = self._ctx.loop.external_runner("live_episodes")
        return [None if e is DEFAULT_EPISODE else e for e in external.live_episodes]

    def dashboard(self) -> Any:
        """The live notebook dashboard for this session (an ipywidgets widget)."""
        return views.view("session", self)

    def _ipython_display_(self) -> None:
        views.display(self)  # one live dashboard (one refresh timer) however often a cell shows it


def _log_value(name: str, value: Any) -> float:
    """A logged value as a float; a string (even ``"0.5"``) or a non-number is a ``TypeError``."""
    if isinstance(value, str | bytes):
        raise TypeError(f"Session.log({name!r}) needs a number, got the string {value!r}: pass float(...) of it")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"Session.log({name!r}) needs a number, got {value!r}") from None


def _source_and_loop(agent: Agent, env: Any, dataset: Any, eval_env: Any) -> tuple[EnvSource, Loop]:
    """Where a session's envs come from, and its loop: the kind of session is the loop it composes."""
    if agent.offline:
        return offline_loop.offline_source(agent, env, dataset, eval_env), OfflineLoop()
    if isinstance(env, ExternalSource):  # Session.external: the application's envs
        return env, ExternalLoop(env.runner)
    if env is None:
        if agent.env_source is None:
            raise TypeError("Session needs an env: the agent was built from spaces alone")
        return agent.env_source, EnvLoop()
    source = as_env_source(env)
    if source.find_parallel() is not None:  # a PettingZoo ParallelEnv (or its factory): the agent's rows must fit
        from .parallel.multiagent import check_agent_fits

        check_agent_fits(agent, source.parallel)
    else:
        _check_same_spaces(agent, *source.spaces())
    return source, EnvLoop()


def _selfplay_env(agent: Agent, source: Any, num_workers: int) -> SelfPlay | None:
    """The run's :class:`~workbench.SelfPlay` env, bound to ``agent`` (None for other envs)."""
    if not isinstance(source, EnvSource) or not isinstance(source.instance, SelfPlay):
        return None
    if num_workers != 1:
        raise ValueError(
            f"Session num_workers={num_workers} with a wb.SelfPlay env: self-play steps its game in the training "
            "thread, where its opponents act with the learner's weights; use num_workers=1"
        )
    source.instance.bind(agent)
    return source.instance


def _checkpoint_dir(agent: Agent, every: int | None, directory: str | os.PathLike[str] | None) -> str | None:
    """Where periodic checkpoints go: ``directory``, else (with ``checkpoint_every``) a sensible
    place by default, ``runs/<algorithm>-<date>-<time>`` (``session.checkpoint_dir`` says where)."""
    if every is not None and directory is None:
        directory = os.path.join("runs", f"{agent.algorithm.lower()}-{time.strftime('%Y%m%d-%H%M%S')}")
    if directory is not None:  # a file there is found now, not when the first checkpoint or video is due
        check_folder(directory, owner="Session", argument="checkpoint_dir")
    return None if directory is None else os.fspath(directory)


def _episode_key(episode: Any) -> Any:
    return DEFAULT_EPISODE if episode is None else episode


# The views' warm-up (a kernel imports them in the background); workbench/__init__.py calls it at import.
_warm_views = views.warm


def _eval_source(source: EnvSource, eval_env: Any, eval_every: int | None, video_every: int | None) -> Any:
    """The env ``evaluate()`` plays on: ``eval_env``, else (with ``eval_every`` or ``video_every``) a
    copy of the session's; with ``video_every`` it must render frames, found now, not at the first
    video (``check_renders`` reads ``render_mode``, it steps nothing)."""
    found = _evaluated_source(source, eval_env, eval_every or video_every)
    if video_every is not None:
        check_renders(found, "Session(video_every=...)")
    return found


def _evaluated_source(source: EnvSource, eval_env: Any, eval_every: int | None) -> EnvSource | None:
    if eval_env is not None:
        try:
            return as_env_source(eval_env)
        except (TypeError, ValueError) as exc:
            raise ArgumentError(f"Session got eval_env={eval_env!r}: {exc}") from None
    if eval_every is None:
        return None
    if source.can_copy:
        return source
    raise ValueError(
        "eval_every needs a separate env to evaluate on, and an env instance cannot be "
        "copied: pass eval_env=MyEnv(...) (or give the session a factory)"
    )


def _session_defaults() -> dict[str, Any]:
    """The defaults of ``Session``'s arguments, for error messages."""

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
