"""The Node.js local-inference client (examples/node_client, issue 52) acts from the ONNX policy with
onnxruntime-node and posts experience batches that a served session learns from.

Skips, saying why, when ``node`` is not on the PATH or ``onnxruntime-node`` is not installed in
examples/node_client (``npm install --onnxruntime-node-install-cuda=skip`` there; ``make test`` runs it and
installs it, with npm: about 190 MB from the npm registry)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import gymnasium as gym
import pytest

import workbench as wb

pytest.importorskip("uvicorn")
pytest.importorskip("onnx")

CLIENT = Path(__file__).resolve().parent.parent / "examples" / "node_client"


def test_the_node_client_acts_from_the_onnx_policy_and_its_batches_are_applied():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on the PATH: the Node.js example client cannot run")
    if not (CLIENT / "node_modules" / "onnxruntime-node").is_dir():
        pytest.skip(
            "onnxruntime-node is not installed in examples/node_client: run "
            "`npm install --onnxruntime-node-install-cuda=skip` there"
        )
    env = gym.make("CartPole-v1")
    agent = wb.DQN(
        observation_space=env.observation_space,
        action_space=env.action_space,
        learning_starts=50,
        train_freq=4,
        gradient_steps=1,
        batch_size=16,
        buffer_size=2_000,
        net_arch=[16],
        seed=0,
    )
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    try:
        out = subprocess.run(
            [node, str(CLIENT / "client.mjs"), server.url, "--steps", "300", "--batch", "64", "--sync", "100"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["steps"] == 300 and summary["accepted"] == 300 and summary["versions"][0] >= 1
        assert server._experience.steps == 300  # every step of every batch taken once
        assert len(summary["versions"]) > 1  # it reloaded the policy the learner published as it learned
    finally:
        server.close()
        session.stop()
