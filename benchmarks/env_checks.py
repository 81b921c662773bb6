"""What checking the env's returns costs: steps per second on CartPole-v1, with and without the checks.

Three workloads, each run several times, alternating between two source trees so machine noise hits
both alike (one tree checks what the env returns, the other is the code before the checks):

* ``acting``: DQN before its first update (``learning_starts`` beyond the budget): the loop,
  acting and the env alone, where the checks weigh the most;
* ``dqn``: DQN with its zoo defaults (1 env, 128 gradient steps every 256 env steps), for half the steps;
* ``ppo``: PPO with its zoo defaults (8 envs), training as usual.

    python benchmarks/env_checks.py --before /tmp/before     # a tree holding the old workbench/
    python benchmarks/env_checks.py --repeats 7 --steps 20000

Prints the median steps per CPU second of each tree and workload, and the relative cost. Not part of the test
suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WORKLOADS = ("acting", "dqn", "ppo")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(workload: str, steps: int) -> float:
    """Steps per CPU second of one seeded run of ``workload`` (in this process's workbench).

    CPU time, not wall time: on a shared machine the wall clock also counts the time other
    processes held the cores, which swamps a difference of a few percent."""
    import workbench as wb

    if workload == "acting":
        agent = wb.DQN("CartPole-v1", learning_starts=10 * steps, buffer_size=steps + 10)
    elif workload == "dqn":
        agent = wb.DQN("CartPole-v1")
        steps //= 2  # its updates take most of the time
    else:
        agent = wb.PPO("CartPole-v1")
    session = wb.Session(agent, "CartPole-v1", seed=0)
    start = time.process_time()
    session.run(steps=steps)
    return session.steps / (time.process_time() - start)


def main() -> None:
    """Alternate runs of both trees in fresh processes; print medians."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=False, help="a folder holding the workbench/ package to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one workload here
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.steps)))
        return
    trees = {"checked": HERE}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    results: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.repeats):
        for workload in WORKLOADS:
            order = list(trees.items())
            for label, tree in order if repeat % 2 == 0 else order[::-1]:  # alternate who goes first
                env = {**os.environ, "PYTHONPATH": tree}
                out = subprocess.run(
                    [sys.executable, __file__, "--one", workload, "--steps", str(args.steps)],
                    env=env, capture_output=True, text=True, check=True, cwd="/",
                )
                results.setdefault((workload, label), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    for workload in WORKLOADS:
        medians = {label: statistics.median(results[(workload, label)]) for label in trees}
        line = ", ".join(f"{label} {m:,.0f} steps/CPU-s" for label, m in medians.items())
        if "before" in medians:
            line += f"; cost {100 * (1 - medians['checked'] / medians['before']):+.1f}%"
        print(f"{workload}: {line} (median of {args.repeats})")


if __name__ == "__main__":
    main()
