"""Ray actors as rollout workers, on this machine or on a cluster (``ray_acting="workers"``, the default;
actors that only step envs while the learner acts, ``ray_acting="learner"``, are in ``ray_envs.py``).

Each worker is a Ray actor holding ``envs_per_worker`` envs and a replica of the agent (same class,
same hyperparameters, its own random seed). The learner stays in the session's training thread and
speaks the same four verbs as always; only where actions are chosen changes:

* **On-policy agents** (PPO, A2C: a rollout and no replay memory): every worker collects one rollout
  of ``n_steps`` steps with the current weights, the learner observes it step by step and updates,
  and the new weights go out by one ``ray.put`` per iteration. Staleness is zero by construction.
* **Off-policy agents** (DQN, DDPG, TD3, SAC: a replay memory): Ape-X style. Workers keep collecting
  chunks of ``sync_every`` steps; while the learner observes one chunk into its replay memory (and
  updates), the next chunk is already being collected with the freshest weights, which the workers
  pull at every chunk start. Data is therefore at most one chunk behind: its staleness (learner
  updates between the weights that chose the actions and the learner that learns from them) is
  bounded by the updates in one chunk, and recorded as the ``weight_staleness`` signal.

Agents do not know any of this. A worker collects with ``workbench.loop.collect``, the same step
function the session uses in-process, and sends back the stacked transitions with each step's
``extras`` (PPO's values and log-probabilities): the learner observes exactly what it would have
observed had it stepped the envs itself. The replica gets the learner's declared network weights
(``Agent.network_weights``), nothing else.

Ray starts on first use: ``ray.init()`` starts a local Ray (no dashboard, every socket bound to
127.0.0.1, so nothing is reachable from other machines) when none is running, and shuts it down
again when the run ends; ``ray_address="auto"``, ``"HOST:6379"`` or ``"ray://host:10001"`` joins a
running cluster instead. Start Ray yourself (``ray.init()``) to keep it between runs.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..agents.live import apply_edits
from ..agents.registry import config_values
from ..envs.core import EnvMethodError, EnvSource, VecEnv
from ..loop import Step, Transitions, collect, concat_envs, row
from .errors import WorkerError
from .local import worker_options
from .ray_start import import_ray, start_ray
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["RayRunner", "is_on_policy"]

_DEFAULT_SYNC_EVERY = 32  # off-policy: steps per env between weight pulls
_START_TIMEOUT_S = 120.0  # actor start: a cluster may have to pull the environment first


def is_on_policy(agent: Agent) -> bool:
    """True for agents that learn only from data of their current weights (PPO, A2C): each agent
    class says so with its ``on_policy`` attribute."""
    return bool(agent.on_policy)


class _ClockedReplica:
    """An acting replica whose step clock follows the learner's: every decision advances it by
    the envs of all workers, as one learner step would, so schedules (epsilon, warm-up) match."""

    def __init__(self, agent: Agent, stride: int) -> None:
        self.agent = agent
        self.stride = stride

    def decide(self, obs: Any, deterministic: bool = False, action_mask: Any = None) -> Step:
        step = self.agent.decide(obs, deterministic, action_mask)
        self.agent.num_timesteps += self.stride
        return step

    def begin_episode(self, done: np.ndarray) -> None:
        self.agent.begin_episode(done)


class _TimedEnvs:
    """The worker's vector env, noting when its current ``step`` began (for ``step_timeout``)."""

    game_ends: np.ndarray | None = None  # whole games' scores are not sent back from actors (yet)

    def __init__(self, vec: VecEnv) -> None:
        self.vec = vec
        self.started: float | None = None

    @property
    def masks(self) -> np.ndarray | None:
        """The envs' current action masks (``VecEnv.masks``)."""
        return self.vec.masks

    @property
    def final_masks(self) -> np.ndarray | None:
        """The masks of the last step's next states (``VecEnv.final_masks``)."""
        return self.vec.final_masks

    @property
    def successes(self) -> np.ndarray | None:
        """Goal envs' ``info["is_success"]`` of the episodes the last step ended (``VecEnv.successes``)."""
        return self.vec.successes

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        self.started = time.monotonic()
        try:
            return self.vec.step(actions)
        finally:
            self.started = None


class _RolloutWorker:
    """The actor: envs plus an acting replica of the agent. Runs inside a Ray worker process."""

    def __init__(
        self,
        worker_id: int,
        factory: Any,
        env_id: str | None,
        num_envs: int,
        env_seed: int | None,
        agent_cls: type,
        spaces: tuple[Any, Any],
        config: dict[str, Any],
        agent_seed: int | None,
    ) -> None:
        torch.set_num_threads(1)  # many workers share the cores; one thread each is fastest
        source = EnvSource(name=str(env_id or factory), factory=factory, env_id=env_id)
        self.id = worker_id
        self.vec = VecEnv([source.make() for _ in range(num_envs)], seed=env_seed)
        self.timed = _TimedEnvs(self.vec)
        # Replicas act on the CPU, eagerly, in fp32, whatever the learner's device: they load its weights.
        eager = {k: v for k, v in (("compile", False), ("precision", "fp32")) if k in config}
        self.agent = agent_cls(
            observation_space=spaces[0], action_space=spaces[1], seed=agent_seed, device="cpu", **{**config, **eager}
        )
        self.agent.train()
        self.obs: np.ndarray | None = None
        # collect and call_env take turns (with step_timeout the actor serves two calls at once).
        self.lock = threading.Lock()

    def pid(self) -> int:
        """The worker process id (tests check it is gone after a run)."""
        return os.getpid()

    def reset(self) -> np.ndarray:
        """Reset the envs (seeded on the first call)."""
        self.obs = self.vec.reset()
        return self.obs

    def collect(
        self,
        weights: dict[str, Any] | None,
        timesteps: int,
        total: int | None,
        stride: int,
        steps: int,
        edits: dict[str, Any] | None = None,
    ) -> tuple[Transitions, np.ndarray, float]:
        """Collect ``steps`` steps with ``weights`` (``workbench.loop.collect``); return the stacked
        transitions, the observations to continue from, and the seconds it took. ``edits``: live
        hyperparameter changes (``session.set``: exploration, warm-up...) applied first."""
        with self.lock:
            agent = self.agent
            if edits:
                apply_edits(agent, edits)
            if weights is not None:
                agent.load_networks(weights)
            # The replica's clock starts at the learner's, so schedules (epsilon, warm-up) match.
            agent.num_timesteps, agent.total_timesteps = timesteps, total
            assert self.obs is not None, "reset() first"
            start = time.perf_counter()
            transitions, self.obs = collect(_ClockedReplica(agent, stride), self.timed, self.obs, steps)
            return transitions, self.obs, time.perf_counter() - start

    def call_env(self, name: str, args: tuple, kwargs: dict[str, Any]) -> tuple[str, Any]:
        """``session.call_env``: method ``name`` on each of this worker's envs, between chunks.
        Returns ``("ok", results)`` or ``("missing", message)`` when the env has no such method."""
        with self.lock:
            try:
                return "ok", self.vec.call(name, args, kwargs)
            except EnvMethodError as exc:
                return "missing", str(exc)

    def stepping(self) -> tuple[float | None, int | None]:
        """Seconds the current ``env.step`` has run (None between steps) and the index of the env
        stepping, among this worker's. Answered from a second thread while ``collect`` runs."""
        started = self.timed.started
        return (None if started is None else time.monotonic() - started), self.vec.stepping


def _kill_actors(actors: list[Any], owns_ray: bool) -> None:
    try:
        import ray
    except ImportError:
        return
    if not ray.is_initialized():
        actors.clear()
        return
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass
    actors.clear()
    if owns_ray:
        ray.shutdown()


class RayRunner(Runner):
    """``num_workers`` Ray actors, each with ``envs_per_worker`` envs and an acting agent replica.

    Options (keyword arguments of ``Session`` with ``backend="ray"``):
        ray_address: None starts a local Ray when none is running; ``"auto"`` or an address joins a cluster.
        sync_every: off-policy agents: steps per env between weight pulls (default 32). On-policy
            agents always collect ``n_steps`` per iteration.
        cpus_per_worker: Ray CPUs each actor reserves (default 1; lower it to pack more workers on a node).
        ray_init: extra keyword arguments for ``ray.init`` when this runner starts Ray.

    ``step_timeout`` (seconds): a worker whose env's ``step`` runs longer is killed and the run fails
    with a :class:`WorkerError` (``timed_out=True``) naming the worker and the env, or the worker is
    started again with ``restart_workers=True``. The runner asks a stepping worker how long its
    current step has run (actors then answer from a second thread).
    """

    envs_per_worker: int  # set by __init__ (the base class allows None for runners without workers)

    persistent = False  # actors never outlive a run: stop() leaves nothing behind
    backend = "ray"
    can_interrupt = True  # interrupt() kills the actors

    def __init__(
        self,
        source: EnvSource,
        agent: Agent,
        num_workers: int,
        envs_per_worker: int,
        *,
        ray_address: str | None = None,
        sync_every: int | None = None,
        cpus_per_worker: float = 1.0,
        ray_init: dict[str, Any] | None = None,
        learner_gpus: int = 0,
        **options: Any,
    ) -> None:
        """``options``: :func:`~workbench.parallel.local.worker_options` (``seed``, ``restart_workers``,
        ``step_timeout``)."""
        ray = import_ray(source)
        if sync_every is not None and (not isinstance(sync_every, int) or sync_every < 1):
            raise ValueError(f"sync_every must be a positive number of steps, got {sync_every!r}")
        self._ray = ray
        self.agent = agent
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.num_envs = num_workers * envs_per_worker
        self.seed, self.restart_workers, self.step_timeout = worker_options(**options)
        self.restarts = 0
        self.on_policy = is_on_policy(agent)
        if self.on_policy:
            self.chunk = int(agent.rollout_steps or sync_every or _DEFAULT_SYNC_EVERY)
        else:
            self.chunk = sync_every or _DEFAULT_SYNC_EVERY
        self.owns_ray = start_ray(ray, num_workers, cpus_per_worker, ray_address, ray_init, learner_gpus)
        actor_options: dict[str, Any] = {"num_cpus": cpus_per_worker, "num_gpus": 0, "max_restarts": 0}
        if self.step_timeout is not None:
            actor_options["max_concurrency"] = 2  # stepping() answers while collect() runs
        self._actor_cls = ray.remote(_RolloutWorker).options(**actor_options)
        self._source = source
        self._config = config_values(agent.config)
        self._actors: list[Any] = [None] * num_workers
        self._live: list[Any] = []  # what the finalizer kills
        self._finalizer = weakref.finalize(self, _kill_actors, self._live, self.owns_ray)
        self._pids: dict[int, int] = {}
        self._weights_ref: Any = None
        self._weights_version = -1
        self._inflight: list[Any] | None = None
        self._inflight_version = -1
        self._data: Transitions | None = None
        self._data_last_obs: np.ndarray | None = None
        self._t = 0
        self._chunk_len = 0
        self._obs: np.ndarray | None = None
        self._pending: list[tuple[str, float]] = []
        self._edits: dict[str, Any] = {}  # live edits not yet sent to the workers
        try:
            for w in range(num_workers):
                self._actors[w] = self._new_actor(w, None if self.seed is None else self.seed + w * envs_per_worker)
            pids = [a.pid.remote() for a in self._actors]
            for w, ref in enumerate(pids):
                self._pids[w] = self._get(w, ref, timeout=_START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    # -- actors ---------------------------------------------------------------------------------

    def _new_actor(self, w: int, env_seed: int | None) -> Any:
        agent_seed = None if self.seed is None else self.seed * 7919 + 104_729 * (w + 1) + self.restarts
        actor = self._actor_cls.remote(
            w,
            self._source.factory if self._source.env_id is None else None,
            self._source.env_id,
            self.envs_per_worker,
            env_seed,
            type(self.agent),
            (self.agent.observation_space, self.agent.action_space),
            self._config,
            agent_seed,
        )
        self._live.append(actor)
        return actor

    def _envs(self, w: int) -> slice:
        return slice(w * self.envs_per_worker, (w + 1) * self.envs_per_worker)

    def _get(self, w: int, ref: Any, timeout: float | None = None) -> Any:
        """``ray.get`` for worker ``w``; a raising env or a dead actor becomes a WorkerError naming it."""
        ray = self._ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(ref, timeout=timeout)
        except RayActorError as exc:
            raise WorkerError(w, f"Ray actor died ({type(exc).__name__})", envs=self._envs(w), died=True) from exc
        except RayTaskError as exc:
            cause = exc.as_instanceof_cause() if hasattr(exc, "as_instanceof_cause") else exc
            raise WorkerError(w, "raised", envs=self._envs(w), remote_traceback=str(exc)) from cause
        except GetTimeoutError as exc:
            raise WorkerError(w, f"did not answer within {timeout:.0f} s", envs=self._envs(w)) from exc

    def _get_chunk(self, w: int, ref: Any) -> Any:
        """A worker's collected chunk; with ``step_timeout``, a worker whose current env step has
        run longer is killed (a WorkerError with ``timed_out=True`` naming it and the env)."""
        if self.step_timeout is None:
            return self._get(w, ref)
        ray = self._ray
        from ray.exceptions import GetTimeoutError

        poll = min(1.0, self.step_timeout / 4)
        while True:
            ready, _ = ray.wait([ref], timeout=poll)
            if ready:
                return self._get(w, ref)
            try:
                seconds, env = ray.get(self._actors[w].stepping.remote(), timeout=self.step_timeout)
            except GetTimeoutError:
                seconds, env = float("inf"), None  # the env holds the worker so hard it cannot answer
            except Exception:
                return self._get(w, ref)  # the actor is gone: _get says how
            if seconds is not None and seconds > self.step_timeout:
                self._kill(w)
                which = "" if env is None else f" of env {w * self.envs_per_worker + env}"
                raise WorkerError(
                    w,
                    f"was killed: env.step{which} did not return within step_timeout={self.step_timeout:g} s",
                    envs=self._envs(w),
                    timed_out=True,
                )

    def _kill(self, w: int) -> None:
        try:
            self._ray.kill(self._actors[w], no_restart=True)
        except Exception:
            pass

    def interrupt(self) -> None:
        """Kill every worker actor now, from any thread: a step waiting on one returns at once
        with a :class:`WorkerError` (how a session gives up a run stuck in a step)."""
        for w in range(len(self._actors)):
            if self._actors[w] is not None:
                self._kill(w)

    def _restart(self, w: int) -> None:
        old = self._actors[w]
        try:
            self._ray.kill(old, no_restart=True)
        except Exception:
            pass
        if old in self._live:
            self._live.remove(old)
        self.restarts += 1
        seed = None if self.seed is None else self.seed + 1_000_003 * self.restarts + w * self.envs_per_worker
        self._actors[w] = self._new_actor(w, seed)
        self._pids[w] = self._get(w, self._actors[w].pid.remote(), timeout=_START_TIMEOUT_S)
        self._get(w, self._actors[w].reset.remote(), timeout=_START_TIMEOUT_S)
        self._pending.append(("worker_restarts", float(self.restarts)))

    # -- collecting -----------------------------------------------------------------------------

    def _publish(self) -> Any:
        """Put the learner's weights in the object store once per new version (one ray.put)."""
        version = self.agent.num_updates
        if self._weights_ref is None or version != self._weights_version:
            self._weights_ref = self._ray.put(self.agent.network_weights())
            self._weights_version = version
        return self._weights_ref

    def _request(self, timesteps: int) -> None:
        weights = self._publish()
        total = self.agent.total_timesteps
        edits, self._edits = self._edits or None, {}
        self._inflight = [
            a.collect.remote(weights, timesteps, total, self.num_envs, self.chunk, edits) for a in self._actors
        ]
        self._inflight_version = self._weights_version

    def _collect(self) -> None:
        """Wait for the chunk in flight (restarting dead workers if allowed) and make it current."""
        if self._inflight is None:
            self._request(self.agent.num_timesteps)
        refs, version = self._inflight, self._inflight_version
        assert refs is not None
        self._inflight = None
        parts: list[tuple[Transitions, np.ndarray, float]] = []
        restarted: list[int] = []
        for w, ref in enumerate(refs):
            try:
                part = self._get_chunk(w, ref)
            except WorkerError as err:
                if not ((err.died or err.timed_out) and self.restart_workers):
                    raise
                self._restart(w)
                weights = self._publish()
                ref = self._actors[w].collect.remote(
                    weights, self.agent.num_timesteps, self.agent.total_timesteps, self.num_envs, self.chunk
                )
                part = self._get_chunk(w, ref)
                restarted.append(w)
            parts.append(part)
            seconds = part[2]
            if seconds > 0:
                self._pending.append((f"worker_{w}/steps_per_second", self.chunk * self.envs_per_worker / seconds))
        data = concat_envs([p[0] for p in parts])
        assert self._obs is not None
        for w in restarted:
            # The worker's running episodes ended with it: the first step of its new envs stands in
            # as a truncation of the old episode (no reward), and the next step starts the new ones.
            s = self._envs(w)
            data.obs[0, s] = self._obs[s]
            data.rewards[0, s] = 0.0
            data.terminated[0, s] = False
            data.truncated[0, s] = True
            data.next_obs[0, s] = self._obs[s]
        self._data = data
        self._data_last_obs = np.concatenate([p[1] for p in parts])
        self._t = 0
        self._chunk_len = data.rewards.shape[0]
        lag = float(self.agent.num_updates - version)
        self._pending.append(("weight_staleness", lag))
        if self.agent.asynchronous:
            self._pending.append(("policy_lag", lag))
        if not self.on_policy or (self.agent.asynchronous and (self.agent.max_policy_lag or 0) >= 1):
            # Ape-X, IMPALA: the next chunk is collected while the learner learns from this one (an
            # asynchronous agent's rollouts then lag one update at most; max_policy_lag=0 waits instead).
            self._request(self.agent.num_timesteps + self._chunk_len * self.num_envs)

    # -- the runner interface -------------------------------------------------------------------

    def reset(self) -> np.ndarray:
        """Reset every worker's envs; returns all first observations."""
        refs = [a.reset.remote() for a in self._actors]
        self._obs = np.concatenate([self._get(w, r, timeout=_START_TIMEOUT_S) for w, r in enumerate(refs)])
        self._data = None
        self._inflight = None
        return self._obs.copy()

    def transitions(self, agent: Agent, obs: np.ndarray) -> tuple[Transitions, np.ndarray]:
        """The next step of every env, as the workers took it with the agent's weights (the
        learner's ``obs`` is where the workers are: they step on from there themselves)."""
        if self._data is None or self._t >= self._chunk_len:
            self._collect()
        data = self._data
        assert data is not None and self._data_last_obs is not None
        t = self._t
        self._t += 1
        next_obs = data.obs[t + 1] if t + 1 < self._chunk_len else self._data_last_obs
        self._obs = next_obs
        return row(data, t), next_obs

    def set_config(self, values: dict[str, Any]) -> None:
        """Live hyperparameter edits (``session.set``, already applied to the learner): every
        worker's replica applies them before its next chunk (exploration, warm-up...); a worker
        started later is built with them. The weights are sent again with them, so a network the
        edit adds (SAC's learned entropy coefficient) arrives too."""
        self._config.update(values)
        self._edits.update(values)
        self._weights_ref = None

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Call method ``name`` on every env of every worker (``session.call_env``); one result
        per env, in env order. A worker with a chunk in flight answers once that chunk is
        collected (between its steps). The env's exception becomes a :class:`WorkerError`."""
        refs = [a.call_env.remote(name, tuple(args), dict(kwargs or {})) for a in self._actors]
        results: list[Any] = []
        missing = None
        for w, ref in enumerate(refs):
            kind, value = self._get(w, ref, timeout=_START_TIMEOUT_S)
            if kind == "missing":
                missing = value
            else:
                results.extend(value)
        if missing is not None:
            raise EnvMethodError(missing)
        return results

    def drain_signals(self) -> list[tuple[str, float]]:
        """Per-worker signals and ``weight_staleness`` since the last call, as ``(name, value)`` pairs."""
        pending, self._pending = self._pending, []
        return pending

    def pids(self) -> list[int]:
        """Process ids of the worker actors (for tests and monitoring)."""
        return list(self._pids.values())

    def close(self) -> None:
        """Kill every worker actor (and the local Ray, if this runner started it)."""
        self._inflight = None
        self._finalizer()
