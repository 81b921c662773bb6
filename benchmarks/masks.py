"""A masked-action task: rl-workbench's PPO with action masks against sb3-contrib's MaskablePPO, and DQN.

The task is ``workbench.envs.testing.MaskedTarget``: 20 actions, 10 of them forbidden in every state (a
new set every step, given by ``env.action_masks()``, sb3-contrib's convention), the env raising on a
forbidden action; the allowed target shown in the observation pays 1, 10 steps an episode. Random
allowed play scores 1 an episode, the best 10; at the default budget neither library has finished
learning, so the return compares learning per env step.

Both PPOs use the same settings (4 envs, 32 steps per env, minibatches of 64, 4 epochs, Adam 3e-4,
clip 0.2, gamma 0.99, GAE 0.95, 64x64 tanh networks, orthogonal init) and train in this same run,
interleaved seed by seed so machine noise hits both alike. After the budget, 20 deterministic masked
episodes give the return. Prints per seed and the medians of return and wall time, and the ratio of
medians (workbench / sb3-contrib; lower is faster). Our DQN with masks (no SB3 counterpart: SB3's DQN
takes no masks) runs on the same task and budget.

    python benchmarks/masks.py                       # 5 seeds, 1500 steps
    python benchmarks/masks.py --steps 10000 --no-dqn  # a longer run for the wall-time ratio
    python benchmarks/masks.py --seeds 3 --steps 3000 --no-sb3

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import workbench as wb
from workbench.envs.testing import MaskedTarget

N_ACTIONS, N_INVALID = 20, 10
EVAL_EPISODES = 20
PPO_SETTINGS = dict(
    n_steps=32,
    batch_size=64,
    n_epochs=4,
    learning_rate=3e-4,
    clip_range=0.2,
    gamma=0.99,
    gae_lambda=0.95,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
N_ENVS = 4


def make_env() -> MaskedTarget:
    return MaskedTarget(n_actions=N_ACTIONS, n_invalid=N_INVALID, mask_in="method")


def evaluate(act, seed: int) -> float:
    """Mean return of ``EVAL_EPISODES`` episodes of ``act(obs, mask) -> action``."""
    env, total = make_env(), 0.0
    for episode in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=10_000 + seed * 100 + episode)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs, env.action_masks()))
            total += reward
            done = terminated or truncated
    return total / EVAL_EPISODES


def run_workbench(algo: str, seed: int, steps: int) -> tuple[float, float]:
    if algo == "ppo":
        agent = wb.PPO(make_env, seed=seed, n_envs=N_ENVS, net_arch=(64, 64), normalize_advantage=True, **PPO_SETTINGS)
    else:
        agent = wb.DQN(
            make_env,
            seed=seed,
            learning_starts=200,
            train_freq=4,
            gradient_steps=1,
            batch_size=64,
            target_update_interval=250,
            learning_rate=1e-3,
            net_arch=(64, 64),
            exploration=wb.EpsilonGreedy(1.0, 0.05, 0.3),
        )
    session = wb.Session(agent, make_env, seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    if session.error is not None:
        raise session.error
    agent.eval()
    return wall, evaluate(lambda obs, mask: int(agent.act(obs, action_mask=mask)), seed)


def run_sb3(seed: int, steps: int) -> tuple[float, float]:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(make_env, n_envs=N_ENVS, seed=seed)
    model = MaskablePPO(
        "MlpPolicy",
        env,
        seed=seed,
        device="cpu",
        normalize_advantage=True,
        policy_kwargs=dict(net_arch=[64, 64]),
        **PPO_SETTINGS,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    return wall, evaluate(lambda obs, mask: int(model.predict(obs, action_masks=mask, deterministic=True)[0]), seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--no-sb3", action="store_true", help="skip sb3-contrib's MaskablePPO")
    parser.add_argument("--no-dqn", action="store_true", help="skip DQN")
    args = parser.parse_args()
    torch.set_num_threads(1)  # both libraries on one thread: a fair, quieter comparison

    names = ("workbench PPO", "sb3-contrib MaskablePPO", "workbench DQN")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for seed in range(args.seeds):
        results["workbench PPO"].append(run_workbench("ppo", seed, args.steps))
        if not args.no_sb3:
            results["sb3-contrib MaskablePPO"].append(run_sb3(seed, args.steps))
        if not args.no_dqn:
            results["workbench DQN"].append(run_workbench("dqn", seed, args.steps))
        print(
            f"seed {seed}: "
            + "; ".join(
                f"{name} return {rows[-1][1]:.2f} in {rows[-1][0]:.1f} s" for name, rows in results.items() if rows
            ),
            flush=True,
        )

    print(
        f"\nMaskedTarget({N_ACTIONS} actions, {N_INVALID} masked per state), {args.steps} steps, "
        f"{args.seeds} seeds (random allowed play: {10 / (N_ACTIONS - N_INVALID):.1f}, best: 10)"
    )
    medians = {}
    for name, rows in results.items():
        if not rows:
            continue
        walls, returns = zip(*rows)
        medians[name] = (statistics.median(walls), statistics.median(returns))
        print(
            f"{name:26s} median return {medians[name][1]:5.2f}  median wall {medians[name][0]:6.2f} s  "
            f"returns {[round(r, 2) for r in returns]}"
        )
    if "sb3-contrib MaskablePPO" in medians:
        ours, theirs = medians["workbench PPO"], medians["sb3-contrib MaskablePPO"]
        print(
            f"PPO wall-time ratio (workbench / sb3-contrib, medians): {ours[0] / theirs[0]:.2f}; "
            f"return ratio: {ours[1] / theirs[1]:.2f}"
        )


if __name__ == "__main__":
    main()
