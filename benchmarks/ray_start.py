"""How long Ray rollout workers take to start: 1, 4 and 16 actors, each count in a fresh process, in
both Ray modes: ``ray_acting="workers"`` (every actor builds an agent replica, so it imports torch) and
``ray_acting="learner"`` (actors only step envs and never import torch; the learner acts).

Measured per count (PPO on CartPole-v1, one env per worker): seconds for ``ray.init`` (a private local
Ray), seconds from then until every actor has built its envs (and replica) and answered, and the CPU
seconds the actors' processes spent until then (their own ``getrusage``, summed), which a loaded machine
does not inflate as it does wall time. The modes and counts are interleaved within each repeat.

    python benchmarks/ray_start.py                 # 1, 4, 16 workers, both modes, 3 repeats each
    python benchmarks/ray_start.py --workers 16 --modes learner --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(n: int, mode: str) -> None:
    import ray

    import workbench as wb
    from workbench.envs import as_env_source
    from workbench.parallel.ray_backend import RayRunner
    from workbench.parallel.ray_envs import RayEnvRunner
    from workbench.parallel.ray_start import init_private_ray as _init_private_ray

    agent = wb.PPO("CartPole-v1", n_envs=n)
    t0 = time.perf_counter()
    _init_private_ray(
        ray,
        {
            "include_dashboard": False,
            "logging_level": "warning",
            "num_cpus": max(n, 2),
            "_node_ip_address": "127.0.0.1",
        },
    )
    t1 = time.perf_counter()
    if mode == "workers":
        runner = RayRunner(as_env_source("CartPole-v1"), agent, n, 1, seed=0)
        actors = runner._actors
    else:
        runner = RayEnvRunner(as_env_source("CartPole-v1"), n, 1, seed=0)
        actors = [w.actor for w in runner._workers]
    t2 = time.perf_counter()

    def cpu(actor_self: object) -> float:
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    actor_cpu = sum(ray.get([a.__ray_call__.remote(cpu) for a in actors]))
    runner.close()
    ray.shutdown()
    print("RESULT " + json.dumps({"init": t1 - t0, "actors": t2 - t1, "actor_cpu": actor_cpu}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--modes", nargs="*", default=["learner", "workers"], choices=["learner", "workers"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="workers", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.mode)
        return
    results: dict[tuple[str, int], list[dict]] = {(m, n): [] for m in args.modes for n in args.workers}
    for _ in range(args.repeats):
        for n in args.workers:
            for mode in args.modes:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(n), "--mode", mode],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ),
                    check=False,
                )
                line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
                if not line:
                    raise RuntimeError(out.stdout[-2000:] + out.stderr[-3000:])
                r = json.loads(line[0][7:])
                results[mode, n].append(r)
                print(
                    f"  {mode:8s} {n:2d} workers: ray.init {r['init']:5.1f} s, actors ready {r['actors']:5.1f} s, "
                    f"actors' cpu {r['actor_cpu']:5.1f} s   (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print(
        f"\n{'ray_acting':>10s} {'workers':>7s} {'ray.init s':>10s} {'actors s':>9s} {'total s':>8s} "
        f"{'actor cpu s':>11s} {'per actor':>9s}"
    )
    for (mode, n), rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(
            f"{mode:>10s} {n:7d} {med['init']:10.1f} {med['actors']:9.1f} {med['init'] + med['actors']:8.1f} "
            f"{med['actor_cpu']:11.1f} {med['actor_cpu'] / n:9.2f}"
        )
    print("\nmedians over repeats; 'actors' = the runner built: every actor started and its envs (and replica) made")


if __name__ == "__main__":
    main()
