"""Every agent: learns tiny tasks whose answer is known, runs on its classic-control task, saves and
loads, plays deterministically; normalization; DQN options; wrong action spaces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents import AGENTS
from workbench.envs.testing import OneStepBandit, TwoStateChain

DISCRETE = ["a2c", "dqn", "ppo"]
# Not CrossQ: the bandit's observation is constant, and batch normalization of a constant input is degenerate
# (every hidden unit equals its shift in training mode); tests/test_sac_family.py checks CrossQ learning.
CONTINUOUS = ["a2c", "ddpg", "droq", "ppo", "sac", "td3", "tqc"]

# Small, quick settings for the tiny tasks: the defaults are tuned for real tasks and budgets.
FAST: dict[str, dict] = {
    "dqn": dict(
        learning_starts=64,
        train_freq=1,
        gradient_steps=1,
        batch_size=32,
        target_update_interval=32,
        net_arch=(32,),
        learning_rate=3e-3,
        exploration=wb.EpsilonGreedy(1.0, 0.02, 0.4),
    ),
    "ppo": dict(n_envs=4, n_steps=16, batch_size=32, n_epochs=4, net_arch=(32,), learning_rate=3e-3, log_std_init=-1.0),
    "a2c": dict(n_envs=4, n_steps=4, net_arch=(32,), learning_rate=3e-3, log_std_init=-1.0),
    "sac": dict(learning_starts=64, batch_size=64, net_arch=(32, 32), learning_rate=3e-3),
    "td3": dict(learning_starts=64, batch_size=64, net_arch=(32, 32), learning_rate=3e-3),
    "ddpg": dict(learning_starts=64, batch_size=64, net_arch=(32, 32), learning_rate=3e-3),
}
# The SAC family, on SAC's fast settings (small critics; DroQ at 2 updates per step, not the paper's 20).
FAST["tqc"] = dict(FAST["sac"], n_quantiles=5, top_quantiles_to_drop_per_net=1)
FAST["crossq"] = dict(FAST["sac"], critic_net_arch=(32, 32), renorm_warmup_steps=100)
FAST["droq"] = dict(FAST["sac"], gradient_steps=2, policy_delay=2)
SAC_FAMILY = ("crossq", "droq", "tqc")
# The asynchronous agents (issue 51), on PPO's and A2C's fast settings.
FAST["appo"] = dict(FAST["ppo"])
FAST["impala"] = dict(FAST["a2c"])
# The rest of the DQN family, on DQN's fast settings (v_min/v_max fit the tiny tasks' returns).
FAST["qrdqn"] = dict(FAST["dqn"], n_quantiles=8)
FAST["c51"] = dict(FAST["dqn"], n_atoms=11, v_min=-1.0, v_max=2.0)
FAST["rainbow"] = dict(FAST["c51"], exploration=wb.EpsilonGreedy(0.0, 0.0, 0.1))
FAST["recurrentppo"] = dict(
    n_envs=4,
    n_steps=16,
    batch_size=64,
    n_epochs=4,
    net_arch=(32,),
    lstm_hidden_size=16,
    learning_rate=3e-3,
    log_std_init=-1.0,
)
STEPS = {
    "dqn": 800,
    "ppo": 1600,
    "a2c": 1600,
    "sac": 600,
    "td3": 600,
    "ddpg": 600,
    "qrdqn": 800,
    "c51": 800,
    "rainbow": 800,
    "recurrentppo": 1600,
    "tqc": 600,
    "crossq": 600,
    "droq": 600,
}
DQN_FAMILY = {"dqn", "qrdqn", "c51", "rainbow"}


def train(name: str, env_factory, steps: int | None = None, seed: int = 0, **extra) -> wb.Agent:
    agent = AGENTS[name](env_factory, seed=seed, **{**FAST[name], **extra})
    wb.Session(agent, env_factory, seed=seed).run(steps=steps or STEPS[name])
    return agent


# -- learning tiny tasks ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", DISCRETE)
def test_learns_the_discrete_bandit(name):
    agent = train(name, OneStepBandit)
    assert agent.play(OneStepBandit, episodes=3) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("name", CONTINUOUS)
def test_learns_the_continuous_bandit(name):
    agent = train(name, lambda: OneStepBandit(continuous=True))
    action = float(agent.act(np.ones(1, dtype=np.float32), deterministic=True)[0])
    assert abs(action - OneStepBandit.TARGET) < 0.2, f"{name} acts {action:.3f}, the answer is 0.5"


@pytest.mark.parametrize("name", DISCRETE)
def test_learns_the_two_state_chain(name):
    agent = train(name, TwoStateChain, steps=2 * STEPS[name])
    assert agent.play(TwoStateChain, episodes=2) == [1.0, 1.0], "settled for the myopic 0.5"


@pytest.mark.parametrize("name", ["ddpg", "sac", "td3"])
def test_learns_the_continuous_chain(name):
    agent = train(name, lambda: TwoStateChain(continuous=True), steps=1200)
    returns = agent.play(lambda: TwoStateChain(continuous=True), episodes=1)
    assert returns[0] > 0.9, f"{name} returns {returns[0]:.3f}; going on is worth up to 1, staying 0.5"


@pytest.mark.parametrize(
    "options",
    [dict(dueling=True), dict(n_step=3), dict(prioritized=True), dict(dueling=True, n_step=2, prioritized=True)],
)
def test_dqn_options_learn_the_chain(options):
    agent = train("dqn", TwoStateChain, steps=1600, **options)
    assert agent.play(TwoStateChain, episodes=1) == [1.0]


# -- classic-control smoke -------------------------------------------------------------------------

SIGNALS = {
    "dqn": {"loss", "q_mean", "epsilon"},
    "ppo": {"policy_loss", "value_loss", "entropy", "approx_kl"},
    "a2c": {"policy_loss", "value_loss", "entropy"},
    "sac": {"actor_loss", "critic_loss", "q_mean", "alpha", "entropy"},
    "td3": {"actor_loss", "critic_loss", "q_mean", "noise_stddev"},
    "ddpg": {"actor_loss", "critic_loss", "q_mean", "noise_stddev"},
    "qrdqn": {"loss", "q_mean", "epsilon"},
    "c51": {"loss", "q_mean", "epsilon"},
    "rainbow": {"loss", "q_mean", "prioritized_beta"},
    "recurrentppo": {"policy_loss", "value_loss", "entropy", "approx_kl"},
    "appo": {"policy_loss", "value_loss", "entropy", "approx_kl", "importance_weight", "policy_lag"},
    "impala": {"policy_loss", "value_loss", "entropy", "importance_weight", "policy_lag"},
    **{name: {"actor_loss", "critic_loss", "q_mean", "alpha", "entropy"} for name in SAC_FAMILY},
}


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_smoke_on_its_classic_control_task(name):
    env = "CartPole-v1" if name in DISCRETE or name in DQN_FAMILY else "Pendulum-v1"
    session = wb.Session(AGENTS[name](env, seed=0, **FAST[name]), env, seed=0)
    session.run(steps=400)
    assert session.status == "finished"
    recorded = {n for n in SIGNALS[name] if session.signals.get(n) is not None and len(session.signals[n].values)}
    assert recorded == SIGNALS[name]
    assert all(np.isfinite(session.signals[n].values).all() for n in recorded)


# -- saving, loading, playing ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_save_load_round_trip_and_deterministic_play(name, tmp_path):
    env = "Pendulum-v1" if name in ("sac", "td3", "ddpg", *SAC_FAMILY) else "CartPole-v1"
    agent = AGENTS[name](env, seed=0, **FAST[name])
    session = wb.Session(agent, env, seed=0)
    session.run(steps=300)
    session.save(tmp_path / "run", memory=agent.memory is not None)
    loaded = wb.load(tmp_path / "run")
    assert type(loaded) is type(agent) and not loaded.training
    assert loaded.hyperparameters() == agent.hyperparameters()
    for key, tensor in agent.networks.items():
        for k, v in tensor.state_dict().items():
            assert torch.equal(v, loaded.networks[key].state_dict()[k]), f"{key}.{k} differs after loading"
    first = loaded.play(env, episodes=2, seed=3)
    assert loaded.play(env, episodes=2, seed=3) == first  # play is deterministic
    assert agent.play(env, episodes=2, seed=3) == first  # and the loaded agent acts as the trained one
    resumed = wb.Session.reopen(tmp_path / "run", env)
    resumed.run(steps=50)
    assert resumed.status == "finished"


def test_exploration_and_schedules_round_trip(tmp_path):
    noise = wb.OrnsteinUhlenbeckNoise(theta=0.2, sigma=wb.linear(0.5, 0.1))
    agent = wb.DDPG(
        "Pendulum-v1",
        seed=0,
        exploration=noise,
        actor_lr=wb.linear(1e-3, 1e-4),
        **{k: v for k, v in FAST["ddpg"].items() if k != "learning_starts"},
        learning_starts=10,
    )
    session = wb.Session(agent, "Pendulum-v1", seed=0)
    session.run(steps=60)
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert loaded.config.exploration.to_dict() == noise.to_dict()
    assert loaded.config.actor_lr == wb.linear(1e-3, 1e-4)
    # The Ornstein-Uhlenbeck state (mid-episode) is saved with the agent.
    np.testing.assert_allclose(loaded.config.exploration._x, noise._x)
    assert session.signals["noise_stddev"].last == pytest.approx(noise.value(agent.progress))


def test_sac_fixed_entropy_coefficient_is_reported():
    agent = train("sac", lambda: OneStepBandit(continuous=True), steps=100, ent_coef=0.05)
    assert agent.log_alpha is None  # a fixed coefficient learns nothing
    assert agent.update()["alpha"] == pytest.approx(0.05)


# -- normalization ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_normalization_statistics_are_saved_and_frozen_in_play(name, tmp_path):
    env = "Pendulum-v1"
    agent = (
        AGENTS[name](env, seed=0, normalize_observations=True, normalize_rewards=True, **FAST[name])
        if name not in DQN_FAMILY
        else AGENTS[name]("CartPole-v1", seed=0, normalize_observations=True, normalize_rewards=True, **FAST[name])
    )
    env = "CartPole-v1" if name in DQN_FAMILY else env
    session = wb.Session(agent, env, seed=0)
    session.run(steps=200)
    mean = agent.obs_normalizer.rms.mean.clone()
    assert float(agent.obs_normalizer.rms.count) > 100
    assert not torch.allclose(mean, torch.zeros_like(mean))
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert torch.equal(loaded.obs_normalizer.rms.mean, mean)
    assert torch.equal(loaded.reward_normalizer.rms.var, agent.reward_normalizer.rms.var)
    loaded.play(env, episodes=1, seed=0)
    assert torch.equal(loaded.obs_normalizer.rms.mean, mean), "play mode must not update the statistics"
    # The loaded agent sees the same normalized inputs, so it acts as the trained one.
    obs = np.random.default_rng(0).normal(size=(5, *agent.obs_shape)).astype(np.float32)
    np.testing.assert_allclose(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True), rtol=1e-5)


def test_normalized_observations_reach_the_networks_standardized():
    agent = wb.SAC("Pendulum-v1", seed=0, normalize_observations=True, **FAST["sac"])
    wb.Session(agent, "Pendulum-v1", seed=0).run(steps=400)
    stored = agent.memory.obs[: len(agent.memory)]
    assert np.abs(stored.mean(0)).max() < 0.5 and np.abs(stored.std(0) - 1).max() < 0.5


def test_reward_normalization_scales_without_shifting():
    from workbench.normalization import RewardNormalizer

    norm = RewardNormalizer(gamma=0.99)
    rewards = -np.ones(4) * 10
    for _ in range(50):
        out = norm(rewards, np.zeros(4, dtype=bool))
    assert (out < 0).all() and np.abs(out).max() < 10


# -- wrong spaces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg", *SAC_FAMILY])
def test_continuous_agents_refuse_discrete_actions_naming_those_that_fit(name):
    with pytest.raises(ValueError) as info:
        AGENTS[name]("CartPole-v1")
    message = str(info.value)
    assert "Discrete(2)" in message and "A2C, APPO, C51, DQN, IMPALA, PPO, QRDQN, Rainbow, RecurrentPPO" in message


def test_dqn_refuses_box_actions_naming_those_that_fit():
    with pytest.raises(ValueError, match="A2C, APPO, CrossQ, DDPG, DroQ, IMPALA, PPO, RecurrentPPO, SAC, TD3, TQC"):
        wb.DQN("Pendulum-v1")


def test_unbounded_box_is_refused_by_tanh_agents():
    import gymnasium as gym

    obs = gym.spaces.Box(-1, 1, (2,))
    act = gym.spaces.Box(-np.inf, np.inf, (1,))
    with pytest.raises(ValueError, match="infinite bounds"):
        wb.SAC(observation_space=obs, action_space=act)
    wb.A2C(observation_space=obs, action_space=act)  # a Gaussian policy needs no bounds


def test_td3_refuses_epsilon_greedy():
    with pytest.raises(TypeError, match="GaussianNoise"):
        wb.TD3("Pendulum-v1", exploration=wb.EpsilonGreedy())


def test_sac_with_gsde_learns_and_explores_smoothly(tmp_path):
    env = lambda: TwoStateChain(continuous=True)  # noqa: E731
    agent = train("sac", env, steps=1200, use_sde=True, log_std_init=-1.0)
    assert agent.play(env, episodes=1)[0] > 0.9
    # Between two resamplings the noise weights are fixed: the same state gets the same action.
    agent.train()
    obs = np.array([[1.0, 0.0]], dtype=np.float32)
    first = agent.act(obs)
    assert np.array_equal(agent.act(obs), first)
    agent.update()  # a new rollout starts with new noise
    assert not np.array_equal(agent.act(obs), first)
    session = wb.Session(agent, env, seed=0)
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert torch.equal(loaded.actor.log_std, agent.actor.log_std)
    assert loaded.play(env, episodes=1) == agent.play(env, episodes=1)


@pytest.mark.parametrize("name", ["a2c", "ppo"])
def test_on_policy_gsde_learns_the_continuous_bandit(name):
    # -2 as the zoo's gSDE settings: the noise sums over 32 features, so it starts wider than -1 gives.
    agent = train(name, lambda: OneStepBandit(continuous=True), use_sde=True, sde_sample_freq=2, log_std_init=-2.0)
    assert agent.log_std.shape == (32, 1)  # one log std per (feature, action)
    action = float(agent.act(np.ones(1, dtype=np.float32), deterministic=True)[0])
    assert abs(action - OneStepBandit.TARGET) < 0.2, f"{name} with gSDE acts {action:.3f}, the answer is 0.5"


def test_on_policy_gsde_holds_its_noise_and_scores_the_actions_it_took(tmp_path):
    agent = wb.PPO("Pendulum-v1", seed=0, use_sde=True, sde_sample_freq=3, n_envs=2, n_steps=8)
    obs = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    steps = [agent.decide(obs) for _ in range(4)]
    actions = [step.actions for step in steps]
    assert np.array_equal(actions[0], actions[2]) and not np.array_equal(actions[0], actions[3])
    assert not np.array_equal(actions[0][0], actions[0][1])  # each env draws its own weights
    # The log-probability the step hands to observe() is the one the update recomputes (ratio 1).
    log_prob, entropy = agent._policy_terms(torch.from_numpy(obs), torch.from_numpy(actions[3]))
    np.testing.assert_allclose(steps[3].extras["log_probs"], log_prob.detach().numpy(), rtol=1e-5)
    assert torch.isfinite(entropy).all()
    mean = agent.act(obs, deterministic=True)
    assert np.array_equal(agent.act(obs, deterministic=True), mean)
    session = wb.Session(agent, "Pendulum-v1", seed=0)
    session.run(steps=64)
    assert session.signals["policy_std"].last > 0
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert torch.equal(loaded.log_std, agent.log_std)
    assert loaded.play("Pendulum-v1", episodes=1, seed=1) == agent.play("Pendulum-v1", episodes=1, seed=1)


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(use_sde=True, env="CartPole-v1"), "Box action space"),
        (dict(use_sde=True, net_arch=()), "hidden layer"),
        (dict(sde_sample_freq=0), "sde_sample_freq"),
    ],
)
def test_on_policy_gsde_refuses_what_cannot_work(options, words):
    env = options.pop("env", "Pendulum-v1")
    with pytest.raises(ValueError, match=words):
        wb.PPO(env, **options)


def test_on_policy_ortho_init_can_be_turned_off():
    ortho = wb.A2C("Pendulum-v1", seed=0)
    plain = wb.A2C("Pendulum-v1", seed=0, ortho_init=False)
    first, head = ortho.actor[0].weight.detach(), ortho.actor[-1].weight.detach()
    eye = torch.eye(first.shape[1])
    torch.testing.assert_close(first.T @ first, 2.0 * eye, atol=1e-4, rtol=0)  # orthogonal, gain sqrt(2)
    assert head.abs().max() < 0.02  # the policy head starts near zero (gain 0.01)
    plain_first = plain.actor[0].weight.detach()
    assert not torch.allclose(plain_first.T @ plain_first, 2.0 * eye, atol=1e-2)
    assert plain.actor[-1].weight.abs().max() > 0.02
