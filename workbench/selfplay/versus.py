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

import numpy as np

from ..agents.contract import Agent
from .games import TwoPlayerGame
from .seat import SeatEnv

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


class Versus(SeatEnv):
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
        self.player = opponent
        """The agent playing the other seat."""
        self.opponent = opponent_name
        """Its name (``"latest"``, a snapshot's, or the agent's class)."""
        self.deterministic = bool(deterministic)
        self._person_first = bool(person_first)
        self._games = 0
        self.seat = None
        names = _action_names(self.game)
        if names is not None:  # HumanPlay's default keys read Atari's names from here
            self.get_action_meanings = lambda: list(names)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a game, the person in the next seat; the opponent moves first when it holds the first seat."""
        super().reset(seed=seed)
        first = self._person_first == (self._games % 2 == 0)
        self.seat = self.game.players[0 if first else 1]
        self._games += 1
        return self._start_game(seed)

    def _opponent_move(self, raw: Any, flat: np.ndarray, mask: np.ndarray) -> int:
        return int(self.player.act({"observation": flat, "action_mask": mask}, deterministic=self.deterministic))

    def render(self) -> np.ndarray:
        """The game's frame now (RGB)."""
        return np.asarray(self.game.env.render())

    def close(self) -> None:
        """Close the game's env."""
        self.game.close()
