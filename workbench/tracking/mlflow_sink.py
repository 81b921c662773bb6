"""MLflow: one MLflow run per session, in the local file store by default or at a tracking server.

The sink talks to MLflow through its own ``MlflowClient`` (no global active run, so several
sessions in one process each keep their own run): parameters when the run starts, metrics in
batches, live edits as tags and metrics, and the end as the run's status with a ``stop_reason`` tag.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Sequence
from typing import Any

from .base import Point, RunInfo, Sink, flat_params

__all__ = ["MLflow"]

_STATUS = {"finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}
_BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics per call
_PARAM_CHARS = 6000  # longest parameter value MLflow stores


def _tracking_uri(uri: str | os.PathLike[str] | None) -> str:
    if uri is None:
        uri = "mlruns"
    uri = os.fspath(uri)
    if "://" in uri or uri.startswith("file:"):
        return uri
    return pathlib.Path(uri).resolve().as_uri()  # a plain path: the local file store there


class MLflow(Sink):
    """Log a session to MLflow.

    Example::

        session = wb.Session(agent, env, sinks=[wb.MLflow()])            # ./mlruns, a local file store
        session = wb.Session(agent, env, sinks=[wb.MLflow("http://mlflow:5000")])   # a tracking server
        # then: mlflow ui --backend-store-uri ./mlruns

    Parameters:
        tracking_uri: a directory (the local file store; default ``./mlruns``), a ``file:`` URI,
            ``sqlite:///mlflow.db``, or a server's ``http(s)://`` address.
        experiment: the MLflow experiment's name (created when missing).
        run_name: the run's name (default: algorithm, env and start time).
        tags: extra tags for the run.

    MLflow 3 refuses the file store unless ``MLFLOW_ALLOW_FILE_STORE`` is set; for a file store
    this sink sets it to ``true`` in its own process when it is unset.
    """

    def __init__(
        self,
        tracking_uri: str | os.PathLike[str] | None = None,
        experiment: str = "workbench",
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        try:
            import mlflow  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                f"wb.MLflow needs the mlflow package: pip install 'rl-workbench[mlflow]' ({exc})"
            ) from exc
        if not isinstance(experiment, str) or not experiment:
            raise ValueError(f"experiment must be a non-empty name, got {experiment!r}")
        self.tracking_uri = _tracking_uri(tracking_uri)
        self.experiment = experiment
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.run_id: str | None = None
        """The MLflow run id (set when the first run starts)."""
        self._client: Any = None
        self._session_id: str | None = None

    def __repr__(self) -> str:
        return f"MLflow({self.tracking_uri!r}, experiment={self.experiment!r})"

    def _make_client(self) -> Any:
        from mlflow.tracking import MlflowClient

        if self.tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return MlflowClient(tracking_uri=self.tracking_uri)

    def open(self, run: RunInfo) -> None:
        """Create the MLflow run (first start of a session) or mark it running again (a restart)."""
        from mlflow.entities import Param

        client = self._client = self._make_client()
        if run.run_id == self._session_id and self.run_id is not None:
            client.update_run(self.run_id, status="RUNNING")
            return
        found = client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found is not None else client.create_experiment(self.experiment)
        tags = {"algorithm": run.algorithm, "env": run.env, "workbench.run_id": run.run_id, **self.tags}
        created = client.create_run(experiment_id, run_name=self.run_name or run.name, tags=tags)
        self.run_id = created.info.run_id
        self._session_id = run.run_id
        params = {"algorithm": run.algorithm, "env": run.env, "seed": run.seed, **flat_params(run.hyperparameters)}
        client.log_batch(self.run_id, params=[Param(k, str(v)[:_PARAM_CHARS]) for k, v in params.items()])

    def write(self, points: Sequence[Point]) -> None:
        """Log the points as metrics (key = signal name), up to 1000 per request."""
        from mlflow.entities import Metric

        metrics = [Metric(p.name, p.value, int(p.time * 1000), p.step) for p in points]
        for i in range(0, len(metrics), _BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH])

    def log_event(self, step: int, name: str, old: Any, new: Any) -> None:
        """A live edit: tag ``edit.<step>.<name>`` = ``old -> new``; numbers also as metric ``settings.<name>``."""
        self._client.set_tag(self.run_id, f"edit.{step}.{name}", f"{old!r} -> {new!r}")
        if isinstance(new, int | float) and not isinstance(new, bool):
            self._client.log_metric(self.run_id, f"settings.{name}", float(new), int(time.time() * 1000), step)

    def log_video(self, step: int, video: Any) -> None:
        """An evaluation video as an artifact under ``videos/`` (MLflow shows MP4 and GIF artifacts)."""
        self._client.log_artifact(self.run_id, video.path, artifact_path="videos")

    def log_end(self, step: int, status: str, reason: str | None) -> None:
        """The end: tags ``status`` and ``stop_reason``, and the run's MLflow status."""
        self._client.set_tag(self.run_id, "status", status)
        self._client.set_tag(self.run_id, "stop_reason", reason or "")
        self._client.set_terminated(self.run_id, status=_STATUS.get(status, "FINISHED"))

    def close(self) -> None:
        """Nothing is buffered on this side; drop the client."""
        self._client = None
