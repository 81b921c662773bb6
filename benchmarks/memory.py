"""Memory benchmark (issue 55): RecurrentPPO with a GTrXL, an LSTM (and a GRU) against PPO without memory.

Tasks: CartPoleNoVel-v1 (CartPole without its velocities), and where the ``popgym`` package is
installed its RepeatPrevious, CountRecall and MineSweeper at Easy difficulty (Morad et al. 2023).
Every method trains with the same settings (the CartPoleNoVel preset's: the zoo's ppo_lstm, observation
and reward normalization) for the same number of env steps, then plays ``--episodes`` greedy episodes.
Reported per task and method: mean return over seeds with a 95% t-interval (none for one seed),
wall and CPU seconds, env steps per second and the cost per env step relative to the LSTM.

    python benchmarks/memory.py --steps 100000 --seeds 3            # the issue's protocol
    python benchmarks/memory.py --steps 10000 --seeds 1 --tasks CartPoleNoVel-v1

One thread per process (``torch.set_num_threads(1)``), so CPU time compares the memories' cost.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METHODS: dict[str, dict[str, Any]] = {
    "ppo": {},
    "lstm": {"memory": "lstm"},
    "gru": {"memory": "gru"},
    "gtrxl": {"memory": "gtrxl"},
}
POPGYM = {
    "RepeatPreviousEasy": ("popgym.envs.repeat_previous", "RepeatPreviousEasy"),
    "CountRecallEasy": ("popgym.envs.count_recall", "CountRecallEasy"),
    "MineSweeperEasy": ("popgym.envs.minesweeper", "MineSweeperEasy"),
}
SETTINGS = {"normalize_observations": True, "normalize_rewards": True}


def env_factory(task: str) -> Callable[[], Any] | str:
    """The env of ``task``: a registered id, or a POPGym class (imported only when asked for)."""
    if task not in POPGYM:
        return task
    import importlib

    module, name = POPGYM[task]
    return getattr(importlib.import_module(module), name)


def interval(values: list[float]) -> float:
    """Half-width of the 95% t-interval of the mean (nan for one value)."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78}.get(n, 2.26)
    return t * sd / math.sqrt(n)


def run(task: str, method: str, seed: int, steps: int, episodes: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Train one method on one task for ``steps`` env steps; its greedy return and its cost."""
    import numpy as np

    import workbench as wb

    env = env_factory(task)
    options = {**SETTINGS, **extra} if method != "ppo" else dict(SETTINGS)
    agent: wb.PPO | wb.RecurrentPPO
    if method == "ppo":
        agent = wb.PPO(env, seed=seed, **options)
    else:
        agent = wb.RecurrentPPO(env, seed=seed, **METHODS[method], **options)
    wall, cpu = time.perf_counter(), time.process_time()
    session = wb.Session(agent, env, seed=seed)
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if session.status != "finished":
        raise RuntimeError(f"{method} on {task}: {session.status} ({session.error})")
    returns = agent.play(env, episodes=episodes, seed=10_000 + seed)
    return {
        "task": task,
        "method": method,
        "seed": seed,
        "steps": steps,
        "return": float(np.mean(returns)),
        "wall_s": wall,
        "cpu_s": cpu,
        "steps_per_s": steps / wall,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """One line per task and method: mean return (95% interval), times, speed, cost vs the LSTM."""
    lines = [
        f"{'task':20} {'method':6} {'return':>8} {'± 95%':>7} {'wall s':>7} {'cpu s':>7} {'steps/s':>8} "
        f"{'cpu/step vs lstm':>16}"
    ]
    for task in dict.fromkeys(r["task"] for r in rows):
        of_task = [r for r in rows if r["task"] == task]
        lstm = [r["cpu_s"] / r["steps"] for r in of_task if r["method"] == "lstm"]
        for method in dict.fromkeys(r["method"] for r in of_task):
            mine = [r for r in of_task if r["method"] == method]
            returns = [r["return"] for r in mine]
            cpu_step = sum(r["cpu_s"] / r["steps"] for r in mine) / len(mine)
            ratio = f"{cpu_step / (sum(lstm) / len(lstm)):.2f}x" if lstm else "-"
            lines.append(
                f"{task:20} {method:6} {sum(returns) / len(returns):8.3f} {interval(returns):7.3f} "
                f"{sum(r['wall_s'] for r in mine) / len(mine):7.1f} {sum(r['cpu_s'] for r in mine) / len(mine):7.1f} "
                f"{sum(r['steps_per_s'] for r in mine) / len(mine):8.0f} {ratio:>16}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=20, help="greedy evaluation episodes per run")
    parser.add_argument("--tasks", nargs="*", default=None, help="default: CartPoleNoVel-v1 and POPGym's if installed")
    parser.add_argument("--methods", nargs="*", default=["ppo", "lstm", "gtrxl"], choices=sorted(METHODS))
    parser.add_argument("--memory-length", type=int, default=32, help="the GTrXL's window")
    parser.add_argument("--out", type=Path, default=None, help="write the runs as JSON here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    tasks = args.tasks
    if tasks is None:
        tasks = ["CartPoleNoVel-v1"]
        try:
            import popgym  # noqa: F401

            tasks += list(POPGYM)
        except ImportError:
            print("popgym is not installed: CartPoleNoVel-v1 only (pip install popgym)")
    rows = []
    for task in tasks:
        for method in args.methods:
            extra = {"memory_length": args.memory_length} if method == "gtrxl" else {}
            for seed in range(args.seeds):
                rows.append(run(task, method, seed, args.steps, args.episodes, extra))
                r = rows[-1]
                print(f"  {task} {method} seed {seed}: return {r['return']:.3f}, {r['wall_s']:.1f} s", flush=True)
    print(table(rows))
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
