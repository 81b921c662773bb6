"""Off-policy evaluation: the value of a policy estimated from logged episodes, without running it.

Given episodes a behaviour policy logged (a :class:`~workbench.Dataset`, ideally with the behaviour's
``log_probs``) and a target policy (an agent, acting greedily), five estimators of the target's
expected discounted return from the logged start states, each with a bootstrap confidence interval
over episodes (Coach's batch-RL estimators; Precup et al. 2000, Dudik et al. 2011, Jiang & Li 2016)::

    est = wb.evaluate_offline(agent, held_out, gamma=0.99)
    est["dr"].value, est["dr"].low, est["dr"].high

* ``ips``: per-decision importance sampling, ``mean_i sum_t gamma^t w_it r_it`` with
  ``w_it = prod_{k<=t} pi(a_k|s_k) / mu(a_k|s_k)`` (unbiased, high variance);
* ``wis``: per-decision weighted importance sampling (the weights normalized at each t: biased,
  much lower variance);
* ``dm``: the direct method, ``V(s_0)`` of a fitted Q evaluation (FQE: Q-learning of the target
  policy's own values on the logged transitions; biased by the model, low variance);
* ``dr``: doubly robust on the first decision: ``V(s_0) + w_0 (r_0 + gamma V(s_1) - Q(s_0, a_0))``;
* ``sdr``: sequential doubly robust (Jiang & Li 2016), the same correction at every step, backward
  through the episode.

The importance weights need the behaviour policy's probability of each logged action: the
dataset's ``log_probs`` when it has them, else a behaviour model (a classifier of the logged
actions) fitted here. The target policy is the agent's deterministic one.
The interval resamples episodes (the fitted Q-model is kept fixed across resamples).

**Box actions** give ``dm``, ``dr`` and ``sdr`` (:func:`estimate_continuous`): FQE learns ``Q(s, a)``
with the action as an input (:class:`ContinuousFittedQEvaluation`), and the importance ratio of a
deterministic target policy, whose density is a point, is taken with a Gaussian kernel around its
action (Kallus & Zhou 2018): ``rho = N(a; pi(s), (h * half_range)**2) / mu(a|s)`` per action dimension,
``h`` the ``bandwidth`` (0.2 by default: a fifth of each dimension's half range). ``mu(a|s)`` is the
behaviour's density of the logged action, the dataset's ``log_probs`` as log-densities (recorded from
PPO and A2C, which log them); there is no behaviour model for Box actions, so a dataset without them is
refused. ``ips``/``wis`` (products of such ratios over whole episodes) are left out for Box actions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from ..agents.contract import Agent
from ..agents.networks import make_adam, mlp
from ..validation import check_arguments, integer, layer_widths, number, optional
from .datasets import Dataset, DatasetError

__all__ = [
    "ESTIMATORS",
    "MAX_BOOTSTRAP",
    "ContinuousFittedQEvaluation",
    "Estimate",
    "FittedQEvaluation",
    "OffPolicyEvaluator",
    "evaluate_offline",
    "estimate",
    "estimate_continuous",
]

ESTIMATORS = ("ips", "wis", "dm", "dr", "sdr")
"""The estimators :func:`evaluate_offline` returns, by name."""


class Estimate(NamedTuple):
    """An estimated policy value with its bootstrap confidence interval ``[low, high]``."""

    value: float
    low: float
    high: float

    def __repr__(self) -> str:
        return f"Estimate({self.value:.4g}, [{self.low:.4g}, {self.high:.4g}])"


MAX_BOOTSTRAP = 100_000
"""The most bootstrap resamples an estimate takes (each is a pass over the episodes)."""

# Every argument of this module's functions, checked at the call (workbench.validation), so a bad
# one is named at once and not inside a long fit.
_CHECKS = {
    "gamma": number(0, 1),
    "fqe_steps": integer(min=0),
    "steps": integer(min=0),
    "n_bootstrap": integer(min=0, max=MAX_BOOTSTRAP),
    "behaviour_steps": integer(min=0),
    "seed": integer(min=0),
    "confidence": number(0, 1, min_open=True, max_open=True),
    "net_arch": layer_widths(),
    "lr": number(0, min_open=True),
    "batch_size": integer(min=1),
    "target_every": integer(min=1),
    "obs_dim": integer(min=1),
    "n_actions": integer(min=1),
    "act_dim": integer(min=1),
    "bandwidth": number(0, min_open=True),
}

CONTINUOUS_ESTIMATORS = ("dm", "dr", "sdr")
"""The estimators for Box actions (see the module docstring)."""


def _check(owner: str, values: dict[str, Any], **special: Any) -> None:
    """Check ``values`` (argument name -> value) against :data:`_CHECKS` (or ``special``)."""
    check_arguments(owner, values, {name: special.get(name, _CHECKS[name]) for name in values})


def _check_estimate(owner: str, dataset: Dataset, values: dict[str, Any], rows: dict[str, np.ndarray]) -> int:
    """Check an estimator's arguments ``values`` (:data:`_CHECKS`; ``seed`` may be None) and that each
    array of ``rows`` has a row per step of ``dataset``; returns the number of steps."""
    _check(owner, values, seed=optional(integer(min=0)))
    n = len(dataset)
    for name, arr in rows.items():
        if len(arr) != n:
            raise DatasetError(f"{owner}: {name} has {len(arr)} rows, the dataset {n}")
    return n


def _check_evaluation(
    owner: str, gamma: float, fqe_steps: int, n_bootstrap: int, behaviour_steps: int, seed: int, bandwidth: float
) -> None:
    """Check the settings of an evaluation (:func:`evaluate_offline`'s, :class:`OffPolicyEvaluator`'s)."""
    _check(
        owner,
        dict(
            gamma=gamma,
            fqe_steps=fqe_steps,
            n_bootstrap=n_bootstrap,
            behaviour_steps=behaviour_steps,
            seed=seed,
            bandwidth=bandwidth,
        ),
    )


def _standardizer(obs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    mean = torch.as_tensor(obs.mean(0), dtype=torch.float32)
    std = torch.as_tensor(obs.std(0) + 1e-6, dtype=torch.float32)
    return mean, std


_Q = TypeVar("_Q", bound="_FittedQ")


class _FittedQ:
    """What both fitted-Q evaluations share: a Q-network and its target copy, their optimizer, the
    checks of their settings, and :meth:`fit`: the regression onto ``r + gamma * V_target(s')`` with a
    target refresh every ``target_every`` steps. A subclass says how its inputs are standardized and how
    a batch of rows gives the Q-value of the logged action and the next state's value (:meth:`_values`)."""

    def __init__(
        self,
        dims: dict[str, int],
        in_dim: int,
        out_dim: int,
        *,
        gamma: float = 0.99,
        net_arch: tuple[int, ...] = (64, 64),
        lr: float = 1e-3,
        batch_size: int = 256,
        target_every: int = 10,
        seed: int = 0,
    ) -> None:
        settings = dict(
            gamma=gamma, net_arch=net_arch, lr=lr, batch_size=batch_size, target_every=target_every, seed=seed
        )
        _check(type(self).__name__, {**dims, **settings})
        self.gamma, self.batch_size, self.target_every = float(gamma), int(batch_size), int(target_every)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.q = mlp(in_dim, net_arch, out_dim)
            self.q_target = mlp(in_dim, net_arch, out_dim)
        self.q_target.load_state_dict(self.q.state_dict())
        self.optimizer = make_adam(self.q.parameters(), lr=lr)
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self._norm: tuple[torch.Tensor, torch.Tensor] | None = None

    def _observation_rows(self, dataset: Dataset) -> np.ndarray:
        """The observations its standardizer is fitted to (at the first :meth:`fit`)."""
        raise NotImplementedError

    def _values(self, dataset: Dataset, target: np.ndarray) -> tuple[Callable[[torch.Tensor], torch.Tensor], ...]:
        """``(acted_q, next_value)``: ``acted_q(idx)``, the online net's value of rows ``idx``'s logged
        actions, and ``next_value(idx)``, the target net's value of their next states under ``target``."""
        raise NotImplementedError

    def fit(self: _Q, dataset: Dataset, target: np.ndarray, steps: int = 2000) -> _Q:
        """``steps`` gradient steps on ``dataset``: ``acted_q(idx)`` (see :meth:`_values`) onto the rows'
        rewards plus the discounted ``next_value(idx)``, where ``target[i]`` is the target policy in
        ``next_observations[i]`` (a subclass says how)."""
        _check(f"{type(self).__name__}.fit", {"steps": steps})
        if self._norm is None:
            self._norm = _standardizer(self._observation_rows(dataset))
        acted_q, next_value = self._values(dataset, target)
        rewards = torch.as_tensor(dataset.rewards)
        alive = torch.as_tensor(1.0 - dataset.terminated.astype(np.float32))
        n = len(dataset)
        # A return is bounded by the reward range over 1 - gamma: clipping the targets there keeps the
        # regression from diverging where the target policy leaves the data (the deadly triad).
        horizon = 1.0 / max(1.0 - self.gamma, 1e-3)
        low = min(0.0, float(dataset.rewards.min())) * horizon
        high = max(0.0, float(dataset.rewards.max())) * horizon
        for _ in range(int(steps)):
            idx = torch.from_numpy(self.rng.integers(0, n, size=self.batch_size))
            with torch.no_grad():
                backup = (rewards[idx] + self.gamma * alive[idx] * next_value(idx)).clamp(low, high)
            loss = F.smooth_l1_loss(acted_q(idx), backup)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.steps += 1
            if self.steps % self.target_every == 0:
                self.q_target.load_state_dict(self.q.state_dict())
        return self


class FittedQEvaluation(_FittedQ):
    """Fitted Q evaluation (Le et al. 2019): the Q-function of a fixed target policy, learned from
    logged transitions by regression onto ``r + gamma * Q_target(s', pi(s'))``. ``fit`` may be
    called again (warm start), e.g. as the target policy changes during training.

    The target network is refreshed every ``target_every`` steps: each refresh is one Bellman
    backup, and a value with horizon ``1 / (1 - gamma)`` needs several hundred of them (after ``k``
    backups a constant reward's value reaches ``1 - gamma**k`` of its limit: 63% at k=100 with
    gamma 0.99). Every 10 steps, 5000 steps make 500 backups (99%)."""

    def __init__(self, obs_dim: int, n_actions: int, **settings: Any) -> None:
        """``settings``: ``gamma``, ``net_arch``, ``lr``, ``batch_size``, ``target_every``, ``seed``."""
        super().__init__({"obs_dim": obs_dim, "n_actions": n_actions}, obs_dim, n_actions, **settings)
        self.n_actions = int(n_actions)

    def _in(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        assert self._norm is not None
        return (torch.as_tensor(obs, dtype=torch.float32) - self._norm[0]) / self._norm[1]

    def _observation_rows(self, dataset: Dataset) -> np.ndarray:
        return dataset.observations

    def _values(self, dataset: Dataset, target: np.ndarray) -> tuple[Callable[[torch.Tensor], torch.Tensor], ...]:
        """``target[i]``: the target policy's action probabilities in ``next_observations[i]``."""
        obs, next_obs = self._in(dataset.observations), self._in(dataset.next_observations)
        actions = torch.as_tensor(dataset.actions, dtype=torch.long).unsqueeze(1)
        pi_next = torch.as_tensor(target, dtype=torch.float32)
        return (
            lambda idx: self.q(obs[idx]).gather(1, actions[idx]).squeeze(1),
            lambda idx: (self.q_target(next_obs[idx]) * pi_next[idx]).sum(-1),
        )

    @torch.no_grad()
    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Q-values ``(n, n_actions)`` of observations."""
        return self.q(self._in(obs)).numpy().astype(np.float64)


def behaviour_probabilities(dataset: Dataset, *, steps: int = 1000, seed: int = 0) -> np.ndarray:
    """The behaviour policy's probability of each logged action: from the dataset's ``log_probs``,
    else from a classifier fitted here to the logged actions (clipped below at 1e-3)."""
    _check("behaviour_probabilities", {"steps": steps, "seed": seed})
    if dataset.log_probs is not None:
        return np.exp(dataset.log_probs.astype(np.float64))
    n_actions = int(dataset.action_space.n)  # type: ignore[attr-defined]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = mlp(dataset.observations.shape[1], (64, 64), n_actions)
    norm = _standardizer(dataset.observations)
    obs = (torch.as_tensor(dataset.observations) - norm[0]) / norm[1]
    actions = torch.as_tensor(dataset.actions, dtype=torch.long)
    opt = make_adam(net.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, len(dataset), size=256))
        loss = F.cross_entropy(net(obs[idx]), actions[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        p = torch.softmax(net(obs), -1).gather(1, actions.unsqueeze(1)).squeeze(1).numpy()
    return np.clip(p.astype(np.float64), 1e-3, 1.0)


def greedy_probabilities(agent: Any, observations: np.ndarray, batch: int = 4096) -> np.ndarray:
    """One-hot action probabilities ``(n, n_actions)`` of ``agent``'s deterministic policy."""
    n_actions = int(agent.action_space.n)
    actions = np.concatenate(
        [
            np.asarray(agent.act(observations[i : i + batch], deterministic=True)).reshape(-1)
            for i in range(0, len(observations), batch)
        ]
    ).astype(np.int64)
    out = np.zeros((len(observations), n_actions))
    out[np.arange(len(observations)), actions] = 1.0
    return out


def _per_episode(
    dataset: Dataset, rho: np.ndarray, acted_q: np.ndarray, v: np.ndarray, v_next: np.ndarray, gamma: float
) -> dict[str, np.ndarray]:
    """Per-episode terms of each estimator; ``wis`` as padded matrices (weights, weighted rewards).
    ``acted_q``: the Q-model's value of each logged action."""
    bounds = dataset.episode_bounds()
    longest = max(b - a for a, b in bounds)
    n_ep = len(bounds)
    weights = np.zeros((n_ep, longest))
    rewards = np.zeros((n_ep, longest))
    ips, dm, dr, sdr = (np.zeros(n_ep) for _ in range(4))
    for i, (a, b) in enumerate(bounds):
        w = np.cumprod(rho[a:b])
        r = dataset.rewards[a:b].astype(np.float64)
        discount = gamma ** np.arange(b - a)
        weights[i, : b - a] = w
        rewards[i, : b - a] = r
        ips[i] = np.sum(discount * w * r)
        dm[i] = v[a]
        # next-state value: zero after a termination, the model's after a cut (truncation) or mid-episode
        alive_next = 0.0 if dataset.terminated[a] else v_next[a]
        dr[i] = v[a] + rho[a] * (r[0] + gamma * alive_next - acted_q[a])
        tail = 0.0 if dataset.terminated[b - 1] else v_next[b - 1]
        for t in range(b - 1, a - 1, -1):
            tail = v[t] + rho[t] * (dataset.rewards[t] + gamma * tail - acted_q[t])
        sdr[i] = tail
    return {"ips": ips, "dm": dm, "dr": dr, "sdr": sdr, "w": weights, "r": rewards}


def _wis(w: np.ndarray, r: np.ndarray, gamma: float) -> float:
    total = w.sum(0)
    discount = gamma ** np.arange(w.shape[1])
    safe = np.where(total > 0, total, 1.0)
    return float(np.sum(discount * np.where(total > 0, (w * r).sum(0) / safe, 0.0)))


def estimate(
    dataset: Dataset,
    target_probs: np.ndarray,
    behaviour_probs: np.ndarray,
    q_values: np.ndarray,
    next_target_probs: np.ndarray,
    next_q_values: np.ndarray,
    *,
    gamma: float = 0.99,
    n_bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> dict[str, Estimate]:
    """The five estimates from arrays with one row per step of ``dataset``: the target policy's
    action probabilities in each state and next state, the behaviour's probability of each
    logged action, and a Q-model's values in each state and next state (zeros for none: ``dm``
    is then 0 and ``dr``/``sdr`` reduce to importance sampling). The interval is the bootstrap
    percentile interval over ``n_bootstrap`` resamples of whole episodes."""
    n = _check_estimate(
        "estimate",
        dataset,
        dict(gamma=gamma, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed),
        dict(
            target_probs=target_probs,
            q_values=q_values,
            next_target_probs=next_target_probs,
            next_q_values=next_q_values,
            behaviour_probs=behaviour_probs,
        ),
    )
    if (behaviour_probs <= 0).any():
        raise DatasetError("estimate: a behaviour probability is 0: the logged action could not have been taken")
    pi_taken = target_probs[np.arange(n), dataset.actions]
    rho = pi_taken / behaviour_probs
    v = (target_probs * q_values).sum(-1)
    v_next = (next_target_probs * next_q_values).sum(-1)
    terms = _per_episode(dataset, rho, q_values[np.arange(n), dataset.actions], v, v_next, gamma)
    return _with_intervals(terms, ESTIMATORS, gamma, n_bootstrap, confidence, seed)


def _with_intervals(
    terms: dict[str, np.ndarray],
    names: tuple[str, ...],
    gamma: float,
    n_bootstrap: int,
    confidence: float,
    seed: int | None,
) -> dict[str, Estimate]:
    """The point estimates ``names`` of per-episode ``terms`` and their bootstrap percentile intervals."""
    plain = [k for k in names if k != "wis"]
    point = {k: float(terms[k].mean()) for k in plain}
    if "wis" in names:
        point["wis"] = _wis(terms["w"], terms["r"], gamma)
    rng = np.random.default_rng(seed)
    n_ep = len(terms["dm"])
    samples: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(int(n_bootstrap)):
        idx = rng.integers(0, n_ep, size=n_ep)
        for k in plain:
            samples[k].append(float(terms[k][idx].mean()))
        if "wis" in names:
            samples["wis"].append(_wis(terms["w"][idx], terms["r"][idx], gamma))
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for k in names:
        if samples[k]:
            low, high = np.quantile(samples[k], [alpha, 1.0 - alpha])
        else:
            low = high = point[k]
        out[k] = Estimate(point[k], float(low), float(high))
    return out


def _action_scale(space: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(middle, half_range)`` of a Box action space per dimension (0 and 1 where a bound is infinite)."""
    low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
    finite = np.isfinite(low) & np.isfinite(high)
    middle = np.where(finite, (low + high) / 2, 0.0)
    half = np.where(finite, (high - low) / 2, 1.0)
    return middle.reshape(-1), np.maximum(half, 1e-12).reshape(-1)


def kernel_log_density(actions: np.ndarray, target_actions: np.ndarray, space: Any, bandwidth: float) -> np.ndarray:
    """``log N(a; pi(s), (bandwidth * half_range)**2)`` summed over action dimensions: the smoothed
    density of a deterministic target policy at each logged action (in the action space's units)."""
    _, half = _action_scale(space)
    sigma = float(bandwidth) * half
    a = np.asarray(actions, dtype=np.float64).reshape(len(actions), -1)
    mu = np.asarray(target_actions, dtype=np.float64).reshape(len(actions), -1)
    z = (a - mu) / sigma
    return np.sum(-0.5 * z * z - np.log(sigma) - 0.5 * np.log(2 * np.pi), axis=1)


def estimate_continuous(
    dataset: Dataset,
    target_actions: np.ndarray,
    behaviour_log_probs: np.ndarray,
    acted_q: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    *,
    gamma: float = 0.99,
    bandwidth: float = 0.2,
    n_bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> dict[str, Estimate]:
    """``dm``, ``dr`` and ``sdr`` for Box actions from arrays with one row per step of ``dataset``: the
    target policy's action in each state, the behaviour's log-density of each logged action, a
    Q-model's value of the logged action ``Q(s, a)``, of the target's action ``V(s) = Q(s, pi(s))`` and
    of the target's action in the next state ``V(s')``. The importance ratio is
    ``exp(kernel_log_density(a, pi(s)) - behaviour_log_prob)``; ``dr`` is
    ``V(s_0) + rho_0 (r_0 + gamma V(s_1) - Q(s_0, a_0))`` per episode (no ``V(s_1)`` after a termination)."""
    _check_estimate(
        "estimate_continuous",
        dataset,
        dict(gamma=gamma, bandwidth=bandwidth, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed),
        dict(
            target_actions=target_actions,
            behaviour_log_probs=behaviour_log_probs,
            acted_q=acted_q,
            values=values,
            next_values=next_values,
        ),
    )
    log_rho = kernel_log_density(dataset.actions, target_actions, dataset.action_space, bandwidth)
    log_rho = log_rho - np.asarray(behaviour_log_probs, dtype=np.float64).reshape(-1)
    rho = np.exp(np.clip(log_rho, -50.0, 50.0))
    terms = _per_episode(
        dataset,
        rho,
        np.asarray(acted_q, dtype=np.float64).reshape(-1),
        np.asarray(values, dtype=np.float64).reshape(-1),
        np.asarray(next_values, dtype=np.float64).reshape(-1),
        gamma,
    )
    return _with_intervals(terms, CONTINUOUS_ESTIMATORS, gamma, n_bootstrap, confidence, seed)


class ContinuousFittedQEvaluation(_FittedQ):
    """Fitted Q evaluation for Box actions: ``Q(s, a)`` of a fixed deterministic target policy, the
    action an input (scaled to [-1, 1] by the space's bounds), learned by regression onto
    ``r + gamma * Q_target(s', pi(s'))``, as :class:`FittedQEvaluation` does for Discrete actions."""

    def __init__(self, obs_dim: int, action_space: Any, **settings: Any) -> None:
        """``settings``: ``gamma``, ``net_arch``, ``lr``, ``batch_size``, ``target_every``, ``seed``."""
        act_dim = int(np.prod(action_space.shape))
        super().__init__({"obs_dim": obs_dim, "act_dim": act_dim}, obs_dim + act_dim, 1, **settings)
        middle, half = _action_scale(action_space)
        self._middle = torch.as_tensor(middle, dtype=torch.float32)
        self._half = torch.as_tensor(half, dtype=torch.float32)

    def _in(self, obs: Any, actions: Any) -> torch.Tensor:
        assert self._norm is not None
        n = len(obs)
        o = (torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(n, -1) - self._norm[0]) / self._norm[1]
        a = (torch.as_tensor(np.asarray(actions), dtype=torch.float32).reshape(n, -1) - self._middle) / self._half
        return torch.cat([o, a], dim=1)

    def _observation_rows(self, dataset: Dataset) -> np.ndarray:
        return np.asarray(dataset.observations, dtype=np.float32).reshape(len(dataset), -1)

    def _values(self, dataset: Dataset, target: np.ndarray) -> tuple[Callable[[torch.Tensor], torch.Tensor], ...]:
        """``target[i]``: the target policy's action in ``next_observations[i]``."""
        taken = self._in(dataset.observations, dataset.actions)
        following = self._in(dataset.next_observations, target)
        return (
            lambda idx: self.q(taken[idx]).squeeze(1),
            lambda idx: self.q_target(following[idx]).squeeze(1),
        )

    @torch.no_grad()
    def __call__(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``Q(s, a)`` of each row ``(n,)``."""
        return self.q(self._in(obs, actions)).squeeze(1).numpy().astype(np.float64)


def greedy_actions(agent: Any, observations: np.ndarray, batch: int = 4096) -> np.ndarray:
    """``agent``'s deterministic actions ``(n, *action_shape)`` for Box actions, in the space's units."""
    return np.concatenate(
        [
            np.asarray(agent.act(observations[i : i + batch], deterministic=True), dtype=np.float64).reshape(
                len(observations[i : i + batch]), -1
            )
            for i in range(0, len(observations), batch)
        ]
    )


def _needs_log_densities(dataset: Dataset) -> None:
    if dataset.log_probs is None:
        raise DatasetError(
            f"off-policy evaluation for the Box actions {dataset.action_space} needs the behaviour's log-density of "
            "each logged action (the dataset's log_probs): record the data with an agent that logs them (PPO, A2C: "
            "Session(..., record=path)) or pass log_probs= to wb.Dataset.from_arrays"
        )


class OffPolicyEvaluator:
    """Estimates for a changing policy on fixed held-out episodes: the behaviour probabilities are
    computed once, the FQE model is warm-started from one call to the next (what a session uses to
    plot the estimates while an offline agent trains)."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        gamma: float = 0.99,
        fqe_steps: int = 2000,
        n_bootstrap: int = 200,
        behaviour_steps: int = 1000,
        seed: int = 0,
        bandwidth: float = 0.2,
    ) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"OffPolicyEvaluator needs a wb.Dataset, got {type(dataset).__name__}")
        _check_evaluation("OffPolicyEvaluator", gamma, fqe_steps, n_bootstrap, behaviour_steps, seed, bandwidth)
        _check_action_space(dataset)
        self.dataset, self.gamma, self.fqe_steps, self.n_bootstrap = dataset, float(gamma), int(fqe_steps), n_bootstrap
        self.seed, self.bandwidth = seed, float(bandwidth)
        obs_dim = int(np.prod(dataset.observations.shape[1:]))
        if not dataset.discrete:  # Box actions: FQE with the action as an input, kernel-weighted DR
            _needs_log_densities(dataset)
            self.behaviour = None
            self.fqe: Any = ContinuousFittedQEvaluation(obs_dim, dataset.action_space, gamma=gamma, seed=seed)
            return
        self.behaviour = behaviour_probabilities(dataset, steps=behaviour_steps, seed=seed)
        self.fqe = FittedQEvaluation(
            dataset.observations.shape[1],
            int(dataset.action_space.n),  # type: ignore[attr-defined]
            gamma=gamma,
            seed=seed,
        )

    def __call__(
        self, policy: Any | Callable[[np.ndarray], np.ndarray], fqe_steps: int | None = None
    ) -> dict[str, Estimate]:
        """Estimates for ``policy``: an agent (its greedy actions) or a function from observations
        to action probabilities ``(n, n_actions)`` (Box actions: to actions ``(n, *action_shape)``)."""
        if fqe_steps is not None:
            _check("OffPolicyEvaluator", {"fqe_steps": fqe_steps})
        ds = self.dataset
        steps = self.fqe_steps if fqe_steps is None else fqe_steps
        if not ds.discrete:
            act = policy if not hasattr(policy, "act") else (lambda o: greedy_actions(policy, o))
            pi = np.asarray(act(ds.observations), dtype=np.float64).reshape(len(ds), -1)
            pi_next = np.asarray(act(ds.next_observations), dtype=np.float64).reshape(len(ds), -1)
            self.fqe.fit(ds, pi_next, steps=steps)
            return estimate_continuous(
                ds,
                pi,
                ds.log_probs,  # type: ignore[arg-type]
                self.fqe(ds.observations, ds.actions),
                self.fqe(ds.observations, pi),
                self.fqe(ds.next_observations, pi_next),
                gamma=self.gamma,
                bandwidth=self.bandwidth,
                n_bootstrap=self.n_bootstrap,
                seed=self.seed,
            )
        probs_of = policy if not hasattr(policy, "act") else (lambda o: greedy_probabilities(policy, o))
        pi = np.asarray(probs_of(ds.observations), dtype=np.float64)
        pi_next = np.asarray(probs_of(ds.next_observations), dtype=np.float64)
        self.fqe.fit(ds, pi_next, steps=steps)
        return estimate(
            ds,
            pi,
            self.behaviour,  # type: ignore[arg-type]
            self.fqe(ds.observations),
            pi_next,
            self.fqe(ds.next_observations),
            gamma=self.gamma,
            n_bootstrap=self.n_bootstrap,
            seed=self.seed,
        )


def evaluate_offline(
    agent: Any,
    dataset: Dataset,
    *,
    gamma: float = 0.99,
    fqe_steps: int = 5000,
    n_bootstrap: int = 200,
    behaviour_steps: int = 1000,
    seed: int = 0,
    bandwidth: float = 0.2,
) -> dict[str, Estimate]:
    """Off-policy estimates of ``agent``'s value (its deterministic policy) from the logged
    episodes of ``dataset`` (use episodes it did not train on): a dict ``{"ips", "wis", "dm",
    "dr", "sdr"}`` of :class:`Estimate` (value and bootstrap interval), each an estimate of the
    expected ``gamma``-discounted return from the logged start states; see ``workbench.offline.ope``.
    Without the behaviour's ``log_probs`` in the dataset a behaviour model is fitted first
    (``behaviour_steps`` gradient steps). For Box actions ``{"dm", "dr", "sdr"}``, with the dataset's
    ``log_probs`` as the behaviour's log-densities (required) and the target's deterministic action
    smoothed by a Gaussian kernel of ``bandwidth`` times each dimension's half range.

    Every argument is checked at the call: ``gamma`` in [0, 1], ``fqe_steps`` and
    ``behaviour_steps`` integers >= 0, ``n_bootstrap`` an integer from 0 to :data:`MAX_BOOTSTRAP`,
    ``seed`` an integer >= 0; a bad one is an ``ArgumentError`` (a ``ValueError`` and a
    ``TypeError``) naming it, its value and what is allowed."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"evaluate_offline needs a wb.Dataset, got {type(dataset).__name__}")
    try:  # a wb agent, or any policy with act(obs, deterministic=True) and action_space
        agent.act, agent.action_space  # noqa: B018
    except AttributeError:
        raise TypeError(f"evaluate_offline needs an agent such as wb.BCQ(...), got {type(agent).__name__}") from None
    _check_evaluation("evaluate_offline", gamma, fqe_steps, n_bootstrap, behaviour_steps, seed, bandwidth)
    _check_action_space(dataset)
    if (
        dataset.discrete
        and agent.action_space != dataset.action_space
        and getattr(agent.action_space, "n", None) != getattr(dataset.action_space, "n", -1)
    ):
        raise DatasetError(
            f"the agent's action space {agent.action_space} differs from the dataset's {dataset.action_space}"
        )
    if not dataset.discrete and getattr(agent.action_space, "shape", None) != dataset.action_space.shape:
        raise DatasetError(
            f"the agent's action space {agent.action_space} differs from the dataset's {dataset.action_space}"
        )
    obs_shape = agent.obs_shape if isinstance(agent, Agent) else None
    if obs_shape is not None and tuple(obs_shape) != dataset.observations.shape[1:]:
        raise DatasetError(
            f"the dataset's observations have shape {dataset.observations.shape[1:]}, the agent expects "
            f"{tuple(obs_shape)}: evaluate on episodes of the env the agent was built for"
        )
    evaluator = OffPolicyEvaluator(
        dataset,
        gamma=gamma,
        fqe_steps=fqe_steps,
        n_bootstrap=n_bootstrap,
        behaviour_steps=behaviour_steps,
        seed=seed,
        bandwidth=bandwidth,
    )
    return evaluator(agent)


def _check_action_space(dataset: Dataset) -> None:
    from gymnasium import spaces

    if not isinstance(dataset.action_space, spaces.Discrete | spaces.Box):
        raise DatasetError(
            f"off-policy evaluation needs Discrete or Box actions; this dataset has {dataset.action_space}"
        )
