"""The benchmark report: tuned presets over several seeds, each run in its own process, rendered with intervals.

``run`` trains the chosen (task, agent) rows of :data:`workbench.presets.PRESETS` at their step budgets, one
process per run (one at a time, or ``--parallel 2``), and writes each run's result as one JSON file under
``benchmarks/results/`` (the final evaluation of 20 deterministic episodes on a fresh env, the evaluation curve,
the last training episodes, steps, wall and CPU seconds, versions, settings, seed, machine). A run whose file
exists is never redone, so an interrupted ``run`` resumes where it stopped. ``--sb3`` also trains
Stable-Baselines3 at the same settings for the rows it has (:data:`SB3_AGENTS`).

``render`` writes ``docs/benchmarks.md`` from those files only: per row the interquartile mean (IQM) of the final
evaluations and its 95% stratified-bootstrap interval (the method of rliable, Agarwal et al. 2021, written in
numpy), every seed's score, time per run and steps per second, the published figure beside it
(:data:`PUBLISHED`), and a mark where the interval lies below it; a PNG per task family (evaluation curves
with their bands, IQM bars against the published scores); and, on each task where this library's SAC ran 100k
steps, the env steps TQC, CrossQ and DroQ take to reach SAC's return at 100k (:func:`sample_efficiency_section`).

    python benchmarks/report.py run --rows CartPole-v1:dqn CartPole-v1:ppo --seeds 10 --sb3
    python benchmarks/report.py run --rows CartPole-v1:dqn --seeds 10 --parallel 2
    python benchmarks/report.py render
    python benchmarks/report.py list

Each run pins one torch thread. Not part of the test suite (``tests/test_report.py`` checks the statistics
and the resuming on fake results, without training).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
EVAL_EPISODES = 20
"""Deterministic episodes of the final evaluation, on a fresh env."""
CURVE_POINTS = 20
"""Evaluations along training (5 deterministic episodes each) that make the curve."""
CURVE_EPISODES = 5
EVAL_SEED = 10_000
"""Episode ``i`` of a final evaluation resets with seed ``EVAL_SEED + 1000 * seed + i``: fresh starts, the
same for both libraries."""
SB3_AGENTS = ("a2c", "crossq", "ddpg", "dqn", "ppo", "qrdqn", "sac", "td3", "tqc")
"""Agents whose rows ``--sb3`` also trains in Stable-Baselines3 (``sample_efficiency.sb3_kwargs``)."""

# The published figures: rl-baselines3-zoo's benchmark.md (https://github.com/DLR-RM/rl-baselines3-zoo,
# benchmark.md: one trained agent per row, mean return over its evaluation episodes), as transcribed into the
# presets' ``zoo_score`` (workbench/presets.py). Rows without a published figure show "—".
PUBLISHED_SOURCE = "rl-baselines3-zoo benchmark.md"
PUBLISHED: dict[tuple[str, str], float] = {
    ("CartPole-v1", "ppo"): 500.0,
    ("CartPole-v1", "dqn"): 500.0,
    ("CartPole-v1", "a2c"): 500.0,
    ("CartPole-v1", "qrdqn"): 500.0,
    ("Acrobot-v1", "dqn"): -76.639,
    ("Acrobot-v1", "ppo"): -74.6,
    ("MountainCar-v0", "dqn"): -100.849,
    ("Pendulum-v1", "sac"): -156.995,
    ("Pendulum-v1", "td3"): -151.855,
    ("Pendulum-v1", "ddpg"): -152.099,
    ("Pendulum-v1", "ppo"): -172.225,
    ("Pendulum-v1", "a2c"): -141.19,
    ("MountainCarContinuous-v0", "sac"): 94.679,
    ("MountainCarContinuous-v0", "a2c"): 91.17,
    ("MountainCarContinuous-v0", "ppo"): 94.57,
    ("CartPoleNoVel-v1", "recurrentppo"): 500.0,
    # Box2D: benchmark.md measured LunarLander-v2 and LunarLanderContinuous-v2; the presets run v3.
    ("LunarLander-v3", "ppo"): 242.119,
    ("LunarLander-v3", "a2c"): 155.751,
    ("LunarLander-v3", "dqn"): 154.382,
    ("LunarLander-v3", "qrdqn"): 70.236,
    ("LunarLanderContinuous-v3", "ppo"): 270.863,
    ("LunarLanderContinuous-v3", "sac"): 260.390,
    ("LunarLanderContinuous-v3", "td3"): 207.451,
    ("BipedalWalker-v3", "ppo"): 287.939,
    ("BipedalWalker-v3", "sac"): 297.668,
    # MuJoCo: benchmark.md measured v3 at 1M steps; the presets run v5 (DDPG has no published MuJoCo row, MinAtar none).
    ("Hopper-v5", "ppo"): 2410.435,
    ("Hopper-v5", "a2c"): 733.454,
    ("Hopper-v5", "sac"): 2325.547,
    ("Hopper-v5", "td3"): 3606.390,
    ("HalfCheetah-v5", "ppo"): 5819.099,
    ("HalfCheetah-v5", "a2c"): 3041.174,
    ("HalfCheetah-v5", "sac"): 9535.451,
    ("HalfCheetah-v5", "td3"): 9655.666,
    ("Walker2d-v5", "ppo"): 3478.798,
    ("Walker2d-v5", "a2c"): 581.835,
    ("Walker2d-v5", "sac"): 3863.203,
    ("Walker2d-v5", "td3"): 4717.823,
    ("Ant-v5", "ppo"): 1327.158,
    ("Ant-v5", "a2c"): -44.023,
    ("Ant-v5", "sac"): 4615.791,
    ("Ant-v5", "td3"): 5813.274,
    ("Swimmer-v5", "ppo"): 281.561,
    ("Swimmer-v5", "a2c"): 200.627,
    ("Swimmer-v5", "sac"): 345.568,
    ("Swimmer-v5", "td3"): 359.127,
    # sb3-contrib's TQC (tqc.yml; benchmark.md measured Pendulum-v1, LunarLanderContinuous-v2 and MuJoCo v3).
    ("Pendulum-v1", "tqc"): -151.340,
    ("MountainCarContinuous-v0", "tqc"): 63.641,
    ("LunarLanderContinuous-v3", "tqc"): 277.956,
    ("Hopper-v5", "tqc"): 3754.199,
    ("HalfCheetah-v5", "tqc"): 12089.939,
    ("Walker2d-v5", "tqc"): 4380.720,
    ("Ant-v5", "tqc"): 3339.362,
    ("Swimmer-v5", "tqc"): 339.423,
}

MUJOCO_TASKS = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Swimmer-v5")
BUDGETS: dict[tuple[str, str], int] = {
    (task, agent): 200_000 for task in MUJOCO_TASKS for agent in ("sac", "td3", "ddpg", "tqc", "crossq")
}
"""Rows run at a budget other than their preset's: the off-policy MuJoCo rows take hours per run at the zoo's 1M
steps on a CPU, so this machine runs them at 200k (issue 50); the full budget is for a GPU machine
(``wb.preset(...).steps``). The table shows each run's steps."""

NOTES: dict[tuple[str, str], str] = {
    ("CartPole-v1", "dqn"): (
        "The zoo's settings (learning rate 2.3e-3, 128 gradient steps every 256 env steps, the target copied every "
        "10 env steps) learn CartPole and then lose it again on some seeds, in both libraries: the last training "
        "episodes of one run swing between about 20 and 500. Issue 50 audited this library's DQN against SB3 2.9's "
        "`dqn.py` (loss, clipping, target cadence, train frequency, exploration, learning start, Adam, replay "
        "sampling, bootstrapping) and found no difference; `tests/test_dqn_sb3_semantics.py` pins each. "
        "For one run that keeps what it learned, "
        "`wb.preset('CartPole-v1', 'dqn', reliable=True)` ([Algorithms](algorithms.md))."
    ),
    ("MountainCar-v0", "dqn"): (
        "Both libraries at the zoo's settings end below the published figure, with intervals of about the same "
        "width: the published figure is one trained agent, and here each seed's final greedy policy is "
        "evaluated, whether it learned to swing up in few steps, in many, or (a run that never reached the flag "
        "in its evaluation episodes) not at all. The two rows overlap: no difference between the libraries shows."
    ),
    ("MountainCarContinuous-v0", "ppo"): (
        "A sparse-reward task: a run whose policy never reaches the flag within the budget learns to stand still "
        "(its action costs energy, so its return ends a little below 0), and some seeds do so in both libraries "
        "at the zoo's settings (gSDE, 20k steps). The published figure is one trained agent; the interval here is "
        "over seeds, the failed ones included."
    ),
    ("Pendulum-v1", "crossq"): (
        "Issue 54's side by side: crossq.yml's Pendulum settings (actor and critics 256-256, an actor step every 2 "
        "critic steps) in both libraries, sb3-contrib's CrossQ on the SB3 row. The zoo publishes no CrossQ score. "
        "`benchmarks/continuous.py` holds the same pair over more seeds, with gradient steps per second "
        "([Algorithms](algorithms.md))."
    ),
    ("MountainCarContinuous-v0", "crossq"): (
        "crossq.yml's row in both libraries: gSDE with expln (`use_expln`, `log_std_init` -1), actor and critics "
        "64-64, 32 gradient steps every 32 env steps, an actor step every 2; sb3-contrib's CrossQ on the SB3 row. "
        "The zoo publishes no CrossQ score."
    ),
    ("Pendulum-v1", "droq"): (
        "DroQ has no SB3 or sb3-contrib version to run beside it (it is in SBX, on JAX), and the zoo publishes no "
        "score. The preset is the paper's settings (20 updates per env step) at half SAC's budget: each run makes "
        "about ten times SAC's gradient steps."
    ),
    **{
        key: (
            "Run at 200k env steps, a fifth of the zoo's 1M budget (hours per run on a CPU): the published figure "
            "is the zoo's 1M-step agent, on MuJoCo v3 (this row: v5), so a row below it is expected here."
        )
        for key in BUDGETS
    },
}
"""What a reader should know about a row, printed under the table (words only: every figure is rendered)."""

SAC_MARK = 100_000
"""Issue 54's yardstick: SAC's return at this many env steps (read from its evaluation curve), and the env steps
each newer off-policy agent's curve takes to reach it on the same task."""
AGAINST_SAC = ("tqc", "crossq", "droq")
"""The agents held against SAC's curve (:func:`sample_efficiency_section`)."""

FAMILIES: dict[str, tuple[str, ...]] = {
    "classic": ("CartPole", "Acrobot", "MountainCar", "Pendulum"),
    "box2d": ("LunarLander", "BipedalWalker"),
    "mujoco": ("Hopper", "HalfCheetah", "Walker2d", "Ant", "Swimmer", "Humanoid"),
    "minatar": ("MinAtar",),
    "atari": ("NoFrameskip",),
}
"""Task families, one picture each: a task belongs to the first family one of whose words it contains."""


# -- statistics (rliable's method, in numpy) ------------------------------------------------------------------


def iqm(scores: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of the scores (``scipy.stats.trim_mean(x, 0.25)``, as
    rliable's ``aggregate_iqm``: ``int(0.25 * n)`` scores cut from each end)."""
    x = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    if x.size == 0:
        raise ValueError("iqm of no scores: give at least one")
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def stratified_bootstrap_ci(
    scores: Sequence[Sequence[float]] | np.ndarray,
    statistic: Callable[[np.ndarray], float] = iqm,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile interval of ``statistic`` under the stratified bootstrap (rliable's
    ``get_interval_estimates``): ``scores`` is ``(runs, tasks)`` (a 1-D array is one task); each replicate
    resamples the runs with replacement within every task, then applies ``statistic`` to the whole matrix."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"scores must be (runs, tasks) with at least one run, got shape {x.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    runs, tasks = x.shape
    stats = np.empty(reps)
    cols = np.arange(tasks)[None, :]
    for r in range(reps):
        rows = rng.integers(0, runs, size=(runs, tasks))
        stats[r] = statistic(x[rows, cols])
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


# -- one run ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunKey:
    """One run: a row (task, agent), the library that trains it and the seed."""

    env_id: str
    agent: str
    side: str  # "workbench" or "sb3"
    seed: int

    @property
    def path(self) -> Path:
        """Its result file under :data:`RESULTS`."""
        # "MinAtar/Breakout-v1" names a folder: the id's "/" becomes "+" (which no gymnasium id holds).
        task = self.env_id.replace("/", "+")
        return RESULTS / f"{task}__{self.agent}__{self.side}__seed{self.seed}.json"


def _eval_seed(seed: int, episode: int) -> int:
    return EVAL_SEED + 1000 * seed + episode


def play_episodes(env_id: str, act: Callable[[np.ndarray], Any], episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` episodes of ``act`` (a deterministic policy) on a fresh ``gym.make(env_id)`` (for
    MinAtar ids ``workbench.envs.make_env``: the game registered and its frames as the agent saw them)."""
    import gymnasium as gym

    from workbench.envs import is_minatar_id, make_env

    env = make_env(env_id) if is_minatar_id(env_id) else gym.make(env_id)
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=_eval_seed(seed, i))
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                done = bool(terminated or truncated)
            returns.append(total)
    finally:
        env.close()
    return returns


def _versions() -> dict[str, str]:
    import gymnasium
    import torch

    import workbench

    out = {
        "python": platform.python_version(),
        "workbench": workbench.__version__,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "numpy": np.__version__,
    }
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if commit:
        out["commit"] = commit
    try:
        import stable_baselines3

        out["stable_baselines3"] = stable_baselines3.__version__
    except ImportError:
        pass
    return out


def _machine() -> dict[str, Any]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": cpus,
        "load_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _curve_every(steps: int) -> int:
    return max(1, steps // CURVE_POINTS)


def budget(env_id: str, agent: str, preset_steps: int) -> int:
    """The env steps a row trains for: :data:`BUDGETS`' where it names the row, else the preset's."""
    return BUDGETS.get((env_id, agent), preset_steps)


def train_workbench(key: RunKey) -> dict[str, Any]:
    """Train the preset in this library; the result's fields."""
    import workbench as wb

    tuned = wb.preset(key.env_id, key.agent, seed=key.seed)
    agent, env = tuned
    steps = budget(key.env_id, key.agent, tuned.steps)
    session = wb.Session(agent, env, seed=key.seed, eval_every=_curve_every(steps), eval_episodes=CURVE_EPISODES)
    wall, cpu = time.perf_counter(), time.process_time()
    session.run(steps=steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if session.status != "finished":
        raise RuntimeError(f"{key} ended {session.status}: {session.error}")
    curve = session.signals.get("eval_reward")
    episodes = session.signals.get("episode_reward")
    agent.eval()
    final = play_episodes(key.env_id, lambda o: agent.act(o, deterministic=True), EVAL_EPISODES, key.seed)
    return {
        "steps": int(session.steps),
        "wall_s": wall,
        "cpu_s": cpu,
        "final_eval": final,
        "curve": {
            "steps": [] if curve is None else [int(s) for s in curve.steps],
            "returns": [] if curve is None else [float(v) for v in curve.values],
        },
        "last_training_episodes": [] if episodes is None else [float(v) for v in episodes.values[-20:]],
        "settings": agent.hyperparameters(),
    }


def train_sb3(key: RunKey) -> dict[str, Any]:
    """Train Stable-Baselines3 at the preset's settings (``sample_efficiency.sb3_kwargs``); the result's fields.
    The curve is taken as this library's: every ``steps / 20`` env steps, 5 deterministic episodes."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import workbench as wb

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sample_efficiency import sb3_algorithm, sb3_kwargs

    tuned = wb.preset(key.env_id, key.agent, seed=key.seed)
    kw, n_envs, normalize = sb3_kwargs(tuned.agent)
    c = tuned.agent.config
    venv = make_vec_env(key.env_id, n_envs=n_envs, seed=key.seed)
    if normalize:
        venv = VecNormalize(venv, norm_obs=c.normalize_observations, norm_reward=c.normalize_rewards, gamma=c.gamma)
    algo, policy = sb3_algorithm(key.agent)
    model = algo(policy, venv, seed=key.seed, device="cpu", **kw)
    steps = budget(key.env_id, key.agent, tuned.steps)
    every = _curve_every(steps)

    def act(obs: np.ndarray) -> Any:
        x = venv.normalize_obs(obs[None]) if normalize else obs[None]
        return model.predict(x, deterministic=True)[0][0]

    curve_steps: list[int] = []
    curve_returns: list[float] = []
    eval_env = gym.make(key.env_id)
    eval_episode = [0]

    class Curve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_at = every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_at:
                self.next_at += every
                if normalize:
                    venv.training = False
                returns = []
                for _ in range(CURVE_EPISODES):
                    obs, _ = eval_env.reset(seed=key.seed * 7919 + eval_episode[0])
                    eval_episode[0] += 1
                    total, done = 0.0, False
                    while not done:
                        obs, reward, terminated, truncated, _ = eval_env.step(act(obs))
                        total += float(reward)
                        done = bool(terminated or truncated)
                    returns.append(total)
                if normalize:
                    venv.training = True
                curve_steps.append(int(self.num_timesteps))
                curve_returns.append(float(np.mean(returns)))
            return True

    episodes: list[float] = []

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    episodes.append(float(info["episode"]["r"]))
            return True

    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps, callback=[Curve(), Episodes()])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if normalize:
        venv.training = False
    final = play_episodes(key.env_id, act, EVAL_EPISODES, key.seed)
    return {
        "steps": int(model.num_timesteps),
        "wall_s": wall,
        "cpu_s": cpu,
        "final_eval": final,
        "curve": {"steps": curve_steps, "returns": curve_returns},
        "last_training_episodes": episodes[-20:],
        "settings": _jsonable({**kw, "n_envs": n_envs, "normalize": normalize}),
    }


def run_one(key: RunKey) -> Path:
    """Train one run in this process and write its result file (atomically: a file is a finished run)."""
    import torch

    torch.set_num_threads(1)
    started = time.time()
    fields = train_sb3(key) if key.side == "sb3" else train_workbench(key)
    result = {
        "env_id": key.env_id,
        "agent": key.agent,
        "side": key.side,
        "seed": key.seed,
        **fields,
        "final_mean": float(np.mean(fields["final_eval"])),
        "eval_episodes": EVAL_EPISODES,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "versions": _versions(),
        "machine": _machine(),
    }
    result["settings"] = _jsonable(result["settings"])
    key.path.parent.mkdir(parents=True, exist_ok=True)
    partial = key.path.with_suffix(".json.partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.replace(key.path)
    return key.path


# -- the runner -------------------------------------------------------------------------------------------------


def parse_rows(words: Sequence[str]) -> list[tuple[str, str]]:
    """``task:agent`` words as preset keys; an unknown one is refused naming the presets there are."""
    from workbench.presets import PRESETS

    rows = []
    for word in words:
        env_id, sep, agent = word.partition(":")
        if not sep or (env_id, agent.lower()) not in PRESETS:
            there = ", ".join(f"{e}:{a}" for e, a in sorted(PRESETS))
            raise SystemExit(f"no preset {word!r}: give task:agent, one of {there}")
        rows.append((env_id, agent.lower()))
    return rows


def planned(rows: Sequence[tuple[str, str]], seeds: Sequence[int], sb3: bool) -> list[RunKey]:
    """Every run of ``rows`` over ``seeds`` (the SB3 side where ``sb3`` and SB3 has the agent), seed by seed."""
    keys = []
    for env_id, agent in rows:
        for seed in seeds:
            keys.append(RunKey(env_id, agent, "workbench", seed))
            # SB3's side builds an MlpPolicy on gym.make(env_id): not for image games (MinAtar, Atari).
            if sb3 and agent in SB3_AGENTS and family(env_id) not in ("minatar", "atari"):
                keys.append(RunKey(env_id, agent, "sb3", seed))
    return keys


def pending(keys: Sequence[RunKey]) -> list[RunKey]:
    """The runs without a result file: a finished run is never redone."""
    return [k for k in keys if not k.path.exists()]


def _command(key: RunKey) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "one", key.env_id, key.agent, key.side, str(key.seed)]


def run_all(
    keys: Sequence[RunKey], parallel: int = 1, launch: Callable[[RunKey], subprocess.Popen] | None = None
) -> list[RunKey]:
    """Run every pending key, each in its own process, at most ``parallel`` at once; returns the runs that
    failed (their files are not written, so the next call tries them again)."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    launch = launch or (lambda k: subprocess.Popen(_command(k), cwd=ROOT))
    todo = list(pending(keys))
    running: list[tuple[RunKey, subprocess.Popen]] = []
    failed = []
    while todo or running:
        while todo and len(running) < parallel:
            key = todo.pop(0)
            print(f"[report] start {key.env_id} {key.agent} {key.side} seed {key.seed}", flush=True)
            running.append((key, launch(key)))
        time.sleep(0.05 if not running else 0.2)
        for key, proc in list(running):
            if proc.poll() is not None:
                running.remove((key, proc))
                ok = proc.returncode == 0 and key.path.exists()
                print(f"[report] {'done' if ok else 'FAILED'} {key.env_id} {key.agent} {key.side} seed {key.seed}")
                if not ok:
                    failed.append(key)
    return failed


# -- rendering --------------------------------------------------------------------------------------------------


def load_results(directory: Path = RESULTS) -> list[dict[str, Any]]:
    """Every run's result file in ``directory`` (``TASK__AGENT__SIDE__seedN.json``; other files there, such as
    ``bench_check.json``'s thresholds, are not runs, nor are ``benchmarks/self_play.py``'s
    ``self_play__GAME__STEPS__seedN.json``, which share the name's pattern but have no ``env_id``)."""
    found = (json.loads(p.read_text()) for p in sorted(directory.glob("*__*__*__seed*.json")))
    return [r for r in found if "env_id" in r]


def family(env_id: str) -> str:
    """The task family of :data:`FAMILIES` (``"other"`` if none)."""
    for name, words in FAMILIES.items():
        if any(w in env_id for w in words):
            return name
    return "other"


@dataclass
class Row:
    """One (task, agent, side) row of the table, from its result files."""

    env_id: str
    agent: str
    side: str
    results: list[dict[str, Any]]

    @property
    def scores(self) -> np.ndarray:
        return np.array([r["final_mean"] for r in self.results])

    @property
    def seeds(self) -> list[int]:
        return [r["seed"] for r in self.results]

    def summary(self) -> dict[str, Any]:
        """IQM, its interval, times and the published figure."""
        scores = self.scores
        low, high = stratified_bootstrap_ci(scores)
        published = PUBLISHED.get((self.env_id, self.agent))
        wall = float(np.mean([r["wall_s"] for r in self.results]))
        return {
            "iqm": iqm(scores),
            "ci": (low, high),
            "published": published,
            "below": published is not None and high < published,
            "wall": wall,
            "cpu": float(np.mean([r["cpu_s"] for r in self.results])),
            "steps": int(self.results[0]["steps"]),
            "steps_per_s": float(np.mean([r["steps"] / r["wall_s"] for r in self.results])),
        }


def group_rows(results: Sequence[dict[str, Any]]) -> list[Row]:
    """Results grouped by (task, agent, side), seeds in order; this library's row before SB3's."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["env_id"], r["agent"], r["side"]), []).append(r)
    order = {"workbench": 0, "sb3": 1}
    keys = sorted(groups, key=lambda k: (family(k[0]), k[0], k[1], order.get(k[2], 2)))
    return [Row(*k, sorted(groups[k], key=lambda r: r["seed"])) for k in keys]


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def render_markdown(rows: Sequence[Row], pictures: Sequence[str] = ()) -> str:
    """The page ``docs/benchmarks.md``, from the rows only."""
    lines = [
        "# Benchmarks",
        "",
        "Rendered by `python benchmarks/report.py render` from the result files in `benchmarks/results/` (one JSON",
        "file per run; never edited by hand). Each run: `wb.preset(task, agent, seed=s)` trained for the preset's",
        "budget in its own process with one torch thread, then a final evaluation of "
        f"{EVAL_EPISODES} deterministic episodes on",
        "a fresh env (the final policy, not the best evaluation). *SB3* rows train Stable-Baselines3 at the same",
        "settings and budget (`benchmarks/sample_efficiency.py`'s `sb3_kwargs`), evaluated the same way. From the",
        "same weights and rollout, one A2C or PPO update gives SB3's weights, and GAE gives SB3's advantages",
        "(`tests/test_sb3_parity.py`): those rows compare two implementations of one update.",
        "",
        "**IQM**: interquartile mean of the seeds' final evaluations; **95% CI**: stratified bootstrap (2,000",
        "resamples, percentile interval; the method of rliable, Agarwal et al. 2021). **Published**: "
        f"{PUBLISHED_SOURCE}",
        "(one trained agent, DLR-RM/rl-baselines3-zoo); ▼ marks a row whose interval lies wholly below it.",
        "**Time**: mean wall and CPU seconds per run, training only (with its "
        f"{CURVE_POINTS} evaluations of {CURVE_EPISODES} episodes for",
        "the curve), on the machine named in each result file (a shared 2-core machine: wall time there depends",
        "on the load; CPU time is the fairer figure).",
        "",
        "| task | agent | library | steps | seeds | IQM | 95% CI | published | every seed | wall / run | CPU / run "
        "| steps/s |",
        "|---|---|---|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for row in rows:
        s = row.summary()
        mark = " ▼" if s["below"] else ""
        side = "workbench" if row.side == "workbench" else "SB3"
        every = ", ".join(_num(x) for x in row.scores)
        lines.append(
            f"| {row.env_id} | {display_name(row.agent)} | {side} | {s['steps']:,} | {len(row.results)} | "
            f"{_num(s['iqm'])}{mark} | [{_num(s['ci'][0])}, {_num(s['ci'][1])}] | {_num(s['published'])} | {every} | "
            f"{s['wall']:.0f} s | {s['cpu']:.0f} s | {s['steps_per_s']:,.0f} |"
        )
    lines += [
        "",
        "Seeds of each row, in order: "
        + "; ".join(
            f"{r.env_id} {display_name(r.agent)} {'SB3' if r.side == 'sb3' else 'workbench'} {_seed_ranges(r.seeds)}"
            for r in rows
        )
        + ".",
    ]
    shown = {(r.env_id, r.agent) for r in rows}
    for (env_id, agent), note in NOTES.items():
        if (env_id, agent) in shown:
            lines += ["", f"**{env_id} {display_name(agent)}.** {note}"]
    for picture in pictures:
        name = Path(picture).stem.replace("benchmarks-", "")
        lines += ["", f"![{name}: evaluation curves and IQM against the published score]({Path(picture).name})"]
    return "\n".join(lines) + "\n"


def display_name(agent: str) -> str:
    """The agent's name as the library spells it (``crossq``: CrossQ, ``qrdqn``: QRDQN), for the page."""
    import workbench as wb

    cls = wb.AGENTS.get(agent)
    return cls.__name__ if cls is not None else agent.upper()


def _seed_ranges(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ",".join(map(str, seeds))


def render_pictures(rows: Sequence[Row], directory: Path) -> list[Path]:
    """One PNG per task family: each task's evaluation curves (IQM over seeds, band: the 95% bootstrap
    interval) and the IQM bars with their intervals against the published scores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    by_family: dict[str, list[Row]] = {}
    for row in rows:
        by_family.setdefault(family(row.env_id), []).append(row)
    for name, fam_rows in by_family.items():
        tasks = sorted({(r.env_id, r.agent) for r in fam_rows})
        fig, axes = plt.subplots(1, len(tasks) + 1, figsize=(4.2 * (len(tasks) + 1), 3.4), squeeze=False)
        for ax, (env_id, agent) in zip(axes[0], tasks, strict=False):
            for row in (r for r in fam_rows if (r.env_id, r.agent) == (env_id, agent)):
                curves = [r["curve"] for r in row.results if r["curve"]["steps"]]
                if not curves:
                    continue
                n = min(len(c["steps"]) for c in curves)
                steps = np.array(curves[0]["steps"][:n])
                values = np.array([c["returns"][:n] for c in curves])
                centre = np.array([iqm(values[:, j]) for j in range(n)])
                bands = np.array([stratified_bootstrap_ci(values[:, j], reps=300) for j in range(n)])
                label = "workbench" if row.side == "workbench" else "SB3"
                ax.plot(steps, centre, label=label)
                ax.fill_between(steps, bands[:, 0], bands[:, 1], alpha=0.25)
            published = PUBLISHED.get((env_id, agent))
            if published is not None:
                ax.axhline(published, color="grey", linestyle="--", linewidth=1, label="published")
            ax.set_title(f"{env_id} {display_name(agent)}", fontsize=9)
            ax.set_xlabel("env steps")
            ax.set_ylabel("eval return (IQM)")
            ax.legend(fontsize=7)
        bar_ax = axes[0][-1]
        labels, centres, lows, highs, pubs = [], [], [], [], []
        for row in fam_rows:
            s = row.summary()
            labels.append(f"{row.env_id}\n{display_name(row.agent)} {'SB3' if row.side == 'sb3' else 'wb'}")
            centres.append(s["iqm"])
            lows.append(s["iqm"] - s["ci"][0])
            highs.append(s["ci"][1] - s["iqm"])
            pubs.append(s["published"])
        x = np.arange(len(labels))
        bar_ax.bar(x, centres, yerr=[lows, highs], capsize=3, color="tab:blue", alpha=0.7, label="IQM, 95% CI")
        for i, p in enumerate(pubs):
            if p is not None:
                bar_ax.plot(
                    [i - 0.4, i + 0.4], [p, p], color="black", linewidth=2, label="published" if i == 0 else None
                )
        bar_ax.set_xticks(x, labels, fontsize=6)
        bar_ax.set_title("final evaluation", fontsize=9)
        bar_ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"benchmarks-{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def memory_section(path: Path) -> str:
    """The memory benchmark's table (issue 55), rendered by ``benchmarks/memory.py`` from its stored runs, as a
    section of the page; empty when ``path`` does not exist."""
    if not path.exists():
        return ""
    import importlib.util

    # Loaded by path: the benchmarks folder is no package, and this module is itself loaded by path in tests.
    spec = importlib.util.spec_from_file_location("bench_memory", ROOT / "benchmarks" / "memory.py")
    assert spec is not None and spec.loader is not None
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    block = memory.render(
        memory.load(path), source=str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    )
    return f"\n## Memory: GTrXL, LSTM and PPO without memory (issue 55)\n\n{block}\n"


def _return_at(result: dict[str, Any], steps: int) -> float | None:
    """The run's evaluation at the last curve point at or before ``steps`` (None when the curve starts later)."""
    points = [(x, y) for x, y in zip(result["curve"]["steps"], result["curve"]["returns"], strict=True) if x <= steps]
    return float(points[-1][1]) if points else None


def _steps_to(result: dict[str, Any], target: float) -> int | None:
    """The first curve point whose evaluation reaches ``target`` (None: never within the run)."""
    for x, y in zip(result["curve"]["steps"], result["curve"]["returns"], strict=True):
        if y >= target:
            return int(x)
    return None


def sample_efficiency_section(rows: Sequence[Row], mark: int = SAC_MARK) -> str:
    """Per task with this library's SAC runs of ``mark`` steps or more: SAC's return at ``mark`` (the IQM over
    seeds of each curve's last point at or before it) and the env steps each seed of SAC and of the agents of
    :data:`AGAINST_SAC` takes to first reach it, over their runs of ``mark`` steps or more (a shorter run could
    not tell). The median counts a seed that never reaches it as infinitely late. Empty when no task has them."""
    ours = {(r.env_id, r.agent): r for r in rows if r.side == "workbench"}
    lines: list[str] = []
    for (env_id, agent), sac in ours.items():
        if agent != "sac":
            continue
        at_mark = [_return_at(r, mark) for r in sac.results if r["steps"] >= mark]
        if not at_mark or any(v is None for v in at_mark):
            continue
        target = iqm([v for v in at_mark if v is not None])
        for name in ("sac", *AGAINST_SAC):
            row = ours.get((env_id, name))
            runs = [r for r in row.results if r["steps"] >= mark] if row is not None else []
            if not runs:
                continue
            reached = [_steps_to(r, target) for r in runs]
            every = ", ".join("not reached" if x is None else f"{x:,}" for x in reached)
            median = float(np.median([np.inf if x is None else x for x in reached]))
            shown = "not reached" if np.isinf(median) else f"{median:,.0f}"
            seeds = _seed_ranges([r["seed"] for r in runs])
            lines.append(f"| {env_id} | {_num(target)} | {display_name(name)} | {seeds} | {shown} | {every} |")
    if not lines:
        return ""
    head = [
        "",
        "## Sample efficiency against SAC (issue 54)",
        "",
        f"SAC's return at {mark:,} env steps on each task (the IQM over its seeds of each evaluation curve's last "
        f"point at or before {mark:,}), and the env steps each agent's curve first reaches it "
        f"({CURVE_EPISODES} deterministic episodes per point; runs of {mark:,} steps or more). The median counts "
        "a seed that never reaches it as infinitely late (*not reached* when half or more never do). SAC's own "
        "row is the baseline: an agent that needs fewer env steps than SAC's median learns faster per sample.",
        "",
        f"| task | SAC's return at {mark // 1000}k | agent | seeds | median steps to it | every seed |",
        "|---|---:|---|---|---:|---|",
    ]
    return "\n".join(head + lines) + "\n"


def render(results_dir: Path = RESULTS, doc: Path = DOC, pictures: bool = True) -> str:
    """Write ``doc`` (and the pictures beside it) from the result files; returns the page."""
    rows = group_rows(load_results(results_dir))
    if not rows:
        raise SystemExit(f"no result files in {results_dir}: run `python benchmarks/report.py run` first")
    paths = render_pictures(rows, doc.parent) if pictures else []
    page = render_markdown(rows, [str(p) for p in paths]) + sample_efficiency_section(rows)
    page += memory_section(results_dir / "memory.json")
    doc.write_text(page)
    return page


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train the rows' pending runs, each in its own process")
    run.add_argument("--rows", nargs="+", required=True, metavar="TASK:AGENT")
    run.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    run.add_argument("--first-seed", type=int, default=0)
    run.add_argument("--sb3", action="store_true", help="also train Stable-Baselines3 at the same settings")
    run.add_argument("--parallel", type=int, default=1, choices=(1, 2), help="runs at once (default 1)")
    one = sub.add_parser("one", help="train one run in this process (what `run` launches)")
    one.add_argument("env_id")
    one.add_argument("agent")
    one.add_argument("side", choices=("workbench", "sb3"))
    one.add_argument("seed", type=int)
    sub.add_parser("render", help="write docs/benchmarks.md and its pictures from the result files")
    sub.add_parser("list", help="the presets a row can name, and the result files there are")
    args = parser.parse_args(argv)
    if args.command == "one":
        print(run_one(RunKey(args.env_id, args.agent, args.side, args.seed)))
        return 0
    if args.command == "run":
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        keys = planned(parse_rows(args.rows), seeds, args.sb3)
        print(f"[report] {len(keys)} runs, {len(pending(keys))} pending", flush=True)
        failed = run_all(keys, args.parallel)
        return 1 if failed else 0
    if args.command == "render":
        render()
        print(f"wrote {DOC.relative_to(ROOT)}")
        return 0
    from workbench.presets import PRESETS

    for env_id, agent in sorted(PRESETS):
        steps = budget(env_id, agent, PRESETS[env_id, agent].steps)
        print(f"{env_id}:{agent}  {steps:,} steps")
    print(f"{len(list(RESULTS.glob('*.json')))} result files in {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
