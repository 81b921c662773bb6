"""A served session (session.serve, wb.RemoteSession): the in-process contract over HTTP and WebSocket,
checked at the edge, with its limits, timeouts, token and slot reclamation. Loopback only."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import workbench as wb

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("websockets")

TOKEN = "a-test-token-of-enough-length"


def _session(n_envs: int = 1, start: bool = False, **options):
    env = gym.make("CartPole-v1")
    agent = wb.DQN(
        observation_space=env.observation_space,
        action_space=env.action_space,
        n_envs=n_envs,
        learning_starts=50,
        train_freq=4,
        gradient_steps=1,  # updates happen; how fast they learn is not what these tests check
        seed=0,
    )
    session = wb.Session.external(agent, seed=0, **options)
    if start:
        session.start(steps=100_000)
    return session


def _parsers():
    try:
        import httptools  # noqa: F401
    except ImportError:
        return ["h11"]
    return ["h11", "httptools"]


@pytest.fixture(params=_parsers())
def served(request):
    """A served session on each HTTP parser uvicorn can use here: the limits and timeouts hold on both."""
    session = _session(n_envs=2)
    server = session.serve(read_timeout=0.5, episode_timeout=0.4, http=request.param)
    assert server.http == request.param
    yield session, server
    server.close()
    session.stop()


def _post(server, path, body, headers=None, raw=False):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    data = body if raw else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    out = response.status, json.loads(response.read() or b"{}")
    conn.close()
    return out


def _get(server, path, headers=None):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


OBS = [0.01, -0.02, 0.03, 0.0]


def test_serve_binds_loopback_on_a_free_port_and_only_there(served):
    session, server = served
    assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0 and str(server) == server.url
    listening = [c for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    ours = [c for c in listening if c.laddr.port == server.port]
    assert [c.laddr.ip for c in ours] == ["127.0.0.1"]
    assert all(ipaddr_is_loopback(c.laddr.ip) for c in listening)


def ipaddr_is_loopback(ip: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip).is_loopback


def test_another_interface_needs_a_token_and_a_plain_session_cannot_be_served():
    session = _session()
    with pytest.raises(ValueError, match=r"host='0\.0\.0\.0'.*token="):
        session.serve(host="0.0.0.0")
    with pytest.raises(ValueError, match="at least 16 characters"):
        session.serve(token="short")
    with pytest.raises(ValueError, match="port="):
        session.serve(port=70_000)
    plain = wb.Session(wb.DQN("CartPole-v1"), "CartPole-v1")
    with pytest.raises(ValueError, match="Session.external"):
        plain.serve()


def test_remote_session_acts_and_feeds_back_as_in_process(served):
    session, server = served
    for transport in ("http", "websocket"):
        remote = wb.RemoteSession(server.url, transport=transport)
        action = remote.act(np.array(OBS, dtype=np.float32), episode=f"e-{transport}")
        assert isinstance(action, int) and action in (0, 1)
        remote.feedback(np.float32(1.0), np.array(OBS), np.bool_(False), False, episode=f"e-{transport}")
        with pytest.raises(RuntimeError, match="without an act"):
            remote.feedback(1.0, OBS, False, False, episode=f"e-{transport}")
        remote.act(OBS, episode=f"e-{transport}")
        with pytest.raises(RuntimeError, match="before the feedback"):
            remote.act(OBS, episode=f"e-{transport}")
        with pytest.raises(TypeError, match="terminated"):
            remote.feedback(1.0, OBS, "false", False, episode=f"e-{transport}")
        with pytest.raises(ValueError, match="next_obs"):
            remote.feedback(1.0, [1.0, 2.0], False, False, episode=f"e-{transport}")
        with pytest.raises(ValueError, match="NaN"):
            remote.feedback(float("nan"), OBS, False, False, episode=f"e-{transport}")
        remote.feedback(1.0, OBS, False, True, episode=f"e-{transport}")  # the action survived the bad calls
        remote.close()
    assert session.live_episodes == []


def test_strict_json_types_are_refused_with_the_field_named(served):
    session, server = served
    assert _post(server, "/act", {"obs": OBS, "episode": "a"})[0] == 200
    good = {"reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": False, "episode": "a"}
    cases = [
        ({**good, "terminated": "false"}, "terminated", "TypeError"),
        ({**good, "truncated": 0}, "truncated", "TypeError"),
        ({**good, "reward": "1"}, "reward", "TypeError"),
        ({**good, "reward": True}, "reward", "TypeError"),
        ({**good, "next_obs": [1, 2]}, "next_obs", "ValueError"),
        ({**good, "next_obs": [1, None, 3, 4]}, "next_obs", "TypeError"),
        ({**good, "next_obs": [1, "2", 3, 4]}, "next_obs", "TypeError"),
        ({**good, "truncted": True}, "truncted", "TypeError"),
        ({**good, "episode": [1]}, "episode", "TypeError"),
        ({**good, "info": [1]}, "info", "TypeError"),
    ]
    for body, field, kind in cases:
        status, answer = _post(server, "/feedback", body)
        assert (status, answer["field"], answer["type"]) == (400, field, kind), body
    for raw, what in [(b'{"reward": NaN}', "not JSON"), (b"[1, 2]", "object"), (b"{", "not valid JSON")]:
        status, answer = _post(server, "/feedback", raw, raw=True)
        assert status == 400 and what in answer["error"]
    status, answer = _post(
        server,
        "/feedback",
        b'{"reward": 1e999, "next_obs": [0,0,0,0], "terminated": false, "truncated": false, "episode": "a"}',
        raw=True,
    )
    assert (status, answer["field"]) == (400, "reward")
    # Numbers past what the observation's float32 holds: an integer past 1e308, a float past 3.4e38.
    for raw in (
        b'{"obs": [1' + b"0" * 400 + b', 0, 0, 0], "episode": "b"}',
        b'{"obs": [1e39, 0, 0, 0], "episode": "b"}',
    ):
        status, answer = _post(server, "/act", raw, raw=True)
        assert (status, answer["field"], answer["type"]) == (400, "obs", "ValueError"), raw
    big = {**good, "next_obs": [1e39, 0, 0, 0]}
    assert _post(server, "/feedback", big)[:1] == (400,) and _post(server, "/feedback", big)[1]["field"] == "next_obs"
    assert _post(server, "/act", {"obs": [0.1] * 5, "episode": "b"})[1]["field"] == "obs"
    assert _post(server, "/feedback", good) == (200, {"ok": True, "ended": False})  # nothing bad got through
    assert session.live_episodes == ["a"]


def _read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (it does after a 408 or 413)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _raw(server, data: bytes, wait: float = 5.0) -> bytes:
    sock = socket.create_connection((server.host, server.port), timeout=wait)
    try:
        sock.sendall(data)
        return _read_all(sock)
    finally:
        sock.close()


def test_a_huge_body_is_answered_413_not_dropped(served):
    session, server = served
    head = b"POST /act HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
    answer = _raw(server, head + b'{"obs": [')
    assert answer.startswith(b"HTTP/1.1 413") and b"limit" in answer
    chunked = b"POST /act HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"x" * 60_000
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(20))
    sock = socket.create_connection((server.host, server.port), timeout=5)
    try:
        try:
            sock.sendall(chunked + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the rest was sent
        answer = _read_all(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert _post(server, "/act", {"obs": OBS})[0] == 200  # still serving


def test_a_short_body_is_answered_408_within_the_read_timeout_while_others_are_served(served):
    session, server = served
    sock = socket.create_connection((server.host, server.port), timeout=5)
    start = time.monotonic()
    try:
        sock.sendall(b'POST /act HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"obs":')
        assert _post(server, "/act", {"obs": OBS, "episode": "other"})[0] == 200  # not held up
        answer = _read_all(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"read_timeout" in answer
    assert time.monotonic() - start < 3


def test_a_stalled_request_head_is_closed_within_the_read_timeout(served):
    session, server = served
    for data in (b"", b"POST /act HTTP/1.1\r\nHost"):
        sock = socket.create_connection((server.host, server.port), timeout=5)
        start = time.monotonic()
        try:
            sock.sendall(data)
            assert sock.recv(100) == b""  # closed by the server
        finally:
            sock.close()
        assert time.monotonic() - start < 3


def test_act_and_feedback_take_post_only_and_keep_alive_serves_many_calls(served):
    session, server = served
    status, body = _get(server, "/act")
    assert status == 405 and json.loads(body)["field"] == "method"
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)  # one connection, many calls
    try:
        for i in range(3):
            for path, body in (
                ("/act", {"obs": OBS, "episode": "kept"}),
                (
                    "/feedback",
                    {"reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": i == 2, "episode": "kept"},
                ),
            ):
                conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                assert response.status == 200 and response.getheader("Content-Type") == "application/json"
                response.read()
    finally:
        conn.close()


def test_the_http_parser_is_httptools_when_installed_and_can_be_chosen():
    pytest.importorskip("httptools")
    session = _session()
    with session.serve() as server:
        assert server.http == "httptools"
    with session.serve(http="h11") as server:
        assert server.http == "h11" and _post(server, "/act", {"obs": OBS})[0] == 200
    with pytest.raises(ValueError, match="http= as 'auto', 'h11' or 'httptools'"):
        session.serve(http="zttp")


def test_a_token_is_required_when_set():
    session = _session()
    with session.serve(token=TOKEN) as server:
        assert _post(server, "/act", {"obs": OBS})[0] == 401
        status, answer = _post(server, "/act", {"obs": OBS}, headers={"Authorization": "Bearer wrong-token-here-x"})
        assert status == 401 and answer["field"] == "token"
        assert _get(server, "/status")[0] == 401 and _get(server, "/metrics")[0] == 401
        assert _get(server, "/health")[0] == 200  # liveness only, nothing to read or drive
        for transport in ("http", "websocket"):
            with pytest.raises(PermissionError, match="token"):
                wb.RemoteSession(server.url, transport=transport).act(OBS)
            with pytest.raises(PermissionError, match="token"):
                wb.RemoteSession(server.url, token="wrong-token-here-x", transport=transport).act(OBS)
        for transport in ("http", "websocket"):
            remote = wb.RemoteSession(server.url, token=TOKEN, transport=transport)
            remote.act(OBS, episode=transport)
            remote.feedback(1.0, OBS, True, False, episode=transport)
            remote.close()
        assert _post(server, "/pause", {})[0] == 401


def test_a_vanished_clients_slot_is_freed_after_the_episode_timeout_and_the_signals_say_so(served):
    session, server = served  # two slots, episode_timeout=0.4
    remote = wb.RemoteSession(server.url)
    remote.act(OBS, episode="gone-1")  # acted, never fed back
    remote.act(OBS, episode="gone-2")
    remote.feedback(1.0, OBS, False, False, episode="gone-2")  # fed back, never acted again
    with pytest.raises(RuntimeError, match="cannot start"):
        remote.act(OBS, episode="new")
    deadline = time.monotonic() + 5
    while session.live_episodes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session.live_episodes == []
    remote.act(OBS, episode="new")  # a slot is free again
    assert session.signals["serve_episodes_expired"].last == 2
    with pytest.raises(RuntimeError, match="ended by the server"):
        remote.feedback(1.0, OBS, False, False, episode="gone-1")
    assert b"workbench_serve_episodes_expired_total 2" in _get(server, "/metrics")[1]


def test_a_retried_call_is_answered_once(served):
    session, server = served
    first = _post(server, "/act", {"obs": OBS, "episode": "r", "seq": 7})
    assert _post(server, "/act", {"obs": OBS, "episode": "r", "seq": 7}) == first  # the same answer, no error
    body = {"reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": False, "episode": "r", "seq": 8}
    assert _post(server, "/feedback", body) == _post(server, "/feedback", body) == (200, {"ok": True, "ended": False})
    assert _post(server, "/act", {"obs": OBS, "episode": "r", "seq": 9})[0] == 200


def test_status_signals_control_and_metrics():
    session = _session(start=True)
    with session.serve() as server:
        remote = wb.RemoteSession(server.url)
        assert remote.status == "running" and remote.steps == 0 and remote.info["algorithm"] == "DQN"
        obs = OBS
        for i in range(30):
            remote.act(obs)
            remote.feedback(1.0, obs, i % 10 == 9, False)
        deadline = time.monotonic() + 10
        while remote.episodes < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        signals = remote.signals
        assert list(signals["episode_reward"].values) == [10.0, 10.0, 10.0]
        remote.pause()
        assert session.status == "paused" == remote.status
        remote.resume()
        assert session.status == "running"
        text = _get(server, "/metrics")[1].decode()
        assert 'workbench_serve_requests_total{endpoint="/act",code="200"} 30' in text
        assert 'workbench_serve_request_seconds_bucket{endpoint="/act",le="+Inf"} 30' in text
        assert "workbench_session_episodes 3" in text and "workbench_serve_slots 1" in text
        status, body = _get(server, "/signals?names=nope")
        assert status == 404 and b"episode_reward" in body
        remote.stop()
        assert session.status == "stopped"
        action = remote.act(OBS)  # a stopped session still answers
        assert action in (0, 1)


def _client(url: str, name: str, n: int, answered: list[int], transport: str) -> None:
    remote = wb.RemoteSession(url, transport=transport)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=hash(name) % 1000)
    for _ in range(n):
        action = remote.act(obs, episode=name)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        remote.feedback(reward, next_obs, terminated, truncated, episode=name)
        answered.append(1)
        obs = env.reset()[0] if terminated or truncated else next_obs
    remote.close()


@pytest.mark.slow
def test_32_concurrent_clients_are_all_answered_and_batched():
    session = _session(n_envs=32)
    with session.serve() as server:
        answered: list[int] = []
        threads = [
            threading.Thread(target=_client, args=(server.url, f"c{i}", 30, answered, "websocket" if i % 2 else "http"))
            for i in range(32)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(answered) == 32 * 30
        text = _get(server, "/metrics")[1].decode()
        assert 'endpoint="/act",code="200"} 480' in text and 'endpoint="/ws act",code="200"} 480' in text
        batches = int(text.split("\nworkbench_serve_batches_total ")[1].split()[0])
        assert batches < 960  # some acts were answered together
    session.stop()


def test_remote_session_loads_on_first_use():
    # (tests/test_namespace.py checks that `import workbench` loads no server stack.)
    assert "RemoteSession" in wb.__all__ and wb.RemoteSession.__module__ == "workbench.serve.client"


def test_close_frees_the_port_and_the_session_goes_on():
    session = _session()
    server = session.serve()
    port = server.port
    server.close()
    assert not server.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert session.act(OBS) in (0, 1)


def _drive_cartpole(target, steps: int) -> list[int]:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    actions = []
    for _ in range(steps):
        action = target.act(obs)
        actions.append(int(action))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        target.feedback(reward, next_obs, terminated, truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return actions


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_a_served_session_decides_and_records_as_the_in_process_one(transport):
    # Same seed, same calls: the same actions and episode returns (before learning starts; after it,
    # an in-process act may land before or after a concurrent update, so not even two in-process runs agree).
    def session():
        env = gym.make("CartPole-v1")
        agent = wb.DQN(
            observation_space=env.observation_space, action_space=env.action_space, learning_starts=10_000, seed=3
        )
        return wb.Session.external(agent, seed=3, max_lag=0).start(steps=120)

    local = session()
    expected = _drive_cartpole(local, 120)
    local.wait(30)
    served = session()
    with served.serve() as server:
        remote = wb.RemoteSession(server.url, transport=transport)
        assert _drive_cartpole(remote, 120) == expected
        served.wait(30)
        assert remote.status == "finished" == local.status
        assert list(remote.signals["episode_reward"].values) == list(local.signals["episode_reward"].values)
        remote.close()


@pytest.mark.slow
def test_one_remote_session_is_safe_from_many_threads_and_reconnects_after_an_idle_close():
    session = _session(n_envs=8)
    with session.serve(idle_timeout=1) as server:
        remote = wb.RemoteSession(server.url)
        answered: list[int] = []

        def client(name: str) -> None:
            for i in range(4):
                remote.act(OBS, episode=name)
                remote.feedback(1.0, OBS, False, i == 3, episode=name)
                answered.append(1)

        threads = [threading.Thread(target=client, args=(f"t{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(answered) == 32 and session.live_episodes == []
        ws = wb.RemoteSession(server.url, transport="websocket")
        remote.act(OBS, episode="late")
        ws.act(OBS, episode="late-ws")
        time.sleep(1.6)  # the server closes both idle connections
        remote.feedback(1.0, OBS, False, False, episode="late")  # sent again on a new connection
        ws.feedback(1.0, OBS, False, False, episode="late-ws")
        assert remote.act(OBS, episode="late") in (0, 1) and ws.act(OBS, episode="late-ws") in (0, 1)
        remote.close()
        ws.close()


def test_websocket_messages_are_checked_and_a_huge_one_closes_the_socket():
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    session = _session()
    with session.serve(max_body=4096) as server:
        with connect(f"ws://127.0.0.1:{server.port}/ws?episode=w") as ws:
            ws.send(json.dumps({"op": "act", "obs": OBS}))
            assert json.loads(ws.recv(timeout=10))["action"] in (0, 1)
            for message, field in [
                (
                    {"op": "feedback", "reward": 1, "next_obs": OBS, "terminated": "false", "truncated": False},
                    "terminated",
                ),
                ({"op": "act", "obs": OBS, "episode": "other"}, "episode"),
                ({"op": "jump"}, "op"),
            ]:
                ws.send(json.dumps(message))
                assert json.loads(ws.recv(timeout=10))["field"] == field
            ws.send(
                json.dumps({"op": "feedback", "reward": 1, "next_obs": OBS, "terminated": True, "truncated": False})
            )
            assert json.loads(ws.recv(timeout=10)) == {"ok": True, "ended": True}
            ws.send("x" * 10_000)
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=10)
        assert session.live_episodes == []


def test_a_box_observation_is_converted_once_at_the_edge_and_others_pass_as_sent():
    from workbench.serve.protocol import check_act, check_feedback

    agent = _session().agent  # Box observations: the edge's array goes on, which prepare_obs takes unchanged
    _, obs, _, _ = check_act(agent, {"obs": OBS})
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.tolist() == np.float32(OBS).tolist()
    batch, single = agent.prepare_obs(obs)
    assert single and np.array_equal(batch, agent.prepare_obs(OBS)[0])
    next_obs = check_feedback(agent, {"reward": 1.0, "next_obs": OBS, "terminated": False, "truncated": False})[2]
    assert isinstance(next_obs, np.ndarray) and np.array_equal(next_obs, obs)
    discrete = wb.DQN(observation_space=gym.spaces.Discrete(5), action_space=gym.spaces.Discrete(2))
    assert check_act(discrete, {"obs": 3})[1] == 3  # one-hot encoded by the session, not here
