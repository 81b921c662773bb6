"""What checking the env's returns costs: steps per second on CartPole-v1, with and without the checks.

Three workloads, each run several times, alternating between two source trees so machine noise hits
both alike (one tree checks what the env returns, the other is the code before the checks):

* ``acting``: DQN before its first update (``learning_starts`` beyond the budget): the loop,
  acting and the env alone, where the checks weigh the most;
* ``dqn``: DQN with its zoo defaults (1 env, 128 gradient steps every 256 env steps), for half the steps;
* ``ppo``: PPO with its zoo defaults (8 envs), training as usual.

    python benchmarks/env_checks.py --before /tmp/before     # a tree holding the old workbench/
    python benchmarks/env_checks.py --repeats 7 --steps 20000
    python benchmarks/env_checks.py --before /tmp/before --micro   # the checks alone, timed in one process

``--micro`` times what the checks add to one loop step, A/B interleaved in one process, which a
busy machine disturbs far less than whole runs: ``VecEnv.step`` of the old and the new
``envs/core.py`` (loaded by path, as a worker loads it) on CartPole with 1 and 8 envs, and the loop's
batch check (``check_env_batch``); it prints them as a share of a loop step of the ``acting`` run.

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


def micro(before: str, repeats: int) -> None:
    """Time the checks alone (see the module docstring) and print their share of a loop step."""
    import importlib.util

    import gymnasium as gym
    import numpy as np

    from workbench.validation import check_env_batch

    def load(path: str, name: str):  # type: ignore[no-untyped-def]
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    old = load(os.path.join(before, "workbench", "envs", "core.py"), "_envs_before")
    new = load(os.path.join(HERE, "workbench", "envs", "core.py"), "_envs_checked")

    def per_call_us(fn, number: int = 2000) -> float:  # type: ignore[no-untyped-def]
        start = time.process_time()
        for _ in range(number):
            fn()
        return (time.process_time() - start) / number * 1e6

    loop_step_us = 1e6 / measure("acting", 10_000)
    print(f"acting loop step (1 env, no learning): {loop_step_us:.1f} us of CPU")
    for n in (1, 8):
        vecs = {}
        for label, module in (("before", old), ("checked", new)):
            vec = module.VecEnv([gym.make("CartPole-v1") for _ in range(n)], seed=0)
            vec.reset()
            vecs[label] = vec
        actions = np.zeros(n, dtype=np.int64)
        times: dict[str, list[float]] = {"before": [], "checked": []}
        for _ in range(repeats):
            for label, vec in vecs.items():
                times[label].append(per_call_us(lambda vec=vec, actions=actions: vec.step(actions)))
        obs, rewards, flags = np.zeros((n, 4), np.float32), np.ones(n, np.float32), np.zeros(n, bool)

        def check(obs=obs, rewards=rewards, flags=flags) -> None:  # type: ignore[no-untyped-def]
            check_env_batch(100, obs, rewards, obs, flags, flags)

        batch = statistics.median(per_call_us(check, 20_000) for _ in range(repeats))
        b, c = statistics.median(times["before"]), statistics.median(times["checked"])
        added = c - b + batch
        share = f" = {100 * added / loop_step_us:.1f}% of an acting loop step" if n == 1 else f" for {n} env steps"
        print(
            f"{n} env(s): VecEnv.step before {b:.2f} us, checked {c:.2f} us; check_env_batch {batch:.2f} us; "
            f"added per loop step {added:.2f} us{share}"
        )


def main() -> None:
    """Alternate runs of both trees in fresh processes; print medians."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=False, help="a folder holding the workbench/ package to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one workload here
    parser.add_argument("--micro", action="store_true", help="time the checks alone, in one process")
    args = parser.parse_args()
    if args.micro:
        if not args.before:
            parser.error("--micro needs --before")
        micro(os.path.abspath(args.before), args.repeats)
        return
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
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd="/",
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
