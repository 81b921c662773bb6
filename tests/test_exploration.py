"""Exploration objects and schedules: end points, bounds, per-episode state, saving."""

from __future__ import annotations

import math

import numpy as np
import pytest

import workbench as wb
from workbench.exploration import exploration_from_dict
from workbench.schedules import schedule_from_dict


@pytest.mark.parametrize("kind", ["linear", "exponential"])
def test_epsilon_greedy_hits_its_end_points(kind):
    eps = wb.EpsilonGreedy(start=1.0, end=0.05, fraction=0.2, schedule=kind)
    assert eps.value(0.0) == pytest.approx(1.0)
    assert eps.value(0.2) == pytest.approx(0.05)
    assert eps.value(0.7) == pytest.approx(0.05)
    assert eps.value(1.0) == pytest.approx(0.05)
    values = [eps.value(p) for p in np.linspace(0, 0.2, 11)]
    assert np.all(np.diff(values) <= 0), "epsilon must only decrease"
    mid = eps.value(0.1)
    expected = 0.525 if kind == "linear" else math.sqrt(1.0 * 0.05)  # arithmetic vs geometric mean
    assert mid == pytest.approx(expected)


def test_linear_schedule_end_points_and_fraction():
    s = wb.linear(1e-3, 0.0)
    assert s(0.0) == pytest.approx(1e-3) and s(1.0) == 0.0 and s(0.5) == pytest.approx(5e-4)
    partial = wb.linear(0.2, 0.1, fraction=0.5)
    assert partial(0.5) == pytest.approx(0.1) and partial(0.9) == pytest.approx(0.1)
    assert schedule_from_dict(s.to_dict()) == s


def test_noise_stddev_follows_its_schedule():
    noise = wb.GaussianNoise(stddev=wb.linear(0.4, 0.1))
    assert noise.value(0.0) == pytest.approx(0.4) and noise.value(1.0) == pytest.approx(0.1)
    rng = np.random.default_rng(0)
    assert noise.noise((20_000,), rng, 0.0).std() == pytest.approx(0.4, rel=0.03)
    assert noise.noise((20_000,), rng, 1.0).std() == pytest.approx(0.1, rel=0.03)


@pytest.mark.parametrize("stddev", [0.05, 0.5, 3.0, wb.linear(2.0, 0.1)])
def test_truncated_normal_noise_never_leaves_its_bounds(stddev):
    noise = wb.TruncatedNormalNoise(stddev=stddev, low=-0.2, high=0.3)
    rng = np.random.default_rng(0)
    for progress in (0.0, 0.5, 1.0):
        x = noise.noise((50_000,), rng, progress)
        assert x.min() >= -0.2 and x.max() <= 0.3
    # Perturbed actions also stay inside the action space.
    low, high = np.array([-2.0], np.float32), np.array([2.0], np.float32)
    actions = np.full((10_000, 1), 1.9, np.float32)
    out = noise.perturb(actions, low, high, rng, 0.0)
    assert out.min() >= low[0] and out.max() <= high[0]


def test_truncated_normal_default_bounds_are_two_stddevs():
    noise = wb.TruncatedNormalNoise(stddev=0.1)
    x = noise.noise((20_000,), np.random.default_rng(1), 0.0)
    assert x.min() >= -0.2 and x.max() <= 0.2 and x.std() > 0.05


def test_ornstein_uhlenbeck_is_correlated_and_resets_per_env():
    noise = wb.OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.3)
    rng = np.random.default_rng(0)
    xs = np.array([noise.noise((2, 1), rng, 0.0) for _ in range(2000)])[:, 0, 0]
    lag1 = np.corrcoef(xs[:-1], xs[1:])[0, 1]
    assert lag1 > 0.9, "OU noise must be temporally correlated"
    noise.reset(np.array([True, False]))
    assert noise._x[0, 0] == 0.0 and noise._x[1, 0] != 0.0
    state = noise.state()
    other = exploration_from_dict(noise.to_dict())
    other.load_state(state)
    np.testing.assert_array_equal(other._x, noise._x)


@pytest.mark.parametrize(
    "exploration",
    [
        wb.EpsilonGreedy(1.0, 0.02, 0.3, schedule="exponential"),
        wb.GaussianNoise(wb.linear(0.3, 0.05)),
        wb.OrnsteinUhlenbeckNoise(theta=0.2, sigma=0.4, dt=0.05),
        wb.TruncatedNormalNoise(0.1, low=-0.15, high=0.25),
    ],
)
def test_exploration_round_trips_through_dict(exploration):
    again = exploration_from_dict(exploration.to_dict())
    assert type(again) is type(exploration)
    assert again.to_dict() == exploration.to_dict()
    assert again.value(0.4) == exploration.value(0.4)


def test_bad_exploration_arguments_are_refused():
    with pytest.raises(ValueError, match="probability"):
        wb.EpsilonGreedy(start=1.5)
    with pytest.raises(ValueError, match="linear' or 'exponential"):
        wb.EpsilonGreedy(schedule="cosine")
    with pytest.raises(ValueError, match="low < high"):
        wb.TruncatedNormalNoise(0.1, low=0.2, high=0.1)


def test_current_exploration_is_recorded_as_a_signal():
    agent = wb.DQN("CartPole-v1", seed=0, learning_starts=100, train_freq=50, gradient_steps=1, net_arch=(16,))
    session = wb.Session(agent, "CartPole-v1", seed=0)
    session.run(steps=1000)
    eps = session.signals["epsilon"]
    assert eps.values[0] > eps.values[-1]
    assert eps.values[-1] == pytest.approx(agent.config.exploration.value(1.0))
