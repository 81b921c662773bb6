"""Side by side on continuous control (issue 54): this project's TQC and CrossQ against sb3-contrib's TQC and
CrossQ at the same settings and budget, and this project's SAC beside them.

Each (library, algorithm, seed) trains in its own process, one after another, with one torch thread, then plays
``--eval-episodes`` deterministic episodes on env seeds 100, 101, ... The table gives the median over seeds of
the mean evaluation return (with the lowest and highest seed), the median wall and CPU seconds of training
(evaluation excluded), gradient steps per second, and for ours the ratio of wall times ours / sb3-contrib.

Settings, the same on both sides: TQC as rl-baselines3-zoo's tqc.yml for Pendulum (learning rate 1e-3, otherwise
sb3-contrib's defaults: 2 critics of 25 quantiles, 2 dropped per critic, 256-256); CrossQ as crossq.yml for
Pendulum (learning rate 1e-3, actor and critics 256-256, an actor step every 2 critic steps, Adam betas (0.5,
0.999); the first rows ran at sb3-contrib's defaults, critics 1024-1024 and delay 3, and the table names which);
SAC as sac.yml for Pendulum (learning rate 1e-3). The zoo's budget on Pendulum is 20k steps (issue 54 asks for 5
seeds there); a quick look:

    python benchmarks/continuous.py --steps 5000 --seeds 1
    python benchmarks/continuous.py --steps 20000 --seeds 5 --algos tqc crossq sac

Every run's result is stored as one JSON file under ``benchmarks/results/continuous/`` (with the commit it ran
at, the date, the settings and the machine's load); a run whose file exists is not run again, so an interrupted
benchmark resumes; ``--round NAME`` runs the same settings anew after a change of the code, stored apart and shown
as rows of their own. ``--render`` writes the table of docs/algorithms.md (between its ``continuous`` markers) from
those files alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "continuous"
DOC = ROOT / "docs" / "algorithms.md"
MARKERS = ("<!-- continuous:begin -->", "<!-- continuous:end -->")

EVAL_SEED = 100
SETTINGS = {
    "tqc": {"learning_rate": 1e-3},
    # crossq.yml's Pendulum row: 256-256 for the actor and the critics, an actor step every 2 critic steps.
    "crossq": {"learning_rate": 1e-3, "net_arch": (256, 256), "critic_net_arch": (256, 256), "policy_delay": 2},
    "sac": {"learning_rate": 1e-3},
}
"""This project's settings per agent (what the preset of the same row holds)."""
SB3_SETTINGS = {
    "tqc": {"learning_rate": 1e-3},
    "crossq": {"learning_rate": 1e-3, "policy_delay": 2, "policy_kwargs": {"net_arch": [256, 256]}},
}
"""The same settings in sb3-contrib's words (one ``net_arch`` list sizes its actor and critics alike)."""
SB3 = {"tqc": "TQC", "crossq": "CrossQ"}  # sb3-contrib's classes; SAC runs on our side only


def run_ours(algo: str, env_id: str, steps: int, seed: int, episodes: int) -> dict:
    """Train this project's agent; its evaluation, seconds and gradient steps."""
    import numpy as np

    import workbench as wb

    agent = wb.AGENTS[algo](env_id, seed=seed, **SETTINGS[algo])
    session = wb.Session(agent, env_id, seed=seed)
    wall, cpu = time.perf_counter(), time.process_time()
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    returns = [agent.play(env_id, episodes=1, seed=EVAL_SEED + i)[0] for i in range(episodes)]
    return {"return": float(np.mean(returns)), "wall": wall, "cpu": cpu, "updates": agent.num_updates}


def run_sb3(algo: str, env_id: str, steps: int, seed: int, episodes: int) -> dict:
    """Train sb3-contrib's agent at the same settings; the same evaluation."""
    import gymnasium as gym
    import numpy as np
    import sb3_contrib

    cls = getattr(sb3_contrib, SB3[algo])
    model = cls("MlpPolicy", env_id, seed=seed, verbose=0, **SB3_SETTINGS[algo])
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, term, trunc, _ = env.step(action)
            total += float(reward)
            done = term or trunc
        returns.append(total)
    return {"return": float(np.mean(returns)), "wall": wall, "cpu": cpu, "updates": int(model._n_updates)}


def child(args: argparse.Namespace) -> None:
    """One run in this process: one torch thread, the result as one JSON line."""
    import torch

    torch.set_num_threads(1)
    run = run_ours if args.side == "ours" else run_sb3
    print(json.dumps(run(args.algo, args.env, args.steps, args.seed, args.eval_episodes)))


def _settings(side: str, algo: str) -> dict:
    return json.loads(json.dumps((SETTINGS if side == "ours" else SB3_SETTINGS)[algo]))  # as stored: tuples as lists


def _result_path(side: str, algo: str, env_id: str, steps: int, seed: int, round_: str = "") -> Path:
    """Where a run's result goes; the settings' digest in the name, so that other settings run anew, and the
    round's name where there is one, so that the same settings run anew after a change of the code."""
    digest = hashlib.sha1(json.dumps(_settings(side, algo), sort_keys=True).encode()).hexdigest()[:8]
    tail = f"__{round_}" if round_ else ""
    return RESULTS / f"{env_id}__{algo}__{side}__{steps}__{digest}__seed{seed}{tail}.json"


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def spawn(side: str, algo: str, args: argparse.Namespace, seed: int) -> dict:
    """One run in its own process, or its stored result when it ran before; stored as it ends."""
    path = _result_path(side, algo, args.env, args.steps, seed, args.round)
    if path.exists():
        return json.loads(path.read_text())
    command = [sys.executable, __file__, "--child", side, "--algos", algo, "--env", args.env]
    command += ["--steps", str(args.steps), "--seed", str(seed), "--eval-episodes", str(args.eval_episodes)]
    load = os.getloadavg()[0]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{side} {algo} seed {seed} failed:\n{out.stderr[-3000:]}")
    result = {
        **json.loads(out.stdout.strip().splitlines()[-1]),
        "side": side,
        "algo": algo,
        "env": args.env,
        "steps": args.steps,
        "seed": seed,
        "round": args.round,
        "eval_episodes": args.eval_episodes,
        "settings": _settings(side, algo),
        "commit": _commit(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": round((load + os.getloadavg()[0]) / 2, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return result


def _label(result: dict) -> str:
    """The agent's name in the table, with the settings a row of CrossQ ran at (they changed once)."""
    algo = result["algo"]
    if algo != "crossq":
        return algo.upper()
    delay = result["settings"].get("policy_delay", 3)
    return "CrossQ (256-256, delay 2)" if delay == 2 else "CrossQ (critics 1024-1024, delay 3)"


def render(write: bool = True) -> str:
    """The side-by-side table from the stored results alone: per env, budget, algorithm and library, the median
    over seeds of the evaluation return (lowest and highest seed), wall and CPU seconds, gradient steps per
    second, ours / sb3-contrib's wall time, the commits and the load average the runs had."""
    groups: dict[tuple, list[dict]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        label = _label(r)
        if r.get("round"):
            label = f"{label}, round {r['round']}"
        groups.setdefault((r["env"], r["steps"], label, r["side"]), []).append(r)
    lines = [
        "| env | steps | agent | library | seeds | return: median (lowest..highest) | wall s | CPU s "
        "| gradient steps/s | wall ours / sb3 | commit | load |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for (env_id, steps, label, side), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        wall = statistics.median(r["wall"] for r in runs)
        other = groups.get((env_id, steps, label, "sb3")) if side == "ours" else None
        ratio = f"{wall / statistics.median(r['wall'] for r in other):.2f}x" if other else ""
        returns = [r["return"] for r in runs]
        lines.append(
            f"| {env_id} | {steps:,} | {label} "
            f"| {'rl-workbench' if side == 'ours' else 'sb3-contrib'} | {', '.join(str(r['seed']) for r in runs)} "
            f"| {statistics.median(returns):.1f} ({min(returns):.1f}..{max(returns):.1f}) | {wall:.1f} "
            f"| {statistics.median(r['cpu'] for r in runs):.1f} "
            f"| {statistics.median(r['updates'] / r['wall'] for r in runs):.1f} | {ratio} "
            f"| {', '.join(sorted({r['commit'] for r in runs}))} | {max(r['load'] for r in runs):.1f} |"
        )
    text = "\n".join(lines)
    if write:
        doc = DOC.read_text()
        begin, end = MARKERS
        if begin in doc and end in doc:
            head, rest = doc.split(begin, 1)
            DOC.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["tqc", "crossq"], choices=sorted(SETTINGS))
    parser.add_argument("--env", default="Pendulum-v1", help="Pendulum-v1 (other tasks: the report's rows)")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["ours", "sb3"],
        choices=("ours", "sb3"),
        help="whose runs (one after the other; run two of these at once for the two sides side by side)",
    )
    parser.add_argument(
        "--round",
        default="",
        help="a name for runs of the same settings after a change of the code: stored apart, a row of their own "
        "(both sides take it, so the ratio compares runs of one round)",
    )
    parser.add_argument("--child", choices=("ours", "sb3"), dest="side", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--render", action="store_true", help="write docs/algorithms.md's table from the results")
    args = parser.parse_args(argv)
    if args.env != "Pendulum-v1" and not args.render:
        # SETTINGS are crossq.yml's and tqc.yml's Pendulum rows; another task has other tuned settings.
        parser.error(
            f"--env {args.env!r}: this side by side holds Pendulum-v1's settings only; for another task run its "
            f"presets against sb3-contrib's in the report: python benchmarks/report.py run --rows "
            f"{args.env}:tqc {args.env}:crossq {args.env}:sac --seeds 3 --sb3 --parallel 2"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.-]*", args.round):
        parser.error(f"--round {args.round!r}: letters, digits, '_', '.' and '-' only (it goes into file names)")
    if args.render:
        print(render())
        return 0
    if args.side:
        args.algo = args.algos[0]
        child(args)
        return 0

    print(f"{args.env}, {args.steps} steps, seeds 0..{args.seeds - 1}, {args.eval_episodes} deterministic episodes")
    columns = ("return (min..max)", "wall s", "cpu s", "grad/s", "wall ratio")
    print(
        f"{'algo':8} {'library':12} " + " ".join(f"{c:>{w}}" for c, w in zip(columns, (26, 8, 8, 7, 10), strict=True))
    )
    for algo in args.algos:
        rows = {}
        for side in [s for s in args.sides if s == "ours" or algo in SB3]:
            runs = [spawn(side, algo, args, seed) for seed in range(args.seeds)]
            rows[side] = {
                "return": statistics.median(r["return"] for r in runs),
                "low": min(r["return"] for r in runs),
                "high": max(r["return"] for r in runs),
                "wall": statistics.median(r["wall"] for r in runs),
                "cpu": statistics.median(r["cpu"] for r in runs),
                "grad_per_s": statistics.median(r["updates"] / r["wall"] for r in runs),
            }
        for side, row in rows.items():
            ratio = f"{row['wall'] / rows['sb3']['wall']:.2f}x" if side == "ours" and "sb3" in rows else ""
            library = "rl-workbench" if side == "ours" else "sb3-contrib"
            spread = f"{row['return']:.1f} ({row['low']:.1f}..{row['high']:.1f})"
            print(
                f"{algo:8} {library:12} {spread:>26} {row['wall']:8.1f} {row['cpu']:8.1f} "
                f"{row['grad_per_s']:7.1f} {ratio:>10}",
                flush=True,
            )
    print(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
