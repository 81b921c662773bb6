"""What a run does every so many steps: evaluation, off-policy estimates, checkpoints.

:class:`Periodic` keeps the step at which each job last ran and runs what is due after a step
(:meth:`Periodic.after_step`), in that order: evaluation (``eval_every``, ``eval_reward``; with
``keep_best`` the best checkpoint; every ``video_every`` steps with a video), an offline agent's
off-policy estimates (``ope_every``), the checkpoint to ``checkpoint_dir/latest`` (``checkpoint_every``).
The intervals are read from the run's state each time.
"""

from __future__ import annotations

import os
from typing import Any

from ..offline.ope import OffPolicyEvaluator
from .persistence import write_run
from .videos import evaluate

__all__ = ["Periodic", "record_estimates"]


class Periodic:
    """The periodic jobs of one run (``ctx``: its :class:`~workbench.run.context.RunContext`)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        steps = ctx.state.steps
        self.last_eval_step = steps
        self.last_ope_step = steps
        self.last_checkpoint_step = steps
        self.last_video_step = steps
        self.ope: Any = None  # the off-policy evaluator, built on first use

    def after_step(self, ctx: Any) -> bool:
        """Run what is due now; True when an evaluation or an estimate ran (an offline loop asks
        ``stop_when`` then)."""
        s = ctx.state
        steps = s.steps
        asked = False
        video = s.video_every is not None and steps - self.last_video_step >= s.video_every
        if video or (s.eval_every is not None and steps - self.last_eval_step >= s.eval_every):
            self.last_eval_step = steps
            if video:
                self.last_video_step = steps
            self.evaluate(record_video=video)
            asked = True
        if s.ope_every is not None and steps - self.last_ope_step >= s.ope_every:
            self.last_ope_step = steps
            record_estimates(ctx, self)
            asked = True
        if s.checkpoint_every is not None and steps - self.last_checkpoint_step >= s.checkpoint_every:
            self.last_checkpoint_step = steps
            self.checkpoint("latest")
        return asked

    def evaluate(self, record_video: bool = False) -> None:
        """A periodic evaluation (with a video every ``video_every`` steps); keeps the best
        checkpoint with ``keep_best``."""
        s = self.ctx.state
        mean = evaluate(self.ctx, None, record_video)
        if s.best_eval_reward is None or mean > s.best_eval_reward:
            s.best_eval_reward = mean
            if s.keep_best and s.checkpoint_dir is not None:
                self.checkpoint("best")

    def checkpoint(self, name: str) -> None:
        """Save the run to ``checkpoint_dir/name`` (from the training thread: the run is between steps)."""
        directory = self.ctx.state.checkpoint_dir
        assert directory is not None
        write_run(self.ctx, os.path.join(directory, name))


def record_estimates(ctx: Any, periodic: Periodic) -> dict[str, Any]:
    """Run the off-policy estimators on the held-out episodes and record them as signals
    (``ope_ips``, ``ope_wis``, ``ope_dm``, ``ope_dr``, ``ope_sdr``; ``_low``/``_high`` for the
    intervals of ``dr`` and ``sdr``)."""
    state = ctx.state
    agent = state.agent
    if periodic.ope is None:
        gamma = agent.gamma
        periodic.ope = OffPolicyEvaluator(state.ope_dataset, gamma=gamma, fqe_steps=1000, n_bootstrap=100)
    was_training = agent.training
    agent.training = False
    try:
        with ctx.control.inside("off-policy evaluation"):
            estimates = periodic.ope(agent)
    finally:
        agent.training = was_training
    now = state.elapsed
    for name, est in estimates.items():
        state.signals.record(f"ope_{name}", state.steps, est.value, now)
        if name in ("dr", "sdr"):
            state.signals.record(f"ope_{name}_low", state.steps, est.low, now)
            state.signals.record(f"ope_{name}_high", state.steps, est.high, now)
    return estimates
