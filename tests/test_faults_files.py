"""Files a user owns are never overwritten (issue 49, class 1): every file the library writes into a
user's folder (model cards, curves, videos and their index, datasets, a population's state, signals,
exports) goes through ``workbench.files``: it replaces only its own files unless ``overwrite=True``,
writes through a new temporary file, and never follows a link at the temporary name or the target."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import workbench as wb
from workbench.card import CARD_MARKER, write_card
from workbench.files import check_folder, replacing, write_text
from workbench.video import Videos, VideoSettings, VideoWriter, encode_video


def _saved(tmp_path, name="run"):
    """A saved run, a few steps long (its signals make the card's curves)."""
    agent = wb.PPO("CartPole-v1", n_steps=32, n_envs=1, net_arch=(8,), n_epochs=1, batch_size=32, seed=0)
    session = wb.Session(agent, "CartPole-v1", seed=0, eval_episodes=1, checkpoint_dir=tmp_path / name)
    session.run(steps=64)
    folder = tmp_path / name
    session.save(folder / "latest")
    return session, folder


def _outside(tmp_path):
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("the user's own file\n")
    return victim


# -- the helper itself ------------------------------------------------------------------------------


def test_replacing_refuses_what_is_not_ours_and_links(tmp_path):
    target = tmp_path / "notes.md"
    target.write_text("mine")
    with pytest.raises(FileExistsError, match="not a file the test wrote.*overwrite=True"):
        write_text(target, "new", owner="the test", kind="a file the test wrote", ours=lambda p: False)
    assert target.read_text() == "mine"
    write_text(target, "new", owner="the test", ours=lambda p: False, overwrite=True)
    assert target.read_text() == "new"
    victim = _outside(tmp_path)
    link = tmp_path / "link.md"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError, match="symbolic link"):
        write_text(link, "x", owner="the test", ours=lambda p: True)
    write_text(link, "x", owner="the test", overwrite=True)  # the link itself is replaced, never followed
    assert victim.read_text() == "the user's own file\n" and not link.is_symlink() and link.read_text() == "x"
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        write_text(tmp_path / "folder", "x", owner="the test", overwrite=True)


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path):
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), replacing(target, owner="the test") as tmp:
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["data.bin"]


def test_a_folder_that_is_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="checkpoint_dir=.*is a file"):
        check_folder(tmp_path / "file", owner="Session", argument="checkpoint_dir")
    with pytest.raises(NotADirectoryError, match="lies below"):
        check_folder(tmp_path / "file" / "sub", owner="Session", argument="checkpoint_dir")
    check_folder(tmp_path / "new" / "sub", owner="Session", argument="checkpoint_dir")


# -- model cards ------------------------------------------------------------------------------------


def test_a_card_never_overwrites_the_users_readme_or_curves(tmp_path):
    session, folder = _saved(tmp_path)
    (folder / "README.md").write_text("# My project\n")
    with pytest.raises(FileExistsError, match="README.md: exists and is a file that is not a model card"):
        session.card(folder, episodes=1)
    assert (folder / "README.md").read_text() == "# My project\n"
    with pytest.raises(FileExistsError, match="README.md"):
        write_card(folder, evaluate=False)
    os.remove(folder / "README.md")
    (folder / "curves.png").write_bytes(b"\x89PNG\r\n\x1a\n my own plot")
    with pytest.raises(FileExistsError, match="curves.png: exists and is a file that is not training curves"):
        write_card(folder, evaluate=False)
    assert (folder / "curves.png").read_bytes().endswith(b"my own plot") and not (folder / "README.md").exists()
    card = write_card(folder, evaluate=False, overwrite=True)  # asked for: both replaced
    assert card.text.rstrip().endswith(CARD_MARKER) and card.curves is not None
    assert b"rl-workbench" in (folder / "curves.png").read_bytes()[:4096]
    # The card's own files are replaced by the next card without asking.
    again = write_card(folder, evaluate=False)
    assert again.text == (folder / "README.md").read_text()


def test_the_command_line_refuses_too(tmp_path):
    from workbench.cli import main

    _, folder = _saved(tmp_path)
    (folder / "README.md").write_text("mine\n")
    with pytest.raises(SystemExit, match="README.md: exists.*overwrite"):
        main(["card", os.fspath(folder), "--no-eval"])
    assert (folder / "README.md").read_text() == "mine\n"
    assert main(["card", os.fspath(folder), "--no-eval", "--overwrite"]) == 0
    assert "## Load and play" in (folder / "README.md").read_text()


def test_a_card_follows_no_link(tmp_path):
    _, folder = _saved(tmp_path)
    victim = _outside(tmp_path)
    (folder / "README.md").symlink_to(victim)
    with pytest.raises(FileExistsError, match="symbolic link"):
        write_card(folder, evaluate=False)
    os.remove(folder / "README.md")
    # Links planted at the temporary names earlier versions used: never followed.
    for name in ("README.md.tmp", ".README.md.tmp", "curves.png.tmp"):
        (folder / name).symlink_to(victim)
    write_card(folder, evaluate=False)
    assert victim.read_text() == "the user's own file\n"
    assert not (folder / "README.md").is_symlink()


def test_a_card_of_an_earlier_version_is_still_its_own(tmp_path):
    _, folder = _saved(tmp_path)
    earlier = "# PPO on CartPole-v1\n\nA PPO agent trained with rl-workbench for 0 env steps (0 episodes).\n"
    (folder / "README.md").write_text(earlier + "\n## Curves\n\n![training curves](curves.png)\n")
    (folder / "curves.png").write_bytes(b"\x89PNG\r\n\x1a\n an earlier version's plot")
    card = write_card(folder, evaluate=False)
    assert card.text.rstrip().endswith(CARD_MARKER)


def test_session_card_refuses_before_saving_or_playing(tmp_path):
    session, _ = _saved(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "README.md").write_text("mine\n")
    with pytest.raises(FileExistsError):
        session.card(fresh, episodes=1)
    assert os.listdir(fresh) == ["README.md"]  # nothing saved there


# -- videos -----------------------------------------------------------------------------------------


def test_a_video_follows_no_link_and_replaces_no_users_file(tmp_path):
    victim = _outside(tmp_path)
    folder = tmp_path / "videos"
    folder.mkdir()
    frames = [np.zeros((8, 8, 3), np.uint8) + i for i in range(3)]
    settings = VideoSettings(fps=10, format="gif")
    (folder / "eval-step000000010.gif").symlink_to(victim)
    (folder / "videos.json").write_text("my notes, not a list of videos")
    videos = Videos()
    writer = VideoWriter(videos, settings)
    writer.submit(os.fspath(folder), 10, 1.0, frames)
    assert videos.wait(30)
    assert len(videos) == 0 and "symbolic link" in str(videos.errors[0])
    os.remove(folder / "eval-step000000010.gif")
    writer.submit(os.fspath(folder), 10, 1.0, frames)  # the user's videos.json is refused too
    assert videos.wait(30) and "videos.json" in str(videos.errors[1])
    assert (folder / "videos.json").read_text() == "my notes, not a list of videos"
    assert victim.read_text() == "the user's own file\n"
    # The old fixed temporary name of encode_video: a link there is never followed.
    (folder / ".clip.gif.partial").symlink_to(victim)
    encode_video(frames, os.fspath(folder / "clip.gif"), 10)
    assert victim.read_text() == "the user's own file\n" and (folder / "clip.gif").read_bytes()[:4] == b"GIF8"


def test_a_one_pixel_frame_makes_a_video(tmp_path):
    videos = Videos()
    writer = VideoWriter(videos, VideoSettings(fps=10))
    writer.submit(os.fspath(tmp_path), 1, 0.0, [np.full((1, 1, 3), 200, np.uint8)] * 3)
    assert videos.wait(60)
    assert videos.errors == [] and len(videos) == 1 and os.path.isfile(videos[0].path)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


# -- datasets, signals, populations -----------------------------------------------------------------


def test_a_dataset_follows_no_link(tmp_path):
    data = wb.Dataset.from_arrays(
        np.zeros((4, 2), np.float32),
        np.zeros(4, np.int64),
        np.ones(4),
        np.zeros((4, 2), np.float32),
        np.array([0, 0, 0, 1], bool),
    )
    victim = _outside(tmp_path)
    folder = tmp_path / "data"
    data.save(folder)
    (folder / ".dataset.json.tmp").symlink_to(victim)  # the temporary name earlier versions used
    data.save(folder)
    assert victim.read_text() == "the user's own file\n" and len(wb.Dataset.load(folder)) == 4
    os.remove(folder / "arrays.npz")
    (folder / "arrays.npz").symlink_to(victim)
    with pytest.raises(wb.DatasetError, match="arrays.npz: exists and is a symbolic link"):
        data.save(folder)
    assert victim.read_text() == "the user's own file\n"


def test_signals_csv_follows_no_link_at_its_temporary_name(tmp_path):
    from workbench.signals import SignalSet

    signals = SignalSet()
    signals.record("loss", 1, 0.5)
    victim = _outside(tmp_path)
    (tmp_path / f"s.csv.tmp-{os.getpid()}").symlink_to(victim)
    signals.to_csv(tmp_path / "s.csv")
    assert victim.read_text() == "the user's own file\n"
    assert SignalSet.from_csv(tmp_path / "s.csv")["loss"].values.tolist() == [0.5]


def test_a_population_replaces_only_its_own_state_file(tmp_path):
    from workbench.sweeps.pbt import _FORMAT, _is_our_state

    mine = tmp_path / "population.json"
    mine.write_text(json.dumps({"format": _FORMAT, "members": []}))
    assert _is_our_state(os.fspath(mine))
    for text in (json.dumps({"format": "something else"}), "not json", "[1, 2]"):
        mine.write_text(text)
        assert not _is_our_state(os.fspath(mine))
