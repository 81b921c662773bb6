"""Surfaces that refuse bad input at the door (issue 49, classes 2, 4 and 8): a command that needs a
display stops at once without one; video settings are checked when the session is built and a video
that cannot be rendered is dropped with a signal, never failing the run; and the smaller ones (a
step beyond 64 bits, a string reward, a tensor of the wrong shape, an edit of nothing, zero
episodes, a key no keyboard has)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import workbench as wb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _small_ppo(env="CartPole-v1", **kwargs):
    return wb.PPO(env, n_steps=32, n_envs=1, net_arch=(8,), n_epochs=1, batch_size=32, seed=0, **kwargs)


# -- class 2: a command that can never finish ----------------------------------------------------


def _play_human(env_id: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    env.update(extra, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "workbench", "play", "--human", env_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # before the fix it waited for keys until killed
        cwd=ROOT,
    )


def test_play_human_without_a_display_stops_at_once_saying_so():
    pytest.importorskip("pygame")
    done = _play_human("CartPole-v1")
    assert done.returncode != 0
    assert "needs a display" in done.stderr and "DISPLAY" in done.stderr


def test_play_human_off_screen_refuses_an_env_that_waits_for_a_key():
    pytest.importorskip("pygame")
    done = _play_human("CartPole-v1", SDL_VIDEODRIVER="dummy")
    assert done.returncode != 0 and "waits for a key" in done.stderr


# -- class 4: videos --------------------------------------------------------------------------------


def test_video_every_with_an_env_that_does_not_render_is_refused_at_construction(tmp_path):
    env = gym.make("CartPole-v1")  # render_mode None
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        wb.Session(_small_ppo(), env, eval_env=gym.make("CartPole-v1"), video_every=64, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="factory .* render_mode"):
        wb.Session(_small_ppo(), lambda: gym.make("CartPole-v1"), video_every=64, checkpoint_dir=tmp_path)
    wb.Session(_small_ppo(), "CartPole-v1", video_every=64, checkpoint_dir=tmp_path)  # an id renders


def test_a_checkpoint_dir_that_is_a_file_is_refused_at_construction(tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(NotADirectoryError, match="checkpoint_dir"):
        wb.Session(_small_ppo(), "CartPole-v1", video_every=64, checkpoint_dir=tmp_path / "taken")


class _BadRender(gym.Wrapper):
    """CartPole whose render() gives ``what`` (or raises it)."""

    def __init__(self, what):
        super().__init__(gym.make("CartPole-v1", render_mode="rgb_array"))
        self.what = what

    def render(self):
        if isinstance(self.what, Exception):
            raise self.what
        return self.what


@pytest.mark.parametrize(
    "what", [None, "a frame", np.zeros((4, 4, 7), np.uint8), np.zeros((0, 4, 3)), RuntimeError("no GL context")]
)
def test_a_render_that_fails_drops_the_video_not_the_run(tmp_path, what):
    session = wb.Session(
        _small_ppo(), lambda: _BadRender(what), seed=0, eval_episodes=1, video_every=32, checkpoint_dir=tmp_path
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session.run(steps=64)
    assert session.status == "finished" and session.error is None
    assert session.videos.wait(30) and len(session.videos) == 0
    assert len(session.videos.errors) == 2
    assert session.signals["video_errors"].values.tolist() == [1.0, 2.0]
    assert session.signals["eval_reward"].steps.tolist() == [32, 64]  # the evaluations themselves count
    assert sum("dropped" in str(w.message) for w in caught) == 1  # said once


# -- class 8: smaller ones --------------------------------------------------------------------------


def test_a_step_beyond_64_bits_is_a_value_error():
    session = wb.Session(_small_ppo(), "CartPole-v1")
    with pytest.raises(ValueError, match="64-bit"):
        session.log("x", 1.0, step=10**30)
    session.log("x", 1.0, step=2**62)
    assert session.signals["x"].steps.tolist() == [2**62]


def test_feedback_refuses_a_string_reward_as_an_env_does():
    env = gym.make("CartPole-v1")
    session = wb.Session.external(wb.DQN(env, learning_starts=10, seed=0))
    obs = env.reset(seed=0)[0]
    session.act(obs)
    for bad in ("1.5", True, b"1"):
        with pytest.raises(TypeError, match="reward"):
            session.feedback(bad, obs, False, False)
    session.feedback(np.float32(1.5), obs, False, False)


def test_a_tensor_of_the_right_size_but_wrong_shape_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    session = wb.Session(_small_ppo(), "CartPole-v1", seed=0)
    path = session.save(tmp_path / "run")
    weights = os.path.join(path, "weights.safetensors")
    tensors = load_file(weights)
    tensors["rng/torch"] = tensors["rng/torch"].reshape(1, -1).contiguous()
    save_file(tensors, weights)
    with pytest.raises(wb.CheckpointError, match="weights.safetensors: tensor 'rng/torch' has shape"):
        wb.Session.reopen(path, "CartPole-v1")
    with pytest.raises(wb.CheckpointError, match="rng/torch"):
        wb.load(path)


def test_intrinsic_coef_needs_an_intrinsic_module():
    session = wb.Session(_small_ppo(), "CartPole-v1")
    with pytest.raises(wb.ArgumentError, match="no intrinsic="):
        session.set(intrinsic_coef=0.5)
    with_bonus = wb.Session(_small_ppo(intrinsic=wb.RND()), "CartPole-v1")
    assert with_bonus.set(intrinsic_coef=0.5) == {"intrinsic_coef": 1.0}


def test_card_with_zero_episodes_is_refused(tmp_path):
    session = wb.Session(_small_ppo(), "CartPole-v1", checkpoint_dir=tmp_path)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="episodes"):
            session.card(episodes=bad)
    assert not os.path.exists(tmp_path / "latest")  # refused before saving


def test_a_key_no_keyboard_has_is_refused():
    with pytest.raises(ValueError, match="'lft'"):
        wb.HumanPlay("CartPole-v1", {"lft": 0, "right": 1})
    with pytest.raises(ValueError, match="'arrowleftt'"):
        wb.HumanPlay("CartPole-v1", {("ArrowLeftt", "space"): 0})
    play = wb.HumanPlay("CartPole-v1", {"a": 0, "ArrowRight": 1, "Page Up": 0, "F5": 1})
    assert frozenset({"pageup"}) in play.keys.combos
