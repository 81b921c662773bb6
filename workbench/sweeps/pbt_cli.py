"""``workbench pbt``: the command-line front end of :func:`workbench.pbt`.

::

    workbench pbt ppo Pendulum-v1 --space learning_rate=1e-4..1e-2 --space ent_coef=0.0..0.05 \\
        --population 8 --steps 200000 --interval 10000 --dir runs/pbt/pendulum
    workbench pbt mypkg.tuning:make_agent CartPole-v1 ...       # your own make_agent function
    workbench pbt tune.py:make_agent CartPole-v1 ...            # ... or one in a file

The space is written as for ``workbench sweep`` (``NAME=LOW..HIGH``, ``NAME=[a, b]``); its names are
live-editable hyperparameters. Ctrl-C stops the population (every member saved); the same command
(the same ``--dir``) resumes it.
"""

from __future__ import annotations

import argparse
from typing import Any

from .cli import add_metric_arguments, direction, follow, load_search, search_parser

__all__ = ["add_parser", "run"]


_HELP = "population-based training (members are live sessions)"
_DESCRIPTION = (
    "Population-based training: --population members train FUNCTION(**values) side by side; every "
    "--interval env steps the bottom --quantile copy a top member's weights and perturb its values. "
    "FUNCTION is an agent name (ppo, sac, ...), module:function, or file.py:function. Ctrl-C stops "
    "it, every member saved; the same --dir resumes it."
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``pbt`` sub-command to the CLI's sub-parsers."""
    p = search_parser(sub, "pbt", _HELP, _DESCRIPTION, env_example="Pendulum-v1", space_note="live-editable names; ")
    p.add_argument("--population", type=int, default=8, help="members (default 8)")
    p.add_argument("--steps", type=int, default=100_000, help="env steps per member (default 100000)")
    p.add_argument("--interval", type=int, default=10_000, help="env steps between exploit/explore (default 10000)")
    add_metric_arguments(p)
    p.add_argument("--quantile", type=float, default=0.25, help="bottom fraction that copies the top (default 0.25)")
    p.add_argument(
        "--perturb",
        type=float,
        nargs=2,
        default=(0.8, 1.2),
        metavar=("DOWN", "UP"),
        help="factors a copied value is multiplied by (default 0.8 1.2)",
    )
    p.add_argument(
        "--resample-p",
        type=float,
        default=0.25,
        help="probability of drawing a copied value from the space again (default 0.25)",
    )
    p.add_argument("--parallel", type=int, default=None, help="members training at once (default: all)")
    p.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation (default 5)")
    p.add_argument("--dir", default=None, help="the population's directory (default runs/pbt/NAME); resumes one")
    p.add_argument("--name", default=None, help="its name (default: a new timestamped one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling and the members (default 0)")
    p.add_argument("--copy-memory", action="store_true", help="exploit copies the replay memory too")
    p.add_argument(
        "--backend",
        default="local",
        choices=["local", "ray"],
        help="local: members' envs in this process (default); ray: each member's envs on Ray actors",
    )
    p.add_argument("--ray-address", default=None, help="with --backend ray: join this Ray cluster")
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``workbench pbt``: print each exploit/explore as it happens, then the members' table."""
    from .pbt import Population

    make_agent, space = load_search(args)
    p = Population(
        make_agent,
        args.env,
        population=args.population,
        space=space,
        steps=args.steps,
        interval=args.interval,
        metric=args.metric,
        direction=direction(args),
        quantile=args.quantile,
        perturb=tuple(args.perturb),
        resample_p=args.resample_p,
        parallel=args.parallel,
        eval_episodes=args.eval_episodes,
        directory=args.dir,
        name=args.name,
        seed=args.seed,
        copy_memory=args.copy_memory,
        backend=args.backend,
        ray_address=args.ray_address,
    )
    print(
        f"population {p.name!r} in {p.directory}: {args.population} members of {args.steps} steps, "
        f"exploit/explore every {args.interval}",
        flush=True,
    )
    shown = len(p.events)

    def report() -> None:
        nonlocal shown
        for e in p.events[shown:]:
            if e.kind == "exploit":
                print(
                    f"step {e.step}: member {e.member} ({_num(e.score)}) copied member {e.source} "
                    f"({_num(e.source_score)})",
                    flush=True,
                )
            else:
                changes = ", ".join(f"{k} {_num(old)} -> {_num(new)}" for k, (old, new) in e.changes.items())
                print(f"step {e.step}: member {e.member} explores: {changes}", flush=True)
        shown = len(p.events)

    def summary() -> str:
        best = p.best_index
        if best is None:
            return f"{p.status}: no member has been scored yet"
        where = f"{p.directory}/member-{best}"
        return (
            f"{p.status}: best {args.metric}={p.best_score:.4g} by member {best}, saved in {where} "
            f"(workbench play {where})"
        )

    return follow(p, report, "stopping (members saved); run the same command again to resume", summary)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)
