"""The dashboard in a real browser: JupyterLab on a loopback port, driven in headless Chromium.

Opens notebooks/quickstart.ipynb, runs the training cell, watches the plot gain points, clicks
Pause (the step counter holds) and Stop (the status changes), then runs the rest of the notebook
(save, load, the play viewer stepping a frame, the comparison plot) and saves screenshots to
test-artifacts/. Without a browser the test skips, except in CI (CI=true), where it must run.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("WB_CHROMIUM", "/usr/bin/chromium")
NOTEBOOK = "notebooks/quickstart.ipynb"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _missing() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)"
    for module in ("playwright", "jupyterlab", "ipywidgets", "plotly"):
        try:
            __import__(module)
        except ImportError:
            return f"the Python package {module} is missing (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser_ready():
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI, but {reason}")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings_dir: Path) -> None:
    # Keep every cell in the page (no virtual scrolling) and silence the news/update pop-ups.
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }
    for name, content in files.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))


def code_notebook(cells: list[str]) -> str:
    """A notebook of code cells, as JSON, for JupyterLab to serve."""
    return json.dumps(
        {
            "cells": [
                {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
                for src in cells
            ],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


@contextlib.contextmanager
def serving_jupyter(tmp: Path, served: Path, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """JupyterLab serving ``served`` on a free loopback port with a token, its settings, config and log
    (``tmp / "jupyter.log"``) under ``tmp``; yields ``(base_url, token)``, then stops it."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = tmp / "settings"
    _write_settings(settings)
    env = {
        **env,
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "IPYTHONDIR": str(tmp / "ipython"),
    }
    log = open(tmp / "jupyter.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={served}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start:\n" + (tmp / "jupyter.log").read_text()[-3000:])
            time.sleep(0.25)
        yield base, token
    finally:
        # SIGTERM to its own process group: the server shuts its kernels down cleanly.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def jupyter(browser_ready, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jupyter")
    # Serve a copy of the notebook, so the run it saves lands in the temp dir, not in the checkout.
    served = tmp / "served"
    (served / "notebooks").mkdir(parents=True)
    # Its run must outlast the checks: 100k steps can finish (18 s unloaded) before a slow browser
    # shows the first points, and a finished run never adds the points the test waits for.
    source = (ROOT / NOTEBOOK).read_text()
    longer = re.sub(r"(STEPS = .* else )[0-9_]+", r"\g<1>5_000_000", source, count=1)
    assert longer != source, f"{NOTEBOOK} no longer sets STEPS = ... else N: update this test"
    (served / NOTEBOOK).write_text(longer)
    (served / LOAD_NOTEBOOK).write_text(json.dumps(_load_notebook()))
    env = {k: v for k, v in os.environ.items() if k != "WB_QUICK"}  # a full-length run to watch
    with serving_jupyter(tmp, served, env) as (base, token):
        yield base, token, served


def _points(page) -> int:
    return page.evaluate(
        """() => {
            const plot = document.querySelector('.wb-plot-episode_reward .js-plotly-plot')
                || document.querySelector('.jp-OutputArea-output .js-plotly-plot');
            return plot && plot.data && plot.data[0].x ? plot.data[0].x.length : 0;
        }"""
    )


def _screenshot(page, selector: str, path: Path) -> None:
    """A picture of the first element matching ``selector`` (an artifact for people, not a check): a
    widget refresh that lands mid-picture can detach the element, so it is taken again, up to 3 times."""
    from playwright.sync_api import Error

    for attempt in range(3):
        try:
            page.locator(selector).first.screenshot(path=str(path))
            return
        except Error:
            if attempt == 2:
                raise
            page.wait_for_timeout(500)


def _steps(page) -> int:
    text = page.locator(".jp-OutputArea-output .wb-steps").first.inner_text()
    return int(text.replace(",", ""))


def _status(page) -> str:
    return page.locator(".jp-OutputArea-output .wb-status-word").first.inner_text().strip()


def _wait_for(page, predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        page.wait_for_timeout(200)  # lets Playwright deliver events, unlike time.sleep


def _run_code_cell(page, index: int) -> None:
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")


DIAGNOSE_JS = """() => ({
    plots: document.querySelectorAll('.wb-plot').length,
    areas: document.querySelectorAll('.wb-plot-area').length,
    drawn: document.querySelectorAll('.js-plotly-plot').length,
    plotly: typeof globalThis.__workbenchPlotly,
    loads: globalThis.__workbenchPlotlyLoads || 0,
    stores: globalThis.__workbenchStores ? [...globalThis.__workbenchStores.entries()].map(
        ([key, s]) => ({ key: key.slice(0, 6), seq: s.seq, views: s.views.size,
                         data: s.data ? s.data.map((d) => d.x.length) : null })) : null,
})"""

FPS_JS = """async () => {
    const img = document.querySelector('.wb-play-viewer img.wb-frame');
    let last = img.src, changes = [];
    const t0 = performance.now();
    while (performance.now() - t0 < 3000) {
        await new Promise((r) => setTimeout(r, 4));
        if (img.src !== last) { changes.push(performance.now()); last = img.src; }
    }
    const seconds = changes.length > 1 ? (changes[changes.length - 1] - changes[0]) / 1000 : 0;
    return { frames: changes.length, seconds, fps: seconds ? (changes.length - 1) / seconds : 0 };
}"""


def test_dashboard_trains_pauses_and_stops_in_a_real_browser(jupyter):
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        profile = ROOT / "test-artifacts" / ".chromium-profile"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            viewport={"width": 1300, "height": 1100},
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            console: list[str] = []  # the front end's errors, saved with a failure's screenshot
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.on("pageerror", lambda exc: console.append(f"pageerror: {exc}"))
            page.set_default_timeout(60_000)
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
            kernel = page.locator("span.jp-StatusBar-TextItem[title^='Change kernel']")
            deadline = time.monotonic() + 240  # a fresh venv compiles its bytecode while the first kernel starts
            while "Idle" not in (kernel.first.inner_text() if kernel.count() else ""):
                select = page.get_by_role("button", name=re.compile(r"^Select$"))
                if select.count():
                    select.first.click()
                if time.monotonic() > deadline:
                    raise AssertionError("the notebook's kernel never became idle")
                page.wait_for_timeout(250)

            _run_code_cell(page, 0)  # imports
            prompt = page.locator(".jp-Notebook .jp-CodeCell").nth(0).locator(".jp-InputPrompt")
            _wait_for(page, lambda: re.search(r"\[\d+\]", prompt.inner_text()) is not None, 60, "the import cell")
            _run_code_cell(page, 1)  # wb.Session(...).start(...); session  -> the dashboard
            page.locator(".jp-OutputArea-output .wb-dashboard").first.wait_for(state="visible", timeout=60_000)

            _wait_for(page, lambda: _points(page) > 0, 60, "the first episode_reward points")
            # The "re-run this cell if it reads model not found" line shows only where no dashboard rendered.
            hint = page.locator(".jp-OutputArea-output .wb-reconnect-hint").first
            assert hint.count() == 1 and not hint.is_visible()
            first = _points(page)
            _wait_for(page, lambda: _points(page) > first, 30, "more points while training")
            assert _status(page) == "running"

            page.locator(".jp-OutputArea-output button.wb-pause").click()
            _wait_for(page, lambda: _status(page) == "paused", 15, "the status to read paused")
            held = _steps(page)
            page.wait_for_timeout(1500)
            assert _steps(page) == held, "the step counter moved while paused"
            # The status line and each button are separate widget messages of one refresh: the page may
            # show the new status a moment before it has applied the buttons' states.
            resume = page.locator(".jp-OutputArea-output button.wb-resume")
            pause = page.locator(".jp-OutputArea-output button.wb-pause")
            _wait_for(page, lambda: resume.is_enabled() and not pause.is_enabled(), 10, "Resume on, Pause off")

            page.locator(".jp-OutputArea-output button.wb-stop").click()
            _wait_for(page, lambda: _status(page) == "stopped", 30, "the status to read stopped")
            start = page.locator(".jp-OutputArea-output button.wb-start")
            _wait_for(page, start.is_enabled, 10, "the Start button to be enabled after the stop")
            page.wait_for_timeout(500)  # the last refresh lands before the picture is taken
            _screenshot(page, ".jp-OutputArea-output .wb-dashboard", ARTIFACTS / "dashboard.png")

            # The ended run left a picture of its plots in the output: the saved notebook holds it.
            def saved_picture() -> bool:
                page.keyboard.press("Control+s")
                page.wait_for_timeout(1000)
                cells = json.loads((served / NOTEBOOK).read_text())["cells"]
                return any("image/svg+xml" in out.get("data", {}) for c in cells for out in c.get("outputs", []))

            page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".jp-InputArea-editor").click()
            page.keyboard.press("Escape")
            _wait_for(page, saved_picture, 30, "the picture of the plots in the saved notebook")

            # The rest of the quickstart: save, load, the play viewer's frames, the comparison plot.
            page.locator(".jp-Notebook .jp-CodeCell").nth(2).locator(".jp-InputArea-editor").click()
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name=re.compile("Run Selected Cell and All Below")).click()
            viewer = page.locator(".jp-OutputArea-output .wb-play-viewer")
            viewer.wait_for(state="visible", timeout=120_000)
            image = viewer.locator("img").first
            _wait_for(page, lambda: image.evaluate("img => img.naturalWidth") > 0, 30, "the play viewer's frame")
            src = image.get_attribute("src")
            info = viewer.locator(".wb-play-info")
            step_forward = viewer.locator("button", has=page.locator(".fa-step-forward")).first
            for _ in range(10):  # CartPole's first frames can be pixel-identical: step far enough to see motion
                step_forward.click()
            _wait_for(page, lambda: "step 10 " in info.inner_text(), 15, "ten step clicks to reach frame 10")
            _wait_for(page, lambda: image.get_attribute("src") != src, 15, "a new frame after the step clicks")
            # Playback runs in the page at its nominal rate (30 fps), not one kernel round trip per frame.
            step_back = viewer.locator("button", has=page.locator(".fa-step-backward")).first
            for _ in range(10):
                step_back.click()
            _wait_for(page, lambda: "step 0 " in info.inner_text(), 15, "the first frame again")
            # The cells below the viewer (the comparison plot) finish and draw first: the rate is measured
            # on a page that is only playing, not one also laying out a new plotly figure.
            _wait_for_kernel(page)
            page.wait_for_timeout(1000)
            viewer.locator(".wb-play-controls button").first.click()
            fps = page.evaluate(FPS_JS)
            # ipywidgets' Play sets its next tick's timer after the current tick's work (the linked slider and
            # image, and its messages to the kernel), so the page plays at 1000 / (33 ms + that work): 20 to
            # 28 fps measured on a quiet machine. How fast is not asserted here: beside the Ray tests of the
            # other worker it fell to 14 fps (stop 63's CI), and a rate is a benchmark's to check. That it
            # plays in the page alone is pinned by test_ui.py's jslink test; here it must visibly play.
            print(
                f"\nplay viewer: {fps['frames']} frames in {fps['seconds']:.2f} s = {fps['fps']:.1f} fps (nominal 30)"
            )
            assert fps["frames"] >= 10, f"the play viewer played at {fps}"
            stderr = page.locator(".jp-Notebook .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            assert "XDG_RUNTIME_DIR" not in " ".join(stderr.all_inner_texts())
            compared = page.locator(".jp-Notebook .jp-CodeCell").last.locator(".js-plotly-plot svg.main-svg")
            compared.first.wait_for(state="visible", timeout=60_000)  # wb.compare's figure
            viewer.screenshot(path=str(ARTIFACTS / "play_viewer.png"))
            page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"), full_page=True)
        except BaseException:
            console.append("page state: " + json.dumps(page.evaluate(DIAGNOSE_JS)))
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)  # what the browser showed
            (ARTIFACTS / "failure.html").write_text(page.content())
            (ARTIFACTS / "failure-console.txt").write_text("\n".join(console))
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


# -- the dashboard's cost to the page, under load (issue 14) -----------------------------------------

LOAD_NOTEBOOK = "notebooks/dashboard_load.ipynb"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TYPED = "abcdefghij" * 20  # 200 characters, none that an editor completes or closes
LOAD_CELLS = [
    # 0: the warm kernel: workbench imported, plus a sampler of the session's step counter
    "import json, threading, time\nimport workbench as wb\nsamples = []",
    # 1: the session, built but not started
    "session = wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1', seed=0)\n"
    "def _sample():\n"
    "    while True:\n"
    "        samples.append((time.time(), session.steps, time.process_time()))\n"
    "        time.sleep(0.25)\n"
    "threading.Thread(target=_sample, daemon=True).start()",
    # 2: training with its dashboard (the first paint is timed from running this cell)
    "session.start(steps=50_000_000)\nsession",
    # 3: a cell to type into
    "x = 1",
    # 4, 5: one more dashboard of the session, on a page that has shown widgets already (first paint, warm)
    "second = session.dashboard()\nsecond",
    "second.close()",
    # 6: what the kernel side measured
    "from workbench.views import shown\ndash = shown(session)\n"
    "print('WB-METRICS ' + json.dumps({'samples': samples, 'sent': {n: [p.plot.sent_bytes, p.plot.sent_kinds] for n, p in "
    "dash._panels.items()}, 'skipped': dash.skipped_count, 'refreshes': dash.refresh_count, "
    "'replaced': dash.replaced_count}))",
    # 7: the end
    "session.stop()",
]


def _load_notebook() -> dict:
    cells = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
        for src in LOAD_CELLS
    ]
    return {
        "cells": cells,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _wait_for_kernel(page) -> None:
    kernel = page.locator("span.jp-StatusBar-TextItem[title^='Change kernel']")
    deadline = time.monotonic() + 240  # a fresh venv compiles its bytecode while the first kernel starts
    while "Idle" not in (kernel.first.inner_text() if kernel.count() else ""):
        select = page.get_by_role("button", name=re.compile(r"^Select$"))
        if select.count():
            select.first.click()
        if time.monotonic() > deadline:
            raise AssertionError("the notebook's kernel never became idle")
        page.wait_for_timeout(250)


def _run_and_wait(page, index: int, timeout_s: float = 60) -> None:
    _run_code_cell(page, index)
    prompt = page.locator(".jp-Notebook .jp-CodeCell").nth(index).locator(".jp-InputPrompt")
    _wait_for(page, lambda: re.search(r"\[\d+\]", prompt.inner_text()) is not None, timeout_s, f"cell {index}")


def _typed_chars(page, index: int) -> int:
    """Type TYPED into cell ``index`` (emptied first) and count how many characters arrived."""
    editor = page.locator(".jp-Notebook .jp-CodeCell").nth(index).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.type(TYPED, delay=20)
    page.wait_for_timeout(1500)  # keystrokes still queued in a busy page land now or never
    text = editor.inner_text().replace("\n", "")
    return sum(1 for a, b in zip(text, TYPED) if a == b) if text.startswith(TYPED[:1]) else 0


LAG_JS = """async (seconds) => {
    const lags = [];
    const longs = [];
    const obs = new PerformanceObserver((list) => { for (const e of list.getEntries()) longs.push(e.duration); });
    obs.observe({ type: "longtask", buffered: false });
    const end = performance.now() + seconds * 1000;
    await new Promise((resolve) => {
        let due = performance.now() + 50;
        const tick = () => {
            const now = performance.now();
            lags.push(Math.max(0, now - due));
            if (now > end) return resolve();
            due = now + 50;
            setTimeout(tick, 50);
        };
        setTimeout(tick, 50);
    });
    obs.disconnect();
    return { lags, longs };
}"""


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _cpu_hog() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


def test_dashboard_stays_out_of_the_users_way_under_load(jupyter):
    """Issue 14's measurements: keystrokes, event-loop lag, bytes per refresh, training speed with the
    page showing the dashboard against none, a reload, a clean console, and the first paint."""
    from playwright.sync_api import sync_playwright

    base, token, _served = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    metrics: dict = {}
    # A workspace of its own, reset on each load: only this notebook's tab is open (not the quickstart's).
    url = f"{base}/lab/workspaces/wbload/tree/{LOAD_NOTEBOOK}?token={token}&reset"
    with sync_playwright() as pw:
        profile = ROOT / "test-artifacts" / ".chromium-profile-load"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1300, "height": 1100}, args=ARGS
        )
        page = context.pages[0] if context.pages else context.new_page()
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.set_default_timeout(60_000)
        hog = None

        def kernel_metrics(after: float) -> dict:
            """What the kernel side measured (cell 6: step samples, bytes sent, refreshes), read once its
            samples reach ``after`` (a run again shows the last run's output until the new one lands)."""
            _run_code_cell(page, 6)
            output = page.locator(".jp-Notebook .jp-CodeCell").nth(6).locator(".jp-OutputArea-output")
            found: list[dict] = []

            def fresh() -> bool:
                text = output.first.inner_text() if output.count() else ""
                if "WB-METRICS " not in text:
                    return False
                try:
                    data = json.loads(text[text.index("WB-METRICS ") + len("WB-METRICS ") :].strip())
                except ValueError:
                    return False
                if not data["samples"] or data["samples"][-1][0] < after:
                    return False
                found.append(data)
                return True

            _wait_for(page, fresh, 60, "the kernel's metrics (cell 6)")
            return found[-1]

        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_and_wait(page, 0)
            _run_and_wait(page, 1)
            page.keyboard.press("Control+s")  # saved with its outputs: a reload shows the dashboard again
            # First paint: the status line of a dashboard, in a kernel that has imported workbench.
            started = time.monotonic()
            _run_code_cell(page, 2)
            status = page.locator(".jp-OutputArea-output .wb-status-word").first
            status.wait_for(state="visible", timeout=60_000)
            metrics["first_paint_s"] = round(time.monotonic() - started, 2)
            _wait_for(page, lambda: _points(page) > 0, 60, "the first episode_reward points")
            metrics["plots_filled_s"] = round(time.monotonic() - started, 2)
            # plotly.js evaluated once per page, however many plots (the page counts its loads).
            metrics["plotly_loads"] = page.evaluate("() => globalThis.__workbenchPlotlyLoads || 0")
            page.wait_for_timeout(3000)

            # Under load: a CPU-bound process beside training, the page competing for the cores.
            hog = _cpu_hog()
            page.wait_for_timeout(1000)
            metrics["typed"] = [_typed_chars(page, 3) for _ in range(3)]
            lag = page.evaluate(LAG_JS, 10)
            metrics["lag_ms"] = {
                "p50": round(_quantile(lag["lags"], 0.5), 1),
                "p90": round(_quantile(lag["lags"], 0.9), 1),
                "max": round(max(lag["lags"], default=0.0), 1),
                "long_tasks": len(lag["longs"]),
                "longest_task": round(max(lag["longs"], default=0.0), 1),
            }
            hog.kill()
            hog.wait()
            hog = None
            page.keyboard.press("Control+s")  # saved with its outputs: a reload shows the dashboard again
            page.wait_for_timeout(1000)

            # Training speed with the page showing the dashboard against none is a benchmark's measure
            # (benchmarks/dashboard_overhead.py), not asserted here.

            # Reload: the plots keep growing. Saved first and left through a blank page, as the speed phases
            # do: a notebook with unsaved outputs asks before it unloads, and the navigation could stall there.
            page.keyboard.press("Control+s")
            page.wait_for_timeout(1000)
            # A shared CI machine once left a reloaded page without its plots for 90 s (stop 26's run):
            # the page is loaded once more before failing, and the report says how many loads it took.
            for attempt in range(2):
                page.goto("about:blank")
                page.goto(url)
                _wait_for_kernel(page)
                metrics["reloads_until_plots"] = attempt + 1
                try:  # the first load waits 20 s (a quiet run needed a second load as often as a longer wait)
                    _wait_for(page, lambda: _points(page) > 0, 20 if attempt == 0 else 60, "the plots after a reload")
                    break
                except AssertionError:
                    metrics.setdefault("page_state_before_reloading_again", page.evaluate(DIAGNOSE_JS))
                    if attempt == 1:
                        raise
            grown = _points(page)
            _wait_for(page, lambda: _points(page) > grown, 30, "the plots to keep growing after the reload")

            # Samples after this moment are newer than cell 6's last output (run before the reload); a
            # later moment could be newer than every sample cell 6 prints (one each 0.25 s) and never come.
            before_second = time.time()
            started = time.monotonic()
            _run_code_cell(page, 4)
            cell = page.locator(".jp-Notebook .jp-CodeCell").nth(4)
            cell.locator(".wb-status-word").first.wait_for(state="visible", timeout=60_000)
            metrics["first_paint_warm_page_s"] = round(time.monotonic() - started, 2)
            _run_and_wait(page, 5)
            kernel = kernel_metrics(before_second)
            _run_and_wait(page, 7)
            # A refresh's bytes: the extends and replaces; a reset is the whole data again, sent for a page
            # that (re)opened a plot and to a rebuilt plot (a page that left: docs/dashboard.md), counted apart.
            sent = [pair for sizes, kinds in kernel["sent"].values() for pair in zip(sizes, kinds)]
            sizes = [size for size, kind in sent if kind != "reset"]
            metrics["resets_sent"] = sum(kind == "reset" for _, kind in sent)
            metrics["bytes_per_refresh_per_plot"] = {
                "median": int(_quantile(sizes, 0.5)),
                "p90": int(_quantile(sizes, 0.9)),
                "max": max(sizes, default=0),
            }
            metrics["held_back_updates"] = kernel["skipped"]
            metrics["widgets_rebuilt"] = kernel["replaced"]  # a busy page's unstarted widgets (anywidget's 2 s)
            metrics["js_heap_mb"] = page.evaluate("() => Math.round(performance.memory.usedJSHeapSize / 1e6)")
            # JupyterLab logs "Comm not found for comm id ..." when the kernel closes a widget the page has not
            # registered yet, such as a plot rebuilt just after the reload (its old page never answered) is closed
            # while the new page is still restoring the kernel's widgets. The page holds nothing of that
            # widget, so nothing is lost: counted, not failed (seen once, stop 62's CI run under the CPU hog).
            unregistered = [e for e in errors if e.startswith("Comm not found for comm id ")]
            metrics["closed_before_registered"] = len(unregistered)
            metrics["console_errors"] = [e for e in errors if e not in unregistered][:20]
        except BaseException:
            # What the page held (plots, stores, plotly) goes in the report: CI keeps no artifacts.
            metrics["page_state_at_failure"] = page.evaluate(DIAGNOSE_JS)
            metrics["console_at_failure"] = errors[-20:]
            page.screenshot(path=str(ARTIFACTS / "load-failure.png"), full_page=True)
            (ARTIFACTS / "load-failure-console.txt").write_text("\n".join(errors))
            raise
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
            (ARTIFACTS / "browser-metrics.json").write_text(json.dumps(metrics, indent=2))
            print("\nbrowser metrics:", json.dumps(metrics, indent=2))
            context.close()
            shutil.rmtree(profile, ignore_errors=True)

    assert metrics["typed"] == [200, 200, 200], f"keystrokes lost under load: {metrics['typed']}"
    assert not metrics["console_errors"], f"errors in the page's console: {metrics['console_errors']}"
    assert metrics["bytes_per_refresh_per_plot"]["p90"] < 20_000
    # The first paints, the event loop's lag and training speed are reported above, not asserted: timings are
    # the benchmarks' job (benchmarks/first_paint.py, benchmarks/dashboard_overhead.py).
    assert metrics["first_paint_s"] > 0 and metrics["first_paint_warm_page_s"] > 0
    assert metrics["plotly_loads"] == 1


# -- "Interrupt Kernel" while a cell trains (issue 32, item 1) ----------------------------------------

INTERRUPT_NOTEBOOK = "notebooks/interrupt.ipynb"
INTERRUPT_CELLS = [
    # 0: a long run; a helper thread drops a file once training has visibly progressed
    "import os, threading, time\n"
    "import workbench as wb\n"
    "session = wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1', seed=0)\n"
    "def _progressed():\n"
    "    while session.steps < 2048:\n"
    "        time.sleep(0.1)\n"
    "    open('interrupt-progress.txt', 'w').write(str(session.steps))\n"
    "threading.Thread(target=_progressed, daemon=True).start()\n"
    "print('WB-PID', os.getpid(), flush=True)\n"
    "session.run(steps=10_000_000)",
    # 1: what the interrupted run left, in the same kernel
    "print('WB-AFTER', os.getpid(), session.status, session.stop_reason, session.is_alive, session.steps)",
    # 2: the session trains again
    "before = session.steps\n"
    "session.run(steps=200)\n"
    "print('WB-AGAIN', session.status, session.stop_reason, session.steps - before)",
]


def _cell_text(page, index: int) -> str:
    output = page.locator(".jp-Notebook .jp-CodeCell").nth(index).locator(".jp-OutputArea-output")
    return "\n".join(output.all_inner_texts())


def test_interrupt_kernel_stops_the_run_and_keeps_the_kernel(jupyter):
    """JupyterLab's Kernel > Interrupt Kernel while a cell runs ``session.run(...)``: the cell ends with
    KeyboardInterrupt, the same kernel lives on (same pid, execution count goes on), the run is stopped
    with stop_reason "interrupted" and its thread joined, and the session trains again."""
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    notebook = _load_notebook()
    notebook["cells"] = [{**notebook["cells"][0], "source": src} for src in INTERRUPT_CELLS]
    (served / INTERRUPT_NOTEBOOK).write_text(json.dumps(notebook))
    progress = served / "notebooks" / "interrupt-progress.txt"  # the kernel's cwd: the notebook's folder
    progress.unlink(missing_ok=True)
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/lab/workspaces/wbinterrupt/tree/{INTERRUPT_NOTEBOOK}?token={token}&reset"
    with sync_playwright() as pw:
        profile = ROOT / "test-artifacts" / ".chromium-profile-interrupt"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1300, "height": 1100}, args=ARGS
        )
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(60_000)
        kernel = page.locator("span.jp-StatusBar-TextItem[title^='Change kernel']")
        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            _wait_for(page, lambda: "WB-PID" in _cell_text(page, 0), 60, "cell 0 to print its pid")
            pid = re.search(r"WB-PID (\d+)", _cell_text(page, 0)).group(1)
            _wait_for(page, progress.exists, 60, "training to pass 2048 steps")
            assert "Busy" in kernel.first.inner_text(), "the kernel should be busy in session.run(...)"

            page.get_by_role("menuitem", name="Kernel", exact=True).click()
            page.get_by_role("menuitem", name=re.compile(r"^Interrupt Kernel")).click()
            _wait_for(page, lambda: "KeyboardInterrupt" in _cell_text(page, 0), 30, "KeyboardInterrupt in cell 0")
            _wait_for(page, lambda: "Idle" in kernel.first.inner_text(), 30, "the kernel to be idle again")

            _run_code_cell(page, 1)
            _wait_for(page, lambda: "WB-AFTER" in _cell_text(page, 1), 30, "cell 1's line")
            after = re.search(r"WB-AFTER (\d+) (\S+) (\S+) (\S+) (\d+)", _cell_text(page, 1))
            assert after is not None, _cell_text(page, 1)
            assert after.group(1) == pid, "the kernel was restarted: its pid changed"
            assert after.groups()[1:4] == ("stopped", "interrupted", "False"), after.group(0)
            assert int(after.group(5)) >= 2048, after.group(0)
            # The same kernel counts on: a restarted one would number cell 1 [1] again.
            prompt = page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".jp-InputPrompt")
            assert "[2]" in prompt.inner_text(), prompt.inner_text()

            _run_code_cell(page, 2)
            _wait_for(page, lambda: "WB-AGAIN" in _cell_text(page, 2), 60, "cell 2's line")
            again = re.search(r"WB-AGAIN (\S+) (\S+) (\d+)", _cell_text(page, 2))
            assert again is not None and again.groups()[:2] == ("finished", "budget"), _cell_text(page, 2)
            assert int(again.group(3)) >= 200, again.group(0)
            # No "Kernel Restarting" or dead-kernel dialog at any point, and the kernel ends idle.
            assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").all_inner_texts()
            _wait_for(page, lambda: "Idle" in kernel.first.inner_text(), 30, "the kernel to be idle at the end")
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "interrupt-failure.png"), full_page=True)
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


# -- back from another page: the dashboard on the first load, every time (issue 49) -------------------

RELOAD_NOTEBOOK = "notebooks/reload.ipynb"
RELOAD_CELLS = [
    "import workbench as wb\n"
    "session = wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1', seed=0)\n"
    "session.start(steps=50_000_000)\n"
    "session",
    "session.stop()",
]
PBT_NOTEBOOK = "notebooks/pbt_reload.ipynb"
PBT_CELLS = [
    "import workbench as wb\n"
    "def make(**hp):\n"
    "    return wb.PPO('CartPole-v1', n_steps=64, batch_size=64, n_epochs=1, net_arch=(8,), **hp)\n"
    "population = wb.pbt(make, 'CartPole-v1', population=2, space={'learning_rate': (1e-4, 1e-2)},\n"
    "                    steps=5_000_000, interval=256, metric='episode_reward', window=5, directory='pbt-reload')\n"
    "population",
    "population.stop()",
]

FILLED_JS = """(selector) => {
    const plots = [...document.querySelectorAll('.jp-OutputArea-output ' + selector)];
    const filled = plots.filter((p) => {
        const div = p.querySelector('.js-plotly-plot');
        return div && div.data && div.data.length && div.data.some((t) => t.x && t.x.length > 0);
    });
    return { plots: plots.length, filled: filled.length };
}"""


def _filled(page, selector: str) -> bool:
    """True when the page shows at least one plot matching ``selector`` and every one of them has points."""
    state = page.evaluate(FILLED_JS, selector)
    return state["plots"] > 0 and state["filled"] == state["plots"]


def _notebook_page(pw, served: Path, path: str, cells: list[str], workspace: str, base: str, token: str):
    """A fresh Chromium profile on ``path`` (written with ``cells``), in a workspace of its own."""
    notebook = _load_notebook()
    notebook["cells"] = [{**notebook["cells"][0], "source": src} for src in cells]
    (served / path).write_text(json.dumps(notebook))
    profile = ROOT / "test-artifacts" / f".chromium-profile-{workspace}"
    shutil.rmtree(profile, ignore_errors=True)
    context = pw.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1300, "height": 1100}, args=ARGS
    )
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(60_000)
    return context, page, profile, f"{base}/lab/workspaces/{workspace}/tree/{path}?token={token}&reset"


def _save_outputs(page, path: Path) -> None:
    """Save the notebook (in command mode) until ``path`` holds a widget output: a reload shows the live
    view from the saved output, and a notebook with unsaved changes would ask before it unloads."""

    def saved() -> bool:
        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")
        page.wait_for_timeout(700)
        return "application/vnd.jupyter.widget-view+json" in path.read_text()

    _wait_for(page, saved, 30, f"{path.name} saved with its outputs")


def _back_from_another_page(page, url: str, saved: Path, away_s: float, selector: str, wait_s: float) -> bool:
    """Save, leave for a blank page for ``away_s`` seconds, load the notebook once: True when every plot
    matching ``selector`` fills within ``wait_s`` seconds of the kernel's status reading idle."""
    _save_outputs(page, saved)
    page.goto("about:blank")
    page.wait_for_timeout(int(away_s * 1000))
    page.goto(url)
    _wait_for_kernel(page)
    try:
        _wait_for(page, lambda: _filled(page, selector), wait_s, "the plots after coming back")
    except AssertionError:
        return False
    return True


def test_dashboard_comes_back_on_the_first_load_every_time(jupyter):
    """Five times: leave the notebook for a blank page (from a moment to longer than the dashboard waits
    before it rebuilds a silent widget), load it once, and every plot of the live dashboard fills."""
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        context, page, profile, url = _notebook_page(pw, served, RELOAD_NOTEBOOK, RELOAD_CELLS, "wbreload", base, token)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        loads: list[bool] = []
        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            _wait_for(page, lambda: _filled(page, ".wb-plot"), 90, "the dashboard's plots")
            for i in range(5):
                # Away for 0.5 to 14 s: short visits, and ones past the 6 and 12 s after which the kernel
                # rebuilds a widget no page answers (the rebuild may land while the page loads again).
                loads.append(
                    _back_from_another_page(page, url, served / RELOAD_NOTEBOOK, (0.5, 4, 7, 9, 14)[i], ".wb-plot", 45)
                )
                if not loads[-1]:
                    page.screenshot(path=str(ARTIFACTS / "reload-empty.png"), full_page=True)
                    break
            _run_and_wait(page, 1)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "reload-failure.png"), full_page=True)
            raise
        finally:
            print(
                f"\nfirst loads that filled the plots: {sum(loads)} of {len(loads)}; page state",
                page.evaluate(DIAGNOSE_JS) if page.url != "about:blank" else None,
            )
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
    assert loads == [True] * 5, f"a load left the plots empty: {loads}"
    assert not errors, errors
    # The kernel dropped none of the page's messages to the widgets as addressed to a subshell that is gone
    # (ipykernel 7 routes them to the subshell that last wrote to the widget; see workbench/ui/comm_route.py).
    log = (served.parent / "jupyter.log").read_text()
    assert "Unknown subshell_id" not in log, log[-3000:]


def test_population_dashboard_comes_back_after_a_reload(jupyter):
    """A population's dashboard: its curves fill, and fill again on the first load after leaving the page."""
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        context, page, profile, url = _notebook_page(pw, served, PBT_NOTEBOOK, PBT_CELLS, "wbpbt", base, token)
        loads: list[bool] = []
        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            page.locator(".jp-OutputArea-output .wb-pbt-dashboard").first.wait_for(state="visible", timeout=60_000)
            _wait_for(page, lambda: _filled(page, ".wb-pbt-curves"), 120, "the members' curves")
            for away_s in (0.5, 8):
                loads.append(_back_from_another_page(page, url, served / PBT_NOTEBOOK, away_s, ".wb-pbt-curves", 45))
            assert "member 1" in page.locator(".jp-OutputArea-output .wb-pbt-dashboard").first.inner_text()
            _run_and_wait(page, 1)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "pbt-reload-failure.png"), full_page=True)
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
    assert loads == [True, True], f"a load left the curves empty: {loads}"
