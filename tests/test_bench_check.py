"""benchmarks/bench_check.py's weight-hash check: hashes kept per machine kind (the CPU's float features and the
torch build change the last bits of trained weights), compared with this kind's, and an honest failure on a kind
with none recorded. No training here: the hash sets are made up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

AVX512 = "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse2 avx2 fma avx512f amx_tile\n"
AVX2 = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx2 fma\n"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_check", ROOT / "benchmarks" / "bench_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_check"] = module
    spec.loader.exec_module(module)
    return module


def test_the_machine_kind_names_the_cpu_its_float_features_and_torch(bench):
    kind = bench.machine_kind(AVX512)
    assert kind == f"Intel(R) Xeon(R) Processor [avx2 fma avx512f amx_tile] torch {torch.__version__}"
    assert bench.machine_kind(AVX2) != kind  # another CPU is another kind, whatever the code
    assert "sse2" not in kind  # features every x86-64 has do not split kinds
    assert bench.machine_kind() == bench.machine_kind(Path("/proc/cpuinfo").read_text())


def test_hashes_are_compared_with_those_of_this_machine_kind(bench):
    stored = {"rows": {}}
    bench.record_hashes(stored, {"ppo": "a", "dqn": "b"}, "avx512", {"commit": "x"})
    bench.record_hashes(stored, {"ppo": "c", "dqn": "d"}, "avx2", {"commit": "y"})
    assert stored["weight_hashes_by_machine"]["avx512"] == {
        "hashes": {"ppo": "a", "dqn": "b"},
        "recorded": {"commit": "x"},
    }
    ok, line = bench.compare_hashes(stored, {"ppo": "a", "dqn": "b"}, "avx512")
    assert ok and "2 equal those recorded on this machine kind (avx512)" in line
    ok, line = bench.compare_hashes(stored, {"ppo": "a", "dqn": "d"}, "avx512")  # d is avx2's, not this kind's
    assert not ok and "FAIL, 1 of 2 differ" in line and line.endswith(": dqn")


def test_a_kind_with_none_recorded_is_not_checked_and_says_how_to_record(bench):
    stored = {"rows": {}}
    bench.record_hashes(stored, {"ppo": "a", "dqn": "b"}, "avx512", {})
    ok, line = bench.compare_hashes(stored, {"ppo": "x", "dqn": "b"}, "avx2")
    assert not ok and "NOT CHECKED" in line and "avx512: 1 of 2 differ" in line and "--record --hashes-only" in line
    ok, line = bench.compare_hashes(stored, {"ppo": "a", "dqn": "b"}, "avx2")  # equal to another kind's: fine
    assert ok and "equal those recorded on avx512" in line
    ok, line = bench.compare_hashes({"rows": {}}, {"ppo": "a"}, "avx2")
    assert not ok and "the recorded kinds: none" in line


def test_a_flat_table_from_before_kinds_is_read_as_a_kind_of_its_own(bench):
    stored = {"rows": {}, "weight_hashes": {"ppo": "a"}}
    assert bench.hash_sets(stored) == {bench.LEGACY_KIND: {"ppo": "a"}}
    ok, line = bench.compare_hashes(stored, {"ppo": "a"}, "avx2")
    assert ok and bench.LEGACY_KIND in line
    bench.record_hashes(stored, {"ppo": "z"}, "avx2", {})
    assert stored["weight_hashes"] == {"ppo": "a"}  # recording another kind leaves the old table alone
    assert bench.compare_hashes(stored, {"ppo": "z"}, "avx2")[0]
