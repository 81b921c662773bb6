"""Population-based training vs a random sweep of the same budget vs the zoo preset (issue 39).

For each seed, on one task with PPO:

* **pbt**: ``wb.pbt`` with ``--population`` members of ``--steps`` env steps each, exploit/explore every
  ``--interval`` steps, searching ``learning_rate``, ``ent_coef`` and ``clip_range`` around the zoo
  preset (the preset's other hyperparameters fixed);
* **random sweep**: the same number of configurations drawn from the same space, each trained for
  ``--steps`` steps side by side (the same threads as the population's members), no exploit/explore:
  the same total budget;
* **zoo preset**: one run of ``wb.preset(task, "ppo")`` for the same total budget
  (``population * steps`` env steps).

Each method's pick (the population's best member, the sweep's best trial by its last evaluation of
``--eval-episodes`` episodes; the preset's one run) is then evaluated afresh on ``--final-episodes``
deterministic episodes with its own seed. Prints one row per method: mean ± std of that final
evaluation over the seeds, and mean wall time per seed. Not part of the test suite.

    python benchmarks/pbt.py                                              # Acrobot, 8 x 50k, 3 seeds
    python benchmarks/pbt.py --env Pendulum-v1 --steps 100000 --interval 10000
    python benchmarks/pbt.py --steps 8000 --interval 2000 --seeds 1       # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np

import workbench as wb
from workbench.sweeps.pbt import _parse_space

SPACE = {"learning_rate": (1e-4, 3e-3), "ent_coef": (0.0, 0.02), "clip_range": (0.1, 0.3)}


def preset_kwargs(env_id: str, seed: int) -> dict:
    """The zoo preset's hyperparameters, without those the space searches."""
    agent, _env = wb.preset(env_id, "ppo", seed=seed)
    hyper = {k: v for k, v in agent.hyperparameters().items() if k not in SPACE}
    for key, value in list(hyper.items()):
        if isinstance(value, list):
            hyper[key] = tuple(value)
    return hyper


def final_eval(session: wb.Session, episodes: int, seed: int) -> float:
    returns = session.agent.play(session.env_source, episodes=episodes, seed=10**6 + seed)
    return float(np.mean(returns))


def run_pbt(args: argparse.Namespace, seed: int, base: dict, directory: str) -> tuple[float, float, dict]:
    def make_agent(**hp):
        return wb.PPO(args.env, **{**base, **hp})

    start = time.perf_counter()
    population = wb.pbt(
        make_agent,
        args.env,
        population=args.population,
        space=SPACE,
        steps=args.steps,
        interval=args.interval,
        eval_episodes=args.eval_episodes,
        seed=seed,
        directory=f"{directory}/pbt-{seed}",
    )
    population.wait()
    wall = time.perf_counter() - start
    best = population.best
    assert best is not None
    info = {
        "exploits": sum(e.kind == "exploit" for e in population.events),
        "best_values": population.values()[population.best_index],
    }
    return final_eval(best, args.final_episodes, seed), wall, info


def run_sweep(args: argparse.Namespace, seed: int, base: dict) -> tuple[float, float, dict]:
    dims = _parse_space(SPACE)
    rng = np.random.default_rng(seed)  # the population draws its first values the same way
    sessions = []
    for i in range(args.population):
        values = {name: dim.sample(rng) for name, dim in dims.items()}
        agent = wb.PPO(args.env, **{**base, **values})
        sessions.append(wb.Session(agent, args.env, seed=seed + i, torch_threads=1))
    start = time.perf_counter()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the trials train side by side on purpose
        for s in sessions:
            s.start(args.steps)
    for s in sessions:
        s.wait()
    scores = [s.evaluate(args.eval_episodes) for s in sessions]
    wall = time.perf_counter() - start
    best = int(np.argmax(scores))
    return final_eval(sessions[best], args.final_episodes, seed), wall, {"best_trial": best}


def run_preset(args: argparse.Namespace, seed: int) -> tuple[float, float, dict]:
    agent, env = wb.preset(args.env, "ppo", seed=seed)
    session = wb.Session(agent, env, seed=seed)
    start = time.perf_counter()
    session.run(args.population * args.steps)
    wall = time.perf_counter() - start
    return final_eval(session, args.final_episodes, seed), wall, {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Acrobot-v1")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per member / per sweep trial")
    parser.add_argument("--interval", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eval-episodes", type=int, default=3, help="episodes of each member's evaluation")
    parser.add_argument("--final-episodes", type=int, default=10, help="episodes of the final evaluation")
    parser.add_argument("--methods", nargs="+", default=["pbt", "sweep", "preset"])
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory() as directory:
        for seed in range(args.seeds):
            base = preset_kwargs(args.env, seed)
            for method in args.methods:
                if method == "pbt":
                    score, wall, info = run_pbt(args, seed, base, directory)
                elif method == "sweep":
                    score, wall, info = run_sweep(args, seed, base)
                else:
                    score, wall, info = run_preset(args, seed)
                results[method].append((score, wall))
                print(
                    json.dumps(
                        {
                            "seed": seed,
                            "method": method,
                            "final_eval": round(score, 2),
                            "wall_s": round(wall, 1),
                            **info,
                        },
                        default=str,
                    ),
                    flush=True,
                )
    budget = args.population * args.steps
    names = {
        "pbt": f"PBT, {args.population} x {args.steps:,} steps (interval {args.interval:,})",
        "sweep": f"random sweep, {args.population} x {args.steps:,} steps",
        "preset": f"zoo preset, 1 x {budget:,} steps",
    }
    print(
        f"\n{args.env}, PPO, total budget {budget:,} env steps per method and seed, {args.seeds} seeds, "
        f"final evaluation {args.final_episodes} episodes\n"
    )
    print("| method | final evaluation (mean ± std over seeds) | per seed | wall time per seed |")
    print("|---|---|---|---|")
    for method, rows in results.items():
        scores = [s for s, _ in rows]
        std = statistics.stdev(scores) if len(scores) > 1 else 0.0
        per_seed = ", ".join(f"{s:.1f}" for s in scores)
        wall = statistics.mean(w for _, w in rows)
        mean = statistics.mean(scores)
        print(f"| {names.get(method, method)} | {mean:.1f} ± {std:.1f} | {per_seed} | {wall:.0f} s |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({m: rows for m, rows in results.items()}, f)


if __name__ == "__main__":
    main()
