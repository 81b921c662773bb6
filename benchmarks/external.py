"""What the env-less session costs: an external session's act+feedback pair against a normal step.

Three comparisons, each interleaved round by round (so a busy machine slows both sides alike), with
medians over rounds and their ratio:

1. Training throughput: ``Session(agent, env).run(steps=N)`` against an external session driven by
   a plain loop over the same env (``act``, ``env.step``, ``feedback``) for the same N transitions,
   with ``max_lag=0`` (the loop waits for learning: the same work, in step) and without (the
   application never waits). Seconds per transition, same agent settings and seed.
2. The calls alone: the median time of one ``act`` + ``feedback`` pair seen by the application
   (``env.step`` excluded) against the time of one step of the normal session's loop.
3. The agent's lock (``decide``/``act`` are thread-safe): ``agent.act`` and a normal run with the
   lock against the same with the lock replaced by a no-op, in the process's CPU time (less
   disturbed by other load than wall time).

    nice python benchmarks/external.py [--steps 3000] [--rounds 5] [--algorithm DQN]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import gymnasium as gym
import numpy as np

import workbench as wb


def make_agent(algorithm: str) -> wb.Agent:
    env = gym.make("CartPole-v1")
    extra = {"n_envs": 1} if algorithm in ("PPO", "A2C") else {}
    return getattr(wb, algorithm)(observation_space=env.observation_space, action_space=env.action_space, **extra)


def normal_run(algorithm: str, steps: int, lock: bool = True, clock=time.perf_counter) -> float:
    """Seconds per step of a normal session (``clock``: wall time, or the process's CPU time)."""
    agent = make_agent(algorithm)
    if not lock:
        agent._lock = contextlib.nullcontext()
    session = wb.Session(agent, "CartPole-v1", seed=0)
    t0 = clock()
    session.run(steps=steps)
    return (clock() - t0) / steps


def external_run(algorithm: str, steps: int, max_lag: int | None) -> tuple[float, float, float]:
    """Wall and CPU seconds per transition learned, and the median wall seconds of one act+feedback pair."""
    session = wb.Session.external(make_agent(algorithm), seed=0, max_lag=max_lag)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    pairs = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    session.start(steps=steps)
    while session.status == "running":
        a = time.perf_counter()
        action = session.act(obs)
        b = time.perf_counter()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        c = time.perf_counter()
        session.feedback(reward, next_obs, terminated, truncated)
        pairs.append(b - a + time.perf_counter() - c)
        obs = env.reset()[0] if terminated or truncated else next_obs
    session.wait()
    return (time.perf_counter() - t0) / steps, (time.process_time() - cpu0) / steps, statistics.median(pairs)


def act_calls(agent: wb.Agent, n: int = 500) -> float:
    """CPU seconds per ``agent.act`` of one observation."""
    obs = np.random.default_rng(0).uniform(-1, 1, size=(n, 4)).astype(np.float32)
    t0 = time.process_time()
    for o in obs:
        agent.act(o)
    return (time.process_time() - t0) / n


def act_lock_ratio(algorithm: str, reps: int = 20) -> tuple[float, float]:
    """Median CPU seconds per act with the agent's lock and with a no-op in its place, interleaved."""
    locked, unlocked = make_agent(algorithm), make_agent(algorithm)
    unlocked._lock = contextlib.nullcontext()
    with_lock, without = [], []
    for _ in range(reps):
        with_lock.append(act_calls(locked))
        without.append(act_calls(unlocked))
    return statistics.median(with_lock), statistics.median(without)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--algorithm", default="DQN")
    args = parser.parse_args()
    rows: dict[str, list[float]] = {
        k: []
        for k in (
            "normal",
            "external_lag0",
            "external_free",
            "pair_lag0",
            "pair_free",
            "normal_cpu",
            "external_lag0_cpu",
            "external_free_cpu",
            "act_lock",
            "act_nolock",
            "normal_lock",
            "normal_nolock",
        )
    }
    for r in range(args.rounds):
        cpu0 = time.process_time()
        rows["normal"].append(normal_run(args.algorithm, args.steps))
        rows["normal_cpu"].append((time.process_time() - cpu0) / args.steps)
        for lag, name in ((0, "lag0"), (None, "free")):
            per, cpu, pair = external_run(args.algorithm, args.steps, max_lag=lag)
            rows[f"external_{name}"].append(per)
            rows[f"external_{name}_cpu"].append(cpu)
            rows[f"pair_{name}"].append(pair)
        locked, unlocked = act_lock_ratio(args.algorithm)
        rows["act_lock"].append(locked)
        rows["act_nolock"].append(unlocked)
        rows["normal_lock"].append(normal_run(args.algorithm, args.steps, lock=True, clock=time.process_time))
        rows["normal_nolock"].append(normal_run(args.algorithm, args.steps, lock=False, clock=time.process_time))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    us = 1e6
    print(f"\n{args.algorithm} on CartPole-v1, {args.steps} transitions, {args.rounds} interleaved rounds, medians")
    print("per transition learned:          wall us (ratio)     CPU us (ratio)")
    for key, label in (
        ("normal", "normal session"),
        ("external_lag0", "external, max_lag=0"),
        ("external_free", "external, feedback never waits"),
    ):
        print(
            f"{label:32s} {med[key] * us:8.1f} ({med[key] / med['normal']:.2f})   "
            f"{med[key + '_cpu'] * us:8.1f} ({med[key + '_cpu'] / med['normal_cpu']:.2f})"
        )
    print(
        f"one act+feedback pair (calls only): {med['pair_free'] * us:6.1f} us free, {med['pair_lag0'] * us:6.1f} us "
        f"with max_lag=0 (free pair / a normal step's CPU time: {med['pair_free'] / med['normal_cpu']:.3f})"
    )
    print(
        f"agent.act with the lock / without: {med['act_lock'] * us:.2f} / {med['act_nolock'] * us:.2f} us CPU "
        f"(ratio {med['act_lock'] / med['act_nolock']:.3f})"
    )
    print(
        f"normal run with the lock / without: {med['normal_lock'] * us:.1f} / {med['normal_nolock'] * us:.1f} us "
        f"CPU per step (ratio {med['normal_lock'] / med['normal_nolock']:.3f})"
    )


if __name__ == "__main__":
    main()
