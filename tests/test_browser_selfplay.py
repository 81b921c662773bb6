"""Self-play's board in a real browser (issue 56): JupyterLab on a loopback port, headless Chromium.

A person plays Tic-Tac-Toe against the agent by clicking the board's squares in the notebook until the
game ends; the kernel then holds the finished game as a recorded demonstration. Screenshots go to
test-artifacts/. Skips without Chromium, except in CI (as tests/test_browser.py).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from test_browser import (
    ARGS,
    CHROMIUM,
    _cell_text,
    _run_code_cell,
    _wait_for,
    _wait_for_kernel,
    browser_ready,  # noqa: F401 (a fixture: skips without Chromium)
    code_notebook,
    serving_jupyter,
)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOK = "notebooks/board.ipynb"

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELLS = [
    # 0: a learner bound to its self-play env (no training needed to play it), and the board
    "import workbench as wb\n"
    "from pettingzoo.classic import tictactoe_v3\n"
    "env = wb.SelfPlay(tictactoe_v3.env)\n"
    "env.bind(wb.PPO(env, seed=0))\n"
    "play = wb.HumanPlay(env, seed=0)\n"
    "play",
    # 1: what was recorded
    "print('WB-BOARD', play.episodes, play.over, len(play.dataset), play.dataset.num_episodes)",
]

ENABLED = ".wb-board-play .wb-board-square:not([disabled])"


@pytest.fixture(scope="module")
def jupyter(browser_ready, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("jupyter-board")
    served = tmp / "served"
    (served / "notebooks").mkdir(parents=True)
    (served / NOTEBOOK).write_text(code_notebook(CELLS))
    env = {k: v for k, v in os.environ.items() if k != "WB_QUICK"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with serving_jupyter(tmp, served, env) as (base, token):
        yield base, token


def test_a_person_clicks_a_tictactoe_game_to_its_end(jupyter):
    from playwright.sync_api import sync_playwright

    base, token = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/lab/workspaces/wbboard/tree/{NOTEBOOK}?token={token}&reset"
    with sync_playwright() as pw:
        profile = ARTIFACTS / ".chromium-profile-board"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1400, "height": 1100}, args=ARGS
        )
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(60_000)
        status = page.locator(".wb-board-play .wb-board-status").first
        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            page.locator(".wb-board-play").first.wait_for(state="visible", timeout=90_000)
            _wait_for(page, lambda: page.locator(ENABLED).count() == 9, 60, "an empty board")
            for _ in range(5):  # the person moves first: at most five moves end the game
                if "game over" in status.inner_text():
                    break
                before = page.locator(ENABLED).count()
                page.locator(ENABLED).first.click()
                _wait_for(
                    page,
                    lambda before=before: (
                        "game over" in status.inner_text() or page.locator(ENABLED).count() == before - 2
                    ),
                    30,
                    "the move and the agent's reply",
                )
            assert "game over" in status.inner_text(), status.inner_text()
            assert page.locator(ENABLED).count() == 0  # a finished board takes no more clicks
            page.locator(".wb-board-play").first.screenshot(path=str(ARTIFACTS / "board-play.png"))
            _run_code_cell(page, 1)
            _wait_for(page, lambda: "WB-BOARD" in _cell_text(page, 1), 60, "the recorded game")
            found = re.search(r"WB-BOARD (\d+) (\w+) (\d+) (\d+)", _cell_text(page, 1))
            assert found, _cell_text(page, 1)
            assert found.group(1) == "1" and found.group(2) == "True" and 3 <= int(found.group(3)) <= 5
            assert found.group(4) == "1"
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "board-failure.png"), full_page=True)
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
