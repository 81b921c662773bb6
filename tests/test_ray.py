"""Ray rollout workers: learning, control, faults and cleanup, on a Ray this module starts and stops."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import workbench as wb
from workbench.parallel import WorkerError
from workbench.parallel.ray_start import init_private_ray as _init_private_ray

ray = pytest.importorskip("ray")

import test_parallel  # noqa: E402  (its envs, sent to the actors by value)
from conftest import RAY_START_S, child_processes, gone, running_runner, wait_until  # noqa: E402
from test_parallel import CountEnv, cartpole  # noqa: E402

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(test_parallel)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A local Ray for this module; afterwards not one of its processes may remain."""
    before = child_processes()
    # As workbench starts its own Ray (its processes' lean imports), with the suite's 8 CPUs.
    _init_private_ray(ray, {"num_cpus": 8, "include_dashboard": False, "logging_level": "warning"})
    yield
    ray.shutdown()
    deadline = time.monotonic() + 15
    while child_processes() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    left = child_processes() - before
    assert not left, f"Ray processes left behind: {sorted(left)}"


def test_ppo_with_four_ray_workers_stays_on_policy_and_reports_every_worker():
    # That PPO learns CartPole this way over several seeds is `make bench-check`'s row ppo-ray-cartpole.
    agent = wb.PPO("CartPole-v1", seed=0, n_envs=4, n_steps=32, n_epochs=2)
    session = wb.Session(agent, cartpole, num_workers=4, backend="ray", seed=0)
    session.start(4 * 4 * 32 * 6)  # six rollouts
    runner = running_runner(session)
    session.wait()
    assert session.status == "finished", session.error
    assert agent.num_updates >= 5
    # On-policy: every rollout used the learner's current weights.
    assert session.signals["weight_staleness"].max() == 0
    for w in range(4):
        assert session.signals[f"worker_{w}/steps_per_second"].last > 0
    assert len(session.signals["episode_reward"]) > 0
    assert gone(runner.pids())


def test_ray_workers_build_a_registered_env_id_and_act_with_gsde():
    # The env as an id (no factory travels to the actors) and a policy whose replicas hold
    # their own state-dependent noise: both must work on the actors as in the learner.
    agent = wb.PPO("Pendulum-v1", seed=0, use_sde=True, n_envs=2, n_steps=32, n_epochs=1)
    wb.Session(agent, "Pendulum-v1", seed=0).run(steps=40)  # stops mid-rollout, holding noise for 2 envs
    assert agent._sde_weights is not None
    session = wb.Session(agent, "Pendulum-v1", num_workers=2, backend="ray", seed=0)
    session.run(steps=256)
    assert session.status == "finished" and session.steps >= 256 + 40
    assert agent.num_updates >= 3
    assert session.signals["policy_std"].last > 0


def test_recurrent_ppo_state_travels_from_ray_workers_to_the_learner():
    # Each actor's replica keeps its own envs' LSTM states between rollouts; the learner gets
    # them in the extras and replays its update from them.
    agent = wb.RecurrentPPO(
        "CartPoleNoVel-v1", seed=0, n_envs=4, n_steps=16, batch_size=32, n_epochs=1, lstm_hidden_size=8
    )
    session = wb.Session(agent, "CartPoleNoVel-v1", num_workers=2, backend="ray", seed=0)
    session.run(steps=192)
    assert session.status == "finished", session.error
    assert agent.num_updates >= 2
    # After the first rollout, sequences start mid-episode from a carried, non-zero state.
    assert np.abs(agent.rollout_states[0]).sum() > 0


def test_gtrxl_window_travels_from_ray_workers_to_the_learner():
    # memory="gtrxl" (issue 55): each replica carries its envs' attention windows as the LSTM's state.
    agent = wb.RecurrentPPO(
        "CartPoleNoVel-v1",
        seed=0,
        n_envs=4,
        n_steps=16,
        batch_size=32,
        n_epochs=1,
        lstm_hidden_size=8,
        memory="gtrxl",
        memory_length=4,
        attention_heads=2,
    )
    session = wb.Session(agent, "CartPoleNoVel-v1", num_workers=2, backend="ray", seed=0)
    session.run(steps=192)
    assert session.status == "finished", session.error
    assert agent.num_updates >= 2
    assert np.abs(agent.rollout_states[0]).sum() > 0


def test_dqn_with_four_ray_workers_learns_while_they_collect_ape_x_style():
    # That DQN learns CartPole this way over several seeds is `make bench-check`'s row dqn-ray-cartpole.
    agent = wb.DQN(
        "CartPole-v1",
        seed=0,
        net_arch=(64, 64),
        learning_starts=500,
        train_freq=16,
        gradient_steps=8,
        target_update_interval=250,
        buffer_size=20_000,
    )
    session = wb.Session(agent, cartpole, num_workers=4, backend="ray", seed=0, sync_every=32)
    session.start(3_000)
    runner = running_runner(session)
    session.wait()
    assert session.status == "finished", session.error
    assert agent.num_updates > 0
    # Workers collect the next chunk while the learner learns: data is at most one chunk old,
    # i.e. at most the updates of 32 steps x 4 envs at one update per 16 env steps.
    staleness = session.signals["weight_staleness"]
    assert staleness.max() > 0
    assert staleness.max() <= 32 * 4 // 16
    assert gone(runner.pids())


def test_pause_resume_and_stop_reach_every_ray_worker(tmp_path):
    log_dir = str(tmp_path)
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(delay=0.002, log_dir=log_dir), num_workers=4, backend="ray")
    sizes = lambda: {name: os.path.getsize(os.path.join(log_dir, name)) for name in os.listdir(log_dir)}  # noqa: E731
    session.start(10_000_000)
    runner = running_runner(session)
    try:
        wait_until(lambda: len(sizes()) == 4, RAY_START_S)  # every actor is stepping
        session.pause()
        assert session.status == "paused"
        paused = sizes()
        time.sleep(0.3)
        assert sizes() == paused, "a worker kept stepping while paused"
        session.resume()
        wait_until(lambda: all(size > paused[name] for name, size in sizes().items()), RAY_START_S)
    finally:
        session.stop()
    assert session.status == "stopped"
    assert gone(runner.pids()), "an actor survived stop()"


def test_raising_env_fails_the_ray_session_naming_the_worker():
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(fail_seed=10, fail_at=30), num_workers=4, backend="ray", seed=7)
    session.start(100_000)
    runner = running_runner(session)
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        session.wait(timeout=10)
    assert time.monotonic() - start < 10
    assert session.status == "failed"
    err = info.value
    assert err.worker == 3 and not err.died
    assert str(err).startswith("worker 3 (envs 3-3) raised")
    assert "simulator exploded at step 30" in str(err) and "in step" in err.remote_traceback
    assert gone(runner.pids())


def test_killed_ray_worker_fails_the_session_within_seconds():
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(delay=0.001), num_workers=4, backend="ray")
    session.start(10_000_000)
    runner = running_runner(session)
    wait_until(lambda: session.steps > 100, RAY_START_S)
    os.kill(runner.pids()[2], signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 2 \(envs 2-2\) Ray actor died") as info:
        session.wait(timeout=10)
    assert time.monotonic() - killed < 10
    assert session.status == "failed" and info.value.died
    assert gone(runner.pids())


def test_killed_ray_worker_is_restarted_when_asked():
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(
        agent, lambda: CountEnv(delay=0.001), num_workers=4, backend="ray", restart_workers=True, seed=0
    )
    session.start(3_000)
    runner = running_runner(session)
    wait_until(lambda: session.steps > 200, RAY_START_S)
    old = runner.pids()[0]
    os.kill(old, signal.SIGKILL)
    session.wait(timeout=60)
    assert session.status == "finished" and session.steps >= 3_000
    assert session.signals["worker_restarts"].last == 1
    assert old not in runner.pids()
    assert gone(runner.pids())


def test_too_few_ray_cpus_is_a_clear_error_not_a_hang():
    agent = wb.PPO("CartPole-v1", n_envs=16)
    session = wb.Session(agent, cartpole, num_workers=16, backend="ray", cpus_per_worker=1)
    with pytest.raises(ValueError, match=r"needs 16 Ray CPUs, but the cluster has 8.*cpus_per_worker"):
        session.run(100)
    assert session.status == "failed"


def test_ray_workers_run_at_the_drivers_priority():
    """Ray niced its workers by 15: beside any busy process at normal priority (the learner itself) they
    got about 3% of a core, and on a loaded 2-core machine a worker did not answer within 120 s."""

    @ray.remote(num_cpus=1)
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote(), timeout=120) == os.nice(0)
