"""Experiment tracking: a session's signals, live edits and run ends in TensorBoard, MLflow or W&B.

``wb.Session(agent, env, sinks=[wb.TensorBoard("runs/tb"), wb.MLflow(), wb.WandB(offline=True)])``.
Each sink's package is an extra (``pip install 'rl-workbench[tensorboard]'``, ``[mlflow]``,
``[wandb]``) and is imported only when that sink is built; ``import workbench`` imports none of them.
"""

from __future__ import annotations

from .base import Point, RunInfo, Sink
from .mlflow_sink import MLflow
from .tensorboard_sink import TensorBoard
from .wandb_sink import WandB

__all__ = ["MLflow", "Point", "RunInfo", "Sink", "TensorBoard", "WandB"]
