"""The program a local worker process runs: build envs from the user's factory, step them on request.

It is started as a script (``python _worker.py FD``), not as ``workbench.parallel._worker``, so a
worker does not import the ``workbench`` package (and with it torch): a worker starts in about a
tenth of a second. It loads ``workbench/envs.py`` by path, so the autoreset rules stay written once.

Protocol over the connection on file descriptor FD (messages are tuples, pickled by
``multiprocessing.connection`` between this library's own processes, never read from a file):

* ``("init", factory_blob, env_id, num_envs, seed)``: build ``num_envs`` envs; ``factory_blob`` is
  the user's zero-argument factory serialised with cloudpickle (None when ``env_id`` is given).
* ``("reset",)`` -> ``("ok", obs)``
* a step: ``b"S"`` + the actions' raw bytes (int64 for Discrete, float32 for Box) -> ``b"K"`` + one float32
  buffer ``[busy_s, ended, rewards, terminated, truncated, obs, final_obs if ended, masks and
  final_masks if the envs give action masks]``; the hot path skips pickle entirely. Actions are
  int64 for Discrete, float32 (cast to the space's dtype by the envs) for everything else.
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
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
import traceback

STEP = b"S"  # first byte of a step request: raw action bytes follow
STEP_REPLY = b"K"  # first byte of a step answer: a float32 buffer follows (pickled messages start with 0x80)


def _load_envs_module():  # type: ignore[no-untyped-def]
    import types

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # A bare package over the workbench folder, without running its __init__ (which imports torch),
    # so envs.py's relative imports (masks.py) resolve.
    package = types.ModuleType("_workbench_worker")
    package.__path__ = [here]  # type: ignore[attr-defined]
    sys.modules["_workbench_worker"] = package
    spec = importlib.util.spec_from_file_location("_workbench_worker.envs", os.path.join(here, "envs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def _build(message: tuple, envs_module):  # type: ignore[no-untyped-def]
    _, blob, env_id, num_envs, seed = message
    if env_id is not None:

        def factory():  # type: ignore[no-untyped-def]
            return envs_module.make_env(env_id)  # Atari and MinAtar ids get their preprocessing
    else:
        import cloudpickle

        factory = cloudpickle.loads(blob)
    envs = []
    for _ in range(num_envs):
        env = factory()
        if not hasattr(env, "step") or not hasattr(env, "reset"):
            raise TypeError(f"the env factory returned {type(env).__name__}, not a gymnasium.Env")
        envs.append(env)
    return envs_module.VecEnv(envs, seed=seed)


def _serve_status(fd: int, holder: dict) -> None:
    """Answer every message on ``fd`` with the index of the env stepping now (-1: none)."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    while True:
        try:
            conn.recv_bytes()
            vec = holder.get("vec")
            stepping = None if vec is None else vec.stepping
            conn.send_bytes(str(-1 if stepping is None else stepping).encode())
        except (EOFError, OSError):
            return


def main(fd: int, status_fd: int | None = None) -> None:
    """Serve the parent until it says close or goes away."""
    import threading
    from multiprocessing.connection import Connection

    # Ctrl-C in a terminal reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    vec = None
    holder: dict = {}
    if status_fd is not None:
        threading.Thread(target=_serve_status, args=(status_fd, holder), daemon=True).start()
    where = "starting"
    try:
        from multiprocessing.reduction import ForkingPickler

        import numpy as np

        envs_module = _load_envs_module()
        action_dtype, action_shape = np.float32, ()
        while True:
            try:
                raw = conn.recv_bytes()
            except (EOFError, OSError):
                break
            try:
                if raw[:1] == STEP:
                    # The hot path, without pickle: raw actions in, one float32 buffer out.
                    where = "env.step"
                    actions = np.frombuffer(raw, dtype=action_dtype, offset=1).reshape(vec.num_envs, *action_shape)
                    start = time.perf_counter()
                    obs, rewards, terminated, truncated, final_obs = vec.step(actions)
                    busy = time.perf_counter() - start
                    ended = final_obs is not obs
                    parts = [np.array([busy, ended], dtype=np.float32), rewards, terminated, truncated, obs]
                    if ended:
                        parts.append(final_obs)
                    if vec.masks is not None:
                        parts += [vec.masks, vec.final_masks]
                    if vec.game_ends is not None:  # whole games' raw scores (workbench.atari)
                        parts.append(vec.game_ends)
                    flat = np.concatenate([p.ravel().astype(np.float32) for p in parts])
                    conn.send_bytes(STEP_REPLY + flat.tobytes())
                    continue
                message = ForkingPickler.loads(raw)
                command = message[0]
                if command == "reset":
                    where = "env.reset"
                    conn.send(("ok", vec.reset()))
                elif command == "init":
                    where = "building the env (the factory)"
                    vec = holder["vec"] = _build(message, envs_module)
                    if type(vec.action_space).__name__ == "Discrete":  # the parent sends int64 actions
                        action_dtype, action_shape = np.int64, ()
                    else:
                        action_dtype, action_shape = np.float32, vec.action_space.shape
                    conn.send(("ok", vec.game_ends is not None))  # whether step answers carry game ends
                elif command == "masks":
                    conn.send(("ok", vec.masks))
                elif command == "rng":
                    where = "reading the envs' random streams"
                    conn.send(("ok", vec.rng_states()))
                elif command == "set_rng":
                    where = "setting the envs' random streams"
                    vec.set_rng_states(message[1])
                    conn.send(("ok", None))
                elif command == "call":
                    where = f"env.{message[1]}"
                    try:
                        results = vec.call(message[1], message[2], message[3])
                    except envs_module.EnvMethodError as exc:
                        conn.send(("missing", str(exc)))
                    else:
                        conn.send(("ok", results))
                elif command == "close":
                    break
                else:
                    raise ValueError(f"unknown command {command!r}")
            except (BrokenPipeError, ConnectionResetError):
                break  # the parent is gone: nothing left to serve
            except Exception:
                try:
                    conn.send(("error", where, traceback.format_exc()))
                except OSError:
                    break
    finally:
        if vec is not None:
            try:
                vec.close()
            except Exception:
                pass
        conn.close()


if __name__ == "__main__":
    # Run as a script, Python put this package folder first on sys.path, where its files would
    # shadow top-level modules the user's env imports (``errors``, ``local``): take it off.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
