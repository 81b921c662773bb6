"""Control faults (issue 13, parts 3, 4 and 7): a hung env, a script that ends while training,
resume and concurrency. Each case is what a user would do; the test says what they must see."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import AppEnv, small_ppo, wait_until
from gymnasium import spaces

import workbench as wb
from workbench.envs import as_env_source
from workbench.parallel import WorkerError, make_runner
from workbench.run.registry import ControlError, StuckError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class HangEnv(gym.Env):
    """step() never returns after ``hang_after`` steps (until ``release`` is set, in-process)."""

    def __init__(self, hang_after: int = 30, release: threading.Event | None = None, hang_seed: int | None = None):
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.hang_after = hang_after
        self.release = release
        self.hang_seed = hang_seed
        self.steps = 0
        self.seed_used = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.seed_used = seed
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps > self.hang_after and (self.hang_seed is None or self.seed_used == self.hang_seed):
            if self.release is not None:
                self.release.wait()
            else:
                time.sleep(3600)
        return np.zeros(3, dtype=np.float32), 0.0, False, self.steps % 10 == 0, {}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# -- 3. a hung env ----------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["stop", "pause"])
def test_in_process_hung_env_control_returns_in_time_and_says_where(call):
    release = threading.Event()
    env = HangEnv(hang_after=30, release=release)
    session = wb.Session(small_ppo(env), env, seed=0)
    session.start(steps=10_000)
    try:
        wait_until(lambda: env.steps > 30)
        t0 = time.monotonic()
        with pytest.warns(RuntimeWarning, match=r"stuck in env.step of env 0 \(for \d"):
            getattr(session, call)(timeout=0.5)
        assert time.monotonic() - t0 < 2.0
        assert session.status == "failed"  # not "running" forever
        assert isinstance(session.error, StuckError) and session.error.where == "env.step of env 0"
        assert session.stop_reason == "stuck" and session.is_alive
        with pytest.raises(StuckError):  # wait() does not block on a thread that may never return
            session.wait()
        steps = session.steps
        with pytest.raises(RuntimeError, match="still stuck in env.step of env 0"):
            session.start(steps=10)
    finally:
        release.set()
    session.run_control.thread.join(5)
    assert not session.is_alive and session.status == "failed"  # the step returned; the run stays given up
    assert session.steps == steps  # and nothing after the give-up was learned or counted
    env.hang_after = 10**9
    session.run(steps=20)  # and the session can train again
    assert session.status == "finished" and session.error is None


def test_a_slow_update_is_not_called_stuck():
    # A control call that times out outside env.step warns, and the run is not given up.
    env = AppEnv(model={}, app_args={}, config=None)
    session = wb.Session(small_ppo(env), env, seed=0)
    gate = threading.Event()
    original = session.agent.update

    def slow_update():
        gate.wait(5)
        return original()

    session.agent.update = slow_update
    session.start(steps=10_000)
    wait_until(lambda: session.run_control.where is not None and session.run_control.where[0] == "agent.update")
    with pytest.warns(RuntimeWarning, match=r"still in agent.update"):
        session.stop(timeout=0.3)
    assert session.status == "running" and session.error is None
    gate.set()
    assert session.wait(timeout=10)
    assert session.status == "stopped"


def test_local_worker_hung_env_is_killed_after_step_timeout_naming_worker_and_env():
    agent = wb.PPO(HangEnv(), n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(
        agent, lambda: HangEnv(hang_after=20, hang_seed=1), num_workers=2, backend="local", seed=0, step_timeout=1.0
    )
    session.start(steps=10_000)
    wait_until(lambda: session._ctx.runner is not None and len(session._ctx.runner.pids()) == 2)
    pids = session._ctx.runner.pids()
    t0 = time.monotonic()
    with pytest.raises(WorkerError):
        session.wait(timeout=30)
    assert session.status == "failed"
    err = session.error
    assert isinstance(err, WorkerError) and err.timed_out and err.worker == 1 and list(err.envs) == [1]
    assert str(err).startswith(
        "worker 1 (envs 1-1) was killed: env.step of env 1 did not return within step_timeout=1 s"
    )
    assert time.monotonic() - t0 < 20  # 1 s step_timeout; generous for a loaded machine
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=5)


def test_a_worker_with_several_envs_names_the_one_that_hangs():
    agent = wb.PPO(HangEnv(), n_envs=4, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(
        agent,
        lambda: HangEnv(hang_after=20, hang_seed=3),
        num_workers=2,
        envs_per_worker=2,
        backend="local",
        seed=0,
        step_timeout=1.0,
    )
    with pytest.raises(WorkerError, match=r"^worker 1 \(envs 2-3\) was killed: env.step of env 3 did not return"):
        session.run(steps=10_000)


@pytest.mark.slow
def test_local_worker_hung_env_is_restarted_with_restart_workers():
    agent = wb.PPO(HangEnv(), n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(
        agent,
        lambda: HangEnv(hang_after=20, hang_seed=1),
        num_workers=2,
        backend="local",
        seed=0,
        step_timeout=0.5,
        restart_workers=True,
    )
    session.run(steps=200)
    assert session.status == "finished" and session.steps >= 200
    assert session.signals["worker_restarts"].last >= 1


def test_local_workers_without_step_timeout_are_killed_when_stop_gives_up():
    agent = wb.PPO(HangEnv(), n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    session = wb.Session(agent, lambda: HangEnv(hang_after=20), num_workers=2, backend="local", seed=0)
    session.start(steps=10_000)
    wait_until(lambda: session._ctx.runner is not None and len(session._ctx.runner.pids()) == 2)
    pids = session._ctx.runner.pids()
    wait_until(lambda: session.steps >= 40)
    time.sleep(0.3)
    with pytest.warns(RuntimeWarning, match=r"stuck in env.step \(local workers\).*workers were killed"):
        session.stop(timeout=0.5)
    assert session.status == "failed" and isinstance(session.error, StuckError)
    wait_until(lambda: not session.is_alive, timeout=5)
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=5)


@pytest.mark.parametrize(
    ("backend", "value", "message"),
    [
        ("inprocess", 1.0, "step_timeout needs worker processes"),
        ("local", 0, "step_timeout must be a positive number"),
        ("local", "5", "step_timeout must be a positive number"),
    ],
)
def test_step_timeout_is_checked(backend, value, message):
    with pytest.raises(ValueError, match=message):
        make_runner(as_env_source(lambda: HangEnv()), 1, backend=backend, step_timeout=value)


@pytest.mark.ray
@pytest.mark.slow
def test_ray_worker_hung_env_ends_within_step_timeout():
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors get HangEnv by value
    agent = wb.DQN(HangEnv(), learning_starts=10_000)
    session = wb.Session(
        agent,
        lambda: HangEnv(hang_after=20, hang_seed=1),
        num_workers=2,
        backend="ray",
        seed=0,
        step_timeout=2.0,
        sync_every=8,
        cpus_per_worker=0.5,
    )
    session.start(steps=10_000)
    with pytest.raises(WorkerError):
        session.wait(timeout=120)
    err = session.error
    assert session.status == "failed" and isinstance(err, WorkerError) and err.timed_out
    assert "worker 1 (envs 1-1) was killed: env.step of env 1 did not return within step_timeout=2 s" in str(err)


# -- 4. a script that ends while training ----------------------------------------------------------

SCRIPT = """
import sys, time
import workbench as wb
agent = wb.{algo}("{env}")
session = wb.Session(agent, "{env}", seed=0)
session.start(steps=1_000_000)
while session.steps < 50:
    time.sleep(0.01)
{end}
"""


def run_script(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize(
    ("algo", "env", "end", "code"),
    [
        ("PPO", "CartPole-v1", "pass", 0),
        ("PPO", "CartPole-v1", "raise RuntimeError('the app failed')", 1),
        ("PPO", "CartPole-v1", "sys.exit(3)", 3),
        pytest.param("DQN", "CartPole-v1", "pass", 0, marks=pytest.mark.slow),
        pytest.param("SAC", "Pendulum-v1", "raise RuntimeError('the app failed')", 1, marks=pytest.mark.slow),
    ],
)
def test_script_ending_while_training_stops_the_session_cleanly(algo, env, end, code):
    result = run_script(SCRIPT.format(algo=algo, env=env, end=end))
    assert result.returncode == code, result.stderr
    assert "terminate called" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("workbench:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"workbench: at exit, stopped <Session {algo} on {env}: stopped, steps=")
    assert lines[0].split(" at step ")[1].isdigit()
    if code == 1:
        assert "RuntimeError: the app failed" in result.stderr


@pytest.mark.slow
def test_script_ending_while_an_env_hangs_keeps_its_exit_code_and_says_so():
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import time
        import workbench as wb
        from test_faults_control import HangEnv
        env = HangEnv(hang_after=40)
        session = wb.Session(wb.PPO(env, n_envs=1, n_steps=16, batch_size=16), env)
        session.start(steps=1_000_000)
        while env.steps <= 40:
            time.sleep(0.01)
        sys.exit(5)
    """)
    t0 = time.monotonic()
    result = run_script(code)
    assert result.returncode == 5, result.stderr
    assert "terminate called" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("workbench:")]
    assert len(lines) == 1 and "could not stop" in lines[0] and "(env.step of env 0 for" in lines[0], result.stderr
    assert time.monotonic() - t0 < 60


@pytest.mark.slow
def test_script_ending_while_local_workers_train_leaves_no_worker(tmp_path):
    pids = tmp_path / "pids"
    code = textwrap.dedent(f"""
        import time
        import workbench as wb
        session = wb.Session(wb.PPO("CartPole-v1", n_envs=2), "CartPole-v1", num_workers=2, backend="local")
        session.start(steps=1_000_000)
        while session.steps < 100:
            time.sleep(0.01)
        open({str(pids)!r}, "w").write(" ".join(map(str, session._ctx.runner.pids())))
    """)
    result = run_script(code)
    assert result.returncode == 0, result.stderr
    assert "workbench: at exit, stopped <Session PPO" in result.stderr
    worker_pids = [int(p) for p in pids.read_text().split()]
    assert len(worker_pids) == 2
    wait_until(lambda: not any(pid_alive(p) for p in worker_pids), timeout=5)


# -- 7. resume and concurrency ---------------------------------------------------------------------


def test_one_agent_trains_in_one_session_at_a_time():
    env = AppEnv(model={}, app_args={}, config=None, horizon=20)
    agent = small_ppo(env)
    first = wb.Session(agent, env, seed=0)
    first.start(steps=1_000_000)
    second = wb.Session(agent, AppEnv(model={}, app_args={}, config=None))
    with pytest.raises(RuntimeError, match="already training in another session"):
        second.start(steps=100)
    assert second.status == "idle" and not second.is_alive
    assert first.status == "running"
    first.stop()
    second.run(steps=64)  # free again once the first has stopped
    assert second.status == "finished"


def test_wait_from_stop_when_is_a_clear_error_that_does_not_fail_the_run():
    env = AppEnv(model={}, app_args={}, config=None)
    errors = []

    def stop_when(session):
        try:
            session.wait()
        except ControlError as exc:
            errors.append(str(exc))
        return session.steps >= 100

    session = wb.Session(small_ppo(env), env, stop_when=stop_when)
    session.run(steps=1000)
    assert session.status == "finished" and session.error is None
    assert errors and "called from the session's own training thread" in errors[0]

    # Not caught by stop_when: a warning, and the run goes on.
    session2 = wb.Session(small_ppo(env), env, stop_when=lambda s: s.wait())
    with pytest.warns(RuntimeWarning, match="wait\\(\\) was called from the session's own training thread"):
        session2.run(steps=100)
    assert session2.status == "finished" and session2.error is None and session2.steps >= 100


def _signal_rows(session, name, after):
    sig = session.signals[name]
    return [(int(s), float(v)) for s, v in zip(sig.steps, sig.values) if s > after]


def test_resumed_run_continues_step_by_step_like_an_uninterrupted_one(tmp_path):
    # An uninterrupted run of 250 steps writes a checkpoint at step 128 (an episode and a rollout
    # end there); the run resumed from it must see the same schedule, the same env random streams
    # and learn the same weights.
    def make():
        env = AppEnv(model={}, app_args={}, config=None, horizon=16)
        return small_ppo(env), env

    agent, env = make()
    straight = wb.Session(agent, env, seed=4, checkpoint_every=128, checkpoint_dir=tmp_path)
    straight.run(steps=250)
    resumed = wb.Session.reopen(tmp_path / "latest", AppEnv(model={}, app_args={}, config=None, horizon=16))
    assert resumed.steps == 128 and resumed.target_steps == 250
    resumed.run(steps=resumed.target_steps - resumed.steps)

    for name in ("learning_rate", "episode_reward", "loss"):
        assert _signal_rows(resumed, name, 128) == _signal_rows(straight, name, 128), name
    for name, net in straight.agent.networks.items():
        for key, value in net.state_dict().items():
            assert np.array_equal(value.numpy(), resumed.agent.networks[name].state_dict()[key].numpy()), key


@pytest.mark.parametrize("algo", ["PPO", "DQN", "SAC"])
def test_resumed_schedule_counts_against_the_planned_budget(algo, tmp_path):
    n = 256
    lr = wb.linear(1e-3, 1e-4)
    if algo == "SAC":
        env_id, agent = "Pendulum-v1", wb.SAC("Pendulum-v1", learning_rate=lr, learning_starts=32, batch_size=32)
    elif algo == "DQN":
        env_id, agent = "CartPole-v1", wb.DQN("CartPole-v1", learning_rate=lr, learning_starts=32, batch_size=32)
    else:
        env_id, agent = "CartPole-v1", wb.PPO("CartPole-v1", learning_rate=lr, n_envs=1, n_steps=32, batch_size=32)
    # Stopped part way by the app, saved, resumed and continued to the planned end.
    first = wb.Session(agent, env_id, seed=1, stop_when=lambda s: s.steps >= 100)
    first.run(steps=n)
    done = first.steps
    first.save(tmp_path / "run", memory=algo != "PPO")
    second = wb.Session.reopen(tmp_path / "run")
    assert second.target_steps == n
    second.run(steps=n - done)
    assert second.steps == n and second.agent.progress == 1.0
    rows = _signal_rows(second, "learning_rate", 0)
    assert any(step > done for step, _ in rows)
    for step, value in rows:  # every update, before and after the resume, on one schedule over n steps
        assert value == pytest.approx(lr(step / n), rel=1e-5), step


class StreamEnv(AppEnv):
    """Draws from its random stream at reset only (as CartPole does) and records each start."""

    def __init__(self):
        super().__init__(model={}, app_args={}, config=None, horizon=25)
        self.starts = []

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        self.starts.append(obs.copy())
        return obs, info

    def step(self, action):
        self._t += 1
        self._obs = (self._obs * 0.5).astype(np.float32)
        return self._obs, float(action), False, self._t >= self.horizon, {}


def test_resume_continues_env_random_streams_instead_of_replaying_them(tmp_path):
    # Saved in the middle of an episode: the resumed envs start the episodes an uninterrupted run
    # starts next, not the run's first episodes again.
    made: list[StreamEnv] = []

    def factory():
        made.append(StreamEnv())
        return made[-1]

    def agent():
        return wb.PPO(factory(), n_envs=2, n_steps=16, batch_size=32, n_epochs=1)

    straight = wb.Session(agent(), factory, seed=2)
    straight.run(steps=400)
    straight_envs = made[-2:]
    first = wb.Session(agent(), factory, seed=2)
    first.run(steps=160)  # 80 steps per env: the fourth episode of each is 5 steps in
    first.save(tmp_path / "run")
    resumed = wb.Session.reopen(tmp_path / "run", factory)
    resumed.run(steps=240)
    resumed_envs = made[-2:]
    for mine, theirs in zip(resumed_envs, straight_envs):
        # episodes 1-4 were started before the save; the resumed env starts episode 5 onwards
        assert len(mine.starts) >= 2
        for k, obs in enumerate(mine.starts):
            np.testing.assert_array_equal(obs, theirs.starts[4 + k])
        assert not any(np.array_equal(mine.starts[0], s) for s in theirs.starts[:4])


def test_no_warnings_left_behind_by_a_plain_run():
    env = AppEnv(model={}, app_args={}, config=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wb.Session(small_ppo(env), env, seed=0).run(steps=64)


def test_local_workers_carry_env_random_streams_like_the_in_process_envs():
    from workbench.parallel import InProcessRunner, LocalRunner

    source = as_env_source(StreamEnv)
    here = InProcessRunner(source, 2, seed=0)
    here.reset()
    workers = LocalRunner(source, 2, 1, seed=0)
    try:
        workers.reset()
        states = workers.rng_states()
        assert states == here.rng_states() and all(s is not None for s in states)
        later = LocalRunner(source, 2, 1, seed=99)
        try:
            later.set_rng_states(states)
            here.set_rng_states(here.rng_states())
            np.testing.assert_array_equal(later.reset(), here.reset())  # the same next episodes
        finally:
            later.close()
    finally:
        workers.close()
