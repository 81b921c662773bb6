"""Self-play for competitive two-player PettingZoo games: a rated league of the learner's past selves.

``wb.SelfPlay(game, league=wb.League(...))`` (:mod:`workbench.selfplay.env`) turns a two-player game
into the learner's env, its opponent a past self picked by the league (:mod:`workbench.selfplay.league`:
snapshots, PFSP or uniform sampling, Elo ratings, saving); :mod:`workbench.selfplay.games` holds the
turn loop over PettingZoo's AEC API and the fixed reference players (random, minimax, lookahead);
:mod:`workbench.selfplay.versus` one seat of a game for a person at the keyboard (``SelfPlay.versus``).
"""

from __future__ import annotations

from .env import SelfPlay, play_game
from .games import REFERENCES, TwoPlayerGame, connect_four_lookahead, random_player, tictactoe_minimax
from .league import LATEST, League, Snapshot
from .versus import Versus

__all__ = [
    "LATEST",
    "REFERENCES",
    "League",
    "SelfPlay",
    "Snapshot",
    "TwoPlayerGame",
    "Versus",
    "connect_four_lookahead",
    "play_game",
    "random_player",
    "tictactoe_minimax",
]
