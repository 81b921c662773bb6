"""Hyperparameter sweeps on Optuna: every trial is a Session, and the sweep is live like one.

::

    def make_agent(lr, n_epochs):
        return wb.PPO("CartPole-v1", learning_rate=lr, n_epochs=n_epochs)

    sweep = wb.sweep(make_agent, "CartPole-v1", space={"lr": (1e-5, 1e-2), "n_epochs": [5, 10, 20]},
                     trials=40, steps=50_000, parallel=4, metric="eval_reward", prune=True)
    sweep            # in a notebook: the live dashboard
    sweep.wait(); sweep.best

How it runs. The study lives in a SQLite file (``runs/sweeps/<name>.db`` by default); each worker,
a thread when ``parallel=1`` and otherwise a spawned process, asks the study for a trial, builds
``make_agent(**params)``, trains it in a :class:`~workbench.Session` and reports the metric at a
fixed grid of env steps from the session's live signals, so the pruner (median, or asynchronous
successive halving) can stop a poor trial early. The sweep object in the caller's process only reads
the study (the table of trials, the best trial, the curves) and sets the control events its workers
watch (pause, stop). Stopping marks the trials in flight as interrupted; starting the same sweep
again (same ``name`` and ``storage``, in this or a later process) runs them again and goes on until
``trials`` trials have ended.

``make_agent`` and the env travel to worker processes with cloudpickle (between this library's own
processes only); nothing read from the SQLite file is ever unpickled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from .. import views
from ..run.control import ACTIVE, Controlled, RunControl
from ..run.registry import start_thread
from .space import range_bounds
from .trials import (
    _POLL_S,
    _counted,
    _decode,
    _Interrupted,
    _open_storage,
    _Pruned,
    _run_trial,
    _Spec,
    _storage_url,
)

__all__ = ["Sweep", "TrialResult", "parse_space", "sweep"]

_SCORE_ATTR = "workbench"  # study user attribute holding the sweep's settings, as JSON-ready data


# -- the search space ---------------------------------------------------------------------------


def parse_space(space: Mapping[str, Any]) -> tuple[dict[str, BaseDistribution], dict[str, dict[str, Any]]]:
    """Turn ``space`` into Optuna distributions.

    * ``(low, high)`` floats: a float range, sampled log-uniformly when both ends are positive;
    * ``(low, high)`` integers: an integer range, uniform;
    * a list: a choice among its items (items that are not ``None``/bool/int/float/str, such as
      ``(64, 64)``, are stored by their ``repr`` and handed back as themselves);
    * an Optuna distribution (``optuna.distributions.FloatDistribution(...)``) as it is.

    Returns ``(distributions, choices)``: ``choices[name]`` maps a stored ``repr`` back to its item.
    """
    if not isinstance(space, Mapping) or not space:
        raise ValueError(
            f"space must be a non-empty dict of parameter name to range, list or Optuna distribution, got {space!r}"
        )
    dists: dict[str, BaseDistribution] = {}
    choices: dict[str, dict[str, Any]] = {}
    for name, spec in space.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"space key {name!r} must be the name of a make_agent keyword argument")
        if isinstance(spec, BaseDistribution):
            dists[name] = spec
        elif isinstance(spec, tuple):
            low, high = range_bounds("space", name, spec, ValueError)
            if not low < high:
                raise ValueError(f"space[{name!r}] = {spec!r}: the range needs low < high")
            if isinstance(low, int) and isinstance(high, int):
                dists[name] = IntDistribution(low, high)
            else:
                dists[name] = FloatDistribution(float(low), float(high), log=low > 0 and high > 0)
        elif isinstance(spec, list):
            if not spec:
                raise ValueError(f"space[{name!r}] is an empty list: give at least one choice")
            if all(x is None or isinstance(x, bool | int | float | str) for x in spec):
                dists[name] = CategoricalDistribution(spec)
            else:
                mapping = {repr(x): x for x in spec}
                if len(mapping) != len(spec):
                    raise ValueError(f"space[{name!r}] = {spec!r} lists a choice twice")
                dists[name] = CategoricalDistribution(list(mapping))
                choices[name] = mapping
        else:
            raise ValueError(
                f"space[{name!r}] = {spec!r} is not a search range: give (low, high) for a range, [a, b, ...] "
                "for a choice, or an optuna.distributions object (fixed values belong in make_agent)"
            )
    return dists, choices


def _make_pruner(prune: Any, report_every: int, steps: int) -> optuna.pruners.BasePruner:
    if isinstance(prune, optuna.pruners.BasePruner):
        return prune
    if prune is False or prune is None:
        return optuna.pruners.NopPruner()
    if prune is True or prune == "median":
        # Two finished trials make the first median; no pruning before a trial's first report.
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if prune in ("asha", "sha", "successive_halving"):
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=report_every, reduction_factor=3)
    if prune == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=report_every, max_resource=steps, reduction_factor=3)
    raise ValueError(
        f"prune={prune!r} is not a pruner: use True or 'median', 'asha', 'hyperband', False, "
        "or an optuna.pruners object"
    )


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """One trial of a sweep, as the study records it.

    ``state`` is ``running``, ``complete``, ``pruned``, ``failed`` or ``waiting``; ``value`` is the
    score (the metric at the end, or at the last report for a pruned trial); ``curve`` the reported
    ``(env step, metric)`` points.
    """

    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    steps: int
    seconds: float | None
    curve: list[tuple[int, float]]
    note: str = ""


def _result(frozen: optuna.trial.FrozenTrial, choices: Mapping[str, Mapping[str, Any]]) -> TrialResult:
    attrs = frozen.user_attrs
    state = {
        TrialState.RUNNING: "running",
        TrialState.COMPLETE: "complete",
        TrialState.PRUNED: "pruned",
        TrialState.FAIL: "failed",
        TrialState.WAITING: "waiting",
    }[frozen.state]
    if state == "failed" and attrs.get("interrupted"):
        state = "interrupted"
    seconds = None
    if frozen.datetime_start is not None:
        end = frozen.datetime_complete
        seconds = (end.timestamp() if end else time.time()) - frozen.datetime_start.timestamp()
    curve = sorted((int(k), float(v)) for k, v in frozen.intermediate_values.items())
    value = frozen.value
    if state == "pruned" and value is None and curve:
        value = curve[-1][1]
    return TrialResult(
        number=frozen.number,
        state=state,
        value=None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value),
        params=_decode(frozen.params, choices),
        steps=int(attrs.get("steps", 0)),
        seconds=seconds,
        curve=curve,
        note=str(attrs.get("error", "")),
    )


# -- the worker (a thread, or a spawned process) --------------------------------------------------


def _run_trials(spec: _Spec, stop: Any, pause: Any, worker: int, budget_lock: Any = None) -> None:
    """A worker: ask the study for trials and run them until the budget is used or ``stop`` is set.

    ``budget_lock`` (shared by the worker processes) makes counting the budget and asking for a trial one
    step: without it, a worker that counted while another was between its count and its ``ask`` could start
    one trial more than the budget."""
    sampler = optuna.samplers.TPESampler(seed=spec.seed + 7919 * worker, n_startup_trials=5)
    study = optuna.load_study(
        study_name=spec.study_name, storage=_open_storage(spec.url), sampler=sampler, pruner=spec.pruner
    )
    while not stop.is_set():
        if pause.is_set():
            time.sleep(_POLL_S)
            continue
        with budget_lock if budget_lock is not None else contextlib.nullcontext():
            if _counted(study) >= spec.trials:
                return
            trial = study.ask(spec.dists)  # stored as running before the lock is released: counted by the next
        params = _decode(trial.params, spec.choices)

        def report(score: float, step: int, trial: optuna.Trial = trial) -> bool:
            trial.report(score, step)
            return trial.should_prune()

        def progress(steps: int, trial: optuna.Trial = trial) -> None:
            trial.set_user_attr("steps", steps)

        try:
            value = _run_trial(spec, params, trial.number, report, progress, stop, pause)
        except _Pruned:
            study.tell(trial, state=TrialState.PRUNED)
        except _Interrupted:
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("error", "interrupted by stop(); runs again when the sweep resumes")
            study.tell(trial, state=TrialState.FAIL)
        except Exception as exc:
            trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)


def _process_main(payload: bytes, stop: Any, pause: Any, worker: int, errors: Any, budget_lock: Any = None) -> None:
    """Entry point of a spawned worker process."""
    import cloudpickle

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this process is ours: the table reports, not the log
    try:
        spec = cloudpickle.loads(payload)  # written by this library's parent process, never read from a file
        _run_trials(spec, stop, pause, worker, budget_lock)
    except BaseException as exc:
        errors.put(f"worker {worker}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise SystemExit(1) from None


# -- the live object ------------------------------------------------------------------------------


class Sweep(Controlled):
    """A hyperparameter search whose trials are Sessions; live like a session.

    Build it with :func:`sweep` (which also starts it) or ``wb.Sweep(...)`` and :meth:`start`.

    Example::

        s = wb.Sweep(make_agent, "CartPole-v1", space={"lr": (1e-5, 1e-2)}, trials=20, steps=20_000)
        s.start(); s.pause(); s.resume(); s.stop(); s.start()   # start again: resumes
        s.wait(); s.best, s.table(), s.importances()

    Its lifecycle is a session's (``workbench.run.RunControl``): ``status``, ``is_alive``, ``error``,
    ``wait()`` re-raising a worker's error; Ctrl-C in ``wait()`` stops it first (the trials in flight
    are marked interrupted and run again on the next start).

    Parameters:
        make_agent: builds an agent from keyword arguments named as in ``space``.
        env: the env id or zero-argument factory each trial's Session trains on.
        space: ``{"lr": (1e-5, 1e-2), "n_epochs": [5, 10, 20]}``: a pair of floats is a range, sampled
            log-uniformly when both ends are positive; a pair of integers an integer range; a list a
            choice; Optuna distributions are taken as they are.
        trials: how many trials to run in all (interrupted ones are run again and not counted).
        steps: env steps per trial.
        parallel: trials at a time, each in its own worker process (1: in a thread of this process).
        metric: the signal to optimise; ``eval_reward`` (the default) makes each trial evaluate every
            ``eval_every`` steps (default ``steps // 10``).
        direction: ``maximize`` or ``minimize``.
        prune: ``True``/``"median"`` (Optuna's median rule), ``"asha"`` (asynchronous successive
            halving), ``"hyperband"``, ``False``, or an ``optuna.pruners`` object.
        name: the study's name. The same name and storage resume a stopped sweep.
        storage: the study's SQLite file (default ``runs/sweeps/<name>.db``) or database URL.
        seed: seeds the sampler and each trial's session (``seed + trial number``).
        window: the trial's score is the mean of the metric's last ``window`` points (default 1 for
            ``eval_reward``, else 10), reported to the pruner every ``report_every`` env steps.
        backend: ``optuna`` (local worker processes) or ``ray``: Ray Tune runs the trials (``parallel`` at
            a time, one CPU each) on the local Ray or the cluster at ``ray_address``, its scheduler prunes
            (median stopping rule; ASHA for ``"asha"``), and the study is the same SQLite file.
        session_kwargs: more ``Session`` arguments for every trial (``eval_episodes``, ``num_workers``...).
        sinks: ``fn(trial number, params) -> [sinks]``, each trial's own experiment trackers, e.g.
            ``lambda n, p: [wb.TensorBoard("runs/tb", run_name=f"trial-{n}")]`` (runs in the worker).
    """

    def __init__(
        self,
        make_agent: Callable[..., Any],
        env: Any,
        space: Mapping[str, Any],
        *,
        trials: int = 20,
        steps: int = 50_000,
        parallel: int = 1,
        metric: str = "eval_reward",
        direction: str = "maximize",
        prune: Any = True,
        name: str | None = None,
        storage: str | os.PathLike[str] | None = None,
        seed: int = 0,
        window: int | None = None,
        report_every: int | None = None,
        eval_every: int | None = None,
        eval_episodes: int = 5,
        backend: str = "optuna",
        ray_address: str | None = None,
        session_kwargs: Mapping[str, Any] | None = None,
        sinks: Callable[[int, dict[str, Any]], Any] | None = None,
    ) -> None:
        if not callable(make_agent):
            raise TypeError(
                f"make_agent must be a function that builds an agent from the sampled values, got {make_agent!r}"
            )
        for label, value in (("trials", trials), ("steps", steps), ("parallel", parallel)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"metric must be a signal name such as 'eval_reward', got {metric!r}")
        if backend not in ("optuna", "ray"):
            raise ValueError(f"backend must be 'optuna' (local worker processes) or 'ray' (Ray Tune), got {backend!r}")
        if backend == "ray":
            from .ray_tune import check_ray_prune

            check_ray_prune(prune)
        self.dists, self.choices = parse_space(space)
        self.space = dict(space)
        self.make_agent = make_agent
        self.env = env
        self.trials = trials
        self.steps = steps
        self.parallel = parallel
        self.metric = metric
        self.direction = direction
        self.seed = int(seed)
        self.window = window if window is not None else (1 if metric == "eval_reward" else 10)
        if self.window < 1:
            raise ValueError(f"window must be at least 1 point, got {window!r}")
        if eval_every is None and metric == "eval_reward":
            eval_every = max(steps // 10, 1)
        self.eval_every = eval_every
        self.eval_episodes = eval_episodes
        self.report_every = report_every or eval_every or max(steps // 20, 1)
        if self.report_every < 1:
            raise ValueError(f"report_every must be a positive number of env steps, got {report_every!r}")
        self.backend = backend
        self.ray_address = ray_address
        self.prune = prune
        # With Ray Tune, Tune's scheduler prunes; the study only records.
        self.pruner = optuna.pruners.NopPruner() if backend == "ray" else _make_pruner(prune, self.report_every, steps)
        self.session_kwargs = dict(session_kwargs or {})
        for key in ("seed", "sinks"):
            if key in self.session_kwargs:
                raise ValueError(
                    f"session_kwargs cannot set {key!r}: the sweep sets it for each trial "
                    "(sinks=lambda number, params: [...] makes each trial's own sinks)"
                )
        if sinks is not None and not callable(sinks):
            raise TypeError(
                f"sinks must be a function (trial number, params) -> list of sinks, so that each trial gets its own, "
                f"got {sinks!r}; e.g. sinks=lambda n, p: [wb.TensorBoard('runs/tb', run_name=f'trial-{{n}}')]"
            )
        self.sinks = sinks
        if (parallel > 1 or backend == "ray") and hasattr(env, "step") and hasattr(env, "reset"):
            raise ValueError(
                f"parallel={parallel} runs trials in other processes, which cannot share an env instance: "
                "pass a registered id ('CartPole-v1') or a zero-argument factory (lambda: MyEnv(...))"
            )

        self.url, self.name = self._locate(storage, name)
        self._storage = _open_storage(self.url)
        self.study = optuna.create_study(
            study_name=self.name,
            storage=self._storage,
            direction=direction,
            load_if_exists=True,
            pruner=self.pruner,
        )
        self._check_same_search()

        self._ctx = multiprocessing.get_context("spawn")
        # The flags the worker processes read; the lifecycle (workbench.run.control) sets them.
        self._stop = self._ctx.Event()
        self._pause = self._ctx.Event()
        self._control = RunControl(
            "sweep", loop_pauses=False, on_pause=self._pause.set, on_resume=self._pause.clear, on_stop=self._on_stop
        )

    # -- where the study lives ------------------------------------------------------------------

    @staticmethod
    def _locate(storage: str | os.PathLike[str] | None, name: str | None) -> tuple[str, str]:
        if storage is None:
            name = name or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
            return _storage_url(os.path.join("runs", "sweeps", f"{name}.db")), name
        url = _storage_url(storage)
        if name is None:
            try:
                names = optuna.get_all_study_names(_open_storage(url))
            except Exception:
                names = []
            if len(names) > 1:
                raise ValueError(
                    f"{os.fspath(storage)} holds several studies ({', '.join(sorted(names))}): pass name= to pick one"
                )
            name = names[0] if names else f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
        return url, name

    def _check_same_search(self) -> None:
        """A resumed study must search the same space for the same metric."""
        from optuna.distributions import distribution_to_json

        settings = {
            "metric": self.metric,
            "space": {k: distribution_to_json(d) for k, d in sorted(self.dists.items())},
        }
        saved = self.study.user_attrs.get(_SCORE_ATTR)
        if saved is None:
            self.study.set_user_attr(_SCORE_ATTR, settings)
            return
        if saved.get("metric") != self.metric:
            raise ValueError(
                f"the study {self.name!r} in {self.url} was run for metric {saved.get('metric')!r}, not "
                f"{self.metric!r}: pass the same metric to resume it, or a new name= for a new study"
            )
        if saved.get("space") != settings["space"]:
            changed = sorted(set(saved.get("space", {})) ^ set(settings["space"])) or sorted(
                k for k in settings["space"] if saved["space"].get(k) != settings["space"][k]
            )
            raise ValueError(
                f"the study {self.name!r} in {self.url} searched another space (differs in {', '.join(changed)}): "
                "pass the same space to resume it, or a new name= for a new study"
            )
        if self.study.direction.name.lower() != self.direction:
            raise ValueError(
                f"the study {self.name!r} {self.study.direction.name.lower()}s its metric; "
                f"direction={self.direction!r} cannot resume it"
            )

    def _prepare_resume(self) -> None:
        """Trials left running by a stopped or crashed earlier run are marked interrupted and queued again."""
        storage = self._storage
        trials = self.study.get_trials(deepcopy=False)
        retried = {t.user_attrs.get("retry_of") for t in trials}
        for t in trials:
            if t.state == TrialState.RUNNING:
                storage.set_trial_user_attr(t._trial_id, "interrupted", True)
                storage.set_trial_user_attr(t._trial_id, "error", "interrupted; runs again when the sweep resumes")
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
                interrupted = True
            else:
                interrupted = t.state == TrialState.FAIL and bool(t.user_attrs.get("interrupted"))
            if interrupted and t.number not in retried and set(t.params) == set(self.dists):
                self.study.enqueue_trial(t.params, user_attrs={"retry_of": t.number}, skip_if_exists=False)
                retried.add(t.number)

    # -- state ----------------------------------------------------------------------------------

    def results(self) -> list[TrialResult]:
        """Every trial so far, by number (read from the study; fills in while the sweep runs)."""
        return [_result(t, self.choices) for t in self.study.get_trials(deepcopy=False)]

    @property
    def best(self) -> TrialResult | None:
        """The best complete trial so far (by the metric and direction), or None before one finished."""
        done = [r for r in self.results() if r.state == "complete" and r.value is not None]
        if not done:
            return None
        pick = max if self.direction == "maximize" else min
        return pick(done, key=lambda r: r.value)

    def table(self) -> Any:
        """The trials as a pandas DataFrame (one row each: number, state, value, params, steps, seconds, note)."""
        import pandas as pd

        rows = []
        for r in self.results():
            rows.append(
                {
                    "trial": r.number,
                    "state": r.state,
                    self.metric: r.value,
                    **r.params,
                    "steps": r.steps,
                    "seconds": None if r.seconds is None else round(r.seconds, 1),
                    "note": r.note,
                }
            )
        columns = ["trial", "state", self.metric, *self.dists, "steps", "seconds", "note"]
        return pd.DataFrame(rows, columns=columns).set_index("trial")

    def importances(self, min_trials: int = 4) -> dict[str, float]:
        """Each parameter's importance for the metric (Optuna's fANOVA), once ``min_trials`` trials are complete.

        Empty before that, and for a space of one parameter.
        """
        complete = [t for t in self.study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        if len(complete) < min_trials or len(self.dists) < 2:
            return {}
        try:
            return dict(optuna.importance.get_param_importances(self.study))
        except (RuntimeError, ValueError):  # e.g. every complete trial has the same value
            return {}

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for r in self.results():
            counts[r.state] = counts.get(r.state, 0) + 1
        shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials yet"
        best = self.best
        best_text = "" if best is None else f", best {self.metric}={best.value:.4g} (trial {best.number})"
        return f"<Sweep {self.name!r}: {self.status}, {shown} of {self.trials}{best_text}>"

    # -- commands -------------------------------------------------------------------------------

    def start(self) -> Sweep:
        """Run the trials in the background and return at once; starting again after a stop resumes.

        Raises ``RuntimeError`` when the sweep is already running or paused."""

        def launch(thread: threading.Thread) -> None:
            self._prepare_resume()
            self._stop.clear()
            self._pause.clear()
            start_thread(self, thread)

        self._control.start(self._supervise, name="workbench-sweep", launch=launch)
        return self

    def run(self) -> Sweep:
        """Start and block until the sweep ends; re-raises a worker's error. Ctrl-C stops it cleanly
        (as :meth:`wait` says), then reaches the caller."""
        if self.status not in ACTIVE:
            self.start()
        self.wait()
        return self

    def pause(self) -> None:
        """Pause every running trial (their sessions pause) and start no new one until :meth:`resume`."""
        if self.backend == "ray":
            raise RuntimeError("a Ray Tune sweep cannot pause: stop() it, and start() it again to resume")
        self._control.pause()

    def stop(self, timeout: float | None = 120.0) -> None:
        """Stop the trials in flight (marked interrupted, run again on the next start) and the sweep."""
        self._control.stop(timeout)

    def _on_stop(self) -> None:
        self._stop.set()
        self._pause.clear()

    def dashboard(self) -> Any:
        """The live notebook view of this sweep (an ipywidgets widget)."""
        return views.view("sweep", self)

    def _ipython_display_(self) -> None:
        views.display(self)  # as a session does: one live view (one refresh timer) however often it is shown

    # -- the supervisor thread ------------------------------------------------------------------

    def _spec(self) -> _Spec:
        return _Spec(
            make_agent=self.make_agent,
            env=self.env,
            dists=self.dists,
            choices=self.choices,
            trials=self.trials,
            steps=self.steps,
            metric=self.metric,
            window=self.window,
            report_every=self.report_every,
            eval_every=self.eval_every,
            eval_episodes=self.eval_episodes,
            seed=self.seed,
            study_name=self.name,
            url=self.url,
            pruner=self.pruner,
            session_kwargs=self.session_kwargs,
            sinks=self.sinks,
        )

    def _supervise(self) -> str:
        """The sweep's thread (run by its lifecycle): the trials, then the final status."""
        if self.backend == "ray":
            from .ray_tune import run_tune

            run_tune(self, self._stop)
        elif self.parallel == 1:
            _run_trials(self._spec(), self._stop, self._pause, 0)
        else:
            self._run_processes()
        self._check_not_all_failed()
        return "stopped" if self._stop.is_set() else "finished"

    def _run_processes(self) -> None:
        import cloudpickle

        try:
            payload = cloudpickle.dumps(self._spec())
        except Exception as exc:
            raise TypeError(
                f"parallel={self.parallel} sends make_agent and the env to worker processes, and they could not "
                f"be serialised ({type(exc).__name__}: {exc}); use parallel=1, or a make_agent that does not "
                "capture open files, locks or live sessions"
            ) from exc
        errors = self._ctx.Queue()
        budget_lock = self._ctx.Lock()
        procs = [
            self._ctx.Process(
                target=_process_main,
                args=(payload, self._stop, self._pause, i, errors, budget_lock),
                name=f"workbench-sweep-{i}",
                daemon=False,
            )
            for i in range(self.parallel)
        ]
        for p in procs:
            p.start()
        try:
            for p in procs:
                while p.is_alive():
                    p.join(0.2)
        finally:
            for p in procs:  # only on an error in this thread: do not leave workers behind
                if p.is_alive():
                    self._stop.set()
                    p.join(30)
                    if p.is_alive():
                        p.terminate()
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        failed = [p for p in procs if p.exitcode != 0]
        if failed:
            detail = "\n".join(messages) or ", ".join(f"{p.name} exit code {p.exitcode}" for p in failed)
            raise RuntimeError(f"{len(failed)} of {len(procs)} sweep workers failed:\n{detail}")

    def _check_not_all_failed(self) -> None:
        results = self.results()
        if results and not self._stop.is_set() and all(r.state == "failed" for r in results):
            raise RuntimeError(
                f"every trial of sweep {self.name!r} failed; the first: {results[0].note} (params {results[0].params})"
            )


def sweep(
    make_agent: Callable[..., Any],
    env: Any,
    space: Mapping[str, Any],
    *,
    start: bool = True,
    **options: Any,
) -> Sweep:
    """Search hyperparameters with Optuna; each trial trains ``make_agent(**sampled)`` in a Session.

    Returns the live :class:`Sweep`, already started (``start=False`` to start it yourself); it
    trains in the background: ``sweep.wait()`` blocks, ``sweep.best`` is the best trial so far,
    ``sweep.table()`` the trials, and in a notebook the sweep shows its dashboard.

    The keyword arguments other than ``start`` are :class:`Sweep`'s, with its defaults.

    Parameters:
        make_agent: builds an agent from keyword arguments named as in ``space``.
        env: the env id or zero-argument factory each trial's Session trains on.
        space: the search space (see :class:`Sweep`).
        start: start the sweep before returning it.
        **options: :class:`Sweep`'s other keyword arguments (``trials``, ``steps``, ``parallel``, ``metric``,
            ``prune``, ``backend``...), documented there.
    """
    s = Sweep(make_agent, env, space, **options)
    return s.start() if start else s
