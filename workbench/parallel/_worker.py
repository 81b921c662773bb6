"""The program a local worker process runs: build envs from the user's factory, step them on request.

It is started as a script (``python _worker.py FD``), not as ``workbench.parallel._worker``, so a
worker imports only ``workbench.envs`` (the package's face loads its names on first use, so
``import workbench`` imports no torch): a worker starts in about a tenth of a second, and the
autoreset rules stay written once, in ``envs/core.py``.

Protocol over the connection on file descriptor FD (messages are tuples, pickled by
``multiprocessing.connection`` between this library's own processes, never read from a file):

* ``("init", factory_blob, env_id, num_envs, seed)``: build ``num_envs`` envs; ``factory_blob`` is
  the user's zero-argument factory serialised with cloudpickle (None when ``env_id`` is given).
  ``("init", factory_blob, None, copies, seed, layout)``: ``copies`` PettingZoo ParallelEnvs from the
  factory, one slot per agent with rows laid out as ``layout`` (``envs/multiagent.py``'s ``ParallelVec``);
  their step answers carry its ``slot_info`` after the game ends' place.
* ``("reset",)`` -> ``("ok", obs)``
* a step: ``b"S"`` + the actions' raw bytes (int64 for Discrete, float32 for Box) -> ``b"K"`` + a float32
  head ``[busy_s, ended, has_successes, rewards, terminated, truncated, masks and final_masks if the envs
  give action masks, game ends if the envs report them, successes (goal envs) if has_successes]``, then
  ``obs`` and, if ended, ``final_obs``, each in its own dtype (``ObservationCodec`` of ``envs/core.py``:
  uint8 frames as one byte a pixel, a Dict's uint8 columns as bytes beside its float32 ones); the hot
  path skips pickle entirely. Actions are
  int64 for Discrete, float32 (cast to the space's dtype by the envs) for everything else.
* ``("init", factory_blob, env_id, num_envs, seed, None, True)``: the envs in two halves (double-buffered
  sampling, ``LocalRunner(double_buffer=True)``): envs ``[0, num_envs / 2)`` and ``[num_envs / 2, num_envs)``
  are two vectors that step apart, seeded as one vector would be (env ``i`` gets ``seed + i``); every other
  command still answers for all envs in order.
* a half step: ``b"H"`` + one byte, the half (0 or 1), + that half's actions' raw bytes -> the answer of a step
  of that half's envs alone, as above; with shared memory half ``h``'s observations (and final ones) go at
  offset ``h * num_envs * row_bytes`` of the block, so the parent reads one half while the other is written.
* ``("shm", name, size)`` -> ``("ok", attached)``: from now on a step answer carries no observations: the
  worker writes ``obs`` at offset 0 of the shared memory block ``name`` (a file of Linux's ``/dev/shm``,
  made by the parent) and, if ended, ``final_obs`` right after them, in the same encoding; ``attached`` is
  False where the block cannot be opened (the observations then keep travelling in the answer).
* ``("masks",)`` -> ``("ok", masks)``: the envs' current action masks (``VecEnv.masks``; None
  for envs without masks), asked for after a reset.
* ``("rng",)`` -> ``("ok", states)``: every env's random stream (``VecEnv.rng_states``).
* ``("set_rng", states)`` -> ``("ok", None)``: continue those streams at the next reset.
* ``("call", name, args, kwargs)`` -> ``("ok", results)``: ``session.call_env``, one result per env;
  ``("missing", message)`` when the env has no such method.
* ``("close",)``: close the envs and exit.

Any error is answered with ``("error", where, traceback_text)``; the parent raises it, naming this worker.

A second connection (file descriptor STATUS_FD, ``python _worker.py FD STATUS_FD``) is served by a
small thread: any message is answered with the index of the env whose ``step`` is running (``-1``
between steps), so the parent can name the env that hangs before it kills the worker.
The worker exits when the parent goes away (the connection reaches EOF).

The protocol itself is :class:`Server` (bytes in, bytes out), so it is written once for two transports:
this script's connection, and Ray method calls (:class:`RayEnvWorker`, ``backend="ray"`` with
``ray_acting="learner"``; see ``workbench.parallel.ray_envs``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import time
import traceback
from typing import Any

STEP = b"S"  # first byte of a step request: raw action bytes follow
STEP_REPLY = b"K"  # first byte of a step answer: a float32 head and the observations follow (pickle starts 0x80)
STEP_HALF = b"H"  # first byte of a half step request: the half's index (one byte) and its raw actions follow


def _load_envs_module(here: str | None = None):  # type: ignore[no-untyped-def]
    """``workbench.envs.core`` of the package folder ``here`` (default: this file's), imported normally.

    ``import workbench`` is light (its names load on first use), so this imports gymnasium and numpy, not
    torch. Where ``workbench`` would not resolve to ``here`` (a script's own ``sys.path``, another copy
    installed), the folder above ``here`` goes first on ``sys.path``: the worker runs the parent's copy."""
    if here is None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = os.path.abspath(here)
    if "workbench" not in sys.modules:
        spec = importlib.util.find_spec("workbench")  # finds the package without running its __init__
        if spec is None or not any(os.path.abspath(p) == here for p in spec.submodule_search_locations or []):
            sys.path.insert(0, os.path.dirname(here))
    return importlib.import_module("workbench.envs.core")


def _build(message: tuple, envs_module):  # type: ignore[no-untyped-def]
    _, blob, env_id, num_envs, seed, *rest = message
    layout = rest[0] if rest else None  # a PettingZoo ParallelEnv factory: the agent's row layout
    halves = len(rest) > 1 and bool(rest[1])  # double-buffered sampling: two vectors that step apart
    if env_id is not None:

        def factory():  # type: ignore[no-untyped-def]
            return envs_module.make_env(env_id)  # Atari and MinAtar ids get their preprocessing
    else:
        import cloudpickle

        factory = cloudpickle.loads(blob)
    if layout is not None:  # num_envs copies of a ParallelEnv, one slot per agent (envs/multiagent.py)
        multi = importlib.import_module(f"{envs_module.__package__}.multiagent")
        copies = [multi.make_parallel(factory) for _ in range(num_envs)]
        return multi.ParallelVec(copies, multi.Layout(**layout), seed=seed)
    envs = []
    for _ in range(num_envs):
        env = factory()
        if not hasattr(env, "step") or not hasattr(env, "reset"):
            raise TypeError(f"the env factory returned {type(env).__name__}, not a gymnasium.Env")
        envs.append(env)
    if halves:
        return Halves(envs, envs_module, seed)
    return envs_module.VecEnv(envs, seed=seed)


class Halves:
    """A worker's envs as two vectors (``envs_module.VecEnv``) that step apart, for double-buffered
    sampling: the parent decides one half's actions while the other half steps. Seeded as one vector of
    all the envs (env ``i`` gets ``seed + i``), so a run steps the same episodes either way. Everything but
    a half step (reset, a step of all envs, masks, random streams, ``call``) answers for all envs in order,
    as one vector would."""

    def __init__(self, envs: list, envs_module, seed: int | None) -> None:  # type: ignore[no-untyped-def]
        import numpy as np

        self.np = np
        half = len(envs) // 2
        self.halves = (
            envs_module.VecEnv(envs[:half], seed=seed),
            envs_module.VecEnv(envs[half:], seed=None if seed is None else seed + half),
        )
        self.num_envs = len(envs)
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space
        self.current = 0  # the half stepping now (for ``stepping``)

    def _joined(self, name: str):  # type: ignore[no-untyped-def]
        parts = [getattr(h, name) for h in self.halves]
        if all(p is None for p in parts):
            return None
        if any(p is None for p in parts):  # reported by one half only (a goal env's first success): NaN rows
            shape = next(p for p in parts if p is not None).shape[1:]
            nan = self.np.nan
            parts = [self.np.full((h.num_envs, *shape), nan) if p is None else p for h, p in zip(self.halves, parts)]
        return self.np.concatenate(parts)

    masks = property(lambda self: self._joined("masks"))
    final_masks = property(lambda self: self._joined("final_masks"))
    game_ends = property(lambda self: self._joined("game_ends"))
    successes = property(lambda self: self._joined("successes"))

    @property
    def stepping(self) -> int | None:
        """The index (over both halves) of the env whose step is running, None between steps."""
        i = self.halves[self.current].stepping
        return None if i is None else i + self.current * self.halves[0].num_envs

    def step_half(self, h: int, actions):  # type: ignore[no-untyped-def]
        """Step half ``h``'s envs alone (``VecEnv.step``'s answer for those envs)."""
        self.current = h
        return self.halves[h].step(actions)

    def step(self, actions):  # type: ignore[no-untyped-def]
        """Step every env, half after half (``VecEnv.step``'s answer for all envs)."""
        half = self.halves[0].num_envs
        parts = [self.step_half(0, actions[:half]), self.step_half(1, actions[half:])]
        obs = self.np.concatenate([p[0] for p in parts])
        ended = any(p[4] is not p[0] for p in parts)
        final = self.np.concatenate([p[4] for p in parts]) if ended else obs
        return (obs, *(self.np.concatenate([p[i] for p in parts]) for i in (1, 2, 3)), final)

    def reset(self):  # type: ignore[no-untyped-def]
        """Reset every env; all first observations."""
        return self.np.concatenate([h.reset() for h in self.halves])

    def rng_states(self) -> list:
        """Every env's random stream, in order."""
        return self.halves[0].rng_states() + self.halves[1].rng_states()

    def set_rng_states(self, states) -> None:  # type: ignore[no-untyped-def]
        """Continue these streams (env ``i`` in order) at the next reset."""
        half = self.halves[0].num_envs
        self.halves[0].set_rng_states(list(states)[:half])
        self.halves[1].set_rng_states(list(states)[half:])

    def call(self, name, args=(), kwargs=None) -> list:  # type: ignore[no-untyped-def]
        """``env.name(*args, **kwargs)`` on every env, in order."""
        return self.halves[0].call(name, args, kwargs) + self.halves[1].call(name, args, kwargs)

    def close(self) -> None:
        """Close every env."""
        for h in self.halves:
            h.close()


class Server:
    """The envs of one worker and the protocol above, without the transport: :meth:`handle` takes
    one request's bytes and returns the answer's (None for ``close``). The worker process's loop
    feeds it from its connection; a Ray actor (:class:`RayEnvWorker`) from method calls."""

    def __init__(self, envs_module) -> None:  # type: ignore[no-untyped-def]
        import numpy as np

        self.np = np
        self.envs_module = envs_module
        self.vec: Any = None  # the envs module's vector of envs, built by the "init" command
        self.where = "starting"
        self.action_dtype: type[Any] = np.float32
        self.action_shape: tuple[int, ...] = ()
        self.codec: Any = None  # how observations travel (envs/core.py's ObservationCodec), set at init
        self.shared: Any = None  # the shared memory block observations are written to ("shm"), if any
        self._shared_handle: Any = None  # what keeps it open

    @property
    def stepping(self) -> int:
        """The index of the env whose ``step`` is running (-1 between steps)."""
        stepping = None if self.vec is None else self.vec.stepping
        return -1 if stepping is None else stepping

    def handle(self, raw: bytes):  # type: ignore[no-untyped-def]
        """Serve one request; any error becomes an ``("error", where, traceback)`` answer."""
        from multiprocessing.reduction import ForkingPickler

        try:
            if raw[:1] == STEP:
                return self._step(raw, self.vec, 1, 0)
            if raw[:1] == STEP_HALF:  # double-buffered sampling: one half of the envs (see Halves)
                h = raw[1]
                vec = self.vec
                return self._step(raw, vec.halves[h], 2, h * vec.num_envs * self.codec.row_bytes, h)
            message = ForkingPickler.loads(raw)
            command = message[0]
            if command == "close":
                return None
            return ForkingPickler.dumps(self._command(command, message))
        except Exception:
            return ForkingPickler.dumps(("error", self.where, traceback.format_exc()))

    def _step(self, raw: bytes, vec: Any, offset: int, shared_at: int, half: int | None = None) -> bytes:
        # The hot path, without pickle: raw actions (from byte ``offset``) in, one float32 buffer out; with
        # shared memory the observations go to ``shared_at`` in the block. ``vec``: all envs, or one half.
        np = self.np
        self.where = "env.step"
        actions = np.frombuffer(raw, dtype=self.action_dtype, offset=offset).reshape(vec.num_envs, *self.action_shape)
        start = time.perf_counter()
        if half is None:
            obs, rewards, terminated, truncated, final_obs = vec.step(actions)
        else:
            obs, rewards, terminated, truncated, final_obs = self.vec.step_half(half, actions)
        busy = time.perf_counter() - start
        ended = final_obs is not obs
        successes = vec.successes  # goal envs' info["is_success"] (NaN where no episode ended), last in the head
        parts = [np.array([busy, ended, successes is not None], dtype=np.float32), rewards, terminated, truncated]
        if vec.masks is not None:
            parts += [vec.masks, vec.final_masks]
        if vec.game_ends is not None:  # whole games' raw scores (workbench.envs.atari)
            parts.append(vec.game_ends)
        slot_info = getattr(vec, "slot_info", None)  # ParallelEnv slots: alive, returns of ended team episodes
        if slot_info is not None:
            parts.append(slot_info)
        if successes is not None:
            parts.append(successes)
        head = np.concatenate([p.ravel().astype(np.float32) for p in parts])
        # Observations in their own dtypes: a uint8 frame costs one byte a pixel on the way, not four.
        codec = self.codec
        if self.shared is not None:  # the observations go to shared memory: the answer is the head alone
            codec.encode_into(obs, self.shared, shared_at)
            if ended:
                codec.encode_into(final_obs, self.shared, shared_at + len(obs) * codec.row_bytes)
            return STEP_REPLY + head.tobytes()
        return b"".join((STEP_REPLY, head.tobytes(), codec.encode(obs), codec.encode(final_obs) if ended else b""))

    def _composite_layout(self, space):  # type: ignore[no-untyped-def]
        """``workbench.envs.composite.composite_layout(space)`` from the package the worker runs."""
        return importlib.import_module(f"{self.envs_module.__package__}.composite").composite_layout(space)

    def _command(self, command: str, message: tuple) -> tuple:
        vec = self.vec
        if command == "reset":
            self.where = "env.reset"
            return ("ok", vec.reset())
        if command == "init":
            self.where = "building the env (the factory)"
            vec = self.vec = _build(message, self.envs_module)
            self.codec = self.envs_module.ObservationCodec(vec.observation_space)
            if type(vec.action_space).__name__ == "Discrete":  # the parent sends int64 actions
                self.action_dtype, self.action_shape = self.np.int64, ()
            elif (layout := self._composite_layout(vec.action_space)) is not None:
                self.action_dtype, self.action_shape = self.np.float32, (layout.width,)  # the agents' flat rows
            else:
                self.action_dtype, self.action_shape = self.np.float32, vec.action_space.shape
            return ("ok", vec.game_ends is not None)  # whether step answers carry game ends
        if command == "shm":
            self.where = "opening the shared memory"
            self.shared, self._shared_handle = _open_shared(message[1], message[2])
            return ("ok", self.shared is not None)
        if command == "masks":
            return ("ok", vec.masks)
        if command == "rng":
            self.where = "reading the envs' random streams"
            return ("ok", vec.rng_states())
        if command == "set_rng":
            self.where = "setting the envs' random streams"
            vec.set_rng_states(message[1])
            return ("ok", None)
        if command == "call":
            self.where = f"env.{message[1]}"
            try:
                return ("ok", vec.call(message[1], message[2], message[3]))
            except self.envs_module.EnvMethodError as exc:
                return ("missing", str(exc))
        raise ValueError(f"unknown command {command!r}")

    def close(self) -> None:
        """Close the envs (errors ignored: the worker is going away)."""
        self.shared = None
        if self._shared_handle is not None:
            with contextlib.suppress(Exception):
                self._shared_handle.close()
            self._shared_handle = None
        if self.vec is not None:
            with contextlib.suppress(Exception):
                self.vec.close()
            self.vec = None


def _open_shared(name: str, size: int) -> tuple[Any, Any]:
    """The parent's shared memory block ``name`` (a file of Linux's ``/dev/shm``, made and removed by the
    parent: ``workbench.parallel.local``), mapped here: ``(writable buffer, handle to close)``, or
    ``(None, None)`` where it is not there."""
    path = os.path.join("/dev/shm", name)
    if os.sep in name or not os.path.exists(path):
        return None, None
    import mmap

    fd = os.open(path, os.O_RDWR)
    try:
        mapped = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    return mapped, mapped


def shared_memory_available() -> bool:
    """True where a worker can map its parent's shared memory block (Linux's ``/dev/shm``)."""
    return os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)


def _serve_status(fd: int, server: Server) -> None:
    """Answer every message on ``fd`` with the index of the env stepping now (-1: none)."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    while True:
        try:
            conn.recv_bytes()
            conn.send_bytes(str(server.stepping).encode())
        except (EOFError, OSError):
            return


def main(fd: int, status_fd: int | None = None) -> None:
    """Serve the parent until it says close or goes away."""
    import threading
    from multiprocessing.connection import Connection

    # Ctrl-C in a terminal reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    server = None
    try:
        server = Server(_load_envs_module())
        if status_fd is not None:
            threading.Thread(target=_serve_status, args=(status_fd, server), daemon=True).start()
        while True:
            try:
                raw = conn.recv_bytes()
            except (EOFError, OSError):
                break
            reply = server.handle(raw)
            if reply is None:
                break
            try:
                conn.send_bytes(reply)
            except OSError:
                break  # the parent is gone: nothing left to serve
    finally:
        if server is not None:
            server.close()
        conn.close()


class RayEnvWorker:
    """A Ray actor serving the same protocol through method calls (``backend="ray"`` with
    ``ray_acting="learner"``): it holds and steps envs for the learner's actions and never imports
    torch: of the ``workbench`` package only its light face and ``workbench.envs``. The learner sends this
    class to Ray by value (see ``workbench.parallel.ray_envs``), so an actor starts as fast as a bare Ray
    worker plus gymnasium.

    ``package_dir``: the learner's ``workbench`` folder; where it does not exist (another machine of a
    cluster), the ``workbench`` package installed there is used."""

    def __init__(self, package_dir: str) -> None:
        if not os.path.isfile(os.path.join(package_dir, "envs", "core.py")):
            spec = importlib.util.find_spec("workbench")  # finds the package without running its __init__
            if spec is None or not spec.submodule_search_locations:
                raise ImportError("the Ray worker's Python cannot find the workbench package: install rl-workbench")
            package_dir = next(iter(spec.submodule_search_locations))
        self.server = Server(_load_envs_module(package_dir))

    def handle(self, raw: bytes) -> bytes | None:
        """One request of the protocol; the answer's bytes (None: closed)."""
        reply = self.server.handle(raw)
        if reply is None:
            self.server.close()
            return None
        return bytes(reply)

    def stepping(self) -> int:
        """The index of this worker's env whose ``step`` is running (-1 between steps); answered
        from a second thread while :meth:`handle` steps (the actor then runs two calls at once)."""
        return self.server.stepping

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()


if __name__ == "__main__":
    # Run as a script, Python put this package folder first on sys.path, where its files would
    # shadow top-level modules the user's env imports (``errors``, ``local``): take it off.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
