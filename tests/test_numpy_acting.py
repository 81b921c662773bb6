"""On-policy acting in numpy: the torch path's numbers to float32 rounding, its random stream, its fallbacks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.networks import mlp
from workbench.agents.numpy_mlp import NumpyMLP


def _obs(n: int = 8, dim: int = 4) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_numpy_mlp_matches_the_torch_forward_pass(activation):
    torch.manual_seed(0)
    net = mlp(4, (64, 64), 3, activation=activation, ortho_init=True)
    x = _obs()
    forward = NumpyMLP.of(net)
    assert forward is not None and forward.current()
    np.testing.assert_allclose(forward(x), net(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert NumpyMLP.of(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Softmax(-1))) is None


def test_numpy_mlp_follows_weights_changed_in_place_and_tensors_replaced():
    torch.manual_seed(0)
    net = mlp(4, (8,), 2)
    forward = NumpyMLP.of(net)
    x = _obs()
    with torch.no_grad():
        net[0].weight.mul_(2)  # in place: the views see it
        np.testing.assert_allclose(forward(x), net(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)
        net[2].weight.data = torch.randn(2, 8)  # a new tensor: noticed, rebound
        assert forward.current()
        np.testing.assert_allclose(forward(x), net(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)
    net[0].register_forward_hook(lambda *args: None)
    assert not forward.current()  # a hooked net is run by torch, so the hook runs


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("cls", [wb.A2C, wb.PPO])
def test_numpy_acting_gives_the_torch_paths_draws_and_numbers(cls, env_id):
    agent = cls(env_id, seed=0)
    obs = _obs(8, 4 if env_id == "CartPole-v1" else 3)
    assert agent._numpy_nets() is not None
    state = agent.generator.get_state()
    fast = agent._decide(obs, False)
    after_fast = agent.generator.get_state()
    agent.generator.set_state(state)
    slow = agent._decide_in_torch(obs, False, None)
    assert torch.equal(after_fast, agent.generator.get_state())  # as many draws
    # The same draws from the agent's generator, so the same actions (and the stream moves alike).
    if env_id == "CartPole-v1":
        np.testing.assert_array_equal(fast.actions, slow.actions)
        assert fast.actions.dtype == slow.actions.dtype
    else:
        np.testing.assert_allclose(fast.actions, slow.actions, rtol=1e-5, atol=1e-6)
    for key in ("values", "log_probs"):
        assert fast.extras[key].dtype == np.float32 and fast.extras[key].shape == (8,)
        np.testing.assert_allclose(fast.extras[key], slow.extras[key], rtol=1e-5, atol=1e-5)


def test_numpy_acting_reads_the_weights_each_update_wrote():
    agent = wb.A2C("CartPole-v1", seed=0)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=400)  # updates bind flat buffers (new tensors)
    obs = _obs()
    actor, critic = agent._numpy_nets()
    with torch.no_grad():
        np.testing.assert_allclose(critic(obs)[:, 0], agent.critic(torch.from_numpy(obs))[:, 0].numpy(), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(actor(obs), agent.actor(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-6)


def test_hooks_masks_and_deterministic_decisions_take_the_torch_path():
    agent = wb.PPO("CartPole-v1", seed=0)
    calls = []
    handle = agent.actor.register_forward_hook(lambda *args: calls.append(1))
    agent.decide(_obs())
    assert calls == [1]
    handle.remove()
    agent.decide(_obs())
    assert calls == [1]
    agent.decide(_obs(), deterministic=True)
    assert calls == [1]
    step = agent.decide(_obs(), action_mask=np.array([[True, False]] * 8))
    assert (step.actions == 0).all()


def test_a2c_still_learns_cartpole_with_numpy_acting():
    agent = wb.A2C("CartPole-v1", seed=0, n_envs=8, ent_coef=0.0)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=30_000)
    assert np.mean(agent.play(gym.make("CartPole-v1"), episodes=3, seed=1)) > 150
