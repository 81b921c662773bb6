"""One seat of a two-player game as a gymnasium env: what ``wb.SelfPlay`` (the learner's seat) and
``SelfPlay.versus`` (a person's seat) share.

The env's ``step`` plays the seat's move, then the other seat's moves (``_opponent_move``, the
subclass's) until it is the seat's turn again or the game ends; the reward is the seat's own return
since the last step, and a finished game's score goes to ``_game_over``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from .games import TwoPlayerGame

__all__ = ["SeatEnv"]


class SeatEnv(gym.Env):
    """A seat of :attr:`game` (the player :attr:`seat`), the other seat played by the subclass."""

    game: TwoPlayerGame
    seat: str | None
    """The player this env plays in the current game (None before the first reset)."""
    opponent: str | None
    """The name of the current game's opponent."""
    _given = 0.0  # the seat's return already given as reward in this game

    def _opponent_move(self, raw: Any, flat: np.ndarray, mask: np.ndarray) -> int:
        """The other seat's move on its observation (raw, flat and its legal-action mask)."""
        raise NotImplementedError

    def _game_over(self, score: float) -> None:
        """A game ended with ``score`` for the seat (1 a win, 0.5 a draw, 0 a loss); nothing by default."""

    def _start_game(self, seed: int | None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the game with :attr:`seat` chosen, play the opponent's opening moves; reset's answer."""
        self.game.reset(seed=seed)
        self._given = 0.0
        self._play_opponent()
        return self._observation(), {"opponent": self.opponent, "seat": self.seat}

    def _play_opponent(self) -> None:
        while not self.game.over and self.game.current != self.seat:
            raw, flat, mask = self.game.observe(self.game.current)
            self.game.step(int(self._opponent_move(raw, flat, mask)))

    def _observation(self) -> dict[str, np.ndarray]:
        assert self.seat is not None
        _, flat, mask = self.game.observe(self.seat)
        return {"observation": flat, "action_mask": mask}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Play the seat's move, then the opponent's until it is the seat's turn or the game ends."""
        if self.seat is None or self.game.over:
            raise RuntimeError(f"{type(self).__name__}.step before reset, or after the game ended: call reset() first")
        self.game.step(int(np.asarray(action).reshape(-1)[0]))
        self._play_opponent()
        total = self.game.returns[self.seat]
        reward, self._given = total - self._given, total
        info: dict[str, Any] = {"opponent": self.opponent, "seat": self.seat}
        if self.game.over:
            info["score"] = self.game.outcome(self.seat)
            self._game_over(info["score"])
        return self._observation(), float(reward), bool(self.game.over), False, info
