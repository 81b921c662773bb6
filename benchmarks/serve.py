"""A served session over loopback: act+feedback pairs per second and their p50/p99 latency.

The server (``session.serve()``, an external DQN session on CartPole's spaces, idle so that only serving
is measured; ``--train`` runs its learning too) lives in this process. The clients are threads spread
over ``--procs`` separate processes (so that they do not share the server's interpreter lock), each a
``wb.RemoteSession`` driving one episode stream: act, then feedback, as fast as answers come, for
``--seconds`` after a warm-up. For 1, 16 and 64 clients, HTTP and WebSocket, batching on and off.

    nice python benchmarks/serve.py [--clients 1 16 64] [--seconds 3] [--procs 4] [--train]

Prints a markdown table (docs/serve.md keeps the last one measured, with the machine it ran on).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

OBS = [0.01, -0.02, 0.03, 0.0]


def _clients(url: str, transport: str, names: list[str], times, ready, go, out) -> None:
    import threading

    import workbench as wb

    counts: list[int] = []
    latencies: list[float] = []
    lock = threading.Lock()
    remotes = {name: wb.RemoteSession(url, transport=transport) for name in names}
    ready.put(len(names))
    go.wait()
    start_at, stop_at = times[0], times[1]

    def one(name: str) -> None:
        remote = remotes[name]
        mine: list[float] = []
        i = 0
        while time.time() < stop_at:
            t0 = time.perf_counter()
            remote.act(OBS, episode=name)
            remote.feedback(1.0, OBS, False, i % 200 == 199, episode=name)
            i += 1
            if time.time() >= start_at:
                mine.append(time.perf_counter() - t0)
        remote.act(OBS, episode=name)  # end the episode: its slot is free for the next cell
        remote.feedback(1.0, OBS, False, True, episode=name)
        remote.close()
        with lock:
            counts.append(len(mine))
            latencies.extend(mine)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sum(counts), latencies))


def measure(url: str, transport: str, clients: int, procs: int, seconds: float, warmup: float) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    times = ctx.Array("d", 2)
    names = [f"{transport}-{clients}-{i}" for i in range(clients)]
    groups = [names[i::procs] for i in range(min(procs, clients))]
    workers = [ctx.Process(target=_clients, args=(url, transport, g, times, ready, go, out)) for g in groups]
    for w in workers:
        w.start()
    for _ in workers:  # every process has imported the library and built its clients
        ready.get(timeout=300)
    times[0] = time.time() + warmup
    times[1] = times[0] + seconds
    go.set()
    results = [out.get(timeout=120 + seconds) for _ in workers]
    for w in workers:
        w.join()
    pairs = sum(r[0] for r in results)
    latencies = np.concatenate([np.asarray(r[1]) for r in results])
    return {
        "pairs_per_s": pairs / seconds,
        "p50_ms": float(np.percentile(latencies, 50) * 1000),
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--transports", nargs="+", default=["http", "websocket"])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--train", action="store_true", help="the session learns while it serves")
    args = parser.parse_args()

    import gymnasium as gym

    import workbench as wb

    env = gym.make("CartPole-v1")
    rows = []
    for batch in (True, False):
        agent = wb.DQN(observation_space=env.observation_space, action_space=env.action_space,
                       n_envs=max(args.clients), seed=0)
        session = wb.Session.external(agent, seed=0, torch_threads=1)
        if args.train:
            session.start(steps=10**9)
        with session.serve(batch=batch, max_batch=max(args.clients)) as server:
            for transport in args.transports:
                for clients in args.clients:
                    r = measure(server.url, transport, clients, args.procs, args.seconds, args.warmup)
                    rows.append((transport, clients, "on" if batch else "off", r))
                    print(f"{transport:9s} {clients:3d} clients, batching {'on ' if batch else 'off'}: "
                          f"{r['pairs_per_s']:8.0f} pairs/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms",
                          flush=True)
        session.stop()
    print(f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.seconds:g} s per cell, "
          f"{args.procs} client processes; session {'learning' if args.train else 'idle'}\n")
    print("| transport | clients | batching | pairs/s | p50 (ms) | p99 (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for transport, clients, batch, r in rows:
        print(f"| {transport} | {clients} | {batch} | {r['pairs_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")


if __name__ == "__main__":
    main()
