"""Environments: the three ways to give one, space checks without stepping, clear errors."""

import gymnasium as gym
import numpy as np
import pytest
from conftest import AppEnv
from gymnasium import spaces

import workbench as wb
from workbench.envs import VecEnv, as_env_source, flat_observation_space


def test_instance_is_used_as_is_and_never_stepped(app_env):
    agent = wb.PPO(app_env)
    wb.Session(agent, app_env)
    assert app_env.resets == 0 and app_env.steps == 0


def test_factory_and_id_are_accepted():
    made = []

    def make_env():
        env = AppEnv(model={}, app_args={}, config=None)
        made.append(env)
        return env

    agent = wb.DQN(make_env)
    assert isinstance(agent.action_space, spaces.Discrete)
    assert made and all(e.steps == 0 and e.resets == 0 for e in made)
    assert wb.PPO("CartPole-v1").observation_space.shape == (4,)


def test_unknown_id_suggests_close_matches():
    with pytest.raises(ValueError, match="CartPole-v1"):
        wb.PPO("CartPole-v2")


def test_factory_that_returns_no_env_is_named():
    with pytest.raises(TypeError, match="not a gymnasium.Env"):
        wb.PPO(lambda: 42)


def test_not_an_env_at_all():
    with pytest.raises(TypeError, match="gymnasium.Env instance"):
        wb.PPO(3.5)


def test_wrong_action_space_names_the_agents_that_fit():
    with pytest.raises(ValueError) as info:
        wb.DQN("Pendulum-v1")
    msg = str(info.value)
    assert "Box" in msg and "DQN" in msg and "PPO" in msg


def test_dict_and_tuple_observations_are_flattened():
    space = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)})
    assert flat_observation_space(space).shape == (5,)
    agent = wb.PPO(observation_space=space, action_space=spaces.Discrete(2), seed=0)
    action = agent.act(space.sample(), deterministic=True)
    assert action in (0, 1)
    tup = spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.Discrete(2)))
    assert flat_observation_space(tup).shape == (4,)


def test_check_env_runs_gymnasiums_checker(app_env):
    wb.check_env(app_env)
    assert app_env.resets > 0  # it did step: only when asked


def test_check_env_reports_a_broken_env():
    class Broken(AppEnv):
        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(7, dtype=np.float32), {}

    with pytest.raises(Exception, match="observation"):
        wb.check_env(Broken(model={}, app_args={}, config=None))


def test_vec_env_same_step_autoreset_returns_final_observation():
    envs = [gym.make("CartPole-v1") for _ in range(2)]
    venv = VecEnv(envs, seed=0)
    obs = venv.reset()
    assert obs.shape == (2, 4) and obs.dtype == np.float32
    ended = False
    for _ in range(600):
        next_obs, rewards, term, trunc, final = venv.step(np.zeros(2, dtype=np.int64))
        done = term | trunc
        if done.any():
            ended = True
            i = int(np.flatnonzero(done)[0])
            assert not np.allclose(final[i], next_obs[i])  # final obs of the old episode, reset obs of the new
            assert abs(final[i][2]) > 0.2 or abs(final[i][0]) > 2.3  # CartPole fell: pole angle or cart position
            break
    assert ended


def test_env_source_instance_cannot_be_copied(app_env):
    source = as_env_source(app_env)
    assert not source.can_copy
    with pytest.raises(ValueError, match="factory"):
        source.make()
