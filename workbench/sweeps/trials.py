"""One sweep trial, wherever it runs: a Session trained on sampled hyperparameters, reporting its
metric to the study at a fixed grid of env steps (``workbench.sweeps`` runs trials in threads and
worker processes, ``workbench.sweeps.ray_tune`` as Ray Tune trainables; both call :func:`_run_trial`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from ..session import Session

_POLL_S = 0.2  # how often a worker checks its controls and reports the metric
_PROGRESS_S = 2.0  # how often a running trial writes its step count to the study


def _decode(params: Mapping[str, Any], choices: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {k: choices[k][v] if k in choices and v in choices[k] else v for k, v in params.items()}


def _storage_url(storage: str | os.PathLike[str]) -> str:
    text = os.fspath(storage)
    if "://" in text:
        return text
    path = os.path.abspath(text)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return f"sqlite:///{path}"


def _open_storage(url: str) -> optuna.storages.RDBStorage:
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


# -- results ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Spec:
    make_agent: Callable[..., Any]
    env: Any
    dists: dict[str, BaseDistribution]
    choices: dict[str, dict[str, Any]]
    trials: int
    steps: int
    metric: str
    window: int
    report_every: int
    eval_every: int | None
    eval_episodes: int
    seed: int
    study_name: str
    url: str
    pruner: Any
    session_kwargs: dict[str, Any]
    sinks: Callable[[int, dict[str, Any]], Any] | None = None


class _Pruned(Exception):
    pass


class _Interrupted(Exception):
    pass


def _counted(study: optuna.Study) -> int:
    """Trials that use up the budget: ended ones (not interrupted) and those running now."""
    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING:
            continue
        if t.state == TrialState.FAIL and t.user_attrs.get("interrupted"):
            continue
        n += 1
    return n


class _Never:
    """A control event that is never set (Ray Tune trials have no pause)."""

    def is_set(self) -> bool:
        return False


def _run_trial(
    spec: _Spec,
    params: dict[str, Any],
    number: int,
    report: Callable[[float, int], bool],
    progress: Callable[[int], None],
    stop: Any,
    pause: Any,
) -> float:
    """Train one trial's session; ``report(score, grid_step)`` returns True to prune it.

    Shared by the Optuna workers and the Ray Tune trainable. Returns the final score; raises
    ``_Pruned`` or ``_Interrupted`` when the trial ended early for those reasons.
    """
    agent = spec.make_agent(**params)
    kwargs = dict(spec.session_kwargs)
    if spec.eval_every is not None:
        kwargs.setdefault("eval_every", spec.eval_every)
        kwargs.setdefault("eval_episodes", spec.eval_episodes)
    if spec.sinks is not None:
        kwargs["sinks"] = spec.sinks(number, params)
    session = Session(agent, spec.env, seed=spec.seed + number, **kwargs)
    arrived: list[tuple[int, float]] = []  # the metric's points, appended by the training thread

    def on_point(name: str, step: int, value: float) -> None:  # training thread: one append
        if name == spec.metric:
            arrived.append((step, value))

    session.signals.subscribe(on_point)
    session.start(spec.steps)
    reported = 0
    seen = 0
    recent: list[float] = []
    pruned = interrupted = False
    last_progress = 0.0
    while True:
        ended = session.wait(timeout=_POLL_S)
        if stop.is_set() and not ended:
            interrupted = True
            session.stop()
            continue
        if not ended:
            if pause.is_set() and session.status == "running":
                session.pause()
            elif not pause.is_set() and session.status == "paused":
                session.resume()
        # Report the score at each grid point of report_every env steps, from the points as they were
        # then (not as they are now), so that every trial is judged at the same steps however fast it runs.
        new, seen = arrived[seen:], len(arrived)
        for step, value in new:
            recent = [*recent[-(spec.window - 1) :], value] if spec.window > 1 else [value]
            grid = (step // spec.report_every) * spec.report_every
            if grid > reported:
                reported = grid
                if report(sum(recent) / len(recent), grid):
                    pruned = True
                    session.stop()
                    break
        now = time.monotonic()
        if ended or now - last_progress >= _PROGRESS_S:
            progress(int(session.steps))
            last_progress = now
        if ended or pruned:
            session.wait()
            break
    if interrupted:
        raise _Interrupted()
    if pruned:
        raise _Pruned()
    signal = session.signals.get(spec.metric)
    if signal is None or len(signal) == 0:
        known = ", ".join(session.signals.names()) or "none"
        raise ValueError(
            f"the trial never recorded the metric {spec.metric!r} in {spec.steps} steps (recorded: {known}); "
            "pick one of those, or give eval_every= so that eval_reward is recorded"
        )
    return signal.mean(last=spec.window)
