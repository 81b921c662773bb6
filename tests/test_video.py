"""Evaluation videos while a run trains (issue 36): recorded, bounded, written beside the
checkpoints, listed in ``session.videos``, encoded off the training thread, sent to TensorBoard,
shown in the dashboard's video panel; and the model card of a run."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

import workbench as wb
from workbench.video import Videos, VideoSettings, VideoWriter, read_frames, video_settings

OPTIONS = {"fps": 20, "max_seconds": 1.0, "max_width": 160}


def _session(tmp_path, **kwargs):
    agent = wb.PPO("CartPole-v1", n_steps=32, n_envs=2, net_arch=(8,), n_epochs=1, batch_size=32, seed=0)
    kwargs.setdefault("video_options", OPTIONS)
    return wb.Session(agent, "CartPole-v1", seed=0, eval_episodes=1, checkpoint_dir=tmp_path / "run", **kwargs)


def test_videos_are_recorded_while_training_beside_the_checkpoints(tmp_path):
    session = _session(tmp_path, video_every=64)
    session.run(steps=192)
    assert session.videos.wait(30)
    steps = [v.step for v in session.videos]
    assert steps == [64, 128, 192]
    folder = tmp_path / "run" / "videos"
    assert sorted(os.listdir(folder)) == [f"eval-step{s:09d}.mp4" for s in steps] + ["videos.json"]
    latest = session.videos[-1]
    assert latest is session.videos.latest and latest.path == os.fspath(folder / "eval-step000000192.mp4")
    with open(latest.path, "rb") as f:
        assert f.read(12)[4:8] == b"ftyp"  # an MP4 file
    # Bounded: at most fps * max_seconds frames, at most max_width wide (CartPole renders 600 x 400).
    assert 1 <= latest.frames <= 20 and latest.width <= 160 and latest.height <= 110
    frames = read_frames(latest.path)
    assert len(frames) == latest.frames and frames[0].shape == (latest.height, latest.width, 3)
    index = json.loads((folder / "videos.json").read_text())
    assert [e["step"] for e in index] == steps
    # The evaluation behind each video is recorded as usual.
    assert session.signals["eval_reward"].steps.tolist() == steps
    # A reopened run lists the videos it wrote.
    session.save(tmp_path / "run" / "latest")
    again = wb.Session.reopen(tmp_path / "run" / "latest", "CartPole-v1", checkpoint_dir=tmp_path / "run")
    assert [v.step for v in again.videos] == steps


def test_a_video_leaves_the_evaluation_unchanged(tmp_path):
    session = _session(tmp_path)
    plain = session.evaluate(episodes=2)
    filmed = session.evaluate(episodes=2, record_video=True)
    assert filmed == plain
    assert session.videos.wait(30) and len(session.videos) == 1
    assert session.videos[0].episode_return == session.agent.play("CartPole-v1", episodes=1, seed=10_000)[0]
    with pytest.raises(wb.ArgumentError, match="record_video"):
        session.evaluate(record_video="yes")


def test_video_options_are_checked():
    assert video_settings(None) == VideoSettings()
    assert video_settings({"fps": 10}).max_frames == 100
    with pytest.raises(wb.ArgumentError, match="unknown setting"):
        video_settings({"frames_per_second": 10})
    with pytest.raises(wb.ArgumentError, match=r"video_options\['fps'\]"):
        video_settings({"fps": 0})
    with pytest.raises(wb.ArgumentError, match="video_every"):
        wb.Session(wb.PPO("CartPole-v1"), "CartPole-v1", video_every=0)


def test_gif_fallback_and_keep(tmp_path):
    session = _session(tmp_path, video_options={**OPTIONS, "format": "gif", "keep": 2})
    for _ in range(3):
        session.run(steps=32)
        session.evaluate(record_video=True)
        session.videos.wait(30)
    assert [v.format for v in session.videos] == ["gif", "gif"]
    assert len(os.listdir(tmp_path / "run" / "videos")) == 3  # two GIFs and the index
    with open(session.videos[-1].path, "rb") as f:
        assert f.read(6) == b"GIF89a"


def test_an_env_that_does_not_render_frames_is_named(tmp_path):
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    session = wb.Session(wb.PPO(env), env, eval_env=gym.make("CartPole-v1"), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        session.evaluate(record_video=True)


def test_the_writer_never_makes_the_caller_wait(tmp_path):
    # A slow encoder (held until released) neither blocks submit nor loses the clip; a full backlog drops.
    release = threading.Event()
    written = []

    def slow(frames, path, fps):
        release.wait(30)
        with open(path, "wb") as f:
            f.write(b"x")

    videos = Videos()
    writer = VideoWriter(videos, VideoSettings(format="gif"), written.append, slow, backlog=1)
    frame = np.zeros((4, 4, 3), np.uint8)
    assert writer.submit(os.fspath(tmp_path), 1, 1.0, [frame])  # taken by the writer thread
    for _ in range(200):  # the thread picks it up; the backlog is free again
        if writer._queue.empty():
            break
        threading.Event().wait(0.01)
    assert writer.submit(os.fspath(tmp_path), 2, 1.0, [frame])  # waits in the backlog
    assert not writer.submit(os.fspath(tmp_path), 3, 1.0, [frame])  # dropped: the backlog is full
    assert videos.pending == 2 and videos.dropped == 1 and len(videos) == 0
    release.set()
    assert videos.wait(30)
    assert [v.step for v in videos] == [1, 2] and [v.step for v in written] == [1, 2]


def test_tensorboard_receives_the_videos(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = wb.TensorBoard(tmp_path / "tb", run_name="video")
    session = _session(tmp_path, video_every=64, sinks=[tb])
    session.run(steps=128)
    acc = EventAccumulator(tb.run_dir, size_guidance={"images": 0})
    acc.Reload()
    images = acc.Images("eval_video")
    assert [i.step for i in images] == [64, 128]
    assert images[0].encoded_image_string[:6] == b"GIF89a" and images[0].width <= 160


def test_the_dashboard_shows_the_latest_video_and_earlier_ones(tmp_path):
    session = _session(tmp_path, video_every=64)
    dash = wb.Dashboard(session)
    try:
        assert dash.video_panel.layout.display == "none"  # no video yet
        session.run(steps=128)
        session.videos.wait(30)
        dash.video_panel.refresh()
        panel = dash.video_panel
        assert panel.layout.display == "flex"
        assert panel.player.data == session.videos[-1].data() and panel.player.mime == "video/mp4"
        assert "step 128" in panel.caption.value
        assert [label for label, _ in panel.select.options] == ["latest", "step 64", "step 128"]
        panel.select.value = 0  # an earlier one
        assert panel.player.step == 64 and panel.player.data == session.videos[0].data()
        session.run(steps=32)
        session.evaluate(record_video=True)  # a new video while an earlier one is picked: it stays
        session.videos.wait(30)
        panel.refresh()
        assert panel.player.step == 64 and len(panel.select.options) == 4
        panel.select.value = -1  # latest again
        assert panel.player.step == session.videos[-1].step
    finally:
        dash.close()


@pytest.mark.slow  # matplotlib loads (seconds), two evaluations
def test_every_run_writes_its_card(tmp_path):
    session = _session(tmp_path, video_every=64)
    session.run(steps=128)
    card = session.card(episodes=2)
    folder = tmp_path / "run"
    assert card.path == os.fspath(folder / "README.md")
    text = (folder / "README.md").read_text()
    assert text.startswith("# PPO on CartPole-v1")
    for needed in (
        "| n_steps | 32 |",
        "version: torch",
        "version: gymnasium",
        "| CartPole-v1 | 2 | 0 |",
        "![training curves](curves.png)",
        'src="videos/eval-step000000128.mp4"',
        f'wb.load("{(folder / "latest").as_posix()}")',
    ):
        assert needed in text, needed
    assert card.evaluation.episodes == 2 and card.evaluation.mean == pytest.approx(
        np.mean(session.agent.play("CartPole-v1", episodes=2, seed=0))
    )
    assert (folder / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64," in card._repr_markdown_()  # the notebook shows it whole
    # The saved run alone (no session): the command line writes the same card.
    from workbench.cli import main

    os.remove(folder / "README.md")
    assert main(["card", os.fspath(folder), "--episodes", "1"]) == 0
    assert "## Load and play" in (folder / "README.md").read_text()


def test_a_card_for_a_zip_and_for_an_old_run(tmp_path):
    import shutil

    from workbench.card import write_card

    fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "saved-v1")
    shutil.copy(os.path.join(fixtures, "sac-pendulum.zip"), tmp_path)
    card = write_card(tmp_path / "sac-pendulum.zip", episodes=1)
    assert card.path == os.fspath(tmp_path / "sac-pendulum.README.md") and "# SAC on Pendulum-v1" in card.text
    shutil.copytree(os.path.join(fixtures, "dqn-cartpole"), tmp_path / "dqn")
    card = write_card(tmp_path / "dqn", evaluate=False)
    assert "## Evaluation" in card.text and card.evaluation is None
    with pytest.raises(FileNotFoundError, match="no saved run here"):
        write_card(tmp_path / "nothing")
