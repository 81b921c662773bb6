"""The runner contract: what the session's loop calls on whatever steps its envs.

:class:`Runner` declares every member the loop, the session and live edits use, each with its
default, so a backend states what it adds by overriding members and nothing is probed with
``getattr``. Every runner subclasses it: the in-process vector env, local workers, Ray envs, Ray
agent replicas and the application's envs of an external session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..loop import Episode, Transitions

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["Runner"]


class Runner:
    """Steps a session's envs. Five members every runner gives (``num_envs``, ``persistent``,
    ``reset``, ``transitions``, ``close``) and ``call`` for ``session.call_env``; the rest have
    defaults a backend overrides when it can do more.

    Example (the loop's use, in ``workbench.run``)::

        obs = runner.reset()
        while ...:
            if not runner.wait_ready(0.05):
                continue
            transitions, obs = runner.transitions(agent, obs)
            for name, value in runner.drain_signals():
                ...
    """

    num_envs: int
    """How many envs it steps (one row each in every batch)."""
    persistent: bool = False
    """True when it may be kept between two runs of a session, so episodes continue."""
    starts_episodes: bool = True
    """True when every env begins an episode at the runner's first reset (the session then tells the
    agent, ``begin_episode``); False when the application starts them (an external session's runner
    tells the agent of each episode it starts)."""
    backend: str = "inprocess"
    """Where steps run: ``"inprocess"``, ``"local"``, ``"ray"`` or ``"external"`` (for messages)."""
    envs_per_worker: int | None = None
    """Envs in each worker process (None: no workers); the session names the worker of an episode."""
    can_interrupt: bool = False
    """True when :meth:`interrupt` can end a step that hangs (workers it can kill)."""
    stepping: int | None = None
    """The env whose ``step`` runs now in this process, when known (for a stuck run's message)."""
    masks: np.ndarray | None = None
    """Every env's current action mask (the next decision's); None for envs that give none."""
    final_masks: np.ndarray | None = None
    """The masks of the states the last step reached; None for envs that give none."""
    game_ends: np.ndarray | None = None
    """Atari training envs: the raw score and length of whole games that ended (``workbench.envs.atari``)."""
    successes: np.ndarray | None = None
    """Goal envs: ``info["is_success"]`` of the episodes the last step ended (NaN elsewhere), once reported."""

    def reset(self) -> np.ndarray:
        """Reset every env; the first observations, one row per env."""
        raise NotImplementedError

    def transitions(self, agent: Agent, obs: Any) -> tuple[Transitions, Any]:
        """One step of every env for the agent's decision on ``obs``; the transitions and the next observations."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the envs and any process this runner started."""

    def call(self, name: str, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``env.name(*args, **kwargs)`` on every env copy (``session.call_env``); one result per env."""
        raise NotImplementedError

    def wait_ready(self, timeout: float) -> bool:
        """True when a step can be taken now; may wait up to ``timeout`` seconds (an external
        session waits for the application's feedback). Envs the runner steps itself are always ready."""
        return True

    def ended_episodes(self) -> list[Episode] | None:
        """The episodes that ended with the last batch, when the runner counts them itself (an
        external session); None: the loop adds rewards up into episodes."""
        return None

    def drain_signals(self) -> list[tuple[str, float]]:
        """Signals of its own (``worker_3/steps_per_second``...) recorded since the last call."""
        return []

    def interrupt(self) -> None:
        """End a hung step now, from any thread, when :attr:`can_interrupt` (kill the workers)."""

    def rng_states(self) -> list[Any] | None:
        """Every env's random stream (saved with a run, so a resumed run continues them); None
        when the runner cannot tell."""
        return None

    def set_rng_states(self, states: list[Any]) -> None:
        """Continue these streams at the next :meth:`reset` (ignored by runners that cannot)."""

    def set_config(self, values: dict[str, Any]) -> None:
        """A live hyperparameter edit (``session.set``) for acting replicas the runner holds (Ray);
        runners that act with the learner itself have nothing to do."""
