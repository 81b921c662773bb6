"""Live edits (``session.set``) and env calls (``session.call_env``): they take effect at the next
update, in-process and with local workers, are refused cleanly, recorded, saved and resumed.

Ray is in ``test_live_edits_ray.py``; the dashboard's edit panel in ``test_edit_panel.py``.
"""

from __future__ import annotations

import sys
import threading
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

import workbench as wb
from workbench.agents.live import editable
from workbench.envs import EnvMethodError
from workbench.parallel import WorkerError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # worker processes never import this module


class CurriculumEnv(gym.Env):
    """A constant observation, ten-step episodes; remembers its difficulty and the actions it got."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.difficulty = 0
        self.actions: list[int] = []
        self.t = 0

    def set_difficulty(self, level: int, *, bonus: int = 0) -> int:
        self.difficulty = level + bonus
        return self.difficulty

    def get_difficulty(self) -> int:
        return self.difficulty

    def taken(self) -> list[int]:
        return list(self.actions)

    def fail(self) -> None:
        raise ValueError("this env refuses")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        return np.zeros(2, np.float32), float(self.difficulty), False, self.t >= 10, {}


def curriculum() -> gym.Env:
    return CurriculumEnv()


def _after(session, name, signal):
    """The values of ``signal`` recorded after the last edit of ``name``."""
    event = [e for e in session.events if e.kind == "set" and e.name == name][-1]
    steps, values = session.signals[signal].steps, session.signals[signal].values
    return np.asarray(values)[np.asarray(steps) > event.step]


def _run_and_edit(session, steps, when, **values):
    """Start, wait until ``when`` steps are done, edit while running, and let the run finish."""
    session.start(steps)
    deadline = time.monotonic() + 60
    while session.steps < when and session.is_alive and time.monotonic() < deadline:
        time.sleep(0.005)
    assert session.status == "running", session.error
    session.set(**values)
    session.wait()
    assert session.status == "finished", session.error


# -- edits take effect -------------------------------------------------------------------------


def test_ppo_clip_range_and_learning_rate_take_effect_at_the_next_update():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(agent, seed=0)
    _run_and_edit(session, 1500, 300, clip_range=0.05, learning_rate=2e-5)
    assert len(_after(session, "clip_range", "clip_range")) > 0
    assert np.all(_after(session, "clip_range", "clip_range") == 0.05)
    assert np.allclose(_after(session, "learning_rate", "learning_rate"), 2e-5)
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(2e-5)
    # Before the edit both followed their schedules (linear to 0).
    before = np.asarray(session.signals["clip_range"].values)[:3]
    assert before[0] > 0.05


def test_a_schedule_replaces_a_number_and_a_number_a_schedule():
    agent = wb.A2C("CartPole-v1", learning_rate=1e-3, seed=0)
    session = wb.Session(agent, seed=0)
    session.set(learning_rate=wb.linear(1e-3, 1e-5))
    session.run(steps=400)
    lrs = session.signals["learning_rate"].values
    assert lrs[-1] < lrs[0] < 1e-3 + 1e-12  # follows the schedule
    session.set(learning_rate=3e-4)
    session.run(steps=80)
    assert session.signals["learning_rate"].last == pytest.approx(3e-4)
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(3e-4)


def test_dqn_epsilon_follows_a_new_exploration_at_the_next_update():
    agent = wb.DQN(
        "CartPole-v1", learning_starts=100, train_freq=16, gradient_steps=1, batch_size=16, net_arch=(16,), seed=0
    )
    session = wb.Session(agent, seed=0)
    _run_and_edit(session, 2000, 400, exploration=wb.EpsilonGreedy(0.3, 0.3))
    assert len(_after(session, "exploration", "epsilon")) > 0
    assert np.allclose(_after(session, "exploration", "epsilon"), 0.3)
    assert agent.epsilon == pytest.approx(0.3)
    assert session.signals["set/exploration"].last == pytest.approx(0.3)


def test_sac_entropy_coefficient_fixed_then_learned_again():
    agent = wb.SAC("Pendulum-v1", learning_starts=50, batch_size=16, net_arch=(16,), seed=0)
    session = wb.Session(agent, seed=0)
    _run_and_edit(session, 400, 120, ent_coef=0.05)
    assert np.allclose(_after(session, "ent_coef", "alpha"), 0.05)
    assert agent.optimizers.keys() == {"actor_optimizer", "critic_optimizer"}
    session.set(ent_coef="auto_0.2")
    assert float(agent._alpha()) == pytest.approx(0.2)
    session.run(steps=50)
    alphas = _after(session, "ent_coef", "alpha")
    assert len(alphas) > 0 and np.all(np.abs(alphas - 0.2) < 0.02) and not np.all(alphas == 0.2)  # learned from 0.2


def test_a_learning_rate_edit_sets_every_optimizer_at_once():
    """Before any further update: DQN's optimizer, and every one of SAC's, the alpha optimizer an edit to a learned
    entropy coefficient builds in the same call included."""
    dqn = wb.DQN("CartPole-v1", learning_rate=1e-3, net_arch=(16,), seed=0)
    wb.Session(dqn, seed=0).set(learning_rate=7e-4)
    assert dqn.optimizer.param_groups[0]["lr"] == pytest.approx(7e-4)
    sac = wb.SAC("Pendulum-v1", learning_rate=1e-3, ent_coef=0.1, net_arch=(16,), seed=0)
    session = wb.Session(sac, seed=0)
    session.set(learning_rate=wb.linear(4e-4, 0.0), ent_coef="auto_0.2")
    assert set(sac.optimizers) == {"actor_optimizer", "critic_optimizer", "alpha_optimizer"}
    assert all(opt.param_groups[0]["lr"] == pytest.approx(4e-4) for opt in sac.optimizers.values())
    session.set(learning_rate=2e-4)
    assert all(opt.param_groups[0]["lr"] == pytest.approx(2e-4) for opt in sac.optimizers.values())


def test_td3_noise_and_smoothing_edits_reach_the_agent():
    agent = wb.TD3("Pendulum-v1", learning_starts=20, batch_size=16, net_arch=(16,), seed=0)
    session = wb.Session(agent, seed=0)
    session.set(exploration=wb.OrnsteinUhlenbeckNoise(sigma=0.3), target_policy_noise=0.1, actor_lr=1e-5)
    session.run(steps=60)
    assert session.signals["noise_stddev"].last == pytest.approx(0.3)
    assert agent.actor_optimizer.param_groups[0]["lr"] == pytest.approx(1e-5)
    assert agent.critic_optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    session.set(exploration=None)
    assert agent.noise_stddev == 0.0


def test_every_agent_lists_its_editable_hyperparameters():
    assert {"learning_rate", "ent_coef", "clip_range", "n_epochs", "batch_size", "gamma"} <= set(editable(wb.PPO))
    assert {"exploration", "target_update_interval", "tau", "gradient_steps", "train_freq"} <= set(editable(wb.DQN))
    assert {"ent_coef", "target_entropy", "tau"} <= set(editable(wb.SAC))
    assert {"exploration", "target_policy_noise", "actor_lr", "critic_lr"} <= set(editable(wb.TD3))
    assert "clip_range" in editable(wb.RecurrentPPO) and "exploration" in editable(wb.QRDQN)
    assert {"top_quantiles_to_drop_per_net", "ent_coef", "learning_rate"} <= set(editable(wb.TQC))
    assert {"policy_delay", "learning_rate"} <= set(editable(wb.CrossQ))
    assert {"gradient_steps", "policy_delay", "dropout_rate"} <= set(editable(wb.DroQ))
    agents = (wb.PPO, wb.A2C, wb.RecurrentPPO, wb.DQN, wb.QRDQN, wb.C51, wb.Rainbow, wb.DDPG, wb.TD3, wb.SAC)
    for cls in (*agents, wb.TQC, wb.CrossQ, wb.DroQ):
        fixed = {"net_arch", "n_envs", "buffer_size", "n_steps", "normalize_observations"}
        assert not fixed & set(editable(cls)), cls.__name__


# -- refused edits -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"net_arch": (8,)}, r"cannot change net_arch .*networks were built"),
        ({"n_envs": 4}, r"cannot change n_envs"),
        ({"n_steps": 64}, r"cannot change n_steps .*rollout storage"),
        ({"lerning_rate": 1e-3}, r"unknown hyperparameter 'lerning_rate'. Did you mean learning_rate"),
        ({"learning_rate": 1e-4, "clip_range": -0.1}, r"clip_range=-0.1: clip_range must be a finite number > 0"),
        ({"ent_coef": "lots"}, r"ent_coef must be"),
        ({}, r"needs at least one hyperparameter"),
    ],
)
def test_refused_edits_say_why_and_change_nothing(values, match):
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=8, seed=0)
    session = wb.Session(agent, seed=0)
    config_before = agent.hyperparameters()
    lr_before = agent.optimizer.param_groups[0]["lr"]
    with pytest.raises(ValueError, match=match) as info:
        session.set(**values)
    assert "Editable: " in str(info.value) or "editable" in str(info.value) or "must be" in str(info.value)
    assert agent.hyperparameters() == config_before
    assert agent.optimizer.param_groups[0]["lr"] == lr_before
    assert session.events == [] and not [n for n in session.signals if n.startswith("set/")]


def test_gamma_is_live_on_policy_but_fixed_for_a_replay_memory():
    wb.Session(wb.A2C("CartPole-v1", seed=0)).set(gamma=0.9)
    with pytest.raises(ValueError, match="replay memory stores each transition's discount"):
        wb.Session(wb.DQN("CartPole-v1", seed=0)).set(gamma=0.9)
    with pytest.raises(ValueError, match="EpsilonGreedy"):
        wb.Session(wb.DQN("CartPole-v1", seed=0)).set(exploration=wb.GaussianNoise(0.1))


# -- from other threads, paused, recorded -----------------------------------------------------


def test_edits_from_several_threads_while_running_and_paused():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(agent, seed=0)
    session.start(100_000)
    errors = []

    def edit(i):
        try:
            for k in range(5):
                session.set(ent_coef=0.01 * (i + 1), vf_coef=0.5 + k / 10)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=edit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    session.pause()
    assert session.status == "paused"
    old = session.set(n_epochs=3)
    assert old == {"n_epochs": 1} and agent.config.n_epochs == 3
    session.resume()
    session.stop()
    assert session.status == "stopped", session.error
    assert len([e for e in session.events if e.name == "ent_coef"]) == 20
    steps = [e.step for e in session.events]
    assert steps == sorted(steps)


def test_events_and_set_signals_are_saved_and_a_resumed_run_keeps_the_edits(tmp_path):
    agent = wb.DQN(
        "CartPole-v1", learning_starts=50, train_freq=8, gradient_steps=1, batch_size=16, net_arch=(16,), seed=0
    )
    session = wb.Session(agent, seed=0)
    session.run(steps=200)
    session.set(exploration=wb.EpsilonGreedy(0.2, 0.1, 0.5), learning_rate=wb.linear(1e-3, 1e-4))
    session.call_env("get_wrapper_attr", "tau")
    session.run(steps=100)
    path = session.save(tmp_path / "run")
    with open(f"{path}/signals.csv") as f:
        assert "set/exploration" in f.read()

    resumed = wb.Session.reopen(path)
    assert resumed.agent.config.exploration == wb.EpsilonGreedy(0.2, 0.1, 0.5)
    assert resumed.agent.config.learning_rate == wb.linear(1e-3, 1e-4)
    assert [(e.kind, e.name, e.step) for e in resumed.events] == [(e.kind, e.name, e.step) for e in session.events]
    assert resumed.events[0].old == {
        "type": "EpsilonGreedy",
        "start": 1.0,
        "end": 0.04,
        "fraction": 0.16,
        "schedule": "linear",
    }
    assert resumed.events[-1].new == {"args": ["tau"], "kwargs": {}}
    assert resumed.signals["set/exploration"].last == pytest.approx(session.signals["set/exploration"].last)
    resumed.run(steps=100)
    assert resumed.signals["epsilon"].last == pytest.approx(agent.config.exploration.value(resumed.agent.progress))
    assert wb.load(path).config.exploration == wb.EpsilonGreedy(0.2, 0.1, 0.5)


# -- env calls ---------------------------------------------------------------------------------


def test_call_env_reaches_every_in_process_copy_idle_running_and_paused():
    agent = wb.PPO(curriculum, n_envs=3, n_steps=8, batch_size=24, n_epochs=1, seed=0)
    session = wb.Session(agent, curriculum, seed=0)
    assert session.call_env("set_difficulty", 2) == [2, 2, 2]  # idle: builds the envs, does not reset them
    session.start(100_000)
    assert session.call_env("set_difficulty", 3, bonus=1) == [4, 4, 4]
    session.pause()
    assert session.call_env("get_difficulty") == [4, 4, 4]
    session.resume()
    time.sleep(0.1)
    session.stop()
    assert session.status == "stopped", session.error
    assert session.signals["episode_reward"].last == pytest.approx(40.0)  # ten steps at difficulty 4
    calls = [e for e in session.events if e.kind == "call_env"]
    assert [(e.name, e.new) for e in calls] == [
        ("set_difficulty", {"args": [2], "kwargs": {}}),
        ("set_difficulty", {"args": [3], "kwargs": {"bonus": 1}}),
        ("get_difficulty", {"args": [], "kwargs": {}}),
    ]


def test_call_env_errors_reach_the_caller_and_the_run_goes_on():
    agent = wb.PPO(curriculum, n_envs=2, n_steps=8, batch_size=16, n_epochs=1, seed=0)
    session = wb.Session(agent, curriculum, seed=0)
    with pytest.raises(EnvMethodError, match="the env CurriculumEnv has no method 'set_level'"):
        session.call_env("set_level", 1)
    session.start(100_000)
    with pytest.raises(ValueError, match="this env refuses"):
        session.call_env("fail")
    with pytest.raises(EnvMethodError, match="CurriculumEnv has no method 'nope'"):
        session.call_env("nope")
    assert session.status == "running"
    session.stop()
    assert session.status == "stopped" and session.error is None
    assert not [e for e in session.events if e.name in ("fail", "nope", "set_level")]  # failed calls are not recorded


def test_call_env_through_gymnasium_wrappers():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=8, seed=0)
    session = wb.Session(agent, seed=0)
    assert session.call_env("get_wrapper_attr", "gravity") == [9.8, 9.8]
    with pytest.raises(EnvMethodError, match="CartPoleEnv has an attribute, not a method, 'gravity'"):
        session.call_env("gravity")


# -- local workers -----------------------------------------------------------------------------


def test_local_workers_answer_env_calls_and_edits_take_effect():
    agent = wb.PPO(curriculum, n_envs=4, n_steps=8, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(agent, curriculum, num_workers=2, backend="local", seed=0)
    session.start(100_000)
    assert session.call_env("set_difficulty", 5) == [5, 5, 5, 5]
    session.set(clip_range=0.07)
    with pytest.raises(WorkerError, match="this env refuses"):
        session.call_env("fail")
    with pytest.raises(EnvMethodError, match="CurriculumEnv has no method 'nope'"):
        session.call_env("nope")
    time.sleep(0.3)
    session.stop()
    assert session.status == "stopped", session.error
    assert np.all(_after(session, "clip_range", "clip_range") == 0.07)
    assert session.signals["episode_reward"].last == pytest.approx(50.0)
    # Worker processes do not outlive a run: the next run's new envs get the calls again.
    session.start(100_000)
    assert session.call_env("get_difficulty") == [5, 5, 5, 5]
    session.stop()
    assert session.status == "stopped", session.error


def _pause_after(session, steps):
    deadline = time.monotonic() + 60
    while session.steps < steps and session.is_alive and time.monotonic() < deadline:
        time.sleep(0.005)
    session.pause()
    assert session.status == "paused", session.error


def test_dqn_with_local_workers_explores_as_edited():
    agent = wb.DQN(
        curriculum,
        learning_starts=0,
        train_freq=1_000_000,
        net_arch=(8,),
        n_envs=4,
        exploration=wb.EpsilonGreedy(0.0, 0.0),
        seed=0,
    )
    session = wb.Session(agent, curriculum, num_workers=2, backend="local", seed=0)
    session.start(100_000)
    _pause_after(session, 200)
    greedy = session.call_env("taken")
    assert all(len(a) >= 40 and len(set(a)) == 1 for a in greedy)  # epsilon 0, constant observation: one action
    session.set(exploration=wb.EpsilonGreedy(1.0, 1.0))
    session.resume()
    _pause_after(session, session.steps + 200)
    explored = session.call_env("taken")
    assert all(len(set(a[len(g) :])) == 2 for a, g in zip(explored, greedy, strict=True))
    session.stop()


def test_trackers_get_the_edit_and_its_signal():
    class Recorder(wb.Sink):
        def __init__(self):
            self.points, self.events = [], []

        def open(self, run):
            pass

        def write(self, points):
            self.points += [p.name for p in points]

        def log_event(self, step, name, old, new):
            self.events.append((step, name, old, new))

    rec = Recorder()
    session = wb.Session(wb.A2C("CartPole-v1", n_envs=2, seed=0), seed=0, sinks=[rec])
    session.run(steps=100)
    session.set(ent_coef=0.01)
    session.run(steps=100)
    assert rec.events == [(100, "ent_coef", 0.0, 0.01)]
    assert "set/ent_coef" in rec.points
