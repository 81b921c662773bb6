"""Every observation key keeps its dtype end to end (issue 41): local workers send uint8 frames as
bytes, replay memory and ``memory.npz`` hold a Dict's frame columns as uint8 beside its float32 ones,
and datasets (recorded or saved) keep uint8 frames and a Dict's frame columns one byte a pixel."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.envs.columns import ColumnStore, join_columns, split_columns
from workbench.envs.core import ObservationCodec, VecEnv, as_env_source, byte_columns, flat_observation_space
from workbench.envs.testing import SeeTheSide
from workbench.memory.replay import ReplayMemory
from workbench.parallel import make_runner

MIXED = spaces.Dict(
    {
        "a": spaces.Box(-1.0, 1.0, (2,), np.float32),
        "b": spaces.Box(0, 255, (4, 4, 1), np.uint8),
        "c": spaces.Box(-1.0, 1.0, (1,), np.float32),
    }
)


def dict_env():
    return SeeTheSide(size=8, dict_obs=True)


def image_env():
    return SeeTheSide(size=8)


def test_byte_columns_find_a_dicts_uint8_parts_only_when_dtypes_mix():
    cols = byte_columns(MIXED)
    assert cols.tolist() == list(range(2, 18))  # "a" (2 floats), then "b" (16 bytes), then "c"
    assert byte_columns(SeeTheSide().observation_space) is None  # an image: uint8 already
    assert byte_columns(spaces.Dict({"img": SeeTheSide().observation_space})) is None  # image-only Dict: uint8
    assert byte_columns(spaces.Box(-1, 1, (3,))) is None
    store = ColumnStore(3, 19, cols)
    rows = np.random.default_rng(0).uniform(-1, 1, (3, 19)).astype(np.float32)
    rows[:, 2:18] = np.arange(48).reshape(3, 16) * 5  # frame values 0..235
    store[np.array([2, 0, 1])] = rows
    assert store.nbytes == 3 * (16 + 4 * 3)  # against 3 * 19 * 4 as one float32 array
    np.testing.assert_array_equal(store[np.array([2, 0, 1])], rows)
    arrays = split_columns({"obs": rows}, "obs", cols)
    assert arrays["obs_uint8"].dtype == np.uint8 and arrays["obs_float32"].shape == (3, 3)
    np.testing.assert_array_equal(join_columns(arrays, "obs", "test")["obs"], rows)
    with pytest.raises(ValueError, match="do not fit together"):
        join_columns({**arrays, "obs_byte_columns": np.array([0, 99])}, "obs", "test")


@pytest.mark.parametrize("make", [image_env, dict_env], ids=["image", "dict"])
def test_local_workers_send_observations_in_their_own_dtype(make):
    space = make().observation_space
    codec = ObservationCodec(space)
    flat = flat_observation_space(space)
    # One byte a pixel on the wire: the image's 192 bytes (and a Dict's 2 floats beside them).
    assert codec.row_bytes == (192 if make is image_env else 192 + 2 * 4)
    assert codec.row_bytes < 4 * int(np.prod(flat.shape)) / 3
    runner = make_runner(as_env_source(make), 4, seed=0, num_workers=2, backend="local")
    reference = VecEnv([make() for _ in range(4)], seed=0)
    try:
        obs = runner.reset()
        assert obs.dtype == flat.dtype  # uint8 for the image, float32 rows for the Dict
        np.testing.assert_array_equal(obs, reference.reset())
        for step in range(12):  # past an episode end (8 steps): final observations travel too
            actions = np.full(4, step % 2)
            got, want = runner.step(actions), reference.step(actions)
            for g, w in zip(got, want, strict=True):
                assert np.asarray(g).dtype == np.asarray(w).dtype
                np.testing.assert_array_equal(g, w)
    finally:
        runner.close()
        reference.close()


def test_replay_memory_keeps_a_dicts_frames_as_bytes_and_saves_them_so(tmp_path):
    agent = wb.DQN(
        dict_env,
        learning_starts=16,
        batch_size=8,
        buffer_size=100,
        net_arch=(16,),
        train_freq=8,
        gradient_steps=1,
        seed=0,
    )
    memory = agent.memory
    assert isinstance(memory.obs, ColumnStore) and isinstance(memory.next_obs, ColumnStore)
    width = agent.obs_shape[0]  # 8 * 8 * 3 frame columns + 2 floats
    assert memory.nbytes() < 0.3 * 2 * 100 * width * 4  # the frames take a quarter of float32's bytes
    session = wb.Session(agent, dict_env, seed=0)
    session.run(steps=60)
    memory = agent.memory  # the session's seed rebuilt it
    assert isinstance(memory.obs, ColumnStore)
    session.save(tmp_path / "run", memory=True)
    with np.load(tmp_path / "run" / "memory.npz") as saved:
        assert saved["obs_uint8"].dtype == np.uint8 and saved["obs_uint8"].shape == (60, 192)
        assert saved["next_obs_float32"].dtype == np.float32 and "obs" not in saved
    again = wb.Session.reopen(tmp_path / "run", dict_env)
    np.testing.assert_array_equal(again.agent.memory.obs[:60], memory.obs[:60])
    np.testing.assert_array_equal(again.agent.memory.next_obs[:60], memory.next_obs[:60])
    batch = again.agent.memory.sample(8, np.random.default_rng(0))
    assert batch.obs.dtype == np.float32 or str(batch.obs.dtype) == "torch.float32"
    # A memory saved as one float32 array (before issue 41) loads into the split one.
    old = ReplayMemory(100, (width,))
    old.add(memory.obs[:60], memory.actions[:60], memory.rewards[:60], memory.next_obs[:60], memory.dones[:60], 0.99)
    old.save(tmp_path / "old.npz")
    fresh = ReplayMemory(100, (width,), obs_byte_columns=byte_columns(dict_env().observation_space))
    fresh.load(tmp_path / "old.npz")
    np.testing.assert_array_equal(fresh.obs[:60], memory.obs[:60])


def test_datasets_keep_frames_as_bytes(tmp_path):
    # A recorded Dict of an image and a vector: the frame columns written as uint8, read back exactly.
    agent = wb.DQN(dict_env, learning_starts=10**6, net_arch=(8,), seed=0)
    wb.Session(agent, dict_env, seed=0, record=tmp_path / "dict").run(steps=24)
    with np.load(tmp_path / "dict" / "arrays.npz") as saved:
        assert saved["observations_uint8"].dtype == np.uint8 and saved["observations_uint8"].shape == (24, 192)
        assert saved["observations_float32"].shape == (24, 2) and "observations" not in saved
    ds = wb.Dataset.load(tmp_path / "dict")
    assert ds.observations.shape == (24, 194) and isinstance(ds.observation_space, spaces.Dict)
    ds.save(tmp_path / "again")
    np.testing.assert_array_equal(wb.Dataset.load(tmp_path / "again").observations, ds.observations)
    # An image observation: uint8 in the dataset, in memory and on disk.
    agent = wb.DQN(image_env, learning_starts=10**6, net_arch=(8,), seed=0)
    wb.Session(agent, image_env, seed=0, record=tmp_path / "image").run(steps=16)
    ds = wb.Dataset.load(tmp_path / "image")
    assert ds.observations.dtype == np.uint8 and ds.next_observations.dtype == np.uint8
    assert ds.observations.shape == (16, 8, 8, 3)
    with np.load(tmp_path / "image" / "arrays.npz") as saved:
        assert saved["observations"].dtype == np.uint8
