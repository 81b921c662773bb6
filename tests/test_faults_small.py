"""Issue 13, part 9: a logged value reads back as given, a bad --out costs no run, play reads a
.zip's env id, and the package metadata builds without deprecation warnings."""

import os
import shutil
import sys
import warnings

import numpy as np
import pytest

import workbench as wb
from workbench.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("value", [0.41, 0.1, 1e-12, 123456789.123456789, -2.5e300])
def test_a_logged_value_reads_back_exactly_as_given(tmp_path, value):
    session = wb.Session(wb.PPO("CartPole-v1", n_envs=1, n_steps=16, batch_size=16), "CartPole-v1")
    session.log("compression_ratio", value)
    sig = session.signals["compression_ratio"]
    assert sig.last == value and sig.values[0] == value and sig.mean() == value
    session.save(tmp_path / "run")
    resumed = wb.Session.reopen(tmp_path / "run", "CartPole-v1")
    assert resumed.signals["compression_ratio"].last == value  # through signals.csv too


def test_signal_memory_stays_bounded_with_float64_values():
    sig = wb.Signal("x", max_points=1000)
    sig.extend(np.arange(100_000), np.full(100_000, 0.41), np.zeros(100_000))
    assert len(sig) <= 1000 and sig.values.dtype == np.float64
    assert sig.nbytes <= 1000 * 24


def _no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("trained although --out was bad")

    monkeypatch.setattr(wb.Session, "run", refuse)


@pytest.mark.parametrize("case", ["under a file", "etc hostname", "existing file", "user directory"])
def test_a_bad_out_is_refused_before_training(tmp_path, monkeypatch, capsys, case):
    _no_training(monkeypatch)
    if case == "under a file":
        (tmp_path / "file").write_text("x")
        out, match = str(tmp_path / "file" / "x"), "is a file, not a directory"
    elif case == "etc hostname":
        if not os.path.isfile("/etc/hostname"):
            pytest.skip("this machine has no /etc/hostname")
        out, match = "/etc/hostname/x", "/etc/hostname is a file"
    elif case == "existing file":
        (tmp_path / "report.txt").write_text("mine")
        out, match = str(tmp_path / "report.txt"), "not a workbench checkpoint"
    else:
        (tmp_path / "results").mkdir()
        (tmp_path / "results" / "notes.txt").write_text("mine")
        out, match = str(tmp_path / "results"), "notes.txt"
    with pytest.raises(SystemExit) as info:
        main(["train", "CartPole-v1", "--agent", "ppo", "--steps", "64", "--out", out, "--no-progress"])
    assert "--out" in str(info.value) and match in str(info.value)


def test_overwrite_flag_lets_out_replace_a_file(tmp_path, capsys):
    (tmp_path / "report.txt").write_text("mine")
    code = main(
        [
            "train",
            "CartPole-v1",
            "--agent",
            "ppo",
            "--steps",
            "32",
            "--no-progress",
            "--set",
            "n_steps=16",
            "--no-preset",
            "--out",
            str(tmp_path / "report.txt"),
            "--overwrite",
        ]
    )
    assert code == 0 and wb.load(tmp_path / "report.txt").algorithm == "PPO"


def test_play_finds_the_env_id_inside_a_zip(tmp_path, capsys):
    out = str(tmp_path / "run.zip")
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--agent",
                "ppo",
                "--steps",
                "32",
                "--no-progress",
                "--no-preset",
                "--set",
                "n_steps=16",
                "--out",
                out,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["play", out, "--episodes", "1", "--seed", "0"]) == 0
    assert "episode 1: return" in capsys.readouterr().out


def test_license_is_an_spdx_string_and_metadata_builds_without_deprecation(tmp_path, monkeypatch):
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["license"] == "MIT"
    build_meta = pytest.importorskip("setuptools.build_meta")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    shutil.copytree(
        os.path.join(ROOT, "workbench"), tmp_path / "workbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["setup.py"])
    (tmp_path / "meta").mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_meta.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    messages = [str(w.message) for w in caught if "deprecat" in str(w.message).lower()]
    assert not messages, messages
