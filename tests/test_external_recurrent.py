"""RecurrentPPO (LSTM, GRU, GTrXL) in an external session: each episode keeps its own memory in its
slot's row, an episode's first act starts it from zeros, and the slots' rollouts train."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.envs.testing import RememberTheCue

OBS = spaces.Box(-5.0, 5.0, (2,), np.float32)
ACT = spaces.Box(-1.0, 1.0, (1,), np.float32)
SMALL = dict(n_envs=2, n_steps=8, batch_size=16, n_epochs=1, net_arch=(16,), lstm_hidden_size=8)
MEMORIES = {
    "lstm": {},
    "gru": {"memory": "gru"},
    "gtrxl": {"memory": "gtrxl", "memory_length": 4, "attention_heads": 2},
}
STEPS, A_ENDS_AT = 12, 5  # episode "a" is truncated after its 6th step; a new "a" starts in the same slot


def _agent(memory: str) -> wb.RecurrentPPO:
    return wb.RecurrentPPO(observation_space=OBS, action_space=ACT, seed=0, **SMALL, **MEMORIES[memory])


def _actions_of_a(memory: str, a_offset: float = 0.0, b_offset: float = 0.0, session=None) -> np.ndarray:
    """Episodes "a" and "b" act in turn (one act each per round, one slot each); the actions "a" got.
    ``a_offset`` shifts the observations of the first "a" episode, ``b_offset`` every "b" observation.
    ``session``: what to call act and feedback on (a new external session's by default)."""
    session = session or wb.Session.external(_agent(memory), seed=0)
    rng = np.random.default_rng(0)
    obs_a = rng.normal(size=(STEPS + 1, 2)).astype(np.float32)
    obs_a[: A_ENDS_AT + 1] += a_offset
    obs_b = (rng.normal(size=(STEPS + 1, 2)) + b_offset).astype(np.float32)
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # feedback before start() is queued for the first run, with a warning
        for t in range(STEPS):
            got.append(session.act(obs_a[t], episode="a"))
            session.act(obs_b[t], episode="b")
            session.feedback(0.0, obs_a[t + 1], False, t == A_ENDS_AT, episode="a")
            session.feedback(0.0, obs_b[t + 1], False, False, episode="b")
    return np.asarray(got)


@pytest.mark.parametrize("memory", list(MEMORIES))
def test_an_episode_keeps_its_own_memory_whatever_the_others_see(memory):
    # Box actions are the policy's mean plus noise drawn in the same order in both runs: they are equal
    # exactly when episode a's memory is untouched by what episode b observed.
    np.testing.assert_array_equal(_actions_of_a(memory), _actions_of_a(memory, b_offset=3.0))


@pytest.mark.parametrize("memory", list(MEMORIES))
def test_a_new_episode_in_a_slot_starts_from_a_zero_memory(memory):
    base, other = _actions_of_a(memory), _actions_of_a(memory, a_offset=2.0)
    # The first "a" episode saw other observations: its actions differ, its memory carried them...
    assert not np.array_equal(base[: A_ENDS_AT + 1], other[: A_ENDS_AT + 1])
    # ... and the next "a" episode in the same slot starts afresh, so from then on they agree.
    np.testing.assert_array_equal(base[A_ENDS_AT + 1 :], other[A_ENDS_AT + 1 :])


def test_an_external_recurrent_session_learns_from_its_slots():
    env = RememberTheCue()
    agent = wb.RecurrentPPO(
        observation_space=env.observation_space, action_space=env.action_space, seed=0, **{**SMALL, "n_envs": 2}
    )
    session = wb.Session.external(agent, seed=0, max_lag=16)
    session.start(steps=64)
    envs = {name: RememberTheCue() for name in ("x", "y")}
    obs = {name: e.reset(seed=i)[0] for i, (name, e) in enumerate(envs.items())}
    while session.is_alive:
        for name, e in envs.items():
            action = session.act(obs[name], episode=name)
            obs[name], reward, terminated, truncated, _ = e.step(action)
            session.feedback(reward, obs[name], terminated, truncated, episode=name)
            if terminated or truncated:
                obs[name] = e.reset()[0]
    session.wait()
    assert agent.num_updates > 0 and np.isfinite(session.signals["loss"].last)


def test_decide_rows_are_checked():
    agent = _agent("lstm")
    obs = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match=r"rows=\[0, 0\].*distinct env indices in \[0, 2\)"):
        agent.decide(obs, rows=[0, 0])
    with pytest.raises(ValueError, match=r"rows=\[2\].*one env index per observation"):
        agent.decide(obs, rows=[2])
    with pytest.raises(ValueError, match=r"rows=\[0, 5\].*\[0, 2\)"):
        agent.decide(obs, rows=[0, 5])
    # Deciding for env 1 alone moves env 1's memory only: env 0 then acts as if env 1 had not.
    fresh, moved = _agent("lstm").eval(), _agent("lstm").eval()
    moved.decide(np.ones((1, 2), np.float32), rows=[1])
    first = np.full((1, 2), 0.5, np.float32)
    np.testing.assert_array_equal(fresh.decide(first, rows=[0]).actions, moved.decide(first, rows=[0]).actions)


def test_a_served_recurrent_session_keeps_each_clients_memory():
    session = wb.Session.external(_agent("gtrxl"), seed=0)
    with session.serve() as server:
        remote = wb.RemoteSession(server.url)
        try:
            served = _actions_of_a("gtrxl", b_offset=3.0, session=remote)
        finally:
            remote.close()
    # Over HTTP and JSON, the actions of the same calls in process (to JSON's float precision).
    np.testing.assert_allclose(served.reshape(-1), _actions_of_a("gtrxl").reshape(-1), rtol=1e-6, atol=1e-7)


def test_deciding_for_some_envs_keeps_the_others_memory_with_composite_actions():
    composite = spaces.Dict({"kind": spaces.Discrete(3), "power": spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def agent():
        return wb.RecurrentPPO(observation_space=OBS, action_space=composite, seed=0, **SMALL, memory="gru")

    fresh, moved = agent(), agent()
    moved.decide(np.ones((1, 2), np.float32), rows=[1])  # env 1 alone: a different draw, env 0's memory untouched
    fresh.decide(np.full((1, 2), 9.0, np.float32), rows=[1])
    first = np.full((1, 2), 0.5, np.float32)
    np.testing.assert_array_equal(
        fresh.decide(first, deterministic=True, rows=[0]).actions,
        moved.decide(first, deterministic=True, rows=[0]).actions,
    )
    # And env 1's memory did move: the same observation there now gives other outputs in the two agents.
    again = np.full((1, 2), 0.25, np.float32)
    assert not np.array_equal(
        fresh.decide(again, deterministic=True, rows=[1]).actions,
        moved.decide(again, deterministic=True, rows=[1]).actions,
    )
