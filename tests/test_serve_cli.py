"""`workbench serve`: a served run in its own process, stopped by SIGTERM or Ctrl-C (SIGINT), saved only
where --save says and never over a folder that is not a run (issue 32: the old example service deleted
the user's folder on Ctrl-C)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import workbench as wb
from workbench import cli

pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parent.parent
OBS = [0.01, -0.02, 0.03, 0.0]


def test_save_over_a_folder_that_is_not_a_run_is_refused_before_serving(tmp_path, capsys):
    folder = tmp_path / "my-thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_text("months of work")
    with pytest.raises(SystemExit, match=r"--save .*my-thesis.*not"):
        cli.main(["serve", "CartPole-v1", "--agent", "dqn", "--port", "0", "--save", str(folder)])
    assert (folder / "chapter1.tex").read_text() == "months of work"


def test_another_interface_without_a_token_is_refused(capsys, monkeypatch):
    monkeypatch.delenv(cli.SERVE_TOKEN_ENV, raising=False)
    assert cli.main(["serve", "CartPole-v1", "--agent", "dqn", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "token" in capsys.readouterr().err


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(cli.SERVE_TOKEN_ENV, None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workbench",
            "serve",
            "CartPole-v1",
            "--agent",
            "dqn",
            "--port",
            "0",
            "--set",
            "learning_starts=10",
            "--set",
            "train_freq=4",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        match = re.search(r"on (http://\S+)", line)
        if match:
            return process, match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError("workbench serve did not start: " + "".join(lines))


def _drive(url: str, pairs: int) -> None:
    remote = wb.RemoteSession(url)
    for i in range(pairs):
        remote.act(OBS, episode="a")
        remote.feedback(1.0, OBS, i % 10 == 9, False, episode="a")
    remote.close()


def _wait_until_learned(url: str, steps: int, timeout: float = 60.0) -> None:
    remote = wb.RemoteSession(url)
    deadline = time.monotonic() + timeout
    try:
        while remote.steps < steps:
            assert time.monotonic() < deadline, f"the served session learned {remote.steps} of {steps} steps"
            time.sleep(0.05)
    finally:
        remote.close()


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_saves_a_loadable_run_where_asked(tmp_path):
    process, url = _start(tmp_path, "--save", "runs/served")
    try:
        listening = [
            c for c in psutil.Process(process.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
        ]
        assert listening and {c.laddr.ip for c in listening} == {"127.0.0.1"}  # nothing bound but loopback
        _drive(url, 40)
        _wait_until_learned(url, 40)  # acknowledged feedback is queued; SIGTERM saves what was learned from
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, out
    assert "SIGTERM: stopping" in out and "saved to runs/served" in out
    agent = wb.load(tmp_path / "runs" / "served")
    assert agent.algorithm == "DQN" and agent.act(OBS) in (0, 1)
    resumed = wb.Session.reopen(tmp_path / "runs" / "served", external=True)
    assert resumed.episodes == 4


@pytest.mark.slow
def test_ctrl_c_never_saves_over_a_folder_that_became_the_users(tmp_path):
    process, url = _start(tmp_path, "--save", "results")
    try:
        _drive(url, 5)
        user = tmp_path / "results"
        user.mkdir()  # made after the server started: the check at start saw nothing there
        (user / "notes.txt").write_text("mine")
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 1, out
    assert "SIGINT: stopping" in out and "not saved" in out and "results" in out
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"] and (user / "notes.txt").read_text() == "mine"
