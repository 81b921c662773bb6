"""Offline RL benchmark: learning CartPole from logged epsilon-greedy data, and off-policy evaluation.

For each seed: a DQN trains online for a while, then its greedy policy mixed with epsilon-random
actions (epsilon chosen so episodes average about 100) logs ``--transitions`` steps with the
behaviour's probabilities; BCQ and CQL train on that data alone (``--steps`` gradient steps,
10% of episodes held out), then play 20 episodes. Reported: the behaviour's mean return, each
agent's mean return (target: >= 400 on 4 of 5 seeds), and BCQ's doubly-robust estimates (``dr``,
``sdr``, on the held-out episodes, gamma 0.99) against the true discounted return of its policy
(target: within 15%).

    nice python benchmarks/offline.py --seeds 5                  # the issue's setting
    nice python benchmarks/offline.py --seeds 1 --transitions 20000 --steps 5000   # a quick look

With ``--pendulum``: a SAC trained ``--teacher-steps`` steps (half-trained) logs ``--transitions``
steps with its stochastic policy; CQL and IQL train on them and play 10 episodes, against the
behaviour's mean return (target: better on 4 of 5 seeds). d3rlpy side by side is not measured here.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import workbench as wb


def collect(seed: int, transitions: int, epsilon: float, teacher_steps: int) -> wb.Dataset:
    """``transitions`` steps of an epsilon-greedy DQN, with the behaviour's log-probabilities."""
    teacher = wb.DQN("CartPole-v1", seed=seed)
    wb.Session(teacher, "CartPole-v1", seed=seed).run(steps=teacher_steps)
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "te", "tr", "lp")}
    obs, _ = env.reset(seed=seed)
    for _ in range(transitions):
        greedy = int(teacher.act(obs, deterministic=True))
        a = int(rng.integers(2)) if rng.random() < epsilon else greedy
        p = 1 - epsilon + epsilon / 2 if a == greedy else epsilon / 2
        nxt, r, te, tr, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, te, tr, np.log(p)), strict=True):
            rows[k].append(v)
        obs = env.reset()[0] if te or tr else nxt
    return wb.Dataset(*(np.array(rows[k]) for k in ("o", "a", "r", "n", "te", "tr", "lp")),
                      observation_space=env.observation_space, action_space=env.action_space)


def collect_pendulum(seed: int, transitions: int, teacher_steps: int) -> wb.Dataset:
    """``transitions`` steps of a half-trained SAC's stochastic policy on Pendulum."""
    teacher = wb.SAC("Pendulum-v1", seed=seed)
    wb.Session(teacher, "Pendulum-v1", seed=seed).run(steps=teacher_steps)
    env = gym.make("Pendulum-v1")
    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "te", "tr")}
    obs, _ = env.reset(seed=seed)
    for _ in range(transitions):
        a = np.asarray(teacher.act(obs), dtype=np.float32)
        nxt, r, te, tr, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, te, tr), strict=True):
            rows[k].append(v)
        obs = env.reset()[0] if te or tr else nxt
    return wb.Dataset(*(np.array(rows[k]) for k in ("o", "a", "r", "n", "te", "tr")),
                      observation_space=env.observation_space, action_space=env.action_space)


def pendulum(args: argparse.Namespace) -> None:
    for seed in range(args.seeds):
        t0 = time.process_time()
        data = collect_pendulum(seed, args.transitions, args.teacher_steps)
        line = [f"seed {seed}: behaviour {data.episode_returns().mean():7.1f} ({data.num_episodes} episodes)"]
        for cls in (wb.CQL, wb.IQL):
            agent = cls(dataset=data, seed=seed)
            wb.Session(agent, dataset=data, seed=seed).run(steps=args.steps)
            line.append(f"{cls.__name__} {np.mean(agent.play('Pendulum-v1', episodes=10, seed=1000 + seed)):7.1f}")
        line.append(f"cpu {time.process_time() - t0:.0f}s")
        print(" | ".join(line), flush=True)


def discounted(lengths: list[int], gamma: float) -> float:
    """CartPole's discounted return of episodes of these lengths (reward 1 per step)."""
    return float(np.mean([(1 - gamma**n) / (1 - gamma) for n in lengths]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--transitions", type=int, default=50_000)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--epsilon", type=float, default=0.3)
    parser.add_argument("--teacher-steps", type=int, default=30_000)
    parser.add_argument("--pendulum", action="store_true", help="the Pendulum setting instead of CartPole")
    args = parser.parse_args()
    if args.pendulum:
        pendulum(args)
        return
    for seed in range(args.seeds):
        t0 = time.process_time()
        data = collect(seed, args.transitions, args.epsilon, args.teacher_steps)
        train, held = data.split(0.1, seed=seed)
        line = [f"seed {seed}: behaviour {data.episode_returns().mean():6.1f} ({data.num_episodes} episodes)"]
        for cls in (wb.BCQ, wb.CQL):
            agent = cls(dataset=train, seed=seed)
            wb.Session(agent, dataset=train, seed=seed).run(steps=args.steps)
            returns = agent.play("CartPole-v1", episodes=20, seed=1000 + seed)
            line.append(f"{cls.__name__} {np.mean(returns):6.1f}")
            if cls is wb.BCQ:
                est = wb.evaluate_offline(agent, held, gamma=0.99, fqe_steps=5000)
                truth = discounted(returns.lengths, 0.99)
                line.append(
                    f"true disc {truth:5.1f} dr {est['dr'].value:5.1f} ({est['dr'].value / truth - 1:+.0%}) "
                    f"sdr {est['sdr'].value:5.1f} ({est['sdr'].value / truth - 1:+.0%}) dm {est['dm'].value:5.1f}"
                )
        line.append(f"cpu {time.process_time() - t0:.0f}s")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
