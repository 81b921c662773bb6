"""Notebooks are saved clean, and the Binder set-up installs what they need.

Running every notebook top to bottom is `make test`'s `pytest --nbmake notebooks` step (with WB_QUICK=1).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks_for_every_use():
    names = {p.name for p in NOTEBOOKS}
    assert {
        "quickstart.ipynb",
        "custom_env.ipynb",
        "save_load_play.ipynb",
        "parallel_and_ray.ipynb",
        "compare_runs.ipynb",
        "sweep.ipynb",
        "external.ipynb",
        "continuous_control.ipynb",
    } <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_saved_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs: clear them before committing"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_honour_the_quick_setting(path):
    assert "WB_QUICK" in path.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_readme_links_every_notebook(path):
    assert f"notebooks/{path.name}" in (ROOT / "README.md").read_text()


def test_binder_uses_the_cpu_torch_index_and_installs_the_project():
    reqs = (ROOT / "binder" / "requirements.txt").read_text()
    assert "whl/cpu" in reqs and "torch==" in reqs
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)
    assert "pip install" in (ROOT / "binder" / "postBuild").read_text()
    assert "mybinder.org" in (ROOT / "README.md").read_text()


def _project_copy(dest: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow
def test_binder_steps_in_a_fresh_environment(tmp_path):
    """Repeat what repo2docker does (it cannot run here): a fresh venv, binder/requirements.txt, postBuild,
    then the quickstart notebook executed in that environment."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # --no-compile: byte-compiling torch, ray and jupyterlab on install took about a minute of this test, and
    # what it checks (the packages resolve, postBuild runs, the notebook executes) does not depend on it.
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    # The torch line is satisfied by the local CPU wheel; index lines are dropped (no network to them here).
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    reqs = [
        line
        for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "--"))
    ]
    (tmp_path / "reqs.txt").write_text("\n".join(reqs) + "\n")
    subprocess.run([*pip, "-r", str(tmp_path / "reqs.txt")], check=True)
    repo = _project_copy(tmp_path / "repo")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "VIRTUAL_ENV": str(env_dir),
        "WB_QUICK": "1",
    }
    env.pop("PYTHONPATH", None)
    subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, check=True)
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c", "import workbench, sys; print(workbench.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(env_dir) in probe.stdout  # the installed package, not this checkout
    out = tmp_path / "executed.ipynb"
    subprocess.run(
        [
            str(bin_dir / "jupyter"),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=600",
            "--output",
            str(out),
            "notebooks/quickstart.ipynb",
        ],
        cwd=repo,
        env=env,
        check=True,
    )
    executed = json.loads(out.read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
