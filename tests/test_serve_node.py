"""The Node.js local-inference client (examples/node_client, issue 52) acts from the ONNX policy with
onnxruntime-node and posts experience batches that a served session learns from; for an on-policy policy
(PPO, A2C) it samples from the served acting step (a Discrete policy's logits in CartPole, a Box policy's
Gaussian in its Pendulum) and sends each step's value and log-probability as the Python client does; for a
recurrent one (RecurrentPPO's LSTM, GRU, GTrXL) it keeps the episode's memory and sends the state each step used
too; around an off-policy Box actor (SAC, TD3, DDPG, TQC in its Pendulum) it explores with Gaussian noise. What it
cannot sample, and a policy for another env, it refuses before acting.

Skips, saying why, when ``node`` is not on the PATH or ``onnxruntime-node`` is not installed in
examples/node_client (``npm install --onnxruntime-node-install-cuda=skip`` there; ``make test`` runs it and
installs it, with npm: about 190 MB from the npm registry)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.networks import gaussian_policy_terms
from workbench.agents.registry import AGENTS

pytest.importorskip("uvicorn")
pytest.importorskip("onnx")

CLIENT = Path(__file__).resolve().parent.parent / "examples" / "node_client"


def _node() -> str:
    """The ``node`` executable, or skip saying what is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on the PATH: the Node.js example client cannot run")
    if not (CLIENT / "node_modules" / "onnxruntime-node").is_dir():
        pytest.skip(
            "onnxruntime-node is not installed in examples/node_client: run "
            "`npm install --onnxruntime-node-install-cuda=skip` there"
        )
    return node


def _run_client(node: str, url: str, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The Node.js example client against ``url`` with ``flags``, its output captured."""
    return subprocess.run(
        [node, str(CLIENT / "client.mjs"), url, *flags], capture_output=True, text=True, timeout=timeout
    )


def _recording(server, agent) -> list[tuple[dict, dict]]:
    """The batches the server takes, as they come (its ingest wrapped). Once the learner has updated, or has taken
    150 steps (then waiting, up to 60 s, for its first update), the next batch's answer waits until that update is
    published, so that the client's next sync finds a newer version to reload however loaded the machine is: the
    publishing task alone (every ``publish_every``) can come after a fast client's last sync."""
    batches: list[tuple[dict, dict]] = []
    ingest, request = server._ingest, server._experience_request
    held = []

    def recorded(header, arrays):
        answer = ingest(header, arrays)
        batches.append((header, {name: np.array(value) for name, value in arrays.items()}))
        return answer

    async def holding(scope, receive, send):
        if not held and (agent.num_updates > 0 or server._experience.steps >= 150):
            held.append(True)
            deadline = time.monotonic() + 60
            while agent.num_updates == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.get_running_loop().run_in_executor(None, server.policy.publish)
        await request(scope, receive, send)

    server._ingest, server._experience_request = recorded, holding
    return batches


def _served_onnx(server) -> dict[int, bytes]:
    """Each policy version's ONNX as ``GET /policy.onnx`` served it (the server's export wrapped), by version."""
    served: dict[int, bytes] = {}
    export = server.policy.onnx

    def exported():
        version, data = export()
        served[version] = data
        return version, data

    server.policy.onnx = exported
    return served


def test_the_node_client_acts_from_the_onnx_policy_and_its_batches_are_applied():
    node = _node()
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
    _recording(server, agent)  # a newer version to reload, whatever the load
    try:
        out = _run_client(node, server.url, "--steps", "300", "--batch", "64", "--sync", "100")
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["steps"] == 300 and summary["accepted"] == 300 and summary["versions"][0] >= 1
        assert server._experience.steps == 300  # every step of every batch taken once
        assert len(summary["versions"]) > 1  # it reloaded the policy the learner published as it learned
    finally:
        server.close()
        session.stop()


@pytest.mark.parametrize("memory", ["lstm", "gru", "gtrxl"])
def test_the_node_client_keeps_a_recurrent_policys_memory_and_sends_the_state_each_step_used(memory):
    node = _node()
    agent = wb.RecurrentPPO(
        "CartPole-v1",
        n_envs=2,
        n_steps=16,
        batch_size=32,
        n_epochs=1,
        lstm_hidden_size=8,
        memory=memory,
        memory_length=4,
        attention_heads=2,
        seed=0,
    )
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    batches = _recording(server, agent)  # the batches the server took, as they came
    key = "lstm_states" if memory == "lstm" else "memory_states"

    try:
        out = _run_client(node, server.url, "--steps", "300", "--batch", "64", "--sync", "16")
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["memory"] == memory and summary["steps"] == 300
        described = server.policy.describe()  # GET /policy: how to run the memory
        assert described["memory"]["extra"] == f"extras/{key}" and described["memory"]["onnx"]["state"] == "state"
        taken = server._experience
        assert taken.steps + taken.dropped == 300 and taken.steps >= 200, (taken.steps, taken.dropped)
        assert agent.num_updates >= 3 and len(summary["versions"]) > 1  # it learned and the client reloaded
        assert sum(len(arrays["reward"]) for _, arrays in batches) == 300
        shape = tuple(described["memory"]["shape"])
        starts = nonzero = 0
        start = True  # the first step begins an episode
        for _, arrays in batches:
            state = arrays[f"extras/{key}"]
            assert state.dtype == np.float32 and state.shape[1:] == shape
            assert arrays["extras/values"].shape == arrays["extras/log_probs"].shape == arrays["reward"].shape
            assert (arrays["extras/log_probs"] <= 0).all()
            ended = arrays["terminated"] | arrays["truncated"]
            for row in range(len(state)):
                if start:  # the memory starts empty with each episode
                    assert not state[row].any(), row
                    starts += 1
                else:  # and is the policy's state after the episode's first step
                    assert np.abs(state[row]).max() > 0, row
                    nonzero += 1
                start = bool(ended[row])
        assert starts >= 3 and nonzero >= 100
    finally:
        server.close()
        session.stop()


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_the_node_client_samples_an_on_policy_policys_logits_and_sends_its_values_and_log_probs(algorithm):
    """PPO and A2C: the served ONNX is their acting step (logits and value beside the action); the client
    samples from the logits and sends each step's value and log-probability, which are what that version's
    exported step gives on the step's observation."""
    node = _node()
    small = {"n_envs": 2, "n_steps": 16, "seed": 0}
    agent = (
        wb.PPO("CartPole-v1", batch_size=32, n_epochs=1, **small)
        if algorithm == "ppo"
        else wb.A2C("CartPole-v1", **small)
    )
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    batches = _recording(server, agent)  # the batches the server took, as they came
    served = _served_onnx(server)  # each version's acting step, as GET /policy.onnx served it
    try:
        out = _run_client(node, server.url, "--steps", "300", "--batch", "64", "--sync", "16")
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["sampled"] is True and summary["memory"] is None and summary["steps"] == 300
        described = server.policy.describe()  # GET /policy: what to sample from and what to send
        assert described["acting"]["distribution"] == "categorical" and described["memory"] is None
        assert described["acting"]["onnx"] == {"policy_output": "policy_output", "value": "value"}
        taken = server._experience
        assert taken.steps + taken.dropped == 300 and taken.steps >= 150, (taken.steps, taken.dropped)
        assert agent.num_updates >= 3 and len(summary["versions"]) > 1  # it learned and the client reloaded
        assert sum(len(arrays["reward"]) for _, arrays in batches) == 300
        ort = pytest.importorskip("onnxruntime")
        for header, arrays in batches:
            step = ort.InferenceSession(served[header["version"]], providers=["CPUExecutionProvider"])
            feeds = {"obs": arrays["obs"], "action_mask": np.ones((len(arrays["obs"]), 2), bool)}  # all allowed
            _, logits, value = step.run(["action", "policy_output", "value"], feeds)
            log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            chosen = log_p[np.arange(len(logits)), arrays["action"]]
            assert arrays["extras/values"].dtype == arrays["extras/log_probs"].dtype == np.float32
            np.testing.assert_allclose(arrays["extras/values"], value, rtol=0, atol=1e-5)
            np.testing.assert_allclose(arrays["extras/log_probs"], chosen, rtol=0, atol=1e-5)
            np.testing.assert_array_equal(arrays["log_prob"], arrays["extras/log_probs"])
        actions = np.concatenate([arrays["action"] for _, arrays in batches])
        assert 0.2 < actions.mean() < 0.8  # sampled, not greedy
    finally:
        server.close()
        session.stop()


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "recurrent_ppo"])
def test_the_node_client_samples_a_gaussian_policy_in_pendulum_and_sends_what_the_python_client_sends(algorithm):
    """PPO, A2C and RecurrentPPO on Pendulum-v1's Box actions: the served acting step gives the Gaussian's mean
    (policy_output) and log_std; the client draws mean + exp(log_std) * noise, steps its Pendulum (gymnasium's)
    with the draw clipped to the bounds, and sends the draw unclipped as float32 with its value and
    log-probability, the arrays wb.RemoteSession(url, inference="local") sends; the log-probabilities are the
    learner's for those actions under the version that chose them."""
    node = _node()
    # A wide Gaussian (std e^0.5), so that some draws fall outside Pendulum's bounds of [-2, 2].
    small = {"n_envs": 2, "n_steps": 16, "log_std_init": 0.5, "seed": 0}
    if algorithm == "ppo":
        agent = wb.PPO("Pendulum-v1", batch_size=32, n_epochs=1, **small)
    elif algorithm == "a2c":
        agent = wb.A2C("Pendulum-v1", **small)
    else:
        agent = wb.RecurrentPPO("Pendulum-v1", batch_size=32, n_epochs=1, lstm_hidden_size=8, **small)
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    batches = _recording(server, agent)  # the batches the server took, as they came
    served = _served_onnx(server)  # each version's acting step, as GET /policy.onnx served it
    try:
        flags = ("--env", "Pendulum-v1", "--steps", "300", "--batch", "64", "--sync", "16")
        out = _run_client(node, server.url, *flags)
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["env"] == "Pendulum-v1" and summary["distribution"] == "gaussian" and summary["steps"] == 300
        described = server.policy.describe()  # GET /policy: what to sample from and what to send
        assert described["acting"]["distribution"] == "gaussian"
        assert described["acting"]["onnx"] == {"policy_output": "policy_output", "value": "value", "log_std": "log_std"}
        taken = server._experience
        assert taken.steps + taken.dropped == 300 and taken.steps >= 150, (taken.steps, taken.dropped)
        assert agent.num_updates >= 3 and len(summary["versions"]) > 1  # it learned and the client reloaded
        assert sum(len(arrays["reward"]) for _, arrays in batches) == 300
        ort = pytest.importorskip("onnxruntime")
        for header, arrays in batches:
            step = ort.InferenceSession(served[header["version"]], providers=["CPUExecutionProvider"])
            feeds = {"obs": arrays["obs"]}
            if algorithm == "recurrent_ppo":  # the state each step used (zeros where an episode starts)
                feeds |= {"state": arrays["extras/lstm_states"], "episode_start": np.zeros(len(arrays["obs"]), "f4")}
            mean, value, log_std = step.run(["policy_output", "value", "log_std"], feeds)
            actions = arrays["action"]
            # What the Python client sends for a Box step: the draw as float32 [T, 1], its extras float32 [T].
            assert actions.dtype == np.float32 and actions.shape == (len(arrays["obs"]), 1)
            assert arrays["extras/values"].dtype == arrays["extras/log_probs"].dtype == np.float32
            assert np.abs((actions - mean) / np.exp(log_std)).max() < 6  # a draw of N(mean, exp(log_std))
            learner, _ = gaussian_policy_terms(
                torch.from_numpy(mean), torch.from_numpy(log_std), torch.from_numpy(actions), False
            )
            np.testing.assert_allclose(arrays["extras/log_probs"], learner.numpy(), rtol=0, atol=1e-5)
            np.testing.assert_allclose(arrays["extras/values"], value, rtol=0, atol=1e-5)
            np.testing.assert_array_equal(arrays["log_prob"], arrays["extras/log_probs"])
        rows = {name: np.concatenate([arrays[name] for _, arrays in batches]) for name in batches[0][1]}
        assert (np.abs(rows["action"]) > 2).any()  # sent as drawn, not clipped to the bounds
        # The client's Pendulum steps as gymnasium's, with the draw clipped to the bounds: each step's reward and
        # next observation from its observation, the episodes cut by the 200-step limit (a truncation).
        pendulum = gym.make("Pendulum-v1").unwrapped
        pendulum.reset(seed=0)
        for obs, action, reward, next_obs in zip(rows["obs"], rows["action"], rows["reward"], rows["next_obs"]):
            pendulum.state = np.array([np.arctan2(obs[1], obs[0]), obs[2]], dtype=np.float64)
            expected, expected_reward, *_ = pendulum.step(np.clip(action, -2.0, 2.0))
            np.testing.assert_allclose(next_obs, expected, rtol=0, atol=1e-4)
            np.testing.assert_allclose(reward, expected_reward, rtol=0, atol=1e-4)
        assert not rows["terminated"].any() and rows["truncated"].sum() == 1
        ended = [entry for header, _ in batches for entry in header["episodes"]]
        assert [length for _, _, length in ended] == [200]
        # The Python client's batches for the same policy: the same arrays, dtypes and shapes of a step.
        node_arrays = {name: (value.dtype, value.shape[1:]) for name, value in batches[0][1].items()}
        batches.clear()
        remote = wb.RemoteSession(server.url, inference="local", batch_steps=8, sync_every=1_000)
        env = gym.make("Pendulum-v1")
        obs, _ = env.reset(seed=0)
        for _ in range(8):
            next_obs, reward, terminated, truncated, _ = env.step(action := remote.act(obs))
            assert action.dtype == np.float32 and np.abs(action).max() <= 2.0  # the env's step gets it clipped
            remote.feedback(reward, next_obs, terminated, truncated)
            obs = next_obs
        remote.close()
        assert len(batches) == 1 and not batches[0][0]["client"].startswith("node-")
        assert {name: (value.dtype, value.shape[1:]) for name, value in batches[0][1].items()} == node_arrays
    finally:
        server.close()
        session.stop()


@pytest.mark.parametrize("algorithm", ["sac", "td3", "ddpg", "tqc"])
def test_the_node_client_explores_around_an_off_policy_box_actor_and_sends_what_the_python_client_sends(algorithm):
    """SAC, TD3, DDPG and TQC on Pendulum-v1: the served ONNX is the deterministic actor, its action in the env's
    bounds; the client draws uniformly in the bounds while the version's learner has taken fewer than
    learning_starts steps, then explores with Gaussian noise of 0.1 half ranges around the actor (--noise), clipped
    to the bounds, and sends the action in the env's units as the Python client does (float32 [T, 1]), without
    log_prob. The batches are applied whole (off-policy: no version is too old) and the agent learns from them."""
    node = _node()
    learning_starts = 50
    small = {
        "learning_starts": learning_starts,
        "train_freq": 8,
        "gradient_steps": 1,
        "batch_size": 16,
        "buffer_size": 2_000,
        "net_arch": [16],
        "seed": 0,
    }
    agent = {"sac": wb.SAC, "td3": wb.TD3, "ddpg": wb.DDPG, "tqc": wb.TQC}[algorithm]("Pendulum-v1", **small)
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    batches = _recording(server, agent)  # the batches the server took, as they came
    publish = server.policy.publish
    served = _served_onnx(server)  # each version's actor, as GET /policy.onnx served it
    clocks: dict[int, int] = {}  # each version's learner steps when it was published (GET /policy's counters)

    def published(force=False):
        done = publish(force)
        version, _, counters, _ = server.policy.newest()
        clocks.setdefault(version, counters["num_timesteps"])
        return done

    server.policy.publish = published  # the first version is published at the first request, after this
    try:
        flags = ("--env", "Pendulum-v1", "--steps", "400", "--batch", "16", "--sync", "16")
        out = _run_client(node, server.url, *flags)
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["steps"] == summary["accepted"] == 400 and summary["noise"] == 0.1
        assert summary["sampled"] is False and summary["distribution"] is None
        described = server.policy.describe()  # GET /policy: the deterministic actor, no extras to send
        assert described["acting"] is None and described["extras"] == {} and not described["on_policy"]
        taken = server._experience
        assert taken.steps == 400 and taken.dropped == 0  # every step applied, once
        assert sum(len(arrays["reward"]) for _, arrays in batches) == 400
        assert len(summary["versions"]) > 1  # the client reloaded the versions the learner published
        deadline = time.monotonic() + 30
        while agent.num_timesteps < 400 and time.monotonic() < deadline:  # the learner takes in the last batches
            time.sleep(0.05)
        assert agent.num_timesteps == 400 and agent.num_updates >= 30  # about (400 - 50) / 8
        ort = pytest.importorskip("onnxruntime")
        warm: list[np.ndarray] = []
        z: list[np.ndarray] = []
        for header, arrays in batches:
            actions = arrays["action"]
            assert actions.dtype == np.float32 and actions.shape == (len(arrays["obs"]), 1)
            assert "log_prob" not in arrays  # the clipped Gaussian's behaviour has no one log-density
            assert (np.abs(actions) <= 2.0).all()  # clipped to the env's bounds, in its units
            if clocks[header["version"]] < learning_starts:  # the learner's warm-up: uniform in the bounds
                warm.append(actions)
                continue
            step = ort.InferenceSession(served[header["version"]], providers=["CPUExecutionProvider"])
            (actor,) = step.run(["action"], {"obs": arrays["obs"]})
            assert (np.abs(actor) <= 2.0).all()  # the ONNX's action is in the env's bounds too
            inside = np.abs(actions) < 2.0  # the draws the bounds did not clip
            z.append(((actions - actor) / (0.1 * 2.0))[inside])  # noise of 0.1 half ranges, Pendulum's is 2
        warm_actions, noise = np.concatenate(warm), np.concatenate(z)
        assert len(warm_actions) >= learning_starts and warm_actions.std() > 0.8  # uniform over [-2, 2]: 1.15
        assert (np.abs(warm_actions) > 1.0).any()  # the env's units, not the agent's [-1, 1]
        assert summary["uniform"] == len(warm_actions)  # its warm-up: the versions published before learning_starts
        assert len(noise) >= 40, len(noise)
        assert np.abs(noise).max() < 6 and abs(noise.mean()) < 0.6 and 0.6 < noise.std() < 1.4  # N(0, 1)
        # The Python client's batches for the same policy: the same arrays, dtypes and shapes of a step, but for
        # the log_prob it sends for the SAC family (the squashed Gaussian's log-density of its own draws).
        node_arrays = {name: (value.dtype, value.shape[1:]) for name, value in batches[0][1].items()}
        batches.clear()
        remote = wb.RemoteSession(server.url, inference="local", batch_steps=8, sync_every=1_000)
        env = gym.make("Pendulum-v1")
        obs, _ = env.reset(seed=0)
        for _ in range(8):
            next_obs, reward, terminated, truncated, _ = env.step(action := remote.act(obs))
            assert action.dtype == np.float32 and np.abs(action).max() <= 2.0
            remote.feedback(reward, next_obs, terminated, truncated)
            obs = next_obs
        remote.close()
        assert len(batches) == 1 and not batches[0][0]["client"].startswith("node-")
        python_arrays = {name: (value.dtype, value.shape[1:]) for name, value in batches[0][1].items()}
        assert ("log_prob" in python_arrays) == (algorithm in ("sac", "tqc"))
        assert (np.abs(batches[0][1]["action"]) <= 2.0).all()  # the agent's action: in the env's units
        python_arrays.pop("log_prob", None)
        assert python_arrays == node_arrays
    finally:
        server.close()
        session.stop()


def _box(n: int) -> gym.spaces.Box:
    return gym.spaces.Box(-1.0, 1.0, (n,), np.float32)


@pytest.mark.parametrize(
    ("make", "flags", "said"),
    [
        pytest.param(
            lambda: wb.PPO(observation_space=_box(4), action_space=gym.spaces.MultiDiscrete([2, 3]), n_steps=16),
            (),
            "samples a multi_categorical distribution over MultiDiscrete([2, 3]) actions",
            id="multidiscrete",
        ),
        pytest.param(
            lambda: wb.PPO(
                observation_space=_box(4),
                action_space=gym.spaces.Dict({"kind": gym.spaces.Discrete(2), "aim": _box(1)}),
                n_steps=16,
            ),
            (),
            "samples a composite distribution",
            id="composite",
        ),
    ],
)
def test_the_node_client_refuses_a_policy_whose_actions_it_cannot_sample(make, flags, said):
    """MultiDiscrete and composite actions (distributions it does not sample): refused before acting, saying what
    and what to use instead."""
    node = _node()
    session = wb.Session.external(make(), seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    try:
        out = _run_client(node, server.url, *flags, "--steps", "10", timeout=60)
        assert out.returncode == 2, (out.returncode, out.stderr)
        assert "does not support the served policy's actions" in out.stderr and said in out.stderr, out.stderr
        assert 'inference="local") from Python' in out.stderr and 'inference="server"' in out.stderr
        assert server._experience.batches == 0
    finally:
        server.close()
        session.stop()


def test_the_node_client_refuses_a_policy_for_another_env_than_its_own():
    node = _node()
    agent = wb.PPO("CartPole-v1", n_steps=16, batch_size=16, seed=0)
    session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
    server = session.serve(publish_every=0.05)
    try:
        out = _run_client(node, server.url, "--env", "Pendulum-v1", "--steps", "10", timeout=60)
        assert out.returncode == 2, (out.returncode, out.stderr)
        assert "is not one for --env Pendulum-v1" in out.stderr, out.stderr
        assert "shape [4] (float32) and acts in Discrete(2)" in out.stderr
        assert "shape [3] (float32) and takes Box([-2], [2], shape [1])" in out.stderr
        out = _run_client(node, server.url, "--env", "MountainCar-v0", "--steps", "10", timeout=60)
        assert out.returncode == 2 and "this client acts in CartPole-v1 or Pendulum-v1" in out.stderr, out.stderr
        assert server._experience.batches == 0
    finally:
        server.close()
        session.stop()


def test_the_node_client_refuses_a_noise_that_is_no_standard_deviation():
    node = _node()
    for noise in ("-0.1", "x"):  # refused before it asks the server anything (none listens there)
        out = _run_client(node, "http://127.0.0.1:9", "--noise", noise, timeout=60)
        assert out.returncode == 2 and f"--noise {noise}: " in out.stderr and "a number >= 0" in out.stderr, out.stderr


DISCRETE_ONLY = {"c51", "dqn", "qrdqn", "rainbow"}
BOX_ONLY = {"crossq", "ddpg", "droq", "sac", "td3", "tqc"}


@pytest.mark.parametrize("algorithm", sorted(AGENTS))
def test_every_single_agent_algorithm_acts_from_the_node_client(algorithm):
    """Local inference from the Node.js example for every registered single-agent algorithm at its defaults: in
    CartPole (Discrete actions) where it takes them, and in Pendulum (Box actions) where it takes them; every step
    the client acted reaches the server, applied or counted as too stale."""
    node = _node()
    assert not (DISCRETE_ONLY & BOX_ONLY) and DISCRETE_ONLY | BOX_ONLY <= set(AGENTS)
    envs = [env for env, skip in (("CartPole-v1", BOX_ONLY), ("Pendulum-v1", DISCRETE_ONLY)) if algorithm not in skip]
    for env_id in envs:
        agent = AGENTS[algorithm](env_id, seed=0)
        session = wb.Session.external(agent, seed=0, torch_threads=1).start(steps=100_000)
        server = session.serve(publish_every=0.05)
        try:
            out = _run_client(node, server.url, "--env", env_id, "--steps", "100", "--batch", "32")
            assert out.returncode == 0, (env_id, out.stderr[-2000:])
            summary = json.loads(out.stdout.strip().splitlines()[-1])
            taken = server._experience
            assert summary["steps"] == 100 and taken.steps + taken.dropped == 100 and taken.steps > 0, env_id
        finally:
            server.close()
            session.stop()
