"""The DQN family beyond DQN: QR-DQN's quantile loss, C51's projection, noisy layers, Rainbow's
switches, each against hand computations; and each agent learning the two-state chain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.c51 import categorical_projection
from workbench.agents.networks import NoisyLinear, noise_off, reset_noise
from workbench.agents.qrdqn import quantile_huber_loss
from workbench.envs.testing import TwoStateChain

FAST = dict(
    learning_starts=64,
    train_freq=1,
    gradient_steps=1,
    batch_size=32,
    target_update_interval=32,
    net_arch=(32,),
    learning_rate=3e-3,
    exploration=wb.EpsilonGreedy(1.0, 0.02, 0.4),
)


# -- QR-DQN: the quantile Huber loss --------------------------------------------------------------


def test_quantile_huber_loss_by_hand():
    # One quantile (tau = 0.5) at 0, target 2: huber(2) = 2 - 0.5 = 1.5, weight |0.5 - 0| = 0.5.
    loss = quantile_huber_loss(torch.tensor([[0.0]]), torch.tensor([[2.0]]))
    assert loss.item() == pytest.approx(0.75)
    # Two quantiles (tau 0.25, 0.75) at 0, target -1 (below both): huber(-1) = 0.5 each, weights
    # |0.25 - 1| and |0.75 - 1|: 0.375 + 0.125.
    loss = quantile_huber_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[-1.0]]))
    assert loss.item() == pytest.approx(0.5)
    # Inside kappa the Huber part is quadratic: u = 0.5 -> 0.125, tau 0.5 -> 0.0625; targets averaged.
    loss = quantile_huber_loss(torch.tensor([[0.0]]), torch.tensor([[0.5, 2.0]]))
    assert loss.item() == pytest.approx((0.0625 + 0.75) / 2)
    # kappa 0: the plain quantile (pinball) loss, |u| weighted.
    assert quantile_huber_loss(torch.tensor([[0.0]]), torch.tensor([[3.0]]), kappa=0.0).item() == pytest.approx(1.5)


def test_quantile_loss_is_minimal_at_the_true_quantiles():
    samples = torch.linspace(0.0, 1.0, 1001).unsqueeze(0)  # uniform on [0, 1]
    right = torch.tensor([[0.125, 0.375, 0.625, 0.875]])  # quantiles at tau = (2i + 1) / 8
    for shift in (-0.05, 0.05):
        assert quantile_huber_loss(right, samples, kappa=0.0) < quantile_huber_loss(right + shift, samples, kappa=0.0)


def _written_out_quantile_huber_loss(quantiles, targets, kappa):
    """The loss as first written here (eq. 10 op by op): the fused form must match it bit for bit."""
    n = quantiles.shape[-1]
    tau = (torch.arange(n, dtype=quantiles.dtype) + 0.5) / n
    u = targets.unsqueeze(-2) - quantiles.unsqueeze(-1)
    abs_u = u.abs()
    huber = torch.where(abs_u <= kappa, 0.5 * u.pow(2), kappa * (abs_u - 0.5 * kappa)) / kappa
    weight = (tau.unsqueeze(-1) - (u.detach() < 0).to(u.dtype)).abs()
    return (weight * huber).sum(-2).mean(-1)


@pytest.mark.parametrize("kappa", [1.0, 0.5, 2.0])
def test_quantile_huber_loss_values_and_gradients_are_bit_identical_to_the_written_out_form(kappa):
    gen = torch.Generator().manual_seed(0)
    quantiles = (torch.randn(64, 10, generator=gen) * 2).requires_grad_()
    targets = torch.randn(64, 10, generator=gen) * 2
    targets[0, :3] = quantiles[0, :3].detach() + torch.tensor([0.0, kappa, -kappa])  # u = 0 and |u| = kappa
    ours = quantile_huber_loss(quantiles, targets, kappa)
    (grad,) = torch.autograd.grad(ours.mean(), quantiles)
    reference = _written_out_quantile_huber_loss(quantiles, targets, kappa)
    (reference_grad,) = torch.autograd.grad(reference.mean(), quantiles)
    assert torch.equal(ours, reference) and torch.equal(grad, reference_grad)


@pytest.mark.parametrize("cls", [wb.DQN, wb.QRDQN])
def test_targets_computed_once_per_update_train_the_same_weights_as_step_by_step(cls, monkeypatch):
    def trained(batched):
        monkeypatch.setattr(cls, "_batched_targets", batched)
        agent = cls(
            "CartPole-v1",
            seed=0,
            double_q=False,
            learning_starts=100,
            train_freq=50,
            gradient_steps=8,
            batch_size=16,
            net_arch=(16,),
        )
        wb.Session(agent, "CartPole-v1", seed=0).run(steps=400).wait()
        return agent.q_net.state_dict()

    once, step_by_step = trained(True), trained(False)
    assert all(torch.equal(once[k], step_by_step[k]) for k in once)


# -- C51: the projection onto the support ---------------------------------------------------------


def test_categorical_projection_by_hand():
    support = torch.tensor([0.0, 1.0, 2.0])
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    rewards = torch.tensor([0.5, 0.5, 1.0])
    discounts = torch.tensor([1.0, 0.0, 1.0])  # the second terminated: all mass on the reward
    projected = categorical_projection(probs, rewards, discounts, support)
    # 1 + 0.5 = 1.5 splits evenly between atoms 1 and 2; 0.5 splits between 0 and 1; the third
    # shifts by one atom exactly and the top atom's 3.0 is clipped onto 2.
    expected = torch.tensor([[0.0, 0.5, 0.5], [0.5, 0.5, 0.0], [0.0, 0.2, 0.8]])
    torch.testing.assert_close(projected, expected)
    torch.testing.assert_close(projected.sum(-1), torch.ones(3))


def test_categorical_projection_keeps_the_mean_inside_the_support():
    support = torch.linspace(-10, 10, 51)
    probs = torch.softmax(torch.randn(4, 51, generator=torch.Generator().manual_seed(0)), -1)
    probs[:, support.abs() > 5] = 0.0  # nothing is shifted past the ends, where it would be clipped
    probs /= probs.sum(-1, keepdim=True)
    rewards, discounts = torch.tensor([0.3, -1.7, 2.2, 0.0]), torch.full((4,), 0.9)
    projected = categorical_projection(probs, rewards, discounts, support)
    torch.testing.assert_close((projected * support).sum(-1), rewards + 0.9 * (probs * support).sum(-1))


# -- noisy networks -------------------------------------------------------------------------------


def test_noisy_linear_is_deterministic_in_eval_mode_and_noisy_in_training():
    layer = NoisyLinear(3, 2)
    x = torch.ones(4, 3)
    gen = torch.Generator().manual_seed(0)
    reset_noise(layer, gen)
    first = layer(x)
    reset_noise(layer, gen)
    assert not torch.allclose(layer(x), first)  # new noise, new outputs
    layer.eval()
    mean = layer(x)
    reset_noise(layer, gen)
    torch.testing.assert_close(layer(x), mean)
    torch.testing.assert_close(mean, x @ layer.weight_mu.T + layer.bias_mu)
    layer.train()
    with noise_off(layer):
        torch.testing.assert_close(layer(x), mean)
    assert layer.training
    # The noise is not module state: checkpoints and Ray weights carry mu and sigma only.
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}


def test_noisy_dqn_plays_deterministically_and_explores_by_its_noise():
    agent = wb.DQN("CartPole-v1", seed=0, noisy=True, learning_starts=0, exploration=wb.EpsilonGreedy(0.0, 0.0))
    assert any(isinstance(m, NoisyLinear) for m in agent.q_net.modules())
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = agent.act(obs, deterministic=True)
    np.testing.assert_array_equal(agent.act(obs, deterministic=True), greedy)
    explored = [agent.act(obs) for _ in range(5)]
    assert any(not np.array_equal(a, greedy) for a in explored), "noise never changed an action"


# -- the agents -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "options"),
    [
        (wb.QRDQN, dict(n_quantiles=8)),
        (wb.C51, dict(n_atoms=11, v_min=-1.0, v_max=2.0)),
        (wb.C51, dict(n_atoms=11, v_min=-1.0, v_max=2.0, dueling=True, prioritized=True, n_step=2)),
        (wb.Rainbow, dict(n_atoms=11, v_min=-1.0, v_max=2.0, exploration=wb.EpsilonGreedy(0.5, 0.0, 0.5))),
        (wb.Rainbow, dict(distributional=False, noisy=False)),
    ],
    ids=["qrdqn", "c51", "c51-options", "rainbow", "rainbow-without-distribution-and-noise"],
)
def test_learns_the_two_state_chain(cls, options):
    agent = cls(TwoStateChain, seed=0, **{**FAST, **options})
    wb.Session(agent, TwoStateChain, seed=0).run(steps=1600)
    assert agent.play(TwoStateChain, episodes=1) == [1.0], "settled for the myopic 0.5"


def test_rainbow_has_every_part_on_by_default_and_each_switches_off():
    c = wb.Rainbow("CartPole-v1").config
    assert (c.double_q, c.dueling, c.prioritized, c.noisy, c.distributional, c.n_step) == (True,) * 5 + (3,)
    assert c.exploration.start == 0.0 and c.exploration.end == 0.0
    plain = wb.Rainbow(
        "CartPole-v1", double_q=False, dueling=False, prioritized=False, noisy=False, distributional=False, n_step=1
    )
    assert isinstance(plain.memory, wb.ReplayMemory) and not isinstance(plain.memory, wb.PrioritizedReplayMemory)
    assert plain.q_net[-1].out_features == 2 and not any(isinstance(m, NoisyLinear) for m in plain.q_net.modules())
    full = wb.Rainbow("CartPole-v1")
    assert full.q_net.advantage.out_features == 2 * 51 and isinstance(full.q_net.advantage, NoisyLinear)


def test_distributional_heads_and_values():
    qr = wb.QRDQN("CartPole-v1", n_quantiles=7, seed=0)
    assert qr.q_net[-1].out_features == 2 * 7 and qr.config.double_q is False  # as sb3-contrib
    out = qr._outputs(qr.q_net, torch.zeros(3, 4))
    assert out.shape == (3, 2, 7)
    torch.testing.assert_close(qr._q_values(out), out.mean(-1))
    c51 = wb.C51("CartPole-v1", n_atoms=5, v_min=0.0, v_max=4.0, seed=0)
    logits = torch.zeros(1, 2, 5)  # uniform over 0..4: mean 2
    torch.testing.assert_close(c51._q_values(logits), torch.full((1, 2), 2.0))
    with pytest.raises(ValueError, match="v_min < v_max"):
        wb.C51("CartPole-v1", v_min=1.0, v_max=1.0)
    with pytest.raises(ValueError, match="n_quantiles"):
        wb.QRDQN("CartPole-v1", n_quantiles=0)


@pytest.mark.parametrize("name", ["qrdqn", "c51", "rainbow"])
def test_save_load_and_local_workers(name, tmp_path):
    options = dict(FAST, learning_starts=32, **({"n_quantiles": 4} if name == "qrdqn" else {"n_atoms": 11}))
    agent = wb.AGENTS[name]("CartPole-v1", seed=0, **options)
    session = wb.Session(agent, "CartPole-v1", seed=0, num_workers=2, backend="local")
    session.run(steps=96)
    assert session.status == "finished", session.error
    session.save(tmp_path / "run", memory=True)
    loaded = wb.load(tmp_path / "run")
    assert type(loaded) is type(agent)
    obs = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert loaded.state().data["agent_state"] == agent.state().data["agent_state"]


def test_recurrent_export_takes_and_returns_the_lstm_state(tmp_path):
    # Parity over whole episodes is in tests/test_export.py; here: the graph's inputs and outputs.
    onnx = pytest.importorskip("onnx", reason="pip install -e '.[export]'")
    path = wb.RecurrentPPO("CartPoleNoVel-v1", lstm_hidden_size=8).export(tmp_path / "policy.onnx")
    graph = onnx.load(path).graph
    assert [i.name for i in graph.input] == ["obs", "lstm_h", "lstm_c", "episode_start"]
    assert [o.name for o in graph.output] == ["action", "next_lstm_h", "next_lstm_c"]
