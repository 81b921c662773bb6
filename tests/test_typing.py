"""The package's type hints are checked: mypy is clean on workbench/ ([tool.mypy] in pyproject.toml), and
`make test` and `make lint` run it (after ruff, before the tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _recipe(target: str) -> list[str]:
    found = re.search(rf"^{target}: .*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert found, f"the Makefile has no {target} target"
    return [line.strip() for line in found.group(1).splitlines()]


@pytest.mark.parametrize("target", ["test", "lint"])
def test_make_runs_the_type_check_after_ruff(target):
    lines = _recipe(target)
    ruff = next(i for i, line in enumerate(lines) if "ruff check" in line)
    mypy = next(i for i, line in enumerate(lines) if line.endswith("/mypy"))
    assert ruff < mypy
    if target == "test":
        assert mypy < next(i for i, line in enumerate(lines) if "/pytest" in line)


def test_the_type_check_covers_the_package_and_every_ignore_is_per_module():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["workbench"]
    assert "ignore_errors" not in config and "disable_error_code" not in config
    for override in config.get("overrides", []):
        assert not override.get("ignore_errors"), override  # errors are ignored by code, never a whole module
        assert override.get("disable_error_code"), override


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mypy_is_clean_on_the_package():
    pytest.importorskip("mypy", reason="pip install -e '.[dev]' (mypy checks the types)")
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
