"""``wb.RemoteSession``: a served session, driven from another process or machine as if it were here.

It needs only the standard library (HTTP) and, for ``transport="websocket"``, the ``websockets``
package; the server stack is not imported.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Hashable
from typing import Any

import numpy as np

from ..signals import SignalSet

__all__ = ["RemoteError", "RemoteSession"]

_ERRORS: dict[str, type[Exception]] = {
    "TypeError": TypeError,
    "ValueError": ValueError,
    "RuntimeError": RuntimeError,
    "KeyError": KeyError,
    "PermissionError": PermissionError,
}
# Failures after which a request is sent again on a new connection: the server closed an idle
# connection, or is not (yet, again) listening. Calls carry a number, so a retried act or
# feedback that the server had already answered is answered the same, never applied twice.
_RETRY = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, BrokenPipeError)


class RemoteError(RuntimeError):
    """The server could not answer (it failed, or went away and did not come back in time)."""


class RemoteSession:
    """A session served by ``session.serve()`` or ``workbench serve``, with the calls of an
    in-process external session: ``act``, ``feedback``, ``status``, ``steps``, ``episodes``,
    ``signals``, ``pause``, ``resume``, ``stop``.

    Example::

        remote = wb.RemoteSession("http://127.0.0.1:8000", token=None)
        action = remote.act(obs, episode="user-1")
        remote.feedback(reward, next_obs, terminated, truncated, episode="user-1")

    Safe from any number of threads (one keep-alive connection per thread). A refused call raises
    what the in-process call raises (``TypeError``, ``ValueError``, ``RuntimeError``, with the
    server's message); a dropped connection is reopened and the call sent again, up to ``retries``
    times over about ``retries`` seconds, and a call the server had already answered is answered
    the same rather than applied twice. ``transport="websocket"`` sends ``act``/``feedback`` over
    one WebSocket per episode (lower latency; needs the ``websockets`` package).

    ``inference="local"`` acts without a network hop per step: the client fetches the learner's policy
    (safetensors weights and the agent's description; needs torch), decides with it locally (exploring
    as the learner does), and sends what happened in experience batches of ``batch_steps`` steps (and
    at each episode's end) from a background thread, through a queue of ``max_queued_batches``
    batches: when the server is away the client keeps acting, and counts in ``local_stats`` what the
    full queue dropped. A new policy version is pushed over a WebSocket (``sync_every=None``, needs
    ``websockets``) or polled every ``sync_every`` steps. ``flush()`` sends what is recorded and waits
    for it; ``close()`` flushes too. A recurrent policy (``wb.RecurrentPPO``) keeps each live episode's
    memory here (256 episodes at most), empty at each episode's start; a Dict / Tuple action space is
    acted in its structure, with a mask per head. See docs/serve.md, "Local inference".
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: str = "http",
        retries: int = 3,
        inference: str = "server",
        batch_steps: int = 256,
        sync_every: int | None = None,
        max_queued_batches: int = 64,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"RemoteSession needs the server's URL such as 'http://127.0.0.1:8000', got {url!r}")
        if transport not in ("http", "websocket"):
            raise ValueError(f"RemoteSession(transport=...) is 'http' or 'websocket', got {transport!r}")
        if inference not in ("server", "local"):
            raise ValueError(f"RemoteSession(inference=...) is 'server' or 'local', got {inference!r}")
        for name, value in (("batch_steps", batch_steps), ("max_queued_batches", max_queued_batches)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RemoteSession({name}=...) must be a positive integer, got {value!r}")
        if sync_every is not None and (
            isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1
        ):
            raise ValueError(
                f"RemoteSession(sync_every=...) is a positive number of steps (poll for a new policy that "
                f"often), or None (the server pushes new versions over a WebSocket), got {sync_every!r}"
            )
        if token is not None and not isinstance(token, str):
            raise TypeError(f"RemoteSession(token=...) must be a string, got {type(token).__name__}")
        self.url = url.rstrip("/")
        self.transport = transport
        self.timeout = float(timeout)
        self.retries = int(retries)
        self._parsed = parsed
        self._headers = {"Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()
        self._lock = threading.Lock()
        self._seq: dict[Hashable | None, int] = {}
        self._seq_base = random.getrandbits(40)  # this client's calls never match another's numbers
        self._sockets: dict[Hashable | None, tuple[threading.Lock, Any]] = {}
        self._info: dict[str, Any] | None = None
        self.inference = inference
        self._policy: Any = None
        if inference == "local":
            from .local import LocalPolicy

            self._policy = LocalPolicy(self, batch_steps, sync_every, max_queued_batches)

    # -- transport --------------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._parsed.scheme == "https" else http.client.HTTPConnection
            conn = self._local.conn = cls(self._parsed.hostname, self._parsed.port, timeout=self.timeout)
        if conn.sock is None:
            conn.connect()
            # Small requests at once, not held back waiting for the last one's ACK (Nagle).
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _request(self, method: str, path: str, body: dict[str, Any] | bytes | None = None, raw: bool = False) -> Any:
        """One HTTP call, sent again on a new connection when the connection dropped. ``body``: JSON, or
        bytes (an experience batch); ``raw``: the answer's bytes and headers, not its JSON."""
        headers = self._headers
        if isinstance(body, bytes):
            data: bytes | None = body
            headers = {**headers, "Content-Type": "application/octet-stream"}
        else:
            data = None if body is None else _dumps(body)
        started = time.monotonic()
        for attempt in range(self.retries + 1):
            conn = None
            try:
                conn = self._connection()  # connecting is tried again as a dropped connection is
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                status = response.status
                answer_headers = {k.lower(): v for k, v in response.getheaders()}
                if response.getheader("Connection", "").lower() == "close":
                    conn.close()
                    self._local.conn = None
                break
            except (*_RETRY, OSError) as exc:
                if conn is not None:
                    conn.close()
                self._local.conn = None
                if isinstance(exc, TimeoutError):
                    raise TimeoutError(f"{method} {self.url}{path}: no answer within {self.timeout:g} s") from None
                if attempt == self.retries:
                    raise self._gave_up(f"{method} {self.url}{path}", exc, attempt + 1, started) from exc
                time.sleep(min(1.0, 0.05 * 4**attempt))
        if raw and status == 200:
            return payload, answer_headers
        return _answer(status, payload, f"{method} {path}")

    def _gave_up(self, what: str, exc: BaseException, tries: int, started: float) -> RemoteError:
        """The error after the last try: the server's URL, what the connection said, and what was tried."""
        refused = isinstance(exc, ConnectionRefusedError)
        hint = (
            f"nothing listens at {self.url}: start the server (session.serve() or `workbench serve`) or check the URL"
            if refused
            else f"the server at {self.url} went away and did not come back"
        )
        return RemoteError(
            f"{what}: {type(exc).__name__}: {exc} ({tries} tries over {time.monotonic() - started:.1f} s, "
            f"retries={self.retries}); {hint}"
        )

    def _ws(self, episode: Hashable | None) -> tuple[threading.Lock, Any]:
        with self._lock:
            entry = self._sockets.get(episode)
            if entry is None:
                entry = self._sockets[episode] = (threading.Lock(), None)
            return entry

    def _ws_call(self, episode: Hashable | None, message: dict[str, Any]) -> Any:
        try:
            from websockets.exceptions import ConnectionClosed, InvalidStatus
            from websockets.sync.client import connect
        except ImportError as exc:
            raise ImportError(f"transport='websocket' needs: pip install 'rl-workbench[serve]' ({exc})") from exc
        lock, _ = self._ws(episode)
        data = _dumps(message).decode()
        started = time.monotonic()
        with lock:
            for attempt in range(self.retries + 1):
                ws = self._sockets[episode][1]
                try:
                    if ws is None:
                        query = "" if episode is None else "?" + urllib.parse.urlencode({"episode": str(episode)})
                        scheme = "wss" if self._parsed.scheme == "https" else "ws"
                        ws = connect(
                            f"{scheme}://{self._parsed.netloc}/ws{query}",
                            open_timeout=self.timeout,
                            additional_headers={k: v for k, v in self._headers.items() if k != "Content-Type"},
                            compression=None,
                            max_size=None,
                        ).__enter__()  # closed by close()
                        self._sockets[episode] = (lock, ws)
                    ws.send(data)
                    reply = ws.recv(timeout=self.timeout)
                    break
                except InvalidStatus as exc:  # the handshake refused: the server's answer says why
                    response = exc.response
                    return _answer(response.status_code, bytes(response.body or b""), "WebSocket /ws")
                except (ConnectionClosed, OSError) as exc:
                    if ws is not None:
                        ws.close()
                    self._sockets[episode] = (lock, None)
                    if isinstance(exc, TimeoutError):
                        raise TimeoutError(f"the server did not answer within {self.timeout:g} s") from None
                    if attempt == self.retries:
                        raise self._gave_up(f"WebSocket to {self.url}", exc, attempt + 1, started) from exc
                    time.sleep(min(1.0, 0.05 * 4**attempt))
        answer = json.loads(reply)
        if "error" in answer:
            raise _ERRORS.get(answer.get("type"), RuntimeError)(answer["error"])
        return answer

    def _next_seq(self, episode: Hashable | None) -> int:
        with self._lock:
            seq = self._seq[episode] = self._seq.get(episode, self._seq_base) + 1
            return seq

    # -- the session's calls ----------------------------------------------------------------------

    @property
    def info(self) -> dict[str, Any]:
        """What the server serves: the algorithm, the spaces (as JSON), the slots, the limits."""
        if self._info is None:
            self._info = self._request("GET", "/info")
        return self._info

    def act(self, obs: Any, episode: Hashable | None = None, action_mask: Any = None) -> Any:
        """The action for ``obs`` in ``episode`` (as the in-process ``session.act``): an int for a
        Discrete action space, else a numpy array. With ``inference="local"``, decided here by the local
        copy of the policy (no network call)."""
        if self._policy is not None:
            return self._policy.act(obs, episode, action_mask)
        message: dict[str, Any] = {"obs": _jsonable(obs, "obs"), "seq": self._next_seq(episode)}
        if action_mask is not None:
            message["action_mask"] = [bool(m) for m in np.asarray(action_mask).reshape(-1)]
        if self.transport == "websocket":
            answer = self._ws_call(episode, {"op": "act", **message})
        else:
            if episode is not None:
                message["episode"] = _episode(episode)
            answer = self._request("POST", "/act", message)
        return self._action(answer["action"])

    def feedback(
        self,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        episode: Hashable | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        """Report what followed the last :meth:`act` of ``episode`` (as the in-process ``feedback``).
        With ``inference="local"``, recorded here and sent in the episode's next batch."""
        if self._policy is not None:
            if info is not None and not isinstance(info, dict):
                raise TypeError(f"feedback() got info={info!r}: pass the env's info dict or leave it out")
            self._policy.feedback(reward, next_obs, terminated, truncated, episode, info)
            return
        message: dict[str, Any] = {
            "reward": _jsonable(reward, "reward"),
            "next_obs": _jsonable(next_obs, "next_obs"),
            "terminated": _jsonable(terminated, "terminated"),
            "truncated": _jsonable(truncated, "truncated"),
            "seq": self._next_seq(episode),
        }
        if info is not None:
            if not isinstance(info, dict):
                raise TypeError(f"feedback() got info={info!r}: pass the env's info dict or leave it out")
            if "action_mask" in info:  # the one key the session reads; the rest may not be JSON
                message["info"] = {"action_mask": [bool(m) for m in np.asarray(info["action_mask"]).reshape(-1)]}
        if self.transport == "websocket":
            self._ws_call(episode, {"op": "feedback", **message})
        else:
            if episode is not None:
                message["episode"] = _episode(episode)
            self._request("POST", "/feedback", message)

    def _action(self, action: Any) -> Any:
        space = self.info["action_space"]
        kind = space["type"]
        if kind == "Discrete":
            return int(action)
        if kind == "Box":
            return np.asarray(action, dtype=space.get("dtype", "float32"))
        if kind in ("MultiDiscrete", "MultiBinary"):
            return np.asarray(action, dtype=np.int64)
        return action

    @property
    def status(self) -> str:
        """The session's status: ``"idle"``, ``"running"``, ``"paused"``, ``"stopped"``, ``"finished"``,
        ``"failed"``."""
        return self._request("GET", "/status")["status"]

    @property
    def steps(self) -> int:
        """Transitions the session has learned from."""
        return self._request("GET", "/status")["steps"]

    @property
    def episodes(self) -> int:
        """Episodes the session has learned from."""
        return self._request("GET", "/status")["episodes"]

    @property
    def signals(self) -> SignalSet:
        """A copy of the session's signals now (``episode_reward``, ``loss``...), as in-process."""
        out = SignalSet()
        for name, data in self._request("GET", "/signals").items():
            values = np.array([np.nan if v is None else v for v in data["values"]], dtype=np.float64)
            out.signal(name).extend(
                np.asarray(data["steps"], dtype=np.int64), values, np.asarray(data["times"], dtype=np.float64)
            )
        return out

    def pause(self) -> None:
        """Pause the session's learning (acts are still answered)."""
        self._request("POST", "/pause")

    def resume(self) -> None:
        """Resume a paused session."""
        self._request("POST", "/resume")

    def stop(self) -> None:
        """Stop the session's run (the server goes on answering acts with the current weights)."""
        self._request("POST", "/stop")

    @property
    def policy_version(self) -> int | None:
        """The version of the learner's policy this client acts with (``inference="local"``; else None)."""
        return None if self._policy is None else self._policy.version

    @property
    def local_stats(self) -> dict[str, int]:
        """With ``inference="local"``: steps ``acted``, ``sent_steps`` and ``sent_batches`` (acknowledged),
        ``dropped_steps`` and ``dropped_batches`` (the send queue was full: the server was away or slow),
        ``server_dropped_steps`` (acknowledged but not learned from: too stale for an on-policy learner,
        its backlog full, or its run over), ``refused_batches`` (refused at the server's edge; the last
        error is ``local_error``) and ``refreshes`` (new policy versions installed). Empty otherwise."""
        return {} if self._policy is None else dict(self._policy.stats)

    @property
    def local_error(self) -> BaseException | None:
        """The server's answer to the last experience batch it refused (``inference="local"``), or None."""
        return None if self._policy is None else self._policy.last_error

    @property
    def refresh_latencies(self) -> list[float]:
        """Seconds from each policy version's publication to its installation here (``inference="local"``)."""
        return [] if self._policy is None else list(self._policy.refresh_latencies)

    def flush(self, timeout: float | None = None) -> bool:
        """``inference="local"``: send every episode's recorded steps now and wait up to ``timeout``
        seconds (None: as long as it takes) for the server to acknowledge every batch; True when it did.
        Raises the server's error when it refused a batch (a bad observation, a bad action)."""
        if self._policy is None:
            return True
        done = self._policy.flush(timeout)
        error, self._policy.last_error = self._policy.last_error, None
        if error is not None:
            raise error
        return done

    def close(self) -> None:
        """Close this thread's connection and every WebSocket (``inference="local"``: after sending
        what is recorded, waiting a few seconds at most)."""
        if self._policy is not None:
            self._policy.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        with self._lock:
            sockets, self._sockets = self._sockets, {}
        for _, ws in sockets.values():
            if ws is not None:
                ws.close()

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<workbench RemoteSession {self.url} ({self.transport})>"


def _episode(episode: Hashable) -> str | int:
    if isinstance(episode, bool) or not isinstance(episode, str | int | np.integer):
        raise TypeError(f"a remote episode= is a string or an integer, got {episode!r}")
    return int(episode) if isinstance(episode, np.integer) else episode


def _jsonable(value: Any, field: str) -> Any:
    """``value`` as plain JSON values; numpy scalars and arrays become numbers and lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, field) for v in value]
    return value


def _dumps(body: dict[str, Any]) -> bytes:
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        raise ValueError("a NaN or infinite number cannot be sent (JSON has none): check obs and reward") from None
    except TypeError as exc:
        raise TypeError(f"cannot send this value as JSON: {exc}") from None


def _answer(status: int, payload: bytes, what: str) -> Any:
    try:
        answer = json.loads(payload) if payload else {}
    except ValueError:
        raise RemoteError(f"{what}: the server answered {status} with {payload[:200]!r}") from None
    if status == 200:
        return answer
    message = answer.get("error", payload.decode(errors="replace")) if isinstance(answer, dict) else str(answer)
    if status == 408:
        raise TimeoutError(message)
    kind = _ERRORS.get(answer.get("type") if isinstance(answer, dict) else None)
    if kind is None:
        raise RemoteError(f"{what}: the server answered {status}: {message}")
    raise kind(message)
