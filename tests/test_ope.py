"""Off-policy estimators against hand-computed cases (a bandit whose true value is known)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import workbench as wb
from workbench.offline.datasets import DatasetError
from workbench.offline.ope import behaviour_probabilities, estimate, estimate_continuous


def _bandit(n=400, seed=0):
    """One-step episodes; a uniform behaviour over 2 actions; reward 1 for action 1, 0 for action 0."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 2)).astype(np.float32)
    actions = rng.integers(0, 2, n)
    rewards = (actions == 1).astype(np.float64)
    return wb.Dataset.from_arrays(
        obs,
        actions,
        rewards,
        terminated=np.ones(n),
        log_probs=np.full(n, np.log(0.5)),
        action_space=gym.spaces.Discrete(2),
    )


class _Always:
    """A policy stub: always the same action."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, action):
        self.action = action

    def act(self, obs, deterministic=True):
        return np.full(len(obs), self.action)


def _one_hot(n, action):
    out = np.zeros((n, 2))
    out[:, action] = 1.0
    return out


def test_bandit_by_hand():
    ds = _bandit()
    n = len(ds)
    pi = _one_hot(n, 1)
    mu = np.full(n, 0.5)
    perfect_q = np.tile([0.0, 1.0], (n, 1))
    est = estimate(ds, pi, mu, perfect_q, pi, perfect_q, gamma=0.9, n_bootstrap=50)
    # IPS: mean over samples of (1[a=1] / 0.5) * r, r = 1[a=1]
    assert est["ips"].value == pytest.approx(np.mean((ds.actions == 1) * 2.0))
    assert est["wis"].value == pytest.approx(1.0)
    assert est["dm"].value == pytest.approx(1.0)
    assert est["dr"].value == pytest.approx(1.0)  # a perfect model: no correction left
    assert est["sdr"].value == pytest.approx(1.0)
    assert est["ips"].low <= est["ips"].value <= est["ips"].high
    # a wrong model is corrected by the importance-weighted residuals: DR stays unbiased
    wrong_q = np.zeros((n, 2))
    est = estimate(ds, pi, mu, wrong_q, pi, wrong_q, gamma=0.9, n_bootstrap=10)
    assert est["dm"].value == 0.0
    assert est["dr"].value == pytest.approx(est["ips"].value)


def test_sequential_case_by_hand():
    # two episodes of two steps; target always takes action 1
    obs = np.zeros((4, 1))
    actions = np.array([1, 1, 1, 0])
    rewards = np.array([1.0, 2.0, 1.0, 5.0])
    ds = wb.Dataset.from_arrays(
        obs,
        actions,
        rewards,
        terminated=[0, 1, 0, 1],
        log_probs=np.log([0.5, 0.25, 0.5, 0.5]),
        action_space=gym.spaces.Discrete(2),
    )
    pi = _one_hot(4, 1)
    zero = np.zeros((4, 2))
    gamma = 0.5
    est = estimate(ds, pi, np.exp(ds.log_probs), zero, pi, zero, gamma=gamma, n_bootstrap=0)
    # per-decision weights: episode 1: 2, 2*4=8; episode 2: 2, 0
    ips = ((1.0 * 2 + gamma * 2.0 * 8) + (1.0 * 2 + 0.0)) / 2
    assert est["ips"].value == pytest.approx(ips)
    assert est["sdr"].value == pytest.approx(ips)  # a zero model: sequential DR is per-decision IS
    wis = (2 * 1 + 2 * 1) / (2 + 2) + gamma * (8 * 2 + 0 * 5) / (8 + 0)
    assert est["wis"].value == pytest.approx(wis)


@pytest.mark.slow
def test_evaluate_offline_recovers_a_known_value():
    ds = _bandit(n=600)
    good = wb.evaluate_offline(_Always(1), ds, fqe_steps=150, n_bootstrap=100)
    bad = wb.evaluate_offline(_Always(0), ds, fqe_steps=150, n_bootstrap=100)
    for name in ("ips", "wis", "dr", "sdr"):
        assert good[name].low <= 1.0 <= good[name].high + 1e-9, (name, good[name])
        assert bad[name].value == pytest.approx(0.0, abs=0.05), (name, bad[name])
    assert good["dm"].value == pytest.approx(1.0, abs=0.15)


def test_behaviour_model_when_the_dataset_has_no_probabilities():
    ds = _bandit(n=400)
    ds.log_probs = None
    p = behaviour_probabilities(ds, steps=100)
    assert abs(p.mean() - 0.5) < 0.05
    est = wb.evaluate_offline(_Always(1), ds, fqe_steps=20, n_bootstrap=20, behaviour_steps=100)
    assert est["wis"].value == pytest.approx(1.0)


def test_errors():
    ds = _bandit(n=20)
    with pytest.raises(TypeError, match="wb.Dataset"):
        wb.evaluate_offline(_Always(1), {"obs": 1})
    box = wb.Dataset.from_arrays(np.zeros((5, 2)), np.zeros((5, 1)), np.zeros(5))
    with pytest.raises(DatasetError, match="differs from the dataset's"):  # a Discrete agent on Box actions
        wb.evaluate_offline(_Always(1), box)
    with pytest.raises(DatasetError, match="log-density of each logged action"):  # Box actions need log_probs
        wb.evaluate_offline(_Fixed(0.0), box)
    multi = wb.Dataset.from_arrays(
        np.zeros((5, 2)), np.zeros((5, 2)), np.zeros(5), action_space=gym.spaces.MultiBinary(2)
    )
    with pytest.raises(DatasetError, match="Discrete or Box actions"):
        wb.evaluate_offline(_Always(1), multi)
    with pytest.raises(DatasetError, match="rows"):
        estimate(ds, _one_hot(19, 1), np.full(20, 0.5), np.zeros((20, 2)), _one_hot(20, 1), np.zeros((20, 2)))


# -- issue 32, case 14: every argument is checked at the call -------------------------------------

BAD_ARGUMENTS = [
    ("gamma", 2, "in [0, 1]"),
    ("gamma", -0.1, "in [0, 1]"),
    ("gamma", float("nan"), "in [0, 1]"),
    ("gamma", "0.99", "in [0, 1]"),
    ("fqe_steps", -1, ">= 0"),
    ("fqe_steps", 2.5, ">= 0"),
    ("n_bootstrap", -5, "in [0, 100000]"),
    ("n_bootstrap", 10**9, "in [0, 100000]"),
    ("n_bootstrap", True, "an integer"),
    ("behaviour_steps", -1, ">= 0"),
    ("seed", -3, ">= 0"),
    ("seed", "zero", ">= 0"),
]


@pytest.mark.parametrize(("name", "value", "allowed"), BAD_ARGUMENTS)
def test_evaluate_offline_checks_every_argument_at_the_call(name, value, allowed, monkeypatch):
    import workbench.offline.ope as ope

    def never(*args, **kwargs):
        raise AssertionError("fitted although an argument was bad")

    monkeypatch.setattr(ope, "behaviour_probabilities", never)
    monkeypatch.setattr(ope.FittedQEvaluation, "fit", never)
    with pytest.raises(wb.ArgumentError) as info:
        wb.evaluate_offline(_Always(1), _bandit(n=20), **{name: value})
    message = str(info.value)
    assert message.startswith(f"evaluate_offline got {name}=") and allowed in message, message
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"confidence": 1.0}, "confidence"),
        ({"n_bootstrap": -1}, "n_bootstrap"),
        ({"seed": -1}, "seed"),
    ],
)
def test_estimate_checks_its_arguments(kwargs, name):
    ds = _bandit(n=20)
    pi, q = _one_hot(20, 1), np.zeros((20, 2))
    with pytest.raises(wb.ArgumentError, match=f"estimate got {name}="):
        estimate(ds, pi, np.full(20, 0.5), q, pi, q, **kwargs)


def test_the_evaluator_and_its_parts_check_their_arguments():
    from workbench.offline.ope import FittedQEvaluation, OffPolicyEvaluator

    ds = _bandit(n=20)
    with pytest.raises(wb.ArgumentError, match="OffPolicyEvaluator got gamma=2"):
        OffPolicyEvaluator(ds, gamma=2)
    with pytest.raises(TypeError, match="wb.Dataset"):
        OffPolicyEvaluator([1, 2])
    with pytest.raises(wb.ArgumentError, match="FittedQEvaluation got batch_size=0"):
        FittedQEvaluation(2, 2, batch_size=0)
    with pytest.raises(wb.ArgumentError, match="behaviour_probabilities got steps=-1"):
        behaviour_probabilities(ds, steps=-1)
    with pytest.raises(wb.ArgumentError, match=r"FittedQEvaluation\.fit got steps=-2"):
        FittedQEvaluation(2, 2).fit(ds, _one_hot(20, 1), steps=-2)


def test_evaluate_offline_refuses_an_agent_of_other_observations():
    agent = wb.DQN(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(2))
    with pytest.raises(DatasetError, match=r"observations have shape \(2,\), the agent expects \(3,\)"):
        wb.evaluate_offline(agent, _bandit(n=20))


def test_edge_values_still_pass():
    est = wb.evaluate_offline(_Always(1), _bandit(n=20), gamma=1, fqe_steps=0, n_bootstrap=0, seed=0)
    assert est["ips"].low == est["ips"].value == est["ips"].high
    est = wb.evaluate_offline(_Always(1), _bandit(n=20), gamma=0.0, fqe_steps=np.int64(2), n_bootstrap=3)
    assert set(est) == {"ips", "wis", "dm", "dr", "sdr"}


# -- Box actions ----------------------------------------------------------------------------------


class _Fixed:
    """A continuous policy stub: always the same action in Box(-1, 1, (1,))."""

    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, action):
        self.action = action

    def act(self, obs, deterministic=True):
        return np.full((len(obs), 1), self.action, dtype=np.float32)


def test_continuous_dr_and_sdr_by_hand():
    # Two episodes: row 0 (terminated); rows 1, 2 (row 2 terminated). Actions in Box(-1, 1), the behaviour
    # uniform on it (density 1/2), the target always 0, a kernel of bandwidth 0.5 (sigma 0.5 here).
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    ds = wb.Dataset.from_arrays(
        np.zeros((3, 2)),
        np.array([[0.1], [-0.5], [0.3]]),
        np.array([1.0, 0.2, 0.4]),
        terminated=[True, False, True],
        log_probs=np.full(3, math.log(0.5)),
        action_space=space,
    )
    target = np.zeros((3, 1))
    q, v, v_next = np.array([0.8, 0.5, 0.3]), np.array([0.9, 0.6, 0.35]), np.array([7.0, 0.45, 9.0])

    def rho(a):  # N(a; 0, 0.5**2) / (1/2)
        return math.exp(-0.5 * (a / 0.5) ** 2) / (0.5 * math.sqrt(2 * math.pi)) / 0.5

    gamma = 0.9
    dr1 = 0.9 + rho(0.1) * (1.0 - 0.8)  # terminated: no next value (the 7.0 is never read)
    dr2 = 0.6 + rho(-0.5) * (0.2 + gamma * 0.45 - 0.5)
    sdr2 = 0.6 + rho(-0.5) * (0.2 + gamma * (0.35 + rho(0.3) * (0.4 - 0.3)) - 0.5)
    est = estimate_continuous(ds, target, ds.log_probs, q, v, v_next, gamma=gamma, bandwidth=0.5, n_bootstrap=0)
    assert set(est) == {"dm", "dr", "sdr"}
    assert est["dm"].value == pytest.approx((0.9 + 0.6) / 2)
    assert est["dr"].value == pytest.approx((dr1 + dr2) / 2)
    assert est["sdr"].value == pytest.approx((dr1 + sdr2) / 2)
    assert rho(0.1) == pytest.approx(1.5642, abs=1e-4)  # exp(-0.02) / (0.5 * sqrt(2 pi)) / 0.5


def _continuous_bandit(n=600, seed=0):
    """One-step episodes, actions from N(0, 0.5) clipped to [-1, 1] (their log-densities logged),
    reward -(a - 0.3)**2: the policy "always c" is worth -(c - 0.3)**2."""
    rng = np.random.default_rng(seed)
    a = np.clip(rng.normal(0.0, 0.5, size=n), -1, 1)
    log_probs = -0.5 * (a / 0.5) ** 2 - math.log(0.5 * math.sqrt(2 * math.pi))
    return wb.Dataset.from_arrays(
        rng.normal(size=(n, 2)),
        a[:, None],
        -((a - 0.3) ** 2),
        terminated=np.ones(n),
        log_probs=log_probs,
        action_space=gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
    )


def test_continuous_fqe_and_dr_recover_a_known_value():
    ds = _continuous_bandit()
    for c in (0.3, -0.5):
        est = wb.evaluate_offline(_Fixed(c), ds, fqe_steps=600, n_bootstrap=50)
        truth = -((c - 0.3) ** 2)
        assert set(est) == {"dm", "dr", "sdr"}
        assert est["dm"].value == pytest.approx(truth, abs=0.1), est
        assert est["dr"].value == pytest.approx(truth, abs=0.1), est
        assert est["dr"].low <= est["dr"].value <= est["dr"].high


def test_sac_log_density_is_the_density_it_draws_from():
    # The squashed Gaussian's log-density of an action SAC drew equals the log-probability its
    # reparameterised draw computed, minus the log of the action scale (Pendulum's bounds are +-2).
    import torch

    agent = wb.SAC("Pendulum-v1", seed=0, learning_starts=0)
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    with torch.no_grad():
        squashed, log_prob = agent._policy(torch.as_tensor(obs))
    actions = agent._scale_action(squashed.numpy())
    expected = log_prob.numpy() - np.log(2.0)
    got = agent.log_density(obs, actions)
    inside = np.abs(squashed.numpy()).max(axis=1) < 0.999  # away from the bounds, where float32 atanh is exact
    np.testing.assert_allclose(got[inside], expected[inside], atol=2e-3)
    # Before learning_starts it draws uniformly in [-2, 2]: density 1/4.
    fresh = wb.SAC("Pendulum-v1", seed=0, learning_starts=100)
    np.testing.assert_allclose(fresh.log_density(obs, actions), np.log(0.25))


def test_a_recorded_sac_run_keeps_log_densities_and_box_ones_may_be_positive(tmp_path):
    agent = wb.SAC("Pendulum-v1", seed=0, learning_starts=40, batch_size=16, net_arch=(16,))
    wb.Session(agent, "Pendulum-v1", seed=0, record=tmp_path / "data").run(steps=100)
    data = wb.Dataset.load(tmp_path / "data")
    assert data.log_probs is not None and len(data.log_probs) == 100
    np.testing.assert_allclose(data.log_probs[:40], np.log(0.25), rtol=1e-5)  # the uniform warm-up
    assert np.isfinite(data.log_probs).all() and not np.allclose(data.log_probs[40:], np.log(0.25))
    # A narrow Gaussian's density exceeds 1: a Box dataset accepts positive log-densities, a discrete one
    # still refuses positive log-probabilities.
    box = wb.Dataset.from_arrays(
        data.observations[:10], data.actions[:10], data.rewards[:10], log_probs=np.full(10, 1.5)
    )
    assert box.log_probs is not None and (box.log_probs > 0).all()
    with pytest.raises(DatasetError, match="positive"):
        wb.Dataset.from_arrays(np.zeros((4, 2)), np.array([0, 1, 0, 1]), np.ones(4), log_probs=np.full(4, 0.5))
