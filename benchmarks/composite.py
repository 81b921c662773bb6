"""Composite actions benchmark (issue 53): PPO on the hybrid task, and a composite space against the MultiDiscrete
it spells out.

``run`` trains

1. PPO on ``MoveOrShoot-v0`` (``workbench.envs.hybrid``: move with a direction or shoot with a power, the hybrid
   ``Tuple(Discrete(2), Dict(move, shoot))``, optimal return 0.95) over ``--seeds`` seeds, each then playing
   ``--episodes`` greedy episodes on a fresh env;
2. PPO on ``MaskedTarget(dims=3)`` (a ``MultiDiscrete([4, 4, 4])`` task: pick the shown target in every dimension,
   10 a 10-step episode) and on the same env with its action space as a ``Dict`` of three ``Discrete`` leaves
   (``workbench.envs.testing.DictOfDiscretes``), with the same seeds, alternating the two so that a load on the
   machine falls on both alike;

and writes the runs to ``benchmarks/results/composite-hybrid.json`` and ``composite-equivalence.json``
(``--only`` runs one part: the two can run side by side). ``render`` writes the table from those files into
``docs/actions.md`` (between its ``generated: composite`` markers). One torch thread per run.

    python benchmarks/composite.py run --seeds 5
    python benchmarks/composite.py run --seeds 5 --only hybrid      # and --only equivalence, side by side
    python benchmarks/composite.py render

Not part of the test suite (``tests/test_composite_actions.py`` checks the equivalence step by step).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
RESULTS = {part: ROOT / "benchmarks" / "results" / f"composite-{part}.json" for part in ("hybrid", "equivalence")}
DOC = ROOT / "docs" / "actions.md"
BEGIN, END = "<!-- generated: composite begin -->", "<!-- generated: composite end -->"

HYBRID = dict(n_envs=8, n_steps=64, batch_size=128, n_epochs=10, gamma=0.99, gae_lambda=0.95, learning_rate=3e-4)
"""PPO's settings on MoveOrShoot-v0."""
TARGET = dict(n_envs=4, n_steps=32, batch_size=64, n_epochs=10)
"""PPO's settings on the MultiDiscrete target task and its Dict twin (tests/test_multidiscrete.py's)."""


def _target(as_dict: bool) -> Any:
    from workbench.envs.testing import DictOfDiscretes, MaskedTarget

    def make() -> Any:
        env = MaskedTarget(n_actions=4, n_invalid=0, dims=3, mask_in=None)
        return DictOfDiscretes(env) if as_dict else env

    return make


def run_one(task: str, seed: int, steps: int, episodes: int) -> dict[str, Any]:
    """Train and evaluate one run of ``task`` ("hybrid", "multidiscrete" or "dict")."""
    import gymnasium as gym
    import numpy as np

    import workbench as wb
    import workbench.envs  # registers MoveOrShoot-v0

    if task == "hybrid":
        make: Any = "MoveOrShoot-v0"
        settings = HYBRID
    else:
        make = _target(task == "dict")
        settings = TARGET
    agent = wb.PPO(make, seed=seed, **settings)
    session = wb.Session(agent, make, seed=seed)
    wall, cpu = time.perf_counter(), time.process_time()
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    env = gym.make(make) if isinstance(make, str) else make()
    returns = agent.play(env, episodes=episodes, seed=10_000 + seed)
    return {
        "task": task,
        "seed": seed,
        "steps": int(session.steps),
        "return": float(np.mean(returns)),
        "train_return_last_100": float(session.signals["episode_reward"].mean(last=100)),
        "wall_s": wall,
        "cpu_s": cpu,
        "settings": settings,
    }


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    import numpy

    for part in ("hybrid", "equivalence") if args.only is None else (args.only,):
        rows = []
        for seed in range(args.seeds):
            if part == "hybrid":
                rows.append(run_one("hybrid", seed, args.hybrid_steps, args.episodes))
                print(f"  hybrid seed {seed}: {rows[-1]['return']:.3f} ({rows[-1]['wall_s']:.1f} s)", flush=True)
                continue
            for task in ("multidiscrete", "dict") if seed % 2 == 0 else ("dict", "multidiscrete"):
                rows.append(run_one(task, seed, args.target_steps, args.episodes))
                print(f"  {task} seed {seed}: {rows[-1]['return']:.3f} ({rows[-1]['wall_s']:.1f} s)", flush=True)
        out = {
            "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
            "versions": {"torch": torch.__version__, "numpy": numpy.__version__},
            "note": args.note,
            "runs": rows,
        }
        RESULTS[part].write_text(json.dumps(out, indent=1) + "\n")
        print(table(out))


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(data: dict[str, Any]) -> str:
    """The Markdown table of the runs: returns per task (mean ± sd over seeds, every seed), times, and the
    Dict space's speed against the MultiDiscrete's (median over seeds of the per-seed ratio of wall seconds)."""
    runs = data["runs"]
    lines = [
        "| task | action space | seeds | steps | greedy return (mean ± sd) | per seed | wall s (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    spaces = {
        "hybrid": "`Tuple(Discrete(2), Dict(move: Box, shoot: Box))`",
        "multidiscrete": "`MultiDiscrete([4, 4, 4])`",
        "dict": "`Dict(d0, d1, d2: Discrete(4))`",
    }
    names = {"hybrid": "MoveOrShoot-v0 (optimum 0.95)", "multidiscrete": "MaskedTarget, 3 dims (optimum 10)"}
    names["dict"] = names["multidiscrete"]
    for task in ("hybrid", "multidiscrete", "dict"):
        mine = [r for r in runs if r["task"] == task]
        if not mine:
            continue
        returns = [r["return"] for r in mine]
        per_seed = ", ".join(f"{v:.2f}" for v in returns)
        lines.append(
            f"| {names[task]} | {spaces[task]} | {len(mine)} | {mine[0]['steps']:,} | {_mean_sd(returns)} | {per_seed} "
            f"| {statistics.median(r['wall_s'] for r in mine):.1f} |"
        )
    pairs = [
        (a, b)
        for a in runs
        if a["task"] == "dict"
        for b in runs
        if b["task"] == "multidiscrete" and b["seed"] == a["seed"]
    ]
    if pairs:
        ratio = statistics.median(a["wall_s"] / b["wall_s"] for a, b in pairs)
        cpu = statistics.median(a["cpu_s"] / b["cpu_s"] for a, b in pairs)
        same = sum(a["return"] == b["return"] for a, b in pairs)
        lines += [
            "",
            f"Dict against MultiDiscrete, same seeds: median time ratio {ratio:.3f} (wall), {cpu:.3f} (CPU); "
            f"{same} of {len(pairs)} seeds with the same greedy return.",
        ]
    if data.get("note"):
        lines += ["", f"Measured on {data['machine']['cpus']} CPU(s), {data['note']}."]
    return "\n".join(lines)


def load() -> dict[str, Any]:
    """Both parts' stored runs as one (the first part's machine and note)."""
    parts = [json.loads(path.read_text()) for path in RESULTS.values() if path.exists()]
    if not parts:
        raise SystemExit("no results: run `python benchmarks/composite.py run` first")
    return {**parts[0], "runs": [r for part in parts for r in part["runs"]]}


def render(_: argparse.Namespace) -> None:
    data = load()
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + table(data) + "\n" + text[end:])
    print(f"wrote the table into {DOC.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train every run, write benchmarks/results/composite.json")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--hybrid-steps", type=int, default=80_000)
    p.add_argument("--target-steps", type=int, default=3_000)
    p.add_argument("--episodes", type=int, default=100, help="greedy evaluation episodes per run")
    p.add_argument("--note", default="", help="the machine's load, for the table")
    p.add_argument("--only", choices=["hybrid", "equivalence"], default=None, help="run one part")
    p.set_defaults(func=run)
    r = sub.add_parser("render", help="write the table into docs/actions.md")
    r.set_defaults(func=render)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
