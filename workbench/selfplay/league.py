"""A rated league of the learner's past selves: snapshots, the rule that picks an opponent, Elo ratings.

:class:`League` keeps a pool of snapshots of the learning agent's networks, taken every
``snapshot_every`` updates, and picks each game's opponent by a documented rule:

* with probability ``latest_share`` the learner's **latest** self (its current weights);
* otherwise a snapshot among the newest ``window`` ones, ``sampling="uniform"`` alike, or
  ``sampling="pfsp"`` by prioritised fictitious self-play as in AlphaStar (Vinyals et al. 2019):
  a snapshot is picked with weight ``(1 - x) ** pfsp_power``, ``x`` the learner's score against it so
  far (win 1, draw 1/2, loss 0; ``(wins + draws / 2 + 1/2) / (games + 1)``, so an unplayed snapshot
  counts as even), so opponents the learner does not yet beat come up more often.

Every game updates the **Elo** ratings (``elo_k`` is Elo's K, 16 by default) of the learner and of
the snapshot it played; a new snapshot starts at the learner's rating of the moment. Games against
the latest self count in ``win_rate("latest")`` but move no rating (a player against itself).

The league saves with the run (``session.save``: every snapshot's weights in ``weights.safetensors``
under ``league/<name>/``, ratings, results and the sampling generator in ``meta.json``'s ``"league"``)
and reopens exactly (``Session.reopen(path, wb.SelfPlay(game, league=wb.League()))``);
:meth:`League.save` / :meth:`League.load` write and read one on its own (``league.json`` and one
``<name>.safetensors`` per snapshot). No pickle anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any

import numpy as np
import torch

from ..agents.contract import Agent
from ..checkpoint import CheckpointError, json_ready, read_json

__all__ = ["LATEST", "League", "Snapshot"]

LATEST = "latest"
"""The name of the learner's current self as an opponent."""

_SAMPLING = ("uniform", "pfsp")
_NAME = re.compile(r"^snapshot_\d+$")


@dataclasses.dataclass
class Snapshot:
    """One past self: its name (``snapshot_<update>``), the update it was taken at, its networks'
    weights (``net/<network>/<key>`` tensors on the CPU), its Elo rating and the learner's results
    against it (``wins``/``draws``/``losses`` are the learner's)."""

    name: str
    update: int
    weights: dict[str, torch.Tensor]
    rating: float
    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        """Games the learner played against it."""
        return self.wins + self.draws + self.losses

    def info(self) -> dict[str, Any]:
        """Its JSON-ready description (no weights)."""
        return {
            "name": self.name,
            "update": self.update,
            "rating": self.rating,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
        }


def _check_number(name: str, value: Any, low: float, *, integer: bool = False, high: float | None = None) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        raise TypeError(f"League {name}={value!r}: expected {'an integer' if integer else 'a number'}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"League {name}={value!r}: must be {bound}")


class League:
    """The learner's past selves as opponents, with Elo ratings (see the module's docstring).

    Args:
        snapshot_every: take a snapshot every this many learner updates (the first at update
            ``snapshot_every``).
        window: sample among the newest ``window`` snapshots (older ones stay rated and saved).
        sampling: ``"pfsp"`` (prioritised by the learner's score against each, AlphaStar's
            ``(1 - x) ** pfsp_power``) or ``"uniform"``.
        latest_share: the share of games played against the learner's current self.
        pfsp_power: the exponent ``p`` of PFSP's weighting.
        elo_k: Elo's K, the most one game moves a rating.
        initial_rating: the learner's rating before its first game.
        seed: seeds the generator that picks opponents and seats (the session's seed when None).

    Example::

        league = wb.League(snapshot_every=5, window=10, sampling="pfsp", latest_share=0.3)
        env = wb.SelfPlay(tictactoe_v3.env, league=league)
        session = wb.Session(wb.PPO(env), env, seed=0)
        session.run(steps=50_000)
        league.rating, league.win_rates(), league.pool_size
    """

    def __init__(
        self,
        snapshot_every: int = 10,
        *,
        window: int = 20,
        sampling: str = "pfsp",
        latest_share: float = 0.2,
        pfsp_power: float = 2.0,
        elo_k: float = 16.0,
        initial_rating: float = 1000.0,
        seed: int | None = None,
    ) -> None:
        _check_number("snapshot_every", snapshot_every, 1, integer=True)
        _check_number("window", window, 1, integer=True)
        if sampling not in _SAMPLING:
            raise ValueError(f"League sampling={sampling!r}: use 'pfsp' (AlphaStar's prioritised) or 'uniform'")
        _check_number("latest_share", latest_share, 0.0, high=1.0)
        _check_number("pfsp_power", pfsp_power, 0.0)
        _check_number("elo_k", elo_k, 0.0)
        _check_number("initial_rating", initial_rating, -1e9)
        if seed is not None:
            _check_number("seed", seed, 0, integer=True)
        self.snapshot_every = int(snapshot_every)
        self.window = int(window)
        self.sampling = sampling
        self.latest_share = float(latest_share)
        self.pfsp_power = float(pfsp_power)
        self.elo_k = float(elo_k)
        self.initial_rating = float(initial_rating)
        self.seed = seed
        self.rating = float(initial_rating)
        """The learner's Elo rating."""
        self.snapshots: list[Snapshot] = []
        """Every snapshot taken, oldest first."""
        self.latest_results = [0, 0, 0]  # the learner's wins, draws, losses against its latest self
        self.games = 0
        """Games recorded so far (all opponents)."""
        self.rng = np.random.default_rng(seed)
        """The generator that picks opponents and seats (saved with the league)."""

    def __repr__(self) -> str:
        return (
            f"League(pool_size={self.pool_size}, rating={self.rating:.1f}, games={self.games}, "
            f"sampling={self.sampling!r}, snapshot_every={self.snapshot_every})"
        )

    # -- the pool ---------------------------------------------------------------------------------

    @property
    def pool_size(self) -> int:
        """Snapshots in the pool."""
        return len(self.snapshots)

    @property
    def names(self) -> list[str]:
        """The snapshots' names, oldest first."""
        return [s.name for s in self.snapshots]

    def member(self, name: str) -> Snapshot:
        """The snapshot called ``name``; ``KeyError`` naming the pool when there is none."""
        for s in self.snapshots:
            if s.name == name:
                return s
        raise KeyError(f"no snapshot {name!r} in the league; it holds {self.names or 'none yet'}")

    def snapshot(self, agent: Agent) -> Snapshot:
        """Add a snapshot of ``agent``'s networks now (rated at the learner's current rating)."""
        update = int(agent.num_updates)
        weights = {
            f"net/{net_name}/{key}": t.detach().to("cpu", copy=True)
            for net_name, net in agent.networks.items()
            for key, t in net.state_dict().items()
        }
        name = f"snapshot_{update}"
        self.snapshots = [s for s in self.snapshots if s.name != name]
        snap = Snapshot(name=name, update=update, weights=weights, rating=self.rating)
        self.snapshots.append(snap)
        return snap

    def after_update(self, agent: Agent) -> bool:
        """Called after each learner update: takes a snapshot when ``agent.num_updates`` is a multiple
        of ``snapshot_every``. True when it took one."""
        n = int(agent.num_updates)
        if n > 0 and n % self.snapshot_every == 0 and not (self.snapshots and self.snapshots[-1].update == n):
            self.snapshot(agent)
            return True
        return False

    # -- picking an opponent ----------------------------------------------------------------------

    def score_against(self, name: str) -> float:
        """The learner's smoothed score against ``name``: ``(wins + draws/2 + 1/2) / (games + 1)``."""
        if name == LATEST:
            w, d, lo = self.latest_results
        else:
            s = self.member(name)
            w, d, lo = s.wins, s.draws, s.losses
        return (w + 0.5 * d + 0.5) / (w + d + lo + 1)

    def probabilities(self) -> dict[str, float]:
        """Each possible opponent's chance to be picked for the next game (``"latest"`` included)."""
        window = self.snapshots[-self.window :]
        if not window:
            return {LATEST: 1.0}
        if self.sampling == "uniform":
            weights = np.ones(len(window))
        else:
            scores = np.array([self.score_against(s.name) for s in window])
            weights = np.maximum(1.0 - scores, 1e-6) ** self.pfsp_power
        weights = weights / weights.sum() * (1.0 - self.latest_share)
        out = {s.name: float(w) for s, w in zip(window, weights)}
        out[LATEST] = self.latest_share
        return out

    def sample(self) -> str:
        """Pick the next game's opponent (a snapshot's name or ``"latest"``) by the league's rule."""
        probs = self.probabilities()
        names = list(probs)
        p = np.array([probs[n] for n in names])
        return str(names[int(self.rng.choice(len(names), p=p / p.sum()))])

    # -- results and ratings ----------------------------------------------------------------------

    def expected(self, rating: float, other: float) -> float:
        """Elo's expected score of a player rated ``rating`` against one rated ``other``."""
        return 1.0 / (1.0 + 10.0 ** ((other - rating) / 400.0))

    def record(self, opponent: str, score: float) -> None:
        """Record one game of the learner against ``opponent`` (``score``: 1 win, 0.5 draw, 0 loss) and
        update both Elo ratings (none against ``"latest"``)."""
        if score not in (0.0, 0.5, 1.0):
            raise ValueError(f"a game's score is 1 (win), 0.5 (draw) or 0 (loss), got {score!r}")
        slot = 0 if score == 1.0 else 1 if score == 0.5 else 2
        self.games += 1
        if opponent == LATEST:
            self.latest_results[slot] += 1
            return
        snap = self.member(opponent)
        if slot == 0:
            snap.wins += 1
        elif slot == 1:
            snap.draws += 1
        else:
            snap.losses += 1
        delta = self.elo_k * (score - self.expected(self.rating, snap.rating))
        self.rating += delta
        snap.rating -= delta

    def win_rate(self, name: str) -> float | None:
        """The learner's share of games won against ``name`` (None before the first game)."""
        if name == LATEST:
            w, d, lo = self.latest_results
        else:
            s = self.member(name)
            w, d, lo = s.wins, s.draws, s.losses
        games = w + d + lo
        return None if games == 0 else w / games

    def win_rates(self) -> dict[str, float]:
        """The learner's win rate against each opponent it has played (``"latest"`` included)."""
        out = {}
        for name in [*self.names, LATEST]:
            rate = self.win_rate(name)
            if rate is not None:
                out[name] = rate
        return out

    def ratings(self) -> dict[str, float]:
        """Every Elo rating: ``"learner"`` and each snapshot."""
        return {"learner": self.rating, **{s.name: s.rating for s in self.snapshots}}

    def table(self) -> list[dict[str, Any]]:
        """One row per pool member, oldest first: name, update, rating, the learner's wins, draws,
        losses and win rate against it, and its chance to be picked next (the notebook's table)."""
        probs = self.probabilities()
        rows = []
        for s in list(self.snapshots):  # a copy: the dashboard reads it while the training thread adds
            rows.append({**s.info(), "win_rate": self.win_rate(s.name), "pick": probs.get(s.name, 0.0)})
        w, d, lo = self.latest_results
        rows.append(
            {
                "name": LATEST,
                "update": None,
                "rating": self.rating,
                "wins": w,
                "draws": d,
                "losses": lo,
                "win_rate": self.win_rate(LATEST),
                "pick": probs.get(LATEST, 0.0),
            }
        )
        return rows

    def signals(self) -> dict[str, float]:
        """The live signals: ``rating``, ``pool_size`` and ``win_rate/<opponent>`` for each opponent played."""
        out = {"rating": self.rating, "pool_size": float(self.pool_size)}
        for name, rate in self.win_rates().items():
            out[f"win_rate/{name}"] = rate
        return out

    # -- saving -----------------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        """The league as JSON-ready data (settings, ratings, results, the generator), weights aside."""
        return json_ready(
            {
                "format": "workbench-league",
                "version": 1,
                "settings": {
                    "snapshot_every": self.snapshot_every,
                    "window": self.window,
                    "sampling": self.sampling,
                    "latest_share": self.latest_share,
                    "pfsp_power": self.pfsp_power,
                    "elo_k": self.elo_k,
                    "initial_rating": self.initial_rating,
                    "seed": self.seed,
                },
                "rating": self.rating,
                "games": self.games,
                "latest_results": list(self.latest_results),
                "snapshots": [s.info() for s in self.snapshots],
                "rng": self.rng.bit_generator.state,
            }
        )

    def tensors(self, prefix: str = "league/") -> dict[str, torch.Tensor]:
        """Every snapshot's weights, keyed ``<prefix><name>/net/<network>/<key>``."""
        return {f"{prefix}{s.name}/{key}": t for s in self.snapshots for key, t in s.weights.items()}

    def load_state(self, meta: Any, tensors: dict[str, torch.Tensor], label: str, prefix: str = "league/") -> None:
        """Put a saved league (:meth:`meta` and :meth:`tensors` of one) into this one, replacing its
        pool, ratings, results, settings and generator. ``CheckpointError`` naming ``label`` and the
        field when something does not fit."""
        if not isinstance(meta, dict) or meta.get("format") != "workbench-league":
            raise CheckpointError(f"{label}: not a saved league (no 'format': 'workbench-league')")
        if meta.get("version") != 1:
            raise CheckpointError(f"{label}: league format version {meta.get('version')!r}; this library reads 1")
        try:
            settings = dict(meta["settings"])
            fresh = League(**settings)
            snapshots = []
            for i, info in enumerate(meta["snapshots"]):
                name = info["name"]
                if not isinstance(name, str) or not _NAME.match(name):
                    raise ValueError(f"snapshots[{i}].name {name!r} is not snapshot_<update>")
                start = f"{prefix}{name}/"
                weights = {k[len(start) :]: t for k, t in tensors.items() if k.startswith(start)}
                if not weights:
                    raise ValueError(f"snapshot {name} has no weights")
                counts = [int(info[k]) for k in ("wins", "draws", "losses")]
                if min(counts) < 0:
                    raise ValueError(f"snapshots[{i}] has negative results {counts}")
                snapshots.append(Snapshot(name, int(info["update"]), weights, float(info["rating"]), *counts))
            latest = [int(v) for v in meta["latest_results"]]
            if len(latest) != 3 or min(latest) < 0:
                raise ValueError(f"latest_results {latest} is not three counts")
            fresh.rng.bit_generator.state = meta["rng"]
            rating, games = float(meta["rating"]), int(meta["games"])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{label}: the saved league does not fit ({exc})") from None
        self.__dict__.update(fresh.__dict__)
        self.snapshots, self.latest_results, self.rating, self.games = snapshots, latest, rating, games

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the league on its own to the directory ``path``: ``league.json`` and one
        ``<name>.safetensors`` per snapshot. Returns the path."""
        from safetensors.torch import save_file

        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        for s in self.snapshots:
            tmp = os.path.join(path, f".{s.name}.safetensors.tmp")
            save_file({k: t.contiguous() for k, t in s.weights.items()}, tmp)
            os.replace(tmp, os.path.join(path, f"{s.name}.safetensors"))
        tmp = os.path.join(path, ".league.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.meta(), f, indent=1)
        os.replace(tmp, os.path.join(path, "league.json"))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> League:
        """Read a league :meth:`save` wrote, or the league of a run saved by a self-play session
        (``session.save``); ``CheckpointError`` naming the file when it cannot."""
        from safetensors.torch import load_file

        path = os.fspath(path)
        league = cls()
        single = os.path.join(path, "league.json")
        if os.path.isfile(single):
            meta = read_json(single, single)
            tensors: dict[str, torch.Tensor] = {}
            for info in meta.get("snapshots", []) if isinstance(meta, dict) else []:
                name = str(info.get("name", ""))
                if not _NAME.match(name):
                    raise CheckpointError(f"{single}: snapshot name {name!r} is not snapshot_<update>")
                file = os.path.join(path, f"{name}.safetensors")
                try:
                    weights = load_file(file)
                except Exception as exc:
                    raise CheckpointError(f"{file}: cannot read the snapshot's weights ({exc})") from None
                tensors.update({f"league/{name}/{k}": t for k, t in weights.items()})
            league.load_state(meta, tensors, single)
            return league
        from ..agents.saving import open_saved

        with open_saved(path) as run:
            if "league" not in run.meta:
                raise CheckpointError(f"{run.label('meta.json')}: the run holds no league (it was not self-play)")
            league.load_state(run.meta["league"], run.tensors(), run.label("meta.json"))
        return league
