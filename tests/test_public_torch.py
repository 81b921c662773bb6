"""Speed from public PyTorch only (issue 48): every agent steps through ``agents/updates.py`` with torch's
public calls, runs its networks as the modules they are (so a subclass's network or loss is what trains),
and no private PyTorch name or hand-written backward pass sits outside ``agents/kernels/private_torch.py``."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import workbench as wb
from workbench.agents.networks import make_adam, mlp
from workbench.agents.updates import gradient_step, polyak_update, set_grad_scaler

PACKAGE = Path(wb.__file__).parent
ONE_MODULE = PACKAGE / "agents" / "kernels" / "private_torch.py"


def _weights(agent: wb.Agent) -> list[torch.Tensor]:
    return [t.detach().clone() for net in agent.networks.values() for t in net.state_dict().values()]


# -- the package's source -----------------------------------------------------------------------------------

PRIVATE = re.compile(
    r"torch\._[a-zA-Z]"  # torch._foreach_*, torch._fused_adam_, torch._dynamo, torch._disable_dynamo...
    r"|torch\.ops\."
    r"|\._foreach_|_fused_adam"
    r"|\b(?!self\b)\w+\._version\b"  # Tensor._version (not an object's own counter, nor ``.._version``)
    r"|\._parameters\b|\._modules\b|\._buffers\b"
    r"|_forward_hooks|_forward_pre_hooks|_backward_hooks|_backward_pre_hooks"
    r"|_optimizer_step_|_global_optimizer|_global_forward|_global_backward"
    r"|_compiled_call_impl|_use_grad_for_differentiable|__wrapped__"
)


def _lines(pattern: re.Pattern[str], skip: Path | None = None) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE)}:{i}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != skip
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def test_private_torch_names_appear_in_the_one_compile_module_only():
    assert ONE_MODULE.exists()
    found = _lines(PRIVATE, skip=ONE_MODULE)
    assert not found, "private PyTorch names outside agents/kernels/private_torch.py:\n" + "\n".join(found)
    assert PRIVATE.search("torch._foreach_lerp_(a, b, 0.5)") and PRIVATE.search("p._version")  # the pattern bites
    assert not PRIVATE.search("self._version = -1") and not PRIVATE.search("from .._version import __version__")


def test_no_backward_pass_is_written_by_hand():
    """Autograd computes every gradient: no ``autograd.Function`` and no ``backward`` method in the package."""
    found = _lines(re.compile(r"autograd\.Function|def backward\(|def forward_keeping\("))
    assert not found, "hand-written backward passes:\n" + "\n".join(found)
    kernels = sorted(p.name for p in (PACKAGE / "agents" / "kernels").glob("*.py"))
    assert kernels == ["__init__.py", "private_torch.py"]


# -- the gradient step and the Polyak update ----------------------------------------------------------------


def _train(step, steps: int = 4) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    net = mlp(4, (16,), 2)
    opt = make_adam(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        step(opt, net(torch.randn(8, 4, generator=gen)).pow(2).mean() * 50)
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()


def _public_step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 0.1)
    opt.step()


def _assert_same(a: tuple, b: tuple) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    for i, entry in b[1]["state"].items():
        for key, value in entry.items():
            assert torch.equal(torch.as_tensor(a[1]["state"][i][key]), torch.as_tensor(value)), (i, key)


def test_gradient_step_is_torchs_public_sequence_with_clipping():
    _assert_same(_train(lambda opt, loss: gradient_step(opt, loss, 0.1)), _train(_public_step))
    unclipped = _train(lambda opt, loss: gradient_step(opt, loss))
    assert any(not torch.equal(a, b) for a, b in zip(unclipped[0], _train(_public_step)[0], strict=True))


def test_make_adam_builds_torchs_fused_adam():
    opt = make_adam(mlp(3, (4,), 1).parameters(), lr=1e-3, eps=1e-5)
    assert type(opt) is torch.optim.Adam and opt.defaults["fused"] is True and opt.defaults["eps"] == 1e-5


def test_only_optimized_leaves_other_networks_without_gradients():
    torch.manual_seed(0)
    actor, critic = mlp(3, (4,), 1), mlp(4, (4,), 1)
    opt = make_adam(actor.parameters(), lr=1e-2)
    x = torch.randn(5, 3)
    loss = -critic(torch.cat([x, actor(x)], -1)).mean()
    gradient_step(opt, loss, only_optimized=True)
    assert all(p.grad is not None for p in actor.parameters())
    assert all(p.grad is None for p in critic.parameters())


def test_a_grad_scaler_scales_unscales_and_steps_to_the_unscaled_numbers():
    scaler_cls = getattr(torch.amp, "GradScaler", None)
    try:
        scaler = scaler_cls("cpu", init_scale=2.0**10)
    except Exception:
        pytest.skip("this torch has no CPU gradient scaler")

    def scaled(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        set_grad_scaler(opt, scaler)
        gradient_step(opt, loss, 0.1)

    # A power-of-two scale is exact in float32, so the scaled path gives the unscaled path's weights.
    _assert_same(_train(scaled), _train(_public_step))
    assert scaler.get_scale() == 2.0**10


def test_polyak_update_moves_the_target_by_tau_and_copies_at_one():
    torch.manual_seed(0)
    target, online = mlp(3, (4,), 2), mlp(3, (4,), 2)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target, online, 0.25)
    for t, b, o in zip(target.parameters(), before, online.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * o)
        assert not t.requires_grad or t.grad is None
    polyak_update(target, online, 1.0)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters(), strict=True))


# -- fast= is accepted and changes nothing ----------------------------------------------------------------


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C, wb.DQN])
def test_fast_auto_and_off_train_to_the_same_weights_bit_for_bit(cls):
    extra = {"PPO": {"n_steps": 8, "n_epochs": 2, "batch_size": 32}, "A2C": {"n_steps": 8}}.get(cls.__name__)
    extra = extra or {"learning_starts": 64, "train_freq": 32, "gradient_steps": 4, "net_arch": (32,)}

    def trained(fast: str) -> list[torch.Tensor]:
        agent = cls("CartPole-v1", seed=0, fast=fast, **extra)
        wb.Session(agent, "CartPole-v1", seed=0).run(steps=160)
        assert agent.num_updates >= 2
        return _weights(agent)

    assert all(torch.equal(a, b) for a, b in zip(trained("auto"), trained("off"), strict=True))


def test_fast_is_validated_and_saved(tmp_path):
    with pytest.raises(ValueError, match="fast"):
        wb.PPO("CartPole-v1", fast="fastest")
    agent = wb.A2C("CartPole-v1", fast="off")
    agent.save(tmp_path / "run")
    assert wb.load(tmp_path / "run").config.fast == "off"


def test_a_run_saved_before_fast_existed_loads_with_the_default():
    path = next(p for p in (Path(__file__).parent / "fixtures" / "saved-v1").iterdir() if p.is_dir())
    assert wb.load(path).config.fast == "auto"


# -- what a subclass writes is what trains -------------------------------------------------------------------


def _scaled_loss_class(base: type) -> type:
    class Scaled(base):
        calls = 0

        def _loss(self, policy_loss, entropy, values, returns):
            type(self).calls += 1
            loss, value_loss, entropy_mean = super()._loss(policy_loss, entropy, values, returns)
            return 3.0 * loss + 0.1 * values.pow(2).mean(), value_loss, entropy_mean

    return Scaled


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C])
def test_a_subclass_that_changes_the_loss_changes_the_training(cls):
    sub = _scaled_loss_class(cls)

    def trained(kind: type) -> list[torch.Tensor]:
        agent = kind("CartPole-v1", seed=0, n_steps=8, **({"n_epochs": 2, "batch_size": 32} if cls is wb.PPO else {}))
        wb.Session(agent, "CartPole-v1", seed=0).run(steps=128)
        return _weights(agent)

    plain, changed = trained(cls), trained(sub)
    assert sub.calls == (8 if cls is wb.PPO else 2)  # every gradient step went through the override
    assert any(not torch.allclose(a, b, atol=1e-4) for a, b in zip(plain, changed, strict=True))


class HalvedCritic(nn.Sequential):
    """The value network with its forward changed: the same layers, the output halved."""

    calls: list[tuple[int, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls.append((x.shape[0], torch.is_grad_enabled()))
        return super().forward(x) * 0.5


class PPOWithHalvedCritic(wb.PPO):
    def _build_actor_critic(self) -> list[nn.Parameter]:
        params = super()._build_actor_critic()
        self.critic = HalvedCritic(*self.critic)  # the same layers: the optimizer holds the same parameters
        return params


def test_a_subclass_whose_network_forward_changed_is_what_the_update_runs():
    HalvedCritic.calls.clear()
    hyper = {"n_steps": 8, "n_epochs": 2, "batch_size": 32, "learning_rate": 1e-3}
    agent = PPOWithHalvedCritic("CartPole-v1", seed=0, **hyper)
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=64)
    assert agent.num_updates == 1
    assert (8, False) in HalvedCritic.calls  # acting: the values of 8 envs' observations
    assert HalvedCritic.calls.count((32, True)) == 4  # the update: 2 epochs of 2 minibatches, with gradients
    # The value loss the update reports is the changed network's: its values are half the layers' output.
    plain = wb.PPO("CartPole-v1", seed=0, **hyper)
    plain_session = wb.Session(plain, "CartPole-v1", seed=0)
    plain_session.run(steps=64)
    assert session.signals["value_loss"].last != plain_session.signals["value_loss"].last
    assert any(not torch.equal(a, b) for a, b in zip(_weights(agent), _weights(plain), strict=True))


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


def test_hooks_run_in_acting_and_in_the_update():
    agent = wb.PPO("CartPole-v1", seed=0, n_steps=8, batch_size=32, n_epochs=1)
    calls = []
    handle = agent.actor.register_forward_hook(lambda module, args, out: calls.append(len(out)))
    wb.Session(agent, "CartPole-v1").run(steps=64)
    assert 8 in calls and 32 in calls  # acting (8 envs) and the update's minibatches
    handle.remove()
    calls.clear()
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    agent.decide(obs)
    assert calls == []
    step = agent.decide(obs, action_mask=np.array([[True, False]] * 8))
    assert (step.actions == 0).all()
