"""How env throughput scales with workers, local processes and Ray, and what backend="auto" picks.

Part 1: an env whose ``step()`` waits 5 ms (a stand-in for a simulator), PPO, 1, 2, 4, 8 and 16
workers, local and Ray backends. The total number of envs stays the same (``--envs``, default 32),
split over the workers, so one worker steps all of them one after another and 16 workers step
``envs/16`` each at the same time. Reported: env steps per second while training (learner updates
included) and the speed-up over one worker of the same backend.

Part 2: CartPole with PPO at 1 and 8 workers: what ``backend="auto"`` chooses and why, next to the
throughput of forcing local workers.

    python benchmarks/scaling.py                 # everything (a few minutes)
    python benchmarks/scaling.py --backends local --workers 1 16 --seconds 4
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import workbench as wb
from workbench.parallel import choose_backend


class SleepEnv(gym.Env):
    """Episodes of 200 steps; every step waits 5 ms, as a call into a simulator would."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, delay: float = 0.005) -> None:
        self.delay = delay
        self.t = 0

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):  # type: ignore[no-untyped-def]
        time.sleep(self.delay)
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return obs, float(action == (obs[0] > 0)), False, self.t >= 200, {}


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def measure(agent: wb.Agent, env, seconds: float, **session_options) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Env steps per second from one learner update to a later one, at least ``seconds`` apart.

    Counting from update to update takes whole iterations (collect, then learn), which is fair to
    Ray's rollout workers: their steps reach the learner a rollout at a time. Returns (steps/s,
    seconds until the first update: workers started and one rollout collected and learned from).
    """
    session = wb.Session(agent, env, seed=0, **session_options)
    start = time.perf_counter()
    session.start(100_000_000)

    def next_update(after: int) -> tuple[int, float]:
        while agent.num_updates <= after:
            if session.status == "failed":
                session.wait()
            time.sleep(0.002)
        return session.steps, time.perf_counter()

    try:
        steps0, t0 = next_update(0)
        startup = t0 - start
        steps1, t1 = next_update(agent.num_updates)
        while t1 - t0 < seconds:
            steps1, t1 = next_update(agent.num_updates)
    finally:
        session.stop()
    if session.status == "failed":
        session.wait()
    return (steps1 - steps0) / (t1 - t0), startup


def sleep_ppo(num_envs: int) -> wb.PPO:
    # A cheap update so the learner keeps up: the point is where env steps happen.
    return wb.PPO(SleepEnv(), n_envs=num_envs, n_steps=32, n_epochs=4, batch_size=256, seed=0)


def scaling(backends: list[str], workers: list[int], envs: int, seconds: float) -> None:
    print(f"\n## Env with a 5 ms step, PPO, {envs} envs split over the workers ({seconds:g} s measured each)\n")
    print("| backend | workers | envs/worker | env steps/s | speed-up | startup s |")
    print("|---|---:|---:|---:|---:|---:|")
    for backend in backends:
        base = None
        for w in workers:
            if envs % w:
                continue
            sps, startup = measure(
                sleep_ppo(envs),
                SleepEnv,
                seconds,
                num_workers=w,
                backend=backend,
                envs_per_worker=envs // w,
            )
            base = base or sps
            print(f"| {backend} | {w} | {envs // w} | {sps:,.0f} | {sps / base:.1f}x | {startup:.1f} |", flush=True)


def auto_choice(seconds: float) -> None:
    print(f"\n## CartPole, PPO (8 envs): what backend='auto' picks ({seconds:g} s measured each)\n")
    print("| workers | backend | env steps/s | why |")
    print("|---:|---|---:|---|")
    sps, _ = measure(wb.PPO("CartPole-v1", seed=0), cartpole, seconds, num_workers=1)
    print(f"| 1 | auto -> inprocess | {sps:,.0f} | one worker is always the plain in-process loop |", flush=True)
    choice = choose_backend(cartpole, num_workers=8, envs_per_worker=1)
    sps, _ = measure(wb.PPO("CartPole-v1", seed=0), cartpole, seconds, num_workers=8, backend="auto")
    print(f"| 8 | auto -> {choice.backend} | {sps:,.0f} | {choice.reason} |", flush=True)
    sps, _ = measure(wb.PPO("CartPole-v1", seed=0), cartpole, seconds, num_workers=8, backend="local")
    why = "for comparison: messaging costs more than a CartPole step"
    print(f"| 8 | local (forced) | {sps:,.0f} | {why} |", flush=True)
    slow = choose_backend(SleepEnv, num_workers=8, envs_per_worker=1)
    print(f"\nFor the 5 ms env with 8 workers, auto picks {slow.backend}: {slow.reason}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--envs", type=int, default=32, help="total envs, split over the workers")
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring window per configuration")
    parser.add_argument("--skip-auto", action="store_true")
    args = parser.parse_args()
    if "ray" in args.backends:
        import ray

        from workbench.parallel.ray_start import init_private_ray

        # One local Ray for the whole benchmark, so actor start-up is not paid for Ray's own start; started as a
        # session starts its own (loopback, lean imports, workers at normal priority rather than Ray's nice 15).
        init_private_ray(
            ray,
            {
                "num_cpus": max(args.workers),
                "include_dashboard": False,
                "logging_level": "error",
                "_node_ip_address": "127.0.0.1",
            },
        )
    try:
        scaling(args.backends, args.workers, args.envs, args.seconds)
        if not args.skip_auto:
            auto_choice(args.seconds)
    finally:
        if "ray" in args.backends:
            ray.shutdown()


if __name__ == "__main__":
    main()
