"""Parallel env stepping: local worker processes, backend choice, faults, control, cleanup.

The envs used here are defined in this module and sent to the workers by value (cloudpickle), the
way a notebook-defined env travels, so a worker never imports this test module (or torch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import psutil
import pytest
from conftest import process_alive, wait_until

import workbench as wb
from workbench.envs import VecEnv, as_env_source
from workbench.parallel import WorkerError, choose_backend, make_runner

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CountEnv(gym.Env):
    """Episodes of ``length`` steps; ``step`` waits ``delay`` s; optionally logs every step to a file
    named after its process, and raises at step ``fail_at`` when its first seed is ``fail_seed``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, delay=0.0, log_dir=None, fail_seed=None, fail_at=10, length=20, slow_seed=None):
        self.delay, self.log_dir, self.fail_seed, self.fail_at, self.length = delay, log_dir, fail_seed, fail_at, length
        self.slow_seed = slow_seed
        self.first_seed = None
        self.total = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.first_seed is None:
            self.first_seed = seed
            if seed is not None and seed == self.slow_seed:
                self.delay *= 10
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        self.t += 1
        self.total += 1
        if self.fail_seed is not None and self.first_seed == self.fail_seed and self.total >= self.fail_at:
            raise ValueError(f"simulator exploded at step {self.total}")
        if self.log_dir is not None:
            with open(os.path.join(self.log_dir, str(os.getpid())), "ab") as f:
                f.write(b".")
        obs = np.full(3, self.t / self.length, dtype=np.float32)
        return obs, float(action), False, self.t >= self.length, {}


def cartpole():
    return gym.make("CartPole-v1")


pytestmark = pytest.mark.usefixtures("no_leftover_processes")


# -- bad input ---------------------------------------------------------------------------------


def test_env_instance_with_workers_is_a_clear_error():
    env = gym.make("CartPole-v1")
    agent = wb.PPO(env)
    with pytest.raises(ValueError, match=r"num_workers=4.*zero-argument factory.*lambda: MyEnv"):
        wb.Session(agent, env, num_workers=4)


def test_unknown_backend_and_option_are_clear_errors():
    source = as_env_source("CartPole-v1")
    with pytest.raises(ValueError, match="unknown backend 'threads'.*local"):
        make_runner(source, 4, num_workers=2, backend="threads")
    with pytest.raises(TypeError, match="unknown option.*ray_adress"):
        make_runner(source, 4, num_workers=2, backend="local", ray_adress="auto")
    with pytest.raises(ValueError, match=r"envs_per_worker=0: envs_per_worker must be None or an integer >= 1"):
        make_runner(source, 4, num_workers=2, backend="local", envs_per_worker=0)


@pytest.mark.parametrize("backend", ["inprocess", "auto"])
def test_envs_per_worker_is_honoured_by_one_in_process_worker_too(backend):
    source = as_env_source("CartPole-v1")
    assert make_runner(source, 4, num_workers=1, backend=backend, envs_per_worker=3).num_envs == 3
    assert make_runner(source, 4, num_workers=1, backend=backend).num_envs == 4  # the agent's preference
    assert make_runner(source, 4, num_workers=2, backend="inprocess", envs_per_worker=3).num_envs == 6
    with pytest.raises(ValueError, match=r"envs_per_worker=0"):
        make_runner(source, 4, num_workers=1, backend=backend, envs_per_worker=0)


def test_ray_acting_is_checked_when_the_session_is_made():
    agent = wb.PPO("CartPole-v1")
    with pytest.raises(ValueError, match=r"ray_acting='actors'.*one of 'workers', 'learner'"):
        wb.Session(agent, cartpole, num_workers=2, backend="ray", ray_acting="actors")
    with pytest.raises(ValueError, match=r"sync_every=8 with ray_acting='learner'.*Leave sync_every out"):
        wb.Session(agent, cartpole, num_workers=2, backend="ray", ray_acting="learner", sync_every=8)
    with pytest.raises(ValueError, match=r"ray_acting='learner'.*only backend='ray' takes"):
        wb.Session(agent, cartpole, num_workers=2, backend="local", ray_acting="learner")


# -- backend choice ------------------------------------------------------------------------------


class _ProbeClock:
    """Stands for the ``time`` module of ``workbench.parallel`` while ``choose_backend`` probes a
    ``ClockedEnv``: the env's steps advance it by costs the test sets, so the choice follows from
    those costs and not from how loaded the machine happens to be."""

    def __init__(self):
        self.wall = self.cpu = self.queued = 0.0

    def perf_counter(self):
        return self.wall

    def process_time(self):
        return self.cpu


class ClockedEnv(CountEnv):
    """A step that costs ``wall`` seconds on the probe clock, ``cpu`` of them computing and
    ``queued`` of them waiting in the run queue for a busy core."""

    def __init__(self, clock, wall, cpu, queued=0.0):
        super().__init__()
        self.clock, self.wall, self.cpu, self.queued = clock, wall, cpu, queued

    def step(self, action):
        self.clock.wall += self.wall
        self.clock.cpu += self.cpu
        self.clock.queued += self.queued
        return super().step(action)


@pytest.mark.timing
def test_auto_probe_measures_real_envs():
    # Measured for real, only what load cannot turn around: CartPole computes for microseconds a
    # step (CPU time, which waiting for a busy core does not add to); an env that sleeps 5 ms a step
    # is slow and mostly waits, so it goes to workers however busy the machine is. The best of three
    # probes: a burst of other processes' work can make one probe's CPU share look high.
    cheap = min(
        (choose_backend("CartPole-v1", num_workers=8) for _ in range(3)), key=lambda c: c.step_seconds * c.cpu_fraction
    )
    assert "in-process" in cheap.reason and "ms" in cheap.reason
    assert cheap.step_seconds * cheap.cpu_fraction < 1e-3
    slow = min(
        (choose_backend(lambda: CountEnv(delay=0.005), num_workers=8) for _ in range(3)), key=lambda c: c.cpu_fraction
    )
    assert slow.backend == "local", slow.reason
    assert slow.step_seconds >= 0.005 and slow.cpu_fraction < 0.5
    # Sleeping 5 ms costs 5 ms by the wall clock, and far more than a CartPole step's computing: a ratio
    # of two measurements in this process, which load moves alike.
    assert slow.step_seconds > 5 * cheap.step_seconds * cheap.cpu_fraction


def test_auto_keeps_cheap_envs_in_process_and_sends_slow_ones_to_workers(monkeypatch):
    # The choice itself, from set costs (a loaded machine makes a cheap env's steps look slow and
    # waiting: its time queued for a core): 20 us of computing stays in process; 5 ms of waiting
    # goes to workers; 5 ms of computing goes to workers when there are cores to share it, and
    # stays in process on one core.
    parallel = sys.modules["workbench.parallel"]
    clock = _ProbeClock()
    monkeypatch.setattr(parallel, "time", clock)
    monkeypatch.setattr(parallel, "_queued_seconds", lambda: clock.queued)
    cases = [
        (2, 20e-6, 20e-6, "inprocess"),
        (1, 5e-3, 50e-6, "local"),
        (2, 5e-3, 5e-3, "local"),
        (1, 5e-3, 5e-3, "inprocess"),
    ]
    for cores, wall, cpu, expected in cases:
        monkeypatch.setattr(parallel, "_cores", lambda n=cores: n)
        choice = choose_backend(lambda w=wall, c=cpu: ClockedEnv(clock, w, c), num_workers=8)
        assert choice.backend == expected, choice.reason
        assert choice.step_seconds == pytest.approx(wall) and choice.cpu_fraction == pytest.approx(cpu / wall)
        assert f"one env step takes {wall * 1e3:.3f} ms ({cpu / wall:.0%} computing)" in choice.reason
    # A cheap env on a loaded machine: 5 ms a step by the wall clock, but 4.98 ms of it queued for a
    # core. The queued time is not waiting on a simulator, so the env stays in process.
    monkeypatch.setattr(parallel, "_cores", lambda: 2)
    choice = choose_backend(lambda: ClockedEnv(clock, 5e-3, 20e-6, queued=4.98e-3), num_workers=8)
    assert choice.backend == "inprocess", choice.reason
    assert choice.step_seconds == pytest.approx(20e-6)
    # One worker is the plain in-process path: nothing measured, nothing started.
    monkeypatch.undo()
    runner = make_runner(as_env_source(cartpole), 8, num_workers=1)
    assert runner.backend == "inprocess" and runner.num_envs == 8
    runner.close()


@pytest.mark.parametrize("chosen", ["inprocess", "local"])
def test_auto_with_workers_builds_the_chosen_runner(monkeypatch, chosen):
    # What backend="auto" builds is what choose_backend chose, for the envs of each worker; the
    # choice is set here (the one for CartPole depends on the machine's load, see the test above).
    parallel = sys.modules["workbench.parallel"]
    asked = []

    def choose(env, num_workers, envs_per_worker=1, *, seed=None):
        asked.append((num_workers, envs_per_worker, seed))
        return parallel.BackendChoice(chosen, "set by the test", 1e-3, 1.0)

    monkeypatch.setattr(parallel, "choose_backend", choose)
    runner = make_runner(as_env_source(cartpole), 8, seed=0, num_workers=4, backend="auto")
    try:
        assert asked == [(4, 2, 0)]
        assert runner.backend == chosen and runner.num_envs == 8
        reference = VecEnv([cartpole() for _ in range(8)], seed=0)
        np.testing.assert_array_equal(runner.reset(), reference.reset())
    finally:
        runner.close()


# -- the local runner ------------------------------------------------------------------------------


def test_local_runner_seeds_each_env_like_the_in_process_one():
    source = as_env_source(cartpole)
    runner = make_runner(source, 6, seed=3, num_workers=3, backend="local")
    try:
        assert runner.backend == "local" and runner.num_envs == 6 and len(runner.pids()) == 3
        obs = runner.reset()
        reference = VecEnv([cartpole() for _ in range(6)], seed=3)
        np.testing.assert_array_equal(obs, reference.reset())
        assert len({tuple(o) for o in obs}) == 6  # distinct seeds, distinct starts
        rng = np.random.default_rng(0)
        for _ in range(60):  # through several episode ends: same-step autoreset, like VecEnv
            actions = rng.integers(0, 2, size=6)
            got = runner.step(actions)
            want = reference.step(actions)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    finally:
        runner.close()
    assert not any(process_alive(p) for p in runner.pids())


def test_ppo_trains_with_four_local_workers():
    # That it learns CartPole so: `make bench-check` (rows ppo-workers-cartpole, dqn-workers-cartpole).
    agent = wb.PPO("CartPole-v1", seed=0, n_steps=64, batch_size=64, n_epochs=1)
    session = wb.Session(agent, cartpole, num_workers=4, backend="local", seed=0)
    session.run(2_048)
    assert session.status == "finished" and agent.num_timesteps >= 2_048
    # Per-worker signals: every worker's episodes show separately (their speed: the slow-worker test below).
    for w in range(4):
        assert len(session.signals[f"worker_{w}/episode_reward"]) > 0


def test_dqn_trains_with_four_local_workers():
    agent = wb.DQN(
        "CartPole-v1",
        seed=0,
        net_arch=(64, 64),
        learning_rate=1e-3,
        learning_starts=500,
        train_freq=16,
        gradient_steps=8,
        target_update_interval=250,
        buffer_size=20_000,
        exploration=wb.EpsilonGreedy(1.0, 0.05, 0.25),
    )
    session = wb.Session(agent, cartpole, num_workers=4, backend="local", seed=0)
    session.run(2_000)
    assert session.status == "finished" and session.signals["loss"].values.size > 0
    assert {f"worker_{w}/episode_reward" for w in range(4)} <= set(session.signals.names())


@pytest.mark.timing
def test_a_slow_worker_shows_in_its_steps_per_second():
    agent = wb.PPO(CountEnv(), n_steps=16, n_envs=3)
    # Env 1 (seed 0 + 1), the only env of worker 1, steps ten times slower than the others: 20 ms against
    # 2 ms, long enough that a loaded machine's late wake-ups (a few ms per sleep) cannot close the gap.
    session = wb.Session(agent, lambda: CountEnv(delay=0.002, slow_seed=1), num_workers=3, backend="local", seed=0)
    session.start(10_000_000)
    try:
        wait_until(lambda: "worker_2/steps_per_second" in session.signals)
    finally:
        session.stop()
    rates = [session.signals[f"worker_{w}/steps_per_second"].last for w in range(3)]
    assert rates[1] < 0.3 * min(rates[0], rates[2]), rates
    assert rates[1] < 1 / 0.02  # it cannot beat its own 20 ms step


def test_pause_resume_and_stop_reach_every_worker(tmp_path):
    log_dir = str(tmp_path)
    agent = wb.PPO(CountEnv(), n_steps=16, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(delay=0.002, log_dir=log_dir), num_workers=4, backend="local")
    sizes = lambda: {name: os.path.getsize(os.path.join(log_dir, name)) for name in os.listdir(log_dir)}  # noqa: E731
    session.start(10_000_000)
    try:
        wait_until(lambda: len(sizes()) == 4)  # every worker process is stepping
        session.pause()
        assert session.status == "paused"
        paused = sizes()
        time.sleep(0.3)
        assert sizes() == paused, "a worker kept stepping while paused"
        session.resume()
        wait_until(lambda: all(size > paused[name] for name, size in sizes().items()))
    finally:
        session.stop()
    assert session.status == "stopped"
    stopped = sizes()
    time.sleep(0.2)
    assert sizes() == stopped
    # The no_leftover_processes fixture checks the workers are gone.


def test_raising_env_fails_the_session_naming_the_worker():
    agent = wb.PPO(CountEnv(), n_steps=16, n_envs=4)
    # Env 2 (seed 7 + 2) is the only env of worker 2; it raises at its 30th step.
    session = wb.Session(agent, lambda: CountEnv(fail_seed=9, fail_at=30), num_workers=4, backend="local", seed=7)
    start = time.monotonic()
    session.start(100_000)
    with pytest.raises(WorkerError) as info:
        session.wait(timeout=10)
    assert time.monotonic() - start < 10
    assert session.status == "failed"
    err = info.value
    assert err.worker == 2 and not err.died
    assert str(err).startswith("worker 2 (envs 2-2) raised in env.step")
    assert "simulator exploded at step 30" in str(err) and "Traceback" in err.remote_traceback
    assert "in step" in err.remote_traceback  # the env's own frame


def test_killed_worker_fails_the_session_within_seconds():
    agent = wb.PPO(CountEnv(), n_steps=16, n_envs=4)
    session = wb.Session(agent, lambda: CountEnv(delay=0.001), num_workers=4, backend="local")
    session.start(10_000_000)
    wait_until(lambda: session.steps > 100)
    pid = session._ctx.runner.pids()[1]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 1 \(envs 1-1\) process died \(exit code -9\)") as info:
        session.wait(timeout=10)
    assert time.monotonic() - killed < 10
    assert session.status == "failed" and info.value.died and info.value.worker == 1


def test_killed_worker_is_restarted_when_asked_and_the_run_continues():
    agent = wb.PPO(CountEnv(), n_steps=16, n_envs=4)
    session = wb.Session(
        agent, lambda: CountEnv(delay=0.001), num_workers=4, backend="local", restart_workers=True, seed=0
    )
    session.start(3_000)
    wait_until(lambda: session.steps > 200)
    runner = session._ctx.runner
    old = runner.pids()[3]
    os.kill(old, signal.SIGKILL)
    session.wait(timeout=30)
    assert session.status == "finished" and session.steps >= 3_000
    assert session.signals["worker_restarts"].last == 1
    assert old not in runner.pids()


def test_an_unpicklable_factory_is_a_clear_error():
    import threading

    lock = threading.Lock()

    def factory():
        with lock:
            return CountEnv()

    with pytest.raises(ValueError, match="cannot be sent to a worker process"):
        make_runner(as_env_source(factory), 2, num_workers=2, backend="local")


def test_a_second_run_starts_fresh_workers():
    agent = wb.PPO(CountEnv(), n_steps=8, n_envs=2)
    session = wb.Session(agent, CountEnv, num_workers=2, backend="local", seed=1)
    session.run(200)
    session.run(200)
    assert session.status == "finished" and session.steps >= 400


_EXITING_SCRIPT = """
import os, sys, time
import gymnasium as gym
import workbench as wb
agent = wb.PPO("CartPole-v1", n_steps=16)
session = wb.Session(agent, lambda: gym.make("CartPole-v1"), num_workers=3, backend="local")
session.start(10_000_000)
while session._ctx.runner is None or session.steps < 50:
    time.sleep(0.01)
print(" ".join(map(str, session._ctx.runner.pids())), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_workers_end_with_the_interpreter(how):
    """A script (or kernel) that ends mid-run, even killed, takes its workers with it."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _EXITING_SCRIPT, how], capture_output=True, text=True, timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 3, out.stderr
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(psutil.pid_exists(p) for p in pids), "a worker outlived its interpreter"


class _RecordingRay:
    """Stands in for the ``ray`` module: records the environment ``init`` ran in, then fails if asked."""

    def __init__(self, fail: bool = False):
        self.fail, self.seen = fail, None

    def init(self, **options):
        self.seen = dict(os.environ)
        if self.fail:
            raise RuntimeError("ray.init failed")


@pytest.mark.parametrize("fail", [False, True])
@pytest.mark.parametrize("user_path", [None, "/somewhere/of/the/user"])
def test_a_private_ray_starts_with_lean_imports_first_and_leaves_the_environment_as_it_was(
    monkeypatch, fail, user_path
):
    pytest.importorskip("ray")
    from workbench.parallel.ray_start import LEAN_IMPORTS_DIR as _LEAN_IMPORTS_DIR
    from workbench.parallel.ray_start import init_private_ray as _init_private_ray

    if user_path is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", user_path)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    before = dict(os.environ)
    fake = _RecordingRay(fail)
    if fail:
        with pytest.raises(RuntimeError, match="ray.init failed"):
            _init_private_ray(fake, {"_node_ip_address": "127.0.0.1"})
    else:
        _init_private_ray(fake, {"_node_ip_address": "127.0.0.1"})
    assert fake.seen["PYTHONPATH"].split(os.pathsep) == [_LEAN_IMPORTS_DIR] + ([user_path] if user_path else [])
    assert fake.seen["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert fake.seen["RAY_worker_niceness"] == "0"  # workers at the learner's priority, not Ray's nice 15
    assert dict(os.environ) == before


def test_a_private_ray_keeps_the_users_worker_niceness(monkeypatch):
    pytest.importorskip("ray")
    from workbench.parallel.ray_start import init_private_ray as _init_private_ray

    monkeypatch.setenv("RAY_worker_niceness", "7")
    fake = _RecordingRay(False)
    _init_private_ray(fake, {"_node_ip_address": "127.0.0.1"})
    assert fake.seen["RAY_worker_niceness"] == "7" and os.environ["RAY_worker_niceness"] == "7"


def test_the_lean_imports_folder_skips_only_the_parser_and_ray_still_imports():
    pytest.importorskip("ray")
    from workbench.parallel.ray_start import LEAN_IMPORTS_DIR as _LEAN_IMPORTS_DIR

    code = (
        "import importlib.util, sys, ray\n"
        "assert 'rfc3987_syntax' not in sys.modules\n"
        "try:\n    import rfc3987_syntax\nexcept ImportError as e:\n    print('skipped:', e)\n"
    )
    env = dict(os.environ, PYTHONPATH=_LEAN_IMPORTS_DIR)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "skipped: rfc3987_syntax is skipped in workbench's Ray processes" in out.stdout
