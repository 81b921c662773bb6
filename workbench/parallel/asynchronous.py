"""Learning while acting: a sampler thread keeps the envs stepping while the learner updates.

:class:`AsyncRunner` wraps the runner that steps the envs (local worker processes, or in-process envs)
for an asynchronous agent (``agent.asynchronous``: IMPALA, APPO). A sampler thread acts with a replica
of the agent (same class and hyperparameters, on the CPU) holding the newest weights the learner has
published, steps the envs through the wrapped runner's ``transitions`` (:func:`workbench.loop.env_step`,
the one step function, or local workers' double-buffered halves), and queues whole rollouts of
``rollout_steps`` steps, each tagged with the learner update whose weights chose its actions. The learner
(the session's training thread) takes the rollouts row by row through the usual runner interface, so the
session's loop, pause, stop, live edits, ``call_env`` and signals work unchanged; the behaviour policy's
log-probabilities travel in each step's ``extras``.

A rollout older than ``agent.max_policy_lag`` learner updates when the learner reaches it is dropped and
counted. Episodes are counted by the sampler over every step, dropped rollouts included, and reported
with the next rollout the learner takes. Worker processes release the GIL while they step, and torch
releases it in its kernels, so on two cores the learner's update and the envs' steps overlap.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..agents.registry import config_values
from ..envs.atari import GAME_END_KEY
from ..loop import Episode, EpisodeTracker, Transitions, row, stack_transitions
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["AsyncRunner"]

QUEUE_ROLLOUTS = 2
"""Rollouts the sampler may have waiting for the learner; then it waits too (a paused run steps this many more)."""
_POLL_S = 0.05
_JOIN_S = 5.0
_SIGNAL_INTERVAL_S = 1.0


class _Rollout:
    """One queued rollout: the stacked transitions, the observations after it, the learner update whose
    weights stepped it, and the episodes that ended at each of its steps."""

    def __init__(self, data: Transitions, last_obs: np.ndarray, version: int, episodes: list[list[Episode]]) -> None:
        self.data, self.last_obs, self.version, self.episodes = data, last_obs, version, episodes
        self.length = int(data.rewards.shape[0])


class AsyncRunner(Runner):
    """Steps ``inner``'s envs in a sampler thread with an acting replica of ``agent``, rollout after
    rollout, while the learner takes the queued rollouts (see the module's docstring).

    Signals (``drain_signals``): ``policy_lag`` (learner updates between the weights that stepped a
    rollout and the learner taking it, one value per rollout), ``batches_dropped`` (rollouts dropped so
    far for lagging more than ``max_policy_lag``), ``sampler_steps_per_second`` (env steps the sampler
    takes), ``learner_steps_per_second`` (env steps the learner takes in) and ``learner_idle_fraction``
    (the share of time the learner waited for a rollout), each about once a second."""

    persistent = False  # the sampler thread and its replica belong to one run
    inner: Any
    """The runner whose envs it steps: in-process envs or local workers (a Runner with a vector env's ``step``)."""

    def __init__(self, inner: Any, agent: Agent, queue_rollouts: int = QUEUE_ROLLOUTS) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.num_envs = inner.num_envs
        self.envs_per_worker = inner.envs_per_worker
        self.can_interrupt = inner.can_interrupt
        self.chunk = int(agent.rollout_steps or 32)
        self._agent = agent  # the learner: its weights are published, its update count dates rollouts
        self._spaces = (agent.observation_space, agent.action_space)
        config = config_values(agent.config)
        # The replica acts on the CPU, eagerly, in fp32, whatever the learner's device: it loads its weights.
        self._config = {**config, **{k: v for k, v in (("compile", False), ("precision", "fp32")) if k in config}}
        self._replica: Any = None
        self._replica_version = -1
        self._weights: tuple[int, Any] | None = None  # (learner update, network weights), newest published
        self._edits: dict[str, Any] = {}
        self._queue: queue.Queue[_Rollout] = queue.Queue(maxsize=queue_rollouts)
        self._env_lock = threading.Lock()  # one env step, or a call_env / random-stream read, at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._current: _Rollout | None = None
        self._t = 0
        self._ended: list[Episode] = []
        self._carried: list[Episode] = []  # episodes of dropped rollouts, reported with the next one taken
        self._pending: list[tuple[str, float]] = []
        self.dropped = 0
        self._sampled = 0  # env steps the sampler took (in the signal window)
        self._learned = 0  # env steps the learner took in (in the signal window)
        self._idle = 0.0  # seconds the learner waited (in the signal window)
        self._window = time.perf_counter()

    # -- what the base class declares ------------------------------------------------------------

    @property
    def stepping(self) -> int | None:  # type: ignore[override]
        """The env whose ``step`` runs now in this process (in-process envs), for a stuck run's message."""
        return self.inner.stepping

    def reset(self) -> np.ndarray:
        """Reset the envs, then start the sampler from their first observations."""
        self._stop_sampler()
        obs = self.inner.reset()
        self._current, self._t = None, 0
        self._acting_replica()
        self._publish()  # the first rollout is stepped with the learner's weights as they are now
        self._start(obs)
        return obs

    def wait_ready(self, timeout: float) -> bool:
        """True when a rollout row is ready for the learner; waits up to ``timeout`` seconds for the next
        rollout (so a pause or a stop lands while the learner waits)."""
        if self._current is not None and self._t < self._current.length:
            return True
        self._publish()  # the learner may have updated since its last step: the sampler acts with that
        return self._next(timeout)

    def transitions(self, agent: Agent, obs: Any) -> tuple[Transitions, Any]:
        """The next step of every env as the sampler took it (``obs`` is where the sampler was: it
        steps on from there itself); publishes the learner's weights when they changed."""
        self._publish()
        while self._current is None or self._t >= self._current.length:
            self._next(_POLL_S)
        current, t = self._current, self._t
        self._t += 1
        self._learned += self.num_envs
        self._ended = current.episodes[t]
        if t == 0 and self._carried:
            self._ended, self._carried = self._carried + self._ended, []
        next_obs = current.data.obs[t + 1] if t + 1 < current.length else current.last_obs
        return row(current.data, t), next_obs

    def ended_episodes(self) -> list[Episode] | None:
        """The episodes that ended at the last step taken (the sampler counts every step, a dropped
        rollout's too: those are reported with the next rollout taken)."""
        return self._ended

    def drain_signals(self) -> list[tuple[str, float]]:
        """The inner runner's signals and this one's (see the class docstring)."""
        now = time.perf_counter()
        seconds = now - self._window
        if seconds >= _SIGNAL_INTERVAL_S:
            self._pending += [
                ("sampler_steps_per_second", self._sampled / seconds),
                ("learner_steps_per_second", self._learned / seconds),
                ("learner_idle_fraction", min(1.0, self._idle / seconds)),
            ]
            self._window, self._sampled, self._learned, self._idle = now, 0, 0, 0.0
        pending, self._pending = self._pending, []
        return self.inner.drain_signals() + pending

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``session.call_env``: between two of the sampler's steps."""
        with self._env_lock:
            return self.inner.call(name, args, kwargs)

    def set_config(self, values: dict[str, Any]) -> None:
        """A live edit reaches the acting replica before its next rollout."""
        self._config.update(values)
        self._edits.update(values)

    def interrupt(self) -> None:
        """End a hung step: the inner runner kills its workers (the sampler then reports the error)."""
        self.inner.interrupt()

    def rng_states(self) -> list[Any] | None:
        """The envs' random streams as they are now (between two of the sampler's steps): the rollouts
        queued and not yet learned from are not replayed by a run resumed from them."""
        with self._env_lock:
            return self.inner.rng_states()

    def set_rng_states(self, states: list[Any]) -> None:
        """Continue these streams at the next :meth:`reset`."""
        self.inner.set_rng_states(states)

    def close(self) -> None:
        """Stop the sampler (the rollouts queued are dropped) and close the inner runner."""
        self._stop_sampler()
        self.inner.close()

    # -- the sampler ---------------------------------------------------------------------------

    def _start(self, obs: np.ndarray) -> None:
        self._stop.clear()
        self._error = None
        self._queue = queue.Queue(maxsize=self._queue.maxsize)
        self._thread = threading.Thread(target=self._sample, args=(obs,), name="workbench-sampler", daemon=True)
        self._thread.start()

    def _stop_sampler(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(_JOIN_S)
        if thread.is_alive():  # stuck inside an env step: end it the way a given-up run does
            self.inner.interrupt()
            thread.join(_JOIN_S)

    def _acting_replica(self) -> Any:
        """The replica the sampler acts with, built on first use (its seed derived from the learner's)."""
        if self._replica is None:
            seed = self._agent.seed
            self._replica = type(self._agent)(
                observation_space=self._spaces[0],
                action_space=self._spaces[1],
                seed=None if seed is None else int(seed) * 7919 + 104_729,
                device="cpu",
                **self._config,
            )
            self._replica.train()
        return self._replica

    def _sample(self, obs: np.ndarray) -> None:
        try:
            replica = self._acting_replica()
            tracker = EpisodeTracker(self.num_envs)
            while not self._stop.is_set():
                weights = self._weights
                if self._edits:
                    from ..agents.live import apply_edits

                    edits, self._edits = self._edits, {}
                    apply_edits(replica, edits)
                if weights is not None and weights[0] != self._replica_version:
                    replica.load_networks(weights[1])
                    self._replica_version = weights[0]
                rows: list[Transitions] = []
                episodes: list[list[Episode]] = []
                for _ in range(self.chunk):
                    with self._env_lock:
                        if self._stop.is_set():
                            return
                        # The inner runner's own step (env_step, or its double-buffered halves).
                        step, obs = self.inner.transitions(replica, obs)
                    rows.append(step)
                    self._sampled += self.num_envs
                    if GAME_END_KEY in step.extras:  # Atari training: whole games' raw scores
                        episodes.append(EpisodeTracker.games(step.extras[GAME_END_KEY]))
                    else:
                        episodes.append(tracker.add(step.rewards, step.terminated | step.truncated))
                rollout = _Rollout(stack_transitions(rows), obs.copy(), self._replica_version, episodes)
                while not self._stop.is_set():
                    try:
                        self._queue.put(rollout, timeout=_POLL_S)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # reported to the learner, which raises it in the training thread
            self._error = exc

    # -- the learner's side ----------------------------------------------------------------------

    def _publish(self) -> None:
        """Hand the learner's newest weights to the sampler (once per learner update)."""
        agent = self._agent
        if self._weights is None or self._weights[0] != agent.num_updates:
            self._weights = (agent.num_updates, agent.network_weights())

    def _next(self, timeout: float) -> bool:
        """Take the next rollout within ``timeout`` seconds, dropping those that lag too far; True
        when one is current. Raises the sampler's error."""
        start = time.perf_counter()
        try:
            while True:
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                left = timeout - (time.perf_counter() - start)
                try:
                    rollout = self._queue.get(timeout=max(left, 0.0)) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    if self._thread is None or not self._thread.is_alive():
                        if self._error is None:
                            raise RuntimeError("the sampler thread ended without a rollout") from None
                        continue
                    return False
                if self._keep(rollout):
                    self._current, self._t = rollout, 0
                    return True
        finally:
            self._idle += time.perf_counter() - start

    def _keep(self, rollout: _Rollout) -> bool:
        """Record the rollout's policy lag; False (dropped and counted) when it is over ``max_policy_lag``."""
        agent = self._agent
        lag = agent.num_updates - rollout.version
        bound = agent.max_policy_lag
        if bound is not None and lag > bound:
            self.dropped += 1
            self._carried += [e for ended in rollout.episodes for e in ended]
            self._pending.append(("batches_dropped", float(self.dropped)))
            return False
        self._pending.append(("policy_lag", float(lag)))
        return True
