"""A run's part of a saved run: its counters, written beside the agent's state and read back.

:func:`write_run` saves a run (``session.save``): the agent's state, then under ``meta.json``'s
``"session"`` key the run's counters (steps, episodes, elapsed time, seed, the best evaluation, each
env's random stream, the live edits and env calls). :func:`read_saved` reads a saved run back and
:func:`restore` puts its counters into the run rebuilt from it, so that it continues exactly where it
stopped (``Session.reopen``). ``workbench.checkpoint`` is only the format.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .. import checkpoint
from ..agents.saving import agent_from_run, open_saved
from ..offline.datasets import Dataset
from .live_edits import Event

__all__ = ["SavedRun", "read_saved", "restore", "rng_states", "write_run"]


def rng_states(runner: Any) -> list[Any] | None:
    """The runner's envs' random streams, JSON-ready (None when the runner cannot tell)."""
    try:
        states = runner.rng_states()
        return None if states is None else checkpoint.json_ready(states)
    except Exception:  # a broken runner (a worker gone) has no streams to continue
        return None


def write_run(ctx: Any, path: str | os.PathLike[str], *, memory: bool = False, overwrite: bool = False) -> str:
    """Write the agent's state and the run's counters and signals to ``path`` (``ctx``: the run's
    :class:`~workbench.run.context.RunContext`)."""
    state = ctx.state
    agent = state.agent
    saved = agent.state()
    runner = ctx.runner
    meta = {
        **agent.describe(),
        **saved.data,
        "session": {
            "steps": state.steps,
            "episodes": state.episodes,
            "elapsed": state.elapsed,
            "seed": state.seed,
            "env_id": state.env_source.env_id,
            "env_name": state.env_source.name,
            "best_eval_reward": state.best_eval_reward,
            "last_eval_step": ctx.periodic.last_eval_step,
            "last_video_step": ctx.periodic.last_video_step,
            "target_steps": state.target_steps,
            # Each env's random stream (None where the env has no np_random), so a resumed run
            # continues the streams instead of replaying its first episodes.
            "env_rng": rng_states(runner) if runner is not None else state.counters.env_rng,
            "external": ctx.loop.external,
            # Where it trained and why (information only: loading chooses its own device).
            "device": agent.device_choice.to_dict(),
            # Live edits and env calls (workbench.run.live_edits.Event), plain JSON.
            "events": [event.to_dict() for event in state.events],
            # The datasets an offline run learned from and estimated on, where they are on disk
            # (workbench.Dataset.from_run reads them back to evaluate the loaded agent again).
            "dataset": getattr(state.dataset, "path", None),
            "ope_dataset": getattr(state.ope_dataset, "path", None),
        },
    }
    tensors = saved.tensors
    if state.selfplay is not None:  # self-play: the league (snapshots' weights, ratings, sampling state)
        meta["league"] = state.selfplay.league.meta()
        # The training games against the fixed references (reference_share=), tallied on the env, not rated.
        meta["reference_results"] = {name: list(map(int, c)) for name, c in state.selfplay.reference_results.items()}
        tensors = {**tensors, **state.selfplay.league.tensors()}
    return checkpoint.write_run(
        path,
        meta=meta,
        tensors=tensors,
        signals=state.signals,
        memory=agent.memory_arrays() if memory else None,
        overwrite=overwrite,
    )


@dataclasses.dataclass
class SavedRun:
    """What :func:`read_saved` reads of a saved run: the agent (with its memory), the env to train
    on (None: the facade's default), the facade's keyword arguments, its signals and counters."""

    agent: Any
    env: Any
    kwargs: dict[str, Any]
    signals: dict[str, Any]
    counters: dict[str, Any]
    offline: bool
    league: tuple[Any, dict[str, Any], str] | None = None
    """A self-play run's league: (its meta, the run's tensors, the label errors name)."""
    reference_results: dict[str, Any] | None = None
    """A self-play run's training games against each reference (wins, draws, losses), where it saved them."""


def read_saved(
    path: str | os.PathLike[str], env: Any, external: bool, allow_encoders: Any, device: Any, kwargs: dict[str, Any]
) -> SavedRun:
    """Read a saved run to rebuild it: ``Session.reopen``'s arguments as it got them (``kwargs``: the
    session's, completed here from the save). The facade is built from the result, then :func:`restore`
    puts its counters back."""
    with open_saved(path) as run:
        agent = agent_from_run(run, memory=True, allow_encoders=allow_encoders, device=device).train()
        signals = run.signals()
        league = (run.meta["league"], run.tensors(), run.label(checkpoint.META)) if "league" in run.meta else None
        reference_results = _reference_results(run.meta.get("reference_results"), run.label(checkpoint.META))
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
        env = None
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
    return SavedRun(
        agent=agent,
        env=env,
        kwargs=kwargs,
        signals=signals,
        counters=saved,
        offline=offline,
        league=league,
        reference_results=reference_results,
    )


def restore(ctx: Any, saved: SavedRun) -> None:
    """Put a saved run's signals and counters back into a freshly built run (``ctx``), so that it
    continues exactly where it stopped."""
    state, counters = ctx.state, saved.counters
    if saved.league is not None:
        if state.selfplay is None:
            raise ValueError(
                "the run was trained by self-play: reopen it on a wb.SelfPlay env of the same game, "
                "Session.reopen(path, wb.SelfPlay(game)); its league is restored into that env's league"
            )
        state.selfplay.league.load_state(*saved.league)
        _restore_reference_results(state.selfplay, saved.reference_results)
    for name, sig in saved.signals.items():
        state.signals.signal(name).extend(*sig.snapshot())
    state.episodes = int(counters.get("episodes", 0))
    state.counters.time_offset = float(counters.get("elapsed", 0.0))
    state.counters.seeded = True  # the generators continue from their saved states
    state.best_eval_reward = counters.get("best_eval_reward")
    ctx.periodic.last_eval_step = int(counters.get("last_eval_step", state.steps))
    ctx.periodic.last_video_step = int(counters.get("last_video_step", state.steps))
    ctx.periodic.last_checkpoint_step = state.steps
    state.target_steps = counters.get("target_steps")
    state.counters.env_rng = counters.get("env_rng")
    state.events = [Event.from_dict(e) for e in counters.get("events", [])]
    state.counters.resumed_from_disk = True


def _reference_results(saved: Any, label: str) -> dict[str, list[int]] | None:
    """The saved tallies of a self-play run's training games against its references, checked (None for a run
    saved before they were kept, or one without self-play)."""
    if saved is None:
        return None
    if not isinstance(saved, dict):
        raise checkpoint.CheckpointError(f"{label}: reference_results {saved!r} is not a table of counts")
    for name, counts in saved.items():
        if not (isinstance(counts, list) and len(counts) == 3 and all(type(c) is int and c >= 0 for c in counts)):
            raise checkpoint.CheckpointError(
                f"{label}: reference_results[{name!r}] {counts!r} is not three counts (wins, draws, losses)"
            )
    return {str(name): list(counts) for name, counts in saved.items()}


def _restore_reference_results(env: Any, saved: dict[str, list[int]] | None) -> None:
    """Put the saved tallies of training games against the references back into the self-play ``env``,
    for the references it has. A reference the reopening env lacks is left out: the reopened run's next
    save no longer holds its count."""
    for name, counts in (saved or {}).items():
        if name in env.reference_results:
            env.reference_results[name] = list(counts)
