"""Ray actors that only step envs while the learner acts (``backend="ray", ray_acting="learner"``):
the same data as local workers, no torch in the actors, and every backend promise (masks, env calls,
live edits, faults, step timeouts, restarts, pause and stop, cleanup), on a Ray this module starts."""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.envs import EnvMethodError, as_env_source
from workbench.envs.testing import MaskedTarget
from workbench.parallel import WorkerError, make_runner

ray = pytest.importorskip("ray")

import test_live_edits  # noqa: E402  (its envs travel to the actors by value)
import test_parallel  # noqa: E402
from conftest import RAY_START_S, gone, running_runner, wait_until  # noqa: E402
from test_live_edits import curriculum  # noqa: E402
from test_parallel import CountEnv  # noqa: E402
from test_ray import local_ray  # noqa: E402, F401  (a local Ray for this module, none of it left after)

pytestmark = pytest.mark.ray

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors never import this module
for _module in (test_parallel, test_live_edits):
    cloudpickle.register_pickle_by_value(_module)

LEARNER = dict(backend="ray", ray_acting="learner")


class HangEnv(gym.Env):
    """``step`` sleeps for an hour after ``hang_after`` steps in the env first seeded ``hang_seed``."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, hang_after: int = 20, hang_seed: int | None = None):
        self.hang_after, self.hang_seed, self.steps, self.seed_used = hang_after, hang_seed, 0, None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.seed_used = seed
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps > self.hang_after and self.seed_used == self.hang_seed:
            time.sleep(3600)
        return np.zeros(3, dtype=np.float32), 0.0, False, self.steps % 10 == 0, {}


def masked_target():
    return MaskedTarget(mask_in="info")


def _weights(agent):
    out = {}
    for name, tensors in agent.network_weights().items():
        for key, value in tensors.items():
            out[f"{name}.{key}"] = np.asarray(value)
    return out


def test_learner_acting_gives_local_workers_data_and_actors_never_import_torch():
    def train(**backend):
        agent = wb.PPO("CartPole-v1", seed=0, n_envs=4, n_steps=16, n_epochs=1, batch_size=32)
        session = wb.Session(agent, "CartPole-v1", num_workers=2, seed=0, **backend)
        session.run(steps=192)
        assert session.status == "finished", session.error
        return _weights(agent)

    local, learner = train(backend="local"), train(**LEARNER)
    assert all(np.array_equal(local[k], learner[k]) for k in local)  # same envs, seeds and actions

    runner = make_runner(as_env_source("CartPole-v1"), 4, seed=0, num_workers=2, **LEARNER)
    try:
        assert runner.reset().shape == (4, 4)

        def modules(actor_self):
            import sys

            return sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "workbench", "rfc3987_syntax"))

        workers = runner._workers
        loaded = ray.get([w.actor.__ray_call__.remote(modules) for w in workers])
        assert len(loaded) == 2
        for names in loaded:
            # Not torch, nor the Earley parser jsonschema builds (ray_lean_imports); of the package only its
            # light face and workbench.envs, where the autoreset rules are written once.
            assert not [m for m in names if m.split(".")[0] in ("torch", "rfc3987_syntax")], names
            assert "workbench.envs.core" in names, names
            assert all(m in ("workbench", "workbench._version") or m.startswith("workbench.envs") for m in names), names
        pids = runner.pids()
        assert len(pids) == 2
    finally:
        runner.close()
    assert gone(pids)


def test_masks_env_calls_and_live_edits_with_learner_acting():
    # MaskedTarget raises on a masked action: a finished run took none.
    agent = wb.DQN(masked_target, seed=0, learning_starts=50, train_freq=8, gradient_steps=2, batch_size=16)
    session = wb.Session(agent, masked_target, num_workers=2, seed=0, **LEARNER)
    session.run(steps=200)
    assert session.status == "finished", session.error

    agent = wb.PPO(curriculum, n_envs=4, n_steps=8, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(agent, curriculum, num_workers=2, seed=0, **LEARNER)
    session.start(100_000)
    assert session.call_env("set_difficulty", 5) == [5, 5, 5, 5]
    session.set(clip_range=0.07)
    with pytest.raises(WorkerError, match="this env refuses"):
        session.call_env("fail")
    with pytest.raises(EnvMethodError, match="CurriculumEnv has no method 'nope'"):
        session.call_env("nope")
    wait_until(lambda: agent.num_updates >= 2, RAY_START_S)
    session.stop()
    assert session.status == "stopped", session.error
    assert agent.config.clip_range == 0.07
    assert session.signals["episode_reward"].last == pytest.approx(50.0)
    # Actors do not outlive a run: the next run's new envs get the calls again.
    session.start(100_000)
    assert session.call_env("get_difficulty") == [5, 5, 5, 5]
    session.stop()
    assert session.status == "stopped", session.error


def test_pause_resume_stop_and_signals_with_learner_acting(tmp_path):
    log_dir = str(tmp_path)
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(delay=0.002, log_dir=log_dir), num_workers=4, **LEARNER)
    sizes = lambda: {name: os.path.getsize(os.path.join(log_dir, name)) for name in os.listdir(log_dir)}  # noqa: E731
    session.start(10_000_000)
    runner = running_runner(session)
    pids = runner.pids()
    try:
        wait_until(lambda: len(sizes()) == 4, RAY_START_S)  # every actor is stepping
        session.pause()
        assert session.status == "paused"
        paused = sizes()
        time.sleep(0.3)
        assert sizes() == paused, "an actor kept stepping while paused"
        session.resume()
        wait_until(lambda: all(size > paused[name] for name, size in sizes().items()), RAY_START_S)
        wait_until(lambda: "worker_3/steps_per_second" in session.signals.names(), RAY_START_S)
    finally:
        session.stop()
    assert session.status == "stopped"
    assert len(session.signals["worker_1/episode_reward"]) > 0
    assert gone(pids), "an actor survived stop()"


def test_raising_env_and_killed_actor_fail_the_session_naming_the_worker():
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(fail_seed=10, fail_at=30), num_workers=4, seed=7, **LEARNER)
    with pytest.raises(WorkerError) as info:
        session.run(100_000)
    err = info.value
    assert err.worker == 3 and not err.died
    assert str(err).startswith("worker 3 (envs 3-3) raised in env.step")
    assert "simulator exploded at step 30" in err.remote_traceback

    session = wb.Session(agent, lambda: CountEnv(delay=0.001), num_workers=4, **LEARNER)
    session.start(10_000_000)
    runner = running_runner(session)
    wait_until(lambda: session.steps > 100, RAY_START_S)
    pids = runner.pids()
    os.kill(pids[2], signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 2 \(envs 2-2\) Ray actor died") as info:
        session.wait(timeout=30)
    assert time.monotonic() - killed < 30
    assert session.status == "failed" and info.value.died
    assert gone(pids)


@pytest.mark.slow
def test_hung_and_killed_actors_are_restarted_with_restart_workers():
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(delay=0.001), num_workers=4, restart_workers=True, seed=0, **LEARNER)
    session.start(3_000)
    runner = running_runner(session)
    wait_until(lambda: session.steps > 200, RAY_START_S)
    old = runner.pids()[0]
    os.kill(old, signal.SIGKILL)
    session.wait(timeout=120)
    assert session.status == "finished" and session.steps >= 3_000
    assert session.signals["worker_restarts"].last == 1
    assert old not in runner.pids()

    agent = wb.PPO(HangEnv(), n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(
        agent,
        lambda: HangEnv(hang_seed=1),
        num_workers=2,
        seed=0,
        step_timeout=1.0,
        restart_workers=True,
        **LEARNER,
    )
    session.run(steps=200)
    assert session.status == "finished" and session.steps >= 200
    assert session.signals["worker_restarts"].last >= 1


def test_hung_env_is_killed_after_step_timeout_naming_the_actor_and_env():
    agent = wb.PPO(HangEnv(), n_envs=4, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(
        agent, lambda: HangEnv(hang_seed=3), num_workers=2, envs_per_worker=2, seed=0, step_timeout=1.0, **LEARNER
    )
    with pytest.raises(
        WorkerError, match=r"^worker 1 \(envs 2-3\) was killed: env.step of env 3 did not return"
    ) as info:
        session.run(steps=10_000)
    assert info.value.timed_out


def test_actors_without_step_timeout_are_killed_when_stop_gives_up():
    from workbench.run.registry import StuckError

    agent = wb.PPO(HangEnv(), n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(agent, lambda: HangEnv(hang_seed=0), num_workers=2, seed=0, **LEARNER)
    session.start(steps=10_000)
    runner = running_runner(session)
    pids = runner.pids()
    wait_until(lambda: session.steps >= 40, RAY_START_S)
    time.sleep(0.3)
    with pytest.warns(RuntimeWarning, match=r"stuck in env.step.*workers were killed"):
        session.stop(timeout=0.5)
    assert session.status == "failed" and isinstance(session.error, StuckError)
    wait_until(lambda: not session.is_alive, timeout=10)
    assert gone(pids)
