"""Tuned presets: the zoo's values, clear errors, fresh state per agent, and the CLI using them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import workbench as wb
from workbench import cli


def test_pendulum_sac_preset_is_ready_to_train():
    agent, env = wb.preset("Pendulum-v1", "sac", seed=0)
    assert isinstance(agent, wb.SAC) and env == "Pendulum-v1"
    assert wb.preset("Pendulum-v1", "sac").steps == 20_000
    assert agent.config.learning_rate == 1e-3
    session = wb.Session(agent, env, seed=0)
    session.run(steps=150)
    assert session.status == "finished"


@pytest.mark.parametrize(
    ("env_id", "agent", "cls", "steps", "values"),
    [
        ("CartPole-v1", "ppo", wb.PPO, 100_000, {"n_envs": 8, "n_steps": 32, "gae_lambda": 0.8, "n_epochs": 20}),
        (
            "CartPole-v1",
            "dqn",
            wb.DQN,
            50_000,
            {"learning_rate": 2.3e-3, "train_freq": 256, "gradient_steps": 128, "double_q": False},
        ),  # SB3's DQN: no double Q
        ("CartPole-v1", "a2c", wb.A2C, 500_000, {"n_envs": 8, "ent_coef": 0.0, "n_steps": 5}),
        (
            "Acrobot-v1",
            "dqn",
            wb.DQN,
            100_000,
            {"learning_rate": 6.3e-4, "target_update_interval": 250, "gradient_steps": -1, "learning_starts": 0},
        ),
        ("Pendulum-v1", "td3", wb.TD3, 20_000, {"gamma": 0.98, "learning_starts": 10_000, "net_arch": (400, 300)}),
        ("Pendulum-v1", "ddpg", wb.DDPG, 20_000, {"gamma": 0.98, "buffer_size": 200_000, "policy_delay": 1}),
        ("MountainCarContinuous-v0", "sac", wb.SAC, 50_000, {"ent_coef": 0.1, "batch_size": 512, "gamma": 0.9999}),
        (
            "MountainCarContinuous-v0",
            "a2c",
            wb.A2C,
            100_000,
            {"use_sde": True, "sde_sample_freq": 16, "ortho_init": False, "normalize_observations": True},
        ),
        ("Pendulum-v1", "ppo", wb.PPO, 100_000, {"use_sde": True, "sde_sample_freq": 4, "gamma": 0.9}),
        (
            "Acrobot-v1",
            "ppo",
            wb.PPO,
            1_000_000,
            {
                "n_envs": 16,
                "n_steps": 256,
                "gae_lambda": 0.94,
                "n_epochs": 4,
                "learning_rate": 3e-4,
                "normalize_observations": True,
            },
        ),
        (
            "Pendulum-v1",
            "a2c",
            wb.A2C,
            1_000_000,
            {
                "use_sde": True,
                "log_std_init": -2.0,
                "vf_coef": 0.4,
                "learning_rate": wb.linear(7e-4, 0.0),
                "normalize_rewards": True,
            },
        ),
        (
            "MountainCarContinuous-v0",
            "ppo",
            wb.PPO,
            20_000,
            {"n_steps": 8, "log_std_init": -3.29, "vf_coef": 0.19, "normalize_rewards": True, "use_sde": True},
        ),
    ],
)
def test_presets_carry_the_zoo_settings(env_id, agent, cls, steps, values):
    built = wb.preset(env_id, agent)
    assert isinstance(built.agent, cls) and built.steps == steps and built.env == env_id
    for key, value in values.items():
        assert getattr(built.agent.config, key) == value, key
    spec = wb.PRESETS[(env_id, agent)]
    assert spec.zoo_score is not None and spec.solved is not None


def test_preset_unpacks_as_agent_and_env_and_keeps_the_budget():
    tuned = wb.preset("CartPole-v1", "ppo", seed=1)
    agent, env = tuned
    assert agent is tuned.agent and env == tuned.env == "CartPole-v1" and tuned.steps == 100_000
    assert "steps=100000" in repr(tuned)


def test_acrobot_dqn_explores_as_the_zoo_does():
    eps = wb.preset("Acrobot-v1", "dqn").agent.config.exploration
    assert (eps.start, eps.end, eps.fraction) == (1.0, 0.1, 0.12)


def test_unknown_combination_lists_what_exists():
    with pytest.raises(ValueError) as info:
        wb.preset("Pendulum-v1", "dqn")
    message = str(info.value)
    assert "'dqn'" in message and "Pendulum-v1" in message
    assert "crossq, ddpg, droq, ppo, sac, td3, tqc" in message  # what Pendulum has
    assert "CartPole-v1 ppo" in message  # and everything else


def test_overrides_and_agent_classes():
    agent = wb.preset("Pendulum-v1", wb.TD3, batch_size=64).agent
    assert agent.config.batch_size == 64 and agent.config.gamma == 0.98


def test_each_preset_agent_gets_its_own_exploration_object():
    a = wb.preset("Pendulum-v1", "td3").agent
    b = wb.preset("Pendulum-v1", "td3").agent
    assert a.config.exploration is not b.config.exploration
    assert a.config.exploration is not wb.PRESETS[("Pendulum-v1", "td3")].hyperparameters["exploration"]


def test_cli_train_uses_the_preset_and_its_budget(monkeypatch, capsys):
    ran = {}

    def fake_run(self, steps, progress=False):
        ran["steps"] = steps
        ran["agent"] = self.agent
        return self

    monkeypatch.setattr(wb.Session, "run", fake_run)
    assert cli.main(["train", "Pendulum-v1", "--agent", "sac", "--no-progress", "--set", "batch_size=32"]) == 0
    assert "preset" in capsys.readouterr().out
    assert ran["steps"] == 20_000
    assert ran["agent"].config.learning_rate == 1e-3 and ran["agent"].config.batch_size == 32
    cli.main(["train", "Pendulum-v1", "--agent", "sac", "--no-progress", "--no-preset", "--steps", "10"])
    assert ran["steps"] == 10 and ran["agent"].config.learning_rate == 3e-4


@pytest.mark.parametrize(
    ("env_id", "agent", "cls", "values"),
    [
        ("CartPole-v1", "qrdqn", wb.QRDQN, {"n_quantiles": 10, "train_freq": 256, "gradient_steps": 128}),
        ("Acrobot-v1", "qrdqn", wb.QRDQN, {"n_quantiles": 25, "target_update_interval": 250, "learning_starts": 0}),
        ("CartPole-v1", "rainbow", wb.Rainbow, {"noisy": True, "n_step": 3, "v_max": 100.0}),
        (
            "CartPoleNoVel-v1",
            "recurrentppo",
            wb.RecurrentPPO,
            {"n_envs": 8, "n_steps": 32, "normalize_observations": True},
        ),
    ],
)
def test_issue_19_presets(env_id, agent, cls, values):
    built = wb.preset(env_id, agent)
    assert isinstance(built.agent, cls) and built.env == env_id
    for key, value in values.items():
        assert getattr(built.agent.config, key) == value, key
    assert wb.PRESETS[(env_id, agent)].solved is not None


def test_reliable_cartpole_dqn_resolves_to_the_measured_settings_and_is_documented():
    zoo, reliable = wb.preset("CartPole-v1", "dqn"), wb.preset("CartPole-v1", "dqn", reliable=True)
    assert zoo.agent.config.learning_rate == 2.3e-3 and zoo.agent.config.n_step == 1
    c = reliable.agent.config
    assert isinstance(reliable.agent, wb.DQN) and reliable.env == "CartPole-v1" and reliable.steps == zoo.steps
    assert c.learning_rate == wb.linear(2.3e-3, 0.0) and c.n_step == 3 and c.dueling and c.double_q
    # Everything else is the zoo's: the preset differs by the three documented values, and keeps
    # double Q (the zoo's row bootstraps as SB3's DQN does, from the target network's own max).
    differ = {f.name for f in dataclasses.fields(c) if getattr(c, f.name) != getattr(zoo.agent.config, f.name)}
    assert differ == {"learning_rate", "n_step", "dueling", "double_q"} and not zoo.agent.config.double_q
    docs = (Path(__file__).resolve().parents[1] / "docs" / "algorithms.md").read_text(encoding="utf-8")
    assert 'wb.preset("CartPole-v1", "dqn", reliable=True)' in docs and "n_step=3, dueling=True" in docs
    with pytest.raises(ValueError, match="no reliable preset"):
        wb.preset("Pendulum-v1", "sac", reliable=True)


def test_fast_preset_builds_pendulum_sac_with_small_networks():
    agent, env = wb.preset("Pendulum-v1", "sac", fast=True, seed=0)
    assert env == "Pendulum-v1" and agent.config.net_arch == (64, 64) and agent.config.learning_rate == 1e-3
    assert wb.preset("Pendulum-v1", "sac", fast=True).steps == 20_000
    with pytest.raises(ValueError, match="no fast preset for agent 'ppo'.*Pendulum-v1 sac"):
        wb.preset("CartPole-v1", "ppo", fast=True)
    with pytest.raises(ValueError, match="not both"):
        wb.preset("Pendulum-v1", "sac", fast=True, reliable=True)


def test_fast_preset_builds_cartpole_dqn_as_the_reliable_one_with_small_networks():
    fast, _ = wb.preset("CartPole-v1", "dqn", fast=True, seed=0)
    reliable, _ = wb.preset("CartPole-v1", "dqn", reliable=True, seed=0)
    assert fast.config.net_arch == (64, 64) and reliable.config.net_arch == (256, 256)
    assert fast.config.n_step == 3 and fast.config.dueling
    assert fast.config.learning_rate(0.0) == 2.3e-3 and fast.config.learning_rate(1.0) == 0.0
    assert wb.preset("CartPole-v1", "dqn", fast=True).steps == 50_000
    docs = (Path(__file__).resolve().parents[1] / "docs" / "speed.md").read_text(encoding="utf-8")
    assert 'wb.preset("CartPole-v1", "dqn", fast=True)' in docs


def test_dqn_presets_bootstrap_as_the_zoo_without_double_q():
    # The zoo's algorithm is SB3's DQN: the target network's own max, no double Q, on every task.
    dqn_specs = [s for (_, agent), s in wb.PRESETS.items() if agent == "dqn"]
    assert {s.env_id for s in dqn_specs} >= {"CartPole-v1", "Acrobot-v1", "MountainCar-v0"}
    for spec in dqn_specs:
        assert spec.hyperparameters.get("double_q") is False, spec.env_id
    for env_id in ("Acrobot-v1", "MountainCar-v0"):
        assert wb.preset(env_id, "dqn").agent.config.double_q is False


def test_atari_a2c_preset_steps_with_the_zoos_tensorflow_rmsprop():
    import numpy as np
    import torch
    from gymnasium import spaces

    from workbench.agents.a2c import RMSpropTFLike

    spec = wb.PRESETS[("BreakoutNoFrameskip-v4", "a2c")]
    agent = wb.A2C(
        observation_space=spaces.Box(0, 255, (4, 84, 84), np.uint8),
        action_space=spaces.Discrete(4),
        **spec.hyperparameters,
    )
    opt = agent.optimizer
    assert isinstance(opt, RMSpropTFLike) and opt.defaults["eps"] == 1e-5 and opt.defaults["alpha"] == 0.99
    # The classic-control presets keep PyTorch's RMSprop (the zoo's default A2C optimizer there).
    assert type(wb.preset("CartPole-v1", "a2c").agent.optimizer) is torch.optim.RMSprop


def test_rmsprop_tf_like_step_by_hand():
    import torch

    from workbench.agents.a2c import RMSpropTFLike

    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = RMSpropTFLike([p], lr=0.1, alpha=0.9, eps=0.01)
    v, x = torch.ones(2), torch.tensor([1.0, -2.0])
    for g in (torch.tensor([0.5, -3.0]), torch.tensor([2.0, 1.0])):
        p.grad = g.clone()
        opt.step()
        v = 0.9 * v + 0.1 * g * g  # the squared average starts at one, not zero
        x = x - 0.1 * g / torch.sqrt(v + 0.01)  # epsilon inside the square root
        torch.testing.assert_close(p.detach(), x)
    # First step of [0.5, -3.0]: v = [0.925, 1.8], so the step is 0.1 * g / sqrt(v + eps), far below torch's.
    torch.testing.assert_close(opt.state[p]["square_avg"], v)


@pytest.mark.parametrize(
    ("env_id", "agent", "cls", "steps", "values"),
    [
        ("Pendulum-v1", "tqc", wb.TQC, 20_000, {"learning_rate": 1e-3, "n_quantiles": 25}),
        ("Pendulum-v1", "crossq", wb.CrossQ, 20_000, {"learning_rate": 1e-3, "critic_net_arch": (1024, 1024)}),
        ("Pendulum-v1", "droq", wb.DroQ, 10_000, {"gradient_steps": 20, "dropout_rate": 0.01, "layer_norm": True}),
        ("MountainCarContinuous-v0", "tqc", wb.TQC, 50_000, {"use_sde": True, "batch_size": 512, "gamma": 0.9999}),
    ],
)
def test_sac_family_presets(env_id, agent, cls, steps, values):
    built = wb.preset(env_id, agent, seed=0)
    assert isinstance(built.agent, cls) and built.steps == steps and built.env == env_id
    for name, value in values.items():
        assert getattr(built.agent.config, name) == value, name
