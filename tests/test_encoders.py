"""Encoders chosen from the observation space: every agent on image and Dict observations, the CNN
choice and its errors, custom encoders through save/load only when allowed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

import workbench as wb
from workbench.agents.encoders import DictEncoder, ImageEncoder, image_layout, is_image_space, make_encoder
from workbench.checkpoint import CheckpointError
from workbench.envs.testing import SeeTheSide

# Updates every 8 steps, as few as show an update ran: the test checks training, saving, loading and acting
# on images, not learning (a CNN update a step made the continuous rows most of this file's time).
SMALL = {
    "DQN": dict(learning_starts=32, batch_size=16, buffer_size=500, net_arch=(32,), train_freq=8, gradient_steps=1),
    "QRDQN": dict(learning_starts=32, batch_size=16, buffer_size=500, net_arch=(32,), train_freq=8, gradient_steps=1),
    "C51": dict(learning_starts=32, batch_size=16, buffer_size=500, net_arch=(32,), train_freq=8, gradient_steps=1),
    "Rainbow": dict(learning_starts=32, batch_size=16, buffer_size=500, net_arch=(32,), train_freq=8, gradient_steps=1),
    "PPO": dict(n_steps=16, n_envs=2, batch_size=32, n_epochs=1, net_arch=(32,)),
    "A2C": dict(n_envs=2, net_arch=(32,)),
    "RecurrentPPO": dict(n_steps=16, n_envs=2, batch_size=32, n_epochs=1, net_arch=(32,), lstm_hidden_size=16),
    "DDPG": dict(learning_starts=32, batch_size=16, buffer_size=500, train_freq=8, net_arch=(32,)),
    "TD3": dict(learning_starts=32, batch_size=16, buffer_size=500, train_freq=8, net_arch=(32,)),
    "SAC": dict(learning_starts=32, batch_size=16, buffer_size=500, train_freq=8, net_arch=(32,)),
    "TQC": dict(learning_starts=32, batch_size=16, buffer_size=500, train_freq=8, net_arch=(32,), n_quantiles=5),
    "CrossQ": dict(
        learning_starts=32, batch_size=16, buffer_size=500, train_freq=8, net_arch=(32,), critic_net_arch=(32,)
    ),
    "DroQ": dict(learning_starts=32, batch_size=16, buffer_size=500, train_freq=8, net_arch=(32,), gradient_steps=2),
}
CONTINUOUS = {"DDPG", "TD3", "SAC", "TQC", "CrossQ", "DroQ"}


class TinyEncoder(nn.Module):
    """A user's encoder: mean colour of the image through a linear layer."""

    def __init__(self, observation_space: spaces.Space, width: int = 8) -> None:
        super().__init__()
        self.features_dim = width
        self.linear = nn.Linear(3, width)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        assert obs.dtype == torch.uint8  # the encoder gets the observation in its own dtype
        return torch.relu(self.linear(obs.float().mean(dim=(1, 2)) / 255.0))


def _env(name: str, dict_obs: bool):
    return lambda: SeeTheSide(continuous=name in CONTINUOUS, dict_obs=dict_obs)


@pytest.mark.parametrize("dict_obs", [False, True], ids=["image", "dict"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_agent_trains_saves_loads_and_plays_on_images(name, dict_obs, tmp_path):
    make = _env(name, dict_obs)
    agent = getattr(wb, name)(make, **SMALL[name])
    want = "small_cnn(3x16x16 HWC uint8)"
    assert (f"dict(image: {want}, vector: flat(2))" if dict_obs else want) in repr(agent)
    session = wb.Session(agent, make, seed=0)
    session.run(steps=160)
    assert agent.num_updates > 0
    memory = getattr(agent, "memory", None)
    if memory is not None and not dict_obs:
        assert memory.obs.dtype == np.uint8
    session.save(tmp_path / "run", memory=memory is not None)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert "small_cnn" in meta["encoder"]
    loaded = wb.load(tmp_path / "run")
    obs, _ = make().reset(seed=1)
    np.testing.assert_allclose(loaded.act(obs), agent.eval().act(obs), rtol=1e-5, atol=1e-6)
    assert len(loaded.play(make(), episodes=1)) == 1


def test_image_layout_follows_sb3_rules():
    assert image_layout((4, 84, 84)) == (True, 4, 84, 84)  # frame stack, channels first
    assert image_layout((84, 84, 4)) == (False, 4, 84, 84)
    assert image_layout((10, 10, 6)) == (False, 6, 10, 10)  # MinAtar Breakout
    assert is_image_space(spaces.Box(0, 255, (16, 16, 3), np.uint8))
    assert not is_image_space(spaces.Box(0, 1, (16, 16, 3), np.float32))  # not uint8: a vector to the MLP
    assert not is_image_space(spaces.Box(0, 255, (16, 16), np.uint8))  # two dimensions


def test_chw_and_hwc_give_the_same_features():
    hwc = SeeTheSide()
    chw = SeeTheSide(channels_first=True)
    obs_hwc, _ = hwc.reset(seed=0)
    obs_chw, _ = chw.reset(seed=0)
    torch.manual_seed(0)
    enc_hwc = make_encoder(hwc.observation_space)
    torch.manual_seed(0)
    enc_chw = make_encoder(chw.observation_space)
    assert enc_hwc.channels_first is False and enc_chw.channels_first is True
    a = enc_hwc(torch.from_numpy(obs_hwc[None]))
    b = enc_chw(torch.from_numpy(obs_chw[None]))
    torch.testing.assert_close(a, b)


def test_auto_picks_nature_for_large_images_and_small_below_36():
    assert make_encoder(spaces.Box(0, 255, (4, 84, 84), np.uint8)).kind == "nature"
    assert make_encoder(spaces.Box(0, 255, (36, 36, 1), np.uint8)).kind == "nature"
    assert make_encoder(spaces.Box(0, 255, (35, 40, 3), np.uint8)).kind == "small"
    enc = make_encoder(spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert enc(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 512)


def test_nature_on_a_small_image_names_the_minimum_size():
    with pytest.raises(ValueError, match=r"at least 36x36 pixels.*got 16x16.*encoder='small'"):
        wb.DQN(SeeTheSide(), encoder="nature")
    with pytest.raises(ValueError, match="image observations"):
        wb.DQN("CartPole-v1", encoder="nature")


def test_dict_encoder_concatenates_per_key_and_skips_the_action_mask():
    space = spaces.Dict(
        {
            "action_mask": spaces.Box(0, 1, (2,), np.int8),
            "image": spaces.Box(0, 255, (16, 16, 3), np.uint8),
            "vector": spaces.Box(-1, 1, (2,), np.float32),
        }
    )
    enc = make_encoder(space)
    assert isinstance(enc, DictEncoder) and isinstance(enc.parts["image"], ImageEncoder)
    assert "action_mask" not in enc.parts
    assert enc.features_dim == 128 + 2
    flat = torch.zeros(3, spaces.flatdim(space))
    flat[:, spaces.flatdim(space) - 2 :] = torch.tensor([0.25, -0.5])
    out = enc(flat)
    assert out.shape == (3, 130)
    torch.testing.assert_close(out[:, -2:], torch.tensor([[0.25, -0.5]] * 3))


def test_image_observations_are_not_normalized():
    with pytest.raises(ValueError, match="normalize_observations"):
        wb.PPO(SeeTheSide(), normalize_observations=True)


def test_uint8_reaches_the_network_unconverted():
    agent = wb.PPO(SeeTheSide(), n_steps=8)
    batch, _ = agent.prepare_obs(SeeTheSide().reset(seed=0)[0])
    assert batch.dtype == np.uint8


def test_custom_encoder_round_trips_only_when_allowed(tmp_path):
    make = _env("PPO", False)
    agent = wb.PPO(
        make,
        n_steps=16,
        n_envs=1,
        batch_size=16,
        n_epochs=1,
        net_arch=(16,),
        encoder=TinyEncoder,
        encoder_kwargs={"width": 6},
    )
    assert f"custom {TinyEncoder.__module__}.TinyEncoder" in repr(agent)
    wb.Session(agent, make, seed=0).run(steps=32)
    agent.save(tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    path = meta["hyperparameters"]["encoder"]
    assert path == f"{TinyEncoder.__module__}.TinyEncoder"
    assert meta["hyperparameters"]["encoder_kwargs"] == {"width": 6}
    with pytest.raises(CheckpointError, match=rf"custom encoder '{path}'.*allow_encoders=\['{path}'\]"):
        wb.load(tmp_path / "run")
    with pytest.raises(CheckpointError, match="allow_encoders"):
        wb.Session.reopen(tmp_path / "run", make)
    loaded = wb.load(tmp_path / "run", allow_encoders=[path])
    assert loaded.actor[0].net.linear.out_features == 6
    obs, _ = make().reset(seed=2)
    assert loaded.act(obs) == agent.eval().act(obs)
    resumed = wb.Session.reopen(tmp_path / "run", make, allow_encoders=[path])
    assert resumed.agent.num_timesteps == 32


def test_encoder_kwargs_must_be_json():
    with pytest.raises(ValueError, match="encoder_kwargs"):
        wb.PPO(SeeTheSide(), encoder=TinyEncoder, encoder_kwargs={"width": object()})
    with pytest.raises(ValueError, match="encoder"):
        wb.PPO(SeeTheSide(), encoder="resnet")


def test_vector_observations_keep_the_plain_mlp():
    agent = wb.PPO("CartPole-v1")
    assert "encoder=mlp" in repr(agent)
    assert isinstance(agent.actor, nn.Sequential) and isinstance(agent.actor[0], nn.Linear)


@pytest.mark.parametrize("agent", ["ppo", "a2c", "dqn", "qrdqn"])
def test_atari_presets_build_the_nature_cnn_on_stacked_frames(agent):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    built = (
        wb.preset("BreakoutNoFrameskip-v4", agent, buffer_size=100)
        if "dqn" in agent
        else wb.preset("BreakoutNoFrameskip-v4", agent)
    )
    assert built.agent.observation_space.shape == (4, 84, 84)
    assert "nature_cnn(4x84x84 CHW uint8)" in repr(built.agent)
    assert built.agent.config.net_arch == ()


def test_atari_id_is_preprocessed_and_plays():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    agent = wb.DQN("ALE/Pong-v5", buffer_size=100, learning_starts=10, net_arch=())
    frames = agent.play("ALE/Pong-v5", episodes=1, max_steps=5, render="rgb_array")[1]
    assert len(frames[0]) == 6 and frames[0][0].shape == (210, 160, 3)


def test_minatar_is_a_small_uint8_image_env():
    pytest.importorskip("minatar")
    agent = wb.DQN("MinAtar/Breakout-v1", buffer_size=200, learning_starts=20, train_freq=8, gradient_steps=1)
    assert "small_cnn(4x10x10 HWC uint8)" in repr(agent)
    wb.Session(agent, "MinAtar/Breakout-v1", seed=0).run(steps=60)
    assert agent.memory.obs.dtype == np.uint8 and agent.memory.obs[:60].max() == 255


def test_discrete_observations_are_one_hot():
    agent = wb.DQN("FrozenLake-v1")
    assert "encoder=one_hot(16)" in repr(agent)
    batch, single = agent.prepare_obs(3)
    assert single and batch.dtype == np.float32 and batch[0].tolist() == [0, 0, 0, 1] + [0] * 12
