"""Soak test: long runs with periodic saves, watching resident memory and open files.

PPO on CartPole-v1 for 1M steps and DQN for 300k steps, each saving its session (with the replay
memory) every 50k steps to the same path, and an external PPO session (``Session.external``, 4
env slots) driven by 4 application threads for 300k steps, saving the same way, while a second
thread prints the process's resident set size (RSS) and its open files every 10 s. After warm-up
(the first save, the replay memory or the external session's backlog filled) RSS must stay flat:
the script prints the growth from the first sample after warm-up to the last, and exits 1 when it
exceeds ``--max-growth-mb``. The external case also prints how many transitions were dropped at
the backlog's cap (``--max-queued`` per slot; see docs/external.md).

    python benchmarks/soak.py                       # the full soak (several minutes on two cores)
    python benchmarks/soak.py --scale 0.05          # a quick look: 5% of the steps
    python benchmarks/soak.py --case external --max-queued 10000

Not part of the test suite: it measures, it does not assert behaviour.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

import psutil

import workbench as wb

RUNS = {"ppo": 1_000_000, "dqn": 300_000, "external": 300_000}
DRIVERS = 4  # application threads (and env slots) of the external case
SAVE_EVERY = 50_000


def _sampler(
    stop: threading.Event,
    samples: list[tuple[float, float, int, str, int]],
    label: list[str],
    steps: list[int],
    every: float,
) -> None:
    proc = psutil.Process()
    start = time.perf_counter()
    while not stop.wait(every):
        rss = proc.memory_info().rss / 2**20
        files = len(proc.open_files())
        now = time.perf_counter() - start
        samples.append((now, rss, files, label[0], steps[0]))
        print(f"{now:7.1f} s  {label[0]:>4}  step {steps[0]:>9,}  rss {rss:8.1f} MB  open files {files}", flush=True)


def soak(algo: str, total: int, out: str, steps: list[int]) -> float:
    """Train ``algo`` for ``total`` steps, saving every SAVE_EVERY steps; returns the wall time."""
    agent = wb.PPO("CartPole-v1", seed=0) if algo == "ppo" else wb.DQN("CartPole-v1", seed=0)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    path = os.path.join(out, algo)
    t0 = time.perf_counter()
    done = 0
    while done < total:
        chunk = min(SAVE_EVERY, total - done)
        session.run(steps=chunk)
        done += chunk
        steps[0] = session.steps
        session.save(path, memory=(algo == "dqn"))
    return time.perf_counter() - t0


def soak_external(total: int, out: str, steps: list[int], max_queued: int) -> float:
    """An external PPO session learning ``total`` transitions fed by DRIVERS threads, each stepping
    its own CartPole-v1, saved every SAVE_EVERY steps; returns the wall time."""
    import gymnasium as gym

    session = wb.Session.external(wb.PPO("CartPole-v1", seed=0, n_envs=DRIVERS), seed=0, max_queued=max_queued)
    stop = threading.Event()

    def drive(i: int) -> None:
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=i)
        while not stop.is_set():
            next_obs, reward, terminated, truncated, _ = env.step(session.act(obs, episode=i))
            session.feedback(reward, next_obs, terminated, truncated, episode=i)
            obs = env.reset()[0] if terminated or truncated else next_obs

    drivers = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(DRIVERS)]
    path = os.path.join(out, "external")
    t0 = time.perf_counter()
    session.start(steps=total)
    for thread in drivers:
        thread.start()
    next_save = SAVE_EVERY
    while not session.wait(timeout=0.5):
        steps[0] = session.steps
        if session.steps >= next_save:
            session.save(path)
            next_save += SAVE_EVERY
    wall = time.perf_counter() - t0
    stop.set()
    for thread in drivers:
        thread.join(5.0)
    runner = session._ctx.loop.runner  # the application's runner: its backlog counters
    print(f"external: dropped {runner.dropped:,} transitions at max_queued={max_queued:,} per slot", flush=True)
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the steps to run (default 1)")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples (default 10)")
    parser.add_argument("--max-growth-mb", type=float, default=50.0, help="allowed RSS growth after warm-up")
    parser.add_argument("--case", default=",".join(RUNS), help=f"comma-separated cases (default {','.join(RUNS)})")
    parser.add_argument("--max-queued", type=int, default=100_000, help="external case: backlog cap per slot")
    args = parser.parse_args()
    samples: list[tuple[float, float, int, str, int]] = []
    label, steps = ["-"], [0]
    stop = threading.Event()
    thread = threading.Thread(target=_sampler, args=(stop, samples, label, steps, args.every), daemon=True)
    thread.start()
    status = 0
    with tempfile.TemporaryDirectory(prefix="workbench-soak-") as out:
        for algo in args.case.split(","):
            label[0], steps[0] = algo, 0
            total = max(SAVE_EVERY, int(RUNS[algo] * args.scale))
            if algo == "external":
                wall = soak_external(total, out, steps, args.max_queued)
            else:
                wall = soak(algo, total, out, steps)
            mine = [s for s in samples if s[3] == algo and s[4] >= SAVE_EVERY]  # after the first save
            if len(mine) >= 2:
                rss = [s[1] for s in mine]
                growth = rss[-1] - rss[0]
                print(
                    f"{algo}: {total:,} steps in {wall:.0f} s; RSS after warm-up: first {rss[0]:.1f} MB, "
                    f"median {statistics.median(rss):.1f} MB, last {rss[-1]:.1f} MB, growth {growth:+.1f} MB; "
                    f"open files {min(s[2] for s in mine)}..{max(s[2] for s in mine)}",
                    flush=True,
                )
                if growth > args.max_growth_mb:
                    status = 1
            else:
                print(f"{algo}: {total:,} steps in {wall:.0f} s; too few samples after warm-up to judge", flush=True)
    stop.set()
    return status


if __name__ == "__main__":
    sys.exit(main())
