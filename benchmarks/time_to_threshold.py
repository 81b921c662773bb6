"""Time to threshold: env steps, wall seconds and CPU seconds until the evaluation first reaches a threshold.

PPO and DQN on CartPole-v1 and SAC on Pendulum-v1, with the zoo's presets (``wb.preset``) or, with
``--fast``, the fast presets (``wb.preset(..., fast=True)``). The session evaluates every ``--every`` env
steps (5 deterministic episodes; 2,000 steps, 1,000 for SAC, as Tianshou's figures are taken) and the run
stops at the first evaluation at or above the last threshold. Seconds count from the start of the run
to the end of that evaluation, evaluations included. Each seed runs in this process, one after another.

    python benchmarks/time_to_threshold.py                     # zoo presets, 5 seeds
    python benchmarks/time_to_threshold.py --fast --seeds 3 --only sac
    python benchmarks/time_to_threshold.py --only ppo --set n_epochs=10

Thresholds: CartPole 195 (CartPole-v0's, what Tianshou's README reports) and 475 (CartPole-v1's);
Pendulum -250 (Tianshou's) and -200 (the preset's "solved").
"""

from __future__ import annotations

import argparse
import ast
import statistics
import time

import torch

import workbench as wb

TASKS = {
    "ppo": ("CartPole-v1", (195.0, 475.0), 2000, 100_000),
    "dqn": ("CartPole-v1", (195.0, 475.0), 2000, 100_000),
    "sac": ("Pendulum-v1", (-250.0, -200.0), 1000, 20_000),
}


def one(algo: str, seed: int, fast: bool, overrides: dict) -> dict[float, tuple[int, float, float]]:
    """{threshold: (env steps, wall s, cpu s)} at the first evaluation reaching it."""
    env_id, thresholds, every, budget = TASKS[algo]
    kwargs = {"fast": True} if fast else {}
    agent, env = wb.preset(env_id, algo, seed=seed, **kwargs, **overrides)
    session = wb.Session(agent, env, seed=seed, eval_every=every, eval_episodes=5)
    reached: dict[float, tuple[int, float, float]] = {}
    w0, c0 = time.perf_counter(), time.process_time()

    def on_eval(score: float) -> None:  # runs in the training thread, as each evaluation is recorded
        for th in thresholds:
            if th not in reached and score >= th:
                reached[th] = (session.steps, time.perf_counter() - w0, time.process_time() - c0)
        if len(reached) == len(thresholds):
            session.stop()  # from the training thread: the run ends at the next step boundary

    session.signals.signal("eval_reward").subscribe(on_eval)
    session.run(steps=budget)
    return reached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="ppo,dqn,sac")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--fast", action="store_true", help="the fast presets")
    parser.add_argument("--set", nargs="*", default=[], help="overrides key=value")
    args = parser.parse_args()
    torch.set_num_threads(1)
    overrides = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    rows = []
    for algo in args.only.split(","):
        env_id, thresholds = TASKS[algo][:2]
        runs = []
        for seed in range(args.seeds):
            reached = one(algo, seed, args.fast, overrides)
            runs.append(reached)
            shown = "  ".join(
                f"{th:g}: " + (f"{r[0]} steps {r[1]:.1f} s (cpu {r[2]:.1f})" if r else "not reached")
                for th in thresholds
                for r in [reached.get(th)]
            )
            print(f"  {algo} seed {seed}: {shown}", flush=True)
        for th in thresholds:
            hits = [r[th] for r in runs if th in r]
            if hits:
                rows.append(
                    (
                        algo,
                        env_id,
                        th,
                        len(hits),
                        len(runs),
                        statistics.mean(h[0] for h in hits),
                        statistics.mean(h[1] for h in hits),
                        statistics.mean(h[2] for h in hits),
                    )
                )
            else:
                rows.append((algo, env_id, th, 0, len(runs), float("nan"), float("nan"), float("nan")))
    print(f"\n{'agent':5s} {'env':12s} {'threshold':>9s} {'reached':>7s} {'steps':>8s} {'wall s':>7s} {'cpu s':>7s}")
    for algo, env_id, th, n, total, steps, wall, cpu in rows:
        print(f"{algo:5s} {env_id:12s} {th:9g} {n:>3d}/{total:<3d} {steps:8.0f} {wall:7.1f} {cpu:7.1f}")
    print("\nmeans over the seeds that reached the threshold within the budget")


if __name__ == "__main__":
    main()
