"""Multi-agent envs checked at the door (issue 49, class 3): AEC envs, agent sets, and each step's dicts."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.envs.multiagent_toy import MatchTarget

SMALL = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "net_arch": (8,)}


def _aec_envs():
    pytest.importorskip("pettingzoo")
    from pettingzoo.classic import rps_v2
    from pettingzoo.utils.conversions import parallel_to_aec

    return [parallel_to_aec(MatchTarget(n_agents=2)), rps_v2.env()]  # neither is reset yet


@pytest.mark.parametrize("which", [0, 1], ids=["parallel_to_aec", "module_env"])
@pytest.mark.parametrize(
    "door",
    [
        lambda env: wb.PPO(env),
        lambda env: wb.IPPO(env),
        lambda env: wb.MAPPO(env),
        lambda env: wb.with_agent_ids(env),
        lambda env: wb.Session(wb.PPO(MatchTarget(n_agents=2)), env),
    ],
    ids=["PPO", "IPPO", "MAPPO", "with_agent_ids", "Session"],
)
def test_an_aec_env_is_refused_at_once_naming_aec_to_parallel(which, door):
    env = _aec_envs()[which]
    with pytest.raises(TypeError, match="aec_to_parallel"):
        door(env)


class _Twice(MatchTarget):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.possible_agents = ["a", "a"]


def test_duplicate_agent_names_are_refused():
    with pytest.raises(ValueError, match=r"\['a'\] more than once"):
        wb.PPO(_Twice())
    with pytest.raises(ValueError, match="more than once"):
        wb.Session(wb.PPO(MatchTarget(n_agents=2), **SMALL), _Twice())


class _Faulty(MatchTarget):
    """MatchTarget whose step (or reset) answer breaks the parallel API in one way."""

    def __init__(self, fault, **kwargs):
        super().__init__(n_agents=2, length=4, **kwargs)
        self.fault = fault

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        if self.fault == "stranger_at_reset":
            self.agents = [*self.agents, "stranger"]
            obs["stranger"] = obs["agent_0"]
        return obs, info

    def step(self, actions):
        obs, rew, term, trunc, info = super().step(actions)
        if self.fault == "reward_for_unknown":
            rew["ghost"] = 1.0
        elif self.fault == "missing_observation":
            obs.pop("agent_1")
        elif self.fault == "empty_terminations":
            term, trunc = {}, {}
        elif self.fault == "string_reward":
            rew["agent_0"] = "1"
        return obs, rew, term, trunc, info


@pytest.mark.parametrize(
    ("fault", "kind", "words"),
    [
        ("reward_for_unknown", ValueError, "rewards for \\['ghost'\\]"),
        ("missing_observation", ValueError, "no observation for the present agent\\(s\\) \\['agent_1'\\]"),
        (
            "empty_terminations",
            ValueError,
            "terminations \\{\\}, without the agent\\(s\\) that acted \\['agent_0', 'agent_1'\\]",
        ),
        ("string_reward", TypeError, "agent 'agent_0' the reward '1'"),
        ("stranger_at_reset", ValueError, "observations for \\['stranger'\\]: not in possible_agents"),
    ],
)
def test_a_step_that_breaks_the_parallel_api_is_refused_naming_the_agent(fault, kind, words):
    env = _Faulty(fault)
    session = wb.Session(wb.PPO(MatchTarget(n_agents=2), seed=0, **SMALL), env, seed=0)
    with pytest.raises(kind, match=words):
        session.run(steps=8)


class _Renamed(MatchTarget):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.possible_agents = ["x_0", "x_1"]


def test_an_agent_built_for_other_agents_is_refused_by_play_and_evaluation():
    agent = wb.IPPO(MatchTarget(n_agents=2, length=4), seed=0, **SMALL)
    with pytest.raises(ValueError, match="built for the agents"):
        agent.play(_Renamed(length=4), episodes=1)
    assert len(agent.play(MatchTarget(n_agents=2, length=4), episodes=1)) == 1
    env = MatchTarget(n_agents=2, length=4)
    session = wb.Session(agent, env, seed=0, eval_env=MatchTarget(n_agents=2, length=4))
    session.run(steps=8)
    assert 0.0 <= session.evaluate(episodes=1) <= 8.0  # IPPO evaluates on a ParallelEnv (it was refused)


def test_a_refused_act_for_one_agent_opens_no_episode_for_the_others():
    session = wb.Session.external(wb.PPO(MatchTarget(n_agents=2), seed=0, **SMALL))
    good = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="does not fit the observation space"):
        session.act({"agent_0": good, "agent_1": np.zeros(7, np.float32)}, episode="m")
    assert session.live_episodes == []
    actions = session.act({"agent_0": good, "agent_1": good}, episode="m")  # nobody awaits feedback
    assert set(actions) == {"agent_0", "agent_1"}
