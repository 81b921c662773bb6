"""CPU cost of one rollout's acting and one update of the zoo's CartPole PPO or A2C, in one process.

Acting is ``decide`` plus ``observe`` for a full rollout of random observations (no env); the update is
``agent.update()`` on it. Run it against two checkouts, interleaved, to compare them on a busy machine:

    python benchmarks/on_policy_cost.py ppo --fast auto --reps 20
    python <other checkout>/benchmarks/on_policy_cost.py ppo --reps 20

It measures the checkout it lives in (its own root comes first on ``sys.path``). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algo", choices=["ppo", "a2c"])
    parser.add_argument("--fast", default=None, choices=["auto", "off"], help="the agent's fast= (default: its own)")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    import numpy as np
    import torch

    import workbench as wb
    from workbench.loop import Transitions

    torch.set_num_threads(1)
    hyper = dict(wb.PRESETS[("CartPole-v1", args.algo)].hyperparameters)
    if args.fast:
        hyper["fast"] = args.fast
    agent = wb.AGENTS[args.algo]("CartPole-v1", seed=0, **hyper)
    c = agent.config
    rng = np.random.default_rng(0)
    no = np.zeros(c.n_envs, bool)

    def fill() -> None:
        for _ in range(c.n_steps):
            obs = rng.normal(size=(c.n_envs, 4)).astype(np.float32)
            step = agent.decide(obs)
            agent.observe(Transitions(obs, step.actions, np.ones(c.n_envs, np.float32), obs, no, no, step.extras))

    fill()
    agent.update()
    acting = learning = 0.0
    for _ in range(args.reps):
        t0 = time.process_time()
        fill()
        t1 = time.process_time()
        agent.update()
        acting += t1 - t0
        learning += time.process_time() - t1
    print(
        f"{args.algo} fast={args.fast or 'default'}: acting {acting / args.reps * 1e3:.2f} ms, "
        f"update {learning / args.reps * 1e3:.2f} ms (CPU, per rollout)"
    )


if __name__ == "__main__":
    main()
