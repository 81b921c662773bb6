"""Offline RL benchmark: learning CartPole from logged epsilon-greedy data, and off-policy evaluation.

One DQN teacher (seed 0) trains online in 10k-step chunks until its greedy policy plays >= 475
(at most ``--teacher-steps``). For each seed its greedy policy mixed with ``--epsilon``-random
actions (0.13: episodes average about 100-115) logs ``--transitions`` steps with the behaviour's
probabilities; BCQ and CQL (their defaults) train on that data alone (``--steps`` gradient steps,
10% of episodes held out), then play 10 deterministic episodes. Reported per seed: the behaviour's
mean return, each agent's mean return (target: >= 400 on 4 of 5 seeds), and each agent's
doubly-robust estimate (``dr``, on the held-out episodes, gamma 0.99) against the true discounted
return of its policy, ``sum_t 0.99^t r_t`` averaged over the 10 played episodes (target: within 15%).

    nice python benchmarks/offline.py --seeds 5 --cache /tmp/offline     # the issue's setting
    nice python benchmarks/offline.py --first-seed 3 --seeds 2 --cache /tmp/offline   # seeds 3 and 4
    nice python benchmarks/offline.py --pendulum --agents CQL --d3rlpy --steps 3000 --cache /tmp/offline

With ``--pendulum``: one SAC (seed 0, learning rate 1e-3) trains in 1k-step chunks until its
stochastic policy averages between -850 and -550 (half-trained) and logs ``--transitions`` steps
(default 20k there) with that policy; CQL and IQL (their defaults) train on this dataset with each
seed and play 10 deterministic episodes, against the behaviour's mean return over the logged
episodes (target: better on 4 of 5 seeds).

With ``--pendulum --d3rlpy``: d3rlpy's CQL side by side with ``wb.CQL`` on the same dataset, each
seed running one then the other (interleaved), the same gradient steps, batch 256, networks (256, 256),
learning rates (critic 3e-4, actor and temperature 1e-4), conservative weight 5 with a fixed alpha
(d3rlpy's Lagrange alpha off: ``alpha_learning_rate=0``), 10 sampled actions, one torch thread each
(a session's default); reported: each one's return over the same 10 deterministic episodes and its
training wall and CPU time (targets: at least d3rlpy's return, at most 0.7x its wall time). d3rlpy
pins gymnasium 1.0.0 and imports the old gym, so it is not in an extra: install it beside the
workbench without its pins, ``pip install --no-deps d3rlpy gym gym_notices structlog colorama
dataclasses-json marshmallow typing-inspect mypy-extensions h5py scikit-learn scipy joblib threadpoolctl``.

With ``--pendulum --ope``: each agent learns from 90% of the SAC teacher's episodes (the data keeps the
teacher's log-density of each drawn action, ``SAC.log_density``), and the Box-action estimators (FQE's
``dm``, ``dr``, ``sdr``) estimate its deterministic policy's discounted return (gamma 0.99) from the 10% held
out, against the truth over 10 played episodes:

    nice python benchmarks/offline.py --pendulum --ope --agents CQL,IQL --cql-net 64,64 --cql-lr 1e-3 --seeds 3

``--cache DIR`` keeps teachers and datasets on disk between runs.
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np

import workbench as wb


def _cached(cache: str | None, name: str) -> str | None:
    return os.path.join(cache, name) if cache else None


def teacher_dqn(teacher_steps: int, cache: str | None) -> wb.Agent:
    """A DQN trained until its greedy policy plays >= 475 (seed 0), loaded from ``cache`` if there."""
    path = _cached(cache, "dqn_teacher_s0")
    if path and os.path.exists(path):
        return wb.load(path)
    teacher = wb.DQN("CartPole-v1", seed=0)
    session = wb.Session(teacher, "CartPole-v1", seed=0)
    while teacher.num_timesteps < teacher_steps:
        session.run(steps=10_000)
        if teacher.num_timesteps >= 50_000 and np.mean(teacher.play("CartPole-v1", episodes=5, seed=500)) >= 475:
            break
    if path:
        teacher.save(path)
    return teacher


def collect(seed: int, transitions: int, epsilon: float, teacher_steps: int, cache: str | None = None) -> wb.Dataset:
    """``transitions`` steps of an epsilon-greedy DQN, with the behaviour's log-probabilities."""
    path = _cached(cache, f"cartpole_s{seed}")
    if path and os.path.exists(path):
        return wb.Dataset.load(path)
    teacher = teacher_dqn(teacher_steps, cache)
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
    data = wb.Dataset(
        *(np.array(rows[k]) for k in ("o", "a", "r", "n", "te", "tr", "lp")),
        observation_space=env.observation_space,
        action_space=env.action_space,
    )
    if path:
        data.save(path)
    return data


def collect_pendulum(transitions: int, teacher_steps: int, cache: str | None = None) -> wb.Dataset:
    """``transitions`` steps of a half-trained SAC's stochastic policy on Pendulum (seed 0), with the
    log-density of each drawn action (``SAC.log_density``) as the behaviour's ``log_probs``."""
    path = _cached(cache, "pendulum_s0")
    if path and os.path.exists(path):
        cached = wb.Dataset.load(path)
        if cached.log_probs is not None:  # a dataset cached before the log-densities were recorded: again
            return cached
    teacher = wb.SAC("Pendulum-v1", seed=0, learning_rate=1e-3)
    session = wb.Session(teacher, "Pendulum-v1", seed=0)
    while teacher.num_timesteps < teacher_steps:
        session.run(steps=1000)
        if -850 <= np.mean(teacher.play("Pendulum-v1", episodes=5, seed=500, deterministic=False)) <= -550:
            break
    env = gym.make("Pendulum-v1")
    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "te", "tr", "lp")}
    obs, _ = env.reset(seed=0)
    for _ in range(transitions):
        a = np.asarray(teacher.act(obs), dtype=np.float32)
        log_density = float(teacher.log_density(obs, a)[0])
        nxt, r, te, tr, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, te, tr, log_density), strict=True):
            rows[k].append(v)
        obs = env.reset()[0] if te or tr else nxt
    data = wb.Dataset(
        *(np.array(rows[k]) for k in ("o", "a", "r", "n", "te", "tr", "lp")),
        observation_space=env.observation_space,
        action_space=env.action_space,
    )
    if path:
        data.save(path)
    return data


def discounted_play(agent: wb.Agent, episodes: int, seed: int, gamma: float = 0.99) -> tuple[float, float]:
    """``agent``'s deterministic Pendulum episodes (seeds ``seed``, ``seed + 1``...): (mean return, mean
    ``gamma``-discounted return), the truth an off-policy estimate is compared with."""
    env = gym.make("Pendulum-v1")
    returns, discounted_returns = [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, disc, scale, done = 0.0, 0.0, 1.0, False
        while not done:
            obs, r, te, tr, _ = env.step(agent.act(obs, deterministic=True))
            total, disc, scale, done = total + float(r), disc + scale * float(r), scale * gamma, te or tr
        returns.append(total)
        discounted_returns.append(disc)
    return float(np.mean(returns)), float(np.mean(discounted_returns))


def pendulum_ope(args: argparse.Namespace) -> None:
    """``--pendulum --ope``: each agent learns from 90% of the episodes; FQE, DR and SDR estimate its
    deterministic policy's discounted return from the 10% held out (the behaviour's log-densities
    weighting DR/SDR), against the truth over 10 played episodes."""
    data = collect_pendulum(args.transitions or 20_000, args.teacher_steps, args.cache)
    print(f"behaviour {data.episode_returns().mean():7.1f} ({data.num_episodes} episodes)", flush=True)
    steps = args.steps or 5000
    errors: dict[str, dict[str, list[float]]] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        train, held = data.split(0.1, seed=seed)
        for cls in (getattr(wb, name) for name in args.agents.split(",")):
            kwargs = cql_settings(args) if cls is wb.CQL else {}
            agent = cls(dataset=train, seed=seed, **kwargs)
            cpu = time.process_time()
            wb.Session(agent, dataset=train, seed=seed).run(steps=steps)
            ret, truth = discounted_play(agent, 10, 1000 + seed)
            est = wb.evaluate_offline(agent, held, gamma=0.99, fqe_steps=args.fqe_steps, seed=seed)
            line = [f"seed {seed} {cls.__name__}: return {ret:7.1f}, true discounted {truth:7.1f}"]
            for name in ("dm", "dr", "sdr"):
                value = est[name].value
                errors.setdefault(cls.__name__, {}).setdefault(name, []).append(abs(value / truth - 1))
                line.append(f"{name} {value:7.1f} ({value / truth - 1:+.0%})")
            line.append(f"cpu {time.process_time() - cpu:.0f}s")
            print(" | ".join(line), flush=True)
    for agent_name, by_estimator in errors.items():
        summary = ", ".join(f"{name} {np.median(e):.0%}" for name, e in by_estimator.items())
        print(f"{agent_name}: median relative error {summary}", flush=True)


def d3rlpy_cql(
    data: wb.Dataset,
    seed: int,
    steps: int,
    lr: float | None = None,
    net_arch: tuple[int, ...] = (256, 256),
    tau: float = 0.005,
    entropy_backup: bool = False,
) -> tuple[float, float, float]:
    """d3rlpy's CQL with ``wb.CQL``'s hyperparameters on ``data`` (``lr``: every learning rate, as
    ``--cql-lr``; ``net_arch``, ``tau`` and ``entropy_backup`` as the other ``--cql-`` options): (return over 10
    deterministic episodes, training wall seconds, training CPU seconds)."""
    import d3rlpy
    import torch

    low, high = data.action_space.low, data.action_space.high
    mdp = d3rlpy.dataset.MDPDataset(
        data.observations,
        data.actions,
        data.rewards.astype(np.float32),
        data.terminated.astype(np.float32),
        timeouts=data.truncated.astype(np.float32),
        action_space=d3rlpy.constants.ActionSpace.CONTINUOUS,
    )
    d3rlpy.seed(seed)
    config = d3rlpy.algos.CQLConfig(
        actor_encoder_factory=d3rlpy.models.encoders.VectorEncoderFactory(hidden_units=list(net_arch)),
        critic_encoder_factory=d3rlpy.models.encoders.VectorEncoderFactory(hidden_units=list(net_arch)),
        batch_size=256,
        gamma=0.99,
        tau=tau,
        actor_learning_rate=lr or 1e-4,
        critic_learning_rate=lr or 3e-4,
        temp_learning_rate=lr or 1e-4,
        alpha_learning_rate=0.0,
        initial_alpha=1.0,
        alpha_threshold=0.0,
        conservative_weight=5.0,
        n_action_samples=10,
        initial_temperature=1.0,
        soft_q_backup=entropy_backup,
        action_scaler=d3rlpy.preprocessing.MinMaxActionScaler(minimum=low, maximum=high),
    )
    cql = config.create(device="cpu:0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a wb.Session trains (torch_threads=1)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        cql.fit(
            mdp,
            n_steps=steps,
            n_steps_per_epoch=steps,
            show_progress=False,
            save_interval=steps + 1,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        torch.set_num_threads(threads)
    env = gym.make("Pendulum-v1")
    returns = []
    for episode in range(10):  # the episodes agent.play("Pendulum-v1", episodes=10, seed=1000 + seed) plays
        obs, _ = env.reset(seed=1000 + seed + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(cql.predict(obs[None].astype(np.float32))[0])
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), wall, cpu


def cql_settings(args: argparse.Namespace) -> dict:
    """``wb.CQL``'s keyword arguments from ``--cql-lr``, ``--cql-net``, ``--cql-tau``,
    ``--cql-entropy-backup``, ``--cql-bc-steps`` and ``--cql-policy-average`` (those given)."""
    kwargs: dict = {}
    if args.cql_lr:
        kwargs.update(learning_rate=args.cql_lr, actor_lr=args.cql_lr)
    if args.cql_net:
        kwargs["net_arch"] = tuple(int(n) for n in args.cql_net.split(","))
    if args.cql_tau:
        kwargs["tau"] = args.cql_tau
    if args.cql_entropy_backup:
        kwargs["entropy_backup"] = True
    if args.cql_bc_steps:
        kwargs["bc_steps"] = args.cql_bc_steps
    if args.cql_policy_average:
        average = args.cql_policy_average.lower()
        kwargs["policy_average_tau"] = None if average == "none" else float(average)
    return kwargs


def pendulum(args: argparse.Namespace) -> None:
    data = collect_pendulum(args.transitions or 20_000, args.teacher_steps, args.cache)
    behaviour = data.episode_returns().mean()
    print(f"behaviour {behaviour:7.1f} ({data.num_episodes} episodes)", flush=True)
    steps = args.steps or 5000
    results: dict[str, list[tuple[float, float, float]]] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0 = time.process_time()
        line = [f"seed {seed}"]
        for cls in (getattr(wb, name) for name in args.agents.split(",")):
            kwargs = cql_settings(args) if cls is wb.CQL else {}
            agent = cls(dataset=data, seed=seed, **kwargs)
            wall, cpu = time.perf_counter(), time.process_time()
            wb.Session(agent, dataset=data, seed=seed).run(steps=steps)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            ret = float(np.mean(agent.play("Pendulum-v1", episodes=10, seed=1000 + seed)))
            results.setdefault(cls.__name__, []).append((ret, wall, cpu))
            line.append(f"{cls.__name__} {ret:7.1f} (wall {wall:.0f}s cpu {cpu:.0f}s)")
        if args.d3rlpy:
            settings = cql_settings(args)
            ret, wall, cpu = d3rlpy_cql(
                data,
                seed,
                steps,
                args.cql_lr,
                settings.get("net_arch", (256, 256)),
                settings.get("tau", 0.005),
                settings.get("entropy_backup", False),
            )
            results.setdefault("d3rlpy CQL", []).append((ret, wall, cpu))
            line.append(f"d3rlpy CQL {ret:7.1f} (wall {wall:.0f}s cpu {cpu:.0f}s)")
        line.append(f"cpu {time.process_time() - t0:.0f}s")
        print(" | ".join(line), flush=True)
    for name, rows in results.items():
        ret, wall, cpu = (np.median([r[i] for r in rows]) for i in range(3))
        better = sum(r[0] > behaviour for r in rows)
        print(
            f"{name}: median return {ret:7.1f}, beats the behaviour on {better}/{len(rows)} seeds, "
            f"median wall {wall:.0f}s cpu {cpu:.0f}s",
            flush=True,
        )
    if args.d3rlpy and "CQL" in results:
        ours, theirs = results["CQL"], results["d3rlpy CQL"]
        wins = sum(a[0] >= b[0] for a, b in zip(ours, theirs, strict=True))
        print(
            f"wb.CQL / d3rlpy CQL: return >= d3rlpy's on {wins}/{len(ours)} seeds; median wall ratio "
            f"{np.median([a[1] / b[1] for a, b in zip(ours, theirs, strict=True)]):.2f}, median CPU ratio "
            f"{np.median([a[2] / b[2] for a, b in zip(ours, theirs, strict=True)]):.2f}",
            flush=True,
        )


def discounted(lengths: list[int], gamma: float) -> float:
    """CartPole's discounted return of episodes of these lengths (reward 1 per step)."""
    return float(np.mean([(1 - gamma**n) / (1 - gamma) for n in lengths]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="how many seeds")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--transitions", type=int, default=None, help="logged steps (50k CartPole, 20k Pendulum)")
    parser.add_argument("--steps", type=int, default=None, help="gradient steps (5k)")
    parser.add_argument("--epsilon", type=float, default=0.13)
    parser.add_argument("--teacher-steps", type=int, default=100_000, help="most teacher env steps")
    parser.add_argument("--cache", default=None, help="folder keeping teachers and datasets between runs")
    parser.add_argument("--pendulum", action="store_true", help="the Pendulum setting instead of CartPole")
    parser.add_argument("--agents", default="CQL,IQL", help="--pendulum: which agents (comma-separated)")
    parser.add_argument("--d3rlpy", action="store_true", help="--pendulum: d3rlpy's CQL side by side")
    parser.add_argument(
        "--ope", action="store_true", help="--pendulum: off-policy estimates (FQE, DR, SDR) against the truth"
    )
    parser.add_argument("--fqe-steps", type=int, default=5000, help="--ope: FQE's gradient steps")
    parser.add_argument(
        "--cql-lr",
        type=float,
        default=None,
        help="--pendulum: CQL's learning rates (critics, policy, temperature; d3rlpy's too)",
    )
    parser.add_argument(
        "--cql-net", default=None, help="--pendulum: CQL's hidden layer sizes, comma-separated (its default 256,256)"
    )
    parser.add_argument("--cql-tau", type=float, default=None, help="--pendulum: CQL's target update rate")
    parser.add_argument(
        "--cql-bc-steps",
        type=int,
        default=None,
        help="--pendulum: wb.CQL's first steps imitating the logged actions (no d3rlpy option)",
    )
    parser.add_argument(
        "--cql-policy-average",
        default=None,
        help="--pendulum: wb.CQL's policy_average_tau, a rate or 'none' (the trained policy acts; "
        "d3rlpy has no such option)",
    )
    parser.add_argument(
        "--cql-entropy-backup",
        action="store_true",
        help="--pendulum: CQL's soft (SAC) backup in the TD target (d3rlpy's soft_q_backup too)",
    )
    args = parser.parse_args()
    if args.pendulum and args.ope:
        pendulum_ope(args)
        return
    if args.pendulum:
        pendulum(args)
        return
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0 = time.process_time()
        data = collect(seed, args.transitions or 50_000, args.epsilon, args.teacher_steps, args.cache)
        train, held = data.split(0.1, seed=seed)
        line = [f"seed {seed}: behaviour {data.episode_returns().mean():6.1f} ({data.num_episodes} episodes)"]
        for cls in (wb.BCQ, wb.CQL):
            agent = cls(dataset=train, seed=seed)
            wb.Session(agent, dataset=train, seed=seed).run(steps=args.steps or 5000)
            returns = agent.play("CartPole-v1", episodes=10, seed=1000 + seed)
            truth = discounted(returns.lengths, 0.99)
            est = wb.evaluate_offline(agent, held, gamma=0.99, fqe_steps=5000)
            line.append(
                f"{cls.__name__} {np.mean(returns):6.1f} true disc {truth:5.1f} dr {est['dr'].value:5.1f} "
                f"({est['dr'].value / truth - 1:+.0%}) sdr {est['sdr'].value:5.1f} "
                f"({est['sdr'].value / truth - 1:+.0%})"
            )
        line.append(f"cpu {time.process_time() - t0:.0f}s")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
