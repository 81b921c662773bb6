"""The notebook parts without a browser: dashboard, buttons, plots, downsampling, compare, play viewer."""

import os
import struct
import subprocess
import sys
import time
import zlib

import gymnasium as gym
import numpy as np
import pytest
from conftest import AppEnv, ExplodingEnv, SlowEnv, small_ppo, wait_until

import workbench as wb

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from workbench.ui.play_viewer import encode_png
from workbench.ui.plots import downsample, moving_average, x_values


def enabled(dash):
    return {name for name, button in dash.buttons.items() if not button.disabled}


class Page:
    """What a browser page holds for one LivePlot, kept by the same rules as the plot's JavaScript.

    A reset replaces every trace's points; an extend appends them when its ``base`` is the last
    message applied, else the page asks for a full resend. ``ack=False`` models a page too busy to answer.
    """

    def __init__(self, plot, ack=True):
        self.plot, self.ack = plot, ack
        self.seq, self.data, self.received = -1, None, []
        plot.send = self._receive  # what the kernel sends to the page comes here
        self.say({"kind": "hello", "have": -1})

    def say(self, content):
        self.plot._on_page_msg(self.plot, content, [])

    def _receive(self, content, buffers=None):
        self.received.append((content, sum(len(b) for b in buffers or ())))
        xy = lambda t: (np.frombuffer(buffers[t["x"]]), np.frombuffer(buffers[t["y"]]))  # noqa: E731
        if content["kind"] == "reset":
            self.data = [list(map(list, xy(t))) for t in content["traces"]]
        elif self.data is None or content["base"] != self.seq:
            self.say({"kind": "need_reset", "have": self.seq})
            return
        else:
            for t in content["traces"]:
                x, y = xy(t)
                self.data[t["i"]][0].extend(x)
                self.data[t["i"]][1].extend(y)
        self.seq = content["seq"]
        if self.ack:
            self.say({"kind": "ack", "seq": content["seq"]})

    def x(self, trace=0):
        return [] if self.data is None else self.data[trace][0]

    def y(self, trace=0):
        return [] if self.data is None else self.data[trace][1]


def trace_len(page, trace=0):
    return len(page.x(trace))


@pytest.fixture
def slow_session():
    env = SlowEnv(0.001)
    session = wb.Session(small_ppo(env), env, seed=0)
    yield session
    session.stop()


@pytest.fixture
def dashboard(slow_session):
    dash = slow_session.dashboard()
    yield dash
    dash.close()


# -- the dashboard -------------------------------------------------------------------------------


def test_session_dashboard_is_a_widget_with_the_default_plots(dashboard, slow_session):
    import ipywidgets

    assert isinstance(dashboard, ipywidgets.VBox) and isinstance(dashboard, wb.Dashboard)
    assert dashboard.session is slow_session
    assert [p.name for p in dashboard._panels.values()] == ["episode_reward", "loss"]
    names = [t["name"] for t in dashboard._panels["episode_reward"].plot.traces]
    assert "episode_reward" in names and "eval_reward" in names
    assert "idle" in dashboard.status_line.value
    assert enabled(dashboard) == {"start"}  # nothing to pause, resume, stop or save yet


def test_a_session_shown_in_a_cell_displays_its_dashboard(slow_session, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    slow_session._ipython_display_()
    assert len(shown) == 1 and isinstance(shown[0], wb.Dashboard) and shown[0].session is slow_session
    shown[0].close()


def test_showing_a_session_again_reuses_its_live_dashboard_until_it_is_closed(slow_session, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    slow_session._ipython_display_()
    slow_session.start(steps=10_000_000)
    deadline = time.monotonic() + 10
    while not shown[0].timer_alive and time.monotonic() < deadline:
        time.sleep(0.02)
    slow_session._ipython_display_()
    assert shown[0] is shown[1]  # one dashboard, one refresh timer, shown twice
    shown[0].close()
    assert shown[0].closed
    slow_session._ipython_display_()
    assert shown[2] is not shown[0] and not shown[2].closed
    shown[2].close()


def test_eval_reward_is_drawn_beside_episode_reward(slow_session):
    for i in range(5):
        slow_session.log("eval_reward", 10.0 * i, step=100 * i)
    dash = slow_session.dashboard()
    try:
        page = Page(dash._panels["episode_reward"].plot)
        dash.refresh()
        names = [t["name"] for t in dash._panels["episode_reward"].plot.traces]
        assert page.y(names.index("eval_reward")) == [0.0, 10.0, 20.0, 30.0, 40.0]
        assert "eval_reward" not in dash._panels  # not a separate plot
    finally:
        dash.close()


def test_each_button_calls_the_session_and_only_sensible_ones_are_enabled(dashboard, slow_session):
    dashboard.steps_box.value = 1_000_000
    dashboard.buttons["start"].click()
    assert slow_session.status == "running"
    assert slow_session.target_steps == 1_000_000
    wait_until(lambda: slow_session.steps > 20)
    dashboard.refresh()
    assert enabled(dashboard) == {"pause", "stop", "save"}

    dashboard.buttons["pause"].click()
    assert slow_session.status == "paused"
    assert enabled(dashboard) == {"resume", "stop", "save"}
    held = slow_session.steps
    time.sleep(0.1)
    assert slow_session.steps == held
    assert f"{held:,}" in dashboard.status_line.value

    dashboard.buttons["resume"].click()
    assert slow_session.status == "running"
    wait_until(lambda: slow_session.steps > held)

    dashboard.buttons["stop"].click()
    assert slow_session.status == "stopped"
    assert enabled(dashboard) == {"start", "save"}
    assert "stopped" in dashboard.status_line.value

    wait_until(lambda: not dashboard.timer_alive, timeout=5)  # the final state is drawn: the timer stops
    dashboard.buttons["start"].click()  # a stopped run continues for another budget
    assert slow_session.status == "running"
    assert dashboard.timer_alive  # and the dashboard follows it again
    dashboard.buttons["stop"].click()
    assert slow_session.status == "stopped"


def test_save_button_writes_the_run_to_the_path_field(dashboard, slow_session, tmp_path):
    slow_session.start(steps=100_000)
    wait_until(lambda: slow_session.steps > 20)
    dashboard.save_path.value = str(tmp_path / "saved")
    dashboard.buttons["save"].click()
    assert (tmp_path / "saved" / "signals.csv").is_file()
    assert "saved to" in dashboard.message.value
    assert slow_session.status == "running"  # saving pauses only for the write
    dashboard.save_path.value = "  "
    dashboard.buttons["save"].click()
    assert "type a path" in dashboard.message.value


def test_a_failing_button_shows_the_error_instead_of_raising(dashboard):
    dashboard.steps_box.value = 10
    dashboard.session.start(steps=100_000)
    dashboard.buttons["start"].click()  # already running: the session refuses, the dashboard says why
    assert "already running" in dashboard.message.value


def test_plot_traces_grow_while_training(dashboard, slow_session):
    page = Page(dashboard._panels["episode_reward"].plot)
    loss = Page(dashboard._panels["loss"].plot)
    slow_session.start(steps=100_000)
    wait_until(lambda: trace_len(page) >= 2)
    first = trace_len(page)
    wait_until(lambda: trace_len(page) > first + 2)
    wait_until(lambda: trace_len(loss) > 0)
    assert dashboard.timer_alive
    assert dashboard.refresh_count >= 2
    kinds = [content["kind"] for content, _ in page.received]
    assert kinds[0] == "reset" and kinds.count("reset") == 1 and "extend" in kinds  # only new points after
    slow_session.stop()
    dashboard.refresh()
    np.testing.assert_array_equal(page.y(), slow_session.signals["episode_reward"].values)
    np.testing.assert_array_equal(page.x(), slow_session.signals["episode_reward"].steps)


def test_timer_stops_after_drawing_the_final_state(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    page = Page(dash._panels["episode_reward"].plot)
    try:
        assert dash.timer_alive  # an idle session may be started from code: the dashboard watches
        session.run(steps=400)
        wait_until(lambda: not dash.timer_alive, timeout=5)
        assert "finished" in dash.status_line.value
        assert f"{session.steps:,}" in dash.status_line.value
        assert "ended: steps reached" in dash.status_line.value
        assert trace_len(page) == len(session.signals["episode_reward"])
        assert dash.progress.value == 1.0
        assert not dash.heartbeat.active  # no heartbeat once the run ended
    finally:
        dash.close()


def test_close_stops_the_timer(slow_session):
    slow_session.start(steps=100_000)
    dash = slow_session.dashboard()
    assert dash.timer_alive
    dash.close()
    assert not dash.timer_alive


def test_training_error_shows_red_status_and_traceback():
    env = ExplodingEnv(fail_after=30)
    session = wb.Session(small_ppo(env), env)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        session.start(steps=1000)
        wait_until(lambda: session.status == "failed")
        wait_until(lambda: not dash.timer_alive, timeout=5)
        assert "failed" in dash.status_line.value
        assert "#cf222e" in dash.status_line.value  # red
        assert "simulator crashed at step 30" in dash.status_line.value
        assert "ended by an error" in dash.status_line.value
        assert dash.error_box.layout.display != "none"
        assert "Traceback" in dash.traceback.value and "in step" in dash.traceback.value
    finally:
        dash.close()


def test_user_signals_can_be_added_and_smoothed_and_x_axis_changed(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    session.run(steps=400)
    for i in range(30):
        session.log("compression_ratio", 0.5 + 0.01 * i, step=10 * i)
    dash = session.dashboard()
    try:
        assert "compression_ratio" in dash.signal_select.options
        dash.signal_select.value = (*dash.signal_select.value, "compression_ratio")
        plot = dash._panels["compression_ratio"].plot
        assert plot in dash.plots.children
        page = Page(plot)
        dash.refresh()
        assert len(page.y()) == 30

        dash.smoothing.value = 5
        raw, smooth = plot.traces[0], plot.traces[1]
        assert smooth["visible"] and raw["opacity"] < 1
        np.testing.assert_allclose(page.y(1), moving_average(np.float32(0.5 + 0.01 * np.arange(30)), 5), rtol=1e-6)

        rewards = Page(dash._panels["episode_reward"].plot)
        dash.x_axis.value = "episodes"
        assert rewards.x()[-1] == len(session.signals["episode_reward"])
        assert plot.plot_layout["xaxis"]["title"]["text"] == "episodes"
        dash.x_axis.value = "time"
        assert rewards.x()[-1] == pytest.approx(session.signals["episode_reward"].times[-1])
    finally:
        dash.close()


def test_dashboard_bounds_the_points_it_sends(app_env):
    session = wb.Session(small_ppo(app_env), app_env)
    for i in range(50_000):
        session.log("loss", float(np.sin(i / 100)), step=i)
    dash = wb.Dashboard(session, max_points=200, smoothing=3)
    try:
        page = Page(dash._panels["loss"].plot)
        dash.refresh()
        assert 0 < len(page.x(0)) <= 200 and 0 < len(page.x(1)) <= 200
        assert page.x(0)[0] == 0 and page.x(0)[-1] == 49_999
        for i in range(50_000, 50_500):  # appends grow a plot to twice max_points, then it is redrawn
            session.log("loss", 0.0, step=i)
            dash.refresh()
        assert 0 < len(page.x(0)) <= 400 and page.x(0)[-1] == 50_499
    finally:
        dash.close()


# -- what goes to the page: only new points, acknowledged, resent whole only when asked --------------


@pytest.fixture
def no_timer(monkeypatch):
    """Dashboards built in the test refresh only when it calls refresh(): exact message counts."""
    monkeypatch.setattr(wb.Dashboard, "_ensure_timer", lambda self, watch=False: None)


def test_each_refresh_sends_only_the_new_points(app_env, no_timer):
    session = wb.Session(small_ppo(app_env), app_env)
    for i in range(3000):
        session.log("loss", float(i), step=i)
    dash = wb.Dashboard(session, signals=("loss",))
    try:
        page = Page(dash._panels["loss"].plot)
        dash.refresh()
        ((first, first_bytes),) = page.received
        assert first["kind"] == "reset" and 1000 < len(page.x()) <= 2000  # the whole series, downsampled
        for i in range(3000, 3010):
            session.log("loss", float(i), step=i)
        dash.refresh()
        content, size = page.received[-1]
        assert content["kind"] == "extend" and content["traces"] == [{"i": 0, "x": 0, "y": 1}]
        assert size < 1000 and size < first_bytes / 10  # ten points, not the whole series
        assert page.x()[-10:] == list(range(3000, 3010))
        dash.refresh()  # nothing new: nothing sent
        assert len(page.received) == 2
    finally:
        dash.close()


def test_a_slow_page_gets_fewer_larger_updates(app_env, no_timer):
    session = wb.Session(small_ppo(app_env), app_env)
    session.log("loss", 0.0, step=0)
    dash = wb.Dashboard(session, signals=("loss",))
    try:
        plot = dash._panels["loss"].plot
        page = Page(plot, ack=False)  # a page too busy to answer
        dash.refresh()
        for i in range(1, 6):
            session.log("loss", float(i), step=i)
            dash.refresh()
        assert len(page.received) == 1 and dash.skipped_count == 5  # held back, no queue
        page.say({"kind": "ack", "seq": page.seq})
        dash.refresh()
        content, _ = page.received[-1]
        assert content["kind"] == "extend" and page.x() == [0, 1, 2, 3, 4, 5]  # all five in one update
        assert plot.round_trip is not None and plot.round_trip > 0
        assert dash.wait_s >= dash.interval
    finally:
        dash.close()


def test_a_new_page_or_one_that_missed_an_update_gets_everything(app_env, no_timer):
    session = wb.Session(small_ppo(app_env), app_env)
    for i in range(5):
        session.log("loss", float(i), step=i)
    dash = wb.Dashboard(session, signals=("loss",))
    try:
        plot = dash._panels["loss"].plot
        page = Page(plot)
        dash.refresh()
        session.log("loss", 5.0, step=5)
        dash.refresh()
        reloaded = Page(plot)  # after F5 the page builds the model afresh and says hello
        dash.refresh()
        assert reloaded.received[0][0]["kind"] == "reset" and reloaded.x() == [0, 1, 2, 3, 4, 5]
        reloaded.seq = -5  # it missed a message: the next append does not fit, it asks for a resend
        session.log("loss", 6.0, step=6)
        dash.refresh()
        assert plot.wants_reset
        dash.refresh()
        assert reloaded.x() == [0, 1, 2, 3, 4, 5, 6]
        assert page is not reloaded
    finally:
        dash.close()


def _loss_dashboard_judged_deaf_quickly(app_env, monkeypatch, points):
    """A session with ``points`` loss values and its dashboard of that one plot, which judges a widget
    deaf after 0.05 s of silence (6 s in use)."""
    import workbench.ui.run_view as run_view_module

    monkeypatch.setattr(run_view_module, "_DEAF_S", 0.05)
    session = wb.Session(small_ppo(app_env), app_env)
    for i in range(points):
        session.log("loss", float(i), step=i)
    return session, wb.Dashboard(session, signals=("loss",))


def test_widgets_a_busy_page_never_started_are_rebuilt(app_env, no_timer, monkeypatch):
    # anywidget drops every message to a model whose JavaScript took over 2 s to start: the page
    # said hello but never answers. The dashboard swaps in fresh widgets carrying the current data.
    session, dash = _loss_dashboard_judged_deaf_quickly(app_env, monkeypatch, points=5)
    try:
        old_plot, old_beat = dash._panels["loss"].plot, dash.heartbeat
        Page(old_plot, ack=False)
        old_beat._on_page_msg(old_beat, {"kind": "hello"}, [])
        dash.refresh()
        time.sleep(0.1)
        dash.refresh()
        new_plot = dash._panels["loss"].plot
        assert new_plot is not old_plot and new_plot in dash.plots.children and old_plot.comm is None
        assert dash.heartbeat is not old_beat and dash.status_row.children[-1] is dash.heartbeat
        assert dash.heartbeat.beat >= old_beat.beat and dash.replaced_count == 1
        page = Page(new_plot)  # the fresh plot's page answers: it gets everything
        dash.refresh()
        assert page.y() == [0.0, 1.0, 2.0, 3.0, 4.0]
        time.sleep(0.1)
        dash.refresh()
        assert dash._panels["loss"].plot is new_plot  # it answers: left alone
    finally:
        dash.close()


def test_a_reload_whose_hello_was_lost_gets_fresh_plots(app_env, no_timer, monkeypatch):
    # A reload on a busy page: the new model's hello never reaches the kernel and anywidget drops
    # what the kernel sends it, while the page before had answered everything. The kernel hears only
    # silence after those answers; the plot is rebuilt, and the page draws the fresh one.
    session, dash = _loss_dashboard_judged_deaf_quickly(app_env, monkeypatch, points=3)
    try:
        old_plot = dash._panels["loss"].plot
        page = Page(old_plot)
        dash.refresh()
        assert page.y() == [0.0, 1.0, 2.0]
        page.ack = False  # the reloaded page: nothing it receives is answered, and it says no hello
        session.log("loss", 3.0, step=3)
        dash.refresh()
        time.sleep(0.1)
        dash.refresh()
        fresh = dash._panels["loss"].plot
        assert fresh is not old_plot and fresh in dash.plots.children and dash.replaced_count == 1
        drawn = Page(fresh)
        dash.refresh()
        assert drawn.y() == [0.0, 1.0, 2.0, 3.0]
        time.sleep(0.1)
        dash.refresh()
        assert dash._panels["loss"].plot is fresh  # it answers: left alone
    finally:
        dash.close()


@pytest.fixture
def kernel_comms(monkeypatch):
    """Widgets built in the test get ipykernel 7's comms, which route the page's messages to a widget to the
    subshell that last sent on it (outside a kernel, ipywidgets builds comms without that routing)."""
    import comm
    from ipykernel.comm.comm import BaseComm

    class KernelComm(BaseComm):
        pass

    monkeypatch.setattr(comm, "create_comm", lambda *args, **kwargs: KernelComm(*args, **kwargs))


def _routed_as_sent(widget) -> bool:
    """True when a page's message to ``widget`` goes to the subshell the page addressed, even after the
    widget last sent from a subshell JupyterLab has since deleted."""
    widget.comm._reply_subshell_id = "a-deleted-subshell"
    return widget.comm._reply_subshell_for({"content": {}}, "the-page-s-subshell") == "the-page-s-subshell"


def test_the_page_s_messages_to_a_dashboard_reach_the_kernel_after_its_subshell_is_gone(
    kernel_comms, app_env, no_timer, monkeypatch
):
    # ipykernel 7 would send a plot's hello and acks, or a button's click, to the subshell of the cell that
    # built the dashboard; JupyterLab deletes such subshells, and the page's messages were then dropped
    # ("Unknown subshell_id"): empty plots after a reload. Every widget of the view, and a plot rebuilt into
    # it later, is answered where the page sent its message.
    import ipywidgets as widgets

    assert not _routed_as_sent(widgets.Button())  # the kernel's own routing, which the dashboard replaces
    session, dash = _loss_dashboard_judged_deaf_quickly(app_env, monkeypatch, points=3)
    try:
        dash._join_anywidgets()  # the heartbeat and the plots join after the first paint
        tree = list(dash._boxes())
        leaves = [child for box in tree for child in box.children if not isinstance(child, widgets.Box)]
        assert dash.heartbeat in leaves and dash._panels["loss"].plot in leaves
        assert all(_routed_as_sent(widget) for widget in tree + leaves)
        old_plot = dash._panels["loss"].plot
        Page(old_plot, ack=False)
        dash.refresh()
        time.sleep(0.1)
        dash.refresh()
        fresh = dash._panels["loss"].plot
        assert fresh is not old_plot and _routed_as_sent(fresh)
    finally:
        dash.close()


def test_routing_as_sent_leaves_other_kernels_comms_alone():
    from workbench.ui.comm_route import route_tree_as_sent

    class PlainComm:  # a kernel without ipykernel 7's routing hook: nothing to set
        pass

    class Holder:
        comm = PlainComm()

    route_tree_as_sent(Holder())
    assert not hasattr(Holder.comm, "_reply_subshell_for")


def test_a_reload_restarts_the_wait_before_rebuilding(app_env, no_timer, monkeypatch):
    # Rebuilds that got no answer double the wait before the next; a reload is a new page, which
    # gets the first, short wait again (not the one earned by the page before it).
    import workbench.ui.run_view as run_view_module

    monkeypatch.setattr(run_view_module, "_DEAF_S", 0.5)
    session = wb.Session(small_ppo(app_env), app_env)
    session.log("loss", 0.0, step=0)
    dash = wb.Dashboard(session, signals=("loss",))
    try:
        for _ in range(2):  # two rebuilds in a row, neither answered: the next wait is 2 s
            plot = dash._panels["loss"].plot
            Page(plot, ack=False)
            dash.refresh()
            wait_until(lambda old=plot: (dash.refresh(), dash._panels["loss"].plot is not old)[1], timeout=10)
        assert dash.replaced_count == 2
        plot = dash._panels["loss"].plot
        Page(plot, ack=False)
        dash.refresh()
        Page(plot, ack=False)  # the page reloads: the same model is built again and says hello again
        dash.refresh()
        time.sleep(0.8)
        dash.refresh()
        assert dash._panels["loss"].plot is not plot and dash.replaced_count == 3
    finally:
        dash.close()


def test_a_page_appearing_after_the_run_ended_restarts_the_timer_for_it(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        session.run(steps=400)
        wait_until(lambda: not dash.timer_alive, timeout=10)
        page = Page(dash._panels["episode_reward"].plot)  # says hello: the timer wakes to answer
        wait_until(lambda: trace_len(page) == len(session.signals["episode_reward"]), timeout=10)
        wait_until(lambda: not dash.timer_alive, timeout=10)
    finally:
        dash.close()


def test_signals_logged_after_the_run_ended_reach_the_list_and_plots(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        session.run(steps=200)
        wait_until(lambda: not dash.timer_alive, timeout=10)
        session.log("my_metric", 0.5)
        wait_until(lambda: "my_metric" in dash.signal_select.options, timeout=10)
    finally:
        dash.close()


def test_default_plots_follow_the_algorithm():
    agent = wb.DDPG("Pendulum-v1", learning_starts=100, batch_size=32)
    session = wb.Session(agent, "Pendulum-v1", seed=0)
    dash = session.dashboard()
    try:
        assert list(dash.signal_select.value) == ["episode_reward", "critic_loss", "actor_loss"]
        session.run(steps=400)
        assert {"critic_loss", "actor_loss"} <= set(session.signals.names())  # what DDPG records
    finally:
        dash.close()


def test_log_scale_toggle_and_readable_hover(slow_session):
    dash = wb.Dashboard(slow_session, log_y=False)
    try:
        plot = dash._panels["loss"].plot
        assert plot.plot_layout["yaxis"]["type"] == "linear"
        dash.log_scale.value = True
        assert plot.plot_layout["yaxis"]["type"] == "log"
        hover = plot.traces[0]["hovertemplate"]
        assert "loss" in hover and "env steps" in hover and "%{y" in hover
        assert plot.plot_layout["hoverlabel"]["namelength"] == -1  # names are never cut
    finally:
        dash.close()


def test_status_line_has_a_heartbeat_while_live(slow_session):
    dash = wb.Dashboard(slow_session, interval=0.25)
    try:
        slow_session.start(steps=1_000_000)
        beat = dash.heartbeat.beat
        wait_until(lambda: dash.heartbeat.beat > beat + 2)  # every refresh beats; the page counts seconds
        assert dash.heartbeat.active and dash.heartbeat in dash.status_row.children
        assert "live · updated" in type(dash.heartbeat)._esm.default_value
    finally:
        dash.close()


def test_a_second_session_warns_and_is_listed(app_env):
    first = wb.Session(small_ppo(SlowEnv(0.001)), SlowEnv(0.001))
    second = wb.Session(small_ppo(SlowEnv(0.001)), SlowEnv(0.001))
    try:
        first.start(steps=1_000_000)
        assert first in wb.sessions()
        with pytest.warns(RuntimeWarning, match="other session"):
            second.start(steps=1_000_000)
        assert wb.sessions()[-2:] == [first, second]
        dash = second.dashboard()
        try:
            assert "1 other session" in dash.status_line.value and "wb.sessions()" in dash.status_line.value
        finally:
            dash.close()
    finally:
        first.stop()
        second.stop()
    assert first not in wb.sessions() and second not in wb.sessions()


def test_a_finished_run_leaves_a_picture_in_its_output(app_env, monkeypatch):
    import IPython.display

    shown, updated = [], []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append((obj, kw)))
    monkeypatch.setattr(IPython.display, "update_display", lambda obj, **kw: updated.append((obj, kw)))
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        dash._ipython_display_()
        (hint, _), (bundle, kw) = shown
        assert "re-run this cell" in hint["text/html"] and "model not found" in hint["text/plain"]
        assert "application/vnd.jupyter.widget-view+json" in bundle and "image/svg+xml" not in bundle
        assert "re-run" in bundle["text/plain"]  # what a view that lost its kernel side should do
        session.run(steps=400)
        wait_until(lambda: not dash.timer_alive, timeout=10)
        ((bundle, kw2),) = updated
        assert kw2["display_id"] == kw["display_id"]
        svg = bundle["image/svg+xml"]
        assert svg.startswith("<svg") and svg.count("<polyline") >= 2 and "episode_reward" in svg
        assert "ended: steps reached" in svg
    finally:
        dash.close()


def test_first_paint_imports_neither_plotly_nor_nbformat():
    code = (
        "import sys, workbench as wb\n"
        "s = wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')\n"
        "d = s.dashboard(); d.refresh()\n"
        "print(','.join(m for m in ('plotly', 'nbformat', 'jsonschema') if m in sys.modules))\n"
        "d.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_plotly_js_comes_from_the_installed_package_once_per_kernel(slow_session):
    from workbench.ui.live_plot import plotly_js_path, plotly_library

    assert plotly_js_path().endswith("plotly.min.js") and os.path.isfile(plotly_js_path())
    library = plotly_library()
    assert library is plotly_library() and b"Plotly" in library.source[:5000]
    a, b = wb.Dashboard(slow_session), wb.Dashboard(slow_session)
    try:
        a.refresh()
        b.refresh()  # the first data names the library to the page
        plots = [p.plot for d in (a, b) for p in d._panels.values()]
        assert {p.library for p in plots} == {f"IPY_MODEL_{library.model_id}"}
    finally:
        a.close()
        b.close()


def test_dashboard_rejects_bad_settings(slow_session):
    with pytest.raises(ValueError, match="between 0.25 and 1"):
        wb.Dashboard(slow_session, interval=0.01)
    with pytest.raises(ValueError, match="x_axis"):
        wb.Dashboard(slow_session, x_axis="epochs")
    with pytest.raises(TypeError, match="wb.Session"):
        wb.Dashboard("not a session")


# -- downsampling and smoothing ------------------------------------------------------------------


def test_downsample_bounds_points_and_keeps_extremes():
    x = np.arange(1_000_000)
    y = np.random.default_rng(0).normal(size=x.size)
    y[123_456] = 50.0
    y[654_321] = -50.0
    dx, dy = downsample(x, y, 2000)
    assert len(dx) <= 2000 and len(dx) == len(dy)
    assert dx[0] == 0 and dx[-1] == 999_999
    assert dy.max() == 50.0 and dy.min() == -50.0
    assert np.all(np.diff(dx) > 0)
    sx, sy = downsample(np.arange(10), np.arange(10.0), 2000)
    assert len(sx) == 10
    for n in (2001, 2002, 4003, 10_007):
        assert len(downsample(np.arange(n), np.zeros(n), 2000)[0]) <= 2000


def test_moving_average_and_episode_axis():
    np.testing.assert_allclose(moving_average(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0])
    np.testing.assert_allclose(moving_average(np.array([1.0, 2.0]), 1), [1.0, 2.0])
    episodes = x_values("episodes", np.array([5, 10, 12, 20]), np.zeros(4), np.array([10, 20]))
    np.testing.assert_array_equal(episodes, [0, 1, 1, 2])
    with pytest.raises(ValueError, match="unknown x axis"):
        x_values("epochs", np.zeros(1), np.zeros(1), np.zeros(1))


# -- compare -------------------------------------------------------------------------------------


def _signals(offset, n=40):
    signals = wb.SignalSet()
    for i in range(n):
        signals.record("episode_reward", 100 * (i + 1), offset + i, float(i))
    return signals


def test_compare_groups_runs_sharing_a_label_into_mean_and_band():
    fig = wb.compare(_signals(0), _signals(10), _signals(100), labels=["a", "a", "b"])
    names = [t.name for t in fig.data]
    assert "a (mean of 2)" in names and "b" in names
    mean = next(t for t in fig.data if t.name == "a (mean of 2)")
    band = [t for t in fig.data if t.legendgroup == "a" and t.fill == "tonexty"]
    assert len(band) == 1
    assert band[0].showlegend and "min–max" in band[0].name  # the band has a legend entry
    assert "a (mean of 2)" in mean.hovertemplate and "min–max" in mean.hovertemplate
    assert "steps" in mean.hovertemplate and fig.layout.hoverlabel.namelength == -1
    np.testing.assert_allclose(mean.y[0], 5.0)  # mean of 0 and 10
    np.testing.assert_allclose(band[0].y[0], 0.0)  # the band's lower edge is the min


def test_compare_reads_saved_runs_by_path_folder_and_zip(app_env, tmp_path):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    session.run(steps=300)
    session.save(tmp_path / "group" / "seed0")
    session.save(str(tmp_path / "group" / "seed1.zip"))
    fig = wb.compare(session, tmp_path / "group" / "seed0", str(tmp_path / "group" / "seed1.zip"))
    assert [t.name for t in fig.data] == ["PPO seed 0", "seed0", "seed1"]
    grouped = wb.compare(tmp_path / "group", signal="episode_length")
    assert [t.name for t in grouped.data if t.name and "mean" in t.name] == ["group (mean of 2)"]


def test_compare_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no 'loss' signal"):
        wb.compare(_signals(0), signal="loss")
    with pytest.raises(ValueError, match="one label per run"):
        wb.compare(_signals(0), _signals(1), labels=["only one"])
    with pytest.raises(FileNotFoundError, match="no such saved run"):
        wb.compare(tmp_path / "nothing.zip")
    with pytest.raises(TypeError, match="compare"):
        wb.compare(42)


# -- play viewer ---------------------------------------------------------------------------------


def test_encode_png_round_trips():
    frame = np.random.default_rng(0).integers(0, 255, size=(5, 7, 3), dtype=np.uint8)
    png = encode_png(frame)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (7, 5)
    length = struct.unpack(">I", png[33:37])[0]
    raw = zlib.decompress(png[41 : 41 + length])
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(5, 1 + 7 * 3)
    np.testing.assert_array_equal(rows[:, 1:].reshape(5, 7, 3), frame)


def test_play_viewer_shows_frames_of_a_loaded_agent(app_env, tmp_path):
    pytest.importorskip("pygame")  # CartPole renders with pygame
    session = wb.Session(wb.PPO("CartPole-v1", n_envs=1, n_steps=32, batch_size=32), "CartPole-v1", seed=0)
    session.run(steps=64)
    agent = wb.load(session.save(tmp_path / "run"))
    viewer = agent.play("CartPole-v1", episodes=2, seed=0, viewer=True)
    try:
        assert isinstance(viewer, wb.PlayViewer)
        assert len(viewer.returns) == 2
        assert len(viewer.frames) == sum(int(r) for r in viewer.returns) + 2  # a frame per step plus each reset
        assert all(f.startswith(b"\x89PNG") for f in viewer.frames)
        assert viewer.image.value == viewer.frames[0]
        viewer.step_button.click()
        assert viewer.frame == 1 and viewer.image.value == viewer.frames[1]
        assert viewer.marker[0] == 1.0 and viewer.image.index == 1
        viewer.back_button.click()
        assert viewer.frame == 0
        viewer.slider.value = len(viewer.frames) - 1
        assert "episode 2/2" in viewer.info.value
    finally:
        viewer.close()


def test_play_viewer_plays_continuous_actions_and_cuts_at_max_steps():
    pytest.importorskip("pygame")
    viewer = wb.PlayViewer(wb.PPO("Pendulum-v1", n_envs=1), "Pendulum-v1", seed=0, max_steps=10)
    try:
        assert len(viewer.frames) == 11 and len(viewer.rewards) == 11
        assert viewer.returns[0] == pytest.approx(sum(viewer.rewards))
    finally:
        viewer.close()


def test_play_viewer_changes_frames_in_the_page_without_the_kernel():
    # The Play widget's value is linked in the page (jslink) to the slider and to the image's frame index, so
    # playback needs no kernel round trip per frame; the browser test sees it play, this pins how.
    pytest.importorskip("pygame")
    from ipywidgets.widgets import widget as widget_module
    from ipywidgets.widgets.widget_link import DirectionalLink, Link

    viewer = wb.PlayViewer(wb.PPO("Pendulum-v1", n_envs=1), "Pendulum-v1", seed=0, max_steps=3)
    try:
        links = [
            w
            for w in list(widget_module._instances.values())
            if isinstance(w, Link) and w.source == (viewer.player, "value")
        ]
        targets = {(id(t[0]), t[1]) for t in (link.target for link in links)}
        assert (id(viewer.slider), "value") in targets and (id(viewer.image), "index") in targets
        assert not any(isinstance(w, DirectionalLink) for w in links)  # both ways: the slider seeks
    finally:
        viewer.close()


def test_play_viewer_needs_an_env_that_renders(app_env):
    agent = small_ppo(app_env)
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        wb.PlayViewer(agent, app_env)
    viewer = wb.PlayViewer(agent, AppEnv(model={}, app_args={}, config=None, render_mode="rgb_array"), seed=1)
    try:
        assert len(viewer.frames) == 21  # horizon 20 plus the reset frame
    finally:
        viewer.close()
    with pytest.raises(ValueError, match="episodes"):
        wb.PlayViewer(agent, app_env, episodes=0)


def test_play_viewer_calls_a_factory_once_and_says_when_it_does_not_render(app_env):
    agent = small_ppo(app_env)
    built: list[AppEnv] = []

    def factory() -> AppEnv:
        built.append(AppEnv(model={}, app_args={}, config=None, render_mode="rgb_array"))
        return built[-1]

    viewer = wb.PlayViewer(agent, factory, seed=1)
    try:
        assert len(built) == 1 and len(viewer.frames) == 21
    finally:
        viewer.close()
    with pytest.raises(ValueError, match="the factory"):
        wb.PlayViewer(agent, lambda: AppEnv(model={}, app_args={}, config=None))


def test_play_viewer_rejects_an_env_of_other_spaces(app_env):
    agent = small_ppo(app_env)
    with pytest.raises(ValueError, match="space"):
        wb.PlayViewer(agent, gym.make("CartPole-v1", render_mode="rgb_array"))


def test_a_plot_unheard_since_its_page_loaded_is_rebuilt_once(app_env, no_timer, monkeypatch):
    # A page loads (its heartbeat says hello) while a plot's hello is lost in the page's rebuild of its
    # widgets: that plot never hears from a page, so the silence test alone never rebuilds it (empty plots
    # under a live heartbeat). It is rebuilt once; a plot built after the page loaded, or one that spoke, is not.
    import workbench.ui.run_view as run_view_module

    monkeypatch.setattr(run_view_module, "_DEAF_S", 0.05)
    session = wb.Session(small_ppo(app_env), app_env)
    session.log("loss", 0.0, step=0)
    session.log("episode_reward", 1.0, step=0)
    dash = wb.Dashboard(session, signals=("loss", "episode_reward"))
    try:
        dash._join_anywidgets()
        lost, heard = dash._panels["loss"].plot, dash._panels["episode_reward"].plot
        dash.heartbeat._on_page_msg(dash.heartbeat, {"kind": "hello"}, [])
        dash.heartbeat._on_page_msg(dash.heartbeat, {"kind": "ack", "beat": 1}, [])  # the page is live
        heard._on_page_msg(heard, {"kind": "hello", "have": -1}, [])
        heard._on_page_msg(heard, {"kind": "ack", "seq": 10**6}, [])  # it answers everything
        time.sleep(0.1)
        dash.refresh()
        fresh = dash._panels["loss"].plot
        assert fresh is not lost and fresh in dash.plots.children and lost not in dash.plots.children
        assert dash._panels["episode_reward"].plot is heard and dash.replaced_count == 1
        time.sleep(0.1)
        dash.refresh()  # the fresh plot was built after the page loaded: it waits for its own hello
        assert dash._panels["loss"].plot is fresh
    finally:
        dash.close()
