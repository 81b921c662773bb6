"""The command line: train, play, resume, help, errors."""

import os
import subprocess
import sys

import pytest
import torch

from workbench.cli import main


def test_help_lists_agents_and_options(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for word in ("dqn", "ppo", "sac", "--steps", "--out", "--resume", "--agent", "--num-workers", "--backend"):
        assert word in out


def test_train_save_play_and_resume(tmp_path, capsys):
    out_dir = tmp_path / "run"
    code = main(
        [
            "train",
            "CartPole-v1",
            "--agent",
            "ppo",
            "--steps",
            "512",
            "--seed",
            "0",
            "--out",
            str(out_dir),
            "--no-progress",
            "--set",
            "n_steps=16",
            "--set",
            "n_epochs=2",
        ]
    )
    assert code == 0
    assert (out_dir / "meta.json").exists()
    out = capsys.readouterr().out
    assert "saved to" in out and "mean reward (last 10)" in out

    assert main(["play", str(out_dir), "--episodes", "2", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert out.count("episode ") == 2 and "mean return" in out

    assert (
        main(
            ["train", "CartPole-v1", "--resume", str(out_dir), "--steps", "256", "--out", str(out_dir), "--no-progress"]
        )
        == 0
    )
    assert "768 steps" in capsys.readouterr().out


def test_train_summary_says_when_no_episode_finished(capsys):
    # MountainCar's episodes last 999 steps: none ends within 100, and the summary says so (not "nan").
    assert (
        main(
            [
                "train",
                "MountainCarContinuous-v0",
                "--agent",
                "sac",
                "--steps",
                "100",
                "--no-progress",
                "--set",
                "learning_starts=1000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "100 steps, 0 episodes, no episode finished yet" in out and "nan" not in out


def test_unknown_agent_and_bad_hyperparameter(capsys):
    with pytest.raises(SystemExit, match="unknown agent"):
        main(["train", "CartPole-v1", "--agent", "nosuchagent", "--steps", "10"])
    assert main(["train", "CartPole-v1", "--agent", "ppo", "--set", "n_stepz=3", "--steps", "10"]) == 2
    assert "n_steps" in capsys.readouterr().err


@pytest.mark.slow
def test_train_with_local_workers(capsys):
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--agent",
                "ppo",
                "--steps",
                "512",
                "--num-workers",
                "2",
                "--backend",
                "local",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "finished" in capsys.readouterr().out


def test_ray_address_needs_the_ray_backend():
    with pytest.raises(SystemExit, match="--backend ray"):
        main(["train", "CartPole-v1", "--steps", "10", "--ray-address", "auto"])


def test_unknown_env_is_a_clear_error(capsys):
    assert main(["train", "CartPole-v9", "--steps", "10"]) == 2
    assert "CartPole-v1" in capsys.readouterr().err


def test_python_dash_m_and_progress_bar(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "train", "CartPole-v1", "--agent", "dqn", "--steps", "300"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "finished: 300 steps" in proc.stdout
    assert "step" in proc.stderr and "%" in proc.stderr  # the tqdm bar


class CliEncoder(torch.nn.Module):
    """A user's encoder for a vector observation: one linear layer."""

    def __init__(self, observation_space, width: int = 8) -> None:
        super().__init__()
        self.features_dim = width
        self.linear = torch.nn.Linear(int(observation_space.shape[0]), width)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(obs))


def test_play_and_export_allow_a_custom_encoder(tmp_path, capsys):
    import workbench as wb

    agent = wb.PPO(
        "CartPole-v1",
        n_steps=16,
        n_envs=1,
        batch_size=16,
        n_epochs=1,
        net_arch=(8,),
        encoder=CliEncoder,
        encoder_kwargs={"width": 5},
    )
    agent.save(tmp_path / "run")
    path = f"{CliEncoder.__module__}.CliEncoder"
    # Refused unless allowed, and the error names the option with the path to pass.
    assert main(["play", str(tmp_path / "run"), "--env", "CartPole-v1"]) == 2
    assert f"--allow-encoder {path}" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "p.onnx")]) == 2
    assert "--allow-encoder" in capsys.readouterr().err
    # MODULE:CLASS and the stored dotted path both allow it.
    colon = f"{CliEncoder.__module__}:CliEncoder"
    assert main(["play", str(tmp_path / "run"), "--env", "CartPole-v1", "--allow-encoder", colon]) == 0
    assert "mean return" in capsys.readouterr().out
    pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "p.onnx"), "--allow-encoder", path]) == 0
    assert (tmp_path / "p.onnx").exists()
    # Another encoder's path does not allow this one; a value that is no import path is an error.
    assert main(["play", str(tmp_path / "run"), "--env", "CartPole-v1", "--allow-encoder", "other:Thing"]) == 2
    assert main(["play", str(tmp_path / "run"), "--env", "CartPole-v1", "--allow-encoder", "Thing"]) == 2
    assert "MODULE:CLASS" in capsys.readouterr().err
