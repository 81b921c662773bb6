"""Fault tests, issue 13 parts 1 and 2: bad arguments fail when given, a broken env fails the run naming itself.

Part 1: every argument of ``Session``, of each agent and of ``play`` is checked when given; the error
(``ArgumentError``, both a ``ValueError`` and a ``TypeError``) names the argument and the value.
Part 2: what an env returns is checked in the loop; a NaN, a string or a wrong shape fails the run
(status ``failed``) with an ``EnvOutputError`` naming the env method, the step, the field and the
value; a non-finite loss fails naming the update and the last finite loss.
"""

from __future__ import annotations

import math
import re
import sys

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.agents.base import AGENTS
from workbench.envs import EnvOutputError
from workbench.parallel import WorkerError
from workbench.validation import ArgumentError, NonFiniteLossError

# Local workers get the test envs by value, as a notebook-defined env travels (no import of this module).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAULT_STEP = 150  # the env's own step (1-based) from which it misbehaves


class BrokenEnv(gym.Env):
    """A 4-dimensional observation, reward 1 a step, episodes of 40 steps; from its step ``at``
    (counted over its whole life, like an application's env would) it returns ``fault``."""

    metadata = {"render_modes": []}

    def __init__(self, fault: str = "none", at: int = FAULT_STEP, continuous: bool = False) -> None:
        self.fault, self.at = fault, at
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(2)
        self.t = 0  # steps over the env's life
        self.episode_t = 0

    def _obs(self) -> np.ndarray:
        return np.full(4, 0.1 * (self.episode_t % 7), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode_t = 0
        if self.fault == "nan_reset_obs":
            return np.array([0.0, math.nan, 0.0, 0.0], dtype=np.float32), {}
        if self.fault == "bare_reset":  # old gym: reset() returns the observation alone
            return self._obs()
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.episode_t += 1
        obs, reward, terminated, truncated = self._obs(), 1.0, self.episode_t >= 40, False
        if self.t >= self.at:
            fault = self.fault
            if fault == "nan_reward":
                reward = math.nan
            elif fault == "inf_reward":
                reward = -math.inf
            elif fault == "nan_obs":
                obs = obs.copy()
                obs[2] = math.nan
            elif fault == "inf_obs":
                obs = obs.copy()
                obs[0] = math.inf
            elif fault == "none_reward":
                reward = None
            elif fault == "none_obs":
                obs = None
            elif fault == "str_reward":
                reward = "1.5"
            elif fault == "str_terminated":
                terminated = "False"
            elif fault == "wrong_shape":
                obs = np.zeros(5, dtype=np.float32)
            elif fault == "old_gym_step":
                return obs, reward, terminated, {}
            elif fault == "huge_reward":
                reward = 1e30  # finite, but a squared error of it is not (in float32)
        return obs, reward, terminated, truncated, {}


def small(algo: str, env: gym.Env, **kw):
    """A small, fast agent of each kind for the fault runs."""
    if algo == "PPO":
        return wb.PPO(env, n_envs=1, n_steps=32, batch_size=32, n_epochs=1, net_arch=(16,), **kw)
    if algo == "DQN":
        return wb.DQN(env, learning_starts=50, train_freq=10, gradient_steps=1, batch_size=16, net_arch=(16,), **kw)
    kw = {"learning_starts": 50, "batch_size": 16, "net_arch": (16,), **kw}
    return getattr(wb, algo)(env, **kw)


def failed_run(session: wb.Session, steps: int = 400) -> BaseException:
    """Run to the end; the run must have failed, and its error is returned."""
    session.start(steps=steps)
    with pytest.raises(Exception) as info:
        session.wait(timeout=60)
    assert session.status == "failed"
    assert session.error is info.value
    return info.value


# -- part 1: Session arguments --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"seed": "abc"}, "seed='abc'"),
        ({"seed": 1.7}, "seed=1.7"),
        ({"seed": -1}, "seed=-1"),
        ({"stop_when": lambda: True}, "stop_when="),
        ({"eval_episodes": 2.5}, "eval_episodes=2.5"),
        ({"eval_episodes": "5"}, "eval_episodes='5'"),
        ({"num_workers": 2.5}, "num_workers=2.5"),
        ({"num_workers": "2"}, "num_workers='2'"),
        ({"backend": "gpu"}, "backend='gpu'"),
        ({"restart_worker": True}, "restart_worker=True"),
        ({"max_signal_points": 1}, "max_signal_points=1"),
        ({"eval_every": True}, "eval_every=True"),
        ({"keep_best": "no"}, "keep_best='no'"),
        ({"envs_per_worker": 0}, "envs_per_worker=0"),
        ({"checkpoint_dir": 123}, "checkpoint_dir=123"),
        ({"torch_threads": "x"}, "torch_threads='x'"),
        ({"torch_threads": -1}, "torch_threads=-1"),
        ({"sync_every": 10}, "sync_every=10"),  # a Ray option without backend='ray'
        ({"step_timeout": -1.0}, "step_timeout=-1.0"),
        ({"eval_env": 5}, "eval_env=5"),
        ({"eval_env": "CartPol-v1", "eval_every": 100}, "eval_env='CartPol-v1'"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else None,
)
def test_session_refuses_bad_arguments_when_created(kwargs, shown):
    agent = wb.PPO("CartPole-v1", n_envs=1)
    with pytest.raises(ArgumentError) as info:
        wb.Session(agent, "CartPole-v1", **kwargs)
    message = str(info.value)
    assert message.startswith("Session got ") and shown in message, message
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


def test_a_misspelt_option_gets_the_right_name():
    with pytest.raises(ArgumentError, match="restart_worker=True.*Did you mean restart_workers"):
        wb.Session(wb.PPO("CartPole-v1", n_envs=1), "CartPole-v1", restart_worker=True)


def test_valid_session_arguments_still_pass():
    agent = wb.PPO("CartPole-v1", n_envs=1)
    wb.Session(
        agent,
        "CartPole-v1",
        seed=np.int64(3),
        stop_when=lambda s: False,
        eval_every=100,
        eval_episodes=np.int64(2),
        checkpoint_dir="runs/x",
        keep_best=True,
        num_workers=1,
        backend="inprocess",
        torch_threads=None,
        max_signal_points=2,
        restart_workers=True,
        envs_per_worker=2,
        step_timeout=5.0,
    )
    wb.Session(agent, "CartPole-v1", stop_when=print)  # a builtin: its arity cannot be read, so it is trusted


@pytest.mark.parametrize("steps", [True, 2.5, "10", 0, -3, None])
def test_start_refuses_bad_steps(steps):
    session = wb.Session(wb.PPO("CartPole-v1", n_envs=1), "CartPole-v1")
    with pytest.raises(ArgumentError, match=r"Session.start got steps="):
        session.start(steps=steps)
    assert session.status == "idle" and session.steps == 0


def test_a_failure_before_the_loop_ends_failed_and_the_session_starts_again():
    session = wb.Session(small("PPO", BrokenEnv()), BrokenEnv(), seed=0)
    session.torch_threads = "x"  # past the constructor's check: fails inside the thread, before the loop
    failed_run(session, steps=64)
    session.torch_threads = 1
    session.run(steps=64)
    assert session.status == "finished" and session.steps == 64


# -- part 1: agent hyperparameters ----------------------------------------------------------

DISCRETE, CONTINUOUS = "CartPole-v1", "Pendulum-v1"


@pytest.mark.parametrize(
    ("algo", "kwargs", "shown"),
    [
        ("DQN", {"batch_size": 0}, "batch_size=0"),
        ("PPO", {"n_epochs": 0}, "n_epochs=0"),
        ("PPO", {"gamma": 2.0}, "gamma=2.0"),
        ("DQN", {"gamma": 2.0}, "gamma=2.0"),
        ("PPO", {"gamma": "0.99"}, "gamma='0.99'"),
        ("SAC", {"tau": 5.0}, "tau=5.0"),
        ("DQN", {"train_freq": 0}, "train_freq=0"),
        ("DQN", {"target_update_interval": 0}, "target_update_interval=0"),
        ("PPO", {"clip_range": -0.2}, "clip_range=-0.2"),
        ("PPO", {"net_arch": (0,)}, "net_arch=(0,)"),
        ("PPO", {"n_steps": 0}, "n_steps=0"),
        ("A2C", {"n_steps": 0}, "n_steps=0"),
        ("DDPG", {"batch_size": 0}, "batch_size=0"),
        ("TD3", {"batch_size": 0}, "batch_size=0"),
        ("SAC", {"batch_size": 0}, "batch_size=0"),
        ("PPO", {"batch_size": 0}, "batch_size=0"),
        ("PPO", {"n_envs": 0}, "n_envs=0"),
        ("DQN", {"n_envs": 0}, "n_envs=0"),
        ("A2C", {"gae_lambda": "x"}, "gae_lambda='x'"),
        ("DQN", {"learning_rate": -1.0}, "learning_rate=-1.0"),
        ("DQN", {"buffer_size": "10"}, "buffer_size='10'"),
        ("SAC", {"net_arch": 64}, "net_arch=64"),
        ("PPO", {"normalize_advantage": "yes"}, "normalize_advantage='yes'"),
        ("DQN", {"n_step": True}, "n_step=True"),
        ("SAC", {"ent_coef": "auto_x"}, "ent_coef='auto_x'"),
        ("TD3", {"policy_delay": 0}, "policy_delay=0"),
        ("PPO", {"activation": "gelu"}, "activation='gelu'"),
        ("PPO", {"seed": 1.5}, "seed=1.5"),
    ],
    ids=lambda v: f"{next(iter(v))}" if isinstance(v, dict) else v if isinstance(v, str) and v.isupper() else None,
)
def test_agents_refuse_bad_hyperparameters_when_built(algo, kwargs, shown):
    env = DISCRETE if algo in ("DQN", "PPO", "A2C") else CONTINUOUS
    with pytest.raises(ArgumentError) as info:
        getattr(wb, algo)(env, **kwargs)
    message = str(info.value)
    assert message.startswith(f"{algo} got {shown}") and "must be" in message, message


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_registered_agent_checks_its_shared_fields(name):
    cls = AGENTS[name]
    env = DISCRETE if spaces.Discrete in cls.action_spaces else CONTINUOUS
    for kwargs in (
        {"learning_rate": -1.0},
        {"gamma": 2.0},
        {"n_envs": 0},
        {"net_arch": 64},
        {"normalize_observations": 1},
    ):
        with pytest.raises(ArgumentError, match=f"{cls.__name__} got {next(iter(kwargs))}="):
            cls(env, **kwargs)


def test_a_new_agent_gets_its_declared_checks_and_a_changed_default_keeps_its_base_check():
    from dataclasses import dataclass

    from workbench.agents.ppo import PPO, PPOConfig
    from workbench.validation import checked, integer

    @dataclass
    class MyConfig(PPOConfig):
        n_steps: int = 64  # only the default changes: the base's constraint still holds
        my_window: int = checked(4, integer(min=2))

    class MyPPO(PPO):
        Config = MyConfig

    assert MyPPO(DISCRETE).config.n_steps == 64
    with pytest.raises(ArgumentError, match=r"MyPPO got my_window=1: my_window must be an integer >= 2.*default \(4\)"):
        MyPPO(DISCRETE, my_window=1)
    with pytest.raises(ArgumentError, match="MyPPO got n_steps=0"):
        MyPPO(DISCRETE, n_steps=0)


def test_valid_edge_values_and_schedules_still_pass():
    wb.PPO(
        DISCRETE,
        gamma=0,
        gae_lambda=1,
        learning_rate=wb.linear(1e-3, 0.0),
        clip_range=0.1,
        n_envs=np.int64(2),
        net_arch=[32],
        target_kl=0.02,
        sde_sample_freq=-1,
    )
    wb.DQN(DISCRETE, gamma=1.0, tau=1, gradient_steps=-1, learning_starts=0, net_arch=())
    wb.SAC(CONTINUOUS, ent_coef="auto_0.1", target_entropy=-2, learning_rate=wb.linear(3e-4, 1e-5))
    wb.SAC(CONTINUOUS, ent_coef=0.2)
    wb.TD3(CONTINUOUS, actor_lr=1e-4, critic_lr=None, exploration=None)


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"episodes": "3"}, "episodes='3'"),
        ({"episodes": 0}, "episodes=0"),
        ({"episodes": True}, "episodes=True"),
        ({"max_steps": 0}, "max_steps=0"),
        ({"seed": "1"}, "seed='1'"),
        ({"render": "human"}, "render='human'"),
        ({"deterministic": "no"}, "deterministic='no'"),
    ],
)
def test_play_refuses_bad_arguments(kwargs, shown):
    agent = wb.DQN(DISCRETE)
    with pytest.raises(ArgumentError, match=f"DQN.play got {shown}"):
        agent.play(DISCRETE, **kwargs)


# -- part 2: a broken env fails the run, naming itself --------------------------------------

NAN_CASES = [
    ("nan_reward", f"env.step at step {FAULT_STEP} returned reward nan"),
    ("inf_reward", f"env.step at step {FAULT_STEP} returned reward -inf"),
    ("nan_obs", f"env.step at step {FAULT_STEP} returned observation .*nan at index 2"),
    ("inf_obs", f"env.step at step {FAULT_STEP} returned observation .*inf at index 0"),
]


@pytest.mark.parametrize(("fault", "match"), NAN_CASES)
@pytest.mark.parametrize("algo", ["DQN", "SAC", "PPO"])
def test_non_finite_env_output_fails_the_run_naming_it(algo, fault, match):
    env = BrokenEnv(fault, continuous=algo == "SAC")
    session = wb.Session(small(algo, env), env, seed=0)
    error = failed_run(session)
    assert isinstance(error, EnvOutputError)
    assert re.search(match, str(error)), str(error)
    assert session.steps == FAULT_STEP - 1  # the bad step never reached the agent
    for net in session.agent.networks.values():
        assert all(bool(torch_finite(p)) for p in net.state_dict().values())


def torch_finite(t) -> bool:
    return bool(t.isfinite().all()) if t.is_floating_point() else True


TYPE_CASES = [
    ("none_reward", f"env.step at step {FAULT_STEP} returned reward None"),
    ("none_obs", f"env.step at step {FAULT_STEP} returned observation None"),
    ("str_reward", f"env.step at step {FAULT_STEP} returned reward '1.5' \\(a str\\)"),
    ("str_terminated", f"env.step at step {FAULT_STEP} returned terminated 'False' \\(a str\\)"),
    ("wrong_shape", f"env.step at step {FAULT_STEP} returned an observation of shape \\(5,\\).*Box\\(shape=\\(4,\\)"),
    ("old_gym_step", f"env.step at step {FAULT_STEP} returned 4 values.*old gym API"),
    ("bare_reset", "env.reset at step 0 returned array.*instead of \\(obs, info\\)"),
    ("nan_reset_obs", "env.reset at step 0 returned observation .*nan at index 1"),
]


@pytest.mark.parametrize(("fault", "match"), TYPE_CASES)
@pytest.mark.parametrize("algo", ["DQN", "PPO"])
def test_malformed_env_output_fails_the_run_naming_it(algo, fault, match):
    env = BrokenEnv(fault)
    session = wb.Session(small(algo, env), env, seed=0)
    error = failed_run(session)
    assert isinstance(error, EnvOutputError)
    assert re.search(match, str(error)), str(error)


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        ("nan_reward", f"env.step at step {FAULT_STEP} \\(env 1 of 2\\) returned reward nan"),
        ("str_reward", f"env.step at step {FAULT_STEP} returned reward '1.5'"),
    ],
)
def test_env_checks_hold_in_local_workers(fault, match):
    # Seeded 0, env i is first reset with seed i: only the env of worker 1 breaks.
    session = wb.Session(
        small("DQN", BrokenEnv(), n_envs=2), lambda: _SeededBroken(fault), seed=0, num_workers=2, backend="local"
    )
    error = failed_run(session)
    assert isinstance(error, EnvOutputError | WorkerError)
    assert re.search(match, str(error)), str(error)


class _SeededBroken(BrokenEnv):
    """Broken only in the env whose first reset is seeded 1 (the second env of a seeded run)."""

    def __init__(self, fault: str) -> None:
        super().__init__("none")
        self._fault = fault

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.fault = self._fault if seed == 1 else "none"
        return super().reset(seed=seed, options=options)


# -- part 2: a non-finite loss fails the run, naming the update -------------------------------


def test_a_non_finite_loss_names_the_update_and_the_last_finite_loss():
    env = BrokenEnv()
    agent = small("DQN", env)
    real_update = agent.update

    def update():
        metrics = real_update()
        if agent.num_updates >= 4:
            metrics["loss"] = math.nan
        return metrics

    agent.update = update
    session = wb.Session(agent, env, seed=0)
    error = failed_run(session)
    assert isinstance(error, NonFiniteLossError)
    assert re.search(
        r"DQN update 4 \(at step 80\) returned loss nan; the last finite loss was "
        r"[0-9.e-]+ \(update 3, step 70\)",
        str(error),
    ), str(error)


def test_rewards_too_large_for_the_loss_fail_naming_the_loss():
    env = BrokenEnv("huge_reward", at=1, continuous=True)
    session = wb.Session(small("TD3", env), env, seed=0)
    error = failed_run(session, steps=200)
    assert isinstance(error, NonFiniteLossError)
    assert "TD3 update 1 (at step 50) returned critic_loss inf" in str(error), str(error)


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        ("nan_reward", "env.step at step 3 of the episode returned reward nan"),
        ("str_reward", "env.step at step 3 of the episode returned reward '1.5' \\(a str\\)"),
        ("str_terminated", "env.step at step 3 of the episode returned terminated 'False'"),
        ("old_gym_step", "env.step at step 3 of the episode returned 4 values"),
        ("bare_reset", "env.reset returned array.*instead of \\(obs, info\\)"),
    ],
)
def test_play_and_evaluation_refuse_a_broken_env(fault, match):
    agent = wb.DQN(BrokenEnv())
    with pytest.raises(wb.EnvOutputError, match=match):
        agent.play(BrokenEnv(fault, at=3), episodes=1)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "match"),
    [
        ("nan_reward", f"env.step at step {FAULT_STEP} \\(env 1 of 2\\) returned reward nan"),
        ("str_reward", f"env.step at step {FAULT_STEP} returned reward '1.5'"),
    ],
)
def test_env_checks_hold_in_ray_workers(fault, match):
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's own cloudpickle sends the envs
    session = wb.Session(
        small("DQN", BrokenEnv(), n_envs=2),
        lambda: _SeededBroken(fault),
        seed=0,
        num_workers=2,
        backend="ray",
        sync_every=10,
    )
    error = failed_run(session)
    assert isinstance(error, EnvOutputError | WorkerError)
    assert re.search(match, str(error)), str(error)


@pytest.mark.parametrize("name", sorted(wb.AGENTS))
def test_every_hyperparameter_of_every_agent_declares_its_constraint(name):
    # A field without a constraint would take any value silently: every agent, old or new, declares them all.
    import dataclasses

    from workbench.validation import _constraint_of

    config = wb.AGENTS[name].Config
    unchecked = [f.name for f in dataclasses.fields(config) if _constraint_of(config, f.name) is None]
    allowed = {"exploration"}  # checked by type where the agent is built (it names the exploration classes)
    assert set(unchecked) <= allowed, f"{name}: fields without a constraint: {sorted(set(unchecked) - allowed)}"


# -- issue 32: a schedule is held to its field's constraint, at construction and at session.set ------

BAD_SCHEDULES = [
    (wb.PPO, "clip_range", wb.linear(0.2, -0.5)),
    (wb.PPO, "clip_range", wb.linear(-0.1, 0.2)),
    (wb.PPO, "learning_rate", wb.linear(1e-3, -1e-4)),
    (wb.PPO, "learning_rate", wb.schedules.Constant(-1.0)),
    (wb.DQN, "prioritized_beta", wb.linear(0.4, -1.0)),
    (wb.SAC, "learning_rate", wb.linear(3e-4, float("nan"))),
]


@pytest.mark.parametrize(("cls", "name", "schedule"), BAD_SCHEDULES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_schedule_that_leaves_the_fields_range_is_refused_when_built(cls, name, schedule):
    env = "CartPole-v1" if cls is not wb.SAC else "Pendulum-v1"
    with pytest.raises(ArgumentError) as info:
        cls(env, **{name: schedule})
    message = str(info.value)
    assert f"{name}=" in message and "start and end are >= 0" in message, message


@pytest.mark.parametrize(("cls", "name", "schedule"), BAD_SCHEDULES[:3], ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_schedule_that_leaves_the_fields_range_is_refused_by_session_set(cls, name, schedule):
    agent = cls("CartPole-v1", n_steps=16, batch_size=16) if cls is wb.PPO else cls("CartPole-v1")
    session = wb.Session(agent, "CartPole-v1")
    before = getattr(agent.config, name)
    with pytest.raises(ArgumentError, match=rf"Session\.set got {name}=.*start and end are >= 0"):
        session.set(**{name: schedule})
    assert getattr(agent.config, name) == before
    assert session.events == []


def test_schedules_that_stay_in_range_still_pass():
    # Decaying to an open bound at the very end is the zoo's habit (clip_range and learning rates to 0).
    agent = wb.PPO("CartPole-v1", clip_range=wb.linear(0.2, 0.0), learning_rate=wb.linear(1e-3, 0.0), n_steps=16)
    session = wb.Session(agent, "CartPole-v1")
    session.set(clip_range=wb.linear(0.3, 0.1))
    assert agent.config.clip_range == wb.linear(0.3, 0.1)
    wb.DQN("CartPole-v1", learning_rate=wb.schedules.Exponential(1e-3, 1e-5), prioritized_beta=wb.linear(0.4, 1.0))
