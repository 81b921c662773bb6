"""The written-out ensemble pass (``workbench/agents/kernels/body.py``): the same outputs and
gradients as autograd, the cases it declines, and continuous CQL with and without it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import workbench as wb
from workbench.agents.kernels import EnsemblePass, body
from workbench.agents.networks import EnsembleMLP


def _autograd_grads(ensemble: EnsembleMLP, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict]:
    ensemble.zero_grad(set_to_none=True)
    out = ensemble(x)
    (out * weights).sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in ensemble.named_parameters()}


@pytest.mark.parametrize(
    ("in_dim", "hidden", "out_dim", "rows"),
    [(4, (64, 64), 1, 700), (3, (16,), 2, 50), (7, (32, 8, 16), 1, 300), (5, (), 3, 20)],
)
def test_forward_and_gradients_equal_autograd(in_dim, hidden, out_dim, rows):
    torch.manual_seed(0)
    ensemble = EnsembleMLP(3, in_dim, hidden, out_dim)
    x = torch.randn(rows, in_dim)
    weights = torch.randn(3, rows, out_dim)
    expected_out, expected = _autograd_grads(ensemble, x, weights)
    written_out = EnsemblePass.of(ensemble)
    assert written_out is not None and written_out.usable()
    ensemble.zero_grad(set_to_none=True)
    for _ in range(2):  # the buffers reused, the gradients fresh
        out, kept = written_out.forward_keeping(x)
        torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
        _, grads = written_out.backward(kept, weights)
        for (name, _p), grad in zip(ensemble.named_parameters(), grads, strict=True):
            torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-5, msg=name)


def test_it_reads_the_current_weights():
    torch.manual_seed(0)
    ensemble = EnsembleMLP(2, 3, (8,), 1)
    written_out = EnsemblePass.of(ensemble)
    x = torch.randn(10, 3)
    with torch.no_grad():
        ensemble.members[0][0].weight.mul_(2.0)  # an optimizer writes in place
        ensemble.load_state_dict({k: v + 0.1 for k, v in ensemble.state_dict().items()})
    torch.testing.assert_close(written_out.forward_keeping(x)[0], ensemble(x).detach())


def test_it_declines_what_it_cannot_run():
    assert EnsemblePass.of(EnsembleMLP(2, 3, (8,), 1, activation="tanh")) is None
    assert EnsemblePass.of(EnsembleMLP(2, 3, (8,), 1, encoder=nn.Identity())) is None
    assert EnsemblePass.of(nn.Sequential(nn.Linear(3, 1))) is None
    frozen = EnsembleMLP(2, 3, (8,), 1)
    frozen.members[1][0].weight.requires_grad_(False)
    assert EnsemblePass.of(frozen) is None
    assert EnsemblePass.of(EnsembleMLP(2, 3, (8,), 1).double()) is None
    hooked = EnsembleMLP(2, 3, (8,), 1)
    written_out = EnsemblePass.of(hooked)
    assert written_out is not None
    handle = hooked.members[0][0].register_forward_hook(lambda *args: None)
    assert not written_out.usable()  # a hook set later: the caller goes back to autograd
    handle.remove()
    assert written_out.usable()
    hooked.members[0][1] = nn.Tanh()
    assert not written_out.usable()


def _pendulum_dataset(n: int = 2000) -> wb.Dataset:
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    env = gym.make("Pendulum-v1")
    truncated = np.zeros(n, bool)
    truncated[99::100] = True
    return wb.Dataset(
        obs,
        rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        -rng.random(n).astype(np.float32),
        np.roll(obs, -1, 0),
        np.zeros(n, bool),
        truncated,
        observation_space=env.observation_space,
        action_space=env.action_space,
    )


def _train(written_out: bool, steps: int = 25) -> tuple[list[dict], dict]:
    agent = wb.CQL(
        dataset=_pendulum_dataset(),
        seed=3,
        net_arch=(32, 16),
        batch_size=64,
        n_action_samples=4,
        fast="auto" if written_out else "off",
    )
    metrics = [agent.update() for _ in range(steps)]
    return metrics, {k: v.clone() for k, v in {**agent.critic.state_dict(), **agent.actor.state_dict()}.items()}


def test_cql_learns_the_same_with_and_without_the_written_out_pass():
    fast_metrics, fast_weights = _train(written_out=True)
    slow_metrics, slow_weights = _train(written_out=False)
    for fast, slow in zip(fast_metrics, slow_metrics, strict=True):
        assert fast.keys() == slow.keys()
        for key in fast:
            assert fast[key] == pytest.approx(slow[key], rel=1e-4, abs=1e-5), key
    for name in fast_weights:
        torch.testing.assert_close(fast_weights[name], slow_weights[name], rtol=1e-4, atol=1e-5, msg=name)


def test_cql_uses_the_pass_for_a_plain_critic_and_autograd_for_a_hooked_one():
    agent = wb.CQL(dataset=_pendulum_dataset(), seed=0, net_arch=(16,), batch_size=16, n_action_samples=2)
    assert isinstance(body(agent.critic), EnsemblePass)
    calls = []
    handle = agent.critic.members[0].register_forward_hook(lambda module, args, out: calls.append(out.shape[0]))
    agent.update()
    assert body(agent.critic) is None
    assert 16 * (1 + 3 * 2) in calls  # the hook saw the critic's pass over every row: autograd ran it
    handle.remove()
    before = agent.critic.state_dict()["members.0.0.weight"].clone()
    agent.update()
    assert body(agent.critic) is not None
    assert not torch.equal(before, agent.critic.state_dict()["members.0.0.weight"])


def test_a_reseeded_cql_builds_a_pass_for_its_new_critic():
    ds = _pendulum_dataset(500)
    agent = wb.CQL(dataset=ds, seed=0, net_arch=(16,), batch_size=16, n_action_samples=2)
    first = body(agent.critic)
    wb.Session(agent, dataset=ds, seed=1).run(steps=3)  # a seeded session rebuilds the networks
    assert body(agent.critic) is not first and body(agent.critic).ensemble is agent.critic
