"""The Ray Tune backend of :class:`~workbench.Sweep` (``backend="ray"``), so a cluster runs a big sweep.

Ray Tune runs the trials (one CPU each, ``parallel`` at a time, on the local Ray or the cluster at
``ray_address``) and its scheduler prunes them (median stopping rule, or ASHA); Ray's Optuna searcher
samples the parameters into the same SQLite study as the local backend, so the sweep's table, best
trial, dashboard and resume work the same. Each trial runs the same code as a local one
(:func:`workbench.sweeps._run_trial`) and reports its score to Tune at the same grid of env steps.
"""

from __future__ import annotations

import os
import uuid
import zlib
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from ..parallel.ray_start import init_private_ray as _init_private_ray
from .trials import _counted, _decode, _Interrupted, _Never, _open_storage, _Pruned, _run_trial, _Spec

if TYPE_CHECKING:
    from .sweep import Sweep

__all__ = ["check_ray_prune", "run_tune"]

_SCORE = "score"
_STEPS = "env_steps"

# Tune pickles its searcher and stopper (to write its experiment state), and an Event cannot be
# pickled: they find the running sweep's stop event here, by a key made for that one run.
_STOP_EVENTS: dict[str, Any] = {}


def _stop_requested(key: str) -> bool:
    event = _STOP_EVENTS.get(key)
    return event is not None and event.is_set()


def check_ray_prune(prune: Any) -> None:
    """Refuse a ``prune`` value Ray Tune cannot use, naming those it can."""
    if prune in (True, False, None, "median", "asha", "hyperband") or hasattr(prune, "on_trial_result"):
        return
    raise ValueError(
        f"prune={prune!r} does not work with backend='ray': use True or 'median' (median stopping rule), "
        "'asha' or 'hyperband' (asynchronous successive halving), False, or a ray.tune scheduler"
    )


def _scheduler(sweep: Sweep) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    prune, mode = sweep.prune, "max" if sweep.direction == "maximize" else "min"
    if hasattr(prune, "on_trial_result"):
        return prune
    if prune is True or prune == "median":
        return MedianStoppingRule(
            time_attr=_STEPS, metric=_SCORE, mode=mode, grace_period=sweep.report_every, min_samples_required=2
        )
    if prune in ("asha", "hyperband"):
        return ASHAScheduler(
            time_attr=_STEPS,
            metric=_SCORE,
            mode=mode,
            max_t=sweep.steps,
            grace_period=sweep.report_every,
            reduction_factor=3,
        )
    return FIFOScheduler()


def _trainable(config: dict[str, Any], spec: _Spec) -> None:
    """One Ray Tune trial: a Session trained by the shared trial code, reporting to Tune."""
    from ray import tune

    trial_id = tune.get_context().get_trial_id() or ""
    suffix = trial_id.rsplit("_", 1)[-1]
    index = int(suffix) if suffix.isdigit() else zlib.crc32(trial_id.encode()) % 100_000
    steps_done = [0]

    def report(score: float, step: int) -> bool:
        tune.report({_SCORE: score, _STEPS: step, "steps": steps_done[0], "final": False})
        return False  # Tune's scheduler stops the trial itself

    def progress(steps: int) -> None:
        steps_done[0] = steps

    try:
        value = _run_trial(spec, _decode(config, spec.choices), index, report, progress, _Never(), _Never())
    except (_Pruned, _Interrupted):  # not raised here: Tune stops trials from outside
        return
    tune.report({_SCORE: value, _STEPS: spec.steps, "steps": steps_done[0], "final": True})


def _searcher(sweep: Sweep, stop_key: str) -> Any:
    from ray.tune.search.optuna import OptunaSearch

    class Search(OptunaSearch):  # type: ignore[misc]
        """Ray's Optuna searcher, with the states and steps this library's table reads."""

        def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is None or trial_id in self._completed_trials or result.get("final"):
                return
            ot_trial.report(float(result[_SCORE]), int(result[_STEPS]))  # at env steps, not Tune's iterations
            ot_trial.set_user_attr("steps", int(result.get("steps", 0)))

        def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is None or trial_id in self._completed_trials:
                return
            final = bool(result and result.get("final"))
            if result:
                ot_trial.set_user_attr("steps", int(result.get("steps", 0)))
            state = None
            if error:
                ot_trial.set_user_attr("error", "the trial raised in Ray Tune (its error.txt is under runs/sweeps/ray)")
            elif _stop_requested(stop_key) and not final:
                ot_trial.set_user_attr("interrupted", True)
                ot_trial.set_user_attr("error", "interrupted by stop(); runs again when the sweep resumes")
                state = TrialState.FAIL
            elif not final:
                state = TrialState.PRUNED  # Tune's scheduler stopped it before its budget
            if state is None:
                super().on_trial_complete(trial_id, result, error)
                return
            self._ot_study.tell(ot_trial, state=state)
            self._completed_trials.add(trial_id)

    return Search(
        space=sweep.dists,
        metric=_SCORE,
        mode="max" if sweep.direction == "maximize" else "min",
        study_name=sweep.name,
        storage=_open_storage(sweep.url),
        sampler=optuna.samplers.TPESampler(seed=sweep.seed, n_startup_trials=5),
    )


class _StopWhenAsked:
    """A Tune stopper that ends the whole experiment once the sweep's stop event is set."""

    def __init__(self, stop_key: str) -> None:
        self.stop_key = stop_key

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return _stop_requested(self.stop_key)


def _make_stopper(base: type) -> type:
    return type("WorkbenchStopper", (_StopWhenAsked, base), {})


def run_tune(sweep: Sweep, stop: Any) -> None:
    """Run the sweep's remaining trials on Ray Tune; returns when they ended or ``stop`` was set."""
    import ray
    from ray import tune
    from ray.tune.stopper import Stopper

    remaining = sweep.trials - _counted(sweep.study)
    if remaining <= 0:
        return
    owns_ray = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning"}
        if sweep.ray_address is None:
            options["num_cpus"] = max(os.cpu_count() or 1, sweep.parallel)
            options["_node_ip_address"] = "127.0.0.1"  # a private Ray: reachable from this machine only
            _init_private_ray(ray, options)  # as a session's: loopback sockets only, lean imports
        else:
            options["address"] = sweep.ray_address
            ray.init(**options)
        owns_ray = True
    stop_key = uuid.uuid4().hex
    _STOP_EVENTS[stop_key] = stop
    stopper = _make_stopper(Stopper)(stop_key)
    try:
        trainable = tune.with_resources(tune.with_parameters(_trainable, spec=sweep._spec()), {"cpu": 1})
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=_searcher(sweep, stop_key),
                scheduler=_scheduler(sweep),
                num_samples=remaining,
                max_concurrent_trials=sweep.parallel,
            ),
            run_config=tune.RunConfig(
                name=sweep.name,
                storage_path=os.path.abspath(os.path.join("runs", "sweeps", "ray")),
                stop=stopper,
                verbose=0,
            ),
        )
        tuner.fit()
    finally:
        _STOP_EVENTS.pop(stop_key, None)
        if owns_ray:
            ray.shutdown()
