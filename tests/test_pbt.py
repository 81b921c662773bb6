"""Population-based training on live sessions: arguments checked at the call, exploit through the
checkpoint format, explore through session.set, a live Population that pauses, stops and resumes
from its directory, its dashboard and `workbench pbt`. Tiny PPOs on CartPole, a few hundred steps."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch
from conftest import wait_until

import workbench as wb
from workbench.sweeps.pbt import _parse_space, load_state


def tiny_ppo(**hp):
    return wb.PPO(
        "CartPole-v1", **{"n_steps": 64, "batch_size": 64, "n_epochs": 1, "net_arch": (8,), "n_envs": 1, **hp}
    )


SPACE = {"learning_rate": (1e-4, 1e-2), "ent_coef": (0.0, 0.05)}


def rigged(session):
    """A score that ranks the members by index (member 0 best), whatever they learn: logged after every
    episode from stop_when (which runs on each member's training thread), read as the metric."""
    session.log("rigged", -float(session.seed))
    return False


RIGGED = dict(metric="rigged", window=1, session_kwargs={"stop_when": rigged})


# -- arguments, checked at the call -------------------------------------------------------------


def test_a_field_that_is_not_live_is_refused_by_name_listing_the_editable_ones(tmp_path):
    for make in (wb.PPO, tiny_ppo):
        with pytest.raises(
            wb.ArgumentError, match=r"'n_steps', which PPO cannot change while it trains.*learning_rate"
        ) as e:
            wb.pbt(
                make,
                "CartPole-v1",
                population=2,
                space={"learning_rate": (1e-4, 1e-3), "n_steps": [32, 64]},
                steps=256,
                interval=128,
                directory=tmp_path / "p",
                start=False,
            )
        assert "ent_coef" in str(e.value) and "clip_range" in str(e.value)

    def fixes_net_arch(**hp):  # the usual make_agent: a searched name it also fixes is given twice
        return wb.PPO("CartPole-v1", net_arch=(8,), n_steps=64, **hp)

    with pytest.raises(wb.ArgumentError, match=r"'net_arch', which PPO cannot change while it trains"):
        wb.pbt(
            fixes_net_arch,
            "CartPole-v1",
            population=2,
            space={"net_arch": [(8,), (16,)]},
            steps=256,
            interval=128,
            directory=tmp_path / "p",
            start=False,
        )
    with pytest.raises(wb.ArgumentError, match=r"'learning_rte'.*Did you mean learning_rate"):
        wb.pbt(
            wb.PPO,
            "CartPole-v1",
            population=2,
            space={"learning_rte": (1e-4, 1e-3)},
            steps=256,
            interval=128,
            directory=tmp_path / "p",
            start=False,
        )
    assert not (tmp_path / "p").exists()  # nothing was written or started


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"population": 1}, "at least 2 members"),
        ({"quantile": 0.75}, r"quantile=0.75.*\(0, 0.5\]"),
        ({"perturb": (0.8,)}, "two positive factors"),
        ({"perturb": (-1.0, 1.2)}, "two positive factors"),
        ({"resample_p": 1.5}, "probability"),
        ({"backend": "slurm"}, "backend='slurm'"),
        ({"interval": 512}, "interval=512 > steps=256"),
        ({"parallel": 5}, "parallel=5"),
        ({"space": {}}, "non-empty dict"),
        ({"space": {"learning_rate": (1e-2, 1e-4)}}, "low < high"),
        ({"space": {"learning_rate": 1e-3}}, "not a search range"),
        ({"metric": ""}, "metric=''"),
    ],
)
def test_bad_arguments_are_named(tmp_path, kwargs, match):
    args = dict(
        population=2,
        space={"learning_rate": (1e-4, 1e-2)},
        steps=256,
        interval=128,
        directory=tmp_path / "p",
        start=False,
    )
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        wb.pbt(tiny_ppo, "CartPole-v1", **args)


def test_explore_moves_values_within_the_space():
    dims = _parse_space({"lr": (1e-4, 1e-2), "coef": (0.0, 0.05), "n": (1, 20), "arch": [1, 2, 3]})
    rng = np.random.default_rng(0)
    assert dims["lr"].log and not dims["coef"].log
    seen = sorted({round(dims["lr"].perturb(1e-3, (0.8, 1.2), rng), 12) for _ in range(20)})
    assert seen == [8e-4, 1.2e-3]
    assert dims["lr"].perturb(1e-2, (0.8, 1.2), rng) <= 1e-2  # kept in the range
    assert {dims["n"].perturb(2, (0.8, 1.2), rng) for _ in range(20)} == {1, 3}  # an integer moves by one at least
    assert {dims["arch"].perturb(2, (0.8, 1.2), rng) for _ in range(20)} == {1, 3}  # a choice moves to a neighbour
    assert dims["arch"].perturb(3, (0.8, 1.2), rng) in (2, 3)
    assert {round(dims["coef"].perturb(0.0, (0.8, 1.2), rng), 9) for _ in range(20)} == {0.0, 0.005}  # off zero
    for _ in range(20):
        assert 1e-4 <= dims["lr"].sample(rng) <= 1e-2 and dims["n"].sample(rng) in range(1, 21)


# -- exploit: the checkpoint format, in place ---------------------------------------------------------


def test_exploit_copies_weights_optimizer_and_normalizers_and_keeps_the_counters(tmp_path):
    donor = wb.Session(tiny_ppo(normalize_observations=True), seed=1).run(192)
    taker = wb.Session(tiny_ppo(normalize_observations=True, learning_rate=1e-2), seed=2).run(128)
    donor.save(tmp_path / "donor")
    assert sorted(os.listdir(tmp_path / "donor")) == ["meta.json", "signals.csv", "weights.safetensors"]
    steps, events = taker.steps, list(taker.events)
    load_state(taker.agent, tmp_path / "donor")
    mine, theirs = taker.agent.state().tensors, donor.agent.state().tensors
    for key, value in theirs.items():
        if key.startswith(("net/", "optim/")):
            assert torch.equal(mine[key], value), key
    assert any(k.startswith("net/obs_normalizer/") for k in theirs)  # the normalizer's statistics came too
    assert any(k.startswith("optim/") for k in theirs)  # and the optimizer's moments
    assert taker.steps == steps == 128 and taker.events == events  # its own clock and record
    assert not torch.equal(taker.agent.generator.get_state(), donor.agent.generator.get_state())
    taker.run(64)  # and it trains on from there


def test_exploit_copies_the_replay_memory_when_asked(tmp_path):
    def dqn():
        return wb.DQN("CartPole-v1", learning_starts=32, buffer_size=500, net_arch=(8,))

    donor, taker = wb.Session(dqn(), seed=1).run(100), wb.Session(dqn(), seed=2).run(40)
    donor.save(tmp_path / "donor", memory=True)
    load_state(taker.agent, tmp_path / "donor", memory=False)
    assert len(taker.agent.memory) == 40
    load_state(taker.agent, tmp_path / "donor", memory=True)
    assert len(taker.agent.memory) == 100
    assert np.array_equal(taker.agent.memory_arrays()["actions"], donor.agent.memory_arrays()["actions"])


def test_exploit_by_hand_records_who_copied_whom_and_explores_through_set(tmp_path):
    p = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=2,
        space={**SPACE, "n_epochs": [1, 2, 3]},
        steps=256,
        interval=128,
        directory=tmp_path / "p",
        start=False,
        seed=3,
    )
    for s in p.members:
        s.run(64)
    before = p.values()[1]
    applied = p.exploit(1, 0)
    assert [e.kind for e in p.events] == ["exploit", "explore"]
    exploit, explore = p.events
    assert (exploit.member, exploit.source, exploit.step) == (1, 0, 64)
    assert explore.member == 1 and set(explore.changes) == {"learning_rate", "ent_coef", "n_epochs"}
    for name, (old, new) in explore.changes.items():
        assert old == pytest.approx(before[name]) and new == pytest.approx(applied[name])
        assert getattr(p.members[1].agent.config, name) == pytest.approx(new)
    # explore went through session.set: the member's own record and set/ signals show it
    assert {e.name for e in p.members[1].events if e.kind == "set"} == {"learning_rate", "ent_coef", "n_epochs"}
    assert "set/learning_rate" in p.members[1].signals
    donor = p.members[0].agent.state().tensors
    taker = p.members[1].agent.state().tensors
    assert all(torch.equal(taker[k], v) for k, v in donor.items() if k.startswith("net/"))
    assert p.lineage() == [[], [(64, 0)]]
    with pytest.raises(ValueError, match="cannot copy itself"):
        p.exploit(0, 0)
    p.members[1].start(10_000)
    try:
        with pytest.raises(RuntimeError, match=r"member 1 is training: pause_member\(1\) first"):
            p.exploit(1, 0)
    finally:
        p.members[1].stop()


# -- the live population ----------------------------------------------------------------------------


def test_population_runs_exploits_the_bottom_and_saves_its_state(tmp_path):
    p = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=3,
        space=SPACE,
        # Three boundaries before the last (64, 128, 192): a member ranks only once every member has a score,
        # and under load the bottom one can reach its first boundary before the others reach theirs.
        steps=256,
        interval=64,
        quantile=0.34,
        directory=tmp_path / "p",
        seed=0,
        **RIGGED,
    )
    assert p.status in ("running", "finished")
    assert p.wait(timeout=120) and p.status == "finished"
    assert all(isinstance(s, wb.Session) and s.steps >= 256 for s in p.members)
    assert p.best is p.members[0] and p.best_score == 0.0 and p.best_index == 0
    exploits = [e for e in p.events if e.kind == "exploit"]
    assert exploits, "the bottom member never copied the top one"
    assert all(e.member == 2 and e.source == 0 for e in exploits)  # bottom third copies top third, no one else
    explores = [e for e in p.events if e.kind == "explore"]
    assert len(explores) == len(exploits) and all(set(e.changes) == set(SPACE) for e in explores)
    assert [len(c) for c in p.curves()] == [4, 4, 4]
    table = p.table()
    assert list(table.columns[:3]) == ["status", "steps", "rigged"] and set(SPACE) <= set(table.columns)
    state = json.loads((tmp_path / "p" / "population.json").read_text())
    assert len(state["members"]) == 3 and len(state["events"]) == len(p.events)
    for i in range(3):
        assert wb.load(tmp_path / "p" / f"member-{i}").algorithm == "PPO"  # each member's checkpoint
    assert "finished" in repr(p) and "best rigged=0" in repr(p)


def test_eval_reward_is_scored_by_evaluating_each_member(tmp_path):
    p = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=2,
        space=SPACE,
        steps=128,
        interval=64,
        eval_episodes=1,
        directory=tmp_path / "p",
    )
    p.wait(timeout=120)
    for s, curve in zip(p.members, p.curves(), strict=True):
        assert [step for step, _ in curve] == [64, 128]
        assert list(s.signals["eval_reward"].values) == [v for _, v in curve]


def test_pause_resume_stop_and_resume_from_its_directory(tmp_path):
    p = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=2,
        space=SPACE,
        steps=2_048,
        interval=128,
        directory=tmp_path / "p",
        **RIGGED,
    )
    wait_until(lambda: all(s.steps > 0 for s in p.members))
    p.pause()
    assert p.status == "paused" and all(s.status != "running" for s in p.members)
    p.resume()
    assert p.status == "running"
    p.stop()
    assert p.status == "stopped" and not p.is_alive
    steps = [s.steps for s in p.members]
    assert all(0 < n < 2_048 for n in steps), steps
    events = len(p.events)
    # a later process: the same call (or wb.Population.open) picks the population up where it was saved
    q = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=2,
        space=SPACE,
        steps=2_048,
        interval=128,
        directory=tmp_path / "p",
        start=False,
        **RIGGED,
    )
    assert [s.steps for s in q.members] == steps and len(q.events) == events
    assert q.curves() == p.curves()
    for mine, theirs in zip(q.values(), p.values(), strict=True):
        assert mine == pytest.approx(theirs)
    r = wb.Population.open(tmp_path / "p", session_kwargs={"stop_when": rigged})
    assert r.metric == "rigged" and [s.steps for s in r.members] == steps
    with pytest.raises(ValueError, match="other settings"):
        wb.pbt(
            tiny_ppo,
            "CartPole-v1",
            population=3,
            space=SPACE,
            steps=2_048,
            interval=128,
            directory=tmp_path / "p",
            start=False,
        )


def test_resumed_population_finishes(tmp_path):
    p = wb.pbt(
        tiny_ppo, "CartPole-v1", population=2, space=SPACE, steps=128, interval=64, directory=tmp_path / "p", **RIGGED
    )
    p.stop()
    q = wb.Population.open(tmp_path / "p", session_kwargs={"stop_when": rigged}).start()
    q.wait(timeout=120)
    assert q.status == "finished" and all(s.steps >= 128 for s in q.members)


def test_one_member_paused_and_one_stopped_by_hand(tmp_path):
    p = wb.pbt(
        tiny_ppo, "CartPole-v1", population=3, space=SPACE, steps=256, interval=64, directory=tmp_path / "p", **RIGGED
    )
    p.pause_member(1)
    p.stop_member(2)
    assert p.member_status(2) == "retired"
    wait_until(lambda: p.members[0].steps >= 256)
    assert p.members[0].steps >= 256 and p.member_status(1) == "paused" and p.is_alive
    assert p.members[1].steps < 256
    p.resume_member(1)
    p.wait(timeout=120)
    assert p.members[1].steps >= 256 and p.members[2].steps < 256
    assert all(2 not in (e.member, e.source) for e in p.events)  # a retired member is left alone
    state = json.loads((tmp_path / "p" / "population.json").read_text())
    assert state["members"][2]["retired"] is True


@pytest.mark.slow
def test_pbt_is_public_and_loads_without_optuna():
    # (that `import workbench` imports no workbench.sweeps is tests/test_namespace.py's check)
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['optuna'] = None; import workbench as wb; "
        "print(wb.pbt.__name__, wb.Population.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd())
    assert out.stdout.strip() == "pbt Population", out.stderr
    assert wb.pbt.__module__ == "workbench.sweeps.pbt" and wb.Population.__name__ == "Population"
    assert "pbt" in wb.__all__ and "Population" in wb.__all__


# -- the dashboard ------------------------------------------------------------------------------------


def test_the_dashboard_draws_curves_lineage_and_rows_and_its_buttons_steer_members(tmp_path):
    pytest.importorskip("ipywidgets")
    import workbench.ui.population_view  # noqa: F401  (imported before the population runs: plotly loads slowly)

    p = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=3,
        space=SPACE,
        steps=320,
        interval=64,
        quantile=0.34,
        directory=tmp_path / "p",
        start=False,
        **RIGGED,
    )
    view = p.dashboard()
    try:
        assert len(view.rows) == 3 and view.buttons["pause"].disabled and not view.buttons["start"].disabled
        view.rows[1].pause.click()  # member 1's own Pause button
        assert p.member_status(1) == "paused" and view.rows[1].pause.description == "Resume"
        view.rows[2].stop.click()  # member 2's own Stop button
        assert p.member_status(2) == "retired" and view.rows[2].stop.disabled
        view.buttons["start"].click()
        assert p.status == "running" and view.timer_alive and not view.buttons["pause"].disabled
        wait_until(lambda: p.members[0].steps >= 320)
        view.rows[1].pause.click()  # Resume
        p.wait(timeout=120)
        view.refresh()
        assert "finished" in view.status.value and "best rigged" in view.status.value
        assert len(view.curves.data) == 3 and len(view.curves.data[0][0]) > 0
        assert max(t["line"]["width"] for t in view.curves.traces) == 3  # the best member, bold
        assert "learning_rate=" in view.rows[0].text.value and "ent_coef=" in view.rows[0].text.value
        exploits = [e for e in p.events if e.kind == "exploit"]
        arrows_x, arrows_y = view.lineage.data[-1]
        assert np.isfinite(arrows_x).sum() == 2 * len(exploits)
        assert all(y in (0, 1) for y in arrows_y[np.isfinite(arrows_y)]), (arrows_y, p.events)  # member 2 left alone
    finally:
        view.close()
    assert not view.timer_alive
    # reopened from its directory (another kernel, after a restart): the same curves and lineage
    again = wb.Population.open(tmp_path / "p", session_kwargs={"stop_when": rigged}).dashboard()
    try:
        assert [list(y) for _, y in again.curves.data] == [list(y) for _, y in view.curves.data]
        np.testing.assert_array_equal(again.lineage.data[-1][1], arrows_y)
        assert "retired" in again.rows[2].text.value
    finally:
        again.close()


def test_a_population_shows_its_dashboard_once_in_a_notebook(tmp_path, monkeypatch):
    pytest.importorskip("IPython")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    p = wb.pbt(
        tiny_ppo,
        "CartPole-v1",
        population=2,
        space=SPACE,
        steps=128,
        interval=64,
        directory=tmp_path / "p",
        start=False,
    )
    p._ipython_display_()
    p._ipython_display_()
    assert len(shown) == 2 and type(shown[0]).__name__ == "PopulationDashboard"
    shown[0].close()


# -- the command line ---------------------------------------------------------------------------------


def test_workbench_pbt_runs_resumes_and_refuses_a_fixed_field(tmp_path, capsys, monkeypatch):
    from workbench.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tune.py").write_text(
        "import workbench as wb\n"
        "def make_agent(**hp):\n"
        "    return wb.PPO('CartPole-v1', n_steps=64, batch_size=64, n_epochs=1, net_arch=(8,), n_envs=1, **hp)\n"
    )
    args = [
        "pbt",
        "tune.py:make_agent",
        "CartPole-v1",
        "--space",
        "learning_rate=1e-4..1e-2",
        "--space",
        "clip_range=[0.1, 0.2, 0.3]",
        "--population",
        "2",
        "--steps",
        "192",
        "--interval",
        "64",
        "--eval-episodes",
        "1",
        "--dir",
        "pop",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "population 'pop'" in out and "finished: best eval_reward=" in out and "clip_range" in out
    assert (tmp_path / "pop" / "population.json").exists() and (tmp_path / "pop" / "member-1").is_dir()
    state = json.loads((tmp_path / "pop" / "population.json").read_text())
    for e in state["events"]:  # each event printed as it happened
        if e["kind"] == "exploit":
            assert re.search(rf"step {e['step']}: member {e['member']} \(.*\) copied member {e['source']}", out)
        else:
            assert f"step {e['step']}: member {e['member']} explores: learning_rate" in out
    assert main(args) == 0  # the same command again: resumes, nothing left to train
    assert "finished" in capsys.readouterr().out
    assert main(["pbt", "ppo", "CartPole-v1", "--space", "n_steps=[32, 64]", "--dir", "other"]) == 2
    err = capsys.readouterr().err
    assert "'n_steps'" in err and "learning_rate" in err
    with pytest.raises(SystemExit, match="nothing to search"):
        main(["pbt", "ppo", "CartPole-v1", "--dir", "other"])


# -- Ray -------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.ray
def test_ray_backend_steps_each_members_envs_on_ray_actors(tmp_path):
    ray = pytest.importorskip("ray")
    try:
        p = wb.pbt(
            tiny_ppo,
            "CartPole-v1",
            population=2,
            space=SPACE,
            steps=128,
            interval=64,
            backend="ray",
            directory=tmp_path / "p",
            eval_episodes=1,
            session_kwargs={"num_workers": 1, "ray_acting": "learner"},
        )
        assert all(s.backend == "ray" for s in p.members)
        assert p.wait(timeout=500) and p.status == "finished", p.error
        assert all(s.steps >= 128 for s in p.members), p.table()
        assert len(p.curves()[0]) == 2
        assert not ray.is_initialized()  # the population started Ray for all its members, and shut it down
    finally:
        ray.shutdown()
    with pytest.raises(ValueError, match="ray_address"):
        wb.pbt(
            tiny_ppo,
            "CartPole-v1",
            population=2,
            space=SPACE,
            steps=128,
            interval=64,
            ray_address="auto",
            directory=tmp_path / "q",
            start=False,
        )
