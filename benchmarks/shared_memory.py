"""Local workers with and without shared-memory observations (issue 51): the synchronous runner alone.

Steps ``LocalRunner`` (2 workers x 8 envs by default) with random actions, no learner, so what is measured is
the round trip of a step: actions out, rewards, flags and observations back. Two observation sizes: CartPole's
4 floats, and an Atari-sized frame stack (``uint8 (4, 84, 84)``, 28 KB an env) from a stand-in env that costs
nothing to step. Each setting runs ``--rounds`` times, alternating with and without shared memory, and the
median env steps per second is kept (the machine is shared: medians and ratios, not single runs).

    python benchmarks/shared_memory.py            # writes benchmarks/results/shared_memory.json

``--double-buffer`` measures double-buffered sampling instead (``LocalRunner(double_buffer=True)``): each
worker's envs step in two halves while the learner decides the other half's actions, so here every step
includes a real decision (a PPO agent's ``decide`` on the CPU, one torch thread: an MLP for CartPole, the
Nature CNN for frames) through ``runner.transitions``. Three envs: CartPole, CartPole with a 1-ms
``time.sleep`` per step (an app's slow env), and the frame stack. Each runs ``--rounds`` times, alternating
off and on; medians are kept.

    python benchmarks/shared_memory.py --double-buffer   # writes benchmarks/results/double_buffer.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np

from workbench.envs import as_env_source
from workbench.parallel import LocalRunner

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RESULTS = Path(__file__).parent / "results" / "shared_memory.json"
DOUBLE_RESULTS = Path(__file__).parent / "results" / "double_buffer.json"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "parallel.md"
BEGIN, END = "<!-- generated: shared memory table begin -->", "<!-- generated: shared memory table end -->"
DOUBLE_BEGIN, DOUBLE_END = (
    "<!-- generated: double buffer table begin -->",
    "<!-- generated: double buffer table end -->",
)


class Frames(gym.Env):
    """A stack of four 84x84 uint8 frames, new noise each step; episodes of 100 steps."""

    observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self) -> None:
        self.t = 0
        self.frame = np.zeros((4, 84, 84), np.uint8)

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        self.t = 0
        return self.frame, {}

    def step(self, action):  # type: ignore[no-untyped-def]
        self.t += 1
        self.frame[self.t % 4, 0, :4] = self.t % 255  # a cheap change, so frames differ
        return self.frame, 0.0, False, self.t >= 100, {}


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


class SlowCartPole(gym.Wrapper):
    """CartPole whose every step also waits 1 ms (a simulator, an app's slow env)."""

    def step(self, action):  # type: ignore[no-untyped-def]
        time.sleep(0.001)
        return self.env.step(action)


def slow_cartpole() -> gym.Env:
    return SlowCartPole(gym.make("CartPole-v1"))


def measure_double(factory, double: bool, workers: int, envs: int, seconds: float) -> float:  # type: ignore[no-untyped-def]
    """Env steps per second of ``runner.transitions`` with a PPO agent deciding (double buffering on or off)."""
    import torch

    import workbench as wb

    torch.set_num_threads(1)
    source = as_env_source(factory)
    agent = wb.PPO(source.make(), n_envs=workers * envs, seed=0, device="cpu")
    runner = LocalRunner(source, workers, envs, double_buffer=double, seed=0)
    try:
        obs = runner.reset()
        for _ in range(20):  # warm-up
            _, obs = runner.transitions(agent, obs)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            _, obs = runner.transitions(agent, obs)
            steps += runner.num_envs
        return steps / (time.perf_counter() - start)
    finally:
        runner.close()


def _write_between(begin: str, end: str, lines: list[str]) -> None:
    """Replace what stands between the markers ``begin`` and ``end`` of docs/parallel.md with ``lines``."""
    head, rest = DOCS.read_text().split(begin, 1)
    DOCS.write_text(head + begin + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1])


def render_double() -> None:
    """Write the stored double-buffering results' table into docs/parallel.md, between its markers."""
    data = json.loads(DOUBLE_RESULTS.read_text())
    load = data["load_average"]
    lines = [
        "| env | double_buffer=False | double_buffer=True | ratio |",
        "|---|---:|---:|---:|",
        *(
            f"| {r['env']} | {r['off']:,.0f} steps/s | {r['on']:,.0f} steps/s | {r['ratio']:.2f}x |"
            for r in data["rows"]
        ),
        "",
        f"({data['date']}: {data['workers']} workers x {data['envs_per_worker']} envs, a PPO agent deciding on the "
        f"CPU with one torch thread, medians of {data['rounds']} runs of {data['seconds']:g} s each, alternating; "
        f"{data['cores']} cores shared with other jobs, load average {load[0]:.1f} at the end.)",
    ]
    _write_between(DOUBLE_BEGIN, DOUBLE_END, lines)


def main_double(args: argparse.Namespace) -> None:
    """Double buffering off and on, for the three envs; stores the results and renders the table."""
    rows = []
    envs = (
        ("CartPole-v1", cartpole),
        ("CartPole-v1, 1 ms sleep a step", slow_cartpole),
        ("frames uint8 (4, 84, 84), CNN policy", lambda: Frames()),
    )
    for name, factory in envs:
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for double in (False, True):
                runs[double].append(measure_double(factory, double, args.workers, args.envs, args.seconds))
        off, on = statistics.median(runs[False]), statistics.median(runs[True])
        rows.append(
            {"env": name, "off": off, "on": on, "ratio": on / off, "runs": {str(k): v for k, v in runs.items()}}
        )
        print(f"{name}: off {off:,.0f} steps/s, on {on:,.0f} steps/s ({on / off:.2f}x)", flush=True)
    load = os.getloadavg()
    result = {
        "workers": args.workers,
        "envs_per_worker": args.envs,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "load_average": load,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": rows,
    }
    DOUBLE_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    DOUBLE_RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; wrote {DOUBLE_RESULTS}")
    render_double()


def measure(factory, shared: bool, workers: int, envs: int, seconds: float) -> float:  # type: ignore[no-untyped-def]
    runner = LocalRunner(as_env_source(factory), workers, envs, shared_memory=shared, seed=0)
    try:
        runner.reset()
        n = runner.num_envs
        space = runner.action_space
        rng = np.random.default_rng(0)
        for _ in range(20):  # warm-up
            runner.step(rng.integers(0, space.n, n))
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            runner.step(rng.integers(0, space.n, n))
            steps += n
        return steps / (time.perf_counter() - start)
    finally:
        runner.close()


def render() -> None:
    """Write the stored results' table into docs/parallel.md, between its markers."""
    data = json.loads(RESULTS.read_text())
    load = data["load_average"]
    lines = [
        "| observations | through the answers (before) | through shared memory | ratio |",
        "|---|---:|---:|---:|",
        *(
            f"| {r['env']} | {r['pipes']:,.0f} steps/s | {r['shared_memory']:,.0f} steps/s | {r['ratio']:.2f}x |"
            for r in data["rows"]
        ),
        "",
        f"({data['date']}: {data['workers']} workers x {data['envs_per_worker']} envs, medians of {data['rounds']} "
        f"runs of {data['seconds']:g} s each, alternating; {data['cores']} cores shared with other jobs, load "
        f"average {load[0]:.1f} at the end.)",
    ]
    _write_between(BEGIN, END, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--render", action="store_true", help="only rewrite the docs table from stored results")
    parser.add_argument(
        "--double-buffer", action="store_true", help="measure double-buffered sampling off and on instead"
    )
    args = parser.parse_args()
    if args.render and args.double_buffer:
        render_double()
        return
    if args.render:
        render()
        return
    if args.double_buffer:
        main_double(args)
        return
    rows = []
    for name, factory in (("CartPole-v1 (4 floats)", cartpole), ("frames uint8 (4, 84, 84)", lambda: Frames())):
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for shared in (False, True):
                runs[shared].append(measure(factory, shared, args.workers, args.envs, args.seconds))
        before, after = statistics.median(runs[False]), statistics.median(runs[True])
        rows.append({"env": name, "pipes": before, "shared_memory": after, "ratio": after / before, "runs": runs})
        print(f"{name}: pipes {before:,.0f} steps/s, shared memory {after:,.0f} steps/s ({after / before:.2f}x)")
    load = os.getloadavg()
    result = {
        "workers": args.workers,
        "envs_per_worker": args.envs,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "load_average": load,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": [
            {k: v for k, v in r.items() if k != "runs"} | {"runs": {str(k): v for k, v in r["runs"].items()}}
            for r in rows
        ],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; wrote {RESULTS}")
    render()


if __name__ == "__main__":
    main()
