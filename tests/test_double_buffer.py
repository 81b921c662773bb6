"""Double-buffered sampling on local workers (issue 51): each worker's envs step in two halves while the
learner decides the other half's actions (``double_buffer=True``).

What a user relies on: the same step contract (one row per env, in env order; the same trajectories for the
same seeds and a fixed policy), the same session (training, episode counting, pause/stop, save and reopen,
``call_env``, a worker crash named or restarted, APPO's sampler), arguments checked when the session is made,
and a real overlap: the second half's decision runs while the workers step the first half.

The envs are defined here and sent to the workers by value (cloudpickle), as a notebook's env travels.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from conftest import wait_until

import workbench as wb
from workbench.envs import as_env_source
from workbench.envs.testing import MaskedTarget
from workbench.loop import Step
from workbench.parallel import LocalRunner, WorkerError, make_runner

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class IndexEnv(gym.Env):
    """Observes ``[its env index, steps into the episode, episodes begun]`` (the index from its first seed:
    the session's ``seed + i``); the reward echoes the action taken, so a test sees which action reached
    which env. Episodes last ``length`` steps. With ``marker_dir``, each step first writes a file named
    ``<index>-<step>`` there; env ``exit_index`` exits its process at its ``exit_at``-th step (once)."""

    observation_space = gym.spaces.Box(0.0, 1e9, (3,), np.float32)

    def __init__(self, length=5, marker_dir=None, delay=0.0, exit_index=None, exit_at=0, actions=2):
        self.action_space = gym.spaces.Discrete(actions)
        self.length, self.marker_dir, self.delay = length, marker_dir, delay
        self.exit_index, self.exit_at = exit_index, exit_at
        self.index = None
        self.t = self.episodes = self.total = 0

    def _obs(self):
        return np.array([self.index, self.t, self.episodes], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.index is None:
            self.index = -1 if seed is None else seed
        self.t = 0
        self.episodes += 1
        return self._obs(), {}

    def step(self, action):
        self.total += 1
        if self.marker_dir is not None:
            with open(os.path.join(self.marker_dir, f"{self.index}-{self.total}"), "w"):
                pass
        if self.index == self.exit_index and self.total == self.exit_at:
            os._exit(3)
        if self.delay:
            time.sleep(self.delay)
        self.t += 1
        return self._obs(), float(action), False, self.t >= self.length, {}

    def where(self):
        return self.index


pytestmark = pytest.mark.usefixtures("no_leftover_processes")


@pytest.fixture
def halves(monkeypatch):
    """Counts the steps taken by halves (each joins the two halves' decisions once)."""
    calls = []
    joined = LocalRunner._joined_step

    def counting(self, steps):
        calls.append([len(s.actions) for s in steps])
        return joined(self, steps)

    monkeypatch.setattr(LocalRunner, "_joined_step", counting)
    return calls


class Echo:
    """A fixed policy: action = 100 * env index + step in episode (what IndexEnv pays back), or for CartPole
    push toward the pole's lean; records each decision's rows."""

    per_env_decisions = False

    def __init__(self, cartpole=False):
        self.cartpole = cartpole
        self.rows = []

    def decide(self, obs, deterministic=False, action_mask=None, rows=None):
        self.rows.append(None if rows is None else list(rows))
        if self.cartpole:
            return Step((obs[:, 0] > 0).astype(np.int64), {"seen": obs[:, 0].copy()})  # falls soon: episodes end
        return Step((100 * obs[:, 0] + obs[:, 1]).astype(np.int64), {"seen": obs[:, 0].copy()})

    def begin_episode(self, done):
        pass


def _trajectory(factory, double_buffer, shared_memory=True, steps=40, workers=2, envs=4, agent=None):
    runner = LocalRunner(
        as_env_source(factory), workers, envs, shared_memory=shared_memory, double_buffer=double_buffer, seed=0
    )
    agent = agent or Echo(cartpole=factory is _cartpole)
    try:
        obs = runner.reset()
        out = [obs]
        for _ in range(steps):
            t, obs = runner.transitions(agent, obs)
            out += [t.obs, t.actions, t.rewards, t.next_obs, t.terminated, t.truncated, t.extras["seen"], obs]
        return out, runner.rng_states()
    finally:
        runner.close()


def _cartpole():
    return gym.make("CartPole-v1")


# -- the step contract -------------------------------------------------------------------------------------


def test_rows_stay_in_env_order_and_each_action_reaches_its_env():
    agent = Echo()
    out, _ = _trajectory(lambda: IndexEnv(actions=1000), True, steps=12, agent=agent)
    n = 8
    for t in range(12):
        obs, actions, rewards, next_obs = out[1 + 8 * t : 5 + 8 * t]
        np.testing.assert_array_equal(obs[:, 0], np.arange(n))  # env i's row is row i
        np.testing.assert_array_equal(next_obs[:, 0], np.arange(n))
        np.testing.assert_array_equal(rewards, 100 * np.arange(n) + obs[:, 1])  # its own action came back
        np.testing.assert_array_equal(out[7 + 8 * t], np.arange(n))  # extras joined in env order
    # Decided in two halves: the first two and the last two envs of each worker of four.
    assert agent.rows[:2] == [[0, 1, 4, 5], [2, 3, 6, 7]]


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared-memory", "answers"])
def test_a_fixed_policy_steps_the_same_trajectories_as_without_double_buffering(shared_memory, halves):
    plain, plain_rng = _trajectory(_cartpole, False, steps=120)
    assert not halves
    doubled, doubled_rng = _trajectory(_cartpole, True, shared_memory=shared_memory, steps=120)
    assert len(halves) == 120  # stepped by halves
    assert sum(int(t.sum()) for t in plain[5::8]) > 4  # episodes ended on the way: final observations too
    for a, b in zip(plain, doubled, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [str(s) for s in plain_rng] == [str(s) for s in doubled_rng]


def test_the_second_half_is_decided_while_the_workers_step_the_first(tmp_path):
    """The overlap itself: the decision for the second half waits (up to 10 s) for a file that an env of the
    first half writes inside its step; one decision for all envs, then one step of all, would never see it."""

    class Waiting(Echo):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self.seen_first_half_stepping = []

        def decide(self, obs, deterministic=False, action_mask=None, rows=None):
            if rows is not None and 1 in rows:  # the second half (env 1 is the worker's second env)
                self.steps += 1
                marker = tmp_path / f"0-{self.steps}"  # env 0's step of this round, written inside its step
                deadline = time.monotonic() + 10
                while not marker.exists() and time.monotonic() < deadline:
                    time.sleep(0.005)
                self.seen_first_half_stepping.append(marker.exists())
            return super().decide(obs, deterministic, action_mask, rows)

    agent = Waiting()
    marker_dir = str(tmp_path)
    _trajectory(lambda: IndexEnv(marker_dir=marker_dir, actions=1000), True, steps=6, workers=1, envs=2, agent=agent)
    assert agent.seen_first_half_stepping == [True] * 6


# -- sessions ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [wb.PPO, wb.DQN], ids=["ppo", "dqn"])
def test_ppo_and_dqn_train_and_count_steps_and_episodes(make, halves):
    kwargs = (
        {"n_steps": 25, "batch_size": 50}
        if make is wb.PPO
        else {"learning_starts": 100, "train_freq": 40, "gradient_steps": 2, "net_arch": (32, 32)}
    )
    agent = make(IndexEnv(), n_envs=4, seed=0, **kwargs)
    session = wb.Session(
        agent, lambda: IndexEnv(), num_workers=2, backend="local", envs_per_worker=2, double_buffer=True, seed=0
    )
    session.run(300)
    assert session.status == "finished" and session.steps == 300
    assert session.episodes == 4 * (75 // 5)  # 4 envs, 75 steps each, episodes of 5 steps
    assert len(halves) == 75 and all(sizes == [2, 2] for sizes in halves)
    assert agent.num_updates > 0
    assert session.signals["episode_length"].values.tolist() == [5.0] * session.episodes


def test_action_masks_reach_each_half(halves):
    # MaskedTarget raises on a forbidden action: every decision must have had its own envs' masks.
    agent = wb.PPO(MaskedTarget(mask_in="info"), n_envs=4, n_steps=16, batch_size=32, seed=0)
    session = wb.Session(
        agent,
        lambda: MaskedTarget(mask_in="info"),
        num_workers=2,
        backend="local",
        envs_per_worker=2,
        double_buffer=True,
        seed=0,
    )
    session.run(256)
    assert session.status == "finished" and session.steps == 256 and len(halves) == 64


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"envs_per_worker": 3},
            r"double_buffer=True with envs_per_worker=3: .*even envs_per_worker .* pass envs_per_worker=4",
        ),
        ({"envs_per_worker": 1}, r"double_buffer=True with envs_per_worker=1: .*pass envs_per_worker=2"),
        ({"envs_per_worker": None}, r"double_buffer=True with 1 env\(s\) per worker .*pass envs_per_worker=2"),
        ({"backend": "ray"}, r"double_buffer=True with backend='ray': .*Pass backend='local'"),
        ({"backend": "inprocess"}, r"double_buffer=True with backend='inprocess': .*Pass backend='local'"),
        ({"backend": "auto"}, r"double_buffer=True with backend='auto': .*Pass backend='local'"),
        ({"double_buffer": 1}, r"double_buffer=1: double_buffer must be True or False"),
        ({"double_buffer": "yes"}, r"double_buffer='yes' \(a str\): double_buffer must be True or False"),
    ],
)
def test_bad_arguments_are_refused_when_the_session_is_made(options, message):
    args = {"num_workers": 2, "backend": "local", "envs_per_worker": 2, "double_buffer": True, **options}
    with pytest.raises(ValueError, match=message):
        wb.Session(wb.DQN("CartPole-v1"), "CartPole-v1", **args)


def test_agents_and_envs_that_cannot_be_split_are_refused():
    ou = wb.DDPG("Pendulum-v1", exploration=wb.OrnsteinUhlenbeckNoise())
    with pytest.raises(ValueError, match="Ornstein-Uhlenbeck noise"):
        wb.Session(ou, "Pendulum-v1", num_workers=2, backend="local", envs_per_worker=2, double_buffer=True)
    venv = gym.vector.SyncVectorEnv([_cartpole, _cartpole])
    try:
        with pytest.raises(ValueError, match="double_buffer"):
            wb.Session(wb.PPO(venv), venv, backend="local", double_buffer=True)
    finally:
        venv.close()
    with pytest.raises(TypeError, match="double_buffer=1"):
        LocalRunner(as_env_source(_cartpole), 1, 2, double_buffer=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="envs_per_worker=3"):
        make_runner(as_env_source(_cartpole), 6, num_workers=2, backend="local", envs_per_worker=3, double_buffer=True)


def test_pause_resume_stop_save_reopen_and_call_env(tmp_path, halves):
    agent = wb.PPO(IndexEnv(), n_envs=4, n_steps=8, batch_size=32, seed=0)
    options = {"num_workers": 2, "backend": "local", "envs_per_worker": 2, "double_buffer": True}
    session = wb.Session(agent, lambda: IndexEnv(delay=0.002), seed=0, **options)
    assert session.call_env("where") == [None] * 4  # before a run: built, not reset yet
    session.start(1_000_000)
    try:
        wait_until(lambda: session.steps >= 64)
        session.pause()
        assert session.status == "paused"
        steps = session.steps
        time.sleep(0.3)
        assert session.steps == steps
        assert session.call_env("where") == [0, 1, 2, 3]  # between two steps, on every env in order
        session.resume()
        wait_until(lambda: session.steps > steps)
    finally:
        session.stop()
    assert session.status == "stopped" and halves
    session.save(tmp_path / "run")
    again = wb.Session.reopen(tmp_path / "run", lambda: IndexEnv(), **options)
    assert again.steps == session.steps and again.episodes == session.episodes
    before = len(halves)
    again.run(64)
    assert again.status == "finished" and again.steps == session.steps + 64
    assert len(halves) - before == 16  # the reopened run steps by halves too


@pytest.mark.slow  # kills worker processes and runs 2,000 steps after a restart: 8 s
def test_a_killed_worker_is_named_or_restarted(halves):
    options = {"num_workers": 2, "backend": "local", "envs_per_worker": 2, "double_buffer": True}
    agent = wb.PPO(IndexEnv(), n_envs=4, n_steps=8, batch_size=32, seed=0)
    session = wb.Session(agent, lambda: IndexEnv(delay=0.001), seed=0, **options)
    session.start(1_000_000)
    wait_until(lambda: session.steps > 50)
    os.kill(session._ctx.runner.pids()[1], signal.SIGKILL)
    with pytest.raises(WorkerError, match=r"worker 1 \(envs 2-3\) process died") as info:
        session.wait(timeout=30)
    assert session.status == "failed" and info.value.died

    agent = wb.PPO(IndexEnv(), n_envs=4, n_steps=8, batch_size=32, seed=0)
    session = wb.Session(agent, lambda: IndexEnv(delay=0.001), seed=0, restart_workers=True, **options)
    session.start(2_000)
    wait_until(lambda: session.steps > 100)
    os.kill(session._ctx.runner.pids()[0], signal.SIGKILL)
    session.wait(timeout=60)
    assert session.status == "finished" and session.steps == 2_000 and len(halves) > 400
    assert session.signals["worker_restarts"].last == 1


def test_a_worker_dying_between_its_halves_ends_every_episode_of_it_as_truncated():
    # Env 3 (worker 1's second half) exits at its 4th step: worker 1 answered for env 2, then died.
    factory = lambda: IndexEnv(length=50, exit_index=3, exit_at=4, actions=1000)  # noqa: E731
    runner = LocalRunner(as_env_source(factory), 2, 2, double_buffer=True, restart_workers=True, seed=0)
    agent = Echo()
    try:
        obs = runner.reset()
        for _ in range(3):
            t, obs = runner.transitions(agent, obs)
        before = obs.copy()
        t, obs = runner.transitions(agent, obs)
    finally:
        runner.close()
    assert runner.restarts == 1
    np.testing.assert_array_equal(t.truncated, [False, False, True, True])
    np.testing.assert_array_equal(t.terminated, [False] * 4)
    assert t.rewards[2] == 100 * 2 + 3 and t.rewards[3] == 0  # env 2 stepped; env 3 died stepping
    np.testing.assert_array_equal(t.next_obs[2], [2, 4, 1])  # env 2's episode ends where it got to
    np.testing.assert_array_equal(t.next_obs[3], before[3])  # env 3's where it was
    np.testing.assert_array_equal(t.next_obs[:2], obs[:2])  # worker 0 went on as usual
    assert obs[2, 1] == 0 and obs[3, 1] == 0  # fresh envs, at the start of an episode
    assert obs[2, 0] != 2  # rebuilt with new seeds


# -- learning while acting -------------------------------------------------------------------------------


def test_appo_samples_by_halves_on_local_workers(halves):
    agent = wb.APPO(IndexEnv(), n_envs=4, n_steps=8, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(
        agent,
        lambda: IndexEnv(delay=0.001),
        num_workers=2,
        backend="local",
        envs_per_worker=2,
        double_buffer=True,
        seed=0,
    )
    session.run(320)
    assert session.status == "finished" and session.steps == 320
    assert len(halves) >= 80 and all(sizes == [2, 2] for sizes in halves)  # the sampler stepped by halves
    assert agent.num_updates > 0 and session.episodes > 0


def test_the_cli_trains_with_double_buffering(tmp_path, capsys, halves):
    from workbench.cli import main

    common = ["train", "CartPole-v1", "--agent", "ppo", "--no-preset", "--no-progress", "--seed", "0"]
    common += ["--num-workers", "2", "--backend", "local", "--double-buffer", "--set", "n_envs=4"]
    out = tmp_path / "cli"
    assert main([*common, "--steps", "128", "--envs-per-worker", "2", "--set", "n_steps=16", "--out", str(out)]) == 0
    assert isinstance(wb.load(out), wb.PPO) and len(halves) == 32
    assert main([*common, "--steps", "64", "--envs-per-worker", "3"]) == 2
    assert "double_buffer=True with envs_per_worker=3" in capsys.readouterr().err


def test_a_recurrent_policy_moves_only_each_halfs_memory(halves):
    agent = wb.RecurrentPPO(IndexEnv(), n_envs=4, n_steps=8, batch_size=16, seed=0)
    options = {"num_workers": 2, "backend": "local", "double_buffer": True}
    session = wb.Session(agent, lambda: IndexEnv(), envs_per_worker=2, seed=0, **options)
    session.run(64)
    assert session.status == "finished" and session.steps == 64 and len(halves) == 16
    with pytest.raises(ValueError, match=r"RecurrentPPO, which keeps a state per env for its n_envs=4 envs, on 2 x 4"):
        wb.Session(agent, lambda: IndexEnv(), envs_per_worker=4, **options)
