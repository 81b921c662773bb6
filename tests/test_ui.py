"""The notebook parts without a browser: dashboard, buttons, plots, downsampling, compare, play viewer."""

import struct
import time
import zlib

import gymnasium as gym
import numpy as np
import pytest
from conftest import AppEnv, ExplodingEnv, SlowEnv

import workbench as wb

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from workbench.ui.play_viewer import encode_png
from workbench.ui.plots import downsample, moving_average, x_values


def small_ppo(env, **kw):
    return wb.PPO(env, n_envs=1, n_steps=16, batch_size=16, n_epochs=2, **kw)


def wait_until(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def enabled(dash):
    return {name for name, button in dash.buttons.items() if not button.disabled}


def trace_len(dash, panel="episode_reward", trace=0):
    return len(dash._panels[panel].fig.data[trace].x)


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
    names = [t.name for t in dashboard._panels["episode_reward"].fig.data]
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
        traces = {t.name: t for t in dash._panels["episode_reward"].fig.data}
        assert list(traces["eval_reward"].y) == [0.0, 10.0, 20.0, 30.0, 40.0]
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
    slow_session.start(steps=100_000)
    wait_until(lambda: trace_len(dashboard) >= 2)
    first = trace_len(dashboard)
    wait_until(lambda: trace_len(dashboard) > first + 2)
    wait_until(lambda: trace_len(dashboard, "loss") > 0)
    assert dashboard.timer_alive
    assert dashboard.refresh_count > 2


def test_timer_stops_after_drawing_the_final_state(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        assert dash.timer_alive  # an idle session may be started from code: the dashboard watches
        session.run(steps=400)
        wait_until(lambda: not dash.timer_alive, timeout=5)
        assert "finished" in dash.status_line.value
        assert f"{session.steps:,}" in dash.status_line.value
        assert trace_len(dash) == len(session.signals["episode_reward"])
        assert dash.progress.value == 1.0
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
        fig = dash._panels["compression_ratio"].fig
        assert fig in dash.plots.children
        assert len(fig.data[0].y) == 30

        dash.smoothing.value = 5
        raw, smooth = fig.data[0], fig.data[1]
        assert smooth.visible and raw.opacity < 1
        np.testing.assert_allclose(smooth.y, moving_average(np.float32(0.5 + 0.01 * np.arange(30)), 5), rtol=1e-6)

        dash.x_axis.value = "episodes"
        rewards = dash._panels["episode_reward"].fig.data[0]
        assert rewards.x[-1] == len(session.signals["episode_reward"])
        assert fig.layout.xaxis.title.text == "episodes"
        dash.x_axis.value = "time"
        assert rewards.x[-1] == pytest.approx(session.signals["episode_reward"].times[-1])
    finally:
        dash.close()


def test_dashboard_bounds_the_points_it_sends(app_env):
    session = wb.Session(small_ppo(app_env), app_env)
    for i in range(50_000):
        session.log("loss", float(np.sin(i / 100)), step=i)
    dash = wb.Dashboard(session, max_points=200, smoothing=3)
    try:
        loss = dash._panels["loss"].fig.data
        assert 0 < len(loss[0].x) <= 200 and 0 < len(loss[1].x) <= 200
        assert loss[0].x[0] == 0 and loss[0].x[-1] == 49_999
    finally:
        dash.close()


# -- browser views that come late or stop listening (workbench.ui.live) ----------------------------


def record_sends(fig):
    """The messages the kernel sends to the figure's browser model from now on."""
    sent = []
    fig.comm.send = lambda data=None, metadata=None, buffers=None: sent.append(data)
    return sent


def updates_sent(sent):
    return [d["state"]["_py2js_update"] for d in sent if d["state"].get("_py2js_update")]


def npoints(values):
    return values["shape"][0] if isinstance(values, dict) else len(values)  # numpy arrays go as binary buffers


def view_appears(fig, count=1):
    fig.set_state({"_view_count": count})  # what the browser sends when a view is displayed


def view_applies(fig, edit_id):
    fig.set_state({"_js2py_traceDeltas": {"trace_deltas": [], "trace_edit_id": edit_id}})


def test_live_figure_opens_its_comm_with_data_layout_and_view_counting(monkeypatch):
    import ipywidgets.widgets.widget as widget_module

    from workbench.ui.live import LiveFigure

    opened = []
    create = widget_module.comm.create_comm
    monkeypatch.setattr(widget_module.comm, "create_comm", lambda **kw: opened.append(kw) or create(**kw))
    fig = LiveFigure(
        data=[go_scatter([0.0, 1.0, 2.0], [3.0, 4.0, 5.0])], layout={"title": {"text": "t"}}, classes=("wb-x",)
    )
    try:
        # A browser that drops every later update (anywidget's 2 s load limit) still draws this.
        assert len(opened) == 1
        state = opened[0]["data"]["state"]
        assert state["_view_count"] == 0  # the browser counts views, so the kernel hears of new ones
        assert list(state["_dom_classes"]) == ["wb-x"]
        assert len(state["_widget_data"]) == 1 and state["_widget_layout"]["title"] == {"text": "t"}
        assert ["_widget_data", 0, "x", "buffer"] in opened[0]["data"]["buffer_paths"]  # the points travel along
    finally:
        fig.close()


def test_a_new_view_gets_the_full_data_even_when_nothing_changed():
    from workbench.ui.live import LiveFigure

    fig = LiveFigure(data=[go_scatter([0.0, 1.0], [1.0, 2.0]), go_scatter([0.0], [5.0])])
    try:
        fig.data[0].x, fig.data[0].y = [0.0, 1.0, 2.0], [1.0, 2.0, 3.0]  # an edit no view saw
        sent = record_sends(fig)
        assert not fig.awaiting()  # no view yet: nothing to wait for
        view_appears(fig)
        (update,) = updates_sent(sent)
        assert update["style_traces"] == [0, 1]
        assert [npoints(x) for x in update["style_data"]["x"]] == [3, 1]
        assert fig.awaiting() and not fig.stalled(60.0)
        assert fig.stalled(0.0, now=time.monotonic() + 1)
        view_applies(fig, 0)  # a deaf view answers its first draw with the id it was built with
        assert fig.awaiting() and fig.acks == 0
        view_applies(fig, update["trace_edit_id"])
        assert not fig.awaiting() and fig.acks == 1
        view_appears(fig, 0)  # the view closed: a smaller count sends nothing
        assert len(updates_sent(sent)) == 1
    finally:
        fig.close()


def test_dashboard_rebuilds_a_plot_whose_view_stopped_applying_edits(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        session.run(steps=400)
        episodes = len(session.signals["episode_reward"])
        old = dash._panels["episode_reward"]
        old.stall_s = 0.3
        view_appears(old.fig)  # a view that never answers: the browser dropped the figure's updates
        assert dash.timer_alive  # the run ended, but the timer watches the view
        wait_until(lambda: dash.replaced_count == 1, timeout=10)  # counted once the swap is complete
        new = dash._panels["episode_reward"]
        assert new is not old and new.fig in dash.plots.children and old.fig not in dash.plots.children
        assert old.fig.comm is None  # closed
        assert len(new.fig._widget_data[0]["x"]) == episodes  # the final data, in the state it opens with
        view_appears(new.fig)
        view_applies(new.fig, new.fig._last_trace_edit_id)
        wait_until(lambda: not dash.timer_alive, timeout=10)  # the views have the final draw
        assert dash.replaced_count == 1
    finally:
        dash.close()


def test_a_view_shown_after_the_run_ended_gets_the_final_data(app_env):
    session = wb.Session(small_ppo(app_env), app_env, seed=0)
    dash = wb.Dashboard(session, interval=0.25)
    try:
        session.run(steps=400)
        wait_until(lambda: not dash.timer_alive, timeout=10)
        fig = dash._panels["episode_reward"].fig
        sent = record_sends(fig)
        view_appears(fig)
        (update,) = updates_sent(sent)
        assert npoints(update["style_data"]["x"][0]) == len(session.signals["episode_reward"])
        assert dash.timer_alive  # restarted to watch that the view applies it
        view_applies(fig, update["trace_edit_id"])
        wait_until(lambda: not dash.timer_alive, timeout=10)
        assert dash.replaced_count == 0
    finally:
        dash.close()


def go_scatter(x, y):
    import plotly.graph_objects as go

    return go.Scatter(x=np.asarray(x), y=np.asarray(y))


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
        assert viewer.figure.data[1].x == (1.0,)
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


def test_play_viewer_rejects_an_env_of_other_spaces(app_env):
    agent = small_ppo(app_env)
    with pytest.raises(ValueError, match="space"):
        wb.PlayViewer(agent, gym.make("CartPole-v1", render_mode="rgb_array"))
