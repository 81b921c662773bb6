"""Shared test helpers: small envs built the way an application builds its own, a small PPO, and a wait."""

from __future__ import annotations

import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces


class AppEnv(gym.Env):
    """An application's own env: several constructor arguments, counts how often it is touched.

    The agent must pick action 1 when the observation's first entry is positive, else 0;
    episodes last ``horizon`` steps. It stands in for an env such as the seed's compression env.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, model: dict, app_args: dict, config: object, horizon: int = 20, render_mode=None):
        self.model = model
        self.app_args = app_args
        self.config = config
        self.horizon = horizon
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.resets = 0
        self.steps = 0
        self._t = 0
        self._obs = np.zeros(3, dtype=np.float32)

    def _sample(self) -> np.ndarray:
        return self.np_random.uniform(-1, 1, size=3).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self._t = 0
        self._obs = self._sample()
        return self._obs, {}

    def step(self, action):
        self.steps += 1
        self._t += 1
        correct = int(self._obs[0] > 0)
        reward = 1.0 if int(action) == correct else 0.0
        self._obs = self._sample()
        return self._obs, reward, False, self._t >= self.horizon, {}

    def render(self):
        return np.zeros((8, 8, 3), dtype=np.uint8)


class ExplodingEnv(AppEnv):
    """Raises inside step() after ``fail_after`` steps."""

    def __init__(self, fail_after: int = 50):
        super().__init__(model={}, app_args={}, config=None)
        self.fail_after = fail_after

    def step(self, action):
        if self.steps >= self.fail_after:
            raise RuntimeError("simulator crashed at step %d" % self.steps)
        return super().step(action)


class SlowEnv(AppEnv):
    """Each step takes ``delay`` seconds, so control calls can be timed against it."""

    def __init__(self, delay: float = 0.002):
        super().__init__(model={}, app_args={}, config=None, horizon=50)
        self.delay = delay

    def step(self, action):
        import time

        time.sleep(self.delay)
        return super().step(action)


@pytest.fixture
def app_env() -> AppEnv:
    return AppEnv(model={"layers": 3}, app_args={"lr": 0.1}, config=object())


def small_ppo(env, *, spaces_only: bool = False, **kw):
    """A PPO that updates every 16 steps (one env, two epochs): sessions around it finish in moments.

    ``spaces_only``: built from ``env``'s spaces alone, as for an external session; ``kw`` overrides the rest."""
    import workbench as wb

    kw = {"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 2, **kw}
    if spaces_only:
        return wb.PPO(observation_space=env.observation_space, action_space=env.action_space, **kw)
    return wb.PPO(env, **kw)


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, poll: float = 0.005) -> None:
    """Return once ``predicate()`` is true; fail after ``timeout`` seconds. The timeout is generous (worker
    processes start slowly on a loaded machine) and costs nothing where the condition comes at once."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout:.0f} s")
        time.sleep(poll)


# Tests that take over about 3 s on a quiet 2-core machine (measured with --durations on a loaded one, where they
# took 8 s or more), marked slow here so that `make test-fast` leaves them out while their files stay as written.
# A test renamed or deleted simply drops out of this list; add one when --durations shows it.
SLOW_TESTS = {
    "tests/test_external.py::test_save_load_and_resume_an_external_session",
    "tests/test_faults_control.py::test_local_workers_carry_env_random_streams_like_the_in_process_envs",
    "tests/test_faults_control.py::test_local_worker_hung_env_is_killed_after_step_timeout_naming_worker_and_env",
    "tests/test_faults_control.py::test_a_worker_with_several_envs_names_the_one_that_hangs",
    "tests/test_faults_control.py::test_local_workers_without_step_timeout_are_killed_when_stop_gives_up",
    "tests/test_ui.py::test_first_paint_imports_neither_plotly_nor_nbformat",
    "tests/test_ui.py::test_dashboard_bounds_the_points_it_sends",
    "tests/test_ui.py::test_default_plots_follow_the_algorithm",
    "tests/test_ui.py::test_save_button_writes_the_run_to_the_path_field",
    "tests/test_offline.py::test_cql_box_starts_by_imitating_the_data_for_bc_steps",
    "tests/test_offline.py::test_bcq_keeps_to_the_actions_the_data_holds",
    "tests/test_offline.py::test_session_ope_signals_and_seeded_reproducibility",
    "tests/test_parallel.py::test_workers_end_with_the_interpreter",
    "tests/test_parallel.py::test_killed_worker_is_restarted_when_asked_and_the_run_continues",
    "tests/test_sparse.py::test_her_agent_saves_and_reopens_with_its_memory",
}


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the tests of ``SLOW_TESTS`` slow (parametrized ones by their name without the parameters)."""
    for item in items:
        if item.nodeid.split("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
