"""A served session over loopback: act+feedback pairs per second and their p50/p99 latency.

The server (``session.serve()``, an external DQN session on CartPole's spaces, idle so that only serving
is measured; ``--train`` runs its learning too) lives in this process. The clients are spread over
``--procs`` separate processes (so that they do not share the server's interpreter lock), each driving
one episode stream: act, then feedback, as fast as answers come, for ``--seconds`` after a warm-up. For
1, 16 and 64 clients, HTTP and WebSocket, batching on and off.

``--client async`` (the default) measures the server: each client is a coroutine on one asyncio loop per
process with a plain keep-alive HTTP/1.1 connection or a ``websockets`` connection, so that the clients
cost the shared CPUs little. ``--client remote``: each client is a thread with a ``wb.RemoteSession``, as
an application would drive it (costlier on the client side: a thread per client, and for WebSocket the
``websockets`` sync client's own reader thread).

    nice python benchmarks/serve.py [--clients 1 16 64] [--seconds 3] [--procs 2] [--client async] [--train]
                                    [--rounds 3] [--http-parsers httptools h11] [--transports websocket]

``--inference local`` (issue 52): local-inference clients (``wb.RemoteSession(url, inference="local")``) in
``--procs`` processes act from the learner's policy and send experience batches; for 1, 16 and 64 clients,
the learner idle and learning, the steps per second the session took (and learned from), the clients' acting
rate, the policy refresh latency (publication to installation), and today's per-step serving (batched
WebSocket pairs) on the same session right after. ``--parity``: DQN and PPO on CartPole through 16 clients
against in process, over ``--seeds``. Both store their results in ``benchmarks/results/serve_local.json``
and write the tables into docs/serve.md (``--render`` writes them again from that file alone).

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
            counts.append(i + 1)
            latencies.extend(mine)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sum(counts), latencies))  # every pair (warm-up included), the measured latencies


def _async_clients(url: str, transport: str, names: list[str], times, ready, go, out) -> None:
    import asyncio
    import json
    import urllib.parse

    import websockets

    act = {"obs": OBS}
    parsed = urllib.parse.urlsplit(url)

    async def http_call(reader, writer, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {parsed.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        answer = json.loads(await reader.readexactly(length))
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{path}: {answer}")
        return answer

    async def one(name: str, mine: list[float]) -> None:
        nonlocal total
        i = 0
        if transport == "http":
            reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)

            async def pair(ended: bool) -> None:
                await http_call(reader, writer, "/act", {**act, "episode": name})
                await http_call(
                    reader,
                    writer,
                    "/feedback",
                    {"reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": ended, "episode": name},
                )
        else:
            path = "/" if transport == "echo" else f"/ws?episode={name}"
            ws = await websockets.connect(f"ws://{parsed.netloc}{path}", compression=None)
            act_text = json.dumps({"op": "act", **act})

            async def pair(ended: bool) -> None:
                await ws.send(act_text)
                if "error" in json.loads(await ws.recv()):
                    raise RuntimeError("act refused")
                await ws.send(
                    json.dumps(
                        {"op": "feedback", "reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": ended}
                    )
                )
                if "error" in json.loads(await ws.recv()):
                    raise RuntimeError("feedback refused")

        await ready_event.wait()
        start_at, stop_at = times[0], times[1]
        while time.time() < stop_at:
            t0 = time.perf_counter()
            await pair(i % 200 == 199)
            i += 1
            if time.time() >= start_at:
                mine.append(time.perf_counter() - t0)
        await pair(True)  # end the episode: its slot is free for the next cell
        total += i + 1
        if transport == "http":
            writer.close()
        else:
            await ws.close()

    async def main() -> list[float]:
        latencies: list[float] = []
        tasks = [asyncio.create_task(one(name, latencies)) for name in names]
        await asyncio.sleep(0.2)  # connected
        ready.put(len(names))
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        ready_event.set()
        await asyncio.gather(*tasks)
        return latencies

    ready_event = None
    total = 0

    async def run() -> list[float]:
        nonlocal ready_event
        ready_event = asyncio.Event()
        return await main()

    latencies = asyncio.run(run())
    out.put((total, latencies))  # every pair (warm-up included), the measured latencies


def _echo_server(port_out, stop) -> None:
    """A bare ``websockets`` echo server: what this machine gives with no serving logic at all."""
    import asyncio

    import websockets

    async def handler(ws) -> None:
        async for message in ws:
            await ws.send(message)

    async def main() -> None:
        async with websockets.serve(handler, "127.0.0.1", 0, compression=None) as server:
            port_out.put(server.sockets[0].getsockname()[1])
            cpu = time.process_time()
            await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            port_out.put(time.process_time() - cpu)  # its CPU time while serving

    asyncio.run(main())


def echo_baseline(clients: int, procs: int, seconds: float, warmup: float) -> dict[str, float]:
    """Two echoed messages per "pair" (as act and feedback), with the asyncio clients: the ceiling the
    machine sets now, to read the served session's figures against."""
    ctx = mp.get_context("spawn")
    port_out, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_echo_server, args=(port_out, stop))
    server.start()
    try:
        port = port_out.get(timeout=120)
        r = measure(f"http://127.0.0.1:{port}", "echo", clients, procs, seconds, warmup)
        stop.set()
        r["cpu_us"] = port_out.get(timeout=30) / r["pairs"] * 1e6
        return r
    finally:
        stop.set()
        server.join(10)


def measure(
    url: str, transport: str, clients: int, procs: int, seconds: float, warmup: float, client: str = "async"
) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    times = ctx.Array("d", 2)
    names = [f"{transport}-{clients}-{i}" for i in range(clients)]
    groups = [names[i::procs] for i in range(min(procs, clients))]
    target = _async_clients if client == "async" else _clients
    workers = [ctx.Process(target=target, args=(url, transport, g, times, ready, go, out)) for g in groups]
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
    latencies = np.concatenate([np.asarray(r[1]) for r in results])
    return {
        "pairs": sum(r[0] for r in results),
        "pairs_per_s": len(latencies) / seconds,
        "p50_ms": float(np.percentile(latencies, 50) * 1000),
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def logic_only(session, batch: bool, clients: int, pairs: int = 300) -> float:
    """The server's own work per act+feedback pair, with no transport at all: ``clients`` fake ``/ws``
    connections on one event loop, their messages handed to the server's WebSocket handler as uvicorn would
    (each receive yields to the loop once, so acts of several connections meet in a batch). Returns the CPU
    time per pair in microseconds (second of two passes: the first warms up)."""
    import asyncio
    import json

    server = session.serve(batch=batch, max_batch=clients)
    act = json.dumps({"op": "act", "obs": OBS})
    feedback = [
        json.dumps({"op": "feedback", "reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": ended})
        for ended in (False, True)
    ]

    async def connection(i: int) -> None:
        messages = [{"type": "websocket.connect"}]
        for k in range(pairs):
            messages += [{"type": "websocket.receive", "text": act}]
            messages += [{"type": "websocket.receive", "text": feedback[k % 200 == 199]}]
        messages.append({"type": "websocket.disconnect"})
        it = iter(messages)

        async def receive() -> dict:
            await asyncio.sleep(0)
            return next(it)

        async def send(message: dict) -> None:
            if '"error"' in message.get("text", ""):
                raise RuntimeError(message["text"])

        scope = {"type": "websocket", "path": "/ws", "headers": [], "query_string": f"episode=l{i}".encode()}
        await server._websocket(scope, receive, send)

    async def passes() -> float:
        for _ in range(2):
            cpu = time.process_time()
            await asyncio.gather(*(connection(i) for i in range(clients)))
            cpu = time.process_time() - cpu
        return cpu / (clients * pairs) * 1e6

    try:
        return asyncio.run(passes())
    finally:
        server.close()


# -- local inference (issue 52): clients act from the learner's policy and send experience batches ----------

LOCAL_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "serve_local.json")
DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "serve.md")


def _local_clients(url: str, names: list[str], batch_steps: int, times, ready, go, out) -> None:
    """Local-inference clients in one process, driven round-robin by one thread (one ``wb.RemoteSession``
    each, with its own sender and sync threads) on a CartPole-shaped fake env: 200-step episodes of
    random observations, so that the figures are the serving path's, not an env's."""
    import torch

    import workbench as wb

    torch.set_num_threads(1)  # a tiny network: one thread per client process, as the server's session has
    rng = np.random.default_rng(len(names))
    pool = rng.normal(size=(1024, 4)).astype(np.float32)
    remotes = [wb.RemoteSession(url, inference="local", batch_steps=batch_steps) for _ in names]
    ready.put(len(names))
    go.wait()
    start_at, stop_at = times[0], times[1]
    acted = k = 0
    started = False
    while True:
        now = time.time()
        if now >= stop_at:
            break
        if not started and now >= start_at:
            started, acted = True, 0
        for i, remote in enumerate(remotes):
            obs = pool[(k + i) % 1024]
            remote.act(obs, episode=i)
            remote.feedback(1.0, pool[(k + i + 1) % 1024], False, k % 200 == 199, episode=i)
        k += 1
        acted += len(remotes)
    latencies: list[float] = []
    stats: dict[str, int] = {}
    for remote in remotes:
        latencies += [x for x in remote.refresh_latencies]
        for key, value in remote.local_stats.items():
            stats[key] = stats.get(key, 0) + value
        remote._policy.close(timeout=2)  # what is left is not measured
    out.put((acted, latencies, stats))


def measure_local(server, session, clients: int, procs: int, seconds: float, warmup: float, batch_steps: int):
    """Steps per second the learner took from ``clients`` local-inference clients (accepted into the
    session, and learned from), the clients' acting rate, and the policy refresh latency."""
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    times = ctx.Array("d", 2)
    names = [f"local-{clients}-{i}" for i in range(clients)]
    groups = [names[i::procs] for i in range(min(procs, clients))]
    workers = [
        ctx.Process(target=_local_clients, args=(server.url, g, batch_steps, times, ready, go, out)) for g in groups
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    times[0] = time.time() + warmup
    times[1] = times[0] + seconds
    go.set()
    time.sleep(max(0.0, times[0] - time.time()))
    ingest = server._experience
    accepted0, learned0, load0, cpu0 = ingest.steps, session.steps, os.getloadavg()[0], time.process_time()
    time.sleep(max(0.0, times[1] - time.time()))
    accepted1, learned1, cpu1 = ingest.steps, session.steps, time.process_time()
    results = [out.get(timeout=120 + seconds) for _ in workers]
    for w in workers:
        w.join()
    latencies = np.asarray([x for r in results for x in r[1]] or [np.nan])
    stats: dict[str, int] = {}
    for r in results:
        for key, value in r[2].items():
            stats[key] = stats.get(key, 0) + value
    return {
        "ingested_per_s": (accepted1 - accepted0) / seconds,
        "learned_per_s": (learned1 - learned0) / seconds,
        "acted_per_s": sum(r[0] for r in results) / seconds,
        "refresh_p50_s": float(np.nanpercentile(latencies, 50)),
        "refresh_p99_s": float(np.nanpercentile(latencies, 99)),
        "refreshes": int(np.isfinite(latencies).sum()),
        "client_dropped_steps": stats.get("dropped_steps", 0),
        "server_dropped_steps": stats.get("server_dropped_steps", 0),
        "server_cpu_us_per_step": (cpu1 - cpu0) / max(accepted1 - accepted0, 1) * 1e6,
        "load": (load0 + os.getloadavg()[0]) / 2,
    }


def _config(agent, **changes) -> dict:
    """An agent's hyperparameters as its config holds them, with ``changes``."""
    import dataclasses

    return {**{f.name: getattr(agent.config, f.name) for f in dataclasses.fields(agent.config)}, **changes}


def _local_session(clients: int, learn: bool):
    import gymnasium as gym

    import workbench as wb

    env = gym.make("CartPole-v1")
    # The CartPole preset's DQN: 128 gradient steps every 256 env steps (a replay ratio of 0.5).
    agent = wb.preset("CartPole-v1", "dqn", seed=0).agent
    agent = wb.DQN(
        observation_space=env.observation_space, action_space=env.action_space, **_config(agent, n_envs=clients)
    )
    session = wb.Session.external(agent, seed=0, torch_threads=1)
    if learn:
        session.start(steps=10**9)
    return session


def run_local(args) -> None:
    """``--inference local``: for each number of clients, learning off and on, local-inference clients and,
    on the same session right after, today's per-step serving (batched WebSocket pairs), in one run."""
    import json
    import platform

    rows = []
    for round_ in range(args.rounds):
        for clients in args.clients:
            for learn in (False, True):
                session = _local_session(clients, learn)
                server = session.serve(max_batch=clients, publish_every=args.publish_every)
                try:
                    r = measure_local(server, session, clients, args.procs, args.seconds, args.warmup, args.batch_steps)
                    per_step = measure(server.url, "websocket", clients, args.procs, args.seconds, args.warmup)
                finally:
                    server.close()
                    session.stop()
                r["per_step_pairs_per_s"] = per_step["pairs_per_s"]
                r["ratio"] = r["ingested_per_s"] / max(per_step["pairs_per_s"], 1e-9)
                row = {"round": round_, "clients": clients, "learning": learn, **r}
                rows.append(row)
                print(
                    f"{clients:3d} clients, learning {'on ' if learn else 'off'}: "
                    f"ingested {r['ingested_per_s']:8.0f} steps/s (learned {r['learned_per_s']:7.0f}/s, "
                    f"acted {r['acted_per_s']:8.0f}/s), per-step serving {per_step['pairs_per_s']:6.0f} pairs/s "
                    f"({r['ratio']:.1f}x); refresh p50 {r['refresh_p50_s']:.3f} s "
                    f"p99 {r['refresh_p99_s']:.3f} s over {r['refreshes']}; dropped {r['client_dropped_steps']} at the "
                    f"clients, {r['server_dropped_steps']} at the server; load {r['load']:.1f}",
                    flush=True,
                )
    result = {
        "command": "nice python benchmarks/serve.py --inference local "
        + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in (
                ("clients", args.clients),
                ("seconds", args.seconds),
                ("rounds", args.rounds),
                ("procs", args.procs),
                ("batch_steps", args.batch_steps),
            )
        ),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": rows,
    }
    os.makedirs(os.path.dirname(LOCAL_RESULTS), exist_ok=True)
    previous = {}
    if os.path.exists(LOCAL_RESULTS):
        with open(LOCAL_RESULTS) as f:
            previous = json.load(f)
    with open(LOCAL_RESULTS, "w") as f:
        json.dump({**previous, "throughput": result}, f, indent=1)
    print(render_local())


def _parity_client(
    url: str, env_id: str, clients: int, seed: int, budget: int, batch_steps: int, lead: int, out
) -> None:
    """``clients`` local-inference clients on real envs, one thread round-robin, held within about ``lead``
    steps of what the learner has learned from (so that their policy is about as fresh as a learner's own)."""
    import gymnasium as gym
    import torch

    import workbench as wb

    torch.set_num_threads(1)
    remotes = [wb.RemoteSession(url, inference="local", batch_steps=batch_steps) for _ in range(clients)]
    envs = [gym.make(env_id) for _ in range(clients)]
    obs = [env.reset(seed=seed * 1000 + i)[0] for i, env in enumerate(envs)]
    acted = 0
    while acted < budget * 2:
        for i, (remote, env) in enumerate(zip(remotes, envs)):
            action = remote.act(obs[i], episode=i)
            obs2, reward, terminated, truncated, _ = env.step(action)
            remote.feedback(reward, obs2, terminated, truncated, episode=i)
            obs[i] = env.reset()[0] if terminated or truncated else obs2
        acted += clients
        if acted % (clients * 16) == 0:
            status = remotes[0]._request("GET", "/status")
            if status["status"] != "running":
                break
            while acted - status["steps"] > lead and status["status"] == "running":
                time.sleep(0.02)
                status = remotes[0]._request("GET", "/status")
    for remote in remotes:
        remote._policy.close(timeout=2)
    out.put(acted)


def _solved(threshold: float):
    return lambda s: len(s.signals["episode_reward"]) >= 20 and s.signals["episode_reward"].mean(last=20) >= threshold


def run_parity(args) -> None:
    """``--parity``: DQN and PPO (the CartPole presets, PPO with 16 envs) reach a mean of ``--threshold`` over
    their last 20 episodes through 16 local-inference clients, and in process at the same settings; the steps
    each took, per seed."""

    import gymnasium as gym

    import workbench as wb

    env_id = "CartPole-v1"
    rows = []
    for algo in args.algorithms:
        for seed in args.seeds:
            for where in args.where:
                preset = wb.preset(env_id, algo, seed=seed)
                budget = preset.steps
                cls = type(preset.agent)
                env = gym.make(env_id)
                options = _config(preset.agent, **({"n_envs": args.parity_clients} if algo == "ppo" else {}))
                agent = cls(
                    observation_space=env.observation_space, action_space=env.action_space, seed=seed, **options
                )
                started = time.time()
                if where == "in-process":
                    session = wb.Session(agent, env_id, seed=seed, stop_when=_solved(args.threshold), torch_threads=1)
                    session.run(steps=budget)
                else:
                    session = wb.Session.external(agent, seed=seed, stop_when=_solved(args.threshold), torch_threads=1)
                    session.start(steps=budget)
                    server = session.serve(publish_every=args.publish_every)
                    ctx = mp.get_context("spawn")
                    out = ctx.Queue()
                    client = ctx.Process(
                        target=_parity_client,
                        args=(
                            server.url,
                            env_id,
                            args.parity_clients,
                            seed,
                            budget,
                            args.parity_batch_steps,
                            args.parity_lead,
                            out,
                        ),
                    )
                    client.start()
                    session.wait()
                    client.join(120)
                    server.close()
                rewards = session.signals["episode_reward"]
                solved = len(rewards) >= 20 and rewards.mean(last=20) >= args.threshold
                row = {
                    "algorithm": algo,
                    "seed": seed,
                    "where": where,
                    "threshold": args.threshold,
                    "solved": bool(solved),
                    "steps": session.steps,
                    "budget": budget,
                    "final_mean_20": float(rewards.mean(last=20)) if len(rewards) else None,
                    "seconds": time.time() - started,
                    "load": os.getloadavg()[0],
                }
                rows.append(row)
                print(row, flush=True)
                _save_parity(rows, args)  # after every run: an interrupted benchmark keeps what it measured
    print(render_local())


def _save_parity(rows: list[dict], args) -> None:
    import json

    previous = {}
    if os.path.exists(LOCAL_RESULTS):
        with open(LOCAL_RESULTS) as f:
            previous = json.load(f)
    parity = previous.get("parity", {"rows": []})
    # A row is one (algorithm, threshold, seed, where): a run at another threshold is kept beside it. Rows from
    # before the threshold was stored per row take the file's single one.
    old = [{"threshold": parity.get("threshold", 475.0), **r} for r in parity["rows"]]
    mine = {(r["algorithm"], r["threshold"], r["seed"], r["where"]) for r in rows}
    keep = [r for r in old if (r["algorithm"], r["threshold"], r["seed"], r["where"]) not in mine]
    parity = {
        "clients": args.parity_clients,
        "batch_steps": args.parity_batch_steps,
        "lead": args.parity_lead,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": keep + rows,
    }
    with open(LOCAL_RESULTS, "w") as f:
        json.dump({**previous, "parity": parity}, f, indent=1)


def _seconds(value: float) -> str:
    """A refresh latency for the table ("-" where no version was published in the window)."""
    return f"{value:.3f}" if np.isfinite(value) else "-"


def render_local(write: bool = True) -> str:
    """The local-inference tables of docs/serve.md (between its ``serve-local`` markers), from
    ``benchmarks/results/serve_local.json`` only."""
    import json

    with open(LOCAL_RESULTS) as f:
        data = json.load(f)
    lines = []
    throughput = data.get("throughput")
    if throughput:
        rows = throughput["rows"]
        lines += [
            f"Measured {throughput['when']} on {throughput['machine']['cpus']} CPUs "
            f"(`{throughput['command']}`; medians over the rounds):",
            "",
            "| clients | learning | ingested steps/s | learned from /s | clients acted /s | per-step serving pairs/s "
            "| ingested / per-step | refresh p50 (s) | refresh p99 (s) | dropped (client / server) | load average |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        keys = list(dict.fromkeys((r["clients"], r["learning"]) for r in rows))
        for clients, learn in keys:
            rs = [r for r in rows if (r["clients"], r["learning"]) == (clients, learn)]
            med = {k: float(np.median([r[k] for r in rs])) for k in rs[0] if isinstance(rs[0][k], int | float)}
            lines.append(
                f"| {clients} | {'on' if learn else 'off'} | {med['ingested_per_s']:,.0f} "
                f"| {med['learned_per_s']:,.0f} "
                f"| {med['acted_per_s']:,.0f} | {med['per_step_pairs_per_s']:,.0f} | {med['ratio']:.1f}x "
                f"| {_seconds(med['refresh_p50_s'])} | {_seconds(med['refresh_p99_s'])} "
                f"| {med['client_dropped_steps']:,.0f} / {med['server_dropped_steps']:,.0f} | {med['load']:.1f} |"
            )
    parity = data.get("parity")
    if parity:
        lines += [
            "",
            f"CartPole through {parity['clients']} local-inference clients against in process, at the same settings "
            f"(the CartPole presets; PPO with {parity['clients']} envs; the clients send "
            f"{parity.get('batch_steps', 64)}-step batches and act at most {parity.get('lead', 2000)} steps ahead "
            "of the learner); steps until the mean of the last 20 episodes reached the row's threshold, or the "
            f"budget (last measured {parity['when']}):",
            "",
            "| algorithm | threshold | seed | local: steps (solved) | local: last 20 episodes "
            "| in process: steps (solved) | in process: last 20 episodes |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        # Rows from before thresholds were stored per row carry the file's single one.
        rows = [{"threshold": parity.get("threshold", 475.0), **r} for r in parity["rows"]]
        by = {(r["algorithm"], r["threshold"], r["seed"], r["where"]): r for r in rows}
        for algo, threshold, seed in sorted(
            dict.fromkeys((r["algorithm"], r["threshold"], r["seed"]) for r in rows), key=lambda k: (k[0], -k[1], k[2])
        ):
            cells = []
            for where in ("local", "in-process"):
                r = by.get((algo, threshold, seed, where))
                cells.append("-" if r is None else f"{r['steps']:,} ({'yes' if r['solved'] else 'no'})")
                cells.append("-" if r is None or r["final_mean_20"] is None else f"{r['final_mean_20']:.1f}")
            lines.append(f"| {algo.upper()} | {threshold:g} | {seed} | {' | '.join(cells)} |")
    text = "\n".join(lines)
    if write:
        with open(DOC) as f:
            doc = f.read()
        begin, end = "<!-- serve-local:begin -->", "<!-- serve-local:end -->"
        if begin in doc and end in doc:
            head, rest = doc.split(begin, 1)
            _, tail = rest.split(end, 1)
            with open(DOC, "w") as f:
                f.write(f"{head}{begin}\n{text}\n{end}{tail}")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--transports", nargs="+", default=["http", "websocket"])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument(
        "--client",
        choices=["async", "remote"],
        default="async",
        help="asyncio clients (measure the server) or wb.RemoteSession threads",
    )
    parser.add_argument(
        "--http-parsers",
        nargs="+",
        default=["auto"],
        choices=["auto", "h11", "httptools"],
        help="uvicorn's HTTP parser (serve(http=...)): one served session per parser, HTTP measured on each",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure every cell this many times (echo first each round); medians"
    )
    parser.add_argument(
        "--logic",
        action="store_true",
        help="only the server's own work per pair, no network: fake /ws connections on one loop (batching on/off)",
    )
    parser.add_argument("--train", action="store_true", help="the session learns while it serves")
    parser.add_argument("--no-echo", action="store_true", help="skip the bare echo server's baseline")
    parser.add_argument(
        "--inference",
        choices=["server", "local"],
        default="server",
        help="local: clients act from the learner's policy and send experience batches (beside per-step serving)",
    )
    parser.add_argument("--batch-steps", type=int, default=256, help="local inference: steps per experience batch")
    parser.add_argument("--publish-every", type=float, default=0.2, help="local inference: serve(publish_every=)")
    parser.add_argument("--parity", action="store_true", help="local inference: CartPole solved through clients")
    parser.add_argument("--algorithms", nargs="+", default=["dqn", "ppo"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parity-clients", type=int, default=16)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--parity-batch-steps", type=int, default=16, help="--parity: the clients' batch_steps")
    parser.add_argument(
        "--parity-lead", type=int, default=512, help="--parity: steps the clients may act ahead of the learner"
    )
    parser.add_argument("--where", nargs="+", default=["local", "in-process"], choices=["local", "in-process"])
    parser.add_argument("--render", action="store_true", help="write the local-inference tables into docs/serve.md")
    args = parser.parse_args()
    if args.render:
        print(render_local())
        return
    if args.parity:
        run_parity(args)
        return
    if args.inference == "local":
        run_local(args)
        return

    import gymnasium as gym

    import workbench as wb

    env = gym.make("CartPole-v1")
    if args.logic:
        for _ in range(args.rounds):
            for clients in args.clients:
                cpu = {}
                for batch in (True, False):
                    agent = wb.DQN(
                        observation_space=env.observation_space,
                        action_space=env.action_space,
                        n_envs=clients,
                        seed=0,
                    )
                    session = wb.Session.external(agent, seed=0, torch_threads=1)
                    cpu[batch] = logic_only(session, batch, clients)
                    session.stop()
                print(
                    f"no network, {clients:3d} clients: server CPU per pair {cpu[True]:6.1f} us batched, "
                    f"{cpu[False]:6.1f} us unbatched ({cpu[False] / cpu[True]:.2f}x less batched)",
                    flush=True,
                )
        return
    rows = []
    echoes = []
    servers = {}
    sessions = []
    parsers = args.http_parsers
    for parser_name in parsers:
        for batch in (True, False):
            agent = wb.DQN(
                observation_space=env.observation_space,
                action_space=env.action_space,
                n_envs=max(args.clients),
                seed=0,
            )
            session = wb.Session.external(agent, seed=0, torch_threads=1)
            if args.train:
                session.start(steps=10**9)
            sessions.append(session)
            servers[batch, parser_name] = session.serve(batch=batch, max_batch=max(args.clients), http=parser_name)
    # HTTP once per parser (labelled with the one used), the WebSocket once (the parser only reads its handshake)
    cells = [
        (f"http ({servers[True, p].http})" if len(parsers) > 1 else "http", "http", p)
        for p in parsers
        if "http" in args.transports
    ] + [(t, t, parsers[0]) for t in args.transports if t != "http"]
    # For each number of clients, the bare echo server first, then every served cell: the load of the
    # machine's other jobs changes by the minute, so the ratio to the echo is taken between neighbours.
    try:
        for round_ in range(args.rounds):
            for clients in args.clients:
                echo = None
                if not args.no_echo:
                    load = os.getloadavg()[0]
                    echo = echo_baseline(clients, args.procs, args.seconds, args.warmup)
                    echo["load"] = (load + os.getloadavg()[0]) / 2
                    echoes.append((round_, clients, echo))
                    _show("bare echo", clients, "-", echo)
                for label, transport, parser_name in cells:
                    for batch in (True, False):
                        load, cpu = os.getloadavg()[0], time.process_time()
                        url = servers[batch, parser_name].url
                        r = measure(url, transport, clients, args.procs, args.seconds, args.warmup, args.client)
                        # This process is the server (the clients are others): its CPU time per pair, which
                        # the other jobs on the machine do not inflate as they do the wall-clock figures.
                        r["cpu_us"] = (time.process_time() - cpu) / r["pairs"] * 1e6
                        r["load"] = (load + os.getloadavg()[0]) / 2
                        if echo is not None:
                            r["echo_ratio"] = r["pairs_per_s"] / echo["pairs_per_s"]
                        rows.append((round_, label, clients, "on" if batch else "off", r))
                        _show(label, clients, "on" if batch else "off", r)
    finally:
        for server in servers.values():
            server.close()
        for session in sessions:
            session.stop()
    print(
        f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; {args.seconds:g} s per cell, "
        f"{args.procs} client processes ({args.client} clients); session {'learning' if args.train else 'idle'}; "
        f"{args.rounds} round(s), each figure the median over the rounds\n"
    )
    # The fair figures on a shared machine: pairs/s as a share of the bare echo server's, measured in
    # the same round with as many clients just before, and the server's CPU time per pair.
    print(
        "| transport | clients | batching | pairs/s | / echo pairs/s | p50 (ms) | p99 (ms) | server CPU/pair (us) "
        "| load average |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    keys = list(dict.fromkeys((label, clients, batch) for _, label, clients, batch, _ in rows))
    for label, clients, batch in keys:
        rs = [r for _, t, c, b, r in rows if (t, c, b) == (label, clients, batch)]
        ratio = f"{_median(rs, 'echo_ratio'):.2f}" if all("echo_ratio" in r for r in rs) else "-"
        print(
            f"| {label} | {clients} | {batch} | {_median(rs, 'pairs_per_s'):.0f} | {ratio} "
            f"| {_median(rs, 'p50_ms'):.2f} | {_median(rs, 'p99_ms'):.2f} | {_median(rs, 'cpu_us'):.0f} "
            f"| {_median(rs, 'load'):.1f} |"
        )
    for clients in args.clients:
        rs = [r for _, c, r in echoes if c == clients]
        if rs:
            print(
                f"| bare websockets echo (the machine's ceiling) | {clients} | - | {_median(rs, 'pairs_per_s'):.0f} "
                f"| 1.00 | {_median(rs, 'p50_ms'):.2f} | {_median(rs, 'p99_ms'):.2f} | {_median(rs, 'cpu_us'):.0f} "
                f"| {_median(rs, 'load'):.1f} |"
            )
    for label in dict.fromkeys(k[0] for k in keys):
        for clients in args.clients:
            # per round, batched against unbatched measured right after it; the median over the rounds
            on = {n: r for n, t, c, b, r in rows if (t, c, b) == (label, clients, "on")}
            off = {n: r for n, t, c, b, r in rows if (t, c, b) == (label, clients, "off")}
            pairs = [(on[n], off[n]) for n in on if n in off]
            if pairs:
                gain = float(np.median([a["pairs_per_s"] / b["pairs_per_s"] for a, b in pairs]))
                cpu = float(np.median([b["cpu_us"] / a["cpu_us"] for a, b in pairs]))
                print(
                    f"batching gain, {label}, {clients} clients: {gain:.2f}x pairs/s, "
                    f"{cpu:.2f}x less server CPU per pair (medians over {len(pairs)} round(s))"
                )


def _median(rs: list[dict[str, float]], key: str) -> float:
    return float(np.median([r[key] for r in rs]))


def _show(label: str, clients: int, batch: str, r: dict[str, float]) -> None:
    print(
        f"{label:16s} {clients:3d} clients, batching {batch:3s}: {r['pairs_per_s']:8.0f} pairs/s  "
        f"p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  server CPU {r['cpu_us']:5.0f} us/pair  "
        f"(load average {r['load']:.1f})",
        flush=True,
    )


if __name__ == "__main__":
    main()
