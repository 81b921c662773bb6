"""Save, load, resume and play: the pickle-free format, its safety and its failure modes."""

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import zipfile

import numpy as np
import pytest
import torch
from conftest import AppEnv

import workbench as wb
from workbench.checkpoint import FORMAT_VERSION, CheckpointError

FAST = {
    "dqn": dict(learning_starts=50, train_freq=50, gradient_steps=4, buffer_size=2000, target_update_interval=50),
    "ppo": dict(n_envs=2, n_steps=32, batch_size=64, n_epochs=2),
}


def make_agent(name, env="CartPole-v1", **kw):
    return wb.AGENTS[name](env, **{**FAST[name], **kw})


def trained_session(name, steps=400, seed=0):
    session = wb.Session(make_agent(name), "CartPole-v1", seed=seed)
    session.run(steps=steps)
    return session


def same_weights(a, b):
    for name, net in a.networks.items():
        other = b.networks[name].state_dict()
        for key, t in net.state_dict().items():
            if not torch.equal(t, other[key]):
                return False
    return True


@pytest.mark.parametrize("name", sorted(FAST))
def test_save_writes_the_documented_files(tmp_path, name):
    session = trained_session(name)
    path = session.save(tmp_path / "run", memory=(name == "dqn"))
    files = set(os.listdir(path))
    assert {"meta.json", "weights.safetensors", "signals.csv"} <= files
    assert ("memory.npz" in files) == (name == "dqn")
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION and meta["algorithm"] == name.upper()
    assert meta["counters"]["num_timesteps"] == session.steps
    assert meta["session"]["env_id"] == "CartPole-v1"
    assert {"torch", "gymnasium", "numpy", "workbench"} <= set(meta["versions"])
    assert meta["observation_space"]["type"] == "Box" and meta["action_space"] == {
        "type": "Discrete",
        "n": 2,
        "start": 0,
    }
    assert "rng" in meta and "hyperparameters" in meta


@pytest.mark.parametrize("name", sorted(FAST))
@pytest.mark.parametrize("suffix", ["", ".zip"])
def test_load_returns_a_play_mode_agent_with_the_same_weights(tmp_path, name, suffix):
    session = trained_session(name)
    path = session.save(str(tmp_path / "run") + suffix)
    if suffix:
        assert zipfile.is_zipfile(path)
    agent = wb.load(path)
    assert type(agent) is type(session.agent) and not agent.training
    assert all(not net.training for net in agent.networks.values())
    assert same_weights(agent, session.agent)
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_array_equal(agent.act(obs), session.agent.act(obs, deterministic=True))
    np.testing.assert_array_equal(agent.act(obs), agent.act(obs))  # deterministic, no exploration
    returns = agent.play("CartPole-v1", episodes=2, seed=0)
    assert len(returns) == 2
    assert agent.num_timesteps == session.steps  # playing learns nothing


def test_play_with_frames_from_a_loaded_agent(tmp_path):
    path = trained_session("ppo").save(tmp_path / "run")
    returns, frames = wb.load(path).play("CartPole-v1", episodes=1, render="rgb_array", max_steps=3)
    assert len(returns) == 1 and len(frames[0]) == 4


def test_play_refuses_other_spaces_saying_which(tmp_path):
    agent = wb.load(trained_session("ppo").save(tmp_path / "run"))
    with pytest.raises(ValueError, match="observation space"):
        agent.play("Acrobot-v1")
    with pytest.raises(ValueError, match="action space"):
        agent.play(
            lambda: (
                __import__("gymnasium").make("CartPole-v1").unwrapped.__class__(render_mode=None)
                if False
                else _cartpole_with_three_actions()
            )
        )


def _cartpole_with_three_actions():
    import gymnasium as gym
    from gymnasium import spaces

    env = gym.make("CartPole-v1")
    env.action_space = spaces.Discrete(3)
    return env


@pytest.mark.parametrize("name", sorted(FAST))
def test_resume_restores_counters_optimizer_schedule_signals_and_memory(tmp_path, name):
    session = trained_session(name, steps=600)
    path = session.save(tmp_path / "run", memory=True if name == "dqn" else False)
    resumed = wb.Session.reopen(path, "CartPole-v1")
    agent, original = resumed.agent, session.agent
    assert agent.training
    assert resumed.steps == session.steps and resumed.episodes == session.episodes
    assert agent.num_updates == original.num_updates and agent.num_timesteps == original.num_timesteps
    assert same_weights(agent, original)
    for opt_name, opt in original.optimizers.items():
        a, b = opt.state_dict()["state"], agent.optimizers[opt_name].state_dict()["state"]
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) and torch.equal(a[k]["exp_avg_sq"], b[k]["exp_avg_sq"])
    assert resumed.signals.names() == session.signals.names()
    np.testing.assert_allclose(resumed.signals["episode_reward"].values, session.signals["episode_reward"].values)
    assert agent.progress == pytest.approx(original.progress)
    if name == "dqn":
        assert len(agent.memory) == len(original.memory)
        np.testing.assert_array_equal(agent.memory.state_arrays()["obs"], original.memory.state_arrays()["obs"])
        assert agent.epsilon == pytest.approx(original.epsilon)
    assert agent.rng.bit_generator.state == original.rng.bit_generator.state
    resumed.run(steps=200)
    assert resumed.steps >= session.steps + 200


def test_resume_env_is_taken_from_the_saved_id(tmp_path):
    path = trained_session("ppo").save(tmp_path / "run")
    assert wb.Session.reopen(path).env_source.env_id == "CartPole-v1"


def test_resume_of_an_app_env_run_needs_the_env(tmp_path):
    env = AppEnv(model={}, app_args={}, config=None)
    session = wb.Session(wb.PPO(env, n_envs=1, n_steps=16, batch_size=16, n_epochs=1), env)
    session.run(steps=64)
    path = session.save(tmp_path / "run")
    with pytest.raises(ValueError, match="pass it"):
        wb.Session.reopen(path)
    resumed = wb.Session.reopen(path, env)
    assert resumed.steps == 64


@pytest.mark.slow
def test_resumed_run_matches_an_uninterrupted_run(tmp_path):
    def agent():
        return wb.PPO(AppEnv(model={}, app_args={}, config=None), n_envs=1, n_steps=64, batch_size=64, n_epochs=4)

    env = AppEnv(model={}, app_args={}, config=None)
    straight = wb.Session(agent(), env, seed=5)
    straight.run(steps=4000)

    env2 = AppEnv(model={}, app_args={}, config=None)
    # planned for 4000 steps like the straight run, interrupted half way by the app's own logic
    first = wb.Session(agent(), env2, seed=5, stop_when=lambda s: s.steps >= 2000)
    first.run(steps=4000)
    assert first.steps == 2000
    path = first.save(tmp_path / "half")
    second = wb.Session.reopen(path, env2)
    second.run(steps=2000)

    assert second.steps == straight.steps
    assert second.agent.num_updates == straight.agent.num_updates
    assert second.agent.progress == pytest.approx(straight.agent.progress)
    # the schedule continues where it was: equal up to one rollout (a partial rollout is not saved)
    assert second.signals["learning_rate"].last == pytest.approx(straight.signals["learning_rate"].last, abs=2e-5)
    a = straight.signals["episode_reward"].mean(last=20)
    b = second.signals["episode_reward"].mean(last=20)
    assert a > 14 and b > 14 and abs(a - b) < 3  # both learned; returns agree within noise


def test_memory_save_and_load_on_their_own(tmp_path):
    session = trained_session("dqn", steps=300)
    memory = session.agent.memory
    path = tmp_path / "buffer.npz"
    memory.save(path)
    with np.load(path, allow_pickle=False) as data:
        assert set(data.files) == {"obs", "actions", "rewards", "next_obs", "dones", "discounts"}
    fresh = make_agent("dqn")
    fresh.memory.load(path)  # warm-start a new agent
    assert len(fresh.memory) == len(memory)
    np.testing.assert_array_equal(fresh.memory.state_arrays()["rewards"], memory.state_arrays()["rewards"])


def test_memory_load_refuses_other_shapes(tmp_path):
    path = tmp_path / "buffer.npz"
    trained_session("dqn", steps=300).agent.memory.save(path)
    other = wb.DQN(AppEnv(model={}, app_args={}, config=None), buffer_size=100)
    with pytest.raises(ValueError, match="obs"):
        other.memory.load(path)


def test_saving_memory_of_an_agent_without_one_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no replay memory"):
        trained_session("ppo", steps=100).save(tmp_path / "x", memory=True)
    assert not (tmp_path / "x").exists()


def test_checkpoint_dir_has_a_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = wb.Session(make_agent("ppo"), "CartPole-v1", checkpoint_every=128)
    session.run(steps=256)
    assert session.checkpoint_dir.startswith("runs")
    assert wb.load(os.path.join(session.checkpoint_dir, "latest")).num_timesteps >= 128


def test_periodic_checkpoints_keep_latest_and_best(tmp_path):
    agent = make_agent("ppo")
    session = wb.Session(
        agent,
        "CartPole-v1",
        seed=0,
        eval_every=256,
        eval_episodes=1,
        checkpoint_every=256,
        checkpoint_dir=tmp_path / "ckpt",
        keep_best=True,
    )
    session.run(steps=1024)
    latest, best = tmp_path / "ckpt" / "latest", tmp_path / "ckpt" / "best"
    assert (latest / "meta.json").exists() and (best / "meta.json").exists()
    meta = json.loads((latest / "meta.json").read_text())
    assert meta["session"]["steps"] >= 768
    best_meta = json.loads((best / "meta.json").read_text())
    assert best_meta["session"]["best_eval_reward"] == pytest.approx(session.best_eval_reward)
    wb.load(best)


# -- safety and failure modes ----------------------------------------------------------------


class _Boom:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('WB_PWNED', '/tmp/wb-pwned')}",))


def test_a_pickle_disguised_as_weights_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("WB_PWNED", str(marker))
    path = trained_session("ppo", steps=100).save(tmp_path / "run")
    with open(os.path.join(path, "weights.safetensors"), "wb") as f:
        pickle.dump(_Boom(), f)
    with pytest.raises(CheckpointError, match="weights.safetensors"):
        wb.load(path)
    torch_file = tmp_path / "run2"
    path2 = trained_session("ppo", steps=100).save(torch_file)
    torch.save({"x": _Boom()}, os.path.join(path2, "weights.safetensors"))
    with pytest.raises(CheckpointError, match="pickle"):
        wb.load(path2)
    assert not marker.exists()


def test_a_pickled_memory_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("WB_PWNED", str(marker))
    path = trained_session("dqn", steps=100).save(tmp_path / "run", memory=True)
    arrays = dict(np.load(os.path.join(path, "memory.npz")))
    arrays["obs"] = np.array([_Boom()], dtype=object)
    np.savez(os.path.join(path, "memory.npz"), **arrays)
    with pytest.raises(CheckpointError, match="pickle"):
        wb.Session.reopen(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        ("truncate_weights", "weights.safetensors"),
        ("garbage_meta", "meta.json"),
        ("missing_weights", "weights.safetensors"),
        ("missing_meta", "meta.json"),
        ("newer_version", "newer"),
        ("unknown_algorithm", "unknown algorithm"),
    ],
)
def test_damaged_checkpoints_name_the_file_and_the_problem(tmp_path, damage, match):
    path = trained_session("ppo", steps=100).save(tmp_path / "run")
    weights, meta_path = os.path.join(path, "weights.safetensors"), os.path.join(path, "meta.json")
    if damage == "truncate_weights":
        data = open(weights, "rb").read()
        open(weights, "wb").write(data[: len(data) // 2])
    elif damage == "garbage_meta":
        open(meta_path, "w").write('{"format": "rl-workb')
    elif damage == "missing_weights":
        os.unlink(weights)
    elif damage == "missing_meta":
        os.unlink(meta_path)
    else:
        meta = json.load(open(meta_path))
        if damage == "newer_version":
            meta["format_version"] = FORMAT_VERSION + 1
        else:
            meta["algorithm"] = "Rainbow9000"
        json.dump(meta, open(meta_path, "w"))
    with pytest.raises(CheckpointError, match=match):
        wb.load(path)


def test_weights_of_another_algorithm_are_refused(tmp_path):
    ppo = trained_session("ppo", steps=100).save(tmp_path / "ppo")
    dqn = trained_session("dqn", steps=100).save(tmp_path / "dqn")
    os.replace(os.path.join(ppo, "weights.safetensors"), os.path.join(dqn, "weights.safetensors"))
    with pytest.raises(CheckpointError, match="weights.safetensors"):
        wb.load(dqn)


def test_missing_checkpoint_and_non_checkpoint_file(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        wb.load(tmp_path / "nothing")
    bogus = tmp_path / "model.pt"
    bogus.write_bytes(b"\x80\x04junk")
    with pytest.raises(CheckpointError, match="not a workbench checkpoint"):
        wb.load(bogus)
    badzip = tmp_path / "run.zip"
    badzip.write_bytes(b"PK\x03\x04broken")
    with pytest.raises(CheckpointError, match="zip"):
        wb.load(badzip)


def test_overwriting_keeps_a_loadable_checkpoint(tmp_path):
    session = trained_session("ppo", steps=100)
    path = session.save(tmp_path / "run")
    session.run(steps=100)
    session.save(path)
    assert wb.load(path).num_timesteps == session.steps
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]


def test_a_crash_between_renames_falls_back_to_the_previous_checkpoint(tmp_path):
    path = trained_session("ppo", steps=100).save(tmp_path / "run")
    os.replace(path, f"{path}.old-12345")  # what a kill between the two renames leaves
    assert wb.load(path).algorithm == "PPO"


@pytest.mark.slow  # a subprocess saving a 300k-row memory again and again
def test_killing_the_process_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    # A full 300k-row memory makes each save long enough to be killed inside; it is filled directly
    # (one batch of rows), not by stepping CartPole 300,000 times.
    script = textwrap.dedent(
        f"""
        import numpy as np, workbench as wb
        agent = wb.DQN("CartPole-v1", buffer_size=300_000, learning_starts=10**9)
        session = wb.Session(agent, "CartPole-v1", seed=0)
        session.run(steps=800)
        memory, n = agent.memory, 300_000 - len(agent.memory)
        rows = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)
        actions = np.zeros((n, *memory.action_shape), dtype=memory.actions.dtype)
        memory.add(rows, actions, np.ones(n, np.float32), rows, np.zeros(n, np.float32), 0.99)
        assert len(memory) == 300_000
        session.save({str(tmp_path / "run")!r}, memory=True)
        print("saved", flush=True)
        while True:
            session.save({str(tmp_path / "run")!r}, memory=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saved"
        time.sleep(0.3)  # somewhere inside a later save
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    agent = wb.load(tmp_path / "run")
    assert agent.num_timesteps == 800
    resumed = wb.Session.reopen(tmp_path / "run")
    assert len(resumed.agent.memory) == 300_000
