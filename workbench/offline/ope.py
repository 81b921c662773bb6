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
actions) fitted here. Discrete actions only; the target policy is the agent's deterministic one.
The interval resamples episodes (the fitted Q-model is kept fixed across resamples).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..agents.networks import make_adam, mlp
from ..validation import check_arguments, integer, layer_widths, number, optional
from .datasets import Dataset, DatasetError

__all__ = [
    "ESTIMATORS",
    "MAX_BOOTSTRAP",
    "Estimate",
    "FittedQEvaluation",
    "OffPolicyEvaluator",
    "evaluate_offline",
    "estimate",
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
}


def _check(owner: str, values: dict[str, Any], **special: Any) -> None:
    """Check ``values`` (argument name -> value) against :data:`_CHECKS` (or ``special``)."""
    check_arguments(owner, values, {name: special.get(name, _CHECKS[name]) for name in values})


def _standardizer(obs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    mean = torch.as_tensor(obs.mean(0), dtype=torch.float32)
    std = torch.as_tensor(obs.std(0) + 1e-6, dtype=torch.float32)
    return mean, std


class FittedQEvaluation:
    """Fitted Q evaluation (Le et al. 2019): the Q-function of a fixed target policy, learned from
    logged transitions by regression onto ``r + gamma * Q_target(s', pi(s'))``. ``fit`` may be
    called again (warm start), e.g. as the target policy changes during training.

    The target network is refreshed every ``target_every`` steps: each refresh is one Bellman
    backup, and a value with horizon ``1 / (1 - gamma)`` needs several hundred of them (after ``k``
    backups a constant reward's value reaches ``1 - gamma**k`` of its limit: 63% at k=100 with
    gamma 0.99). Every 10 steps, 5000 steps make 500 backups (99%)."""

    def __init__(self, obs_dim: int, n_actions: int, *, gamma: float = 0.99, net_arch: tuple[int, ...] = (64, 64),
                 lr: float = 1e-3, batch_size: int = 256, target_every: int = 10, seed: int = 0) -> None:
        _check("FittedQEvaluation", dict(obs_dim=obs_dim, n_actions=n_actions, gamma=gamma, net_arch=net_arch, lr=lr,
                                         batch_size=batch_size, target_every=target_every, seed=seed))
        self.gamma, self.batch_size, self.target_every = float(gamma), int(batch_size), int(target_every)
        self.n_actions = int(n_actions)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.q = mlp(obs_dim, net_arch, n_actions)
            self.q_target = mlp(obs_dim, net_arch, n_actions)
        self.q_target.load_state_dict(self.q.state_dict())
        self.optimizer = make_adam(self.q.parameters(), lr=lr)
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self._norm: tuple[torch.Tensor, torch.Tensor] | None = None

    def _in(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        assert self._norm is not None
        return (torch.as_tensor(obs, dtype=torch.float32) - self._norm[0]) / self._norm[1]

    def fit(self, dataset: Dataset, next_probs: np.ndarray, steps: int = 2000) -> FittedQEvaluation:
        """``steps`` gradient steps on ``dataset``, where ``next_probs[i]`` are the target policy's
        action probabilities in ``next_observations[i]``."""
        _check("FittedQEvaluation.fit", {"steps": steps})
        if self._norm is None:
            self._norm = _standardizer(dataset.observations)
        obs, next_obs = self._in(dataset.observations), self._in(dataset.next_observations)
        actions = torch.as_tensor(dataset.actions, dtype=torch.long)
        rewards = torch.as_tensor(dataset.rewards)
        alive = torch.as_tensor(1.0 - dataset.terminated.astype(np.float32))
        pi_next = torch.as_tensor(next_probs, dtype=torch.float32)
        n = len(dataset)
        # A return is bounded by the reward range over 1 - gamma: clipping the targets there keeps the
        # regression from diverging where the target policy leaves the data (the deadly triad).
        horizon = 1.0 / max(1.0 - self.gamma, 1e-3)
        low = min(0.0, float(dataset.rewards.min())) * horizon
        high = max(0.0, float(dataset.rewards.max())) * horizon
        for _ in range(int(steps)):
            idx = torch.from_numpy(self.rng.integers(0, n, size=self.batch_size))
            with torch.no_grad():
                v_next = (self.q_target(next_obs[idx]) * pi_next[idx]).sum(-1)
                target = (rewards[idx] + self.gamma * alive[idx] * v_next).clamp(low, high)
            q = self.q(obs[idx]).gather(1, actions[idx].unsqueeze(1)).squeeze(1)
            loss = F.smooth_l1_loss(q, target)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.steps += 1
            if self.steps % self.target_every == 0:
                self.q_target.load_state_dict(self.q.state_dict())
        return self

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
        [np.asarray(agent.act(observations[i : i + batch], deterministic=True)).reshape(-1)
         for i in range(0, len(observations), batch)]
    ).astype(np.int64)
    out = np.zeros((len(observations), n_actions))
    out[np.arange(len(observations)), actions] = 1.0
    return out


def _per_episode(dataset: Dataset, rho: np.ndarray, q: np.ndarray, v: np.ndarray, v_next: np.ndarray,
                 gamma: float) -> dict[str, np.ndarray]:
    """Per-episode terms of each estimator; ``wis`` as padded matrices (weights, weighted rewards)."""
    bounds = dataset.episode_bounds()
    longest = max(b - a for a, b in bounds)
    n_ep = len(bounds)
    weights = np.zeros((n_ep, longest))
    rewards = np.zeros((n_ep, longest))
    ips, dm, dr, sdr = (np.zeros(n_ep) for _ in range(4))
    acted_q = q[np.arange(len(q)), dataset.actions]
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
    _check("estimate", dict(gamma=gamma, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed),
           seed=optional(integer(min=0)))
    n = len(dataset)
    for name, arr in (("target_probs", target_probs), ("q_values", q_values),
                      ("next_target_probs", next_target_probs), ("next_q_values", next_q_values)):
        if len(arr) != n:
            raise DatasetError(f"estimate: {name} has {len(arr)} rows, the dataset {n}")
    if len(behaviour_probs) != n:
        raise DatasetError(f"estimate: behaviour_probs has {len(behaviour_probs)} rows, the dataset {n}")
    if (behaviour_probs <= 0).any():
        raise DatasetError("estimate: a behaviour probability is 0: the logged action could not have been taken")
    pi_taken = target_probs[np.arange(n), dataset.actions]
    rho = pi_taken / behaviour_probs
    v = (target_probs * q_values).sum(-1)
    v_next = (next_target_probs * next_q_values).sum(-1)
    terms = _per_episode(dataset, rho, q_values, v, v_next, gamma)
    point = {k: float(terms[k].mean()) for k in ("ips", "dm", "dr", "sdr")}
    point["wis"] = _wis(terms["w"], terms["r"], gamma)
    rng = np.random.default_rng(seed)
    n_ep = len(terms["ips"])
    samples: dict[str, list[float]] = {k: [] for k in ESTIMATORS}
    for _ in range(int(n_bootstrap)):
        idx = rng.integers(0, n_ep, size=n_ep)
        for k in ("ips", "dm", "dr", "sdr"):
            samples[k].append(float(terms[k][idx].mean()))
        samples["wis"].append(_wis(terms["w"][idx], terms["r"][idx], gamma))
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for k in ESTIMATORS:
        if samples[k]:
            low, high = np.quantile(samples[k], [alpha, 1.0 - alpha])
        else:
            low = high = point[k]
        out[k] = Estimate(point[k], float(low), float(high))
    return out


class OffPolicyEvaluator:
    """Estimates for a changing policy on fixed held-out episodes: the behaviour probabilities are
    computed once, the FQE model is warm-started from one call to the next (what a session uses to
    plot the estimates while an offline agent trains)."""

    def __init__(self, dataset: Dataset, *, gamma: float = 0.99, fqe_steps: int = 2000,
                 n_bootstrap: int = 200, behaviour_steps: int = 1000, seed: int = 0) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"OffPolicyEvaluator needs a wb.Dataset, got {type(dataset).__name__}")
        _check("OffPolicyEvaluator", dict(gamma=gamma, fqe_steps=fqe_steps, n_bootstrap=n_bootstrap,
                                          behaviour_steps=behaviour_steps, seed=seed))
        if not dataset.discrete:
            raise DatasetError(
                f"off-policy evaluation here needs Discrete actions; this dataset has {dataset.action_space}"
            )
        self.dataset, self.gamma, self.fqe_steps, self.n_bootstrap = dataset, float(gamma), int(fqe_steps), n_bootstrap
        self.seed = seed
        self.behaviour = behaviour_probabilities(dataset, steps=behaviour_steps, seed=seed)
        self.fqe = FittedQEvaluation(dataset.observations.shape[1], int(dataset.action_space.n),  # type: ignore[attr-defined]
                                     gamma=gamma, seed=seed)

    def __call__(
        self, policy: Any | Callable[[np.ndarray], np.ndarray], fqe_steps: int | None = None
    ) -> dict[str, Estimate]:
        """Estimates for ``policy``: an agent (its greedy actions) or a function from observations
        to action probabilities ``(n, n_actions)``."""
        if fqe_steps is not None:
            _check("OffPolicyEvaluator", {"fqe_steps": fqe_steps})
        ds = self.dataset
        probs_of = policy if not hasattr(policy, "act") else (lambda o: greedy_probabilities(policy, o))
        pi = np.asarray(probs_of(ds.observations), dtype=np.float64)
        pi_next = np.asarray(probs_of(ds.next_observations), dtype=np.float64)
        self.fqe.fit(ds, pi_next, steps=self.fqe_steps if fqe_steps is None else fqe_steps)
        return estimate(ds, pi, self.behaviour, self.fqe(ds.observations), pi_next, self.fqe(ds.next_observations),
                        gamma=self.gamma, n_bootstrap=self.n_bootstrap, seed=self.seed)


def evaluate_offline(
    agent: Any,
    dataset: Dataset,
    *,
    gamma: float = 0.99,
    fqe_steps: int = 5000,
    n_bootstrap: int = 200,
    behaviour_steps: int = 1000,
    seed: int = 0,
) -> dict[str, Estimate]:
    """Off-policy estimates of ``agent``'s value (its deterministic policy) from the logged
    episodes of ``dataset`` (use episodes it did not train on): a dict ``{"ips", "wis", "dm",
    "dr", "sdr"}`` of :class:`Estimate` (value and bootstrap interval), each an estimate of the
    expected ``gamma``-discounted return from the logged start states. Discrete actions only;
    see ``workbench.offline.ope``. Without the behaviour's ``log_probs`` in the dataset a behaviour model
    is fitted first (``behaviour_steps`` gradient steps).

    Every argument is checked at the call: ``gamma`` in [0, 1], ``fqe_steps`` and
    ``behaviour_steps`` integers >= 0, ``n_bootstrap`` an integer from 0 to :data:`MAX_BOOTSTRAP`,
    ``seed`` an integer >= 0; a bad one is an ``ArgumentError`` (a ``ValueError`` and a
    ``TypeError``) naming it, its value and what is allowed."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"evaluate_offline needs a wb.Dataset, got {type(dataset).__name__}")
    if not hasattr(agent, "act") or not hasattr(agent, "action_space"):
        raise TypeError(f"evaluate_offline needs an agent such as wb.BCQ(...), got {type(agent).__name__}")
    _check("evaluate_offline", dict(gamma=gamma, fqe_steps=fqe_steps, n_bootstrap=n_bootstrap,
                                    behaviour_steps=behaviour_steps, seed=seed))
    if not dataset.discrete:
        raise DatasetError(
            f"off-policy evaluation here needs Discrete actions; this dataset has {dataset.action_space}"
        )
    if agent.action_space != dataset.action_space and getattr(agent.action_space, "n", None) != getattr(
        dataset.action_space, "n", -1
    ):
        raise DatasetError(
            f"the agent's action space {agent.action_space} differs from the dataset's {dataset.action_space}"
        )
    obs_shape = getattr(agent, "obs_shape", None)
    if obs_shape is not None and tuple(obs_shape) != dataset.observations.shape[1:]:
        raise DatasetError(
            f"the dataset's observations have shape {dataset.observations.shape[1:]}, the agent expects "
            f"{tuple(obs_shape)}: evaluate on episodes of the env the agent was built for"
        )
    evaluator = OffPolicyEvaluator(dataset, gamma=gamma, fqe_steps=fqe_steps, n_bootstrap=n_bootstrap,
                                   behaviour_steps=behaviour_steps, seed=seed)
    return evaluator(agent)
