"""Sparse rewards: Hindsight Experience Replay on bit flipping and FetchReach, and RND on MountainCar or MiniGrid.

* ``her``: the HER paper's bit-flipping task (``BitFlipping-v0``, 15 bits by default): DQN with
  ``wb.HerReplay(strategy="future", n_sampled_goal=4)``, DQN alone, and Stable-Baselines3's DQN with its
  ``HerReplayBuffer`` at the same settings (when stable-baselines3 is installed), interleaved seed by seed
  in this same run. Prints per run the wall time and the success rate of 100 deterministic episodes.
* ``fetch``: gymnasium-robotics' ``FetchReach-v4`` (``pip install rl-workbench[robotics]``) with SAC and
  ``HerReplay`` against SB3's SAC with ``HerReplayBuffer``, rl-baselines3-zoo's settings (``FETCH_SETTINGS``):
  the wall time and the success rate of ``--episodes`` deterministic episodes.
* ``rnd``: ``MountainCar-v0`` (or ``--minigrid MiniGrid-DoorKey-5x5-v0``) with PPO plus ``wb.RND()`` against PPO
  alone: the eval return of 10 (MiniGrid: 20) deterministic episodes and how many of them reached the goal, and
  the wall time.

    python benchmarks/sparse.py her --seeds 3 --steps 12000
    python benchmarks/sparse.py fetch --seeds 3 --steps 20000
    python benchmarks/sparse.py rnd --seeds 3 --steps 100000
    python benchmarks/sparse.py rnd --seeds 3 --steps 30000 --raw-rewards   # no reward normalisation
    python benchmarks/sparse.py rnd --seeds 3 --steps 100000 --minigrid MiniGrid-DoorKey-5x5-v0
    python benchmarks/sparse.py her --bits 8 --steps 3000 --no-sb3     # a quick look

Not part of the test suite: results are pasted into docs/sparse.md with the budget they had.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import numpy as np
import torch

import workbench as wb
from workbench.envs.goals import BitFlippingEnv

# DQN settings shared by both libraries on bit flipping.
HER_SETTINGS = dict(
    learning_rate=1e-3,
    batch_size=256,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.98,
    train_freq=16,
    gradient_steps=8,
    target_update_interval=1000,
    tau=1.0,
    exploration_fraction=0.2,
    exploration_final_eps=0.05,
    net_arch=(256,),
)


def success_rate(act, n_bits: int, episodes: int = 100, seed: int = 10_000) -> float:
    """The share of ``episodes`` that end with ``info["is_success"]`` under ``act(obs) -> action``."""
    env = BitFlippingEnv(n_bits)
    wins = 0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, info = False, {}
        while not done:
            obs, _, terminated, truncated, info = env.step(act(obs))
            done = terminated or truncated
        wins += bool(info.get("is_success"))
    return wins / episodes


def run_workbench_her(n_bits: int, steps: int, seed: int, her: bool) -> tuple[float, float]:
    s = HER_SETTINGS
    env = BitFlippingEnv(n_bits)
    agent = wb.DQN(
        env,
        seed=seed,
        learning_rate=s["learning_rate"],
        batch_size=s["batch_size"],
        buffer_size=s["buffer_size"],
        learning_starts=s["learning_starts"],
        gamma=s["gamma"],
        train_freq=s["train_freq"],
        gradient_steps=s["gradient_steps"],
        target_update_interval=s["target_update_interval"],
        tau=s["tau"],
        exploration=wb.EpsilonGreedy(1.0, s["exploration_final_eps"], s["exploration_fraction"]),
        net_arch=s["net_arch"],
        replay=wb.HerReplay(strategy="future", n_sampled_goal=4) if her else None,
    )
    session = wb.Session(agent, env, seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    agent.eval()
    return wall, success_rate(lambda obs: agent.act(obs), n_bits)


def run_sb3_her(n_bits: int, steps: int, seed: int) -> tuple[float, float]:
    from stable_baselines3 import DQN, HerReplayBuffer

    s = HER_SETTINGS
    env = BitFlippingEnv(n_bits)  # SB3's vector env turns its truncation into TimeLimit.truncated
    model = DQN(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
        learning_rate=s["learning_rate"],
        batch_size=s["batch_size"],
        buffer_size=s["buffer_size"],
        learning_starts=s["learning_starts"],
        gamma=s["gamma"],
        train_freq=s["train_freq"],
        gradient_steps=s["gradient_steps"],
        target_update_interval=s["target_update_interval"],
        tau=s["tau"],
        exploration_fraction=s["exploration_fraction"],
        exploration_final_eps=s["exploration_final_eps"],
        policy_kwargs=dict(net_arch=list(s["net_arch"])),
        seed=seed,
        device="cpu",
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    return wall, success_rate(lambda obs: int(model.predict(obs, deterministic=True)[0]), n_bits)


# rl-baselines3-zoo's SAC+HER settings for FetchReach (hyperparams/sac.yml, FetchReach-v1): 20,000 steps, buffer 1e6,
# batch 256, gamma 0.95, lr 1e-3, learning_starts 1000, ent_coef auto, net [64, 64], one critic, HER future with 4
# sampled goals. Left out in both libraries: the zoo's VecNormalize and TimeFeatureWrapper (HerReplay refuses
# observation normalisation: it relabels goals in the raw observations).
FETCH_SETTINGS = dict(
    buffer_size=1_000_000,
    batch_size=256,
    gamma=0.95,
    learning_rate=1e-3,
    learning_starts=1000,
    net_arch=(64, 64),
    n_critics=1,
)


def make_fetch(env_id: str):
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    return gym.make(env_id)


def fetch_success(act, env_id: str, episodes: int, seed: int = 10_000) -> float:
    """The share of ``episodes`` whose last step has ``info["is_success"]`` under ``act(obs) -> action``."""
    env = make_fetch(env_id)
    wins = 0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, info = False, {}
        while not done:
            obs, _, terminated, truncated, info = env.step(act(obs))
            done = terminated or truncated
        wins += bool(info.get("is_success"))
    env.close()
    return wins / episodes


def run_workbench_fetch(env_id: str, steps: int, seed: int, episodes: int) -> tuple[float, float]:
    env = make_fetch(env_id)
    agent = wb.SAC(
        env, seed=seed, ent_coef="auto", replay=wb.HerReplay(strategy="future", n_sampled_goal=4), **FETCH_SETTINGS
    )
    session = wb.Session(agent, env, seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    agent.eval()
    return wall, fetch_success(lambda obs: agent.act(obs, deterministic=True), env_id, episodes)


def run_sb3_fetch(env_id: str, steps: int, seed: int, episodes: int) -> tuple[float, float]:
    from stable_baselines3 import SAC, HerReplayBuffer

    s = dict(FETCH_SETTINGS)
    net_arch, n_critics = list(s.pop("net_arch")), s.pop("n_critics")
    model = SAC(
        "MultiInputPolicy",
        make_fetch(env_id),
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
        ent_coef="auto",
        policy_kwargs=dict(net_arch=net_arch, n_critics=n_critics),
        seed=seed,
        device="cpu",
        **s,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    return wall, fetch_success(lambda obs: model.predict(obs, deterministic=True)[0], env_id, episodes)


def run_rnd(
    steps: int,
    seed: int,
    rnd: bool,
    raw_rewards: bool = False,
    coef: float = 1.0,
    update_proportion: float = 1.0,
    warmup: int = 0,
) -> tuple[float, float, int]:
    # rl-baselines3-zoo's MountainCar-v0 PPO settings (normalize, 16 envs, n_steps 16, lambda 0.98, 4 epochs);
    # raw_rewards: without the zoo's reward normalisation (the observations stay normalised).
    agent = wb.PPO(
        "MountainCar-v0",
        seed=seed,
        n_envs=16,
        n_steps=16,
        gae_lambda=0.98,
        gamma=0.99,
        n_epochs=4,
        ent_coef=0.0,
        batch_size=64,
        learning_rate=3e-4,
        clip_range=0.2,
        normalize_observations=True,
        normalize_rewards=not raw_rewards,
        intrinsic=wb.RND(update_proportion=update_proportion, warmup=warmup) if rnd else None,
        intrinsic_coef=coef,
    )
    session = wb.Session(agent, "MountainCar-v0", seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    returns = agent.play("MountainCar-v0", episodes=10, seed=10_000 + seed)
    return wall, float(np.mean(returns)), int(sum(r > -200 for r in returns))


def make_minigrid(env_id: str):
    """A MiniGrid env as a flat vector: the agent's 7x7 view (object, colour, state per cell), no mission text."""
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the MiniGrid ids)
    from minigrid.wrappers import ImgObsWrapper

    return gym.wrappers.FlattenObservation(ImgObsWrapper(gym.make(env_id)))


def run_rnd_minigrid(
    env_id: str,
    steps: int,
    seed: int,
    rnd: bool,
    coef: float,
    ent_coef: float = 0.0,
    update_proportion: float = 1.0,
    warmup: int = 0,
) -> tuple[float, float, int, float]:
    # rl-baselines3-zoo's PPO settings for MiniGrid-DoorKey-5x5 (8 envs, n_steps 128, batch 64, lambda 0.95,
    # 10 epochs, lr 2.5e-4, observations and rewards normalised), on the flattened 7x7 view; ent_coef the zoo's 0.
    factory = functools.partial(make_minigrid, env_id)
    agent = wb.PPO(
        factory,
        seed=seed,
        n_envs=8,
        n_steps=128,
        batch_size=64,
        gae_lambda=0.95,
        gamma=0.99,
        n_epochs=10,
        ent_coef=ent_coef,
        learning_rate=2.5e-4,
        clip_range=0.2,
        normalize_observations=True,
        normalize_rewards=True,
        intrinsic=wb.RND(update_proportion=update_proportion, warmup=warmup) if rnd else None,
        intrinsic_coef=coef,
    )
    session = wb.Session(agent, factory, seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    trained = np.asarray(session.signals["episode_reward"].values[-100:], dtype=float)
    train_success = float((trained > 0).mean()) if trained.size else 0.0  # the last 100 training episodes
    returns = agent.play(factory(), episodes=20, seed=10_000 + seed)
    return wall, float(np.mean(returns)), int(sum(r > 0 for r in returns)), train_success


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=["her", "fetch", "rnd"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (her: 20000, rnd: 100000)")
    parser.add_argument("--bits", type=int, default=15)
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--env-id", default="FetchReach-v4", help="fetch: the gymnasium-robotics id")
    parser.add_argument("--episodes", type=int, default=50, help="fetch: deterministic eval episodes per run")
    parser.add_argument("--minigrid", default=None, help="rnd: a MiniGrid id (MiniGrid-DoorKey-5x5-v0) for MountainCar")
    parser.add_argument("--coef", type=float, default=1.0, help="rnd: intrinsic_coef")
    parser.add_argument("--ent-coef", type=float, default=0.0, help="rnd --minigrid: PPO's ent_coef (zoo: 0)")
    parser.add_argument("--raw-rewards", action="store_true", help="rnd: without the zoo's reward normalisation")
    parser.add_argument(
        "--update-proportion", type=float, default=1.0, help="rnd: RND's update_proportion (CleanRL: 0.25)"
    )
    parser.add_argument("--warmup", type=int, default=0, help="rnd: RND's warmup (steps per env without the bonus)")
    parser.add_argument("--rnd-only", action="store_true", help="rnd: PPO+RND alone, without the PPO baseline")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: dict[str, list[tuple]] = {}
    if args.task == "her":
        steps = args.steps or 12_000
        runs = {
            "workbench DQN+HER": lambda seed: run_workbench_her(args.bits, steps, seed, True),
            "workbench DQN": lambda seed: run_workbench_her(args.bits, steps, seed, False),
        }
        if not args.no_sb3:
            runs["SB3 DQN+HerReplayBuffer"] = lambda seed: run_sb3_her(args.bits, steps, seed)
        print(f"bit flipping, {args.bits} bits, {steps} env steps per run, success rate of 100 episodes")
    elif args.task == "fetch":
        steps = args.steps or 20_000
        runs = {"workbench SAC+HER": lambda seed: run_workbench_fetch(args.env_id, steps, seed, args.episodes)}
        if not args.no_sb3:
            runs["SB3 SAC+HerReplayBuffer"] = lambda seed: run_sb3_fetch(args.env_id, steps, seed, args.episodes)
        print(f"{args.env_id}, {steps} env steps per run, success rate of {args.episodes} episodes")
    else:
        steps = args.steps or 100_000
        raw = args.raw_rewards
        grid = args.minigrid
        runs = {
            "PPO+RND": lambda seed: run_rnd(steps, seed, True, raw, args.coef, args.update_proportion, args.warmup),
            "PPO": lambda seed: run_rnd(steps, seed, False, raw),
        }
        if grid:
            runs = {
                "PPO+RND": lambda seed: run_rnd_minigrid(
                    grid, steps, seed, True, args.coef, args.ent_coef, args.update_proportion, args.warmup
                ),
                "PPO": lambda seed: run_rnd_minigrid(grid, steps, seed, False, args.coef, args.ent_coef),
            }
            print(
                f"{grid}, {steps} env steps per run, intrinsic_coef {args.coef}, ent_coef {args.ent_coef}, "
                f"RND update_proportion {args.update_proportion}, warmup {args.warmup}, eval of 20 episodes"
            )
        else:
            print(
                f"MountainCar-v0, {steps} env steps per run, intrinsic_coef {args.coef}, RND update_proportion "
                f"{args.update_proportion}, warmup {args.warmup}, eval of 10 episodes"
                + (", rewards not normalised" if raw else "")
            )
        if args.rnd_only:
            del runs["PPO"]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name, run in runs.items():
            result = run(seed)
            rows.setdefault(name, []).append(result)
            print(f"  {name:26s} seed {seed}: " + ", ".join(f"{v:.3g}" for v in result), flush=True)
    print(
        "\n| run | "
        + (
            "success rate per seed"
            if args.task in ("her", "fetch")
            else (
                "eval return per seed (solved /20; success of the last 100 training episodes)"
                if args.minigrid
                else "eval return per seed (flag reached /10)"
            )
        )
        + " | median wall (s) |\n|---|---|---|"
    )
    for name, results in rows.items():
        if args.task in ("her", "fetch"):
            per_seed = ", ".join(f"{r[1]:.2f}" for r in results)
        else:
            per_seed = ", ".join(
                f"{r[1]:.2f} ({r[2]}; {r[3]:.2f})" if args.minigrid else f"{r[1]:.0f} ({r[2]})" for r in results
            )
        print(f"| {name} | {per_seed} | {statistics.median(r[0] for r in results):.0f} |")
    names = list(rows)
    if len(names) > 1 and names[-1].startswith("SB3"):
        ours, peer = (statistics.median(r[0] for r in rows[name]) for name in (names[0], names[-1]))
        print(f"wall time of {names[0]} / {names[-1]} (medians): {ours / peer:.2f}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
