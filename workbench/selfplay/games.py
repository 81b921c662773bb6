"""Two-player PettingZoo games as one turn loop, and the fixed players a learner is measured against.

:class:`TwoPlayerGame` drives a two-player PettingZoo game through its AEC API: a turn-based game
(``tictactoe_v3.env()``, ``connect_four_v3.env()``) as it is, a ParallelEnv (both players move at
once) through PettingZoo's ``parallel_to_aec``, so one loop serves both. Each turn it gives the player
to move its observation and the action mask the classic games put beside it.

The reference players are plain functions ``(observation, mask, rng) -> action`` on the game's own
observation (the board planes of the player to move: plane 0 its pieces, plane 1 the opponent's):
:func:`random_player` for any game, :func:`tictactoe_minimax` (perfect play) and
:func:`connect_four_lookahead` (win now, else block the opponent's win, else random).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = [
    "REFERENCES",
    "TwoPlayerGame",
    "connect_four_lookahead",
    "random_player",
    "reference_player",
    "tictactoe_minimax",
]

Player = Callable[[Any, np.ndarray, np.random.Generator], int]
"""A fixed player: ``(observation, action_mask, rng) -> action``."""


def _legal(mask: np.ndarray) -> np.ndarray:
    legal = np.flatnonzero(np.asarray(mask))
    if legal.size == 0:
        raise ValueError("the action mask allows no action: a player cannot move")
    return legal


def random_player(obs: Any, mask: np.ndarray, rng: np.random.Generator) -> int:
    """A uniformly random legal move."""
    return int(rng.choice(_legal(mask)))


_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _winner(board: tuple[int, ...]) -> int:
    for a, b, c in _LINES:
        if board[a] != 0 and board[a] == board[b] == board[c]:
            return board[a]
    return 0


@functools.cache
def _minimax(board: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(value for the player to move, its best moves) on a board of 1 (to move), -1 (opponent), 0."""
    won = _winner(board)
    if won:
        return won, ()
    empty = [i for i, v in enumerate(board) if v == 0]
    if not empty:
        return 0, ()
    best, moves = -2, []
    for i in empty:
        # After the move the opponent is to move: swap the signs and negate its value.
        after = (*(-v for v in board[:i]), -1, *(-v for v in board[i + 1 :]))
        value = -_minimax(after)[0]
        if value > best:
            best, moves = value, [i]
        elif value == best:
            moves.append(i)
    return best, tuple(moves)


def tictactoe_minimax(obs: Any, mask: np.ndarray, rng: np.random.Generator) -> int:
    """Perfect Tic-Tac-Toe (``tictactoe_v3``): a move of best minimax value, ties broken at random.
    Never loses; a player that never loses against it draws every game."""
    planes = np.asarray(obs["observation"] if isinstance(obs, dict) else obs).reshape(9, 2)
    board = tuple(int(a) - int(b) for a, b in planes)
    moves = [m for m in _minimax(board)[1] if mask[m]] or list(_legal(mask))
    return int(rng.choice(moves))


def _drop_row(board: np.ndarray, col: int) -> int:
    rows = np.flatnonzero(board[:, col] == 0)
    return int(rows[-1])  # the bottom is the last row


def _connects(board: np.ndarray, row: int, col: int) -> bool:
    """Whether the piece at (row, col) of ``board`` (1 where the player's pieces are) makes four."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < board.shape[0] and 0 <= c < board.shape[1] and board[r, c]:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


def connect_four_lookahead(obs: Any, mask: np.ndarray, rng: np.random.Generator) -> int:
    """One-step lookahead for Connect Four (``connect_four_v3``): a winning move when there is one,
    else a move that blocks the opponent's immediate win, else a random legal move."""
    planes = np.asarray(obs["observation"] if isinstance(obs, dict) else obs)
    mine, theirs = planes[:, :, 0].astype(bool), planes[:, :, 1].astype(bool)
    occupied = (mine | theirs).astype(np.int8)
    legal = _legal(mask)
    for pieces in (mine, theirs):  # win first, then block
        hits = []
        for col in legal:
            row = _drop_row(occupied, int(col))
            trial = pieces.copy()
            trial[row, col] = True
            if _connects(trial, row, int(col)):
                hits.append(int(col))
        if hits:
            return int(rng.choice(hits))
    return int(rng.choice(legal))


REFERENCES: dict[str, Player] = {
    "random": random_player,
    "minimax": tictactoe_minimax,
    "lookahead": connect_four_lookahead,
}
"""The fixed players by name: ``"random"`` (any game), ``"minimax"`` (Tic-Tac-Toe), ``"lookahead"``
(Connect Four)."""


def reference_player(player: str | Player) -> Player:
    """A fixed player by name (see :data:`REFERENCES`) or the callable itself."""
    if callable(player):
        return player
    if player not in REFERENCES:
        raise ValueError(
            f"unknown reference player {player!r}: use one of {sorted(REFERENCES)} or a function "
            "(observation, action_mask, rng) -> action"
        )
    return REFERENCES[player]


def _is_aec(env: Any) -> bool:
    from pettingzoo.utils.env import AECEnv

    return isinstance(env, AECEnv)


def _is_parallel(env: Any) -> bool:
    from pettingzoo.utils.env import ParallelEnv

    return isinstance(env, ParallelEnv)


def is_pettingzoo_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo env (AEC or parallel) rather than a factory of one."""
    try:
        return _is_aec(env) or _is_parallel(env)
    except ImportError:
        return False


def make_game(game: Any) -> Any:
    """The AEC env of ``game``: an AEC env, a ParallelEnv (converted by ``parallel_to_aec``), or a
    zero-argument factory (a game module's ``env`` function) returning one."""
    try:
        import pettingzoo  # noqa: F401  # the extra that holds the games
    except ImportError as exc:  # pragma: no cover - pettingzoo is in the dev and multiagent extras
        raise ImportError(f"self-play needs PettingZoo: pip install 'rl-workbench[multiagent]' ({exc})") from exc
    env = game
    if not (_is_aec(env) or _is_parallel(env)) and callable(env):
        env = env()
    if _is_parallel(env):
        from pettingzoo.utils.conversions import parallel_to_aec

        env = parallel_to_aec(env)
    if not _is_aec(env):
        raise TypeError(
            f"self-play needs a two-player PettingZoo game (an AEC env such as tictactoe_v3.env(), a ParallelEnv, "
            f"or a zero-argument factory returning one), got {type(game).__name__}"
        )
    if len(env.possible_agents) != 2:
        raise ValueError(
            f"self-play needs a two-player game; {type(env.unwrapped).__name__} has players {env.possible_agents}"
        )
    return env


def _split(space: spaces.Space) -> tuple[spaces.Space, spaces.Space | None]:
    """(the observation part, the mask part) of a player's observation space."""
    if isinstance(space, spaces.Dict) and "action_mask" in space.spaces:
        inner = space.spaces.get("observation")
        if inner is None:
            inner = spaces.Dict({k: v for k, v in space.spaces.items() if k != "action_mask"})
        return inner, space.spaces["action_mask"]
    return space, None


class TwoPlayerGame:
    """One two-player game played turn by turn through PettingZoo's AEC API.

    ``players`` are the game's two agent names, ``current`` the one to move; :meth:`observe` gives a
    player's raw observation (without the mask), its flat float32 form and its legal-action mask;
    :meth:`step` plays the current player's move; ``over`` and ``returns`` (each player's summed
    reward) tell how the game stands. With ``seat_in_observation`` the flat form ends with a one-hot
    of the player (first, second): for games whose players see the same thing (PettingZoo's Atari
    games give both the same screen or RAM), where one policy playing either seat must know which.
    """

    def __init__(self, game: Any, seat_in_observation: bool = False) -> None:
        if not isinstance(seat_in_observation, bool):
            raise TypeError(f"seat_in_observation={seat_in_observation!r}: True or False")
        self.env = make_game(game)
        self.seat_in_observation = seat_in_observation
        self.players: list[str] = list(self.env.possible_agents)
        first = self.players[0]
        action_space = self.env.action_space(first)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"self-play needs a Discrete action space; the game's is {action_space}")
        self.action_space = action_space
        self.inner_space, self._mask_space = _split(self.env.observation_space(first))
        self.flat_dim = int(spaces.flatdim(self.inner_space)) + (2 if seat_in_observation else 0)
        self.returns = dict.fromkeys(self.players, 0.0)
        self.over = True

    @property
    def current(self) -> str:
        """The player to move."""
        return str(self.env.agent_selection)

    def reset(self, seed: int | None = None) -> None:
        """Start a new game."""
        self.env.reset(seed=seed)
        self.returns = dict.fromkeys(self.players, 0.0)
        self.over = False
        self._absorb()

    def observe(self, player: str) -> tuple[Any, np.ndarray, np.ndarray]:
        """``(raw observation, flat float32 observation, int8 mask of legal actions)`` of ``player``."""
        obs = self.env.observe(player)
        mask = None
        if isinstance(obs, dict) and "action_mask" in obs:
            mask = np.asarray(obs["action_mask"], dtype=np.int8)
            obs = obs.get("observation", {k: v for k, v in obs.items() if k != "action_mask"})
        if mask is None:
            info_mask = self.env.infos.get(player, {}).get("action_mask")
            n = int(self.action_space.n)
            mask = np.ones(n, np.int8) if info_mask is None else np.asarray(info_mask, dtype=np.int8)
        flat = np.asarray(spaces.flatten(self.inner_space, obs), dtype=np.float32)
        if self.seat_in_observation:
            seat = np.zeros(2, np.float32)
            seat[self.players.index(player)] = 1.0
            flat = np.concatenate([flat, seat])
        return obs, flat, mask

    def step(self, action: int) -> None:
        """Play ``action`` for the current player."""
        self.env.step(int(action))
        self._absorb()

    def _absorb(self) -> None:
        for p in self.players:
            self.returns[p] += float(self.env.rewards.get(p, 0.0))
        ended = [self.env.terminations.get(p, False) or self.env.truncations.get(p, False) for p in self.players]
        self.over = any(ended) or not self.env.agents

    def outcome(self, player: str) -> float:
        """The finished game's score for ``player``: 1 a win, 0.5 a draw, 0 a loss (by the returns)."""
        other = self.players[1 - self.players.index(player)]
        mine, theirs = self.returns[player], self.returns[other]
        return 1.0 if mine > theirs else 0.0 if mine < theirs else 0.5

    def close(self) -> None:
        """Close the game's env."""
        self.env.close()
