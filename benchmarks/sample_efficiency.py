"""Sample efficiency: every tuned preset for the zoo's step budget, over several seeds.

For each (task, agent) preset, trains ``--seeds`` runs of ``wb.preset(task, agent, seed=s)`` for the
zoo's budget, evaluates the final policy on 10 deterministic episodes, and prints a table: task,
agent, budget, mean ± std of the final evaluation over seeds, seeds solved (eval >= the target),
mean wall time per run, and the score of the zoo's published agent (rl-baselines3-zoo benchmark.md).

    python benchmarks/sample_efficiency.py                          # the issue's 8 presets, 5 seeds
    python benchmarks/sample_efficiency.py --only CartPole --seeds 2
    python benchmarks/sample_efficiency.py --only Pendulum-v1:sac Pendulum-v1:td3 --seeds 1
    python benchmarks/sample_efficiency.py --all --list             # every preset, without running
    python benchmarks/sample_efficiency.py --only CartPole-v1:dqn --seeds 10 --set double_q=false dueling=true

``--only`` takes task or agent names, or ``task:agent`` pairs (any substring matches); ``--set``
overrides single hyperparameters of every selected preset (JSON values: numbers, true/false, lists).
The full run is long (hours on 2 cores: SAC, TD3 and DDPG make one gradient step per env step). Not part of the test
suite: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch

import workbench as wb
from workbench.cli import parse_hyperparameters

# The targets of issue 4: the zoo's budget, and the final evaluation counted as solved.
DEFAULT = [
    ("CartPole-v1", "ppo"),
    ("CartPole-v1", "dqn"),
    ("CartPole-v1", "a2c"),
    ("Acrobot-v1", "dqn"),
    ("Pendulum-v1", "sac"),
    ("Pendulum-v1", "td3"),
    ("Pendulum-v1", "ddpg"),
    ("MountainCarContinuous-v0", "sac"),
]


def run_one(
    env_id: str, agent_name: str, seed: int, eval_episodes: int, overrides: dict | None = None
) -> tuple[float, float]:
    """Train one preset run; return (final evaluation mean, wall seconds of training)."""
    tuned = wb.preset(env_id, agent_name, seed=seed, **(overrides or {}))
    agent, env = tuned
    session = wb.Session(agent, env, seed=seed)
    start = time.perf_counter()
    session.run(steps=tuned.steps)
    wall = time.perf_counter() - start
    if session.status != "finished":
        raise RuntimeError(f"{env_id} {agent_name} seed {seed} ended {session.status}: {session.error}")
    returns = agent.play(env, episodes=eval_episodes, seed=10_000 + seed)
    return float(np.mean(returns)), wall


def select(pairs: list[tuple[str, str]], only: list[str] | None) -> list[tuple[str, str]]:
    """The pairs matching any ``--only`` word (``task``, ``agent`` or ``task:agent``, substrings)."""
    if not only:
        return pairs
    chosen = []
    for env_id, agent in pairs:
        for word in only:
            task_part, _, agent_part = word.partition(":")
            if ":" in word:
                hit = task_part.lower() in env_id.lower() and agent_part.lower() == agent
            else:
                hit = word.lower() in env_id.lower() or word.lower() == agent
            if hit:
                chosen.append((env_id, agent))
                break
    return chosen


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="WORD", help="tasks, agents or task:agent pairs to run")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per preset (default 5: 0..4)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic evaluation episodes (default 10)")
    parser.add_argument("--all", action="store_true", help="every preset in wb.PRESETS, not only the issue's 8")
    parser.add_argument("--list", action="store_true", help="list the selected presets and exit")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--set", nargs="+", metavar="NAME=VALUE", help="override hyperparameters of the presets")
    args = parser.parse_args(argv)
    overrides = parse_hyperparameters(args.set or [])

    pairs = select(sorted(wb.PRESETS) if args.all else DEFAULT, args.only)
    if not pairs:
        parser.error(f"--only {' '.join(args.only)} matches no preset; see --all --list")
    if args.list:
        for env_id, agent in pairs:
            spec = wb.PRESETS[(env_id, agent)]
            print(f"{env_id:26s} {agent:5s} {spec.steps:>8,d} steps  solved >= {spec.solved}  zoo {spec.zoo_score}")
        return 0
    torch.set_num_threads(1)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows = []
    for env_id, agent in pairs:
        spec = wb.PRESETS[(env_id, agent)]
        evals, walls = [], []
        for seed in seeds:
            score, wall = run_one(env_id, agent, seed, args.eval_episodes, overrides)
            evals.append(score)
            walls.append(wall)
            print(f"  {env_id} {agent} seed {seed}: eval {score:.1f} in {wall:.1f} s", file=sys.stderr, flush=True)
        solved = sum(e >= spec.solved for e in evals) if spec.solved is not None else 0
        rows.append(
            {
                "task": env_id,
                "agent": agent,
                "budget": spec.steps,
                "seeds": seeds,
                "evals": evals,
                "mean": statistics.fmean(evals),
                "std": statistics.pstdev(evals),
                "solved": solved,
                "target": spec.solved,
                "wall_mean": statistics.fmean(walls),
                "zoo": spec.zoo_score,
            }
        )

    header = "| task | agent | budget | final eval (mean ± std) | seeds solved | target | wall / run | zoo published |"
    print(header)
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['task']} | {r['agent'].upper()} | {r['budget'] // 1000}k | {r['mean']:.1f} ± {r['std']:.1f} "
            f"| {r['solved']}/{len(r['seeds'])} | ≥ {fmt(r['target'])} | {r['wall_mean']:.0f} s | {fmt(r['zoo'])} |"
        )
    if overrides:
        print(f"\noverrides on top of the presets: {overrides}")
    print(f"\nseeds {seeds}; eval = {args.eval_episodes} deterministic episodes after the full budget; "
          f"torch {torch.__version__}, 1 thread")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
