"""Sample efficiency: every tuned preset for the zoo's step budget, over several seeds.

For each (task, agent) preset, trains ``--seeds`` runs of ``wb.preset(task, agent, seed=s)`` for the
zoo's budget, evaluates the final policy on 10 deterministic episodes, and prints a table: task,
agent, budget, mean ± std of the final evaluation over seeds, seeds solved (eval >= the target),
mean wall time per run, and the score of the zoo's published agent (rl-baselines3-zoo benchmark.md).

    python benchmarks/sample_efficiency.py                          # the issue's 8 presets, 5 seeds
    python benchmarks/sample_efficiency.py --only CartPole --seeds 2
    python benchmarks/sample_efficiency.py --only Pendulum-v1:sac Pendulum-v1:td3 --seeds 1
    python benchmarks/sample_efficiency.py --all --list             # every preset, without running
    python benchmarks/sample_efficiency.py --only CartPole-v1:dqn --seeds 10 --set double_q=false dueling=true
    python benchmarks/sample_efficiency.py --all --only CartPole-v1:qrdqn CartPoleNoVel --seeds 10 --sb3
    python benchmarks/sample_efficiency.py --only CartPole-v1:dqn --seeds 20 --sb3             # zoo DQN vs SB3
    python benchmarks/sample_efficiency.py --only CartPole-v1:dqn --seeds 20 --reliable        # the reliable one

``--sb3`` also trains, seed by seed in the same run, Stable-Baselines3 / sb3-contrib at the same settings
(DQN, QR-DQN, PPO, RecurrentPPO presets; ``pip install --no-deps stable-baselines3 sb3-contrib``) and adds
its solve rate, wall time and CPU time per run (CPU time, ``time.process_time``, is the fairer figure on a
loaded machine).

``--single TASK AGENT SIDE SEED`` (SIDE ``ours`` or ``sb3``) trains one run and prints its result as one JSON
line; ``benchmarks/separate_runs.py`` uses it to give every run its own process and its own CPU time.

``--only`` takes task or agent names, or ``task:agent`` pairs (any substring matches); ``--set``
overrides single hyperparameters of every selected preset (JSON values: numbers, true/false, lists).
The full run is long (hours on 2 cores: SAC, TD3 and DDPG make one gradient step per env step). Not part of the test
suite: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import workbench as wb
from workbench.cli import parse_hyperparameters
from workbench.presets import RELIABLE_PRESETS

# The targets of issue 4: the zoo's budget, and the final evaluation counted as solved.
DEFAULT = [
    ("CartPole-v1", "ppo"),
    ("CartPole-v1", "dqn"),
    ("CartPole-v1", "a2c"),
    ("Acrobot-v1", "dqn"),
    ("Pendulum-v1", "sac"),
    ("Pendulum-v1", "td3"),
    ("Pendulum-v1", "ddpg"),
    ("MountainCarContinuous-v0", "sac"),
]

# The targets of issue 19 (run with --issue19): the DQN family and RecurrentPPO, with PPO on the
# partially observed CartPole as the memoryless baseline expected to fail.
ISSUE_19 = [
    ("CartPole-v1", "dqn"),
    ("CartPole-v1", "qrdqn"),
    ("Acrobot-v1", "qrdqn"),
    ("CartPole-v1", "rainbow"),
    ("CartPoleNoVel-v1", "recurrentppo"),
    ("CartPoleNoVel-v1", "ppo"),
    ("PendulumNoVel-v1", "recurrentppo"),
]


def run_one(
    env_id: str, agent_name: str, seed: int, eval_episodes: int, overrides: dict | None = None, reliable: bool = False
) -> tuple[float, float, float]:
    """Train one preset run; return (final evaluation mean, wall seconds, CPU seconds of training)."""
    tuned = wb.preset(env_id, agent_name, seed=seed, reliable=reliable, **(overrides or {}))
    agent, env = tuned
    session = wb.Session(agent, env, seed=seed)
    start, cpu = time.perf_counter(), time.process_time()
    session.run(steps=tuned.steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if session.status != "finished":
        raise RuntimeError(f"{env_id} {agent_name} seed {seed} ended {session.status}: {session.error}")
    returns = agent.play(env, episodes=eval_episodes, seed=10_000 + seed)
    return float(np.mean(returns)), wall, cpu


# -- the same settings in Stable-Baselines3 / sb3-contrib ---------------------------------------------

SB3_AGENTS = {"a2c", "crossq", "ddpg", "dqn", "ppo", "qrdqn", "recurrentppo", "sac", "td3", "tqc"}


def _sb3_schedule(value: object) -> object:
    """Our schedule of training progress as SB3's function of the progress *remaining*."""
    if isinstance(value, wb.Schedule):
        return lambda remaining: float(value(1.0 - remaining))
    return value


def sb3_kwargs(agent: wb.Agent) -> tuple[dict, int, bool]:
    """The SB3 constructor arguments equal to ``agent``'s settings, its n_envs, and whether it
    normalizes (VecNormalize)."""
    c = agent.config
    name = type(agent).__name__.lower()
    if name in ("dqn", "qrdqn"):
        if c.double_q or c.n_step > 1 or c.dueling or c.prioritized or c.noisy:
            raise ValueError(
                f"SB3's {name.upper()} has no double Q, n-step, dueling, prioritized or noisy option: "
                "compare it at settings without them"
            )
        kw = _sb3_replay_kwargs(c)
        kw.update(
            target_update_interval=c.target_update_interval,
            exploration_fraction=c.exploration.fraction,
            exploration_initial_eps=c.exploration.start,
            exploration_final_eps=c.exploration.end,
            max_grad_norm=c.max_grad_norm,
        )
        if name == "qrdqn":
            kw["policy_kwargs"]["n_quantiles"] = c.n_quantiles
        return kw, 1, False
    if name in ("sac", "tqc", "crossq", "td3", "ddpg"):
        return _sb3_off_policy_kwargs(agent, name), c.n_envs, bool(c.normalize_observations or c.normalize_rewards)
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[c.activation]
    policy_kwargs = dict(
        net_arch=dict(pi=list(c.net_arch), vf=list(c.net_arch)),
        activation_fn=activation,
        ortho_init=c.ortho_init,
        log_std_init=c.log_std_init,
    )
    if name == "recurrentppo":
        policy_kwargs.update(lstm_hidden_size=c.lstm_hidden_size, enable_critic_lstm=True, shared_lstm=False)
    kw = dict(
        learning_rate=_sb3_schedule(c.learning_rate),
        n_steps=c.n_steps,
        gamma=c.gamma,
        gae_lambda=c.gae_lambda,
        ent_coef=c.ent_coef,
        vf_coef=c.vf_coef,
        max_grad_norm=c.max_grad_norm,
        normalize_advantage=c.normalize_advantage,
        policy_kwargs=policy_kwargs,
    )
    if name == "a2c":
        kw.update(use_rms_prop=c.use_rms_prop, rms_prop_eps=c.rms_prop_eps, use_sde=c.use_sde)
        kw["sde_sample_freq"] = c.sde_sample_freq
        if c.rms_prop_tf_like:
            from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

            policy_kwargs.update(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=c.rms_prop_eps))
    else:
        kw.update(batch_size=c.batch_size, n_epochs=c.n_epochs, clip_range=_sb3_schedule(c.clip_range))
    return kw, c.n_envs, bool(c.normalize_observations or c.normalize_rewards)


def _sb3_replay_kwargs(c: Any) -> dict:
    """The arguments every SB3 replay-memory agent (DQN, QR-DQN, SAC, TD3, DDPG) shares, from config ``c``."""
    return dict(
        learning_rate=_sb3_schedule(c.learning_rate),
        buffer_size=c.buffer_size,
        learning_starts=c.learning_starts,
        batch_size=c.batch_size,
        tau=c.tau,
        gamma=c.gamma,
        train_freq=c.train_freq,
        gradient_steps=c.gradient_steps,
        policy_kwargs=dict(net_arch=list(c.net_arch)),
    )


def _sb3_off_policy_kwargs(agent: wb.Agent, name: str) -> dict:
    """SB3's SAC, TD3 or DDPG (or sb3-contrib's TQC or CrossQ) arguments equal to ``agent``'s settings
    (exploration noise in scaled action units, as both libraries add it to the action in [-1, 1])."""
    c = agent.config
    kw = _sb3_replay_kwargs(c)
    if name == "crossq":
        # No target network: sb3-contrib's CrossQ takes no tau; one net_arch dict sizes actor and critics apart.
        del kw["tau"]
        kw.update(
            ent_coef=c.ent_coef,
            target_entropy="auto" if c.target_entropy is None else c.target_entropy,
            policy_delay=c.policy_delay,
            use_sde=c.use_sde,
            sde_sample_freq=c.sde_sample_freq,
        )
        kw["policy_kwargs"] = dict(
            net_arch=dict(pi=list(c.net_arch), qf=list(c.critic_net_arch)),
            n_critics=c.n_critics,
            log_std_init=c.log_std_init,
            use_expln=c.use_expln,
            batch_norm_momentum=c.batch_norm_momentum,
            batch_norm_eps=c.batch_norm_eps,
            renorm_warmup_steps=c.renorm_warmup_steps,
        )
        return kw
    if name in ("sac", "tqc"):
        kw.update(
            ent_coef=c.ent_coef,
            target_entropy="auto" if c.target_entropy is None else c.target_entropy,
            target_update_interval=c.target_update_interval,
            use_sde=c.use_sde,
            sde_sample_freq=c.sde_sample_freq,
        )
        kw["policy_kwargs"].update(n_critics=c.n_critics, log_std_init=c.log_std_init, use_expln=c.use_expln)
        if name == "tqc":
            kw["policy_kwargs"]["n_quantiles"] = c.n_quantiles
            kw["top_quantiles_to_drop_per_net"] = c.top_quantiles_to_drop_per_net
        return kw
    from stable_baselines3.common.noise import NormalActionNoise

    if c.actor_lr is not None or c.critic_lr is not None:
        raise ValueError(f"SB3's {name.upper()} has one learning rate: compare at settings without actor_lr/critic_lr")
    noise = c.exploration
    if type(noise).__name__ != "GaussianNoise":
        raise ValueError(f"only Gaussian exploration noise maps onto SB3's {name.upper()}, not {noise!r}")
    dim = int(np.prod(agent.action_space.shape))
    kw["action_noise"] = NormalActionNoise(np.zeros(dim), np.full(dim, float(noise.stddev)))
    kw["policy_kwargs"]["n_critics"] = c.n_critics
    if name == "td3":
        kw.update(policy_delay=c.policy_delay, target_policy_noise=c.target_policy_noise)
        kw["target_noise_clip"] = c.target_noise_clip
    return kw


def sb3_algorithm(agent_name: str) -> tuple[type, str]:
    """SB3's (or sb3-contrib's) class for ``agent_name`` and the policy name to build it with."""
    import sb3_contrib
    import stable_baselines3

    if agent_name == "recurrentppo":
        return sb3_contrib.RecurrentPPO, "MlpLstmPolicy"
    if agent_name == "qrdqn":
        return sb3_contrib.QRDQN, "MlpPolicy"
    if agent_name == "tqc":
        return sb3_contrib.TQC, "MlpPolicy"
    if agent_name == "crossq":
        return sb3_contrib.CrossQ, "MlpPolicy"
    return getattr(stable_baselines3, agent_name.upper()), "MlpPolicy"


def run_one_sb3(env_id: str, agent_name: str, seed: int, eval_episodes: int) -> tuple[float, float, float]:
    """Train SB3's (or sb3-contrib's) version of the preset; return (eval mean, wall s, CPU s)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    tuned = wb.preset(env_id, agent_name, seed=seed)
    kw, n_envs, normalize = sb3_kwargs(tuned.agent)
    c = tuned.agent.config
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        venv = VecNormalize(venv, norm_obs=c.normalize_observations, norm_reward=c.normalize_rewards, gamma=c.gamma)
    Algo, policy = sb3_algorithm(agent_name)
    model = Algo(policy, venv, seed=seed, device="cpu", **kw)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=tuned.steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if normalize:
        venv.training = False
    returns = []
    env = gym.make(env_id)
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=10_000 + seed + episode)
        state, start_flag, total, done = None, np.ones((1,), dtype=bool), 0.0, False
        while not done:
            x = venv.normalize_obs(obs[None]) if normalize else obs[None]
            action, state = model.predict(x, state=state, episode_start=start_flag, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action[0])
            total += float(reward)
            start_flag = np.zeros((1,), dtype=bool)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns)), wall, cpu


def select(pairs: list[tuple[str, str]], only: list[str] | None) -> list[tuple[str, str]]:
    """The pairs matching any ``--only`` word (``task``, ``agent`` or ``task:agent``, substrings)."""
    if not only:
        return pairs
    chosen = []
    for env_id, agent in pairs:
        for word in only:
            task_part, _, agent_part = word.partition(":")
            if ":" in word:
                hit = task_part.lower() in env_id.lower() and agent_part.lower() == agent
            else:
                hit = word.lower() in env_id.lower() or word.lower() == agent
            if hit:
                chosen.append((env_id, agent))
                break
    return chosen


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="WORD", help="tasks, agents or task:agent pairs to run")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per preset (default 5: 0..4)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic evaluation episodes (default 10)")
    parser.add_argument("--all", action="store_true", help="every preset in wb.PRESETS, not only the issue's 8")
    parser.add_argument("--list", action="store_true", help="list the selected presets and exit")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--set", nargs="+", metavar="NAME=VALUE", help="override hyperparameters of the presets")
    parser.add_argument("--issue19", action="store_true", help="the DQN family and RecurrentPPO targets (issue 19)")
    parser.add_argument("--sb3", action="store_true", help="also train SB3 / sb3-contrib at the same settings")
    parser.add_argument("--reliable", action="store_true", help="the reliable=True variants")
    parser.add_argument(
        "--single",
        nargs=4,
        metavar=("TASK", "AGENT", "SIDE", "SEED"),
        help="one run only (SIDE ours or sb3); print its result as one JSON line",
    )
    args = parser.parse_args(argv)
    if args.single:
        torch.set_num_threads(1)
        task, agent, side, seed = args.single
        one = run_one_sb3 if side == "sb3" else run_one
        score, wall, cpu = one(task, agent, int(seed), args.eval_episodes)
        print(json.dumps({"eval": score, "wall": wall, "cpu": cpu}))
        return 0
    overrides = parse_hyperparameters(args.set or [])

    pairs = select(sorted(wb.PRESETS) if args.all else ISSUE_19 if args.issue19 else DEFAULT, args.only)
    if args.reliable:
        pairs = [p for p in pairs if p in RELIABLE_PRESETS]
    if not pairs:
        parser.error(f"--only {' '.join(args.only)} matches no preset; see --all --list")
    if args.list:
        for env_id, agent in pairs:
            spec = wb.PRESETS[(env_id, agent)]
            print(f"{env_id:26s} {agent:5s} {spec.steps:>8,d} steps  solved >= {spec.solved}  zoo {spec.zoo_score}")
        return 0
    torch.set_num_threads(1)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows = []
    for env_id, agent in pairs:
        spec = wb.PRESETS[(env_id, agent)]
        evals, walls, cpus, sb3 = [], [], [], []
        for seed in seeds:
            score, wall, cpu = run_one(env_id, agent, seed, args.eval_episodes, overrides, args.reliable)
            evals.append(score)
            walls.append(wall)
            cpus.append(cpu)
            print(
                f"  {env_id} {agent} seed {seed}: eval {score:.1f} in {wall:.1f} s ({cpu:.1f} s CPU)",
                file=sys.stderr,
                flush=True,
            )
            if args.sb3 and agent in SB3_AGENTS:
                theirs = run_one_sb3(env_id, agent, seed, args.eval_episodes)
                sb3.append(theirs)
                print(
                    f"  {env_id} {agent} seed {seed} SB3: eval {theirs[0]:.1f} in {theirs[1]:.1f} s "
                    f"({theirs[2]:.1f} s CPU)",
                    file=sys.stderr,
                    flush=True,
                )
        solved = sum(e >= spec.solved for e in evals) if spec.solved is not None else 0
        sb3_solved = sum(e >= spec.solved for e, _, _ in sb3) if sb3 and spec.solved is not None else None
        rows.append(
            {
                "task": env_id,
                "agent": agent,
                "budget": spec.steps,
                "seeds": seeds,
                "evals": evals,
                "mean": statistics.fmean(evals),
                "std": statistics.pstdev(evals),
                "solved": solved,
                "target": spec.solved,
                "wall_mean": statistics.fmean(walls),
                "cpu_mean": statistics.fmean(cpus),
                "zoo": spec.zoo_score,
                "sb3_evals": [e for e, _, _ in sb3],
                "sb3_solved": sb3_solved,
                "sb3_wall_mean": statistics.fmean(w for _, w, _ in sb3) if sb3 else None,
                "sb3_cpu_mean": statistics.fmean(c for _, _, c in sb3) if sb3 else None,
            }
        )

    header = (
        "| task | agent | budget | final eval (mean ± std) | seeds solved | target | wall / run | CPU / run "
        "| SB3 solved | SB3 wall / CPU | zoo published |"
    )
    print(header)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        theirs = "—", "—"
        if r["sb3_solved"] is not None:
            theirs = (
                f"{r['sb3_solved']}/{len(r['sb3_evals'])}",
                f"{r['sb3_wall_mean']:.0f} s / {r['sb3_cpu_mean']:.0f} s",
            )
        print(
            f"| {r['task']} | {r['agent'].upper()} | {r['budget'] // 1000}k | {r['mean']:.1f} ± {r['std']:.1f} "
            f"| {r['solved']}/{len(r['seeds'])} | ≥ {fmt(r['target'])} | {r['wall_mean']:.0f} s "
            f"| {r['cpu_mean']:.0f} s | {theirs[0]} | {theirs[1]} | {fmt(r['zoo'])} |"
        )
    if overrides:
        print(f"\noverrides on top of the presets: {overrides}")
    print(
        f"\nseeds {seeds}; eval = {args.eval_episodes} deterministic episodes after the full budget; "
        f"torch {torch.__version__}, 1 thread"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
