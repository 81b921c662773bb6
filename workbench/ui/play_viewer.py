"""Watch an agent play: its episodes' frames, played in the page, with play/pause/step controls.

The episodes are played when the viewer is built (deterministic policy, nothing learned) and each
frame is kept PNG-encoded, a few kilobytes instead of the raw array. Playback runs in the browser
(an ``ipywidgets.Play`` ticking a slider, linked in the page to a :class:`FrameView` holding every
frame), so it keeps its nominal rate and no thread is needed in the kernel. The return-so-far plot
is a :class:`~workbench.ui.live_plot.LivePlot` (the dashboard's: plotly.js once per page).
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import numpy as np

from ..envs.core import as_env_source
from ..loop import play_episodes
from .frame_view import FrameView
from .live_plot import LivePlot

if TYPE_CHECKING:
    from ..agents.base import Agent

__all__ = ["PlayViewer", "encode_png"]


def encode_png(frame: np.ndarray, compression: int = 3) -> bytes:
    """A PNG file holding ``frame`` (``H x W x 3`` or ``H x W x 4`` uint8, or ``H x W`` grey)."""
    frame = np.asarray(frame)
    if frame.dtype != np.uint8:
        if np.issubdtype(frame.dtype, np.floating) and frame.size and frame.max() <= 1.0:
            frame = frame * 255.0  # float images in [0, 1]
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    if frame.ndim == 2:
        color_type, channels = 0, 1
    elif frame.ndim == 3 and frame.shape[2] in (3, 4):
        color_type, channels = (2, 3) if frame.shape[2] == 3 else (6, 4)
    else:
        raise ValueError(f"a frame must be H x W, H x W x 3 or H x W x 4, got shape {frame.shape}")
    height, width = frame.shape[:2]
    rows = np.ascontiguousarray(frame).reshape(height, width * channels)
    # Each scanline starts with its filter type; 0 (none) keeps encoding a single zlib call.
    raw = np.concatenate([np.zeros((height, 1), dtype=np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, compression))
        + chunk(b"IEND", b"")
    )


def _quiet_sdl() -> None:
    """Keep pygame/SDL from printing "XDG_RUNTIME_DIR is invalid or not set" into the notebook.

    ``rgb_array`` rendering draws off screen, so SDL's dummy video and audio drivers serve; a driver
    the user chose stays.
    """
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")


def _render_env(env: Any) -> tuple[Any, bool, bool]:
    """An env that renders ``rgb_array`` frames, whether the viewer owns (and closes) it, and whether it is a
    PettingZoo ParallelEnv (an instance, or what a zero-argument factory built: the factory is called once)."""
    from ..envs.multiagent import build_for_play, is_parallel_env

    _quiet_sdl()
    source = as_env_source(env)
    given = source.parallel if source.parallel is not None else source.instance
    if given is not None:
        instance, owned = given, False
    elif source.env_id:
        instance, owned = source.make(render_mode="rgb_array"), True
    else:
        instance, owned = build_for_play(source.factory, source.name, "PlayViewer"), True
    parallel = is_parallel_env(instance)
    mode = getattr(instance, "render_mode", None)
    if mode == "rgb_array":
        return instance, owned, parallel
    if owned:
        instance.close()
    if parallel:
        raise ValueError(
            f"PlayViewer needs a ParallelEnv that renders frames: {source.name} has render_mode={mode!r}. "
            "Build it with render_mode='rgb_array' (e.g. simple_spread_v3.parallel_env(render_mode='rgb_array'))"
        )
    if not owned:
        raise ValueError(
            f"PlayViewer needs an env that renders frames: this {source.name} has "
            f"render_mode={mode!r}. Build it with render_mode='rgb_array' "
            f"(e.g. gym.make(id, render_mode='rgb_array')), or pass the registered id instead"
        )
    raise ValueError(
        f"PlayViewer needs an env that renders frames: the factory {source.name} builds envs with "
        f"render_mode={mode!r}; make it build them with render_mode='rgb_array'"
    )


class PlayViewer(widgets.VBox):
    """Play ``episodes`` episodes with ``agent`` and show them frame by frame in the notebook.

    Example::

        agent = wb.load("runs/cartpole")
        agent.play("CartPole-v1", episodes=2, viewer=True)   # same as wb.PlayViewer(agent, "CartPole-v1", 2)

    Parameters:
        agent: the agent to play (a trained or loaded one); it acts deterministically and learns nothing.
        env: a registered id (made with ``render_mode="rgb_array"``), a factory, or an env instance
            built with ``render_mode="rgb_array"``; or a PettingZoo ParallelEnv (an instance or a
            zero-argument factory, rendering ``rgb_array``), the agent deciding for every agent and the
            rewards shown being the team's.
        episodes: how many episodes to play.
        seed: seeds the episodes' resets (``seed + i`` for episode ``i``).
        max_steps: cut an episode after this many steps (None: play until it ends).
        fps: playback speed in frames per second.

    Attributes ``returns`` (one per episode), ``rewards`` (per step) and ``frames`` (PNG bytes) hold
    what was played.
    """

    def __init__(
        self,
        agent: Agent,
        env: Any,
        episodes: int = 1,
        *,
        seed: int | None = None,
        max_steps: int | None = None,
        fps: int = 30,
    ) -> None:
        from ..agents.base import Agent

        if not isinstance(agent, Agent):
            raise TypeError(f"PlayViewer needs an agent such as wb.load(path), got {type(agent).__name__}")
        if not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {episodes!r}")
        if not 1 <= fps <= 60:
            raise ValueError(f"fps must be between 1 and 60 frames per second, got {fps}")
        self.agent = agent
        self.frames: list[bytes] = []
        self.rewards: list[float] = []  # reward received on arriving at each frame (0 at a reset)
        self.episode_of: list[int] = []  # which episode each frame belongs to
        self.returns: list[float] = []
        self._play(env, episodes, seed, max_steps)

        n = len(self.frames)
        self.image = FrameView(frames=self.frames, index=0)
        self.image.add_class("wb-play-image")
        self.player = widgets.Play(
            value=0, min=0, max=n - 1, step=1, interval=max(1, round(1000 / fps)), description="play", show_repeat=False
        )
        self.player.add_class("wb-play-controls")
        self.slider = widgets.IntSlider(
            value=0, min=0, max=n - 1, description="frame", continuous_update=True, layout={"width": "420px"}
        )
        widgets.jslink((self.player, "value"), (self.slider, "value"))
        widgets.jslink((self.player, "value"), (self.image, "index"))  # frames change in the page alone
        self.back_button = widgets.Button(
            description="", icon="step-backward", tooltip="previous frame", layout={"width": "40px"}
        )
        self.step_button = widgets.Button(
            description="", icon="step-forward", tooltip="next frame", layout={"width": "40px"}
        )
        self.back_button.on_click(lambda _b: self.step(-1))
        self.step_button.on_click(lambda _b: self.step(1))
        self.info = widgets.HTML()
        self.info.add_class("wb-play-info")

        cumulative = np.zeros(n)
        total = 0.0
        for i, (r, ep) in enumerate(zip(self.rewards, self.episode_of)):
            total = r if i == 0 or ep != self.episode_of[i - 1] else total + r
            cumulative[i] = total
        self._cumulative = cumulative
        self.figure = LivePlot(
            [
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "return so far",
                    "line": {"color": "#1f77b4"},
                    "hovertemplate": "frame %{x}<br>return so far %{y:.4g}<extra></extra>",
                },
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": "now",
                    "marker": {"size": 10, "color": "#d62728"},
                    "hoverinfo": "skip",
                },
            ],
            {
                "height": 220,
                "margin": {"l": 55, "r": 15, "t": 30, "b": 40},
                "paper_bgcolor": "white",
                "plot_bgcolor": "white",
                "showlegend": False,
                "title": {"text": "return so far", "x": 0.02},
                "xaxis": {"title": {"text": "frame"}, "gridcolor": "#ebf0f8"},
                "yaxis": {"gridcolor": "#ebf0f8"},
            },
            height=220,
            classes=("wb-play-rewards",),
        )
        self.figure.on_page = lambda _plot: self._draw_figure()
        self.marker: tuple[float, float] = (0.0, float(cumulative[0]))  # the "now" point drawn on the plot
        self._draw_figure()
        self.slider.observe(self._on_frame, names="value")
        super().__init__(
            [
                self.image,
                widgets.HBox([self.player, self.back_button, self.step_button, self.slider]),
                self.info,
                self.figure,
            ]
        )
        self.add_class("wb-play-viewer")
        self._show(0)

    def _play(self, env: Any, episodes: int, seed: int | None, max_steps: int | None) -> None:
        agent = self.agent
        instance, owned, parallel = _render_env(env)
        if parallel:
            try:
                self._play_parallel(instance, episodes, seed, max_steps)
            finally:
                if owned:
                    instance.close()
            return
        was_training = agent.training
        agent.training = False  # play mode: deterministic, no exploration, nothing stored
        try:
            agent.check_spaces(instance)
            # The one play loop (workbench.loop.play_episode), as agent.play and evaluation use it.
            for episode, moments in play_episodes(agent, instance, episodes, seed, max_steps=max_steps, render=True):
                total = 0.0
                for moment in moments:
                    total += moment.reward
                    self._keep(moment.frame, moment.reward, episode)
                self.returns.append(total)
        finally:
            agent.training = was_training
            if owned:
                instance.close()

    def _play_parallel(self, env: Any, episodes: int, seed: int | None, max_steps: int | None) -> None:
        """A PettingZoo ParallelEnv: the agent decides for every agent; the rewards shown are the team's."""
        from ..envs.multiagent import ParallelEnvAdapter, layout_for, parallel_episode

        agent = self.agent
        adapter = ParallelEnvAdapter(env, layout_for(agent, env))
        was_training = agent.training
        agent.training = False
        try:
            for episode in range(episodes):
                total = 0.0
                seed_i = None if seed is None else seed + episode
                for frame, reward in parallel_episode(agent, adapter, seed=seed_i, max_steps=max_steps, render=True):
                    total += reward
                    self._keep(frame, reward, episode)
                self.returns.append(total)
        finally:
            agent.training = was_training

    def _keep(self, frame: Any, reward: float, episode: int) -> None:
        if frame is None:
            raise ValueError("the env's render() returned None; it must be built with render_mode='rgb_array'")
        self.frames.append(encode_png(np.asarray(frame)))
        self.rewards.append(reward)
        self.episode_of.append(episode)

    @property
    def frame(self) -> int:
        """The index of the frame shown now."""
        return int(self.slider.value)

    def step(self, delta: int = 1) -> None:
        """Show the frame ``delta`` frames later (earlier when negative), staying within the episodes."""
        self.slider.value = int(np.clip(self.slider.value + delta, 0, len(self.frames) - 1))

    def _on_frame(self, change: dict[str, Any]) -> None:
        i = int(change["new"])
        # While the page plays, the image changes there on its own; the kernel redraws the text and
        # the plot's marker every 5th frame only, so its round trips never slow the playback.
        if self.player.playing and i % 5 and i < len(self.frames) - 1:
            return
        self._show(i)

    def _show(self, i: int) -> None:
        episode = self.episode_of[i]
        first = self.episode_of.index(episode)
        if self.image.index != i:
            self.image.index = i  # already so when the page's Play ticked it
        self.info.value = (
            f"<span style='font-family:monospace'>episode {episode + 1}/{len(self.returns)} · "
            f"step {i - first} · return so far {self._cumulative[i]:.1f} · "
            f"episode return {self.returns[episode]:.1f}</span>"
        )
        self.marker = (float(i), float(self._cumulative[i]))
        self._draw_figure(marker_only=True)

    def _draw_figure(self, marker_only: bool = False) -> None:
        x, y = np.array([self.marker[0]]), np.array([self.marker[1]])
        if marker_only and not self.figure.wants_reset:
            self.figure.replace({1: (x, y)})
        else:
            frames = np.arange(len(self._cumulative), dtype=np.float64)
            self.figure.reset([(frames, self._cumulative), (x, y)])

    def close(self) -> None:
        """Close the viewer and its widgets."""
        for value in list(vars(self).values()):  # getattr-free: also safe on a half-built viewer
            if isinstance(value, widgets.Widget) and value is not self:
                value.close()
        super().close()
