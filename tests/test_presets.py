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


# -- Box2D, MuJoCo and MinAtar presets (issue 50) -----------------------------------------------------------------

NEW_FAMILIES = ("LunarLander", "BipedalWalker", "-v5", "MinAtar/")
NEW_SPECS = sorted(
    (s for s in wb.PRESETS.values() if any(word in s.env_id for word in NEW_FAMILIES)),
    key=lambda s: (s.env_id, s.agent),
)


def test_the_new_presets_cover_the_issue():
    keys = {(s.env_id, s.agent) for s in NEW_SPECS}
    assert {("LunarLander-v3", a) for a in ("ppo", "a2c", "dqn", "qrdqn")} <= keys
    assert {("LunarLanderContinuous-v3", a) for a in ("ppo", "sac", "td3")} <= keys
    assert {("BipedalWalker-v3", a) for a in ("ppo", "sac")} <= keys
    assert {(task, "droq") for task in ("Hopper-v5", "Walker2d-v5", "Ant-v5")} <= keys  # the DroQ paper's rows
    for task in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Swimmer-v5"):
        assert {(task, a) for a in ("ppo", "a2c", "sac", "td3", "ddpg")} <= keys
    for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"):
        assert {(f"MinAtar/{game}-v1", a) for a in ("dqn", "ppo")} <= keys
    extras = {"LunarLander": "box2d", "BipedalWalker": "box2d", "-v5": "mujoco", "MinAtar/": "minatar"}
    for spec in NEW_SPECS:
        assert spec.required_extra == next(e for w, e in extras.items() if w in spec.env_id), spec.env_id
    # The classic-control presets need no extra.
    assert wb.PRESETS[("CartPole-v1", "ppo")].required_extra is None


@pytest.mark.parametrize("spec", NEW_SPECS, ids=lambda s: f"{s.env_id}:{s.agent}")
def test_each_new_preset_builds_its_agent_and_acts_on_its_env(spec):
    from workbench.envs import make_env

    tuned = wb.preset(spec.env_id, spec.agent, seed=0)
    assert isinstance(tuned.agent, wb.AGENTS[spec.agent]) and tuned.env == spec.env_id and tuned.steps == spec.steps
    for key, value in spec.hyperparameters.items():
        if key != "exploration":  # a fresh copy per agent (tested above)
            assert getattr(tuned.agent.config, key) == value, key
    env = make_env(spec.env_id)  # the env the session makes (MinAtar: its frames as uint8 images)
    try:
        obs, _ = env.reset(seed=0)
        action = tuned.agent.act(obs, deterministic=True)
        assert env.action_space.contains(action)
        env.step(action)
    finally:
        env.close()


@pytest.mark.parametrize(("env_id", "agent"), [("LunarLander-v3", "dqn"), ("Hopper-v5", "sac")])
def test_a_box2d_and_a_mujoco_preset_train_a_few_steps(env_id, agent):
    # learning_starts=0 so the MuJoCo SAC preset updates inside the few steps (its zoo value is 10k).
    overrides = {"learning_starts": 0, "batch_size": 32} if agent == "sac" else {}
    tuned = wb.preset(env_id, agent, seed=0, **overrides)
    session = wb.Session(tuned.agent, tuned.env, seed=0)
    session.run(steps=64)
    assert session.status == "finished" and session.steps >= 64


@pytest.mark.parametrize(
    ("env_id", "agent", "steps", "values"),
    [
        (
            "LunarLander-v3",
            "ppo",
            1_000_000,
            {"n_envs": 16, "n_steps": 1024, "batch_size": 64, "gae_lambda": 0.98, "gamma": 0.999, "n_epochs": 4},
        ),
        (
            "LunarLander-v3",
            "a2c",
            200_000,
            {"n_envs": 8, "gamma": 0.995, "learning_rate": wb.linear(8.3e-4, 0.0), "ent_coef": 1e-5, "gae_lambda": 1.0},
        ),
        ("LunarLander-v3", "dqn", 100_000, {"target_update_interval": 250, "gradient_steps": -1, "double_q": False}),
        (
            "LunarLander-v3",
            "qrdqn",
            100_000,
            {"n_quantiles": 170, "gamma": 0.995, "target_update_interval": 1, "learning_starts": 10_000},
        ),
        ("LunarLanderContinuous-v3", "sac", 500_000, {"tau": 0.01, "learning_rate": wb.linear(7.3e-4, 0.0)}),
        ("LunarLanderContinuous-v3", "td3", 300_000, {"gamma": 0.98, "buffer_size": 200_000, "net_arch": (400, 300)}),
        ("BipedalWalker-v3", "ppo", 5_000_000, {"n_envs": 32, "clip_range": 0.18, "normalize_rewards": True}),
        ("BipedalWalker-v3", "sac", 500_000, {"use_sde": True, "train_freq": 64, "tau": 0.02, "buffer_size": 300_000}),
        (
            "Hopper-v5",
            "ppo",
            1_000_000,
            {
                "n_envs": 1,
                "n_steps": 512,
                "batch_size": 32,
                "learning_rate": 9.80828e-05,
                "activation": "relu",
                "net_arch": (256, 256),
                "log_std_init": -2.0,
                "ortho_init": False,
                "normalize_observations": True,
                "normalize_rewards": True,
            },
        ),
        ("HalfCheetah-v5", "ppo", 1_000_000, {"gamma": 0.98, "clip_range": 0.1, "n_epochs": 20, "vf_coef": 0.58096}),
        ("Walker2d-v5", "ppo", 1_000_000, {"activation": "tanh", "net_arch": (64, 64), "max_grad_norm": 1.0}),
        ("Swimmer-v5", "ppo", 1_000_000, {"gamma": 0.9999, "n_envs": 4, "learning_rate": 6e-4, "batch_size": 256}),
        (
            "Ant-v5",
            "a2c",
            1_000_000,
            {"n_envs": 1, "n_steps": 5, "learning_rate": 7e-4, "normalize_observations": True},
        ),
        ("Hopper-v5", "sac", 1_000_000, {"learning_starts": 10_000, "learning_rate": 3e-4, "ent_coef": "auto"}),
        ("Swimmer-v5", "sac", 1_000_000, {"gamma": 0.999}),
        ("Walker2d-v5", "td3", 1_000_000, {"learning_starts": 10_000, "net_arch": (400, 300), "policy_delay": 2}),
        ("Swimmer-v5", "ddpg", 1_000_000, {"gamma": 0.9999, "policy_delay": 1}),
        (
            "MinAtar/Breakout-v1",
            "dqn",
            5_000_000,
            {"learning_rate": 2.5e-4, "learning_starts": 5_000, "target_update_interval": 1_000, "train_freq": 1},
        ),
        ("MinAtar/Seaquest-v1", "ppo", 5_000_000, {"n_envs": 8, "n_steps": 128, "clip_range": 0.1, "net_arch": ()}),
    ],
)
def test_new_presets_carry_the_published_settings(env_id, agent, steps, values):
    tuned = wb.preset(env_id, agent)
    assert tuned.steps == steps
    for key, value in values.items():
        assert getattr(tuned.agent.config, key) == value, key


def test_new_presets_explore_and_score_as_published():
    eps = wb.preset("LunarLander-v3", "qrdqn").agent.config.exploration
    assert (eps.start, eps.end, eps.fraction) == (1.0, 0.18, 0.24)
    eps = wb.preset("MinAtar/Breakout-v1", "dqn").agent.config.exploration
    assert (eps.start, eps.end, eps.fraction) == (1.0, 0.1, 0.02)  # 100k of the 5M frames
    noise = wb.preset("Hopper-v5", "td3").agent.config.exploration
    assert isinstance(noise, wb.GaussianNoise) and noise.stddev == 0.1
    scores = {
        ("LunarLander-v3", "ppo"): 242.119,
        ("LunarLander-v3", "dqn"): 154.382,
        ("LunarLander-v3", "a2c"): 155.751,
        ("LunarLanderContinuous-v3", "sac"): 260.390,
        ("Hopper-v5", "ppo"): 2410.435,
        ("HalfCheetah-v5", "ppo"): 5819.099,
        ("Hopper-v5", "td3"): 3606.390,
        ("Swimmer-v5", "sac"): 345.568,
    }
    for key, score in scores.items():
        assert wb.PRESETS[key].zoo_score == score, key
    assert wb.PRESETS[("Hopper-v5", "ddpg")].zoo_score is None  # the zoo publishes no DDPG MuJoCo row
    assert wb.PRESETS[("MinAtar/Breakout-v1", "dqn")].zoo_score is None


@pytest.mark.parametrize(
    ("env_id", "agent", "module", "extra"),
    [
        ("LunarLander-v3", "ppo", "Box2D", "box2d"),
        ("BipedalWalker-v3", "sac", "Box2D", "box2d"),
        ("Hopper-v5", "sac", "mujoco", "mujoco"),
        ("MinAtar/Breakout-v1", "dqn", "minatar", "minatar"),
    ],
)
def test_a_missing_extra_names_the_install_line(monkeypatch, env_id, agent, module, extra):
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ModuleNotFoundError
    with pytest.raises(ModuleNotFoundError, match=f'pip install "rl-workbench\\[{extra}\\]"') as info:
        wb.preset(env_id, agent)
    assert info.value.name == module and env_id in str(info.value)


def test_cli_train_names_a_missing_extra_in_one_line(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(SystemExit, match=r'workbench: .*pip install "rl-workbench\[mujoco\]"'):
        cli.main(["train", "Hopper-v5", "--agent", "sac", "--no-progress"])


def test_presets_module_imports_neither_torch_nor_the_simulators():
    import subprocess
    import sys

    code = "import sys, workbench.presets as p; assert len(p.PRESETS) > 50; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert not loaded & {"torch", "Box2D", "mujoco", "minatar"}


def test_train_help_lists_the_presets(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "presets (rl-baselines3-zoo" in out and "--no-preset" in out
    assert "  LunarLander-v3 [box2d]: a2c, appo, dqn, impala, ppo, qrdqn" in out
    assert "  Hopper-v5 [mujoco]: a2c, crossq, ddpg, droq, ppo, sac, td3, tqc" in out
    assert "  MinAtar/Breakout-v1 [minatar]: appo, dqn, impala, ppo" in out
    assert "  Pendulum-v1: a2c, crossq, ddpg, droq, ppo, sac, td3, tqc" in out
    for env_id, _ in wb.PRESETS:
        assert f"  {env_id}" in out, env_id


def test_report_publishes_the_presets_scores_and_runs_off_policy_mujoco_at_200k():
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_report_presets", root / "benchmarks" / "report.py")
    report = importlib.util.module_from_spec(spec)
    sys.modules["bench_report_presets"] = report  # dataclasses resolve their module by name
    spec.loader.exec_module(report)
    for key, preset_spec in wb.PRESETS.items():
        if preset_spec.zoo_score is not None and key not in report.PUBLISHED:
            continue  # the Atari and older rows the report does not publish yet
        if key in report.PUBLISHED:
            assert report.PUBLISHED[key] == preset_spec.zoo_score, key
    for spec_ in NEW_SPECS:
        if spec_.zoo_score is not None:
            assert (spec_.env_id, spec_.agent) in report.PUBLISHED, spec_.env_id
    assert report.budget("Hopper-v5", "sac", 1_000_000) == 200_000
    assert report.budget("HalfCheetah-v5", "ddpg", 1_000_000) == 200_000
    assert report.budget("Hopper-v5", "ppo", 1_000_000) == 1_000_000
    path = report.RunKey("MinAtar/Breakout-v1", "dqn", "workbench", 0).path
    assert path.parent == report.RESULTS and "/" not in path.name


def test_the_new_presets_are_documented_with_their_scores():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "algorithms.md").read_text(encoding="utf-8")
    assert 'pip install "rl-workbench[box2d,mujoco]"' in docs
    section = docs[docs.index("### Box2D, MuJoCo and MinAtar presets") :]
    for spec in NEW_SPECS:
        game = spec.env_id.split("/")[-1]  # the MinAtar rows name the games after the first id
        assert game in section and f"| {spec.agent.upper()} |" in section.upper(), spec.env_id  # "CrossQ", "DroQ"
    for score in ("242.1", "154.4", "2,410", "5,819", "3,606"):
        assert score in docs, score


@pytest.mark.parametrize(
    ("env_id", "agent", "cls", "steps", "values"),
    [
        ("Pendulum-v1", "tqc", wb.TQC, 20_000, {"learning_rate": 1e-3, "n_quantiles": 25}),
        (
            "Pendulum-v1",
            "crossq",
            wb.CrossQ,
            20_000,
            {"learning_rate": 1e-3, "net_arch": (256, 256), "critic_net_arch": (256, 256), "policy_delay": 2},
        ),
        ("LunarLanderContinuous-v3", "tqc", wb.TQC, 500_000, {"tau": 0.01, "net_arch": (400, 300)}),
        ("LunarLanderContinuous-v3", "crossq", wb.CrossQ, 200_000, {"learning_starts": 10_000}),
        ("Hopper-v5", "tqc", wb.TQC, 1_000_000, {"top_quantiles_to_drop_per_net": 5, "learning_starts": 10_000}),
        ("Swimmer-v5", "tqc", wb.TQC, 1_000_000, {"top_quantiles_to_drop_per_net": 2, "gamma": 0.999}),
        ("HalfCheetah-v5", "crossq", wb.CrossQ, 5_000_000, {"critic_net_arch": (2048, 2048), "learning_starts": 5_000}),
        ("Pendulum-v1", "droq", wb.DroQ, 10_000, {"gradient_steps": 20, "dropout_rate": 0.01, "layer_norm": True}),
        (
            "Hopper-v5",
            "droq",
            wb.DroQ,
            125_000,
            {"gradient_steps": 20, "dropout_rate": 1e-4, "target_entropy": -1.0, "learning_starts": 5_000},
        ),
        ("Ant-v5", "droq", wb.DroQ, 300_000, {"dropout_rate": 1e-2, "target_entropy": -4.0, "layer_norm": True}),
        ("MountainCarContinuous-v0", "tqc", wb.TQC, 50_000, {"use_sde": True, "batch_size": 512, "gamma": 0.9999}),
        (
            "MountainCarContinuous-v0",
            "crossq",
            wb.CrossQ,
            50_000,
            {
                "use_sde": True,
                "use_expln": True,
                "log_std_init": -1.0,
                "net_arch": (64, 64),
                "critic_net_arch": (64, 64),
            },
        ),
    ],
)
def test_sac_family_presets(env_id, agent, cls, steps, values):
    built = wb.preset(env_id, agent, seed=0)
    assert isinstance(built.agent, cls) and built.steps == steps and built.env == env_id
    for name, value in values.items():
        assert getattr(built.agent.config, name) == value, name
