"""RecurrentPPO: the LSTM state travels in the step's extras, is reset at episode ends, replays
from the stored state in the update, is saved, and gives the agent a memory."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.envs import VecEnv
from workbench.envs.testing import MaskVelocity, RememberTheCue, TwoStateChain
from workbench.loop import env_step

FAST = dict(n_envs=4, n_steps=16, batch_size=64, n_epochs=4, net_arch=(32,), lstm_hidden_size=16, learning_rate=3e-3)


def _agent(env="CartPoleNoVel-v1", **kw):
    return wb.RecurrentPPO(env, seed=0, **{**FAST, **kw})


def test_the_step_hands_over_the_state_it_used_and_keeps_the_running_one():
    agent = _agent()
    obs = np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32)
    first = agent.decide(obs)
    assert set(first.extras) == {"values", "log_probs", "lstm_states"}
    assert first.extras["lstm_states"].shape == (4, 4, 16) and not first.extras["lstm_states"].any()
    second = agent.decide(obs)
    assert second.extras["lstm_states"].reshape(4, -1).any(1).all()  # the state after the first step
    # An ended episode starts from zeros; the others go on.
    agent.begin_episode(np.array([False, True, False, False]))
    third = agent.decide(obs)
    assert not third.extras["lstm_states"][1].any()
    assert third.extras["lstm_states"][0].any() and third.extras["lstm_states"][2].any()


def test_observe_refuses_transitions_without_the_lstm_state():
    agent = _agent()
    obs = np.zeros((4, 2), np.float32)
    step = agent.decide(obs)
    extras = {k: v for k, v in step.extras.items() if k != "lstm_states"}
    bare = wb.Transitions(obs, step.actions, np.ones(4, np.float32), obs, np.zeros(4, bool), np.zeros(4, bool), extras)
    with pytest.raises(ValueError, match="lstm_states"):
        agent.observe(bare)


def test_the_update_replays_the_rollout_as_it_was_acted():
    # Random CartPole episodes end inside the rollout: the unroll from the stored first state,
    # zeroed where episodes begin, must give back exactly the log-probabilities of acting.
    agent = _agent(n_steps=48)
    vec = VecEnv([gym.make("CartPoleNoVel-v1") for _ in range(4)], seed=0)
    obs = vec.reset()
    while not agent.ready():
        transitions, obs = env_step(agent, vec, obs)
        agent.observe(transitions)
    rollout = agent.rollout
    assert rollout.dones[:-1].any(), "no episode ended inside the rollout"
    starts = torch.zeros(rollout.n_steps, 4)
    starts[1:] = torch.from_numpy(rollout.dones[:-1])
    first = torch.from_numpy(agent.rollout_states[0])
    with torch.no_grad():
        logits, _, _ = agent.actor(torch.from_numpy(rollout.obs), first[:, 0], first[:, 1], starts)
        values, _, _ = agent.critic(torch.from_numpy(rollout.obs), first[:, 2], first[:, 3], starts)
    log_p = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(rollout.actions).unsqueeze(-1)).squeeze(-1)
    np.testing.assert_allclose(log_p.numpy(), rollout.log_probs, atol=1e-5)
    np.testing.assert_allclose(values.squeeze(-1).numpy(), rollout.values, atol=1e-5)
    # Each stored state is the one the unroll reaches there (zero after an episode end).
    done_at = np.argwhere(rollout.dones[:-1])
    for t, env in done_at:
        assert not agent.rollout_states[t + 1, env].any()
    metrics = agent.update()
    assert metrics["clip_fraction"] < 0.5 and np.isfinite(metrics["loss"])


def test_play_has_its_own_state_and_starts_each_episode_afresh():
    agent = _agent()
    obs = np.ones((4, 2), np.float32)
    agent.decide(obs)
    training_state = agent._acting_states[True].clone()
    first = agent.play("CartPoleNoVel-v1", episodes=2, seed=3)
    assert agent.play("CartPoleNoVel-v1", episodes=2, seed=3) == first
    torch.testing.assert_close(agent._acting_states[True], training_state)  # evaluation left it alone


def test_remembers_the_cue_where_ppo_cannot():
    agent = wb.RecurrentPPO(RememberTheCue, seed=0, **{**FAST, "n_steps": 8, "batch_size": 32})
    wb.Session(agent, RememberTheCue, seed=0).run(steps=3000)
    returns = agent.play(RememberTheCue, episodes=20, seed=0)
    assert np.mean(returns) == 1.0, f"RecurrentPPO scored {np.mean(returns)}; remembering the cue scores 1"


def test_save_load_keeps_weights_and_acting_state(tmp_path):
    agent = _agent()
    session = wb.Session(agent, "CartPoleNoVel-v1", seed=0)
    session.run(steps=128)
    assert "acting/lstm_states" in agent.state().tensors
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert isinstance(loaded, wb.RecurrentPPO)
    assert loaded.play("CartPoleNoVel-v1", episodes=2, seed=1) == agent.play("CartPoleNoVel-v1", episodes=2, seed=1)
    fresh = _agent()
    fresh.restore(agent.state())
    torch.testing.assert_close(fresh._acting_states[True], agent._acting_states[True])
    resumed = wb.Session.reopen(tmp_path / "run", "CartPoleNoVel-v1")
    resumed.run(steps=64)
    assert resumed.status == "finished", resumed.error


def test_box_actions_and_local_workers():
    agent = wb.RecurrentPPO("PendulumNoVel-v1", seed=0, **{**FAST, "n_envs": 2})
    session = wb.Session(agent, lambda: MaskVelocity(gym.make("Pendulum-v1")), seed=0, num_workers=2, backend="local")
    session.run(steps=96)
    assert session.status == "finished", session.error
    assert agent.num_updates >= 2 and np.isfinite(session.signals["policy_std"].last)


def test_mask_velocity_keeps_the_positions():
    env = MaskVelocity(gym.make("CartPole-v1"))
    obs, _ = env.reset(seed=0)
    full, _ = env.env.reset(seed=0)
    np.testing.assert_array_equal(obs, full[[0, 2]])
    assert env.observation_space.shape == (2,) and gym.make("PendulumNoVel-v1").observation_space.shape == (2,)
    with pytest.raises(ValueError, match="keep="):
        MaskVelocity(TwoStateChain())
