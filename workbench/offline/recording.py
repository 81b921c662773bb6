"""Recording a session's transitions to a :class:`~workbench.Dataset` on disk.

``wb.Session(agent, env, record="data/run")`` keeps every transition the run steps, episode by
episode (each env's steps apart, so episodes of several envs do not interleave), with the
behaviour policy's log-probability of each taken action when the agent can tell it:

* agents whose step extras carry ``log_probs`` (PPO, A2C): those;
* epsilon-greedy Q-learners (DQN, QR-DQN, C51; not noisy networks): ``eps / n + (1 - eps)`` for the
  greedy action and ``eps / n`` for the others, with the epsilon of that step;
* SAC: the log-density of the squashed Gaussian (or, before ``learning_starts``, the uniform) it drew from;
* others (TD3, DDPG, noisy networks): none, and the dataset has no ``log_probs``.

The dataset is written when a run ends (``start``/``run`` finishes, stops or fails), holding every
step recorded so far; an episode still going then is saved cut there (``truncated``) and goes on
in the next run's write.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from gymnasium import spaces

from ..agents.base import Agent, Transitions
from .datasets import Dataset

__all__ = ["Recorder", "behaviour_log_probs"]

_FIELDS = ("observations", "actions", "rewards", "next_observations", "terminated", "truncated", "log_probs")


def behaviour_log_probs(agent: Agent, t: Transitions) -> np.ndarray | None:
    """The log-probability with which ``agent`` (in training mode, before it observes ``t``) took
    each of ``t``'s actions, or None when it cannot tell."""
    return agent.behaviour_log_probs(t)


class Recorder:
    """Collects a session's transitions per env and writes them as a dataset to ``path``."""

    def __init__(self, path: str | os.PathLike[str], agent: Agent) -> None:
        if not isinstance(agent.observation_space, spaces.Box | spaces.Dict | spaces.Tuple):
            raise ValueError(
                f"record= keeps observations as flat arrays and needs a Box, Dict or Tuple observation space; "
                f"this agent's is {agent.observation_space}"
            )
        self.path = os.fspath(path)
        self.agent = agent
        self._open: list[dict[str, list[Any]]] = []  # per env: the episode going on
        self._done: dict[str, list[Any]] = {f: [] for f in _FIELDS}
        self._all_log_probs = True

    def add(self, t: Transitions) -> None:
        """Record one batch (call before the agent observes it)."""
        n = len(t.rewards)
        log_probs = behaviour_log_probs(self.agent, t)
        if log_probs is None:
            self._all_log_probs = False
            log_probs = np.zeros(n)
        while len(self._open) < n:
            self._open.append({f: [] for f in _FIELDS})
        # Each observation in its own dtype: uint8 frames stay one byte a pixel (a Dict's flat rows are
        # float32 here; the dataset writes their frame columns as bytes).
        obs = np.asarray(t.obs).reshape(n, -1)
        next_obs = np.asarray(t.next_obs).reshape(n, -1)
        actions = np.asarray(t.actions)
        for i in range(n):
            ep = self._open[i]
            row = (
                obs[i],
                actions[i],
                float(t.rewards[i]),
                next_obs[i],
                bool(t.terminated[i]),
                bool(t.truncated[i]),
                float(log_probs[i]),
            )
            for f, v in zip(_FIELDS, row, strict=True):
                ep[f].append(v)
            if t.terminated[i] or t.truncated[i]:
                for f in _FIELDS:
                    self._done[f].extend(ep[f])
                    ep[f].clear()

    def __len__(self) -> int:
        return len(self._done["rewards"]) + sum(len(ep["rewards"]) for ep in self._open)

    def dataset(self) -> Dataset | None:
        """Everything recorded so far (episodes going on cut as truncated), or None when empty."""
        parts = {f: list(self._done[f]) for f in _FIELDS}
        for ep in self._open:
            if ep["rewards"]:
                for f in _FIELDS:
                    parts[f].extend(ep[f])
                parts["truncated"][-1] = parts["truncated"][-1] or not parts["terminated"][-1]
        if not parts["rewards"]:
            return None
        space = self.agent.observation_space
        shape: Any = space.shape if isinstance(space, spaces.Box) else self.agent.obs_shape  # a Dict's flat rows
        return Dataset(
            np.stack(parts["observations"]).reshape(-1, *shape),
            np.stack(parts["actions"]),
            np.asarray(parts["rewards"]),
            np.stack(parts["next_observations"]).reshape(-1, *shape),
            np.asarray(parts["terminated"]),
            np.asarray(parts["truncated"]),
            np.asarray(parts["log_probs"]) if self._all_log_probs else None,
            observation_space=self.agent.observation_space,
            action_space=self.agent.action_space,
            metadata={"behaviour": self.agent.algorithm},
            source=f"record={self.path}",
        )

    def write(self) -> str | None:
        """Save what was recorded to ``path``; returns the path (None when nothing was recorded)."""
        ds = self.dataset()
        return None if ds is None else ds.save(self.path)
