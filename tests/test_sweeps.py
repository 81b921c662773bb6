"""Sweeps on Optuna: real CartPole trials that prune, stop, resume from their SQLite file, and run in parallel."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

optuna = pytest.importorskip("optuna")

import workbench as wb  # noqa: E402
from workbench.sweeps import parse_space  # noqa: E402


def make_dqn(eps: float = 1.0, lr: float = 1e-3, stuck: bool = False):
    """A DQN that never learns within the budget, so its reward depends on the sampled values alone:
    eps=1.0 plays at random (~22 per CartPole episode); ``stuck`` always pushes left (~9), a poor trial by design."""
    import torch

    agent = wb.DQN(
        "CartPole-v1",
        learning_rate=lr,
        learning_starts=0,
        train_freq=10**6,
        exploration=wb.EpsilonGreedy(0.0 if stuck else eps, 0.0 if stuck else eps, 0.1),
    )
    if stuck:
        with torch.no_grad():
            params = list(agent.q_net.parameters())
            for p in params:
                p.zero_()
            params[-1][0] = 1.0  # Q(left) = 1, Q(right) = 0 whatever the observation
    return agent


FAST = dict(steps=1_200, metric="episode_reward", window=5, report_every=300)


def test_space_rules():
    dists, choices = parse_space(
        {
            "lr": (1e-5, 1e-2),
            "clip": (-1.0, 1.0),
            "n": (1, 8),
            "epochs": [5, 10],
            "arch": [(64, 64), (256,)],
            "gamma": optuna.distributions.FloatDistribution(0.9, 0.99),
        }
    )
    assert dists["lr"].log and not dists["clip"].log
    assert isinstance(dists["n"], optuna.distributions.IntDistribution)
    assert dists["epochs"].choices == (5, 10)
    assert choices["arch"]["(64, 64)"] == (64, 64)
    assert dists["gamma"].high == 0.99
    for bad, match in [
        ({"lr": (1e-2,)}, "exactly two numbers"),
        ({"lr": (1.0, 0.1)}, "low < high"),
        ({"lr": 0.1}, r"space\['lr'\] = 0.1 is not a search range"),
        ({}, "non-empty"),
        ({"n": []}, "empty list"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_space(bad)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="trials must be a positive integer, got 0"):
        wb.sweep(make_dqn, "CartPole-v1", {"eps": [1.0]}, trials=0, storage=tmp_path / "s.db")
    with pytest.raises(ValueError, match="prune='always'"):
        wb.sweep(make_dqn, "CartPole-v1", {"eps": [1.0]}, prune="always", storage=tmp_path / "s.db")
    with pytest.raises(ValueError, match="env instance"):
        import gymnasium as gym

        wb.sweep(make_dqn, gym.make("CartPole-v1"), {"eps": [1.0]}, parallel=2, storage=tmp_path / "s.db")


def test_a_sweep_prunes_a_poor_trial_and_finds_the_best(tmp_path):
    s = wb.sweep(
        make_dqn,
        "CartPole-v1",
        {"stuck": [False, True]},
        trials=2,
        prune="median",
        storage=tmp_path / "s.db",
        start=False,
        **{**FAST, "steps": 8_000},
    )
    s.study.enqueue_trial({"stuck": False})  # a random policy first...
    s.study.enqueue_trial({"stuck": True})  # ...then one that always pushes left, far below its median
    s.pruner = optuna.pruners.MedianPruner(n_startup_trials=1)  # prune from the second trial on
    s.start().wait()
    assert s.status == "finished"
    results = s.results()
    assert [r.state for r in results] == ["complete", "pruned"]
    assert results[0].steps == 8_000 and results[1].steps < 8_000  # the poor one stopped early
    assert results[1].curve and results[1].curve[0][0] % 300 == 0
    assert s.best.params == {"stuck": False} and s.best.value > 15
    table = s.table()
    assert list(table["state"]) == ["complete", "pruned"]
    assert "stuck" in table.columns and "episode_reward" in table.columns
    assert "1 complete, 1 pruned of 2" in repr(s) and "best episode_reward" in repr(s)


def test_stop_then_resume_from_the_sqlite_file(tmp_path):
    db = tmp_path / "study.db"
    s = wb.sweep(
        make_dqn,
        "CartPole-v1",
        {"eps": [1.0, 0.5], "lr": (1e-4, 1e-2)},
        trials=3,
        prune=False,
        storage=db,
        steps=20_000,
        metric="episode_reward",
        report_every=500,
    )
    deadline = time.monotonic() + 60
    while not any(r.state == "running" and r.steps > 0 for r in s.results()) and time.monotonic() < deadline:
        time.sleep(0.1)
    s.pause()
    assert s.status == "paused"
    s.resume()
    s.stop()
    assert s.status == "stopped"
    first = s.results()
    assert [r.state for r in first] == ["interrupted"]
    interrupted_params = first[0].params

    # A new process would do the same: open the file, find the one study, go on until 3 trials ended.
    with sqlite3.connect(db) as con:  # a plain SQLite file
        assert con.execute("select count(*) from trials").fetchone()[0] == 1
    resumed = wb.Sweep(
        make_dqn,
        "CartPole-v1",
        {"eps": [1.0, 0.5], "lr": (1e-4, 1e-2)},
        trials=3,
        prune=False,
        storage=db,
        steps=600,
        metric="episode_reward",
        report_every=300,
    )
    assert resumed.name == s.name
    resumed.run()
    states = [r.state for r in resumed.results()]
    assert states == ["interrupted", "complete", "complete", "complete"]
    assert resumed.results()[1].params == interrupted_params  # the interrupted trial ran again first
    assert resumed.best is not None

    with pytest.raises(ValueError, match="another space"):
        wb.Sweep(make_dqn, "CartPole-v1", {"eps": [1.0]}, storage=db, metric="episode_reward")


def test_every_trial_failing_fails_the_sweep(tmp_path):
    def broken(eps):
        raise ValueError(f"no agent for eps={eps}")

    s = wb.sweep(broken, "CartPole-v1", {"eps": [1.0]}, trials=2, storage=tmp_path / "s.db", **FAST)
    with pytest.raises(RuntimeError, match="every trial .* failed.*no agent for eps=1.0"):
        s.wait()
    assert s.status == "failed"


@pytest.mark.slow
def test_parallel_trials_run_in_worker_processes(tmp_path):
    s = wb.sweep(
        make_dqn,
        "CartPole-v1",
        {"eps": [1.0, 0.0]},
        trials=4,
        parallel=2,
        prune=False,
        storage=tmp_path / "p.db",
        **FAST,
    )
    s.wait(timeout=240)
    assert s.status == "finished"
    results = s.results()
    assert len(results) == 4 and sum(r.state == "complete" for r in results) == 4  # the budget, exactly
    assert all(r.steps >= FAST["steps"] for r in results if r.state == "complete")


def test_cli_sweep_over_an_agent_name(tmp_path, capsys):
    from workbench.cli import main

    db = tmp_path / "cli.db"
    code = main(
        [
            "sweep",
            "dqn",
            "CartPole-v1",
            "--space",
            "learning_rate=1e-4..1e-2",
            "--space",
            "gamma=[0.9, 0.99]",
            "--trials",
            "2",
            "--steps",
            "400",
            "--metric",
            "episode_reward",
            "--prune",
            "none",
            "--storage",
            str(db),
            "--name",
            "cli",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.count(" complete: episode_reward=") == 2 and "best episode_reward=" in out
    # The same command again resumes the finished study: nothing more to run.
    assert (
        main(
            [
                "sweep",
                "dqn",
                "CartPole-v1",
                "--space",
                "learning_rate=1e-4..1e-2",
                "--space",
                "gamma=[0.9, 0.99]",
                "--trials",
                "2",
                "--steps",
                "400",
                "--metric",
                "episode_reward",
                "--storage",
                str(db),
            ]
        )
        == 0
    )
    assert "trial 2" not in capsys.readouterr().out


def test_cli_space_syntax_errors():
    from workbench.sweeps.cli import parse_space_args

    assert parse_space_args(["lr=1e-5..1e-2", "arch=[[64, 64], [128]]", "n=1..8"]) == {
        "lr": (1e-5, 1e-2),
        "arch": [(64, 64), (128,)],
        "n": (1, 8),
    }
    for bad in ["lr", "lr=0.1", "lr=a..b", "lr=[1, 2"]:
        with pytest.raises(SystemExit):
            parse_space_args([bad])


@pytest.mark.slow
@pytest.mark.timing  # two worker processes on two cores: run alone (a third trial it once saw was the budget
# race that the workers' shared lock closes, see test_workers_sharing_the_budget_lock_...)
def test_cli_sweep_over_a_function_in_a_file_in_worker_processes(tmp_path, capsys, monkeypatch):
    from workbench.cli import main

    (tmp_path / "tune.py").write_text(
        "import workbench as wb\n"
        "space = {'learning_rate': (1e-4, 1e-2)}\n"
        "def make_agent(learning_rate):\n"
        "    return wb.DQN('CartPole-v1', learning_rate=learning_rate)\n"
    )
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "sweep",
                "tune.py:make_agent",
                "CartPole-v1",
                "--trials",
                "2",
                "--parallel",
                "2",
                "--steps",
                "400",
                "--metric",
                "episode_reward",
                "--prune",
                "none",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count(" complete: ") == 2 and "finished: best" in out
    assert list((tmp_path / "runs" / "sweeps").glob("*.db"))


def test_the_notebook_view_fills_in_the_table_curves_and_importances(tmp_path):
    pytest.importorskip("ipywidgets")
    gate = threading.Event()

    def gated_dqn(eps: float, lr: float):  # holds the first trial until the running view has been checked
        gate.wait(60)
        return make_dqn(eps, lr)

    s = wb.sweep(
        gated_dqn,
        "CartPole-v1",
        {"eps": (0.05, 1.0), "lr": (1e-4, 1e-2)},
        trials=4,
        prune=False,
        storage=tmp_path / "v.db",
        **{**FAST, "steps": 600},
    )
    view = s.dashboard()
    try:
        assert s.status == "running"
        view.refresh()
        assert view.buttons["pause"].disabled is False and view.buttons["start"].disabled is True
        gate.set()
        s.wait()
        view.refresh()
        assert view.table.value.count("<tr") == 5  # header and four trials
        assert "complete" in view.table.value and "finished" in view.status.value
        assert len(view.curves.data) == 4 and all(len(x) for x, _ in view.curves.data)
        assert max(t["line"]["width"] for t in view.curves.traces) == 3  # the best trial, bold
        assert set(view.importance.plot_layout["yaxis"]["ticktext"]) == {"eps", "lr"}
        assert len(view.importance.data[0][0]) == 2  # a bar per parameter
        assert view.buttons["start"].disabled is False and view.buttons["stop"].disabled is True
    finally:
        view.close()
    assert not view.timer_alive


@pytest.mark.slow
@pytest.mark.ray
def test_ray_tune_backend_runs_trials_into_the_same_study(tmp_path, monkeypatch):
    pytest.importorskip("ray.tune")
    monkeypatch.chdir(tmp_path)  # Tune writes its own files under runs/sweeps/ray

    def make_agent(eps, stuck):  # defined here and self-contained: sent to Ray's workers by value
        import workbench

        return workbench.DQN(
            "CartPole-v1", learning_starts=0, train_freq=10**6, exploration=workbench.EpsilonGreedy(eps, eps, 0.1)
        )

    s = wb.sweep(
        make_agent,
        "CartPole-v1",
        {"eps": (0.1, 1.0), "stuck": [False, True]},
        trials=3,
        parallel=2,
        backend="ray",
        prune=False,
        storage=tmp_path / "ray.db",
        **{**FAST, "steps": 900},
    )
    with pytest.raises(RuntimeError, match="cannot pause"):
        s.pause()
    s.wait(timeout=300)
    assert s.status == "finished", s.error
    results = s.results()
    assert [r.state for r in results] == ["complete"] * 3
    for r in results:  # reported at env steps on the grid, as the local backend does
        assert r.steps == 900 and r.curve and all(st % 300 == 0 for st, _ in r.curve), r
    assert s.best is not None
    # The same study resumes on the local backend: nothing left to run.
    again = wb.Sweep(
        make_agent,
        "CartPole-v1",
        {"eps": (0.1, 1.0), "stuck": [False, True]},
        trials=3,
        storage=tmp_path / "ray.db",
        **{**FAST, "steps": 900},
    )
    again.run()
    assert len(again.results()) == 3


def test_ray_prune_settings_map_to_tune_schedulers(tmp_path):
    pytest.importorskip("ray.tune")
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    from workbench.sweeps.ray_tune import _scheduler

    def build(prune):
        return wb.Sweep(
            make_dqn,
            "CartPole-v1",
            {"eps": [1.0]},
            backend="ray",
            prune=prune,
            storage=tmp_path / "r.db",
            name=f"r{prune}",
            **FAST,
        )

    assert isinstance(_scheduler(build(True)), MedianStoppingRule)
    assert isinstance(_scheduler(build("asha")), ASHAScheduler)
    assert isinstance(_scheduler(build(False)), FIFOScheduler)
    with pytest.raises(ValueError, match="does not work with backend='ray'"):
        build(optuna.pruners.MedianPruner())


def test_a_ray_sweep_starts_its_private_ray_as_a_session_does(tmp_path, monkeypatch):
    """Loopback-only sockets and lean imports (``_init_private_ray``) for a Ray the sweep starts;
    a ``ray_address`` is joined with a plain ``ray.init``."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.tune")
    import workbench.sweeps.ray_tune as sweeps_ray

    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process")
    calls = []

    class Started(Exception):
        pass

    def record(kind):
        def init(*args):
            calls.append((kind, args[-1] if args else None))
            raise Started

        return init

    monkeypatch.setattr(sweeps_ray, "_init_private_ray", lambda ray, options: record("private")(options))
    monkeypatch.setattr(ray, "init", lambda **options: record("join")(options))
    for address in (None, "10.0.0.5:6379"):
        sweep = wb.Sweep(
            make_dqn,
            "CartPole-v1",
            {"eps": [1.0]},
            backend="ray",
            prune=False,
            ray_address=address,
            storage=tmp_path / "p.db",
            name=f"p{address}",
            **FAST,
        )
        with pytest.raises(Started):
            sweeps_ray.run_tune(sweep, threading.Event())
    (private, options), (join, joined) = calls
    assert private == "private" and options["_node_ip_address"] == "127.0.0.1" and "address" not in options
    assert join == "join" and joined["address"] == "10.0.0.5:6379"


def test_each_trial_gets_its_own_sinks(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    s = wb.sweep(
        make_dqn,
        "CartPole-v1",
        {"eps": [1.0, 0.5]},
        trials=2,
        prune=False,
        storage=tmp_path / "t.db",
        sinks=lambda n, p: [wb.TensorBoard(tmp_path / "tb", run_name=f"trial-{n}-eps{p['eps']}")],
        **{**FAST, "steps": 400},
    )
    s.wait()
    runs = sorted(d.name for d in (tmp_path / "tb").iterdir())
    assert [r.split("-eps")[0] for r in runs] == ["trial-0", "trial-1"]
    acc = EventAccumulator(str(tmp_path / "tb" / runs[0]))
    acc.Reload()
    assert acc.Scalars("episode_reward")
    with pytest.raises(TypeError, match="each trial gets its own"):
        wb.Sweep(make_dqn, "CartPole-v1", {"eps": [1.0]}, storage=tmp_path / "u.db", sinks=[wb.TensorBoard()])


def test_cli_sweep_that_fails_says_why(tmp_path, capsys):
    from workbench.cli import main

    code = main(
        [
            "sweep",
            "dqn",
            "CartPole-v1",
            "--space",
            "no_such_setting=[1, 2]",
            "--trials",
            "1",
            "--steps",
            "100",
            "--metric",
            "episode_reward",
            "--storage",
            str(tmp_path / "f.db"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "every trial" in err and "no_such_setting" in err


def test_workers_sharing_the_budget_lock_never_run_more_trials_than_asked(tmp_path, monkeypatch):
    # Two workers that count the budget at the same moment must not both ask for a trial: counting and
    # asking are one step under the lock the worker processes share (a thread lock stands in for it here).
    import importlib

    sweep_module = importlib.import_module("workbench.sweeps.sweep")  # the module, not wb.sweep the function
    s = wb.Sweep(make_dqn, "CartPole-v1", {"eps": [1.0, 0.0]}, trials=1, storage=tmp_path / "b.db", **FAST)
    counted = sweep_module._counted

    def slow_count(study):
        n = counted(study)
        time.sleep(0.3)  # both workers count 0 before either asks, without the lock
        return n

    monkeypatch.setattr(sweep_module, "_counted", slow_count)
    monkeypatch.setattr(sweep_module, "_run_trial", lambda *args, **kwargs: 1.0)

    def run(lock):
        workers = [
            threading.Thread(target=sweep_module._run_trials, args=(s._spec(), s._stop, s._pause, i, lock))
            for i in range(2)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        return len(s.study.get_trials(deepcopy=False))

    assert run(threading.Lock()) == 1
    s.trials = 2  # the race shows without the lock: both count 1 and ask, 3 trials for a budget of 2
    assert run(None) == 3
