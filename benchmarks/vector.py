"""Vector envs as the env: env steps per second, and per CPU-second, for each way of stepping envs.

Part ``env`` (the env part of a training step alone): random actions, ``step`` of 8 envs, for CartPole,
MinAtar Breakout and Atari Breakout (``make_env``'s preprocessing: 4 skipped frames, 84x84 gray, 4 stacked;
EnvPool with the same options through ``make_envpool``). Ways:

* ``wb-inprocess``: the library's own ``VecEnv`` in this process (``backend="inprocess"``);
* ``wb-local``: the library's local worker processes (``backend="local"``, 2 workers, 4 envs each);
* ``gym-sync`` / ``gym-async``: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` as the session's env
  (through ``workbench.envs.VectorEnvAdapter``, next-step autoreset made same-step);
* ``envpool``: an EnvPool env as the session's env (the adapter), ``envpool-raw``: EnvPool's own ``step``;
* ``sb3-dummy`` / ``sb3-subproc``: Stable-Baselines3's ``DummyVecEnv`` / ``SubprocVecEnv`` (``make_vec_env``,
  ``make_atari_env`` + ``VecFrameStack(4)`` for Atari).

Part ``ppo`` (whole training steps): PPO at the zoo's settings (CartPole: the zoo's cartpole entry; Atari: its
atari entry, Nature CNN) through ``wb.Session`` with each way, against SB3's PPO with ``DummyVecEnv`` and
``SubprocVecEnv``; one rollout and update first (not timed), then ``--ppo-steps`` more, timed. One torch thread
for both libraries. Keep ``--ppo-steps`` a multiple of a rollout (``n_envs * n_steps``: 256 for CartPole, 1024 for
Atari): SB3 always collects whole rollouts, so a shorter budget would time more work for SB3 than for workbench.

CPU-seconds count this process and its children (``psutil``), so worker processes and EnvPool's threads are in.
Every way is measured ``--rounds`` times, the order rotating each round; medians are printed, with the ratio
to SB3's best (higher is faster).

    python benchmarks/vector.py                                  # everything (several minutes)
    python benchmarks/vector.py --part env --games cartpole --seconds 1 --rounds 3
    python benchmarks/vector.py --part ppo --games atari --ppo-steps 2048

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import psutil

import workbench as wb
from workbench.envs import VectorEnvAdapter, make_env, make_envpool
from workbench.parallel import InProcessRunner, LocalRunner

GAMES = {"cartpole": "CartPole-v1", "minatar": "MinAtar/Breakout-v1", "atari": "BreakoutNoFrameskip-v4"}
N_ENVS = 8


def cpu_seconds() -> float:
    """User + system CPU time of this process and its children: the live ones (psutil) and those that
    ended and were waited for (``os.times``; local workers exit when a run ends)."""
    me = psutil.Process()
    ended = os.times()
    total = sum(me.cpu_times()[:2]) + ended.children_user + ended.children_system
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


# -- the ways of stepping envs: each gives (step(actions), close()) ------------------------------


def _factory(env_id: str) -> Callable[[], gym.Env]:
    return lambda: make_env(env_id)


def _ale(env_id: str) -> gym.Env:
    """The bare ALE game for SB3's AtariWrapper (ale-py registered here: SB3's subprocesses start fresh)."""
    import ale_py

    gym.register_envs(ale_py)
    return gym.make(env_id)


def _sb3(env_id: str, subproc: bool) -> Any:
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack, VecTransposeImage

    cls = SubprocVecEnv if subproc else DummyVecEnv
    if env_id.endswith("NoFrameskip-v4"):
        venv = make_atari_env(functools.partial(_ale, env_id), n_envs=N_ENVS, seed=0, vec_env_cls=cls)
        return VecTransposeImage(VecFrameStack(venv, n_stack=4))
    return make_vec_env(_factory(env_id), n_envs=N_ENVS, seed=0, vec_env_cls=cls)


def build(way: str, env_id: str) -> tuple[Any, Callable[[np.ndarray], Any], Callable[[], None], gym.Space]:
    """(the env object, its step, its close, the single action space) for one way."""
    source = wb.envs.as_env_source(env_id)
    if way == "wb-inprocess":
        runner = InProcessRunner(source, N_ENVS, seed=0)
        runner.reset()
        return runner, runner.step, runner.close, runner.action_space
    if way == "wb-local":
        runner = LocalRunner(source, 2, N_ENVS // 2, seed=0)
        runner.reset()
        return runner, runner.step, runner.close, runner.action_space
    if way in ("gym-sync", "gym-async"):
        cls = gym.vector.SyncVectorEnv if way == "gym-sync" else gym.vector.AsyncVectorEnv
        envs = VectorEnvAdapter(cls([_factory(env_id)] * N_ENVS))
        envs.reset(seed=0)
        return envs, envs.step, envs.close, envs.action_space
    if way == "envpool":
        envs = make_envpool(env_id, N_ENVS, seed=0)
        envs.reset()
        return envs, envs.step, envs.close, envs.action_space
    if way == "envpool-raw":
        envs = make_envpool(env_id, N_ENVS, seed=0)
        venv = envs.venv
        venv.reset()
        return venv, venv.step, venv.close, envs.action_space
    if way in ("sb3-dummy", "sb3-subproc"):
        venv = _sb3(env_id, way == "sb3-subproc")
        venv.reset()

        def step(actions: np.ndarray) -> Any:
            return venv.step(actions)

        return venv, step, venv.close, venv.action_space
    raise ValueError(way)


def measure_env(way: str, env_id: str, seconds: float) -> dict[str, float]:
    _, step, close, action_space = build(way, env_id)
    try:
        rng = np.random.default_rng(0)
        n = int(getattr(action_space, "n", 2))
        actions = [rng.integers(0, n, size=N_ENVS) for _ in range(64)]
        for k in range(10):  # warm up
            step(actions[k])
        steps, w0, c0 = 0, time.perf_counter(), cpu_seconds()
        while time.perf_counter() - w0 < seconds:
            step(actions[steps % 64])
            steps += 1
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
    finally:
        close()
    return {"sps": steps * N_ENVS / wall, "per_cpu": steps * N_ENVS / max(cpu, 1e-9)}


# -- PPO ------------------------------------------------------------------------------------------


def ppo_hyper(env_id: str) -> dict[str, Any]:
    import dataclasses

    key = (env_id if env_id in ("CartPole-v1", "BreakoutNoFrameskip-v4") else "CartPole-v1", "ppo")
    values = {f.name: getattr(wb.PPO.Config(), f.name) for f in dataclasses.fields(wb.PPO.Config)}
    values.update(wb.PRESETS[key].hyperparameters)
    return values


def measure_ppo(way: str, env_id: str, steps: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    h = ppo_hyper(env_id)
    warm = h["n_envs"] * h["n_steps"]
    if way.startswith("sb3"):
        import stable_baselines3 as sb3

        def sched(value: Any) -> Any:
            return (lambda remaining: float(value(1.0 - remaining))) if callable(value) else value

        venv = _sb3(env_id, way == "sb3-subproc")
        policy = "CnnPolicy" if env_id.endswith("NoFrameskip-v4") else "MlpPolicy"
        model = sb3.PPO(
            policy,
            venv,
            n_steps=h["n_steps"],
            batch_size=h["batch_size"],
            n_epochs=h["n_epochs"],
            gamma=h["gamma"],
            gae_lambda=h["gae_lambda"],
            ent_coef=h["ent_coef"],
            vf_coef=h["vf_coef"],
            clip_range=sched(h["clip_range"]),
            learning_rate=sched(h["learning_rate"]),
            max_grad_norm=h["max_grad_norm"],
            seed=0,
            device="cpu",
            policy_kwargs={"net_arch": list(h["net_arch"])} if policy == "MlpPolicy" else None,
        )
        model.learn(total_timesteps=warm)
        w0, c0 = time.perf_counter(), cpu_seconds()
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
        venv.close()
        return {"sps": steps / wall, "per_cpu": steps / max(cpu, 1e-9)}
    agent_args = (
        {k: v for k, v in wb.PRESETS[(env_id, "ppo")].hyperparameters.items()}
        if ((env_id, "ppo") in wb.PRESETS)
        else {"n_envs": N_ENVS}
    )
    agent_args["n_envs"] = N_ENVS
    venv = None
    options: dict[str, Any] = {}
    env: Any = env_id
    if way == "wb-local":
        options = {"num_workers": 2, "backend": "local"}
    elif way == "wb-inprocess":
        options = {"backend": "inprocess"}
    elif way == "envpool":
        options = {"backend": "envpool"}
    elif way == "gym-async":
        env = venv = gym.vector.AsyncVectorEnv([_factory(env_id)] * N_ENVS)
    else:
        raise ValueError(way)
    agent = wb.PPO(env_id if venv is None else venv, seed=0, **agent_args)
    session = wb.Session(agent, env, seed=0, torch_threads=1, **options)
    session.run(steps=warm)
    w0, c0 = time.perf_counter(), cpu_seconds()
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
    if venv is not None:
        venv.close()
    return {"sps": steps / wall, "per_cpu": steps / max(cpu, 1e-9)}


# -- the run --------------------------------------------------------------------------------------


ENV_WAYS = ["wb-inprocess", "wb-local", "gym-sync", "gym-async", "envpool", "envpool-raw", "sb3-dummy", "sb3-subproc"]
PPO_WAYS = ["wb-inprocess", "wb-local", "gym-async", "envpool", "sb3-dummy", "sb3-subproc"]


def table(title: str, results: dict[str, list[dict[str, float]]]) -> None:
    med = {
        w: (statistics.median(r["sps"] for r in rs), statistics.median(r["per_cpu"] for r in rs))
        for w, rs in results.items()
        if rs
    }
    sb3 = [med[w] for w in ("sb3-dummy", "sb3-subproc") if w in med]
    best_sps = max((m[0] for m in sb3), default=float("nan"))
    best_cpu = max((m[1] for m in sb3), default=float("nan"))
    print(f"\n{title}")
    print("| way | env steps/s | x SB3's best | steps per CPU-s | x SB3's best |")
    print("|---|---:|---:|---:|---:|")
    for way, (sps, per_cpu) in med.items():
        print(f"| {way} | {sps:,.0f} | {sps / best_sps:.2f} | {per_cpu:,.0f} | {per_cpu / best_cpu:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["env", "ppo", "both"], default="both")
    parser.add_argument("--games", default="cartpole,minatar,atari")
    parser.add_argument("--seconds", type=float, default=1.5, help="env part: seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ppo-steps", type=int, default=0, help="ppo part: timed steps (default: per game)")
    parser.add_argument("--ways", default="", help="comma-separated subset of the ways")
    args = parser.parse_args()
    chosen = set(filter(None, args.ways.split(",")))
    for game in args.games.split(","):
        env_id = GAMES[game]
        envpool_ok = game != "minatar"  # EnvPool has no MinAtar
        if args.part in ("env", "both"):
            ways = [w for w in ENV_WAYS if (envpool_ok or "envpool" not in w) and (not chosen or w in chosen)]
            results: dict[str, list[dict[str, float]]] = {w: [] for w in ways}
            for r in range(args.rounds):
                for way in ways[r % len(ways) :] + ways[: r % len(ways)]:
                    results[way].append(measure_env(way, env_id, args.seconds))
            table(
                f"env part, {env_id}, {N_ENVS} envs, random actions ({args.rounds} x {args.seconds:g} s, medians)",
                results,
            )
        if args.part in ("ppo", "both"):
            steps = args.ppo_steps or (16_384 if game == "cartpole" else 2048)
            ways = [w for w in PPO_WAYS if (envpool_ok or "envpool" not in w) and (not chosen or w in chosen)]
            results = {w: [] for w in ways}
            for r in range(args.rounds):
                for way in ways[r % len(ways) :] + ways[: r % len(ways)]:
                    results[way].append(measure_ppo(way, env_id, steps))
            table(
                f"PPO (zoo settings), {env_id}, {N_ENVS} envs, {steps} steps after one update "
                f"({args.rounds} rounds, medians)",
                results,
            )


if __name__ == "__main__":
    main()
