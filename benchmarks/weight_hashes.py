"""The trained weights of sixteen reference setups, as sha256 hashes: run before and after a change
that should not change what agents learn, and compare the two outputs line by line.

The setups: PPO, A2C, DQN, QRDQN, C51, Rainbow and RecurrentPPO on CartPole-v1; SAC, TD3 and DDPG
on Pendulum-v1; PPO on Pendulum-v1 (a Box head); shared PPO, IPPO (one group per agent, two groups, a
Box head) and MAPPO on the toy ParallelEnv ``MatchTarget`` (3 agents). Each trains with seed 0 for a small budget (a few
seconds each) in a session; the hash covers every declared network's state (``agent.networks``, in
name and key order) and the optimizers' moments (``agent.state()``'s ``optim/`` tensors).

    python benchmarks/weight_hashes.py > hashes.txt
    python benchmarks/weight_hashes.py --only ppo-cartpole,a2c-cartpole

It measures the checkout it lives in (its own root comes first on ``sys.path``), so
``python <other checkout>/benchmarks/weight_hashes.py`` hashes that one.

Not part of the test suite; ``docs/speed.md`` records where a change moved a hash and why, and the
latest hashes of every setup (section "Public PyTorch only").
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETUPS: dict[str, tuple[str, str, int, dict]] = {
    # name: (algorithm, env id, env steps, hyperparameters)
    "ppo-cartpole": ("PPO", "CartPole-v1", 4096, {}),
    "a2c-cartpole": ("A2C", "CartPole-v1", 4000, {}),
    "dqn-cartpole": ("DQN", "CartPole-v1", 1600, {"learning_starts": 500, "gradient_steps": 32}),
    "qrdqn-cartpole": ("QRDQN", "CartPole-v1", 1600, {"learning_starts": 500, "gradient_steps": 32}),
    "c51-cartpole": ("C51", "CartPole-v1", 1600, {"learning_starts": 500, "gradient_steps": 32}),
    "rainbow-cartpole": ("Rainbow", "CartPole-v1", 1600, {"learning_starts": 500, "gradient_steps": 32}),
    "recurrentppo-cartpole": ("RecurrentPPO", "CartPole-v1", 1024, {"n_epochs": 4}),
    "sac-pendulum": ("SAC", "Pendulum-v1", 400, {"learning_starts": 100, "batch_size": 64}),
    "td3-pendulum": ("TD3", "Pendulum-v1", 400, {"learning_starts": 100, "batch_size": 64}),
    "ddpg-pendulum": ("DDPG", "Pendulum-v1", 400, {"learning_starts": 100, "batch_size": 64}),
    "ppo-pendulum": ("PPO", "Pendulum-v1", 2048, {"n_epochs": 5, "batch_size": 64}),
    # Multi-agent (the toy ParallelEnv MatchTarget, 3 agents; steps count every agent's step).
    "ppo-matchtarget": ("PPO", "MatchTarget", 1536, {"n_steps": 32, "batch_size": 48, "n_epochs": 4}),
    "ippo-matchtarget": ("IPPO", "MatchTarget", 1536, {"n_steps": 32, "batch_size": 48, "n_epochs": 4}),
    "ippo-groups-matchtarget": (
        "IPPO",
        "MatchTarget",
        1536,
        {
            "n_steps": 32,
            "batch_size": 48,
            "n_epochs": 4,
            "groups": {"red": ["agent_0"], "blue": ["agent_1", "agent_2"]},
        },
    ),
    "ippo-box-matchtarget": ("IPPO", "MatchTarget-box", 1536, {"n_steps": 32, "batch_size": 48, "n_epochs": 4}),
    "mappo-matchtarget": ("MAPPO", "MatchTarget", 1536, {"n_steps": 32, "batch_size": 48, "n_epochs": 4}),
}


def make_env(env_id: str):
    """The env a setup trains on: a gymnasium id as it is, or a MatchTarget ParallelEnv (3 agents)."""
    if env_id.startswith("MatchTarget"):
        from workbench.envs.multiagent_toy import MatchTarget

        return MatchTarget(n_agents=3, length=8, box=env_id.endswith("-box"))
    return env_id


def weights_hash(agent) -> str:
    """sha256 of the agent's networks and optimizer moments, in a fixed order."""
    digest = hashlib.sha256()
    tensors = agent.state().tensors
    for key in sorted(tensors):
        if key.startswith(("net/", "optim/")):
            digest.update(key.encode())
            digest.update(tensors[key].detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated setup names (default: all)")
    args = parser.parse_args()
    import torch

    import workbench as wb

    torch.set_num_threads(1)
    names = [n for n in args.only.split(",") if n] or list(SETUPS)
    for name in names:
        algorithm, env_id, steps, hyper = SETUPS[name]
        start = time.perf_counter()
        env = make_env(env_id)
        agent = getattr(wb, algorithm)(env, **hyper)
        wb.Session(agent, env, seed=0).run(steps=steps)
        print(f"{name:24s} {weights_hash(agent)}  ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
