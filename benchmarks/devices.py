"""CPU against GPU, eager against compiled: env steps per second (and, with ``--score``, time to a score).

Rows (the zoo's settings through ``wb.preset``): PPO on Atari Breakout (8 envs, Nature CNN), DQN on Atari
Pong (learning from step 1,000 so a short run updates), SAC on Pendulum, SAC on MuJoCo HalfCheetah-v5
(when the ``mujoco`` package is installed) and PPO on CartPole (where ``device="auto"`` must keep the CPU).
Each row trains in a session for ``--steps`` env steps on each device (``cpu``, and ``cuda`` where PyTorch
sees one), eagerly and, with ``--compile`` (on by default on a GPU), compiled; compile time is its own
column and is counted in the wall time. Every row also says what ``device="auto"`` picks for that agent and why.
``--sb3`` adds Stable-Baselines3's PPO on Breakout on the same devices, for the ratio the issue asks for
(PPO-Atari on a GPU: at least 5x this project's CPU throughput, and SB3's GPU throughput x 1.5).

Both libraries are timed alike: building the agent and its envs, compiling and a warm-up (``warm_steps``:
one PPO rollout, or the off-policy rows' ``learning_starts`` and a few updates) are not in ``steps/s``, which
counts the ``--steps`` that follow; ``wall s`` is the whole run, setup included. Both use torch's own thread
count (``Session(torch_threads=None)``; ``--threads N`` sets it for both). ``--workers N`` steps the envs in N
worker processes: ``backend="local"`` here, ``SubprocVecEnv`` for SB3.

    python benchmarks/devices.py                          # every row; on a CPU-only machine the CPU rows
    python benchmarks/devices.py --rows ppo-breakout --steps 4096 --sb3
    python benchmarks/devices.py --rows ppo-breakout --sb3 --workers 8      # envs in 8 worker processes
    python benchmarks/devices.py --rows ppo-cartpole,sac-pendulum --score

On a machine without CUDA it runs the CPU rows and says that the GPU rows need CUDA; on a GPU machine
``benchmarks/devices_gpu.sh`` runs the ``cuda``-marked tests and this benchmark in one command.
Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import workbench as wb

# name: (agent, env id, preset overrides, env steps, score for --score, at most this many steps for it)
ROWS: dict[str, tuple[str, str, dict[str, Any], int, float, int]] = {
    "ppo-breakout": ("ppo", "BreakoutNoFrameskip-v4", {}, 2048, 10.0, 2_000_000),
    "dqn-pong": ("dqn", "PongNoFrameskip-v4", {"learning_starts": 1000}, 3000, 0.0, 2_000_000),
    "sac-pendulum": ("sac", "Pendulum-v1", {"learning_starts": 100}, 1500, -200.0, 20_000),
    "sac-halfcheetah": ("sac", "HalfCheetah-v5", {"learning_starts": 100}, 1500, 3000.0, 300_000),
    "ppo-cartpole": ("ppo", "CartPole-v1", {}, 8192, 475.0, 200_000),
}


def available(row: str) -> str | None:
    """Why ``row`` cannot run here (a missing package), or None."""
    env_id = ROWS[row][1]
    if "NoFrameskip" in env_id and importlib.util.find_spec("ale_py") is None:
        return "needs ale-py (pip install 'rl-workbench[atari]')"
    if env_id.startswith("HalfCheetah") and importlib.util.find_spec("mujoco") is None:
        return "needs the mujoco package (pip install mujoco)"
    return None


def build(row: str, device: str, compile_mode: bool | str) -> Any:
    """The row's agent (the zoo's preset) on ``device``."""
    algo, env_id, over, *_ = ROWS[row]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return wb.preset(env_id, algo, seed=0, device=device, compile=compile_mode, **over).agent


def warm_steps(row: str) -> int:
    """Env steps run before the timed part: one PPO rollout, or the off-policy row's learning_starts and
    a few hundred updates (so that its first updates, and any compiling, are behind it)."""
    algo, _, over, *_ = ROWS[row]
    if algo == "ppo":
        settings = wb.PRESETS[(ROWS[row][1], "ppo")].hyperparameters
        return int(settings.get("n_envs", 1)) * int(settings.get("n_steps", 2048))
    return int(over.get("learning_starts", 100)) + 200


def train(
    row: str, device: str, compile_mode: bool | str, steps: int, score: bool, workers: int, threads: int | None
) -> dict[str, Any]:
    """One session of the row: env steps per second after the warm-up, and the whole wall time."""
    _, env_id, _, _, target, cap = ROWS[row]
    start = time.perf_counter()
    agent = build(row, device, compile_mode)
    stop_when = None
    if score:

        def stop_when(s: Any) -> bool:
            rewards = s.signals.get("episode_reward")
            return rewards is not None and len(rewards) >= 10 and rewards.mean(last=10) >= target

    options: dict[str, Any] = {"num_workers": workers, "backend": "local"} if workers > 1 else {}
    session = wb.Session(agent, env_id, seed=0, stop_when=stop_when, torch_threads=threads, **options)
    if score:
        session.run(steps=cap)
        timed_steps, timed = session.steps, time.perf_counter() - start
    else:
        # One run (worker processes live for one run), its clock started once the warm-up steps are done.
        warm = warm_steps(row)
        session.start(steps=warm + steps)
        # Past the warm-up's last step, so that the update of its rollout is behind the clock's start too
        # (SB3's warm-up learn() ends with that update).
        while session.steps <= warm and session.is_alive:
            time.sleep(0.005)
        before, t0 = session.steps, time.perf_counter()
        session.wait()
        timed_steps, timed = session.steps - before, time.perf_counter() - t0
        if session.status != "finished":
            raise SystemExit(f"{row} on {device}: the run ended {session.status}: {session.error!r}")
    wall = time.perf_counter() - start
    return {
        "sps": timed_steps / timed,
        "wall": wall,
        "steps": session.steps,
        "compile": agent.compile_time,
        "compiled": agent.compiled,
        "reached": session.status == "finished" and score and session.steps < cap,
    }


def sb3_ppo_breakout(device: str, steps: int, workers: int) -> float:
    """SB3's PPO CnnPolicy on the same Breakout frames and settings: env steps per second after one
    rollout and update (SB3's model and envs are built before its clock starts, as ours are)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from workbench.envs import make_env

    factories = [lambda: make_env("BreakoutNoFrameskip-v4") for _ in range(8)]
    env = SubprocVecEnv(factories) if workers > 1 else DummyVecEnv(factories)
    model = PPO(
        "CnnPolicy",
        env,
        n_steps=128,
        n_epochs=4,
        batch_size=256,
        learning_rate=2.5e-4,
        clip_range=0.1,
        vf_coef=0.5,
        ent_coef=0.01,
        device=device,
        seed=0,
        verbose=0,
    )
    try:
        model.learn(total_timesteps=warm_steps("ppo-breakout"))
        start = time.perf_counter()
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated rows (default all): {','.join(ROWS)}")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: each row's)")
    parser.add_argument(
        "--compile",
        choices=("auto", "on", "off"),
        default="auto",
        help="compiled runs too: on, off, or auto (on where there is a GPU)",
    )
    parser.add_argument("--score", action="store_true", help="also the time to the row's score (long)")
    parser.add_argument("--sb3", action="store_true", help="also SB3's PPO on Breakout on each device")
    parser.add_argument("--workers", type=int, default=1, help="worker processes stepping the envs (default 1: none)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both libraries (default torch's)")
    args = parser.parse_args()
    if args.workers < 1 or (args.threads is not None and args.threads < 1):
        raise SystemExit(f"--workers and --threads take 1 or more, not {args.workers} and {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    has_cuda = torch.cuda.is_available()
    targets = ["cpu", "cuda"] if has_cuda else ["cpu"]
    compiled = args.compile == "on" or (args.compile == "auto" and has_cuda)
    modes: list[bool | str] = [False, True] if compiled else [False]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.workers} env worker(s); "
        f"devices: {', '.join(targets)}" + (f" ({torch.cuda.get_device_name(0)})" if has_cuda else "")
    )
    if not has_cuda:
        print(
            "the GPU rows need CUDA (torch.cuda.is_available() is False): only the CPU rows run here; "
            "on a GPU machine run benchmarks/devices_gpu.sh"
        )
    print(f"{'row':<16} {'device':<6} {'mode':<8} {'steps/s':>9} {'wall s':>8} {'compile s':>9}  auto picks")
    results: dict[tuple[str, str, bool | str], dict[str, Any]] = {}
    for row in rows:
        why = available(row)
        if why is not None:
            print(f"{row:<16} skipped: {why}")
            continue
        auto = build(row, "auto", False).device_choice
        for device in targets:
            for mode in modes:
                steps = args.steps or ROWS[row][3]
                r = train(row, device, mode, steps, False, args.workers, args.threads)
                results[(row, device, mode)] = r
                label = "compiled" if mode and r["compiled"] else ("eager" if not mode else "eager*")
                comp = f"{r['compile']:.1f}" if r["compile"] else "-"
                print(
                    f"{row:<16} {device:<6} {label:<8} {r['sps']:>9.0f} {r['wall']:>8.1f} {comp:>9}  "
                    f"{auto.device} ({auto.reason})",
                    flush=True,
                )
                if args.score:
                    s = train(row, device, mode, steps, True, args.workers, args.threads)
                    reached = (
                        f"reached {ROWS[row][4]:g} in {s['wall']:.0f} s, {s['steps']} steps"
                        if s["reached"]
                        else f"did not reach {ROWS[row][4]:g} in {s['steps']} steps ({s['wall']:.0f} s)"
                    )
                    print(f"{'':<16} {device:<6} {label:<8} time to score: {reached}", flush=True)
    if args.sb3 and "ppo-breakout" in rows and available("ppo-breakout") is None:
        steps = args.steps or ROWS["ppo-breakout"][3]
        for device in targets:
            sps = sb3_ppo_breakout(device, steps, args.workers)
            results[("sb3-ppo-breakout", device, False)] = {"sps": sps}
            print(f"{'sb3 ppo-breakout':<16} {device:<6} {'eager':<8} {sps:>9.0f}", flush=True)
    ours_cpu = results.get(("ppo-breakout", "cpu", False))
    best_gpu = max(
        (r["sps"] for (row, dev, _), r in results.items() if row == "ppo-breakout" and dev == "cuda"), default=None
    )
    if ours_cpu and best_gpu:
        print(f"PPO-Atari on the GPU: {best_gpu / ours_cpu['sps']:.1f}x this project's CPU throughput (goal >= 5x)")
        sb3_gpu = results.get(("sb3-ppo-breakout", "cuda", False))
        if sb3_gpu:
            print(f"PPO-Atari on the GPU: {best_gpu / sb3_gpu['sps']:.2f}x SB3's GPU throughput (goal >= 1.5x)")
    cartpole = [r for r in rows if r == "ppo-cartpole"]
    if cartpole:
        choice = build("ppo-cartpole", "auto", False).device_choice
        verdict = "keeps the CPU" if choice.device.type == "cpu" else f"picked {choice.device} (expected the CPU)"
        print(f"PPO CartPole: device='auto' {verdict}")


if __name__ == "__main__":
    main()
