"""Image observations: rl-workbench against Stable-Baselines3 on MinAtar Breakout, and replay memory size.

1. MinAtar Breakout (``MinAtar/Breakout-v1``: 10x10x4 frames as uint8), PPO and DQN, the same settings
   and budget in both libraries, interleaved seed by seed so machine noise hits both alike. Both use the
   same small CNN (16 3x3 filters, 128 features; SB3 through ``features_extractor_class``) and no hidden
   layers after it, shared by the policy and value heads in both (SB3's default ``share_features_extractor``,
   ours ``share_encoder``).
   Prints per seed the final evaluation (10 deterministic episodes) and the wall time, then the ratio
   of median wall times (workbench / SB3; lower is faster).
2. ``--atari-sps``: env steps per second of PPO on Atari Breakout frame stacks (``BreakoutNoFrameskip-v4``
   through ``workbench.envs.make_env`` for both libraries, so the envs cost the same), the zoo's settings
   (8 envs, 128 steps, 4 epochs, minibatches of 256, Nature CNN): ours with one shared CNN, ours with one
   CNN per network (``share_encoder=False``) and SB3's ``CnnPolicy``, interleaved round by round, CPU
   time (``time.process_time``, every thread) and wall time per run, under one torch thread.
3. The memory of a 100k-transition DQN replay of Atari frame stacks (4x84x84 uint8), ours and SB3's,
   with and without ``optimize_memory_usage`` (the bytes its arrays take when full).
4. ``--dtypes``: what each observation's own dtype saves (issue 41), on an Atari-sized frame stack
   (4x84x84 uint8, cheap synthetic frames so the env does not hide the transport) and on a Dict of that
   frame stack and an 8-float vector: bytes per transition in a DQN replay memory and in a saved dataset,
   bytes per env step a local worker sends, and env steps per second through 2 local workers x 4 envs
   (no agent, random actions; the median of ``--seeds`` rounds). Run it on a tree before the change
   (``PYTHONPATH=/path/to/old/tree``) to get the "before" column.

    python benchmarks/images.py --steps 100000 --seeds 3      # the full run (about 10 minutes a run here)
    python benchmarks/images.py --steps 10000 --seeds 1 --agents ppo
    python benchmarks/images.py --memory-only
    nice python benchmarks/images.py --atari-sps --steps 2048 --seeds 3
    python benchmarks/images.py --dtypes --steps 2000 --seeds 3

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import workbench as wb

ENV = "MinAtar/Breakout-v1"

PPO_SETTINGS = dict(
    n_envs=8,
    n_steps=128,
    batch_size=256,
    n_epochs=4,
    learning_rate=2.5e-4,
    clip_range=0.1,
    ent_coef=0.01,
    vf_coef=0.5,
    gamma=0.99,
    gae_lambda=0.95,
    max_grad_norm=0.5,
)
DQN_SETTINGS = dict(
    buffer_size=100_000,
    learning_rate=1e-4,
    batch_size=32,
    learning_starts=5_000,
    target_update_interval=1_000,
    train_freq=4,
    gradient_steps=1,
    gamma=0.99,
    max_grad_norm=10.0,
)
DQN_EPS = (1.0, 0.01, 0.1)  # start, end, fraction of the budget


def run_workbench(algo: str, seed: int, steps: int) -> tuple[float, float]:
    if algo == "ppo":
        agent = wb.PPO(ENV, seed=seed, net_arch=(), encoder="small", **PPO_SETTINGS)
    else:
        agent = wb.DQN(
            ENV,
            seed=seed,
            net_arch=(),
            encoder="small",
            double_q=False,
            tau=1.0,
            exploration=wb.EpsilonGreedy(*DQN_EPS),
            **DQN_SETTINGS,
        )
    session = wb.Session(agent, ENV, seed=seed)
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    returns = agent.play(ENV, episodes=10, seed=10_000 + seed, max_steps=5_000)
    return wall, float(np.mean(returns))


def _sb3_small_cnn():
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class SmallCNN(BaseFeaturesExtractor):
        """The same network as workbench's encoder="small": 16 3x3 filters, 128 features."""

        def __init__(self, observation_space, features_dim: int = 128) -> None:
            super().__init__(observation_space, features_dim)
            c, h, w = observation_space.shape  # SB3 hands images channels first
            self.cnn = nn.Sequential(nn.Conv2d(c, 16, 3), nn.ReLU(), nn.Flatten())
            self.linear = nn.Sequential(nn.Linear(16 * (h - 2) * (w - 2), features_dim), nn.ReLU())

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.linear(self.cnn(obs))

    return SmallCNN


def run_sb3(algo: str, seed: int, steps: int) -> tuple[float, float]:
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    from workbench.envs import make_env

    policy_kwargs = dict(features_extractor_class=_sb3_small_cnn(), net_arch=[])
    if algo == "ppo":
        s = dict(PPO_SETTINGS)
        env = make_vec_env(lambda: make_env(ENV), n_envs=s.pop("n_envs"), seed=seed)
        model = PPO("CnnPolicy", env, seed=seed, device="cpu", policy_kwargs=policy_kwargs, **s)
    else:
        env = make_vec_env(lambda: make_env(ENV), n_envs=1, seed=seed)
        start, end, fraction = DQN_EPS
        model = DQN(
            "CnnPolicy",
            env,
            seed=seed,
            device="cpu",
            policy_kwargs=policy_kwargs,
            tau=1.0,
            exploration_initial_eps=start,
            exploration_final_eps=end,
            exploration_fraction=fraction,
            **DQN_SETTINGS,
        )
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    eval_env = make_vec_env(lambda: make_env(ENV), n_envs=1, seed=10_000 + seed)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    return wall, float(mean)


ATARI = "BreakoutNoFrameskip-v4"


def atari_ppo_run(which: str, seed: int, steps: int) -> tuple[float, float]:
    """CPU and wall seconds of ``steps`` env steps of PPO on Atari frame stacks (see the module doc)."""
    from workbench.envs import make_env

    s = dict(PPO_SETTINGS)
    if which == "sb3":
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env

        env = make_vec_env(lambda: make_env(ATARI), n_envs=s.pop("n_envs"), seed=seed)
        model = PPO("CnnPolicy", env, seed=seed, device="cpu", **s)
        c0, t0 = time.process_time(), time.perf_counter()
        model.learn(total_timesteps=steps)
    else:
        # SB3's CnnPolicy: the Nature CNN, then the linear heads (no hidden layers), orthogonal init.
        agent = wb.PPO(ATARI, seed=seed, net_arch=(), share_encoder=which == "shared", **s)
        session = wb.Session(agent, ATARI, seed=seed)
        c0, t0 = time.process_time(), time.perf_counter()
        session.run(steps=steps)
    return time.process_time() - c0, time.perf_counter() - t0


def atari_sps(steps: int, rounds: int) -> None:
    """Interleaved rounds of the three PPO runs; medians and ratios of CPU and wall time."""
    cpu: dict[str, list[float]] = {"shared": [], "separate": [], "sb3": []}
    wall: dict[str, list[float]] = {k: [] for k in cpu}
    print(f"{ATARI} PPO, {steps:,} env steps per run, 8 envs, {torch.get_num_threads()} torch thread(s):")
    for r in range(rounds):
        order = list(cpu)
        order = order[r % 3 :] + order[: r % 3]  # rotate who goes first
        for which in order:
            c, w = atari_ppo_run(which, r, steps)
            cpu[which].append(c)
            wall[which].append(w)
            print(
                f"  round {r} {which:9s} cpu {c:6.1f} s ({steps / c:5.0f} steps per CPU-s)  wall {w:6.1f} s", flush=True
            )
    med = {k: statistics.median(v) for k, v in cpu.items()}
    medw = {k: statistics.median(v) for k, v in wall.items()}
    for k in cpu:
        print(f"  {k:9s} median {steps / med[k]:5.0f} steps per CPU-second, {steps / medw[k]:5.0f} per wall-second")
    print(
        f"  CPU time shared / separate: {med['shared'] / med['separate']:.2f}, "
        f"shared / SB3: {med['shared'] / med['sb3']:.2f}, separate / SB3: {med['separate'] / med['sb3']:.2f}"
    )
    print(
        f"  wall time shared / separate: {medw['shared'] / medw['separate']:.2f}, "
        f"shared / SB3: {medw['shared'] / medw['sb3']:.2f}"
    )


def replay_memory_bytes() -> None:
    """Bytes of a full 100k-transition DQN replay memory of 4x84x84 uint8 frames, per library."""
    from gymnasium import spaces

    from workbench.memory import ReplayMemory

    n, shape = 100_000, (4, 84, 84)
    rows = []
    for optimize in (False, True):
        mem = ReplayMemory(n, shape, obs_dtype=np.uint8, optimize_memory_usage=optimize)
        rows.append(("workbench", optimize, mem.nbytes()))
    try:
        from stable_baselines3.common.buffers import ReplayBuffer

        obs_space = spaces.Box(0, 255, shape, np.uint8)
        for optimize in (False, True):
            buf = ReplayBuffer(
                n,
                obs_space,
                spaces.Discrete(4),
                device="cpu",
                optimize_memory_usage=optimize,
                handle_timeout_termination=not optimize,
            )
            names = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
            total = sum(getattr(buf, name).nbytes for name in names if getattr(buf, name, None) is not None)
            rows.append(("sb3", optimize, total))
    except ImportError:
        print("(stable-baselines3 not installed: its replay memory is not measured)")
    print(f"\nDQN replay memory, {n:,} transitions of {'x'.join(map(str, shape))} uint8 frames (arrays when full):")
    for lib, optimize, total in rows:
        print(
            f"  {lib:10s} optimize_memory_usage={optimize!s:5s}  {total / 2**30:6.2f} GiB  "
            f"{total / n:9,.0f} bytes/transition"
        )
    print(
        "  (workbench with optimize_memory_usage also keeps the final frame stack of each ended episode: "
        f"{int(np.prod(shape)):,} bytes per episode)"
    )


class FrameStackEnv(gym.Env):
    """Atari-sized observations without an emulator: 4x84x84 uint8 frame stacks (one moving bar), or with
    ``vector=True`` a Dict of that stack and 8 floats; 4 actions, 100-step episodes."""

    def __init__(self, vector: bool = False) -> None:
        from gymnasium import spaces

        frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.observation_space = (
            spaces.Dict({"frames": frames, "vector": spaces.Box(-1.0, 1.0, (8,), np.float32)}) if vector else frames
        )
        self.action_space = spaces.Discrete(4)
        self.vector, self.t = vector, 0
        self.frames = np.zeros((4, 84, 84), np.uint8)

    def _obs(self):  # type: ignore[no-untyped-def]
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = 0
        self.frames[-1, :, self.t % 84] = 255
        frames = self.frames.copy()
        if self.vector:
            return {"frames": frames, "vector": np.full(8, self.t / 100, np.float32)}
        return frames

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        self.t = 0
        self.frames[:] = 0
        return self._obs(), {}

    def step(self, action):  # type: ignore[no-untyped-def]
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 100, {}


def _make_frame_env(vector: bool):  # type: ignore[no-untyped-def]
    return lambda: FrameStackEnv(vector)


def dtype_savings(steps: int, rounds: int) -> None:
    """Bytes per transition (replay memory, dataset, worker messages) and local workers' throughput."""
    import os
    import tempfile

    from workbench.envs.core import as_env_source, flat_observation_space
    from workbench.parallel import make_runner

    print(f"workbench from {os.path.dirname(wb.__file__)}")
    for vector in (False, True):
        make = _make_frame_env(vector)
        env = make()
        name = "Dict(4x84x84 uint8 frames, 8 floats)" if vector else "4x84x84 uint8 frame stack"
        flat = flat_observation_space(env.observation_space)
        agent = wb.DQN(make, buffer_size=1000, learning_starts=10**9, net_arch=(8,), encoder="small")
        # Every slot written, so both layouts hold what they would when full.
        obs = np.stack([np.asarray(flat.sample()) for _ in range(8)])
        for _ in range(1000 // 8):
            agent.memory.add(obs, np.zeros(8, np.int64), np.zeros(8, np.float32), obs, np.zeros(8), 0.99)
        per_transition = agent.memory.nbytes() / 1000
        rows = 200
        ds = wb.Dataset(
            np.repeat(obs[:1], rows, 0),
            np.zeros(rows, np.int64),
            np.zeros(rows),
            np.repeat(obs[:1], rows, 0),
            np.zeros(rows, bool),
            np.arange(rows) % 100 == 99,
            observation_space=env.observation_space,
            action_space=env.action_space,
        )
        with tempfile.TemporaryDirectory() as tmp:
            ds.save(os.path.join(tmp, "ds"))
            npz = os.path.getsize(os.path.join(tmp, "ds", "arrays.npz")) / rows
        rates, sent = [], None
        for _ in range(rounds):
            runner = make_runner(as_env_source(make), 8, seed=0, num_workers=2, backend="local")
            try:
                first = runner.reset()
                rng = np.random.default_rng(0)
                runner.step(rng.integers(0, 4, 8))
                t0 = time.perf_counter()
                for _ in range(steps // 8):
                    out = runner.step(rng.integers(0, 4, 8))
                rates.append((steps // 8) * 8 / (time.perf_counter() - t0))
                sent = out[0].dtype.itemsize if sent is None else sent
            finally:
                runner.close()
        codec = getattr(__import__("workbench.envs.core", fromlist=["x"]), "ObservationCodec", None)
        wire = codec(env.observation_space).row_bytes if codec is not None else 4 * int(np.prod(flat.shape))
        print(f"\n{name}: flat rows of {int(np.prod(flat.shape)):,} columns, runner observations {first.dtype}")
        print(f"  replay memory (DQN, 1000 transitions):  {per_transition:12,.0f} bytes/transition")
        print(f"  dataset on disk (arrays.npz):           {npz:12,.0f} bytes/transition")
        print(f"  worker message, observation part:       {wire:12,.0f} bytes/env step")
        print(
            f"  2 local workers x 4 envs:               {statistics.median(rates):12,.0f} env steps/s "
            f"(rounds: {', '.join(f'{r:,.0f}' for r in rates)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run (default 100000)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--agents", nargs="+", default=["ppo", "dqn"], choices=["ppo", "dqn"])
    parser.add_argument("--no-sb3", action="store_true", help="workbench only")
    parser.add_argument("--memory-only", action="store_true", help="only the replay memory sizes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both libraries")
    parser.add_argument("--atari-sps", action="store_true", help="only PPO steps per second on Atari frame stacks")
    parser.add_argument(
        "--dtypes",
        action="store_true",
        help="only bytes per transition and worker throughput, frames as bytes (issue 41)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.dtypes:
        dtype_savings(args.steps, args.seeds)
        return
    if args.atari_sps:
        atari_sps(args.steps, args.seeds)
        return
    replay_memory_bytes()
    if args.memory_only:
        return
    for algo in args.agents:
        walls: dict[str, list[float]] = {"workbench": [], "sb3": []}
        print(f"\n{ENV} {algo.upper()}, {args.steps:,} steps per run:")
        for seed in range(args.seeds):
            libs = [("workbench", run_workbench)] + ([] if args.no_sb3 else [("sb3", run_sb3)])
            if seed % 2:
                libs.reverse()  # alternate who goes first
            for lib, run in libs:
                wall, ret = run(algo, seed, args.steps)
                walls[lib].append(wall)
                print(
                    f"  seed {seed} {lib:10s} eval {ret:7.2f}  wall {wall:7.1f} s  ({args.steps / wall:,.0f} steps/s)",
                    flush=True,
                )
        if walls["sb3"]:
            ratio = statistics.median(walls["workbench"]) / statistics.median(walls["sb3"])
            print(f"  median wall time, workbench / SB3: {ratio:.2f}")


if __name__ == "__main__":
    main()
