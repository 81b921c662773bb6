"""A normal run prints nothing of its own: no warning from the project's code paths (local workers, Ray, a
notebook), and none of Ray's start-up notices for the private Ray the project starts.

Each run turns warnings attributed to the project's modules into errors (a warning raised while training fails
the run, and the test names it) and reads everything the run printed, its worker processes' output included.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import workbench as wb
from workbench.parallel.ray_start import RAY_NOTICES, quiet_ray_notices

ROOT = Path(__file__).resolve().parents[1]
# A warning attributed to the project (its module, or the line of the project that called a library that warned).
PROJECT_WARNINGS_AS_ERRORS = r"import warnings; warnings.filterwarnings('error', module=r'workbench(\.|$)')"
# What a user would read as a warning or a notice in the output of a run.
NOISE = re.compile(r"warn|notice|token auth|SIGTERM|deprecat", re.IGNORECASE)


def _noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if NOISE.search(line)]


def test_ray_start_notices_are_dropped_and_every_other_record_kept(caplog):
    caplog.set_level(logging.INFO)
    with quiet_ray_notices():
        for name, prefix in RAY_NOTICES.items():
            logging.getLogger(name).warning(prefix + ". More text.")
            logging.getLogger(name).warning("Something else went wrong")
    for name, prefix in RAY_NOTICES.items():  # the filters go with the start: later notices are logged again
        logging.getLogger(name).warning(prefix + " (after the start)")
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count("Something else went wrong") == len(RAY_NOTICES)
    assert not any(m.endswith("More text.") for m in messages)
    assert sum(m.endswith("(after the start)") for m in messages) == len(RAY_NOTICES)
    assert all(not logging.getLogger(name).filters for name in RAY_NOTICES)


def _cartpole():
    import gymnasium as gym

    return gym.make("CartPole-v1")


def test_local_workers_run_without_a_warning_or_any_output(capfd):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", module=r"workbench(\.|$)")
        session = wb.Session(
            wb.PPO(_cartpole, n_envs=2, n_steps=16, batch_size=32), _cartpole, seed=0, num_workers=2, backend="local"
        )
        session.run(steps=96)
    assert session.status == "finished", session.error
    out, err = capfd.readouterr()  # the workers' processes write to the same stdout and stderr
    assert out == "" and err == "", f"a run with local workers printed:\n{out}{err}"


SCRIPT = f"""
{PROJECT_WARNINGS_AS_ERRORS}
import gymnasium as gym
import workbench as wb

def make_env():
    return gym.make("CartPole-v1")

session = wb.Session(wb.PPO(make_env, n_envs=2, n_steps=16, batch_size=32), make_env, seed=0,
                     num_workers=2, backend="ray")
session.run(steps=96)
assert session.status == "finished", session.error
import ray
ray.shutdown()
print("done")
"""


@pytest.mark.ray
@pytest.mark.slow
def test_a_script_on_the_private_ray_prints_no_warning_or_notice(tmp_path):
    """A fresh interpreter, as a user's script: Ray's token-authentication and SIGTERM notices are not printed,
    nor any warning from the driver or the Ray workers (their output reaches the driver's)."""
    pytest.importorskip("ray")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("RAY_AUTH_MODE", None)  # Ray's default: token authentication on, and its notice
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert done.stdout.strip() == "done", output
    assert _noise(output) == [], output


@pytest.mark.ray
@pytest.mark.slow
def test_the_parallel_notebook_runs_with_project_warnings_as_errors_and_prints_no_notice(tmp_path, monkeypatch):
    """notebooks/parallel_and_ray.ipynb (in-process, local workers, Ray, dashboards, save and play) in a fresh
    kernel: no cell writes to stderr and no output reads as a warning or a notice."""
    pytest.importorskip("ray")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("WB_QUICK", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    nb = nbformat.read(ROOT / "notebooks" / "parallel_and_ray.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROJECT_WARNINGS_AS_ERRORS))
    nbclient.NotebookClient(
        nb, timeout=500, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                assert output["name"] != "stderr", f"cell {i} wrote to stderr:\n{output['text']}"
                printed.append(output["text"])
            for text in output.get("data", {}).values():
                if isinstance(text, str):
                    printed.append(text)
    noise = _noise("\n".join(printed))
    assert noise == [], textwrap.indent("\n".join(noise), "  ")
