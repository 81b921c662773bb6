"""Learning while acting (issue 51): V-trace, IMPALA and APPO, and the sampler thread that keeps the
envs stepping (local workers or in-process) while the learner updates, with the session's controls.

The envs sent to workers are defined here and travel by value (cloudpickle), as in test_parallel.py.
"""

from __future__ import annotations

import sys
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import wait_until

import workbench as wb
from workbench.agents.impala import vtrace
from workbench.envs.testing import BitMatch, MaskedTarget, SeeTheSide
from workbench.memory.rollout import compute_gae
from workbench.parallel import WorkerError
from workbench.parallel.asynchronous import AsyncRunner

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Slow(gym.Env):
    """Episodes of ``length`` steps of ``delay`` s each; reward 1 for action 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, delay=0.001, length=20):
        self.delay, self.length, self.t = delay, length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        self.t += 1
        return np.full(3, self.t / self.length, np.float32), float(action), False, self.t >= self.length, {}

    def where(self):
        return self.t


# -- V-trace -------------------------------------------------------------------------------------


def _reference_vtrace(log_rhos, rewards, values, dones, bootstrap, gamma, rho_bar, c_bar, lam):
    """Espeholt et al.'s eq. 1 summed directly: vs_s = V(x_s) + sum_t gamma^(t-s) (prod_{s<=i<t} c_i) delta_t,
    with the discounts cut at episode ends."""
    T, N = rewards.shape
    rhos = np.exp(log_rhos)
    values_next = np.concatenate([values[1:], bootstrap[None]])
    vs = np.zeros((T, N))
    for n in range(N):
        for s in range(T):
            total, weight = values[s, n], 1.0
            for t in range(s, T):
                delta = min(rho_bar, rhos[t, n]) * (
                    rewards[t, n] + gamma * (1 - dones[t, n]) * values_next[t, n] - values[t, n]
                )
                total += weight * delta
                weight *= gamma * (1 - dones[t, n]) * lam * min(c_bar, rhos[t, n])
            vs[s, n] = total
    vs_next = np.concatenate([vs[1:], bootstrap[None]])
    adv = np.minimum(rho_bar, rhos) * (rewards + gamma * (1 - dones) * vs_next - values)
    return vs, adv


@pytest.mark.parametrize(("rho_bar", "c_bar", "lam"), [(1.0, 1.0, 1.0), (2.0, 0.5, 0.9), (0.7, 1.3, 1.0)])
def test_vtrace_equals_the_direct_sum_of_the_paper(rho_bar, c_bar, lam):
    rng = np.random.default_rng(0)
    T, N = 6, 3
    log_rhos = rng.normal(0, 0.8, (T, N))
    rewards, values, bootstrap = rng.normal(size=(T, N)), rng.normal(size=(T, N)), rng.normal(size=N)
    dones = (rng.random((T, N)) < 0.2).astype(np.float64)
    vs, adv = vtrace(
        *(torch.tensor(a) for a in (log_rhos, rewards, values, dones, bootstrap)), 0.9, rho_bar, c_bar, lam
    )
    ref_vs, ref_adv = _reference_vtrace(log_rhos, rewards, values, dones, bootstrap, 0.9, rho_bar, c_bar, lam)
    np.testing.assert_allclose(vs.numpy(), ref_vs, rtol=1e-10)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-10)


@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_vtrace_on_policy_is_gae_and_with_lambda_one_the_n_step_advantage(lam):
    rng = np.random.default_rng(1)
    T, N = 7, 2
    rewards, values = rng.normal(size=(T, N)).astype(np.float32), rng.normal(size=(T, N)).astype(np.float32)
    dones = (rng.random((T, N)) < 0.3).astype(np.float32)
    bootstrap = rng.normal(size=N).astype(np.float32)
    gae_adv, gae_returns = compute_gae(rewards, values, dones, bootstrap, 0.95, lam)
    vs, adv = vtrace(torch.zeros(T, N), *(torch.tensor(a) for a in (rewards, values, dones, bootstrap)), 0.95, lam=lam)
    np.testing.assert_allclose(vs.numpy(), gae_returns, rtol=1e-5, atol=1e-6)
    if lam == 1.0:
        np.testing.assert_allclose(adv.numpy(), gae_adv, rtol=1e-5, atol=1e-6)


def test_vtrace_clips_the_importance_weights():
    # pi/mu = e^3 everywhere: rho_bar=1 and c_bar=1 make it the on-policy target exactly.
    rewards, values, dones = torch.ones(4, 1), torch.zeros(4, 1), torch.zeros(4, 1)
    vs, adv = vtrace(torch.full((4, 1), 3.0), rewards, values, dones, torch.zeros(1), 0.5)
    on, on_adv = vtrace(torch.zeros(4, 1), rewards, values, dones, torch.zeros(1), 0.5)
    assert torch.equal(vs, on) and torch.equal(adv, on_adv)


# -- the agents ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [wb.IMPALA, wb.APPO])
@pytest.mark.parametrize(
    "make",
    [
        lambda: gym.make("CartPole-v1"),
        lambda: gym.make("Pendulum-v1"),
        lambda: MaskedTarget(n_actions=5, n_invalid=2, dims=2),
        lambda: MaskedTarget(n_actions=5, n_invalid=2),
        lambda: BitMatch(),
        lambda: SeeTheSide(size=8, dict_obs=True),
    ],
    ids=["discrete", "box", "multidiscrete-masks", "discrete-masks", "multibinary", "dict-image"],
)
def test_each_space_trains_asynchronously_in_process(cls, make):
    """Every action space PPO takes, masks (MaskedTarget raises on a forbidden action) and a Dict
    observation with an image, through the sampler thread; the behaviour log-probabilities arrive."""
    agent = cls(make, n_envs=2, n_steps=8, seed=0, **({"batch_size": 8, "n_epochs": 1} if cls is wb.APPO else {}))
    session = wb.Session(agent, make, seed=0)
    session.run(steps=80)
    assert session.status == "finished" and session.steps == 80
    assert agent.num_updates >= 3
    assert np.isfinite(session.signals["loss"].values).all()
    assert "importance_weight" in session.signals and "policy_lag" in session.signals


def test_impala_takes_the_device_and_saves_and_loads(tmp_path):
    agent = wb.IMPALA("CartPole-v1", n_envs=2, n_steps=8, device="cpu", seed=0, rho_bar=2.0, c_bar=0.5)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=48)
    agent.save(tmp_path / "impala")
    loaded = wb.load(tmp_path / "impala")
    assert isinstance(loaded, wb.IMPALA) and loaded.config.rho_bar == 2.0 and loaded.config.c_bar == 0.5
    obs = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))


def test_bad_vtrace_settings_are_refused_when_the_agent_is_made():
    with pytest.raises(ValueError, match="rho_bar"):
        wb.IMPALA("CartPole-v1", rho_bar=0)
    with pytest.raises(ValueError, match="max_policy_lag"):
        wb.APPO("CartPole-v1", max_policy_lag=-1)


# -- learning while acting on local workers --------------------------------------------------------


def test_local_workers_keep_stepping_while_the_learner_learns_and_lag_is_bounded():
    agent = wb.APPO(Slow(), n_envs=4, n_steps=8, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(agent, lambda: Slow(), num_workers=2, backend="local", seed=0)
    session.start(100_000)
    try:
        wait_until(lambda: session.signals["policy_lag"].count >= 5 if "policy_lag" in session.signals else False)
        runner = session._ctx.runner
        assert isinstance(runner, AsyncRunner) and runner.backend == "local"
        # Live edits land between steps: max_policy_lag=0 drops every rollout stepped by older weights.
        session.set(max_policy_lag=0, learning_rate=3e-4, ent_coef=0.01, clip_range=0.1)
        wait_until(lambda: "batches_dropped" in session.signals and session.signals["batches_dropped"].last >= 2)
        assert agent.config.max_policy_lag == 0 and agent.config.clip_range == 0.1
        # call_env runs between two of the sampler's steps, on every env of every worker.
        assert len(session.call_env("where")) == 4
        session.pause()
        assert session.status == "paused"
        steps = session.steps
        time.sleep(0.3)
        assert session.steps == steps
        session.resume()
        wait_until(lambda: session.steps > steps)
        wait_until(lambda: "learner_idle_fraction" in session.signals)  # recorded about once a second
    finally:
        session.stop()
    assert session.status == "stopped"
    lags = session.signals["policy_lag"].values
    before = lags[: len(lags) // 2]
    assert before.max() <= 20  # the default max_policy_lag
    for name in ("sampler_steps_per_second", "learner_steps_per_second", "learner_idle_fraction"):
        assert name in session.signals, name
    assert 0.0 <= session.signals["learner_idle_fraction"].last <= 1.0
    assert session.episodes > 0  # counted by the sampler, dropped rollouts too


def test_a_killed_worker_is_named_or_restarted():
    import os
    import signal

    agent = wb.IMPALA(Slow(), n_envs=2, n_steps=4, seed=0)
    session = wb.Session(agent, lambda: Slow(), num_workers=2, backend="local", restart_workers=True, seed=0)
    session.start(1_500)
    wait_until(lambda: session.steps > 100)
    inner = session._ctx.runner.inner
    os.kill(inner.pids()[1], signal.SIGKILL)
    session.wait(timeout=60)
    assert session.status == "finished" and session.signals["worker_restarts"].last == 1

    session = wb.Session(wb.IMPALA(Slow(), n_envs=2, n_steps=4), lambda: Slow(), num_workers=2, backend="local")
    session.start(1_000_000)
    wait_until(lambda: session.steps > 50)
    os.kill(session._ctx.runner.inner.pids()[0], signal.SIGKILL)
    with pytest.raises(WorkerError, match=r"worker 0 .* process died"):
        session.wait(timeout=30)
    assert session.status == "failed"


def test_save_and_reopen_continues_the_counters_and_the_envs(tmp_path):
    agent = wb.IMPALA(Slow(), n_envs=2, n_steps=4, seed=0)
    session = wb.Session(agent, lambda: Slow(), num_workers=2, backend="local", seed=0)
    session.run(steps=96)
    session.save(tmp_path / "run")
    again = wb.Session.reopen(tmp_path / "run", lambda: Slow(), num_workers=2, backend="local")
    assert again.steps == 96 and again.agent.num_updates == agent.num_updates
    again.run(steps=48)
    assert again.status == "finished" and again.steps == 144


def test_the_cli_trains_appo(tmp_path, capsys):
    from workbench.cli import main

    main(
        [
            "train",
            "CartPole-v1",
            "--agent",
            "appo",
            "--steps",
            "256",
            "--out",
            str(tmp_path / "cli"),
            "--no-progress",
            "--seed",
            "0",
        ]
    )
    assert isinstance(wb.load(tmp_path / "cli"), wb.APPO)


@pytest.mark.ray
def test_appo_on_ray_actors_collects_the_next_rollout_while_it_learns():
    agent = wb.APPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    session = wb.Session(agent, "CartPole-v1", num_workers=2, backend="ray", seed=0, cpus_per_worker=0.5)
    session.run(steps=640)
    assert session.status == "finished" and session.steps == 640
    lags = session.signals["policy_lag"].values
    assert lags.max() == 1  # the next rollout was collected with the weights before the update


def test_the_appo_presets_take_rllibs_settings():
    tuned = wb.preset("CartPole-v1", "appo", seed=0)
    assert isinstance(tuned.agent, wb.APPO) and tuned.steps == 200_000
    c = tuned.agent.config
    assert (c.n_envs, c.n_steps, c.vf_coef, c.n_epochs, c.clip_range) == (20, 50, 0.01, 1, 0.4)
    assert isinstance(wb.preset("Acrobot-v1", "impala").agent, wb.IMPALA)


CTRL_C = """
import os, signal, threading, time
# Ctrl-C as in a terminal, whatever the test process left its children: an ignored SIGINT is inherited
# across exec, and Python then installs no KeyboardInterrupt handler of its own.
signal.signal(signal.SIGINT, signal.default_int_handler)
import workbench as wb

agent = wb.APPO("CartPole-v1", n_envs=2, n_steps=8, batch_size=16, n_epochs=1)
session = wb.Session(agent, "CartPole-v1", num_workers=2, backend="local", seed=0)

def send():
    while session.steps < 200:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=send, daemon=True).start()
try:
    session.run(10_000_000)
finally:
    print("STATUS", session.status, session.stop_reason, flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_stops_an_appo_run_on_local_workers(tmp_path):
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert "KeyboardInterrupt" in done.stderr, done.stderr[-2000:]
    assert "STATUS stopped interrupted" in done.stdout, (done.stdout, done.stderr[-2000:])
