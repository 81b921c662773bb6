"""The agent interface every algorithm speaks, and what all agents share: the names, re-exported.

The contract itself is :mod:`workbench.agents.contract` (``Agent``: every member another module may use,
with its default); its parts are :mod:`~workbench.agents.execution` (device, precision, compile),
:mod:`~workbench.agents.shaping` (observations, masks, action scaling), :mod:`~workbench.agents.state`
(what it saves and restores) and :mod:`~workbench.agents.play`; :mod:`~workbench.agents.registry` holds the
registries, ``register`` and ``AgentConfig``. This module keeps ``from workbench.agents.base import ...``
working for every name it ever held.
"""

from __future__ import annotations

from ..loop import Step, Transitions
from .contract import Agent
from .play import EpisodeReturns
from .registry import (
    AGENTS,
    COMPILE_MODES,
    MULTI_AGENTS,
    OFFLINE_AGENTS,
    PRECISIONS,
    ActionMaskError,
    AgentConfig,
    CompileMode,
    mask_refusal,
    register,
)
from .state import AgentState

__all__ = [
    "AGENTS",
    "COMPILE_MODES",
    "MULTI_AGENTS",
    "OFFLINE_AGENTS",
    "PRECISIONS",
    "ActionMaskError",
    "Agent",
    "AgentConfig",
    "AgentState",
    "CompileMode",
    "EpisodeReturns",
    "Step",
    "Transitions",
    "mask_refusal",
    "register",
]
