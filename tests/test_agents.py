"""DQN and PPO: the four verbs, acting on one observation or a batch, the maths of their updates."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.agents.base import Transitions
from workbench.memory import compute_gae


@pytest.mark.parametrize("cls", [wb.DQN, wb.PPO])
def test_act_on_single_observation_and_batch(cls):
    agent = cls("CartPole-v1", seed=0)
    obs = np.zeros(4, dtype=np.float32)
    single = agent.act(obs, deterministic=True)
    assert np.ndim(single) == 0 and int(single) in (0, 1)
    batch = agent.act(np.zeros((5, 4), dtype=np.float32), deterministic=True)
    assert batch.shape == (5,)
    with pytest.raises(ValueError, match="shape"):
        agent.act(np.zeros(7, dtype=np.float32))


def test_ppo_continuous_actions_respect_bounds_when_deterministic():
    agent = wb.PPO("Pendulum-v1", seed=0)
    action = agent.act(np.ones(3, dtype=np.float32) * 100, deterministic=True)
    assert action.shape == (1,) and -2.0 <= action[0] <= 2.0
    sampled = agent.act(np.zeros((4, 3), dtype=np.float32))
    assert sampled.shape == (4, 1)


def test_unknown_hyperparameter_suggests_the_right_name():
    with pytest.raises(TypeError, match="learning_rate"):
        wb.PPO("CartPole-v1", learning_rat=1e-3)


def test_agent_needs_env_or_spaces():
    with pytest.raises(TypeError, match="observation_space"):
        wb.PPO()


def test_defaults_are_the_zoo_cartpole_values():
    ppo = wb.PPO("CartPole-v1").config
    assert (ppo.n_envs, ppo.n_steps, ppo.batch_size, ppo.n_epochs) == (8, 32, 256, 20)
    assert (ppo.gamma, ppo.gae_lambda, ppo.ent_coef) == (0.98, 0.8, 0.0)
    assert ppo.learning_rate(0.0) == pytest.approx(1e-3) and ppo.learning_rate(1.0) == 0.0
    assert ppo.clip_range(0.0) == pytest.approx(0.2)
    dqn = wb.DQN("CartPole-v1").config
    assert (dqn.learning_rate, dqn.batch_size, dqn.buffer_size, dqn.learning_starts) == (2.3e-3, 64, 100_000, 1000)
    assert (dqn.train_freq, dqn.gradient_steps, dqn.target_update_interval, dqn.net_arch) == (256, 128, 10, (256, 256))
    assert (dqn.exploration.end, dqn.exploration.fraction) == (0.04, 0.16)


def test_gae_matches_a_hand_computation():
    rewards = np.array([[1.0], [0.0], [2.0]], dtype=np.float32)
    values = np.array([[0.5], [0.2], [1.0]], dtype=np.float32)
    dones = np.array([[0.0], [1.0], [0.0]], dtype=np.float32)
    last = np.array([3.0], dtype=np.float32)
    gamma, lam = 0.9, 0.8
    # step 2: delta = 2 + 0.9*3 - 1 = 3.7
    # step 1 (episode ends): delta = 0 - 0.2 = -0.2, no carry-over
    # step 0: delta = 1 + 0.9*0.2 - 0.5 = 0.68; adv = 0.68 + 0.9*0.8*(-0.2) = 0.536
    adv, ret = compute_gae(rewards, values, dones, last, gamma, lam)
    np.testing.assert_allclose(adv[:, 0], [0.536, -0.2, 3.7], rtol=1e-5)
    np.testing.assert_allclose(ret, adv + values)


def test_ppo_bootstraps_truncated_episodes_only():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=1, seed=0)
    obs = np.zeros((2, 4), dtype=np.float32)
    step = agent.decide(obs)
    final = np.ones((2, 4), dtype=np.float32)
    agent.observe(
        Transitions(
            obs,
            step.actions,
            np.ones(2, np.float32),
            final,
            np.array([True, False]),
            np.array([False, True]),
            step.extras,
        )
    )
    with torch.no_grad():
        v_final = agent.critic(torch.from_numpy(final[1:])).item()
    np.testing.assert_allclose(agent.rollout.rewards[0], [1.0, 1.0 + 0.98 * v_final], rtol=1e-5)
    assert agent.ready()
    metrics = agent.update()
    assert {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "learning_rate"} <= set(
        metrics
    )
    assert not agent.ready()


def test_dqn_update_uses_double_q_target():
    space = spaces.Box(-1, 1, (2,), dtype=np.float32)
    agent = wb.DQN(
        observation_space=space,
        action_space=spaces.Discrete(2),
        learning_starts=0,
        batch_size=4,
        train_freq=4,
        gradient_steps=1,
        buffer_size=16,
        seed=0,
    )
    obs = np.zeros((4, 2), dtype=np.float32)
    agent.observe(
        Transitions(
            obs,
            np.zeros(4, np.int64),
            np.ones(4, np.float32),
            obs,
            np.array([True, True, False, False]),
            np.zeros(4, bool),
        )
    )
    assert agent.ready()
    batch = agent.memory.sample(4, np.random.default_rng(0))
    assert batch.dones.sum() <= 4
    np.testing.assert_allclose(agent.memory.discounts[:4], 0.99)
    metrics = agent.update()
    assert np.isfinite(metrics["loss"]) and "q_mean" in metrics and "epsilon" in metrics


def test_dqn_explores_randomly_before_learning_starts():
    agent = wb.DQN("CartPole-v1", seed=0)
    actions = agent.act(np.zeros((1000, 4), dtype=np.float32))
    assert 0.4 < actions.mean() < 0.6


def test_dqn_epsilon_follows_the_schedule():
    agent = wb.DQN("CartPole-v1", exploration=wb.EpsilonGreedy(1.0, 0.1, 0.5))
    agent.total_timesteps = 1000
    agent.num_timesteps = 0
    assert agent.epsilon == pytest.approx(1.0)
    agent.num_timesteps = 250
    assert agent.epsilon == pytest.approx(0.55)
    agent.num_timesteps = 900
    assert agent.epsilon == pytest.approx(0.1)


def test_play_mode_is_deterministic_and_learns_nothing():
    agent = wb.PPO("CartPole-v1", seed=0).eval()
    before = [p.clone() for p in agent.actor.parameters()]
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    a1, a2 = agent.act(obs), agent.act(obs)
    np.testing.assert_array_equal(a1, a2)
    returns = agent.play("CartPole-v1", episodes=2, seed=0)
    assert len(returns) == 2 and len(returns.lengths) == 2
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))
    assert agent.num_timesteps == 0


def test_play_keeps_frames_when_rendering():
    agent = wb.PPO("CartPole-v1", seed=0)
    returns, frames = agent.play("CartPole-v1", episodes=1, render="rgb_array", seed=0, max_steps=5)
    assert len(returns) == 1 and returns.lengths == [5]
    assert len(frames) == 1 and len(frames[0]) == 6
    assert frames[0][0].ndim == 3 and frames[0][0].shape[2] == 3


def test_play_refuses_an_env_with_other_spaces():
    agent = wb.PPO("CartPole-v1")
    with pytest.raises(ValueError, match="observation space"):
        agent.play("Acrobot-v1")


def test_play_rejects_bad_arguments():
    agent = wb.PPO("CartPole-v1")
    with pytest.raises(ValueError, match="episodes"):
        agent.play("CartPole-v1", episodes=0)
    with pytest.raises(ValueError, match="render"):
        agent.play("CartPole-v1", render="human")


def test_weights_from_read_only_buffers_load_without_a_warning():
    # Ray workers receive the learner's weights in read-only buffers (issue 40: a UserWarning in notebooks).
    import warnings

    source, target = wb.PPO("CartPole-v1"), wb.PPO("CartPole-v1")
    weights = source.network_weights()
    for arrays in weights.values():
        for array in arrays.values():
            array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        target.load_networks(weights)
    assert all(
        np.array_equal(a, b)
        for name in weights
        for a, b in zip(weights[name].values(), target.network_weights()[name].values(), strict=True)
    )
