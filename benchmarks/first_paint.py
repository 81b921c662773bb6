"""The dashboard's first paint in JupyterLab + headless Chromium, in fresh kernels (issue 40).

First paint: from running the cell to the dashboard's status line in the page. Each round opens the notebook
afresh (a new page and a new kernel) and times two cells, as a newcomer runs them:

* ``import included``: one cell that imports workbench, builds a PPO session, starts it and shows it;
* ``imported``: the same with workbench imported and the session built by the cell before (the browser test's
  ``first_paint_s``: ``session.start(...)`` then ``session``);
* ``torch alone``: a fresh kernel's ``import torch``, timed in the kernel: the floor under the first number that
  this project does not control (``import workbench`` needs torch).

The kernel's own share (from the cell's first line to ``display`` returning) is read back from the kernel, so the
page's share is the difference. Needs what ``tests/test_browser.py`` needs (Chromium, JupyterLab, Playwright).
The kernels get a compiled-bytecode cache (``PYTHONPYCACHEPREFIX`` in a temp dir, filled before the first round)
even where ``PYTHONDONTWRITEBYTECODE`` is set, as an installed package has: otherwise every fresh kernel compiles
workbench's sources again, which no user's kernel does.

    python benchmarks/first_paint.py --rounds 5          # add --busy 2 for two CPU-bound processes beside it
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
TORCH = "import time\n_t0 = time.perf_counter()\nimport torch\n_kernel_s = time.perf_counter() - _t0"
TORCH_READ = "print('WB-KERNEL', round(_kernel_s, 3))"


def _notebook(cells: list[str]) -> dict:
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s} for s in cells
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
        (served / f"fp{i}.ipynb").write_text(json.dumps(_notebook([*cells, READ])))
    (served / "torch.ipynb").write_text(json.dumps(_notebook([TORCH, TORCH_READ])))
    env = {k: v for k, v in os.environ.items() if k not in ("WB_QUICK", "PYTHONDONTWRITEBYTECODE")}
    env.update(
        PYTHONPYCACHEPREFIX=str(tmp / "pycache"),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        IPYTHONDIR=str(tmp / "ipython"),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    # Fill the bytecode cache as an installed package's is (the first import of each module writes it).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "workbench")], env=env, check=True)
    warm = "import workbench.ui.dashboard, workbench.ui.live_plot, ipykernel.kernelapp, plotly"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True, cwd=tmp)
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


def _open(page, base: str, token: str, name: str) -> None:
    page.goto(f"{base}/lab/workspaces/{name}/tree/{name}.ipynb?token={token}&reset")
    _wait_for_kernel(page)
    page.wait_for_timeout(1000)  # the page settles after loading JupyterLab


def _kernel_time(page, index: int) -> float:
    out = page.locator(".jp-Notebook .jp-CodeCell").nth(index).locator(".jp-OutputArea-output")
    _wait_for(page, lambda: out.count() > 0 and "WB-KERNEL" in out.first.inner_text(), 120, "the kernel's time")
    return float(out.first.inner_text().split("WB-KERNEL")[1].split()[0])


def _torch_round(page, base: str, token: str) -> dict:
    _open(page, base, token, "torch")
    _run_code_cell(page, 0)
    _run_code_cell(page, 1)
    return {"kernel_s": _kernel_time(page, 1)}


def _round(page, base: str, token: str, index: int, cells: list[str]) -> dict:
    _open(page, base, token, f"fp{index}")
    for i in range(len(cells) - 1):
        _run_code_cell(page, i)
        prompt = page.locator(".jp-Notebook .jp-CodeCell").nth(i).locator(".jp-InputPrompt")
        _wait_for(page, lambda p=prompt: any(c.isdigit() for c in p.inner_text()), 300, f"cell {i}")
    started = time.monotonic()
    _run_code_cell(page, len(cells) - 1)
    page.locator(".jp-OutputArea-output .wb-status-word").first.wait_for(state="visible", timeout=120_000)
    paint = time.monotonic() - started
    _run_code_cell(page, len(cells))
    return {"first_paint_s": round(paint, 2), "kernel_s": _kernel_time(page, len(cells))}


def measure(rounds: int = 3, busy: int = 0) -> dict[str, list[dict]]:
    """``rounds`` fresh kernels for each cell of :data:`CELLS` and for ``import torch`` alone, with ``busy``
    CPU-bound processes beside them: each round's first paint (the page's clock) and kernel share."""
    from playwright.sync_api import sync_playwright

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    results: dict[str, list[dict]] = {name: [] for name in [*CELLS, "torch alone"]}
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
                for _ in range(rounds):
                    for index, (name, cells) in enumerate(CELLS.items()):
                        results[name].append(_round(page, base, token, index, cells))
                        _shutdown_kernels(base, token)
                        page.goto("about:blank")
                    results["torch alone"].append(_torch_round(page, base, token))
                    _shutdown_kernels(base, token)
                    page.goto("about:blank")
                context.close()
        finally:
            for hog in hogs:
                hog.kill()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside it")
    args = parser.parse_args()
    results = measure(args.rounds, args.busy)
    load = os.getloadavg()[0]
    for name, rows in results.items():
        kernels = [r["kernel_s"] for r in rows]
        paints = [r["first_paint_s"] for r in rows if "first_paint_s" in r]
        line = f"{name:16s} "
        if paints:
            line += f"first paint median {statistics.median(paints):.2f} s {paints}, "
        print(line + f"kernel share median {statistics.median(kernels):.2f} s {kernels}")
    paint = statistics.median(r["first_paint_s"] for r in results["import included"])
    torch_s = statistics.median(r["kernel_s"] for r in results["torch alone"])
    print(
        f"import included: {paint:.2f} s, of which import torch alone {torch_s:.2f} s ({torch_s / paint:.0%}); "
        f"beyond torch {paint - torch_s:.2f} s"
    )
    print(
        f"busy processes beside it: {args.busy}; load average (1 min) at the end: {load:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
