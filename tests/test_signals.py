"""Signals: thread-safe series, statistics, export, bounded memory."""

import math
import threading

import numpy as np
import pytest

import workbench as wb
from workbench.signals import SignalSet


def test_signal_records_and_summarises():
    s = wb.Signal("loss")
    for i, v in enumerate([3.0, 1.0, 2.0, 6.0]):
        s.append(i * 10, v, float(i))
    assert len(s) == 4
    np.testing.assert_array_equal(s.steps, [0, 10, 20, 30])
    np.testing.assert_allclose(s.values, [3, 1, 2, 6])
    np.testing.assert_allclose(s.times, [0, 1, 2, 3])
    assert s.last == 6.0
    assert s.mean() == pytest.approx(3.0)
    assert s.mean(last=2) == pytest.approx(4.0)
    assert s.min() == 1.0 and s.max() == 6.0
    assert s.std() == pytest.approx(np.std([3, 1, 2, 6]))


def test_empty_signal_statistics_are_nan():
    s = wb.Signal("x")
    assert s.last is None
    assert math.isnan(s.mean()) and math.isnan(s.max())


def test_mean_rejects_non_positive_last():
    s = wb.Signal("x")
    s.append(0, 1.0, 0.0)
    with pytest.raises(ValueError, match="last"):
        s.mean(last=0)


def test_snapshot_is_a_copy():
    s = wb.Signal("x")
    s.append(0, 1.0, 0.0)
    values = s.values
    values[0] = 99
    assert s.last == 1.0


def test_subscribe_and_unsubscribe():
    s = wb.Signal("x")
    seen = []
    unsubscribe = s.subscribe(lambda name, step, value: seen.append((name, step, value)))
    s.append(5, 2.0, 0.0)
    unsubscribe()
    s.append(6, 3.0, 0.0)
    assert seen == [("x", 5, 2.0)]


def test_subscribers_may_take_fewer_arguments():
    s = wb.Signal("x")
    pairs, values = [], []
    s.subscribe(lambda step, value: pairs.append((step, value)))
    s.subscribe(values.append)
    s.append(3, 1.5, 0.0)
    assert pairs == [(3, 1.5)] and values == [1.5]
    with pytest.raises(TypeError, match="function"):
        s.subscribe(42)


def test_concurrent_appends_lose_nothing():
    s = wb.Signal("x")

    def writer(offset):
        for i in range(5000):
            s.append(offset + i, 1.0, 0.0)

    threads = [threading.Thread(target=writer, args=(k * 10000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(s) == 20000 and s.count == 20000


def test_memory_stays_bounded_and_keeps_the_whole_span():
    s = wb.Signal("x", max_points=1000)
    for i in range(10_000):
        s.append(i, float(i), float(i))
    assert len(s) <= 1000
    assert s.count == 10_000
    assert s.steps[0] == 0 and s.steps[-1] >= 9_000
    assert np.all(np.diff(s.steps) > 0)


def test_ten_million_values_cost_less_than_a_few_hundred_mb():
    s = wb.Signal("x")
    chunk = 1_000_000
    for k in range(10):
        steps = np.arange(k * chunk, (k + 1) * chunk)
        s.extend(steps, np.ones(chunk), steps / 1000.0)
    assert s.count == 10_000_000
    assert s.nbytes <= 300 * 2**20
    assert s.steps[0] == 0 and s.steps[-1] >= 9_000_000


def test_bulk_extend_thins_like_append():
    one, bulk = wb.Signal("a", max_points=100), wb.Signal("b", max_points=100)
    steps = np.arange(1000)
    for i in steps:
        one.append(int(i), float(i), float(i))
    bulk.extend(steps[:333], steps[:333], steps[:333])
    bulk.extend(steps[333:], steps[333:], steps[333:])
    np.testing.assert_array_equal(one.steps, bulk.steps)


def test_signal_set_errors_name_known_signals():
    sig = SignalSet()
    sig.record("loss", 0, 1.0, 0.0)
    with pytest.raises(KeyError, match="loss"):
        sig["nope"]
    assert sig.get("nope") is None
    assert "loss" in sig and list(sig) == ["loss"]


def test_csv_round_trip_and_pandas(tmp_path):
    sig = SignalSet()
    for i in range(5):
        sig.record("episode_reward", i * 10, float(i), i / 10)
        sig.record("loss", i * 10, 1.0 / (i + 1), i / 10)
    path = tmp_path / "signals.csv"
    sig.to_csv(path)
    back = SignalSet.from_csv(path)
    assert back.names() == ["episode_reward", "loss"]
    np.testing.assert_allclose(back["loss"].values, sig["loss"].values)
    df = sig["loss"].to_pandas()
    assert list(df.columns) == ["step", "value", "time"] and len(df) == 5
    assert set(sig.to_pandas()["signal"]) == {"episode_reward", "loss"}


def test_from_csv_names_file_and_line(tmp_path):
    path = tmp_path / "signals.csv"
    path.write_text("signal,step,value,time\nloss,1,notanumber,0\n")
    with pytest.raises(ValueError, match="line 2"):
        SignalSet.from_csv(path)
