"""A run's evaluations, with and without a video, and the list of its videos.

:func:`evaluate` is ``Session.evaluate``: deterministic episodes on the evaluation env, their mean
recorded as ``eval_reward``; with ``record_video=True`` the first episode is rendered into a bounded
clip (``workbench.video``) that a :class:`~workbench.video.VideoWriter` thread encodes into
``<checkpoint_dir>/videos/``. :class:`VideoJobs` holds a run's :class:`~workbench.video.Videos`
and its writer.

A video never fails the run: an env whose ``render()`` raises or gives no RGB frame loses that
video, the error joins ``session.videos.errors`` (a ``RuntimeWarning`` the first time) and the
``video_errors`` signal counts the videos lost so (docs/videos.md).
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

import numpy as np

from ..video import Video, Videos, VideoWriter, read_index, record_episode, render_env
from .interrupts import interruptible

__all__ = ["VIDEO_ERRORS", "VideoJobs", "eval_source", "evaluate", "video_folder"]

VIDEO_ERRORS = "video_errors"
"""The signal counting the evaluation videos lost because the env rendered no frame (cumulative)."""


def video_folder(state: Any) -> str:
    """``<checkpoint_dir>/videos``: beside the run's checkpoints. A run without a
    ``checkpoint_dir`` gets the default one (``runs/<algorithm>-<date>-<time>``) the first time."""
    if state.checkpoint_dir is None:
        state.checkpoint_dir = os.path.join("runs", f"{state.agent.algorithm.lower()}-{time.strftime('%Y%m%d-%H%M%S')}")
    return os.path.join(state.checkpoint_dir, "videos")


class VideoJobs:
    """A run's videos (:attr:`videos`) and the thread writing them (built on first use)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.videos = Videos()
        self.writer: VideoWriter | None = None
        self.encoder: Any = None  # fn(frames, path, fps): a benchmark's slow encoder; None: the real one
        directory = ctx.state.checkpoint_dir
        if directory is not None:  # a reopened run keeps listing the videos it wrote
            self.videos.replace(read_index(os.path.join(directory, "videos")))

    def submit(self, step: int, episode_return: float, frames: list[np.ndarray]) -> bool:
        """Hand a clip to the writer thread; returns at once."""
        state = self.ctx.state
        if self.writer is None:
            self.writer = VideoWriter(self.videos, state.video_options, self._written, self.encoder)
        return self.writer.submit(video_folder(state), step, episode_return, frames)

    def _written(self, video: Video) -> None:
        tracking = self.ctx.tracking
        if tracking is not None:
            tracking.log_video(video.step, video)


def eval_source(state: Any) -> Any:
    """The env evaluations play on: ``eval_env``, else the run's own env when it can be copied, else None."""
    if state.eval_source is not None:
        return state.eval_source
    return state.env_source if state.env_source.can_copy else None


def evaluate(ctx: Any, episodes: int | None, record_video: bool) -> float:
    """``Session.evaluate``: play deterministic episodes on the evaluation env, record the mean as
    ``eval_reward`` and return it; ``record_video`` renders the first episode into a video."""
    state = ctx.state
    source = eval_source(state)
    if source is None:
        raise ValueError(ctx.loop.no_eval_env())
    episodes = episodes or state.eval_episodes
    seed = None if state.seed is None else state.seed + 10_000 + state.steps
    with interruptible(ctx.control):  # Ctrl-C while a run trains beside it: the run stops too
        if record_video:
            returns = _with_video(ctx, source, episodes, seed)
        else:
            returns = list(state.agent.play(source, episodes=episodes, seed=seed))
    mean = float(np.mean(returns))
    state.signals.record("eval_reward", state.steps, mean, state.elapsed)
    return mean


def _with_video(ctx: Any, source: Any, episodes: int, seed: int | None) -> list[float]:
    """The evaluation's episodes, the first one rendered into a clip for the writer thread (the same
    seeds as without a video: ``seed + i`` for episode ``i``)."""
    state = ctx.state
    agent = state.agent
    env, owned = render_env(source, "a video of the evaluation")
    try:
        agent.check_spaces(env)
        was_training = agent.training
        agent.training = False
        try:
            with ctx.control.inside("a video's evaluation episode"):
                first, _, frames, error = record_episode(agent, env, state.video_options, seed=seed)
        finally:
            agent.training = was_training
        rest = (
            []
            if episodes == 1
            else list(agent.play(env, episodes=episodes - 1, seed=None if seed is None else seed + 1))
        )
    finally:
        if owned:
            env.close()
    if error is None:
        ctx.videos.submit(state.steps, first, frames)
    else:
        _dropped(state, ctx, error)
    return [first, *rest]


def _dropped(state: Any, ctx: Any, error: BaseException) -> None:
    """A video lost to its env's ``render()``: kept in ``videos.errors``, counted as a signal, said once."""
    videos = ctx.videos.videos
    if not videos.errors:
        warnings.warn(
            f"the evaluation video at step {state.steps} was dropped: {error} (the run goes on; "
            f"session.videos.errors and the {VIDEO_ERRORS!r} signal count such videos)",
            RuntimeWarning,
            stacklevel=2,
        )
    videos.errors.append(error)
    counted = state.signals.get(VIDEO_ERRORS)
    total = 1 + (0 if counted is None or not len(counted) else int(counted.last))
    state.signals.record(VIDEO_ERRORS, state.steps, float(total), state.elapsed)
