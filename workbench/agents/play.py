"""Playing a trained agent: episodes on a single-agent env (returns, lengths, frames) or on a PettingZoo
ParallelEnv (team returns and each agent's), with nothing learned and no exploration added.

:class:`Playing` is a part of :class:`~workbench.agents.contract.Agent` (a base class of it): ``agent.play``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..envs.core import EnvSource, as_env_source, describe_space
from ..loop import play_episodes
from ..validation import check_arguments, choice, flag, integer, optional

__all__ = ["EpisodeReturns", "Playing"]

_SEED = optional(integer(min=0))
_PLAY_CHECKS = {
    "episodes": integer(min=1),
    "render": optional(choice("rgb_array")),
    "deterministic": flag(),
    "seed": _SEED,
    "max_steps": optional(integer(min=1)),
    "viewer": flag(),
}


class EpisodeReturns(list):
    """The list of episode returns from :meth:`Agent.play`, with ``lengths`` and (when rendered)
    ``frames``: one list of RGB arrays per episode."""

    def __init__(self, returns: list[float], lengths: list[int], frames: list[list[np.ndarray]] | None):
        super().__init__(returns)
        self.lengths = lengths
        self.frames = frames


class Playing:
    """The play members of an agent (``self`` is the :class:`Agent`)."""

    def check_spaces(self, env: gym.Env) -> None:
        """Raise ``ValueError`` naming the space that differs between ``env`` and this agent."""
        for label, mine, theirs in (
            ("observation", self.observation_space, env.observation_space),
            ("action", self.action_space, env.action_space),
        ):
            if mine != theirs:
                raise ValueError(
                    f"the env's {label} space {describe_space(theirs)} differs from the agent's "
                    f"{describe_space(mine)}: play it on the env it was trained on"
                )

    def play(
        self,
        env: Any,
        episodes: int = 1,
        *,
        render: str | None = None,
        deterministic: bool = True,
        seed: int | None = None,
        max_steps: int | None = None,
        viewer: bool = False,
    ) -> Any:
        """Play ``episodes`` episodes and return their returns (an :class:`EpisodeReturns` list).

        ``env`` is an instance, id or factory; a PettingZoo ParallelEnv or a zero-argument factory
        returning one plays every agent (``result.per_agent``). With ``render="rgb_array"`` it returns
        ``(returns, frames)``: ``frames[i]`` is the list of RGB arrays of episode ``i``, one per
        step plus the first (an id is made with that render mode; an instance must have it).
        ``viewer=True`` shows the frames in a notebook widget and returns the viewer. Nothing
        is learned and no exploration is added.
        """
        check_arguments(
            f"{self.algorithm}.play",
            {
                "episodes": episodes,
                "render": render,
                "deterministic": deterministic,
                "seed": seed,
                "max_steps": max_steps,
                "viewer": viewer,
            },
            _PLAY_CHECKS,
            {"episodes": 1, "render": None, "deterministic": True, "seed": None, "max_steps": None, "viewer": False},
        )
        if viewer:
            # The one place an agent shows itself in a notebook: the UI is imported when asked for.
            from .. import views

            return views.view("play", self, env=env, episodes=episodes, seed=seed, max_steps=max_steps)
        owner = f"{self.algorithm}.play"
        multi_only = self.multi_agent_only
        if multi_only and not isinstance(env, EnvSource) and not callable(env) and not hasattr(env, "possible_agents"):
            raise TypeError(
                f"{owner} plays a PettingZoo ParallelEnv: pass an instance or a zero-argument factory that returns "
                f"one (as for training), got {type(env).__name__}: {env!r}"
            )
        source = as_env_source(env)
        built = None
        if source.parallel is None and source.factory is not None and source.env_id is None:
            from ..envs.multiagent import build_for_play

            built = build_for_play(source.factory, source.name, owner)  # the user's factory, called once
        parallel = source.parallel
        if built is not None and not isinstance(built, gym.Env):
            parallel = built  # a factory of ParallelEnvs, as training takes: played on this copy, then closed
        if parallel is not None:  # a PettingZoo ParallelEnv: the agent decides for every agent
            try:
                return self._play_parallel(parallel, episodes, render, deterministic, seed, max_steps)
            finally:
                if built is not None:
                    built.close()
        if multi_only:
            if built is not None:
                built.close()
            raise TypeError(
                f"{owner} plays a PettingZoo ParallelEnv (an instance, or a zero-argument factory returning one), "
                f"but {source.name} is a single-agent env: use the ParallelEnv the agent was trained on"
            )
        if built is not None:
            instance, owned = built, True
        elif source.instance is not None:
            instance, owned = source.instance, False
            if render and instance.render_mode != render:
                raise ValueError(
                    f"render={render!r} needs an env made with render_mode={render!r}, "
                    f"this one has render_mode={instance.render_mode!r}"
                )
        else:
            instance = source.make(render_mode=render) if source.env_id else source.make()
            owned = True
        self.check_spaces(instance)
        was_training = self.training
        self.training = False
        returns: list[float] = []
        lengths: list[int] = []
        frames: list[list[np.ndarray]] | None = [] if render else None
        try:
            for _, moments in play_episodes(
                self,
                instance,
                episodes,
                seed,
                deterministic=deterministic,
                max_steps=max_steps,
                render=frames is not None,
            ):
                total, moment = 0.0, None
                episode_frames: list[np.ndarray] = []
                for moment in moments:
                    total += moment.reward
                    if frames is not None:
                        episode_frames.append(np.asarray(moment.frame))
                assert moment is not None
                returns.append(total)
                lengths.append(moment.t)
                if frames is not None:
                    frames.append(episode_frames)
        finally:
            self.training = was_training
            if owned:
                instance.close()
        result = EpisodeReturns(returns, lengths, frames)
        if frames is not None:
            return result, frames
        return result

    def _play_parallel(
        self, env: Any, episodes: int, render: str | None, deterministic: bool, seed: int | None, max_steps: int | None
    ) -> Any:
        """``play`` on a PettingZoo ParallelEnv (``workbench.envs.multiagent``): team returns, each
        agent's in ``result.per_agent``."""
        from ..envs.multiagent import play_parallel

        if render and getattr(env, "render_mode", None) != render:
            raise ValueError(
                f"render={render!r} needs a ParallelEnv made with render_mode={render!r}, "
                f"this one has render_mode={getattr(env, 'render_mode', None)!r}"
            )
        was_training = self.training
        self.training = False
        try:
            returns, lengths, frames, per_agent = play_parallel(
                self,
                env,
                episodes,
                seed=seed,
                deterministic=deterministic,
                max_steps=max_steps,
                render=bool(render),
            )
        finally:
            self.training = was_training
        result = EpisodeReturns(returns, lengths, frames)
        result.per_agent = per_agent
        return (result, frames) if frames is not None else result
