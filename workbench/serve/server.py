"""A session served over HTTP (JSON) and WebSocket, on Starlette and uvicorn: ``session.serve()``.

The server runs in a background thread with its own event loop, so the caller (a script, a notebook
kernel) stays free and the session stays the live object it was: its dashboard, ``pause``, ``stop``
and live edits act on the served run. It uses the session's public calls only (``act``,
``feedback``, ``status``, ``signals``, ``stop``, ``pause``, ``resume``, ``log``).

Endpoints (JSON in and out; see docs/serve.md for a curl walk-through):

    POST /act        {"obs": [...], "episode": "user-1", "action_mask": [...]}   -> {"action": ...}
    POST /feedback   {"reward": 1.0, "next_obs": [...], "terminated": false, "truncated": false,
                      "episode": "user-1", "info": {...}}                          -> {"ok": true, "ended": false}
    GET  /status     GET /signals?names=a,b&last=N     GET /info     POST /pause /resume /stop
    GET  /health     (no token needed)                  GET /metrics (Prometheus text)
    WS   /ws?episode=user-1   one episode stream: {"op": "act", ...} / {"op": "feedback", ...}

Local inference (``wb.RemoteSession(url, inference="local")``, :mod:`workbench.serve.policy`,
:mod:`workbench.serve.batch`): ``GET /policy`` (what rebuilds the agent), ``GET /policy/weights``
(safetensors), ``GET /policy.onnx``, ``GET /policy/version``, ``WS /policy/ws`` (new versions pushed), and
``POST /experience`` (one binary experience batch, checked, applied once per client and number, dropped and
counted when an on-policy learner's ``max_policy_lag`` is passed).

Safety, by default: loopback only (another interface needs a token, refused otherwise); a body limit
answered with 413; a request whose body stalls answered with 408 after ``read_timeout``; a connection
whose request head stalls closed after ``read_timeout``; idle keep-alive connections closed after
``idle_timeout``; an episode with no call for ``episode_timeout`` seconds ended by the server (it held
one of the agent's ``n_envs`` slots) and counted in the signal ``serve_episodes_expired``.

Batching: acts that arrive together (read in one turn of the event loop) are decided by one forward
pass (the external runner's ``act_many``), waiting at most ``batch_wait`` seconds for more only while
fewer have come than the last batch held; the batch sizes go to the signal ``serve_batch_size``.
``POST /act``, ``POST /feedback`` and ``/ws`` are plain ASGI handlers (the other endpoints go through
Starlette's routing); uvicorn parses HTTP with httptools when it is installed (``http=``), else h11.
While the session does not learn, acts run on the event loop itself; while it learns (an update holds the
agent), a batch runs in a serving thread.
Feedback runs on the event loop unless ``max_lag`` may hold it (then in a serving thread).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import itertools
import math
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

import h11
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn import Config
from uvicorn import Server as _Uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .._version import __version__
from ..checkpoint import space_to_json
from ..parallel.external import DEFAULT_EPISODE, ExternalRunner
from .batch import check_experience, decode_batch
from .metrics import Metrics
from .policy import PolicyPublisher, local_inference_refusal
from .protocol import (
    RequestError,
    action_to_json,
    check_act,
    check_feedback,
    decode,
    encode,
    episode_id,
    error_body,
)

__all__ = ["Server", "check_host", "serve"]

MIN_TOKEN_CHARS = 16
_SIGNAL_EVERY_S = 1.0  # how often the batch size is written to the session's signals


def check_host(host: str, token: str | None) -> None:
    """Refuse to listen on an interface other than loopback without a token."""
    if not isinstance(host, str) or not host:
        raise TypeError(f"serve() needs host= as a string such as '127.0.0.1', got {host!r}")
    if token is not None:
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"serve() needs token= as a string of at least {MIN_TOKEN_CHARS} characters (got "
                f"{'a non-string' if not isinstance(token, str) else f'{len(token)} characters'}): "
                "make one with python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return
    if not _is_loopback(host):
        raise ValueError(
            f"serve(host={host!r}) would accept connections from other machines, and no token= was given: "
            "anyone who reaches the port could drive and stop the session. Pass token=... (clients send it "
            "as 'Authorization: Bearer TOKEN'; make one with secrets.token_urlsafe(32)), or serve on "
            "host='127.0.0.1'"
        )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"serve() needs {name}= as a positive number, got {value!r}")
    return float(value)


class _Record:
    """What the server knows of one episode it served: what comes next and when it was last heard of."""

    __slots__ = ("answer", "awaiting_feedback", "busy", "live", "lock", "obs", "seq", "time")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.awaiting_feedback = False
        self.live = False  # started by an act answered here, and not ended yet
        self.busy = False
        self.obs: Any = None
        self.seq: tuple[str, int] | None = None
        self.answer: dict[str, Any] | None = None
        self.time = time.monotonic()


class _Ingest:
    """What the server knows of the experience batches it took: counts for the signals, and the
    answers of each client's last batches (a batch sent again is answered again, not applied again)."""

    KEEP_SEQS = 1024
    KEEP_CLIENTS = 4096

    def __init__(self) -> None:
        self.steps = 0  # accepted, over the server's life
        self.dropped = 0  # refused for their policy lag, or dropped by the session (backlog full, run ended)
        self.batches = 0
        self.duplicates = 0
        self.window_steps = 0
        self.window_lag = 0.0
        self.window_batches = 0
        self.window_start = time.monotonic()
        self.answers: OrderedDict[str, OrderedDict[int, dict[str, Any]]] = OrderedDict()

    def answered(self, client: str, seq: int) -> dict[str, Any] | None:
        seqs = self.answers.get(client)
        return None if seqs is None else seqs.get(seq)

    def remember(self, client: str, seq: int, answer: dict[str, Any]) -> None:
        seqs = self.answers.get(client)
        if seqs is None:
            seqs = self.answers[client] = OrderedDict()
            while len(self.answers) > self.KEEP_CLIENTS:
                self.answers.popitem(last=False)
        else:
            self.answers.move_to_end(client)
        seqs[seq] = answer
        while len(seqs) > self.KEEP_SEQS:
            seqs.popitem(last=False)


class _Batcher:
    """Calls that arrive together, run as one batch: ``run(list of args)`` returns one ``(ok, value)``
    per call. The first call of a batch schedules it for the end of the event loop's current turn, so
    every call read from the sockets in that turn joins it (no timer, no task per call); when the last
    batch held more calls than have come so far, the batch waits at most ``wait`` seconds for as many
    (more are likely on their way), and holds ``max_batch`` calls at most. A batch runs on the event
    loop itself when ``inline()`` says it cannot block for long, else in one serving thread (one
    hand-off per batch); the calls that arrive meanwhile form the next batch."""

    def __init__(
        self,
        server: Server,
        run: Callable[[list[tuple[Any, ...]]], list[tuple[bool, Any]]],
        inline: Callable[[], bool],
        max_batch: int,
        wait: float,
        record_sizes: bool,
    ) -> None:
        self.server = server
        self.run = run
        self.inline = inline  # run on the event loop (it cannot block for long now), else in a serving thread
        self.max_batch = max_batch
        self.wait = wait
        self.record_sizes = record_sizes
        self.items: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self.sizes: list[int] = []
        self.last_size = 1
        self.loop = asyncio.get_running_loop()
        self.scheduled: asyncio.Handle | None = None  # the next batch's start (soon, or after the wait)
        self.soon = False
        self.in_thread: asyncio.Task[None] | None = None

    async def submit(self, *args: Any) -> Any:
        future = self.loop.create_future()
        self.items.append((args, future))
        if self.in_thread is None:
            n = len(self.items)
            if n >= self.max_batch or n >= self.last_size or self.wait <= 0:
                if not self.soon:  # all that were expected are here: at the end of this turn
                    if self.scheduled is not None:
                        self.scheduled.cancel()
                    self.scheduled, self.soon = self.loop.call_soon(self._flush), True
            elif self.scheduled is None:  # fewer than last time: wait boundedly for the others
                self.scheduled = self.loop.call_later(self.wait, self._flush)
        return await future

    def _flush(self) -> None:
        self.scheduled, self.soon = None, False
        if self.in_thread is not None or not self.items:
            return
        batch, self.items = self.items[: self.max_batch], self.items[self.max_batch :]
        self.last_size = len(batch)
        if self.record_sizes:
            self.sizes.append(len(batch))
            self.server.metrics.batches += 1
            self.server.metrics.batched_acts += len(batch)
        if self.inline():
            try:
                results = self.run([args for args, _ in batch])
            except Exception as exc:
                results = [(False, exc)] * len(batch)
            self._deliver(batch, results)
            self._next()
        else:
            self.in_thread = self.loop.create_task(self._in_thread(batch))

    async def _in_thread(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            results = await self.loop.run_in_executor(self.server.pool, self.run, [args for args, _ in batch])
        except BaseException as exc:  # the pool was shut down (the server closes)
            results = [(False, exc)] * len(batch)
        self.in_thread = None
        self._deliver(batch, results)
        self._next()

    def _next(self) -> None:
        """Calls that came while a batch ran wait already: the next batch starts at the end of this turn."""
        if self.items and not self.soon:
            if self.scheduled is not None:
                self.scheduled.cancel()
            self.scheduled, self.soon = self.loop.call_soon(self._flush), True

    @staticmethod
    def _deliver(batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]], results: list[tuple[bool, Any]]) -> None:
        for (_, future), (ok, value) in zip(batch, results):
            if future.cancelled():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


def _each(fn: Callable[..., Any]) -> Callable[[list[tuple[Any, ...]]], list[tuple[bool, Any]]]:
    """``fn`` called once per call of a batch, in order."""

    def run(calls: list[tuple[Any, ...]]) -> list[tuple[bool, Any]]:
        out: list[tuple[bool, Any]] = []
        for args in calls:
            try:
                out.append((True, fn(*args)))
            except Exception as exc:
                out.append((False, exc))
        return out

    return run


class _HeadTimer:
    """The head timer both parsers' protocols share (mixed in before uvicorn's protocol): armed by
    :meth:`_arm`, cancelled by :meth:`_disarm` and when the connection goes; when it fires, the connection
    is closed if :meth:`_head_incomplete` says no head came whole (there is nothing to answer)."""

    _head_timer: asyncio.TimerHandle | None = None
    _read_timeout: float
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self._read_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        if self._head_incomplete():
            self.transport.close()

    def _head_incomplete(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused (a head too large): what else is in flight is not read
        super().data_received(data)  # type: ignore[misc]
        if not self._count_head(data, self._head_partial()):
            self._after_data()

    def _head_partial(self) -> bool:
        """Whether a request head has begun and is not whole yet (after the parser took the data)."""
        raise NotImplementedError

    def _after_data(self) -> None:
        """Arm or disarm the head timer for what the data left."""
        raise NotImplementedError

    _head_bytes = 0

    def _count_head(self, data: bytes, in_head: bool) -> bool:
        """Count ``data`` (just parsed) toward the request head while one is partial; past
        :data:`MAX_HEAD_BYTES`, answer 431 and close (True): a parser buffers a head whole before it can
        refuse it, so without this a client could make the server hold any number of bytes of one head."""
        if not in_head:
            self._head_bytes = 0
            return False
        self._head_bytes += len(data)
        if self._head_bytes <= MAX_HEAD_BYTES:
            return False
        message = (
            f"the request head is larger than {MAX_HEAD_BYTES} bytes: send a shorter URL and fewer or shorter headers"
        )
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
            + f"content-length: {len(message)}\r\nconnection: close\r\n\r\n{message}".encode()
        )
        self.transport.close()
        return True


MAX_HEAD_BYTES = 64 * 1024
"""The most bytes a request head (request line and headers) may take: h11's own limit is 16 KiB, llhttp
(httptools) has none, so both are held to this one (a browser sends a few hundred bytes)."""


def _header_timeout_protocol(read_timeout: float, http: str) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``"h11"`` or ``"httptools"``), plus a limit on the time a request head
    may take to arrive. uvicorn's own keep-alive timeout only runs between requests, after a first
    answer: a client that connects and sends nothing, or a partial head, would hold its connection
    forever. The timer is armed when the connection opens and whenever part of a head has come without
    a timer running; the head's end disarms it (its body has ``read_timeout`` in the application); when it
    fires with no head whole, the connection is closed (there is nothing to answer)."""
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class HttpTools(_HeadTimer, HttpToolsProtocol):
            # httptools calls on_message_begin at a head's first byte and on_headers_complete at its end,
            # inside feed_data: after data_received, _in_head says whether a head is still partial.
            _read_timeout = read_timeout
            _in_head = False

            def _head_partial(self) -> bool:
                return self._in_head

            def _after_data(self) -> None:
                if self._in_head and self._head_timer is None and not self.transport.is_closing():
                    self._arm()  # part of a head: the rest must come within read_timeout

            def on_message_begin(self) -> None:
                self._in_head = True
                super().on_message_begin()

            def on_headers_complete(self) -> None:
                self._in_head = False
                self._disarm()
                super().on_headers_complete()

            def _head_incomplete(self) -> bool:
                return self._in_head or self.cycle is None

        return HttpTools

    class H11(_HeadTimer, H11Protocol):
        # h11's state says it: their_state leaves IDLE when a whole head has been read.
        _read_timeout = read_timeout

        def _head_partial(self) -> bool:
            return self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])

        def _after_data(self) -> None:
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # a request head is in: its body has read_timeout in the application
            elif self._head_timer is None and not self.transport.is_closing():
                self._arm()  # part of a head: the rest must come within read_timeout

        def _head_incomplete(self) -> bool:
            return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    return H11


def _http_parser(http: str) -> str:
    """``"auto"``: httptools (a C parser, the ``serve`` extra) when it is installed, else h11."""
    if http not in ("auto", "h11", "httptools"):
        raise ValueError(f"serve() needs http= as 'auto', 'h11' or 'httptools', got {http!r}")
    if http == "h11":
        return http
    try:
        import httptools  # noqa: F401
    except ImportError:
        if http == "httptools":
            raise ImportError(
                "serve(http='httptools') needs the httptools package: pip install 'rl-workbench[serve]' "
                "(or http='auto', which uses h11 without it)"
            ) from None
        return "h11"
    return "httptools"


class Server:
    """A session served over HTTP and WebSocket (what :meth:`Session.serve` returns).

    ``url`` is the bound address (``http://127.0.0.1:PORT``; ``port=0`` picks a free port), also
    ``str(server)``; ``close()`` stops serving (the session goes on); a ``with`` block closes it.
    """

    def __init__(
        self,
        session: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        *,
        max_body: int = 1 << 20,
        read_timeout: float = 10.0,
        idle_timeout: float = 60.0,
        episode_timeout: float = 60.0,
        batch: bool = True,
        batch_wait: float = 0.001,
        max_batch: int = 64,
        log_requests: bool = False,
        http: str = "auto",
        max_batch_steps: int = 4096,
        max_policy_lag: int = 2,
        publish_every: float = 0.2,
    ) -> None:
        try:
            session.live_episodes  # noqa: B018 (only a session driven by the application has episodes)
        except (RuntimeError, AttributeError):
            raise ValueError(
                "serve() serves act/feedback, which only a session driven by the application has: build it "
                "with wb.Session.external(agent, ...) (or wb.Session.reopen(path, external=True)), then serve it"
            ) from None
        check_host(host, token)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"serve() needs port= as an integer from 0 (any free port) to 65535, got {port!r}")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1024:
            raise ValueError(f"serve() needs max_body= as an integer of at least 1024 bytes, got {max_body!r}")
        self.read_timeout = _positive("read_timeout", read_timeout)
        self.idle_timeout = _positive("idle_timeout", idle_timeout)
        self.episode_timeout = _positive("episode_timeout", episode_timeout)
        if batch_wait < 0 or batch_wait > 0.1:
            raise ValueError(f"serve() needs batch_wait= between 0 and 0.1 seconds, got {batch_wait!r}")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"serve() needs max_batch= as a positive integer, got {max_batch!r}")
        if isinstance(max_batch_steps, bool) or not isinstance(max_batch_steps, int) or max_batch_steps < 1:
            raise ValueError(f"serve() needs max_batch_steps= as a positive integer, got {max_batch_steps!r}")
        if isinstance(max_policy_lag, bool) or not isinstance(max_policy_lag, int) or max_policy_lag < 0:
            raise ValueError(f"serve() needs max_policy_lag= as an integer of at least 0, got {max_policy_lag!r}")
        self.publish_every = _positive("publish_every", publish_every)
        self.max_batch_steps = max_batch_steps
        self.max_policy_lag = max_policy_lag
        self.http = _http_parser(http)
        self.session = session
        self.agent = session.agent
        self._runner: ExternalRunner = session.env_source.runner  # the session's act_many (one forward pass)
        self.token = token
        self.max_body = max_body
        self.batch = batch
        self.batch_wait = float(batch_wait)
        self.max_batch = max_batch
        self.metrics = Metrics()
        self.records: dict[Hashable | None, _Record] = {}
        self.expired: OrderedDict[Hashable | None, float] = OrderedDict()
        self._records_lock = threading.Lock()
        self._ws_ids = itertools.count(1)
        self._in_flight = 0
        # Feedback may wait for learning (max_lag): one thread per slot, so no slot's feedback waits
        # behind another's, plus a few for acts and expiries.
        self.pool = ThreadPoolExecutor(max_workers=self.agent.num_envs + 8, thread_name_prefix="workbench-serve")
        self._acts: _Batcher | None = None  # acts answered together, one forward pass a batch
        self._feedbacks: _Batcher | None = None  # feedbacks applied together, one thread hand-off a batch
        self.policy = PolicyPublisher(self.agent, self.publish_every)
        self._experience = _Ingest()
        self._sending: set[asyncio.Task[None]] = set()  # announcements being sent
        self._sock = _bind(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{self.port}"
        config = Config(
            self._app(),
            http=_header_timeout_protocol(self.read_timeout, self.http),
            ws="websockets-sansio",
            lifespan="off",
            log_level="warning",
            access_log=log_requests,
            timeout_keep_alive=max(1, math.ceil(self.idle_timeout)),
            ws_max_size=max_body,
            ws_ping_interval=None,
            ws_per_message_deflate=False,
            timeout_graceful_shutdown=5,
        )
        self._uvicorn = _Uvicorn(config)
        self._thread = threading.Thread(target=self._serve, name=f"workbench-serve-{self.port}", daemon=True)
        self._error: BaseException | None = None
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if not self._uvicorn.started:
            self.close()
            raise RuntimeError(f"the server on {self.url} did not start: {self._error!r}")

    # -- life -------------------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            self._uvicorn.run(sockets=[self._sock])
        except BaseException as exc:  # shown by __init__ when it never started
            self._error = exc

    @property
    def running(self) -> bool:
        """True while the server answers."""
        return self._thread.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        """Stop serving: requests in flight are answered, then the port is freed (the session goes on)."""
        self._uvicorn.should_exit = True
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self.pool.shutdown(wait=False, cancel_futures=True)
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        state = "serving" if self.running else "closed"
        return f"<workbench Server {self.url} ({state}, token {'required' if self.token else 'not required'})>"

    # -- the application ---------------------------------------------------------------------------

    def _app(self) -> Callable[..., Any]:
        routes = [
            Route("/status", self._http(self._status), methods=["GET"]),
            Route("/signals", self._http(self._signals), methods=["GET"]),
            Route("/info", self._http(self._info), methods=["GET"]),
            Route("/pause", self._http(self._control("pause")), methods=["POST"]),
            Route("/resume", self._http(self._control("resume")), methods=["POST"]),
            Route("/stop", self._http(self._control("stop")), methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/metrics", self._http(self._metrics, text=True), methods=["GET"]),
            Route("/policy", self._http(self._policy), methods=["GET"]),
            Route("/policy/version", self._http(self._policy_version), methods=["GET"]),
            Route("/policy/weights", self._http(self._policy_weights, raw=True), methods=["GET"]),
            Route("/policy.onnx", self._http(self._policy_onnx, raw=True), methods=["GET"]),
        ]
        app = Starlette(routes=routes)

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            kind, path = scope["type"], scope["path"]
            if kind == "http" and path in _CALLS:
                return await self._call_request(scope, receive, send, path)
            if kind == "websocket" and path == "/ws":
                return await self._websocket(scope, receive, send)
            if kind == "http" and path == "/experience":
                return await self._experience_request(scope, receive, send)
            if kind == "websocket" and path == "/policy/ws":
                return await self._policy_websocket(scope, receive, send)
            return await app(scope, receive, send)

        return asgi

    def _authorized(self, headers: Any, query: Any = None) -> bool:
        if self.token is None:
            return True
        given = headers.get("authorization", "")
        if given.lower().startswith("bearer "):
            given = given[7:].strip()
        elif query is not None and "token" in query:
            given = query["token"]  # browsers cannot set headers on a WebSocket
        else:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _http(self, handler: Callable[..., Any], text: bool = False, raw: bool = False) -> Callable[[Request], Any]:
        endpoint = None

        async def endpoint_fn(request: Request) -> Response:
            nonlocal endpoint
            endpoint = endpoint or request.url.path
            start = time.perf_counter()
            self._in_flight += 1
            if self._reaper_task is None:  # on the server's loop, with the first request
                self._start_reaper()
            try:
                if not self._authorized(request.headers):
                    raise RequestError(
                        "this server needs its token: send the header 'Authorization: Bearer TOKEN'",
                        field="token",
                        kind="PermissionError",
                        status=401,
                    )
                result = await handler(request)
                response = (
                    result
                    if raw
                    else Response(result, media_type="text/plain; version=0.0.4")
                    if text
                    else Response(encode(result), media_type="application/json")
                )
            except RequestError as exc:
                headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                response = Response(
                    encode(error_body(exc)), status_code=exc.status, media_type="application/json", headers=headers
                )
                if exc.status in (408, 413):
                    response.headers["Connection"] = "close"
            finally:
                self._in_flight -= 1
            self.metrics.observe(endpoint, response.status_code, time.perf_counter() - start)
            return response

        return endpoint_fn

    async def _call_request(self, scope: dict[str, Any], receive: Any, send: Any, path: str) -> None:
        """``POST /act`` and ``POST /feedback``: a plain ASGI handler, as ``/ws`` is (no framework layer
        between a request and its answer), answered and counted as the other endpoints are."""
        start = time.perf_counter()
        self._in_flight += 1
        if self._reaper_task is None:  # on the server's loop, with the first request
            self._start_reaper()
        headers = [(b"content-type", b"application/json")]
        try:
            body = await self._body(receive, self._checked_post(scope, path, headers))
            if path == "/act":
                answer = await self._call_act(*check_act(self.agent, body))
            else:
                answer = await self._call_feedback(*check_feedback(self.agent, body))
            status = 200
        except RequestError as exc:
            status, answer = exc.status, error_body(exc)
            if status in (408, 413):
                headers.append((b"connection", b"close"))
        finally:
            self._in_flight -= 1
        out = encode(answer)
        headers.append((b"content-length", b"%d" % len(out)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})
        self.metrics.observe(path, status, time.perf_counter() - start)

    async def _body(self, receive: Any, length: str | None) -> dict[str, Any]:
        """The request's JSON body, within ``max_body`` bytes and ``read_timeout`` seconds."""
        return decode(await self._read(receive, length))

    async def _read(self, receive: Any, length: str | None) -> bytes:
        """The request's body, within ``max_body`` bytes and ``read_timeout`` seconds."""
        if length is not None:
            if not length.isdigit():
                raise RequestError(f"Content-Length must be a number of bytes, got {length!r}", field="body")
            if int(length) > self.max_body:
                raise RequestError(
                    f"the body has {int(length)} bytes, more than this server's limit of {self.max_body} "
                    "(serve(max_body=...))",
                    field="body",
                    status=413,
                )
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    raise RequestError("the client went away before its body came", field="body")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    raise RequestError(
                        f"the body has more than this server's limit of {self.max_body} bytes (serve(max_body=...))",
                        field="body",
                        status=413,
                    )
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return

        try:
            await _within(read(), self.read_timeout)
        except asyncio.TimeoutError:
            raise RequestError(
                f"the body did not arrive within {self.read_timeout:g} s (read_timeout): got {size} bytes"
                + (f" of {length}" if length else ""),
                field="body",
                status=408,
            ) from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _acts_inline(self) -> bool:
        """Whether acts may run on the event loop: while the session does not learn, nothing holds
        the agent for long (an update does, so during a run acts are decided in a serving thread and
        the loop goes on answering everything else)."""
        return self.session.status != "running"

    def _feedback_inline(self) -> bool:
        """Whether feedback may run on the event loop: it never waits unless ``max_lag`` is set."""
        return self._runner.max_lag is None

    async def _call_act(self, episode: Hashable | None, obs: Any, mask: Any, seq: int | None) -> dict[str, Any]:
        if not self.batch:
            if self._acts_inline():
                return self._act(episode, obs, mask, seq)
            return await asyncio.get_running_loop().run_in_executor(self.pool, self._act, episode, obs, mask, seq)
        if self._acts is None:
            self._acts = _Batcher(
                self, self._act_batch, self._acts_inline, self.max_batch, self.batch_wait, record_sizes=True
            )
            asyncio.get_running_loop().create_task(self._every_second())
        return await self._acts.submit(episode, obs, mask, seq)

    async def _call_feedback(self, *args: Any) -> dict[str, Any]:
        if self._feedback_inline():
            return self._feedback(*args)
        if not self.batch:
            return await asyncio.get_running_loop().run_in_executor(self.pool, self._feedback, *args)
        if self._feedbacks is None:
            self._feedbacks = _Batcher(
                self, _each(self._feedback), lambda: False, self.max_batch, 0.0, record_sizes=False
            )
        return await self._feedbacks.submit(*args)

    # -- the session's calls, in serving threads -------------------------------------------------

    def _record(self, episode: Hashable | None) -> _Record:
        with self._records_lock:
            record = self.records.get(episode)
            if record is None:
                record = self.records[episode] = _Record()
            return record

    def _lock_record(self, record: _Record, episode: Hashable | None) -> None:
        """Take an episode's record for one call. On the event loop, never wait for another call of the
        same episode (a feedback held by max_lag in a serving thread, an expiry): that would stall
        every connection; the call is refused instead (409)."""
        if not record.lock.acquire(blocking=threading.current_thread() is not self._thread):
            raise RequestError(
                f"a call for episode {episode!r} is still being answered: wait for its answer before the next",
                field="episode",
                kind="RuntimeError",
                status=409,
            )

    def _act(self, episode: Hashable | None, obs: Any, mask: Any, seq: int | None) -> dict[str, Any]:
        record = self._record(episode)
        self._lock_record(record, episode)
        with _Held(record.lock):
            if seq is not None and record.seq == ("act", seq) and record.answer is not None:
                return record.answer  # a retried request (the client reconnected): the same answer
            record.busy = True
            try:
                action = self.session.act(obs, episode=episode, action_mask=mask)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise _act_error(exc) from None
            finally:
                record.busy = False
                record.time = time.monotonic()
            with self._records_lock:
                self.expired.pop(episode, None)
            record.awaiting_feedback, record.live, record.obs = True, True, obs
            record.seq, record.answer = ("act", seq) if seq is not None else None, {"action": action_to_json(action)}
            return record.answer

    def _act_batch(self, calls: list[tuple[Any, ...]]) -> list[tuple[bool, Any]]:
        """Acts that arrived together, ``(episode, obs, mask, seq)`` each, decided in one forward pass
        (the external runner's ``act_many``); each answered as :meth:`_act` would answer it alone. An
        episode whose record is busy (its feedback still running) or that comes twice in the batch is answered
        after the batch, alone."""
        out: list[tuple[bool, Any]] = [(False, None)] * len(calls)
        held: list[tuple[int, _Record]] = []
        later: list[int] = []
        taken: set[int] = set()
        with self._records_lock:  # one take for the batch's records
            records = self.records
            mine = [records.get(episode) or records.setdefault(episode, _Record()) for episode, *_ in calls]
        try:
            for i, (record, (_, _, _, seq)) in enumerate(zip(mine, calls)):
                if id(record) in taken or not record.lock.acquire(blocking=False):
                    later.append(i)
                    continue
                taken.add(id(record))
                if seq is not None and record.seq == ("act", seq) and record.answer is not None:
                    out[i] = (True, record.answer)  # a retried request: the same answer
                    record.lock.release()
                    continue
                record.busy = True
                held.append((i, record))
            if held:
                try:
                    actions = self._runner.act_many(
                        [calls[i][1] for i, _ in held],
                        [DEFAULT_EPISODE if calls[i][0] is None else calls[i][0] for i, _ in held],
                        [calls[i][2] for i, _ in held],
                        return_exceptions=True,
                    )
                except Exception as exc:  # the batch as a whole was refused: each gets the error
                    actions = [exc] * len(held)
                now = time.monotonic()
                for (i, record), action in zip(held, actions):
                    _, obs, _, seq = calls[i]
                    record.busy, record.time = False, now
                    if isinstance(action, Exception):
                        out[i] = (False, _act_error(action))
                        continue
                    record.awaiting_feedback, record.live, record.obs = True, True, obs
                    record.seq = ("act", seq) if seq is not None else None
                    record.answer = {"action": action_to_json(action)}
                    out[i] = (True, record.answer)
                with self._records_lock:
                    for i, _ in held:
                        self.expired.pop(calls[i][0], None)
        finally:
            for _, record in held:
                record.busy = False
                record.lock.release()
        for i in later:
            try:
                out[i] = (True, self._act(*calls[i]))
            except Exception as exc:
                out[i] = (False, exc)
        return out

    def _feedback(
        self,
        episode: Hashable | None,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any] | None,
        seq: int | None,
    ) -> dict[str, Any]:
        record = self._record(episode)
        self._lock_record(record, episode)
        with _Held(record.lock):
            if seq is not None and record.seq == ("feedback", seq) and record.answer is not None:
                return record.answer
            if not record.awaiting_feedback:
                with self._records_lock:
                    expired = self.expired.get(episode)
                if expired is not None:
                    raise RequestError(
                        f"episode {episode!r} was ended by the server after {self.episode_timeout:g} s without a "
                        "call (its env slot was freed for others): start a new episode with act",
                        field="episode",
                        kind="RuntimeError",
                        status=409,
                    )
            record.busy = True
            try:
                self.session.feedback(reward, next_obs, terminated, truncated, episode=episode, info=info)
            except (TypeError, ValueError) as exc:
                raise RequestError(str(exc), field=_field_of(str(exc)), kind=type(exc).__name__) from None
            except RuntimeError as exc:
                raise RequestError(str(exc), field="episode", kind="RuntimeError", status=409) from None
            finally:
                record.busy = False
                record.time = time.monotonic()
            ended = terminated or truncated
            record.awaiting_feedback, record.live, record.obs = False, not ended, next_obs
            record.seq = ("feedback", seq) if seq is not None else None
            record.answer = {"ok": True, "ended": ended}
            return record.answer

    def _expire(self, episode: Hashable | None, record: _Record) -> bool:
        """End an episode nobody has called for ``episode_timeout`` s, freeing its slot: the feedback
        it awaited (or an act and its feedback) is sent as truncated, reward 0, the last observation
        as the next one. Returns whether it was ended here."""
        with record.lock:
            if not record.live or record.busy or time.monotonic() - record.time < self.episode_timeout:
                return False
            try:
                if not record.awaiting_feedback:
                    self.session.act(record.obs, episode=episode)
                self.session.feedback(0.0, record.obs, False, True, episode=episode)
            except (TypeError, ValueError, RuntimeError):
                pass  # ended meanwhile by an in-process call: nothing holds the slot
            record.awaiting_feedback, record.live, record.seq, record.answer = False, False, None, None
        with self._records_lock:
            if self.records.get(episode) is record:
                del self.records[episode]
            self.expired[episode] = time.monotonic()
            while len(self.expired) > 10_000:
                self.expired.popitem(last=False)
        return True

    async def _every_second(self) -> None:
        """Write the batch sizes to the session's signals."""
        while True:
            await asyncio.sleep(_SIGNAL_EVERY_S)
            batcher = self._acts
            if batcher is not None and batcher.sizes:
                sizes, batcher.sizes = batcher.sizes, []
                try:
                    self.session.log("serve_batch_size", sum(sizes) / len(sizes))
                except Exception:  # a signal must never stop the server
                    pass

    async def _reaper(self) -> None:
        loop = asyncio.get_running_loop()
        period = min(1.0, self.episode_timeout / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            with self._records_lock:
                due = [
                    (e, r)
                    for e, r in self.records.items()
                    if r.live and not r.busy and now - r.time >= self.episode_timeout
                ]
                stale = [
                    e
                    for e, r in self.records.items()
                    if not r.live and not r.busy and now - r.time >= self.episode_timeout
                ]
                for episode in stale:
                    del self.records[episode]
            for episode, record in due:
                if await loop.run_in_executor(self.pool, self._expire, episode, record):
                    self.metrics.expired += 1
                    try:
                        self.session.log("serve_episodes_expired", self.metrics.expired)
                    except Exception:
                        pass

    # -- the other endpoints ----------------------------------------------------------------------

    async def _status(self, request: Request) -> dict[str, Any]:
        session = self.session
        error = session.error
        return {
            "status": session.status,
            "steps": session.steps,
            "episodes": session.episodes,
            "live_episodes": len(session.live_episodes),
            "slots": self.agent.num_envs,
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }

    async def _signals(self, request: Request) -> dict[str, Any]:
        signals = self.session.signals
        names = request.query_params.get("names")
        last = request.query_params.get("last")
        if last is not None and (not last.isdigit() or int(last) == 0):
            raise RequestError(f"last must be a positive integer, got {last!r}", field="last")
        chosen = signals.names() if names is None else [n for n in names.split(",") if n]
        unknown = [n for n in chosen if n not in signals]
        if unknown:
            raise RequestError(
                f"no signal {unknown[0]!r}; the signals are {', '.join(signals.names())}",
                field="names",
                kind="KeyError",
                status=404,
            )
        out = {}
        for name in chosen:
            steps, values, times = signals[name].snapshot()
            if last is not None:
                steps, values, times = steps[-int(last) :], values[-int(last) :], times[-int(last) :]
            out[name] = {
                "steps": steps.tolist(),
                "values": [v if math.isfinite(v) else None for v in values.tolist()],
                "times": times.tolist(),
            }
        return out

    async def _info(self, request: Request) -> dict[str, Any]:
        return {
            "algorithm": self.agent.algorithm,
            "observation_space": _finite(space_to_json(self.agent.observation_space)),
            "action_space": _finite(space_to_json(self.agent.action_space)),
            "slots": self.agent.num_envs,
            "episode_timeout": self.episode_timeout,
            "max_body": self.max_body,
            "version": __version__,
        }

    def _control(self, name: str) -> Callable[[Request], Any]:
        async def control(request: Request) -> dict[str, Any]:
            try:
                await asyncio.get_running_loop().run_in_executor(self.pool, getattr(self.session, name))
            except (RuntimeError, ValueError) as exc:
                raise RequestError(str(exc), kind=type(exc).__name__, status=409) from None
            return {"status": self.session.status}

        return control

    async def _health(self, request: Request) -> Response:
        return Response(encode({"ok": True, "status": self.session.status}), media_type="application/json")

    async def _metrics(self, request: Request) -> str:
        batcher = self._acts
        return self.metrics.text(
            {
                "workbench_serve_in_flight": ("Requests being answered now.", self._in_flight),
                "workbench_serve_queue": (
                    "Acts waiting for their batch.",
                    0 if batcher is None else len(batcher.items),
                ),
                "workbench_serve_slots": ("The agent's env slots (n_envs).", self.agent.num_envs),
                "workbench_serve_live_episodes": ("Episodes started and not ended.", len(self.session.live_episodes)),
                "workbench_session_steps": ("Transitions the session has learned from.", self.session.steps),
                "workbench_session_episodes": ("Episodes the session has learned from.", self.session.episodes),
                "workbench_serve_experience_steps": ("Steps of experience batches accepted.", self._experience.steps),
                "workbench_serve_experience_dropped": (
                    "Steps of experience batches dropped (too stale, backlog full, run ended).",
                    self._experience.dropped,
                ),
                "workbench_serve_policy_version": ("The newest published policy version.", self.policy.version),
            }
        )

    _reaper_task: asyncio.Task[None] | None = None

    def _start_reaper(self) -> None:
        self._reaper_task = asyncio.get_running_loop().create_task(self._reaper())

    # -- local inference: the policy out, experience batches in -------------------------------------

    def _local_refusal(self) -> None:
        reason = local_inference_refusal(self.agent)
        if reason is not None:
            raise RequestError(reason, field="inference", kind="ValueError", status=400)

    async def _start_publishing(self) -> None:
        """Publish the first version (once), and start the task that publishes the next ones."""
        self._local_refusal()
        if self.policy.version == 0:
            await asyncio.get_running_loop().run_in_executor(self.pool, self.policy.ensure)
        if self._publisher is None:
            self._publisher = asyncio.get_running_loop().create_task(self._publishing())

    _publisher: asyncio.Task[None] | None = None
    _subscribers: set[Any] | None = None

    async def _publishing(self) -> None:
        """Every ``publish_every`` seconds: a new version when the agent updated (announced to every
        ``/policy/ws`` subscriber); every second: the ingestion signals."""
        loop = asyncio.get_running_loop()
        last_signals = loop.time()
        announced = self.policy.version
        while True:
            await asyncio.sleep(self.publish_every)
            try:
                await loop.run_in_executor(self.pool, self.policy.publish)
            except Exception:  # a failed publication must not stop the server: clients keep the last one
                pass
            if self.policy.version != announced:  # published here, or by a call of policy.publish()
                announced = self.policy.version
                self._announce()
            if loop.time() - last_signals >= _SIGNAL_EVERY_S:
                last_signals = loop.time()
                self._ingest_signals()

    def _announce(self) -> None:
        version, _, _, published = self.policy.newest()
        message = {"type": "websocket.send", "text": encode({"version": version, "time": published}).decode()}
        loop = asyncio.get_running_loop()
        for send in list(self._subscribers or ()):
            task = loop.create_task(_quietly(send(message)))
            self._sending.add(task)  # held until sent (the loop keeps only a weak reference)
            task.add_done_callback(self._sending.discard)

    def _ingest_signals(self) -> None:
        """``serve_ingested_per_second``, ``serve_policy_lag`` (the mean lag, in versions, of the steps
        taken since the last), ``serve_dropped`` and ``serve_policy_version`` to the session's signals."""
        ingest = self._experience
        now = time.monotonic()
        elapsed = max(now - ingest.window_start, 1e-9)
        try:
            if ingest.window_batches:
                self.session.log("serve_ingested_per_second", ingest.window_steps / elapsed)
                self.session.log("serve_policy_lag", ingest.window_lag / max(ingest.window_steps, 1))
                self.session.log("serve_dropped", ingest.dropped)
                self.session.log("serve_policy_version", self.policy.version)
            elif ingest.batches:
                self.session.log("serve_ingested_per_second", 0.0)
        except Exception:  # a signal must never stop the server
            pass
        ingest.window_steps, ingest.window_lag, ingest.window_batches, ingest.window_start = 0, 0.0, 0, now

    async def _policy(self, request: Request) -> dict[str, Any]:
        await self._start_publishing()
        return {
            **_finite(self.policy.describe()),
            "max_batch_steps": self.max_batch_steps,
            "max_policy_lag": self.max_policy_lag,
            "max_body": self.max_body,
        }

    async def _policy_version(self, request: Request) -> dict[str, Any]:
        await self._start_publishing()
        version, _, _, published = self.policy.newest()
        return {"version": version, "time": published}

    async def _policy_weights(self, request: Request) -> Response:
        await self._start_publishing()
        version, weights, counters, published = self.policy.newest()
        headers = {
            "x-workbench-policy-version": str(version),
            "x-workbench-policy-time": repr(published),
            "x-workbench-num-timesteps": str(counters.get("num_timesteps", 0)),
            "x-workbench-total-timesteps": str(counters.get("total_timesteps") or 0),
        }
        return Response(weights, media_type="application/octet-stream", headers=headers)

    async def _policy_onnx(self, request: Request) -> Response:
        await self._start_publishing()
        try:
            version, data = await asyncio.get_running_loop().run_in_executor(self.pool, self.policy.onnx)
        except (ImportError, TypeError, ValueError) as exc:
            raise RequestError(f"the policy cannot be exported to ONNX here: {exc}", kind=type(exc).__name__) from None
        return Response(
            data, media_type="application/octet-stream", headers={"x-workbench-policy-version": str(version)}
        )

    def _checked_post(self, scope: dict[str, Any], path: str, headers: list[tuple[bytes, bytes]]) -> str | None:
        """Check a raw ASGI request's method and token (adding the ``allow`` / ``www-authenticate`` header
        its error answer needs) and return its content-length header, or None where it sent none."""
        if scope["method"] != "POST":
            headers.append((b"allow", b"POST"))
            raise RequestError(
                f"{path} takes POST, not {scope['method']}", field="method", kind="ValueError", status=405
            )
        length, authorization = None, ""
        for name, value in scope["headers"]:  # uvicorn gives the names in lower case
            if name == b"content-length":
                length = value.decode("latin-1")
            elif name == b"authorization":
                authorization = value.decode("latin-1")
        if self.token is not None and not self._authorized({"authorization": authorization}):
            headers.append((b"www-authenticate", b"Bearer"))
            raise RequestError(
                "this server needs its token: send the header 'Authorization: Bearer TOKEN'",
                field="token",
                kind="PermissionError",
                status=401,
            )
        return length

    async def _experience_request(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """``POST /experience``: one experience batch (the binary body of ``workbench.serve.batch``),
        checked, then queued for learning unless it is too stale (on-policy agents) or was applied before."""
        start = time.perf_counter()
        headers = [(b"content-type", b"application/json")]
        try:
            body = await self._read(receive, self._checked_post(scope, "/experience", headers))
            await self._start_publishing()
            answer = self._ingest(*decode_batch(body))
            status = 200
        except RequestError as exc:
            status, answer = exc.status, error_body(exc)
            if status in (408, 413):
                headers.append((b"connection", b"close"))
        out = encode(answer)
        headers.append((b"content-length", b"%d" % len(out)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})
        self.metrics.observe("/experience", status, time.perf_counter() - start)

    def _ingest(self, header: dict[str, Any], arrays: dict[str, Any]) -> dict[str, Any]:
        """A decoded batch checked and handed to the session (on the event loop: queueing never waits)."""
        assert self.policy.extras is not None
        experience = check_experience(self.agent, self.policy.extras, header, arrays, self.max_batch_steps)
        ingest = self._experience
        done = ingest.answered(experience.client, experience.seq)
        if done is not None:
            ingest.duplicates += 1
            return {**done, "duplicate": True}
        version = self.policy.version
        if experience.version > version:
            raise RequestError(
                f"the batch names policy version {experience.version}, newer than this server's {version}: "
                "fetch the policy from this server (GET /policy)",
                field="version",
            )
        lag = version - experience.version
        n = len(experience)
        if self.agent.on_policy and lag > self.max_policy_lag:
            accepted = 0  # on-policy learning from a policy this old would be biased: dropped, counted
        else:
            accepted = self._runner.ingest(experience)
        ingest.steps += accepted
        ingest.dropped += n - accepted
        ingest.batches += 1
        ingest.window_batches += 1
        ingest.window_steps += accepted
        ingest.window_lag += lag * accepted
        answer = {"ok": True, "seq": experience.seq, "accepted": accepted, "dropped": n - accepted, "version": version}
        ingest.remember(experience.client, experience.seq, answer)
        return answer

    async def _websocket_opened(self, scope: dict[str, Any], receive: Any, send: Any) -> dict[str, str] | None:
        """A WebSocket's connect with its token checked: its query parameters, or None when the client
        left before connecting or was refused (told so, 401)."""
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        query = {key: values[0] for key, values in parse_qs(scope["query_string"].decode("latin-1")).items()}
        if (await receive())["type"] != "websocket.connect":
            return None
        if not self._authorized(headers, query):
            await self._deny(
                send,
                RequestError(
                    "this server needs its token: send the header 'Authorization: Bearer TOKEN' (or ?token=TOKEN)",
                    field="token",
                    kind="PermissionError",
                    status=401,
                ),
                scope,
            )
            return None
        return query

    async def _policy_websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """``/policy/ws``: the server sends ``{"version": N, "time": T}`` at once and on every new version."""
        query = await self._websocket_opened(scope, receive, send)
        if query is None:
            return
        try:
            await self._start_publishing()
        except RequestError as exc:
            return await self._deny(send, exc, scope)
        await send({"type": "websocket.accept"})
        if self._subscribers is None:
            self._subscribers = set()
        version, _, _, published = self.policy.newest()
        await send({"type": "websocket.send", "text": encode({"version": version, "time": published}).decode()})
        self._subscribers.add(send)
        try:
            while (await receive())["type"] != "websocket.disconnect":
                pass  # the client says nothing; it only listens
        finally:
            self._subscribers.discard(send)

    # -- the WebSocket: one episode stream ------------------------------------------------------

    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """``/ws``: a plain ASGI handler (no framework layer between a message and its answer)."""
        query = await self._websocket_opened(scope, receive, send)
        if query is None:
            return
        episode: Any = query.get("episode")
        try:
            episode = episode_id({"episode": episode}) if episode is not None else f"ws-{next(self._ws_ids)}"
        except RequestError as exc:
            return await self._deny(send, exc, scope)
        await send({"type": "websocket.accept"})
        if self._reaper_task is None:
            self._start_reaper()
        loop = asyncio.get_running_loop()
        # The idle timeout: one timer per connection, re-armed only when it fires (a message just
        # notes its time), instead of a timeout around every receive.
        last = loop.time()
        busy = False
        timer: asyncio.TimerHandle | None = None
        closing: list[asyncio.Task[None]] = []

        def idle_check() -> None:
            nonlocal timer
            idle = loop.time() - last
            if busy or idle < self.idle_timeout:
                timer = loop.call_later(self.idle_timeout - idle if not busy else self.idle_timeout, idle_check)
                return
            timer = None
            reason = f"idle for {self.idle_timeout:g} s"
            closing.append(loop.create_task(send({"type": "websocket.close", "code": 1001, "reason": reason})))

        timer = loop.call_later(self.idle_timeout, idle_check)
        observe, perf_counter = self.metrics.observe, time.perf_counter
        try:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return  # disconnected: the episode's slot is freed by episode_timeout if nobody resumes it
                busy, start = True, perf_counter()
                data = message.get("text")
                binary = data is None
                body = (message.get("bytes") or b"") if binary else data  # orjson reads str as well
                status, op = 200, None
                try:
                    request = decode(body)
                    op = request.pop("op", None)
                    if "episode" in request:
                        raise RequestError(
                            "a WebSocket stream's episode is set once, in its URL (/ws?episode=ID)",
                            field="episode",
                            kind="TypeError",
                        )
                    request["episode"] = episode
                    if op == "act":
                        _, obs, mask, seq = check_act(self.agent, request)
                        answer = await self._call_act(episode, obs, mask, seq)
                    elif op == "feedback":
                        _, reward, next_obs, terminated, truncated, info, seq = check_feedback(self.agent, request)
                        answer = await self._call_feedback(episode, reward, next_obs, terminated, truncated, info, seq)
                    else:
                        raise RequestError(f"op must be 'act' or 'feedback', got {op!r}", field="op", kind="TypeError")
                except RequestError as exc:
                    status, answer = exc.status, error_body(exc)
                observe(
                    _WS_ENDPOINTS.get(op if isinstance(op, str) else "", "/ws other"), status, perf_counter() - start
                )
                out = encode(answer)
                try:
                    await send(
                        {"type": "websocket.send", "bytes": out}
                        if binary
                        else {"type": "websocket.send", "text": out.decode()}
                    )
                except Exception:  # the client went away meanwhile
                    return
                busy, last = False, loop.time()
        finally:
            if timer is not None:
                timer.cancel()

    async def _deny(self, send: Any, exc: RequestError, scope: dict[str, Any]) -> None:
        """Refuse a WebSocket handshake with an HTTP answer that says why (403 without one)."""
        self.metrics.observe("/ws", exc.status, 0.0)
        if "websocket.http.response" in scope.get("extensions", {}):
            body = encode(error_body(exc))
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": exc.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:  # a server without the denial-response extension
            await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})


_WS_ENDPOINTS = {"act": "/ws act", "feedback": "/ws feedback"}
_CALLS = ("/act", "/feedback")  # answered by Server._call_request


class _Held:
    """Release a lock already acquired when the block ends."""

    __slots__ = ("lock",)

    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


async def _quietly(awaitable: Any) -> None:
    """``await awaitable``, ignoring a client that went away meanwhile."""
    try:
        await awaitable
    except Exception:
        pass


async def _within(awaitable: Any, seconds: float) -> Any:
    """``await awaitable``, or ``asyncio.TimeoutError`` after ``seconds`` (``asyncio.timeout`` where
    there is one: no task per call, as ``wait_for`` makes on Python 3.10 and 3.11)."""
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:
        return await asyncio.wait_for(awaitable, seconds)
    async with timeout(seconds):
        return await awaitable


def _act_error(exc: Exception) -> Exception:
    """An act's error as the answer says it: bad input 400 (the observation), out of turn 409."""
    if isinstance(exc, TypeError | ValueError):
        return RequestError(str(exc), field="obs", kind=type(exc).__name__)
    if isinstance(exc, RuntimeError):
        return RequestError(str(exc), field="episode", kind="RuntimeError", status=409)
    return exc


def _field_of(message: str) -> str | None:
    for field in ("reward", "next_obs", "terminated", "truncated", "info", "action_mask"):
        if field in message:
            return field
    return None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "inf", "-inf": JSON has no infinity
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _bind(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on every connection (with proto 0 it does
    # not, and each answer waits for the client's delayed ACK, about 40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(
            f"serve() cannot listen on {host}:{port}: {exc.strerror or exc} (port=0 picks a free port)"
        ) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def serve(session: Any, host: str = "127.0.0.1", port: int = 0, token: str | None = None, **options: Any) -> Server:
    """Serve ``session`` (an external session) over HTTP and WebSocket; returns the :class:`Server`,
    whose ``url`` is the bound address. See :meth:`workbench.Session.serve`."""
    return Server(session, host, port, token, **options)
