"""Serving limits (issue 49, class 7): request heads bounded on both parsers, a RemoteSession that cannot
reach its server says where and what it tried, integer episode ids beyond 64 bits kept exact."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

import workbench as wb
from workbench.serve.client import RemoteError
from workbench.serve.server import MAX_HEAD_BYTES

pytest.importorskip("uvicorn")


def _parsers():
    try:
        import httptools  # noqa: F401
    except ImportError:
        return ["h11"]
    return ["h11", "httptools"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.parametrize("http", _parsers())
def test_a_huge_request_head_is_refused_before_it_is_buffered(http):
    session = wb.Session.external(wb.DQN("CartPole-v1", learning_starts=10**6))
    with session.serve(http=http) as server:
        before = _rss_mb()
        peak = [before]
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak[0] = max(peak[0], _rss_mb())
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        sent = 0
        with socket.create_connection((server.host, server.port), timeout=10) as s:
            try:
                s.sendall(b"POST /act HTTP/1.1\r\nHost: x\r\nX-Big: ")
                chunk = b"a" * (1 << 20)
                for _ in range(64):  # 64 MB of one header, as the attack sent
                    s.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the server closed the connection: what was sent after is refused by the kernel
        done.set()
        watcher.join()
        assert sent < 16 * (1 << 20), f"the server read {sent >> 20} MB of one request head"
        assert peak[0] - before < 40, f"serving grew by {peak[0] - before:.0f} MB for one request head"
        # an ordinary request is still answered
        with urllib.request.urlopen(server.url + "/info", timeout=10) as answer:
            assert json.loads(answer.read())["algorithm"] == "DQN"


@pytest.mark.parametrize("http", _parsers())
def test_a_head_just_over_the_limit_gets_431_and_one_under_it_an_answer(http):
    session = wb.Session.external(wb.DQN("CartPole-v1", learning_starts=10**6))
    with session.serve(http=http) as server:
        with socket.create_connection((server.host, server.port), timeout=10) as s:
            s.sendall(b"GET /info HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1024))
            answer = s.recv(200)
        assert answer.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400"))  # h11 refuses at its own 16 KiB first
        req = urllib.request.Request(server.url + "/info", headers={"X-Small": "a" * 4000})
        with urllib.request.urlopen(req, timeout=10) as answer:
            assert answer.status == 200


def test_remote_session_to_a_closed_port_names_the_server_and_the_tries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    remote = wb.RemoteSession(f"http://127.0.0.1:{port}", retries=2)
    with pytest.raises(RemoteError, match=rf"127\.0\.0\.1:{port}.*ConnectionRefusedError.*3 tries.*retries=2") as e:
        remote.act([0.0, 0.0, 0.0, 0.0])
    assert "nothing listens" in str(e.value) and isinstance(e.value.__cause__, ConnectionRefusedError)


def test_an_integer_episode_id_beyond_64_bits_stays_an_integer():
    session = wb.Session.external(wb.DQN("CartPole-v1", learning_starts=10**6, n_envs=2))
    session.start(steps=10**6)
    big = 123456789012345678901234567890
    with session.serve() as server:
        body = json.dumps({"obs": [0, 0, 0, 0], "episode": big}).encode()
        req = urllib.request.Request(server.url + "/act", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as answer:
            assert json.loads(answer.read())["action"] in (0, 1)
        assert session.live_episodes == [big] and isinstance(session.live_episodes[0], int)
        remote = wb.RemoteSession(server.url)
        remote.act([0.0, 0.0, 0.0, 0.0], episode=big + 1)
        assert sorted(session.live_episodes) == [big, big + 1]
    session.stop()
