"""Self-play benchmark (issue 56): PPO against a league of its past selves on Tic-Tac-Toe and Connect Four.

Each run trains ``wb.PPO`` on ``wb.SelfPlay(game, league=wb.League(...))`` for ``--steps`` learner
moves; every ``--eval-every`` steps it plays ``--eval-games`` greedy games against each fixed reference
(random; perfect minimax for Tic-Tac-Toe, one-step lookahead for Connect Four), half from each seat,
and notes the league's Elo rating. The final agent then plays ``--final-games`` games against each
reference. The issue's goals: Tic-Tac-Toe never loses to random over 1,000 games and draws at least
90% against minimax; Connect Four wins at least 95% against random and more than 50% against the
lookahead; the learner's rating rises on every seed.

    nice -n 19 python benchmarks/self_play.py --game tictactoe --steps 200000 --seeds 3
    python benchmarks/self_play.py --render      # rewrites the table in docs/self_play.md from the results

Results go to ``benchmarks/results/self_play__<game>__seed<k>.json`` (one file per run, the curves
inside); ``--render`` builds the docs table from every stored file. One torch thread per process.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "self_play.md"
BEGIN, END = "<!-- self_play table begin -->", "<!-- self_play table end -->"

GAMES: dict[str, dict[str, Any]] = {
    "tictactoe": {
        "module": "tictactoe_v3",
        "references": ["random", "minimax"],
        "ppo": {"n_steps": 1024, "batch_size": 256, "n_epochs": 10, "ent_coef": 0.01, "learning_rate": 1e-3},
        "league": {"snapshot_every": 5, "window": 20, "sampling": "pfsp", "latest_share": 0.2},
    },
    "connect_four": {
        "module": "connect_four_v3",
        "references": ["random", "lookahead"],
        "ppo": {"n_steps": 1024, "batch_size": 256, "n_epochs": 10, "ent_coef": 0.01, "learning_rate": 1e-3},
        "league": {"snapshot_every": 5, "window": 20, "sampling": "pfsp", "latest_share": 0.2},
    },
}


def run(
    game: str,
    seed: int,
    steps: int,
    eval_every: int,
    eval_games: int,
    final_games: int,
    ppo: dict[str, Any],
    out: Path | None = None,
    reference_share: float | dict[str, float] = 0.0,
) -> dict[str, Any]:
    """Train one seed on one game; the curves of rating and reference results, the final results. With
    ``out``, the run so far is written there after every evaluation (``"final": null`` until the end)."""
    import importlib

    import workbench as wb

    spec = {**GAMES[game], "ppo": {**GAMES[game]["ppo"], **ppo}}
    module = importlib.import_module(f"pettingzoo.classic.{spec['module']}")
    spec["reference_share"] = reference_share
    env = wb.SelfPlay(
        module.env,
        league=wb.League(seed=seed, **spec["league"]),
        references=spec["references"],
        reference_share=reference_share,
    )
    agent = wb.PPO(env, seed=seed, **{key: _setting(value) for key, value in spec["ppo"].items()})
    session = wb.Session(agent, env, seed=seed)
    # The whole budget planned up front: the run stops for evaluations, and each ``run(steps=...)`` would
    # otherwise plan only up to its own end, so the schedules (PPO's clip range, a decaying learning rate)
    # would fall to their end values within every piece (docs/guide.md, "What a resumed run reproduces").
    agent.total_timesteps = steps
    curve: list[dict[str, Any]] = []
    wall = time.perf_counter()
    train_s = 0.0
    while session.steps < steps:
        t = time.perf_counter()
        session.run(steps=min(eval_every, steps - session.steps))
        train_s += time.perf_counter() - t
        if session.status != "finished":
            raise RuntimeError(f"{game} seed {seed}: {session.status} ({session.error})")
        point: dict[str, Any] = {"steps": session.steps, "rating": env.league.rating, "pool_size": env.league.pool_size}
        for ref in spec["references"]:
            point[ref] = env.evaluate(agent, ref, games=eval_games, seed=session.steps)
        curve.append(point)
        if out is not None:
            out.write_text(
                json.dumps(_row(game, seed, steps, spec, env, agent, None, final_games, curve, train_s, wall))
            )
        shown = ", ".join(
            f"{r} w{point[r]['win']:.2f}/d{point[r]['draw']:.2f}/l{point[r]['loss']:.2f}" for r in spec["references"]
        )
        print(f"  {game} seed {seed} @ {session.steps}: rating {point['rating']:.0f}, {shown}", flush=True)
    final = {ref: env.evaluate(agent, ref, games=final_games, seed=10_000 + seed) for ref in spec["references"]}
    return _row(game, seed, steps, spec, env, agent, final, final_games, curve, train_s, wall)


def _row(
    game: str,
    seed: int,
    steps: int,
    spec: dict[str, Any],
    env: Any,
    agent: Any,
    final: dict[str, Any] | None,
    final_games: int,
    curve: list[dict[str, Any]],
    train_s: float,
    wall: float,
) -> dict[str, Any]:
    return {
        "game": game,
        "seed": seed,
        "budget": steps,
        "steps": agent.num_timesteps,
        "updates": agent.num_updates,
        "ppo": spec["ppo"],
        "schedules_over": "budget",  # rows without it planned each evaluation interval (see run())
        "league": spec["league"],
        "reference_share": spec.get("reference_share", 0.0),
        "league_games": env.league.games,
        "pool_size": env.league.pool_size,
        "final_rating": env.league.rating,
        "final": final,
        "final_games": final_games,
        "eval_games": curve[0][spec["references"][0]]["games"] if curve else 0,
        "curve": curve,
        "train_s": train_s,
        "wall_s": time.perf_counter() - wall,
    }


def _goal(game: str, final: dict[str, dict[str, float]]) -> str:
    if game == "tictactoe":
        ok = final["random"]["loss"] == 0.0 and final["minimax"]["draw"] >= 0.9
    else:
        ok = final["random"]["win"] >= 0.95 and final["lookahead"]["win"] > 0.5
    return "met" if ok else "not met"


def _shown(value: Any) -> str:
    if isinstance(value, dict) and "schedule" in value:
        return f"{value['schedule']} {value['start']:g}→{value['end']:g}"
    return json.dumps(value)


def _ppo_changes(row: dict[str, Any]) -> str:
    """The row's PPO settings that differ from the game's in ``GAMES``."""
    base = GAMES[row["game"]]["ppo"]
    return ", ".join(f"{k}={_shown(v)}" for k, v in sorted(row["ppo"].items()) if base.get(k) != v)


def _settings(row: dict[str, Any]) -> str:
    """The table's name for the row's settings: the label its file was written under (``--label``; none: the
    game's settings), its share of games against the references, and † for a run of before the budget was
    planned up front (its clip range fell to 0 within every evaluation interval)."""
    parts = [row.get("label") or ("the game's" if not _ppo_changes(row) else _ppo_changes(row))]
    if row.get("reference_share"):
        parts.append(f"reference_share {json.dumps(row['reference_share'])}")
    return ", ".join(parts) + ("†" if row.get("schedules_over") != "budget" else "")


def _order(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["game"], row.get("budget", row["steps"]), _settings(row), row["seed"])


def table(rows: list[dict[str, Any]]) -> str:
    """The docs table: one line per game and seed, the final results against each reference."""
    lines = [
        "| game | settings | seed | steps | updates | rating first → last | vs random (win / draw / loss) | "
        "vs scripted (win / draw / loss) | goal | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=_order):
        refs = GAMES[r["game"]]["references"]
        if r["final"] is None:  # stopped before its end: its last evaluation, marked so
            last = r["curve"][-1]
            cells = [f"{last[ref]['win']:.2f} / {last[ref]['draw']:.2f} / {last[ref]['loss']:.2f}*" for ref in refs]
            lines.append(
                f"| {r['game']} | {_settings(r)} | {r['seed']} | {r['steps']:,} of {r['budget']:,} | {r['updates']} | "
                f"{r['curve'][0]['rating']:.0f} → {r['final_rating']:.0f} | {cells[0]} | {refs[1]}: {cells[1]} | "
                f"unfinished | {r['train_s']:.0f} |"
            )
            continue
        cells = []
        for ref in refs:
            f = r["final"][ref]
            cells.append(f"{f['win']:.3f} / {f['draw']:.3f} / {f['loss']:.3f}")
        first = r["curve"][0]["rating"] if r["curve"] else float("nan")
        lines.append(
            f"| {r['game']} | {_settings(r)} | {r['seed']} | {r['steps']:,} | {r['updates']} | "
            f"{first:.0f} → {r['final_rating']:.0f} | "
            f"{cells[0]} | {refs[1]}: {cells[1]} | {_goal(r['game'], r['final'])} | {r['train_s']:.0f} |"
        )
    return "\n".join(lines)


def curves(rows: list[dict[str, Any]]) -> str:
    """Over training, per run: at each evaluation the league's Elo rating and the score (win + draw / 2)
    against each reference."""
    lines = ["| game | settings | seed | steps: rating, score vs random, score vs scripted |", "|---|---|---|---|"]
    for r in sorted(rows, key=_order):
        refs = GAMES[r["game"]]["references"]
        points = []
        for p in r["curve"]:
            scores = ", ".join(f"{p[ref]['win'] + p[ref]['draw'] / 2:.2f}" for ref in refs)
            points.append(f"{p['steps'] // 1000}k: {p['rating']:.0f}, {scores}")
        lines.append(f"| {r['game']} | {_settings(r)} | {r['seed']} | {'; '.join(points)} |")
    return "\n".join(lines)


def render() -> str:
    """Rewrite the table in docs/self_play.md from the stored results; returns the table."""
    rows = []
    for path in sorted(RESULTS.glob("self_play__*.json")):
        row = json.loads(path.read_text())
        parts = path.stem.split("__")  # self_play, game, steps, [label,] seed<k>
        row["label"] = parts[3] if len(parts) == 5 else ""
        rows.append(row)
    labels = {r["label"]: _ppo_changes(r) for r in rows if r["label"]}
    games = max((r["final_games"] for r in rows), default=0)
    evals = max((r.get("eval_games", 0) for r in rows), default=0)
    text = (
        table(rows)
        + f"\n\n{games:,} final games per reference and seed (half from each seat, the agent greedy)"
        + (
            f"; `*`: a run stopped before its budget, its last evaluation ({int(evals)} games) shown"
            if any(r["final"] is None for r in rows)
            else ""
        )
        + ". Rating: the league's Elo of the learner at the first evaluation and at the end. Settings: the game's"
        + " in `benchmarks/self_play.py`"
        + "".join(f"; {label}: {changes}" for label, changes in sorted(labels.items()))
        + (
            "; †: a run of before the budget was planned up front, whose schedules (PPO's clip range) fell"
            " to their end within every evaluation interval"
            if any(r.get("schedules_over") != "budget" for r in rows)
            else ""
        )
        + "."
        + "\n\nOver training (every evaluation):\n\n"
        + curves(rows)
    )
    doc = DOC.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    DOC.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])
    return text


def _setting(value: Any) -> Any:
    """A ``--ppo`` value: JSON, with a schedule written as its saved form, e.g.
    ``learning_rate='{"schedule": "linear", "start": 0.001, "end": 0.0}'``."""
    from workbench.schedules import schedule_from_dict

    return schedule_from_dict(value) if isinstance(value, dict) and "schedule" in value else value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--game", choices=sorted(GAMES), default="tictactoe")
    parser.add_argument("--steps", type=int, default=200_000, help="learner moves per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--eval-games", type=int, default=100)
    parser.add_argument("--final-games", type=int, default=1000)
    parser.add_argument(
        "--ppo",
        nargs="*",
        default=[],
        help='PPO settings, as key=JSON; a schedule as {"schedule": "linear", "start": 1e-3, "end": 0}',
    )
    parser.add_argument(
        "--reference-share",
        type=json.loads,
        default=0.0,
        help='share of training games against the references, as JSON: 0.1, or {"random": 0.1} for one of them',
    )
    parser.add_argument("--label", default="", help="a name for these settings in the result files' names")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the result files go")
    parser.add_argument("--render", action="store_true", help="only rebuild the docs table from the results")
    args = parser.parse_args()
    if args.render:
        print(render())
        return
    import torch

    torch.set_num_threads(1)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        ppo = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.ppo)}
        label = f"__{args.label}" if args.label else ""
        out = args.out / f"self_play__{args.game}__{args.steps}{label}__seed{seed}.json"
        row = run(
            args.game,
            seed,
            args.steps,
            args.eval_every,
            args.eval_games,
            args.final_games,
            ppo,
            out,
            args.reference_share,
        )
        out.write_text(json.dumps(row, indent=1))
        print(f"{args.game} seed {seed}: final {row['final']}, rating {row['final_rating']:.0f}, {row['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
