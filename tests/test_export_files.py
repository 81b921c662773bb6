"""Issue 32, case 9 and the ``format=3`` case: ``agent.export`` writes to temporary files and renames
them into place (a full disk leaves an earlier export intact), replaces only an earlier export
unless ``overwrite=True``, and checks its arguments at the call."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

import workbench as wb
from workbench.agents.export import export_policy

ort = pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")


@pytest.fixture(scope="module")
def agent():
    return wb.DQN("CartPole-v1", seed=0, net_arch=(8,))


def _actions(path, obs):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["action"], {"obs": obs})[0]


def _files(directory):
    return sorted(os.listdir(directory))


def test_a_full_disk_during_export_leaves_the_earlier_export_intact(agent, tmp_path, monkeypatch):
    path = tmp_path / "policy.onnx"
    agent.export(path)
    model, sidecar = path.read_bytes(), (tmp_path / "policy.onnx.json").read_bytes()

    import onnx

    real_save = onnx.save

    def save_then_fill_the_disk(model, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"\x08\x07partial")  # some bytes reach the disk first
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(onnx, "save", save_then_fill_the_disk)
    with pytest.raises(OSError) as info:
        agent.export(path)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(onnx, "save", real_save)
    assert path.read_bytes() == model and (tmp_path / "policy.onnx.json").read_bytes() == sidecar
    assert _files(tmp_path) == ["policy.onnx", "policy.onnx.json"]  # no temporary file left
    obs = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(_actions(path, obs), agent.act(obs, deterministic=True))


def test_a_full_disk_while_writing_the_sidecar_leaves_the_earlier_export_intact(agent, tmp_path, monkeypatch):
    path = tmp_path / "policy.onnx"
    agent.export(path)
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    real_dump = json.dump

    def dump_then_fill_the_disk(obj, fp, *args, **kwargs):
        fp.write("{")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(json, "dump", dump_then_fill_the_disk)
    with pytest.raises(OSError, match="No space left"):
        agent.export(path)
    monkeypatch.setattr(json, "dump", real_dump)
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before


def test_a_first_export_that_fails_leaves_nothing(agent, tmp_path, monkeypatch):
    import onnx

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(onnx, "save", fail)
    with pytest.raises(OSError):
        agent.export(tmp_path / "policy.onnx")
    assert _files(tmp_path) == []


@pytest.mark.parametrize("which", ["model", "sidecar"])
def test_export_refuses_to_replace_a_file_that_is_not_an_export(agent, tmp_path, which):
    path = tmp_path / "report.onnx"
    mine = path if which == "model" else tmp_path / "report.onnx.json"
    mine.write_text("quarterly numbers")
    with pytest.raises(FileExistsError) as info:
        agent.export(path)
    message = str(info.value)
    assert str(mine) in message and "not" in message and "overwrite=True" in message, message
    assert mine.read_text() == "quarterly numbers"
    assert _files(tmp_path) == [mine.name]


def test_export_refuses_a_json_file_of_someone_else_beside_the_model(agent, tmp_path):
    (tmp_path / "p.onnx.json").write_text(json.dumps({"format": "my-app-config", "x": 1}))
    with pytest.raises(FileExistsError, match=r"p\.onnx\.json"):
        agent.export(tmp_path / "p.onnx")


def test_export_refuses_an_onnx_model_it_did_not_write(agent, tmp_path):
    # A valid ONNX model of someone else's: export() did not write it, so it is not replaced.
    path = tmp_path / "theirs.onnx"
    agent.export(path)
    import onnx

    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, str(path))
    with pytest.raises(FileExistsError, match="not an ONNX model written by agent.export"):
        agent.export(path)


def test_export_replaces_an_earlier_export(agent, tmp_path):
    path = tmp_path / "policy.onnx"
    agent.export(path)
    other = wb.DQN("CartPole-v1", seed=1, net_arch=(8,))
    other.export(path)  # an earlier export: replaced without overwrite=True
    obs = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    np.testing.assert_array_equal(_actions(path, obs), other.act(obs, deterministic=True))
    assert _files(tmp_path) == ["policy.onnx", "policy.onnx.json"]


def test_overwrite_true_replaces_any_file(agent, tmp_path):
    path = tmp_path / "report.onnx"
    path.write_text("quarterly numbers")
    (tmp_path / "report.onnx.json").write_text("notes")
    export_policy(agent, path, overwrite=True)
    assert json.loads((tmp_path / "report.onnx.json").read_text())["format"] == "rl-workbench-policy"
    assert _actions(path, np.zeros((1, 4), np.float32)).shape == (1,)


def test_the_files_follow_the_umask(agent, tmp_path):
    old = os.umask(0o027)
    try:
        agent.export(tmp_path / "policy.onnx")
    finally:
        os.umask(old)
    for name in ("policy.onnx", "policy.onnx.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o640, name


def test_export_never_replaces_a_directory(agent, tmp_path):
    (tmp_path / "policy.onnx").mkdir()
    with pytest.raises(IsADirectoryError, match="directory"):
        export_policy(agent, tmp_path / "policy.onnx", overwrite=True)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"format": 3}, "format"),
        ({"format": b"onnx"}, "format"),
        ({"format": "tflite"}, "format"),
        ({"action_mask": "yes"}, "action_mask"),
    ],
)
def test_bad_export_arguments_name_the_argument_and_the_accepted_values(agent, tmp_path, kwargs, name):
    with pytest.raises((ValueError, TypeError)) as info:
        agent.export(tmp_path / "policy.onnx", **kwargs)
    message = str(info.value)
    assert f"{name}=" in message, message
    if name == "format":
        assert "'onnx'" in message and "None" in message, message
    assert not isinstance(info.value, AttributeError)
    assert _files(tmp_path) == []


def test_export_policy_checks_overwrite(agent, tmp_path):
    with pytest.raises(TypeError, match="overwrite=1"):
        export_policy(agent, tmp_path / "p.onnx", overwrite=1)


def test_agent_export_and_the_cli_take_overwrite(tmp_path):
    from workbench.cli import main

    agent = wb.PPO("CartPole-v1", n_steps=8, batch_size=8)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.save(tmp_path / "run")
    foreign = tmp_path / "report.onnx"
    foreign.write_text("not a model")
    with pytest.raises(SystemExit, match="not an ONNX model written by agent.export"):
        main(["export", str(tmp_path / "run"), str(foreign)])
    assert foreign.read_text() == "not a model"
    assert main(["export", str(tmp_path / "run"), str(foreign), "--overwrite"]) == 0
    assert foreign.read_bytes() != b"not a model"
    foreign2 = tmp_path / "other.onnx"
    foreign2.write_text("mine")
    assert agent.export(foreign2, overwrite=True) == str(foreign2)
