"""A run's model card: ``README.md`` in the run's folder, saying what was trained and how well.

``session.card()`` and ``workbench card runs/x`` write it: the agent, env, hyperparameters, device
and library versions (from the saved run's ``meta.json``), an evaluation table (mean, std, episodes,
seed: deterministic episodes played when the card is written), the curves as ``curves.png`` (with
matplotlib), the last evaluation video and how to load and play the agent. A notebook shows the
returned :class:`ModelCard` as Markdown. See docs/videos.md.

A card replaces only its own files (``workbench.files``): a ``README.md`` it wrote ends with
:data:`CARD_MARKER` (cards of earlier versions are known by their opening lines), a ``curves.png``
it wrote carries ``Software: rl-workbench`` in its PNG text. A user's ``README.md`` or
``curves.png`` in the folder, or a link there, is refused before anything is evaluated, unless
``overwrite=True`` (``workbench card --overwrite``).
"""

from __future__ import annotations

import base64
import dataclasses
import math
import os
import re
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from .agents.saving import agent_from_run, open_saved
from .checkpoint import META
from .files import check_replaceable, replacing, write_text
from .signals import SignalSet
from .video import Video, is_our_video, read_index

if TYPE_CHECKING:
    from .agents.contract import Agent

__all__ = [
    "CARD_MARKER",
    "CARD_NAME",
    "CURVES_NAME",
    "Evaluation",
    "ModelCard",
    "check_card_folder",
    "find_saved",
    "write_card",
]

CARD_NAME = "README.md"
CURVES_NAME = "curves.png"
CARD_MARKER = "<!-- model card written by rl-workbench: `workbench card` rewrites this file -->"
"""The last line of every card: how a later card knows the ``README.md`` is its own to replace."""
_SOFTWARE = "rl-workbench model card"  # the PNG text of curves.png
# A card of an earlier version (before the marker): its title, a blank line, then this sentence.
_EARLIER_CARD = re.compile(r"\A# [^\n]* on [^\n]*\n\nA [^\n]* agent trained with rl-workbench for ")
_CURVES = ("episode_reward", "eval_reward", "loss", "policy_loss", "critic_loss", "value_loss", "actor_loss")


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The evaluation table of a card: deterministic episodes played when it was written."""

    mean: float
    std: float
    episodes: int
    seed: int | None
    env: str


class ModelCard:
    """A written model card: ``path`` (the README.md), ``text`` (its Markdown), ``evaluation``.
    Shown as Markdown in a notebook (the curves embedded, the video beside it)."""

    def __init__(self, path: str, text: str, evaluation: Evaluation | None, curves: str | None, video: str | None):
        self.path = path
        self.text = text
        self.evaluation = evaluation
        self.curves = curves
        self.video = video

    def __repr__(self) -> str:
        return f"<ModelCard {self.path}>"

    def __str__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        # In a notebook the card's relative links would resolve against the notebook's folder:
        # the curves are embedded and the video linked relative to the kernel's working folder.
        text = self.text
        if self.curves is not None and os.path.isfile(self.curves):
            with open(self.curves, "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            text = text.replace(f"]({os.path.basename(self.curves)})", f"](data:image/png;base64,{data})")
        if self.video is not None:
            rel = os.path.relpath(self.video, os.path.dirname(self.path))
            text = text.replace(f'src="{rel}"', f'src="{os.path.relpath(self.video)}"')
        return text


def find_saved(folder: str) -> str:
    """The saved run a card describes: ``folder`` itself when it holds ``meta.json`` (or is a
    ``.zip``), else its ``latest/`` checkpoint, else its ``best/``."""
    if folder.endswith(".zip") or os.path.isfile(os.path.join(folder, META)):
        return folder
    for sub in ("latest", "best"):
        if os.path.isfile(os.path.join(folder, sub, META)):
            return os.path.join(folder, sub)
    raise FileNotFoundError(
        f"{folder}: no saved run here (no meta.json, nor latest/ or best/ checkpoints): save the run first "
        "(session.save(path)) or give the checkpoint_dir of a session that saved checkpoints"
    )


def _head(path: str, size: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def _is_our_card(path: str) -> bool:
    """Whether the regular file ``path`` is a model card this module wrote (now or in an earlier version)."""
    try:
        if os.path.getsize(path) > 4 * 2**20:  # a card is a few kB
            return False
        text = _head(path, 4 * 2**20).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return text.rstrip().endswith(CARD_MARKER) or _EARLIER_CARD.match(text) is not None


def _png_software(path: str) -> str | None:
    """The ``Software`` text of a PNG file (None: not a PNG, or none in its first chunks)."""
    try:
        data = _head(path, 64 * 2**10)
    except OSError:
        return None
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    at = 8
    while at + 8 <= len(data):
        (length,), kind = struct.unpack(">I", data[at : at + 4]), data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Software\x00"):
            return body[len(b"Software\x00") :].decode("latin-1")
        if kind == b"IDAT":  # text chunks come before the image data (matplotlib writes them so)
            return None
        at += 12 + length
    return None


def _our_curves(card: str) -> Any:
    """The ``ours`` test of a card's curves: PNG text naming this library, or (an earlier version's
    curves) the card beside it, itself ours, linking to this file."""

    def ours(path: str) -> bool:
        if _png_software(path) == _SOFTWARE:
            return True
        if not (os.path.isfile(card) and not os.path.islink(card) and _is_our_card(card)):
            return False
        return f"]({os.path.basename(path)})" in _head(card, 4 * 2**20).decode("utf-8", "replace")

    return ours


_CARD_KIND = "a model card written by rl-workbench"
_CURVES_KIND = "training curves written by rl-workbench"


def check_card_folder(
    folder: str, card_name: str = CARD_NAME, curves_name: str = CURVES_NAME, *, overwrite: bool = False
) -> None:
    """Raise the ``FileExistsError`` writing a card into ``folder`` would: a ``README.md`` or
    ``curves.png`` there that a card did not write, or a link (unless ``overwrite``). Called before
    anything is saved or played, so a refused card costs nothing."""
    path = os.path.join(folder, card_name)
    check_replaceable(path, _is_our_card, overwrite=overwrite, owner="the model card", kind=_CARD_KIND)
    check_replaceable(
        os.path.join(folder, curves_name),
        _our_curves(path),
        overwrite=overwrite,
        owner="the model card",
        kind=_CURVES_KIND,
    )


def _evaluate(agent: Agent, env: Any, episodes: int, seed: int | None, name: str) -> Evaluation:
    returns = agent.play(env, episodes=episodes, seed=seed)
    values = np.asarray(list(returns), dtype=np.float64)
    return Evaluation(float(values.mean()), float(values.std()), len(values), seed, name)


def _curves(signals: SignalSet, path: str, card: str, overwrite: bool) -> str | None:
    """``curves.png``: one panel per plotted signal; None without matplotlib or signals."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    names = [n for n in _CURVES if n in signals and len(signals[n]) > 0][:4]
    if not names:
        return None
    fig = Figure(figsize=(4.2 * len(names), 3.0), dpi=90)  # no pyplot: no global figure state
    for i, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), i + 1)
        steps, values = signals[name].steps, signals[name].values
        ax.plot(steps, values, lw=1.0, color="#1f77b4")
        ax.set_title(name)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    with replacing(path, owner="the model card", kind=_CURVES_KIND, ours=_our_curves(card), overwrite=overwrite) as tmp:
        fig.savefig(tmp, format="png", metadata={"Software": _SOFTWARE})
    return path


def _table(rows: list[tuple[str, Any]]) -> list[str]:
    out = ["| | |", "|---|---|"]
    for key, value in rows:
        out.append(f"| {key} | {str(value).replace('|', '/')} |")
    return out


def _flat(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in values.items():
        if isinstance(value, dict) and "schedule" not in value:
            rows.extend(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, dict):
            rows.append((f"{prefix}{key}", " ".join(f"{k}={v}" for k, v in value.items())))
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def _device(meta: dict[str, Any]) -> str | None:
    for where in (meta, meta.get("hyperparameters", {}), meta.get("session", {}) or {}):
        if isinstance(where, dict) and where.get("device") not in (None, ""):
            return str(where["device"])
    return None


def write_card(
    folder: str | os.PathLike[str],
    *,
    env: Any = None,
    episodes: int = 10,
    seed: int | None = 0,
    evaluate: bool = True,
    signals: SignalSet | None = None,
    videos: list[Video] | None = None,
    overwrite: bool = False,
) -> ModelCard:
    """Write ``folder/README.md`` for the run saved in ``folder`` (see :func:`find_saved`; for a
    ``runs/x.zip``, ``runs/x.README.md`` beside it).

    ``env`` (default: the env id the run was trained on) plays ``episodes`` deterministic episodes
    from ``seed`` for the evaluation table (``evaluate=False``: none, the last ``eval_reward`` is
    shown instead); ``signals`` and ``videos`` default to the saved run's and ``folder/videos``.

    Only the card's own earlier files are replaced: a ``README.md`` or ``curves.png`` of the user's
    there (or a link) is a ``FileExistsError``, raised before anything is evaluated, unless
    ``overwrite=True``."""
    folder = os.fspath(folder)
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ValueError(f"card: episodes must be an integer >= 1, got {episodes!r}")
    if not isinstance(overwrite, bool):
        raise TypeError(f"card: overwrite must be True or False, got {overwrite!r}")
    saved = find_saved(folder)
    card_dir, card_name, curves_name = folder, CARD_NAME, CURVES_NAME
    if saved.endswith(".zip"):  # a zip stays as it is: the card goes beside it, runs/x.zip -> runs/x.README.md
        stem = os.path.splitext(os.path.basename(saved))[0]
        card_dir, card_name, curves_name = os.path.dirname(saved) or ".", f"{stem}.{CARD_NAME}", f"{stem}.{CURVES_NAME}"
    path, curves_path = os.path.join(card_dir, card_name), os.path.join(card_dir, curves_name)
    check_card_folder(card_dir, card_name, curves_name, overwrite=overwrite)
    with open_saved(saved) as run:
        meta = run.meta
        if signals is None:
            signals = run.signals()
        agent = agent_from_run(run).eval() if evaluate else None
    session = meta.get("session") or {}
    env_name = session.get("env_id") or session.get("env_name") or "(an env of the application)"
    evaluation = None
    if evaluate:
        play_env = env if env is not None else session.get("env_id")
        if play_env is None:
            raise ValueError(
                f"card: {saved} does not name a registered env to evaluate on: pass env= (an id or factory), "
                "or evaluate=False"
            )
        shown = (
            play_env
            if isinstance(play_env, str)
            else (getattr(play_env, "name", None) or getattr(play_env, "__name__", type(play_env).__name__))
        )
        assert agent is not None  # loaded above when evaluating
        evaluation = _evaluate(agent, play_env, episodes, seed, str(shown))
    if videos is None:
        videos = read_index(os.path.join(card_dir, "videos")) or read_index(os.path.join(folder, "videos"))
    video = videos[-1] if videos else None
    video_path = None
    if video is not None and os.path.isfile(video.path):
        video_path = video.path
        if not os.path.abspath(video_path).startswith(os.path.abspath(card_dir) + os.sep):
            # A video outside the card's folder is copied in, so the folder travels whole.
            video_path = os.path.join(card_dir, "videos", os.path.basename(video.path))
            with (
                replacing(
                    video_path,
                    owner="the model card",
                    kind="a video written by rl-workbench",
                    ours=is_our_video,
                    overwrite=overwrite,
                ) as tmp,
                open(video.path, "rb") as src,
                open(tmp, "wb") as dst,
            ):
                dst.write(src.read())
    curves = _curves(signals, curves_path, path, overwrite)

    algorithm = meta.get("algorithm", "?")
    versions = meta.get("versions") or {}
    lines = [f"# {algorithm} on {env_name}", ""]
    lines += [
        f"A {algorithm} agent trained with rl-workbench for {session.get('steps', '?')} env steps "
        f"({session.get('episodes', '?')} episodes).",
        "",
        "## What was trained",
        "",
    ]
    steps = session.get("steps", meta.get("counters", {}).get("num_timesteps"))
    rows: list[tuple[str, Any]] = [
        ("agent", algorithm),
        ("env", env_name),
        ("env steps", steps),
        ("episodes", session.get("episodes", "?")),
        ("seed", session.get("seed", meta.get("seed"))),
    ]
    device = _device(meta)
    if device is not None:
        rows.append(("device", device))
    rows += [("saved", meta.get("created", "?")), ("format version", meta.get("format_version", "?"))]
    rows += [(f"version: {k}", v) for k, v in versions.items()]
    lines += [*_table(rows), "", "### Hyperparameters", ""]
    lines += [*_table(_flat(meta.get("hyperparameters") or {})), "", "## Evaluation", ""]
    if evaluation is not None:
        lines += [
            "| env | episodes | seed | mean return | std |",
            "|---|---|---|---|---|",
            f"| {evaluation.env} | {evaluation.episodes} | {evaluation.seed} | {evaluation.mean:.2f} | "
            f"{evaluation.std:.2f} |",
            "",
            "Deterministic policy, episodes seeded `seed + i`, played when this card was written.",
        ]
    else:
        last = signals.get("eval_reward")
        if last is not None and len(last):
            lines.append(f"Last `eval_reward` while training: {last.last:.2f} (at step {int(last.steps[-1])}).")
        else:
            lines.append("Not evaluated.")
    if curves is not None:
        lines += ["", "## Curves", "", f"![training curves]({curves_name})"]
    if video is not None and video_path is not None:
        rel = os.path.relpath(video_path, card_dir)
        ret = "" if math.isnan(video.episode_return) else f", return {video.episode_return:g}"
        kind = (
            f'<video src="{rel}" controls autoplay muted loop width="{video.width or 320}"></video>'
            if rel.endswith(".mp4")
            else f"![evaluation]({rel})"
        )
        lines += ["", "## The last evaluation video", "", f"Step {video.step}{ret}: [{rel}]({rel})", "", kind]
    load_path = saved.replace(os.sep, "/")
    play_env = session.get("env_id") or "MyEnv()"
    lines += [
        "",
        "## Load and play",
        "",
        "```python",
        "import workbench as wb",
        "",
        f'agent = wb.load("{load_path}")',
        f'returns = agent.play("{play_env}", episodes=5)',
        f'agent.play("{play_env}", episodes=1, viewer=True)   # in a notebook: the frames',
        f'session = wb.Session.reopen("{load_path}", "{play_env}")   # continue training',
        "```",
        "",
        "From a shell:",
        "",
        "```",
        f"workbench play {load_path}" + ("" if session.get("env_id") else " --env ID"),
        "```",
        "",
        CARD_MARKER,
        "",
    ]
    text = "\n".join(lines)
    write_text(path, text, owner="the model card", kind=_CARD_KIND, ours=_is_our_card, overwrite=overwrite)
    return ModelCard(path, text, evaluation, curves, video_path)
