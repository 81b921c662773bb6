"""Experiment tracking: real TensorBoard event files, a real MLflow store and W&B offline files, read back."""

from __future__ import annotations

import glob
import os
import threading
import time

import pytest

import workbench as wb
from workbench.tracking.feed import SinkFeed

pytest.importorskip("tensorboard")


class Recorder(wb.Sink):
    """A sink that keeps what it is given, and in which thread."""

    def __init__(self):
        self.opened, self.batches, self.events, self.ends, self.closed = [], [], [], [], 0
        self.threads = set()

    def open(self, run):
        self.opened.append(run)

    def write(self, points):
        self.threads.add(threading.current_thread().name)
        self.batches.append(list(points))

    def log_event(self, step, name, old, new):
        self.events.append((step, name, old, new))

    def log_end(self, step, status, reason):
        self.ends.append((step, status, reason))

    def close(self):
        self.closed += 1


def _session(sinks, **kwargs):
    return wb.Session(
        wb.PPO("CartPole-v1", n_steps=64, n_envs=2, batch_size=64, n_epochs=1),
        "CartPole-v1",
        seed=0,
        sinks=sinks,
        **kwargs,
    )


def test_sinks_get_every_point_in_batches_off_the_loop_and_the_run_end():
    rec = Recorder()
    session = _session([rec])
    session.run(2_000)
    points = [p for batch in rec.batches for p in batch]
    rewards = session.signals["episode_reward"]
    got = [(p.step, p.value) for p in points if p.name == "episode_reward"]
    assert got == list(zip(rewards.steps.tolist(), rewards.values.tolist()))
    assert {p.name for p in points} >= {"episode_reward", "loss", "policy_loss"}
    assert len(rec.batches) < len(points) / 10  # batched, not one call per point
    assert rec.threads == {"workbench-sinks"}  # never the training thread
    assert rec.ends == [(session.steps, "finished", "budget")]
    assert rec.closed == 1 and len(rec.opened) == 1
    assert rec.opened[0].algorithm == "PPO" and rec.opened[0].hyperparameters["n_steps"] == 64

    # A second start continues the same run id; a live edit reaches the sink in order.
    session._ctx.tracking.log_event(session.steps, "learning_rate", 3e-4, 1e-4)
    session.run(200)
    assert rec.opened[1].run_id == rec.opened[0].run_id
    assert rec.events == [(2000, "learning_rate", 3e-4, 1e-4)]
    assert rec.ends[-1][1] == "finished" and rec.closed == 2


def test_a_stopped_or_failed_run_logs_its_end():
    rec = Recorder()
    session = _session([rec])
    session.start(1_000_000)
    time.sleep(0.5)
    session.stop()
    session.wait()
    assert rec.ends == [(session.steps, "stopped", "stop")]

    from conftest import ExplodingEnv

    rec2 = Recorder()
    bad = wb.Session(wb.DQN(ExplodingEnv(fail_after=30)), ExplodingEnv(fail_after=30), sinks=[rec2])
    with pytest.raises(RuntimeError):
        bad.run(1_000)
    assert rec2.ends[0][1] == "failed" and "RuntimeError" in rec2.ends[0][2]


def test_a_failing_sink_is_switched_off_with_a_warning_and_training_goes_on():
    class Broken(wb.Sink):
        def write(self, points):
            raise OSError("disk full")

    rec = Recorder()
    session = _session([Broken(), rec])
    with pytest.warns(RuntimeWarning, match="disk full"):
        session.run(1_000)
    assert session.status == "finished"
    assert isinstance(session._ctx.tracking.errors[0][1], OSError)
    assert rec.ends and rec.batches


def test_bad_sinks_are_named():
    with pytest.raises(TypeError, match=r"sinks\[1\] is 'runs/tb'"):
        _session([Recorder(), "runs/tb"])
    with pytest.raises(TypeError, match="the class itself"):
        _session([wb.TensorBoard])
    with pytest.raises(TypeError, match="list of sinks"):
        _session("runs/tb")
    rec = Recorder()
    with pytest.raises(ValueError, match="listed twice"):
        _session([rec, rec])


def test_a_sink_that_cannot_open_fails_start_in_the_callers_thread():
    class NoServer(wb.Sink):
        def open(self, run):
            raise ConnectionError("no tracking server at http://localhost:1")

        def write(self, points):
            pass

    session = _session([NoServer()])
    with pytest.raises(ConnectionError, match="no tracking server"):
        session.start(1_000)
    assert session.status == "idle"


def _events(run_dir):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        out.extend(EventFileLoader(path).Load())
    return out


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    tb = wb.TensorBoard(tmp_path / "tb", run_name="ppo-run")
    session = _session([tb])
    session.run(2_000)
    assert tb.run_dir == os.fspath(tmp_path / "tb" / "ppo-run")
    acc = EventAccumulator(tb.run_dir)
    acc.Reload()
    scalars = acc.Scalars("episode_reward")
    rewards = session.signals["episode_reward"]
    assert [s.step for s in scalars] == rewards.steps.tolist()
    assert [s.value for s in scalars] == pytest.approx(rewards.values.tolist())
    assert "loss" in acc.Tags()["scalars"]

    starts, ends, texts = [], [], []
    for event in _events(tb.run_dir):
        for value in event.summary.value:
            if value.tag == "_hparams_/session_start_info":
                starts.append(plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content))
            elif value.tag == "_hparams_/session_end_info":
                ends.append(plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content))
            elif value.tag.startswith("run_end"):
                texts.append(value.tensor.string_val[0].decode())
    hparams = starts[0].session_start_info.hparams
    assert hparams["n_steps"].number_value == 64 and hparams["algorithm"].string_value == "PPO"
    assert ends[0].session_end_info.status == 1  # STATUS_SUCCESS
    assert texts and "finished (budget)" in texts[0]


def test_mlflow_file_store_reads_back(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    sink = wb.MLflow(tmp_path / "mlruns", experiment="cartpole")
    session = _session([sink])
    session.run(2_000)
    assert os.path.isdir(tmp_path / "mlruns")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    run = client.get_run(sink.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["n_steps"] == "64" and run.data.params["algorithm"] == "PPO"
    assert run.data.tags["stop_reason"] == "budget"
    history = client.get_metric_history(sink.run_id, "episode_reward")
    rewards = session.signals["episode_reward"]
    assert sorted(m.step for m in history) == rewards.steps.tolist()
    assert client.get_experiment_by_name("cartpole").experiment_id == run.info.experiment_id


def test_wandb_offline_writes_its_run_files(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import json

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    sink = wb.WandB(offline=True, dir=tmp_path / "wandb")
    session = _session([sink])
    session.run(2_000)
    assert sink.run_dir is not None and os.path.basename(sink.run_dir).startswith("offline-run-")
    files = glob.glob(os.path.join(sink.run_dir, "run-*.wandb"))
    assert len(files) == 1
    history, summary, config = [], {}, set()
    from workbench.tracking.wandb_sink import read_run_file

    for record in read_run_file(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.summary.update})
        elif kind in ("config", "run"):  # the config travels in the run record, and in config records
            update = record.config.update if kind == "config" else record.run.config.update
            config.update(i.key or "/".join(i.nested_key) for i in update)
    rewards = session.signals["episode_reward"]
    logged = [(row["env_step"], row["episode_reward"]) for row in history if "episode_reward" in row]
    assert [s for s, _ in logged] == rewards.steps.tolist()  # two episodes ending at one step: two rows
    assert [v for _, v in logged] == pytest.approx(rewards.values.tolist())
    assert summary["stop_reason"] == "budget" and summary["status"] == "finished"
    assert {"n_steps", "algorithm"} <= config


def test_cli_train_writes_tensorboard_and_mlflow(tmp_path):
    pytest.importorskip("mlflow")
    from workbench.cli import main

    code = main(
        [
            "train",
            "CartPole-v1",
            "--agent",
            "dqn",
            "--steps",
            "300",
            "--no-preset",
            "--no-progress",
            "--tensorboard",
            str(tmp_path / "tb"),
            "--mlflow",
            str(tmp_path / "mlruns"),
        ]
    )
    assert code == 0
    assert glob.glob(str(tmp_path / "tb" / "*" / "events.out.tfevents.*"))
    assert glob.glob(str(tmp_path / "mlruns" / "*" / "*" / "metrics" / "episode_reward"))


def test_feed_queue_is_cheap_and_bounded(monkeypatch):
    import workbench.tracking.feed as feed

    monkeypatch.setattr(feed, "_MAX_QUEUED", 10)
    session = _session([Recorder()])
    f: SinkFeed = session._ctx.tracking
    for i in range(15):
        f._on_point("x", i, 1.0)
    assert len(f._queue) == 10 and f.dropped == 5
