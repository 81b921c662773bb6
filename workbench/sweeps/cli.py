"""``workbench sweep``: the command-line front end of :func:`workbench.sweep`.

::

    workbench sweep ppo CartPole-v1 --space learning_rate=1e-5..1e-2 --space 'n_epochs=[5, 10, 20]' \\
        --trials 40 --steps 50000 --parallel 4 --metric eval_reward --prune median
    workbench sweep mypkg.tuning:make_agent CartPole-v1 ...       # your own make_agent function
    workbench sweep tune.py:make_agent CartPole-v1 ...            # ... or one in a file

The function's module may define ``space`` (a dict); ``--space`` entries are added to it. Ranges are
``NAME=LOW..HIGH`` (floats are log-uniform when both ends are positive), choices ``NAME=[a, b]`` (JSON).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "add_metric_arguments",
    "add_parser",
    "direction",
    "follow",
    "load_search",
    "parse_space_args",
    "run",
    "search_parser",
]


_HELP = "search hyperparameters with Optuna (trials are sessions)"
_DESCRIPTION = (
    "Search hyperparameters: each trial trains FUNCTION(**sampled values) for --steps env steps. "
    "FUNCTION is an agent name (ppo, dqn, ...: the sampled values are its hyperparameters), "
    "module:function, or file.py:function. Stop with Ctrl-C; the same --name and --storage resume."
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` sub-command to the CLI's sub-parsers."""
    p = search_parser(sub, "sweep", _HELP, _DESCRIPTION, env_example="CartPole-v1")
    p.add_argument("--trials", type=int, default=20, help="trials in all (default 20)")
    p.add_argument("--steps", type=int, default=50_000, help="env steps per trial (default 50000)")
    p.add_argument("--parallel", type=int, default=1, help="trials at a time, in worker processes (default 1)")
    add_metric_arguments(p)
    p.add_argument(
        "--prune", default="median", choices=["median", "asha", "hyperband", "none"], help="pruner (default median)"
    )
    p.add_argument("--name", default=None, help="study name (default: a new timestamped one)")
    p.add_argument("--storage", default=None, help="SQLite file or database URL (default runs/sweeps/NAME.db)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler and the trials (default 0)")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate every N env steps (default steps/10)")
    p.add_argument(
        "--backend",
        default="optuna",
        choices=["optuna", "ray"],
        help="optuna: local worker processes (default); ray: Ray Tune, on a local Ray or --ray-address",
    )
    p.add_argument(
        "--ray-address", default=None, help="with --backend ray: join this Ray cluster ('auto': the running one)"
    )
    return p


def search_parser(
    sub: Any, command: str, help: str, description: str, *, env_example: str, space_note: str = ""
) -> argparse.ArgumentParser:
    """A searching sub-command's parser (``sweep``, ``pbt``) with the arguments they share: FUNCTION,
    ENV and the repeatable ``--space``."""
    p = sub.add_parser(command, help=help, description=description)
    p.add_argument("function", help="agent name, module:function or file.py:function that builds the agent")
    p.add_argument("env", help=f"registered gymnasium id, e.g. {env_example}")
    p.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME=RANGE",
        help=f"NAME=LOW..HIGH (a range) or NAME=[a, b, ...] (a choice, JSON); {space_note}repeatable",
    )
    return p


def add_metric_arguments(p: argparse.ArgumentParser) -> None:
    """``--metric`` and ``--minimize``: what a search optimises (read back by :func:`direction`)."""
    p.add_argument("--metric", default="eval_reward", help="signal to optimise (default eval_reward)")
    p.add_argument("--minimize", action="store_true", help="minimise the metric instead of maximising it")


def direction(args: argparse.Namespace) -> str:
    """The optimisation direction ``--minimize`` asks for."""
    return "minimize" if args.minimize else "maximize"


def load_search(args: argparse.Namespace) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The FUNCTION argument's agent builder and the space to search: its module's ``space`` with the
    ``--space`` entries added; exits when that is empty."""
    make_agent, space = _load_function(args.function, args.env)
    space.update(parse_space_args(args.space))
    if not space:
        raise SystemExit("workbench: nothing to search: give --space NAME=LOW..HIGH (repeatable)")
    return make_agent, space


def _number(text: str, what: str) -> int | float:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SystemExit(f"workbench: --space {what}: {text!r} is not a number")
    return value


def parse_space_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["lr=1e-5..1e-2", "n_epochs=[5, 10]"]`` -> ``{"lr": (1e-05, 0.01), "n_epochs": [5, 10]}``."""
    space: dict[str, Any] = {}
    for pair in pairs:
        name, sep, spec = pair.partition("=")
        name, spec = name.strip(), spec.strip()
        if not sep or not name:
            raise SystemExit(f"workbench: --space takes NAME=LOW..HIGH or NAME=[a, b], got {pair!r}")
        if spec.startswith("["):
            try:
                choices = json.loads(spec)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"workbench: --space {name}: {spec!r} is not a JSON list ({exc})") from None
            space[name] = [tuple(c) if isinstance(c, list) else c for c in choices]
        elif ".." in spec:
            low, high = spec.split("..", 1)
            space[name] = (_number(low, name), _number(high, name))
        else:
            raise SystemExit(
                f"workbench: --space {name}={spec}: give a range LOW..HIGH (e.g. 1e-5..1e-2) or a list [a, b]"
            )
    return space


def _load_function(target: str, env: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    from ..agents import AGENTS

    if target.lower() in AGENTS:
        cls = AGENTS[target.lower()]

        def make_agent(**hyperparameters: Any) -> Any:
            return cls(env, **hyperparameters)

        make_agent.__name__ = f"make_{target.lower()}"
        return make_agent, {}
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(
            f"workbench: {target!r} is neither an agent ({', '.join(sorted(AGENTS))}) nor module:function "
            "nor file.py:function"
        )
    if module_name.endswith(".py"):
        if not os.path.exists(module_name):
            raise SystemExit(f"workbench: no file {module_name!r}")
        spec = importlib.util.spec_from_file_location(f"_workbench_sweep_{abs(hash(module_name))}", module_name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # worker processes cannot import it by this name
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise SystemExit(f"workbench: {module_name} has no function {attr!r}")
    space = getattr(module, "space", None) or getattr(module, "SPACE", None) or {}
    return fn, dict(space)


def run(args: argparse.Namespace) -> int:
    """Run ``workbench sweep``: print each trial as it ends, then the table and the best trial."""
    try:
        from .sweep import Sweep
    except ImportError as exc:
        raise SystemExit(f"workbench: sweeps need Optuna: pip install 'rl-workbench[optuna]' ({exc})") from None

    make_agent, space = load_search(args)
    s = Sweep(
        make_agent,
        args.env,
        space,
        trials=args.trials,
        steps=args.steps,
        parallel=args.parallel,
        metric=args.metric,
        direction=direction(args),
        prune=False if args.prune == "none" else args.prune,
        name=args.name,
        storage=args.storage,
        seed=args.seed,
        eval_every=args.eval_every,
        backend=args.backend,
        ray_address=args.ray_address,
    )
    print(f"sweep {s.name!r} in {s.url} ({args.trials} trials of {args.steps} steps, {args.parallel} at a time)")
    shown: set[int] = set()

    def report() -> None:
        for r in s.results():
            if r.number in shown or r.state in ("running", "waiting"):
                continue
            shown.add(r.number)
            value = "" if r.value is None else f" {args.metric}={r.value:.4g}"
            note = f" ({r.note})" if r.note else ""
            print(f"trial {r.number} {r.state}:{value} {r.params}{note}", flush=True)

    def summary() -> str:
        best = s.best
        if best is None:
            return f"{s.status}: no trial has completed yet"
        return f"{s.status}: best {args.metric}={best.value:.4g} in trial {best.number} with {best.params}"

    return follow(s, report, "stopping; run the same command again to resume", summary)


def follow(run: Any, report: Callable[[], None], stopping: str, summary: Callable[[], str]) -> int:
    """Start ``run`` (a sweep or a population), call ``report()`` every second until it ends, then
    print its table. Ctrl-C stops it (its ``wait`` does, and ``stopping`` is printed). Returns the
    command's exit code: 1 after the run's error (printed on stderr after the table), else 0 after
    printing ``summary()``."""
    run.start()
    error: BaseException | None = None
    try:
        while True:
            try:
                ended = run.wait(timeout=1.0)
            except Exception as exc:  # the run failed: show what it did, then the error
                error, ended = exc, True
            report()
            if ended:
                break
    except KeyboardInterrupt:
        print(stopping)
        run.stop()
    print(run.table().to_string())
    if error is not None:
        print(f"workbench: error: {error}", file=sys.stderr)
        return 1
    print(summary())
    return 0
