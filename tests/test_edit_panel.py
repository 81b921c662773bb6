"""The dashboard's edit panel and the plots' markers for live edits, without a browser."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from workbench.run.live_edits import Event
from workbench.ui.edit_panel import EditPanel, field_docs, format_value, parse_value
from workbench.ui.view_model import event_label, event_markers


def test_values_are_shown_as_text_and_read_back():
    for value in (
        0.0003,
        7,
        True,
        None,
        "auto_0.1",
        (1, 2),
        wb.linear(1e-3, 0.0),
        wb.linear(1.0, 0.1, 0.5),
        wb.EpsilonGreedy(1.0, 0.05, 0.2),
        wb.GaussianNoise(0.2),
        wb.OrnsteinUhlenbeckNoise(sigma=0.3),
    ):
        assert parse_value(format_value(value)) == value
    assert parse_value("wb.linear(1e-3, 0)") == wb.linear(1e-3, 0)
    assert parse_value("-1") == -1
    for text in ("__import__('os')", "open('x')", "1 +", "os.system('x')", "linear(1, 2, 3, 4)"):
        with pytest.raises(ValueError, match="cannot read"):
            parse_value(text)


def test_field_docs_come_from_the_config_and_its_bases():
    docs = field_docs(wb.PPO.Config)
    assert docs["clip_range"].startswith("PPO clip epsilon")
    assert docs["learning_rate"].startswith("Optimizer learning rate")  # declared on the base


def test_panel_lists_the_editable_fields_and_apply_calls_set():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=8, batch_size=16, n_epochs=1, seed=0)
    session = wb.Session(agent, seed=0)
    panel = EditPanel(session)
    assert "clip_range" in panel.fields and "net_arch" not in panel.fields
    assert "clip epsilon" in panel.fields["clip_range"].tooltip
    assert panel.fields["clip_range"].value == "linear(0.2, 0.0)"
    calls = []
    real_set = session.set
    session.set = lambda **values: calls.append(values) or real_set(**values)  # type: ignore[method-assign]
    assert panel.apply() == {} and calls == []  # nothing changed: set is not called

    panel.fields["clip_range"].value = "0.1"
    panel.fields["ent_coef"].value = "0.01"
    session.start(100_000)
    try:
        panel.apply_button.click()
        assert calls == [{"clip_range": 0.1, "ent_coef": 0.01}]
        assert agent.config.clip_range == 0.1 and agent.config.ent_coef == 0.01
        assert "applied" in panel.message.value

        panel.fields["vf_coef"].value = "-3"
        panel.apply_button.click()
        assert "vf_coef must be a finite number &gt;= 0" in panel.message.value
        assert agent.config.vf_coef == 0.5  # refused: unchanged
        panel.fields["vf_coef"].value = "lots"
        panel.apply_button.click()
        assert "vf_coef: cannot read" in panel.message.value
    finally:
        session.stop()
    assert session.status == "stopped", session.error


def test_dashboard_edit_button_opens_the_panel_and_plots_mark_the_edits():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=8, batch_size=16, n_epochs=1, seed=0)
    session = wb.Session(agent, seed=0)
    session.run(steps=64)
    dash = session.dashboard()
    try:
        assert dash.edit_box.children == ()
        dash.edit_button.value = True
        assert isinstance(dash.edit_box.children[0], EditPanel)
        dash.edit_panel.fields["learning_rate"].value = "1e-4"
        dash.edit_panel.apply()
        session.call_env("get_wrapper_attr", "tau")
        dash.refresh()
        shapes = dash._panels["episode_reward"].plot.plot_layout["shapes"]
        assert len(shapes) == 1 and shapes[0]["x0"] == 64  # both at step 64: one marker
        assert "learning_rate" in shapes[0]["label"]["text"] and "get_wrapper_attr('tau')" in shapes[0]["label"]["text"]
        dash.log_scale.value = True  # a new layout keeps the markers
        assert dash._panels["loss"].plot.plot_layout["shapes"] == shapes
        dash.edit_button.value = False
        assert dash.edit_box.children == ()
    finally:
        dash.close()


def test_event_markers_on_each_x_axis():
    events = [
        Event(
            "set",
            100,
            "learning_rate",
            {"schedule": "linear", "start": 0.001, "end": 0.0, "fraction": 1.0},
            0.0001,
            2.5,
        ),
        Event("call_env", 300, "set_difficulty", None, {"args": [3], "kwargs": {"bonus": 1}}, 7.0),
    ]
    assert event_label(events[0]) == "learning_rate linear(0.001→0.0) → 0.0001"
    assert event_label(events[1]) == "set_difficulty(3, bonus=1)"
    assert [x for x, _ in event_markers(events, "steps", np.zeros(0))] == [100.0, 300.0]
    assert [x for x, _ in event_markers(events, "time", np.zeros(0))] == [2.5, 7.0]
    assert [x for x, _ in event_markers(events, "episodes", np.array([50, 150, 250]))] == [1.0, 3.0]
