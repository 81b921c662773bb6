"""Speed of every agent against Stable-Baselines3 at the zoo's settings, and against the floor.

For PPO, A2C (CartPole-v1), DQN (CartPole-v1), SAC, TD3 and DDPG (Pendulum-v1) with the zoo's settings
(``wb.preset``; SB3 gets the same hyperparameters), each library trains in its own subprocess, interleaved
seed by seed (the order rotates each seed) so the load of a shared machine hits all of them alike. SB3 runs
with 1 and 2 torch threads and the faster median counts. ``--baseline PATH`` adds a second workbench
checkout (for example the main branch) to the same run, for before/after ratios.

The floor is what the same work costs without a framework: the same number of gradient steps of the same
networks (same sizes, batch, optimizer, losses) in a bare PyTorch loop, plus stepping the raw env alone
(``gym.make`` envs, preallocated random actions) for the same number of env steps. ``wb/floor`` says how
far the framework is from it.

Printed per agent and library: medians of wall time and CPU time (``time.process_time`` of the training
process, all its threads; the fairer figure on a loaded machine), the mean final evaluation (10
deterministic episodes, not timed), the ratio of medians to SB3's (lower is faster) and to the floor.

``--short N``: the off-policy agents (DQN, SAC, TD3, DDPG) train for about N gradient steps instead of
the zoo's budget (learning_starts 100 for SAC, TD3 and DDPG, so the update count is equal in both
libraries; DQN keeps learning_starts 1000, train_freq 256 and 128 gradient steps per update), and the
on-policy ones for ``--short-on`` env steps. The evaluation then says little; the speed is the point.

    python benchmarks/speed.py                                # 3 seeds, every agent, zoo budgets (long)
    python benchmarks/speed.py --short 2000 --seeds 3         # off-policy at 2,000 updates
    python benchmarks/speed.py --agents ppo,sac --short 1000 --sb3-threads 1 --baseline /work/main

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENV = {
    "ppo": "CartPole-v1",
    "a2c": "CartPole-v1",
    "dqn": "CartPole-v1",
    "sac": "Pendulum-v1",
    "td3": "Pendulum-v1",
    "ddpg": "Pendulum-v1",
}
OFF_POLICY = ("dqn", "sac", "td3", "ddpg")
ROOT = Path(__file__).resolve().parent.parent


# -- the settings: the zoo's, as workbench's presets hold them -------------------------------------


def settings(algo: str, short: int | None, short_on: int | None) -> tuple[int, dict]:
    """(env steps, overrides of the preset) for one agent; both libraries train with them."""
    import workbench as wb

    spec = wb.PRESETS[(ENV[algo], algo)]
    steps, over = spec.steps, {}
    if algo in OFF_POLICY and short:
        if algo == "dqn":  # 128 gradient steps every 256 env steps after 1,000
            steps = 1000 + 256 * max(1, math.ceil(short / 128))
        else:
            over["learning_starts"] = 100
            steps = 100 + short
    elif algo not in OFF_POLICY and short_on:
        steps = short_on
    return steps, over


def hyper(algo: str, over: dict) -> dict:
    """The agent's hyperparameters: its defaults, the preset's values and ``over``."""
    import dataclasses

    import workbench as wb

    cls = wb.AGENTS[algo]
    values = {f.name: getattr(cls.Config(), f.name) for f in dataclasses.fields(cls.Config)}
    values.update(wb.PRESETS[(ENV[algo], algo)].hyperparameters)
    values.update(over)
    return values


# -- one run of each kind (in a child process) ------------------------------------------------


def run_workbench(algo: str, seed: int, steps: int, over: dict) -> dict:
    import numpy as np

    import workbench as wb

    agent, env = wb.preset(ENV[algo], algo, seed=seed, **over)
    session = wb.Session(agent, env, seed=seed)
    w0, c0 = time.perf_counter(), time.process_time()
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if session.error is not None:
        raise session.error
    score = float(np.mean(agent.play(ENV[algo], episodes=10, seed=10_000 + seed)))
    return {"wall": wall, "cpu": cpu, "eval": score, "updates": agent.num_updates}


def run_sb3(algo: str, seed: int, steps: int, over: dict) -> dict:
    import gymnasium as gym
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    h = hyper(algo, over)

    def sched(value):  # workbench schedules of progress (0 -> 1) to SB3's (1 -> 0)
        return (lambda remaining: float(value(1.0 - remaining))) if callable(value) else value

    env_id = ENV[algo]
    common = dict(seed=seed, device="cpu", gamma=h["gamma"], learning_rate=sched(h["learning_rate"]))
    arch = list(h["net_arch"])
    if algo in ("ppo", "a2c"):
        env = make_vec_env(env_id, n_envs=h["n_envs"], seed=seed)
        kw = dict(
            n_steps=h["n_steps"],
            gae_lambda=h["gae_lambda"],
            ent_coef=h["ent_coef"],
            vf_coef=h["vf_coef"],
            max_grad_norm=h["max_grad_norm"],
            normalize_advantage=h["normalize_advantage"],
            policy_kwargs=dict(net_arch=arch),
            **common,
        )
        if algo == "ppo":
            model = sb3.PPO(
                "MlpPolicy",
                env,
                batch_size=h["batch_size"],
                n_epochs=h["n_epochs"],
                clip_range=sched(h["clip_range"]),
                **kw,
            )
        else:
            model = sb3.A2C("MlpPolicy", env, **kw)
    elif algo == "dqn":
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        e = h["exploration"]
        model = sb3.DQN(
            "MlpPolicy",
            env,
            batch_size=h["batch_size"],
            buffer_size=h["buffer_size"],
            learning_starts=h["learning_starts"],
            target_update_interval=h["target_update_interval"],
            train_freq=h["train_freq"],
            gradient_steps=h["gradient_steps"],
            exploration_fraction=e.fraction,
            exploration_initial_eps=e.start,
            exploration_final_eps=e.end,
            max_grad_norm=h["max_grad_norm"],
            policy_kwargs=dict(net_arch=arch),
            **common,
        )
    else:
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        kw = dict(
            batch_size=h["batch_size"],
            buffer_size=h["buffer_size"],
            learning_starts=h["learning_starts"],
            tau=h["tau"],
            train_freq=h["train_freq"],
            gradient_steps=h["gradient_steps"],
            policy_kwargs=dict(net_arch=arch),
            **common,
        )
        if algo == "sac":
            model = sb3.SAC("MlpPolicy", env, **kw)
        else:
            noise = NormalActionNoise(mean=[0.0], sigma=[h["exploration"].stddev])
            cls = sb3.TD3 if algo == "td3" else sb3.DDPG
            model = cls("MlpPolicy", env, action_noise=noise, **kw)
    w0, c0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    eval_env = gym.make(env_id)
    eval_env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    return {"wall": wall, "cpu": cpu, "eval": float(mean), "updates": int(model._n_updates)}


def gradient_steps(algo: str, steps: int, h: dict) -> int:
    """How many gradient steps the agent takes in ``steps`` env steps."""
    if algo in ("ppo", "a2c"):
        rollout = h["n_envs"] * h["n_steps"]
        per = h["n_epochs"] * math.ceil(rollout / h["batch_size"]) if algo == "ppo" else 1
        return (steps // rollout) * per
    if algo == "dqn":
        # an update at learning_starts (the steps counted since the start are due), then every train_freq
        due = steps - h["learning_starts"]
        return (1 + due // h["train_freq"]) * h["gradient_steps"] if due >= 0 else 0
    return max(0, steps - h["learning_starts"])


def run_floor(algo: str, seed: int, steps: int, over: dict) -> dict:
    """The same number of gradient steps of the same networks in a bare PyTorch loop, plus raw env steps."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(seed)
    h = hyper(algo, over)
    env_id = ENV[algo]
    n_grad = gradient_steps(algo, steps, h)
    arch = list(h["net_arch"])

    def net(i: int, o: int, act=nn.ReLU, tanh_out: bool = False) -> nn.Sequential:
        layers, last = [], i
        for w in arch:
            layers += [nn.Linear(last, w), act()]
            last = w
        layers.append(nn.Linear(last, o))
        if tanh_out:
            layers.append(nn.Tanh())
        return nn.Sequential(*layers)

    def adam(*mods, lr=1e-3, eps=1e-8):
        return torch.optim.Adam([p for m in mods for p in m.parameters()], lr=lr, eps=eps, fused=True)

    obs_dim = 4 if env_id == "CartPole-v1" else 3
    b = h.get("batch_size", h.get("n_envs", 1) * h.get("n_steps", 1))
    if algo == "a2c":
        b = h["n_envs"] * h["n_steps"]
    elif algo == "ppo":
        b = min(b, h["n_envs"] * h["n_steps"])
    obs, next_obs = torch.randn(b, obs_dim), torch.randn(b, obs_dim)
    rew, done = torch.randn(b), torch.zeros(b)

    if algo in ("ppo", "a2c"):
        actor, critic = net(obs_dim, 2, nn.Tanh), net(obs_dim, 1, nn.Tanh)
        params = list(actor.parameters()) + list(critic.parameters())
        opt = (
            adam(actor, critic, eps=1e-5)
            if algo == "ppo"
            else torch.optim.RMSprop(params, lr=7e-4, alpha=0.99, eps=1e-5, foreach=True)
        )
        act, adv, old_lp, ret = torch.randint(0, 2, (b,)), torch.randn(b), torch.randn(b) - 1, torch.randn(b)

        def step() -> None:
            logp = torch.log_softmax(actor(obs), -1)
            lp = logp.gather(1, act.unsqueeze(1)).squeeze(1)
            ent = -(logp.exp() * logp).sum(-1).mean()
            a = (adv - adv.mean()) / (adv.std() + 1e-8) if h["normalize_advantage"] else adv
            if algo == "ppo":
                ratio = (lp - old_lp).exp()
                pl = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
            else:
                pl = -(a * lp).mean()
            loss = pl + 0.5 * (critic(obs).squeeze(-1) - ret).pow(2).mean() - h["ent_coef"] * ent
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, h["max_grad_norm"], foreach=True)
            opt.step()
    elif algo == "dqn":
        q, q_t = net(obs_dim, 2), net(obs_dim, 2)
        q_t.requires_grad_(False)
        opt = adam(q)
        act = torch.randint(0, 2, (b,))

        def step() -> None:
            with torch.no_grad():
                target = rew + 0.99 * (1 - done) * q_t(next_obs).max(1).values
            qa = q(obs).gather(1, act.unsqueeze(1)).squeeze(1)
            loss = nn.functional.smooth_l1_loss(qa, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(q.parameters(), h["max_grad_norm"], foreach=True)
            opt.step()
    else:
        n_critics = 1 if algo == "ddpg" else 2
        critics = [net(obs_dim + 1, 1) for _ in range(n_critics)]
        targets = [net(obs_dim + 1, 1).requires_grad_(False) for _ in range(n_critics)]
        c_params = [p for c in critics for p in c.parameters()]
        t_params = [p for c in targets for p in c.parameters()]
        c_opt = torch.optim.Adam(c_params, lr=1e-3, fused=True)
        act = torch.rand(b, 1) * 2 - 1
        counter = [0]
        if algo == "sac":
            actor = net(obs_dim, 2)
            log_alpha = torch.zeros((), requires_grad=True)
            a_opt, al_opt = adam(actor), torch.optim.Adam([log_alpha], lr=1e-3, fused=True)

            def policy(x):
                mu, log_std = actor(x).chunk(2, -1)
                std = log_std.clamp(-20, 2).exp()
                u = mu + std * torch.randn_like(mu)
                a = torch.tanh(u)
                lp = (-0.5 * ((u - mu) / std).pow(2) - std.log() - 0.9189385).sum(-1)
                return a, lp - torch.log(1 - a.pow(2) + 1e-6).sum(-1)

            def step() -> None:
                pi, lp = policy(obs)
                al_loss = -(log_alpha * (lp.detach() - 1)).mean()
                al_opt.zero_grad(set_to_none=True)
                al_loss.backward()
                al_opt.step()
                alpha = log_alpha.detach().exp()
                with torch.no_grad():
                    na, nlp = policy(next_obs)
                    x = torch.cat([next_obs, na], -1)
                    nq = torch.min(targets[0](x), targets[1](x)).squeeze(-1) - alpha * nlp
                    y = rew + 0.99 * (1 - done) * nq
                x = torch.cat([obs, act], -1)
                c_loss = sum(0.5 * (c(x).squeeze(-1) - y).pow(2).mean() for c in critics)
                c_opt.zero_grad(set_to_none=True)
                c_loss.backward()
                c_opt.step()
                for c in critics:
                    c.requires_grad_(False)
                x = torch.cat([obs, pi], -1)
                a_loss = (alpha * lp - torch.min(critics[0](x), critics[1](x)).squeeze(-1)).mean()
                a_opt.zero_grad(set_to_none=True)
                a_loss.backward()
                a_opt.step()
                for c in critics:
                    c.requires_grad_(True)
                with torch.no_grad():
                    torch._foreach_lerp_(t_params, c_params, 0.005)
        else:
            actor, actor_t = net(obs_dim, 1, tanh_out=True), net(obs_dim, 1, tanh_out=True).requires_grad_(False)
            a_opt = adam(actor)
            a_params, at_params = list(actor.parameters()), list(actor_t.parameters())
            delay = 2 if algo == "td3" else 1

            def step() -> None:
                with torch.no_grad():
                    na = actor_t(next_obs)
                    if algo == "td3":
                        na = (na + (torch.randn_like(na) * 0.2).clamp(-0.5, 0.5)).clamp(-1, 1)
                    x = torch.cat([next_obs, na], -1)
                    nq = targets[0](x) if n_critics == 1 else torch.min(targets[0](x), targets[1](x))
                    y = rew + 0.98 * (1 - done) * nq.squeeze(-1)
                x = torch.cat([obs, act], -1)
                c_loss = sum((c(x).squeeze(-1) - y).pow(2).mean() for c in critics)
                c_opt.zero_grad(set_to_none=True)
                c_loss.backward()
                c_opt.step()
                counter[0] += 1
                if counter[0] % delay == 0:
                    critics[0].requires_grad_(False)
                    a_loss = -critics[0](torch.cat([obs, actor(obs)], -1)).mean()
                    a_opt.zero_grad(set_to_none=True)
                    a_loss.backward()
                    a_opt.step()
                    critics[0].requires_grad_(True)
                    with torch.no_grad():
                        torch._foreach_lerp_(t_params, c_params, 0.005)
                        torch._foreach_lerp_(at_params, a_params, 0.005)

    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n_grad):
        step()
    grad_wall, grad_cpu = time.perf_counter() - w0, time.process_time() - c0

    n_envs = h.get("n_envs", 1)
    envs = [gym.make(env_id) for _ in range(n_envs)]
    for i, e in enumerate(envs):
        e.reset(seed=seed + i)
    rng = np.random.default_rng(seed)
    if env_id == "CartPole-v1":
        actions = rng.integers(0, 2, size=steps + n_envs)
    else:
        actions = rng.uniform(-2, 2, size=(steps + n_envs, 1)).astype(np.float32)
    w0, c0 = time.perf_counter(), time.process_time()
    done_steps = 0
    while done_steps < steps:
        for e in envs:
            _, _, term, trunc, _ = e.step(actions[done_steps])
            done_steps += 1
            if term or trunc:
                e.reset()
    env_wall, env_cpu = time.perf_counter() - w0, time.process_time() - c0
    return {
        "wall": grad_wall + env_wall,
        "cpu": grad_cpu + env_cpu,
        "eval": math.nan,
        "updates": n_grad,
        "grad_wall": grad_wall,
        "env_wall": env_wall,
    }


def child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    steps, over = settings(args.algo, args.short, args.short_on)
    fn = {"wb": run_workbench, "sb3": run_sb3, "floor": run_floor}[args.kind]
    result = fn(args.algo, args.seed, steps, over)
    result["steps"] = steps
    print("RESULT " + json.dumps(result), flush=True)


# -- the parent: interleave, collect, print ---------------------------------------------------


def launch(kind: str, path: Path, algo: str, seed: int, threads: int, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        kind,
        "--algo",
        algo,
        "--seed",
        str(seed),
        "--threads",
        str(threads),
    ]
    if args.short:
        cmd += ["--short", str(args.short)]
    if args.short_on:
        cmd += ["--short-on", str(args.short_on)]
    env = dict(os.environ, PYTHONPATH=str(path))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{kind} {algo} seed {seed} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="ppo,a2c,dqn,sac,td3,ddpg")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--short", type=int, default=None, help="off-policy agents: about N gradient steps")
    parser.add_argument("--short-on", type=int, default=None, help="on-policy agents: N env steps")
    parser.add_argument("--sb3-threads", default="1,2", help="torch threads tried for SB3 (the faster counts)")
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--no-floor", action="store_true")
    parser.add_argument("--baseline", default=None, help="another workbench checkout to time in the same run")
    parser.add_argument("--candidate", default=str(ROOT), help="the workbench checkout timed as wb (default: this)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--json", default=None, help="write every result here")
    parser.add_argument(
        "--report",
        nargs="*",
        default=None,
        help="print the table of these --json files (runs of other seeds, merged) and exit",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--algo", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.kind = args.child
        child(args)
        return

    # (label, kind, PYTHONPATH, torch threads)
    libs = [("wb", "wb", Path(args.candidate).resolve(), 1)]
    if args.baseline:
        libs.append(("wb-base", "wb", Path(args.baseline).resolve(), 1))
    if not args.no_sb3:
        cand = Path(args.candidate).resolve()
        libs += [(f"sb3-t{t}", "sb3", cand, int(t)) for t in args.sb3_threads.split(",")]
    if not args.no_floor:
        libs.append(("floor", "floor", Path(args.candidate).resolve(), 1))
    agents = args.agents.split(",")
    results: dict[tuple[str, str], list[dict]] = {}
    if args.report is not None:
        for name in args.report:
            for key, rs in json.loads(Path(name).read_text()).items():
                algo, label = key.split("|")
                results.setdefault((algo, label), []).extend(rs)
        labels = {lab for _, lab in results}
        libs = [lib for lib in libs if lib[0] in labels]
        agents = [a for a in agents if any((a, lab) in results for lab in labels)]
    for seed in range(args.first_seed, args.first_seed + args.seeds) if args.report is None else ():
        for algo in agents:
            order = libs[seed % len(libs) :] + libs[: seed % len(libs)]  # rotate: no library always first
            for label, kind, path, threads in order:
                r = launch(kind, path, algo, seed, threads, args)
                results.setdefault((algo, label), []).append(r)
                print(
                    f"  {algo:4s} {label:8s} seed {seed}: wall {r['wall']:7.2f} s  cpu {r['cpu']:7.2f} s  "
                    f"eval {r['eval']:8.1f}  updates {r['updates']}  steps {r['steps']}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps({f"{a}|{lib}": v for (a, lib), v in results.items()}, indent=1))

    def med(algo: str, label: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(algo, label)])

    print()
    print(
        f"{'agent':5s} {'library':8s} {'steps':>7s} {'wall':>8s} {'cpu':>8s} {'eval':>8s} "
        f"{'wall/sb3':>8s} {'cpu/sb3':>8s} {'wall/floor':>10s} {'cpu/floor':>9s}"
    )
    for algo in agents:
        sb3_labels = [lab for lab, kind, _, _ in libs if kind == "sb3"]
        best = min(sb3_labels, key=lambda lab: med(algo, lab, "wall")) if sb3_labels else None
        for label, _, _, _ in libs:
            rs = results[(algo, label)]
            evals = [r["eval"] for r in rs if not math.isnan(r["eval"])]
            ev = f"{statistics.mean(evals):8.1f}" if evals else "       -"
            w, c = med(algo, label, "wall"), med(algo, label, "cpu")
            rw = f"{w / med(algo, best, 'wall'):8.2f}" if best else "       -"
            rc = f"{c / med(algo, best, 'cpu'):8.2f}" if best else "       -"
            fw = f"{w / med(algo, 'floor', 'wall'):10.2f}" if not args.no_floor else "         -"
            fc = f"{c / med(algo, 'floor', 'cpu'):9.2f}" if not args.no_floor else "        -"
            mark = "*" if label == best else " "
            print(f"{algo:5s} {label:7s}{mark} {rs[0]['steps']:7d} {w:8.2f} {c:8.2f} {ev} {rw} {rc} {fw} {fc}")
    print("\nmedians over seeds, seconds; ratios of medians (lower is faster); * = SB3's faster thread count,")
    print("the one the ratios divide by; floor = bare PyTorch gradient steps + raw env steps of the same count")


if __name__ == "__main__":
    main()
