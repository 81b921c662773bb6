"""The README's code and the docs' runnable examples run as printed, so a sample that stops working fails CI.

* README.md: every ```` ```python ```` block runs, in order, in one namespace, with stand-ins for what the
  tour says your application provides (:data:`README_STAND_INS`: ``MyAppEnv``, ``make_env``, ``make_agent``, an
  observation ``obs`` and the feedback of one step).
* docs/*.md: the blocks marked runnable, fenced ```` ```python run ```` (the first word, ``python``, is what
  renderers highlight; ``run`` is this test's marker), run in order, one namespace per file. Mark a block only
  when it runs as printed after the file's earlier marked blocks; leave illustrative fragments plain
  ```` ```python ````.

Each file runs in its own interpreter, in an empty temporary folder. ``WB_QUICK=1`` (the default here, as the
notebooks' test step sets it) caps the budgets the samples ask for: ``Session.run``/``start`` at
:data:`QUICK_STEPS` steps (the docs' at :data:`QUICK_DOCS_STEPS`), ``wb.sweep`` at two trials of :data:`QUICK_STEPS` steps, one at a time.
``WB_QUICK=0 pytest tests/test_readme.py`` runs them in full.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
QUICK_STEPS = 1_500  # the README's: above DQN's default learning_starts (1000), the tour reads its loss
QUICK_DOCS_STEPS = 300  # the docs' examples: a few hundred steps show they run

README_STAND_INS = '''
import gymnasium as gym
import numpy as np


class MyAppEnv(gym.Wrapper):
    """The application's env of the tour: constructor arguments, and a method a curriculum calls."""

    def __init__(self, model=None, app_args=None):
        super().__init__(gym.make("CartPole-v1"))
        self.difficulty = 0

    def step(self, action):
        # An application's reward on its own scale: a tenth of CartPole's, so the tour's stop_when
        # (mean return above 18) waits for some learning, and the loss it reads exists.
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, 0.1 * reward, terminated, truncated, info

    def set_difficulty(self, level):
        self.difficulty = level
        return level


model, args = None, None


def make_env():
    return MyAppEnv()


def make_agent(lr, n_epochs):
    import workbench as wb

    return wb.PPO("CartPole-v1", learning_rate=lr, n_epochs=n_epochs, n_steps=64, batch_size=64)


obs = np.zeros(4, np.float32)
next_obs, reward, terminated, truncated = obs, 1.0, False, False
'''

RUNNER = """
import json, os, sys

blocks = json.load(open(sys.argv[1]))
quick = os.environ.get("WB_QUICK", "1") == "1"
import workbench as wb

if quick:
    steps_cap = {steps}

    def capped(method):
        def call(self, steps, *args, **kwargs):
            return method(self, min(int(steps), steps_cap), *args, **kwargs)
        call.__doc__ = method.__doc__
        return call

    wb.Session.run = capped(wb.Session.run)
    wb.Session.start = capped(wb.Session.start)
    sweep = wb.sweep

    def small_sweep(*args, **kwargs):
        kwargs.update(trials=min(kwargs.get("trials", 2), 2), parallel=1,
                      steps=min(kwargs.get("steps", steps_cap), steps_cap))
        return sweep(*args, **kwargs)

    wb.sweep = small_sweep

namespace = {{"__name__": "__main__"}}
for label, first_line, code in blocks:
    print(f"--- {{label}}", flush=True)
    # Blank lines before the code: a traceback names the file's own line numbers.
    exec(compile("\\n" * (first_line - 1) + code, label, "exec"), namespace)
print("--- all blocks ran", flush=True)
"""


def python_blocks(path: Path, marker: str | None = None) -> list[tuple[str, int, str]]:
    """``(file name, first line of the code, code)`` of each Python block of ``path``; with ``marker``
    only those whose info string also holds that word (```` ```python run ````)."""
    text = path.read_text(encoding="utf-8")
    out = []
    for match in FENCE.finditer(text):
        words = match.group("info").split()
        if not words or words[0] != "python" or (marker is not None and marker not in words[1:]):
            continue
        first_line = text.count("\n", 0, match.start("code")) + 1
        out.append((str(path.relative_to(ROOT)), first_line, match.group("code")))
    return out


def run_blocks(blocks: list[tuple[str, int, str]], tmp_path: Path, prelude: str = "", steps: int = QUICK_STEPS) -> None:
    """Run ``blocks`` in order in a fresh interpreter in ``tmp_path`` (budgets capped at ``steps`` with
    WB_QUICK=1); fail with its output if one raises."""
    if prelude:
        blocks = [("stand-ins", 1, textwrap.dedent(prelude)), *blocks]
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "runner.py").write_text(RUNNER.format(steps=steps))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "WB_QUICK": os.environ.get("WB_QUICK", "1"),
        "HOME": str(tmp_path),  # trackers' caches and settings stay in the temporary folder
        "WANDB_MODE": "offline",
        "MPLBACKEND": "Agg",
        # One torch thread: on a loaded machine torch's spinning threads made a small FQE fit 70x slower
        # (these runs check that the samples work, not how fast).
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert "--- all blocks ran" in result.stdout


def test_the_readme_has_its_tour_and_the_docs_have_runnable_examples():
    assert len(python_blocks(ROOT / "README.md")) >= 1
    marked = [path.name for path in DOCS if python_blocks(path, "run")]
    assert len(marked) >= 2, marked
    for path in DOCS:  # a marker misspelt or set on another language is not silently skipped
        for match in FENCE.finditer(path.read_text(encoding="utf-8")):
            words = match.group("info").split()
            assert not (len(words) > 1 and words[0] == "python" and words[1:] != ["run"]), (path.name, words)


def test_the_blocks_are_found_with_their_line_numbers(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n\n```python run\na = 1\n```\n\n```python\nb = 2\n```\n```bash\nls\n```\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert python_blocks(doc, "run") == [("x.md", 4, "a = 1\n")]
        assert [b[2] for b in python_blocks(doc)] == ["a = 1\n", "b = 2\n"]
    finally:
        ROOT = saved


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readme_runs_as_printed(tmp_path):
    run_blocks(python_blocks(ROOT / "README.md"), tmp_path, README_STAND_INS)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p, "run")], ids=lambda p: p.name)
def test_the_docs_runnable_examples_run_as_printed(path, tmp_path):
    run_blocks(python_blocks(path, "run"), tmp_path, steps=QUICK_DOCS_STEPS)
