"""Weights & Biases: a W&B run per session, offline by default (no account, no network).

In offline mode W&B writes the run under ``<dir>/wandb/offline-run-*``; uploading it later is the
user's step (``wandb sync <dir>/wandb/offline-run-*``). Signals are logged against their env step
as the custom x axis ``env_step`` (W&B's own step must only grow, which a session's signals,
recorded at several places in the loop, do not promise).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .base import Point, RunInfo, Sink

__all__ = ["WandB"]

_EXIT = {"finished": 0, "stopped": 0, "failed": 1}


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
        entity, group, tags: passed to ``wandb.init``.
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

    def log_end(self, step: int, status: str, reason: str | None) -> None:
        """The end: ``status``, ``stop_reason`` and ``steps`` in the run's summary."""
        self._run.summary.update({"status": status, "stop_reason": reason or "", "steps": step})
        self._exit_code = _EXIT.get(status, 0)

    def close(self) -> None:
        """Finish the W&B run (writes and closes its files)."""
        if self._run is not None:
            self._run.finish(exit_code=self._exit_code)
            self._run = None
