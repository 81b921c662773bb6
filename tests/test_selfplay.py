"""Self-play (wb.SelfPlay, wb.League): the opponent rule, Elo, the fixed players, a session's signals,
the league saved with the run and reopened exactly, and the errors at the call."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.selfplay import (
    TwoPlayerGame,
    connect_four_lookahead,
    play_game,
    random_player,
    tictactoe_minimax,
)

classic = pytest.importorskip("pettingzoo.classic")
tictactoe_v3, connect_four_v3, rps_v2 = classic.tictactoe_v3, classic.connect_four_v3, classic.rps_v2


class _Net:
    """Stands for an agent in League.snapshot: declared networks and an update count."""

    def __init__(self, updates: int) -> None:
        self.networks = {"actor": torch.nn.Linear(2, 2)}
        self.num_updates = updates


def _league_with(n: int, **kwargs) -> wb.League:
    league = wb.League(**kwargs)
    for i in range(1, n + 1):
        league.snapshot(_Net(i))  # type: ignore[arg-type]
    return league


def test_sampling_rule_uniform_pfsp_window_and_latest_share() -> None:
    league = _league_with(4, window=3, sampling="uniform", latest_share=0.4)
    probs = league.probabilities()
    assert set(probs) == {"snapshot_2", "snapshot_3", "snapshot_4", "latest"}  # the newest 3 only
    assert probs["latest"] == pytest.approx(0.4)
    assert probs["snapshot_2"] == pytest.approx(0.2) and probs["snapshot_4"] == pytest.approx(0.2)
    pfsp = _league_with(2, sampling="pfsp", latest_share=0.0, pfsp_power=2.0)
    for _ in range(9):
        pfsp.record("snapshot_1", 1.0)  # the learner beats snapshot_1: it comes up less often
    for _ in range(9):
        pfsp.record("snapshot_2", 0.0)
    p = pfsp.probabilities()
    x1, x2 = (9 + 0.5) / 10, 0.5 / 10
    w1, w2 = (1 - x1) ** 2, (1 - x2) ** 2
    assert p["snapshot_1"] == pytest.approx(w1 / (w1 + w2))
    assert p["snapshot_2"] > 0.9
    picks = [pfsp.sample() for _ in range(200)]
    assert picks.count("snapshot_2") > 170
    assert wb.League().probabilities() == {"latest": 1.0}  # an empty pool: the latest self


def test_elo_updates_with_k_and_latest_moves_nothing() -> None:
    league = _league_with(1, elo_k=32.0, initial_rating=1000.0)
    league.rating = 1100.0
    expected = 1 / (1 + 10 ** ((1000 - 1100) / 400))
    league.record("snapshot_1", 1.0)
    assert league.rating == pytest.approx(1100 + 32 * (1 - expected))
    assert league.member("snapshot_1").rating == pytest.approx(1000 - 32 * (1 - expected))
    before = league.rating
    league.record("latest", 0.0)
    assert league.rating == before and league.win_rate("latest") == 0.0
    assert league.win_rates() == {"snapshot_1": 1.0, "latest": 0.0}
    signals = league.signals()
    assert signals["pool_size"] == 1.0 and signals["rating"] == league.rating
    assert signals["win_rate/snapshot_1"] == 1.0
    with pytest.raises(ValueError, match="score"):
        league.record("snapshot_1", 2.0)
    with pytest.raises(KeyError, match="snapshot_9"):
        league.record("snapshot_9", 1.0)


def test_snapshot_every_updates() -> None:
    league = wb.League(snapshot_every=3)
    taken = [league.after_update(_Net(n)) for n in range(1, 8)]  # type: ignore[arg-type]
    assert taken == [False, False, True, False, False, True, False]
    assert league.names == ["snapshot_3", "snapshot_6"]


def test_past_selves_sample_their_policy() -> None:
    """An opponent that always played its best move would teach the learner one line of each game."""
    env = wb.SelfPlay(tictactoe_v3.env)
    agent = wb.PPO(env, seed=0)
    env.bind(agent)
    obs = {"observation": np.zeros(18, np.float32), "action_mask": np.ones(9, np.int8)}
    opponent = env.opponent_agent("latest")
    assert len({int(opponent.act(obs)) for _ in range(40)}) > 1
    assert len({int(opponent.act(obs, deterministic=True)) for _ in range(10)}) == 1
    env.reset(seed=0)
    openings = set()
    for seed in range(40):  # the opponent's opening moves vary from game to game
        obs, info = env.reset(seed=seed)
        if info["seat"] == "player_2":
            openings.add(int(np.flatnonzero(obs["observation"][1::2])[0]))
    assert len(openings) > 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"snapshot_every": 0},
        {"window": 0},
        {"sampling": "best"},
        {"latest_share": 1.5},
        {"elo_k": -1},
        {"snapshot_every": 2.5},
    ],
)
def test_league_arguments_are_checked(kwargs) -> None:
    with pytest.raises((ValueError, TypeError), match="League"):
        wb.League(**kwargs)


def test_reference_players() -> None:
    rng = np.random.default_rng(0)
    game = TwoPlayerGame(tictactoe_v3.env)
    results = [play_game(game, {"player_1": tictactoe_minimax, "player_2": random_player}, rng) for _ in range(20)]
    results += [play_game(game, {"player_1": random_player, "player_2": tictactoe_minimax}, rng) for _ in range(20)]
    assert sum(r["player_1"] for r in results[:20]) >= 18 and all(r["player_1"] >= 0.5 for r in results[:20])
    assert all(r["player_2"] >= 0.5 for r in results[20:])  # minimax never loses
    assert all(
        play_game(game, {"player_1": tictactoe_minimax, "player_2": tictactoe_minimax}, rng)["player_1"] == 0.5
        for _ in range(5)
    )
    # Connect Four: the lookahead takes a win, else blocks one.
    board = np.zeros((6, 7, 2), np.int8)
    board[5, 0:3, 0] = 1  # three of mine on the bottom row: column 3 wins
    board[5, 4:6, 1] = 1
    mask = np.ones(7, np.int8)
    assert connect_four_lookahead(board, mask, rng) == 3
    board = np.zeros((6, 7, 2), np.int8)
    board[3:6, 6, 1] = 1  # three of theirs stacked in column 6: block it
    assert connect_four_lookahead(board, mask, rng) == 6


def test_a_share_of_training_games_against_the_references() -> None:
    """``reference_share``: that share of games against a fixed player (a random one here), tallied apart and not
    rated; the rest are self-play, as before."""
    env = wb.SelfPlay(tictactoe_v3.env, league=wb.League(seed=0), references=["random"], reference_share=0.5)
    env.bind(wb.PPO(env, seed=0))
    opponents = []
    for seed in range(60):
        obs, info = env.reset(seed=seed)
        opponents.append(info["opponent"])
        done = False
        while not done:
            obs, _, done, _, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
        assert info["opponent"] == opponents[-1]
    against = opponents.count("random")
    assert 15 < against < 45 and set(opponents) == {"random", "latest"}
    assert sum(env.reference_results["random"]) == against  # tallied apart ...
    assert env.league.games == 60 - against  # ... and not in the league's ratings
    # By default every game is self-play: no reference plays, all are rated.
    pure = wb.SelfPlay(tictactoe_v3.env, league=wb.League(seed=0))
    pure.bind(wb.PPO(pure, seed=0))
    for seed in range(20):
        obs, info = pure.reset(seed=seed)
        assert info["opponent"] == "latest"
        done = False
        while not done:
            obs, _, done, _, _ = pure.step(int(np.flatnonzero(obs["action_mask"])[0]))
    assert pure.league.games == 20 and pure.reference_results == {"random": [0, 0, 0]}
    # A share for some references only: the evaluation's minimax never plays a training game.
    some = wb.SelfPlay(tictactoe_v3.env, references=["random", "minimax"], reference_share={"random": 0.3})
    assert some.reference_share == {"random": 0.3}
    assert wb.SelfPlay(tictactoe_v3.env, references=["random", "minimax"], reference_share=0.2).reference_share == {
        "random": pytest.approx(0.1),
        "minimax": pytest.approx(0.1),
    }
    for bad in (-0.1, 1.0, float("nan"), "half", True, {"random": 1.0}, {"random": "x"}):
        with pytest.raises(ValueError, match="reference_share"):
            wb.SelfPlay(tictactoe_v3.env, reference_share=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one of the references"):
        wb.SelfPlay(tictactoe_v3.env, reference_share={"minimax": 0.1})
    with pytest.raises(ValueError, match="sums to 1"):
        wb.SelfPlay(tictactoe_v3.env, references=["random", "minimax"], reference_share={"random": 0.5, "minimax": 0.5})
    with pytest.raises(ValueError, match="needs references"):
        wb.SelfPlay(tictactoe_v3.env, references=[], reference_share=0.2)


def _session(**league_kwargs):
    env = wb.SelfPlay(
        tictactoe_v3.env,
        league=wb.League(snapshot_every=2, **league_kwargs),
        references=["random", "minimax"],
        reference_every=2,
        reference_games=4,
    )
    agent = wb.PPO(env, n_steps=64, batch_size=32, n_epochs=1)
    return env, agent, wb.Session(agent, env, seed=0)


def test_selfplay_session_signals_masks_and_snapshots() -> None:
    env, agent, session = _session()
    session.run(steps=64 * 4)
    league = env.league
    assert agent.num_updates == 4 and league.names == ["snapshot_2", "snapshot_4"]
    assert league.games > 0
    for name in ("rating", "pool_size", "win_rate/latest", "win_rate/random", "draw_rate/minimax"):
        assert name in session.signals, name
    assert session.signals["pool_size"].last == 2.0
    assert session.signals["rating"].last == league.rating
    # Every observation carries the seat's legal moves; a full board is never offered.
    obs, info = env.reset(seed=3)
    assert info["seat"] in ("player_1", "player_2") and obs["observation"].shape == (18,)
    assert obs["action_mask"].sum() in (8, 9)
    done = False
    while not done:
        legal = np.flatnonzero(obs["action_mask"])
        obs, reward, done, _, info = env.step(int(legal[0]))
    assert reward in (-1.0, 0.0, 1.0) and info["score"] in (0.0, 0.5, 1.0)
    result = env.evaluate(agent, "random", games=6)
    assert result["games"] == 6 and result["win"] + result["draw"] + result["loss"] == pytest.approx(1.0)
    snap = league.member("snapshot_2")
    player = env.opponent_agent("snapshot_2")  # what a person plays against
    for net_name, net in player.networks.items():
        for key, t in net.state_dict().items():
            assert torch.equal(t, snap.weights[f"net/{net_name}/{key}"])


@pytest.mark.parametrize("suffix", ["", ".zip"])
def test_league_saves_with_the_run_and_reopens_exactly(tmp_path, suffix) -> None:
    env, agent, session = _session(sampling="uniform")
    session.run(steps=64 * 4)
    path = session.save(tmp_path / f"run{suffix}")
    saved = env.league.meta()
    env2 = wb.SelfPlay(tictactoe_v3.env, league=wb.League())
    session2 = wb.Session.reopen(path, env2)
    assert env2.league.meta() == env.league.meta()  # settings, ratings, results, the sampling generator
    for a, b in zip(env.league.snapshots, env2.league.snapshots):
        assert a.weights.keys() == b.weights.keys()
        assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert [env.league.sample() for _ in range(5)] == [env2.league.sample() for _ in range(5)]
    session2.run(steps=64 * 2)
    assert env2.league.names[-1] == "snapshot_6"
    # The league alone: from the run, and written and read on its own (safetensors and JSON).
    alone = wb.League.load(path)
    assert alone.meta() == saved
    out = alone.save(tmp_path / "league")
    assert sorted(p.name for p in (tmp_path / "league").iterdir()) == [
        "league.json",
        "snapshot_2.safetensors",
        "snapshot_4.safetensors",
    ]
    assert wb.League.load(out).meta() == alone.meta()
    with pytest.raises(wb.CheckpointError, match="no league"):
        wb.League.load(wb.PPO("CartPole-v1").save(tmp_path / "plain"))


def test_training_games_against_the_references_save_and_reopen(tmp_path) -> None:
    """The tally of ``reference_share``'s games goes into the saved run and comes back on reopening; a broken
    tally in the file is refused, naming it."""

    def build() -> wb.SelfPlay:
        return wb.SelfPlay(tictactoe_v3.env, league=wb.League(seed=0), references=["random"], reference_share=0.5)

    env = build()
    session = wb.Session(wb.PPO(env, n_steps=64, batch_size=32, n_epochs=1), env, seed=0)
    session.run(steps=64 * 2)
    played = list(env.reference_results["random"])
    assert sum(played) > 0
    path = session.save(tmp_path / "run")
    env2 = build()
    wb.Session.reopen(path, env2)
    assert env2.reference_results == {"random": played}
    meta_file = tmp_path / "run" / "meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["reference_results"] == {"random": played}
    meta["reference_results"] = {"random": [1, -2, 3]}
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(wb.CheckpointError, match=r"reference_results\['random'\]"):
        wb.Session.reopen(path, build())


def test_parallel_env_game_and_errors() -> None:
    env = wb.SelfPlay(lambda: rps_v2.parallel_env(max_cycles=3))  # simultaneous moves, through parallel_to_aec
    agent = wb.PPO(env, n_steps=32, batch_size=16, n_epochs=1)
    session = wb.Session(agent, env, seed=1)
    session.run(steps=32)
    assert env.league.games > 0
    with pytest.raises(ValueError, match="num_workers"):
        wb.Session(agent, env, num_workers=2)
    with pytest.raises(TypeError, match="two-player PettingZoo game"):
        wb.SelfPlay("CartPole-v1")
    with pytest.raises(TypeError, match="wb.League"):
        wb.SelfPlay(tictactoe_v3.env, league={"snapshot_every": 2})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown reference"):
        wb.SelfPlay(tictactoe_v3.env, references=["alphazero"])
    fresh = wb.SelfPlay(tictactoe_v3.env)
    with pytest.raises(RuntimeError, match="no learner"):
        fresh.reset(seed=0)
    with pytest.raises(ValueError, match="other spaces"):
        fresh.bind(wb.PPO(wb.SelfPlay(connect_four_v3.env)))


def test_the_seat_ends_the_observation_where_asked() -> None:
    plain = wb.SelfPlay(lambda: rps_v2.parallel_env(max_cycles=3))
    env = wb.SelfPlay(lambda: rps_v2.parallel_env(max_cycles=3), seat_in_observation=True)
    n = plain.observation_space["observation"].shape[0]
    assert env.observation_space["observation"].shape == (n + 2,)
    env.bind(wb.PPO(env, n_steps=32, batch_size=16, n_epochs=1))
    seats = set()
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        one_hot = [0.0, 0.0]
        one_hot[env.game.players.index(info["seat"])] = 1.0
        assert obs["observation"][n:].tolist() == one_hot  # the learner's own seat, after the game's observation
        assert env.observation_space.contains(obs)
        seats.add(info["seat"])
    assert seats == set(env.game.players)  # both seats were played, each marked as its own
    # The opponent sees its own seat: every player's flat observation ends with that player's one-hot.
    game = env.new_game()
    game.reset(seed=0)
    for i, player in enumerate(game.players):
        assert game.observe(player)[1][n:].tolist() == [float(i == 0), float(i == 1)]
    assert env.evaluate(games=4)["games"] == 4.0
    # A board's Box bounds are kept, the seat's [0, 1] appended, and every observation lies within them.
    board = wb.SelfPlay(tictactoe_v3.env, seat_in_observation=True)
    box = board.observation_space["observation"]
    assert box.shape == (20,) and box.low.tolist() == [0.0] * 20 and box.high.tolist() == [1.0] * 20
    board.bind(wb.PPO(board, n_steps=32, batch_size=16, n_epochs=1))
    obs, info = board.reset(seed=3)
    assert board.observation_space.contains(obs) and obs["observation"][18:].sum() == 1.0
    with pytest.raises(TypeError, match="seat_in_observation"):
        wb.SelfPlay(tictactoe_v3.env, seat_in_observation="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="other spaces.*same seat_in_observation"):  # built without the seat
        env.bind(wb.PPO(plain))


def test_an_atari_game_trains_with_the_seat_in_its_observation() -> None:
    """PettingZoo's Atari Pong (ROMs from ale-py): both players see the same RAM, so the seat is added."""
    env = wb.SelfPlay(_pong(max_cycles=60), league=wb.League(snapshot_every=1), seat_in_observation=True)
    assert env.observation_space["observation"].shape == (130,)  # 128 bytes of RAM, then the seat
    agent = wb.PPO(env, n_steps=64, batch_size=32, n_epochs=1)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=192)
    assert agent.num_updates == 3 and env.league.games > 0 and len(env.league.snapshots) == 3
    assert session.signals["pool_size"].last == 3
    assert len(session.signals["rating"].values) == 3
    first, second = env.game.players
    env.game.reset(seed=0)
    a, b = env.game.observe(first)[1], env.game.observe(second)[1]
    assert np.array_equal(a[:128], b[:128]) and a[128:].tolist() == [1.0, 0.0] and b[128:].tolist() == [0.0, 1.0]


def _pong(**kwargs):
    """PettingZoo's Atari Pong from RAM, the ROMs ale-py ships (skipped without its two-player emulator)."""
    pytest.importorskip("multi_agent_ale_py")
    import os

    import ale_py
    from pettingzoo.atari import pong_v3

    roms = os.path.dirname(ale_py.__file__)
    return lambda: pong_v3.parallel_env(obs_type="ram", auto_rom_install_path=roms, **kwargs)


def test_a_person_plays_an_atari_game_by_keys_against_the_agent() -> None:
    env = wb.SelfPlay(_pong(max_cycles=12, render_mode="rgb_array"), seat_in_observation=True)
    agent = wb.PPO(env, n_steps=64, batch_size=32, n_epochs=1)
    env.bind(agent)
    versus = env.versus("latest")
    play = wb.HumanPlay(versus, seed=0)
    assert play.keys.describe().startswith("space: 1") and "no key: 0" in play.keys.describe()  # Atari's names
    assert play.frame.shape == (210, 160, 3)
    first_seat = versus.seat
    assert first_seat == env.game.players[0]  # the person first in the first game
    play.press("right", steps=3)
    assert play.episodes == 0 and play.steps == 3
    while play.episodes < 2:
        play.press("left")
    assert play.steps == 24 and versus.seat == first_seat  # 12 moves a game; the third game: the first seat again
    data = play.dataset
    assert len(data) == 24 and data.observations.shape == (24, 130)  # the learner's format: RAM, then the seat
    assert data.observations[:12, 128:].tolist() == [[1.0, 0.0]] * 12  # game 1: the first seat
    assert data.observations[12:, 128:].tolist() == [[0.0, 1.0]] * 12  # game 2: the second
    assert set(data.actions[:3].tolist()) == {2} and set(data.actions[3:].tolist()) == {3}  # RIGHT, then LEFT
    play.close()
    with pytest.raises(ValueError, match="versus"):  # no board: not played by clicks
        wb.HumanPlay(env)
    quiet = wb.SelfPlay(_pong(max_cycles=12), seat_in_observation=True)
    quiet.bind(wb.PPO(quiet, n_steps=64, batch_size=32, n_epochs=1))
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        quiet.versus()


def test_a_person_plays_the_board_by_clicks_and_is_recorded() -> None:
    from workbench.human import BoardPlay

    env, agent, session = _session()
    session.run(steps=64 * 2)
    play = wb.HumanPlay(env, opponent="snapshot_2", seed=0)
    assert isinstance(play, BoardPlay) and play.person == "player_1" and play.board().sum() == 0
    with pytest.raises(ValueError, match="not legal"):
        play.move(9)
    view = play.widget()  # the board as buttons: a click is the person's move, the agent replies
    view.squares[1][1].click()
    board = play.board()
    assert board[1, 1] == 1 and (board == 2).sum() == 1 and view.squares[1][1].description == "X"
    assert view.squares[1][1].disabled
    while not play.over:
        play.move(int(np.flatnonzero(play.legal)[0]))
    assert play.episodes == 1 and sum(play.results.values()) == 1
    assert "game over" in view.status.value
    with pytest.raises(ValueError, match="game is over"):
        play.move(0)
    ds = play.dataset  # demonstrations in the learner's observation format
    assert ds.observations.shape[1] == 18 and ds.terminated[-1] and ds.num_episodes == 1
    wb.BC(dataset=ds)  # fits an agent of the same env
    play.new_game()  # the seats swap: the agent opens
    assert play.person == "player_2" and (play.board() == 2).sum() == 1
    vs_agent = wb.HumanPlay(env, opponent=agent)
    assert vs_agent.opponent is agent
    four = wb.SelfPlay(connect_four_v3.env)
    four.bind(wb.PPO(four))
    drop = wb.HumanPlay(four)
    assert drop.columns and drop.click(0, 3)  # any square of a column drops a piece to its bottom
    assert drop.board()[5, 3] == 1


def test_dashboard_shows_the_rating_and_the_league_table() -> None:
    pytest.importorskip("ipywidgets")
    from workbench.ui.dashboard import league_html

    env, _, session = _session()
    session.run(steps=64 * 2)
    dash = wb.Dashboard(session)
    assert dash.signal_select.value[0] == "rating"
    dash.refresh()
    html = dash.league_table.value
    assert "snapshot_2" in html and "latest" in html and "win rate" in html
    assert league_html(env.league.table()).count("<tr>") == env.league.pool_size + 2
    dash.close()
