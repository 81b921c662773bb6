"""Live calls, external sessions and resume hold under misuse (issue 32): each case a test."""

from __future__ import annotations

import json
import threading
import time
import warnings

import numpy as np
import pytest
from conftest import AppEnv, small_ppo, wait_until
from gymnasium import spaces

import workbench as wb
from workbench.envs import as_env_source
from workbench.parallel import WorkerError, make_runner


class CallableEnv(AppEnv):
    """An app env with methods for call_env: one that takes anything, one that sleeps."""

    def __init__(self, horizon: int = 20):
        super().__init__(model={}, app_args={}, config=None, horizon=horizon)
        self.seen: list = []

    def configure(self, *args, **kwargs):
        self.seen.append((args, kwargs))
        return len(self.seen)

    def slow(self, seconds: float):
        time.sleep(seconds)
        return seconds


def make_callable_env():
    return CallableEnv()


# -- 2. a slow or hung call_env does not block stop(timeout=...) -----------------------------------


def test_a_hung_call_env_does_not_block_stop_and_the_caller_hears_of_it():
    env = CallableEnv()
    session = wb.Session(small_ppo(env), env, seed=0)
    session.start(steps=10_000_000)
    wait_until(lambda: session.steps > 20)
    outcome: list = []

    def call():
        try:
            outcome.append(session.call_env("slow", 6.0))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    wait_until(lambda: (session.run_control.where or ("",))[0].startswith("call_env"))
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match="call_env"):
        session.stop(timeout=1.0)
    assert time.monotonic() - t0 < 2.5
    assert session.status == "failed"
    assert "call_env('slow')" in str(session.error)
    caller.join(3.0)  # the caller is told at once, not when the call returns
    assert not caller.is_alive() and isinstance(outcome[0], TimeoutError), outcome
    assert "given up" in str(outcome[0])


# -- 3. call_env arguments are stored JSON-safe --------------------------------------------------


def test_call_env_with_nan_and_non_json_arguments_saves_and_reopens(tmp_path):
    env = CallableEnv()
    session = wb.Session(
        small_ppo(env), env, seed=0, checkpoint_every=16, checkpoint_dir=tmp_path / "ck", eval_env=CallableEnv()
    )
    odd = {"nan": float("nan"), "inf": float("-inf"), "array": np.array([1.0, np.inf]), "set": {3, 1}}
    session.call_env("configure", float("nan"), np.arange(3), {2, 1}, len, **odd)
    assert env.seen[0][0][0] != env.seen[0][0][0]  # the env got the real NaN
    session.run(64)  # periodic checkpoints write the event: the run is not killed by it
    assert session.status == "finished"
    event = session.events[0].to_dict()
    json.dumps(event, allow_nan=False)  # strict JSON
    assert event["new"]["args"][0] == "nan" and event["new"]["args"][1] == [0, 1, 2]
    assert event["new"]["args"][2] == [1, 2] and event["new"]["kwargs"]["inf"] == "-inf"
    session.save(tmp_path / "run")
    reopened = wb.Session.reopen(tmp_path / "run", CallableEnv())
    assert reopened.events[0].to_dict() == event
    assert wb.load(tmp_path / "ck" / "latest").num_timesteps >= 16


# -- 4. Session.external with max_lag=0 and two slots, driven from one thread ----------------------


def test_external_max_lag_zero_with_two_slots_from_one_thread_does_not_deadlock():
    agent = wb.PPO(
        observation_space=spaces.Box(-1, 1, (3,), np.float32),
        action_space=spaces.Discrete(2),
        n_envs=2,
        n_steps=8,
        batch_size=16,
        n_epochs=1,
    )
    session = wb.Session.external(agent, max_lag=0, seed=0)
    session.start(steps=64)
    done = threading.Event()

    def drive():
        obs = np.zeros(3, dtype=np.float32)
        while session.status == "running":
            for episode in ("a", "b"):
                session.act(obs, episode=episode)
                session.feedback(1.0, obs, False, False, episode=episode)
        done.set()

    threading.Thread(target=drive, daemon=True).start()
    assert done.wait(30), "feedback() deadlocked"
    assert session.wait(10) and session.status == "finished" and session.steps == 64


# -- 5. act() refuses what training cannot use; feedback names its argument; feedback before start --


@pytest.mark.parametrize("bad", [None, [np.nan, 0.0, 0.0], [np.inf, 0.0, 0.0]])
def test_act_refuses_none_nan_and_inf_observations(bad):
    session = wb.Session.external(
        wb.DQN(observation_space=spaces.Box(-1, 1, (3,), np.float32), action_space=spaces.Discrete(2))
    )
    with pytest.raises((TypeError, ValueError), match=r"act\(\)"):
        session.act(bad)
    assert session.live_episodes == []  # nothing was started by the refused call


def test_feedback_with_an_array_flag_names_it_and_unstarted_feedback_warns_once():
    session = wb.Session.external(
        wb.DQN(observation_space=spaces.Box(-1, 1, (3,), np.float32), action_space=spaces.Discrete(2))
    )
    obs = np.zeros(3, dtype=np.float32)
    session.act(obs)
    with pytest.raises(TypeError, match="terminated"):
        session.feedback(0.0, obs, np.array([True, False]), False)
    with pytest.warns(RuntimeWarning, match=r"start\(") as caught:
        session.feedback(0.0, obs, False, False)
        session.act(obs)
        session.feedback(0.0, obs, False, False)
    assert len([w for w in caught if "start(" in str(w.message)]) == 1


# -- 6. a timed-out call_env on local workers does not desynchronise them ---------------------------


def test_a_timed_out_call_on_a_local_worker_is_drained_and_named():
    runner = make_runner(as_env_source(make_callable_env), 2, num_workers=1, backend="local", seed=0)
    try:
        runner._start_timeout = 0.5
        obs = runner.reset()
        with pytest.raises(WorkerError, match=r"call_env\('slow'\)"):
            runner.call("slow", (1.5,), {})
        agent = wb.PPO(make_callable_env, n_envs=2, n_steps=8)
        runner._start_timeout = 30.0
        transitions, obs = runner.transitions(agent, obs)  # the late answer is not read as this step's
        assert transitions.rewards.shape == (2,) and obs.shape == (2, 3)
        assert runner.call("configure", (1,), {}) == [1, 1]
    finally:
        runner.close()


# -- 7. a PPO run stopped by stop_when at a rollout boundary resumes with the same updates -----------


def test_ppo_stopped_by_stop_when_at_a_rollout_boundary_resumes_with_every_update(tmp_path):
    def env():
        return AppEnv(model={}, app_args={}, config=None, horizon=16)

    straight = wb.Session(small_ppo(env()), env(), seed=0)
    straight.run(64)
    cut = wb.Session(small_ppo(env()), env(), seed=0, stop_when=lambda s: s.episodes >= 2)
    cut.run(64)
    assert cut.steps == 32 and cut.stop_reason == "stop_when"
    cut.save(tmp_path / "run")
    resumed = wb.Session.reopen(tmp_path / "run", env())
    resumed.run(64 - resumed.steps)
    assert resumed.agent.num_updates == straight.agent.num_updates


# -- 8. misuse found at the call -----------------------------------------------------------------


def test_an_offline_agent_whose_spaces_differ_from_eval_env_is_refused_at_session():
    data = wb.Dataset.from_arrays(
        observations=np.zeros((10, 3), np.float32),
        actions=np.zeros(10, np.int64),
        rewards=np.zeros(10),
        terminated=np.r_[np.zeros(9, bool), True],
        truncated=np.zeros(10, bool),
        observation_space=spaces.Box(-1, 1, (3,), np.float32),
        action_space=spaces.Discrete(2),
    )
    agent = wb.BC(observation_space=data.observation_space, action_space=data.action_space)
    with pytest.raises(ValueError, match="eval_env"):
        wb.Session(agent, dataset=data, eval_env="CartPole-v1", eval_every=5)


class RaisingStepEnv(AppEnv):
    def __init__(self):
        super().__init__(model={}, app_args={}, config=None)

    def step(self, action):
        if self.steps >= 7:
            raise KeyError("sensor 4")
        return super().step(action)


def test_an_env_whose_step_raises_ends_the_run_naming_the_env_and_step():
    env = RaisingStepEnv()
    session = wb.Session(small_ppo(env), env, seed=0)
    with pytest.raises(RuntimeError, match=r"RaisingStepEnv.*step 8.*KeyError.*sensor 4") as info:
        session.run(100)
    assert session.status == "failed"
    assert isinstance(info.value.__cause__, KeyError)


class ClosingFails(AppEnv):
    def __init__(self):
        super().__init__(model={}, app_args={}, config=None)

    def close(self):
        raise OSError("device busy")


def test_an_env_factory_whose_close_raises_does_not_make_session_raise_it_raw():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = wb.Session(small_ppo(ClosingFails()), ClosingFails)
    assert session.status == "idle"
    assert any("close" in str(w.message) and "device busy" in str(w.message) for w in caught)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"value": 1.0, "step": -5}, "step"),
        ({"value": 1.0, "step": 2.5}, "step"),
        ({"value": 1.0, "step": "3"}, "step"),
        ({"value": 1.0, "step": True}, "step"),
        ({"value": "0.5"}, "number"),
        ({"value": None}, "number"),
    ],
)
def test_log_refuses_a_bad_step_or_a_string_value(kwargs, match):
    session = wb.Session(small_ppo("CartPole-v1"), "CartPole-v1")
    with pytest.raises((TypeError, ValueError), match=match):
        session.log("ratio", **kwargs)
    assert "ratio" not in session.signals.names()
    session.log("ratio", np.float32(0.5), step=np.int64(3))  # numpy numbers are numbers
    assert session.signals["ratio"].last == 0.5
