"""The Session: background training, control from any thread, status, errors, stop_when, eval."""

import threading
import time

import numpy as np
import pytest
from conftest import AppEnv, ExplodingEnv, SlowEnv, small_ppo, wait_until

import workbench as wb


def test_start_returns_at_once_and_trains_in_background(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    assert session.status == "idle"
    t0 = time.perf_counter()
    session.start(steps=2000)
    assert time.perf_counter() - t0 < 0.5
    assert session.status in ("running", "finished")
    assert session.wait(timeout=60)
    assert session.status == "finished"
    assert session.steps >= 2000 and session.episodes >= 2000 // 20
    assert session.stop_reason == "budget"


def test_thread_is_a_daemon(app_env):
    session = wb.Session(small_ppo(app_env), SlowEnv(0.001))
    session.start(steps=10_000)
    assert session.run_control.thread.daemon
    session.stop()


def test_pause_freezes_the_step_counter_and_resume_continues():
    env = SlowEnv(0.001)
    session = wb.Session(small_ppo(env), env, seed=0)
    session.start(steps=100_000)
    wait_until(lambda: session.steps > 20)
    session.pause()
    assert session.status == "paused"
    frozen = session.steps
    time.sleep(0.15)
    assert session.steps == frozen
    session.resume()
    assert session.status == "running"
    wait_until(lambda: session.steps > frozen)
    session.stop()
    assert session.status == "stopped"


def test_stop_lands_promptly():
    env = SlowEnv(0.002)
    session = wb.Session(small_ppo(env), env)
    session.start(steps=1_000_000)
    wait_until(lambda: session.steps > 10)
    t0 = time.perf_counter()
    session.stop()
    assert time.perf_counter() - t0 < 1.0
    assert session.status == "stopped"
    steps = session.steps
    time.sleep(0.05)
    assert session.steps == steps
    assert session.stop_reason == "stop"


def test_stop_while_paused():
    env = SlowEnv(0.001)
    session = wb.Session(small_ppo(env), env)
    session.start(steps=1_000_000)
    wait_until(lambda: session.steps > 5)
    session.pause()
    session.stop()
    assert session.status == "stopped"


def test_starting_twice_is_an_error(app_env):
    env = SlowEnv(0.001)
    session = wb.Session(small_ppo(env), env)
    session.start(steps=1_000_000)
    with pytest.raises(RuntimeError, match="already running"):
        session.start(steps=10)
    session.stop()


def test_a_finished_session_can_train_more(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    session.run(steps=200)
    first = session.steps
    session.run(steps=200)
    assert session.steps >= first + 200 and session.status == "finished"


def test_error_in_env_step_fails_the_run_and_wait_reraises():
    env = ExplodingEnv(fail_after=30)
    session = wb.Session(small_ppo(env), env)
    session.start(steps=10_000)
    with pytest.raises(RuntimeError, match="simulator crashed") as info:
        session.wait(timeout=30)
    assert session.status == "failed"
    assert isinstance(session.error, RuntimeError)
    # the original traceback reaches into the env's step()
    frames = [f.name for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert "step" in frames


def test_run_reraises_training_errors():
    env = ExplodingEnv(fail_after=5)
    with pytest.raises(RuntimeError, match="simulator crashed"):
        wb.Session(small_ppo(env), env).run(steps=1000)


def test_stop_when_ends_the_run(app_env):
    calls = []

    def enough(session):
        calls.append(session.episodes)
        return session.episodes >= 3

    session = wb.Session(small_ppo(app_env), app_env, stop_when=enough)
    session.run(steps=100_000)
    assert session.status == "finished" and session.stop_reason == "stop_when"
    assert session.episodes == 3 and calls == [1, 2, 3]


def test_stop_from_inside_stop_when_does_not_deadlock(app_env):
    session = wb.Session(small_ppo(app_env), app_env, stop_when=lambda s: s.stop() or False)
    session.run(steps=100_000)
    assert session.status == "stopped" and session.episodes == 1


def test_control_calls_from_other_threads(app_env):
    env = SlowEnv(0.001)
    session = wb.Session(small_ppo(env), env)
    session.start(steps=1_000_000)
    wait_until(lambda: session.steps > 5)
    t = threading.Thread(target=session.pause)
    t.start()
    t.join(5)
    assert session.status == "paused"
    t = threading.Thread(target=session.stop)
    t.start()
    t.join(5)
    assert session.status == "stopped"


def test_custom_env_with_constructor_arguments_trains():
    env = AppEnv(model={"weights": [1, 2]}, app_args={"target": 0.4}, config=object(), horizon=20)
    agent = wb.PPO(env, n_envs=1, n_steps=64, batch_size=64, n_epochs=4)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=6000)
    rewards = session.signals["episode_reward"]
    assert rewards.mean(last=10) > rewards.values[:10].mean() + 2  # it learned the app's rule
    assert env.steps >= 6000


def test_signals_are_recorded_and_exported(app_env, tmp_path):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    session.log("compression_ratio", 0.41)
    session.run(steps=500)
    names = set(session.signals.names())
    assert {
        "episode_reward",
        "episode_length",
        "steps_per_second",
        "loss",
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "learning_rate",
        "compression_ratio",
    } <= names
    assert session.signals["episode_length"].last == 20
    assert session.signals["compression_ratio"].last == pytest.approx(0.41)
    path = tmp_path / "signals.csv"
    session.signals.to_csv(path)
    text = path.read_text()
    assert text.startswith("signal,step,value,time") and "episode_reward" in text
    assert len(session.signals["episode_reward"].to_pandas()) == session.episodes


def test_log_rejects_bad_values(app_env):
    session = wb.Session(small_ppo(app_env), app_env)
    with pytest.raises(TypeError, match="needs a number"):
        session.log("x", "abc")
    with pytest.raises(ValueError, match="name"):
        session.log("", 1.0)


def test_dqn_records_its_signals(app_env):
    agent = wb.DQN(app_env, learning_starts=50, train_freq=50, gradient_steps=2, buffer_size=1000)
    session = wb.Session(agent, app_env, seed=0)
    session.run(steps=300)
    assert {"loss", "q_mean", "epsilon", "learning_rate"} <= set(session.signals.names())


def test_periodic_evaluation_writes_eval_reward():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=1)
    session = wb.Session(agent, "CartPole-v1", seed=0, eval_every=200, eval_episodes=2)
    session.run(steps=600)
    assert len(session.signals["eval_reward"]) == 3


def test_eval_on_an_instance_needs_eval_env(app_env):
    with pytest.raises(ValueError, match="eval_env"):
        wb.Session(small_ppo(app_env), app_env, eval_every=100)
    other = AppEnv(model={}, app_args={}, config=None)
    session = wb.Session(small_ppo(app_env), app_env, eval_every=100, eval_env=other, eval_episodes=1)
    session.run(steps=200)
    assert len(session.signals["eval_reward"]) == 2


def test_evaluate_plays_on_eval_env_without_eval_every(app_env):
    # eval_env= alone is where evaluate() plays: an app's env instance cannot be copied.
    with pytest.raises(ValueError, match="eval_env"):
        wb.Session(small_ppo(app_env), app_env).evaluate(episodes=1)
    other = AppEnv(model={}, app_args={}, config=None)
    session = wb.Session(small_ppo(app_env), app_env, eval_env=other)
    assert np.isfinite(session.evaluate(episodes=1))
    assert len(session.signals["eval_reward"]) == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"eval_every": 0}, "eval_every"),
        ({"eval_episodes": 0}, "eval_episodes"),
        ({"stop_when": 3}, "stop_when"),
        ({"num_workers": 0}, "num_workers"),
        ({"checkpoint_every": -5}, "checkpoint_every"),
    ],
)
def test_bad_session_arguments(app_env, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        wb.Session(small_ppo(app_env), app_env, **kwargs)


def test_bad_steps_and_agent(app_env):
    session = wb.Session(small_ppo(app_env), app_env)
    with pytest.raises(ValueError, match="steps"):
        session.start(steps=0)
    with pytest.raises(TypeError, match="agent"):
        wb.Session("ppo", app_env)


def test_env_with_other_spaces_is_refused(app_env):
    with pytest.raises(ValueError, match="observation space"):
        wb.Session(wb.PPO("CartPole-v1"), app_env)


def test_instance_with_several_workers_shows_the_factory_form(app_env):
    with pytest.raises(ValueError, match="factory"):
        wb.Session(small_ppo(app_env), app_env, num_workers=4)


def test_seeded_sessions_are_reproducible():
    def run():
        session = wb.Session(
            wb.PPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=2), "CartPole-v1", seed=3
        )
        session.run(steps=800)
        return session.signals["episode_reward"].values

    np.testing.assert_array_equal(run(), run())


def test_second_run_in_the_same_process_is_unaffected_by_the_first(app_env):
    import torch

    before = torch.get_num_threads()
    state = torch.random.get_rng_state()
    wb.Session(small_ppo(app_env), app_env, seed=0).run(steps=100)
    assert torch.get_num_threads() == before
    assert torch.equal(torch.random.get_rng_state(), state)


def test_repr_mentions_status_and_steps(app_env):
    session = wb.Session(small_ppo(app_env), app_env)
    assert "idle" in repr(session) and "PPO" in repr(session)


def test_reopen_continues_a_saved_run_and_the_old_spelling_warns(tmp_path):
    session = wb.Session(wb.PPO("CartPole-v1", n_envs=1, n_steps=16, batch_size=16, n_epochs=1), seed=0)
    session.run(32)
    session.save(tmp_path / "run")
    reopened = wb.Session.reopen(tmp_path / "run", "CartPole-v1")
    assert reopened.steps == 32 and reopened.status == "idle"
    with pytest.warns(DeprecationWarning, match=r"Session\.reopen"):
        old = wb.Session.resume(tmp_path / "run", "CartPole-v1")
    assert old.steps == 32
    # On a session, resume() still continues a paused run (no warning, nothing reopened).
    assert reopened.resume() is None


def test_wait_with_a_timeout_returns_false_while_the_run_goes_on():
    env = SlowEnv(0.001)
    session = wb.Session(small_ppo(env), env, seed=0)
    session.start(steps=100_000)
    assert session.wait(timeout=0.05) is False
    assert session.status == "running"
    session.stop()
    assert session.wait(timeout=5) is True
