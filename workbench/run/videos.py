"""A session's evaluations, with and without a video, and the list of its videos.

:func:`evaluate` is ``Session.evaluate``: deterministic episodes on the evaluation env, their mean
recorded as ``eval_reward``; with ``record_video=True`` the first episode is rendered into a bounded
clip (``workbench.video``) that a :class:`~workbench.video.VideoWriter` thread encodes into
``<checkpoint_dir>/videos/``. :class:`VideoJobs` holds a session's :class:`~workbench.video.Videos`
and its writer; :class:`SessionMedia` gives :class:`~workbench.Session` its ``videos`` and ``card()``.

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

__all__ = ["VIDEO_ERRORS", "SessionMedia", "VideoJobs", "evaluate", "video_folder"]

VIDEO_ERRORS = "video_errors"
"""The signal counting the evaluation videos lost because the env rendered no frame (cumulative)."""


def video_folder(session: Any) -> str:
    """``<checkpoint_dir>/videos``: beside the run's checkpoints. A session without a
    ``checkpoint_dir`` gets the default one (``runs/<algorithm>-<date>-<time>``) the first time."""
    if session.checkpoint_dir is None:
        session.checkpoint_dir = os.path.join(
            "runs", f"{session.agent.algorithm.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
    return os.path.join(session.checkpoint_dir, "videos")


class VideoJobs:
    """A session's videos (:attr:`videos`) and the thread writing them (built on first use)."""

    def __init__(self, session: Any, ctx: Any) -> None:
        self.session = session
        self.ctx = ctx
        self.videos = Videos()
        self.writer: VideoWriter | None = None
        self.encoder: Any = None  # fn(frames, path, fps): a benchmark's slow encoder; None: the real one
        if session.checkpoint_dir is not None:  # a reopened run keeps listing the videos it wrote
            self.videos.replace(read_index(os.path.join(session.checkpoint_dir, "videos")))

    def submit(self, step: int, episode_return: float, frames: list[np.ndarray]) -> bool:
        """Hand a clip to the writer thread; returns at once."""
        if self.writer is None:
            self.writer = VideoWriter(self.videos, self.session.video_options, self._written, self.encoder)
        return self.writer.submit(video_folder(self.session), step, episode_return, frames)

    def _written(self, video: Video) -> None:
        tracking = self.ctx.tracking
        if tracking is not None:
            tracking.log_video(video.step, video)


def evaluate(session: Any, ctx: Any, episodes: int | None, record_video: bool) -> float:
    """``Session.evaluate``: play deterministic episodes on the evaluation env, record the mean as
    ``eval_reward`` and return it; ``record_video`` renders the first episode into a video."""
    source = session._eval_source
    if source is None:
        if not session.env_source.can_copy:
            raise ValueError(ctx.loop.no_eval_env())
        source = session.env_source
    episodes = episodes or session.eval_episodes
    seed = None if session.seed is None else session.seed + 10_000 + session.steps
    with interruptible(session, ctx.control):  # Ctrl-C while a run trains beside it: the run stops too
        if record_video:
            returns = _with_video(session, ctx, source, episodes, seed)
        else:
            returns = list(session.agent.play(source, episodes=episodes, seed=seed))
    mean = float(np.mean(returns))
    session.signals.record("eval_reward", session.steps, mean, session.elapsed)
    return mean


def _with_video(session: Any, ctx: Any, source: Any, episodes: int, seed: int | None) -> list[float]:
    """The evaluation's episodes, the first one rendered into a clip for the writer thread (the same
    seeds as without a video: ``seed + i`` for episode ``i``)."""
    agent = session.agent
    env, owned = render_env(source, "a video of the evaluation")
    try:
        agent.check_spaces(env)
        was_training = agent.training
        agent.training = False
        try:
            with ctx.control.inside("a video's evaluation episode"):
                first, _, frames, error = record_episode(agent, env, session.video_options, seed=seed)
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
        ctx.videos.submit(session.steps, first, frames)
    else:
        _dropped(session, ctx, error)
    return [first, *rest]


def _dropped(session: Any, ctx: Any, error: BaseException) -> None:
    """A video lost to its env's ``render()``: kept in ``videos.errors``, counted as a signal, said once."""
    videos = ctx.videos.videos
    if not videos.errors:
        warnings.warn(
            f"the evaluation video at step {session.steps} was dropped: {error} (the run goes on; "
            f"session.videos.errors and the {VIDEO_ERRORS!r} signal count such videos)",
            RuntimeWarning,
            stacklevel=2,
        )
    videos.errors.append(error)
    counted = session.signals.get(VIDEO_ERRORS)
    total = 1 + (0 if counted is None or not len(counted) else int(counted.last))
    session.signals.record(VIDEO_ERRORS, session.steps, float(total), session.elapsed)


class SessionMedia:
    """What a :class:`~workbench.Session` shows of itself beyond signals: its videos and its model card."""

    @property
    def videos(self) -> Videos:
        """The run's evaluation videos, oldest first (:class:`~workbench.video.Video`: ``path``,
        ``step``, ``episode_return``...); they join once written. ``videos.wait()`` waits for those
        being written. Recorded by ``video_every`` and ``evaluate(record_video=True)``."""
        return self._ctx.videos.videos  # type: ignore[attr-defined]

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
        from ..card import CARD_NAME, check_card_folder, write_card

        session: Any = self
        if episodes is not None and (not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1):
            raise ValueError(f"card: episodes must be an integer >= 1, got {episodes!r}")
        folder = os.fspath(path) if path is not None else os.path.dirname(video_folder(session))
        check_card_folder(folder, overwrite=overwrite)
        if not os.path.isfile(os.path.join(folder, "meta.json")):
            session.save(os.path.join(folder, "latest"))
        session.videos.wait()
        source = session._eval_source
        if source is None and session.env_source.can_copy:
            source = session.env_source
        card = write_card(
            folder,
            env=source,
            episodes=episodes or session.eval_episodes,
            seed=seed,
            evaluate=source is not None,
            signals=session.signals,
            videos=list(session.videos),
            overwrite=overwrite,
        )
        assert card.path.endswith(CARD_NAME)
        return card
