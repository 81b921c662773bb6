"""Videos and human play in a real browser (issue 36): JupyterLab on a loopback port, headless Chromium.

* The dashboard of a training session shows its evaluation videos: a ``<video>`` element plays (its
  time advances), under the step it came from; an earlier video is picked from the list; after the
  notebook is saved and the page reloaded, a video plays again.
* ``wb.HumanPlay`` takes real key presses: the frame is clicked, arrows are held, and the recorded
  dataset holds the actions those keys mean.

Screenshots go to test-artifacts/. Skips without Chromium, except in CI (as tests/test_browser.py).
"""

from __future__ import annotations

import os
import re
import shutil
import time
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
NOTEBOOK = "notebooks/videos.ipynb"
HUMAN_NOTEBOOK = "notebooks/human.ipynb"  # its own kernel: the training run of the other one does not slow it

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELLS = [
    # 0: a long run with a short video every 1,500 steps; the dashboard shows it
    "import time\n"
    "import workbench as wb\n"
    "session = wb.Session(wb.PPO('CartPole-v1', n_steps=32, n_envs=4, net_arch=(16,)), 'CartPole-v1', seed=0,\n"
    "                     video_every=1_500, checkpoint_dir='runs/video', eval_episodes=1,\n"
    "                     video_options={'max_seconds': 4, 'fps': 20})\n"
    "session.start(steps=300_000)\n"
    "session",
    # 1: stop it
    "session.stop(); print('WB-STOPPED', session.status, len(session.videos))",
    # 2 (the human notebook's first cell): a person plays MountainCar: no key is "no push"; episodes are cut at 60 steps (3 s at 20 fps)
    "import time\nimport workbench as wb\nplay = wb.HumanPlay('MountainCar-v0', fps=20, max_steps=60, seed=0)\nplay",
    # 3: what was recorded
    "deadline = time.time() + 30\n"
    "while play.episodes < 1 and time.time() < deadline:\n"
    "    time.sleep(0.1)\n"
    "play.stop()\n"
    "print('WB-HUMAN', play.episodes, sorted(set(play.dataset.actions.tolist())), len(play.dataset))",
]

# Each <video> element gets a tag on first sight, so that two readings can be told to be of one element:
# the panel swaps in a new element whenever a newer video arrives (every 1,500 steps here).
PLAYING_JS = """() => {
    const v = document.querySelector('.wb-video-panel video.wb-video');
    if (!v) return null;
    if (!v.dataset.wbTag) v.dataset.wbTag = String(Math.random());
    return { tag: v.dataset.wbTag, t: v.currentTime, ready: v.readyState, paused: v.paused, w: v.videoWidth };
}"""


@pytest.fixture(scope="module")
def jupyter(browser_ready, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("jupyter-video")
    served = tmp / "served"
    (served / "notebooks").mkdir(parents=True)
    (served / NOTEBOOK).write_text(code_notebook(CELLS))
    (served / HUMAN_NOTEBOOK).write_text(code_notebook(CELLS[2:]))
    env = {k: v for k, v in os.environ.items() if k != "WB_QUICK"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with serving_jupyter(tmp, served, env) as (base, token):
        yield base, token, served


def _video_plays(page, what: str, timeout_s: float = 60) -> dict:
    """Wait for the panel's <video> to play: loaded, not paused, its time moving, in one element.

    Under load a newer video can replace the element between two readings (CI once read a fresh,
    unloaded element right after the old one had played), so both readings must be of one element,
    and a swap starts the wait over rather than failing it.
    """
    _wait_for(page, lambda: page.evaluate(PLAYING_JS) is not None, timeout_s, f"a <video> element ({what})")
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        first = page.evaluate(PLAYING_JS)
        if first and first["ready"] >= 2 and first["w"] > 0 and not first["paused"]:
            page.wait_for_timeout(500)
            last = page.evaluate(PLAYING_JS)
            if last and last["tag"] == first["tag"] and last["t"] != first["t"] and not last["paused"]:
                return last
        else:
            last = first
        page.wait_for_timeout(200)
    raise AssertionError(f"the video never played ({what}) within {timeout_s:.0f} s; last seen: {last}")


def _caption(page) -> str:
    return page.locator(".wb-video-panel .wb-video-step").first.inner_text()


def test_videos_play_in_the_dashboard_and_in_a_reloaded_page(jupyter):
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/lab/workspaces/wbvideo/tree/{NOTEBOOK}?token={token}&reset"
    with sync_playwright() as pw:
        profile = ARTIFACTS / ".chromium-profile-video"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            viewport={"width": 1400, "height": 1100},
            args=[*ARGS, "--autoplay-policy=no-user-gesture-required"],
        )
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            _video_plays(page, "the first evaluation video")
            assert re.search(r"evaluation at step [\d,]+", _caption(page)), _caption(page)
            # Earlier ones are selectable: wait for a second video, pick the first.
            select = page.locator(".wb-video-panel .wb-video-select select").first
            _wait_for(page, lambda: select.locator("option").count() >= 3, 120, "a second video in the list")
            page.locator(".wb-video-panel").first.screenshot(path=str(ARTIFACTS / "video-panel.png"))
            first_label = select.locator("option").nth(1).inner_text()  # "step 1,500" (a no-break space)
            select.select_option(index=1)
            step = re.search(r"[\d,]+", first_label).group(0)
            _wait_for(page, lambda: f"step {step}" in _caption(page), 30, f"the caption to say step {step}")
            _video_plays(page, "an earlier video picked from the list")
            select.select_option(index=0)  # latest again

            # Saved with its outputs, left and loaded again: the dashboard comes back and a video plays.
            # As tests/test_browser.py's reload check: a loaded machine once left a reloaded page without
            # its widgets ("model not found"), so the page is loaded once more before failing.
            page.keyboard.press("Control+s")
            page.wait_for_timeout(1000)
            for attempt in range(2):
                page.goto("about:blank")
                page.goto(url)
                _wait_for_kernel(page)
                try:
                    _video_plays(page, "after a reload", timeout_s=60)
                    break
                except AssertionError:
                    if attempt == 1:
                        raise
            _run_code_cell(page, 1)
            _wait_for(page, lambda: "WB-STOPPED" in _cell_text(page, 1), 60, "the session to stop")
            stopped = re.search(r"WB-STOPPED (\S+) (\d+)", _cell_text(page, 1))
            assert stopped and stopped.group(1) == "stopped" and int(stopped.group(2)) >= 2, _cell_text(page, 1)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "video-failure.png"), full_page=True)
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def test_human_play_records_real_key_presses(jupyter):
    from playwright.sync_api import sync_playwright

    base, token, served = jupyter
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/lab/workspaces/wbhuman/tree/{HUMAN_NOTEBOOK}?token={token}&reset"
    with sync_playwright() as pw:
        profile = ARTIFACTS / ".chromium-profile-human"
        shutil.rmtree(profile, ignore_errors=True)
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1400, "height": 1100}, args=ARGS
        )
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(url)
            _wait_for_kernel(page)
            _run_code_cell(page, 0)
            frame = page.locator(".wb-human-frame").first
            frame.wait_for(state="visible", timeout=60_000)
            _wait_for(
                page,
                lambda: page.evaluate(
                    "() => { const i = document.querySelector('.wb-human-frame img'); return !!(i && i.naturalWidth); }"
                ),
                60,
                "the first frame",
            )
            frame.click()
            page.keyboard.down("ArrowLeft")
            page.wait_for_timeout(700)
            page.keyboard.up("ArrowLeft")
            page.keyboard.down("ArrowRight")
            page.wait_for_timeout(700)
            page.keyboard.up("ArrowRight")
            frame.screenshot(path=str(ARTIFACTS / "human-play.png"))
            _run_code_cell(page, 1)
            _wait_for(page, lambda: "WB-HUMAN" in _cell_text(page, 1), 60, "the recorded dataset")
            found = re.search(r"WB-HUMAN (\d+) \[([\d, ]+)\] (\d+)", _cell_text(page, 1))
            assert found, _cell_text(page, 1)
            # Left (0) and right (2) as pressed, "no push" (1) between and after.
            assert int(found.group(1)) >= 1 and found.group(2).replace(" ", "") == "0,1,2", found.group(0)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "human-failure.png"), full_page=True)
            raise
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
