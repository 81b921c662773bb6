"""Offline agents (BC, BCQ, CQL, IQL) train in a Session from a dataset, and save, load and play."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

import workbench as wb


def _dataset(env_id: str, n: int = 300, seed: int = 0) -> wb.Dataset:
    """Random-policy transitions of a real env, with the behaviour's log-probabilities."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    rows = {k: [] for k in ("obs", "act", "rew", "next", "term", "trunc")}
    for _ in range(n):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, term, trunc), strict=True):
            rows[k].append(v)
        obs = env.reset()[0] if term or trunc else nxt
    lp = np.full(n, np.log(0.5)) if isinstance(env.action_space, gym.spaces.Discrete) else None
    return wb.Dataset(
        np.array(rows["obs"]),
        np.array(rows["act"]),
        np.array(rows["rew"]),
        np.array(rows["next"]),
        np.array(rows["term"]),
        np.array(rows["trunc"]),
        lp,
        observation_space=env.observation_space,
        action_space=env.action_space,
    )


CASES = [
    (wb.BC, "CartPole-v1"),
    (wb.BC, "Pendulum-v1"),
    (wb.BCQ, "CartPole-v1"),
    (wb.CQL, "CartPole-v1"),
    (wb.CQL, "Pendulum-v1"),
    (wb.IQL, "CartPole-v1"),
    (wb.IQL, "Pendulum-v1"),
]


@pytest.mark.parametrize(("cls", "env_id"), CASES, ids=[f"{c.__name__}-{e}" for c, e in CASES])
def test_offline_agent_trains_in_a_session_then_saves_loads_plays(cls, env_id, tmp_path):
    ds = _dataset(env_id)
    agent = cls(dataset=ds, net_arch=(32, 32), batch_size=32)
    session = wb.Session(agent, dataset=ds, eval_env=env_id, eval_every=100, eval_episodes=1, seed=0)
    session.run(steps=200)
    assert session.status == "finished" and session.steps == 200 and agent.num_updates == 200
    losses = [n for n in session.signals if n.endswith("loss")]
    assert losses and len(session.signals[losses[0]].values) == 200
    assert len(session.signals["eval_reward"].values) == 2
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    obs = ds.observations[:5]
    np.testing.assert_allclose(loaded.act(obs), agent.act(obs, deterministic=True), rtol=1e-5, atol=1e-6)
    returns = loaded.play(env_id, episodes=1, max_steps=50)
    assert len(returns) == 1
    # training continues from the saved state with the dataset given again
    again = wb.Session(wb.load(tmp_path / "run").train(), dataset=ds)
    again.run(steps=10)
    assert again.steps == 210


def test_session_resume_continues_an_offline_run(tmp_path):
    ds = _dataset("CartPole-v1", n=100)
    session = wb.Session(wb.BCQ(dataset=ds, net_arch=(16,)), dataset=ds, eval_env="CartPole-v1", seed=0)
    session.run(steps=30)
    session.save(tmp_path / "run")
    again = wb.Session.reopen(tmp_path / "run", dataset=ds)
    assert again.steps == 30 and len(again.signals["loss"].values) == 30
    again.run(steps=20)
    assert again.steps == 50 and again.evaluate(episodes=1) > 0


def test_session_ope_signals_and_seeded_reproducibility():
    ds = _dataset("CartPole-v1", n=400)
    runs = []
    for _ in range(2):
        agent = wb.BCQ(dataset=ds, net_arch=(32, 32), batch_size=32)
        session = wb.Session(agent, dataset=ds, ope_every=50, seed=3)
        session.run(steps=100)
        runs.append(session)
    for name in ("ope_ips", "ope_wis", "ope_dm", "ope_dr", "ope_sdr", "ope_dr_low", "ope_dr_high"):
        assert len(runs[0].signals[name].values) == 2
    assert runs[0].ope_dataset.num_episodes >= 1
    np.testing.assert_allclose(runs[0].signals["loss"].values, runs[1].signals["loss"].values)
    low, dr, high = (runs[0].signals[n].last for n in ("ope_dr_low", "ope_dr", "ope_dr_high"))
    assert low <= dr <= high


def test_pause_resume_and_stop():
    ds = _dataset("CartPole-v1")
    session = wb.Session(wb.BC(dataset=ds, net_arch=(16,)), dataset=ds)
    session.start(steps=10_000_000)
    session.pause()
    assert session.status == "paused"
    paused_at = session.steps
    session.resume()
    session.stop()
    assert session.status == "stopped" and session.steps >= paused_at


def test_clear_errors():
    ds = _dataset("CartPole-v1", n=50)
    with pytest.raises(TypeError, match="learns from a dataset, not an env"):
        wb.Session(wb.BCQ(dataset=ds), "CartPole-v1")
    with pytest.raises(TypeError, match="needs a dataset"):
        wb.Session(wb.BCQ("CartPole-v1"))
    with pytest.raises(TypeError, match="learns from a dataset"):
        wb.BCQ(dataset=ds).observe(None)
    with pytest.raises(ValueError, match="cannot act in the action space Box"):
        wb.BCQ("Pendulum-v1")
    with pytest.raises(wb.DatasetError, match="observations have shape"):
        wb.BCQ("Acrobot-v1", dataset=ds)
    with pytest.raises(ValueError, match="ope_every"):
        wb.Session(wb.DQN("CartPole-v1"), "CartPole-v1", ope_every=10)


def test_bcq_keeps_to_the_actions_the_data_holds():
    # The data only ever takes action 0; rewards say nothing about action 1. BCQ must not pick it.
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(200, 4)).astype(np.float32)
    ds = wb.Dataset.from_arrays(
        obs,
        np.zeros(200, dtype=np.int64),
        np.ones(200),
        episode_ids=np.repeat(np.arange(20), 10),
        action_space=gym.spaces.Discrete(2),
    )
    agent = wb.BCQ(dataset=ds, net_arch=(32,), batch_size=32)
    for _ in range(300):
        agent.update()
    assert (agent.act(obs, deterministic=True) == 0).all()


def test_the_dashboard_opens_on_evaluation_and_estimates():
    from workbench.ui.view_model import default_signals

    assert default_signals("BCQ") == ("eval_reward", "loss", "ope_dr")
    assert default_signals("IQL")[0] == "eval_reward"


def test_sac_starts_from_a_pendulum_dataset_then_fine_tunes_online():
    ds = _dataset("Pendulum-v1", n=300)
    agent = wb.SAC("Pendulum-v1", learning_starts=0, net_arch=(32, 32), batch_size=32, seed=0)
    session = wb.Session(agent, "Pendulum-v1", dataset=ds, seed=0)
    assert len(agent.memory) == 300  # the dataset pre-fills the replay memory
    np.testing.assert_allclose(agent.memory.actions[:300], ds.actions / 2.0, rtol=1e-6)  # stored in [-1, 1]
    np.testing.assert_allclose(agent.memory.obs[:300], ds.observations)
    session.run(steps=40)
    assert session.status == "finished" and len(agent.memory) == 340 and agent.num_updates > 0
    assert np.isfinite(session.signals[next(n for n in session.signals if n.endswith("loss"))].values).all()
    assert len(agent.play("Pendulum-v1", episodes=1, max_steps=20)) == 1


def test_cql_box_starts_by_imitating_the_data_for_bc_steps():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(200, 3)).astype(np.float32)
    ds = wb.Dataset.from_arrays(
        obs,
        np.full((200, 1), 1.2, dtype=np.float32),
        np.zeros(200),
        episode_ids=np.repeat(np.arange(20), 10),
        action_space=gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
    )
    # no conservative term: after bc_steps nothing would hold the policy at the logged action
    # policy_average_tau=None: the trained policy acts (its 300-step average would still lag behind it)
    agent = wb.CQL(
        dataset=ds,
        net_arch=(32,),
        batch_size=32,
        bc_steps=300,
        actor_lr=3e-3,
        cql_weight=0.0,
        seed=0,
        policy_average_tau=None,
    )
    for _ in range(300):
        agent.update()
    np.testing.assert_allclose(agent.act(obs[:20], deterministic=True), 1.2, atol=0.2)


def test_cql_box_acts_with_the_moving_average_of_its_policy():
    """Every gradient step moves ``actor_average`` ``policy_average_tau`` of the way to the trained
    policy; ``act`` (deterministic or not) and ``play`` use the average, never the trained policy."""
    import torch

    ds = _dataset("Pendulum-v1")
    agent = wb.CQL(dataset=ds, net_arch=(16, 16), batch_size=16, actor_lr=3e-3, policy_average_tau=0.1, seed=0)
    expected = {k: v.clone() for k, v in agent.actor.state_dict().items()}
    assert all(torch.equal(v, agent.actor_average.state_dict()[k]) for k, v in expected.items())
    for _ in range(20):
        agent.update()
        for k, v in agent.actor.state_dict().items():
            expected[k] = 0.9 * expected[k] + 0.1 * v
    average = agent.actor_average.state_dict()
    for k, v in expected.items():
        torch.testing.assert_close(average[k], v, rtol=1e-5, atol=1e-6)
    assert not all(p.requires_grad for p in agent.actor_average.parameters())
    obs = ds.observations[:8]
    x = torch.from_numpy(obs)
    with torch.no_grad():
        by_average = torch.tanh(agent.actor_average(x)[0]).numpy() * 2.0
        by_policy = torch.tanh(agent.actor(x)[0]).numpy() * 2.0
    assert np.abs(by_average - by_policy).max() > 1e-3  # the two differ after 20 steps at actor_lr 3e-3
    np.testing.assert_allclose(agent.act(obs, deterministic=True), by_average, rtol=1e-5, atol=1e-6)
    state = agent.generator.get_state()
    sampled = agent.act(obs)
    agent.generator.set_state(state)
    with torch.no_grad():
        expected_sample = agent.actor_average.sample(x, agent.generator)[0].numpy() * 2.0
    np.testing.assert_allclose(sampled, expected_sample, rtol=1e-5, atol=1e-6)


def test_cql_box_without_a_policy_average_acts_with_its_policy():
    import torch

    ds = _dataset("Pendulum-v1")
    agent = wb.CQL(dataset=ds, net_arch=(16, 16), batch_size=16, policy_average_tau=None, seed=0)
    for _ in range(5):
        agent.update()
    assert agent.actor_average is None and "actor_average" not in agent.networks
    obs = ds.observations[:4]
    with torch.no_grad():
        mean = torch.tanh(agent.actor(torch.from_numpy(obs))[0]).numpy() * 2.0
    np.testing.assert_allclose(agent.act(obs, deterministic=True), mean, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tau", [0, -0.1, 1.5, "0.1"])
def test_cql_refuses_a_policy_average_rate_outside_0_to_1(tau):
    with pytest.raises((ValueError, TypeError), match="policy_average_tau"):
        wb.CQL(dataset=_dataset("Pendulum-v1", n=50), policy_average_tau=tau)


@pytest.mark.parametrize("entropy_backup", [False, True])
def test_cql_box_losses_follow_the_formula_with_and_without_the_entropy_backup(entropy_backup):
    """The TD target (with SAC's soft backup only when asked) and the importance-sampled conservative
    term over uniform, policy-at-s and policy-at-s' actions, written out here with the same draws."""
    import math

    import torch

    agent = wb.CQL(
        dataset=_dataset("Pendulum-v1"),
        net_arch=(16, 16),
        batch_size=8,
        n_action_samples=3,
        seed=0,
        entropy_backup=entropy_backup,
    )
    batch = agent.data.sample(8, agent.rng)
    state = agent.generator.get_state()
    b, n, c = 8, 3, agent.config
    with torch.no_grad():
        alpha = agent.log_alpha().exp()
        next_a, next_logp = agent.actor.sample(batch.next_obs, agent.generator)
        next_q = agent._q(agent.critic_target, batch.next_obs, next_a).min(0).values
        soft = alpha * next_logp if entropy_backup else 0.0  # SAC's soft backup, or d3rlpy's default
        target = batch.rewards + c.gamma * (1.0 - batch.dones) * (next_q - soft)
        obs_rep, next_rep = batch.obs.repeat_interleave(n, 0), batch.next_obs.repeat_interleave(n, 0)
        pi_a, pi_logp = agent.actor.sample(obs_rep, agent.generator)
        npi_a, npi_logp = agent.actor.sample(next_rep, agent.generator)
        random_a = torch.empty((b * n, 1)).uniform_(-1, 1, generator=agent.generator)
        q = agent._q(agent.critic, batch.obs, batch.actions.float())
        td = (q - target).pow(2).mean(1).sum()
        samples = torch.cat(
            [
                agent._q(agent.critic, obs_rep, random_a).view(2, b, n) - math.log(0.5),
                agent._q(agent.critic, obs_rep, pi_a).view(2, b, n) - pi_logp.view(1, b, n),
                agent._q(agent.critic, obs_rep, npi_a).view(2, b, n) - npi_logp.view(1, b, n),
            ],
            dim=2,
        )
        conservative = (torch.logsumexp(samples, 2) - math.log(3 * n) - q).mean(1).sum()
    agent.generator.set_state(state)
    metrics = agent._learn(batch)
    assert metrics["critic_loss"] == pytest.approx(float(td), rel=1e-5)
    assert metrics["cql_loss"] == pytest.approx(float(conservative), rel=1e-5, abs=1e-6)


def test_offline_run_records_a_final_steps_per_second():
    # A run shorter than the signal's interval still ends with one steps_per_second, as the env loop's does.
    ds = _dataset("CartPole-v1", n=100)
    session = wb.Session(wb.BC(dataset=ds, net_arch=(8,), batch_size=16), dataset=ds, seed=0)
    session.run(steps=20)
    sps = session.signals["steps_per_second"]
    assert list(sps.steps) == [20] and sps.last > 0
    session.run(steps=30)  # a second run (30 more steps) adds the rate of its own steps, at its end
    assert list(session.signals["steps_per_second"].steps) == [20, 50]


def test_offline_evaluate_without_eval_env_says_what_to_pass():
    ds = _dataset("CartPole-v1", n=100)
    session = wb.Session(wb.BC(dataset=ds, net_arch=(8,)), dataset=ds, seed=0)
    with pytest.raises(ValueError, match="offline session has none") as err:
        session.evaluate(episodes=1)
    assert "eval_env=" in str(err.value) and "registered id" in str(err.value)


def test_a_saved_offline_run_names_its_dataset_so_it_can_be_evaluated_again(tmp_path):
    ds = _dataset("Pendulum-v1", n=120)
    ds = wb.Dataset.from_arrays(
        ds.observations,
        ds.actions,
        ds.rewards,
        ds.next_observations,
        ds.terminated,
        ds.truncated,
        np.full(len(ds), -1.0),
        action_space=ds.action_space,
    )
    ds.save(tmp_path / "data")
    data = wb.Dataset.load(tmp_path / "data")
    assert data.path == str((tmp_path / "data").resolve()) or data.path == os.path.abspath(tmp_path / "data")
    session = wb.Session(wb.BC(dataset=data, net_arch=(8,), batch_size=16), dataset=data, seed=0)
    session.run(steps=5)
    session.save(tmp_path / "run")
    again = wb.Dataset.from_run(tmp_path / "run")
    np.testing.assert_array_equal(again.observations, data.observations)
    # The loaded agent is evaluated again on the data the run names (Box actions: FQE and DR).
    est = wb.evaluate_offline(wb.load(tmp_path / "run"), again, fqe_steps=10, n_bootstrap=5)
    assert set(est) == {"dm", "dr", "sdr"} and all(np.isfinite(e.value) for e in est.values())
    # Reopened without dataset=, the session learns from the dataset the run names.
    reopened = wb.Session.reopen(tmp_path / "run")
    reopened.run(steps=3)
    assert reopened.steps == 8
    # A run whose data never touched the disk names none, and says so.
    memory_only = wb.Session(wb.BC(dataset=ds, net_arch=(8,)), dataset=_dataset("Pendulum-v1", n=50), seed=0)
    memory_only.save(tmp_path / "run2")
    with pytest.raises(wb.DatasetError, match="names no dataset"):
        wb.Dataset.from_run(tmp_path / "run2")
