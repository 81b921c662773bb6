"""Action masks: which actions are valid in a state, read from the env and checked once.

An env says which actions are valid in one of three ways (the first that applies wins):

1. a method ``env.action_masks()`` (sb3-contrib's ``MaskablePPO`` convention), reached through
   gymnasium wrappers;
2. ``info["action_mask"]`` in what ``reset`` and ``step`` return;
3. a key ``"action_mask"`` of a Dict observation. The agents never feed that key to their networks:
   :func:`strip_mask_space` and :func:`strip_mask_obs` take it out of what they see.

A mask is a boolean vector, True where the action is allowed: ``n`` entries for ``Discrete(n)``,
``sum(nvec)`` for ``MultiDiscrete(nvec)`` (the per-dimension masks one after the other, as
sb3-contrib lays them out). A batch has one row per env. A state in which no action (or no
action of some dimension) is allowed is refused with a :class:`ValueError`, rather than letting
an agent pick a forbidden action.

Where masks travel: the vector envs keep the current masks (``masks``) and those of each step's
next states (``final_masks``); :func:`workbench.loop.env_step` hands them to ``agent.decide(obs,
action_mask=...)``, which returns them in the step's extras as ``"action_mask"``; the loop adds
``"next_action_mask"``, which the DQN family keeps in its replay memory for its targets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from .composite import ActionLayout, composite_layout, is_composite

__all__ = [
    "MASK_KEY",
    "MaskReader",
    "NEXT_MASK_KEY",
    "check_masks",
    "mask_size",
    "masked_choice",
    "sample_action",
    "strip_mask_obs",
    "strip_mask_space",
]

MASK_KEY = "action_mask"
"""The name of the mask in ``info`` and in a Dict observation; ``extras`` use it too."""
NEXT_MASK_KEY = "next_action_mask"
"""The extras key of the masks of each transition's next state (for the DQN family's targets)."""


def mask_size(action_space: spaces.Space) -> int | None:
    """Entries of a mask for ``action_space``: ``n`` (Discrete), ``sum(nvec)`` (MultiDiscrete);
    None for a space that cannot be masked."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    layout = composite_layout(action_space)
    if layout is not None:  # the discrete leaves' masks one after the other (envs/composite.py)
        return layout.mask_width or None
    return None


def strip_mask_space(space: spaces.Space) -> spaces.Space:
    """``space`` without the ``"action_mask"`` key (a Dict that has it), else ``space`` itself."""
    if isinstance(space, spaces.Dict) and MASK_KEY in space.spaces:
        return spaces.Dict({k: v for k, v in space.spaces.items() if k != MASK_KEY})
    return space


def strip_mask_obs(obs: Any) -> Any:
    """A Dict observation without its ``"action_mask"`` key; anything else unchanged."""
    if isinstance(obs, dict) and MASK_KEY in obs:
        return {k: v for k, v in obs.items() if k != MASK_KEY}
    return obs


def check_masks(
    masks: Any, action_space: spaces.Space, where: str = "the action mask", *, allow_empty: bool = False
) -> np.ndarray:
    """``masks`` as a ``(batch, mask_size)`` bool array, checked: the right length for
    ``action_space`` and at least one allowed action per state (per dimension for MultiDiscrete;
    ``allow_empty=True`` skips that, for a final state nobody acts in). Raises ``ValueError``
    saying which row is wrong and how."""
    size = mask_size(action_space)
    if size is None:
        raise ValueError(f"{where}: action masks need a Discrete or MultiDiscrete action space, got {action_space}")
    if is_composite(action_space):
        masks = _composite_rows(masks, action_space, where)
    arr = np.asarray(masks)
    if arr.dtype != bool:
        if arr.dtype.kind not in "biuf" or not ((arr == 0) | (arr == 1)).all():  # np.isin: 20x slower on a row
            raise ValueError(f"{where}: a mask holds True/False (or 1/0) per action, got {arr!r}")
        arr = arr.astype(bool)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != size:
        raise ValueError(
            f"{where} has shape {np.shape(masks)}, expected ({size},) per state for the action space "
            f"{action_space} (MultiDiscrete: the per-dimension masks one after the other)"
        )
    for lo, hi in [] if allow_empty else _segments(action_space):
        empty = ~arr[:, lo:hi].any(axis=1)
        if empty.any():
            row = int(np.flatnonzero(empty)[0])
            which = "" if (lo, hi) == (0, size) else f" in action dimension {_segments(action_space).index((lo, hi))}"
            if is_composite(action_space):
                paths = {(a, b): p for a, b, p in ActionLayout(action_space).mask_segments()}
                which = f" for the leaf {paths[(lo, hi)]!r}"
            env = f" (env {row})" if len(arr) > 1 else ""
            raise ValueError(
                f"{where}{env} allows no action{which}: every state needs at least one valid action; "
                "end the episode instead of offering a state with none"
            )
    return arr


def feedback_mask(action_space: spaces.Space, next_obs: Any, info: dict[str, Any] | None, where: str) -> np.ndarray:
    """The checked mask of the next state that a ``feedback(...)`` call reports, for the DQN family's targets:
    ``info["action_mask"]``, else a Dict ``next_obs``'s key, else every action allowed. A state that allows
    no action passes (``allow_empty``): it may be a final one, where nobody acts. ``where`` names the call
    in a refusal."""
    mask = (info or {}).get(MASK_KEY)
    if mask is None and isinstance(next_obs, dict):
        mask = next_obs.get(MASK_KEY)
    if mask is None:
        return np.ones(mask_size(action_space) or 0, dtype=bool)
    return check_masks(mask, action_space, where, allow_empty=True)[0]


def _composite_rows(masks: Any, action_space: spaces.Space, where: str) -> np.ndarray:
    """A composite space's masks (a structure mirroring the space, a list of them, or flat rows) as rows."""
    layout = ActionLayout(action_space)
    if isinstance(masks, dict | tuple):
        return layout.mask_row(masks, where)[None]
    if isinstance(masks, list) and masks:
        if isinstance(action_space, spaces.Tuple) and len(masks) == len(action_space.spaces):
            try:  # one state's mask of a Tuple space as a list (JSON has no tuples)
                return layout.mask_row(masks, where)[None]
            except ValueError:
                pass
        if not all(isinstance(m, list | np.ndarray) and all(np.isscalar(v) for v in m) for m in masks):
            return np.stack([layout.mask_row(m, f"{where} (row {i})") for i, m in enumerate(masks)])
    arr = np.asarray(masks)
    if arr.ndim in (1, 2) and arr.shape[-1] == layout.mask_width:
        return arr
    return layout.mask_row(masks, where)[None]  # raises, saying what the mask should be


def _segments(action_space: spaces.Space) -> list[tuple[int, int]]:
    """The mask's slice of each action dimension."""
    if is_composite(action_space):
        return [(lo, hi) for lo, hi, _ in ActionLayout(action_space).mask_segments()]
    if isinstance(action_space, spaces.MultiDiscrete):
        ends = np.cumsum(np.asarray(action_space.nvec).reshape(-1))
        return [(int(a), int(b)) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    size = mask_size(action_space) or 0
    return [(0, size)]


def masked_choice(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One allowed action per row of ``masks`` (``(batch, n)`` bool), uniformly among the allowed."""
    u = rng.random(masks.shape)
    u[~masks] = -1.0
    return u.argmax(axis=1)


def sample_action(action_space: spaces.Space, mask: np.ndarray | None) -> Any:
    """A random action of ``action_space`` (its own generator), among the allowed ones given a mask."""
    if is_composite(action_space):
        layout = ActionLayout(action_space)
        return layout.structure(layout.sample(np.random.default_rng(action_space.np_random.integers(2**62)), mask))
    if mask is None:
        return action_space.sample()
    if isinstance(action_space, spaces.MultiDiscrete):
        return action_space.sample(mask=tuple(mask[lo:hi].astype(np.int8) for lo, hi in _segments(action_space)))
    return action_space.sample(mask=mask.astype(np.int8))


class MaskReader:
    """Reads the masks of one env after ``reset`` and ``step``, from whichever source it offers
    (see the module docstring). The source is chosen at the first read (after the first reset);
    an env that offers none there is taken to have none, and costs nothing afterwards."""

    def __init__(self, env: Any, action_space: spaces.Space) -> None:
        self.action_space = action_space
        self.source: str | None = None  # "method", "info" or "obs" once known
        self.enabled = mask_size(action_space) is not None
        self.method = None
        if self.enabled:
            try:
                self.method = env.get_wrapper_attr("action_masks") if hasattr(env, "get_wrapper_attr") else None
            except AttributeError:
                self.method = None
            if self.method is None and callable(getattr(env, "action_masks", None)):
                self.method = env.action_masks
            if not callable(self.method):
                self.method = None

    def read(self, obs: Any, info: Any, *, final: bool = False) -> np.ndarray | None:
        """The mask of the state the env is in (one bool row), or None when the env gives none.
        ``final=True`` reads the last state of an episode, which may allow nothing."""
        if not self.enabled:
            return None
        if self.source is None:
            if self.method is not None:
                self.source = "method"
            elif isinstance(info, dict) and MASK_KEY in info:
                self.source = "info"
            elif isinstance(obs, dict) and MASK_KEY in obs:
                self.source = "obs"
            else:
                self.enabled = False
                return None
        if self.source == "method":
            mask = self.method()  # type: ignore[misc]
        elif self.source == "info":
            if not isinstance(info, dict) or MASK_KEY not in info:
                raise ValueError(f"the env gave info[{MASK_KEY!r}] at reset but not in {info!r}: give it every time")
            mask = info[MASK_KEY]
        else:
            mask = obs[MASK_KEY]
        return check_masks(mask, self.action_space, "the env's action mask", allow_empty=final)[0]
