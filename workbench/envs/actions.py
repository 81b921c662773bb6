"""Agent actions as what an env's ``step`` takes: the one action converter that training, workers, the external
session, serving and play all use (single-agent envs here, each agent of a ParallelEnv in ``multiagent.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from .composite import ActionLayout, composite_layout

__all__ = ["env_action_converter"]


def env_action_converter(action_space: spaces.Space) -> Callable[[Any], Any]:
    """The function that turns one agent action into what the env's ``step`` wants: a Python
    int for Discrete, an array clipped to the bounds for Box, an array of the space's dtype for
    MultiDiscrete and MultiBinary, the dict / tuple of numpy values for a composite space (from the
    agents' flat row, :mod:`workbench.envs.composite`), anything else as it is. The one
    action converter: training, workers and play all use it."""
    if isinstance(action_space, spaces.Discrete):
        return int
    if isinstance(action_space, spaces.Box):
        low, high, dtype = action_space.low, action_space.high, action_space.dtype

        def clipped(action: Any) -> np.ndarray:
            # np.clip's values (NaN passes through too) at a fraction of its per-call cost.
            return np.minimum(np.maximum(np.asarray(action, dtype=dtype), low), high)

        return clipped
    if isinstance(action_space, spaces.MultiDiscrete | spaces.MultiBinary):
        multi_dtype = action_space.dtype  # the agents compute them as int64 or float32 arrays
        return lambda action: np.asarray(action).astype(multi_dtype, copy=False)
    if composite_layout(action_space) is not None:
        # An agent's flat row (or an application's structure, checked) as the dict / tuple the env takes.
        layout = ActionLayout(action_space)

        def structured(action: Any) -> Any:
            if isinstance(action, dict | tuple | list) or np.asarray(action).dtype.kind in "biuf":
                return layout.structure(layout.row(action))
            return action  # not an action of the space at all: as it is, for the env to refuse

        return structured
    return lambda action: action
