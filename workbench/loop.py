"""The step contract and the loop, written once.

Every agent speaks four verbs (``decide``/``act``, ``observe``, ``ready``, ``update``), and every
place that steps envs goes through the functions here:

* :func:`env_step` is *the* step: the agent decides, the envs step, and one :class:`Transitions`
  row per env comes back with the :class:`Step`'s ``extras`` inside. The session's loop, local
  workers (through the session) and Ray workers (through :func:`collect`) all call it.
* :class:`EpisodeTracker` is the one place that adds rewards up into episodes.
* :func:`play_episode` is the one play loop, used by ``Agent.play``, ``Session.evaluate`` (through
  ``play``) and the notebook play viewer.

``extras`` is how an agent hands itself what a step needs later (Acme's ``Adder.add(action,
next_timestep, extras)`` is the model): PPO's values and log-probabilities today; recurrent state
and action masks travel the same way. No agent attribute is written by ``act`` and read by
``observe``, so a step can be taken in one process and learned from in another.

This module sits at the bottom of the layers: it knows agents only by these verbs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from .envs.actions import env_action_converter
from .envs.atari import GAME_END_KEY, real_episodes
from .envs.core import SUCCESS_KEY, checked_reset, checked_step
from .envs.masks import NEXT_MASK_KEY, MaskReader

if TYPE_CHECKING:
    from .agents.contract import Agent

__all__ = [
    "NO_EXTRAS",
    "Episode",
    "EpisodeTracker",
    "PlayStep",
    "Step",
    "Transitions",
    "collect",
    "env_step",
    "finish_step",
    "play_episode",
]

NO_EXTRAS: Mapping[str, np.ndarray] = MappingProxyType({})
"""The extras of a step that needs nothing later (read-only, shared)."""


class Step(NamedTuple):
    """What an agent decided for a batch of observations.

    ``actions`` has one row per env; ``extras`` maps a name to an array with one row per env,
    holding what the agent will need when it observes this step (for example PPO's ``values``
    and ``log_probs``). The loop passes ``extras`` back unchanged inside :class:`Transitions`.
    """

    actions: np.ndarray
    extras: Mapping[str, np.ndarray] = NO_EXTRAS


class Transitions(NamedTuple):
    """One env step of every env, as arrays with a leading ``num_envs`` axis.

    ``next_obs`` holds the true last observation for envs whose episode just ended (the env has
    already been reset; the loop passes the new episode's first observation to the next decision).
    ``extras`` are the :class:`Step` extras of the decision that chose ``actions``.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    extras: Mapping[str, np.ndarray] = NO_EXTRAS


class _Decider(Protocol):
    def decide(self, obs: Any, deterministic: bool = False, action_mask: Any = None) -> Step: ...

    def begin_episode(self, done: np.ndarray) -> None: ...


class _VectorEnv(Protocol):
    # Read only here: the envs' action masks, None when they give none (workbench.envs.masks), and
    # Atari training envs' whole games' raw scores (workbench.envs.atari).
    @property
    def masks(self) -> np.ndarray | None: ...

    @property
    def final_masks(self) -> np.ndarray | None: ...

    @property
    def game_ends(self) -> np.ndarray | None: ...

    @property
    def successes(self) -> np.ndarray | None: ...  # goal envs: info["is_success"] of the ended episodes (NaN elsewhere)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...


def env_step(agent: _Decider, envs: _VectorEnv, obs: np.ndarray) -> tuple[Transitions, np.ndarray]:
    """Take one step of every env: the agent decides, the envs step.

    Returns the step's transitions and the observations to decide on next (the first observation
    of a new episode where one ended). The agent hears of ended episodes (``begin_episode``)
    before its next decision, wherever the step ran.

    Envs that give action masks (their ``masks``, see ``workbench.envs.masks``) have them passed to
    ``decide``; the extras then carry ``"action_mask"`` (from the agent) and ``"next_action_mask"``
    (the masks of ``next_obs``, added here).
    """
    masks = envs.masks
    step = agent.decide(obs) if masks is None else agent.decide(obs, action_mask=masks)
    return finish_step(agent, envs, obs, step, envs.step(step.actions))


def finish_step(
    agent: _Decider,
    envs: _VectorEnv,
    obs: np.ndarray,
    step: Step,
    stepped: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[Transitions, np.ndarray]:
    """The second half of :func:`env_step`, for a runner that takes the decision and the envs' step its
    own way (local workers' double-buffered sampling: two halves decided and stepped in turn): the
    :class:`Transitions` of ``step`` on ``obs`` whose envs returned ``stepped`` (``envs.step``'s answer),
    with the envs' masks, whole games and successes in the extras; tells the agent of ended episodes."""
    next_obs, rewards, terminated, truncated, final_obs = stepped
    extras: Mapping[str, Any] = step.extras
    if envs.masks is not None:  # envs that give masks give them from their first reset on
        extras = {**extras, NEXT_MASK_KEY: envs.final_masks}
    game_ends = envs.game_ends
    if game_ends is not None:  # Atari training envs: whole games' raw scores (workbench.envs.atari)
        extras = {**extras, GAME_END_KEY: game_ends}
    successes = envs.successes
    if successes is not None:  # goal envs: info["is_success"] of the episodes that ended (NaN elsewhere)
        extras = {**extras, SUCCESS_KEY: successes}
    done = terminated | truncated
    if done.any():
        agent.begin_episode(done)
    return Transitions(obs, step.actions, rewards, final_obs, terminated, truncated, extras), next_obs


def collect(agent: _Decider, envs: _VectorEnv, obs: np.ndarray, steps: int) -> tuple[Transitions, np.ndarray]:
    """Take ``steps`` steps with :func:`env_step`; return them stacked (a leading time axis on every
    field, extras included) and the observations to continue from. Remote workers run this and
    send the result back for the learner to observe row by row."""
    rows: list[Transitions] = []
    for _ in range(steps):
        row, obs = env_step(agent, envs, obs)
        rows.append(row)
    return stack_transitions(rows), obs


def stack_transitions(rows: list[Transitions]) -> Transitions:
    """Rows of one step each, stacked along a new leading time axis."""
    first = rows[0]
    fields = [np.stack([np.asarray(getattr(r, name)) for r in rows]) for name in Transitions._fields[:-1]]
    extras = {key: np.stack([r.extras[key] for r in rows]) for key in first.extras if key != SUCCESS_KEY}
    if any(SUCCESS_KEY in r.extras for r in rows):  # reported from some step on: NaN (no episode ended) before
        n = len(first.rewards)
        extras[SUCCESS_KEY] = np.stack([r.extras.get(SUCCESS_KEY, np.full(n, np.nan)) for r in rows])
    return Transitions(*fields, extras=extras)  # type: ignore[misc, arg-type]  # the fields before extras


def concat_envs(parts: list[Transitions]) -> Transitions:
    """Stacked transitions of several groups of envs (one per worker) joined along the env axis."""
    fields = [np.concatenate([getattr(p, name) for p in parts], axis=1) for name in Transitions._fields[:-1]]
    extras = {
        key: np.concatenate([p.extras[key] for p in parts], axis=1) for key in parts[0].extras if key != SUCCESS_KEY
    }
    if any(SUCCESS_KEY in p.extras for p in parts):  # a group whose envs reported none: NaN rows
        extras[SUCCESS_KEY] = np.concatenate(
            [p.extras.get(SUCCESS_KEY, np.full(p.rewards.shape, np.nan)) for p in parts], axis=1
        )
    return Transitions(*fields, extras=extras)  # type: ignore[misc, arg-type]  # the fields before extras


def row(stacked: Transitions, t: int) -> Transitions:
    """Step ``t`` of stacked transitions."""
    return Transitions(  # type: ignore[misc]  # the fields before extras
        *(getattr(stacked, name)[t] for name in Transitions._fields[:-1]),
        extras={key: value[t] for key, value in stacked.extras.items()},
    )


class Episode(NamedTuple):
    """An episode that just ended in env ``env``."""

    env: int
    reward: float
    length: int


class EpisodeTracker:
    """Running return and length of every env's episode; reports the ones that end."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def add(self, rewards: np.ndarray, done: np.ndarray) -> list[Episode]:
        """Count one step of every env; return the episodes that ended with it."""
        self.returns += rewards
        self.lengths += 1
        if not done.any():
            return []
        ended = [Episode(int(i), float(self.returns[i]), int(self.lengths[i])) for i in np.flatnonzero(done)]
        self.returns[done] = 0.0
        self.lengths[done] = 0
        return ended

    @staticmethod
    def games(game_ends: np.ndarray) -> list[Episode]:
        """The whole games that ended (rows of a step's ``"game_end"`` extras that are not NaN):
        the raw score and length of each, for envs whose training episodes end earlier (a lost
        life in ``workbench.envs.atari.AtariTraining``)."""
        return [
            Episode(int(i), float(game_ends[i, 0]), int(game_ends[i, 1]))
            for i in np.flatnonzero(~np.isnan(game_ends[:, 0]))
        ]


class PlayStep(NamedTuple):
    """One moment of :func:`play_episode`. ``t == 0`` is the reset (``action`` None, reward 0);
    ``t >= 1`` follows the ``t``-th env step. ``frame`` is ``env.render()`` there, when asked for."""

    t: int
    obs: Any
    action: Any
    reward: float
    done: bool
    frame: Any = None


def play_episode(
    agent: Agent,
    env: Any,
    *,
    seed: int | None = None,
    deterministic: bool = True,
    max_steps: int | None = None,
    render: bool = False,
) -> Iterator[PlayStep]:
    """Play one episode of ``env`` (one gymnasium env instance) with ``agent``, moment by moment.

    Yields the reset, then one :class:`PlayStep` per env step; the episode ends when the env
    terminates or truncates, or after ``max_steps`` steps. With ``render=True`` each moment carries
    ``env.render()``. Nothing is learned: the caller puts the agent in play mode.
    """
    # Whole games with raw rewards, even where training ends episodes on a lost life (Atari).
    with real_episodes(env):
        reset = env.reset(seed=seed)
        obs = checked_reset(reset, "env.reset")
        masks = MaskReader(env, env.action_space)
        mask = masks.read(obs, reset[1])
        # A new episode: an agent with memory (RecurrentPPO's LSTM state) starts it afresh.
        agent.begin_episode(np.ones(1, dtype=bool))
        convert = env_action_converter(env.action_space)
        yield PlayStep(0, obs, None, 0.0, False, env.render() if render else None)
        t = 0
        while True:
            if mask is None:
                action = convert(agent.act(obs, deterministic=deterministic))
            else:
                action = convert(agent.act(obs, deterministic=deterministic, action_mask=mask))
            t += 1
            where = f"env.step at step {t} of the episode"
            obs, reward, terminated, truncated, info = checked_step(env.step(action), where)
            done = terminated or truncated or (max_steps is not None and t >= max_steps)
            if mask is not None and not done:
                mask = masks.read(obs, info)
            yield PlayStep(t, obs, action, reward, done, env.render() if render else None)
            if done:
                return


def play_episodes(
    agent: Agent, env: Any, episodes: int, seed: int | None = None, **options: Any
) -> Iterator[tuple[int, Iterator[PlayStep]]]:
    """``episodes`` episodes of ``env`` one after another, as ``(episode, its moments)``: episode ``i``
    reset with ``seed + i`` (unseeded when ``seed`` is None), each played by :func:`play_episode` with
    ``options`` (``deterministic``, ``max_steps``, ``render``)."""
    for episode in range(episodes):
        yield episode, play_episode(agent, env, seed=None if seed is None else seed + episode, **options)
