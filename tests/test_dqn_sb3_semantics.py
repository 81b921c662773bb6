"""The zoo's CartPole DQN preset does what Stable-Baselines3's DQN does, piece by piece, checked directly
(no training): the target network copied every ``target_update_interval`` env steps whatever the gradient
steps, the Huber loss on the target network's own max, gradients clipped to a total norm of 10, Adam with
eps 1e-8 and the zoo's schedule. Issue 50 audited each against SB3 2.9's ``dqn.py`` after a report that the
preset lost what it learned where SB3 kept it (it did not reproduce: both lose it on some seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from workbench.agents.base import Transitions


def _steps(agent: wb.DQN, n: int, n_envs: int = 1) -> None:
    obs = np.zeros((n_envs, 4), dtype=np.float32)
    for _ in range(n):
        agent.observe(
            Transitions(
                obs,
                np.zeros(n_envs, np.int64),
                np.ones(n_envs, np.float32),
                obs,
                np.zeros(n_envs, bool),
                np.zeros(n_envs, bool),
            )
        )


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _nudge(agent: wb.DQN) -> None:
    with torch.no_grad():
        for p in agent.q_net.parameters():
            p.add_(0.01)


@pytest.mark.parametrize("n_envs", [1, 2])
def test_the_target_is_copied_every_interval_of_env_steps(n_envs):
    """SB3 ``_on_step``: a copy every ``target_update_interval // n_envs`` vector steps, counted in env steps
    and not in gradient steps (the zoo's 10 with 128 gradient steps per 256 env steps)."""
    agent = wb.preset("CartPole-v1", "dqn", seed=0, n_envs=n_envs).agent
    assert agent.config.target_update_interval == 10 and agent.config.tau == 1.0
    _nudge(agent)
    _steps(agent, 10 // n_envs - 1, n_envs)
    assert not _same(agent.q_net, agent.q_target)  # not yet
    _steps(agent, 1, n_envs)
    assert _same(agent.q_net, agent.q_target)  # the 10th env step copies
    target_before = [p.clone() for p in agent.q_target.parameters()]
    agent.num_timesteps = agent.config.learning_starts
    agent._steps_since_update = agent.config.train_freq
    assert agent.ready()
    agent.update()  # 128 gradient steps: the online network moves, the target does not
    assert agent._steps_since_target == 0
    assert all(torch.equal(a, b) for a, b in zip(target_before, agent.q_target.parameters(), strict=True))
    assert not _same(agent.q_net, agent.q_target)


def test_the_loss_is_huber_on_the_target_networks_own_max():
    """SB3's DQN: no double Q, ``F.smooth_l1_loss(Q(s, a), r + gamma (1 - done) max_a' Q_target(s', a'))``."""
    agent = wb.preset("CartPole-v1", "dqn", seed=0).agent
    assert agent.config.double_q is False
    _nudge(agent)  # the online network differs from the target: double Q would pick other actions
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 4)).astype(np.float32) * 3
    next_obs = rng.normal(size=(64, 4)).astype(np.float32) * 3
    dones = (rng.random(64) < 0.3).astype(np.float32)
    actions = rng.integers(0, 2, size=64)
    agent.memory.add(obs, actions, np.ones(64, np.float32), next_obs, dones, agent.config.gamma)
    batch = agent.memory.gather(np.arange(64), np.ones(64, np.float32))
    with torch.no_grad():
        next_out = agent.q_target(batch.next_obs)
        per_sample, _, _ = agent._td_loss(batch, next_out)
        q = agent.q_net(batch.obs).gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)
        target = batch.rewards + 0.99 * (1 - batch.dones) * next_out.max(1).values
        expected = F.smooth_l1_loss(q, target, reduction="none")
    torch.testing.assert_close(per_sample, expected)
    assert per_sample.max() > 1.0  # the errors reach Huber's linear part, where it differs from MSE


def test_the_optimizer_and_schedule_are_sb3s_at_the_zoos_settings():
    agent = wb.preset("CartPole-v1", "dqn", seed=0).agent
    c = agent.config
    assert c.max_grad_norm == 10.0
    (group,) = agent.optimizer.param_groups
    assert isinstance(agent.optimizer, torch.optim.Adam) and group["eps"] == 1e-8 and group["betas"] == (0.9, 0.999)
    assert (c.learning_rate, c.batch_size, c.buffer_size, c.learning_starts) == (2.3e-3, 64, 100_000, 1000)
    assert (c.train_freq, c.gradient_steps, tuple(c.net_arch)) == (256, 128, (256, 256))
    assert (c.exploration.start, c.exploration.end, c.exploration.fraction) == (1.0, 0.04, 0.16)


def _first_step_squared_grad_norm(agent: wb.DQN) -> float:
    """The squared norm of the first gradient step's (clipped) gradient, read from Adam's second moment
    (``(1 - beta2) * g^2`` after one step)."""
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    agent.memory.add(obs, rng.integers(0, 2, 64), np.full(64, 1e4, np.float32), obs, np.zeros(64, np.float32), 0.99)
    batch = agent.memory.gather(np.arange(64), np.ones(64, np.float32))
    with torch.no_grad():
        next_out = agent.q_target(batch.next_obs)
    agent._gradient_step(batch, next_out)
    return sum(float(s["exp_avg_sq"].sum()) for s in agent.optimizer.state.values()) / (1 - 0.999)


def test_gradients_are_clipped_to_the_total_norm():
    """SB3 clips the total gradient norm (``clip_grad_norm_(params, max_grad_norm)``). The Huber loss bounds
    this batch's gradient (norm about 2 here, under the zoo's 10), so a smaller bound shows the clip."""
    raw = _first_step_squared_grad_norm(wb.preset("CartPole-v1", "dqn", seed=0).agent)
    assert 0.5**2 < raw < 10.0**2  # unclipped at the zoo's 10
    clipped = _first_step_squared_grad_norm(wb.preset("CartPole-v1", "dqn", seed=0, max_grad_norm=0.5).agent)
    assert clipped == pytest.approx(0.5**2, rel=1e-3)
