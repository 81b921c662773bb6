"""Sparse rewards and goals: HerReplay (workbench.memory.her), the bit-flipping env (workbench.envs.goals),
the success_rate signal, and the intrinsic rewards RND and ICM (workbench.agents.intrinsic)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.agents.intrinsic import ICMModule, RNDModule, intrinsic_from_dict
from workbench.envs.goals import BitFlippingEnv
from workbench.loop import Transitions
from workbench.memory.her import HerMemory, replay_from_dict

SMALL_DQN = dict(
    learning_starts=64,
    train_freq=4,
    gradient_steps=4,
    batch_size=32,
    learning_rate=2e-3,
    net_arch=(32,),
    target_update_interval=100,
    buffer_size=5000,
    exploration=wb.EpsilonGreedy(1.0, 0.05, 0.3),
    gamma=0.9,
)


def _bits(n: int = 4, **kwargs) -> BitFlippingEnv:
    return BitFlippingEnv(n_bits=n, **kwargs)


# -- the bit-flipping env ---------------------------------------------------------------------------


def test_bit_flipping_env_passes_gymnasiums_checker_and_is_registered():
    wb.check_env(BitFlippingEnv(5))
    env = gym.make("BitFlipping-v0", n_bits=7)
    obs, info = env.reset(seed=0)
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"} and obs["observation"].shape == (7,)
    assert info["is_success"] is False
    assert not np.array_equal(obs["achieved_goal"], obs["desired_goal"])


def test_bit_flipping_rewards_success_and_truncation():
    env = BitFlippingEnv(3)
    obs, _ = env.reset(seed=1)
    diff = np.flatnonzero(obs["achieved_goal"] != obs["desired_goal"])
    for k, bit in enumerate(diff):
        obs, reward, terminated, truncated, info = env.step(int(bit))
        last = k == len(diff) - 1
        assert reward == (0.0 if last else -1.0) and terminated == last and info["is_success"] == last
    assert not truncated
    env = BitFlippingEnv(3, max_steps=2)
    seed = 0
    while True:  # a start with a bit already right: flipping it twice never reaches the goal
        obs, _ = env.reset(seed=seed)
        same = np.flatnonzero(obs["achieved_goal"] == obs["desired_goal"])
        if same.size:
            break
        seed += 1
    _, _, terminated, truncated, _ = env.step(int(same[0]))
    assert not terminated and not truncated
    _, _, terminated, truncated, info = env.step(int(same[0]))
    assert truncated and not terminated and info["is_success"] is False
    # compute_reward takes batches
    a = np.array([[0, 1, 1], [1, 1, 1]], dtype=np.float32)
    assert env.compute_reward(a, np.ones((2, 3), np.float32), {}).tolist() == [-1.0, 0.0]


def test_bit_flipping_continuous_flips_the_positive_actions():
    env = BitFlippingEnv(4, continuous=True)
    obs, _ = env.reset(seed=0)
    before = obs["observation"].copy()
    obs, *_ = env.step(np.array([1.0, -1.0, 0.5, -0.2], dtype=np.float32))
    assert np.array_equal(obs["observation"], np.where([True, False, True, False], 1 - before, before))


def test_bit_flipping_refuses_bad_sizes():
    with pytest.raises(ValueError, match="n_bits"):
        BitFlippingEnv(0)


# -- the HER memory -------------------------------------------------------------------------------------


def _memory(capacity: int = 100, strategy: str = "future", k: int = 4) -> HerMemory:
    env = _bits(3)
    flat = spaces.flatten_space(env.observation_space)
    return HerMemory(
        wb.HerReplay(strategy=strategy, n_sampled_goal=k),
        capacity,
        env.observation_space,
        flat.shape,
        compute_reward=env.compute_reward,
        gamma=0.9,
    )


def _flat(state, goal) -> np.ndarray:
    # gymnasium sorts the Dict's keys: achieved_goal, desired_goal, observation
    return np.concatenate([state, goal, state]).astype(np.float32)


def _episode(memory: HerMemory, states: list, goal, terminated_last: bool, env: int = 0, n_envs: int = 1) -> None:
    for t in range(len(states) - 1):
        last = t == len(states) - 2
        obs = np.zeros((n_envs, 9), np.float32)
        nxt = np.zeros((n_envs, 9), np.float32)
        obs[env], nxt[env] = _flat(states[t], goal), _flat(states[t + 1], goal)
        term = np.zeros(n_envs, bool)
        trunc = np.zeros(n_envs, bool)
        term[env] = last and terminated_last
        trunc[env] = last and not terminated_last
        memory.add_steps(Transitions(obs, np.full(n_envs, t), np.full(n_envs, -1.0, np.float32), nxt, term, trunc))


STATES = [np.array(s, np.float32) for s in ([0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1])]


def test_her_keeps_episodes_until_they_end_and_marks_only_terminations_done():
    memory = _memory()
    goal = np.array([0, 1, 1], np.float32)
    _episode(memory, STATES[:3], goal, terminated_last=False)  # truncated: bootstraps
    assert len(memory) == 2 and memory.dones[:2].tolist() == [0.0, 0.0]
    _episode(memory, STATES, goal, terminated_last=True)
    assert len(memory) == 5 and memory.dones[2:5].tolist() == [0.0, 0.0, 1.0]
    assert memory.episode_length[:5].tolist() == [2, 2, 3, 3, 3]
    # an episode in progress is not sampled yet
    memory.add_steps(
        Transitions(
            _flat(STATES[0], goal)[None],
            np.array([0]),
            np.array([-1.0], np.float32),
            _flat(STATES[1], goal)[None],
            np.array([False]),
            np.array([False]),
        )
    )
    assert len(memory) == 5


def test_her_relabels_with_goals_achieved_later_in_the_same_episode():
    memory = _memory(k=1_000_000)  # (almost) every sample relabelled
    goal = np.array([0, 1, 1], np.float32)
    _episode(memory, STATES, goal, terminated_last=False)
    rng = np.random.default_rng(0)
    batch = memory.sample(400, rng)
    obs, next_obs = batch.obs.numpy(), batch.next_obs.numpy()
    for i, row in enumerate(batch.indices):
        new_goal = next_obs[i, 3:6]
        assert np.array_equal(obs[i, 3:6], new_goal)  # the same goal in obs and next_obs
        achieved_later = [STATES[j + 1] for j in range(int(row), 3)]  # "future": this step or later
        assert any(np.array_equal(new_goal, s) for s in achieved_later)
        expected = 0.0 if np.array_equal(next_obs[i, 0:3], new_goal) else -1.0
        assert batch.rewards[i].item() == expected
    assert (batch.rewards.numpy() == 0.0).any() and (batch.rewards.numpy() == -1.0).any()


@pytest.mark.parametrize("strategy", ["final", "episode"])
def test_her_final_and_episode_strategies(strategy):
    memory = _memory(strategy=strategy, k=1_000_000)
    goal = np.array([0, 1, 1], np.float32)
    _episode(memory, STATES, goal, terminated_last=False)
    batch = memory.sample(300, np.random.default_rng(1))
    goals = {tuple(g) for g in batch.obs.numpy()[:, 3:6]}
    if strategy == "final":
        assert goals == {(1.0, 1.0, 1.0)}
    else:
        assert goals == {tuple(s) for s in STATES[1:]}


def test_her_with_no_sampled_goals_replays_the_real_ones():
    memory = _memory(k=0)
    goal = np.array([0, 1, 1], np.float32)
    _episode(memory, STATES, goal, terminated_last=False)
    batch = memory.sample(50, np.random.default_rng(0))
    assert (batch.obs.numpy()[:, 3:6] == goal).all() and (batch.rewards.numpy() == -1.0).all()


def test_her_drops_whole_episodes_when_the_ring_overwrites_them():
    memory = _memory(capacity=7)
    goal = np.array([0, 1, 1], np.float32)
    _episode(memory, STATES, goal, terminated_last=False)  # rows 0-2
    _episode(memory, STATES, goal, terminated_last=False)  # rows 3-5
    _episode(memory, STATES, goal, terminated_last=False)  # rows 6, 0, 1: overwrites part of the first
    assert len(memory) == 6 and memory.valid.tolist() == [True, True, False, True, True, True, True]
    idx = memory.sample_indices(500, np.random.default_rng(0))
    assert 2 not in set(idx.tolist())
    arrays = memory.state_arrays()
    assert arrays["episode_lengths"].tolist() == [3, 3]
    assert arrays["actions"].tolist() == [0, 1, 2, 0, 1, 2]


def test_her_memory_saves_and_loads_without_pickle_pending_episodes_included(tmp_path):
    memory = _memory()
    goal = np.array([0, 1, 1], np.float32)
    _episode(memory, STATES, goal, terminated_last=True, env=1, n_envs=2)
    # env 0 is mid-episode: its steps so far are saved as a shorter episode
    memory.add_steps(
        Transitions(
            np.stack([_flat(STATES[0], goal)] * 2),
            np.array([0, 0]),
            np.full(2, -1.0, np.float32),
            np.stack([_flat(STATES[1], goal)] * 2),
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    )
    path = tmp_path / "memory.npz"
    memory.save(path)
    with np.load(path, allow_pickle=False) as data:
        # env 1's episode; env 0's all-zero steps, cut when its observations jumped; then each env's step so far
        assert data["episode_lengths"].tolist() == [3, 3, 1, 1]
    loaded = _memory().load(path)
    assert len(loaded) == 8 and loaded.dones[:8].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    assert np.array_equal(loaded.obs[:8], memory.state_arrays()["obs"])
    assert loaded.episode_length[:8].tolist() == [3, 3, 3, 3, 3, 3, 1, 1]


def test_her_memory_refuses_bad_saved_episode_lengths():
    memory = _memory()
    _episode(memory, STATES, np.array([0, 1, 1], np.float32), terminated_last=True)
    arrays = memory.state_arrays()
    arrays["episode_lengths"] = np.array([2], np.int64)
    with pytest.raises(ValueError, match="episode_lengths"):
        _memory().load_arrays(arrays, "memory.npz")
    del arrays["episode_lengths"]
    with pytest.raises(ValueError, match="without HerReplay"):
        _memory().load_arrays(arrays, "memory.npz")


# -- HER in the agents ----------------------------------------------------------------------------------


def test_dqn_with_her_trains_on_bit_flipping_and_records_success_rate():
    env = _bits(4)
    agent = wb.DQN(env, replay=wb.HerReplay(strategy="future", n_sampled_goal=4), **SMALL_DQN)
    assert isinstance(agent.memory, HerMemory)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=200)  # that HER learns the task: `make bench-check` (row dqn-her-bitflip)
    rate = session.signals["success_rate"]
    assert len(rate) == session.episodes > 0 and 0.0 <= rate.min() and rate.max() <= 1.0
    assert session.signals["loss"].values.size > 0


def test_success_rate_comes_from_info_is_success():
    class AlwaysSucceeds(BitFlippingEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated, truncated, {"is_success": True}

    env = AlwaysSucceeds(3)
    session = wb.Session(wb.DQN(env, learning_starts=10_000), env, seed=0)
    session.run(steps=30)
    assert session.episodes >= 10
    assert session.signals["success_rate"].values.tolist() == [1.0] * session.episodes
    plain = wb.Session(wb.DQN("CartPole-v1", learning_starts=10_000), "CartPole-v1", seed=0)
    plain.run(steps=50)
    assert "success_rate" not in plain.signals


@pytest.mark.slow
def test_her_with_local_workers_stores_whole_episodes_and_reports_success(monkeypatch):
    from workbench.parallel.local import LocalRunner

    monkeypatch.setattr(LocalRunner, "_start_timeout", 300.0)  # workers import torch for the env's module
    agent = wb.DQN(_bits, replay=wb.HerReplay(strategy="final"), n_envs=2, **SMALL_DQN)
    session = wb.Session(agent, _bits, seed=0, num_workers=2)
    session.run(steps=300)
    memory = agent.memory
    assert len(memory) > 0 and "success_rate" in session.signals
    arrays = memory.state_arrays()
    lengths = arrays["episode_lengths"]
    stored = np.cumsum(lengths) <= len(memory)  # the rest: the envs' episodes in progress
    ends = np.cumsum(lengths)[stored] - 1
    # every stored episode is whole: it ends with a termination or at the time limit (4 steps)
    assert stored.sum() >= 2 and ((arrays["dones"][ends] == 1) | (lengths[stored] == 4)).all()
    assert session.signals["loss"].last is not None


@pytest.mark.parametrize(
    ("cls", "extra"),
    [
        (wb.SAC, {}),
        (wb.TD3, {}),
        (wb.DDPG, {}),
        (wb.TQC, {"n_quantiles": 5}),
        (wb.CrossQ, {"critic_net_arch": (16,)}),
        (wb.DroQ, {"gradient_steps": 2}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_continuous_agents_take_her(cls, extra):
    env = _bits(3, continuous=True)
    agent = cls(
        env,
        replay=wb.HerReplay(n_sampled_goal=2),
        learning_starts=8,
        batch_size=16,
        net_arch=(16,),
        buffer_size=500,
        **extra,
    )
    session = wb.Session(agent, env, seed=0)
    session.run(steps=40)
    assert isinstance(agent.memory, HerMemory) and len(agent.memory) > 0
    assert agent.memory.actions.dtype == np.float32 and agent.memory.actions.shape[1:] == (3,)
    assert np.isfinite(session.signals["critic_loss"].last)


def test_her_agent_saves_and_reopens_with_its_memory(tmp_path):
    env = _bits(3)
    agent = wb.DQN(env, replay=wb.HerReplay(strategy="episode", n_sampled_goal=2), **SMALL_DQN)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=120)
    session.save(tmp_path / "run", memory=True)
    loaded = wb.load(tmp_path / "run")
    assert loaded.config.replay == wb.HerReplay(strategy="episode", n_sampled_goal=2)
    assert isinstance(loaded.memory, HerMemory) and loaded.memory.compute_reward is None
    reopened = wb.Session.reopen(tmp_path / "run", env)
    memory = reopened.agent.memory
    assert len(memory) >= len(agent.memory) and memory.compute_reward is not None
    reopened.run(steps=80)  # samples and relabels with the env's compute_reward
    assert reopened.agent.num_updates > agent.num_updates


def test_her_given_compute_reward_is_used():
    calls = []

    def reward(achieved, desired, info):
        calls.append(len(achieved))
        return -(np.abs(achieved - desired).sum(-1) > 0).astype(np.float32)

    env = _bits(3)
    agent = wb.DQN(env, replay=wb.HerReplay(compute_reward=reward), **SMALL_DQN)
    wb.Session(agent, env, seed=0).run(steps=100)
    assert calls and agent.memory.compute_reward is reward


def test_her_replay_round_trips_as_json():
    spec = wb.HerReplay(strategy="final", n_sampled_goal=6)
    assert replay_from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="no key"):
        replay_from_dict({"type": "HerReplay", "k": 1})


def test_her_is_refused_where_it_cannot_work():
    with pytest.raises(TypeError, match="PPO does not take replay=.*on-policy"):
        wb.PPO(_bits(3), replay=wb.HerReplay())
    with pytest.raises(TypeError, match="A2C does not take replay="):
        wb.A2C("CartPole-v1", replay=wb.HerReplay())
    with pytest.raises(ValueError, match="needs a goal env.*Box, not a Dict"):
        wb.DQN("CartPole-v1", replay=wb.HerReplay())
    for clash in ({"prioritized": True}, {"n_step": 3}, {"normalize_observations": True}):
        with pytest.raises(ValueError, match="cannot be combined with"):
            wb.DQN(_bits(3), replay=wb.HerReplay(), **clash)
    with pytest.raises(ValueError, match="strategy must be one of"):
        wb.HerReplay(strategy="later")
    with pytest.raises(ValueError, match="n_sampled_goal must be"):
        wb.HerReplay(n_sampled_goal=-1)
    with pytest.raises(ValueError, match="replay"):
        wb.DQN(_bits(3), replay="her")

    class NoReward(gym.Env):
        observation_space = _bits(3).observation_space
        action_space = spaces.Discrete(3)

    with pytest.raises(ValueError, match="has none"):
        wb.DQN(NoReward(), replay=wb.HerReplay())
    with pytest.raises(TypeError, match="whole episodes"):
        wb.DQN(_bits(3), replay=wb.HerReplay()).memory.add(None, None, None, None, None, None)


# -- intrinsic rewards --------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C, wb.DQN])
@pytest.mark.parametrize("spec", [wb.RND, wb.ICM])
def test_intrinsic_rewards_plug_into_ppo_a2c_dqn_with_signals(cls, spec):
    extra = (
        {"learning_starts": 16, "train_freq": 16, "gradient_steps": 2}
        if cls is wb.DQN
        else {"n_steps": 16, "n_envs": 2}
    )
    agent = cls("CartPole-v1", intrinsic=spec(epochs=1), **extra)
    assert isinstance(agent.intrinsic, RNDModule if spec is wb.RND else ICMModule)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=64)
    for name in ("intrinsic_bonus", "intrinsic_error", "intrinsic_loss", "intrinsic_return_std", "intrinsic_coef"):
        assert np.isfinite(session.signals[name].last), name
    assert session.signals["intrinsic_bonus"].last > 0


def _step(agent, obs):
    step = agent.decide(obs)
    next_obs = obs + 0.01
    return Transitions(
        obs,
        step.actions,
        np.ones(len(obs), np.float32),
        next_obs,
        np.zeros(len(obs), bool),
        np.zeros(len(obs), bool),
        step.extras,
    )


def test_intrinsic_bonus_is_added_to_the_rewards_scaled_by_the_live_coefficient():
    agent = wb.PPO("CartPole-v1", intrinsic=wb.RND(), n_steps=4, n_envs=2, seed=0)
    obs = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    for _ in range(3):
        agent.observe(_step(agent, obs))
    rewards = agent.rollout.rewards[:3]
    assert (rewards > 1.0).all()  # 1 from the env plus a positive bonus
    session = wb.Session(agent, "CartPole-v1")
    session.set(intrinsic_coef=0.0)
    assert agent.config.intrinsic_coef == 0.0
    agent.observe(_step(agent, obs))
    assert agent.rollout.rewards[3].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="intrinsic_coef"):
        session.set(intrinsic_coef=-1.0)


def test_intrinsic_warmup_measures_the_bonus_without_adding_it_for_its_steps_per_env():
    agent = wb.PPO("CartPole-v1", intrinsic=wb.RND(warmup=3), n_steps=8, n_envs=2, seed=0)
    obs = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    for _ in range(5):
        agent.observe(_step(agent, obs))
    rewards = agent.rollout.rewards[:5]
    assert rewards[:3].tolist() == [[1.0, 1.0]] * 3  # measured, not added
    assert (rewards[3:] > 1.0).all()
    assert agent.intrinsic.return_norm.rms.count.item() > 5  # the statistics learned from the warm-up too
    with pytest.raises(ValueError, match=r"warmup=-1.*integer >= 0"):
        wb.RND(warmup=-1)


def test_intrinsic_update_proportion_trains_the_module_on_that_share_of_the_new_steps(monkeypatch):
    agent = wb.PPO("CartPole-v1", intrinsic=wb.RND(update_proportion=0.25, epochs=1), n_steps=32, n_envs=2)
    from workbench.agents.intrinsic import RNDModule

    seen: list[int] = []
    real = RNDModule.loss
    monkeypatch.setattr(RNDModule, "loss", lambda self, obs, a, nx: seen.append(len(obs)) or real(self, obs, a, nx))
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=64)
    assert sum(seen) == 16  # a quarter of the 64 steps since the last update
    assert wb.RND(update_proportion=0.25).to_dict()["update_proportion"] == 0.25
    with pytest.raises(ValueError, match=r"update_proportion=0.*> 0 and <= 1"):
        wb.RND(update_proportion=0)


def test_intrinsic_module_is_saved_with_the_agent_and_not_used_in_play(tmp_path, monkeypatch):
    agent = wb.PPO("CartPole-v1", intrinsic=wb.ICM(features=8), intrinsic_coef=0.3, n_steps=16, n_envs=1)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=48)
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert loaded.config.intrinsic == wb.ICM(features=8) and loaded.config.intrinsic_coef == 0.3
    for key, value in agent.intrinsic.state_dict().items():
        assert torch.equal(value, loaded.intrinsic.state_dict()[key]), key

    def boom(*args, **kwargs):
        raise AssertionError("the intrinsic reward ran in play")

    monkeypatch.setattr(loaded.intrinsic, "add_bonus", boom)
    monkeypatch.setattr(loaded.intrinsic, "errors", boom)
    assert len(loaded.play("CartPole-v1", episodes=1)) == 1
    reopened = wb.Session.reopen(tmp_path / "run", "CartPole-v1")
    reopened.run(steps=16)  # the optimizer's moments came back too
    assert "intrinsic_loss" in reopened.signals


def test_intrinsic_specs_round_trip_and_check_their_arguments():
    for spec in (wb.RND(hidden=(32,), features=16), wb.ICM(beta=0.5, learning_rate=3e-4)):
        assert intrinsic_from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="beta must be"):
        wb.ICM(beta=2.0)
    with pytest.raises(ValueError, match="epochs must be"):
        wb.RND(epochs=0)
    with pytest.raises(TypeError, match="SAC does not take intrinsic="):
        wb.SAC("Pendulum-v1", intrinsic=wb.RND())
    with pytest.raises(ValueError, match="intrinsic"):
        wb.PPO("CartPole-v1", intrinsic="rnd")
    with pytest.raises(ValueError, match="MultiDiscrete"):
        wb.PPO(_multidiscrete_env(), intrinsic=wb.ICM())


def _multidiscrete_env() -> gym.Env:
    class Env(gym.Env):
        observation_space = spaces.Box(-1, 1, (2,), np.float32)
        action_space = spaces.MultiDiscrete([2, 3])

    return Env()


def test_icm_takes_box_actions():
    agent = wb.PPO("Pendulum-v1", intrinsic=wb.ICM(epochs=1), n_steps=16, n_envs=1)
    session = wb.Session(agent, "Pendulum-v1", seed=0)
    session.run(steps=32)
    assert np.isfinite(session.signals["intrinsic_loss"].last)
