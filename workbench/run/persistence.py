"""A session's part of a saved run: its counters, written beside the agent's state and read back.

:func:`write_run` saves a session (``session.save``): the agent's state, then under ``meta.json``'s
``"session"`` key the run's counters (steps, episodes, elapsed time, seed, the best evaluation, each
env's random stream, the live edits and env calls). :func:`reopen` rebuilds a session from a saved
run so that it continues exactly where it stopped (``Session.reopen``). ``workbench.checkpoint`` is
only the format.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .. import checkpoint
from ..agents.saving import agent_from_run, open_saved
from ..offline.datasets import Dataset
from .live_edits import Event

__all__ = ["Counters", "reopen", "rng_states", "write_run"]


class Counters:
    """The run's clock and what a resumed run continues: ``time_offset`` (seconds of earlier
    runs), whether the agent's generators are seeded already, whether the session was reopened
    from disk, and the envs' saved random streams for the next runner's first reset."""

    def __init__(self) -> None:
        self.time_offset = 0.0
        self.clock_start: float | None = None
        self.seeded = False
        self.resumed_from_disk = False
        self.env_rng: list[Any] | None = None

    @property
    def elapsed(self) -> float:
        """Seconds since the run first started (continues across resumes from disk)."""
        if self.clock_start is None:
            return self.time_offset
        return self.time_offset + time.perf_counter() - self.clock_start

    def start_clock(self) -> None:
        """Start the clock, the first time only."""
        if self.clock_start is None:
            self.clock_start = time.perf_counter()


def rng_states(runner: Any) -> list[Any] | None:
    """The runner's envs' random streams, JSON-ready (None when the runner cannot tell)."""
    try:
        states = runner.rng_states()
        return None if states is None else checkpoint.json_ready(states)
    except Exception:  # a broken runner (a worker gone) has no streams to continue
        return None


def write_run(
    session: Any, ctx: Any, path: str | os.PathLike[str], *, memory: bool = False, overwrite: bool = False
) -> str:
    """Write the agent's state and the session's counters and signals to ``path``."""
    agent = session.agent
    state = agent.state()
    runner = ctx.runner
    meta = {
        **agent.describe(),
        **state.data,
        "session": {
            "steps": session.steps,
            "episodes": session.episodes,
            "elapsed": session.elapsed,
            "seed": session.seed,
            "env_id": session.env_source.env_id,
            "env_name": session.env_source.name,
            "best_eval_reward": session.best_eval_reward,
            "last_eval_step": ctx.periodic.last_eval_step,
            "last_video_step": ctx.periodic.last_video_step,
            "target_steps": session.target_steps,
            # Each env's random stream (None where the env has no np_random), so a resumed run
            # continues the streams instead of replaying its first episodes.
            "env_rng": rng_states(runner) if runner is not None else ctx.counters.env_rng,
            "external": ctx.loop.external,
            # Where it trained and why (information only: loading chooses its own device).
            "device": agent.device_choice.to_dict(),
            # Live edits and env calls (workbench.run.live_edits.Event), plain JSON.
            "events": [event.to_dict() for event in session.events],
            # The datasets an offline run learned from and estimated on, where they are on disk
            # (workbench.Dataset.from_run reads them back to evaluate the loaded agent again).
            "dataset": getattr(getattr(session, "dataset", None), "path", None),
            "ope_dataset": getattr(session.ope_dataset, "path", None),
        },
    }
    return checkpoint.write_run(
        path,
        meta=meta,
        tensors=state.tensors,
        signals=session.signals,
        memory=agent.memory_arrays() if memory else None,
        overwrite=overwrite,
    )


def reopen(
    cls: Any,
    path: str | os.PathLike[str],
    env: Any = None,
    *,
    external: bool = False,
    allow_encoders: Any = None,
    device: Any = "auto",
    **kwargs: Any,
) -> Any:
    """Rebuild a saved session of class ``cls`` (see ``Session.reopen``)."""
    with open_saved(path) as run:
        agent = agent_from_run(run, memory=True, allow_encoders=allow_encoders, device=device).train()
        signals = run.signals()
    saved = run.meta.get("session", {})
    if env is not None and external:
        raise TypeError("Session.reopen got an env and external=True: an external session has no env")
    offline = agent.offline
    if offline:  # it learns from dataset=; the saved env was its evaluation env
        if env is not None or saved.get("env_id"):
            kwargs.setdefault("eval_env", env if env is not None else saved.get("env_id"))
        # The dataset the run names (where it was on disk) when none is given and it is still there.
        named = saved.get("dataset")
        if kwargs.get("dataset") is None and named and os.path.isfile(os.path.join(named, "dataset.json")):
            kwargs["dataset"] = Dataset.load(named)
    elif env is None and not external:
        env = saved.get("env_id")
        if env is None:
            hint = (
                "it was an external session: Session.reopen(path, external=True)"
                if saved.get("external")
                else "pass it: Session.reopen(path, env)"
            )
            raise ValueError(f"{path}: the run was trained on an env built by the application; {hint}")
    kwargs.setdefault("seed", saved.get("seed"))
    if external:
        session = cls.external(agent, **kwargs)
    else:
        session = cls(agent, None if offline else env, **kwargs)
    for name, sig in signals.items():
        session.signals.signal(name).extend(*sig.snapshot())
    ctx = session._ctx
    session.episodes = int(saved.get("episodes", 0))
    ctx.counters.time_offset = float(saved.get("elapsed", 0.0))
    ctx.counters.seeded = True  # the generators continue from their saved states
    session.best_eval_reward = saved.get("best_eval_reward")
    ctx.periodic.last_eval_step = int(saved.get("last_eval_step", session.steps))
    ctx.periodic.last_video_step = int(saved.get("last_video_step", session.steps))
    ctx.periodic.last_checkpoint_step = session.steps
    session.target_steps = saved.get("target_steps")
    ctx.counters.env_rng = saved.get("env_rng")
    session.events = [Event.from_dict(e) for e in saved.get("events", [])]
    ctx.counters.resumed_from_disk = True
    return session
