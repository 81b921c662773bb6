"""Composite (Dict / Tuple) action spaces in multi-agent envs (issue 53): shared-parameter PPO, IPPO and MAPPO on a
ParallelEnv whose agents act in ``Dict({"choice": Discrete(3), "size": Box})``, with a mask per head, a signal per
head, save and reopen, play, the external session and the per-policy ONNX export."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.envs.multiagent import ParallelEnvAdapter, layout_for, parallel_spaces
from workbench.envs.multiagent_toy import MatchTarget

SMALL = {"n_steps": 16, "batch_size": 32, "n_epochs": 2, "net_arch": (16,), "learning_rate": 3e-3}
CLASSES = ["PPO", "IPPO", "MAPPO"]


def _agent(cls: str, env: MatchTarget, **extra):
    return getattr(wb, cls)(env, seed=0, **SMALL, **extra)


def test_parallel_spaces_takes_a_composite_space_and_names_what_is_supported():
    box, act, lay = parallel_spaces(MatchTarget(composite=True))
    assert isinstance(act, spaces.Dict) and box.shape == (lay.size,)

    class _Text(MatchTarget):
        def action_space(self, agent):
            return spaces.Text(4)

    with pytest.raises(ValueError, match="Dict / Tuple"):
        parallel_spaces(_Text())


def test_the_adapter_steps_the_agents_with_their_structures():
    env = MatchTarget(composite=True, masks=True)
    _, _, lay = parallel_spaces(env)
    adapter = ParallelEnvAdapter(env, lay, seed=0)
    adapter.reset()
    assert adapter.masks is not None and adapter.masks.tolist() == [[True, True, False]] * 2
    seen = {}
    step = env.step
    env.step = lambda actions: seen.update(actions) or step(actions)  # type: ignore[method-assign]
    adapter.step(np.array([[1.0, 0.25], [0.0, 5.0]], np.float32))  # a row per agent: choice, then size
    assert seen["agent_0"]["choice"] == 1 and seen["agent_1"]["choice"] == 0
    assert seen["agent_0"]["size"].tolist() == [0.25] and seen["agent_1"]["size"].tolist() == [1.0]  # clipped


@pytest.mark.parametrize("cls", CLASSES)
def test_trains_with_masks_and_a_signal_per_head_then_saves_reopens_and_plays(cls, tmp_path):
    # The env raises on the masked choice 2: a run that finishes honoured every agent's mask.
    env = MatchTarget(composite=True, masks=True, length=4)
    agent = _agent(cls, env)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=128)
    assert session.status == "finished"
    assert {"entropy", "entropy/choice", "entropy/size"} <= set(session.signals)
    assert np.isfinite(session.signals["entropy/choice"].last)
    path = session.save(tmp_path / "run")
    reopened = wb.Session.reopen(path, MatchTarget(composite=True, masks=True, length=4))
    reopened.run(steps=64)
    assert reopened.steps == 192
    loaded = wb.load(path)
    assert isinstance(loaded.action_space, spaces.Dict)
    returns = loaded.play(MatchTarget(composite=True, masks=True, length=4), episodes=2, seed=1)
    assert len(returns) == 2 and all(np.isfinite(returns))


@pytest.mark.parametrize("cls", CLASSES)
def test_the_external_session_answers_each_agent_in_its_structure(cls):
    env = MatchTarget(composite=True, masks=True, length=4)
    agent = _agent(cls, env, **({"critic_input": "concat"} if cls == "MAPPO" else {}))  # no env.state() here
    session = wb.Session.external(agent).start(steps=10**6)
    try:
        obs, info = env.reset(seed=0)
        for _ in range(4):
            masks = {a: info[a]["action_mask"] for a in obs}
            actions = session.act(obs, episode="match", action_mask=masks)
            assert set(actions) == set(obs)
            for action in actions.values():
                assert set(action) == {"choice", "size"} and int(action["choice"]) in (0, 1)  # 2 is masked
                assert -1.0 <= float(np.asarray(action["size"]).reshape(-1)[0]) <= 1.0
            obs, rewards, terminated, truncated, info = env.step(actions)
            session.feedback(rewards, obs, terminated, truncated, episode="match", info=info)
    finally:
        session.stop()


def test_other_agents_refuse_a_composite_parallel_env_naming_the_ones_that_fit():
    with pytest.raises((TypeError, ValueError), match="PPO"):
        wb.DQN(MatchTarget(composite=True))


@pytest.mark.parametrize("cls", ["IPPO", "MAPPO"])
def test_export_policies_writes_an_output_per_leaf_that_matches_act(cls, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    env = MatchTarget(n_agents=3, composite=True)
    extra = {"groups": {"red": ["agent_0", "agent_1"], "blue": ["agent_2"]}} if cls == "IPPO" else {}
    agent = _agent(cls, env, **extra)
    wb.Session(agent, env, seed=0).run(steps=96)
    paths = agent.export_policies(tmp_path / "policies")
    adapter = ParallelEnvAdapter(env, layout_for(agent, env), seed=0)
    rows = [adapter.reset()]
    for _ in range(3):
        rows.append(adapter.step(np.zeros((3, 2), np.float32))[0])
    rows = np.concatenate(rows)
    own, index = rows[:, : adapter.layout.obs_dim], np.tile(np.arange(3), 4)
    expected = agent.act(rows, deterministic=True)
    for stem, path in paths.items():
        sidecar = json.loads(open(path + ".json").read())
        assert [o["name"] for o in sidecar["outputs"]] == ["choice", "size"]
        members = [int(a.split("_")[1]) for a in sidecar["agents"]]
        mine = np.isin(index, members)
        model = ort.InferenceSession(path)
        assert [o.name for o in model.get_outputs()] == ["choice", "size"], stem
        feed = {"obs": own[mine]}
        if "agent_index" in sidecar["inputs"]:
            feed["agent_index"] = np.searchsorted(members, index[mine]).astype(np.int64)
        choice, size = model.run(None, feed)
        assert np.array_equal(choice, np.asarray(expected["choice"])[mine])
        assert np.allclose(size, np.asarray(expected["size"])[mine], atol=1e-6)


def test_local_workers_step_the_agents_composite_actions():
    agent = _agent("IPPO", MatchTarget(composite=True, masks=True, length=4))
    factory = lambda: MatchTarget(composite=True, masks=True, length=4)  # noqa: E731
    session = wb.Session(agent, factory, seed=0, num_workers=1, backend="local")
    session.run(steps=64)
    assert session.status == "finished" and "entropy/size" in session.signals
