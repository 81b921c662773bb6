"""A PettingZoo ParallelEnv on Ray (``backend="ray"``): each actor holds its own copies, built from the
user's factory, and steps them for the learner's actions; on a Ray this module starts."""

from __future__ import annotations

import functools

import cloudpickle
import numpy as np
import pytest

import workbench as wb
from workbench.envs import multiagent_toy
from workbench.envs.multiagent_toy import MatchTarget

ray = pytest.importorskip("ray")

from test_ray import local_ray  # noqa: E402, F401  (a local Ray for this module, none of it left after)

pytestmark = pytest.mark.ray

cloudpickle.register_pickle_by_value(multiagent_toy)  # the actors never import the workbench package for it

SMALL = {"n_steps": 16, "batch_size": 32, "n_epochs": 4, "net_arch": (16,), "learning_rate": 3e-3}


def test_ray_actors_step_parallel_env_copies_as_local_workers_do():
    factory = functools.partial(MatchTarget, 3, 6, masks=True, leave=True)  # raises on a masked action
    runs = []
    for backend in ("local", "ray"):
        agent = wb.IPPO(factory, seed=0, **SMALL)
        session = wb.Session(agent, factory, seed=0, num_workers=2, backend=backend)
        session.run(steps=2 * 3 * 16)
        assert agent.num_updates == 1 and agent._alive.min() == 0
        runs.append(session.signals["episode_reward"].values)
        runs.append(session.signals["episode_reward/agent_2"].values)
    assert len(runs[0]) == 4 and all(np.array_equal(a, b) for a, b in zip(runs[:2], runs[2:]))
    with pytest.raises(ValueError, match="the learner acts for every agent"):
        wb.Session(wb.IPPO(factory, **SMALL), factory, num_workers=2, backend="ray", ray_acting="workers").run(steps=8)
