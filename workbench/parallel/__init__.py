"""Where env steps happen. Every backend is a :class:`~workbench.parallel.runner.Runner`: the base
class declares, with its default, every member the session's loop calls, so the loop calls them
directly and never asks which backend it has. Each runner gives ``reset() -> obs``,
``transitions(agent, obs) -> (Transitions, next_obs)`` (one step of every env, taken by
``workbench.loop.env_step``), ``close()``, ``call()`` (``session.call_env``), ``num_envs`` and
``persistent`` (True when the runner may be kept between two ``start`` calls so episodes continue),
and overrides what it can do more: ``envs_per_worker`` (the session names the worker an episode
ran in, ``worker_3/episode_reward``), ``drain_signals()`` (per-worker signals such as
``worker_3/steps_per_second`` or ``weight_staleness``), ``interrupt()`` (kill the workers of a hung
step), ``rng_states()``, ``set_config()`` (live edits for acting replicas), ``wait_ready()`` and
``ended_episodes()`` (an external session). Agents never know where their env steps ran.

In-process and local workers step envs for the learner's own decisions (``env_step`` over a vector
env whose ``step`` runs here or in worker processes). Ray workers hold a replica of the agent and
run ``workbench.loop.collect`` themselves, the same step function; the runner hands their
transitions, extras included, to the learner one step at a time. With ``ray_acting="learner"`` Ray
actors only step envs, like local workers, and the learner acts for all of them (no torch in the
actors, so they start fast; one round trip per step). Ray itself is started in
``workbench.parallel.ray_start``.

Backends (``Session(..., num_workers=N, backend=...)``):

* ``"inprocess"``: every env stepped in the training thread, one after another.
* ``"local"``: ``num_workers`` worker processes on this machine, each stepping ``envs_per_worker`` envs.
* ``"ray"``: Ray actors as rollout workers, on this machine or a cluster (``ray_address=``); with
  ``ray_acting="learner"``, actors that only step envs (see ``workbench.parallel.ray_envs``).
* ``"auto"`` (the default): in-process for one worker; with more, it times a few steps of one env and
  picks in-process or local (see :func:`choose_backend`).

See ``docs/parallel.md`` for the whole story.
"""

from __future__ import annotations

import difflib
import os
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from ..envs.core import EnvOutputError, EnvSource, VecEnv, as_env_source
from ..envs.masks import MaskReader, sample_action
from ..loop import Transitions, env_step
from ..validation import ArgumentError, Constraint, check_value, choice, flag, integer, number, optional
from .errors import EnvStepError, WorkerError
from .local import LocalRunner, check_step_timeout, split_envs
from .ray_start import check_learner_gpus
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = [
    "BACKENDS",
    "BackendChoice",
    "EnvStepError",
    "InProcessRunner",
    "LocalRunner",
    "Runner",
    "WorkerError",
    "check_double_buffering",
    "check_runner_options",
    "check_worker_env",
    "choose_backend",
    "make_runner",
]

BACKENDS = ("auto", "inprocess", "local", "ray", "envpool")
# Who chooses the actions with backend="ray": a replica of the agent in every actor (the default),
# or the learner, for all envs in one batch, while the actors only step envs (no torch: fast start).
RAY_ACTING = ("workers", "learner")

# What one worker costs the learner per env step (send actions, receive results, wake-ups),
# measured on a 2-core machine; used by choose_backend's estimate.
_IPC_COST_S = 1.2e-4
_PROBE_STEPS = 50
_PROBE_SECONDS = 0.2

# The options every backend takes, and those only Ray takes: what check_runner_options accepts.
_OPTIONS: dict[str, Constraint] = {
    "double_buffer": flag(),
    "envs_per_worker": optional(integer(min=1)),
    "restart_workers": flag(),
    "step_timeout": optional(number(0, min_open=True)),
}
_RAY_OPTIONS: dict[str, Constraint] = {
    "ray_address": optional(Constraint('a string such as "ray://host:10001"', lambda v: isinstance(v, str))),
    "sync_every": optional(integer(min=1)),
    "cpus_per_worker": number(0, min_open=True),
    "ray_init": optional(Constraint("a dict of ray.init() keyword arguments", lambda v: isinstance(v, dict))),
    "ray_acting": choice(*RAY_ACTING),
    "learner_gpus": integer(min=0),
}


class InProcessRunner(VecEnv, Runner):
    """All envs stepped one after another in the training thread (fastest for cheap envs)."""

    persistent = True
    backend = "inprocess"

    def __init__(self, source: EnvSource, num_envs: int, seed: int | None) -> None:
        if source.instance is not None:
            envs = [source.instance]
            self._owned = False
        else:
            envs = [source.make() for _ in range(num_envs)]
            self._owned = True
        super().__init__(envs, seed=seed)

    def transitions(self, agent: Agent, obs: Any) -> tuple[Transitions, Any]:
        """One step of every env for the agent's decision on ``obs``. An exception raised inside an
        env's ``step`` becomes an :class:`EnvStepError` naming the env and the step (the env's
        exception is its cause, and its traceback continues into the env's code)."""
        try:
            return env_step(agent, self, obs)
        except EnvOutputError:
            raise  # already names the env and the step
        except Exception as exc:
            i = self.stepping
            if i is None:
                raise  # not inside an env's step (the agent's decision, or a reset)
            self.stepping = None
            which = f" (env {i} of {self.num_envs})" if self.num_envs > 1 else ""
            error = EnvStepError(
                f"env.step of {type(self.envs[i]).__name__} at step {self.step_count}{which} raised "
                f"{type(exc).__name__}: {exc}"
            )
            raise error.with_traceback(exc.__traceback__) from exc

    def close(self) -> None:
        # A user-built instance belongs to the application: only close envs built here.
        if self._owned:
            super().close()


class BackendChoice(NamedTuple):
    """What ``backend="auto"`` picked and why (see :func:`choose_backend`)."""

    backend: str
    """``"inprocess"`` or ``"local"``."""
    reason: str
    """One sentence with the measured numbers behind the choice."""
    step_seconds: float
    """Mean wall time of one env step, measured."""
    cpu_fraction: float
    """Share of that time spent computing (the rest is waiting: sleeps, I/O, a simulator)."""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _queued_seconds() -> float:
    """Seconds this thread has waited in the kernel's run queue for a core (Linux's schedstat; 0.0
    where it is not available, which leaves the probe's wall time as it is)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def choose_backend(env: Any, num_workers: int, envs_per_worker: int = 1, *, seed: int | None = None) -> BackendChoice:
    """Time a few steps of one env and choose in-process or local workers for ``num_workers``.

    One env is built, reset and stepped with random actions for up to 50 steps or 0.2 s. The wall
    time per step (less any time queued for a busy core) and its CPU share give two estimates per
    training step of all
    ``num_workers * envs_per_worker`` envs: in-process, ``n * t``; local, the slowest worker
    (``envs_per_worker * t``) or the CPU work shared over the cores, whichever is longer, plus
    about 0.1 ms per worker of messaging. The cheaper one wins: CartPole (microseconds a step)
    stays in-process, an env that waits on a simulator goes to workers.
    """
    source = as_env_source(env)
    if source.factory is None:
        return BackendChoice("inprocess", "an env instance cannot be copied to worker processes", 0.0, 1.0)
    probe = source.make()
    try:
        probe.action_space.seed(0 if seed is None else seed)
        obs, info = probe.reset(seed=seed)
        masks = MaskReader(probe, probe.action_space)  # an env with action masks gets allowed actions
        steps = 0
        wall0, cpu0, queued0 = time.perf_counter(), time.process_time(), _queued_seconds()
        while steps < _PROBE_STEPS and time.perf_counter() - wall0 < _PROBE_SECONDS:
            action = sample_action(probe.action_space, masks.read(obs, info))
            obs, _, terminated, truncated, info = probe.step(action)
            steps += 1
            if terminated or truncated:
                obs, info = probe.reset()
        # Time spent queued for a busy core is neither computing nor waiting on a simulator: on a
        # loaded machine it would make CartPole look like an env that waits, so it is taken out.
        queued = _queued_seconds() - queued0
        wall = max(time.perf_counter() - wall0 - queued, 1e-9) / steps
        cpu = (time.process_time() - cpu0) / steps
    finally:
        probe.close()
    cpu_fraction = min(1.0, cpu / wall) if wall > 0 else 1.0
    n = num_workers * envs_per_worker
    cores = _cores()
    inprocess = n * wall
    local = max(envs_per_worker * wall, n * wall * cpu_fraction / cores) + _IPC_COST_S * num_workers
    backend = "local" if local < inprocess else "inprocess"
    reason = (
        f"one env step takes {wall * 1e3:.3f} ms ({cpu_fraction:.0%} computing); for {n} envs a training step "
        f"would take about {inprocess * 1e3:.2f} ms in-process and {local * 1e3:.2f} ms with {num_workers} "
        f"worker processes on {cores} cores, so {backend}"
    )
    return BackendChoice(backend, reason, wall, cpu_fraction)


def check_runner_options(backend: Any, num_workers: Any, options: dict[str, Any], owner: str = "make_runner") -> None:
    """Check a backend, a worker count and backend options as :func:`make_runner` takes them,
    without building or starting anything (``Session`` calls it when it is created).

    Raises :class:`workbench.validation.ArgumentError` (a ``ValueError`` and a ``TypeError``)
    naming the argument, its value and what is allowed; an unknown option name gets the close ones."""
    if not (isinstance(backend, str) and backend in BACKENDS):
        raise ArgumentError(
            f"{owner} got backend={backend!r}: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)} "
            "(see docs/parallel.md)"
        )
    check_value(owner, "num_workers", num_workers, integer(min=1), 1)
    known = {**_OPTIONS, **_RAY_OPTIONS}
    for name, value in options.items():
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise ArgumentError(
                f"{owner} got an unknown option {name}={value!r}.{hint} Known options: {', '.join(_OPTIONS)} "
                f"(and for backend='ray': {', '.join(_RAY_OPTIONS)})."
            )
        if name in _RAY_OPTIONS and backend != "ray":
            raise ArgumentError(
                f"{owner} got the option {name}={value!r}, which only backend='ray' takes (unknown option for "
                f"backend={backend!r}): pass backend='ray' or leave {name} out"
            )
        check_value(owner, name, value, known[name])
    check_learner_gpus(int(options.get("learner_gpus") or 0))
    if options.get("ray_acting") == "learner" and options.get("sync_every") is not None:
        raise ArgumentError(
            f"{owner} got sync_every={options['sync_every']!r} with ray_acting='learner': the learner acts at "
            "every step, so there are no chunks to size. Leave sync_every out, or use ray_acting='workers'"
        )


def check_worker_env(
    source: EnvSource, num_workers: int, backend: str = "auto", options: dict[str, Any] | None = None
) -> None:
    """A ``ValueError`` when ``num_workers > 1`` and ``source`` is an env instance: worker
    processes need a way to build their own copies; and when worker ``options`` (``step_timeout``,
    ``restart_workers``, ``envs_per_worker``) come with a vector env or ``backend="envpool"``, which has
    no such workers (``Session`` checks it when it is created, :func:`make_runner` when it builds)."""
    from .vector import check_vector_options

    check_vector_options(source, backend, dict(options or {}))
    if num_workers > 1 and source.parallel is not None and source.factory is None:
        raise ValueError(
            f"num_workers={num_workers} needs a way to build the PettingZoo ParallelEnv in each worker, but an env "
            "instance cannot be copied to another process. Pass a zero-argument factory instead: "
            "Session(agent, lambda: simple_spread_v3.parallel_env(), num_workers=...)"
        )
    if num_workers > 1 and source.instance is not None:
        raise ValueError(
            f"num_workers={num_workers} needs a way to build the env in each worker, but an env "
            "instance cannot be copied to another process. Pass a zero-argument factory instead: "
            "Session(agent, lambda: MyEnv(...), num_workers=...)"
        )


def check_double_buffering(
    source: Any,
    agent: Agent | None,
    backend: Any,
    num_workers: int,
    options: dict[str, Any],
    owner: str = "make_runner",
    num_envs: int | None = None,
) -> None:
    """Where ``options`` ask for ``double_buffer=True``, a ``ValueError`` (an :class:`ArgumentError`) naming
    what stands in the way: a backend other than ``"local"``, a PettingZoo ParallelEnv or a vector env, an odd
    number of envs per worker (``envs_per_worker``, or the default that covers ``num_envs``, by default the
    agent's ``n_envs``), an agent that cannot decide for half of its envs at a time. ``Session`` calls it when
    it is created."""
    double = options.get("double_buffer", False)
    check_value(owner, "double_buffer", double, flag(), False)
    if not double:
        return
    if backend != "local":
        raise ArgumentError(
            f"{owner} got double_buffer=True with backend={backend!r}: double-buffered sampling steps half of each "
            "local worker process's envs while the learner decides the other half's actions, so it needs "
            "backend='local' (in-process envs step in the learner's own thread; Ray actors act for themselves). "
            "Pass backend='local', or leave double_buffer out"
        )
    if isinstance(source, EnvSource) and (source.find_parallel() is not None or source.vector is not None):
        what = "a PettingZoo ParallelEnv" if source.vector is None else "a vector env"
        raise ArgumentError(
            f"{owner} got double_buffer=True with {what} ({source.name}): double-buffered sampling splits the "
            "session's own single-agent envs in each worker; leave double_buffer out for this env"
        )
    given = options.get("envs_per_worker")
    if num_envs is None:
        num_envs = agent.num_envs if agent is not None else 1
    per = split_envs(num_envs, num_workers, given)
    if per < 2 or per % 2:
        why = f"envs_per_worker={given}" if given is not None else f"{per} env(s) per worker (to cover {num_envs})"
        raise ArgumentError(
            f"{owner} got double_buffer=True with {why}: double-buffered sampling steps each worker's envs in "
            f"two halves, so it needs an even envs_per_worker of at least 2: pass envs_per_worker={max(2, per + 1)}"
            ", or leave double_buffer out"
        )
    if agent is None:
        return
    if not agent.decides_in_parts:
        raise ArgumentError(
            f"{owner} got double_buffer=True with {agent.algorithm}, whose exploration keeps a state per env "
            "(Ornstein-Uhlenbeck noise) that a decision for half of the envs cannot carry: use "
            "wb.GaussianNoise or wb.TruncatedNormalNoise, or leave double_buffer out"
        )
    if agent.per_env_decisions and per * num_workers != agent.num_envs:
        raise ArgumentError(
            f"{owner} got double_buffer=True with {agent.algorithm}, which keeps a state per env for its "
            f"n_envs={agent.num_envs} envs, on {num_workers} x {per} envs: choose num_workers and envs_per_worker "
            "whose product is its n_envs, or leave double_buffer out"
        )


def make_runner(
    source: EnvSource,
    num_envs: int,
    *,
    seed: int | None = None,
    num_workers: int = 1,
    backend: str = "auto",
    agent: Agent | None = None,
    envs_per_worker: int | None = None,
    restart_workers: bool = False,
    step_timeout: float | None = None,
    double_buffer: bool = False,
    **options: Any,
) -> Any:
    """Build the runner that steps envs from ``source`` for a session.

    ``envs_per_worker`` envs in each worker (default: enough to cover ``num_envs``, the agent's
    preference; with one in-process worker, exactly ``num_envs``).
    ``restart_workers=True`` starts a dead worker again instead of failing the run.
    ``step_timeout`` (seconds, worker backends only) kills a worker whose env's ``step`` does not
    return in time; the run fails naming the worker and its envs, or restarts it with
    ``restart_workers=True``. An in-process ``env.step`` cannot be interrupted, so with
    ``step_timeout`` ``"auto"`` picks local workers and ``"inprocess"`` is a ``ValueError``. The Ray backend
    takes its own options (``ray_address``, ``sync_every``...; see ``workbench.parallel.ray_backend``);
    ``ray_acting="learner"`` makes its actors only step envs while the learner acts
    (``workbench.parallel.ray_envs``: no torch in the actors, fast start, one round trip per step).
    ``double_buffer=True`` (``backend="local"``, an even ``envs_per_worker``): each worker steps half of its envs
    while the learner decides the other half's actions (:class:`LocalRunner`).
    """
    check_runner_options(
        backend, num_workers, {"envs_per_worker": envs_per_worker, "restart_workers": restart_workers, **options}
    )
    check_double_buffering(
        source,
        agent,
        backend,
        num_workers,
        {"double_buffer": double_buffer, "envs_per_worker": envs_per_worker},
        num_envs=num_envs,
    )
    check_step_timeout(step_timeout)
    if step_timeout is not None and backend == "inprocess":
        raise ValueError(
            "step_timeout needs worker processes: an env.step running in the training thread cannot "
            "be interrupted. Use backend='local' (one worker is enough) or backend='ray'"
        )
    common: dict[str, Any] = {
        "seed": seed,
        "num_workers": num_workers,
        "backend": backend,
        "envs_per_worker": envs_per_worker,
        "restart_workers": restart_workers,
        "step_timeout": step_timeout,
    }
    if source.find_parallel() is not None:  # a PettingZoo ParallelEnv (or its factory): one slot per agent
        from .multiagent import make_multiagent_runner

        return make_multiagent_runner(source, agent, **common, **options)
    if source.vector is not None or backend == "envpool":  # a vector env steps its own envs
        from .vector import make_vector_runner

        return make_vector_runner(source, num_envs, **common)
    check_worker_env(source, num_workers)
    if step_timeout is not None:
        if backend == "auto":
            backend = "local"  # only workers can enforce step_timeout
    per = split_envs(num_envs, num_workers, envs_per_worker)
    if num_workers == 1 and backend in ("auto", "inprocess"):
        # The single-worker path: exactly the plain vector env, nothing measured, nothing started (its
        # envs_per_worker when given, as one local worker would hold; else the agent's num_envs).
        return _asynchronous(InProcessRunner(source, per, seed), agent)
    if backend == "auto":
        backend = choose_backend(source, num_workers, per, seed=seed).backend
    if backend == "inprocess":
        return _asynchronous(InProcessRunner(source, per * num_workers, seed), agent)
    if backend == "local":
        return _asynchronous(
            LocalRunner(
                source,
                num_workers,
                per,
                double_buffer=double_buffer,
                seed=seed,
                restart_workers=restart_workers,
                step_timeout=step_timeout,
            ),
            agent,
        )
    check_learner_gpus(int(options.get("learner_gpus") or 0), agent)
    if options.pop("ray_acting", "workers") == "learner":
        from .ray_envs import RayEnvRunner

        return RayEnvRunner(
            source,
            num_workers,
            per,
            seed=seed,
            restart_workers=restart_workers,
            step_timeout=step_timeout,
            **options,
        )
    from .ray_backend import RayRunner

    if agent is None:
        raise ValueError("backend='ray' needs the agent (its workers act with the agent's weights)")
    return RayRunner(
        source,
        agent,
        num_workers,
        per,
        seed=seed,
        restart_workers=restart_workers,
        step_timeout=step_timeout,
        **options,
    )


def _asynchronous(runner: Runner, agent: Agent | None) -> Runner:
    """``runner`` itself, or for an asynchronous agent (IMPALA, APPO) ``runner`` stepped by a sampler
    thread while the learner updates (:class:`~workbench.parallel.asynchronous.AsyncRunner`)."""
    if agent is None or not agent.asynchronous:
        return runner
    from .asynchronous import AsyncRunner

    try:
        return AsyncRunner(runner, agent)
    except BaseException:
        runner.close()
        raise
