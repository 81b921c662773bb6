"""The command line: ``workbench train``, ``play``, ``export``, ``sweep`` and ``serve``, over the same public API."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main", "parse_hyperparameters"]


# The names `--agent` takes, written out so that building the parser (`workbench --help`) imports neither the
# agents nor torch; tests/test_namespace.py holds them equal to the registry, ``sorted(workbench.agents.AGENTS)``.
AGENT_NAMES = (
    "a2c",
    "appo",
    "c51",
    "crossq",
    "ddpg",
    "dqn",
    "droq",
    "impala",
    "ppo",
    "qrdqn",
    "rainbow",
    "recurrentppo",
    "sac",
    "td3",
    "tqc",
)


def _agent_names() -> list[str]:
    from .agents import AGENTS

    return sorted(AGENTS)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_hyperparameters(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set`` values: ``["double_q=false", "net_arch=[64, 64]"]`` -> ``{"double_q": False, "net_arch": (64, 64)}``
    (JSON values; anything else stays a string)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"workbench: --set takes NAME=VALUE (for example --set learning_rate=3e-4), got {pair!r}")
        key, value = pair.split("=", 1)
        parsed = _parse_value(value)
        out[key.strip()] = tuple(parsed) if isinstance(parsed, list) else parsed
    return out


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``workbench --help``)."""
    agents = ", ".join(AGENT_NAMES)
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Train and play reinforcement-learning agents; every run is a live session.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,play,export,sweep,pbt,serve,card}")

    train = sub.add_parser(
        "train",
        help="train an agent on a gymnasium env",
        description=f"Train an agent on a registered gymnasium env. Agents: {agents}.",
        epilog=_preset_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the listing's one line per env
    )
    train.add_argument("env", help="registered gymnasium id, e.g. CartPole-v1")
    train.add_argument("--agent", default="ppo", type=str.lower, help=f"algorithm: {agents} (default ppo)")
    train.add_argument(
        "--steps", type=int, default=None, help="env steps to train (default: the preset's budget, else 100000)"
    )
    train.add_argument(
        "--no-preset", action="store_true", help="ignore the tuned rl-baselines3-zoo preset for this env and agent"
    )
    train.add_argument("--seed", type=int, default=None, help="random seed")
    train.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto (default: measured)")
    train.add_argument("--out", default=None, help="save the run to this directory (or .zip) when done")
    train.add_argument("--memory", action="store_true", help="also save the replay memory")
    train.add_argument(
        "--overwrite", action="store_true", help="let --out replace an existing file or directory that is not a run"
    )
    train.add_argument("--resume", default=None, metavar="RUN", help="continue a saved run")
    train.add_argument("--eval-every", type=int, default=None, help="evaluate every N env steps")
    train.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation (default 5)")
    train.add_argument("--num-workers", type=int, default=1, help="worker processes or Ray actors (default 1)")
    train.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "inprocess", "local", "ray"],
        help="where env steps run with several workers (default auto: measured)",
    )
    train.add_argument(
        "--envs-per-worker", type=int, default=None, help="envs in each worker (default: enough for the agent's n_envs)"
    )
    train.add_argument(
        "--double-buffer",
        action="store_true",
        help="with --backend local: each worker steps half of its envs while the other half's actions are decided "
        "(an even --envs-per-worker; docs/parallel.md)",
    )
    train.add_argument("--ray-address", default=None, help="join this Ray cluster ('auto' for the running one)")
    train.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="override a hyperparameter (repeatable)"
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    train.add_argument("--tensorboard", default=None, metavar="DIR", help="also log to TensorBoard event files in DIR")
    train.add_argument(
        "--mlflow",
        default=None,
        metavar="URI",
        help="also log to MLflow: a directory (local file store, e.g. mlruns) or a tracking server's URI",
    )
    train.add_argument("--wandb", action="store_true", help="also log to Weights & Biases, offline (runs/wandb)")

    play = sub.add_parser("play", help="play a saved agent", description="Play a saved agent deterministically.")
    play.add_argument("run", help="a saved run (directory or .zip)")
    play.add_argument("--env", default=None, help="env id (default: the one the run was trained on)")
    play.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    play.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    play.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps or auto")
    play.add_argument(
        "--human",
        action="store_true",
        help="play it yourself: RUN is an env id, keys move (a pygame window); see docs/videos.md",
    )
    play.add_argument(
        "--record", default=None, metavar="DIR", help="with --human: save the episodes played as a wb.Dataset in DIR"
    )
    play.add_argument("--fps", type=float, default=None, help="with --human: env steps per second")
    _add_allow_encoder(play)

    export = sub.add_parser(
        "export",
        help="export a saved agent's deterministic policy (ONNX)",
        description="Write a saved agent's deterministic policy, observation normalization and action scaling "
        "baked in, to run without this library; a JSON sidecar OUT.json describes its input and output.",
    )
    export.add_argument("run", help="a saved run (directory or .zip)")
    export.add_argument("out", help="the model file: .onnx (run it with onnxruntime)")
    export.add_argument(
        "--action-mask",
        action="store_true",
        help="add a bool input action_mask (Discrete and MultiDiscrete actions): the best allowed action",
    )
    export.add_argument("--overwrite", action="store_true", help="replace OUT even when it is not an earlier export")
    _add_allow_encoder(export)
    card = sub.add_parser(
        "card",
        help="write a run's model card (README.md)",
        description="Write README.md in a run's folder: what was trained, an evaluation table, curves, the last "
        "video, how to load and play it. RUN is a saved run or a session's checkpoint_dir (its latest/ is read).",
    )
    card.add_argument("run", help="a saved run, or a checkpoint_dir holding latest/")
    card.add_argument("--env", default=None, help="env id to evaluate on (default: the one the run was trained on)")
    card.add_argument("--episodes", type=int, default=10, help="evaluation episodes (default 10)")
    card.add_argument("--seed", type=int, default=0, help="seed of the first evaluation episode (default 0)")
    card.add_argument("--no-eval", action="store_true", help="play no episodes: show the last eval_reward")
    card.add_argument(
        "--overwrite", action="store_true", help="replace a README.md or curves.png there that no card wrote"
    )
    from .sweeps.cli import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    from .sweeps.pbt_cli import add_parser as add_pbt_parser

    add_pbt_parser(sub)
    _add_serve_parser(sub, agents)
    return parser


def _preset_listing(width: int = 100) -> str:
    """The tuned presets ``train`` uses for an (env, agent) pair, one env a line, with the extra each needs.
    ``workbench.presets`` imports no torch, so the help stays quick."""
    import textwrap

    from .presets import PRESETS

    by_env: dict[str, list[str]] = {}
    extras: dict[str, str] = {}
    for (env_id, agent), spec in PRESETS.items():
        by_env.setdefault(env_id, []).append(agent)
        if spec.required_extra:
            extras[env_id] = spec.required_extra
    lines = textwrap.wrap(
        "presets (rl-baselines3-zoo's settings and budget, used unless --no-preset; "
        'an env marked [extra] needs pip install "rl-workbench[extra]"):',
        width,
    )
    for env_id in sorted(by_env, key=str.lower):
        extra = f" [{extras[env_id]}]" if env_id in extras else ""
        text = f"{env_id}{extra}: {', '.join(sorted(by_env[env_id]))}"
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def _add_allow_encoder(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-encoder",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="import and build the custom encoder the run was saved with (its import path, e.g. "
        "mypkg.encoders:MyEncoder or mypkg.encoders.MyEncoder); loading runs that code, so it is refused "
        "unless allowed; repeat for several",
    )


def _allowed_encoders(values: Sequence[str]) -> list[str]:
    """``--allow-encoder`` values as the import paths a saved run stores (``module.Class``):
    ``module:Class`` (the entry-point spelling) and ``module.Class`` both name the class."""
    out = []
    for value in values:
        module, colon, name = value.strip().rpartition(":")
        path = f"{module}.{name}" if colon else value.strip()
        if not path or "." not in path or path.startswith(".") or path.endswith("."):
            raise ValueError(
                f"--allow-encoder {value!r} is not an import path: write MODULE:CLASS, e.g. mypkg.encoders:MyEncoder"
            )
        out.append(path)
    return out


SERVE_TOKEN_ENV = "WORKBENCH_SERVE_TOKEN"


def _add_serve_parser(sub: Any, agents: str) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve a session's act/feedback over HTTP and WebSocket; the application drives the loop",
        description="Serve an external session: clients POST /act and /feedback (or use wb.RemoteSession) and the "
        "agent learns from their feedback. SIGTERM or Ctrl-C stops the run and saves it where --save says. "
        f"Agents: {agents}. See docs/serve.md.",
    )
    serve.add_argument(
        "target",
        help="a saved run to continue (directory or .zip), or a gymnasium id for the spaces "
        "of a new run, e.g. CartPole-v1",
    )
    serve.add_argument("--agent", default="ppo", type=str.lower, help="algorithm of a new run (default ppo)")
    serve.add_argument(
        "--n-envs",
        type=int,
        default=None,
        help="env slots of a new run's agent: concurrent episodes it learns from (default the agent's)",
    )
    serve.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a new run's hyperparameter (repeatable)"
    )
    serve.add_argument("--seed", type=int, default=None, help="random seed")
    serve.add_argument(
        "--steps",
        type=int,
        default=100_000,
        help="transitions to learn from (default 100000); then the learned policy goes on answering",
    )
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1, loopback)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument(
        "--token",
        default=None,
        help=f"token clients must send (default: ${SERVE_TOKEN_ENV}); needed for a non-loopback --host",
    )
    serve.add_argument("--save", default=None, metavar="PATH", help="save the run here when stopped")
    serve.add_argument("--memory", action="store_true", help="also save the replay memory")
    serve.add_argument(
        "--overwrite", action="store_true", help="let --save replace an existing file or directory that is not a run"
    )
    serve.add_argument(
        "--episode-timeout",
        type=float,
        default=60.0,
        help="end an episode with no call for this many seconds, freeing its slot (default 60)",
    )
    serve.add_argument("--max-body", type=int, default=1 << 20, help="request body limit in bytes (default 1 MiB)")
    serve.add_argument("--no-batch", action="store_true", help="answer every act on its own, not in batches")


def _train(args: argparse.Namespace) -> int:
    from .agents import AGENTS
    from .presets import PRESETS, preset
    from .session import Session

    spec = None if args.resume or args.no_preset else PRESETS.get((args.env, args.agent))
    if args.steps is None:
        args.steps = spec.steps if spec is not None else 100_000
    if args.steps <= 0:
        raise SystemExit(f"workbench: --steps must be positive, got {args.steps}")
    if args.out:
        from .checkpoint import check_save_path

        try:  # before training: a bad --out must not cost the run
            check_save_path(args.out, overwrite=args.overwrite)
        except OSError as exc:
            raise SystemExit(f"workbench: --out {exc}") from None
    kwargs: dict[str, Any] = {
        "eval_every": args.eval_every,
        "eval_episodes": args.eval_episodes,
        "num_workers": args.num_workers,
        "backend": args.backend,
    }
    if args.envs_per_worker is not None:
        kwargs["envs_per_worker"] = args.envs_per_worker
    if args.double_buffer:
        kwargs["double_buffer"] = True
    if args.ray_address is not None:
        if args.backend != "ray":
            raise SystemExit("workbench: --ray-address needs --backend ray")
        kwargs["ray_address"] = args.ray_address
    sinks = _sinks(args)
    if sinks:
        kwargs["sinks"] = sinks
    if args.resume:
        session = Session.reopen(args.resume, args.env, device=args.device, **kwargs)
        if args.seed is not None:
            session.seed = args.seed
    else:
        if args.agent not in AGENTS:
            raise SystemExit(f"workbench: unknown agent {args.agent!r}; choose from {', '.join(_agent_names())}")
        if spec is not None:
            # Tuned settings first; --set still overrides single values.
            print(f"using the rl-baselines3-zoo preset for {args.agent} on {args.env} (--no-preset to skip)")
            try:
                agent = preset(
                    args.env, args.agent, seed=args.seed, device=args.device, **parse_hyperparameters(args.set)
                ).agent
            except ModuleNotFoundError as exc:  # the env's extra is missing: the message names the install line
                raise SystemExit(f"workbench: {exc}") from None
        else:
            agent = AGENTS[args.agent](args.env, seed=args.seed, device=args.device, **parse_hyperparameters(args.set))
        session = Session(agent, args.env, seed=args.seed, **kwargs)
    session.run(args.steps, progress=not args.no_progress)
    reward = session.signals.get("episode_reward")
    if reward is not None and len(reward) > 0:
        rewards = f"mean reward (last {min(10, len(reward))}) {reward.mean(last=10):.2f}"
    else:
        rewards = "no episode finished yet"
    print(f"{session.status}: {session.steps} steps, {session.episodes} episodes, {rewards}")
    if args.out:
        path = session.save(args.out, memory=args.memory, overwrite=args.overwrite)
        print(f"saved to {path}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import os
    import signal
    import threading

    from .session import Session

    if args.steps <= 0:
        raise SystemExit(f"workbench: --steps must be positive, got {args.steps}")
    token = args.token if args.token is not None else os.environ.get(SERVE_TOKEN_ENV) or None
    if args.save:
        from .checkpoint import check_save_path

        try:  # before serving: a bad --save must not cost the run, nor be found out at the end
            check_save_path(args.save, overwrite=args.overwrite)
        except OSError as exc:
            raise SystemExit(f"workbench: --save {exc}") from None
    if os.path.exists(args.target):
        if args.set or args.n_envs is not None:
            raise SystemExit("workbench: --set and --n-envs are for a new run; a saved run keeps its own")
        seed = {} if args.seed is None else {"seed": args.seed}
        session = Session.reopen(args.target, external=True, **seed)
    else:
        from .agents import AGENTS
        from .envs.core import as_env_source

        if args.agent not in AGENTS:
            raise SystemExit(f"workbench: unknown agent {args.agent!r}; choose from {', '.join(_agent_names())}")
        try:
            obs_space, act_space = as_env_source(args.target).spaces()
        except Exception as exc:
            raise SystemExit(f"workbench: {args.target!r} is neither a saved run nor a gymnasium id ({exc})") from None
        options = parse_hyperparameters(args.set)
        if args.n_envs is not None:
            options["n_envs"] = args.n_envs
        agent = AGENTS[args.agent](observation_space=obs_space, action_space=act_space, seed=args.seed, **options)
        session = Session.external(agent, seed=args.seed)
    try:
        server = session.serve(
            args.host,
            args.port,
            token,
            episode_timeout=args.episode_timeout,
            max_body=args.max_body,
            batch=not args.no_batch,
        )
    except ImportError as exc:
        raise SystemExit(f"workbench: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"workbench: {exc}") from None
    stopping = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        session.start(steps=args.steps)
        print(
            f"serving {session.agent.algorithm} on {server.url} (POST /act, POST /feedback, WS /ws; "
            f"token {'required' if token else 'not required'}); SIGTERM or Ctrl-C stops",
            flush=True,
        )
        while not stopping.wait(0.5):
            pass
        print(f"{received[0]}: stopping", flush=True)
        server.close()
        session.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"{session.status}: {session.steps} steps, {session.episodes} episodes", flush=True)
    if args.save:
        try:
            path = session.save(args.save, memory=args.memory, overwrite=args.overwrite)
        except OSError as exc:
            print(f"workbench: not saved: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"saved to {path}", flush=True)
    return 0


def _sinks(args: argparse.Namespace) -> list[Any]:
    """The experiment trackers asked for with --tensorboard, --mlflow and --wandb."""
    sinks: list[Any] = []
    try:
        if args.tensorboard:
            from .tracking import TensorBoard

            sinks.append(TensorBoard(args.tensorboard))
        if args.mlflow:
            from .tracking import MLflow

            sinks.append(MLflow(args.mlflow))
        if args.wandb:
            from .tracking import WandB

            sinks.append(WandB(offline=True))
    except ImportError as exc:
        raise SystemExit(f"workbench: {exc}") from None
    return sinks


def _card(args: argparse.Namespace) -> int:
    from .card import write_card

    try:
        card = write_card(
            args.run,
            env=args.env,
            episodes=args.episodes,
            seed=args.seed,
            evaluate=not args.no_eval,
            overwrite=args.overwrite,
        )
    except (FileNotFoundError, FileExistsError, IsADirectoryError) as exc:
        raise SystemExit(f"workbench: {exc}") from None
    if card.evaluation is not None:
        e = card.evaluation
        print(f"mean return {e.mean:.2f} +- {e.std:.2f} over {e.episodes} episodes (seed {e.seed})")
    print(f"wrote {card.path}")
    return 0


def _play(args: argparse.Namespace) -> int:
    from .agents.saving import agent_from_run, read_saved

    if args.human:
        from .human import play_in_window

        return play_in_window(args.run, record=args.record, fps=args.fps, seed=args.seed, episodes=args.episodes)

    run = read_saved(args.run)  # a directory or a .zip: the env id is in its meta.json either way
    agent = agent_from_run(run, device=args.device, allow_encoders=_allowed_encoders(args.allow_encoder)).eval()
    env = args.env or run.meta.get("session", {}).get("env_id")
    if env is None:
        raise SystemExit("workbench: the run does not name its env; pass --env ID")
    returns = agent.play(env, episodes=args.episodes, seed=args.seed)
    for i, r in enumerate(returns, 1):
        print(f"episode {i}: return {r:.2f} ({returns.lengths[i - 1]} steps)")
    print(f"mean return {sum(returns) / len(returns):.2f}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from .agents.saving import agent_from_run, read_saved

    run = read_saved(args.run)
    agent = agent_from_run(run, allow_encoders=_allowed_encoders(args.allow_encoder)).eval()
    try:
        path = agent.export(args.out, action_mask=args.action_mask, overwrite=args.overwrite)
    except (ImportError, OSError) as exc:  # a missing extra, a file that is not an export, a full disk
        raise SystemExit(f"workbench: {exc}") from None
    print(f"exported the deterministic {agent.algorithm} policy to {path} (sidecar {path}.json)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "export":
            return _export(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "card":
            return _card(args)
        if args.command == "sweep":
            from .sweeps.cli import run as run_sweep

            return run_sweep(args)
        if args.command == "pbt":
            from .sweeps.pbt_cli import run as run_pbt

            return run_pbt(args)
        return _play(args)
    except (ValueError, TypeError) as exc:
        print(f"workbench: error: {exc}", file=sys.stderr)
        return 2
