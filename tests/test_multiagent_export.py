"""One exported ONNX policy per policy of a multi-agent agent (IPPO groups, MAPPO's actor, shared PPO),
named after the agents it serves, each giving what the agent's ``act`` gives for those agents."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import workbench as wb
from workbench.agents.multiagent import export_policies
from workbench.envs.multiagent import ParallelEnvAdapter, layout_for
from workbench.envs.multiagent_toy import MatchTarget

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

SMALL = {"n_steps": 16, "batch_size": 32, "n_epochs": 4, "net_arch": (16,), "learning_rate": 3e-3}


def _rows_and_own(agent, env, steps=3):
    """Rows as the runner builds them for ``agent``, and each agent's own flat observation, over a few steps."""
    adapter = ParallelEnvAdapter(env, layout_for(agent, env), seed=0)
    rows = [adapter.reset()]
    for _ in range(steps):
        rows.append(adapter.step(np.ones(adapter.num_envs, np.int64))[0])
    rows = np.concatenate(rows)
    own = rows[:, : adapter.layout.obs_dim]
    return rows, own, np.tile(np.arange(adapter.num_envs), steps + 1)


def _run(path, **inputs):
    session = ort.InferenceSession(path)
    return session.run(None, inputs)[0]


def test_ippo_writes_one_file_per_group_named_after_its_agents(tmp_path):
    env = MatchTarget(n_agents=3)
    agent = wb.IPPO(env, groups={"red": ["agent_0", "agent_1"], "blue": ["agent_2"]}, seed=0, **SMALL)
    wb.Session(agent, env, seed=0).run(steps=96)  # the groups' networks differ after training
    paths = agent.export_policies(tmp_path / "policies")
    assert sorted(paths) == ["blue-agent_2", "red-agent_0+agent_1"]
    assert sorted(os.listdir(tmp_path / "policies")) == sorted(
        [f"{s}.onnx" for s in paths] + [f"{s}.onnx.json" for s in paths]
    )
    rows, own, index = _rows_and_own(agent, env)
    expected = agent.act(rows, deterministic=True)
    for stem, members in (("red-agent_0+agent_1", [0, 1]), ("blue-agent_2", [2])):
        sidecar = json.loads(open(paths[stem] + ".json").read())
        assert sidecar["agents"] == [f"agent_{i}" for i in members] and sidecar["inputs"] == ["obs"]
        mine = np.isin(index, members)
        out = _run(paths[stem], obs=own[mine])
        assert np.array_equal(out, expected[mine])
    # A group's file serves only its agents: the other group's network decides differently somewhere.
    other = _run(paths["blue-agent_2"], obs=own)
    assert not np.array_equal(other, expected)


def test_mappo_exports_its_shared_actor_with_the_agent_index(tmp_path):
    env = MatchTarget(n_agents=2, masks=True)
    agent = wb.MAPPO(env, critic_input="state", seed=0, **SMALL)
    paths = agent.export_policies(tmp_path, action_mask=True)
    [(stem, path)] = paths.items()
    assert stem == "mappo-agent_0+agent_1"
    sidecar = json.loads(open(path + ".json").read())
    assert sidecar["inputs"] == ["obs", "agent_index", "action_mask"] and sidecar["agents"] == ["agent_0", "agent_1"]
    rows, own, index = _rows_and_own(agent, env)
    masks = np.tile(np.array([True, False, True]), (len(rows), 1))
    out = _run(path, obs=own, agent_index=index.astype(np.int64), action_mask=masks)
    assert np.array_equal(out, agent.act(rows, deterministic=True, action_mask=masks))
    assert not (out == 1).any()


@pytest.mark.parametrize("ids", [False, True])
def test_shared_ppo_exports_one_policy_for_every_agent(tmp_path, ids):
    env = MatchTarget(n_agents=2)
    agent = wb.PPO(wb.with_agent_ids(env) if ids else env, seed=0, **SMALL)
    paths = export_policies(agent, tmp_path, env)
    [(stem, path)] = paths.items()
    assert stem == "ppo-agent_0+agent_1"
    rows, own, index = _rows_and_own(agent, env)
    inputs = {"obs": own, **({"agent_index": index.astype(np.int64)} if ids else {})}
    assert np.array_equal(_run(path, **inputs), agent.act(rows, deterministic=True))
    with pytest.raises(FileExistsError):
        (tmp_path / "x").mkdir()
        (tmp_path / "x" / f"{stem}.onnx").write_text("not an export")
        export_policies(agent, tmp_path / "x", env)


def test_a_shared_policy_without_its_env_is_a_clear_error(tmp_path):
    agent = wb.PPO(MatchTarget(n_agents=2), seed=0, **SMALL)
    agent.env_source = None
    with pytest.raises(ValueError, match="needs the ParallelEnv"):
        export_policies(agent, tmp_path)


def test_a_loaded_run_exports_without_its_env(tmp_path):
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "saved-v3", "ippo-matchtarget")
    agent = wb.load(fixture)
    paths = agent.export_policies(tmp_path)
    assert sorted(paths) == ["blue-agent_2", "red-agent_0+agent_1"]
    env = MatchTarget(n_agents=3, length=4)
    rows, own, index = _rows_and_own(agent, env)
    red = np.isin(index, [0, 1])
    assert np.array_equal(_run(paths["red-agent_0+agent_1"], obs=own[red]), agent.act(rows[red], deterministic=True))
