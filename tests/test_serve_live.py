"""A served session stays the live object it was: its dashboard's buttons, ``pause``/``stop`` and live
edits (``session.set``) act on the run while clients drive it over the network, and the clients see it."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import pytest

import workbench as wb

pytest.importorskip("uvicorn")
pytest.importorskip("ipywidgets")


def _drive(url: str, episode: str, stop: threading.Event, acts: list[int]) -> None:
    """A client: CartPole in this thread, its decisions from the server."""
    env = gym.make("CartPole-v1")
    remote = wb.RemoteSession(url)
    obs, _ = env.reset(seed=len(episode))
    while not stop.is_set():
        action = remote.act(obs, episode=episode)
        acts.append(action)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        remote.feedback(reward, next_obs, terminated, truncated, episode=episode)
        obs = env.reset()[0] if terminated or truncated else next_obs
    remote.close()


def _until(check, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_dashboard_pause_stop_and_live_edits_reach_a_served_session_and_its_clients():
    env = gym.make("CartPole-v1")
    # No gradient step in this test (learning_starts): it checks control, not learning, and stays fast.
    agent = wb.DQN(
        observation_space=env.observation_space,
        action_space=env.action_space,
        n_envs=2,
        learning_starts=100_000,
        seed=0,
    )
    session = wb.Session.external(agent, seed=0)
    dashboard = session.dashboard()
    session.start(steps=1_000_000)
    stop = threading.Event()
    acts: list[int] = []
    with session.serve() as server:
        remote = wb.RemoteSession(server.url)
        clients = [threading.Thread(target=_drive, args=(server.url, name, stop, acts)) for name in ("a", "b")]
        for c in clients:
            c.start()
        try:
            _until(lambda: session.steps > 40)
            dashboard.refresh()
            assert "running" in dashboard.status_line.value

            dashboard._on_pause()  # the Pause button
            assert remote.status == "paused"
            paused_at, acted = remote.steps, len(acts)
            _until(lambda: len(acts) > acted + 20)  # acts are still answered while paused...
            assert remote.steps == paused_at == session.steps  # ...and nothing is learned
            dashboard.refresh()
            assert "paused" in dashboard.status_line.value

            old = session.set(learning_rate=3e-5)  # a live edit from the kernel
            dashboard._on_resume()
            assert remote.status == "running"
            _until(lambda: session.steps > paused_at + 40)
            assert old["learning_rate"] != 3e-5 and session.agent.config.learning_rate == pytest.approx(3e-5)
            assert remote.signals["set/learning_rate"].last == pytest.approx(3e-5)  # the clients see it

            dashboard._on_stop()  # the Stop button
            assert remote.status == "stopped"
            stopped_at, acted = session.steps, len(acts)
            _until(lambda: len(acts) > acted + 20)  # the learned policy goes on answering
            assert session.steps == stopped_at
            dashboard.refresh()
            assert "stopped" in dashboard.status_line.value
        finally:
            stop.set()
            for c in clients:
                c.join(30)
            dashboard.close()
    assert not any(c.is_alive() for c in clients)


def test_a_client_stops_and_pauses_the_session_the_kernel_holds():
    env = gym.make("CartPole-v1")
    agent = wb.DQN(observation_space=env.observation_space, action_space=env.action_space, seed=0)
    session = wb.Session.external(agent, seed=0).start(steps=1_000_000)
    with session.serve() as server:
        remote = wb.RemoteSession(server.url)
        remote.pause()
        assert session.status == "paused"
        remote.resume()
        assert session.status == "running"
        remote.stop()
        assert session.status == "stopped"
        remote.close()
