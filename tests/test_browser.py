"""The dashboard in a real browser: JupyterLab on a loopback port, driven in headless Chromium.

Opens notebooks/quickstart.ipynb, runs the training cell, watches the plot gain points, clicks
Pause (the step counter holds) and Stop (the status changes), then runs the rest of the notebook
(save, load, the play viewer stepping a frame, the comparison plot) and saves screenshots to
test-artifacts/. Without a browser the test skips, except in CI (CI=true), where it must run.
"""

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


@pytest.fixture(scope="module")
def jupyter(browser_ready, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jupyter")
    port, token = _free_port(), secrets.token_hex(16)
    settings = tmp / "settings"
    _write_settings(settings)
    # Serve a copy of the notebook, so the run it saves lands in the temp dir, not in the checkout.
    served = tmp / "served"
    (served / "notebooks").mkdir(parents=True)
    # Its run must outlast the checks: 100k steps can finish (18 s unloaded) before a slow browser
    # shows the first points, and a finished run never adds the points the test waits for.
    source = (ROOT / NOTEBOOK).read_text()
    longer = re.sub(r"(STEPS = .* else )[0-9_]+", r"\g<1>5_000_000", source, count=1)
    assert longer != source, f"{NOTEBOOK} no longer sets STEPS = ... else N: update this test"
    (served / NOTEBOOK).write_text(longer)
    env = {k: v for k, v in os.environ.items() if k != "WB_QUICK"}  # a full-length run to watch
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        IPYTHONDIR=str(tmp / "ipython"),
    )
    log = open(tmp / "jupyter.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
            f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={served}",
            f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        ],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
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


def _points(page) -> int:
    return page.evaluate(
        """() => {
            const plot = document.querySelector('.wb-plot-episode_reward .js-plotly-plot')
                || document.querySelector('.jp-OutputArea-output .js-plotly-plot');
            return plot && plot.data && plot.data[0].x ? plot.data[0].x.length : 0;
        }"""
    )


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


def test_dashboard_trains_pauses_and_stops_in_a_real_browser(jupyter):
    from playwright.sync_api import sync_playwright

    base, token = jupyter
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
                "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
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
            deadline = time.monotonic() + 90
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
            first = _points(page)
            _wait_for(page, lambda: _points(page) > first, 30, "more points while training")
            assert _status(page) == "running"

            page.locator(".jp-OutputArea-output button.wb-pause").click()
            _wait_for(page, lambda: _status(page) == "paused", 15, "the status to read paused")
            held = _steps(page)
            page.wait_for_timeout(1500)
            assert _steps(page) == held, "the step counter moved while paused"
            assert page.locator(".jp-OutputArea-output button.wb-resume").is_enabled()
            assert not page.locator(".jp-OutputArea-output button.wb-pause").is_enabled()

            page.locator(".jp-OutputArea-output button.wb-stop").click()
            _wait_for(page, lambda: _status(page) == "stopped", 30, "the status to read stopped")
            assert page.locator(".jp-OutputArea-output button.wb-start").is_enabled()
            page.wait_for_timeout(500)  # the last refresh lands before the picture is taken
            page.locator(".jp-OutputArea-output .wb-dashboard").first.screenshot(path=str(ARTIFACTS / "dashboard.png"))

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
            compared = page.locator(".jp-Notebook .jp-CodeCell").last.locator(".js-plotly-plot svg.main-svg")
            compared.first.wait_for(state="visible", timeout=60_000)  # wb.compare's figure
            viewer.screenshot(path=str(ARTIFACTS / "play_viewer.png"))
            page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"), full_page=True)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)  # what the browser showed
            (ARTIFACTS / "failure.html").write_text(page.content())
            (ARTIFACTS / "failure-console.txt").write_text("\n".join(console))
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000
