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

from .base import Agent, Transitions

__all__ = ["ReplayAgent"]


class ReplayAgent(Agent):
    """Base of the replay-memory agents: storing transitions and the update schedule."""

    _steps_since_update: int

    def observe(self, transitions: Transitions) -> None:
        obs, actions, rewards, next_obs, terminated, _truncated = transitions
        stored = actions if self.discrete else self._unscale_action(np.asarray(actions, dtype=np.float32))
        self.memory.add(obs, stored, rewards, next_obs, terminated.astype(np.float32), self.config.gamma)
        self._count_steps(len(rewards))

    def _count_steps(self, n: int) -> None:
        self.num_timesteps += n
        self._steps_since_update += n

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

    def extra_state(self) -> dict[str, object]:
        return {"steps_since_update": self._steps_since_update}

    def load_extra_state(self, state: dict[str, object]) -> None:
        self._steps_since_update = int(state.get("steps_since_update", 0))  # type: ignore[arg-type]
