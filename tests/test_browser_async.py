"""An APPO run's dashboard in a real browser (issue 51): JupyterLab on a loopback port, headless Chromium.

APPO learns while two local worker processes keep stepping its envs (a sampler thread); the dashboard's Pause
holds the step counter and Stop ends the run, as for any session. Skips without Chromium, except in CI
(as tests/test_browser.py, whose JupyterLab fixture this test shares).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_browser import (
    ARGS,
    CHROMIUM,
    _run_code_cell,
    _screenshot,
    _status,
    _steps,
    _wait_for,
    _wait_for_kernel,
    browser_ready,  # noqa: F401 (a fixture: skips without Chromium)
    jupyter,  # noqa: F401 (a fixture: JupyterLab serving a temp folder)
)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOK = "notebooks/appo_dashboard.ipynb"

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELL = (
    "import workbench as wb\n"
    "agent = wb.APPO('CartPole-v1', n_envs=4, n_steps=16, batch_size=64, n_epochs=1)\n"
    "session = wb.Session(agent, 'CartPole-v1', num_workers=2, backend='local', seed=0)\n"
    "session.start(steps=5_000_000)\n"
    "session"
)


def test_pause_and_stop_an_appo_run_from_its_dashboard(jupyter):  # noqa: F811 (the fixture)
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    notebook = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CELL}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (served / NOTEBOOK).write_text(json.dumps(notebook))
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        profile = ARTIFACTS / ".chromium-profile-async"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1300, "height": 1000}, args=ARGS
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            page.locator(".jp-OutputArea-output .wb-dashboard").first.wait_for(state="visible", timeout=90_000)
            _wait_for(page, lambda: _steps(page) > 2_000, 90, "the APPO run to take steps")
            assert _status(page) == "running"

            page.locator(".jp-OutputArea-output button.wb-pause").click()
            _wait_for(page, lambda: _status(page) == "paused", 15, "the status to read paused")
            held = _steps(page)
            page.wait_for_timeout(1500)
            assert _steps(page) == held, "the step counter moved while paused"

            page.locator(".jp-OutputArea-output button.wb-stop").click()
            _wait_for(page, lambda: _status(page) == "stopped", 30, "the status to read stopped")
            page.wait_for_timeout(500)  # the last refresh lands before the picture is taken
            _screenshot(page, ".jp-OutputArea-output .wb-dashboard", ARTIFACTS / "appo_dashboard.png")
        finally:
            context.close()
