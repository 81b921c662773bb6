"""The step contract: what a step needs later travels in its extras, never through the agent.

An agent that decides and an agent that observes can be two objects (two processes under Ray):
everything ``observe`` needs arrives as its argument. The one step function, the episode tracker,
the play loop and the declared agent state are tested here without a session.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.envs import VecEnv, env_action_converter
from workbench.loop import EpisodeTracker, collect, env_step, play_episode, row

AGENTS = {
    "ppo": (
        lambda seed: wb.PPO("CartPole-v1", n_envs=2, n_steps=8, batch_size=8, n_epochs=1, seed=seed),
        "CartPole-v1",
    ),
    "a2c": (lambda seed: wb.A2C("Pendulum-v1", n_envs=2, n_steps=4, seed=seed), "Pendulum-v1"),
    "ppo_sde": (
        lambda seed: wb.PPO("Pendulum-v1", n_envs=2, n_steps=8, batch_size=8, use_sde=True, seed=seed),
        "Pendulum-v1",
    ),
    "dqn": (
        lambda seed: wb.DQN("CartPole-v1", learning_starts=4, train_freq=4, gradient_steps=1, batch_size=4, seed=seed),
        "CartPole-v1",
    ),
    "sac": (lambda seed: wb.SAC("Pendulum-v1", learning_starts=4, batch_size=4, seed=seed), "Pendulum-v1"),
    "td3": (lambda seed: wb.TD3("Pendulum-v1", learning_starts=4, batch_size=4, seed=seed), "Pendulum-v1"),
    "ddpg": (lambda seed: wb.DDPG("Pendulum-v1", learning_starts=4, batch_size=4, seed=seed), "Pendulum-v1"),
    "tqc": (
        lambda seed: wb.TQC("Pendulum-v1", learning_starts=4, batch_size=4, n_quantiles=5, seed=seed),
        "Pendulum-v1",
    ),
    "crossq": (
        lambda seed: wb.CrossQ("Pendulum-v1", learning_starts=4, batch_size=4, critic_net_arch=(32,), seed=seed),
        "Pendulum-v1",
    ),
    "droq": (
        lambda seed: wb.DroQ("Pendulum-v1", learning_starts=4, batch_size=4, gradient_steps=2, seed=seed),
        "Pendulum-v1",
    ),
    "qrdqn": (
        lambda seed: wb.QRDQN(
            "CartPole-v1", learning_starts=4, train_freq=4, gradient_steps=1, batch_size=4, seed=seed
        ),
        "CartPole-v1",
    ),
    "rainbow": (
        lambda seed: wb.Rainbow(
            "CartPole-v1", learning_starts=4, train_freq=4, gradient_steps=1, batch_size=4, seed=seed
        ),
        "CartPole-v1",
    ),
    "recurrentppo": (
        lambda seed: wb.RecurrentPPO("CartPoleNoVel-v1", n_envs=2, n_steps=8, batch_size=8, n_epochs=1, seed=seed),
        "CartPoleNoVel-v1",
    ),
}


def _vec(env_id: str, n: int) -> VecEnv:
    return VecEnv([gym.make(env_id) for _ in range(n)], seed=0)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_one_agent_decides_another_observes(name):
    make, env_id = AGENTS[name]
    actor, learner = make(0), make(1)
    learner.restore(actor.state())  # same weights, no shared objects
    vec = _vec(env_id, actor.num_envs)
    obs = vec.reset()
    steps = 0
    while not learner.ready():
        transitions, obs = env_step(actor, vec, obs)
        learner.observe(transitions)  # everything it needs is in the argument
        steps += vec.num_envs
        assert learner.num_timesteps == steps and actor.num_timesteps == 0
        assert steps < 10_000
    metrics = learner.update()
    assert metrics and all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", ["ppo", "a2c", "ppo_sde"])
def test_on_policy_extras_are_what_the_rollout_stores(name):
    make, env_id = AGENTS[name]
    agent = make(0)
    vec = _vec(env_id, agent.num_envs)
    transitions, _ = env_step(agent, vec, vec.reset())
    assert set(transitions.extras) == {"values", "log_probs"}
    agent.observe(transitions)
    np.testing.assert_array_equal(agent.rollout.values[0], transitions.extras["values"])
    np.testing.assert_array_equal(agent.rollout.log_probs[0], transitions.extras["log_probs"])


def test_observe_without_the_extras_says_what_is_missing():
    agent = wb.PPO("CartPole-v1", n_envs=1, seed=0)
    obs = np.zeros((1, 4), np.float32)
    step = agent.decide(obs)
    bare = wb.Transitions(obs, step.actions, np.ones(1, np.float32), obs, np.zeros(1, bool), np.zeros(1, bool))
    with pytest.raises(ValueError, match="extras 'values' and 'log_probs'"):
        agent.observe(bare)


def test_decide_leaves_no_state_for_observe():
    agent = wb.PPO("CartPole-v1", n_envs=2, seed=0)
    before = set(vars(agent))
    agent.decide(np.zeros((2, 4), np.float32))
    assert set(vars(agent)) == before
    assert not [k for k in vars(agent) if k.startswith("_last_")]


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_state_restores_every_declared_tensor(name):
    make, env_id = AGENTS[name]
    trained = make(0)
    wb.Session(trained, env_id, seed=0).run(steps=64)
    fresh = make(5)
    fresh.restore(trained.state())
    a, b = trained.state(), fresh.state()
    assert set(a.tensors) == set(b.tensors)
    for key in a.tensors:
        assert torch.equal(a.tensors[key], b.tensors[key]), key
    assert a.data == b.data
    obs = np.zeros((3, *trained.obs_shape), np.float32)
    np.testing.assert_array_equal(trained.act(obs, deterministic=True), fresh.act(obs, deterministic=True))


def test_network_weights_load_into_a_replica():
    learner = wb.SAC("Pendulum-v1", seed=0, use_sde=True)
    replica = wb.SAC("Pendulum-v1", seed=1, use_sde=True)
    replica.load_networks(learner.network_weights())
    obs = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(learner.act(obs, deterministic=True), replica.act(obs, deterministic=True))
    with pytest.raises(ValueError, match="network 'actor' lacks"):
        replica.load_networks({"actor": {}})


def test_collect_stacks_steps_with_their_extras():
    agent = wb.PPO("CartPole-v1", n_envs=3, seed=0)
    vec = _vec("CartPole-v1", 3)
    stacked, last_obs = collect(agent, vec, vec.reset(), 5)
    assert stacked.obs.shape == (5, 3, 4) and stacked.rewards.shape == (5, 3)
    assert stacked.extras["values"].shape == (5, 3)
    np.testing.assert_array_equal(row(stacked, 2).extras["log_probs"], stacked.extras["log_probs"][2])
    assert last_obs.shape == (3, 4)


def test_episode_tracker_reports_ended_episodes_once():
    tracker = EpisodeTracker(2)
    assert tracker.add(np.array([1.0, 2.0]), np.array([False, False])) == []
    ended = tracker.add(np.array([1.0, 2.0]), np.array([True, False]))
    assert [(e.env, e.reward, e.length) for e in ended] == [(0, 2.0, 2)]
    ended = tracker.add(np.array([1.0, 2.0]), np.array([True, True]))
    assert [(e.env, e.reward, e.length) for e in ended] == [(0, 1.0, 1), (1, 6.0, 3)]


def test_play_episode_yields_the_reset_then_each_step():
    agent = wb.PPO("CartPole-v1", seed=0).eval()
    env = gym.make("CartPole-v1")
    moments = list(play_episode(agent, env, seed=0, max_steps=7))
    assert [m.t for m in moments] == list(range(8))
    assert moments[0].action is None and moments[0].reward == 0.0
    assert moments[-1].done and not any(m.done for m in moments[:-1])
    assert all(isinstance(m.action, int) for m in moments[1:])


def test_the_action_converter():
    assert env_action_converter(spaces.Discrete(3))(np.int64(2)) == 2
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    np.testing.assert_array_equal(env_action_converter(box)(np.array([3.0, -0.5])), np.array([1.0, -0.5], np.float32))
    tup = spaces.Tuple((spaces.Discrete(2),))
    assert env_action_converter(tup)("x") == "x"
    # MultiDiscrete/MultiBinary actions reach the env in the space's own dtype (workers send float32).
    for space in (spaces.MultiBinary(2), spaces.MultiDiscrete([3, 2])):
        action = env_action_converter(space)(np.array([1.0, 0.0], np.float32))
        assert action.dtype == space.dtype and space.contains(action)
