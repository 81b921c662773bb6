"""Local worker processes: each steps one or more env copies built from the user's factory.

The learner (the session's training thread) still chooses every action, on the whole batch at once;
the workers only step envs, all at the same time, so an env that waits on a simulator overlaps its
waiting with the others'. Agents see one vector env and never know where the steps ran.

Workers are fresh Python processes started from a small script (see ``_worker.py``), so they work
from notebooks and scripts alike, do not import torch, and start in a fraction of a second. The user's
factory travels to them serialised with cloudpickle (the same way ``multiprocessing`` would send it);
nothing a user loads from disk is ever unpickled.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
import weakref
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from ..envs.core import EnvMethodError, EnvSource, ObservationCodec, flat_observation_space
from ..envs.masks import mask_size
from ..loop import Step, Transitions, env_step, finish_step
from ._worker import STEP, STEP_HALF, STEP_REPLY, shared_memory_available
from .errors import WorkerError
from .runner import Runner

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["LocalRunner"]

_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")
_START_TIMEOUT_S = 60.0  # building a heavy env (a simulator) may take a while
_CLOSE_TIMEOUT_S = 2.0  # then workers that have not exited are killed
_SIGNAL_INTERVAL_S = 1.0


class _Worker:
    """One worker process and the parent's end of its connection."""

    def __init__(self, worker_id: int, first_env: int, num_envs: int) -> None:
        self.id = worker_id
        self.first_env = first_env
        self.num_envs = num_envs
        self.process: subprocess.Popen | None = None
        self.conn: Any = None
        self.status: Any = None  # a second connection: which env is stepping (see _worker.py)
        self.steps = 0  # env steps in the current signal window
        self.busy = 0.0  # seconds its envs spent stepping in that window
        self.late = 0  # answers still to come for calls that timed out: read and dropped first
        self.shm: Any = None  # the shared memory block its observations arrive in (None: in its answers)
        self.shared = False  # True once the worker writes its observations there

    @property
    def envs(self) -> slice:
        return slice(self.first_env, self.first_env + self.num_envs)

    def start(self) -> None:

        parent_sock, child_sock = socket.socketpair()
        parent_status, child_status = socket.socketpair()
        env = dict(os.environ)
        # A worker steps envs; it should not spread a torch/numpy thread pool over every core.
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env.setdefault(name, "1")
        # The user's factory may live in a module next to their script: let the worker import it too.
        # ('' in sys.path means the current directory, as in a notebook: the worker starts there too.)
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        try:
            self.process = subprocess.Popen(
                [sys.executable, _WORKER_SCRIPT, str(child_sock.fileno()), str(child_status.fileno())],
                pass_fds=(child_sock.fileno(), child_status.fileno()),
                env=env,
                close_fds=True,
            )
        finally:
            child_sock.close()
            child_status.close()
        self.conn = Connection(parent_sock.detach())
        self.status = Connection(parent_status.detach())

    def stepping(self) -> int | None:
        """The index (over all workers) of the env whose step is running in this worker, if it says."""
        try:
            self.status.send_bytes(b"?")
            if not self.status.poll(0.5):
                return None
            index = int(self.status.recv_bytes())
        except (AttributeError, EOFError, OSError, ValueError):
            return None
        return None if index < 0 else self.first_env + index

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it started)."""
        return None if self.process is None else self.process.pid

    def death(self) -> str:
        """Why the connection broke, for the WorkerError: the process's exit code."""
        code = self.process.poll() if self.process is not None else None
        if code is None and self.process is not None:
            try:
                code = self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                code = None
        return f"process died (exit code {code})"

    def ask_close(self) -> None:
        """Ask the worker to close its envs and exit (no answer comes)."""
        if self.conn is not None:
            try:
                self.conn.send(("close",))
            except (OSError, ValueError):
                pass

    def finish_close(self, deadline: float) -> None:
        """Wait until ``deadline`` (``time.monotonic``) for the worker to exit, then kill it; close its connections."""
        if self.process is not None:
            try:
                self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.status is not None:
            self.status.close()
            self.status = None
        self.release_shared()

    def release_shared(self) -> None:
        """Close and remove the shared memory block (the worker has exited or no longer uses it)."""
        shm, self.shm, self.shared = self.shm, None, False
        if shm is not None:
            shm.close()


class _SharedBlock:
    """POSIX shared memory (a file of Linux's ``/dev/shm``) that this process and one worker map. Its name is
    removed as soon as the worker has opened it, so the memory goes with the last of the two processes, even
    when both are killed; no resource-tracker process is needed (``multiprocessing.shared_memory`` starts one
    per interpreter to do that cleanup)."""

    def __init__(self, size: int) -> None:
        import mmap
        import secrets

        self.name = f"workbench-{os.getpid()}-{secrets.token_hex(8)}"
        self.path = os.path.join("/dev/shm", self.name)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.buf = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)

    def unlink(self) -> None:
        """Remove the name (the mapped memory stays until both processes unmap it)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Remove the name and unmap the memory here."""
        self.unlink()
        try:
            self.buf.close()
        except BufferError:  # an array still views it: the mapping goes when that array does
            pass


def _shutdown(workers: list[_Worker]) -> None:
    """Ask every worker to close, then kill the ones still there. Safe to call twice and at exit."""
    for w in workers:
        w.ask_close()
    deadline = time.monotonic() + _CLOSE_TIMEOUT_S
    for w in workers:
        w.finish_close(deadline)
    workers.clear()


class LocalRunner(Runner):
    """``num_workers`` worker processes stepping ``envs_per_worker`` env copies each.

    Env ``i`` (over all workers) is seeded ``seed + i`` on the first reset, the same seeds the
    in-process runner uses, so runs are reproducible and every env's seed differs.

    ``restart_workers=True``: a worker that dies is started again with fresh envs; its envs'
    running episodes end as truncated and the run continues. Otherwise the run fails with a
    :class:`WorkerError` naming the worker.

    ``step_timeout``: seconds a worker may take to step its envs once; a worker that takes longer
    (an env whose ``step`` hangs) is killed, and the run fails with a :class:`WorkerError`
    (``timed_out=True``) naming the worker and its envs, or, with ``restart_workers=True``, the
    worker is started again like a dead one. None (the default) waits as long as it takes.

    ``double_buffer=True`` (double-buffered sampling, Sample Factory's trick; ``envs_per_worker`` even): each
    worker's envs are two halves that step apart. A step decides the first half's actions and sends them, then
    decides the second half's while the workers step the first, then sends those: the learner's decision
    overlaps the envs' step. The step's answer is the same (one row per env, in env order), and the envs are
    seeded as without it; each half's decision is its own ``agent.decide`` call (``rows=`` names its envs).
    """

    persistent = False  # processes never outlive a run: stop() leaves nothing behind
    backend = "local"
    can_interrupt = True  # interrupt() kills the worker processes
    _start_timeout = _START_TIMEOUT_S

    def __init__(
        self,
        source: EnvSource,
        num_workers: int,
        envs_per_worker: int,
        shared_memory: bool = True,
        double_buffer: bool = False,
        **options: Any,
    ) -> None:
        """``options``: :func:`worker_options` (``seed``, ``restart_workers``, ``step_timeout``).
        ``shared_memory``: observations arrive through a shared memory block per worker where the platform
        allows (False: in the workers' answers, as before; for measuring the difference).
        ``double_buffer``: each worker's envs step in two halves while the other half's actions are decided
        (see the class docstring; ``envs_per_worker`` must be even)."""
        self.seed, self.restart_workers, self.step_timeout = worker_options(**options)
        check_double_buffer(double_buffer, envs_per_worker, owner="LocalRunner")
        self.double_buffer = bool(double_buffer)
        self._shared_memory = bool(shared_memory) and shared_memory_available()
        if source.factory is None:
            raise ValueError(
                "local workers need a way to build the env in each process: pass a zero-argument "
                "factory such as `lambda: MyEnv(...)` or a registered id, not an env instance"
            )
        self.source = source
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.num_envs = num_workers * envs_per_worker
        self.restarts = 0
        self._blob = None
        if source.env_id is None:
            import cloudpickle

            try:
                self._blob = cloudpickle.dumps(source.factory)
            except Exception as exc:
                raise ValueError(
                    f"the env factory {source.name} cannot be sent to a worker process ({exc}): "
                    "make it a plain function or lambda that builds the env, e.g. `lambda: MyEnv(cfg)`"
                ) from exc
        obs_space, action_space = self._spaces(source)
        self.observation_space, self.action_space = obs_space, action_space
        flat = flat_observation_space(obs_space)
        shape = flat.shape
        self._obs_shape, self._obs_size = shape, int(np.prod(shape))
        # Observations arrive in their own dtypes (uint8 frames as bytes), decoded as the worker encoded them.
        self._codec = ObservationCodec(obs_space)
        self._action_dtype = np.int64 if isinstance(action_space, spaces.Discrete) else np.float32
        # Action masks (workbench.envs.masks): asked for after each reset when the space can have them.
        self._maskable = mask_size(action_space) is not None
        self._mask_size = 0
        self.masks: np.ndarray | None = None
        self.final_masks: np.ndarray | None = None
        self.game_ends: np.ndarray | None = None
        self.successes: np.ndarray | None = None  # goal envs' info["is_success"] (see VecEnv.successes)
        self._worker_successes: np.ndarray | None = None
        self._obs = np.zeros((self.num_envs, *shape), dtype=flat.dtype)  # uint8 frames stay uint8, as VecEnv's
        self._pending: list[tuple[str, float]] = []
        self._window_start = time.perf_counter()
        self._workers = [self._new_worker(w, w * envs_per_worker, envs_per_worker) for w in range(num_workers)]
        # Double-buffered sampling: the env indices of each half (the first or second half of every worker's envs).
        half = self._half = envs_per_worker // 2
        self._half_rows = tuple(
            np.concatenate([np.arange(w.first_env + h * half, w.first_env + (h + 1) * half) for w in self._workers])
            for h in (0, 1)
        )
        self._half_lists = tuple(rows.tolist() for rows in self._half_rows)  # as decide's rows= takes them
        # Closes the workers when this runner is garbage collected or the interpreter exits.
        self._finalizer = self._make_finalizer()
        try:
            for w in self._workers:
                w.start()
            # Every worker builds its envs at the same time: all requests go out before the first answer is read.
            for w in self._workers:
                self._send_init(w, self.seed)
            for w in self._workers:
                self._finish_init(w)
        except BaseException:
            self.close()
            raise

    # -- worker plumbing ------------------------------------------------------------------------

    _slot_columns = 0  # floats per env after the game ends in a step answer (ParallelEnv slots: parallel/multiagent.py)
    _worker_slot_info: np.ndarray | None = None

    def _spaces(self, source: EnvSource) -> tuple[spaces.Space, spaces.Space]:
        """The spaces of one env as the workers send its observations and take its actions."""
        return source.spaces()

    def _new_worker(self, worker_id: int, first_env: int, num_envs: int) -> _Worker:
        """The worker object (process and connection) for worker ``worker_id``; not started yet."""
        return _Worker(worker_id, first_env, num_envs)

    def _make_finalizer(self) -> weakref.finalize:
        """What closes the workers when this runner is closed, garbage collected, or Python exits."""
        return weakref.finalize(self, _shutdown, self._workers)

    def _send_init(self, w: _Worker, seed: int | None) -> None:
        worker_seed = None if seed is None else seed + w.first_env
        if self.double_buffer:  # the worker keeps its envs as two halves that step apart (_worker.Halves)
            w.conn.send(("init", self._blob, self.source.env_id, w.num_envs, worker_seed, None, True))
        else:
            w.conn.send(("init", self._blob, self.source.env_id, w.num_envs, worker_seed))

    def _finish_init(self, w: _Worker) -> None:
        if self._receive(w, timeout=self._start_timeout) and self.game_ends is None:
            # Atari training envs report whole games (workbench.envs.atari): NaN rows where none ended.
            self.game_ends = np.full((self.num_envs, 2), np.nan)
        if self._shared_memory:
            self._share(w)

    def _share(self, w: _Worker) -> None:
        """Give the worker a shared memory block for its observations and final observations, so a step's
        answer carries only the rewards and flags (a frame travels once, through memory, not a socket)."""
        w.release_shared()  # a restarted worker gets a new block: the old one's name is gone
        size = max(1, 2 * w.num_envs * self._codec.row_bytes)
        w.shm = _SharedBlock(size)
        w.conn.send(("shm", w.shm.name, size))
        try:
            w.shared = bool(self._receive(w, timeout=self._start_timeout))
        finally:
            w.shm.unlink()  # both processes have it mapped (or the worker never will): the name can go
        if not w.shared:
            w.release_shared()

    def _drain(self, w: _Worker, timeout: float | None) -> None:
        """Read and drop the late answers of calls that timed out (``call_env``), so the next answer
        read is the one asked for: a worker answers in order, one message per request."""
        while w.late:
            try:
                if timeout is not None and not w.conn.poll(timeout):
                    w.kill()  # still inside the call that timed out: its envs cannot step
                    raise WorkerError(
                        w.id,
                        f"was killed: still inside a call_env that timed out, {timeout:g} s later",
                        envs=w.envs,
                        timed_out=True,
                    )
                w.conn.recv_bytes()
            except (EOFError, OSError) as exc:
                raise WorkerError(w.id, w.death(), envs=w.envs, died=True) from exc
            w.late -= 1

    def _receive(self, w: _Worker, timeout: float | None = None) -> Any:
        """The worker's answer; a worker that raised or died becomes a WorkerError naming it."""
        self._drain(w, timeout)
        try:
            if timeout is not None and not w.conn.poll(timeout):
                raise WorkerError(w.id, f"did not answer within {timeout:.0f} s", envs=w.envs)
            raw = w.conn.recv_bytes()
        except (EOFError, OSError) as exc:
            raise WorkerError(w.id, w.death(), envs=w.envs, died=True) from exc
        if raw[:1] == STEP_REPLY:
            return raw  # parsed by _unpack
        message = ForkingPickler.loads(raw)
        if message[0] == "error":
            _, where, tb = message
            raise WorkerError(w.id, f"raised in {where}", envs=w.envs, remote_traceback=tb)
        return message[1]

    def _receive_step(self, w: _Worker) -> Any:
        """A step answer; with ``step_timeout``, a worker that does not answer in time is killed."""
        self._drain(w, self.step_timeout)
        if self.step_timeout is not None and not w.conn.poll(self.step_timeout):
            env = w.stepping()
            w.kill()
            which = "" if env is None else f" of env {env}"
            raise WorkerError(
                w.id,
                f"was killed: env.step{which} did not return within step_timeout={self.step_timeout:g} s",
                envs=w.envs,
                timed_out=True,
            )
        return self._receive(w)

    def _restart(self, w: _Worker) -> np.ndarray:
        """Start a dead worker again with fresh envs; return their first observations."""
        w.kill()
        w.late = 0  # a new process owes no answers
        if w.conn is not None:
            w.conn.close()
        if w.status is not None:
            w.status.close()
        self.restarts += 1
        w.start()
        # Fresh seeds for the rebuilt envs: still reproducible, but not a replay of the first episodes.
        seed = None if self.seed is None else self.seed + 1_000_003 * self.restarts
        self._send_init(w, seed)
        self._finish_init(w)
        w.conn.send(("reset",))
        self._pending.append(("worker_restarts", float(self.restarts)))
        obs = self._receive(w, timeout=self._start_timeout)
        self._read_masks(w)
        return obs

    def _read_masks(self, w: _Worker) -> None:
        """Ask a freshly reset worker for its envs' action masks (when the space can have them)."""
        if not self._maskable:
            return
        w.conn.send(("masks",))
        masks = self._receive(w, timeout=self._start_timeout)
        if masks is None:
            return
        if self.masks is None:
            self._mask_size = masks.shape[1]
            self.masks = np.ones((self.num_envs, self._mask_size), dtype=bool)
        self.masks[w.envs] = masks

    # -- the runner interface -------------------------------------------------------------------

    def reset(self) -> np.ndarray:
        """Reset every env in every worker; returns all first observations."""
        for w in self._workers:
            w.conn.send(("reset",))
        for w in self._workers:
            self._obs[w.envs] = self._receive(w, timeout=self._start_timeout)
        for w in self._workers:
            self._read_masks(w)
        self._window_start = time.perf_counter()
        return self._obs.copy()

    def transitions(self, agent: Agent, obs: np.ndarray) -> tuple[Transitions, np.ndarray]:
        """One step of every env for the agent's decision on ``obs`` (the workers step the envs); with
        ``double_buffer``, half by half, each half's decision overlapping the other half's step."""
        if not self.double_buffer:
            return env_step(agent, self, obs)
        masks = self.masks  # the masks of obs, for the decisions (the step replaces them)
        steps: list[Step] = []
        pieces: list[tuple[_Worker, int | None]] = []
        half = self._half
        for h, rows in enumerate(self._half_rows):
            # The first half steps in the workers while the learner decides the second half's actions.
            mask = None if masks is None else masks[rows]
            step = agent.decide(obs[rows], action_mask=mask, rows=self._half_lists[h])
            steps.append(step)
            actions = np.ascontiguousarray(step.actions, dtype=self._action_dtype)
            for i, w in enumerate(self._workers):
                self._send(w, STEP_HALF + bytes((h,)) + actions[i * half : (i + 1) * half].tobytes())
                pieces.append((w, h))
        stepped = self._exchange(pieces)
        return finish_step(agent, self, obs, self._joined_step(steps), stepped)

    def _joined_step(self, steps: list[Step]) -> Step:
        """The two halves' decisions as one :class:`Step` of every env in env order (actions and extras)."""

        def joined(parts: list[Any]) -> np.ndarray:
            arrays = [np.asarray(p) for p in parts]
            out = np.empty((self.num_envs, *arrays[0].shape[1:]), dtype=np.result_type(*arrays))
            for rows, a in zip(self._half_rows, arrays, strict=True):
                out[rows] = a
            return out

        extras = {key: joined([s.extras[key] for s in steps]) for key in steps[0].extras}
        return Step(joined([s.actions for s in steps]), extras)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every env once, all workers at the same time (same-step autoreset, as ``VecEnv``)."""
        actions = np.ascontiguousarray(np.asarray(actions), dtype=self._action_dtype)
        for w in self._workers:
            self._send(w, STEP + actions[w.envs].tobytes())
        return self._exchange([(w, None) for w in self._workers])

    def _send(self, w: _Worker, request: bytes) -> None:
        try:
            w.conn.send_bytes(request)
        except OSError:
            pass  # a dead worker: its receive in _exchange reports or restarts it

    def _piece(self, w: _Worker, half: int | None) -> slice:
        """The env rows (over all workers) a step answer of worker ``w`` is for: all its envs, or one half."""
        if half is None:
            return w.envs
        k = w.num_envs // 2
        return slice(w.first_env + half * k, w.first_env + (half + 1) * k)

    def _exchange(
        self, pieces: list[tuple[_Worker, int | None]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Read the step answers asked for (``(worker, half)``: a half, or None for all its envs, in the order
        sent) into one step of every env: ``(obs, rewards, terminated, truncated, final_obs)`` in env order.
        A worker that died or timed out fails the step, or with ``restart_workers`` is started again: every
        env of it then ends its episode as truncated at this step (fresh envs, their first observations next)."""
        n = self.num_envs
        obs = np.empty_like(self._obs)
        rewards = np.empty(n, dtype=np.float32)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        final_obs = obs  # a copy once an episode ends
        if self.masks is not None:
            # New arrays every step: the last ones travel on in the step's extras.
            self.masks, self.final_masks = self.masks.copy(), np.ones_like(self.masks)
        if self.game_ends is not None:
            self.game_ends = np.full((n, 2), np.nan)
        if self.successes is not None:  # goal envs: a new array every step (it travels in the extras)
            self.successes = np.full(n, np.nan)
        restarted: set[int] = set()
        received: list[slice] = []  # rows whose answers arrived, by worker: a restart ends their episodes
        for w, half in pieces:
            s = self._piece(w, half)
            if w.id in restarted:
                continue  # its envs' rows were all written at its restart
            try:
                raw = self._receive_step(w)
                # With shared memory half h's observations are at h * (the worker's envs) rows of its block.
                at = 0 if half is None else half * w.num_envs * self._codec.row_bytes
                o, r, term, trunc, final, busy, masks, games = self._unpack(
                    raw, s.stop - s.start, w.shm if w.shared else None, at
                )
            except WorkerError as err:
                if not ((err.died or err.timed_out) and self.restart_workers):
                    raise
                restarted.add(w.id)
                final_obs = final_obs if final_obs is not obs else obs.copy()
                done = [r for r in received if w.envs.start <= r.start < w.envs.stop]
                fresh = self._restart(w)
                # The running episodes of that worker's envs end here, as time-limit truncations: those that
                # stepped (the other half's, answered before it died) from the state they reached, the others
                # from where they were.
                for r in done:  # final_obs already holds the state each reached (or an ended episode's last)
                    truncated[r] |= ~terminated[r]
                rest = np.ones(w.num_envs, dtype=bool)
                for r in done:
                    rest[r.start - w.first_env : r.stop - w.first_env] = False
                envs = np.arange(w.first_env, w.first_env + w.num_envs)[rest]
                final_obs[envs] = self._obs[envs]
                rewards[envs], terminated[envs], truncated[envs] = 0.0, False, True
                obs[w.envs] = fresh
                continue
            received.append(s)
            obs[s] = o
            rewards[s] = r
            terminated[s] = term
            truncated[s] = trunc
            if final is not None and final_obs is obs:
                final_obs = obs.copy()  # the rows written so far are their own last observations
            if final_obs is not obs:  # an episode ended: every row from here on written into both
                final_obs[s] = o if final is None else final
            if masks is not None:
                self.masks[s], self.final_masks[s] = masks  # type: ignore[index]
            if games is not None:
                self.game_ends[s] = games  # type: ignore[index]
            found, self._worker_successes = self._worker_successes, None
            if found is not None:
                self.successes[s] = found  # type: ignore[index]
            if self._slot_columns:
                self._store_slot_info(s, self._worker_slot_info)
                self._worker_slot_info = None
            w.steps += s.stop - s.start
            w.busy += busy
        self._obs = obs
        self._track()
        return obs.copy(), rewards, terminated, truncated, final_obs

    def _unpack(self, raw: bytes, k: int, shm: Any = None, shm_at: int = 0) -> tuple[Any, ...]:
        """Split a worker's step answer (see ``_worker.py``) into its arrays: a float32 head, then the
        observations in their own dtypes, or with ``shm`` (the worker's shared memory block) the head alone,
        the observations being in the block from byte ``shm_at`` (views of it: copied before the next step)."""
        m = k * self._mask_size
        has_successes = np.frombuffer(raw, dtype=np.float32, count=3, offset=1)[2] > 0
        slots = self._slot_columns * k
        games_len = 2 * k if self.game_ends is not None else 0
        head_len = 3 + 3 * k + 2 * m + games_len + slots + (k if has_successes else 0)
        buf = np.frombuffer(raw, dtype=np.float32, count=head_len, offset=1)
        busy, ended = float(buf[0]), buf[1] > 0
        if has_successes:  # goal envs' info["is_success"], at the end of the head
            if self.successes is None:
                self.successes = np.full(self.num_envs, np.nan)
            self._worker_successes = buf[head_len - k :].astype(np.float64)
        at = 3
        rewards = buf[at : at + k]
        terminated = buf[at + k : at + 2 * k] > 0
        truncated = buf[at + 2 * k : at + 3 * k] > 0
        at += 3 * k
        masks = games = None
        if self._mask_size:
            masks = (buf[at : at + m].reshape(k, -1) > 0, buf[at + m : at + 2 * m].reshape(k, -1) > 0)
            at += 2 * m
        if self.game_ends is not None:
            games = buf[at : at + 2 * k].reshape(k, 2).astype(np.float64)
        at += games_len
        if slots:
            self._worker_slot_info = buf[at : at + slots].reshape(k, -1).copy()
        codec = self._codec
        buffer, start = (raw, 1 + 4 * head_len) if shm is None else (shm.buf, shm_at)
        obs = codec.decode(buffer, start, k)
        final = None
        if ended:  # with shared memory a copy: the finals of ended episodes are kept past this step
            final = codec.decode(buffer, start + k * codec.row_bytes, k)
            final = final if shm is None else final.copy()
        return obs, rewards, terminated, truncated, final, busy, masks, games

    def _store_slot_info(self, envs: slice, info: np.ndarray | None) -> None:
        """What a worker's step answer carried after the game ends (None: a restarted worker); kept by
        the runners that ask for it (``_slot_columns``)."""

    def _track(self) -> None:
        now = time.perf_counter()
        if now - self._window_start >= _SIGNAL_INTERVAL_S:
            self._window_start = now
            for w in self._workers:
                if w.busy > 0:
                    self._pending.append((f"worker_{w.id}/steps_per_second", w.steps / w.busy))
                w.steps, w.busy = 0, 0.0

    def drain_signals(self) -> list[tuple[str, float]]:
        """Per-worker signals recorded since the last call, as ``(name, value)`` pairs."""
        pending, self._pending = self._pending, []
        return pending

    def rng_states(self) -> list[Any]:
        """Every env's random stream, over all workers (see ``VecEnv.rng_states``)."""
        states: list[Any] = []
        for w in self._workers:
            w.conn.send(("rng",))
            states.extend(self._receive(w, timeout=self._start_timeout))
        return states

    def set_rng_states(self, states: list[Any]) -> None:
        """Continue these streams (env ``i`` over all workers) at the next :meth:`reset`."""
        for w in self._workers:
            w.conn.send(("set_rng", list(states[w.envs])))
            self._receive(w, timeout=self._start_timeout)

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Call method ``name`` on every env in every worker (``session.call_env``), between steps;
        one result per env, in env order. Arguments and results travel pickled between this
        library's own processes. The env's exception becomes a :class:`WorkerError` naming the
        worker (with the env's traceback); a missing method an ``EnvMethodError``."""
        for w in self._workers:
            w.conn.send(("call", name, tuple(args), dict(kwargs or {})))
        results: list[Any] = []
        missing: str | None = None
        error: WorkerError | None = None
        for w in self._workers:  # every answer is read, so the connections stay in step
            try:
                self._drain(w, self._start_timeout)
                raw = w.conn.recv_bytes() if w.conn.poll(self._start_timeout) else None
                if raw is None:
                    w.late += 1  # its answer, when it comes, is dropped: the next step reads its own
                    raise WorkerError(
                        w.id,
                        f"did not answer call_env({name!r}) within {self._start_timeout:g} s; the call goes on in "
                        "the worker, whose next step waits for it (its answer is dropped)",
                        envs=w.envs,
                    )
                message = ForkingPickler.loads(raw)
                if message[0] == "missing":
                    missing = message[1]
                elif message[0] == "error":
                    raise WorkerError(w.id, f"raised in {message[1]}", envs=w.envs, remote_traceback=message[2])
                else:
                    results.extend(message[1])
            except WorkerError as exc:
                error = error or exc
            except (EOFError, OSError):
                error = error or WorkerError(w.id, w.death(), envs=w.envs, died=True)
        if missing is not None:
            raise EnvMethodError(missing)
        if error is not None:
            raise error
        return results

    def interrupt(self) -> None:
        """Kill every worker process now, from any thread: a step waiting on one of them returns
        at once with a :class:`WorkerError` (how a session gives up a run stuck in a step)."""
        for w in list(self._workers):
            w.kill()

    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        return [w.pid for w in self._workers if w.pid is not None]

    def close(self) -> None:
        """Stop every worker process; kills any that do not exit within a couple of seconds."""
        self._finalizer()


def check_double_buffer(double_buffer: Any, envs_per_worker: int | None, owner: str = "make_runner") -> None:
    """Raise ``ValueError`` (``TypeError`` for a value that is not a bool) unless ``double_buffer`` is False,
    or True with an even ``envs_per_worker`` of at least 2 (two halves per worker; None: not known yet)."""
    if not isinstance(double_buffer, bool | np.bool_):
        raise TypeError(f"{owner} got double_buffer={double_buffer!r}: pass True or False")
    if not double_buffer or envs_per_worker is None:
        return
    if envs_per_worker < 2 or envs_per_worker % 2:
        raise ValueError(
            f"{owner} got double_buffer=True with envs_per_worker={envs_per_worker}: double-buffered sampling "
            "steps each worker's envs in two halves, so it needs an even envs_per_worker of at least 2 "
            f"(pass envs_per_worker={max(2, envs_per_worker + 1)}), or leave double_buffer out"
        )


def worker_options(
    *, seed: int | None = None, restart_workers: bool = False, step_timeout: float | None = None
) -> tuple[int | None, bool, float | None]:
    """The options every runner with workers takes (local workers, Ray actors), checked, as
    ``(seed, restart_workers, step_timeout)``: env ``i`` is seeded ``seed + i``; ``restart_workers``
    starts a dead worker again; ``step_timeout`` seconds a worker may take to step its envs once."""
    check_step_timeout(step_timeout)
    return seed, restart_workers, None if step_timeout is None else float(step_timeout)


def check_step_timeout(step_timeout: float | None) -> None:
    """Raise ``ValueError`` unless ``step_timeout`` is None or a positive number of seconds."""
    if step_timeout is None:
        return
    if isinstance(step_timeout, bool) or not isinstance(step_timeout, int | float) or not step_timeout > 0:
        raise ValueError(f"step_timeout must be a positive number of seconds or None, got {step_timeout!r}")


def split_envs(num_envs: int, num_workers: int, envs_per_worker: int | None) -> int:
    """Envs per worker: ``envs_per_worker`` if given, else enough to cover the agent's ``num_envs``."""
    if envs_per_worker is None:
        return max(1, math.ceil(num_envs / num_workers))
    if not isinstance(envs_per_worker, int) or envs_per_worker < 1:
        raise ValueError(f"envs_per_worker must be a positive integer, got {envs_per_worker!r}")
    return envs_per_worker
