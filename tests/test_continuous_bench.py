"""benchmarks/continuous.py refuses a task whose tuned settings it does not hold, pointing to the report's rows
(it would otherwise train Hopper at Pendulum's settings and call it a side by side)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_another_task_than_pendulum_is_refused_naming_the_report_rows(capsys):
    spec = importlib.util.spec_from_file_location("bench_continuous", ROOT / "benchmarks" / "continuous.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_continuous"] = module
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as info:
        module.main(["--env", "Hopper-v5", "--seeds", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "'Hopper-v5'" in err and "report.py run --rows Hopper-v5:tqc Hopper-v5:crossq" in err
