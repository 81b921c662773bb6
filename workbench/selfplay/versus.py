"""``SelfPlay.versus``: one seat of a self-play game as a single-agent env for a person, the other seat
played by the agent (or a past self), so that ``wb.HumanPlay`` plays it by keys.

Board games are played by clicks (``wb.HumanPlay(selfplay_env)``, a ``BoardPlay``). The other games, the
Atari ones above all (``pong_v3``), are played at the keyboard against the agent: ``Versus`` is a
gymnasium env whose ``step`` takes the person's action, plays the opponent's moves until it is the
person's turn again, and renders the game's frame. Its observations are the learner's (the seat's
flattened observation and its action mask), so the games a person plays are demonstrations in the
learner's format (``HumanPlay.dataset``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ..agents.contract import Agent
from .games import TwoPlayerGame

if TYPE_CHECKING:
    from .env import SelfPlay

__all__ = ["Versus"]


def _action_names(game: TwoPlayerGame) -> list[str] | None:
    """The Atari names of the game's actions (``NOOP``, ``FIRE``, ``RIGHT``...), for HumanPlay's default
    keys; None for a game that does not name them."""
    mapping = getattr(game.env.unwrapped, "action_mapping", None)
    if mapping is None:
        return None
    try:
        import ale_py
    except ImportError:  # pragma: no cover - an Atari game's emulator comes with ale-py
        return None
    return [ale_py.Action(int(a)).name for a in mapping]


class Versus(gym.Env):
    """A person's seat of a :class:`~workbench.SelfPlay` game against ``opponent`` (made by
    :meth:`SelfPlay.versus`; play it with ``wb.HumanPlay(env.versus())``).

    The seats alternate from game to game, the person's first seat given by ``person_first``. The reward is
    the person's own; an episode is one game. The game's factory must build games that render
    ``rgb_array`` frames (``pong_v3.parallel_env(..., render_mode="rgb_array")``).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012  # gymnasium declares it so

    def __init__(
        self,
        selfplay: SelfPlay,
        opponent: Agent,
        opponent_name: str,
        *,
        person_first: bool = True,
        deterministic: bool = True,
    ) -> None:
        self.game = selfplay.new_game()
        mode = getattr(self.game.env, "render_mode", None)
        if mode != "rgb_array":
            self.game.close()
            raise ValueError(
                f"SelfPlay.versus needs a game that renders frames to show the person, but its factory builds "
                f"{type(self.game.env.unwrapped).__name__} with render_mode={mode!r}: build the SelfPlay from a "
                "factory passing render_mode='rgb_array' (e.g. lambda: pong_v3.parallel_env(render_mode='rgb_array'))"
            )
        self.render_mode = "rgb_array"
        self.observation_space = selfplay.observation_space
        self.action_space = selfplay.action_space
        self.opponent = opponent
        """The agent playing the other seat."""
        self.opponent_name = opponent_name
        self.deterministic = bool(deterministic)
        self._person_first = bool(person_first)
        self._games = 0
        self.seat: str | None = None
        """The person's seat in the current game."""
        self._given = 0.0
        names = _action_names(self.game)
        if names is not None:  # HumanPlay's default keys read Atari's names from here
            self.get_action_meanings = lambda: list(names)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a game, the person in the next seat; the opponent moves first when it holds the first seat."""
        super().reset(seed=seed)
        first = self._person_first == (self._games % 2 == 0)
        self.seat = self.game.players[0 if first else 1]
        self._games += 1
        self.game.reset(seed=seed)
        self._given = 0.0
        self._play_opponent()
        return self._observation(), {"seat": self.seat, "opponent": self.opponent_name}

    def _play_opponent(self) -> None:
        while not self.game.over and self.game.current != self.seat:
            _, flat, mask = self.game.observe(self.game.current)
            action = self.opponent.act({"observation": flat, "action_mask": mask}, deterministic=self.deterministic)
            self.game.step(int(action))

    def _observation(self) -> dict[str, np.ndarray]:
        assert self.seat is not None
        _, flat, mask = self.game.observe(self.seat)
        return {"observation": flat, "action_mask": mask}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Play the person's move, then the opponent's until it is the person's turn or the game ends."""
        if self.seat is None or self.game.over:
            raise RuntimeError("Versus.step before reset, or after the game ended: call reset() first")
        self.game.step(int(np.asarray(action).reshape(-1)[0]))
        self._play_opponent()
        total = self.game.returns[self.seat]
        reward, self._given = total - self._given, total
        info: dict[str, Any] = {"seat": self.seat, "opponent": self.opponent_name}
        if self.game.over:
            info["score"] = self.game.outcome(self.seat)
        return self._observation(), float(reward), bool(self.game.over), False, info

    def render(self) -> np.ndarray:
        """The game's frame now (RGB)."""
        return np.asarray(self.game.env.render())

    def close(self) -> None:
        """Close the game's env."""
        self.game.close()
