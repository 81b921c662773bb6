"""Local inference for composite (Dict / Tuple) action spaces (issue 52, docs/actions.md): the client acts in
the env's structure, honours a mask per head, and sends one ``action/<path>`` array per leaf, each checked at
the server's edge (shape, dtype, its space's bounds) with the masks per head."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import post_experience
from gymnasium import spaces

import workbench as wb
from workbench.serve.batch import encode_batch

pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

NESTED = spaces.Dict(
    {
        "kind": spaces.Discrete(3, start=1),
        "aim": spaces.Tuple((spaces.Box(-2.0, 2.0, (2,), np.float32), spaces.MultiBinary(2))),
        "pick": spaces.MultiDiscrete([2, 3]),
    }
)


class DictEnv(gym.Env):
    """A Dict action of a Discrete "kind" and a Box "amount", with a mask per head in ``info`` (kind 1 is
    forbidden on odd steps): the env asserts it gets a dict of numpy values and never a masked kind."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = spaces.Dict({"kind": spaces.Discrete(3), "amount": spaces.Box(-2.0, 2.0, (2,), np.float32)})
        self.t = 0

    def _info(self) -> dict:
        return {"action_mask": {"kind": np.array([True, self.t % 2 == 0, True])}}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), self._info()

    def step(self, action):
        assert isinstance(action, dict) and set(action) == {"kind", "amount"}, action
        assert self.action_space.contains(action), action
        kind = int(action["kind"])
        assert kind != 1 or self.t % 2 == 0, "a masked kind reached the env"
        self.t += 1
        reward = float(kind == 2) - float(np.abs(action["amount"] - 0.5).sum())
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), reward, False, self.t >= 6, self._info()


class NestedEnv(gym.Env):
    """Every leaf kind (a Discrete from 1, a Box, a MultiBinary, a MultiDiscrete), nested."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = NESTED
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        return np.full(2, self.t / 10, np.float32), float(action["kind"]), False, self.t >= 5, {}


def _drive(remote: wb.RemoteSession, env: gym.Env, steps: int, masked: bool) -> None:
    obs, info = env.reset(seed=0)
    for _ in range(steps):
        action = remote.act(obs, action_mask=info["action_mask"] if masked else None)
        obs, reward, terminated, truncated, info = env.step(action)
        remote.feedback(reward, obs, terminated, truncated, info=info)
        if terminated or truncated:
            obs, info = env.reset()


def test_a_dict_action_policy_acts_locally_with_masks_per_head_and_learns_from_the_batches():
    agent = wb.PPO(DictEnv(), n_envs=1, n_steps=16, batch_size=16, net_arch=[16], seed=0)
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=64)
    server = session.serve(publish_every=0.05)
    try:
        with wb.RemoteSession(server.url, inference="local", batch_steps=8) as remote:
            described = remote._request("GET", "/policy")
            assert described["recurrent"] is False
            assert described["actions"] == {"action/amount": [[2], "f"], "action/kind": [[], "i"]}
            _drive(remote, DictEnv(), 96, masked=True)  # the env raises on a masked kind or a bad structure
            assert remote.flush(timeout=30)
            stats = remote.local_stats
        assert stats["acted"] == 96 and stats["refused_batches"] == 0 and stats["sent_steps"] > 0
        session.wait(timeout=60)
        assert session.steps >= 64 and agent.num_updates >= 4 and session.episodes > 0
        assert "entropy/kind" in session.signals and "entropy/amount" in session.signals
    finally:
        server.close()
        session.stop()


def test_every_leaf_kind_nested_with_a_recurrent_policy():
    agent = wb.RecurrentPPO(NestedEnv(), n_envs=1, n_steps=8, lstm_hidden_size=8, net_arch=(8,), seed=0)
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=16)
    server = session.serve(publish_every=0.05)
    try:
        with wb.RemoteSession(server.url, inference="local", batch_steps=4) as remote:
            env = NestedEnv()
            obs, _ = env.reset()
            for _ in range(30):
                action = remote.act(obs)
                obs, reward, terminated, truncated, _ = env.step(action)  # asserts the action is in the space
                remote.feedback(reward, obs, terminated, truncated)
                if terminated or truncated:
                    obs, _ = env.reset()
            assert remote.flush(timeout=30) and remote.local_stats["refused_batches"] == 0
        session.wait(timeout=60)
        assert session.steps >= 16 and agent.num_updates >= 2
    finally:
        server.close()
        session.stop()


def _batch(n: int = 4, **changes) -> bytes:
    """A well-formed DictEnv batch of ``n`` steps (kind 1 masked on odd rows, never taken), the last ending its
    episode; ``changes`` replace arrays (None removes one)."""
    rng = np.random.default_rng(0)
    arrays = {
        "obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "action/amount": rng.normal(size=(n, 2)).astype(np.float32),
        "action/kind": np.array([0, 2, 1, 0])[:n],
        "reward": np.zeros(n, np.float32),
        "next_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "terminated": np.arange(n) == n - 1,
        "truncated": np.zeros(n, bool),
        "extras/values": np.zeros(n, np.float32),
        "extras/log_probs": np.full(n, -2.0, np.float32),
        "action_mask": np.stack([[True, t % 2 == 0, True] for t in range(n)]),
        "next_action_mask": np.ones((n, 3), bool),
    }
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    header = {"client": "c", "seq": 1, "episode": "e", "version": 1, "steps": n, "episodes": [[n - 1, 0.0, n]]}
    return encode_batch(header, arrays)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"action/kind": np.array([0, 2, 3, 0])}, "action/kind", "'kind'"),  # outside Discrete(3)
        ({"action/kind": np.zeros(4, np.float32)}, "action/kind", "integer"),
        ({"action/amount": np.zeros((4, 3), np.float32)}, "action/amount", "shape"),
        ({"action/amount": np.full((4, 2), np.inf, np.float32)}, "action/amount", "infinite"),
        ({"action/kind": None}, "action/kind", "lacks"),
        ({"action": np.zeros(4, np.int64)}, "action", "unknown"),  # a flat action where leaves are expected
        ({"action/kind": np.array([0, 1, 1, 0])}, "action_mask", "'kind'"),  # kind 1 taken where masked
        ({"action_mask": np.array([[False, False, False]] * 4)}, "action_mask", "'kind'"),  # a head allows nothing
    ],
)
def test_a_malformed_leaf_or_head_mask_is_refused_at_the_edge_naming_it(changes, field, words):
    session = wb.Session.external(wb.PPO(DictEnv(), n_envs=1, n_steps=8, net_arch=[16], seed=0), seed=0)
    server = session.serve()
    try:
        wb.RemoteSession(server.url, inference="local").close()  # the policy is published
        status, answer = post_experience(server, _batch(**changes))
        assert status == 400 and answer["field"] == field and words in answer["error"], answer
        assert server._runner.queued == 0
        assert post_experience(server, _batch())[0] == 200  # the well-formed batch is taken
    finally:
        server.close()
        session.stop()
