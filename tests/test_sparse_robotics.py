"""Issue 38: HerReplay on gymnasium-robotics' FetchReach (mujoco): the env's own batched compute_reward relabels.

Skipped where gymnasium-robotics or mujoco is not installed (``pip install rl-workbench[robotics]``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import workbench as wb
from workbench.memory.her import HerMemory

pytest.importorskip("mujoco")
gymnasium_robotics = pytest.importorskip("gymnasium_robotics")

import gymnasium as gym  # noqa: E402

ENV_ID = "FetchReach-v4"


def _fetch_reach() -> gym.Env:
    gym.register_envs(gymnasium_robotics)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return gym.make(ENV_ID)
        except AssertionError as error:  # gymnasium-robotics 1.4's joint check fails on mujoco >= 3.4's enums
            pytest.skip(f"{ENV_ID} does not build with this mujoco ({error!r}): install mujoco<3.4")


@pytest.mark.slow  # imports mujoco and gymnasium-robotics (several seconds)
def test_sac_with_her_on_fetch_reach_relabels_with_the_envs_compute_reward():
    env = _fetch_reach()
    calls: list[tuple] = []
    original = env.unwrapped.compute_reward

    def spy(achieved_goal, desired_goal, info):
        calls.append((np.shape(achieved_goal), np.shape(desired_goal), len(info)))
        return original(achieved_goal, desired_goal, info)

    agent = wb.SAC(
        env,
        replay=wb.HerReplay(strategy="future", n_sampled_goal=4),
        learning_starts=60,
        batch_size=32,
        net_arch=(16,),
        n_critics=1,
        buffer_size=1000,
    )
    session = wb.Session(agent, env, seed=0)
    session.run(steps=110)  # two whole episodes of 50 steps (FetchReach truncates at 50), the third open
    assert session.status == "finished", session.error
    memory = agent.memory
    assert isinstance(memory, HerMemory) and len(memory) == 100
    assert "success_rate" in session.signals and np.isfinite(session.signals["critic_loss"].last)
    # truncated episodes bootstrap: nothing is marked done
    assert memory.dones[:100].sum() == 0

    memory.compute_reward = spy
    batch = memory.sample(256, np.random.default_rng(0))
    # one batched call: (batch, 3) goals and one info per row, as gymnasium-robotics' GoalEnv takes them
    assert len(calls) == 1
    (shape_a, shape_d, n_info) = calls[0]
    assert shape_a == shape_d == (shape_a[0], 3) and n_info == shape_a[0] and 100 < shape_a[0] < 256
    obs, next_obs = batch.obs.numpy(), batch.next_obs.numpy()
    achieved, desired = memory.achieved, memory.desired  # Dict keys sorted: achieved_goal, desired_goal, observation
    assert (achieved, desired) == (slice(0, 3), slice(3, 6))
    expected = original(next_obs[:, achieved], obs[:, desired], [{} for _ in range(len(obs))])
    np.testing.assert_array_equal(batch.rewards.numpy(), expected)
    relabelled = 0
    for i, row in enumerate(batch.indices):
        goal = obs[i, desired]
        if not np.array_equal(goal, memory.obs[int(row), desired]):
            relabelled += 1
            start, length = int(memory.episode_start[row]), int(memory.episode_length[row])
            later = range((int(row) - start) % memory.capacity, length)  # "future": this step or later
            assert any(np.array_equal(goal, memory.next_obs[start + j, achieved]) for j in later)
    assert relabelled > 150  # 4 of 5 rows relabelled
    assert (batch.rewards.numpy() == 0).any()  # a goal reached by construction (this step's own)
