"""Local inference for recurrent policies (issues 52 and 55): ``wb.RemoteSession(url, inference="local")``
keeps each episode's memory (RecurrentPPO's LSTM, GRU or GTrXL state) on the client, one row per live
episode, zeroed when the episode starts; its batches carry the state each step used, checked at the edge,
and the learner's update resumes a piece of an episode from the state its client sent."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from conftest import post_experience
from gymnasium import spaces

import workbench as wb
from workbench.agents.recurrent_ppo import RecurrentPPO
from workbench.serve.batch import encode_batch

pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

SMALL = dict(lstm_hidden_size=16, net_arch=(16,), memory_length=4, attention_heads=2)
OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = spaces.Box(-2.0, 2.0, (1,), np.float32)


def _served(agent: wb.RecurrentPPO, seed: int | None = 0, **options):
    session = wb.Session.external(agent, seed=seed, torch_threads=1)
    return session, session.serve(publish_every=0.05, **options)


@pytest.mark.parametrize("memory", ["lstm", "gru", "gtrxl"])
def test_interleaved_episodes_on_one_client_act_as_separate_episodes_in_process(memory):
    # A near-deterministic Gaussian policy (log std -20): the client's exploring actions are the means,
    # which depend on each episode's memory alone.
    agent = wb.RecurrentPPO(
        observation_space=OBS,
        action_space=ACTIONS,
        memory=memory,
        log_std_init=-20.0,
        seed=0,
        ortho_init=False,
        **SMALL,
    )
    session, server = _served(agent)
    rng = np.random.default_rng(0)
    episodes = {key: rng.uniform(-1, 1, (6, 3)).astype(np.float32) for key in ("a", "b", "a-again")}
    try:
        remote = wb.RemoteSession(server.url, inference="local", batch_steps=4)
        assert remote._request("GET", "/policy")["recurrent"] is True
        got: dict[str, list[float]] = {key: [] for key in episodes}
        for t in range(6):  # a and b step in turns on the one client
            for key in ("a", "b"):
                got[key].append(float(remote.act(episodes[key][t], episode=key)[0]))
                remote.feedback(0.0, episodes[key][t], False, t == 5, episode=key)
        for t in range(6):  # key "a" again after its episode was truncated: a new episode, its memory empty
            got["a-again"].append(float(remote.act(episodes["a-again"][t], episode="a")[0]))
            remote.feedback(0.0, episodes["a-again"][t], t == 5, False, episode="a")
        assert remote.flush(timeout=20) and remote.local_stats["refused_batches"] == 0
        remote.close()
        # In process: each episode alone, from an empty memory, deterministic.
        reference = wb.RecurrentPPO(observation_space=OBS, action_space=ACTIONS, memory=memory, n_envs=1, **SMALL)
        reference.load_networks(agent.acting_weights())
        for key, observations in episodes.items():
            reference.begin_episode(np.ones(1, bool))
            expected = [float(reference.decide(o, deterministic=True).actions[0, 0]) for o in observations]
            np.testing.assert_allclose(got[key], np.clip(expected, -2, 2), atol=1e-5, err_msg=key)
        assert not np.allclose(got["a"], got["b"], atol=1e-3)
    finally:
        server.close()
        session.stop()


def test_a_served_recurrent_policy_learns_from_its_clients_batches():
    agent = wb.RecurrentPPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=2, seed=0, **SMALL)
    session, server = _served(agent)
    session.start(steps=192)
    try:
        with wb.RemoteSession(server.url, inference="local", batch_steps=8) as remote:
            envs = {key: gym.make("CartPole-v1") for key in ("x", "y")}
            obs = {key: env.reset(seed=i)[0] for i, (key, env) in enumerate(envs.items())}
            deadline = time.monotonic() + 120
            while session.status == "running" and time.monotonic() < deadline:
                for key, env in envs.items():
                    action = remote.act(obs[key], episode=key)
                    assert env.action_space.contains(action)
                    obs[key], reward, terminated, truncated, _ = env.step(action)
                    remote.feedback(reward, obs[key], terminated, truncated, episode=key)
                    if terminated or truncated:
                        obs[key] = env.reset()[0]
            stats = remote.local_stats
        session.wait(timeout=60)
        assert stats["refused_batches"] == 0 and stats["sent_steps"] > 0
        assert session.steps >= 192 and agent.num_updates >= 3 and session.episodes > 0
        assert server._experience.steps >= 192
    finally:
        server.close()
        session.stop()


@pytest.mark.parametrize("memory", ["lstm", "gtrxl"])
def test_the_update_resumes_a_piece_of_an_episode_from_the_state_its_client_sent(memory, monkeypatch):
    # Pieces of 3 steps of two interleaved episodes fill one column: each piece after the first follows
    # another's cut. With no learning (lr 0) and one minibatch, the update's replay gives back exactly the
    # log-probabilities the client acted with when it resumes each piece from its stored state; started
    # from zeros at each cut (the in-process rule after an episode's end), it would not. A tiny clip range
    # makes clip_fraction count the steps whose replayed log-probability moved at all (a GTrXL starts
    # close to the identity, so approx_kl alone moves little).
    def replayed(resume: bool) -> tuple[list[float], list[float]]:
        if not resume:
            monkeypatch.setattr(RecurrentPPO, "_resumes", lambda self, states, dones: {})
        agent = wb.RecurrentPPO(
            "CartPole-v1",
            memory=memory,
            n_envs=1,
            n_steps=24,
            batch_size=24,
            n_epochs=1,
            clip_range=1e-5,
            learning_rate=wb.linear(0.0, 0.0),
            ortho_init=False,
            seed=0,
            **SMALL,
        )
        # No session seed: a seeded run would rebuild the untrained networks as it begins, and the first
        # steps could be acted with the networks from before (a new version follows at once, but late).
        session, server = _served(agent, seed=None)
        session.start(steps=48)
        try:
            with wb.RemoteSession(server.url, inference="local", batch_steps=3) as remote:
                rng = np.random.default_rng(1)
                for _ in range(24):
                    for key in ("p", "q"):
                        obs = rng.normal(size=4).astype(np.float32)
                        remote.act(obs, episode=key)
                        remote.feedback(1.0, obs, False, False, episode=key)
                assert remote.flush(timeout=30) and remote.local_stats["refused_batches"] == 0
            session.wait(timeout=60)
            assert agent.num_updates == 2
            signals = session.signals
            return list(signals["approx_kl"].values), list(signals["clip_fraction"].values)
        finally:
            server.close()
            session.stop()

    kl, clipped = replayed(True)
    assert max(abs(v) for v in kl) < 1e-6 and max(clipped) == 0.0, (kl, clipped)
    kl, clipped = replayed(False)
    assert min(clipped) > 0.2, (kl, clipped)  # most steps after a cut replay to another log-probability


def _recurrent_batch(state: np.ndarray | None, n: int = 3) -> bytes:
    rng = np.random.default_rng(0)
    arrays = {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=n),
        "reward": np.ones(n, np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "terminated": np.arange(n) == n - 1,
        "truncated": np.zeros(n, bool),
        "extras/values": np.zeros(n, np.float32),
        "extras/log_probs": np.full(n, -0.69, np.float32),
    }
    if state is not None:
        arrays["extras/lstm_states"] = state
    header = {"client": "c1", "seq": 1, "episode": "e", "version": 1, "steps": n, "episodes": [[n - 1, 3.0, n]]}
    return encode_batch(header, arrays)


@pytest.mark.parametrize(
    "state",
    [
        np.zeros((3, 4, 8), np.float32),  # the width of another network
        np.zeros((3, 2, 16), np.float32),  # the actor's rows without the critic's
        np.full((3, 4, 16), np.nan, np.float32),
        np.zeros((3, 4, 16), np.int64),
        None,  # left out
    ],
)
def test_a_bad_recurrent_state_in_a_batch_is_refused_at_the_edge(state):
    agent = wb.RecurrentPPO("CartPole-v1", n_envs=1, n_steps=8, seed=0, **SMALL)
    session, server = _served(agent)
    try:
        wb.RemoteSession(server.url, inference="local").close()  # the policy is published
        good = np.zeros((3, 4, 16), np.float32)
        body = _recurrent_batch(state)
        status, answer = post_experience(server, body)
        assert status == 400 and answer["field"] == "extras/lstm_states", answer
        assert "lstm_states" in answer["error"] and server._runner.queued == 0
        assert post_experience(server, _recurrent_batch(good))[0] == 200  # the well-formed batch is taken
    finally:
        server.close()
        session.stop()


def test_a_client_holds_a_bounded_number_of_live_episodes(monkeypatch):
    from workbench.serve import local

    monkeypatch.setattr(local, "MAX_EPISODES", 3)
    agent = wb.RecurrentPPO("CartPole-v1", n_envs=1, n_steps=8, seed=0, **SMALL)
    session, server = _served(agent)
    try:
        remote = wb.RemoteSession(server.url, inference="local")
        obs = np.zeros(4, np.float32)
        for key in range(3):
            remote.act(obs, episode=key)
        with pytest.raises(RuntimeError, match=r"3 episodes are live on this client.*end one"):
            remote.act(obs, episode=3)
        remote.feedback(1.0, obs, True, False, episode=0)  # an ended episode frees its memory row
        remote.act(obs, episode=3)
        remote._policy.close(timeout=1)
    finally:
        server.close()
        session.stop()
