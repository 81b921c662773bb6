"""Local inference for :class:`~workbench.serve.RemoteSession` (``inference="local"``): the client acts
with its own copy of the learner's policy and sends what happened in experience batches.

Three parts, one thread each:

* acting (the caller's threads, one lock): ``act`` decides with the local copy (``agent.decide``, as the
  learner would, exploring), ``feedback`` records the step with the policy version that chose it; a
  stream (one ``episode=`` key) is cut into a batch every ``batch_steps`` steps, at its episode's end,
  and where the policy version changes, and the batch goes into a bounded queue (full: the batch is
  dropped and counted, acting never waits);
* sending (a background thread): batches are posted in order (``POST /experience``); a batch the
  server did not acknowledge is sent again with the same number (the server applies it once) until it
  is, so a server that is away loses only what the full queue dropped;
* syncing (a background thread): a new policy version is heard of over ``WS /policy/ws`` (pushed) or by
  polling ``GET /policy/version`` every ``sync_every`` steps, then fetched and installed between two steps.

A recurrent policy (``agent.per_env_decisions``: RecurrentPPO's LSTM, GRU or GTrXL) keeps its memory
here, one row per live episode: the local copy is built with :data:`MAX_EPISODES` env rows, each
episode decides in its own row (``agent.decide(rows=[row])``), which ``agent.begin_episode`` zeroes
when the episode starts (a new key, or the first ``act`` after a ``feedback`` that ended it). The
state each step used travels among the step's extras (``extras/lstm_states`` or
``extras/memory_states``), so the learner replays every piece of an episode from where its client was.
"""

from __future__ import annotations

import json
import queue
import secrets
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..envs.masks import MASK_KEY, feedback_mask
from .batch import encode_batch, leaf_actions

if TYPE_CHECKING:
    from .client import RemoteSession

__all__ = ["MAX_EPISODES", "LocalPolicy"]

_DEFAULT = "default"

MAX_EPISODES = 256
"""Live episodes a client holds the memory of at once, for a recurrent policy (each holds one row of
the policy's state: for a GTrXL its whole cached window)."""

_BODY_MARGIN = 64 * 1024  # what a batch's header and framing may take beside its arrays


class _Stream:
    """One episode key's steps since its last batch."""

    __slots__ = ("episodes", "length", "pending", "return_", "rows", "version")

    def __init__(self) -> None:
        self.pending: tuple[Any, ...] | None = None  # (obs, action, extras, mask, version) until its feedback
        self.rows: list[tuple[Any, ...]] = []
        self.episodes: list[list[Any]] = []  # [row, return, length] of the episodes ended in rows
        self.version = 0
        self.return_ = 0.0
        self.length = 0


class LocalPolicy:
    """The local-inference side of a :class:`RemoteSession` (see the module docstring)."""

    def __init__(
        self, remote: RemoteSession, batch_steps: int, sync_every: int | None, max_queued_batches: int
    ) -> None:
        from ..agents.saving import acting_agent
        from ..envs.actions import env_action_converter

        self.remote = remote
        self.batch_steps = batch_steps
        self.sync_every = sync_every
        described = remote._request("GET", "/policy")
        self.description = described
        self.recurrent = bool(described.get("recurrent", False))
        built = _floats(described["agent"])
        if self.recurrent:
            # One memory row per live episode: the acting copy holds MAX_EPISODES envs' state.
            built = {**built, "hyperparameters": {**built.get("hyperparameters", {}), "n_envs": MAX_EPISODES}}
        version, tensors, counters, _ = self._fetch()
        self.agent = acting_agent(built, tensors)
        if self.recurrent and (not self.agent.per_env_decisions or self.agent.num_envs != MAX_EPISODES):
            raise ValueError(
                f"the served policy is recurrent but its {self.agent.algorithm} copy here does not hold "
                f"{MAX_EPISODES} episodes' memory: use inference='server'"
            )
        # Each live episode's memory row (a recurrent policy), and the rows free for new episodes.
        self._rows: dict[Hashable, int] = {}
        self._free_rows = list(range(MAX_EPISODES - 1, -1, -1)) if self.recurrent else []
        # A batch must fit the server's body limit (a GTrXL's state is kilobytes per step).
        self._max_body = int(described.get("max_body", 1 << 20))
        self._max_steps = min(batch_steps, int(described.get("max_batch_steps", batch_steps)))
        self._batch_limit: int | None = None
        self.agent.reseed(secrets.randbits(62))  # each client explores with its own random streams
        self._set_counters(counters)
        self.version = version
        self._convert = env_action_converter(self.agent.action_space)
        self.client_id = secrets.token_hex(8)
        self._lock = threading.RLock()
        self._streams: dict[Hashable, _Stream] = {}
        self._seq = 0
        self._steps = 0
        self._queue: queue.Queue[tuple[int, bytes] | None] = queue.Queue(max_queued_batches)
        self._closed = threading.Event()
        self._poll = threading.Event()
        self.refresh_latencies: list[float] = []
        self.stats = {
            "acted": 0,
            "sent_steps": 0,
            "sent_batches": 0,
            "dropped_steps": 0,
            "dropped_batches": 0,
            "server_dropped_steps": 0,
            "refused_batches": 0,
            "refreshes": 0,
        }
        self.last_error: BaseException | None = None
        self._sender = threading.Thread(target=self._send_loop, name="workbench-remote-send", daemon=True)
        self._sender.start()
        self._syncer = threading.Thread(target=self._sync_loop, name="workbench-remote-sync", daemon=True)
        self._syncer.start()

    # -- acting -----------------------------------------------------------------------------------

    def act(self, obs: Any, episode: Hashable | None, action_mask: Any) -> Any:
        """The local policy's action for ``obs`` in ``episode`` (exploring as the learner does)."""
        key = _DEFAULT if episode is None else episode
        with self._lock:
            stream = self._streams.get(key)
            if stream is None:
                stream = self._streams[key] = _Stream()
            if stream.pending is not None:
                raise RuntimeError(
                    f"act() for episode {episode!r} before the feedback() of its previous action: every act "
                    "must be followed by feedback(reward, next_obs, terminated, truncated) for the same episode"
                )
            batch, single = self.agent.prepare_obs(obs)
            if not single:
                raise ValueError(
                    f"act() got a batch of {len(batch)} observations: pass one observation of shape "
                    f"{self.agent.obs_shape} (one call per episode)"
                )
            if batch.dtype.kind == "f" and not np.isfinite(batch).all():
                raise ValueError(f"act() got a NaN or infinite observation: {obs!r}")
            # The prepared batch, not obs again (a Dict observation keeps its own action_mask key).
            prepared = obs if isinstance(obs, dict) else batch
            if self.recurrent:
                step = self._decide_in_row(key, episode, prepared, action_mask)
            else:
                step = self.agent.decide(prepared, action_mask=action_mask)
            extras = {key: np.asarray(value)[0] for key, value in step.extras.items() if key != MASK_KEY}
            mask = step.extras.get(MASK_KEY)
            action = np.asarray(step.actions)[0]
            stream.pending = (batch[0], action, extras, None if mask is None else np.asarray(mask)[0], self.version)
            self.stats["acted"] += 1
            self._steps += 1
            if self.sync_every is not None and self._steps % self.sync_every == 0:
                self._poll.set()
            return self._convert(action)

    def _decide_in_row(self, key: Hashable, episode: Hashable | None, obs: Any, action_mask: Any) -> Any:
        """A recurrent policy's step for ``key``'s episode, in its memory row (a new episode takes a
        free row, zeroed: its memory starts empty)."""
        row = self._rows.get(key)
        started = row is None
        if row is None:
            if not self._free_rows:
                raise RuntimeError(
                    f"act() for episode {episode!r}: {MAX_EPISODES} episodes are live on this client, each "
                    "holding its recurrent policy's memory here, which is the most one client holds: end one "
                    "(feedback(..., terminated=True) or truncated=True) before starting another, or spread "
                    "the episodes over several RemoteSession clients"
                )
            row = self._rows[key] = self._free_rows.pop()
            begins = np.zeros(MAX_EPISODES, dtype=bool)
            begins[row] = True
            self.agent.begin_episode(begins)
        try:
            return self.agent.decide(obs, action_mask=action_mask, rows=[row])
        except BaseException:
            if started:  # refused (a bad mask): the episode did not start, its row is free again
                self._free_rows.append(self._rows.pop(key))
            raise

    def feedback(
        self,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        episode: Hashable | None,
        info: dict[str, Any] | None,
    ) -> None:
        """Record what followed the last :meth:`act` of ``episode``; a full batch or an ended episode is queued."""
        from ..parallel.external import _flag, _number

        key = _DEFAULT if episode is None else episode
        with self._lock:
            stream = self._streams.get(key)
            if stream is None or stream.pending is None:
                raise RuntimeError(
                    f"feedback() for episode {episode!r} without an act() awaiting it: call act(obs, episode=...) "
                    "first, then feedback() once for that action"
                )
            reward = _number(reward, key)
            terminated = _flag(terminated, "terminated", key)
            truncated = _flag(truncated, "truncated", key)
            batch, single = self.agent.prepare_obs(next_obs)
            if not single:
                raise ValueError(f"feedback() got a batch of {len(batch)} next observations: pass one")
            if batch.dtype.kind == "f" and not np.isfinite(batch).all():
                raise ValueError(f"feedback() got a NaN or infinite next_obs: {next_obs!r}")
            obs, action, extras, mask, version = stream.pending
            next_mask = None
            if mask is not None:
                next_mask = self._next_mask(next_obs, info)
            if stream.rows and version != stream.version:
                self._flush(key, stream)  # one batch, one policy version
            stream.version = version
            stream.pending = None
            stream.rows.append((obs, action, reward, batch[0], terminated, truncated, extras, mask, next_mask))
            stream.return_ += reward
            stream.length += 1
            ended = terminated or truncated
            if ended:
                stream.episodes.append([len(stream.rows) - 1, stream.return_, stream.length])
                stream.return_, stream.length = 0.0, 0
                row = self._rows.pop(key, None)
                if row is not None:  # the next act of this key starts a new episode, its memory empty
                    self._free_rows.append(row)
            if ended or len(stream.rows) >= self._limit(stream.rows[0]):
                self._flush(key, stream)

    def _limit(self, row: tuple[Any, ...]) -> int:
        """Steps per batch: ``batch_steps``, fewer when the server's ``max_batch_steps`` or its body
        limit (``max_body``, a batch's bytes) would refuse that many."""
        if self._batch_limit is None:
            arrays = [row[0], row[1], row[3], *row[6].values(), *(m for m in row[7:9] if m is not None)]
            step_bytes = sum(np.asarray(a).nbytes for a in arrays) + 16  # reward, flags, log-probability
            fits = max(1, (self._max_body - _BODY_MARGIN) // step_bytes)
            self._batch_limit = max(1, min(self._max_steps, fits))
        return self._batch_limit

    def _next_mask(self, next_obs: Any, info: dict[str, Any] | None) -> np.ndarray:
        return feedback_mask(self.agent.action_space, next_obs, info, "feedback()'s next action mask")

    def _flush(self, key: Hashable, stream: _Stream) -> None:
        """The stream's rows as one batch, into the send queue (dropped and counted when it is full)."""
        from ..loop import Transitions

        rows, stream.rows = stream.rows, []
        episodes, stream.episodes = stream.episodes, []
        if not rows:
            return
        n = len(rows)
        obs = np.stack([r[0] for r in rows])
        actions = np.stack([r[1] for r in rows])
        rewards = np.array([r[2] for r in rows], dtype=np.float32)
        next_obs = np.stack([r[3] for r in rows])
        terminated = np.array([r[4] for r in rows], dtype=bool)
        truncated = np.array([r[5] for r in rows], dtype=bool)
        extras = {name: np.stack([r[6][name] for r in rows]) for name in rows[0][6]}
        layout = self.agent.action_layout
        arrays: dict[str, np.ndarray] = {
            "obs": obs,
            **({"action": actions} if layout is None else leaf_actions(layout, actions)),
            "reward": rewards,
            "next_obs": next_obs,
            "terminated": terminated,
            "truncated": truncated,
            **{f"extras/{name}": value for name, value in extras.items()},
        }
        if any(r[7] is not None for r in rows):
            from ..envs.masks import mask_size

            allowed = np.ones(mask_size(self.agent.action_space) or 0, dtype=bool)
            arrays["action_mask"] = np.stack([allowed if r[7] is None else r[7] for r in rows])
            arrays["next_action_mask"] = np.stack([allowed if r[8] is None else r[8] for r in rows])
        if stream.version == self.version:  # the behaviour policy is the one installed: its log-probabilities
            try:
                log_probs = self.agent.behaviour_log_probs(
                    Transitions(obs, actions, rewards, next_obs, terminated, truncated, extras)
                )
            except (TypeError, ValueError):
                log_probs = None
            if log_probs is not None:
                arrays["log_prob"] = np.asarray(log_probs, dtype=np.float32)
        self._seq += 1
        header = {
            "client": self.client_id,
            "seq": self._seq,
            "episode": key if isinstance(key, str | int) and not isinstance(key, bool) else str(key),
            "version": stream.version,
            "steps": n,
            "episodes": episodes,
        }
        body = encode_batch(header, arrays)
        try:
            self._queue.put_nowait((n, body))
        except queue.Full:
            self.stats["dropped_batches"] += 1
            self.stats["dropped_steps"] += n

    def flush(self, timeout: float | None = None) -> bool:
        """Send every stream's steps now and wait up to ``timeout`` seconds (None: no limit) for the
        server to acknowledge every queued batch; True when it has."""
        with self._lock:
            for key, stream in list(self._streams.items()):
                self._flush(key, stream)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    # -- sending ----------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            n, body = item
            delay = 0.05
            while True:
                try:
                    answer = self.remote._request("POST", "/experience", body)
                except (TypeError, ValueError, RuntimeError, PermissionError, KeyError) as exc:
                    if type(exc).__name__ == "RemoteError" or isinstance(exc, TimeoutError):
                        if self._closed.is_set():
                            self.stats["dropped_batches"] += 1
                            self.stats["dropped_steps"] += n
                            break
                        time.sleep(delay)  # the server is away: the same batch again, later
                        delay = min(1.0, delay * 2)
                        continue
                    self.stats["refused_batches"] += 1  # refused at the edge: sending it again would not help
                    self.last_error = exc
                    break
                except OSError:
                    if self._closed.is_set():
                        break
                    time.sleep(delay)
                    delay = min(1.0, delay * 2)
                    continue
                self.stats["sent_batches"] += 1
                self.stats["sent_steps"] += int(answer.get("accepted", 0))
                self.stats["server_dropped_steps"] += int(answer.get("dropped", 0))
                break
            self._queue.task_done()

    # -- syncing ----------------------------------------------------------------------------------

    def _fetch(self) -> tuple[int, dict[str, Any], dict[str, Any], float]:
        from safetensors.torch import load

        payload, headers = self.remote._request("GET", "/policy/weights", raw=True)
        version = int(headers.get("x-workbench-policy-version", "0"))
        counters = {
            "num_timesteps": int(headers.get("x-workbench-num-timesteps", "0")),
            "total_timesteps": int(headers.get("x-workbench-total-timesteps", "0")) or None,
        }
        return version, load(payload), counters, float(headers.get("x-workbench-policy-time", "0"))

    def _set_counters(self, counters: dict[str, Any]) -> None:
        # The learner's clock: exploration schedules (DQN's epsilon) follow the learner's progress.
        self.agent.num_timesteps = counters["num_timesteps"]
        self.agent.total_timesteps = counters["total_timesteps"]

    def _refresh(self, announced: int) -> None:
        if announced <= self.version:
            return
        version, tensors, counters, published = self._fetch()
        if version <= self.version:
            return
        with self._lock:
            for key, stream in list(self._streams.items()):
                if stream.rows and stream.version == self.version:
                    self._flush(key, stream)  # log-probabilities with the policy that chose the steps
            self.agent.load_networks(tensors)
            self._set_counters(counters)
            self.version = version
            self.stats["refreshes"] += 1
        if published:
            self.refresh_latencies.append(max(0.0, time.time() - published))
            del self.refresh_latencies[:-1000]

    def _sync_loop(self) -> None:
        delay = 0.05
        while not self._closed.is_set():
            try:
                if self.sync_every is None:
                    self._listen()
                else:
                    if not self._poll.wait(0.5):
                        continue
                    self._poll.clear()
                    self._refresh(int(self.remote._request("GET", "/policy/version")["version"]))
                delay = 0.05
            except Exception:  # the server is away, or the push socket dropped: try again, later
                if self._closed.wait(delay):
                    return
                delay = min(1.0, delay * 2)

    def _listen(self) -> None:
        """Hear of new versions over ``WS /policy/ws`` until it closes."""
        from websockets.sync.client import connect

        remote = self.remote
        scheme = "wss" if remote._parsed.scheme == "https" else "ws"
        headers = {k: v for k, v in remote._headers.items() if k != "Content-Type"}
        with connect(
            f"{scheme}://{remote._parsed.netloc}/policy/ws",
            open_timeout=remote.timeout,
            additional_headers=headers,
            compression=None,
        ) as ws:
            self._socket = ws
            while not self._closed.is_set():
                try:
                    message = ws.recv(timeout=0.5)
                except TimeoutError:
                    continue
                self._refresh(int(json.loads(message)["version"]))

    _socket: Any = None

    def close(self, timeout: float = 5.0) -> None:
        """Send what is recorded (waiting up to ``timeout`` seconds), then stop both threads."""
        self.flush(timeout)
        self._closed.set()
        self._queue.put(None)
        self._sender.join(timeout)
        socket = self._socket
        if socket is not None:
            socket.close()
        self._syncer.join(timeout)


def _floats(value: Any) -> Any:
    """JSON as the server wrote it with infinite numbers as strings (``"inf"``, ``"-inf"``), read back."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return value
