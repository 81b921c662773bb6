"""A small HTTP service that learns while it serves, standard library only (http.server + json).

The environment lives with the clients: each client POSTs its observation and gets an action, then
POSTs the reward and next observation. The service trains an agent on that feedback in the
background with ``wb.Session.external``, one episode per client (``episode=`` is the client's id).

    python examples/service.py --port 8000            # learn for --steps while serving; serve on
                                                      # until Ctrl-C, then save to runs/service
    python examples/service.py --selftest             # serve on a free port and drive CartPole
                                                      # through it from 4 client threads

Endpoints (JSON in, JSON out):

    POST /act       {"client": "c1", "obs": [...]}                          -> {"action": 1}
    POST /feedback  {"client": "c1", "reward": 1.0, "next_obs": [...],
                     "terminated": false, "truncated": false}                -> {"ok": true}
    GET  /status                                  -> {"status": "running", "steps": ..., "episodes": ...,
                                                      "mean_reward": ...}

An error in a request (feedback without act, a bad observation) answers 400 with {"error": "..."}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gymnasium as gym
import numpy as np

import workbench as wb


def make_handler(session: wb.Session) -> type[BaseHTTPRequestHandler]:
    """The request handler of a service in front of ``session`` (an external session)."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/status":
                return self._reply(404, {"error": f"unknown path {self.path}"})
            rewards = session.signals.get("episode_reward")
            mean = None if rewards is None else rewards.mean(last=20)
            self._reply(200, {"status": session.status, "steps": session.steps, "episodes": session.episodes,
                              "mean_reward": mean})

        def do_POST(self) -> None:
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                client = str(request["client"])
                if self.path == "/act":
                    action = session.act(np.asarray(request["obs"], dtype=np.float32), episode=client)
                    return self._reply(200, {"action": np.asarray(action).tolist()})
                if self.path == "/feedback":
                    session.feedback(float(request["reward"]), np.asarray(request["next_obs"], dtype=np.float32),
                                     bool(request["terminated"]), bool(request["truncated"]), episode=client)
                    return self._reply(200, {"ok": True})
                self._reply(404, {"error": f"unknown path {self.path}"})
            except (KeyError, ValueError, TypeError, RuntimeError) as exc:
                self._reply(400, {"error": f"{type(exc).__name__}: {exc}"})

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
            pass

    return Handler


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` as JSON to ``url``; the JSON answer."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def client_loop(base: str, client: str, seed: int, keep_going: threading.Event) -> None:
    """One client: plays CartPole episodes, asking the service for every action."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    while keep_going.is_set():
        action = post(f"{base}/act", {"client": client, "obs": obs.tolist()})["action"]
        next_obs, reward, terminated, truncated, _ = env.step(action)
        post(f"{base}/feedback", {"client": client, "reward": reward, "next_obs": next_obs.tolist(),
                                  "terminated": terminated, "truncated": truncated})
        obs = env.reset()[0] if terminated or truncated else next_obs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--clients", type=int, default=4, help="concurrent episodes the agent learns from")
    parser.add_argument("--steps", type=int, default=30_000, help="transitions to learn from")
    parser.add_argument("--save", default="runs/service")
    parser.add_argument("--selftest", action="store_true", help="drive CartPole through the service and exit")
    args = parser.parse_args()

    env = gym.make("CartPole-v1")
    # One env slot per client (n_envs): every client's episodes form one column of PPO's rollouts.
    agent = wb.PPO(observation_space=env.observation_space, action_space=env.action_space,
                   n_envs=args.clients, n_steps=128, batch_size=128, seed=0)
    session = wb.Session.external(agent, seed=0)
    server = ThreadingHTTPServer(("127.0.0.1", 0 if args.selftest else args.port), make_handler(session))
    base = f"http://127.0.0.1:{server.server_address[1]}"
    session.start(steps=args.steps)
    print(f"serving on {base} (POST /act, POST /feedback, GET /status)")
    if not args.selftest:
        try:  # after the budget the service goes on answering /act with the trained policy
            server.serve_forever()
        except KeyboardInterrupt:
            session.stop()
        print(f"saved to {session.save(args.save, overwrite=True)}")
        return

    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        keep_going = threading.Event()
        keep_going.set()
        clients = [threading.Thread(target=client_loop, args=(base, f"client-{i}", i, keep_going), daemon=True)
                   for i in range(args.clients)]
        for c in clients:
            c.start()
        while not session.wait(timeout=2.0):
            with urllib.request.urlopen(f"{base}/status") as response:
                print(json.loads(response.read()))
        keep_going.clear()
        for c in clients:
            c.join()
        with tempfile.TemporaryDirectory() as tmp:  # the self-test leaves nothing behind
            returns = wb.load(session.save(f"{tmp}/service")).play("CartPole-v1", episodes=5, seed=100)
        print(f"{session.status}: {session.steps} steps, {session.episodes} episodes; "
              f"play return of the saved agent {np.mean(returns):.1f}")
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
