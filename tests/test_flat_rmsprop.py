"""FlatRMSprop: A2C's optimizer step on flat buffers computes torch.optim.RMSprop's numbers, bit for bit."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import workbench as wb
from workbench.agents.kernels import FlatRMSprop, clip_grad_norm, forward, optim
from workbench.agents.networks import mlp


def _flat(agent: wb.A2C) -> FlatRMSprop:
    """The flat stepper A2C's gradient steps use (``kernels.gradient_step`` keeps one per optimizer)."""
    stepper = optim._stepper(agent.optimizer, True)
    assert isinstance(stepper, FlatRMSprop)
    return stepper


def _without_flat(agent: wb.A2C) -> None:
    """Make ``agent``'s gradient steps take the ordinary (fast, not flat) stepper."""
    optim._STEPPERS[agent.optimizer] = {True: optim._Stepper(agent.optimizer, True)}


def _nets() -> list[nn.Module]:
    torch.manual_seed(0)
    return [mlp(4, (16, 16), 2, activation="tanh"), mlp(4, (16, 16), 1, activation="tanh")]


def _train(flat: bool, steps: int = 6, lr: float = 1e-2) -> tuple[list[torch.Tensor], dict, int]:
    nets = _nets()
    params = [p for n in nets for p in n.parameters()]
    opt = torch.optim.RMSprop(params, lr=lr, alpha=0.99, eps=1e-5, foreach=True)
    calls = 0
    original = opt.step

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    opt.step = counted
    stepper = FlatRMSprop(opt)
    gen = torch.Generator().manual_seed(1)
    for i in range(steps):
        x = torch.randn(40, 4, generator=gen)
        loss = nets[0](x).pow(2).mean() + nets[1](x).pow(2).mean() * 3
        if flat:
            stepper.clear()
            loss.backward()
            stepper.clip(0.5)
            stepper.step()
        else:
            for p in params:
                p.grad = None
            loss.backward()
            clip_grad_norm(params, 0.5)
            opt.step()
        opt.param_groups[0]["lr"] = lr * (1 - i / steps)  # a schedule, read at each step
    return [p.detach().clone() for p in params], opt.state_dict(), calls


def test_flat_steps_give_torch_rmsprops_weights_and_state_bit_for_bit():
    fast, fast_state, fast_calls = _train(True)
    slow, slow_state, _ = _train(False)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True))
    for i, entry in slow_state["state"].items():
        for key, value in entry.items():
            assert torch.equal(torch.as_tensor(fast_state["state"][i][key]), torch.as_tensor(value)), (i, key)
    assert fast_calls == 1  # only the first step (which creates the state) goes through step()


def test_parameters_become_views_of_one_buffer_and_a_replaced_tensor_is_noticed():
    nets = _nets()
    params = [p for n in nets for p in n.parameters()]
    opt = torch.optim.RMSprop(params, lr=1e-2, foreach=True)
    stepper = FlatRMSprop(opt)

    def one_step():
        stepper.clear()
        sum(n(torch.ones(3, 4)).sum() for n in nets).backward()
        stepper.step()

    one_step()
    assert stepper.bound
    assert len({p.untyped_storage().data_ptr() for p in params}) == 1
    # Loading a saved state replaces the optimizer's tensors: the next step notices, steps through
    # torch's own code and binds again, so nothing stale is ever stepped.
    saved = {k: v for k, v in opt.state_dict().items()}
    saved = {
        "state": {i: {k: v.clone() * 0 + 1 for k, v in s.items()} for i, s in saved["state"].items()},
        "param_groups": saved["param_groups"],
    }
    opt.load_state_dict(saved)
    assert not stepper.bound
    one_step()
    assert stepper.bound
    assert all(float(s["step"]) == 2.0 for s in opt.state.values())  # 1 loaded, +1


def test_other_optimizers_and_settings_take_the_ordinary_step():
    nets = _nets()
    params = [p for n in nets for p in n.parameters()]
    for opt in (torch.optim.RMSprop(params, lr=1e-2, momentum=0.9), torch.optim.Adam(params, lr=1e-2)):
        stepper = FlatRMSprop(opt)
        for _ in range(2):
            stepper.clear()
            sum(n(torch.ones(3, 4)).sum() for n in nets).backward()
            stepper.step()
        assert not stepper.bound


def test_a2c_trains_the_same_weights_with_and_without_the_flat_step():
    def weights(flat: bool) -> list[np.ndarray]:
        agent = wb.A2C("CartPole-v1", seed=0)
        if not flat:
            _without_flat(agent)
        wb.Session(agent, "CartPole-v1", seed=0).run(steps=800)
        return [p.detach().numpy().copy() for p in agent.actor.parameters()]

    for a, b in zip(weights(True), weights(False), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a2c_resumed_from_a_checkpoint_steps_as_torch_rmsprop_would(tmp_path):
    session = wb.Session(wb.A2C("CartPole-v1", seed=0), "CartPole-v1", seed=0)
    session.run(steps=400)
    assert _flat(session.agent).bound
    session.save(tmp_path / "run")

    def resumed_weights(flat: bool) -> list[torch.Tensor]:
        resumed = wb.Session.reopen(tmp_path / "run", "CartPole-v1")
        if not flat:
            _without_flat(resumed.agent)
        resumed.run(steps=400)
        if flat:  # the loaded optimizer state was noticed and bound anew
            assert _flat(resumed.agent).bound
        return [p.detach().clone() for p in resumed.agent.actor.parameters()]

    for a, b in zip(resumed_weights(True), resumed_weights(False), strict=True):
        assert torch.equal(a, b)


def test_the_seams_forward_gives_the_modules_numbers_and_gradients():
    torch.manual_seed(0)
    net = mlp(4, (8, 8), 3, activation="tanh")
    x = torch.randn(5, 4)
    ours = forward(net, x)
    ours.sum().backward()
    ours_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    theirs = net(x)
    theirs.sum().backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for a, p in zip(ours_grads, net.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, rtol=1e-5, atol=1e-6)
    assert torch.equal(forward(net, x, fast=False), net(x))  # fast=False: the module itself
    seen = []
    net[1].register_forward_hook(lambda *args: seen.append(1))
    forward(net, x)
    assert seen == [1]  # a hooked layer is called the ordinary way
