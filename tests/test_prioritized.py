"""Prioritized replay on a sum-tree, and n-step returns."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.loop import Transitions
from workbench.memory import NStepAccumulator, PrioritizedReplayMemory, SumTree


def _filled(n: int, capacity: int = 64, alpha: float = 1.0) -> PrioritizedReplayMemory:
    mem = PrioritizedReplayMemory(capacity, (2,), alpha=alpha, epsilon=0.0)
    mem.add(np.zeros((n, 2)), np.arange(n), np.zeros(n), np.zeros((n, 2)), np.zeros(n), 0.99)
    return mem


def test_sampling_frequencies_match_priorities():
    mem = _filled(10, alpha=1.0)
    priorities = np.array([1, 2, 3, 4, 5, 0.5, 0.5, 8, 1, 10], dtype=np.float64)
    mem.update_priorities(np.arange(10), priorities)
    rng = np.random.default_rng(0)
    counts = np.zeros(10)
    draws = 0
    for _ in range(500):
        batch = mem.sample(64, rng)
        np.add.at(counts, batch.indices, 1)
        draws += 64
    expected = priorities / priorities.sum()
    observed = counts / draws
    # 32,000 draws: the standard error of each frequency is below 0.003.
    np.testing.assert_allclose(observed, expected, atol=0.01)
    chi2 = (((counts - expected * draws) ** 2) / (expected * draws)).sum()
    assert chi2 < 27.9  # 99.9th percentile of chi-square with 9 degrees of freedom


def test_alpha_shapes_the_distribution():
    uniform = _filled(4, alpha=0.0)
    uniform.update_priorities(np.arange(4), np.array([1.0, 10.0, 100.0, 1000.0]))
    np.testing.assert_allclose(uniform.priorities[:4], 1.0)
    sharp = _filled(4, alpha=0.5)
    sharp.update_priorities(np.arange(4), np.array([1.0, 4.0, 9.0, 16.0]))
    np.testing.assert_allclose(sharp.priorities[:4], [1.0, 2.0, 3.0, 4.0])


def test_importance_weights_follow_the_formula():
    mem = _filled(4, alpha=1.0)
    mem.update_priorities(np.arange(4), np.array([1.0, 1.0, 2.0, 4.0]))
    batch = mem.sample(256, np.random.default_rng(0), beta=0.5)
    probs = np.array([1, 1, 2, 4]) / 8
    w = (4 * probs) ** -0.5
    expected = w[batch.indices] / w[batch.indices].max()
    np.testing.assert_allclose(batch.weights.numpy(), expected, rtol=1e-6)
    assert batch.weights.max() == pytest.approx(1.0)


def test_new_transitions_get_the_largest_priority_so_far():
    mem = _filled(3, alpha=1.0)
    mem.update_priorities(np.arange(3), np.array([0.1, 7.0, 0.2]))
    mem.add(np.zeros((1, 2)), np.zeros(1), np.zeros(1), np.zeros((1, 2)), np.zeros(1), 0.99)
    assert mem.priorities[3] == pytest.approx(7.0)


def test_sum_tree_stays_consistent_and_logarithmic():
    tree = SumTree(1000)
    assert tree.depth == 10  # log2 of the capacity, rounded up: sampling walks 10 levels
    rng = np.random.default_rng(0)
    for _ in range(50):
        idx = rng.integers(0, 1000, size=32)
        tree.update(idx, rng.random(32))
    assert tree.total == pytest.approx(tree.leaves.sum())
    inner = np.arange(1, tree.n_leaves)
    np.testing.assert_allclose(tree.nodes[inner], tree.nodes[2 * inner] + tree.nodes[2 * inner + 1])
    slots = tree.sample(4096, rng)
    assert (tree.leaves[slots] > 0).all()


def test_sampling_skips_zero_priority_slots():
    mem = _filled(8, alpha=1.0)
    mem.update_priorities(np.arange(8), np.array([0, 0, 0, 5.0, 0, 0, 0, 0]))
    batch = mem.sample(100, np.random.default_rng(0))
    assert (batch.indices == 3).all()


def test_priorities_survive_save_and_load(tmp_path):
    mem = _filled(20, capacity=16, alpha=0.6)  # wrapped around: oldest first on saving
    mem.update_priorities(np.arange(16), np.linspace(0.1, 3.0, 16))
    mem.save(tmp_path / "memory.npz")
    other = PrioritizedReplayMemory(16, (2,), alpha=0.6, epsilon=0.0).load(tmp_path / "memory.npz")
    order = (mem.pos + np.arange(16)) % 16
    np.testing.assert_allclose(other.priorities, mem.priorities[order])
    assert other.tree.total == pytest.approx(mem.tree.total)
    np.testing.assert_array_equal(other.actions, mem.actions[order])


def test_n_step_returns_by_hand():
    acc = NStepAccumulator(n=3, gamma=0.5)
    obs = lambda v: np.full((1, 1), v, np.float32)  # noqa: E731
    no = np.array([False])
    out = [acc.add(Transitions(obs(t), np.array([t]), np.array([1.0]), obs(t + 1), no, no)) for t in range(3)]
    assert out[0] is None and out[1] is None
    o, a, r, nxt, done, disc = out[2]
    assert a[0] == 0 and r[0] == pytest.approx(1 + 0.5 + 0.25) and nxt[0, 0] == 3
    assert done[0] == 0 and disc[0] == pytest.approx(0.125)
    # Termination flushes every pending step with what is left, and stops bootstrapping.
    o, a, r, nxt, done, disc = acc.add(
        Transitions(obs(3), np.array([3]), np.array([2.0]), obs(99), np.array([True]), no)
    )
    np.testing.assert_array_equal(a, [1, 2, 3])
    np.testing.assert_allclose(r, [1 + 0.5 + 0.5, 1 + 1.0, 2.0])
    np.testing.assert_allclose(disc, [0.125, 0.25, 0.5])
    assert (done == 1).all() and (nxt[:, 0] == 99).all()


def test_n_step_truncation_still_bootstraps():
    acc = NStepAccumulator(n=5, gamma=0.9)
    x = np.zeros((1, 1), np.float32)
    acc.add(Transitions(x, np.array([0]), np.array([1.0]), x, np.array([False]), np.array([False])))
    o, a, r, nxt, done, disc = acc.add(
        Transitions(x, np.array([1]), np.array([1.0]), x, np.array([False]), np.array([True]))
    )
    assert (done == 0).all()
    np.testing.assert_allclose(disc, [0.81, 0.9])
