"""``make docs``: the API reference site builds from the docstrings (pdoc) and shows the public names."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_make_docs_builds_pdoc_from_this_checkout():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^docs: ", makefile, re.M) and "pdoc ./workbench" in makefile


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_api_reference_site_builds_and_shows_the_public_names(tmp_path):
    pytest.importorskip("pdoc", reason="pip install -e '.[dev]' (pdoc builds the API reference)")
    out = tmp_path / "site"
    # "./workbench": this checkout's package, whichever one is installed.
    result = subprocess.run(
        [sys.executable, "-m", "pdoc", "./workbench", "--docformat", "restructuredtext", "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    page = (out / "workbench.html").read_text()
    assert (out / "index.html").exists() and (out / "search.js").exists()
    for name in ("Session", "PPO", "DQN", "Dataset", "evaluate_offline", "load", "linear", "CheckpointError"):
        assert f'id="{name}"' in page, name
    # Docstrings are rendered, reST roles included (no raw ":class:" outside the source listings).
    assert "every training run" in page or "background thread" in page
    text = re.sub(r'<div class="pdoc-code codehilite">.*?</div>', "", page, flags=re.S)
    text = re.sub(r"<pre.*?</pre>", "", text, flags=re.S)
    assert ":class:`" not in text
