"""Issue 38: Hindsight Experience Replay through Ray workers (a goal env stepped in Ray actors, its episodes
stored whole and relabelled in the learner's memory)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import workbench as wb
from workbench.envs.goals import BitFlippingEnv
from workbench.memory.her import HerMemory
from workbench.parallel.ray_start import init_private_ray

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_BITS = 4


def _check_whole_episodes_and_relabelling(memory: HerMemory, n_bits: int, time_limit: int) -> None:
    arrays = memory.state_arrays()
    lengths = arrays["episode_lengths"]
    stored = np.cumsum(lengths) <= len(memory)  # the rest: the envs' episodes in progress
    ends = np.cumsum(lengths)[stored] - 1
    # every stored episode is whole: it ends with a termination or at the time limit
    assert stored.sum() >= 2
    assert ((arrays["dones"][ends] == 1) | (lengths[stored] == time_limit)).all()
    # Flat layout of the Dict (keys sorted): achieved_goal, desired_goal, observation.
    achieved, desired = slice(0, n_bits), slice(n_bits, 2 * n_bits)
    batch = memory.sample(512, np.random.default_rng(0))
    obs, next_obs, rewards = batch.obs.numpy(), batch.next_obs.numpy(), batch.rewards.numpy()
    relabelled = 0
    for i, row in enumerate(batch.indices):
        row = int(row)
        goal = obs[i, desired]
        assert np.array_equal(goal, next_obs[i, desired])  # one goal for obs and next_obs
        if not np.array_equal(goal, memory.obs[row, desired]):
            relabelled += 1
            start, length = int(memory.episode_start[row]), int(memory.episode_length[row])
            t = (row - start) % memory.capacity
            later = [(start + j) % memory.capacity for j in range(t, length)]  # "future": this step or later
            assert any(np.array_equal(goal, memory.next_obs[r, achieved]) for r in later)
        # the reward is the env's compute_reward of (next achieved goal, goal)
        assert rewards[i] == (0.0 if np.array_equal(next_obs[i, achieved], goal) else -1.0)
    assert relabelled > 100  # 4 of 5 are relabelled; with 4 bits most pick another goal


def test_her_sessions_train_and_relabel_through_ray_workers():
    ray = pytest.importorskip("ray")
    # The library's own start of a private Ray (loopback only, lean imports: its processes start faster).
    options = dict(num_cpus=2, include_dashboard=False, logging_level="warning", _node_ip_address="127.0.0.1")
    init_private_ray(ray, options)
    try:
        make_bits = functools.partial(BitFlippingEnv, n_bits=N_BITS)
        agent = wb.DQN(
            make_bits,
            replay=wb.HerReplay(strategy="future", n_sampled_goal=4),
            n_envs=2,
            learning_starts=64,
            train_freq=4,
            gradient_steps=2,
            batch_size=32,
            net_arch=(32,),
            buffer_size=5000,
        )
        session = wb.Session(agent, make_bits, seed=0, num_workers=2, backend="ray")
        session.run(steps=400)
        assert session.status == "finished", session.error
        assert isinstance(agent.memory, HerMemory)
        assert "success_rate" in session.signals and np.isfinite(session.signals["loss"].last)
        _check_whole_episodes_and_relabelling(agent.memory, N_BITS, time_limit=N_BITS)

        make_continuous = functools.partial(BitFlippingEnv, n_bits=N_BITS, continuous=True)
        sac = wb.SAC(
            make_continuous,
            replay=wb.HerReplay(strategy="future", n_sampled_goal=4),
            learning_starts=32,
            batch_size=32,
            net_arch=(16,),
            buffer_size=2000,
        )
        session = wb.Session(sac, make_continuous, seed=0, num_workers=2, backend="ray")
        session.run(steps=200)
        assert session.status == "finished", session.error
        assert np.isfinite(session.signals["critic_loss"].last) and "success_rate" in session.signals
        _check_whole_episodes_and_relabelling(sac.memory, N_BITS, time_limit=N_BITS)
    finally:
        ray.shutdown()
