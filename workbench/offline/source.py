"""A session that learns from a dataset instead of an env (``wb.Session(agent, dataset=ds)``): what
stands as its env, and handing the dataset to the agent.

The run itself is the one of every session (status, pause/resume/stop, signals, periodic
evaluation on an env, checkpoints, ``stop_when``); its loop is ``workbench.run.loops.OfflineLoop``,
where each step is one gradient step of an offline agent (``workbench.agents.offline``) on its
dataset, and, with ``ope_every``, the off-policy estimates of ``workbench.offline.ope`` on held-out episodes
become signals (``workbench.run.periodic``). ``stop_when`` is asked after every evaluation and estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..envs.core import as_env_source, describe_space
from .datasets import Dataset

if TYPE_CHECKING:
    from ..agents.contract import Agent

__all__ = ["DatasetSource", "attach_dataset", "offline_source"]

_HOLDOUT = 0.1  # the fraction of episodes held out for off-policy evaluation when none are given


class DatasetSource:
    """Stands where an env source would for a session with no env (name, no copies)."""

    can_copy = False
    instance = None
    env_id = None
    name = "dataset"

    def spaces(self) -> tuple[Any, Any]:  # pragma: no cover - never asked: the agent has its spaces
        raise TypeError("a dataset session has no env")


def offline_source(agent: Agent, env: Any, dataset: Any, eval_env: Any) -> Any:
    """What stands as the env of an offline agent's session (its evaluation env when there is one)."""
    if env is not None:
        raise TypeError(
            f"{agent.algorithm} learns from a dataset, not an env: pass dataset=ds (and eval_env=env to "
            "evaluate on an env), e.g. wb.Session(agent, dataset=ds, eval_env='CartPole-v1', eval_every=1000)"
        )
    if dataset is None and agent.data is None:
        raise TypeError(f"{agent.algorithm} needs a dataset: wb.Session(agent, dataset=wb.Dataset.load(path))")
    if eval_env is not None:
        source = as_env_source(eval_env)
        for kind, env_space, agent_space in zip(
            ("observation", "action"), source.spaces(), (agent.observation_space, agent.action_space), strict=True
        ):
            if env_space != agent_space:
                raise ValueError(
                    f"Session got eval_env={eval_env!r}, whose {kind} space {describe_space(env_space)} differs from "
                    f"the {agent.algorithm} agent's {describe_space(agent_space)} (its dataset's): evaluate on an env "
                    "of the dataset's spaces"
                )
        return source
    return agent.env_source if agent.env_source is not None else DatasetSource()


def attach_dataset(agent: Agent, dataset: Any, ope_every: int | None, ope_dataset: Any) -> Dataset | None:
    """Give ``dataset`` to the agent (an offline agent learns from it, a replay agent starts with it
    in memory); returns the episodes off-policy evaluation will use (None without ``ope_every``)."""
    if dataset is not None and not isinstance(dataset, Dataset):
        raise TypeError(f"Session dataset= needs a wb.Dataset, got {type(dataset).__name__}")
    if ope_dataset is not None and not isinstance(ope_dataset, Dataset):
        raise TypeError(f"Session ope_dataset= needs a wb.Dataset, got {type(ope_dataset).__name__}")
    offline = agent.offline
    if ope_every is not None and not offline:
        raise ValueError(
            "ope_every estimates an offline agent's value while it learns from dataset=; this agent learns online"
        )
    if dataset is not None and not agent.takes_dataset:
        raise TypeError(
            f"{agent.algorithm} has no replay memory to start from a dataset; use BC, BCQ, CQL, IQL "
            "or a replay agent (DQN, SAC...)"
        )
    held_out = ope_dataset
    if ope_every is not None and held_out is None:
        if dataset is None:
            raise ValueError("ope_every needs the episodes to estimate on: pass dataset= or ope_dataset=")
        dataset, held_out = dataset.split(_HOLDOUT, seed=0)
    if dataset is not None:
        agent.load_dataset(dataset)
    return held_out
