"""Atari training wrappers: the rl-zoo's preprocessing that gymnasium's ``AtariPreprocessing`` lacks.

``workbench.envs.make_env`` builds an Atari id as Stable-Baselines3's ``AtariWrapper`` does for the
zoo's presets: gymnasium's ``AtariPreprocessing`` (up to 30 no-ops at reset, 4 frames skipped with the
last two max-pooled, 84x84 grayscale), then :class:`AtariTraining` (episodic life and reward clipping),
then :class:`FireReset` (press FIRE after every reset, a lost life's included, for games that wait for
it), then a 4-frame stack.

Where clipping happens, and why ``episode_reward`` stays the game's score: :class:`AtariTraining`
clips every reward to its sign and ends the training episode when a life is lost, so what the agent
learns from (the transitions' rewards and ``terminated``) is the zoo's. It also adds the raw rewards
of the whole game up, and when the real game ends it puts ``info["game_end"] = (score, length)``.
``VecEnv`` reads that into its ``game_ends`` array, the step's extras carry it
(:data:`GAME_END_KEY`), and the session records ``episode_reward`` and ``episode_length`` from it:
the unclipped score of a whole game, as the zoo's ``Monitor`` (which sits below its ``AtariWrapper``)
reports it. Play and evaluation (``workbench.loop.play_episode``) switch the wrapper off for the
episode (:func:`real_episodes`): real games, raw rewards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["GAME_END_KEY", "AtariTraining", "FireReset", "needs_fire", "real_episodes", "training_wrapper"]

GAME_END_KEY = "game_end"
"""The info key (and step extras key) of a real game's end: ``(score, length)``, the raw score."""


def _lives(env: gym.Env) -> int:
    ale = getattr(env.unwrapped, "ale", None)
    return int(ale.lives()) if ale is not None else 0


class FireReset(gym.Wrapper):
    """Press FIRE (then UP, as the zoo's ``FireResetEnv``) after every reset, for games whose play
    starts only then (Breakout, ...). :func:`needs_fire` says which games those are."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        """Reset, then FIRE and UP (resetting again if either ends the game)."""
        obs, info = self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def needs_fire(env: gym.Env) -> bool:
    """True when the game's action 1 is FIRE and it has at least 3 actions (the zoo's rule)."""
    meanings = env.unwrapped.get_action_meanings() if hasattr(env.unwrapped, "get_action_meanings") else []
    return len(meanings) >= 3 and meanings[1] == "FIRE"


class AtariTraining(gym.Wrapper):
    """Episodic life and reward clipping for training, with the raw game score kept.

    ``episodic_life``: losing a life ends the (training) episode with ``terminated=True``; the next
    ``reset`` then continues the same game with a no-op step, and only a real game over resets the
    game. ``clip_rewards``: rewards are their sign (-1, 0, 1). Either way, when the real game ends
    ``info[GAME_END_KEY]`` holds ``(raw score, steps)`` of the whole game (steps of the wrapped env,
    4 frames each after ``AtariPreprocessing``; the no-ops after lost lives and FIRE presses count).

    ``training`` (True) switches both off: :func:`real_episodes` sets it to False while an episode
    is played or evaluated, so those see whole games with raw rewards.
    """

    reports_game_ends = True

    def __init__(self, env: gym.Env, *, episodic_life: bool = True, clip_rewards: bool = True) -> None:
        super().__init__(env)
        self.episodic_life = episodic_life
        self.clip_rewards = clip_rewards
        self.training = True
        self._lives = 0
        self._game_over = True
        self._score = 0.0
        self._length = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        """A new game after a game over (or when not in training); after a lost life, the same game
        with one no-op step."""
        if self._game_over or not (self.training and self.episodic_life) or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
            self._score, self._length = 0.0, 0
        else:
            obs, reward, terminated, truncated, info = self.env.step(0)
            self._score += float(reward)  # the no-op is part of the game (as the zoo's Monitor counts it)
            self._length += 1
            if terminated or truncated:  # the no-op ended the game
                obs, info = self.env.reset(**kwargs)
                self._score, self._length = 0.0, 0
        self._game_over = False
        self._lives = _lives(self.env)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        """Step the game; in training, clip the reward and end the episode on a lost life."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._score += float(reward)
        self._length += 1
        if terminated or truncated:
            self._game_over = True
            info = {**info, GAME_END_KEY: (self._score, self._length)}
        if not self.training:
            return obs, reward, terminated, truncated, info
        lives = _lives(self.env)
        if self.episodic_life and 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        if self.clip_rewards:
            reward = float(np.sign(float(reward)))
        return obs, reward, terminated, truncated, info


def training_wrapper(env: gym.Env) -> Any:
    """The :class:`AtariTraining` wrapper inside ``env``'s wrapper chain, or None (found by its
    ``reports_game_ends`` mark, so a copy of this module loaded elsewhere is found too)."""
    inner: Any = env
    while inner is not None:
        if getattr(type(inner), "reports_game_ends", False):
            return inner
        inner = getattr(inner, "env", None)
    return None


@contextlib.contextmanager
def real_episodes(env: gym.Env) -> Iterator[None]:
    """Within the block, ``env``'s :class:`AtariTraining` (if any) gives whole games and raw rewards."""
    wrapper = training_wrapper(env)
    if wrapper is None:
        yield
        return
    was, wrapper.training = wrapper.training, False
    wrapper._game_over = True  # the episode played starts a new game
    try:
        yield
    finally:
        wrapper.training = was
        wrapper._game_over = True
