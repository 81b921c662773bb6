"""A served DQN session driven from a client process through learning gives the returns of the
in-process external session at the same seed (``max_lag=0``: every step learned from before the next
act, so the acts see the same weights, exploration rate and random state, call by call)."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest

import workbench as wb

pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

STEPS = 400

_CLIENT = """
import json, sys
import gymnasium as gym
import workbench as wb

url, transport, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
remote = wb.RemoteSession(url, transport=transport)
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=0)
actions = []
for _ in range(steps):
    action = remote.act(obs.tolist())
    actions.append(int(action))
    obs2, reward, terminated, truncated, _ = env.step(action)
    remote.feedback(float(reward), obs2.tolist(), bool(terminated), bool(truncated))
    obs = env.reset()[0] if terminated or truncated else obs2
remote.close()
print(json.dumps(actions))
"""


def _session() -> wb.Session:
    env = gym.make("CartPole-v1")
    agent = wb.DQN(
        observation_space=env.observation_space,
        action_space=env.action_space,
        learning_starts=100,
        train_freq=4,
        gradient_steps=1,
        batch_size=32,
        target_update_interval=50,
        net_arch=[32],
        seed=3,
    )
    return wb.Session.external(agent, seed=3, max_lag=0, torch_threads=1).start(steps=STEPS)


def _drive(target: wb.Session, steps: int) -> list[int]:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    actions = []
    for _ in range(steps):
        action = target.act(obs.tolist())
        actions.append(int(action))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        target.feedback(float(reward), next_obs.tolist(), bool(terminated), bool(truncated))
        obs = env.reset()[0] if terminated or truncated else next_obs
    return actions


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_a_served_dqn_session_learns_as_the_in_process_one(transport):
    local = _session()
    expected = _drive(local, STEPS)
    assert local.wait(60) and local.status == "finished"
    returns = list(local.signals["episode_reward"].values)
    assert local.signals["loss"].values.size > 30  # it learned: the updates changed what it decided

    served = _session()
    with served.serve() as server:
        out = subprocess.run(
            [sys.executable, "-c", _CLIENT, server.url, transport, str(STEPS)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.strip().splitlines()[-1]) == expected
        assert served.wait(60) and served.status == "finished"
        assert list(served.signals["episode_reward"].values) == returns
        assert served.agent.num_timesteps == local.agent.num_timesteps == STEPS


def test_max_lag_0_holds_feedback_until_its_step_is_learned_from():
    # Two in-process runs at the same seed, learning as they go, act identically: each feedback returns
    # only once the loop has observed its step and done the update it allowed (before, it returned
    # when the loop took the step, and the next act raced the update).
    runs = []
    for _ in range(2):
        session = _session()
        runs.append((_drive(session, STEPS), session))
        assert session.wait(60) and session.status == "finished"
    (first, a), (second, b) = runs
    assert first == second
    assert list(a.signals["loss"].values) == list(b.signals["loss"].values)
    assert a.signals["loss"].values.size > 30
