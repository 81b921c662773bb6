"""Runs saved by an earlier version of the library still load, play and resume.

``tests/fixtures/saved-v1/`` holds small runs written by the main branch before the step contract
and the declared agent state (commit 7299ca3): a PPO, a DQN with its replay memory, and a gSDE SAC
as a ``.zip``. Their tensors must come back bit for bit, and a resumed session must continue from
their counters. ``tests/fixtures/saved-v3/`` holds one run per algorithm written by the version of
issue 36 (``make.py`` there wrote them), checked the same way; IPPO's and MAPPO's runs there were written by
``make_multiagent.py`` on the toy ParallelEnv ``MatchTarget`` (issue 37).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import workbench as wb

FIXTURES = Path(__file__).parent / "fixtures" / "saved-v1"
RUNS = {
    "ppo-cartpole": ("PPO", "CartPole-v1", 96),
    "dqn-cartpole": ("DQN", "CartPole-v1", 64),
    "sac-pendulum.zip": ("SAC", "Pendulum-v1", 40),
}


def _saved_tensors(name: str, tmp_path: Path) -> dict[str, torch.Tensor]:
    path = FIXTURES / name
    if name.endswith(".zip"):
        import zipfile

        with zipfile.ZipFile(path) as zf:
            zf.extract("weights.safetensors", tmp_path)
        return load_file(tmp_path / "weights.safetensors")
    return load_file(path / "weights.safetensors")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_an_old_run_loads_with_every_tensor_in_place(name, tmp_path):
    algorithm, env_id, steps = RUNS[name]
    agent = wb.load(FIXTURES / name)
    assert agent.algorithm == algorithm and not agent.training
    assert agent.num_timesteps == steps
    saved = _saved_tensors(name, tmp_path)
    state = agent.state()
    assert set(state.tensors) == set(saved)
    for key, tensor in saved.items():
        assert torch.equal(state.tensors[key], tensor), key
    returns = agent.play(env_id, episodes=1, seed=0)
    assert len(returns) == 1 and np.isfinite(returns[0])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_an_old_run_resumes_where_it_stopped(name):
    algorithm, env_id, steps = RUNS[name]
    session = wb.Session.reopen(FIXTURES / name)
    assert session.steps == steps and session.agent.algorithm == algorithm
    assert "loss" in session.signals or "critic_loss" in session.signals  # the signals came back
    if algorithm == "DQN":
        assert len(session.agent.memory) == steps  # the replay memory came back too
    session.run(steps=32)
    assert session.status == "finished" and session.steps == steps + 32


def test_a_cql_saved_before_the_policy_average_acts_with_its_policy(tmp_path):
    """``tests/fixtures/saved-v2/cql-pendulum`` was saved by main at 24dcac8, before CQL acted with its
    policy's moving average (``policy_average_tau``): it has no such network and no such field. It
    loads as it was (no average, the trained policy acts), and saves and loads again as that."""
    path = Path(__file__).parent / "fixtures" / "saved-v2" / "cql-pendulum"
    agent = wb.load(path)
    assert agent.config.policy_average_tau is None and agent.actor_average is None
    saved = load_file(path / "weights.safetensors")
    assert set(agent.state().tensors) == set(saved)
    obs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [-1.0, 0.0, -1.0]], dtype=np.float32)
    with torch.no_grad():
        mean = torch.tanh(agent.actor(torch.from_numpy(obs))[0]).numpy() * 2.0
    np.testing.assert_allclose(agent.act(obs, deterministic=True), mean, rtol=1e-6)
    agent.save(tmp_path / "again")
    again = wb.load(tmp_path / "again")
    assert again.config.policy_average_tau is None
    np.testing.assert_allclose(again.act(obs, deterministic=True), mean, rtol=1e-6)


# -- this version's runs: one per algorithm (issue 36) --------------------------------------------

V3 = Path(__file__).parent / "fixtures" / "saved-v3"
V3_DATA = {"Pendulum-v1": "pendulum-data", "CartPole-v1": "cartpole-data"}
V3_RUNS = sorted(p.name for p in V3.iterdir() if (p / "meta.json").is_file())


def test_every_algorithm_has_a_saved_run_of_this_version():
    """A new agent gets a fixture here (tests/fixtures/saved-v3/make.py), so the next release is
    checked against the files this one writes."""
    import json

    from workbench.agents import MULTI_AGENTS

    saved = {json.loads((V3 / name / "meta.json").read_text())["algorithm"] for name in V3_RUNS}
    offline = {"BC", "BCQ", "CQL", "IQL"}
    assert {cls.__name__ for cls in wb.AGENTS.values()} | offline <= saved
    # IPPO and MAPPO (their own registry, never offered for a single-agent env): make_multiagent.py wrote them.
    assert MULTI_AGENTS and {cls.__name__ for cls in MULTI_AGENTS.values()} <= saved
    images = [n for n in V3_RUNS if "cnn" in n]
    assert images, "an image (CNN encoder) run is among the fixtures too"


def _multi_agent_env(name: str):
    """The MatchTarget a multi-agent fixture trained on (tests/fixtures/saved-v3/make_multiagent.py), or None."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_make_multiagent", V3 / "make_multiagent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if name not in module.ENVS:
        return None
    from workbench.envs.multiagent_toy import MatchTarget

    return MatchTarget(**module.ENVS[name][1])


V3_MULTI = [n for n in V3_RUNS if n.endswith("-matchtarget")]


@pytest.mark.parametrize("name", V3_MULTI)
def test_a_multi_agent_run_of_this_version_loads_plays_and_resumes(name):
    import json

    meta = json.loads((V3 / name / "meta.json").read_text())
    steps = meta["session"]["steps"]
    env = _multi_agent_env(name)
    assert env is not None, f"{name} is not in make_multiagent.py's ENVS"
    agent = wb.load(V3 / name)
    assert agent.algorithm == meta["algorithm"] and agent.num_timesteps == steps and not agent.training
    saved = load_file(V3 / name / "weights.safetensors")
    state = agent.state()
    assert set(state.tensors) == set(saved)
    for key, tensor in saved.items():
        assert torch.equal(state.tensors[key], tensor), key
    assert agent.config.layout["agents"] == env.possible_agents  # the row layout came back with the config
    if agent.algorithm == "IPPO":
        assert agent.config.groups == {"red": ["agent_0", "agent_1"], "blue": ["agent_2"]}
        assert len(agent.actor.nets) == 2  # one network per group
    else:
        assert agent.config.critic_input == "state" and agent.multiagent_layout.state == "state"
    returns = agent.play(env, episodes=2, seed=0)  # MAPPO's env raises on a masked action: masks are honoured
    assert len(returns) == 2 and all(np.isfinite(returns))
    session = wb.Session.reopen(V3 / name, env)
    assert session.steps == steps and "episode_reward/agent_1" in session.signals
    session.run(steps=len(env.possible_agents) * 4)
    assert session.status == "finished" and session.steps == steps + len(env.possible_agents) * 4


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if "minatar" in n else n  # MinAtar loads slowly
        for n in V3_RUNS
        if n not in V3_MULTI  # a ParallelEnv, rebuilt above
    ],
)
def test_a_run_of_this_version_loads_plays_and_resumes(name):
    import json

    meta = json.loads((V3 / name / "meta.json").read_text())
    steps = meta["session"]["steps"]
    agent = wb.load(V3 / name)
    assert agent.algorithm == meta["algorithm"] and agent.num_timesteps == steps
    saved = load_file(V3 / name / "weights.safetensors")
    state = agent.state()
    assert set(state.tensors) == set(saved)
    for key, tensor in saved.items():
        assert torch.equal(state.tensors[key], tensor), key
    if agent.offline:
        env_id = "CartPole-v1" if agent.action_space.__class__.__name__ == "Discrete" else "Pendulum-v1"
        data = wb.Dataset.load(V3 / V3_DATA[env_id])
        session = wb.Session.reopen(V3 / name, dataset=data)
    else:
        env_id = meta["session"]["env_id"]
        session = wb.Session.reopen(V3 / name)
        if session.agent.memory is not None:
            assert len(session.agent.memory) > 0  # the replay memory came back (n-step returns keep fewer)
    returns = agent.play(env_id, episodes=1, seed=0, max_steps=50)
    assert len(returns) == 1 and np.isfinite(returns[0])
    assert session.steps == steps
    session.run(steps=8)
    assert session.status == "finished" and session.steps == steps + 8
