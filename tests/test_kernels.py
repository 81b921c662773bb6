"""The kernel seam (``workbench/agents/kernels``): written-out bodies give autograd's numbers, gradient steps
give torch's, ``fast="off"`` and ``"auto"`` train alike, private torch calls fall back to the public ones,
and a subclass that changes a loss is never bypassed."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.kernels import MLPPass, body, forward, gradient_step, private_torch
from workbench.agents.kernels.body import matmul
from workbench.agents.networks import make_adam, mlp

# -- bodies -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_mlp_pass_forward_and_backward_equal_autograd(activation):
    torch.manual_seed(0)
    net = mlp(5, (7, 9, 6), 3, activation=activation)
    x = torch.randn(11, 5)
    grad_out = torch.randn(11, 3)
    written = MLPPass.of(net)
    assert written is not None and written.usable()
    out, kept = written.forward_keeping(x)
    grad_x, grads = written.backward(kept, grad_out, True)
    xx = x.clone().requires_grad_()
    expected = net(xx)
    expected.backward(grad_out)
    torch.testing.assert_close(out, expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_x, xx.grad, rtol=1e-4, atol=1e-6)
    for g, p in zip(grads, net.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_the_pass_follows_weights_changed_in_place_and_tensors_replaced_and_declines_hooks():
    torch.manual_seed(0)
    net = mlp(4, (8,), 2)
    x = torch.randn(6, 4)
    with torch.no_grad():
        net[0].weight.mul_(2)  # in place: the views see it
        torch.testing.assert_close(forward(net, x), net(x))
        net[2].weight.data = torch.randn(2, 8)  # a new tensor: noticed, rebound
        torch.testing.assert_close(forward(net, x), net(x))
    assert body(net) is not None
    handle = net[0].register_forward_hook(lambda *args: None)
    assert body(net) is None  # a hooked net is run by torch, so the hook runs
    handle.remove()
    assert body(net) is not None
    assert body(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Softmax(-1))) is None
    assert body(mlp(4, (8,), 2, activation="elu")) is None
    assert body(mlp(4, (8,), 2).double()) is None


def test_parameter_hooks_and_frozen_parameters_work_through_the_pass():
    torch.manual_seed(0)
    net = mlp(4, (8,), 2)
    net[0].weight.register_hook(lambda grad: grad * 2)
    net[2].bias.requires_grad_(False)
    x = torch.randn(6, 4)
    forward(net, x).pow(2).sum().backward()
    fast = [None if p.grad is None else p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    net(x).pow(2).sum().backward()
    for a, p in zip(fast, net.parameters(), strict=True):
        if p.grad is None:
            assert a is None
        else:
            torch.testing.assert_close(a, p.grad, rtol=1e-5, atol=1e-6)


def test_large_products_go_to_torch_so_numpys_blas_never_starts_threads(monkeypatch):
    body_module = importlib.import_module("workbench.agents.kernels.body")

    calls = []
    real_mm = torch.mm
    monkeypatch.setattr(body_module.torch, "mm", lambda *a, **k: calls.append(a[0].shape) or real_mm(*a, **k))
    rng = np.random.default_rng(0)
    small, wide = rng.normal(size=(8, 64)).astype(np.float32), rng.normal(size=(256, 64)).astype(np.float32)
    weight = rng.normal(size=(64, 64)).astype(np.float32)
    np.testing.assert_allclose(matmul(small, weight), small @ weight, rtol=1e-5, atol=1e-5)
    assert calls == []
    np.testing.assert_allclose(matmul(wide, weight), wide @ weight, rtol=1e-5, atol=1e-5)
    assert calls == [(256, 64)]


# -- gradient steps and private torch ---------------------------------------------------------------------


def _train_adam(step, steps: int = 5) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    net = mlp(4, (16,), 2)
    opt = make_adam(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        step(opt, net(torch.randn(8, 4, generator=gen)).pow(2).mean())
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()


def _public_step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 0.1, foreach=True)
    opt.step()


def _assert_same(a: tuple, b: tuple) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    for i, entry in b[1]["state"].items():
        for key, value in entry.items():
            assert torch.equal(a[1]["state"][i][key], value), (i, key)


@pytest.mark.parametrize("fast", [True, False])
def test_gradient_step_equals_torchs_public_step_bit_for_bit(fast):
    ours = _train_adam(lambda opt, loss: gradient_step(opt, loss, 0.1, fast=fast))
    _assert_same(ours, _train_adam(_public_step))


def test_every_private_piece_passed_its_probe_on_this_torch():
    assert private_torch.OK and all(private_torch.OK.values()), private_torch.OK


def test_a_fused_adam_refusing_its_keyword_arguments_falls_back_before_touching_state(monkeypatch):
    expected = _train_adam(_public_step)

    def refuses(*args, **kwargs):
        raise TypeError("_fused_adam_() got an unexpected keyword argument 'beta1'")

    monkeypatch.setattr(private_torch, "_fused_adam_", refuses)
    monkeypatch.setitem(private_torch.OK, "fused_adam", True)
    _assert_same(_train_adam(lambda opt, loss: gradient_step(opt, loss, 0.1)), expected)
    assert private_torch.OK["fused_adam"] is False  # and from now on the public step


def test_the_probe_switches_every_mismatching_private_call_to_the_public_one(monkeypatch):
    expected = _train_adam(_public_step)
    saved = dict(private_torch.OK)
    for name in ("_foreach_norm", "_foreach_mul_", "_foreach_add_", "_foreach_copy_", "_foreach_lerp_", "_fused_adam_"):
        monkeypatch.setattr(private_torch, name, lambda *a, **k: [torch.zeros(())])  # wrong results
    try:
        flags = private_torch.probe()
        assert not any(
            flags[k]
            for k in ("foreach_norm", "foreach_mul_", "foreach_add_", "foreach_copy_", "foreach_lerp_", "fused_adam")
        )
        _assert_same(_train_adam(lambda opt, loss: gradient_step(opt, loss, 0.1)), expected)
        target, online = mlp(3, (4,), 1), mlp(3, (4,), 1)
        wanted = [
            t.detach().lerp(o.detach(), 0.3) for t, o in zip(target.parameters(), online.parameters(), strict=True)
        ]
        from workbench.agents.kernels import polyak_update

        polyak_update(target, online, 0.3)
        assert all(torch.equal(t, w) for t, w in zip(target.parameters(), wanted, strict=True))
    finally:
        monkeypatch.undo()
        private_torch.OK.update(saved)


# -- agents: fast="auto" and "off" ----------------------------------------------------------------------


def _weights(agent: wb.Agent) -> list[torch.Tensor]:
    return [t.detach().clone() for net in agent.networks.values() for t in net.state_dict().values()]


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_fast_auto_and_off_train_on_policy_agents_to_the_same_weights_within_float_tolerance(cls, env_id):
    def trained(fast: str) -> list[torch.Tensor]:
        agent = cls(
            env_id, seed=0, fast=fast, n_steps=8, **({"n_epochs": 2, "batch_size": 32} if cls is wb.PPO else {})
        )
        wb.Session(agent, env_id, seed=0).run(steps=128)
        assert agent.num_updates == 2
        return _weights(agent)

    for a, b in zip(trained("auto"), trained("off"), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_fast_auto_and_off_train_dqn_to_the_same_weights_exactly():
    def trained(fast: str) -> list[torch.Tensor]:
        agent = wb.DQN(
            "CartPole-v1", seed=0, fast=fast, learning_starts=64, train_freq=32, gradient_steps=4, net_arch=(32,)
        )
        wb.Session(agent, "CartPole-v1", seed=0).run(steps=200)
        return _weights(agent)

    assert all(torch.equal(a, b) for a, b in zip(trained("auto"), trained("off"), strict=True))


def test_fast_off_runs_the_modules_themselves():
    agent = wb.PPO("CartPole-v1", seed=0, fast="off", n_steps=8, batch_size=32, n_epochs=1)
    calls = []
    agent.actor.register_forward_hook(lambda module, args, out: calls.append(len(out)))
    wb.Session(agent, "CartPole-v1").run(steps=64)
    assert 8 in calls and 32 in calls  # acting (8 envs) and the update's minibatches


def test_fast_is_validated_shown_and_saved(tmp_path):
    with pytest.raises(ValueError, match="fast"):
        wb.PPO("CartPole-v1", fast="fastest")
    agent = wb.A2C("CartPole-v1", fast="off")
    assert "fast=off" in repr(agent) and "fast=auto" in repr(wb.A2C("CartPole-v1"))
    agent.save(tmp_path / "run")
    assert wb.load(tmp_path / "run").config.fast == "off"


def test_a_run_saved_before_fast_existed_loads_with_the_default():
    path = next(p for p in (Path(__file__).parent / "fixtures" / "saved-v1").iterdir() if p.is_dir())
    assert wb.load(path).config.fast == "auto"


# -- subclasses are never bypassed ------------------------------------------------------------------------


def _scaled_loss_class(base: type) -> type:
    class Scaled(base):
        calls = 0

        def _loss(self, policy_loss, entropy, values, returns):
            type(self).calls += 1
            loss, value_loss, entropy_mean = super()._loss(policy_loss, entropy, values, returns)
            return 3.0 * loss + 0.1 * values.pow(2).mean(), value_loss, entropy_mean

    return Scaled


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C])
def test_a_subclass_that_changes_the_loss_changes_the_training_on_a_discrete_mlp(cls):
    """The case the numpy copies of the losses once bypassed: a Discrete head on plain MLPs."""
    sub = _scaled_loss_class(cls)

    def trained(kind: type) -> list[torch.Tensor]:
        agent = kind("CartPole-v1", seed=0, n_steps=8, **({"n_epochs": 2, "batch_size": 32} if cls is wb.PPO else {}))
        assert body(agent.actor) is not None  # the fast body is in use: only the loss differs
        wb.Session(agent, "CartPole-v1", seed=0).run(steps=128)
        return _weights(agent)

    plain, changed = trained(cls), trained(sub)
    assert sub.calls == (8 if cls is wb.PPO else 2)  # every gradient step went through the override
    assert any(not torch.allclose(a, b, atol=1e-4) for a, b in zip(plain, changed, strict=True))


def test_a_subclass_overriding_the_public_update_is_told_and_still_works():
    with pytest.warns(UserWarning, match=r"_update\(\)"):

        class Counting(wb.A2C):
            updates = 0

            def update(self):
                type(self).updates += 1
                return super().update()

    agent = Counting("CartPole-v1", seed=0)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=80)
    assert Counting.updates == agent.num_updates == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Quiet(wb.PPO):  # overriding the algorithm's part: no warning
            def _update(self):
                return {**super()._update(), "extra": 1.0}

    agent = Quiet("CartPole-v1", n_steps=8, batch_size=32, n_epochs=1)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=64)
    assert agent.num_timesteps == 64 and session.signals["extra"].last == 1.0


# -- acting through the seam ----------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("cls", [wb.A2C, wb.PPO])
def test_fast_acting_gives_the_modules_draws_and_numbers(cls, env_id):
    fast, slow = cls(env_id, seed=0), cls(env_id, seed=0, fast="off")
    obs = np.random.default_rng(0).normal(size=(8, 4 if env_id == "CartPole-v1" else 3)).astype(np.float32)
    a, b = fast._decide(obs, False), slow._decide(obs, False)
    assert torch.equal(fast.generator.get_state(), slow.generator.get_state())  # as many draws
    if env_id == "CartPole-v1":
        np.testing.assert_array_equal(a.actions, b.actions)
    else:
        np.testing.assert_allclose(a.actions, b.actions, rtol=1e-5, atol=1e-6)
    for key in ("values", "log_probs"):
        assert a.extras[key].dtype == np.float32 and a.extras[key].shape == (8,)
        np.testing.assert_allclose(a.extras[key], b.extras[key], rtol=1e-5, atol=1e-5)


def test_hooks_and_deterministic_decisions_run_the_module():
    agent = wb.PPO("CartPole-v1", seed=0)
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    calls = []
    handle = agent.actor.register_forward_hook(lambda *args: calls.append(1))
    agent.decide(obs)
    assert calls == [1]
    handle.remove()
    agent.decide(obs)
    assert calls == [1]
    agent.decide(obs, deterministic=True)
    step = agent.decide(obs, action_mask=np.array([[True, False]] * 8))
    assert (step.actions == 0).all()


def test_private_torch_names_appear_in_one_module_only():
    """Every private PyTorch name (``torch._x``, ``torch.ops``, the hook registries) is in
    ``kernels/private_torch.py``, where the import-time probe checks it."""
    import re

    root = Path(wb.__file__).parent
    pattern = re.compile(r"torch\._[a-zA-Z]|torch\.ops\.|_forward_hooks|_forward_pre_hooks|_optimizer_step_|_global_")
    found = [
        f"{path.relative_to(root)}:{i}"
        for path in root.rglob("*.py")
        if path.name != "private_torch.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found
