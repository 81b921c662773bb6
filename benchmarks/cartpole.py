"""CartPole-v1: rl-workbench against Stable-Baselines3 at the same (rl-baselines3-zoo) settings.

For PPO (100k steps) and DQN (50k steps), over several seeds, both libraries train in this same run,
interleaved seed by seed so machine noise hits both alike. Prints per library and agent: the final
evaluation (10 deterministic episodes) per seed, seeds solved (eval >= 475), the median wall time, and
the ratio of medians (workbench / SB3; lower is faster).

    python benchmarks/cartpole.py                 # 5 seeds, PPO and DQN, with SB3 (pip install stable-baselines3)
    python benchmarks/cartpole.py --agents ppo --seeds 2 --no-sb3

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import workbench as wb

BUDGET = {"ppo": 100_000, "dqn": 50_000}
SOLVED = 475.0


def run_workbench(algo: str, seed: int) -> tuple[float, float]:
    cls = {"ppo": wb.PPO, "dqn": wb.DQN}[algo]
    agent = cls("CartPole-v1", seed=seed)  # the defaults are the zoo's CartPole settings
    session = wb.Session(agent, "CartPole-v1", seed=seed)
    t0 = time.perf_counter()
    session.run(steps=BUDGET[algo])
    wall = time.perf_counter() - t0
    returns = agent.play("CartPole-v1", episodes=10, seed=10_000 + seed)
    return wall, float(np.mean(returns))


def run_sb3(algo: str, seed: int) -> tuple[float, float]:
    import gymnasium as gym
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    def lin(start: float):
        return lambda progress_remaining: progress_remaining * start

    if algo == "ppo":
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=lin(1e-3),
            clip_range=lin(0.2),
            seed=seed,
            device="cpu",
        )
    else:
        env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
        model = DQN(
            "MlpPolicy",
            env,
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            policy_kwargs=dict(net_arch=[256, 256]),
            seed=seed,
            device="cpu",
        )
    t0 = time.perf_counter()
    model.learn(total_timesteps=BUDGET[algo])
    wall = time.perf_counter() - t0
    eval_env = gym.make("CartPole-v1")
    eval_env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    return wall, float(mean)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="ppo,dqn", help="comma-separated: ppo,dqn")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--no-sb3", action="store_true", help="skip Stable-Baselines3")
    args = parser.parse_args()
    torch.set_num_threads(1)  # both libraries get one torch thread, as the session uses

    libraries = {"workbench": run_workbench}
    if not args.no_sb3:
        libraries["sb3"] = run_sb3
    rows = []
    for algo in args.agents.split(","):
        results: dict[str, list[tuple[float, float]]] = {lib: [] for lib in libraries}
        for seed in range(args.seeds):
            for lib, fn in libraries.items():
                wall, score = fn(algo, seed)
                results[lib].append((wall, score))
                print(f"  {algo} {lib:9s} seed {seed}: {wall:6.1f} s  eval {score:6.1f}", flush=True)
        for lib, res in results.items():
            walls = [w for w, _ in res]
            scores = [s for _, s in res]
            rows.append((algo, lib, scores, statistics.median(walls)))

    print()
    header = ("agent", "library", "steps", "eval mean", "solved", "median wall", "ratio")
    print("{:5s} {:9s} {:>7s} {:>10s} {:>7s} {:>12s} {:>6s}".format(*header))
    medians = {(a, lib): m for a, lib, _, m in rows}
    for algo, lib, scores, median in rows:
        solved = sum(s >= SOLVED for s in scores)
        base = medians.get((algo, "sb3"))
        ratio = f"{median / base:6.2f}" if base else "     -"
        print(
            f"{algo:5s} {lib:9s} {BUDGET[algo]:7d} {np.mean(scores):7.1f}±{np.std(scores):<4.0f}"
            f"{solved:>4d}/{len(scores):<2d} {median:10.1f} s {ratio}"
        )
    print("\nratio = median wall time / SB3's median wall time in this same run (lower is faster)")


if __name__ == "__main__":
    main()
