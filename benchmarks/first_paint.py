"""The dashboard's first paint in JupyterLab + headless Chromium, in fresh kernels (issue 40).

First paint: from running the cell to the dashboard's status line in the page. Each round opens the notebook
afresh (a new page and a new kernel) and times two cells, as a newcomer runs them:

* ``import included``: one cell that imports workbench, builds a PPO session, starts it and shows it;
* ``imported``: the same with workbench imported and the session built by the cell before (the browser test's
  ``first_paint_s``: ``session.start(...)`` then ``session``).

The kernel's own share (from the cell's first line to ``display`` returning) is read back from the kernel, so the
page's share is the difference. Needs what ``tests/test_browser.py`` needs (Chromium, JupyterLab, Playwright).

    python benchmarks/first_paint.py --rounds 3          # add --busy 2 for two CPU-bound processes beside it
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_browser import ARGS, CHROMIUM, _free_port, _run_code_cell, _wait_for, _wait_for_kernel, _write_settings  # noqa: E402

SESSION = "session = wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1', seed=0)"
START = "session.start(steps=5_000_000)"
CELLS = {
    "import included": [
        "import time\n_t0 = time.perf_counter()\nimport workbench as wb\n" + SESSION + "\n" + START + "\n"
        "display(session)\n_kernel_s = time.perf_counter() - _t0",
    ],
    "imported": [
        "import time\nimport workbench as wb\n" + SESSION,
        "_t0 = time.perf_counter()\n" + START + "\ndisplay(session)\n_kernel_s = time.perf_counter() - _t0",
    ],
}
READ = "session.stop()\nprint('WB-KERNEL', round(_kernel_s, 3))"


def _notebook(cells: list[str]) -> dict:
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
            for s in [*cells, READ]
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _start_jupyter(tmp: Path) -> tuple[subprocess.Popen, str, str]:
    port, token = _free_port(), secrets.token_hex(16)
    _write_settings(tmp / "settings")
    served = tmp / "served"
    served.mkdir()
    for i, cells in enumerate(CELLS.values()):
        (served / f"fp{i}.ipynb").write_text(json.dumps(_notebook(cells)))
    env = {k: v for k, v in os.environ.items() if k != "WB_QUICK"}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        IPYTHONDIR=str(tmp / "ipython"),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
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
            f"--LabApp.user_settings_dir={tmp / 'settings'}",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        ],
        env=env,
        stdout=open(tmp / "jupyter.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                return proc, base, token
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp / "jupyter.log").read_text()[-3000:]) from None
            time.sleep(0.25)


def _shutdown_kernels(base: str, token: str) -> None:
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}") as response:
        sessions = json.loads(response.read())
    for s in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request).close()


def _round(page, base: str, token: str, index: int, cells: list[str]) -> dict:
    page.goto(f"{base}/lab/workspaces/fp{index}/tree/fp{index}.ipynb?token={token}&reset")
    _wait_for_kernel(page)
    page.wait_for_timeout(1000)  # the page settles after loading JupyterLab
    for i in range(len(cells) - 1):
        _run_code_cell(page, i)
        prompt = page.locator(".jp-Notebook .jp-CodeCell").nth(i).locator(".jp-InputPrompt")
        _wait_for(page, lambda p=prompt: any(c.isdigit() for c in p.inner_text()), 300, f"cell {i}")
    started = time.monotonic()
    _run_code_cell(page, len(cells) - 1)
    page.locator(".jp-OutputArea-output .wb-status-word").first.wait_for(state="visible", timeout=120_000)
    paint = time.monotonic() - started
    _run_code_cell(page, len(cells))
    out = page.locator(".jp-Notebook .jp-CodeCell").nth(len(cells)).locator(".jp-OutputArea-output")
    _wait_for(page, lambda: out.count() > 0 and "WB-KERNEL" in out.first.inner_text(), 120, "the kernel's time")
    kernel = float(out.first.inner_text().split("WB-KERNEL")[1].split()[0])
    return {"first_paint_s": round(paint, 2), "kernel_s": kernel}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside it")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    results: dict[str, list[dict]] = {name: [] for name in CELLS}
    with tempfile.TemporaryDirectory() as tmp:
        proc, base, token = _start_jupyter(Path(tmp))
        try:
            with sync_playwright() as pw:
                context = pw.chromium.launch_persistent_context(
                    str(Path(tmp) / "profile"),
                    executable_path=CHROMIUM,
                    headless=True,
                    viewport={"width": 1300, "height": 1000},
                    args=ARGS,
                )
                page = context.pages[0] if context.pages else context.new_page()
                page.set_default_timeout(120_000)
                for _ in range(args.rounds):
                    for index, (name, cells) in enumerate(CELLS.items()):
                        results[name].append(_round(page, base, token, index, cells))
                        _shutdown_kernels(base, token)
                        page.goto("about:blank")
                context.close()
        finally:
            for hog in hogs:
                hog.kill()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    load = os.getloadavg()[0]
    for name, rows in results.items():
        paints = [r["first_paint_s"] for r in rows]
        kernels = [r["kernel_s"] for r in rows]
        print(
            f"{name:16s} first paint median {statistics.median(paints):.2f} s {paints}, "
            f"kernel share median {statistics.median(kernels):.2f} s {kernels}"
        )
    print(
        f"busy processes beside it: {args.busy}; load average (1 min) at the end: {load:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
