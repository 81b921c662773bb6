"""Experience batches: the binary body of ``POST /experience``, written by local-inference clients
(``wb.RemoteSession(url, inference="local")``) and checked here, at the server's edge.

One batch is one framed message (no pickle, nothing but numbers and one JSON header)::

    b"WBX1"                       4 bytes, the format
    header length                 uint32, little-endian
    header                        JSON object, UTF-8
    arrays                        back to back, in the header's order, C order, little-endian

The header: ``client`` (the client's id, 1 to 64 characters of ``A-Z a-z 0-9 _ -``), ``seq`` (the
client's batch number: a batch sent again with the same number is answered again, never applied
twice), ``episode`` (the client's episode key, a string or an integer), ``version`` (the policy
version that chose every step of the batch), ``steps`` (T, 1 to the server's ``max_batch_steps``),
``episodes`` (``[[row, return, length], ...]``, one per row that ends an episode) and ``arrays``
(``[{"name": ..., "dtype": ..., "shape": [...]}, ...]``). The arrays are those of
:data:`ARRAYS` (``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ``truncated``), an
optional ``log_prob`` (the behaviour policy's log-probability of each action), ``action_mask`` and
``next_action_mask`` together (masked decisions), and ``extras/<key>`` for each extra the agent's
decisions carry (PPO's ``extras/values`` and ``extras/log_probs``; a recurrent policy's
``extras/lstm_states`` or ``extras/memory_states``, the memory state each step used). A composite
(Dict / Tuple) action space sends ``action/<path>`` per leaf instead of ``action`` (:func:`action_arrays`).
docs/serve.md has the table.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from .protocol import RequestError, episode_id, refuse_unknown

if TYPE_CHECKING:
    from ..agents.contract import Agent
    from ..envs.composite import ActionLayout

__all__ = [
    "ARRAYS",
    "DTYPES",
    "MAGIC",
    "Experience",
    "ExtrasSpec",
    "action_arrays",
    "check_experience",
    "decode_batch",
    "encode_batch",
    "leaf_actions",
]

MAGIC = b"WBX1"
"""The first four bytes of an experience batch."""

DTYPES = ("float32", "float64", "int64", "int32", "uint8", "bool")
"""The dtypes an array of a batch may have (little-endian)."""

ARRAYS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
"""The arrays every batch holds (a composite action space: ``action/<path>`` per leaf instead of ``action``)."""

_OPTIONAL = ("log_prob", "action_mask", "next_action_mask")
_CLIENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HEADER_FIELDS = {"client", "seq", "episode", "version", "steps", "episodes", "arrays"}
_MAX_HEADER = 1 << 20

ExtrasSpec = dict[str, tuple[tuple[int, ...], str]]
"""The extras of the agent's decisions: key -> (shape of one step's value, dtype kind ``"f"``/``"i"``/``"b"``)."""


def action_arrays(agent: Agent) -> ExtrasSpec:
    """The arrays a batch carries its actions in: ``action`` (one per step), or for a composite
    (Dict / Tuple) action space ``action/<path>`` per leaf (its path as ``workbench.envs.composite``
    names it): each with the shape of one step's value and its dtype kind (``"i"`` integers, Discrete
    leaves as the env takes them, from the space's ``start``; ``"f"`` floats, Box, unclipped)."""
    layout = agent.action_layout
    space = agent.action_space
    if layout is None:
        return {"action": (tuple(space.shape or ()), "f" if isinstance(space, spaces.Box) else "i")}
    return {
        f"action/{leaf.path}": (
            () if leaf.kind == "discrete" else tuple(leaf.space.shape or ()),
            _LEAF_KINDS[leaf.kind],
        )
        for leaf in layout.leaves
    }


_LEAF_KINDS = {"discrete": "i", "multidiscrete": "i", "multibinary": "i", "box": "f"}


def leaf_actions(layout: ActionLayout, rows: np.ndarray) -> dict[str, np.ndarray]:
    """A composite space's action rows (``(T, width)``, as the agents keep them) as the arrays of
    :func:`action_arrays`: one per leaf, Discrete leaves shifted by their ``start``, Box leaves unclipped
    (the sample the log-probability is of)."""
    n = len(rows)
    out: dict[str, np.ndarray] = {}
    for leaf in layout.leaves:
        cols = np.asarray(rows)[:, leaf.start : leaf.stop]
        if leaf.kind == "discrete":
            out[f"action/{leaf.path}"] = cols[:, 0].astype(np.int64) + int(leaf.space.start)  # type: ignore[attr-defined]
        elif leaf.kind == "box":
            out[f"action/{leaf.path}"] = cols.astype(np.float32).reshape(n, *leaf.space.shape)  # type: ignore[misc]
        else:
            out[f"action/{leaf.path}"] = cols.astype(np.int64).reshape(n, *leaf.space.shape)  # type: ignore[misc]
    return out


def encode_batch(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """One batch as bytes: ``header`` (without ``arrays``: that is written here) and the arrays by name."""
    parts: list[bytes] = []
    listed = []
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        if value.dtype.name not in DTYPES:
            raise TypeError(f"experience array {name!r} has dtype {value.dtype}: use one of {', '.join(DTYPES)}")
        value = value.astype(value.dtype.newbyteorder("<"), copy=False)
        listed.append({"name": name, "dtype": value.dtype.name, "shape": list(value.shape)})
        parts.append(value.tobytes())
    head = json.dumps({**header, "arrays": listed}, allow_nan=False, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + b"".join(parts)


def decode_batch(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and the arrays of a batch's bytes (views of ``body``, read-only), the framing checked:
    the format, the header, each array's dtype and shape, and that the sizes add up to the body's."""
    if len(body) < 8 or body[:4] != MAGIC:
        raise RequestError(
            f"an experience batch starts with {MAGIC!r} (see docs/serve.md), got {bytes(body[:4])!r}", field="body"
        )
    (size,) = struct.unpack_from("<I", body, 4)
    if size > _MAX_HEADER or 8 + size > len(body):
        raise RequestError(f"the batch header claims {size} bytes; the body has {len(body) - 8}", field="body")
    try:
        header = json.loads(bytes(body[8 : 8 + size]), parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the batch header is not valid JSON: {exc}", field="header") from None
    if not isinstance(header, dict):
        raise RequestError("the batch header must be a JSON object", field="header", kind="TypeError")
    refuse_unknown(header, _HEADER_FIELDS, "the batch header has")
    listed = header.get("arrays")
    if not isinstance(listed, list):
        raise RequestError("the batch header needs 'arrays': a list of {name, dtype, shape}", field="arrays")
    arrays: dict[str, np.ndarray] = {}
    offset = 8 + size
    for entry in listed:
        if not isinstance(entry, dict) or set(entry) != {"name", "dtype", "shape"}:
            raise RequestError(f"each of 'arrays' is {{name, dtype, shape}}, got {entry!r}", field="arrays")
        name, dtype, shape = entry["name"], entry["dtype"], entry["shape"]
        if not isinstance(name, str) or name in arrays:
            raise RequestError(f"array names are distinct strings, got {name!r}", field="arrays")
        if dtype not in DTYPES:
            raise RequestError(
                f"array {name!r} has dtype {dtype!r}: one of {', '.join(DTYPES)}", field=name, kind="TypeError"
            )
        if (
            not isinstance(shape, list)
            or not shape
            or len(shape) > 8
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31 for n in shape)
        ):
            raise RequestError(f"array {name!r} has shape {shape!r}: a list of 1 to 8 sizes", field=name)
        dt = np.dtype(dtype).newbyteorder("<")
        nbytes = math.prod(shape) * dt.itemsize
        if offset + nbytes > len(body):
            raise RequestError(f"array {name!r} runs past the end of the body", field=name)
        arrays[name] = np.frombuffer(body, dtype=dt, count=math.prod(shape), offset=offset).reshape(shape)
        offset += nbytes
    if offset != len(body):
        raise RequestError(f"the body has {len(body) - offset} bytes after its last array", field="body")
    return header, arrays


def _no_constant(name: str) -> Any:
    raise RequestError(f"the batch header holds {name}, which is not JSON", field="header")


@dataclass
class Experience:
    """A checked batch of one client's steps (``T`` rows, in the order they happened)."""

    client: str
    seq: int
    version: int
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    extras: dict[str, np.ndarray]
    episodes: list[tuple[int, float, int]]
    """``(row, return, length)`` of each episode that ended in the batch."""

    def __len__(self) -> int:
        return len(self.rewards)


def _int(header: dict[str, Any], name: str, low: int = 0, high: int | None = None) -> int:
    value = header.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"from {low}" + (f" to {high}" if high is not None else "")
        raise RequestError(f"{name} must be an integer {bound}, got {value!r}", field=name, kind="TypeError")
    return value


def _array(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...], kinds: str) -> np.ndarray:
    value = arrays.get(name)
    if value is None:
        raise RequestError(f"the batch lacks the array {name!r}", field=name, kind="TypeError")
    if value.shape != shape:
        raise RequestError(f"array {name!r} has shape {value.shape}, expected {shape}", field=name)
    if value.dtype.kind not in kinds:
        raise RequestError(
            f"array {name!r} has dtype {value.dtype}, expected {'a float' if kinds == 'f' else 'an integer'} dtype"
            if kinds in ("f", "iu")
            else f"array {name!r} has dtype {value.dtype}, expected bool",
            field=name,
            kind="TypeError",
        )
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        raise RequestError(f"array {name!r} holds a NaN or infinite number", field=name)
    return value


def check_experience(
    agent: Agent, extras: ExtrasSpec, header: dict[str, Any], arrays: dict[str, np.ndarray], max_steps: int
) -> Experience:
    """A decoded batch checked as strictly as a JSON feedback is: every array present with its
    shape and dtype, finite, actions in the action space, an episode entry for each row that ends one,
    no unknown array; arrays are copied and cast to what the agent stores."""
    client = header.get("client")
    if not isinstance(client, str) or not _CLIENT.fullmatch(client):
        raise RequestError(
            f"client must be 1 to 64 characters of A-Z a-z 0-9 _ -, got {client!r}", field="client", kind="TypeError"
        )
    seq = _int(header, "seq")
    version = _int(header, "version")
    steps = _int(header, "steps", 1)
    if steps > max_steps:
        raise RequestError(
            f"the batch has {steps} steps, more than this server's max_batch_steps={max_steps}: send smaller batches",
            field="steps",
            status=413,
        )
    episode_id(header)  # the client's key, checked as a JSON call's episode is
    layout = agent.action_layout
    action_names = ["action"] if layout is None else [f"action/{leaf.path}" for leaf in layout.leaves]
    known = {*ARRAYS, *_OPTIONAL, *action_names, *(f"extras/{key}" for key in extras)} - (
        set() if layout is None else {"action"}
    )
    refuse_unknown(arrays, known, "the batch has", "array")
    obs_shape = (steps, *agent.obs_shape)
    obs_kinds = "u" if agent.obs_dtype == np.uint8 else "f"
    obs = _array(arrays, "obs", obs_shape, obs_kinds).astype(agent.obs_dtype)
    next_obs = _array(arrays, "next_obs", obs_shape, obs_kinds).astype(agent.obs_dtype)
    space = agent.action_space
    if isinstance(space, spaces.Discrete):
        actions = _array(arrays, "action", (steps,), "iu").astype(np.int64)
        if ((actions < space.start) | (actions >= space.start + space.n)).any():
            raise RequestError(f"array 'action' holds an action outside {space}", field="action")
    elif isinstance(space, spaces.Box):
        actions = _array(arrays, "action", (steps, *space.shape), "f").astype(np.float32)
    elif isinstance(space, spaces.MultiDiscrete | spaces.MultiBinary):
        actions = _array(arrays, "action", (steps, *space.shape), "iu").astype(np.int64)
        high = space.nvec if isinstance(space, spaces.MultiDiscrete) else 2
        if ((actions < 0) | (actions >= high)).any():
            raise RequestError(f"array 'action' holds an action outside {space}", field="action")
    elif layout is not None:
        actions = _composite_actions(layout, arrays, steps)
    else:  # pragma: no cover (refused when the server starts serving local inference)
        raise RequestError(f"experience batches do not carry actions of {space}", field="action", kind="TypeError")
    rewards = _array(arrays, "reward", (steps,), "fiu").astype(np.float32)
    terminated = _array(arrays, "terminated", (steps,), "b").copy()
    truncated = _array(arrays, "truncated", (steps,), "b").copy()
    out_extras: dict[str, np.ndarray] = {}
    for key, (shape, kind) in extras.items():
        kinds = {"f": "f", "i": "iu", "u": "iu", "b": "b"}.get(kind, "f")
        out_extras[key] = _array(arrays, f"extras/{key}", (steps, *shape), kinds).copy()
    if "log_prob" in arrays:
        _array(arrays, "log_prob", (steps,), "f")
    masked = [name for name in ("action_mask", "next_action_mask") if name in arrays]
    if masked:
        from ..envs.masks import MASK_KEY, NEXT_MASK_KEY, mask_size

        if len(masked) == 1:
            raise RequestError(
                "a batch with masked decisions holds both action_mask and next_action_mask", field=masked[0]
            )
        if not agent.supports_action_masks:
            raise RequestError(f"{agent.algorithm} does not take action masks", field="action_mask", kind="TypeError")
        size = mask_size(space) or 0
        mask = _array(arrays, "action_mask", (steps, size), "b")
        if layout is None and not mask.any(axis=1).all():
            raise RequestError("a row of action_mask allows no action", field="action_mask")
        if isinstance(space, spaces.Discrete) and not mask[np.arange(steps), actions - space.start].all():
            raise RequestError("an action was taken that its action_mask does not allow", field="action_mask")
        if layout is not None:
            _check_head_masks(layout, mask, actions)
        out_extras[MASK_KEY] = mask.copy()
        out_extras[NEXT_MASK_KEY] = _array(arrays, "next_action_mask", (steps, size), "b").copy()
    ended = terminated | truncated
    episodes = header.get("episodes")
    if not isinstance(episodes, list):
        raise RequestError("episodes must be a list of [row, return, length]", field="episodes", kind="TypeError")
    out_episodes: list[tuple[int, float, int]] = []
    for entry in episodes:
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or any(isinstance(v, bool) or not isinstance(v, int | float) for v in entry)
            or not isinstance(entry[0], int)
            or not isinstance(entry[2], int)
            or not math.isfinite(entry[1])
        ):
            raise RequestError(f"each of episodes is [row, return, length], got {entry!r}", field="episodes")
        row, ret, length = entry
        if not 0 <= row < steps or not ended[row] or length < 1:
            raise RequestError(
                f"episodes names row {row} (length {length}), which does not end an episode", field="episodes"
            )
        out_episodes.append((row, float(ret), length))
    if sorted(r for r, _, _ in out_episodes) != np.flatnonzero(ended).tolist():
        raise RequestError("episodes must hold one entry for each row that ends an episode", field="episodes")
    return Experience(
        client, seq, version, obs, actions, rewards, next_obs, terminated, truncated, out_extras, out_episodes
    )


def _composite_actions(layout: ActionLayout, arrays: dict[str, np.ndarray], steps: int) -> np.ndarray:
    """The ``action/<path>`` arrays of a composite action space, each leaf checked (shape, dtype, its
    space's bounds), as the ``(steps, width)`` float32 rows the agents keep."""
    rows = np.zeros((steps, layout.width), dtype=np.float32)
    for leaf in layout.leaves:
        name = f"action/{leaf.path}"
        space = leaf.space
        if leaf.kind == "discrete":
            start, n = int(space.start), int(space.n)  # type: ignore[attr-defined]
            value = _array(arrays, name, (steps,), "iu").astype(np.int64)
            if ((value < start) | (value >= start + n)).any():
                raise RequestError(
                    f"array {name!r} holds an action outside the head {leaf.path!r}'s {space}: "
                    f"integers in [{start}, {start + n})",
                    field=name,
                )
            rows[:, leaf.start] = value - start
            continue
        shape = (steps, *(space.shape or ()))
        if leaf.kind == "box":
            value = _array(arrays, name, shape, "f")  # finite; unclipped, as the policy sampled it
        else:
            value = _array(arrays, name, shape, "iu").astype(np.int64)
            high = np.asarray(leaf.nvec) if leaf.kind == "multidiscrete" else 2
            if ((value.reshape(steps, -1) < 0) | (value.reshape(steps, -1) >= high)).any():
                raise RequestError(
                    f"array {name!r} holds an action outside the head {leaf.path!r}'s {space}", field=name
                )
        rows[:, leaf.start : leaf.stop] = value.reshape(steps, -1)
    return rows


def _check_head_masks(layout: ActionLayout, mask: np.ndarray, rows: np.ndarray) -> None:
    """Each discrete head's part of ``action_mask``: some action allowed in each of its dimensions, and
    the action taken allowed (a hybrid space's unchosen branches aside: their actions do not count)."""
    chosen = rows[:, 0].astype(np.int64) if layout.hybrid else None
    for leaf in layout.leaves:
        lo = leaf.mask_start
        for d, n in enumerate(leaf.nvec if leaf.mask_width else ()):
            part = mask[:, lo : lo + n]
            if not part.any(axis=1).all():
                raise RequestError(
                    f"a row of action_mask allows no action of the head {leaf.path!r}", field="action_mask"
                )
            taken = rows[:, leaf.start + d].astype(np.int64)
            counts = np.ones(len(rows), bool) if chosen is None or leaf.branch is None else chosen == leaf.branch
            if not part[np.arange(len(rows)), taken][counts].all():
                raise RequestError(
                    f"an action of the head {leaf.path!r} was taken that its action_mask does not allow",
                    field="action_mask",
                )
            lo += n
