"""benchmarks/report.py: the interquartile mean and the stratified bootstrap (rliable's method), resuming (a
finished run is never redone) and the page rendered from result files only, on fake results without training."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_iqm_is_the_mean_of_the_middle_half(report):
    assert report.iqm([1, 2, 3, 4]) == pytest.approx(2.5)  # int(0.25 * 4) = 1 cut from each end
    assert report.iqm([0, 10, 10, 10, 10, 10, 10, 1000]) == pytest.approx(10.0)  # the outliers are cut
    assert report.iqm([7.0]) == 7.0
    assert report.iqm([1, 2, 3]) == pytest.approx(2.0)  # int(0.75) = 0: nothing cut, the plain mean
    # scipy.stats.trim_mean(x, 0.25), what rliable's aggregate_iqm calls
    x = np.random.default_rng(1).normal(size=37)
    s = np.sort(x)
    assert report.iqm(x) == pytest.approx(s[9:28].mean())
    with pytest.raises(ValueError, match="at least one"):
        report.iqm([])


def test_bootstrap_interval_covers_the_iqm_and_is_reproducible(report):
    scores = np.array([500, 500, 480, 120, 500, 500, 300, 500, 500, 450], dtype=float)
    low, high = report.stratified_bootstrap_ci(scores, seed=3)
    assert low <= report.iqm(scores) <= high
    assert (low, high) == report.stratified_bootstrap_ci(scores, seed=3)
    assert high <= 500 and low >= 120
    # identical scores: no spread
    assert report.stratified_bootstrap_ci([5.0] * 6) == (5.0, 5.0)


def test_bootstrap_resamples_within_each_task(report):
    """Stratified: every replicate keeps each task's runs in that task. With a statistic that reads one
    column, the other task's scores never enter its interval."""
    scores = np.column_stack([np.arange(10.0), 1000 + np.arange(10.0)])
    low, high = report.stratified_bootstrap_ci(scores, lambda m: float(m[:, 0].mean()), reps=500)
    assert 0 <= low <= high <= 9
    low, high = report.stratified_bootstrap_ci(scores, lambda m: float(m[:, 1].min()), reps=500)
    assert low >= 1000
    # the interval narrows as runs are added (the same spread)
    few = report.stratified_bootstrap_ci(np.tile([0.0, 1.0], 3), lambda m: float(m.mean()), reps=2000)
    many = report.stratified_bootstrap_ci(np.tile([0.0, 1.0], 50), lambda m: float(m.mean()), reps=2000)
    assert many[1] - many[0] < few[1] - few[0]
    with pytest.raises(ValueError, match="confidence"):
        report.stratified_bootstrap_ci([1.0, 2.0], confidence=1.5)


def _fake(report, key, score: float) -> dict:
    return {
        "env_id": key.env_id,
        "agent": key.agent,
        "side": key.side,
        "seed": key.seed,
        "steps": 1000,
        "wall_s": 2.0,
        "cpu_s": 1.5,
        "final_eval": [score] * 20,
        "final_mean": score,
        "curve": {"steps": [500, 1000], "returns": [score / 2, score]},
        "last_training_episodes": [score],
        "settings": {},
    }


class _Done:
    """A stand-in for a finished process."""

    returncode = 0

    def poll(self) -> int:
        return 0


def test_run_all_never_redoes_a_finished_run(report, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    keys = report.planned([("CartPole-v1", "dqn")], range(3), sb3=True)
    assert [(k.side, k.seed) for k in keys] == [(s, n) for n in range(3) for s in ("workbench", "sb3")]
    launched = []

    def launch(key):  # "trains" by writing the result file, as `report.py one` does
        launched.append(key)
        key.path.write_text(json.dumps(_fake(report, key, 500.0)))
        return _Done()

    keys[0].path.write_text(json.dumps(_fake(report, keys[0], 500.0)))  # finished before this call
    assert report.pending(keys) == keys[1:]
    assert report.run_all(keys, parallel=2, launch=launch) == []
    assert launched == keys[1:]
    launched.clear()
    assert report.run_all(keys, launch=launch) == []  # everything done: nothing runs again
    assert launched == []


def test_a_failed_run_writes_nothing_and_is_tried_again(report, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    keys = report.planned([("CartPole-v1", "ppo")], [0], sb3=False)

    class Failed(_Done):
        returncode = 1

    assert report.run_all(keys, launch=lambda k: Failed()) == keys
    assert report.pending(keys) == keys


def test_render_reads_the_result_files_only(report, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    for seed, (ours, theirs) in enumerate([(500, 500), (500, 480), (120, 500), (500, 500), (500, 500)]):
        for side, score in (("workbench", ours), ("sb3", theirs)):
            key = report.RunKey("CartPole-v1", "dqn", side, seed)
            key.path.write_text(json.dumps(_fake(report, key, float(score))))
    key = report.RunKey("Acrobot-v1", "dqn", "workbench", 0)
    key.path.write_text(json.dumps(_fake(report, key, -300.0)))  # far below the zoo's -76.6
    (tmp_path / "bench_check.json").write_text(json.dumps({"rows": {}}))  # bench_check's thresholds: not a run
    # self_play.py's results share the name's pattern, but are no report runs.
    (tmp_path / "self_play__tictactoe__60000__seed0.json").write_text(json.dumps({"game": "tictactoe", "seed": 0}))
    doc = tmp_path / "benchmarks.md"
    page = report.render(tmp_path, doc, pictures=False)
    assert doc.read_text() == page
    lines = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in page.splitlines() if "|" in line}
    ours = lines["CartPole-v1", "DQN", "workbench"]
    assert "500, 500, 120, 500, 500" in ours and "| 500 |" in ours  # every seed, and the published figure
    assert "▼" not in ours
    assert "▼" in lines["Acrobot-v1", "DQN", "workbench"]  # its interval lies below the published score
    assert "SB3" in {k[2] for k in lines}


def _memory_run(task: str, method: str, seed: int, ret: float, cpu_s: float) -> dict:
    config = {"n_envs": 8, "n_steps": 32, "n_epochs": 20, "memory_length": 32, "memory_layers": 1}
    config |= {"attention_heads": 4, "lstm_hidden_size": 64}
    return {
        "task": task, "method": method, "seed": seed, "steps": 1000, "return": ret, "wall_s": 2 * cpu_s,
        "cpu_s": cpu_s, "steps_per_s": 1000 / (2 * cpu_s), "load_at_start": [1.5, 1.0, 0.5],
        "settings": {"episodes": 20, "config": config}, "versions": {"commit": "abc1234"},
        "machine": {"platform": "Linux", "cpus": 2}, "finished": "2026-12-06T21:00:00+00:00",
    }  # fmt: skip


def test_render_adds_the_memory_table_from_its_stored_runs(report, tmp_path):
    key = report.RunKey("CartPole-v1", "ppo", "workbench", 0)
    key_path = tmp_path / key.path.name
    key_path.write_text(json.dumps(_fake(report, key, 500.0)))
    runs = [
        _memory_run(task, method, seed, ret + 0.01 * seed, cpu)
        for seed in range(3)
        for task in ("RepeatPreviousEasy", "CountRecallEasy")
        for method, ret, cpu in (("lstm", 0.2, 10.0), ("gtrxl", 0.9, 15.0))
    ]
    (tmp_path / "memory.json").write_text(json.dumps({"runs": runs}))
    page = report.render(tmp_path, tmp_path / "benchmarks.md", pictures=False)
    flat = " ".join(page.split())  # the caption and the goals are wrapped
    assert "## Memory" in page and "**1,000 env steps per run**" in flat
    assert "| RepeatPreviousEasy | gtrxl | 3 | 0.910 ± 0.025 | 0.900, 0.910, 0.920 |" in page
    assert "2 of the 2 tasks here whose horizon exceeds 20 steps, met" in flat
    assert "(median over tasks): 1.50x, met" in flat


def test_render_draws_a_picture_per_family(report, tmp_path):
    pytest.importorskip("matplotlib")
    for env_id in ("CartPole-v1", "LunarLander-v3"):
        for seed in range(2):
            key = report.RunKey(env_id, "ppo", "workbench", seed)
            (tmp_path / key.path.name).write_text(json.dumps(_fake(report, key, 100.0 + seed)))
    page = report.render(tmp_path, tmp_path / "benchmarks.md")
    assert (tmp_path / "benchmarks-classic.png").stat().st_size > 1000
    assert (tmp_path / "benchmarks-box2d.png").exists()
    assert "benchmarks-classic.png" in page


def test_unknown_rows_are_refused_naming_the_presets(report):
    with pytest.raises(SystemExit, match="CartPole-v1:dqn"):
        report.parse_rows(["CartPole-v1:nope"])
    assert report.parse_rows(["CartPole-v1:DQN"]) == [("CartPole-v1", "dqn")]


def test_the_script_lists_the_presets():
    """`report.py list` runs as a script (its imports work outside the test process)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "list"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "CartPole-v1:dqn" in out.stdout


def test_crossq_rows_run_sb3_contribs_crossq_at_the_presets_settings(report):
    """``--sb3`` on a CrossQ row builds sb3-contrib's CrossQ with the agent's actor and critic sizes, delay and
    batch renormalization, and without a target network's tau (it has none)."""
    pytest.importorskip("sb3_contrib")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sample_efficiency import sb3_algorithm, sb3_kwargs

    import workbench as wb

    assert "crossq" in report.SB3_AGENTS
    agent = wb.preset("Pendulum-v1", "crossq", seed=0).agent
    assert sb3_kwargs(agent)[0]["policy_delay"] == 2  # the preset's (crossq.yml), not sb3-contrib's default 3
    # Actor and critics of different sizes, so that swapping them fails.
    agent = wb.CrossQ(
        "Pendulum-v1", net_arch=(64, 32), critic_net_arch=(128, 96), policy_delay=4, renorm_warmup_steps=7
    )
    kw, n_envs, normalize = sb3_kwargs(agent)
    assert (n_envs, normalize) == (1, False) and "tau" not in kw
    cls, policy = sb3_algorithm("crossq")
    model = cls(policy, "Pendulum-v1", seed=0, **kw)
    c = agent.config
    assert model.policy_delay == c.policy_delay and model.batch_size == c.batch_size
    assert model.learning_starts == c.learning_starts and model.gamma == c.gamma
    widths = [m.out_features for m in model.policy.critic.q_networks[0] if isinstance(m, torch.nn.Linear)]
    assert tuple(widths[:-1]) == c.critic_net_arch and len(model.policy.critic.q_networks) == c.n_critics
    actor = [m.out_features for m in model.policy.actor.latent_pi if isinstance(m, torch.nn.Linear)]
    assert tuple(actor) == c.net_arch
    renorm = model.policy.actor.latent_pi[0]
    assert (renorm.momentum, renorm.eps, renorm.warmup_steps) == (
        c.batch_norm_momentum,
        c.batch_norm_eps,
        c.renorm_warmup_steps,
    )


def test_render_holds_the_newer_agents_against_sacs_return_at_100k(report, tmp_path):
    def run(agent: str, seed: int, returns: list[float]) -> dict:
        key = report.RunKey("HalfCheetah-v5", agent, "workbench", seed)
        result = _fake(report, key, returns[-1])
        steps = [50_000 * (i + 1) for i in range(len(returns))]  # 50k, 100k, 150k, 200k
        return result | {"steps": steps[-1], "curve": {"steps": steps, "returns": returns}}

    sac = [[100, 1000, 1500, 2000], [200, 1200, 1600, 2100], [150, 1100, 1400, 1900]]
    crossq = [[1300, 2000, 2500, 3000], [900, 1500, 2600, 3100], [500, 800, 1000, 1050]]  # seed 2 never reaches
    for seed in range(3):
        key = report.RunKey("HalfCheetah-v5", "sac", "workbench", seed)
        (tmp_path / key.path.name).write_text(json.dumps(run("sac", seed, sac[seed])))
        key = report.RunKey("HalfCheetah-v5", "crossq", "workbench", seed)
        (tmp_path / key.path.name).write_text(json.dumps(run("crossq", seed, crossq[seed])))
    page = report.render(tmp_path, tmp_path / "benchmarks.md", pictures=False)
    section = page.split("## Sample efficiency against SAC")[1]
    rows = {line.split("|")[3].strip(): line for line in section.splitlines() if line.startswith("| HalfCheetah")}
    # SAC's return at 100k: the IQM of 1000, 1200, 1100 (three seeds: nothing cut) = 1100.
    assert "| 1100 |" in rows["SAC"] and "| 1100 |" in rows["CrossQ"]
    assert rows["SAC"].rstrip().endswith("| 100,000 | 150,000, 100,000, 100,000 |")  # seed 0 at 150k
    # A seed that never reaches it counts as the latest: the median of 50k, 100k and never is 100k.
    assert rows["CrossQ"].rstrip().endswith("| 100,000 | 50,000, 100,000, not reached |")
    # Two of three never reaching it: not reached. A run shorter than 100k is left out (it could not tell).
    crossq_never = [[100, 200, 300, 400], [100, 200, 300, 400], [900, 1500, 2600, 3100]]
    for seed in range(3):
        key = report.RunKey("HalfCheetah-v5", "crossq", "workbench", seed)
        (tmp_path / key.path.name).write_text(json.dumps(run("crossq", seed, crossq_never[seed])))
    short = run("crossq", 3, [1200])  # 50k steps only
    (tmp_path / report.RunKey("HalfCheetah-v5", "crossq", "workbench", 3).path.name).write_text(json.dumps(short))
    page = report.render(tmp_path, tmp_path / "benchmarks.md", pictures=False)
    line = next(x for x in page.splitlines() if x.startswith("| HalfCheetah-v5 | 1100 | CrossQ"))
    assert line.rstrip().endswith("| 0-2 | not reached | not reached, not reached, 100,000 |")
    # No SAC run reaching 100k: no section.
    for path in tmp_path.glob("HalfCheetah-v5__sac__*"):
        path.unlink()
    assert "Sample efficiency" not in report.render(tmp_path, tmp_path / "benchmarks.md", pictures=False)
