"""Videos of evaluation episodes: rendered while a run trains, encoded off the training thread.

An evaluation with a video (``wb.Session(..., video_every=N)``, ``session.evaluate(record_video=True)``)
plays its first episode with ``render_mode="rgb_array"`` and keeps a bounded clip of it
(:class:`VideoSettings`: every ``frame_skip``-th frame, at most ``max_width`` pixels wide, at most
``max_seconds`` long). The training thread only renders and keeps those frames; a
:class:`VideoWriter` thread encodes them to MP4 (H.264 through the ``ffmpeg`` binary that
``imageio-ffmpeg`` ships; a GIF through Pillow when it is not installed) into
``<checkpoint_dir>/videos/``, and only then lists the :class:`Video` (``session.videos``) and hands
it to the session's sinks. A writer that falls behind drops a clip (counted in
:attr:`Videos.dropped`) rather than make training wait.

A video never fails the run: an env that cannot render is refused when the session is built
(:func:`check_renders`), and a ``render()`` that raises or returns no RGB frame (None, a string, a
wrong shape) drops that episode's video, which :func:`record_episode` reports and the session
counts in the ``video_errors`` signal. Files go through ``workbench.files``: a video replaces only a
video of its own name, never a link or a user's file.

``pip install 'rl-workbench[video]'`` installs the encoder. See docs/videos.md.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import queue
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .files import replacing
from .loop import play_episode
from .validation import ArgumentError, check_value, choice, integer, number, optional

if TYPE_CHECKING:
    from .agents.contract import Agent

__all__ = [
    "Video",
    "VideoSettings",
    "VideoWriter",
    "Videos",
    "check_renders",
    "encode_gif",
    "encode_video",
    "gif_of",
    "has_mp4_encoder",
    "is_our_video",
    "read_frames",
    "read_index",
    "record_episode",
    "render_env",
    "video_settings",
]

INDEX = "videos.json"
"""The file in a run's ``videos/`` folder listing its videos (step, return, frames...), oldest first."""

_NAME = re.compile(r"^eval-step(\d+)\.(mp4|gif)$")


@dataclasses.dataclass(frozen=True)
class VideoSettings:
    """How big an evaluation video may get (``Session(video_options={...})`` sets these)."""

    fps: int = 30
    """Frames per second of the video."""
    frame_skip: int = 1
    """Keep every ``frame_skip``-th rendered frame (2: half the frames, the video plays twice as fast)."""
    max_seconds: float = 10.0
    """The video stops there (the episode plays on; its return counts whole)."""
    max_width: int = 320
    """Frames wider than this are scaled down (by an integer factor) to at most this many pixels."""
    format: str = "auto"
    """``"mp4"``, ``"gif"`` or ``"auto"`` (MP4 when imageio-ffmpeg is installed, else GIF)."""
    keep: int | None = None
    """Keep at most this many videos on disk (the oldest go first); None keeps them all."""

    @property
    def max_frames(self) -> int:
        """The most frames a video holds."""
        return max(1, int(self.fps * self.max_seconds))


_SETTING_CHECKS = {
    "fps": integer(min=1, max=120),
    "frame_skip": integer(min=1),
    "max_seconds": number(min=0.1, max=600),
    "max_width": integer(min=16, max=4096),
    "format": choice("auto", "mp4", "gif"),
    "keep": optional(integer(min=1)),
}


def video_settings(options: Mapping[str, Any] | VideoSettings | None, owner: str = "Session") -> VideoSettings:
    """:class:`VideoSettings` from a dict of its fields (``video_options``), each checked."""
    if options is None:
        return VideoSettings()
    if isinstance(options, VideoSettings):
        return options
    if not isinstance(options, Mapping):
        raise ArgumentError(
            f"{owner} got video_options={options!r}: pass a dict such as {{'fps': 30, 'max_seconds': 10}}"
        )
    defaults = VideoSettings()
    for name, value in options.items():
        if name not in _SETTING_CHECKS:
            raise ArgumentError(
                f"{owner} got video_options[{name!r}]: unknown setting; the settings are {', '.join(_SETTING_CHECKS)}"
            )
        check_value(owner, f"video_options[{name!r}]", value, _SETTING_CHECKS[name], getattr(defaults, name))
    return dataclasses.replace(defaults, **dict(options))


@dataclasses.dataclass(frozen=True)
class Video:
    """One evaluation video: its file, the env step it was recorded at, the episode's return."""

    path: str
    """The video file (``.mp4`` or ``.gif``)."""
    step: int
    """The run's env step when the evaluation ran."""
    episode_return: float
    """The recorded episode's return (the whole episode, however long the video)."""
    frames: int
    """Frames in the video."""
    fps: int
    """Frames per second."""
    width: int
    height: int

    @property
    def seconds(self) -> float:
        """The video's length in seconds."""
        return self.frames / self.fps

    @property
    def format(self) -> str:
        """``"mp4"`` or ``"gif"``."""
        return os.path.splitext(self.path)[1].lstrip(".").lower()

    @property
    def mime(self) -> str:
        """The file's media type."""
        return "video/mp4" if self.format == "mp4" else "image/gif"

    def data(self) -> bytes:
        """The file's bytes."""
        with open(self.path, "rb") as f:
            return f.read()

    def to_json(self) -> dict[str, Any]:
        """The entry of :data:`INDEX` (the path relative to the videos folder)."""
        entry = dataclasses.asdict(self)
        entry["path"] = os.path.basename(self.path)
        return entry

    def _repr_html_(self) -> str:
        import base64

        data = base64.b64encode(self.data()).decode("ascii")
        if self.format == "gif":
            return f"<img src='data:image/gif;base64,{data}'/><br>step {self.step}"
        return (
            f"<video controls autoplay muted loop src='data:video/mp4;base64,{data}'></video>"
            f"<br>step {self.step}, return {self.episode_return:g}"
        )


# -- rendering -----------------------------------------------------------------------------------


def render_env(source: Any, owner: str) -> tuple[Any, bool]:
    """An env instance from an env source that renders ``rgb_array`` frames, and whether the caller
    owns (and closes) it. A ``ValueError`` says how to get one otherwise."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws off screen (no XDG_RUNTIME_DIR noise)
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if source.instance is not None:
        if source.instance.render_mode != "rgb_array":
            raise ValueError(
                f"{owner} needs an env that renders frames: this {source.name} has render_mode="
                f"{source.instance.render_mode!r}. Build it with render_mode='rgb_array', or pass its id or a factory"
            )
        return source.instance, False
    env = source.make(render_mode="rgb_array") if source.env_id else source.make()
    if env.render_mode != "rgb_array":
        env.close()
        raise ValueError(
            f"{owner} needs an env that renders frames: the factory {source.name} builds envs with render_mode="
            f"{env.render_mode!r}; make it build them with render_mode='rgb_array'"
        )
    return env, True


def check_renders(source: Any, owner: str) -> None:
    """Raise now the ``ValueError`` that recording a video from ``source`` (an ``EnvSource``) would
    raise later: its env does not render ``rgb_array`` frames. Nothing is reset or stepped: an
    instance's ``render_mode`` is read, an id's env class is looked up in gymnasium's registry (its
    ``metadata["render_modes"]``), a factory builds one env (as reading its spaces does) and closes it."""
    if source is None:
        return
    if source.instance is not None or source.env_id is None:
        if source.instance is None and (source.vector is not None or source.parallel is not None):
            raise ValueError(f"{owner} needs an env that renders frames: {source.name} cannot be copied to record one")
        env, owned = render_env(source, owner)
        if owned:
            env.close()
        return
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    try:
        entry = gym.spec(source.env_id).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # an id gymnasium cannot resolve here: building it will say why
        return
    modes = getattr(creator, "metadata", {}).get("render_modes") if isinstance(creator, type) else None
    if modes is not None and "rgb_array" not in modes:
        raise ValueError(
            f"{owner} needs an env that renders frames: {source.env_id} renders only {list(modes)}, not 'rgb_array'; "
            "record videos of another env (eval_env=...), or leave video_every out"
        )


class RenderError(ValueError):
    """``env.render()`` gave no RGB frame (it raised, or returned None, a string, a wrong shape)."""


def _shrink(frame: Any, max_width: int) -> np.ndarray:
    """An RGB uint8 copy of ``frame`` at most ``max_width`` wide (every k-th pixel: cheap on the training thread)."""
    if not isinstance(frame, np.ndarray | list | tuple):
        raise RenderError(f"render() returned {type(frame).__name__}, not an H x W x 3 RGB array")
    try:
        frame = np.asarray(frame)
    except ValueError as exc:
        raise RenderError(f"render() returned something that is no array ({exc})") from None
    if frame.dtype.kind not in "uifb":
        raise RenderError(f"render() returned an array of {frame.dtype}, not numbers")
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    if frame.ndim != 3 or frame.shape[2] not in (3, 4) or 0 in frame.shape:
        raise RenderError(f"a rendered frame must be H x W x 3 (RGB), got shape {frame.shape}")
    factor = max(1, math.ceil(frame.shape[1] / max_width))
    small = frame[::factor, ::factor, :3]
    if small.dtype != np.uint8:
        small = np.clip(small, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(small)


def record_episode(
    agent: Agent, env: Any, settings: VideoSettings, *, seed: int | None = None
) -> tuple[float, int, list[np.ndarray], RenderError | None]:
    """Play one deterministic episode of ``env`` (renders ``rgb_array``) and keep a bounded clip.

    Returns ``(episode return, episode length, frames, error)``; frames are rendered only while the
    clip has room, so a long episode costs a render only for its first ``max_seconds``. A render that
    raises or gives no RGB frame ends the clip (``frames`` empty, ``error`` says why); the episode
    plays on, so its return counts as without a video.
    """
    frames: list[np.ndarray] = []
    total, length = 0.0, 0
    room = settings.max_frames
    error: RenderError | None = None
    for moment in play_episode(agent, env, seed=seed, deterministic=True):
        total += moment.reward
        length = moment.t
        if error is None and len(frames) < room and moment.t % settings.frame_skip == 0:
            try:
                frames.append(_shrink(env.render(), settings.max_width))
            except RenderError as exc:
                error = exc
            except Exception as exc:  # the env's render() raised: its video is dropped, not the run
                error = RenderError(f"render() raised {type(exc).__name__}: {exc}")
                error.__cause__ = exc
    if error is not None:
        frames = []
    return total, length, frames, error


# -- encoding ------------------------------------------------------------------------------------


def has_mp4_encoder() -> bool:
    """True when imageio-ffmpeg (the MP4 encoder) is installed."""
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def _even(frame: np.ndarray) -> np.ndarray:
    """H.264 in yuv420p needs even sides: drop a last odd row or column (a side of 1 pixel is
    doubled instead, so a 1x1 frame still makes a 2x2 video)."""
    h, w = frame.shape[:2]
    if h == 1 or w == 1:
        frame = np.repeat(np.repeat(frame, 2 if h == 1 else 1, axis=0), 2 if w == 1 else 1, axis=1)
        h, w = frame.shape[:2]
    return frame[: h - h % 2, : w - w % 2]


def encode_video(frames: Sequence[np.ndarray], path: str, fps: int) -> None:
    """Write ``frames`` (RGB uint8, one size) to ``path``: H.264 MP4 through imageio-ffmpeg when the
    name ends in ``.mp4``, else a GIF (:func:`encode_gif`). The file appears whole or not at all
    (``workbench.files.replacing``: a link at ``path`` is replaced, never followed)."""
    if not frames:
        raise ValueError("a video needs at least one frame")
    with replacing(path, owner="the video writer") as tmp:
        if path.endswith(".mp4"):
            import imageio_ffmpeg

            first = _even(frames[0])
            h, w = first.shape[:2]
            writer = imageio_ffmpeg.write_frames(
                tmp,
                (w, h),
                fps=fps,
                codec="libx264",
                pix_fmt_in="rgb24",
                pix_fmt_out="yuv420p",
                macro_block_size=1,
                ffmpeg_log_level="error",
                quality=None,
                output_params=[
                    "-f",
                    "mp4",
                    "-crf",
                    "28",
                    "-preset",
                    "veryfast",
                    "-threads",
                    "1",
                    "-movflags",
                    "+faststart",
                ],
            )
            writer.send(None)
            for frame in frames:
                writer.send(np.ascontiguousarray(_even(frame)))
            writer.close()
        else:
            with open(tmp, "wb") as f:
                f.write(encode_gif(frames, fps))


def encode_gif(frames: Sequence[np.ndarray], fps: int) -> bytes:
    """An animated GIF of ``frames`` (through Pillow)."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            "writing a video needs an encoder: pip install 'rl-workbench[video]' (imageio-ffmpeg for MP4) "
            f"or pillow (GIF) ({exc})"
        ) from exc
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    out = io.BytesIO()
    images[0].save(
        out, format="GIF", save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)), loop=0
    )
    return out.getvalue()


def read_frames(path: str) -> list[np.ndarray]:
    """The RGB frames of a video file written by :func:`encode_video`."""
    if path.endswith(".gif"):
        from PIL import Image, ImageSequence

        with Image.open(path) as image:
            return [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(image)]
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(path, pix_fmt="rgb24")
    meta = next(reader)
    w, h = meta["size"]
    return [np.frombuffer(b, dtype=np.uint8).reshape(h, w, 3) for b in reader]


def gif_of(video: Video, max_frames: int = 150) -> tuple[bytes, int, int]:
    """``(GIF bytes, width, height)`` of ``video`` (every k-th frame when longer than ``max_frames``),
    for trackers that show GIFs (TensorBoard's Images tab)."""
    if video.format == "gif":
        frames = read_frames(video.path)
        if len(frames) <= max_frames:
            return video.data(), frames[0].shape[1], frames[0].shape[0]
    else:
        frames = read_frames(video.path)
    every = max(1, math.ceil(len(frames) / max_frames))
    kept = frames[::every]
    return encode_gif(kept, max(1, round(video.fps / every))), kept[0].shape[1], kept[0].shape[0]


def _format(settings: VideoSettings) -> str:
    if settings.format != "auto":
        return settings.format
    return "mp4" if has_mp4_encoder() else "gif"


# -- the list of a run's videos and the thread that writes them -----------------------------------


def is_our_video(path: str) -> bool:
    """Whether the regular file ``path`` is a video this module writes: named ``eval-step<N>.mp4``
    (or ``.gif``) and holding an MP4 or a GIF (what a video may replace: an earlier one of its step)."""
    match = _NAME.match(os.path.basename(path))
    if match is None:
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head[4:8] == b"ftyp" if match.group(2) == "mp4" else head[:4] == b"GIF8"


def _is_our_index(path: str) -> bool:
    """Whether ``path`` holds a list of videos as :meth:`Video.to_json` writes them."""
    try:
        if os.path.getsize(path) > 64 * 2**20:
            return False
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(entries, list) and all(isinstance(e, dict) and {"path", "step"} <= set(e) for e in entries)


def read_index(folder: str) -> list[Video]:
    """The videos listed in ``folder/videos.json`` whose files exist (also files named
    ``eval-step<N>.mp4`` that the index misses), oldest first."""
    found: dict[str, Video] = {}
    index = os.path.join(folder, INDEX)
    if os.path.isfile(index):
        try:
            with open(index) as f:
                entries = json.load(f)
            for e in entries if isinstance(entries, list) else []:
                path = os.path.join(folder, os.path.basename(str(e["path"])))
                found[path] = Video(
                    path,
                    int(e["step"]),
                    float(e["episode_return"]),
                    int(e["frames"]),
                    int(e["fps"]),
                    int(e["width"]),
                    int(e["height"]),
                )
        except (OSError, ValueError, KeyError, TypeError):
            found = {}  # a broken index: the file names still tell the steps
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            match = _NAME.match(name)
            path = os.path.join(folder, name)
            if match and path not in found:
                found[path] = Video(path, int(match.group(1)), float("nan"), 0, 0, 0, 0)
    return sorted((v for v in found.values() if os.path.isfile(v.path)), key=lambda v: (v.step, v.path))


class Videos(Sequence[Video]):
    """A run's videos, oldest first (``session.videos``): a list that grows as the writer finishes.

    ``videos[-1]`` is the latest; :meth:`wait` blocks until the videos recorded so far are written;
    ``pending`` counts clips being encoded, ``dropped`` those dropped because the writer fell behind,
    ``errors`` the encoding errors (a failed video never fails the run).
    """

    def __init__(self) -> None:
        self._items: list[Video] = []
        self._lock = threading.Condition()
        self.pending = 0
        self.dropped = 0
        self.errors: list[BaseException] = []
        self.version = 0
        """Grows with every change (the dashboard redraws when it does)."""

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __iter__(self) -> Iterator[Video]:
        return iter(list(self._items))

    def __repr__(self) -> str:
        steps = ", ".join(str(v.step) for v in self._items)
        return f"<Videos: {len(self._items)} at steps [{steps}], {self.pending} being written>"

    @property
    def latest(self) -> Video | None:
        """The latest video, or None."""
        return self._items[-1] if self._items else None

    def wait(self, timeout: float | None = 30.0) -> bool:
        """Block until no video is being written; False when ``timeout`` seconds passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self.pending:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def replace(self, videos: Sequence[Video]) -> None:
        """Start from the videos already on disk (a reopened run)."""
        with self._lock:
            self._items = list(videos)
            self.version += 1

    def _prune(self) -> None:
        """Forget videos whose files were removed (``keep``)."""
        with self._lock:
            self._items = [v for v in self._items if os.path.isfile(v.path)]
            self.version += 1

    def _begin(self) -> None:
        with self._lock:
            self.pending += 1

    def _end(self, video: Video | None, error: BaseException | None = None, dropped: bool = False) -> None:
        with self._lock:
            self.pending -= 1
            if video is not None:  # a second video at the same step replaced the file: and the entry
                self._items = [v for v in self._items if v.path != video.path] + [video]
            if error is not None:
                self.errors.append(error)
            self.dropped += dropped
            self.version += 1
            self._lock.notify_all()


Encoder = Callable[[Sequence[np.ndarray], str, int], None]


class VideoWriter:
    """Encodes clips in its own thread; :meth:`submit` returns at once (the training thread calls it).

    Parameters:
        videos: the list the written videos join.
        settings: :class:`VideoSettings`.
        on_written: called in the writer's thread with each written :class:`Video` (the sinks).
        encoder: ``fn(frames, path, fps)`` writing the file (default :func:`encode_video`);
            a benchmark passes a slow one.
        backlog: clips waiting at most; one more is dropped, not waited for.
    """

    def __init__(
        self,
        videos: Videos,
        settings: VideoSettings,
        on_written: Callable[[Video], None] | None = None,
        encoder: Encoder | None = None,
        backlog: int = 2,
    ) -> None:
        self.videos = videos
        self.settings = settings
        self.on_written = on_written
        self.encoder = encoder or encode_video
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=backlog)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, folder: str, step: int, episode_return: float, frames: list[np.ndarray]) -> bool:
        """Queue a clip for ``folder/eval-step<step>.<mp4|gif>``; False when dropped (writer behind)."""
        if not frames:
            return False
        self.videos._begin()
        try:
            self._queue.put_nowait((folder, int(step), float(episode_return), frames))
        except queue.Full:
            self.videos._end(None, dropped=True)
            return False
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="workbench-video", daemon=True)
                self._thread.start()
        return True

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=5.0)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            video, error = None, None
            try:
                video = self._write(*job)
            except Exception as exc:  # a video never fails the run: kept in videos.errors, and said once
                error = exc
                if not self.videos.errors:
                    warnings.warn(
                        f"could not write the evaluation video: {type(exc).__name__}: {exc}",
                        RuntimeWarning,
                        stacklevel=1,
                    )
            self.videos._end(video, error)
            if video is not None and self.settings.keep is not None:
                self.videos._prune()
            if video is not None and self.on_written is not None:
                try:
                    self.on_written(video)
                except Exception:  # the sinks report their own errors
                    pass

    def _write(self, folder: str, step: int, episode_return: float, frames: list[np.ndarray]) -> Video:
        settings = self.settings
        os.makedirs(folder, exist_ok=True)
        fmt = _format(settings)
        path = os.path.join(folder, f"eval-step{step:09d}.{fmt}")
        kind = "a video written by rl-workbench"
        with replacing(path, owner="the video writer", kind=kind, ours=is_our_video) as tmp:
            self.encoder(frames, tmp, settings.fps)
        h, w = _even(frames[0]).shape[:2] if fmt == "mp4" else frames[0].shape[:2]
        video = Video(path, step, episode_return, len(frames), settings.fps, int(w), int(h))
        listed = [v for v in read_index(folder) if v.path != path] + [video]
        if settings.keep is not None:
            for old in listed[: -settings.keep]:
                if os.path.isfile(old.path) and not os.path.islink(old.path) and is_our_video(old.path):
                    os.remove(old.path)
            listed = listed[-settings.keep :]
        with (
            replacing(
                os.path.join(folder, INDEX), owner="the video writer", kind="a list of videos", ours=_is_our_index
            ) as tmp,
            open(tmp, "w", encoding="utf-8") as f,
        ):
            json.dump([v.to_json() for v in listed], f, indent=1)
        return video
