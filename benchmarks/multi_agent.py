"""Multi-agent PettingZoo tasks: shared-parameter PPO, IPPO and MAPPO, and skrl's IPPO/MAPPO when installed.

Tasks (mpe2): ``simple_spread_v3`` (3 agents, cooperative) and ``simple_adversary_v3`` (1 adversary
against 2 agents, mixed). Every method trains for the same number of agent-steps (one step of one
agent is one step) over several seeds in this same run; the table gives the mean team return of
10 deterministic evaluation episodes at the end (per seed, then mean) and the median wall time.

    pip install pettingzoo && pip install --no-deps mpe2   # mpe2 asks for pygame-ce; its MPE tasks step without it
    python benchmarks/multi_agent.py                       # 3 seeds, 60k agent-steps per run
    python benchmarks/multi_agent.py --steps 6000 --seeds 1 --tasks simple_spread_v3

skrl (``pip install skrl``) is compared when it imports; when it does not, its rows say so.
Not part of the test suite: speed and returns are measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import numpy as np

import workbench as wb

SETTINGS = {
    "n_steps": 128,
    "batch_size": 384,
    "n_epochs": 5,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "learning_rate": 7e-4,
    "ent_coef": 0.01,
}


def make(task: str):
    module = importlib.import_module(f"mpe2.{task}")
    kwargs = {"N": 3} if task == "simple_spread_v3" else {}
    return module.parallel_env(max_cycles=25, continuous_actions=False, **kwargs)


def run_workbench(method: str, task: str, seed: int, steps: int) -> tuple[float, float]:
    env = make(task)
    cls = {"shared PPO": wb.PPO, "IPPO": wb.IPPO, "MAPPO": wb.MAPPO}[method]
    extra = {}
    if method == "IPPO" and task == "simple_adversary_v3":
        extra["groups"] = {"adversary": ["adversary_0"], "agents": ["agent_0", "agent_1"]}
    agent = cls(env, seed=seed, **SETTINGS, **extra)
    session = wb.Session(agent, env, seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    returns = agent.play(make(task), episodes=10, seed=10_000 + seed)
    return wall, float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60_000, help="agent-steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", nargs="+", default=["simple_spread_v3", "simple_adversary_v3"])
    parser.add_argument("--methods", nargs="+", default=["shared PPO", "IPPO", "MAPPO"])
    args = parser.parse_args()
    try:
        import skrl  # noqa: F401

        print("skrl is installed, but its runner is not wired here yet: compare by hand (see docs/multi_agent.md)")
    except ImportError:
        print("skrl is not installed: no peer rows (pip install skrl to add them)")
    print(f"| task | method | return per seed | mean return | median wall (s) |  ({args.steps} agent-steps)")
    print("|---|---|---|---|---|")
    for task in args.tasks:
        for method in args.methods:
            if method == "shared PPO" and task == "simple_adversary_v3":
                # The adversary sees 8 numbers, the agents 10: one shared network needs one size (IPPO/MAPPO pad).
                print(f"| {task} | {method} | n/a: observation sizes differ | | |", flush=True)
                continue
            walls, rets = [], []
            for seed in range(args.seeds):
                wall, ret = run_workbench(method, task, seed, args.steps)
                walls.append(wall)
                rets.append(ret)
            per = ", ".join(f"{r:.1f}" for r in rets)
            print(
                f"| {task} | {method} | {per} | {statistics.mean(rets):.1f} | {statistics.median(walls):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
