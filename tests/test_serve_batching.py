"""Acts that arrive together are answered by one forward pass: the external runner's ``act_many``
(``session.env_source.runner`` of ``Session.external``) and the server's batches of concurrent acts,
over HTTP and WebSocket."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.request

import gymnasium as gym
import numpy as np
import pytest

import workbench as wb


def _greedy_session(n_envs: int = 16):
    """A DQN session that never explores (epsilon 0): its actions depend on the observations only."""
    env = gym.make("CartPole-v1")
    agent = wb.DQN(
        observation_space=env.observation_space,
        action_space=env.action_space,
        n_envs=n_envs,
        exploration=wb.EpsilonGreedy(0.0, 0.0),
        learning_starts=0,
        seed=0,
    )
    return wb.Session.external(agent, seed=0)


def _count_decides(agent, monkeypatch, first_waits_for=None) -> list[int]:
    """Record the batch size of every ``decide`` (the forward passes); the first one may wait until
    ``first_waits_for()`` is true, so that concurrent acts pile up behind it."""
    sizes: list[int] = []
    decide = agent.decide

    def counted(obs, *args, **kwargs):
        sizes.append(len(np.asarray(obs)))
        if first_waits_for is not None and len(sizes) == 1:
            deadline = time.monotonic() + 30
            while not first_waits_for() and time.monotonic() < deadline:
                time.sleep(0.01)
        return decide(obs, *args, **kwargs)

    monkeypatch.setattr(agent, "decide", counted)
    return sizes


OBSERVATIONS = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32) * [1.0, 1.0, 0.2, 1.0]


def test_act_many_is_one_forward_pass_with_the_actions_of_one_by_one(monkeypatch):
    alone = _greedy_session()
    expected = [alone.act(obs, episode=i) for i, obs in enumerate(OBSERVATIONS)]
    session = _greedy_session()
    sizes = _count_decides(session.agent, monkeypatch)
    actions = session.env_source.runner.act_many(list(OBSERVATIONS), list(range(16)))
    assert sizes == [16]
    assert actions == expected and all(type(a) is int for a in actions)
    assert sorted(session.live_episodes) == list(range(16))
    for i, obs in enumerate(OBSERVATIONS):  # each episode awaits its feedback, as after act
        session.feedback(1.0, obs, False, False, episode=i)
    assert sizes == [16]


def test_act_many_refuses_as_act_does_and_return_exceptions_decides_the_rest():
    session = _greedy_session(n_envs=3)
    bad = [OBSERVATIONS[0], [1.0, 2.0], OBSERVATIONS[2]]
    with pytest.raises(ValueError, match="observation of shape"):
        session.env_source.runner.act_many(bad, ["a", "b", "c"])
    assert session.live_episodes == []  # refused as a whole: nothing started, no slot held
    results = session.env_source.runner.act_many(bad, ["a", "b", "c"], return_exceptions=True)
    assert isinstance(results[1], ValueError) and results[0] in (0, 1) and results[2] in (0, 1)
    assert sorted(session.live_episodes) == ["a", "c"]
    runner = session.env_source.runner
    again = runner.act_many(
        [OBSERVATIONS[0], OBSERVATIONS[3], OBSERVATIONS[4]], ["a", "d", "e"], return_exceptions=True
    )
    assert isinstance(again[0], RuntimeError) and "before the feedback" in str(again[0])
    assert again[1] in (0, 1)
    assert isinstance(again[2], RuntimeError) and "n_envs=3" in str(again[2])  # every slot is held
    with pytest.raises(ValueError, match="2 observations and 1 episodes"):
        session.env_source.runner.act_many(list(OBSERVATIONS[:2]), ["x"])


def test_act_many_honours_each_episodes_mask_and_leaves_the_others_free():
    session = _greedy_session(n_envs=4)
    free = [session.act(OBSERVATIONS[i], episode=f"free-{i}") for i in (1, 3)]
    session2 = _greedy_session(n_envs=4)
    only = [[True, False], [False, True]]
    actions = session2.env_source.runner.act_many(
        list(OBSERVATIONS[:4]), ["m0", "f0", "m1", "f1"], [only[0], None, only[1], None]
    )
    assert actions == [0, free[0], 1, free[1]]


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_concurrent_acts_are_answered_by_one_forward_pass_with_the_same_actions(transport, monkeypatch):
    pytest.importorskip("uvicorn")
    pytest.importorskip("websockets")
    expected = [_greedy_session().act(obs, episode=i) for i, obs in enumerate(OBSERVATIONS)]
    session = _greedy_session()
    # A running session decides in a serving thread, so the server goes on reading requests while the
    # first forward pass is held until the 15 other acts wait in the queue: they must be answered
    # together, by one more.
    session.start(steps=1_000)
    queued = re.compile(rb"^workbench_serve_queue 15$", re.M)
    url: list[str] = []
    sizes = _count_decides(
        session.agent, monkeypatch, first_waits_for=lambda: bool(queued.search(_get_url(url[0], "/metrics")))
    )
    answers: dict[int, int] = {}
    with session.serve(max_batch=64) as server:
        url.append(server.url)
        remotes = [wb.RemoteSession(server.url, transport=transport) for _ in range(16)]
        remotes[0].info  # noqa: B018 (the spaces, fetched once before the race)
        for r in remotes[1:]:
            r._info = remotes[0].info

        def one(i: int) -> None:
            if i:
                time.sleep(0.1)  # after the first act is in its forward pass
            answers[i] = remotes[i].act(OBSERVATIONS[i], episode=i)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for r in remotes:
            r.close()
        _, metrics = _get(server, "/metrics")
    session.stop()
    assert [answers[i] for i in range(16)] == expected
    assert sizes == [1, 15], f"forward passes of batch sizes {sizes}"
    assert "workbench_serve_batched_acts_total 16" in metrics and "workbench_serve_batches_total 2" in metrics


def test_batching_off_answers_each_act_with_its_own_forward_pass(monkeypatch):
    pytest.importorskip("uvicorn")
    session = _greedy_session(n_envs=4)
    sizes = _count_decides(session.agent, monkeypatch)
    with session.serve(batch=False) as server:
        threads = [
            threading.Thread(target=_post, args=(server, "/act", {"obs": OBSERVATIONS[i].tolist(), "episode": i}))
            for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert sizes == [1, 1, 1, 1]


def test_the_batch_size_is_a_signal():
    pytest.importorskip("uvicorn")
    session = _greedy_session(n_envs=8)
    with session.serve() as server:
        threads = [
            threading.Thread(target=_post, args=(server, "/act", {"obs": OBSERVATIONS[i].tolist(), "episode": i}))
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        deadline = time.monotonic() + 5
        while "serve_batch_size" not in session.signals and time.monotonic() < deadline:
            time.sleep(0.05)
    sizes = session.signals["serve_batch_size"]
    assert len(sizes.values) >= 1 and 1 <= sizes.last <= 8


def _post(server, path, body):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    out = response.status, json.loads(response.read())
    conn.close()
    return out


def _get_url(url, path) -> bytes:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return response.read()


def _get(server, path):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    out = response.status, response.read().decode()
    conn.close()
    return out


def test_the_event_loop_never_waits_for_a_busy_episode_it_refuses_the_call():
    # A feedback held by max_lag, or an expiry, keeps an episode's record in a serving thread; a call for
    # that episode meanwhile (a client that did not wait for its answer) is refused, while the others are
    # served, instead of stalling the loop that answers every connection.
    pytest.importorskip("uvicorn")
    session = _greedy_session(n_envs=2)
    with session.serve() as server:
        assert _post(server, "/act", {"obs": OBSERVATIONS[0].tolist(), "episode": "x"})[0] == 200
        record = server._record("x")
        record.lock.acquire()
        try:
            started = time.monotonic()
            status, body = _post(
                server,
                "/feedback",
                {
                    "reward": 1.0,
                    "next_obs": OBSERVATIONS[1].tolist(),
                    "terminated": False,
                    "truncated": False,
                    "episode": "x",
                },
            )
            assert status == 409 and body["field"] == "episode" and "still being answered" in body["error"]
            assert _post(server, "/act", {"obs": OBSERVATIONS[2].tolist(), "episode": "y"})[0] == 200
            assert time.monotonic() - started < 10
        finally:
            record.lock.release()
        status, body = _post(
            server,
            "/feedback",
            {
                "reward": 1.0,
                "next_obs": OBSERVATIONS[1].tolist(),
                "terminated": False,
                "truncated": True,
                "episode": "x",
            },
        )
        assert status == 200 and body == {"ok": True, "ended": True}
