"""A console progress bar that follows a running session from the caller's thread.

The training thread never prints; this polls ``session.steps`` and the signals instead.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

if TYPE_CHECKING:
    from .session import Session

__all__ = ["follow"]


def follow(session: Session, *, interval: float = 0.25, file: object = None) -> None:
    """Show a tqdm bar (steps, mean reward of the last 10 episodes, steps/second) until the run ends."""
    total = session.target_steps
    start_steps = session.steps
    with tqdm(
        total=None if total is None else total - start_steps,
        unit="step",
        unit_scale=True,
        dynamic_ncols=True,
        file=file or sys.stderr,
        desc=f"{session.agent.algorithm}",
    ) as bar:
        while True:
            alive = session.is_alive
            bar.update(session.steps - start_steps - bar.n)
            postfix = {}
            reward = session.signals.get("episode_reward")
            if reward is not None and len(reward):
                postfix["reward"] = f"{reward.mean(last=10):.1f}"
            sps = session.signals.get("steps_per_second")
            if sps is not None and sps.last is not None and not math.isnan(sps.last):
                postfix["sps"] = f"{sps.last:,.0f}"
            postfix["status"] = session.status
            bar.set_postfix(postfix, refresh=False)
            if not alive:
                break
            time.sleep(interval)
