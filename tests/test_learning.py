"""Integration: the tuned defaults really learn."""

import numpy as np
import pytest

import workbench as wb


@pytest.mark.slow
def test_ppo_solves_cartpole_with_zoo_defaults():
    agent = wb.PPO("CartPole-v1")
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=100_000)
    returns = agent.play("CartPole-v1", episodes=10, seed=100)
    assert np.mean(returns) >= 195


@pytest.mark.slow
def test_dqn_learns_cartpole():
    agent = wb.DQN("CartPole-v1")
    session = wb.Session(agent, "CartPole-v1", seed=1)
    session.run(steps=50_000)
    assert np.mean(agent.play("CartPole-v1", episodes=10, seed=100)) >= 150
