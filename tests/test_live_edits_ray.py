"""Live edits and env calls under Ray: the actors' acting replicas explore as edited, and
``call_env`` reaches every env copy in every actor. On a Ray this module starts and stops."""

from __future__ import annotations

import time

import pytest

import workbench as wb
from workbench.envs import EnvMethodError
from workbench.parallel import WorkerError
from workbench.parallel.ray_start import init_private_ray

ray = pytest.importorskip("ray")

import test_live_edits  # noqa: E402  (its env, sent to the actors by value)
from test_live_edits import curriculum  # noqa: E402

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(test_live_edits)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # The library's private start (loopback only, lean imports): a plain ray.init can give up under load.
    init_private_ray(ray, {"num_cpus": 4, "include_dashboard": False, "logging_level": "warning"})
    yield
    ray.shutdown()


def _pause_after(session, steps, timeout=120.0):  # Ray actors start slowly on a loaded machine
    deadline = time.monotonic() + timeout
    while session.steps < steps and session.is_alive and time.monotonic() < deadline:
        time.sleep(0.01)
    session.pause()
    assert session.status == "paused", session.error


@pytest.mark.slow  # about 20 s with Ray's start on a loaded machine
def test_ray_replicas_explore_as_edited_and_env_calls_reach_every_actor():
    # DQN (Ape-X style): the actors choose the actions, so an exploration edit must reach them.
    agent = wb.DQN(
        curriculum,
        learning_starts=0,
        train_freq=1_000_000,
        net_arch=(8,),
        n_envs=4,
        exploration=wb.EpsilonGreedy(0.0, 0.0),
        seed=0,
    )
    session = wb.Session(agent, curriculum, num_workers=2, backend="ray", sync_every=8, seed=0)
    session.start(1_000_000)
    _pause_after(session, 100)
    assert session.call_env("set_difficulty", 2) == [2, 2, 2, 2]
    greedy = session.call_env("taken")
    assert all(len(a) >= 16 and len(set(a)) == 1 for a in greedy)  # epsilon 0, constant observation
    session.set(exploration=wb.EpsilonGreedy(1.0, 1.0))
    session.resume()
    _pause_after(session, session.steps + 300)
    explored = session.call_env("taken")
    # The chunks in flight when the edit was made were collected greedily; the later ones explore.
    assert all(len(set(a[-24:])) == 2 for a in explored), [a[len(g) :] for a, g in zip(explored, greedy, strict=True)]
    with pytest.raises(EnvMethodError, match="CurriculumEnv has no method 'nope'"):
        session.call_env("nope")
    with pytest.raises(WorkerError, match="this env refuses"):
        session.call_env("fail")
    session.stop()
    assert session.status == "stopped", session.error
    assert session.signals["episode_reward"].last == pytest.approx(20.0)  # difficulty 2 for ten steps
