"""A service that learns while it serves: ``session.serve()`` and clients driving it with ``wb.RemoteSession``.

The environment lives with the clients: each asks the service for an action, steps its own env and
reports what followed. The service trains a PPO agent on that feedback with ``wb.Session.external``,
one episode stream per client (``episode=`` is the client's id) and one env slot per client.

    python examples/service.py --selftest    # serve on a free loopback port, drive CartPole through it
                                             # from 4 client threads, then save, load and play the agent

For a long-running service use the command line, which stops cleanly on SIGTERM or Ctrl-C and saves only
where --save says (never over a folder that is not a run):

    workbench serve CartPole-v1 --agent ppo --n-envs 4 --set n_steps=128 --port 8000 --save runs/service

The endpoints (POST /act, POST /feedback, WS /ws, GET /status, /signals, /metrics) are in docs/serve.md.
"""

from __future__ import annotations

import argparse
import tempfile
import threading

import gymnasium as gym
import numpy as np

import workbench as wb


def client_loop(url: str, client: str, seed: int, keep_going: threading.Event) -> None:
    """One client: plays CartPole episodes, asking the service for every action."""
    remote = wb.RemoteSession(url, transport="websocket")
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    while keep_going.is_set():
        action = remote.act(obs, episode=client)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        remote.feedback(reward, next_obs, terminated, truncated, episode=client)
        obs = env.reset()[0] if terminated or truncated else next_obs
    remote.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4, help="concurrent episodes the agent learns from")
    parser.add_argument("--steps", type=int, default=30_000, help="transitions to learn from")
    parser.add_argument("--selftest", action="store_true", help="drive CartPole through the service and exit")
    args = parser.parse_args()
    if not args.selftest:
        parser.error("run with --selftest, or serve with: workbench serve CartPole-v1 --agent ppo (see the docstring)")

    env = gym.make("CartPole-v1")
    agent = wb.PPO(
        observation_space=env.observation_space,
        action_space=env.action_space,
        n_envs=args.clients,
        n_steps=128,
        batch_size=128,
        seed=0,
    )
    session = wb.Session.external(agent, seed=0).start(steps=args.steps)
    with session.serve() as server:  # loopback, a free port
        print(f"serving on {server.url}")
        keep_going = threading.Event()
        keep_going.set()
        clients = [
            threading.Thread(target=client_loop, args=(server.url, f"client-{i}", i, keep_going))
            for i in range(args.clients)
        ]
        for c in clients:
            c.start()
        remote = wb.RemoteSession(server.url)
        while not session.wait(timeout=2.0):
            rewards = remote.signals.get("episode_reward")
            print(
                f"{remote.status}: {remote.steps} steps, mean reward (last 20) "
                f"{rewards.mean(last=20) if rewards is not None and len(rewards) else float('nan'):.1f}"
            )
        keep_going.clear()
        for c in clients:
            c.join()
    with tempfile.TemporaryDirectory() as tmp:  # the self-test leaves nothing behind
        returns = wb.load(session.save(f"{tmp}/service")).play("CartPole-v1", episodes=5, seed=100)
    print(
        f"{session.status}: {session.steps} steps, {session.episodes} episodes; "
        f"play return of the saved agent {np.mean(returns):.1f}"
    )


if __name__ == "__main__":
    main()
