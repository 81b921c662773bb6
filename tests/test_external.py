"""Session.external: an env-less session driven by the application's act/feedback calls."""

import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import AppEnv, small_ppo, wait_until

import workbench as wb
from workbench.parallel.external import ExternalRunner


def app_env(**kw):
    return AppEnv(model={}, app_args={}, config=None, **kw)


def small_dqn(env, **kw):
    kw = {"learning_starts": 50, "buffer_size": 1000, "batch_size": 8, "train_freq": 8, "gradient_steps": 1, **kw}
    return wb.DQN(observation_space=env.observation_space, action_space=env.action_space, **kw)


def drive(session, env, steps, episode=None, seed=0):
    """A plain application loop: ``steps`` act/feedback pairs on ``env`` (episode ``episode``)."""
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        action = session.act(obs, episode=episode)
        next_obs, reward, terminated, truncated, info = env.step(action)
        session.feedback(reward, next_obs, terminated, truncated, episode=episode, info=info)
        obs = env.reset()[0] if terminated or truncated else next_obs


def drive_until_done(session, env, seed=0, limit=1_000_000):
    obs, _ = env.reset(seed=seed)
    for _ in range(limit):
        if session.status not in ("idle", "running", "paused"):
            return
        action = session.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        session.feedback(reward, next_obs, terminated, truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    raise AssertionError("the session did not end")


# -- the contract ----------------------------------------------------------------------------------


def test_external_session_learns_from_feedback_and_records_episodes():
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0, max_lag=0)
    assert session.status == "idle" and "the application" in repr(session)
    session.start(steps=200)
    drive_until_done(session, env)
    assert session.wait(timeout=30)
    assert session.status == "finished" and session.stop_reason == "budget"
    assert session.steps == 200
    assert session.episodes == 200 // 20  # AppEnv's episodes last 20 steps
    assert session.signals["episode_length"].last == 20
    assert len(session.signals["loss"].values) > 0  # updates ran in the background
    assert session.agent.num_updates > 0


def test_act_returns_the_env_format_and_action_space_values():
    env = app_env()
    session = wb.Session.external(small_dqn(env))
    action = session.act(env.reset(seed=0)[0])
    assert isinstance(action, int) and env.action_space.contains(action)
    box = gym.make("Pendulum-v1")
    sac = wb.SAC(observation_space=box.observation_space, action_space=box.action_space)
    a = wb.Session.external(sac).act(box.reset(seed=0)[0])
    assert a.shape == (1,) and box.action_space.contains(a.astype(np.float32))


def test_act_twice_without_feedback_names_the_episode():
    env = app_env()
    session = wb.Session.external(small_dqn(env, n_envs=2))
    obs = env.reset(seed=0)[0]
    session.act(obs)
    with pytest.raises(RuntimeError, match="default episode.*feedback"):
        session.act(obs)
    session.act(obs, episode="user-7")
    with pytest.raises(RuntimeError, match="'user-7'"):
        session.act(obs, episode="user-7")


def test_feedback_without_act_and_bad_feedback_are_clear_errors():
    env = app_env()
    session = wb.Session.external(small_dqn(env))
    obs = env.reset(seed=0)[0]
    with pytest.raises(RuntimeError, match="without an act"):
        session.feedback(1.0, obs, False, False)
    with pytest.raises(RuntimeError, match="episode 3"):
        session.feedback(1.0, obs, False, False, episode=3)
    session.act(obs)
    with pytest.raises(TypeError, match="reward"):
        session.feedback("good", obs, False, False)
    with pytest.raises(ValueError, match="NaN"):
        session.feedback(float("nan"), obs, False, False)
    with pytest.raises(ValueError, match="shape"):
        session.feedback(1.0, np.zeros(5), False, False)
    with pytest.raises(ValueError, match="batch of 2"):
        session.feedback(1.0, np.zeros((2, 3)), False, False)
    with pytest.raises(TypeError, match="terminated"):
        session.feedback(1.0, obs, "yes", False)
    session.feedback(1.0, obs, False, False)  # the pending action survived the bad calls
    with pytest.raises(TypeError, match="hashable"):
        session.act(obs, episode=["a"])


def test_act_and_feedback_need_an_external_session():
    env = app_env()
    session = wb.Session(small_dqn(env), env)
    with pytest.raises(RuntimeError, match="Session.external"):
        session.act(env.reset(seed=0)[0])


def test_external_refuses_env_options():
    env = app_env()
    with pytest.raises(TypeError, match="num_workers"):
        wb.Session.external(small_dqn(env), num_workers=4)
    with pytest.raises(TypeError, match="step_timeout"):
        wb.Session.external(small_dqn(env), step_timeout=1.0)
    with pytest.raises(ValueError, match="max_lag"):
        wb.Session.external(small_dqn(env), max_lag=-1)
    with pytest.raises(ValueError, match="eval_env"):
        wb.Session.external(small_dqn(env), eval_every=100)


def test_an_ended_episode_frees_its_id_and_slot():
    env = app_env()
    session = wb.Session.external(small_dqn(env))  # n_envs=1: one episode at a time
    obs = env.reset(seed=0)[0]
    session.act(obs, episode="a")
    assert session.live_episodes == ["a"]
    with pytest.raises(RuntimeError, match=r"episode 'b' cannot start.*n_envs=1.*episode 'a'"):
        session.act(obs, episode="b")
    session.feedback(0.0, obs, False, True, episode="a")  # truncated ends it
    assert session.live_episodes == []
    session.act(obs, episode="b")
    session.feedback(0.0, obs, True, False, episode="b")
    session.act(obs, episode="a")  # the id starts a new episode
    assert session.live_episodes == ["a"]


# -- episodes and slots ------------------------------------------------------------------------------


def test_interleaved_episodes_each_keep_one_column_with_their_extras():
    env = app_env()
    agent = small_ppo(env, spaces_only=True, n_envs=3)
    runner = ExternalRunner(agent)
    users = ["u0", "u1", "u2"]
    # Each user's observations carry its number, so a column's origin can be read back.
    for t in range(4):
        for u, user in enumerate(reversed(users)):  # arrival order differs from slot order
            obs = np.array([u, t, 0], dtype=np.float32) / 10
            runner.act(obs, user)
        for u, user in enumerate(users[::-1]):
            runner.feedback(1.0, np.array([u, t + 1, 0], dtype=np.float32) / 10, False, t == 3, user)
    assert runner.ready()
    for t in range(4):
        batch, next_obs = runner.transitions(agent, None)
        users_in_columns = np.round(batch.obs[:, 0] * 10).astype(int)
        assert sorted(users_in_columns) == [0, 1, 2]
        if t == 0:
            columns = users_in_columns
        assert (users_in_columns == columns).all()  # every column is one episode's stream
        assert np.allclose(batch.obs[:, 1] * 10, t)
        assert set(batch.extras) == {"values", "log_probs"}
        assert batch.extras["values"].shape == (3,)
        with torch.no_grad():
            values = agent.critic(torch.from_numpy(batch.obs)).squeeze(-1).numpy()
        np.testing.assert_allclose(batch.extras["values"], values, rtol=1e-5, atol=1e-6)
        assert batch.truncated.all() == (t == 3)
    assert [e.length for e in runner.ended_episodes()] == [4, 4, 4]
    assert not runner.ready()


def test_learning_waits_for_every_slot():
    env = app_env()
    runner = ExternalRunner(small_dqn(env, n_envs=2))
    obs = env.reset(seed=0)[0]
    for _ in range(3):
        runner.act(obs, "a")
        runner.feedback(1.0, obs, False, False, "a")
    assert runner.queued == 3 and not runner.wait_ready(0.01)
    runner.act(obs, "b")
    runner.feedback(1.0, obs, False, False, "b")
    assert runner.wait_ready(0.01)


def test_concurrent_episodes_from_threads_learn_in_the_background():
    env0 = app_env()
    session = wb.Session.external(small_ppo(env0, spaces_only=True, n_envs=4), seed=0)
    session.start(steps=4 * 160)
    errors = []

    def user(i):
        try:
            env = app_env()
            obs, _ = env.reset(seed=i)
            while session.status in ("idle", "running"):
                action = session.act(obs, episode=f"user-{i}")
                obs2, reward, terminated, truncated, _ = env.step(action)
                session.feedback(reward, obs2, terminated, truncated, episode=f"user-{i}")
                obs = env.reset()[0] if terminated or truncated else obs2
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    assert session.wait(timeout=60)
    for t in threads:
        t.join(timeout=10)
    assert not errors
    assert session.status == "finished" and session.steps == 640
    assert session.agent.num_updates == 640 // (4 * 16)
    assert session.episodes == 640 // 20


# -- control -----------------------------------------------------------------------------------------


def test_pause_stop_and_feedback_after_the_run():
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0)
    session.start(steps=1_000_000)
    drive(session, env, 100)
    wait_until(lambda: session.steps == 100)
    session.pause()
    assert session.status == "paused"
    drive(session, env, 30)  # act answers while paused; feedback is queued
    time.sleep(0.1)
    assert session.steps == 100
    session.resume()
    wait_until(lambda: session.steps == 130)
    session.stop()
    assert session.status == "stopped" and session.stop_reason == "stop"
    dropped = session._ctx.loop.runner.dropped
    drive(session, env, 10)  # after the run: still served, transitions dropped
    assert session._ctx.loop.runner.dropped == dropped + 10
    assert session.steps == 130


def test_stop_while_waiting_for_feedback_is_prompt():
    env = app_env()
    session = wb.Session.external(small_dqn(env))
    session.start(steps=1000)
    time.sleep(0.05)
    t0 = time.perf_counter()
    session.stop()
    assert time.perf_counter() - t0 < 1.0 and session.status == "stopped"


def test_stop_when_and_signal_subscribers():
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0, stop_when=lambda s: s.episodes >= 3)
    heard = []
    session.signals.subscribe(
        lambda name, step, value: heard.append((name, step)) if name == "episode_length" else None
    )
    session.start(steps=100_000)
    drive_until_done(session, env)
    session.wait(timeout=30)
    assert session.stop_reason == "stop_when" and session.episodes == 3 and session.steps == 60
    assert list(session.signals["episode_reward"].steps) == [20, 40, 60]
    assert heard == [("episode_length", 20), ("episode_length", 40), ("episode_length", 60)]
    session.log("users", 3)
    assert session.signals["users"].last == 3


def test_max_lag_keeps_a_fast_application_in_step():
    env = app_env()
    session = wb.Session.external(small_dqn(env), max_lag=0)
    drive(session, env, 5)  # before start nothing waits (the transitions are queued)
    session.start(steps=200)
    fed = 5
    obs = env.reset(seed=0)[0]
    while session.status == "running":
        session.act(obs)
        session.feedback(1.0, obs, False, False)
        fed += 1
        # Taken by the loop before feedback returned (unless that feedback came as the run ended).
        assert session._ctx.loop.runner.queued == 0 or session.status != "running"
    assert session.wait(timeout=30) and session.steps == 200 and fed <= 201


def test_eval_with_an_eval_env():
    env = app_env()
    session = wb.Session.external(
        small_dqn(env), seed=0, max_lag=0, eval_every=100, eval_episodes=2, eval_env=app_env()
    )
    session.start(steps=200)
    drive_until_done(session, env)
    session.wait(timeout=30)
    assert list(session.signals["eval_reward"].steps) == [100, 200]


def test_evaluate_needs_an_eval_env_and_says_so():
    session = wb.Session.external(small_dqn(app_env()), seed=0)
    with pytest.raises(ValueError, match="external session has none") as err:
        session.evaluate(episodes=1)
    # It says what to pass: eval_env= and what it may be (not "an env instance" alone).
    assert "eval_env=" in str(err.value) and "zero-argument factory" in str(err.value)
    session = wb.Session.external(small_dqn(app_env()), seed=0, eval_env=app_env())
    assert np.isfinite(session.evaluate(episodes=1))


# -- save, load, resume --------------------------------------------------------------------------------


def test_save_load_and_resume_an_external_session(tmp_path):
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0, max_lag=0)
    session.start(steps=300)
    drive_until_done(session, env)
    session.wait(timeout=30)
    path = session.save(tmp_path / "run", memory=True)

    agent = wb.load(path)
    obs = env.reset(seed=1)[0]
    assert agent.act(obs) == session.agent.act(obs, deterministic=True)

    with pytest.raises(ValueError, match="external=True"):
        wb.Session.reopen(path)
    resumed = wb.Session.reopen(path, external=True, max_lag=0)
    assert resumed.steps == 300 and resumed.episodes == session.episodes
    assert list(resumed.signals["episode_reward"].values) == list(session.signals["episode_reward"].values)
    resumed.start(steps=100)
    drive_until_done(resumed, env, seed=5)
    resumed.wait(timeout=30)
    assert resumed.steps == 400 and resumed.episodes == 20
    # A run trained on an env can continue driven by the application, too.
    normal = wb.Session(small_dqn(env), env, seed=0).run(steps=100)
    normal.save(tmp_path / "normal")
    assert wb.Session.reopen(tmp_path / "normal", external=True).steps == 100


def test_save_while_running_keeps_serving():
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0)
    session.start(steps=1_000_000)
    drive(session, env, 50)
    wait_until(lambda: session.steps == 50)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        session.save(tmp + "/run")
    assert session.status == "running"
    drive(session, env, 10, seed=3)
    wait_until(lambda: session.steps == 60)
    session.stop()


# -- thread-safe play -------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["DQN", "PPO", "SAC"])
def test_concurrent_act_on_a_loaded_agent_matches_serial_calls(tmp_path, algorithm):
    env_id = "Pendulum-v1" if algorithm == "SAC" else "CartPole-v1"
    env = gym.make(env_id)
    agent = getattr(wb, algorithm)(env_id, seed=0)
    agent.save(tmp_path / "agent")
    loaded = wb.load(tmp_path / "agent")
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, size=(400, *env.observation_space.shape)).astype(np.float32)
    serial = [loaded.act(o) for o in obs]
    results: dict[int, list] = {}
    barrier = threading.Barrier(8)

    def worker(k):
        barrier.wait()
        results[k] = [(i, loaded.act(obs[i])) for i in range(k, len(obs), 8)]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rows in results.values():
        for i, action in rows:
            np.testing.assert_array_equal(action, serial[i])
    assert sum(len(r) for r in results.values()) == len(obs)


def test_the_dashboard_shows_an_external_session():
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        session.start(steps=100)
        drive_until_done(session, env)
        session.wait(timeout=30)
        dash.refresh()
        assert "episode_reward" in session.signals and dash.refresh_count >= 1
    finally:
        dash.close()


@pytest.mark.parametrize("mask_in", ["info", "obs"])
def test_action_masks_are_honoured_and_reach_the_agent(mask_in):
    from workbench.envs.testing import MaskedTarget

    env = MaskedTarget(mask_in=mask_in)  # a masked action raises inside env.step
    agent = wb.DQN(env, learning_starts=20, batch_size=8, train_freq=4, gradient_steps=1, buffer_size=500)
    session = wb.Session.external(agent, seed=0, max_lag=0)
    session.start(steps=120)
    obs, info = env.reset(seed=0)
    while session.status == "running":
        action = session.act(obs, action_mask=info.get("action_mask"))  # None with mask_in="obs": the Dict key
        obs2, reward, terminated, truncated, info = env.step(action)
        session.feedback(reward, obs2, terminated, truncated, info=info)
        obs, info = env.reset() if terminated or truncated else (obs2, info)
    assert session.wait(timeout=60) and session.steps == 120 and agent.num_updates > 0
    runner = ExternalRunner(agent)
    obs, info = env.reset(seed=1)
    action = runner.act(obs, "u", info.get("action_mask"))
    obs2, reward, terminated, truncated, info = env.step(action)
    runner.feedback(reward, obs2, False, False, "u", info)
    batch, _ = runner.transitions(agent, None)
    assert batch.extras["action_mask"].shape == batch.extras["next_action_mask"].shape == (1, env.n_actions)
    expected = obs2["action_mask"] if mask_in == "obs" else info["action_mask"]
    np.testing.assert_array_equal(batch.extras["next_action_mask"][0], np.asarray(expected, dtype=bool))


def test_live_edits_work_and_call_env_says_the_application_owns_the_env():
    env = app_env()
    session = wb.Session.external(small_dqn(env), seed=0, max_lag=0)
    session.set(learning_rate=1e-4)
    assert session.agent.config.learning_rate == 1e-4
    with pytest.raises(ValueError, match="application owns the env"):
        session.call_env("set_difficulty", 3)
    session.start(steps=60)
    drive_until_done(session, env)
    assert session.wait(timeout=30) and session.steps == 60
