"""Shared test helpers: small envs built the way an application builds its own, a small PPO, a wait, a check
that no worker process outlives a test, and a POST of a binary experience batch to a served session."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import psutil
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


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie or a process that vanished meanwhile counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(pids: object, timeout: float = 10.0) -> bool:
    """True once none of ``pids`` runs, False if one still does after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(process_alive(p) for p in pids):  # type: ignore[attr-defined]
            return True
        time.sleep(0.05)
    return False


# Ray actors start slowly on a loaded machine (over 2 min seen): how long a Ray test waits for them.
RAY_START_S = 300.0


def running_runner(session, timeout: float = RAY_START_S):
    """The session's runner once every one of its workers has started."""
    wait_until(
        lambda: session._ctx.runner is not None and len(session._ctx.runner.pids()) == session.num_workers, timeout
    )
    return session._ctx.runner


def child_processes() -> set[int]:
    """The pids of this process's live descendants (worker processes, Ray's)."""
    return {p.pid for p in psutil.Process().children(recursive=True) if process_alive(p.pid)}


@pytest.fixture
def no_leftover_processes():
    """Every test that uses it must leave the process table as it found it: no worker survives a run
    (``pytestmark = pytest.mark.usefixtures("no_leftover_processes")`` in a file of worker tests)."""
    before = child_processes()
    yield
    left = child_processes() - before
    assert not left, f"worker processes left behind: {sorted(left)}"


def post_experience(server, body: bytes) -> tuple[int, dict]:
    """POST a binary experience batch to a served session's ``/experience``: (HTTP status, JSON answer)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("POST", "/experience", body=body, headers={"Content-Type": "application/octet-stream"})
    response = conn.getresponse()
    out = response.status, json.loads(response.read())
    conn.close()
    return out


# Tests (by name, every parametrization) of which one case took a second or more in `make test-fast` with
# --durations=200 on a loaded 2-core machine, marked slow here so that `make test-fast` stays under 2 minutes
# while `make test` runs them all and their files stay as written.
# A test renamed or deleted simply drops out of this list; add one when --durations shows it.
SLOW_TESTS = {
    "tests/test_agent_contract.py::test_a_plain_agent_has_the_contract_defaults",
    "tests/test_agent_contract.py::test_behaviour_log_probs_come_from_each_algorithm",
    "tests/test_agent_contract.py::test_every_member_read_on_an_agent_outside_its_algorithm_is_declared_on_the_contract",
    "tests/test_agent_contract.py::test_no_agent_is_probed_with_getattr_or_hasattr_outside_its_algorithm",
    "tests/test_agents.py::test_ppo_bootstraps_truncated_episodes_only",
    "tests/test_algorithms.py::test_dqn_options_learn_the_chain",
    "tests/test_algorithms.py::test_learns_the_continuous_bandit",
    "tests/test_algorithms.py::test_learns_the_continuous_chain",
    "tests/test_algorithms.py::test_learns_the_discrete_bandit",
    "tests/test_algorithms.py::test_learns_the_two_state_chain",
    "tests/test_algorithms.py::test_normalized_observations_reach_the_networks_standardized",
    "tests/test_algorithms.py::test_sac_with_gsde_learns_and_explores_smoothly",
    "tests/test_algorithms.py::test_save_load_round_trip_and_deterministic_play",
    "tests/test_algorithms.py::test_smoke_on_its_classic_control_task",
    "tests/test_architecture.py::test_architecture_doc_shows_the_layers_of_the_code",
    "tests/test_atari.py::test_local_workers_carry_the_raw_game_scores",
    "tests/test_boundaries.py::test_models_reach_views_only_through_the_one_hook",
    "tests/test_cli.py::test_python_dash_m_and_progress_bar",
    "tests/test_datasets.py::test_from_minari_local_store",
    "tests/test_datasets.py::test_session_records_transitions_with_behaviour_probabilities",
    "tests/test_devices.py::test_every_kind_of_agent_compiles_and_trains_compiled",
    "tests/test_dict_image_masks.py::test_image_vector_and_mask_dict_trains_saves_loads_and_plays",
    "tests/test_dqn_family.py::test_learns_the_two_state_chain",
    "tests/test_dtypes_end_to_end.py::test_local_workers_send_observations_in_their_own_dtype",
    "tests/test_dtypes_end_to_end.py::test_replay_memory_keeps_a_dicts_frames_as_bytes_and_saves_them_so",
    "tests/test_encoders.py::test_every_agent_trains_saves_loads_and_plays_on_images",
    "tests/test_encoders.py::test_minatar_is_a_small_uint8_image_env",
    "tests/test_export.py::test_onnx_policy_acts_like_the_agent",
    "tests/test_export.py::test_recurrent_onnx_policy_acts_like_the_agent_over_episodes",
    "tests/test_external.py::test_action_masks_are_honoured_and_reach_the_agent",
    "tests/test_external.py::test_eval_with_an_eval_env",
    "tests/test_external.py::test_external_session_learns_from_feedback_and_records_episodes",
    "tests/test_external.py::test_max_lag_keeps_a_fast_application_in_step",
    "tests/test_external.py::test_pause_stop_and_feedback_after_the_run",
    "tests/test_external.py::test_save_load_and_resume_an_external_session",
    "tests/test_faults_checkpoint.py::test_a_really_full_disk_while_writing_the_weights_is_an_oserror",
    "tests/test_faults_control.py::test_a_worker_with_several_envs_names_the_one_that_hangs",
    "tests/test_faults_control.py::test_local_worker_hung_env_is_killed_after_step_timeout_naming_worker_and_env",
    "tests/test_faults_control.py::test_local_workers_carry_env_random_streams_like_the_in_process_envs",
    "tests/test_faults_control.py::test_local_workers_without_step_timeout_are_killed_when_stop_gives_up",
    "tests/test_faults_control.py::test_resumed_schedule_counts_against_the_planned_budget",
    "tests/test_faults_control.py::test_script_ending_while_training_stops_the_session_cleanly",
    "tests/test_faults_files.py::test_a_card_never_overwrites_the_users_readme_or_curves",
    "tests/test_faults_inputs.py::test_env_checks_hold_in_local_workers",
    "tests/test_faults_session.py::test_a_hung_call_env_does_not_block_stop_and_the_caller_hears_of_it",
    "tests/test_faults_session.py::test_a_timed_out_call_on_a_local_worker_is_drained_and_named",
    "tests/test_faults_surfaces.py::test_play_human_off_screen_refuses_an_env_that_waits_for_a_key",
    "tests/test_faults_surfaces.py::test_play_human_without_a_display_stops_at_once_saying_so",
    "tests/test_faults_vector.py::test_backend_envpool_with_an_id_envpool_cannot_serve_is_refused_when_the_session_is_made",
    "tests/test_first_paint.py::test_a_session_in_a_kernel_imports_the_dashboard_in_the_background_once",
    "tests/test_lifecycle.py::test_status_goes_from_running_to_paused_and_back_then_stopped",
    "tests/test_lifecycle.py::test_the_three_run_kinds_share_one_lifecycle_object",
    "tests/test_live_edits.py::test_events_and_set_signals_are_saved_and_a_resumed_run_keeps_the_edits",
    "tests/test_live_edits.py::test_local_workers_answer_env_calls_and_edits_take_effect",
    "tests/test_live_edits.py::test_sac_entropy_coefficient_fixed_then_learned_again",
    "tests/test_masks.py::test_dqn_and_ppo_learn_with_masks",
    "tests/test_masks.py::test_masks_in_local_workers",
    "tests/test_masks.py::test_multidiscrete_masks",
    "tests/test_masks.py::test_no_agent_takes_a_masked_action",
    "tests/test_masks.py::test_replay_masks_are_saved_as_bool",
    "tests/test_multiagent.py::test_shared_ppo_learns_and_records_per_agent_and_team_returns",
    "tests/test_multiagent_export.py::test_a_loaded_run_exports_without_its_env",
    "tests/test_multiagent_export.py::test_ippo_writes_one_file_per_group_named_after_its_agents",
    "tests/test_multiagent_workers.py::test_agents_and_sessions_take_a_factory_in_process",
    "tests/test_multiagent_workers.py::test_local_workers_carry_the_parallel_envs_random_streams_like_the_training_thread",
    "tests/test_multidiscrete.py::test_multibinary_learns",
    "tests/test_multidiscrete.py::test_multidiscrete_learns",
    "tests/test_multidiscrete.py::test_save_load_play_and_local_workers",
    "tests/test_namespace.py::test_a_worker_imports_workbench_envs_normally_without_torch",
    "tests/test_namespace.py::test_import_workbench_imports_no_torch_and_a_name_loads_it_on_first_use",
    "tests/test_offline.py::test_bcq_keeps_to_the_actions_the_data_holds",
    "tests/test_offline.py::test_cql_box_acts_with_the_moving_average_of_its_policy",
    "tests/test_offline.py::test_cql_box_starts_by_imitating_the_data_for_bc_steps",
    "tests/test_offline.py::test_cql_box_without_a_policy_average_acts_with_its_policy",
    "tests/test_offline.py::test_offline_agent_trains_in_a_session_then_saves_loads_plays",
    "tests/test_offline.py::test_session_ope_signals_and_seeded_reproducibility",
    "tests/test_ope.py::test_behaviour_model_when_the_dataset_has_no_probabilities",
    "tests/test_ope.py::test_continuous_fqe_and_dr_recover_a_known_value",
    "tests/test_parallel.py::test_a_second_run_starts_fresh_workers",
    "tests/test_parallel.py::test_auto_with_workers_builds_the_chosen_runner",
    "tests/test_parallel.py::test_dqn_trains_with_four_local_workers",
    "tests/test_parallel.py::test_killed_worker_is_restarted_when_asked_and_the_run_continues",
    "tests/test_parallel.py::test_pause_resume_and_stop_reach_every_worker",
    "tests/test_parallel.py::test_ppo_trains_with_four_local_workers",
    "tests/test_parallel.py::test_raising_env_fails_the_session_naming_the_worker",
    "tests/test_parallel.py::test_the_lean_imports_folder_skips_only_the_parser_and_ray_still_imports",
    "tests/test_parallel.py::test_workers_end_with_the_interpreter",
    "tests/test_presets.py::test_pendulum_sac_preset_is_ready_to_train",
    "tests/test_recurrent_ppo.py::test_remembers_the_cue_where_ppo_cannot",
    "tests/test_report.py::test_render_draws_a_picture_per_family",
    "tests/test_report.py::test_the_script_lists_the_presets",
    "tests/test_serve.py::test_a_stalled_request_head_is_closed_within_the_read_timeout",
    "tests/test_serve_batching.py::test_the_batch_size_is_a_signal",
    "tests/test_sac_family.py::test_a_live_learning_rate_edit_reaches_every_optimizer",
    "tests/test_sac_family.py::test_updates_on_pendulum_give_finite_metrics",
    "tests/test_session.py::test_custom_env_with_constructor_arguments_trains",
    "tests/test_sparse.py::test_her_agent_saves_and_reopens_with_its_memory",
    "tests/test_step_contract.py::test_state_restores_every_declared_tensor",
    "tests/test_sweeps.py::test_a_sweep_prunes_a_poor_trial_and_finds_the_best",
    "tests/test_sweeps.py::test_ray_prune_settings_map_to_tune_schedulers",
    "tests/test_sweeps.py::test_stop_then_resume_from_the_sqlite_file",
    "tests/test_sweeps.py::test_workers_sharing_the_budget_lock_never_run_more_trials_than_asked",
    "tests/test_tracking.py::test_wandb_offline_writes_its_run_files",
    "tests/test_ui.py::test_a_finished_run_leaves_a_picture_in_its_output",
    "tests/test_ui.py::test_a_reload_restarts_the_wait_before_rebuilding",
    "tests/test_ui.py::test_dashboard_bounds_the_points_it_sends",
    "tests/test_ui.py::test_default_plots_follow_the_algorithm",
    "tests/test_ui.py::test_first_paint_imports_neither_plotly_nor_nbformat",
    "tests/test_ui.py::test_plot_traces_grow_while_training",
    "tests/test_ui.py::test_save_button_writes_the_run_to_the_path_field",
}


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the tests of ``SLOW_TESTS`` slow (parametrized ones by their name without the parameters), and
    give each test its xdist group for ``--dist loadgroup`` (what `make test`'s second phase uses): every
    browser test in one group, so that one worker drives JupyterLab and Chromium, one page at a time, while
    the other runs the Ray and timing tests file by file (a module's Ray or Jupyter stays on one worker)."""
    for item in items:
        if item.nodeid.split("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        group = "browser" if item.get_closest_marker("browser") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


_MODULE_MARKS = re.compile(r"^pytestmark = (.*)$", re.M)


def pytest_ignore_collect(collection_path, config) -> bool | None:
    """Leave a test file unimported when its module-wide marks (``pytestmark = ...``) include one the ``-m``
    expression excludes (``not ray``, ``not browser``): none of its tests could run, and importing it costs
    its imports (Ray alone about 3 s in each worker). Only for an expression of ``and``-joined terms; any
    other expression collects everything, as pytest does."""
    markexpr = config.getoption("markexpr", "") or ""
    if not markexpr or collection_path.suffix != ".py" or " or " in markexpr or "(" in markexpr:
        return None
    excluded = {term.strip()[len("not ") :] for term in markexpr.split(" and ") if term.strip().startswith("not ")}
    found = _MODULE_MARKS.search(collection_path.read_text())
    if found and excluded & set(re.findall(r"pytest\.mark\.(\w+)\b", found.group(1))):
        return True
    return None
