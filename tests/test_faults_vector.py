"""Vector envs checked at the door (issue 49, class 6): worker options refused at Session(...), a dead
AsyncVectorEnv worker named, an EnvPool id that EnvPool cannot serve refused before the run."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

import workbench as wb

SMALL = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "net_arch": (8,)}


@pytest.mark.parametrize("option", [{"step_timeout": 1.0}, {"restart_workers": True}, {"envs_per_worker": 2}])
def test_worker_options_with_a_vector_env_are_refused_when_the_session_is_made(option):
    venv = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    try:
        name = next(iter(option))
        with pytest.raises(ValueError, match=rf"{name}=.* not to a vector env \(SyncVectorEnv"):
            wb.Session(wb.PPO(venv, **SMALL), venv, **option)
    finally:
        venv.close()


class _DiesAtStep3(gym.Wrapper):
    """Kills its own (worker) process at its third step, as a crashing simulator would."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps >= 3:
            os._exit(3)
        return self.env.step(action)


def test_a_dead_async_vector_env_worker_is_a_worker_error_naming_it_and_the_env():
    venv = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1"), lambda: _DiesAtStep3(gym.make("CartPole-v1"))])
    try:
        session = wb.Session(wb.PPO(venv, seed=0, **SMALL), venv, seed=0)
        with pytest.raises(wb.WorkerError, match=r"worker 1 .*AsyncVectorEnv\(num_envs=2\) died \(exit code 3\)") as e:
            session.run(steps=32)
        assert e.value.died and e.value.worker == 1 and list(e.value.envs) == [1]
        assert isinstance(e.value.__cause__, ConnectionError | EOFError)
    finally:
        venv.close(terminate=True)


def test_backend_envpool_with_an_id_envpool_cannot_serve_is_refused_when_the_session_is_made():
    pytest.importorskip("envpool")
    # EnvPool lists Blackjack-v1 but with other spaces than gymnasium's: found only inside the run before.
    with pytest.raises(ValueError, match="EnvPool's 'Blackjack-v1' has the spaces"):
        wb.Session(wb.DQN("Blackjack-v1"), "Blackjack-v1", backend="envpool")
    with pytest.raises(ValueError, match="restart_workers=True .*backend='envpool'"):
        wb.Session(wb.PPO("CartPole-v1", **SMALL), "CartPole-v1", backend="envpool", restart_workers=True)
    session = wb.Session(wb.PPO("CartPole-v1", n_envs=2, **SMALL), "CartPole-v1", backend="envpool", seed=0)
    session.run(steps=16)  # an id EnvPool serves still runs
    assert session.steps >= 16
