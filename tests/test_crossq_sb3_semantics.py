"""CrossQ computes what sb3-contrib's CrossQ computes at the same settings, checked update by update (no
training): both are built on Pendulum-v1 with the defaults, sb3-contrib's weights and running statistics are
copied into this project's agent, and both take the same batches with the same Gaussian noise. After every
gradient step the critic, actor and entropy-coefficient losses, the gradient each optimizer applies, and every
weight, running statistic and batch count must agree. A short warm-up (``renorm_warmup_steps=1``) makes the
later passes take batch renormalization's corrections, so both of the layer's phases are compared.

The updates run in float64 (torch's default dtype for the test, so both build and draw in it): in float32 the
summation order alone changes gradients that batch normalization makes nearly cancel (1e-8 and less), and Adam's
first steps, about ``lr * sign(g)``, turn those into differences of a whole learning rate. Acting is compared
in float32 afterwards.

The one formula written differently on purpose is the tanh correction of the log-probability: this project's
is exact (``2 (log 2 - u - softplus(-2u))``, shared with SAC), sb3-contrib adds 1e-6 inside ``log(1 - a^2)``;
the check sets that 1e-6 to 0 on sb3-contrib's side so the rest can be compared tightly. docs/algorithms.md
("Side by side with sb3-contrib") lists what this check found: the batch renormalization's differences, fixed,
and the ones left on purpose."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import workbench as wb
import workbench.agents.sac as sac_module
from workbench.agents.batch_renorm import BatchRenorm1d
from workbench.memory.replay import ReplayBatch

sb3_contrib = pytest.importorskip("sb3_contrib")
from sb3_contrib.common.torch_layers import BatchRenorm1d as TheirRenorm  # noqa: E402
from stable_baselines3.common.logger import configure  # noqa: E402
from stable_baselines3.common.type_aliases import ReplayBufferSamples  # noqa: E402

BATCH = 256
UPDATES = 9  # three actor steps (policy_delay 3)
WARMUP = 1  # the critics' corrections start at their third pass, the actor's at its third (the 9th update)


def _named(nets: list[tuple[str, nn.Module, list[nn.Module]]], renorm: type) -> dict[str, list[torch.Tensor]]:
    """Each network's layers as named lists of tensors: the renormalization layers' scale, shift, running
    statistics and batch count, each linear layer's weight and bias. ``nets`` gives each network's name, the
    module holding its renormalization and hidden linear layers, and its output layers (sb3-contrib's actor
    has two, the mean and the log-std; this project's one, whose rows are the two stacked)."""
    out: dict[str, list[torch.Tensor]] = {}
    for name, body, heads in nets:
        for i, layer in enumerate(m for m in body.modules() if isinstance(m, renorm)):
            mine = isinstance(layer, BatchRenorm1d)
            out[f"{name}.renorm{i}.scale"] = [layer.weight if mine else layer.scale]
            out[f"{name}.renorm{i}.bias"] = [layer.bias]
            out[f"{name}.renorm{i}.running_mean"] = [layer.running_mean if mine else layer.ra_mean]
            out[f"{name}.renorm{i}.running_var"] = [layer.running_var if mine else layer.ra_var]
            out[f"{name}.renorm{i}.count"] = [layer.num_batches_tracked if mine else layer.steps]
        linears = [m for m in body.modules() if isinstance(m, nn.Linear) and m not in heads] + [heads]
        for i, layer in enumerate(linears):
            layers = layer if isinstance(layer, list) else [layer]
            out[f"{name}.linear{i}.weight"] = [m.weight for m in layers]
            out[f"{name}.linear{i}.bias"] = [m.bias for m in layers]
    return out


def ours_named(agent: wb.CrossQ) -> dict[str, list[torch.Tensor]]:
    actor_head = [m for m in agent.actor.modules() if isinstance(m, nn.Linear)][-1]
    nets = [("actor", agent.actor, [actor_head])]
    for i, member in enumerate(agent.critic.members):
        nets.append((f"critic{i}", member, [member[-1]]))
    named = _named(nets, BatchRenorm1d)
    assert agent.log_alpha is not None
    named["log_alpha"] = [agent.log_alpha.value]
    return named


def theirs_named(model) -> dict[str, list[torch.Tensor]]:
    nets = [("actor", model.actor, [model.actor.mu, model.actor.log_std])]
    for i, q_net in enumerate(model.critic.q_networks):
        nets.append((f"critic{i}", q_net, [q_net[-1]]))
    named = _named(nets, TheirRenorm)
    named["log_alpha"] = [model.log_ent_coef]
    return named


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One flat float tensor (the actor's two heads stacked row by row, as this project's one head holds them)."""
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


@pytest.fixture
def float64(monkeypatch):
    """torch's default dtype float64 for the test; sb3-contrib's networks take their observations in it too
    (its preprocessing makes a Box observation float32, which would give its first layer float32 statistics)."""
    import stable_baselines3.common.policies as sb3_policies

    monkeypatch.setattr(sb3_policies, "preprocess_obs", lambda obs, *args, **kwargs: obs.to(torch.get_default_dtype()))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def build(actor: tuple[int, ...] = (256, 256), critics: tuple[int, ...] = (1024, 1024)):
    """sb3-contrib's CrossQ and this project's at the same settings (the defaults but for the warm-up and,
    when given, the widths), ours holding sb3-contrib's weights."""
    model = sb3_contrib.CrossQ(
        "MlpPolicy",
        "Pendulum-v1",
        seed=0,
        device="cpu",
        policy_kwargs={"renorm_warmup_steps": WARMUP, "net_arch": {"pi": list(actor), "qf": list(critics)}},
    )
    model.set_logger(configure(None, []))
    model.policy.to(torch.get_default_dtype())  # its layers build their statistics in float32 whatever the default
    model.actor.action_dist.epsilon = 0.0  # the exact tanh correction, as ours (module docstring)
    agent = wb.CrossQ(
        "Pendulum-v1", seed=0, device="cpu", renorm_warmup_steps=WARMUP, net_arch=actor, critic_net_arch=critics
    )
    mine, theirs = ours_named(agent), theirs_named(model)
    assert mine.keys() == theirs.keys()
    with torch.no_grad():
        for name, (target,) in mine.items():
            target.copy_(flat(theirs[name]).reshape(target.shape).to(target.dtype))
    # Every weight and buffer of both is in the comparison (nothing left unmatched on either side).
    assert (
        sum(t.numel() for (t,) in mine.values())
        == sum(t.numel() for t in [*agent.actor.state_dict().values(), *agent.critic.state_dict().values()]) + 1
    )
    policy_state = [*model.actor.state_dict().values(), *model.critic.state_dict().values()]
    assert sum(flat(ts).numel() for ts in theirs.values()) == sum(t.numel() for t in policy_state) + 1
    return model, agent


def batches(n: int) -> list[tuple[ReplayBatch, ReplayBufferSamples]]:
    """``n`` Pendulum-like batches, each as this project's replay gives it and as sb3-contrib's does."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        theta, next_theta = rng.uniform(-np.pi, np.pi, (2, BATCH))
        speed, next_speed = rng.uniform(-8, 8, (2, BATCH))
        obs = np.stack([np.cos(theta), np.sin(theta), speed], 1).astype(np.float32)
        next_obs = np.stack([np.cos(next_theta), np.sin(next_theta), next_speed], 1).astype(np.float32)
        actions = rng.uniform(-1, 1, (BATCH, 1)).astype(np.float32)
        rewards = rng.uniform(-16, 0, BATCH).astype(np.float32)
        dones = (rng.random(BATCH) < 0.1).astype(np.float32)  # some terminations: the bootstrap's mask
        t = {
            k: torch.from_numpy(v).to(torch.get_default_dtype())
            for k, v in dict(o=obs, n=next_obs, a=actions, r=rewards, d=dones).items()
        }
        ours = ReplayBatch(
            t["o"], t["a"], t["r"], t["n"], t["d"], torch.full((BATCH,), 0.99), torch.ones(BATCH), np.arange(BATCH)
        )
        theirs = ReplayBufferSamples(t["o"], t["a"], t["n"], t["d"][:, None], t["r"][:, None])
        out.append((ours, theirs))
    return out


def record_steps(optimizers: dict[str, torch.optim.Optimizer], grads: dict[str, dict]) -> None:
    """Keep the gradient each optimizer applies, read just before its step."""
    for name, opt in optimizers.items():

        def hook(optimizer, args, kwargs, name=name):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            grads[name] = {p: p.grad.detach().clone() for p in params if p.grad is not None}

        opt.register_step_pre_hook(hook)


def named_grads(named: dict[str, list[torch.Tensor]], applied: dict) -> dict[str, torch.Tensor]:
    return {name: flat([applied[t] for t in ts]) for name, ts in named.items() if all(t in applied for t in ts)}


def close(ours: torch.Tensor, theirs: torch.Tensor, what: str, rtol: float = 1e-6, atol: float = 1e-8) -> None:
    torch.testing.assert_close(ours.double(), theirs.double(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def test_the_layout_and_the_optimizers_are_sb3_contribs(float64):
    model, agent = build()
    for ours, theirs in (
        (agent.actor_optimizer, model.actor.optimizer),
        (agent.critic_optimizer, model.critic.optimizer),
    ):
        (a,), (b,) = ours.param_groups, theirs.param_groups
        assert (a["lr"], a["betas"], a["eps"]) == (b["lr"], b["betas"], b["eps"]) == (1e-3, (0.5, 0.999), 1e-8)
    (a,), (b,) = agent.alpha_optimizer.param_groups, model.ent_coef_optimizer.param_groups
    assert (a["lr"], a["betas"], a["eps"]) == (b["lr"], b["betas"], b["eps"]) == (1e-3, (0.9, 0.999), 1e-8)
    assert agent.target_entropy == model.target_entropy == -1.0
    c = agent.config
    assert (c.batch_size, c.gamma, c.learning_starts, c.policy_delay) == (
        model.batch_size,
        model.gamma,
        model.learning_starts,
        model.policy_delay,
    )
    # The order of layers: a renormalization before every linear layer, ReLU after each hidden one.
    kinds = [type(m).__name__ for m in agent.critic.members[0]]
    assert kinds == [type(m).__name__ for m in model.critic.qf0]
    assert kinds == ["BatchRenorm1d", "Linear", "ReLU"] * 2 + ["BatchRenorm1d", "Linear"]
    theirs_actor = [type(m).__name__ for m in model.actor.latent_pi] + ["Linear"]
    assert [type(m).__name__ for m in agent.actor] == theirs_actor


@pytest.mark.slow  # steps sb3-contrib's CrossQ beside ours, update by update, in float64: 6 s
def test_every_update_matches_sb3_contribs(monkeypatch, float64):
    model, agent = build(actor=(64, 64), critics=(256, 256))  # narrower, so float64 stays quick
    ours_named_now, theirs_named_now = ours_named(agent), theirs_named(model)
    our_losses: dict[str, float] = {}
    ours_by_opt = {"actor": agent.actor_optimizer, "critic": agent.critic_optimizer, "alpha": agent.alpha_optimizer}
    names = {id(opt): name for name, opt in ours_by_opt.items()}
    step = sac_module.gradient_step

    def recording_step(optimizer, loss, *args, **kwargs):
        our_losses[names[id(optimizer)]] = float(loss.detach())
        return step(optimizer, loss, *args, **kwargs)

    monkeypatch.setattr(sac_module, "gradient_step", recording_step)
    our_grads: dict[str, dict] = {}
    their_grads: dict[str, dict] = {}
    record_steps(ours_by_opt, our_grads)
    record_steps(
        {"actor": model.actor.optimizer, "critic": model.critic.optimizer, "alpha": model.ent_coef_optimizer},
        their_grads,
    )
    loss_keys = {"critic": "train/critic_loss", "actor": "train/actor_loss", "alpha": "train/ent_coef_loss"}

    for update, (ours_batch, theirs_batch) in enumerate(batches(UPDATES), start=1):
        monkeypatch.setattr(agent.memory, "sample", lambda n, rng, b=ours_batch: b)
        monkeypatch.setattr(model.replay_buffer, "sample", lambda n, env=None, b=theirs_batch: b)
        our_losses.clear(), our_grads.clear(), their_grads.clear(), model.logger.name_to_value.clear()
        torch.manual_seed(update)  # sb3-contrib draws its Gaussian noise from torch's global generator
        agent.generator.manual_seed(update)  # ours from the agent's: the same numbers from the same seed
        model.train(gradient_steps=1, batch_size=BATCH)
        agent.update()

        stepped = ["critic", "alpha", "actor"] if update % 3 == 0 else ["critic"]
        assert sorted(our_losses) == sorted(their_grads) == sorted(our_grads) == sorted(stepped), update
        for name in stepped:
            theirs = model.logger.name_to_value[loss_keys[name]]
            close(torch.tensor(our_losses[name]), torch.tensor(theirs), f"update {update}: {name} loss")
            ours_g = named_grads(ours_named_now, our_grads[name])
            theirs_g = named_grads(theirs_named_now, their_grads[name])
            assert ours_g.keys() == theirs_g.keys() and ours_g, (update, name)
            for key in ours_g:
                close(ours_g[key], theirs_g[key], f"update {update}: gradient of {key} ({name} step)")
        for key in ours_named_now:
            close(flat(ours_named_now[key]), flat(theirs_named_now[key]), f"after update {update}: {key}")
    # Both of the layer's phases were compared: the last passes of each network were past the warm-up.
    assert int(agent.critic.members[0][0].num_batches_tracked) == UPDATES
    assert int(agent.actor[0].num_batches_tracked) == UPDATES // 3 > WARMUP + 1

    # Acting after those updates, in float32 as both act: the same deterministic action and, with the same
    # noise, the same draw.
    torch.set_default_dtype(torch.float32)
    model.policy.float()
    agent.actor.float()
    obs = batches(1)[0][0].obs[:5].numpy()
    theirs_action, _ = model.predict(obs, deterministic=True)
    act32 = dict(rtol=1e-5, atol=1e-6)
    close(torch.as_tensor(agent.act(obs, deterministic=True)), torch.as_tensor(theirs_action), "deterministic", **act32)
    agent.num_timesteps = agent.config.learning_starts  # past the uniform warm-up
    torch.manual_seed(0)
    theirs_action, _ = model.predict(obs)
    agent.generator.manual_seed(0)
    close(torch.as_tensor(agent.act(obs)), torch.as_tensor(theirs_action), "sampled action", **act32)
