"""A2C's and PPO's gradient steps in numpy: autograd's gradients and metrics to float32 rounding, the same
choice of path however a run was interrupted, and the torch path wherever numpy cannot follow."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.networks import mlp
from workbench.agents.numpy_mlp import NumpyMLP
from workbench.agents.on_policy import RolloutBatch, run_layers
from workbench.agents.ppo import NumpyBatch, clipped_step


def _batch(n: int = 40, dim: int = 4, n_actions: int = 2, seed: int = 0) -> RolloutBatch:
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: torch.from_numpy(rng.normal(size=shape).astype(np.float32))  # noqa: E731
    return RolloutBatch(
        obs=f32(n, dim), actions=torch.from_numpy(rng.integers(0, n_actions, n)), log_probs=torch.zeros(n),
        advantages=f32(n), returns=f32(n), values=np.zeros(n, np.float32), returns_np=np.zeros(n, np.float32),
    )


def _gradients_of(agent: wb.A2C, step) -> tuple[dict, list[torch.Tensor]]:
    """The metrics and the gradients ``step`` leaves for the optimizer (which is not stepped)."""
    seen: list[torch.Tensor] = []
    agent._clip_and_step = lambda: seen.extend(p.grad.clone() for p in agent._params)
    metrics = step()
    del agent._clip_and_step
    return metrics, seen


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("ent_coef", [0.0, 0.05])
@pytest.mark.parametrize("normalize_advantage", [False, True])
def test_the_numpy_gradient_step_gives_autograds_gradients_and_metrics(activation, ent_coef, normalize_advantage):
    agent = wb.A2C("CartPole-v1", seed=0, activation=activation, ent_coef=ent_coef,
                   normalize_advantage=normalize_advantage, vf_coef=0.7)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=120)  # a few updates: the flat buffers are bound
    batch = _batch()
    nets = agent._numpy_update_nets(batch)
    assert nets is not None
    ours, our_grads = _gradients_of(agent, lambda: agent._gradient_step_in_numpy(batch, *nets))
    theirs, their_grads = _gradients_of(agent, lambda: agent._gradient_step_in_torch(batch))
    assert ours.keys() == theirs.keys() == {"loss", "policy_loss", "value_loss", "entropy"}
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-6), key
    for a, b in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_numpy_mlp_backward_matches_autograd_for_a_deeper_net():
    torch.manual_seed(0)
    net = mlp(5, (7, 9, 6), 3, activation="relu")
    x = np.random.default_rng(1).normal(size=(11, 5)).astype(np.float32)
    grad_out = np.random.default_rng(2).normal(size=(11, 3)).astype(np.float32)
    forward = NumpyMLP.of(net)
    out, kept = forward.forward_keeping(x)
    grads = [(np.empty_like(w.detach().numpy()), np.empty_like(b.detach().numpy()))
             for w, b in forward.linear_parameters()]
    forward.backward(kept, grad_out, grads)
    torch_out = net(torch.from_numpy(x))
    torch_out.backward(torch.from_numpy(grad_out))
    np.testing.assert_allclose(out, torch_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    for (dw, db), (w, b) in zip(grads, forward.linear_parameters(), strict=True):
        np.testing.assert_allclose(dw, w.grad.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(db, b.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_every_a2c_update_is_taken_in_numpy_before_and_after_a_resume(tmp_path):
    calls = {"numpy": 0}

    def counting(agent: wb.A2C) -> wb.A2C:
        original = agent._gradient_step_in_numpy

        def counted(*args):
            calls["numpy"] += 1
            return original(*args)

        agent._gradient_step_in_numpy = counted
        return agent

    session = wb.Session(counting(wb.A2C("CartPole-v1", seed=0)), "CartPole-v1", seed=0)
    session.run(steps=400)
    assert calls["numpy"] == session.agent.num_updates == 10
    session.save(tmp_path / "run")

    calls["numpy"] = 0
    resumed = wb.Session.resume(tmp_path / "run", "CartPole-v1")
    counting(resumed.agent)
    assert not resumed.agent._flat_rmsprop.bound  # the loaded state is bound at its first step
    resumed.run(steps=400)
    # The path does not depend on the binding: a resumed run's gradients are computed as before.
    assert calls["numpy"] == 10 and resumed.agent.num_updates == 20
    assert resumed.agent._flat_rmsprop.bound


def test_updates_numpy_cannot_follow_take_autograd():
    plain = wb.A2C("CartPole-v1", seed=0)
    assert plain._numpy_update_nets(_batch()) is not None

    masked = _batch()._replace(masks=torch.ones(40, 2, dtype=torch.bool))
    assert plain._numpy_update_nets(masked) is None

    hooked = wb.A2C("CartPole-v1", seed=0)
    handle = hooked.actor.register_forward_hook(lambda module, inputs, output: None)
    assert hooked._numpy_update_nets(_batch()) is None
    handle.remove()

    tensor_hooked = wb.A2C("CartPole-v1", seed=0)
    tensor_hooked.critic[0].weight.register_hook(lambda grad: grad * 2)
    assert tensor_hooked._numpy_update_nets(_batch()) is None

    frozen = wb.A2C("CartPole-v1", seed=0)
    frozen.actor[0].bias.requires_grad_(False)
    assert frozen._numpy_update_nets(_batch()) is None

    box = wb.A2C("Pendulum-v1", seed=0)
    assert box._numpy_update_nets(_batch(dim=3)) is None


def test_a_hooked_a2c_still_trains_through_autograd():
    agent = wb.A2C("CartPole-v1", seed=0)
    outputs: list[int] = []
    agent.critic.register_forward_hook(lambda module, inputs, output: outputs.append(len(output)))
    session = wb.Session(agent, "CartPole-v1")  # no seed: a seeded session rebuilds the networks
    session.run(steps=80)
    assert session.status == "finished", session.error
    assert agent.num_updates == 2
    assert 40 in outputs  # the update's forward pass ran through the hooked module


@pytest.mark.slow
def test_a2c_zoo_preset_learns_cartpole_with_the_numpy_update():
    agent, env = wb.preset("CartPole-v1", "a2c", seed=0)
    wb.Session(agent, env, seed=0).run(steps=100_000)
    assert np.mean(agent.play(gym.make("CartPole-v1"), episodes=5, seed=1)) >= 400


def _ppo_minibatch_in_torch(agent: wb.PPO, batch: RolloutBatch, clip: float) -> torch.Tensor:
    log_prob, entropy = agent._policy_terms(batch.obs, batch.actions, None)
    values = run_layers(agent.critic, batch.obs).squeeze(-1)
    return clipped_step(agent, log_prob, entropy, values, batch.advantages, batch.log_probs, batch.returns, clip)


@pytest.mark.parametrize("ent_coef", [0.0, 0.05])
@pytest.mark.parametrize("normalize_advantage", [False, True])
@pytest.mark.parametrize("spread", [0.0, 0.3])  # the old log-probs equal to the current ones, or clipped
def test_the_ppo_numpy_minibatch_step_gives_autograds_gradients_and_statistics(ent_coef, normalize_advantage, spread):
    agent = wb.PPO("CartPole-v1", seed=0, ent_coef=ent_coef, normalize_advantage=normalize_advantage, n_steps=8,
                   batch_size=32, n_epochs=2)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=128)
    batch = _batch(n=64)
    with torch.no_grad():
        log_prob, _ = agent._policy_terms(batch.obs, batch.actions, None)
    old = log_prob + spread * torch.from_numpy(np.random.default_rng(3).normal(size=64).astype(np.float32))
    batch = batch._replace(log_probs=old)
    nets = agent._numpy_update_nets(batch)
    assert nets is not None
    rows = np.arange(64)
    ours, our_grads = _gradients_of(
        agent, lambda: agent._clipped_step_in_numpy(NumpyBatch.of(batch), rows, 0.2, *nets))
    theirs, their_grads = _gradients_of(agent, lambda: _ppo_minibatch_in_torch(agent, batch, 0.2))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    if spread:
        assert 0 < float(ours[4]) < 1  # some rows clipped, some not: both branches of the gradient
    for a, b in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_numpy_steps_rewrite_the_same_grad_tensors_and_follow_replaced_ones():
    agent = wb.PPO("CartPole-v1", seed=0, n_steps=8, batch_size=32, n_epochs=2)
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=128)
    batch = _batch(n=64)
    nets = agent._numpy_update_nets(batch)
    rows = np.arange(64)

    def step():  # the optimizer is not stepped (``_gradients_of``): every step has the same gradients
        return agent._clipped_step_in_numpy(NumpyBatch.of(batch), rows, 0.2, *nets)

    _, first = _gradients_of(agent, step)
    held = [p.grad for p in agent._params]
    _, again = _gradients_of(agent, step)
    assert all(p.grad is g for p, g in zip(agent._params, held, strict=True))  # written again, not reallocated
    for i, p in enumerate(agent._params):  # replaced between steps: dropped, or a non-contiguous tensor
        p.grad = None if i % 2 else torch.full_like(p.grad.T, 7.0).T
    _, replaced = _gradients_of(agent, step)
    assert all(p.grad.is_contiguous() for p in agent._params)
    for a, b, c in zip(first, again, replaced, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_every_ppo_gradient_step_is_taken_in_numpy_and_masked_ppo_takes_autograd():
    calls = {"numpy": 0}
    agent = wb.PPO("CartPole-v1", seed=0, n_steps=16, batch_size=64, n_epochs=3)
    original = agent._clipped_step_in_numpy

    def counted(*args):
        calls["numpy"] += 1
        return original(*args)

    agent._clipped_step_in_numpy = counted
    wb.Session(agent, "CartPole-v1", seed=0).run(steps=256)
    assert agent.num_updates == 2 and calls["numpy"] == 2 * 3 * 2  # updates x epochs x minibatches

    masked = _batch()._replace(masks=torch.ones(40, 2, dtype=torch.bool))
    assert agent._numpy_update_nets(masked) is None


@pytest.mark.slow
def test_ppo_zoo_preset_learns_cartpole_with_the_numpy_update():
    agent, env = wb.preset("CartPole-v1", "ppo", seed=0)
    wb.Session(agent, env, seed=0).run(steps=50_000)
    assert np.mean(agent.play(gym.make("CartPole-v1"), episodes=5, seed=1)) >= 400


def test_large_products_go_to_torch_so_numpys_blas_never_starts_threads(monkeypatch):
    from workbench.agents import numpy_mlp

    calls = []
    real_mm = torch.mm
    monkeypatch.setattr(numpy_mlp.torch, "mm", lambda *a, **k: calls.append(a[0].shape) or real_mm(*a, **k))
    rng = np.random.default_rng(0)
    small, wide = rng.normal(size=(8, 64)).astype(np.float32), rng.normal(size=(256, 64)).astype(np.float32)
    weight = rng.normal(size=(64, 64)).astype(np.float32)
    np.testing.assert_allclose(numpy_mlp.matmul(small, weight), small @ weight, rtol=1e-5, atol=1e-5)
    assert calls == []
    np.testing.assert_allclose(numpy_mlp.matmul(wide, weight), wide @ weight, rtol=1e-5, atol=1e-5)
    out = np.empty((64, 64), np.float32)
    numpy_mlp.matmul(wide.T, wide, out=out)
    np.testing.assert_allclose(out, wide.T @ wide, rtol=1e-4, atol=1e-3)
    assert calls == [(256, 64), (64, 256)]
