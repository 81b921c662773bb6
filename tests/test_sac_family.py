"""TQC, CrossQ and DroQ (issue 54): what each adds to SAC, checked on tiny networks in a few steps.

TQC: quantile critics, the truncated target, its argument checks. CrossQ: batch renormalization (the layer
itself, its modes while acting and learning), no target network, one joint critic pass, Adam's betas, the
delayed actor. DroQ: dropout and layer norm in the critics, masks from the agent's generator. All three:
save and load act the same, live edits reach the optimizers. The generic per-agent tests (tests/test_algorithms.py
and the others parametrized over ``wb.AGENTS``) cover the rest of the contract.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.batch_renorm import BatchRenorm1d, in_mode
from workbench.agents.droq import GeneratorDropout
from workbench.agents.live import apply_edits
from workbench.validation import ArgumentError

TINY = dict(learning_starts=32, batch_size=16, buffer_size=500, net_arch=(16, 16))
SMALL = {
    "tqc": dict(TINY, n_quantiles=5, top_quantiles_to_drop_per_net=1),
    "crossq": dict(TINY, critic_net_arch=(16, 16), renorm_warmup_steps=10),
    "droq": dict(TINY, gradient_steps=3, policy_delay=3),
}
OBS = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -1.0], [-1.0, 0.0, 2.0]], dtype=np.float32)


def trained(name: str, steps: int = 80, seed: int = 0, **extra) -> wb.Agent:
    agent = wb.AGENTS[name]("Pendulum-v1", seed=seed, **{**SMALL[name], **extra})
    wb.Session(agent, "Pendulum-v1", seed=seed).run(steps=steps)
    assert agent.num_updates > 0
    return agent


# -- TQC ---------------------------------------------------------------------------------------------


def test_tqc_critics_give_n_quantiles_each():
    agent = wb.TQC("Pendulum-v1", seed=0, n_critics=3, n_quantiles=7, net_arch=(8,))
    obs, act = torch.zeros(4, 3), torch.zeros(4, 1)
    assert agent.critic(obs, act).shape == (3, 4, 7)
    assert agent.critic_target(obs, act).shape == (3, 4, 7)


def test_tqc_drops_the_top_quantiles_of_the_pooled_target():
    agent = wb.TQC("Pendulum-v1", seed=0, n_critics=2, n_quantiles=4, top_quantiles_to_drop_per_net=1, net_arch=(8,))
    # Critic 0 gives 0..3, critic 1 gives 10..13 for sample 0; sample 1 the reverse order of critics.
    low, high = torch.arange(4.0), torch.arange(10.0, 14.0)
    quantiles = torch.stack([torch.stack([high, low]), torch.stack([low, high])])  # (critics, batch, quantiles)
    kept = agent.truncated_target(quantiles)
    expected = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0, 11.0])  # 8 pooled, the 2 largest (1 per critic) dropped
    assert torch.equal(kept, torch.stack([expected, expected]))
    apply_edits(agent, {"top_quantiles_to_drop_per_net": 3})  # a live edit changes the truncation at once
    assert torch.equal(agent.truncated_target(quantiles)[0], torch.tensor([0.0, 1.0]))


def test_tqc_refuses_dropping_every_quantile_naming_the_value():
    with pytest.raises(ArgumentError, match="top_quantiles_to_drop_per_net=5 must be less than n_quantiles=5"):
        wb.TQC("Pendulum-v1", n_quantiles=5, top_quantiles_to_drop_per_net=5)
    with pytest.raises(ArgumentError, match="n_quantiles=0"):
        wb.TQC("Pendulum-v1", n_quantiles=0)
    agent = wb.TQC("Pendulum-v1", n_quantiles=5, net_arch=(8,))
    with pytest.raises(ArgumentError, match="top_quantiles_to_drop_per_net=9"):
        apply_edits(agent, {"top_quantiles_to_drop_per_net": 9})
    assert agent.config.top_quantiles_to_drop_per_net == 2  # a refused edit changes nothing


def test_tqc_critic_loss_is_the_quantile_huber_loss_of_the_kept_targets():
    from workbench.agents.qrdqn import quantile_huber_loss

    agent = trained("tqc", steps=40)
    batch = agent.memory.sample(8, np.random.default_rng(0))
    actions = batch.actions.reshape(8, -1)
    alpha = agent._alpha()
    state = agent.generator.get_state()
    loss, _ = agent._critic_loss(batch, actions, alpha, None)
    agent.generator.set_state(state)  # the same next actions again, by hand
    with torch.no_grad():
        next_a, next_logp = agent._policy(batch.next_obs)
        kept = agent.truncated_target(agent.critic_target(batch.next_obs, next_a))
        not_done = batch.discounts * (1 - batch.dones)
        target = batch.rewards[:, None] + not_done[:, None] * (kept - alpha * next_logp[:, None])
        quantiles = agent.critic(batch.obs, actions)
        by_hand = torch.stack([quantile_huber_loss(q, target) for q in quantiles]).mean() / 5
    torch.testing.assert_close(loss.detach(), by_hand)


# -- CrossQ: batch renormalization ------------------------------------------------------------------


def test_batch_renorm_standardizes_with_the_batch_then_renormalizes_towards_the_running_statistics():
    """sb3-contrib's layer: the batch variance with Bessel's correction, plain batch normalization while the
    count of batches is at most ``warmup_steps``, then the corrections moved into the mean and variance."""
    torch.manual_seed(0)
    layer = BatchRenorm1d(3, momentum=0.5, warmup_steps=2, eps=1e-5)
    x = torch.randn(64, 3) * 4 + 2
    y = layer(x)  # warm-up: plain batch normalization (weight 1, bias 0)
    torch.testing.assert_close(y.mean(0), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(0), torch.ones(3), atol=1e-3, rtol=0)  # unbiased, as the layer's
    torch.testing.assert_close(layer.running_mean, 0.5 * x.mean(0))
    torch.testing.assert_close(layer.running_var, 0.5 + 0.5 * x.var(0))
    layer(x)
    assert int(layer.num_batches_tracked) == 2
    torch.testing.assert_close(layer(x), y)  # the third batch: still the warm-up (2 is not more than 2)
    # After the warm-up: normalized with mean_B - d std_B / r and variance var_B / r^2, r and d from the
    # running statistics (x_hat * r + d but for where eps enters).
    mean_run, var_run = layer.running_mean.clone(), layer.running_var.clone()
    z = torch.randn(64, 3) + 1
    out = layer(z)
    var_b = z.var(0)
    std_run = (var_run + 1e-5).sqrt()
    r = ((var_b + 1e-5).sqrt() / std_run).clamp(1 / 3, 3)
    d = ((z.mean(0) - mean_run) / std_run).clamp(-5, 5)
    torch.testing.assert_close(out, (z - z.mean(0) + d * var_b.sqrt() / r) / (var_b / r**2 + 1e-5).sqrt())
    torch.testing.assert_close(out, (z - z.mean(0)) / var_b.sqrt() * r + d, atol=1e-3, rtol=0)
    # Eval mode: the running statistics alone, nothing updated.
    layer.eval()
    before = layer.running_mean.clone()
    torch.testing.assert_close(layer(z), (z - layer.running_mean) / (layer.running_var + 1e-5).sqrt())
    assert torch.equal(layer.running_mean, before) and int(layer.num_batches_tracked) == 4


def test_batch_renorm_gives_a_feature_constant_over_the_batch_no_nan_gradient():
    """After the warm-up the mean's correction takes the batch's std, whose gradient is infinite at 0: a
    feature constant over the batch (positive, after a ReLU) must still send finite gradients back."""
    layer = BatchRenorm1d(2, warmup_steps=0)
    layer.num_batches_tracked += 1  # past the warm-up
    with torch.no_grad():
        layer.running_mean += 0.3
    w = torch.nn.Parameter(torch.tensor([1.0, 0.5]))
    x = torch.randn(8, 2)
    x[:, 1] = 1.0
    out = layer(torch.relu(x * w + torch.tensor([0.0, 2.0])))
    out.sum().backward()
    assert torch.isfinite(w.grad).all()
    torch.testing.assert_close(out[:, 1].detach(), out[:1, 1].detach().expand(8))  # constant, as it came in


def _eager_and_compiled_steps(steps: int = 5):
    """A batch renormalization layer and its compiled twin (``fullgraph=True``: a graph break fails) on the
    same batches: per step the batch, both outputs and both input gradients."""
    torch.manual_seed(0)
    eager = BatchRenorm1d(3, warmup_steps=2)
    compiled = torch.compile(copy.deepcopy(eager), fullgraph=True, backend="aot_eager")
    for _ in range(steps):
        x = torch.randn(8, 3) * 2 + 1
        x_eager, x_compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, out_compiled = eager(x_eager), compiled(x_compiled)
        (out**2).sum().backward()
        (out_compiled**2).sum().backward()
        yield eager, x, (out.detach(), out_compiled.detach()), (x_eager.grad, x_compiled.grad)


def test_batch_renorm_compiles_to_one_graph_and_matches_eager_across_its_warm_up():
    """The warm-up's end is a tensor condition, not a Python branch, so the layer compiles to one graph. It
    gives the eager layer's outputs before and after the warm-up ends, and its input gradients during the
    warm-up, where the output is plain batch normalization (Bessel's variance) to the bit."""
    for step, (eager, x, (out, out_compiled), (grad, grad_compiled)) in enumerate(_eager_and_compiled_steps()):
        torch.testing.assert_close(out_compiled, out)
        mean = x.mean(0)
        plain = (x - mean) / ((x - mean).pow(2).sum(0) / 7 + eager.eps).sqrt() * eager.weight + eager.bias
        if step <= eager.warmup_steps:  # the layer had seen at most warmup_steps batches before this one
            assert torch.equal(out, plain.detach())
            torch.testing.assert_close(grad_compiled, grad)
        else:  # renormalized towards running statistics still near their start (mean 0, variance 1)
            assert not torch.allclose(out, plain.detach())


@pytest.mark.xfail(strict=True, reason="compiled (AOT autograd) input gradients differ from eager after the warm-up")
def test_compiled_batch_renorm_gradients_match_eager_after_the_warm_up():
    """Known: after the warm-up, the compiled layer's outputs are eager's but its input gradients are not
    (0.1 apart with aot_eager, 1e-4 with inductor, in float64 too), in the branch form this layer had before
    as well. With the running statistics left unchanged (momentum 0) they agree, so the compiled backward
    seems to read the statistics after their in-place update; copying them first did not help. Strict: once
    fixed this test passes, and the xfail mark must go."""
    for step, (eager, _x, _outs, (grad, grad_compiled)) in enumerate(_eager_and_compiled_steps()):
        if step > eager.warmup_steps:
            torch.testing.assert_close(grad_compiled, grad)


def test_in_mode_restores_each_submodule_mode():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), BatchRenorm1d(2))
    net[1].eval()
    with in_mode(net, True):
        assert net.training and net[1].training
    assert net.training and not net[1].training


def test_crossq_has_no_target_network_and_renormalizes_actor_and_critics():
    agent = trained("crossq")
    assert "critic_target" not in agent.networks and "critic_target" not in agent.state().tensors
    assert not hasattr(agent, "critic_target")
    for net in (agent.actor, agent.critic):
        assert any(isinstance(m, BatchRenorm1d) for m in net.modules())
    # Every optimizer of the actor and critics runs with CrossQ's betas.
    assert agent.actor_optimizer.param_groups[0]["betas"] == (0.5, 0.999)
    assert agent.critic_optimizer.param_groups[0]["betas"] == (0.5, 0.999)


def test_crossq_acts_with_the_running_statistics_and_learns_with_the_batch_ones():
    agent = trained("crossq")
    renorms = [m for m in agent.actor.modules() if isinstance(m, BatchRenorm1d)]
    counts = [int(m.num_batches_tracked) for m in renorms]
    one = agent.act(OBS[:1], deterministic=True)
    together = agent.act(OBS, deterministic=True)
    # Acting is per observation (eval mode): the same action alone or in a batch, and no statistics move.
    np.testing.assert_allclose(one[0], together[0], rtol=1e-6)
    agent.act(OBS)  # the exploring action too
    assert [int(m.num_batches_tracked) for m in renorms] == counts
    assert agent.actor.training and agent.critic.training  # the modes acting found are given back
    # As sb3-contrib's: the next actions come from the running statistics, and only a gradient step that
    # updates the actor runs it in training mode (once, on the current observations).
    agent.num_updates = 0  # the next gradient step is the first of policy_delay=3: no actor step
    agent.update()
    assert [int(m.num_batches_tracked) for m in renorms] == counts
    agent.num_updates = 2  # the next one is the third: the actor's
    agent.update()
    assert [int(m.num_batches_tracked) for m in renorms] == [c + 1 for c in counts]


def test_crossq_feeds_current_and_next_state_actions_to_the_critics_in_one_pass(monkeypatch):
    agent = trained("crossq", policy_delay=1000)  # no actor step: only the critics' pass is seen
    sizes = []
    critic_forward = type(agent.critic).forward

    def spy(self, x, actions=None, member=None):
        sizes.append((len(x), self.training))
        return critic_forward(self, x, actions, member)

    monkeypatch.setattr(type(agent.critic), "forward", spy)
    agent.update()
    assert sizes == [(2 * agent.config.batch_size, True)]


def test_crossq_updates_the_actor_every_policy_delay_steps():
    agent = trained("crossq", steps=32, policy_delay=3, learning_starts=31)
    agent.num_updates = 0
    weights = [p.detach().clone() for p in agent.actor.parameters()]
    for _ in range(2):
        agent.update()
        assert all(torch.equal(a, b) for a, b in zip(weights, agent.actor.parameters(), strict=True))
    agent.update()
    assert not all(torch.equal(a, b) for a, b in zip(weights, agent.actor.parameters(), strict=True))


def test_crossq_with_gsde_normalizes_the_noise_features_as_sb3_contribs_actor(tmp_path):
    from sb3_contrib import CrossQ as ContribCrossQ

    settings = dict(use_sde=True, use_expln=True, log_std_init=-1.0, net_arch=(16, 16), critic_net_arch=(16, 16))
    agent = wb.CrossQ("MountainCarContinuous-v0", seed=0, learning_starts=32, batch_size=16, **settings)
    contrib = ContribCrossQ(
        "MlpPolicy",
        "MountainCarContinuous-v0",
        use_sde=True,
        policy_kwargs=dict(net_arch=dict(pi=[16, 16], qf=[16, 16]), use_expln=True, log_std_init=-1.0),
    )
    # The same layers in the same order: the features the noise is built from are renormalized too.
    ours = [type(m).__name__ for m in agent.actor.trunk.modules() if not isinstance(m, torch.nn.Sequential)]
    theirs = [type(m).__name__ for m in contrib.policy.actor.latent_pi]
    assert ours == theirs == ["BatchRenorm1d", "Linear", "ReLU", "BatchRenorm1d", "Linear", "ReLU", "BatchRenorm1d"]
    wb.Session(agent, "MountainCarContinuous-v0", seed=0).run(steps=96)
    assert agent.num_updates > 0
    agent.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    obs = np.array([[-0.5, 0.0], [0.3, 0.05], [-1.1, -0.04]], dtype=np.float32)
    np.testing.assert_array_equal(loaded.act(obs, deterministic=True), agent.eval().act(obs, deterministic=True))


@pytest.mark.parametrize("use_expln", [False, True])
def test_the_gsde_noise_std_is_sb3s_with_and_without_expln(use_expln):
    from stable_baselines3.common.distributions import StateDependentNoiseDistribution

    agent = wb.SAC("Pendulum-v1", seed=0, use_sde=True, use_expln=use_expln, net_arch=(8, 8))
    with torch.no_grad():
        agent.actor.log_std.copy_(torch.linspace(-3.0, 2.0, agent.actor.log_std.numel()).reshape(8, 1))
    sb3 = StateDependentNoiseDistribution(1, full_std=True, use_expln=use_expln)
    sb3.latent_sde_dim = 8
    torch.testing.assert_close(agent.actor.noise_std(), sb3.get_std(agent.actor.log_std))
    features = torch.rand(5, 8)
    sb3.proba_distribution(torch.zeros(5, 1), agent.actor.log_std, features)
    torch.testing.assert_close(agent.actor.action_std(features), sb3.distribution.stddev)


# -- DroQ: dropout critics --------------------------------------------------------------------------


def test_droq_critics_have_dropout_and_layer_norm_active_while_learning_only():
    agent = trained("droq", steps=40)
    layers = list(agent.critic.members[0])
    kinds = [type(m).__name__ for m in layers]
    assert kinds == ["Linear", "GeneratorDropout", "LayerNorm", "ReLU"] * 2 + ["Linear"]
    for m in agent.critic.modules():
        if isinstance(m, GeneratorDropout):
            m.p = 0.5  # large enough that two draws surely differ
    obs, act = torch.ones(8, 3), torch.zeros(8, 1)
    with torch.no_grad():
        assert not torch.equal(agent.critic(obs, act), agent.critic(obs, act))  # training: masks differ
        with in_mode(agent.critic, False):
            assert torch.equal(agent.critic(obs, act), agent.critic(obs, act))  # eval: deterministic


def test_droq_draws_its_masks_from_the_agents_generator():
    a, b = trained("droq", steps=48, seed=3), trained("droq", steps=48, seed=3)
    for (name, x), y in zip(a.critic.state_dict().items(), b.critic.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert all(m.generator is a.generator for m in a.critic.modules() if isinstance(m, GeneratorDropout))


def test_droq_dropout_rate_is_live():
    agent = trained("droq", steps=40)
    apply_edits(agent, {"dropout_rate": 0.2})
    rates = {
        m.p for net in (agent.critic, agent.critic_target) for m in net.modules() if isinstance(m, GeneratorDropout)
    }
    assert rates == {0.2}
    with pytest.raises(ArgumentError, match="dropout_rate=1.0"):
        apply_edits(agent, {"dropout_rate": 1.0})


# -- all three ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_save_and_load_act_the_same(name, tmp_path):
    agent = trained(name)
    agent.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert type(loaded) is type(agent) and loaded.hyperparameters() == agent.hyperparameters()
    np.testing.assert_array_equal(loaded.act(OBS, deterministic=True), agent.eval().act(OBS, deterministic=True))
    for key, net in agent.networks.items():  # buffers too: CrossQ's running statistics
        for k, v in net.state_dict().items():
            assert torch.equal(v, loaded.networks[key].state_dict()[k]), f"{key}.{k}"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_live_learning_rate_edit_reaches_every_optimizer(name):
    agent = trained(name, steps=40)
    apply_edits(agent, {"learning_rate": 1e-5})
    for opt_name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
        assert agent.optimizers[opt_name].param_groups[0]["lr"] == 1e-5, opt_name
    agent.update()  # and the next update keeps it
    assert agent.optimizers["critic_optimizer"].param_groups[0]["lr"] == 1e-5


@pytest.mark.parametrize("name", sorted(SMALL))
def test_updates_on_pendulum_give_finite_metrics(name):
    """Not a score check (benchmarks/continuous.py is): the losses stay finite and the critics move."""
    agent = trained(name, steps=120)
    metrics = agent.update()
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    assert metrics["q_mean"] < 0  # Pendulum's rewards are all negative
