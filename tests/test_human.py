"""A person at the keyboard (issue 36): wb.HumanPlay maps keys to actions, records each episode
into a wb.Dataset, and the recorded demonstrations train wb.BC. Keys are injected from code here;
tests/test_browser_video.py presses real keys in JupyterLab."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.human import HumanPlay, default_mapping, normalize_key


def _balance(play: HumanPlay) -> None:
    """A person who knows CartPole: push towards where the pole falls."""
    _, _, angle, velocity = play.obs
    play.press("ArrowRight" if angle + 0.5 * velocity > 0 else "ArrowLeft")


def test_human_demonstrations_train_bc():
    play = HumanPlay("CartPole-v1", seed=0, max_steps=200)
    while play.episodes < 2:
        _balance(play)
    data = play.dataset
    assert isinstance(data, wb.Dataset) and data.num_episodes == 2 and len(data) == 400
    assert play.returns == [200.0, 200.0]
    # What was pressed is what was recorded: right (1) where the pole fell right.
    pushed_right = data.observations[:, 2] + 0.5 * data.observations[:, 3] > 0
    np.testing.assert_array_equal(data.actions, pushed_right.astype(data.actions.dtype))
    assert data.truncated[199] and not data.terminated[199]  # max_steps cuts, as a time limit
    agent = wb.BC(dataset=data, net_arch=(32,), seed=0)
    wb.Session(agent, dataset=data, seed=0).run(steps=400)
    assert np.mean(agent.play("CartPole-v1", episodes=2, seed=5, max_steps=200)) > 150  # random play: ~20
    play.close()


def test_the_dataset_saves_and_prefills_a_replay_agent(tmp_path):
    play = HumanPlay("MountainCar-v0", seed=0, max_steps=20)
    play.press("left", steps=10)
    play.press("right", steps=10)  # the episode is cut at 20 steps
    assert play.episodes == 1
    assert play.dataset.actions.tolist() == [0] * 10 + [2] * 10
    loaded = wb.Dataset.load(play.save(tmp_path / "human"))
    assert len(loaded) == 20 and loaded.metadata["source"] == "human:MountainCar-v0"
    dqn = wb.DQN("MountainCar-v0", learning_starts=0, net_arch=(8,))
    wb.Session(dqn, "MountainCar-v0", dataset=loaded)
    assert len(dqn.memory) == 20


def test_keys_without_a_key_and_taps():
    play = HumanPlay("CartPole-v1", seed=0)
    assert play.step() == 0.0 and play.steps == 0  # CartPole has no "do nothing": it waits for a key
    play.key_down("ArrowLeft")
    play.key_up("ArrowLeft")  # a tap between two steps still counts once
    play.step()
    play.step()
    assert play.steps == 1 and play._current["actions"] == [0]
    mountain = HumanPlay("MountainCar-v0")
    mountain.step()  # MountainCar's no-key action is "no push"
    assert mountain._current["actions"] == [1]


@pytest.mark.slow  # loads ale-py and MinAtar
def test_default_keys_of_atari_and_minatar():
    pong = HumanPlay("ALE/Pong-v5")
    assert pong.keys.action(set()) == 0  # NOOP
    assert pong.keys.action({"space"}) == 1  # FIRE
    assert pong.keys.action({"left", "space"}) == 5  # LEFTFIRE: the largest combination held
    pong.press("space", steps=2)
    assert pong.dataset if pong.episodes else pong._current["obs"][0].shape == (4, 84, 84)  # what agents see
    assert pong.frame.shape == (210, 160, 3)  # what the person sees
    pong.close()
    minatar = HumanPlay("MinAtar/Breakout-v1")
    assert minatar.keys.action({"left"}) == 1 and minatar.keys.action({"right"}) == 2
    assert minatar.keys.action(set()) == 0
    minatar.close()


def test_default_and_custom_mappings():
    pendulum = HumanPlay("Pendulum-v1")
    pendulum.press("right")
    assert pendulum._current["actions"][0].tolist() == [2.0]
    custom = HumanPlay("CartPole-v1", {"a": 0, "d": 1}, default=1)
    custom.press("A")
    custom.step()
    assert custom._current["actions"] == [0, 1]
    assert normalize_key(" ") == "space" and normalize_key("ArrowUp") == "up"
    with pytest.raises(ValueError, match="mapping="):
        import gymnasium as gym

        default_mapping(gym.make("FrozenLake-v1"))


def test_the_widget_takes_keys_from_the_page():
    play = HumanPlay("CartPole-v1", seed=0)
    view = play.widget()
    first = view.frame_view.frame
    assert first[:4] == b"\x89PNG" and "left: 0" in view.frame_view.help_text
    view._on_msg(view.frame_view, {"event": "down", "key": "ArrowRight"}, [])
    assert play.held == {"right"}
    for _ in range(5):
        play.step()
    view._on_msg(view.frame_view, {"event": "up", "key": "ArrowRight"}, [])
    assert play.held == set() and play._current["actions"] == [1] * 5
    assert view.frame_view.frame != first and "5 steps" in view.status.value  # the page got the new frame
    play.fps = 100.0
    play.start()  # the clock: held keys step the env in the background
    play.key_down("left")
    for _ in range(500):
        if play.episodes:
            break
        threading_wait(0.01)
    play.close()
    assert play.episodes >= 1 and not play.running


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)


@pytest.mark.slow
def test_workbench_play_human_in_a_window(tmp_path, monkeypatch):
    # pygame draws to SDL's dummy video driver here; with no key pressed MountainCar does nothing
    # until its 200-step limit, at 200 steps a second.
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    from workbench.cli import main

    assert main(["play", "--human", "MountainCar-v0", "--fps", "120", "--record", str(tmp_path / "d")]) == 0
    data = wb.Dataset.load(tmp_path / "d")
    assert len(data) == 200 and set(data.actions.tolist()) == {1}
