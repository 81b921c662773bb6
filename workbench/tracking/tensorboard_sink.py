"""TensorBoard: scalars, live edits, run ends and evaluation videos as event files; hyperparameters in the HParams tab.

Each session writes to ``<log_dir>/<run name>``, so ``tensorboard --logdir <log_dir>`` shows runs
side by side. The event files are written by the tensorboard package's own writer (through
``torch.utils.tensorboard``, which wraps it), and the hyperparameters go in as the HParams
plugin's experiment and session records, with the run's status written when it ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from .base import Point, RunInfo, Sink, flat_params

__all__ = ["TensorBoard"]

_STATUS = {"finished": "STATUS_SUCCESS", "stopped": "STATUS_ABORTED", "failed": "STATUS_FAILURE"}


def _require_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"wb.TensorBoard needs the tensorboard package: pip install 'rl-workbench[tensorboard]' ({exc})"
        ) from exc


class TensorBoard(Sink):
    """Write a session's signals to TensorBoard event files under ``log_dir``.

    Example::

        session = wb.Session(agent, env, sinks=[wb.TensorBoard("runs/tb")])
        # then: tensorboard --logdir runs/tb

    Parameters:
        log_dir: the directory ``tensorboard --logdir`` reads; each run gets a subdirectory.
        run_name: the subdirectory's name (default: algorithm, env and start time).
        metrics: signals shown as metrics in the HParams tab.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = "runs/tb",
        run_name: str | None = None,
        metrics: Sequence[str] = ("episode_reward", "eval_reward"),
    ) -> None:
        _require_tensorboard()
        self.log_dir = os.fspath(log_dir)
        self.run_name = run_name
        self.metrics = tuple(metrics)
        self.run_dir: str | None = None
        """The directory of the run being written (set when a run starts)."""
        self._writer: Any = None
        self._run_id: str | None = None

    def __repr__(self) -> str:
        return f"TensorBoard({self.log_dir!r})"

    def open(self, run: RunInfo) -> None:
        """Open the run's event file; the first start of a session also records its hyperparameters."""
        from torch.utils.tensorboard import SummaryWriter

        first = run.run_id != self._run_id
        if first:
            self._run_id = run.run_id
            self.run_dir = os.path.join(self.log_dir, self.run_name or run.name)
        assert self.run_dir is not None
        self._writer = SummaryWriter(self.run_dir, flush_secs=3600)  # the feed decides when to flush
        if first:
            from torch.utils.tensorboard.summary import hparams

            params = {
                "algorithm": run.algorithm,
                "env": run.env,
                **({"seed": run.seed} if run.seed is not None else {}),
                **flat_params(run.hyperparameters),
            }
            experiment, start_info, _ = hparams(params, {m: 0.0 for m in self.metrics})
            self._writer.file_writer.add_summary(experiment)
            self._writer.file_writer.add_summary(start_info)
            self._writer.flush()

    def write(self, points: Sequence[Point]) -> None:
        """Add each point as a scalar (tag = signal name) and flush the event file."""
        writer = self._writer
        for p in points:
            writer.add_scalar(p.name, p.value, global_step=p.step, walltime=p.time)
        writer.flush()

    def log_event(self, step: int, name: str, old: Any, new: Any) -> None:
        """A live edit: a text entry ``edits`` and, for numbers, the scalar ``settings/<name>``."""
        self._writer.add_text("edits", f"`{name}`: {old!r} → {new!r}", global_step=step)
        if isinstance(new, int | float) and not isinstance(new, bool):
            self._writer.add_scalar(f"settings/{name}", float(new), global_step=step)

    def log_video(self, step: int, video: Any) -> None:
        """An evaluation video under the tag ``eval_video`` (an animated GIF in the Images tab, as
        ``SummaryWriter.add_video`` writes it, without needing moviepy)."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from ..video import gif_of

        data, width, height = gif_of(video)
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=data)
        self._writer.file_writer.add_summary(Summary(value=[Summary.Value(tag="eval_video", image=image)]), step)
        self._writer.flush()

    def log_end(self, step: int, status: str, reason: str | None) -> None:
        """The run's end: a text entry ``run_end`` and the HParams session status."""
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.plugins.hparams.api_pb2 import Status
        from tensorboard.plugins.hparams.metadata import PLUGIN_DATA_VERSION, PLUGIN_NAME, SESSION_END_INFO_TAG
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo

        self._writer.add_text("run_end", f"{status} ({reason or 'no reason given'}) at step {step}", global_step=step)
        end = SessionEndInfo(status=Status.Value(_STATUS.get(status, "STATUS_UNKNOWN")), end_time_secs=time.time())
        content = HParamsPluginData(session_end_info=end, version=PLUGIN_DATA_VERSION)
        meta = SummaryMetadata(
            plugin_data=SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content.SerializeToString())
        )
        self._writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=SESSION_END_INFO_TAG, metadata=meta)]))

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
