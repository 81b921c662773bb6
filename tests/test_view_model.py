"""The dashboard's view-model and the console bar: plain code, no widgets, no training.

Every test builds a fake session (a namespace with a SignalSet) and checks the frozen snapshot the
dashboard and the console bar draw, exactly.
"""

import io
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import workbench as wb
from workbench.ui.view_model import (
    DashboardView,
    default_signals,
    end_reason,
    format_ago,
    format_duration,
    format_rate,
    series_view,
    snapshot,
)


def fake_session(
    status="running",
    steps=500,
    target=1000,
    episodes=7,
    algorithm="PPO",
    stop_reason=None,
    error=None,
    signals=None,
    elapsed=65.0,
):
    return SimpleNamespace(
        status=status,
        steps=steps,
        target_steps=target,
        episodes=episodes,
        elapsed=elapsed,
        error=error,
        stop_reason=stop_reason,
        signals=signals if signals is not None else wb.SignalSet(),
        agent=SimpleNamespace(
            algorithm=algorithm, device_choice=None, default_plots=getattr(wb, algorithm, wb.Agent).default_plots
        ),
    )


def rewards(n, start=0):
    signals = wb.SignalSet()
    for i in range(start, start + n):
        signals.record("episode_reward", 10 * (i + 1), float(i), 0.1 * i)
    return signals


def test_module_imports_neither_ipywidgets_nor_plotly():
    code = (
        "import sys, workbench.ui.view_model, workbench.ui.console\n"
        "print(','.join(m for m in ('ipywidgets', 'plotly', 'anywidget', 'nbformat') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_snapshot_is_frozen_and_holds_status_counters_and_texts():
    view = snapshot(fake_session(), steps_per_second=100.0)
    assert isinstance(view, DashboardView)
    with pytest.raises(AttributeError):
        view.status = "paused"
    assert (view.status, view.steps, view.target_steps, view.episodes) == ("running", 500, 1000, 7)
    assert view.fraction == 0.5 and view.eta == 5.0
    assert view.line() == "running · steps 500 / 1,000 · episodes 7 · 100 steps/s · elapsed 1:05 · ETA 0:05"
    assert dict(view.enabled) == {"start": False, "pause": True, "resume": False, "stop": True, "save": True}
    assert view.active and not view.ended and view.end_reason is None


def test_rate_falls_back_to_the_sessions_signal_and_is_unknown_when_not_running():
    signals = wb.SignalSet()
    signals.record("steps_per_second", 100, 2500.0, 1.0)
    assert snapshot(fake_session(signals=signals)).steps_per_second == 2500.0
    idle = snapshot(fake_session(status="idle", steps=0, target=None, signals=signals))
    assert idle.steps_per_second is None and idle.eta is None and idle.fraction == 0.0
    assert dict(idle.enabled) == {"start": True, "pause": False, "resume": False, "stop": False, "save": False}


@pytest.mark.parametrize(
    "status, reason, error, text",
    [
        ("finished", "stop_when", None, "ended by stop_when"),
        ("stopped", "stop", None, "ended by stop()"),
        ("finished", "budget", None, "ended: steps reached"),
        ("failed", None, RuntimeError("boom"), "ended by an error (RuntimeError)"),
        ("running", None, None, None),
    ],
)
def test_the_status_says_why_a_run_ended(status, reason, error, text):
    assert end_reason(status, reason, error) == text
    view = snapshot(fake_session(status=status, stop_reason=reason, error=error))
    assert view.end_reason == text
    if text:
        assert view.line().endswith(text)
    if error is not None:
        assert view.error == "RuntimeError: boom"


def test_default_plots_follow_the_algorithm_and_its_signals():
    assert default_signals("PPO") == ("episode_reward", "loss")
    assert default_signals("DDPG") == ("episode_reward", "critic_loss", "actor_loss")
    assert default_signals("Custom", ["episode_reward", "critic_loss"]) == ("episode_reward", "critic_loss")
    assert default_signals("Custom") == ("episode_reward", "loss")
    assert default_signals(wb.SAC("Pendulum-v1")) == wb.SAC.default_plots  # an agent's own declaration
    for cls in wb.AGENTS.values():  # every declaration starts with the episodes' reward
        assert not cls.default_plots or cls.default_plots[0] == "episode_reward", cls
    view = snapshot(fake_session(algorithm="DDPG"))
    assert view.plotted == ("episode_reward", "critic_loss", "actor_loss")
    assert set(view.plotted) <= set(view.signal_names)


def test_signal_names_include_user_signals_at_any_time():
    signals = rewards(3)
    session = fake_session(status="finished", signals=signals)
    assert "compression_ratio" not in snapshot(session).signal_names
    signals.record("compression_ratio", 30, 0.4, 1.0)  # logged after the run ended
    assert "compression_ratio" in snapshot(session).signal_names


def test_series_come_whole_and_downsampled_then_only_what_is_new():
    signals = rewards(5000)
    session = fake_session(signals=signals)
    first = snapshot(session, max_points=100)
    series = first.series["episode_reward"]
    assert series.full and 0 < series.points <= 100
    assert series.x[0] == 10 and series.x[-1] == 50_000 and series.total == 5000
    for i in range(5000, 5007):
        signals.record("episode_reward", 10 * (i + 1), float(i), 0.1 * i)
    again = snapshot(session, max_points=100, since={"episode_reward": series.cursor})
    new = again.series["episode_reward"]
    assert not new.full and new.points == 7
    np.testing.assert_array_equal(new.x, 10.0 * np.arange(5001, 5008))
    np.testing.assert_array_equal(new.y, np.arange(5000, 5007, dtype=np.float64))
    nothing = snapshot(session, since={"episode_reward": new.cursor}).series["episode_reward"]
    assert nothing.points == 0 and not nothing.full


def test_appended_smoothing_matches_the_whole_series_smoothed():
    signals = wb.SignalSet()
    values = np.random.default_rng(0).normal(size=60)
    for i, v in enumerate(values[:40]):
        signals.record("loss", i, float(v), float(i))
    first = series_view(
        signals, "loss", x_axis="steps", smoothing=5, max_points=1000, episode_steps=np.zeros(0), since=None
    )
    for i, v in enumerate(values[40:], start=40):
        signals.record("loss", i, float(v), float(i))
    tail = series_view(
        signals, "loss", x_axis="steps", smoothing=5, max_points=1000, episode_steps=np.zeros(0), since=first.cursor
    )
    whole = np.concatenate([first.smooth_y, tail.smooth_y])
    expected = np.array([values[max(0, i - 4) : i + 1].astype(np.float32).mean() for i in range(60)])
    np.testing.assert_allclose(whole, expected, rtol=1e-5)


def test_a_thinned_signal_comes_whole_again():
    signals = wb.SignalSet(max_points=64)
    for i in range(64):
        signals.record("loss", i, float(i), float(i))
    cursor = series_view(
        signals, "loss", x_axis="steps", smoothing=1, max_points=1000, episode_steps=np.zeros(0), since=None
    ).cursor
    for i in range(64, 200):  # over its capacity: the signal thins its oldest points
        signals.record("loss", i, float(i), float(i))
    again = series_view(
        signals, "loss", x_axis="steps", smoothing=1, max_points=1000, episode_steps=np.zeros(0), since=cursor
    )
    assert again.full  # appending would misplace points: the view redraws it whole


def test_eval_reward_comes_with_episode_reward_and_x_axes():
    signals = rewards(4)
    signals.record("eval_reward", 25, 9.0, 0.5)
    view = snapshot(fake_session(signals=signals), plotted=("episode_reward",), x_axis="episodes")
    assert set(view.series) == {"episode_reward", "eval_reward"}
    np.testing.assert_array_equal(view.series["episode_reward"].x, [1, 2, 3, 4])
    np.testing.assert_array_equal(view.series["eval_reward"].x, [2])  # two episodes had ended at step 25
    timed = snapshot(fake_session(signals=signals), plotted=("episode_reward",), x_axis="time")
    np.testing.assert_allclose(timed.series["episode_reward"].x, [0.0, 0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="x_axis"):
        snapshot(fake_session(), x_axis="epochs")


def test_formats():
    assert format_duration(None) == "–" and format_duration(59.6) == "1:00" and format_duration(3725) == "1:02:05"
    assert format_rate(None) == "– steps/s" and format_rate(2351.4) == "2,351 steps/s"
    assert format_ago(1.2) == "1 s ago" and format_ago(200) == "3 min ago"


def test_console_bar_draws_the_same_view():
    from workbench.ui.console import follow, postfix

    view = snapshot(fake_session(status="finished", stop_reason="stop_when", signals=rewards(12)))
    assert postfix(view) == {"reward": f"{np.mean(np.arange(2, 12)):.1f}", "status": "ended by stop_when"}
    session = fake_session(status="finished", stop_reason="budget", steps=1000, signals=rewards(3))
    session.is_alive = False
    out = io.StringIO()
    last = follow(session, file=out)
    assert last.end_reason == "ended: steps reached"
    assert "ended: steps reached" in out.getvalue()


def test_console_bar_of_a_run_that_ended_before_it_was_drawn():
    # Session.run passes the steps it started from: a short run may end before follow() reads them.
    from workbench.ui.console import follow

    session = fake_session(status="finished", stop_reason="budget", steps=300, signals=rewards(3))
    session.is_alive = False
    session.target_steps = 300
    out = io.StringIO()
    follow(session, file=out, start_steps=0)
    assert "100%" in out.getvalue() and "300/300" in out.getvalue()
