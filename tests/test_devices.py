"""Devices (docs/devices.md): ``device=`` on every agent, ``"auto"`` that measures, everything following
the agent's device, device-free checkpoints, ``compile=`` and ``precision=``.

The plumbing is tested on the CPU; tests marked ``cuda`` run only where PyTorch sees a CUDA GPU
(``benchmarks/devices_gpu.sh`` runs them with the benchmark on such a machine).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import workbench as wb
from workbench import devices
from workbench.agents.base import AGENTS, OFFLINE_AGENTS
from workbench.envs.testing import SeeTheSide
from workbench.loop import Transitions

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

# Tiny settings per agent: a few updates within a few hundred steps.
SMALL: dict[str, dict[str, Any]] = {
    "DQN": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), train_freq=4, gradient_steps=2),
    "QRDQN": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), train_freq=4, gradient_steps=2),
    "C51": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), train_freq=4, gradient_steps=2),
    "Rainbow": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), train_freq=4, gradient_steps=2),
    "PPO": dict(n_steps=8, n_envs=2, batch_size=8, n_epochs=1, net_arch=(16,)),
    "A2C": dict(n_envs=2, n_steps=4, net_arch=(16,)),
    "IMPALA": dict(n_envs=2, n_steps=4, net_arch=(16,)),
    "APPO": dict(n_steps=8, n_envs=2, batch_size=8, n_epochs=1, net_arch=(16,)),
    "RecurrentPPO": dict(n_steps=8, n_envs=2, batch_size=8, n_epochs=1, net_arch=(16,), lstm_hidden_size=8),
    "DDPG": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,)),
    "TD3": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,)),
    "SAC": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,)),
    "TQC": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), n_quantiles=5),
    "CrossQ": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), critic_net_arch=(16,)),
    "DroQ": dict(learning_starts=16, batch_size=8, buffer_size=200, net_arch=(16,), gradient_steps=2),
    "BC": dict(batch_size=8, net_arch=(16,)),
    "BCQ": dict(batch_size=8, net_arch=(16,)),
    "CQL": dict(batch_size=8, net_arch=(16,), n_action_samples=2),
    "IQL": dict(batch_size=8, net_arch=(16,)),
}
CONTINUOUS = {"DDPG", "TD3", "SAC", "TQC", "CrossQ", "DroQ"}
OFFLINE_CONTINUOUS = {"CQL", "IQL", "BC"}  # also tried on Pendulum


def _env_id(name: str) -> str:
    return "Pendulum-v1" if name in CONTINUOUS else "CartPole-v1"


def _dataset(env_id: str, n: int = 64) -> wb.Dataset:
    env = gym.make(env_id)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    rows: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "next", "term", "trunc")}
    for _ in range(n):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, term, trunc), strict=True):
            rows[k].append(v)
        obs = env.reset()[0] if term or trunc else nxt
    return wb.Dataset(
        np.array(rows["obs"]),
        np.array(rows["act"]),
        np.array(rows["rew"]),
        np.array(rows["next"]),
        np.array(rows["term"]),
        np.array(rows["trunc"]),
        observation_space=env.observation_space,
        action_space=env.action_space,
    )


def foreign_tensors(agent: Any, device: torch.device) -> list[str]:
    """Names of every tensor the agent holds (networks, buffers, optimizer state, tensors and modules
    among its attributes, a replay memory's sample, an offline minibatch, a decision's extras) that is
    not on ``device``."""
    found: list[str] = []

    def check(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.device != device:
            found.append(f"{name} on {value.device}")

    for name, net in agent.networks.items():
        for key, t in net.state_dict().items():
            check(f"net/{name}/{key}", t)
    for name, value in vars(agent).items():
        if isinstance(value, nn.Module):
            for key, t in value.state_dict().items():
                check(f"{name}.{key}", t)
            for key, p in value.named_parameters():
                check(f"{name}.{key}", p)
        elif isinstance(value, torch.Tensor):
            check(name, value)
        elif isinstance(value, dict):
            for key, t in value.items():
                check(f"{name}[{key!r}]", t)
    for name, opt in agent.optimizers.items():
        for group in opt.param_groups:
            for p in group["params"]:
                check(f"{name} param", p)
                for key, t in opt.state.get(p, {}).items():
                    if key != "step" or t.dim() > 0:  # Adam keeps its step count on the CPU unless fused/capturable
                        check(f"{name} state {key}", t)
    memory = getattr(agent, "memory", None)
    if memory is not None and len(memory):
        batch = memory.sample(4, np.random.default_rng(0))
        for field, t in zip(batch._fields, batch, strict=True):
            check(f"memory sample {field}", t)
    data = getattr(agent, "data", None)
    if data is not None and hasattr(data, "sample"):
        batch = data.sample(4, np.random.default_rng(0))
        for field, t in zip(batch._fields, batch, strict=True):
            check(f"offline sample {field}", t)
    return found


def _trained(name: str, device: str, steps: int = 96) -> Any:
    """An agent of ``name`` built with ``device`` that has learned a few updates."""
    cls = AGENTS.get(name.lower()) or OFFLINE_AGENTS[name.lower()]
    env_id = "Pendulum-v1" if name in CONTINUOUS else "CartPole-v1"
    if name.lower() in OFFLINE_AGENTS:
        agent = cls(dataset=_dataset(env_id), device=device, seed=0, **SMALL[name])
        for _ in range(3):
            agent.update()
        return agent
    agent = cls(env_id, device=device, seed=0, **SMALL[name])
    wb.Session(agent, env_id, seed=0).run(steps=steps)
    assert agent.num_updates > 0
    return agent


def _extras_on(agent: Any, device: torch.device) -> list[str]:
    obs = np.stack([agent.observation_space.sample() for _ in range(2)]).astype(agent.obs_dtype)
    step = agent.decide(obs)
    bad = [k for k, v in step.extras.items() if isinstance(v, torch.Tensor) and v.device != device]
    # What the loop carries between act and observe is host data: numpy arrays, one batch per step.
    bad += [k for k, v in step.extras.items() if not isinstance(v, np.ndarray | torch.Tensor)]
    return bad


# -- every agent, device="cpu" explicitly ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_agent_built_on_the_cpu_keeps_every_tensor_there(name):
    agent = _trained(name, "cpu")
    cpu = torch.device("cpu")
    assert agent.device == cpu and agent.device_choice.requested == "cpu"
    assert foreign_tensors(agent, cpu) == []
    assert _extras_on(agent, cpu) == []
    assert "device=cpu" in repr(agent)


MULTI_AGENT = {"IPPO", "MAPPO"}  # PPO over a PettingZoo ParallelEnv: tried on its own env below


def test_every_registered_agent_takes_device():
    from workbench.agents import MULTI_AGENTS

    registered = (*AGENTS.values(), *OFFLINE_AGENTS.values(), *MULTI_AGENTS.values())
    assert set(SMALL) | MULTI_AGENT == {cls.__name__ for cls in registered}


@pytest.mark.parametrize("name", sorted(MULTI_AGENT))
def test_multi_agent_ppo_built_on_the_cpu_keeps_every_tensor_there(name):
    from workbench.agents import MULTI_AGENTS
    from workbench.envs.multiagent_toy import MatchTarget

    cls = MULTI_AGENTS[name.lower()]
    env = MatchTarget(n_agents=2, length=4)
    agent = cls(env, device="cpu", seed=0, n_steps=8, batch_size=8, n_epochs=1, net_arch=(16,))
    wb.Session(agent, env, seed=0).run(steps=32)
    assert agent.num_updates > 0 and agent.device == torch.device("cpu")
    assert foreign_tensors(agent, torch.device("cpu")) == []


# -- auto, and refused devices -----------------------------------------------------------------


@pytest.mark.skipif(HAS_CUDA or devices._mps_available(), reason="this machine has an accelerator")
def test_auto_on_a_cpu_only_machine_picks_the_cpu_without_measuring(monkeypatch):
    def no_probe(*args: Any, **kwargs: Any) -> float:
        raise AssertionError("auto measured on a CPU-only machine")

    monkeypatch.setattr(devices, "time_probe", no_probe)
    agent = wb.PPO("CartPole-v1")  # the default is "auto"
    assert agent.device == torch.device("cpu")
    choice = agent.device_choice
    assert choice.requested == "auto" and choice.timings == {}
    assert "no CUDA or MPS" in choice.reason and choice.reason in repr(agent)


def test_auto_measures_each_candidate_with_the_agents_networks_and_keeps_the_result():
    devices.clear_measurements()
    agent = wb.DQN("CartPole-v1", device="cpu", batch_size=32, net_arch=(16,))
    calls = []

    def probe(device: torch.device):
        calls.append(device)
        return agent._device_probe(device)

    # The "meta" device runs the same networks without data: it stands in for an accelerator here.
    candidates = [torch.device("cpu"), torch.device("meta")]
    choice = devices.choose_device("auto", probe, agent._probe_key(), candidates=candidates)
    assert set(choice.timings) == {"cpu", "meta"} and all(t > 0 for t in choice.timings.values())
    assert calls == candidates
    again = devices.choose_device("auto", probe, agent._probe_key(), candidates=candidates)
    assert again is choice and len(calls) == 2  # measured once per process for these networks and batch
    devices.clear_measurements()


def test_auto_keeps_the_cpu_unless_an_accelerator_is_clearly_faster():
    assert devices._decide({"cpu": 1.0, "cuda:0": 0.5}, []).device == torch.device("cuda:0")
    near = devices._decide({"cpu": 1.0, "cuda:0": 0.9}, [])
    assert near.device == torch.device("cpu") and "not clearly faster" in near.reason
    failed = devices._decide({"cpu": 1.0}, ["cuda:0 failed (RuntimeError: boom)"])
    assert failed.device == torch.device("cpu") and "boom" in failed.reason


@pytest.mark.parametrize("bad", ["gpu", "cuda:7", "tpu", "cpu:x"])
def test_an_unknown_or_absent_device_is_refused_by_name(bad):
    if bad == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    with pytest.raises(ValueError, match=f"device={bad!r}") as err:
        wb.PPO("CartPole-v1", device=bad)
    assert "'cpu'" in str(err.value)  # what this machine has


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_is_refused_naming_what_there_is():
    with pytest.raises(ValueError, match="device='cuda'.*no CUDA GPU.*'cpu'"):
        wb.SAC("Pendulum-v1", device="cuda")
    with pytest.raises(TypeError, match="device=3"):
        wb.SAC("Pendulum-v1", device=3)


def test_a_torch_device_is_taken_too():
    assert wb.A2C("CartPole-v1", device=torch.device("cpu")).device == torch.device("cpu")


def test_replay_minibatches_go_to_the_memorys_device_and_the_memory_stays_on_the_host():
    agent = _trained("DQN", "cpu")
    agent.memory.device = torch.device("meta")
    batch = agent.memory.sample(4, np.random.default_rng(0))
    assert all(t.device.type == "meta" for t in batch if isinstance(t, torch.Tensor))
    assert isinstance(batch.indices, np.ndarray) and isinstance(agent.memory.obs, np.ndarray)


# -- checkpoints are device-free -----------------------------------------------------------------


def test_checkpoints_hold_no_device_and_load_on_the_cpu_by_default(tmp_path):
    agent = _trained("SAC", "cpu")
    session = wb.Session(agent, "Pendulum-v1", seed=0)
    session.run(steps=20)
    session.save(tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert "device" not in meta["hyperparameters"]
    assert meta["session"]["device"]["device"] == "cpu"  # where it trained and why, for the record
    loaded = wb.load(tmp_path / "run")
    assert loaded.device == torch.device("cpu") and loaded.device_choice.requested == "cpu"
    obs = np.zeros(3, dtype=np.float32)
    np.testing.assert_allclose(loaded.act(obs), agent.eval().act(obs), rtol=1e-6)
    with pytest.raises(ValueError, match="device='gpu'"):
        wb.load(tmp_path / "run", device="gpu")
    reopened = wb.Session.reopen(tmp_path / "run", "Pendulum-v1", device="cpu")
    assert reopened.agent.device == torch.device("cpu")


def test_a_run_saved_with_fp16_loads_on_the_cpu_in_fp32(tmp_path):
    agent = wb.DQN(SeeTheSide(), device="cpu", **SMALL["DQN"])
    agent.save(tmp_path / "run")
    meta_path = tmp_path / "run" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["hyperparameters"]["precision"] = "fp16"  # as a GPU run writes it
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(RuntimeWarning, match="fp16.*CUDA"):
        loaded = wb.load(tmp_path / "run")
    assert loaded.config.precision == "fp32" and loaded.device == torch.device("cpu")


def test_state_tensors_are_on_the_cpu():
    agent = _trained("PPO", "cpu")
    assert all(t.device.type == "cpu" for t in agent.state().tensors.values())


# -- compile ---------------------------------------------------------------------------------------


def test_compile_is_off_by_default_saved_and_shown():
    agent = wb.PPO("CartPole-v1", device="cpu")
    assert agent.config.compile is False and not agent.compiled
    assert "compile=False" in repr(agent) and agent.hyperparameters()["compile"] is False
    with pytest.raises(ValueError, match="compile"):
        wb.PPO("CartPole-v1", compile="fastest")


def test_a_failing_compile_falls_back_to_eager_with_a_warning(monkeypatch):
    def broken_compile(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        def fails(*a: Any, **k: Any) -> Any:
            raise RuntimeError("no compiler for this platform")

        self._compiled_call_impl = fails

    monkeypatch.setattr(nn.Module, "compile", broken_compile)
    with pytest.warns(RuntimeWarning, match="compile=True failed.*no compiler.*eagerly"):
        agent = wb.DQN("CartPole-v1", device="cpu", compile=True, **SMALL["DQN"])
    assert not agent.compiled and agent.compile_time is None
    assert "compile=True (failed, eager" in repr(agent)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=64)
    assert agent.num_updates > 0 and "compile_time" not in session.signals.names()


@pytest.mark.slow
def test_compile_runs_the_update_compiled_and_reports_its_time(monkeypatch, tmp_path):
    real = torch.compile
    # The eager backend: dynamo traces the networks as torch.compile does, without a C++ build.
    monkeypatch.setattr(torch, "compile", lambda *a, **k: real(*a, **{**k, "backend": "eager", "mode": None}))
    agent = wb.DQN("CartPole-v1", device="cpu", compile=True, **SMALL["DQN"])
    assert agent.compiled and agent.compile_time > 0
    assert "s to compile" in repr(agent)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=64)
    assert session.signals["compile_time"].last > 0
    session.save(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["hyperparameters"]["compile"] is True
    loaded = wb.load(tmp_path / "run")
    obs = np.zeros(4, dtype=np.float32)
    assert loaded.act(obs) == agent.eval().act(obs)


def count_compiled_graphs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``torch.compile`` through a backend that runs each graph eagerly and appends it to the list returned."""
    graphs: list[Any] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda *a, **k: real(*a, **{**k, "backend": counting, "mode": None}))
    return graphs


@pytest.mark.slow
def test_compiled_networks_compile_once_whatever_the_updates_and_the_sessions_threads(monkeypatch, caplog):
    """A shared image encoder's feature cache stays out of the traced graph (its key moves with every
    optimizer step, and each move recompiled until dynamo gave up and ran eagerly), and a session's
    ``torch_threads`` (torch's thread count is part of what compiled code is specialised to) is compiled
    for when the run starts, timed as compile time, not in the middle of the first update."""
    graphs = count_compiled_graphs(monkeypatch)
    agent = wb.PPO(SeeTheSide, device="cpu", compile=True, **SMALL["PPO"])
    assert agent.compiled and agent.encoder_shared
    prepared: list[tuple[int, float]] = []
    prepare = agent.prepare_compiled

    def recorded_prepare() -> None:
        prepare()
        prepared.append((len(graphs), agent.compile_time))

    monkeypatch.setattr(agent, "prepare_compiled", recorded_prepare)
    session = wb.Session(agent, SeeTheSide, seed=0, torch_threads=torch.get_num_threads() + 1)
    session.run(steps=48)
    session.run(steps=48)
    assert agent.num_updates >= 6 and len(prepared) == 2
    assert prepared[0] == prepared[1] and len(graphs) == prepared[0][0]  # nothing compiled after the start
    assert agent.compile_time == prepared[0][1]
    assert "recompile_limit" not in caplog.text


@pytest.mark.parametrize(
    "algo, env",
    [
        ("DQN", "CartPole-v1"),
        ("C51", "CartPole-v1"),
        ("PPO", "CartPole-v1"),
        ("A2C", "CartPole-v1"),
        ("RecurrentPPO", "CartPole-v1"),
        ("SAC", "Pendulum-v1"),
        ("TD3", "Pendulum-v1"),
        ("CrossQ", "Pendulum-v1"),  # modules switched between training and eval mode inside an update
    ],
)
def test_every_kind_of_agent_compiles_and_trains_compiled(algo, env, monkeypatch):
    """Each agent's own way of probing its networks (RecurrentPPO unrolls an LSTM) fits the compile
    trace: no agent falls back to eager with a warning."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda *a, **k: real(*a, **{**k, "backend": "eager", "mode": None}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        agent = getattr(wb, algo)(env, device="cpu", compile=True, **SMALL[algo])
    assert agent.compiled and agent.compile_error is None
    wb.Session(agent, env, seed=0).run(steps=48)
    assert agent.num_updates > 0


@pytest.mark.slow  # traces CrossQ's networks twice with torch.compile: 13 s of make test-fast's 2 minutes
def test_compiling_leaves_every_buffer_as_it_was(monkeypatch):
    """Finding and tracing the networks runs them on zeros in training mode: CrossQ's batch renormalization
    must neither count those passes nor take running statistics from them (a one-env acting pass would give
    a variance of one sample)."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda *a, **k: real(*a, **{**k, "backend": "eager", "mode": None}))
    eager = wb.CrossQ("Pendulum-v1", device="cpu", seed=0, **SMALL["CrossQ"])
    agent = wb.CrossQ("Pendulum-v1", device="cpu", seed=0, compile=True, **SMALL["CrossQ"])
    assert agent.compiled
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # another thread count: prepare_compiled traces again
    try:
        agent.prepare_compiled()
    finally:
        torch.set_num_threads(threads)
    assert len(agent._compiled_threads) == 2
    for name in ("actor", "critic"):
        before, after = dict(getattr(eager, name).named_buffers()), dict(getattr(agent, name).named_buffers())
        assert before.keys() == after.keys() and before
        assert all(torch.equal(before[k], after[k]) for k in before), name


@pytest.mark.slow
@pytest.mark.parametrize("algo, env", [("DQN", SeeTheSide), ("SAC", "Pendulum-v1")])
def test_compiled_off_policy_agents_trace_every_variant_their_updates_and_acting_run(algo, env, monkeypatch, caplog):
    """An online network and its target, a critic on the actor's (gradient-carrying) actions, the
    targets of every gradient step's minibatch at once, acting on one env: all share a function's graph
    budget, so all are traced when the agent compiles and the run compiles nothing more (on a GPU, DQN
    on Pong went past PyTorch's 8 graphs and ran eagerly)."""
    graphs = count_compiled_graphs(monkeypatch)
    agent = getattr(wb, algo)(env, device="cpu", compile=True, **SMALL[algo])
    assert agent.compiled
    session = wb.Session(agent, env, seed=0, torch_threads=torch.get_num_threads() + 1)
    session.run(steps=24)  # learning has not started: what is compiled by now is what the start compiled
    at_start = len(graphs)
    session.run(steps=72)
    assert agent.num_updates >= 8 and len(graphs) == at_start
    assert torch._dynamo.config.recompile_limit >= 64
    assert "recompile_limit" not in caplog.text


@pytest.mark.parametrize("env, expected", [("CartPole-v1", 1), (SeeTheSide, None)])
def test_auto_torch_threads_is_one_for_mlps_and_torchs_own_count_for_cnns(env, expected, monkeypatch):
    agent = wb.PPO(env, device="cpu", **SMALL["PPO"])
    assert agent.convolutional is (expected is None)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)  # torch's own count, whatever the machine
    threads: list[int] = []
    real_set = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.append(n) or real_set(n))
    session = wb.Session(agent, env, seed=0)
    assert session.torch_threads == "auto"
    session.run(steps=32)
    assert agent.num_updates > 0
    assert threads == ([] if expected is None else [1, 3])  # set for the run, then torch's count restored


# -- precision -------------------------------------------------------------------------------------


def test_lower_precision_is_refused_for_vector_observations():
    with pytest.raises(ValueError, match="precision='bf16'.*CNN encoder.*no image"):
        wb.PPO("CartPole-v1", precision="bf16")


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_fp16_needs_a_cuda_gpu():
    with pytest.raises(ValueError, match="precision='fp16'.*needs a CUDA GPU.*bf16"):
        wb.DQN(SeeTheSide(), precision="fp16")


def test_bf16_trains_a_cnn_agent_on_the_cpu_under_autocast(monkeypatch):
    seen = []
    real = torch.autocast

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "autocast", recording)
    agent = wb.DQN(SeeTheSide, device="cpu", precision="bf16", **SMALL["DQN"])
    assert "precision=bf16" in repr(agent)
    wb.Session(agent, SeeTheSide, seed=0).run(steps=64)
    assert agent.num_updates > 0 and seen and seen[0] == (("cpu",), {"dtype": torch.bfloat16})
    assert all(p.dtype == torch.float32 for p in agent.q_net.parameters())  # the weights stay fp32
    assert foreign_tensors(agent, torch.device("cpu")) == []


# -- where the choice shows ----------------------------------------------------------------------


def test_the_dashboard_status_line_names_the_device():
    from workbench.ui.view_model import snapshot

    session = wb.Session(wb.PPO("CartPole-v1", device="cpu"), "CartPole-v1")
    view = snapshot(session)
    assert view.device == "cpu" and view.device_reason == "asked for"
    assert "on cpu" in view.line()


def test_presets_and_the_cli_take_a_device():
    agent = wb.preset("CartPole-v1", "ppo", device="cpu").agent
    assert agent.device_choice.requested == "cpu"
    from workbench.cli import build_parser

    args = build_parser().parse_args(["train", "CartPole-v1", "--device", "cpu"])
    assert args.device == "cpu"
    assert build_parser().parse_args(["play", "run"]).device == "cpu"


def test_ray_replicas_act_on_the_cpu_eagerly_in_fp32():
    from workbench.parallel.ray_backend import _RolloutWorker

    learner = wb.DQN(SeeTheSide(), device="cpu", precision="bf16", **SMALL["DQN"])
    config = {
        f.name: getattr(learner.config, f.name) for f in dataclasses.fields(learner.config)
    }  # as the runner sends it
    config["compile"] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        worker = _RolloutWorker(
            0, SeeTheSide, None, 1, 0, wb.DQN, (learner.observation_space, learner.action_space), config, 0
        )
    replica = worker.agent
    assert replica.device == torch.device("cpu") and not replica.compiled and replica.config.precision == "fp32"
    worker.vec.close()


def test_act_moves_one_observation_batch_per_step(monkeypatch):
    agent = wb.PPO("CartPole-v1", device="cpu", n_envs=4)
    moved = []
    real = agent._tensor
    monkeypatch.setattr(agent, "_tensor", lambda a: moved.append(a.shape) or real(a))
    agent.decide(np.zeros((4, 4), dtype=np.float32))
    assert moved == [(4, 4)]


def test_transitions_observed_on_any_device_keep_the_rollout_on_the_host():
    agent = wb.PPO("CartPole-v1", device="cpu", n_envs=2, n_steps=4)
    obs = np.zeros((2, 4), dtype=np.float32)
    step = agent.decide(obs)
    agent.observe(
        Transitions(obs, step.actions, np.ones(2, np.float32), obs, np.zeros(2, bool), np.zeros(2, bool), step.extras)
    )
    assert isinstance(agent.rollout.obs, np.ndarray)


# -- on a CUDA GPU ---------------------------------------------------------------------------------


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_agent_on_cuda_keeps_every_tensor_there_and_loads_on_the_cpu(name, tmp_path):
    agent = _trained(name, "cuda")
    gpu = torch.device("cuda", 0)
    assert foreign_tensors(agent, gpu) == []
    assert _extras_on(agent, gpu) == []
    agent.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert loaded.device == torch.device("cpu") and foreign_tensors(loaded, torch.device("cpu")) == []
    back = wb.load(tmp_path / "run", device="cuda")
    assert foreign_tensors(back, gpu) == []


@pytest.mark.cuda
@needs_cuda
def test_auto_on_a_gpu_machine_measures_and_says_why():
    devices.clear_measurements()
    small = wb.PPO("CartPole-v1")
    cnn = wb.PPO(lambda: SeeTheSide(size=84), n_envs=8, n_steps=128, batch_size=256)
    for agent in (small, cnn):
        assert agent.device_choice.timings and "auto:" in agent.device_choice.reason
        assert str(agent.device) in agent.device_choice.reason
    assert cnn.device.type == "cuda"


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_lower_precision_on_cuda_trains_cnn_agents(precision):
    for name in ("PPO", "DQN", "SAC"):
        make = (lambda: SeeTheSide(continuous=True)) if name == "SAC" else SeeTheSide
        agent = getattr(wb, name)(make, device="cuda", precision=precision, **SMALL[name])
        wb.Session(agent, make, seed=0).run(steps=96)
        assert agent.num_updates > 0


@pytest.mark.cuda
@needs_cuda
def test_compile_and_export_from_a_gpu_agent(tmp_path):
    pytest.importorskip("onnx")
    agent = wb.PPO("CartPole-v1", device="cuda", compile=True, **SMALL["PPO"])
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=64)
    assert agent.compiled
    assert agent.export(tmp_path / "policy.onnx").endswith("policy.onnx")


# -- moving an agent, and a Ray learner on a GPU -------------------------------------------------


def test_an_agent_moves_with_its_optimizer_state():
    agent = _trained("SAC", "cpu")
    assert agent.to("cpu", reason="asked again") is agent
    assert agent.device_choice.reason == "asked again" and foreign_tensors(agent, torch.device("cpu")) == []
    with pytest.raises(ValueError, match="device='gpu'"):
        agent.to("gpu")
    with pytest.raises(ValueError, match="not 'auto'"):
        agent.to("auto")


def test_learner_gpus_is_checked_where_the_session_is_made():
    agent = wb.PPO("CartPole-v1", device="cpu")
    with pytest.raises(ValueError, match="learner_gpus=-1"):
        wb.Session(agent, "CartPole-v1", backend="ray", learner_gpus=-1)
    with pytest.raises(ValueError, match="only backend='ray' takes"):
        wb.Session(agent, "CartPole-v1", backend="local", num_workers=2, learner_gpus=1)
    session = wb.Session(agent, "CartPole-v1", backend="ray", learner_gpus=0)  # nothing asked, nothing started
    assert session.status == "idle"


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_learner_gpus_on_a_machine_without_a_gpu_is_a_clear_error():
    agent = wb.PPO("CartPole-v1")
    with pytest.raises(ValueError, match=r"learner_gpus=1: the learner runs in the session's own process.*0 CUDA GPU"):
        wb.Session(agent, "CartPole-v1", backend="ray", num_workers=2, learner_gpus=1)


def test_a_ray_cluster_without_gpus_refuses_a_gpu_learner():
    from workbench.parallel.ray_start import start_ray

    class CPUCluster:  # a running Ray whose nodes have CPUs only
        def is_initialized(self) -> bool:
            return True

        def cluster_resources(self) -> dict[str, float]:
            return {"CPU": 8.0, "memory": 1e9}

    with pytest.raises(ValueError, match=r"learner_gpus=1 .* 0 GPU\(s\) \(resources: CPU 8"):
        start_ray(CPUCluster(), 2, 1.0, None, None, learner_gpus=1)
    assert start_ray(CPUCluster(), 2, 1.0, None, None, learner_gpus=0) is False


@pytest.mark.cuda
@needs_cuda
def test_learner_gpus_moves_an_auto_agent_to_the_gpu():
    from workbench.parallel.ray_start import check_learner_gpus

    agent = wb.PPO("CartPole-v1")
    check_learner_gpus(1, agent)
    assert agent.device.type == "cuda" and "learner_gpus=1" in agent.device_choice.reason
    with pytest.raises(ValueError, match="device='cpu'"):
        check_learner_gpus(1, wb.PPO("CartPole-v1", device="cpu"))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, needs_cuda])])
def test_her_and_intrinsic_plug_ins_follow_the_agents_device(device):
    """HER's relabelled minibatches and RND's/ICM's networks go where the agent is."""
    from workbench.envs.goals import BitFlippingEnv

    target = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    her = wb.DQN(lambda: BitFlippingEnv(4), replay=wb.HerReplay(), learning_starts=16, batch_size=8, device=device)
    her_session = wb.Session(her, lambda: BitFlippingEnv(4), seed=0)
    her_session.run(64)
    batch = her.memory.sample(8, np.random.default_rng(0))
    assert batch.obs.device == target and batch.rewards.device == target
    for make in (wb.RND, wb.ICM):
        agent = wb.PPO("CartPole-v1", intrinsic=make(), n_steps=32, batch_size=32, device=device)
        wb.Session(agent, "CartPole-v1", seed=0).run(64)
        assert foreign_tensors(agent, target) == []
