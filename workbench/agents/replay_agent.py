"""What the agents that learn from a replay memory (DQN, DDPG, TD3, SAC) share, written once.

The training schedule: nothing is learned before ``learning_starts`` env steps; after that an update
runs every ``train_freq`` env steps and takes ``gradient_steps`` gradient steps (-1: as many as env
steps since the last update). And storing: transitions go to ``self.memory``, continuous actions
squashed to [-1, 1], with only a real termination stopping the bootstrap (a time limit does not).

Such an agent's config has ``learning_starts``, ``train_freq``, ``gradient_steps`` and ``gamma``;
its ``_build`` creates ``self.memory`` and sets ``self._steps_since_update = 0``.
"""

from __future__ import annotations

import numpy as np

from .base import Agent, AgentState, Transitions

__all__ = ["ReplayAgent"]


class ReplayAgent(Agent):
    """Base of the replay-memory agents: storing transitions and the update schedule."""

    _steps_since_update: int

    def observe(self, transitions: Transitions) -> None:
        t = transitions
        stored = t.actions if self.discrete else self._unscale_action(np.asarray(t.actions, dtype=np.float32))
        self.memory.add(t.obs, stored, t.rewards, t.next_obs, t.terminated.astype(np.float32), self.config.gamma)
        self._steps_since_update += len(t.rewards)

    def ready(self) -> bool:
        c = self.config
        return (
            self.num_timesteps >= c.learning_starts
            and self._steps_since_update >= c.train_freq
            and len(self.memory) > 0
        )

    def _gradient_steps_due(self) -> int:
        """How many gradient steps this update takes; starts counting toward the next update."""
        c = self.config
        steps = max(1, c.gradient_steps if c.gradient_steps > 0 else self._steps_since_update)
        self._steps_since_update = 0
        return steps

    def state(self) -> AgentState:
        state = super().state()
        state.data["agent_state"]["steps_since_update"] = self._steps_since_update
        return state

    def restore(self, state: AgentState) -> None:
        super().restore(state)
        self._steps_since_update = int(state.data.get("agent_state", {}).get("steps_since_update", 0))
