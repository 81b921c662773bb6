"""Weights & Biases: a W&B run per session, offline by default (no account, no network).

In offline mode W&B writes the run under ``<dir>/wandb/offline-run-*``; uploading it later is the
user's step (``wandb sync <dir>/wandb/offline-run-*``). Signals are logged against their env step
as the custom x axis ``env_step`` (W&B's own step must only grow, which a session's signals,
recorded at several places in the loop, do not promise).
"""

from __future__ import annotations

import glob
import os
import struct
import time
from collections.abc import Sequence
from typing import Any

from .base import Point, RunInfo, Sink

__all__ = ["WandB", "read_run_file"]

_EXIT = {"finished": 0, "stopped": 0, "failed": 1}
_BLOCK = 32768  # the run file is a LevelDB-style log in blocks of this size
_WRITE_TIMEOUT_S = 30.0


def read_run_file(path: str | os.PathLike[str]) -> list[Any]:
    """The records of a W&B run file (``run-*.wandb``) as ``wandb_internal_pb2.Record`` protobufs.

    The file is a 7-byte header (``:W&B``, magic, version), then a LevelDB-style log: 32 KiB blocks of
    chunks, each with a crc32, a little-endian length and a type (full, first, middle, last).
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        raise ValueError(f"{os.fspath(path)} is not a W&B run file (it does not start with ':W&B')")
    pos, raw, parts = 7, [], []
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        if len(chunk) < length:
            break  # a chunk still being written
        pos += 7 + length
        if kind == 1:
            raw.append(chunk)
        elif kind == 2:
            parts = [chunk]
        elif kind == 3:
            parts.append(chunk)
        elif kind == 4:
            raw.append(b"".join([*parts, chunk]))
    return [wandb_internal_pb2.Record.FromString(r) for r in raw]  # type: ignore[attr-defined]  # generated protobuf


def _wait_until_written(run_dir: str, timeout: float = _WRITE_TIMEOUT_S) -> None:
    """Wait until the run file ends with its exit record.

    In offline mode ``run.finish()`` can return while W&B's writer process still appends the last
    rows; the session promises complete files once ``wait()`` returns, so wait for the writer here.
    """
    try:
        from wandb.proto import wandb_internal_pb2  # noqa: F401
    except ImportError:  # another W&B layout: nothing to check with
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in glob.glob(os.path.join(run_dir, "run-*.wandb")):
            try:
                records = read_run_file(path)
            except Exception:  # a record still being written
                records = []
            if records and records[-1].WhichOneof("record_type") == "exit":
                return
        time.sleep(0.05)


class WandB(Sink):
    """Log a session to Weights & Biases.

    Example::

        session = wb.Session(agent, env, sinks=[wb.WandB(offline=True)])
        # later, with an account: wandb sync runs/wandb/wandb/offline-run-*

    Parameters:
        project: the W&B project.
        offline: write locally only (the default); False logs online (needs ``wandb login``).
        dir: where W&B writes its files.
        run_name: the run's name (default: algorithm, env and start time).
        entity: passed to ``wandb.init``.
        group: passed to ``wandb.init``.
        tags: passed to ``wandb.init``.
    """

    def __init__(
        self,
        project: str = "workbench",
        *,
        offline: bool = True,
        dir: str | os.PathLike[str] = "runs/wandb",
        run_name: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
    ) -> None:
        try:
            import wandb  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"wb.WandB needs the wandb package: pip install 'rl-workbench[wandb]' ({exc})") from exc
        self.project = project
        self.offline = bool(offline)
        self.dir = os.fspath(dir)
        self.run_name = run_name
        self.entity = entity
        self.group = group
        self.tags = list(tags)
        self.run_dir: str | None = None
        """W&B's directory of the run (``.../offline-run-*`` in offline mode), set when it starts."""
        self._run: Any = None
        self._exit_code = 0
        self._wandb_id: str | None = None
        self._session_id: str | None = None

    def __repr__(self) -> str:
        return f"WandB({self.project!r}, offline={self.offline})"

    def open(self, run: RunInfo) -> None:
        """Start the W&B run; a restarted session resumes the same W&B run id."""
        import wandb

        os.makedirs(self.dir, exist_ok=True)
        resume = run.run_id == self._session_id
        if not resume:
            self._session_id = run.run_id
            self._wandb_id = run.run_id[:16]
        settings = wandb.Settings(mode="offline" if self.offline else "online", silent=True, console="off")
        self._run = wandb.init(
            project=self.project,
            entity=self.entity,
            group=self.group,
            tags=self.tags or None,
            dir=self.dir,
            name=self.run_name or run.name,
            id=self._wandb_id,
            resume="allow" if resume else None,
            config={"algorithm": run.algorithm, "env": run.env, "seed": run.seed, **run.hyperparameters},
            settings=settings,
            reinit="create_new",
        )
        self.run_dir = os.path.dirname(self._run.dir)  # .../offline-run-*/files -> .../offline-run-*
        self._run.define_metric("env_step")
        self._run.define_metric("*", step_metric="env_step")

    def write(self, points: Sequence[Point]) -> None:
        """Log the points, one W&B row per env step (signals of the same step share a row)."""
        run = self._run
        row: dict[str, float] = {}
        step = None
        for p in points:
            if p.step != step or p.name in row:
                if row:
                    run.log(row)
                row, step = {"env_step": p.step}, p.step
            row[p.name] = p.value
        if row:
            run.log(row)

    def log_event(self, step: int, name: str, old: Any, new: Any) -> None:
        """A live edit: ``settings/<name>`` for numbers, and the edit in the run's config."""
        if isinstance(new, int | float) and not isinstance(new, bool):
            self._run.log({"env_step": step, f"settings/{name}": float(new)})
        self._run.config.update({name: new}, allow_val_change=True)

    def log_video(self, step: int, video: Any) -> None:
        """An evaluation video as ``eval_video`` (a ``wandb.Video`` of the file) at its env step."""
        import wandb

        self._run.log({"env_step": step, "eval_video": wandb.Video(video.path, format=video.format)})

    def log_end(self, step: int, status: str, reason: str | None) -> None:
        """The end: ``status``, ``stop_reason`` and ``steps`` in the run's summary."""
        self._run.summary.update({"status": status, "stop_reason": reason or "", "steps": step})
        self._exit_code = _EXIT.get(status, 0)

    def close(self) -> None:
        """Finish the W&B run (writes and closes its files)."""
        if self._run is not None:
            self._run.finish(exit_code=self._exit_code)
            self._run = None
            if self.offline and self.run_dir is not None:
                _wait_until_written(self.run_dir)
