"""``make docs``: the documentation site (mkdocs-material, the API reference from the docstrings by mkdocstrings)
builds with warnings as errors, so a broken link, a missing page or a reference that no longer resolves fails CI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import workbench as wb

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def _nav_pages() -> list[str]:
    return re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)


def test_make_docs_builds_the_site_strictly():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and "mkdocs build --strict" in recipe.group(1)
    assert re.search(r"^strict: true$", (ROOT / "mkdocs.yml").read_text(), re.M)


def test_every_guide_and_reference_page_is_in_the_nav():
    pages = _nav_pages()
    docs = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(pages) == docs, "add the page to mkdocs.yml's nav (or remove it from docs/)"


def test_every_public_name_has_its_reference_page():
    """The public namespace's page maps each name of ``wb.__all__`` to the page that documents it."""
    index = (REFERENCE / "index.md").read_text()
    missing = [name for name in wb.__all__ if name != "__version__" and f"`{name}`" not in index]
    assert missing == [], f"docs/reference/index.md does not name {missing}"
    for page in re.findall(r"\]\(([\w-]+\.md)\)", index):
        assert (REFERENCE / page).exists(), page


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_site_builds_strictly_and_shows_the_public_names(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python", reason="pip install -e '.[docs]' (the docs site)")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reference = "".join(p.read_text() for p in (site / "reference").rglob("index.html"))
    for name in (
        "workbench.session.Session",
        "workbench.session.Session.start",
        "workbench.agents.PPO",
        "workbench.agents.DQN",
        "workbench.offline.datasets.Dataset",
        "workbench.agents.load",
        "workbench.schedules.linear",
        "workbench.checkpoint.CheckpointError",
        "workbench.sweeps.sweep.sweep",
        "workbench.serve.RemoteSession",
        "workbench.tracking.TensorBoard",
    ):
        assert f'id="{name}"' in reference, name
    # Docstrings are rendered, their reST roles as code (no raw ":class:`" left), parameters as a table.
    assert "background thread" in reference
    assert ":class:`" not in reference and ":meth:`" not in reference
    session_page = (site / "reference" / "session" / "index.html").read_text()
    assert "stop_when" in session_page and "<table" in session_page
    assert (site / "guide" / "index.html").exists() and (site / "architecture" / "index.html").exists()
