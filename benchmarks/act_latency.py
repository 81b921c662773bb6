"""``act`` latency from another thread while a session learns: the percentiles an application or a
served client sees, with the agent's first-come-first-served lock (``FairRLock``) and, for comparison,
with ``threading.RLock`` put in its place (which lets the learning thread take the lock back at once).

A ``Session(agent, "CartPole-v1")`` trains in its background thread (DQN: an update every 4 steps;
PPO: 4 epochs over a 512-step rollout, the longest hold of the lock), while the main thread calls
``agent.act(obs)`` back to back for ``--seconds``; the latencies of those calls give p50/p95/p99/max.
Each (algorithm, lock) pair is one short run, single process, on the CPU.

    nice python benchmarks/act_latency.py [--seconds 4] [--algorithms DQN PPO]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import torch

import workbench as wb


def _agent(algorithm: str) -> wb.DQN | wb.PPO:
    if algorithm == "DQN":
        return wb.DQN("CartPole-v1", learning_starts=100, train_freq=4, gradient_steps=1, batch_size=64, seed=0)
    return wb.PPO("CartPole-v1", n_steps=512, batch_size=64, n_epochs=4, n_envs=1, seed=0)


def measure(algorithm: str, lock: str, seconds: float) -> dict[str, float]:
    """Percentiles (ms) of ``agent.act`` from the main thread while the session learns."""
    agent = _agent(algorithm)
    if lock == "RLock":
        agent._lock = threading.RLock()  # the comparison: Python's own lock, not fair
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.start(steps=10**7)
    while agent.num_updates < 2:  # learning has begun
        time.sleep(0.01)
    obs = np.zeros(4, np.float32)
    latencies = []
    updates = agent.num_updates
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        agent.act(obs)
        latencies.append(time.perf_counter() - t0)
    updates = agent.num_updates - updates
    session.stop()
    ms = np.asarray(latencies) * 1e3
    return {
        "acts": len(ms),
        "updates": updates,
        "p50": float(np.percentile(ms, 50)),
        "p95": float(np.percentile(ms, 95)),
        "p99": float(np.percentile(ms, 99)),
        "max": float(ms.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--algorithms", nargs="+", default=["DQN", "PPO"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{'agent':<5} {'lock':<9} {'acts':>6} {'updates':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"
    )
    for algorithm in args.algorithms:
        for lock in ("FairRLock", "RLock"):
            r = measure(algorithm, lock, args.seconds)
            print(
                f"{algorithm:<5} {lock:<9} {r['acts']:>6} {r['updates']:>7} {r['p50']:>7.3f} {r['p95']:>7.3f} "
                f"{r['p99']:>7.3f} {r['max']:>7.1f}"
            )


if __name__ == "__main__":
    main()
