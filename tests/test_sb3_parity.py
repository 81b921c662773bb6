"""One update of A2C and PPO gives Stable-Baselines3's weights, from the same weights and the same rollout.

The benchmark report holds each preset against SB3 "at the same settings"; this is what makes that a
comparison of implementations of one algorithm rather than of two algorithms. Each case copies this project's
freshly built networks into SB3's policy, fills both with one rollout (observations, actions, the log-probabilities
the rollout was taken with, advantages and returns), runs one update on each, and compares every parameter.
The rollout's log-probabilities are shifted from the policy's, so PPO's ratios land on both sides of its clip.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import workbench as wb
from workbench.agents.on_policy import RolloutBatch
from workbench.agents.ppo import clipped_update

sb3 = pytest.importorskip("stable_baselines3", reason="pip install -e '.[dev]' (the benchmarks' peer)")
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import configure  # noqa: E402

N_ENVS, N_STEPS = 2, 8
ROWS = N_ENVS * N_STEPS
SETTINGS = dict(n_steps=N_STEPS, learning_rate=3e-3, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)


def _linears(net: nn.Module) -> list[nn.Linear]:
    return [m for m in net.modules() if isinstance(m, nn.Linear)]


def _pair(algo: str, env_id: str, **extra):
    """This project's agent and SB3's model at the same settings, SB3's weights copied from ours."""
    ours = getattr(wb, algo)(env_id, n_envs=N_ENVS, net_arch=(16,), seed=0, **SETTINGS, **extra)
    theirs = getattr(sb3, algo)(
        "MlpPolicy",
        make_vec_env(env_id, n_envs=N_ENVS, seed=0),
        policy_kwargs=dict(net_arch=dict(pi=[16], vf=[16]), activation_fn=nn.Tanh),
        seed=0,
        device="cpu",
        **SETTINGS,
        **extra,
    )
    theirs.set_logger(configure(None, [""]))
    policy = theirs.policy
    mine = [*_linears(ours.actor), *_linears(ours.critic)]
    copies = [
        policy.mlp_extractor.policy_net[0],
        policy.action_net,
        policy.mlp_extractor.value_net[0],
        policy.value_net,
    ]
    assert len(mine) == len(copies)
    with torch.no_grad():
        for source, target in zip(mine, copies, strict=True):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
        if ours.log_std is not None:
            policy.log_std.copy_(ours.log_std)
    return ours, theirs, mine, copies


def _rollout(ours, env_id: str) -> dict[str, np.ndarray]:
    """A rollout's rows, drawn at random: observations and actions from the spaces, the log-probabilities
    the policy gives them shifted by up to 0.4 either way, advantages and returns."""
    rng = np.random.default_rng(1)
    space = gym.make(env_id)
    obs = np.stack([space.observation_space.sample() for _ in range(ROWS)]).astype(np.float32)
    space.action_space.seed(2)
    actions = np.stack([np.asarray(space.action_space.sample()) for _ in range(ROWS)])
    with torch.no_grad():
        log_probs, _ = ours._policy_terms(torch.as_tensor(obs), torch.as_tensor(actions))
    return {
        "obs": obs,
        "actions": actions,
        "log_probs": (log_probs.numpy() + rng.uniform(-0.4, 0.4, ROWS)).astype(np.float32),
        "advantages": rng.normal(size=ROWS).astype(np.float32),
        "returns": rng.normal(size=ROWS).astype(np.float32),
    }


def _fill_sb3(theirs, rows: dict[str, np.ndarray]) -> None:
    """SB3's rollout buffer holding ``rows`` (SB3 keeps (steps, envs, ...) and flattens it env-major: the
    update is a mean over all rows, so the order does not matter)."""
    buffer = theirs.rollout_buffer
    buffer.reset()
    shape = (N_STEPS, N_ENVS)
    buffer.observations[:] = rows["obs"].reshape(*shape, -1)
    buffer.actions[:] = rows["actions"].reshape(*shape, -1)
    buffer.log_probs[:] = rows["log_probs"].reshape(shape)
    buffer.advantages[:] = rows["advantages"].reshape(shape)
    buffer.returns[:] = rows["returns"].reshape(shape)
    buffer.pos, buffer.full = N_STEPS, True


def _assert_same_weights(mine: list[nn.Linear], copies: list[nn.Linear], ours, theirs) -> None:
    for source, target in zip(mine, copies, strict=True):
        torch.testing.assert_close(source.weight, target.weight, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(source.bias, target.bias, rtol=1e-5, atol=1e-6)
    if ours.log_std is not None:
        torch.testing.assert_close(ours.log_std, theirs.policy.log_std, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_an_a2c_update_gives_sb3s_weights(env_id):
    ours, theirs, mine, copies = _pair("A2C", env_id)
    rows = _rollout(ours, env_id)
    before = [layer.weight.clone() for layer in mine]
    tensors = {name: torch.as_tensor(value) for name, value in rows.items()}
    batch = RolloutBatch(
        tensors["obs"],
        tensors["actions"],
        tensors["log_probs"],
        tensors["advantages"],
        tensors["returns"],
        values=np.zeros(ROWS, np.float32),
        returns_np=rows["returns"],
    )
    ours._scheduled_lr()
    ours._gradient_step(batch)
    _fill_sb3(theirs, rows)
    theirs.train()
    assert all(not torch.equal(old, layer.weight) for old, layer in zip(before, mine))  # the update moved them
    _assert_same_weights(mine, copies, ours, theirs)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_a_ppo_update_gives_sb3s_weights(env_id):
    """Two epochs of one minibatch (the whole rollout: PPO's shuffling then orders rows only), advantages
    normalized, ratios clipped at 0.2."""
    ours, theirs, mine, copies = _pair("PPO", env_id, batch_size=ROWS, n_epochs=2, clip_range=0.2)
    rows = _rollout(ours, env_id)
    tensors = {name: torch.as_tensor(value) for name, value in rows.items()}
    metrics = clipped_update(
        ours,
        tensors["obs"],
        tensors["actions"],
        None,
        tensors["advantages"],
        tensors["log_probs"],
        tensors["returns"],
    )
    assert 0 < metrics["clip_fraction"] < 1  # the clip acted on some rows and not on others
    _fill_sb3(theirs, rows)
    theirs.train()
    _assert_same_weights(mine, copies, ours, theirs)


@pytest.mark.parametrize("gae_lambda", [1.0, 0.95])
def test_advantages_and_returns_are_sb3s(gae_lambda):
    """GAE over a rollout with episode ends inside it: ``dones[t]`` here is SB3's ``episode_starts[t + 1]``
    (the episode ended at step t), and the envs' dones after the last step are its last ones."""
    from stable_baselines3.common.buffers import RolloutBuffer

    from workbench.memory.rollout import compute_gae

    rng = np.random.default_rng(3)
    rewards = rng.normal(size=(N_STEPS, N_ENVS)).astype(np.float32)
    values = rng.normal(size=(N_STEPS, N_ENVS)).astype(np.float32)
    dones = (rng.random((N_STEPS, N_ENVS)) < 0.25).astype(np.float32)
    last_values = rng.normal(size=N_ENVS).astype(np.float32)
    advantages, returns = compute_gae(rewards, values, dones, last_values, 0.99, gae_lambda)

    space = gym.spaces.Box(-1, 1, (1,), np.float32)
    buffer = RolloutBuffer(N_STEPS, space, space, n_envs=N_ENVS, gamma=0.99, gae_lambda=gae_lambda)
    buffer.rewards[:] = rewards
    buffer.values[:] = values
    buffer.episode_starts[0] = 0.0
    buffer.episode_starts[1:] = dones[:-1]
    buffer.pos, buffer.full = N_STEPS, True
    buffer.compute_returns_and_advantage(torch.as_tensor(last_values), dones[-1])
    np.testing.assert_allclose(advantages, buffer.advantages, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(returns, buffer.returns, rtol=1e-5, atol=1e-6)
