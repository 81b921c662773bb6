"""The application's envs: an env-less session's episodes, fed by ``act`` and ``feedback`` calls.

``Session.external(agent)`` trains on envs that live in the application (a service, a game, a
robot): the application asks for actions (``session.act(obs, episode=...)``) and reports what
followed (``session.feedback(reward, next_obs, terminated, truncated, episode=...)``) from any of
its threads. :class:`ExternalRunner` turns those calls into what the session's loop reads from every
runner, ``transitions(agent, obs) -> (Transitions, next_obs)``, so the loop, the ``ready``/``update``
schedule, signals, ``stop_when``, pause, stop and saving are the ones of every session.

How episodes map to the agent's env slots: the agent learns from ``agent.num_envs`` columns of
transitions in lockstep, as from a vector env (PPO's rollout of ``n_steps x n_envs``, GAE along each
column). Each episode takes a free slot at its first ``act`` and holds it until the ``feedback`` that
ends it (``terminated`` or ``truncated``), so every column is one stream of whole episodes, as in a
vector env, and nothing is cut or reordered. Hence:

* at most ``n_envs`` episodes are live at once: ``act`` for one more raises a ``RuntimeError``
  naming the episode and the fix (build the agent with a larger ``n_envs``, or end an episode);
* the loop takes one transition from every slot at a time, so learning proceeds at the pace of the
  slowest slot: drive ``n_envs`` episodes concurrently, or build the agent with ``n_envs=1`` for
  one stream (the off-policy agents' default). A free slot waits for the next episode to start.

Decisions are taken in the caller's thread, at ``act``, with the agent's current weights; the
step's extras (PPO's values and log-probabilities) travel with the episode to its transition.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import warnings
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from ..agents.base import Agent
from ..envs.actions import env_action_converter
from ..envs.core import EnvSource
from ..envs.masks import MASK_KEY, NEXT_MASK_KEY, check_masks, feedback_mask, mask_size
from ..loop import Episode, Transitions
from ..validation import check_value, integer, optional
from . import _OPTIONS, _RAY_OPTIONS
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = [
    "DEFAULT_EPISODE",
    "ExternalRunner",
    "ExternalSource",
    "episode_name",
    "external_source",
    "refuse_env_options",
]


class _DefaultEpisode:
    """The episode of ``act``/``feedback`` calls that name none."""

    def __repr__(self) -> str:
        return "<the default episode>"


DEFAULT_EPISODE: Hashable = _DefaultEpisode()
"""The key of the one episode used when ``act``/``feedback`` get no ``episode=``."""


def episode_name(episode: Hashable) -> str:
    """How an episode is named in messages."""
    return "the default episode" if episode is DEFAULT_EPISODE else f"episode {episode!r}"


@dataclass
class ExternalSource(EnvSource):
    """The env source of an external session: spaces only; no env can be built or stepped here."""

    observation_space: spaces.Space | None = None
    action_space: spaces.Space | None = None
    runner: ExternalRunner | None = field(default=None, compare=False, repr=False)
    """The runner the application's ``act``/``feedback`` calls feed (``Session.external``)."""

    def spaces(self) -> tuple[spaces.Space, spaces.Space]:
        """The agent's spaces (the application's env is never seen)."""
        assert self.observation_space is not None and self.action_space is not None
        return self.observation_space, self.action_space


_DECIDING = object()


class _Live:
    """One live episode: its slot, its running return and length, and the decision awaiting feedback."""

    __slots__ = ("length", "pending", "reward", "slot")

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.reward = 0.0
        self.length = 0
        # None, _DECIDING while act() decides, then (obs, action, extras) until the feedback.
        self.pending: Any = None


class ExternalRunner(Runner):
    """The runner of an external session (see the module docstring for the episode-to-slot rule).

    The application's threads call :meth:`act` and :meth:`feedback`; the session's loop calls
    :meth:`wait_ready`, :meth:`transitions` and :meth:`ended_episodes`, and the session says when a
    run starts and ends (:meth:`run_started`, :meth:`run_ended`): feedback is queued for learning
    before a run and during one (paused too), dropped after it (episodes still end).

    ``max_lag``: when set, ``feedback`` during a run (paused too) waits while more than ``max_lag``
    transitions await learning (queued, or taken by the loop and not yet observed and updated on)
    and the loop can learn (every slot has one, or it is learning from a step now), so an application that
    can outrun learning (a fast simulator, a test) stays in step with it and a pause pauses it too;
    it never waits for a slot that is empty (which one thread driving several episodes would fill
    only after this call returns). None: feedback never waits.
    ``max_queued``: transitions kept per slot at most (the unlearned backlog's memory bound: about
    ``max_queued * n_envs`` times two observations plus an action and the step's extras); more are
    dropped (counted in ``dropped``).
    """

    persistent = True
    backend = "external"
    starts_episodes = False  # the application starts them: act() tells a per-env agent of each (begin_episode)

    def __init__(self, agent: Agent, max_lag: int | None = None, max_queued: int = 100_000) -> None:
        self.agent = agent
        self.num_envs = agent.num_envs
        self.max_lag = max_lag
        self.max_queued = max_queued
        self.accepting = True
        self.learning = False
        self.started = False  # a run was started at least once (feedback before that warns once)
        self._told_to_start = False
        self.dropped = 0  # transitions not learned from (the run had ended, or a slot's queue was full)
        self._convert = env_action_converter(agent.action_space)
        self._cond = threading.Condition()
        self._live: dict[Hashable, _Live] = {}
        self._slot_owner: list[Hashable | None] = [None] * self.num_envs
        # Per slot: (obs, action, reward, next_obs, terminated, truncated, extras, ended episode or None)
        self._queues: list[deque[tuple[Any, ...]]] = [deque() for _ in range(self.num_envs)]
        # Transitions the loop has taken (transitions()) and is learning from now (observe, update):
        # they still await learning until the loop comes back for the next step (wait_ready()).
        self._learning_now = 0
        self._ended: list[Episode] = []
        # Experience batches of local-inference clients (ingest()) for an agent that observes rows in any
        # order: handed to it whole, several at a time, beside the slots' columns.
        self._chunks: deque[Any] = deque()
        self._chunk_rows = 0

    # -- the application's side ------------------------------------------------------------------

    @property
    def live_episodes(self) -> list[Hashable]:
        """The episodes started and not yet ended."""
        with self._cond:
            return list(self._live)

    def act(self, obs: Any, episode: Hashable = DEFAULT_EPISODE, action_mask: Any = None) -> Any:
        """The action for ``obs`` in ``episode`` (its first ``act`` starts it), in the env's format;
        ``action_mask`` (or a Dict observation's ``"action_mask"`` key) restricts it, as in ``decide``."""
        return self.act_many([obs], [episode], None if action_mask is None else [action_mask])[0]

    def act_many(
        self,
        observations: Sequence[Any],
        episodes: Sequence[Hashable],
        action_masks: Sequence[Any] | None = None,
        *,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """The actions for several episodes at once, decided in one forward pass of the agent (one
        ``decide`` on the batch of observations): ``observations[i]`` in ``episodes[i]``, restricted
        by ``action_masks[i]`` when given (None: no mask). Each entry is checked as :meth:`act`
        checks it, and the actions are those of :meth:`act` for a deterministic policy.

        A refused entry (a bad observation, an episode awaiting its feedback, no free slot) raises
        its error and no entry is decided; with ``return_exceptions=True`` the others are decided
        and the refused entry's place in the list holds its exception instead (a server answering
        many clients at once)."""
        n = len(observations)
        if len(episodes) != n:
            raise ValueError(f"act_many() got {n} observations and {len(episodes)} episodes: give one episode each")
        if action_masks is not None and len(action_masks) != n:
            raise ValueError(
                f"act_many() got {n} observations and {len(action_masks)} action masks: give one each "
                "(None for an episode without a mask)"
            )
        results: list[Any] = [None] * n
        failed = False
        claimed: list[tuple[int, Hashable, _Live, np.ndarray, np.ndarray | None]] = []
        for i in range(n):
            episode = episodes[i]
            try:
                live = self._claim(episode)
            except Exception as exc:
                results[i], failed = exc, True
                continue
            try:
                batch, mask = self._checked(observations[i], episode, None if action_masks is None else action_masks[i])
            except Exception as exc:
                self._release(episode, live)
                results[i], failed = exc, True
                continue
            claimed.append((i, episode, live, batch, mask))
        if failed and not return_exceptions:
            for _, episode, live, _, _ in claimed:
                self._release(episode, live)
            raise next(r for r in results if isinstance(r, Exception))
        if not claimed:
            return results
        try:
            obs = np.concatenate([c[3] for c in claimed]) if len(claimed) > 1 else claimed[0][3]
            # Each episode decides in its slot's row: an agent with per-env state (RecurrentPPO's
            # memory) moves only these rows on, and starts afresh the rows whose episode starts here.
            rows = [c[2].slot for c in claimed]
            starting = [c[2].slot for c in claimed if c[2].length == 0]
            if starting and self.agent.per_env_decisions:
                begins = np.zeros(self.num_envs, dtype=bool)
                begins[starting] = True
                self.agent.begin_episode(begins)
            if all(c[4] is None for c in claimed):
                step = self.agent.decide(obs, rows=rows)
            else:  # an episode without a mask allows every action
                allowed = np.ones(mask_size(self.agent.action_space) or 0, dtype=bool)
                masks = np.stack([allowed if c[4] is None else c[4] for c in claimed])
                step = self.agent.decide(obs, action_mask=masks, rows=rows)
        except BaseException as exc:
            for _, episode, live, _, _ in claimed:
                self._release(episode, live)
            if not return_exceptions or not isinstance(exc, Exception):
                raise
            for c in claimed:
                results[c[0]] = exc
            return results
        actions = np.asarray(step.actions)
        extras = {key: np.asarray(value) for key, value in step.extras.items()}
        with self._cond:
            for row, (_, _, live, batch, mask) in enumerate(claimed):
                mine = {key: value[row] for key, value in extras.items() if mask is not None or key != MASK_KEY}
                live.pending = (batch[0], actions[row], mine)
        for row, (i, *_) in enumerate(claimed):
            results[i] = self._convert(actions[row])
        return results

    def _claim(self, episode: Hashable) -> _Live:
        """Start ``episode`` or take its turn to act (a concurrent act or feedback for it now fails)."""
        _check_key(episode)
        with self._cond:
            live = self._live.get(episode)
            if live is None:
                live = self._start(episode)
            elif live.pending is not None:
                raise RuntimeError(
                    f"act() for {episode_name(episode)} before the feedback() of its previous action: every "
                    "act must be followed by feedback(reward, next_obs, terminated, truncated) for the same "
                    "episode (use episode= ids to run several episodes at once)"
                )
            live.pending = _DECIDING
            return live

    def _release(self, episode: Hashable, live: _Live) -> None:
        """An act that was refused or failed: the episode awaits an act again (and frees its slot if
        it never really started)."""
        with self._cond:
            live.pending = None
            if live.length == 0 and self._live.get(episode) is live:
                self._end(episode, live)

    def _checked(self, obs: Any, episode: Hashable, action_mask: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """One observation as a batch of one, and its checked mask row (or None), as ``act`` takes them."""
        if obs is None:
            raise TypeError(f"act() for {episode_name(episode)} got None as obs: pass the env's observation")
        batch = _one_observation(self.agent, obs, "act()", episode)
        if batch.dtype.kind == "f" and not np.isfinite(batch).all():
            raise ValueError(
                f"act() for {episode_name(episode)} got a NaN or infinite observation: {obs!r}. Training on it "
                "would break the weights; fix or drop the observation in the application"
            )
        if action_mask is None and isinstance(obs, dict) and MASK_KEY in obs:
            action_mask = obs[MASK_KEY]
        if action_mask is None:
            return batch, None
        agent = self.agent
        if not agent.supports_action_masks:
            raise TypeError(f"{agent.algorithm} does not take action masks: use an agent for Discrete actions")
        mask = check_masks(action_mask, agent.action_space, f"{agent.algorithm}'s action_mask")
        if len(mask) != 1:
            raise ValueError(
                f"act() for {episode_name(episode)} got {len(mask)} action masks: give one, for its one observation"
            )
        return batch, mask[0]

    def _start(self, episode: Hashable) -> _Live:
        free = [i for i, owner in enumerate(self._slot_owner) if owner is None]
        if not free:
            holders = ", ".join(episode_name(e) for e in self._slot_owner)
            raise RuntimeError(
                f"{episode_name(episode)} cannot start: the agent learns from {self.num_envs} env slot(s) "
                f"(n_envs={self.num_envs}) and every one holds a live episode ({holders}). Build the agent with "
                "n_envs= at least the number of concurrent episodes, or end an episode first with "
                "feedback(..., terminated=True or truncated=True)"
            )
        # The free slot with the fewest queued transitions, so the columns fill evenly.
        slot = min(free, key=lambda i: len(self._queues[i]))
        self._slot_owner[slot] = episode
        live = self._live[episode] = _Live(slot)
        return live

    def _end(self, episode: Hashable, live: _Live) -> None:
        del self._live[episode]
        self._slot_owner[live.slot] = None

    def feedback(
        self,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        episode: Hashable = DEFAULT_EPISODE,
        info: dict[str, Any] | None = None,
    ) -> Episode | None:
        """What followed the last ``act`` of ``episode``; returns the episode when this ended it.
        When its decisions are masked, the mask of ``next_obs`` (``info["action_mask"]`` or a Dict
        observation's key; all actions allowed when neither is given) goes with the transition,
        for agents whose targets look at the next state's allowed actions (DQN)."""
        _check_key(episode)
        reward = _number(reward, episode)
        terminated = _flag(terminated, "terminated", episode)
        truncated = _flag(truncated, "truncated", episode)
        next_batch = _one_observation(self.agent, next_obs, "feedback()", episode)
        if not self.started and not self._told_to_start:
            self._told_to_start = True
            warnings.warn(
                "feedback() to an external session that was never started: the transitions are queued "
                f"(up to max_queued={self.max_queued} per slot) but nothing learns from them until you call "
                "session.start(steps=...)",
                RuntimeWarning,
                stacklevel=3,
            )
        if not np.isfinite(next_batch).all():
            raise ValueError(f"feedback() for {episode_name(episode)} got a NaN or infinite next_obs: {next_obs!r}")
        with self._cond:
            live = self._live.get(episode)
            if live is None or not isinstance(live.pending, tuple):
                raise RuntimeError(
                    f"feedback() for {episode_name(episode)} without an act() awaiting it: call "
                    "session.act(obs, episode=...) first, then feedback() once for that action"
                )
            obs, action, extras = live.pending
            live.pending = None
            if MASK_KEY in extras:
                extras = {**extras, NEXT_MASK_KEY: self._next_mask(next_obs, info, episode)}
            live.reward += reward
            live.length += 1
            ended = None
            if terminated or truncated:
                ended = Episode(live.slot, live.reward, live.length)
                self._end(episode, live)
            queue = self._queues[live.slot]
            if self.accepting and len(queue) < self.max_queued:
                queue.append((obs, action, reward, next_batch[0], terminated, truncated, extras, ended))
                self._cond.notify_all()
            else:
                self.dropped += 1
            if self.max_lag is not None:
                # Held only while the loop can learn now (every slot has a transition): waiting while
                # a slot is empty would wait for a feedback this very thread may owe (one thread
                # driving several episodes), forever.
                # A step the loop has taken counts until it is learned from (observed, and the update
                # it allowed done), so with max_lag=0 the next act sees the weights, the exploration
                # rate and the random state that a step-by-step session has: the same run, call by
                # call, in process or served. Waiting for that step never waits on this thread.
                lag = self.max_lag
                self._cond.wait_for(
                    lambda: (
                        not self.learning
                        or sum(map(len, self._queues)) + self._learning_now <= lag
                        or (not self._learning_now and not self.ready())
                    )
                )
            return ended

    def _next_mask(self, next_obs: Any, info: dict[str, Any] | None, episode: Hashable) -> np.ndarray:
        where = f"feedback() for {episode_name(episode)}: the next action mask"
        return feedback_mask(self.agent.action_space, next_obs, info, where)

    def ingest(self, experience: Any) -> int:
        """Queue a local-inference client's experience batch (a checked
        :class:`~workbench.serve.batch.Experience`: one stream's steps, in order) for learning; returns
        the steps accepted, the others dropped and counted in ``dropped`` (the run has ended, the
        backlog is full, or no slot is free). Never waits.

        An agent that observes rows in any order (``agent.observes_unordered``: a one-step replay
        memory) gets the batch whole at its next step. Any other agent learns from columns: the batch
        goes to the free slot with the shortest backlog, as a piece of its column, and when it stops
        mid-episode its last step is marked truncated for learning, so nothing is chained across to the
        next piece (the agent bootstraps from that step's next observation, as at a time limit). A
        recurrent agent's pieces carry the memory state each step used among their extras, so its update
        resumes a piece that goes on with its episode from that state (RecurrentPPO)."""
        n = len(experience)
        with self._cond:
            if not self.accepting:
                self.dropped += n
                return 0
            if self.agent.observes_unordered:
                if self._chunk_rows + n > self.max_queued * self.num_envs:
                    self.dropped += n
                    return 0
                self._chunks.append(experience)
                self._chunk_rows += n
                self._cond.notify_all()
                return n
            free = [i for i, owner in enumerate(self._slot_owner) if owner is None]
            slot = min(free, key=lambda i: len(self._queues[i])) if free else None
            if slot is None or len(self._queues[slot]) + n > self.max_queued:
                self.dropped += n
                return 0
            ends = {row: Episode(slot, ret, length) for row, ret, length in experience.episodes}
            e = experience
            truncated = e.truncated.copy()
            if not (e.terminated[-1] or truncated[-1]):
                truncated[-1] = True  # the piece stops mid-episode: a cut, not an end (no episode is counted)
            queue = self._queues[slot]
            for t in range(n):
                extras = {key: value[t] for key, value in e.extras.items()}
                queue.append(
                    (
                        e.obs[t],
                        e.actions[t],
                        float(e.rewards[t]),
                        e.next_obs[t],
                        bool(e.terminated[t]),
                        bool(truncated[t]),
                        extras,
                        ends.get(t),
                    )
                )
            self._cond.notify_all()
            return n

    def run_started(self) -> None:
        """A run starts: feedback is learned from (and waits for learning, with ``max_lag``)."""
        with self._cond:
            self.accepting = self.learning = self.started = True
            self._learning_now = 0
            self._cond.notify_all()

    def run_ended(self) -> None:
        """The run has ended: later feedback is dropped, and no feedback waits any more."""
        with self._cond:
            self.accepting = self.learning = False
            self._learning_now = 0
            self._cond.notify_all()

    # -- the loop's side -------------------------------------------------------------------------

    def reset(self) -> np.ndarray:
        """Placeholder observations (the application's envs are reset by the application)."""
        return np.zeros((self.num_envs, *self.agent.obs_shape), dtype=np.float32)

    def ready(self) -> bool:
        """True when every slot has a transition queued, or an experience batch waits (the loop can take
        one step)."""
        return bool(self._chunks) or all(self._queues)

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a transition in every slot. The loop calls it before each
        step, so the step it took last has been learned from: feedback held by ``max_lag`` for it goes on."""
        with self._cond:
            if self._learning_now:
                self._learning_now = 0
                self._cond.notify_all()
            return self._cond.wait_for(self.ready, timeout=timeout)

    def transitions(self, agent: Agent, obs: Any) -> tuple[Transitions, np.ndarray]:
        """One queued transition of every slot (call once :meth:`wait_ready` said so)."""
        with self._cond:
            if self._chunks:
                return self._chunk_transitions(agent)
            rows = [queue.popleft() for queue in self._queues]
            self._learning_now = len(rows)  # until the loop's next wait_ready()
        self._ended = [row[7] for row in rows if row[7] is not None]
        keys = {key for row in rows for key in row[6]}
        if MASK_KEY in keys:  # episodes with masks and without in one batch: no mask allows all
            allowed = np.ones(mask_size(agent.action_space) or 0, dtype=bool)
            rows = [
                row if MASK_KEY in row[6] else (*row[:6], {**row[6], MASK_KEY: allowed, NEXT_MASK_KEY: allowed}, row[7])
                for row in rows
            ]
        extras = {key: np.stack([row[6][key] for row in rows]) for key in keys}
        next_obs = np.stack([row[3] for row in rows])
        transitions = Transitions(
            np.stack([row[0] for row in rows]),
            np.stack([row[1] for row in rows]),
            np.array([row[2] for row in rows], dtype=np.float32),
            next_obs,
            np.array([row[4] for row in rows], dtype=bool),
            np.array([row[5] for row in rows], dtype=bool),
            extras,
        )
        return transitions, next_obs

    def _chunk_transitions(self, agent: Agent) -> tuple[Transitions, np.ndarray]:
        """Queued experience batches as one step of the loop: ``agent.observe_rows`` rows at most (a batch
        is split where it runs past), so that the agent updates as often per env step as in process.
        Called holding the condition."""
        limit = max(1, agent.observe_rows)
        taken: list[Any] = []
        rows = 0
        while self._chunks and rows < limit:
            e = self._chunks[0]
            if rows + len(e) <= limit:
                taken.append(self._chunks.popleft())
                rows += len(e)
                continue
            cut = limit - rows  # the first rows now, the rest at the next step
            taken.append(_rows(e, slice(0, cut)))
            self._chunks[0] = _rows(e, slice(cut, None))
            rows += cut
        self._chunk_rows -= rows
        self._learning_now = rows
        ended = []
        for e in taken:
            ended += [Episode(0, ret, length) for _, ret, length in sorted(e.episodes)]
        self._ended = ended
        keys = {key for e in taken for key in e.extras}
        if MASK_KEY in keys:  # batches with masks and without: no mask allows all
            allowed = np.ones((1, mask_size(agent.action_space) or 0), dtype=bool)
            for e in taken:
                if MASK_KEY not in e.extras:
                    e.extras[MASK_KEY] = e.extras[NEXT_MASK_KEY] = np.repeat(allowed, len(e), axis=0)

        def cat(arrays: list[np.ndarray]) -> np.ndarray:
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

        next_obs = cat([e.next_obs for e in taken])
        transitions = Transitions(
            cat([e.obs for e in taken]),
            cat([e.actions for e in taken]),
            cat([e.rewards for e in taken]),
            next_obs,
            cat([e.terminated for e in taken]),
            cat([e.truncated for e in taken]),
            {key: cat([e.extras[key] for e in taken]) for key in keys},
        )
        return transitions, next_obs

    def ended_episodes(self) -> list[Episode]:
        """The episodes whose last transition was in the batch :meth:`transitions` just returned."""
        return self._ended

    @property
    def queued(self) -> int:
        """Transitions fed back and not yet learned from."""
        with self._cond:
            return sum(len(q) for q in self._queues) + self._chunk_rows

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``session.call_env`` has no env copies to reach here: a clear error."""
        raise ValueError(
            f"call_env({name!r}) calls a method on the session's env copies, but an external session has "
            "none (the application owns the env): call the method on your env directly"
        )

    def close(self) -> None:
        """Nothing to close: the envs belong to the application."""


def _rows(e: Any, rows: slice) -> Any:
    """The ``rows`` of an experience batch, as a batch (its ended episodes renumbered)."""
    start = rows.start or 0
    stop = len(e) if rows.stop is None else rows.stop
    return dataclasses.replace(
        e,
        obs=e.obs[rows],
        actions=e.actions[rows],
        rewards=e.rewards[rows],
        next_obs=e.next_obs[rows],
        terminated=e.terminated[rows],
        truncated=e.truncated[rows],
        extras={key: value[rows] for key, value in e.extras.items()},
        episodes=[(row - start, ret, length) for row, ret, length in e.episodes if start <= row < stop],
    )


def external_source(agent: Agent, max_lag: Any, max_queued: Any, options: dict[str, Any]) -> ExternalSource:
    """The env source of ``Session.external(agent, max_lag=..., max_queued=..., **options)``, holding
    its runner; refuses what an external session cannot honour (see :func:`refuse_env_options`)."""
    if not isinstance(agent, Agent):
        raise TypeError(
            "Session.external needs an agent such as wb.DQN(observation_space=..., action_space=...) "
            f"as its first argument, got {type(agent).__name__}"
        )
    refuse_env_options(agent, options)
    check_value("Session.external", "max_lag", max_lag, optional(integer(min=0)))
    check_value("Session.external", "max_queued", max_queued, integer(min=1))
    return ExternalSource(
        name="the application",
        observation_space=agent.observation_space,
        action_space=agent.action_space,
        runner=ExternalRunner(agent, max_lag=max_lag, max_queued=max_queued),
    )


def refuse_env_options(agent: Agent, options: dict[str, Any]) -> None:
    """Refuse what ``Session.external`` cannot honour: options about the session's own envs."""
    refused = [name for name in ("env", "num_workers", "backend", *_OPTIONS, *_RAY_OPTIONS) if name in options]
    if refused:
        raise TypeError(
            f"Session.external got {refused[0]}=: an external session has no env of its own to step "
            "(the application steps its env and calls act/feedback); leave it out, or use "
            "Session(agent, env, ...) to train on an env the session steps"
        )


def _one_observation(agent: Agent, obs: Any, call: str, episode: Hashable) -> np.ndarray:
    batch, single = agent.prepare_obs(obs)
    if not single:
        raise ValueError(
            f"{call} for {episode_name(episode)} got a batch of {len(batch)} observations: pass one "
            f"observation of shape {agent.obs_shape} (one call per episode)"
        )
    return batch


def _check_key(episode: Any) -> None:
    try:
        hash(episode)
    except TypeError:
        raise TypeError(f"episode= must be hashable (a str, an int, a tuple...), got {episode!r}") from None


def _number(value: Any, episode: Hashable) -> float:
    """The reward as an env's step() must give it (``workbench.envs``): an int or float, numpy's too,
    or a one-element array; a string ("1.5"), a bool or anything else float() happens to take is refused."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool | np.bool_):
        raise TypeError(
            f"feedback() for {episode_name(episode)} needs a number (int or float) as reward, got {value!r} "
            f"(a {type(value).__name__}); convert it first, e.g. float(text)"
        )
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"feedback() for {episode_name(episode)} got a NaN or infinite reward: {value!r}")
    return number


def _flag(value: Any, name: str, episode: Hashable) -> bool:
    if isinstance(value, np.ndarray) and value.ndim > 0:
        raise TypeError(
            f"feedback() for {episode_name(episode)} needs True or False as {name}, got an array {value!r}: "
            "one feedback() call per episode and step (episode= keys concurrent episodes)"
        )
    if isinstance(value, bool | np.bool_) or (isinstance(value, int | float | np.ndarray) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"feedback() for {episode_name(episode)} needs True or False as {name}, got {value!r}")
