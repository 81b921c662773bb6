"""The dashboard's first paint waits for as little as possible (issue 40; measured in the page by
tests/test_browser.py, benchmarks/first_paint.py and the browser test at the end of this file): in a Jupyter kernel
the dashboard's modules are imported in the background when the first session is made, never by ``import workbench``
and never outside a kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import sys
import workbench as wb
from workbench import views as views_module

def views():
    return [m for m in ('ipywidgets', 'anywidget', 'plotly', 'workbench.ui.dashboard') if m in sys.modules]

wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')  # a script: nothing imported, no thread
assert views_module._warming == [] and views() == [], views()

import IPython, ipykernel  # now as in a kernel: ipykernel loaded, a shell with a kernel
class Shell:
    kernel = object()
IPython.get_ipython = lambda: Shell()
wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')
wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')
assert len(views_module._warming) == 1  # once per kernel
views_module._warming[0].join(120)
assert views() == ['ipywidgets', 'anywidget', 'workbench.ui.dashboard'], views()  # plotly stays for the page
print('ok')
"""


def test_a_session_in_a_kernel_imports_the_dashboard_in_the_background_once():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("anywidget")
    pytest.importorskip("ipykernel")
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]


@pytest.fixture
def browser_ready():
    from test_browser import _missing

    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI, but {reason}")
        pytest.skip(reason)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timing
def test_first_paint_in_a_fresh_kernel_import_included(browser_ready):
    """A newcomer's cell in fresh kernels (JupyterLab + Chromium): import, a PPO session started and shown, timed
    to the status line in the page, beside ``import torch`` alone in fresh kernels of the same run (the part no
    code here can shorten). Figures in test-artifacts/first_paint.json; the goal itself is measured and reported
    by ``benchmarks/first_paint.py`` (speed targets are the benchmarks' job, not the tests'). What is asserted is
    that the view arrives in every round (``measure`` waits for the status line in each), and a bound only a regression breaks (the old 8 s first paint would):
    the imported paint over three times its goal, or workbench's share beyond torch's import over 5 s."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from first_paint import measure

    results = measure(rounds=1)
    paint = min(r["first_paint_s"] for r in results["import included"])
    imported = min(r["first_paint_s"] for r in results["imported"])
    torch_s = min(r["kernel_s"] for r in results["torch alone"])
    figures = {"import_included_s": paint, "imported_s": imported, "torch_alone_s": torch_s, "rounds": results}
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "first_paint.json").write_text(json.dumps(figures, indent=1))
    print("first paint:", json.dumps({k: v for k, v in figures.items() if k != "rounds"}))
    assert imported <= 4.5, figures  # workbench imported: the cell, the kernel and the page
    assert paint - torch_s <= 5.0, figures  # import included: workbench's import, the session, the view, the page
