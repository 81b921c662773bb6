"""``wb.SelfPlay``: a two-player PettingZoo game as the learner's single-agent env, its opponent a past self.

The learner sees one seat of the game at a time: the observation of the player it plays (flattened,
float32) beside that player's legal-action mask under the Dict key ``"action_mask"``, which every
agent honours, so an illegal move is never chosen. Each game the league (:class:`League`) picks the
opponent (a snapshot, or the learner's latest self) and the seat (first or second player, at random),
and the opponent's moves are played inside ``step`` by an agent of the learner's build holding that
opponent's weights, sampling from its policy. The learner's reward is its own reward in the game
(+1 a win, -1 a loss, 0 a draw in the classic games); each finished game is recorded in the league.

A session given a ``SelfPlay`` env binds it to its agent, takes the league's snapshots after the
agent's updates, records ``rating``, ``pool_size`` and ``win_rate/<opponent>`` as signals (and
``win_rate/<reference>``, ``draw_rate/...``, ``loss_rate/...`` every ``reference_every`` updates
against the fixed ``references``), and saves the league with the run. Self-play steps its game in
the training thread: one env, ``num_workers=1``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium import spaces

from ..agents.contract import Agent
from ..agents.saving import agent_like
from .games import Player, TwoPlayerGame, is_pettingzoo_env, reference_player
from .league import LATEST, League
from .seat import SeatEnv

if TYPE_CHECKING:
    from .versus import Versus

__all__ = ["SelfPlay", "play_game"]


def _mask_space(n: int) -> spaces.Box:
    return spaces.Box(0, 1, (n,), np.int8)


def _reference_shares(share: Any, names: list[str]) -> dict[str, float]:
    """``reference_share`` checked, as ``{reference: share}`` (only those with a share)."""
    hint = "a number from 0 to below 1, or {reference: share} such as {'random': 0.1}"
    if isinstance(share, dict):
        unknown = [k for k in share if k not in names]
        if unknown:
            raise ValueError(f"SelfPlay reference_share names {unknown[0]!r}, not one of the references {names}")
        shares = dict(share)
    elif isinstance(share, int | float) and not isinstance(share, bool):
        if not 0.0 <= share < 1.0:
            raise ValueError(f"SelfPlay reference_share={share!r}: {hint}")
        if share > 0 and not names:
            raise ValueError("SelfPlay reference_share > 0 needs references to play: references=['random', ...]")
        shares = {name: float(share) / len(names) for name in names} if share > 0 else {}
    else:
        raise ValueError(f"SelfPlay reference_share={share!r}: {hint}")
    for value in shares.values():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
            raise ValueError(f"SelfPlay reference_share={share!r}: {hint}")
    if sum(shares.values()) >= 1.0:
        raise ValueError(f"SelfPlay reference_share={share!r} sums to 1 or more: leave a share for self-play")
    return {name: float(value) for name, value in shares.items() if value > 0}


def _agent_player(agent: Agent, deterministic: bool) -> Any:
    def decide(flat: np.ndarray, mask: np.ndarray) -> int:
        return int(agent.act({"observation": flat, "action_mask": mask}, deterministic=deterministic))

    return decide


def play_game(
    game: TwoPlayerGame,
    seats: dict[str, Any],
    rng: np.random.Generator,
    seed: int | None = None,
) -> dict[str, float]:
    """Play one whole game: ``seats`` maps each player to an agent (acting on the flat observation and
    mask) or a fixed player ``(observation, mask, rng) -> action``. Returns each player's score
    (1 win, 0.5 draw, 0 loss)."""
    game.reset(seed=seed)
    while not game.over:
        who = game.current
        raw, flat, mask = game.observe(who)
        chooser = seats[who]
        if isinstance(chooser, Agent):
            action = int(chooser.act({"observation": flat, "action_mask": mask}, deterministic=True))
        else:
            action = int(chooser(raw, mask, rng))
        game.step(action)
    return {p: game.outcome(p) for p in game.players}


class SelfPlay(SeatEnv):
    """A two-player PettingZoo game as a single-agent env whose opponent is a past self of the learner.

    Args:
        game: the game: an AEC env (``tictactoe_v3.env()``), a ParallelEnv (converted with PettingZoo's
            ``parallel_to_aec``) or, better, a zero-argument factory returning one (``tictactoe_v3.env``):
            evaluations against the fixed references play on a copy built from it (an instance is
            deep-copied for them).
        league: the pool of past selves and its ratings (a default :class:`League` when None).
        references: fixed players to evaluate against: names (``"random"``, ``"minimax"`` for
            Tic-Tac-Toe, ``"lookahead"`` for Connect Four) or ``{name: fn(obs, mask, rng) -> action}``.
        reference_every: in a session, evaluate against ``references`` every this many updates
            (None: never by itself; :meth:`evaluate` any time).
        reference_games: games per reference and evaluation (half from each seat).
        reference_share: the share of training games played against the references instead of a
            past self: a number (the references picked uniformly) or ``{name: share}`` for some of
            them (``{"random": 0.1}``). Past selves never blunder as a weak player does, so a learner
            that only meets them can lose to the random player; these games keep it sound there.
            Recorded in :attr:`reference_results`, not rated; 0 (pure self-play) by default.
        seat_in_observation: end the observation with a one-hot of the learner's seat (first, second
            player), for games whose two players see the same thing: PettingZoo's Atari games
            (``pong_v3``, ``boxing_v2``) give both the same screen or RAM, so a policy playing either
            seat cannot otherwise tell which paddle or boxer is its own. The classic board games
            give each player its own view and need it not (False by default).

    Example::

        from pettingzoo.classic import tictactoe_v3
        env = wb.SelfPlay(tictactoe_v3.env, league=wb.League(snapshot_every=5), references=["random", "minimax"])
        agent = wb.PPO(env)
        session = wb.Session(agent, env, seed=0)   # binds env to agent: opponents act with its weights
        session.run(steps=100_000)
        session.signals["rating"].last, env.league.win_rates()
        env.evaluate(agent, "minimax", games=100)   # {"win": ..., "draw": ..., "loss": ...}
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  # gymnasium declares it so

    def __init__(
        self,
        game: Any,
        league: League | None = None,
        *,
        references: Sequence[str] | dict[str, Player] = ("random",),
        reference_every: int | None = None,
        reference_games: int = 50,
        reference_share: float | dict[str, float] = 0.0,
        seat_in_observation: bool = False,
    ) -> None:
        if league is not None and not isinstance(league, League):
            raise TypeError(f"SelfPlay league= takes a wb.League, got {type(league).__name__}")
        if reference_every is not None and (
            isinstance(reference_every, bool) or not isinstance(reference_every, int) or reference_every < 1
        ):
            raise ValueError(f"SelfPlay reference_every={reference_every!r}: a positive number of updates or None")
        if isinstance(reference_games, bool) or not isinstance(reference_games, int) or reference_games < 1:
            raise ValueError(f"SelfPlay reference_games={reference_games!r}: a positive number of games")
        self._factory = None if is_pettingzoo_env(game) or not callable(game) else game
        if not isinstance(seat_in_observation, bool):
            raise TypeError(f"SelfPlay seat_in_observation={seat_in_observation!r}: True or False")
        self.game = TwoPlayerGame(game, seat_in_observation)
        # Evaluations play on their own copy, so they never disturb a game in progress.
        self._eval_game_source: Any = self._factory if self._factory is not None else copy.deepcopy(self.game.env)
        self._eval_game: TwoPlayerGame | None = None
        self.league = league if league is not None else League()
        """The league: snapshots, the opponent rule, ratings."""
        if isinstance(references, dict):
            self.references: dict[str, Player] = {str(k): reference_player(v) for k, v in references.items()}
        else:
            self.references = {str(name): reference_player(name) for name in references}
        self.reference_every = reference_every
        self.reference_games = reference_games
        self.reference_share: dict[str, float] = _reference_shares(reference_share, list(self.references))
        """Each reference's share of the training games (the rest are self-play)."""
        self.reference_results: dict[str, list[int]] = {name: [0, 0, 0] for name in self.references}
        """The learner's training games against each reference: wins, draws, losses (not rated)."""
        n = int(self.game.action_space.n)
        low = np.full(self.game.flat_dim, -np.inf, np.float32)
        high = np.full(self.game.flat_dim, np.inf, np.float32)
        inner = self.game.inner_space
        if isinstance(inner, spaces.Box):
            low, high = inner.low.reshape(-1).astype(np.float32), inner.high.reshape(-1).astype(np.float32)
            if seat_in_observation:  # the seat's one-hot, after the game's own observation
                low, high = (
                    np.concatenate([low, np.zeros(2, np.float32)]),
                    np.concatenate([high, np.ones(2, np.float32)]),
                )
        self.observation_space = spaces.Dict(
            {"observation": spaces.Box(low, high, (self.game.flat_dim,), np.float32), "action_mask": _mask_space(n)}
        )
        self.action_space = spaces.Discrete(n)
        self.learner: Agent | None = None
        """The learning agent (set by :meth:`bind`; a session binds it)."""
        self._opponent_agent: Agent | None = None
        self.opponent: str | None = None
        """The current game's opponent (a snapshot's name, ``"latest"``, or a reference's name)."""
        self.seat: str | None = None
        """The player the learner plays in the current game."""
        self._seeded = False
        self._fixed: Player | None = None  # the current game's reference opponent, if it plays one

    def __repr__(self) -> str:
        return f"SelfPlay({type(self.game.env.unwrapped).__name__}, {self.league!r})"

    def bind(self, agent: Agent) -> None:
        """Make ``agent`` the learner: opponents are agents of its build holding snapshot weights."""
        if not isinstance(agent, Agent):
            raise TypeError(f"SelfPlay.bind takes the learning agent (wb.PPO(env)...), got {type(agent).__name__}")
        if agent.observation_space != self.observation_space or agent.action_space != self.action_space:
            hint = ""
            space = agent.observation_space
            theirs = space.spaces.get("observation") if isinstance(space, spaces.Dict) else None
            if isinstance(theirs, spaces.Box) and theirs.shape[0] - self.game.flat_dim in (2, -2):
                # The usual cause on reopening: the env built without the seat the agent was trained with, or so.
                hint = f" (its observations have {theirs.shape[0]} numbers, this env's {self.game.flat_dim}: "
                hint += "build both with the same seat_in_observation)"
            raise ValueError(
                f"SelfPlay.bind: the agent was built for other spaces{hint}; build it on this env: wb.PPO(selfplay_env)"
            )
        self.learner = agent
        # In training mode, so that act(deterministic=False) samples: a play-mode agent always plays its best move,
        # and past selves that never vary their play teach the learner one line of each game. It never learns.
        self._opponent_agent = agent_like(agent, device="cpu")

    def new_game(self) -> TwoPlayerGame:
        """A fresh copy of the game, apart from the one training plays (evaluations and human play use one)."""
        return TwoPlayerGame(
            self._eval_game_source if self._factory is not None else copy.deepcopy(self._eval_game_source),
            self.game.seat_in_observation,
        )

    def opponent_agent(self, name: str = LATEST) -> Agent:
        """An agent of the learner's build holding ``name``'s weights (a snapshot, or ``"latest"``): what
        plays the learner's past self, and what a person plays against (``wb.HumanPlay``). It samples its
        policy with ``act(obs)`` and plays its best move with ``act(obs, deterministic=True)``; it never learns."""
        learner = self._require_learner()
        player = agent_like(learner, device="cpu")  # acting mode: act(deterministic=False) samples its policy
        self._load(player, name)
        return player

    def versus(
        self, opponent: str | Agent = LATEST, *, person_first: bool = True, deterministic: bool = True
    ) -> Versus:
        """One seat of the game for a person, the other played by ``opponent`` (``"latest"``, a snapshot's
        name, or an agent; playing its best move unless ``deterministic=False``): a single-agent env
        that ``wb.HumanPlay`` plays by keys, for the games that are no board (``pong_v3``; a board game
        is played by clicks: ``wb.HumanPlay(selfplay_env)``). The game's factory must build games that
        render ``rgb_array`` frames. Example::

            play = wb.HumanPlay(env.versus("latest"), fps=30)   # in a notebook: click the frame, then the arrows
        """
        from .versus import Versus

        player = opponent if isinstance(opponent, Agent) else self.opponent_agent(opponent)
        name = opponent if isinstance(opponent, str) else type(opponent).__name__
        return Versus(self, player, name, person_first=person_first, deterministic=deterministic)

    def _require_learner(self) -> Agent:
        if self.learner is None:
            raise RuntimeError(
                "SelfPlay has no learner yet: give it to a session (wb.Session(agent, selfplay_env)) or call "
                "selfplay_env.bind(agent) first"
            )
        return self.learner

    def _load(self, player: Agent, name: str) -> None:
        learner = self._require_learner()
        if name == LATEST:
            with torch.no_grad():
                for net_name, net in learner.networks.items():
                    player.networks[net_name].load_state_dict(net.state_dict())
        else:
            player.load_networks(self.league.member(name).weights)

    # -- the gymnasium API ------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a game: pick the opponent and the learner's seat, play the opponent's opening move
        when it moves first."""
        super().reset(seed=seed)
        self._require_learner()
        assert self._opponent_agent is not None
        fresh = self.league.games == 0 and not self.league.snapshots  # a reopened league keeps its generator
        if seed is not None and self.league.seed is None and not self._seeded and fresh:
            self.league.rng = np.random.default_rng(seed)  # the session's seed, unless the league has its own
            self._seeded = True
        self._fixed = None
        draw = self.league.rng.random() if self.reference_share else 1.0
        for name, share in self.reference_share.items():
            if draw < share:
                self.opponent, self._fixed = name, self.references[name]
                break
            draw -= share
        else:
            self.opponent = self.league.sample()
            self._load(self._opponent_agent, self.opponent)
        self.seat = self.game.players[int(self.league.rng.integers(2))]
        return self._start_game(seed)

    def _opponent_move(self, raw: Any, flat: np.ndarray, mask: np.ndarray) -> int:
        if self._fixed is not None:
            return int(self._fixed(raw, mask, self.league.rng))
        assert self._opponent_agent is not None
        return int(self._opponent_agent.act({"observation": flat, "action_mask": mask}, deterministic=False))

    def _game_over(self, score: float) -> None:
        if self._fixed is not None:
            self.reference_results[str(self.opponent)][0 if score == 1.0 else 1 if score == 0.5 else 2] += 1
        else:
            self.league.record(str(self.opponent), score)

    def close(self) -> None:
        """Close the game's envs."""
        self.game.close()
        if self._eval_game is not None:
            self._eval_game.close()

    # -- evaluation and the session's hooks -------------------------------------------------------

    def evaluate(
        self, agent: Agent | None = None, against: str | Player = "random", games: int = 100, seed: int = 0
    ) -> dict[str, float]:
        """Play ``games`` games of ``agent`` (default: the learner; acting deterministically) against a
        fixed player (a name of ``references``, ``"random"``, ``"minimax"``, ``"lookahead"``, or a
        function ``(obs, mask, rng) -> action``), half from each seat, on a copy of the game. Returns
        the shares ``{"win", "draw", "loss"}`` and ``"games"``."""
        agent = self._require_learner() if agent is None else agent
        if isinstance(games, bool) or not isinstance(games, int) or games < 1:
            raise ValueError(f"evaluate games={games!r}: a positive number of games")
        fixed = self.references[against] if isinstance(against, str) and against in self.references else None
        fixed = fixed or reference_player(against)
        if self._eval_game is None:
            self._eval_game = self.new_game()
        game = self._eval_game
        rng = np.random.default_rng(seed)
        counts = {"win": 0, "draw": 0, "loss": 0}
        for i in range(games):
            learner_seat = game.players[i % 2]
            other = game.players[1 - i % 2]
            score = play_game(game, {learner_seat: agent, other: fixed}, rng, seed=seed + i)[learner_seat]
            counts["win" if score == 1.0 else "draw" if score == 0.5 else "loss"] += 1
        return {k: v / games for k, v in counts.items()} | {"games": float(games)}

    def after_update(self, agent: Agent) -> dict[str, float]:
        """What a session calls after each update of ``agent``: the league's snapshot rule, then the
        signals to record (the league's, and the reference evaluation's when it is due)."""
        self.league.after_update(agent)
        out = self.league.signals()
        if self.reference_every is not None and agent.num_updates % self.reference_every == 0:
            for name in self.references:
                result = self.evaluate(agent, name, games=self.reference_games, seed=int(agent.num_updates))
                for key in ("win", "draw", "loss"):
                    out[f"{key}_rate/{name}"] = result[key]
        return out
