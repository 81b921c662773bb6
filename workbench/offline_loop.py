"""A session that learns from a dataset instead of an env (``wb.Session(agent, dataset=ds)``).

The same run as the env loop (status, pause/resume/stop, signals, periodic evaluation on an env,
checkpoints, ``stop_when``), but each step is one gradient step of an offline agent
(``workbench.agents.offline``) on its dataset, and, with ``ope_every``, the off-policy estimates of
``workbench.ope`` on held-out episodes become signals (``ope_ips``, ``ope_wis``, ``ope_dm``,
``ope_dr``, ``ope_sdr``, with ``ope_dr_low``/``ope_dr_high`` and ``ope_sdr_low``/``ope_sdr_high``
for their intervals). ``stop_when`` is asked after every evaluation and estimate.
"""

from __future__ import annotations

import time
from typing import Any

from .datasets import Dataset
from .envs import as_env_source
from .validation import LossWatch

__all__ = ["DatasetSource", "attach_dataset", "offline_source", "run_offline"]

_HOLDOUT = 0.1  # the fraction of episodes held out for off-policy evaluation when none are given


class DatasetSource:
    """Stands where an env source would for a session with no env (name, no copies)."""

    can_copy = False
    instance = None
    env_id = None
    name = "dataset"

    def spaces(self) -> tuple[Any, Any]:  # pragma: no cover - never asked: the agent has its spaces
        raise TypeError("a dataset session has no env")


def offline_source(agent: Any, env: Any, dataset: Any, eval_env: Any) -> Any:
    """What stands as the env of an offline agent's session (its evaluation env when there is one)."""
    if env is not None:
        raise TypeError(
            f"{agent.algorithm} learns from a dataset, not an env: pass dataset=ds (and eval_env=env to "
            "evaluate on an env), e.g. wb.Session(agent, dataset=ds, eval_env='CartPole-v1', eval_every=1000)"
        )
    if dataset is None and agent.data is None:
        raise TypeError(f"{agent.algorithm} needs a dataset: wb.Session(agent, dataset=wb.Dataset.load(path))")
    if eval_env is not None:
        return as_env_source(eval_env)
    return agent.env_source if agent.env_source is not None else DatasetSource()


def attach_dataset(agent: Any, dataset: Any, ope_every: int | None, ope_dataset: Any) -> Dataset | None:
    """Give ``dataset`` to the agent (an offline agent learns from it, a replay agent starts with it
    in memory); returns the episodes off-policy evaluation will use (None without ``ope_every``)."""
    if dataset is not None and not isinstance(dataset, Dataset):
        raise TypeError(f"Session dataset= needs a wb.Dataset, got {type(dataset).__name__}")
    if ope_dataset is not None and not isinstance(ope_dataset, Dataset):
        raise TypeError(f"Session ope_dataset= needs a wb.Dataset, got {type(ope_dataset).__name__}")
    offline = getattr(agent, "offline", False)
    if ope_every is not None and not offline:
        raise ValueError("ope_every estimates an offline agent's value while it learns from dataset=; "
                         "this agent learns online")
    if dataset is not None and not hasattr(agent, "load_dataset"):
        raise TypeError(f"{agent.algorithm} has no replay memory to start from a dataset; use BC, BCQ, CQL, IQL "
                        "or a replay agent (DQN, SAC...)")
    held_out = ope_dataset
    if ope_every is not None and held_out is None:
        if dataset is None:
            raise ValueError("ope_every needs the episodes to estimate on: pass dataset= or ope_dataset=")
        dataset, held_out = dataset.split(_HOLDOUT, seed=0)
    if dataset is not None:
        agent.load_dataset(dataset)
    return held_out


def run_offline(session: Any, target_steps: int) -> str:
    """The offline loop: gradient steps until ``target_steps``; returns the final status."""
    agent = session.agent
    session._begin_loop()
    agent.train()
    agent.total_timesteps = max(target_steps, agent.total_timesteps or 0)
    if not agent.ready():
        raise RuntimeError(f"{agent.algorithm} has no dataset to learn from: pass dataset= to the session")
    losses = LossWatch(agent.algorithm)
    while session.steps < target_steps:
        if session._between_steps():  # live edits (session.set), pause and stop as in the env loop
            return "stopped"
        session._update_once(losses)
        asked = session._after_step()  # steps_per_second, evaluation, estimates, checkpoint
        if asked and session.stop_when is not None and session._ask_stop_when():
            session.stop_reason = "stop_when"
            break
    return "finished"


def record_estimates(session: Any) -> dict[str, Any]:
    """Run the off-policy estimators on the held-out episodes and record them as signals."""
    from .ope import OffPolicyEvaluator

    if session._ope is None:
        gamma = float(getattr(session.agent.config, "gamma", 0.99))
        session._ope = OffPolicyEvaluator(session.ope_dataset, gamma=gamma, fqe_steps=1000, n_bootstrap=100)
    session._where = ("off-policy evaluation", time.monotonic())
    agent = session.agent
    was_training = agent.training
    agent.training = False
    try:
        estimates = session._ope(agent)
    finally:
        agent.training = was_training
        session._where = None
    now = session.elapsed
    for name, est in estimates.items():
        session.signals.record(f"ope_{name}", session.steps, est.value, now)
        if name in ("dr", "sdr"):
            session.signals.record(f"ope_{name}_low", session.steps, est.low, now)
            session.signals.record(f"ope_{name}_high", session.steps, est.high, now)
    return estimates
