"""Atari preprocessing as the rl-zoo's (episodic life, clipped rewards with the raw game score kept,
fire and no-op resets, the options of ``make_env``) and PPO/A2C's shared CNN encoder."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.envs import VecEnv, make_env
from workbench.envs.atari import AtariTraining, FireReset, needs_fire, training_wrapper


class _Ale:
    def __init__(self, game: FakeGame) -> None:
        self.game = game

    def lives(self) -> int:
        return self.game.lives


class FakeGame(gym.Env):
    """An ALE-like game: 3 lives, a life lost every 5 steps, a reward of 5 on every step whose action is
    1 (FIRE), else 0; the game ends when the last life is lost. Remembers the actions since a reset."""

    observation_space = spaces.Box(0, 255, (16, 16, 3), np.uint8)
    action_space = spaces.Discrete(4)

    def __init__(self) -> None:
        self.ale = _Ale(self)
        self.lives = 3
        self.t = 0
        self.actions: list[int] = []
        self.resets = 0

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def _obs(self) -> np.ndarray:
        return np.full((16, 16, 3), 40 * self.lives, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.lives, self.t, self.actions = 3, 0, []
        self.resets += 1
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.actions.append(int(action))
        if self.t % 5 == 0:
            self.lives -= 1
        return self._obs(), 5.0 if int(action) == 1 else 0.0, self.lives == 0, False, {}


def test_episodic_life_ends_training_episodes_per_life_and_reports_the_whole_game():
    game = FakeGame()
    vec = VecEnv([AtariTraining(game)], seed=0)
    vec.reset()
    ends, games = [], []
    for _ in range(26):  # two whole games: 13 agent steps and 2 no-ops after lost lives each
        _, rewards, terminated, _, _ = vec.step(np.array([1]))
        assert rewards[0] == 1.0  # the agent learns the clipped reward (the game gave 5)
        ends.append(bool(terminated[0]))
        if not np.isnan(vec.game_ends[0, 0]):
            games.append(tuple(vec.game_ends[0]))
    assert sum(ends) == 6  # 3 lives a game: every lost life ends a training episode
    assert games == [(65.0, 15.0), (65.0, 15.0)]  # the raw score and length of each whole game
    assert game.resets == 3  # the game itself is reset only at game over (and at the start)


def test_session_records_raw_game_scores_while_the_agent_learns_clipped_rewards():
    agent = wb.PPO(
        lambda: AtariTraining(FakeGame()),
        n_steps=15,
        n_envs=1,
        batch_size=15,
        n_epochs=1,
        net_arch=(8,),
        encoder="small",
    )
    seen: list[np.ndarray] = []
    observe = agent.observe
    agent.observe = lambda t: (seen.append(t.rewards.copy()), observe(t))[1]  # type: ignore[method-assign]
    session = wb.Session(agent, lambda: AtariTraining(FakeGame()), seed=0)
    session.run(steps=39)
    assert set(np.concatenate(seen).tolist()) <= {0.0, 1.0}
    scores = session.signals["episode_reward"].values
    lengths = session.signals["episode_length"].values
    assert len(scores) == 3 and set(np.asarray(lengths).tolist()) == {15.0}  # whole games, not lives
    assert all(s % 5 == 0 for s in scores) and max(scores) > 1  # raw scores (multiples of 5), not clipped
    # Play and evaluation run whole games with raw rewards.
    returns = agent.play(lambda: AtariTraining(FakeGame()), episodes=2, seed=0)
    assert list(returns.lengths) == [15, 15] and all(r % 5 == 0 for r in returns)


def test_local_workers_carry_the_raw_game_scores():
    agent = wb.PPO(
        lambda: AtariTraining(FakeGame()),
        n_steps=15,
        n_envs=2,
        batch_size=30,
        n_epochs=1,
        net_arch=(8,),
        encoder="small",
    )
    session = wb.Session(agent, lambda: AtariTraining(FakeGame()), num_workers=2, backend="local", seed=0)
    session.run(steps=60)
    scores = session.signals["episode_reward"].values
    assert len(scores) == 4 and set(np.asarray(session.signals["episode_length"].values).tolist()) == {15.0}
    assert all(s % 5 == 0 for s in scores)


def test_play_on_a_training_instance_restores_training_mode():
    env = AtariTraining(FakeGame())
    agent = wb.A2C(lambda: AtariTraining(FakeGame()), net_arch=(8,), encoder="small")
    returns = agent.play(env, episodes=1)
    assert list(returns.lengths) == [15]
    assert env.training
    env.reset()
    terminated = [env.step(0)[2] for _ in range(5)]
    assert terminated[-1]  # a lost life ends the episode again


def test_fire_reset_presses_fire_then_up_after_every_reset_including_a_lost_life():
    game = FakeGame()
    env = FireReset(AtariTraining(game))
    assert needs_fire(env)
    env.reset(seed=0)
    assert game.actions == [1, 2]
    for _ in range(3):
        terminated = env.step(0)[2]
    assert terminated  # life lost at step 5 (2 presses + 3 steps)
    env.reset()  # the same game goes on: a no-op, then FIRE and UP again
    assert game.actions[-3:] == [0, 1, 2] and game.lives == 2


def test_wrappers_can_be_switched_off_and_report_no_game_ends():
    vec = VecEnv([AtariTraining(FakeGame(), episodic_life=False, clip_rewards=False)])
    vec.reset()
    rewards = [vec.step(np.array([1]))[1][0] for _ in range(15)]
    assert rewards == [5.0] * 15
    assert vec.game_ends[0, 0] == 75.0
    assert VecEnv([FakeGame()]).game_ends is None
    assert training_wrapper(FireReset(AtariTraining(FakeGame()))) is not None


def test_make_env_builds_the_zoo_preprocessing_with_options():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    env = make_env("BreakoutNoFrameskip-v4")
    assert env.observation_space.shape == (4, 84, 84)
    chain = []
    e = env
    while e is not None:
        chain.append(type(e).__name__)
        e = getattr(e, "env", None)
    assert chain[:4] == ["FrameStackObservation", "FireReset", "AtariTraining", "AtariPreprocessing"]
    pre = env.env.env.env
    assert pre.noop_max == 30 and pre.frame_skip == 4 and not pre.terminal_on_life_loss
    bare = make_env(
        "BreakoutNoFrameskip-v4", episodic_life=False, clip_rewards=False, fire_reset=False, frame_stack=1, noop_max=0
    )
    assert bare.observation_space.shape == (84, 84) and type(bare).__name__ == "AtariPreprocessing"


def test_breakout_training_episodes_end_per_life_with_the_raw_score_per_game():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    vec = VecEnv([make_env("BreakoutNoFrameskip-v4")], seed=0)
    vec.reset()
    rng = np.random.default_rng(0)
    terminations, game = 0, None
    for _ in range(3000):
        terminations += int(vec.step(rng.integers(0, 4, 1))[2][0])
        if not np.isnan(vec.game_ends[0, 0]):
            game = vec.game_ends[0].copy()
            break
    assert game is not None and terminations == 5  # Breakout's 5 lives


# -- the shared encoder ------------------------------------------------------------------------


class Pictures(gym.Env):
    """36x36 RGB noise; reward 1 for action 1; 20 steps."""

    observation_space = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 255, (36, 36, 3), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.integers(0, 255, (36, 36, 3), dtype=np.uint8)
        return obs, float(action == 1), self.t >= 20, False, {}


def _agent(algo: str, **kw):
    extra = dict(batch_size=16, n_epochs=1) if algo == "PPO" else {}
    return getattr(wb, algo)(Pictures, n_steps=16, n_envs=2, net_arch=(16,), learning_rate=1e-3, **extra, **kw)


@pytest.mark.parametrize("algo", ["PPO", "A2C"])
def test_image_agents_share_one_cnn_trained_by_both_heads(algo, tmp_path):
    agent = _agent(algo)
    assert agent.encoder_shared and agent.actor[0] is agent.critic[0]
    assert repr(agent).count("shared by the policy and value networks") == 1
    wb.Session(agent, Pictures, seed=1).run(steps=1)  # the session's seed rebuilds the networks: said once still
    assert repr(agent).count("shared by the policy and value networks") == 1
    unique = {id(p) for p in [*agent.actor.parameters(), *agent.critic.parameters()]}
    in_optimizer = [p for g in agent.optimizer.param_groups for p in g["params"]]
    assert len(in_optimizer) == len(unique) == len({id(p) for p in in_optimizer})  # each parameter once
    # Both losses reach the one encoder.
    obs = torch.from_numpy(np.random.default_rng(0).integers(0, 255, (4, 36, 36, 3), dtype=np.uint8))
    encoder = agent.actor[0]
    for net in (agent.actor, agent.critic):
        encoder.zero_grad()
        net(obs).sum().backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())
    session = wb.Session(agent, Pictures, seed=0)
    session.run(steps=32)  # the session seeds (and so rebuilds) the networks, then one update
    encoder = agent.actor[0]
    before = [p.detach().clone() for p in encoder.parameters()]
    session.run(steps=32)
    assert agent.actor[0] is agent.critic[0] is encoder
    assert any(not torch.equal(a, b) for a, b in zip(before, encoder.parameters(), strict=True))
    agent.save(tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert "shared" in json.dumps(meta)
    loaded = wb.load(tmp_path / "run")
    assert loaded.encoder_shared and loaded.actor[0] is loaded.critic[0]
    x = np.random.default_rng(1).integers(0, 255, (5, 36, 36, 3), dtype=np.uint8)
    for a, b in ((agent.actor, loaded.actor), (agent.critic, loaded.critic)):
        with torch.no_grad():
            assert torch.equal(a(torch.from_numpy(x)), b(torch.from_numpy(x)))


def test_runs_saved_before_the_option_load_with_one_cnn_per_network(tmp_path):
    agent = _agent("PPO", share_encoder=False)
    agent.save(tmp_path / "run")
    meta_path = tmp_path / "run" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["hyperparameters"]["share_encoder"]  # as written before share_encoder existed
    meta_path.write_text(json.dumps(meta))
    loaded = wb.load(tmp_path / "run")
    assert not loaded.encoder_shared
    x = torch.from_numpy(np.random.default_rng(1).integers(0, 255, (3, 36, 36, 3), dtype=np.uint8))
    with torch.no_grad():
        assert torch.equal(agent.critic(x), loaded.critic(x)) and torch.equal(agent.actor(x), loaded.actor(x))


@pytest.mark.parametrize("algo", ["PPO", "A2C"])
def test_share_encoder_false_keeps_one_cnn_per_network(algo):
    agent = _agent(algo, share_encoder=False)
    assert not agent.encoder_shared and agent.actor[0] is not agent.critic[0]
    assert "shared" not in repr(agent)


def test_vector_observations_have_nothing_to_share():
    agent = wb.PPO("CartPole-v1")
    assert not agent.encoder_shared and agent.config.share_encoder


def test_the_shared_cnn_runs_once_per_batch_and_never_serves_stale_features():
    agent = _agent("PPO")
    encoder = agent.actor[0]
    calls = []
    encode = encoder.encode
    encoder.encode = lambda x: (calls.append(1), encode(x))[1]  # type: ignore[method-assign]
    obs = np.random.default_rng(0).integers(0, 255, (2, 36, 36, 3), dtype=np.uint8)
    agent.decide(obs)  # the policy and the value of one batch
    assert len(calls) == 1
    x = torch.from_numpy(obs)
    agent.actor(x)
    with torch.no_grad():
        next(encoder.parameters()).add_(1.0)  # the weights change: the features must be recomputed
    agent.critic(x)
    assert len(calls) == 3
