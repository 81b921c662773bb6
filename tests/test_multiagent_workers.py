"""A PettingZoo ParallelEnv from a factory: in the training thread, and in local worker processes that each
hold their own copies (``Session(agent, make_env, num_workers=N, backend="local")``)."""

from __future__ import annotations

import functools
import os

import cloudpickle
import numpy as np
import pytest

import workbench as wb
from workbench.envs import multiagent_toy
from workbench.envs.core import as_env_source
from workbench.envs.multiagent import ParallelVec, layout_for
from workbench.envs.multiagent_toy import MatchTarget
from workbench.parallel import make_runner
from workbench.parallel.multiagent import MultiAgentLocalRunner, MultiAgentRunner

# The toy env travels to the workers by value: they never import the workbench package (and torch) for it.
cloudpickle.register_pickle_by_value(multiagent_toy)

SMALL = {"n_steps": 16, "batch_size": 32, "n_epochs": 4, "net_arch": (16,), "learning_rate": 3e-3}


def make_match(n_agents: int = 2, length: int = 8, **options):
    return functools.partial(MatchTarget, n_agents, length, **options)


class Counting:
    """A factory that counts its calls and the copies it built."""

    def __init__(self, **options):
        self.options, self.built = options, []

    def __call__(self):
        env = MatchTarget(**self.options)
        closed, steps, step = [], [], env.step
        env.close = lambda: closed.append(True)  # type: ignore[method-assign]
        env.step = lambda actions: (steps.append(1), step(actions))[1]  # type: ignore[method-assign]
        env.closed, env.steps = closed, steps
        self.built.append(env)
        return env


def test_agents_and_sessions_take_a_factory_in_process():
    factory = Counting(n_agents=2, length=4)
    agent = wb.IPPO(factory, seed=0, **SMALL)
    assert agent.num_envs == 2 and len(factory.built) == 1  # one copy read for the spaces and the agents
    session = wb.Session(agent, factory, seed=0)
    session.run(steps=128)
    assert session.steps == 128 and session.episodes == 128 // (2 * 4)
    team = np.asarray(session.signals["episode_reward"].values)
    per = [np.asarray(session.signals[f"episode_reward/agent_{i}"].values) for i in range(2)]
    assert np.allclose(team, per[0] + per[1])
    # The agent's and the session's probes read the spaces; the session stepped a copy of its own.
    assert len(factory.built) == 3 and [bool(e.steps) for e in factory.built] == [False, False, True]
    assert wb.PPO(make_match(), seed=0, **SMALL).num_envs == 2  # shared parameters from a factory too


def test_parallel_vec_steps_copies_side_by_side_and_reports_team_episodes():
    envs = [MatchTarget(2, length=2), MatchTarget(2, length=3)]
    layout = layout_for(None, envs[0])
    vec = ParallelVec(envs, layout, seed=0)
    obs = vec.reset()
    assert obs.shape == (4, 3) and vec.num_envs == 4 and vec.alive.all()
    _, _, _, truncated, _ = vec.step(np.zeros(4, np.int64))
    assert vec.ended() == [] and not truncated.any()
    _, rewards, _, truncated, final = vec.step(np.zeros(4, np.int64))
    assert truncated.tolist() == [True, True, False, False]  # the first copy's episode ended, and it was reset
    [(first, team, length, per_agent)] = vec.ended()
    assert first == 0 and length == 2 and set(per_agent) == {"agent_0", "agent_1"}
    assert team == pytest.approx(sum(per_agent.values()))
    assert np.isnan(vec.slot_info[2:, 1:]).all() and vec.slot_info[:, 0].all()


def test_an_instance_with_workers_is_refused_at_the_call():
    env = MatchTarget(2)
    agent = wb.PPO(env, **SMALL)
    with pytest.raises(ValueError, match="zero-argument factory"):
        wb.Session(agent, env, num_workers=2)
    source = as_env_source(env)
    with pytest.raises(ValueError, match="cannot be copied to another process"):
        make_runner(source, 2, num_workers=1, backend="local", agent=agent)


@pytest.mark.slow
def test_local_workers_give_the_runs_in_process_gives():
    """One worker process with the same seed: the same episodes, the same returns, the same weights."""
    runs = []
    for backend in ("inprocess", "local"):
        agent = wb.MAPPO(make_match(2, 4), seed=0, **SMALL)
        session = wb.Session(agent, make_match(2, 4), seed=0, num_workers=1, backend=backend)
        session.run(steps=96)
        runs.append((session.signals["episode_reward"].values, session.signals["episode_reward/agent_1"].values))
        runs.append([p.detach().clone() for p in agent.actor.parameters()])
    assert len(runs[0][0]) == 96 // 8
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))
    assert all(np.allclose(a, b) for a, b in zip(runs[1], runs[3]))


@pytest.mark.slow
def test_two_local_workers_hold_their_own_copies_with_masks_leaving_agents_and_state():
    factory = make_match(3, 6, masks=True, leave=True)  # the env raises on a masked action
    agent = wb.MAPPO(factory, seed=0, critic_input="state", **SMALL)
    session = wb.Session(agent, factory, seed=0, num_workers=2, backend="local")
    session.run(steps=2 * 3 * 16)  # one rollout over both workers' six slots
    assert agent.num_updates == 1 and agent._alive.min() == 0  # the agent that left was masked out
    names = set(session.signals.names())
    assert {"episode_reward/agent_2", "worker_0/episode_reward", "worker_1/episode_reward"} <= names
    team = np.asarray(session.signals["episode_reward"].values)
    per = sum(np.asarray(session.signals[f"episode_reward/agent_{i}"].values) for i in range(3))
    assert session.episodes == len(team) == 2 * (16 // 6) and np.allclose(team, per)


@pytest.mark.slow
def test_local_workers_train_save_reopen_and_close(tmp_path):
    factory = make_match(2, 8)
    agent = wb.IPPO(factory, seed=0, **SMALL)
    session = wb.Session(agent, factory, seed=0, num_workers=2, backend="local")
    runner = make_runner(session.env_source, agent.num_envs, seed=0, num_workers=2, backend="local", agent=agent)
    assert isinstance(runner, MultiAgentLocalRunner) and runner.num_envs == 4
    assert runner.call("length") == [8, 8]  # session.call_env: one answer per copy
    pids = runner.pids()
    runner.close()
    assert all(not _alive(p) for p in pids)
    session.run(steps=256)  # learning itself: the same as in-process (test_local_workers_give_the_runs_...)
    assert agent.num_updates == 256 // (4 * 16) and session.episodes == 256 // 16
    path = session.save(tmp_path / "run")
    again = wb.Session.reopen(path, factory, num_workers=2, backend="local")
    again.run(steps=64)
    assert again.steps == session.steps + 64


def test_several_copies_in_process_from_a_factory():
    factory = Counting(n_agents=2, length=4)
    agent = wb.PPO(factory, seed=0, **SMALL)
    runner = make_runner(as_env_source(factory), 2, num_workers=2, backend="inprocess", agent=agent, envs_per_worker=2)
    assert isinstance(runner, MultiAgentRunner) and runner.num_envs == 2 * 2 * 2
    assert runner.reset().shape == (8, 3)
    runner.close()  # the copies it built are closed; the probes are not
    assert [e.closed for e in factory.built] == [[], []] + [[True]] * 4


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_local_workers_carry_the_parallel_envs_random_streams_like_the_training_thread():
    factory = make_match(2, 8)
    agent = wb.PPO(factory, seed=0, **SMALL)
    source = as_env_source(factory)
    options = {"agent": agent, "envs_per_worker": 2, "num_workers": 1}
    source.find_parallel()  # what make_runner does first: a copy read for the agents and spaces
    here = MultiAgentRunner(source, agent, seed=0, copies=2)  # what one worker holds, in the training thread
    workers = make_runner(source, 2, seed=0, backend="local", **options)
    later = make_runner(source, 2, seed=99, backend="local", **options)
    try:
        np.testing.assert_array_equal(workers.reset(), here.reset())
        states = workers.rng_states()  # one stream per copy, in its first row
        assert states == here.rng_states() and states[0] is not None and states[2] is not None
        assert states[1] is None and states[3] is None
        later.set_rng_states(states)
        here.set_rng_states(here.rng_states())
        np.testing.assert_array_equal(later.reset(), here.reset())  # the same episodes: the streams went on
    finally:
        for runner in (here, workers, later):
            runner.close()
