"""Issue-19 comparisons with every run in its own process: ours and SB3 / sb3-contrib, interleaved.

Each run (one agent, one seed) is a child process (``sample_efficiency.py --single``, 1 torch
thread, under ``nice``); its CPU time is the child's user + system time from its resource usage
(``os.wait4``, the per-child form of ``resource.getrusage(RUSAGE_CHILDREN)``), and its wall time is
measured around it. Runs are interleaved (ours seed k, SB3 seed k, ...) and at most ``--jobs`` run
at once. One JSON line per run goes to ``--out``.

    python benchmarks/separate_runs.py --task CartPole-v1 --agent qrdqn --seeds 10 --out qrdqn.jsonl
    python benchmarks/separate_runs.py --task CartPole-v1 --agent dqn --seeds 20 --out dqn.jsonl
    python benchmarks/separate_runs.py --task PendulumNoVel-v1 --agent recurrentppo --seeds 5 --out rppo.jsonl
    python benchmarks/separate_runs.py --task CartPole-v1 --agent dqn --seeds 20 --sides ours --out dqn.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()


def run_child(task: str, agent: str, side: str, seed: int, nice: int, eval_episodes: int) -> dict:
    """Run one training + evaluation in a child process; return its result with wall and CPU time."""
    cmd = [
        "nice",
        "-n",
        str(nice),
        sys.executable,
        os.path.join(HERE, "sample_efficiency.py"),
        "--single",
        task,
        agent,
        side,
        str(seed),
        "--eval-episodes",
        str(eval_episodes),
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    # os.wait4 gives this child's own rusage (RUSAGE_CHILDREN would mix concurrent children).
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read()
    proc.stdout.close()
    if status != 0:
        raise RuntimeError(f"{cmd} failed with status {status}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(
        task=task, agent=agent, side=side, seed=seed, process_wall=wall, process_cpu=usage.ru_utime + usage.ru_stime
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    parser.add_argument("--nice", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", required=True, help="JSON lines file (appended)")
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["ours", "sb3"],
        choices=["ours", "sb3"],
        help="which libraries to run (default both, interleaved)",
    )
    args = parser.parse_args(argv)
    runs = [(side, s) for s in range(args.first_seed, args.first_seed + args.seeds) for side in args.sides]

    def go(run: tuple[str, int]) -> None:
        side, seed = run
        r = run_child(args.task, args.agent, side, seed, args.nice, args.eval_episodes)
        with _lock, open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(r) + "\n")
        print(
            f"{args.task} {args.agent} {side} seed {seed}: eval {r['eval']:.1f}, "
            f"CPU {r['process_cpu']:.1f} s, wall {r['process_wall']:.1f} s",
            flush=True,
        )

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(go, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
