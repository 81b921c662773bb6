"""The wire format of a served session, shared by the server and :class:`~workbench.serve.RemoteSession`.

Requests and answers are JSON objects. Acting and feedback carry the same fields as the in-process
calls (``session.act(obs, episode=..., action_mask=...)``, ``session.feedback(reward, next_obs,
terminated, truncated, episode=..., info=...)``), and are checked here, at the edge, by the same rules
before the session checks them again:

* JSON types are strict: ``terminated`` and ``truncated`` are JSON booleans (the string ``"false"``
  is refused, not read as true), ``reward`` a JSON number, an observation a number, a (nested) list
  of numbers or, for a Dict space, an object of those; ``NaN`` and ``Infinity`` are not JSON and are
  refused, as is a number too large for a float (``1e999``);
* the shapes are those the agent's ``prepare_obs`` accepts, a mask is checked by ``check_masks``;
* unknown fields are refused (a misspelt ``truncted`` must not pass as "not truncated").

A refused request is a :class:`RequestError`: the HTTP status (400 for bad input), the field, the
kind of error the in-process call raises (``TypeError``, ``ValueError``, ``RuntimeError``) and the
message, sent as ``{"error": message, "field": field, "type": kind}``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from ..agents.contract import Agent

try:  # the serve extra's fast JSON; the standard library's parser where it is absent
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None  # type: ignore[assignment]

__all__ = [
    "MAX_EPISODE_ID",
    "RequestError",
    "action_to_json",
    "check_act",
    "check_feedback",
    "decode",
    "encode",
    "error_body",
]

MAX_EPISODE_ID = 200
"""Characters of a string episode id at most."""

_ACT_FIELDS = {"obs", "episode", "action_mask", "seq"}
_FEEDBACK_FIELDS = {"reward", "next_obs", "terminated", "truncated", "episode", "info", "seq"}


class RequestError(Exception):
    """A request refused at the edge: ``status`` (HTTP), ``field``, ``kind`` (the in-process error's
    class name) and the message."""

    def __init__(self, message: str, *, field: str | None = None, kind: str = "ValueError", status: int = 400):
        super().__init__(message)
        self.message = message
        self.field = field
        self.kind = kind
        self.status = status


def error_body(exc: RequestError) -> dict[str, Any]:
    """The JSON answer for a refused request."""
    return {"error": exc.message, "field": exc.field, "type": exc.kind}


def _no_constant(name: str) -> Any:
    raise RequestError(f"the body holds {name}, which is not JSON: send finite numbers only", kind="ValueError")


# orjson reads an integer beyond 64 bits as a float (a 30-digit episode id would lose its digits): a body with
# a run of 19 or more digits (floats as Python and JavaScript write them have 17 at most) goes to the standard
# library, whose integers are exact.
_LONG_INTEGER = re.compile(rb"\d{19,}")


def decode(body: bytes | str) -> dict[str, Any]:
    """The JSON object in a request body (strict JSON: no NaN/Infinity, an object at the top). Parsed
    by orjson when it is installed; a body it refuses is parsed again by the standard library, so that
    the answer says what was wrong as it always has (the field of a number too large for a float)."""
    if _orjson is not None and not _LONG_INTEGER.search(body if isinstance(body, bytes) else body.encode()):
        try:
            value = _orjson.loads(body)
        except _orjson.JSONDecodeError:
            pass
        else:
            if not isinstance(value, dict):
                raise RequestError(f"the body must be a JSON object, got {type(value).__name__}", kind="TypeError")
            return value
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except RequestError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not valid JSON: {exc}", kind="ValueError") from None
    except RecursionError:
        raise RequestError("the body nests too deeply", kind="ValueError") from None
    if not isinstance(value, dict):
        raise RequestError(f"the body must be a JSON object, got {type(value).__name__}", kind="TypeError")
    return value


def encode(value: Any) -> bytes:
    """A JSON answer (finite numbers only)."""
    if _orjson is not None:
        try:
            out = _orjson.dumps(value)
        except TypeError:  # an integer beyond 64 bits (an episode id): the standard library writes it exactly
            return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
        # orjson writes NaN and infinities as null: without a null in the text there was none to refuse
        if b"null" not in out or _finite(value):
            return out
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()


def _finite(value: Any) -> bool:
    """Whether ``value`` holds no NaN or infinite float (orjson would write them as null)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(map(_finite, value.values()))
    if isinstance(value, list | tuple):
        return all(map(_finite, value))
    return True


def refuse_unknown(given: Iterable[str], allowed: set[str], holder: str, noun: str = "field") -> None:
    """Raise a ``RequestError`` (a ``TypeError`` in process) naming the first of ``given`` that ``allowed``
    lacks, in the words every such refusal uses (a JSON call's fields, the batch header's fields, the batch's
    arrays): "<holder> an unknown <noun> 'x': the <noun>s are <allowed>"."""
    extra = sorted(set(given) - allowed)
    if extra:
        raise RequestError(
            f"{holder} an unknown {noun} {extra[0]!r}: the {noun}s are {', '.join(sorted(allowed))}",
            field=extra[0],
            kind="TypeError",
        )


def episode_id(request: dict[str, Any]) -> Hashable | None:
    """The request's episode: a string (at most :data:`MAX_EPISODE_ID` characters), an integer, or
    None (absent or null: the default episode)."""
    episode = request.get("episode")
    if episode is None:
        return None
    if isinstance(episode, bool) or not isinstance(episode, str | int):
        raise RequestError(
            f"episode must be a string or an integer, got {episode!r}", field="episode", kind="TypeError"
        )
    if isinstance(episode, str) and not 0 < len(episode) <= MAX_EPISODE_ID:
        raise RequestError(
            f"episode must be 1 to {MAX_EPISODE_ID} characters, got {len(episode)}", field="episode", kind="ValueError"
        )
    return episode


def _numbers(value: Any, field: str, depth: int = 0) -> None:
    """Refuse anything but numbers (not booleans), lists of them and, for Dict spaces, objects."""
    if depth > 32:
        raise RequestError(f"{field} nests too deeply", field=field, kind="ValueError")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        raise RequestError(f"{field} must hold numbers, got {value!r}", field=field, kind="TypeError")
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(f"{field} holds a NaN or infinite number: {value!r}", field=field, kind="ValueError")
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, int | float) or isinstance(item, bool):
                _numbers(item, field, depth + 1)
            elif isinstance(item, float) and not math.isfinite(item):
                raise RequestError(f"{field} holds a NaN or infinite number: {item!r}", field=field, kind="ValueError")
    elif isinstance(value, dict):
        for key, item in value.items():
            _numbers(item, f"{field}.{key}", depth + 1)


def observation(agent: Agent, value: Any, field: str) -> Any:
    """A JSON observation checked as the agent's ``prepare_obs`` checks it: the value to pass on. For
    a Box space that is the array ``prepare_obs`` made of it (the session's own ``prepare_obs`` takes
    it back unchanged, so the list is converted once, not twice); for other spaces (one-hot encoded,
    flattened dicts) the JSON value itself."""
    if value is None:
        raise RequestError(f"{field} is required", field=field, kind="TypeError")
    _numbers(value, field)
    try:
        batch, single = agent.prepare_obs(value)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:  # Overflow: an integer past 1e308
        raise RequestError(
            f"{field}: {exc}",
            field=field,
            kind="TypeError" if isinstance(exc, TypeError) else "ValueError",
        ) from None
    if not single:
        raise RequestError(
            f"{field} is a batch of observations: send one observation of shape {tuple(agent.obs_shape)} "
            "(one request per episode)",
            field=field,
            kind="ValueError",
        )
    space = agent.observation_space
    if isinstance(space, spaces.Box) and batch.shape[1:] == space.shape:
        return batch[0]
    return value


def check_act(agent: Agent, request: dict[str, Any]) -> tuple[Hashable | None, Any, Any, int | None]:
    """An act request checked: ``(episode, obs, action_mask, seq)``."""
    refuse_unknown(request, _ACT_FIELDS, "act got")
    episode = episode_id(request)
    obs = observation(agent, request.get("obs"), "obs")
    mask = request.get("action_mask")
    if mask is not None:
        from ..envs.masks import check_masks

        _mask_values(mask, agent.action_layout is not None)
        try:
            mask = check_masks(mask, agent.action_space, "action_mask")[0]
        except ValueError as exc:
            raise RequestError(str(exc), field="action_mask", kind="ValueError") from None
    return episode, obs, mask, _seq(request)


def _mask_values(mask: Any, composite: bool = False) -> None:
    """A JSON mask's values: a list of booleans; for a composite (Dict / Tuple) action space also an object
    or array mirroring the space, with a list of booleans or null at each leaf (its shape checked after)."""

    def fits(value: Any, top: bool) -> bool:
        if isinstance(value, list) and all(isinstance(m, bool) for m in value):
            return True
        if not composite:
            return False
        if value is None:
            return not top
        if isinstance(value, dict):
            return all(isinstance(k, str) and fits(v, False) for k, v in value.items())
        return isinstance(value, list) and all(fits(v, False) for v in value)

    if not fits(mask, True):
        what = "a list of true/false, one per action"
        if composite:
            what += ", or an object / array mirroring the action space with such a list (or null) per discrete leaf"
        raise RequestError(f"action_mask must be {what}, got {mask!r}", field="action_mask", kind="TypeError")


def check_feedback(
    agent: Agent, request: dict[str, Any]
) -> tuple[Hashable | None, float, Any, bool, bool, dict[str, Any] | None, int | None]:
    """A feedback request checked: ``(episode, reward, next_obs, terminated, truncated, info, seq)``."""
    refuse_unknown(request, _FEEDBACK_FIELDS, "feedback got")
    episode = episode_id(request)
    reward = request.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise RequestError(f"reward must be a number, got {reward!r}", field="reward", kind="TypeError")
    reward = float(reward)
    if not math.isfinite(reward):
        raise RequestError(f"reward is a NaN or infinite number: {reward!r}", field="reward", kind="ValueError")
    flags = []
    for name in ("terminated", "truncated"):
        value = request.get(name)
        if not isinstance(value, bool):
            raise RequestError(
                f"{name} must be true or false (a JSON boolean), got {value!r}", field=name, kind="TypeError"
            )
        flags.append(value)
    next_obs = observation(agent, request.get("next_obs"), "next_obs")
    info = request.get("info")
    if info is not None:
        if not isinstance(info, dict):
            raise RequestError(f"info must be an object, got {info!r}", field="info", kind="TypeError")
        if "action_mask" in info:
            _mask_values(info["action_mask"], agent.action_layout is not None)
    return episode, reward, next_obs, flags[0], flags[1], info, _seq(request)


def _seq(request: dict[str, Any]) -> int | None:
    """The client's call number within its episode stream (lets a retried call be answered once)."""
    seq = request.get("seq")
    if seq is None:
        return None
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise RequestError(f"seq must be a non-negative integer, got {seq!r}", field="seq", kind="TypeError")
    return seq


def action_to_json(action: Any) -> Any:
    """An action (the env's format: an int, a numpy array, a dict...) as JSON."""
    if isinstance(action, dict):
        return {key: action_to_json(value) for key, value in action.items()}
    if isinstance(action, tuple):
        return [action_to_json(value) for value in action]
    return np.asarray(action).tolist()
