"""The dashboard's first paint waits for as little as possible (issue 40; measured in the page by
tests/test_browser.py and benchmarks/first_paint.py): in a Jupyter kernel the dashboard's modules are imported in
the background when the first session is made, never by ``import workbench`` and never outside a kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import sys
import workbench as wb
from workbench import session as session_module

def views():
    return [m for m in ('ipywidgets', 'anywidget', 'plotly', 'workbench.ui.dashboard') if m in sys.modules]

wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')  # a script: nothing imported, no thread
assert session_module._WARMING == [] and views() == [], views()

import IPython, ipykernel  # now as in a kernel: ipykernel loaded, a shell with a kernel
class Shell:
    kernel = object()
IPython.get_ipython = lambda: Shell()
wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')
wb.Session(wb.PPO('CartPole-v1'), 'CartPole-v1')
assert len(session_module._WARMING) == 1  # once per kernel
session_module._WARMING[0].join(120)
assert views() == ['ipywidgets', 'anywidget', 'workbench.ui.dashboard'], views()  # plotly stays for the page
print('ok')
"""


def test_a_session_in_a_kernel_imports_the_dashboard_in_the_background_once():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("anywidget")
    pytest.importorskip("ipykernel")
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]
