"""The package is typed for users' type checkers (PEP 561): ``workbench/py.typed`` ships in the wheel."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_package_has_a_py_typed_marker():
    assert os.path.isfile(os.path.join(ROOT, "workbench", "py.typed"))


def test_the_wheel_ships_py_typed(tmp_path, monkeypatch):
    build_meta = pytest.importorskip("setuptools.build_meta")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    shutil.copytree(
        os.path.join(ROOT, "workbench"), tmp_path / "workbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["setup.py"])
    (tmp_path / "dist").mkdir()
    wheel = build_meta.build_wheel(str(tmp_path / "dist"))
    names = zipfile.ZipFile(tmp_path / "dist" / wheel).namelist()
    assert "workbench/py.typed" in names
    assert "workbench/__init__.py" in names
