"""Multi-agent PettingZoo tasks: shared-parameter PPO, IPPO and MAPPO against skrl's IPPO and MAPPO.

Tasks (mpe2): ``simple_spread_v3`` (3 agents, cooperative) and ``simple_adversary_v3`` (1 adversary
against 2 agents, mixed). Every method trains for the same number of agent-steps (one step of one
agent is one step; skrl's trainer counts env steps, so it gets ``steps / n_agents`` of them) with the
same PPO settings (rollout of 128 env steps, one minibatch, 5 epochs, learning rate 7e-4, constant clip
0.2, entropy 0.01, value loss 0.5, gradient norm 0.5, two hidden layers of 64 tanh units, discrete actions) over
several seeds in this same run. The table gives the mean team return (the sum over agents) of 10
deterministic evaluation episodes at the end (per seed, then mean; the same evaluation seeds for every
method) and the median wall and CPU time of training (CPU: ``time.process_time``, every thread of the
process, so less moved by other jobs on a shared machine than the wall time). The methods take turns
within each seed (seed 0: every method, then seed 1...), so a change of the machine's load falls on all
of them alike; each workbench method is then compared with skrl's of the same name: the ratio of the
median wall times, and the median of the per-seed ratios (runs of the same seed ran close in time).

    pip install pettingzoo skrl && pip install --no-deps mpe2   # mpe2 asks for pygame-ce; MPE steps without it
    python benchmarks/multi_agent.py                            # 3 seeds, 15k agent-steps per run
    python benchmarks/multi_agent.py --steps 3000 --seeds 1 --tasks simple_spread_v3

skrl (``pip install "rl-workbench[bench]"``) is compared when it imports; when it does not, its rows say so.
Not part of the test suite: speed and returns are measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
from typing import Any

import numpy as np
import torch

import workbench as wb

SETTINGS = {
    "n_steps": 128,
    "batch_size": 384,  # one minibatch: 128 env steps x 3 agents
    "n_epochs": 5,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "learning_rate": 7e-4,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "clip_range": 0.2,  # constant, as skrl's ratio_clip (the workbench's PPO decays it to 0 by default)
}
EVAL_EPISODES = 10


def make(task: str) -> Any:
    """The mpe2 task as a ParallelEnv (discrete actions, 25 steps an episode)."""
    module = importlib.import_module(f"mpe2.{task}")
    kwargs = {"N": 3} if task == "simple_spread_v3" else {}
    return module.parallel_env(max_cycles=25, continuous_actions=False, **kwargs)


def _groups(task: str) -> dict[str, Any]:
    if task == "simple_adversary_v3":
        return {"groups": {"adversary": ["adversary_0"], "agents": ["agent_0", "agent_1"]}}
    return {}


def run_workbench(method: str, task: str, seed: int, steps: int) -> tuple[float, float, float]:
    """Train one workbench method; (wall seconds of training, CPU seconds, mean evaluation return)."""
    env = make(task)
    cls = {"shared PPO": wb.PPO, "IPPO": wb.IPPO, "MAPPO": wb.MAPPO}[method]
    extra = _groups(task) if method == "IPPO" else {}
    agent = cls(env, seed=seed, **SETTINGS, **extra)
    session = wb.Session(agent, env, seed=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    returns = agent.play(make(task), episodes=EVAL_EPISODES, seed=10_000 + seed)
    return wall, cpu, float(np.mean(returns))


def _skrl_models(env: Any, centralised: bool) -> dict[str, dict[str, Any]]:
    from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model

    def mlp(n_in: int, n_out: int) -> torch.nn.Sequential:
        return torch.nn.Sequential(
            torch.nn.Linear(n_in, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, n_out),
        )

    class Policy(CategoricalMixin, Model):
        def __init__(self, observation_space: Any, action_space: Any) -> None:
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device="cpu")
            CategoricalMixin.__init__(self, unnormalized_log_prob=True)
            self.net = mlp(self.num_observations, int(action_space.n))

        def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
            return self.net(inputs["observations"]), {}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space: Any, state_space: Any, action_space: Any) -> None:
            Model.__init__(
                self,
                observation_space=observation_space,
                state_space=state_space,
                action_space=action_space,
                device="cpu",
            )
            DeterministicMixin.__init__(self)
            self.net = mlp(self.num_states if centralised else self.num_observations, 1)

        def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
            return self.net(inputs["states"] if centralised else inputs["observations"]), {}

    models = {}
    for uid in env.possible_agents:
        obs, act = env.observation_space(uid), env.action_space(uid)
        models[uid] = {"policy": Policy(obs, act), "value": Value(obs, env.state_space, act)}
    return models


def run_skrl(method: str, task: str, seed: int, steps: int) -> tuple[float, float, float]:
    """Train skrl's IPPO or MAPPO at the same settings; (wall seconds of training, CPU seconds, mean evaluation
    return)."""
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed

    set_seed(seed)
    raw = make(task)
    env = wrap_env(raw, wrapper="pettingzoo")
    n_agents = len(raw.possible_agents)
    centralised = method == "skrl MAPPO"
    models = _skrl_models(raw, centralised)
    memories = {uid: RandomMemory(memory_size=SETTINGS["n_steps"], num_envs=1, device="cpu") for uid in models}
    cfg: dict[str, Any] = {
        "rollouts": SETTINGS["n_steps"],
        "learning_epochs": SETTINGS["n_epochs"],
        "mini_batches": 1,
        "discount_factor": SETTINGS["gamma"],
        "gae_lambda": SETTINGS["gae_lambda"],
        "learning_rate": SETTINGS["learning_rate"],
        "entropy_loss_scale": SETTINGS["ent_coef"],
        "value_loss_scale": SETTINGS["vf_coef"],
        "grad_norm_clip": SETTINGS["max_grad_norm"],
        "ratio_clip": SETTINGS["clip_range"],
        "value_clip": 0.0,  # the workbench's PPO does not clip values by default
        "time_limit_bootstrap": True,  # MPE episodes end by truncation: bootstrapped, as the workbench does
    }
    spaces = {
        "possible_agents": env.possible_agents,
        "models": models,
        "memories": memories,
        "observation_spaces": env.observation_spaces,
        "action_spaces": env.action_spaces,
        "device": "cpu",
    }
    from skrl.multi_agents.torch.base import ExperimentCfg

    # skrl 2.1's config expansion takes an empty dict for a dict per agent and refuses it: give one per agent.
    for name in ("learning_rate_scheduler", "observation_preprocessor", "state_preprocessor", "value_preprocessor"):
        cfg[f"{name}_kwargs"] = {uid: {} for uid in env.possible_agents}

    cfg["experiment"] = ExperimentCfg(write_interval=0, checkpoint_interval=0)  # no files written
    if centralised:
        from skrl.multi_agents.torch.mappo import MAPPO, MAPPO_CFG

        agent = MAPPO(**spaces, state_spaces=env.state_spaces, cfg=MAPPO_CFG(**cfg))
    else:
        from skrl.multi_agents.torch.ippo import IPPO, IPPO_CFG

        agent = IPPO(**spaces, state_spaces=env.state_spaces, cfg=IPPO_CFG(**cfg))
    trainer = SequentialTrainer(
        env=env,
        agents=agent,
        cfg={"timesteps": steps // n_agents, "headless": True, "disable_progressbar": True},
    )
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    returns = []
    eval_env = make(task)
    for episode in range(EVAL_EPISODES):
        obs, _ = eval_env.reset(seed=10_000 + seed + episode)
        total = 0.0
        while eval_env.agents:
            with torch.no_grad():
                actions = {
                    a: int(models[a]["policy"].net(torch.as_tensor(obs[a], dtype=torch.float32)).argmax())
                    for a in eval_env.agents
                }
            obs, rewards, _, _, _ = eval_env.step(actions)
            total += float(sum(rewards.values()))
        returns.append(total)
    return wall, cpu, float(np.mean(returns))


def main() -> None:
    """Run every method on every task over the seeds; print the table (markdown)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=15_000, help="agent-steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", nargs="+", default=["simple_spread_v3", "simple_adversary_v3"])
    parser.add_argument("--methods", nargs="+", default=["shared PPO", "IPPO", "MAPPO", "skrl IPPO", "skrl MAPPO"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        import skrl

        peer = f"skrl {skrl.__version__}"
    except ImportError:
        peer = None
        print("skrl is not installed: no peer rows (pip install skrl to add them)")
    print(f"load average at start: {os.getloadavg()[0]:.2f}; torch {torch.__version__}; peer: {peer}")
    print(f"({args.steps} agent-steps; methods take turns within each seed)")
    print("| task | method | return per seed | mean return | median wall (s) | median CPU (s) |")
    print("|---|---|---|---|---|---|")
    for task in args.tasks:
        runs: dict[str, list[tuple[float, float, float]]] = {}
        for seed in range(args.seeds):
            for method in args.methods:
                if method == "shared PPO" and task == "simple_adversary_v3":
                    continue  # the adversary sees 8 numbers, the agents 10: one shared network needs one size
                if method.startswith("skrl") and peer is None:
                    continue
                run = run_skrl if method.startswith("skrl") else run_workbench
                result = run(method, task, seed, args.steps)
                runs.setdefault(method, []).append(result)
                print(
                    f"# {task} {method} seed {seed}: wall {result[0]:.1f} s, CPU {result[1]:.1f} s, "
                    f"return {result[2]:.1f}, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        for method in args.methods:
            if method not in runs:
                why = "observation sizes differ" if method == "shared PPO" else "skrl not installed"
                print(f"| {task} | {method} | n/a: {why} | | | |", flush=True)
                continue
            walls, cpus, rets = (list(column) for column in zip(*runs[method]))
            per = ", ".join(f"{r:.1f}" for r in rets)
            print(
                f"| {task} | {method} | {per} | {statistics.mean(rets):.1f} | {statistics.median(walls):.1f} "
                f"| {statistics.median(cpus):.1f} |",
                flush=True,
            )
        for method in args.methods:
            peer_runs = runs.get(f"skrl {method}")
            if method.startswith("skrl") or method not in runs or not peer_runs:
                continue
            mine = runs[method]
            paired = [a[0] / b[0] for a, b in zip(mine, peer_runs)]
            wall = statistics.median(a[0] for a in mine) / statistics.median(b[0] for b in peer_runs)
            cpu = statistics.median(a[1] for a in mine) / statistics.median(b[1] for b in peer_runs)
            print(
                f"{task}: {method} / skrl {method}: wall {wall:.2f}x (per seed "
                f"{', '.join(f'{r:.2f}' for r in paired)}; median {statistics.median(paired):.2f}x), CPU {cpu:.2f}x",
                flush=True,
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
