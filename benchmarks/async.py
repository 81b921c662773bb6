"""Synchronous PPO against APPO and IMPALA on the same task, budget, workers and machine, in one run (issue 51).

Two tasks, each on ``backend="local"`` with 2 worker processes stepping 8 envs:

* **slow**: CartPole-v1 whose every step sleeps 1 ms first (the application's case: a simulator, a
  compression run per step). Env steps per second, and the time and steps to a score of 475 (the mean of the
  last 20 episodes), within the budget.
* **minatar**: MinAtar Breakout, a CPU-bound case: the env costs microseconds a step and the learner's CNN
  update is the work. Every agent has the MinAtar PPO preset's rollout and update (8 envs x 128 steps,
  4 epochs of minibatches of 256, the small CNN). Env steps per second (the budget is far too small for a score).

PPO alternates (its envs wait while it updates); APPO and IMPALA step their envs in a sampler thread while
the learner updates (``docs/async.md``). Goals on 2 cores: APPO at least 1.6x PPO's env steps per second on the
slow env and 1.3x on MinAtar, with time to score no worse. The machine is shared: each result stores the load
average seen before and after its run.

    python benchmarks/async.py                       # runs everything, writes benchmarks/results/async.json
    python benchmarks/async.py --render              # only rewrites the table in docs/parallel.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

import workbench as wb

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RESULTS = Path(__file__).parent / "results" / "async.json"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "parallel.md"
BEGIN, END = "<!-- generated: async table begin -->", "<!-- generated: async table end -->"
WINDOW = 20  # episodes in the mean that must reach the score


class SleepyCartPole(gym.Wrapper):
    """CartPole-v1 whose every step first sleeps ``delay`` seconds."""

    def __init__(self, delay: float = 0.001) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.delay = delay

    def step(self, action):  # type: ignore[no-untyped-def]
        time.sleep(self.delay)
        return self.env.step(action)


def slow_env() -> gym.Env:
    return SleepyCartPole()


MINATAR = {
    "n_envs": 8,
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 4,
    "learning_rate": 2.5e-4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.01,
    "encoder": "small",
    "net_arch": (),
}

TASKS: dict[str, dict[str, Any]] = {
    "slow": {
        "name": "CartPole-v1, 1 ms sleep a step",
        "env": slow_env,
        "steps": 60_000,
        "score": 475.0,
        "agents": {"PPO": {}, "APPO": {}, "IMPALA": {}},
    },
    "minatar": {
        "name": "MinAtar/Breakout-v1",
        "env": "MinAtar/Breakout-v1",
        "steps": 30_000,
        "score": None,
        "agents": {
            "PPO": dict(MINATAR, clip_range=0.1),
            "APPO": dict(MINATAR, clip_range=0.1),
            "IMPALA": {k: v for k, v in MINATAR.items() if k not in ("batch_size", "n_epochs")},
        },
    },
}


def time_to_score(signal: Any, score: float | None) -> tuple[float | None, int | None]:
    """Seconds (run time) and env steps at which the mean of the last WINDOW episodes first reached ``score``."""
    if score is None or signal is None:
        return None, None
    values, steps, times = signal.values, signal.steps, signal.times
    for i in range(WINDOW - 1, len(values)):
        if np.mean(values[i - WINDOW + 1 : i + 1]) >= score:
            return float(times[i]), int(steps[i])
    return None, None


def run(task: dict[str, Any], algo: str, hyper: dict[str, Any], seed: int) -> dict[str, Any]:
    cls = getattr(wb, algo)
    agent = cls(task["env"], seed=seed, **hyper)
    session = wb.Session(agent, task["env"], seed=seed, num_workers=2, backend="local")
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    session.run(steps=task["steps"])
    wall = time.perf_counter() - start
    signals = session.signals
    sps = signals["steps_per_second"].values
    seconds, steps = time_to_score(signals["episode_reward"] if "episode_reward" in signals else None, task["score"])
    row = {
        "algorithm": algo,
        "seed": seed,
        "steps": session.steps,
        "wall_s": wall,
        "steps_per_second": float(np.median(sps[1:] if len(sps) > 2 else sps)),
        "time_to_score_s": seconds,
        "steps_to_score": steps,
        "last_reward": signals["episode_reward"].mean(last=WINDOW) if "episode_reward" in signals else None,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    for name in ("learner_idle_fraction", "policy_lag"):
        if name in signals:
            row[name] = float(np.median(signals[name].values))
    if "batches_dropped" in signals:
        row["batches_dropped"] = signals["batches_dropped"].last
    print(json.dumps(row), flush=True)
    return row


def render() -> None:
    """Write the stored results' table into docs/parallel.md, between its markers."""
    data = json.loads(RESULTS.read_text())
    lines = [
        f"`python benchmarks/async.py` ({data['date']}, {data['cores']} cores shared with other jobs: load average "
        f"{data['load_min']:.1f} to {data['load_max']:.1f} during the runs; 2 local workers, 8 envs, seed "
        f"{data['seed']}; ratios are against PPO in the same run):",
        "",
        "| task | agent | env steps/s | vs PPO | time to score | steps to score | learner idle | median policy lag |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for task in data["tasks"].values():
        rows = task["rows"]
        ppo = next(r for r in rows if r["algorithm"] == "PPO")["steps_per_second"]
        score = f" ({task['score']:g})" if task["score"] is not None else ""
        for r in rows:
            tts = "not reached" if r["time_to_score_s"] is None else f"{r['time_to_score_s']:.0f} s"
            sts = "" if r["steps_to_score"] is None else f"{r['steps_to_score']:,}"
            if task["score"] is None:
                tts = "(no score at this budget)"
            idle = f"{r['learner_idle_fraction']:.2f}" if "learner_idle_fraction" in r else ""
            lag = f"{r['policy_lag']:g}" if "policy_lag" in r else ""
            lines.append(
                f"| {task['name']}{score}, {task['steps'] // 1000}k steps | {r['algorithm']} | "
                f"{r['steps_per_second']:,.0f} | {r['steps_per_second'] / ppo:.2f}x | {tts} | {sts} | {idle} | {lag} |"
            )
    text = DOCS.read_text()
    table = "\n".join(lines)
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + BEGIN + "\n" + table + "\n" + END + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + BEGIN + "\n" + table + "\n" + END + "\n"
    DOCS.write_text(text)
    print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--render", action="store_true", help="only rewrite the docs table from stored results")
    args = parser.parse_args()
    if not args.render:
        loads: list[float] = []
        tasks: dict[str, Any] = {}
        for key in args.tasks:
            task = TASKS[key]
            rows = [run(task, algo, hyper, args.seed) for algo, hyper in task["agents"].items()]
            loads += [x for r in rows for x in (r["load_before"], r["load_after"])]
            tasks[key] = {"name": task["name"], "steps": task["steps"], "score": task["score"], "rows": rows}
        result = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cores": os.cpu_count(),
            "seed": args.seed,
            "load_min": min(loads),
            "load_max": max(loads),
            "tasks": tasks,
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    render()


if __name__ == "__main__":
    main()
