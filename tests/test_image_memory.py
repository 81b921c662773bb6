"""Replay and rollout memories keep observations in their own dtype (uint8 frames stay uint8), in
memory and through save/load; optimize_memory_usage stores each observation once."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.envs.testing import SeeTheSide
from workbench.memory import PrioritizedReplayMemory, ReplayMemory, RolloutBuffer


def _frames(rng, n, shape=(4, 8, 8)):
    return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)


@pytest.mark.parametrize("cls", [ReplayMemory, PrioritizedReplayMemory])
def test_uint8_stays_uint8_through_save_and_load(cls, tmp_path):
    rng = np.random.default_rng(0)
    mem = cls(50, (4, 8, 8), obs_dtype=np.uint8)
    for _ in range(10):
        mem.add(_frames(rng, 2), np.zeros(2, np.int64), np.ones(2), _frames(rng, 2), np.zeros(2), 0.99)
    assert mem.obs.dtype == np.uint8 and mem.next_obs.dtype == np.uint8
    batch = mem.sample(8, rng)
    assert batch.obs.dtype.is_floating_point is False
    mem.save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as saved:
        assert saved["obs"].dtype == np.uint8 and saved["next_obs"].dtype == np.uint8
    other = cls(50, (4, 8, 8), obs_dtype=np.uint8).load(tmp_path / "m.npz")
    np.testing.assert_array_equal(other.obs[:20], mem.obs[:20])
    np.testing.assert_array_equal(other.next_obs[:20], mem.next_obs[:20])


def test_rollout_keeps_uint8():
    buf = RolloutBuffer(4, 2, (3, 8, 8), (), np.int64, obs_dtype=np.uint8)
    assert buf.obs.dtype == np.uint8


def _episode_stream(rng, n_envs, steps, shape=(2, 16, 16), length=5):
    """What a loop feeds a memory: each add is one step of every env; episodes end every few steps."""
    obs = _frames(rng, n_envs, shape)
    t = np.zeros(n_envs, int)
    for _ in range(steps):
        nxt = _frames(rng, n_envs, shape)
        t += 1
        done = t % length == 0
        final = nxt.copy()
        after = nxt.copy()
        after[done] = _frames(rng, int(done.sum()), shape)  # the next episode's first observation
        yield obs, final, done.astype(np.float32)
        obs = after


@pytest.mark.parametrize("n_envs", [1, 3])
def test_optimize_memory_usage_gives_the_same_transitions(n_envs, tmp_path):
    plain = ReplayMemory(40, (2, 16, 16), obs_dtype=np.uint8)
    lean = ReplayMemory(40, (2, 16, 16), obs_dtype=np.uint8, optimize_memory_usage=True, stride=n_envs)
    assert not hasattr(lean, "next_obs")
    for obs, nxt, done in _episode_stream(np.random.default_rng(1), n_envs, 37):
        for mem in (plain, lean):
            mem.add(obs, np.zeros(n_envs, np.int64), np.ones(n_envs), nxt, done, 0.99)
    idx = np.arange(len(plain))
    np.testing.assert_array_equal(lean.obs[idx], plain.obs[idx])
    np.testing.assert_array_equal(lean._next_obs(idx), plain.next_obs[idx])
    assert lean.nbytes() < 0.75 * plain.nbytes()  # each obs once, plus the finals of ended episodes
    lean.save(tmp_path / "m.npz")
    back = ReplayMemory(40, (2, 16, 16), obs_dtype=np.uint8, optimize_memory_usage=True, stride=n_envs)
    back.load(tmp_path / "m.npz")
    for name in ("obs", "next_obs"):
        np.testing.assert_array_equal(back.state_arrays()[name], plain.state_arrays()[name])


def test_dqn_on_images_with_optimize_memory_usage_saves_and_resumes(tmp_path):
    make = SeeTheSide
    agent = wb.DQN(
        make,
        learning_starts=16,
        batch_size=8,
        buffer_size=64,
        net_arch=(16,),
        n_envs=2,
        train_freq=8,
        gradient_steps=1,
        optimize_memory_usage=True,
    )
    session = wb.Session(agent, make, seed=0)
    session.run(steps=100)
    assert agent.memory.obs.dtype == np.uint8 and agent.memory.optimize_memory_usage
    session.save(tmp_path / "run", memory=True)
    resumed = wb.Session.reopen(tmp_path / "run", make)
    mem = resumed.agent.memory
    np.testing.assert_array_equal(mem.obs[: len(mem)], agent.memory.state_arrays()["obs"][-len(mem) :])
    resumed.run(steps=20)


def test_optimize_memory_usage_refuses_n_step():
    with pytest.raises(ValueError, match="n_step"):
        wb.DQN(SeeTheSide(), optimize_memory_usage=True, n_step=3)
