"""RecurrentPPO's other memories (``memory="gru"`` and ``"gtrxl"``): their state's shape, the reset at an
episode start, the update's unroll equal to acting step by step, exact reopen mid-episode, refused
options, workers, and a memory task learned."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.memory_nets import GRUMemory, GTrXLMemory
from workbench.envs.testing import RememberTheCue

FAST = dict(n_envs=4, n_steps=16, batch_size=64, n_epochs=4, net_arch=(32,), lstm_hidden_size=16, learning_rate=3e-3)
GTRXL = dict(memory="gtrxl", memory_length=6, memory_layers=2, attention_heads=2)
MEMORIES = {"gru": dict(memory="gru"), "gtrxl": GTRXL}


def _agent(env="CartPoleNoVel-v1", **kw):
    return wb.RecurrentPPO(env, seed=0, **{**FAST, **kw})


def _memories() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [GRUMemory(3, 8), GTrXLMemory(3, 8, layers=2, heads=2, window=4)]


@pytest.mark.parametrize("memory", _memories(), ids=["gru", "gtrxl"])
def test_the_sequence_unroll_gives_what_acting_step_by_step_gave(memory):
    # Acting takes one step at a time; the update replays the rollout in one call, from the state
    # stored at its first step, with episodes starting inside it. Both must agree, state included.
    steps, batch = 13, 3
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(steps, batch, 3, generator=gen)
    starts = torch.zeros(steps, batch)
    starts[4, 0] = starts[9, 1] = starts[10, 0] = 1.0
    with torch.no_grad():
        _, state = memory(torch.randn(5, batch, 3, generator=gen), torch.zeros(batch, *memory.state_shape), starts[:5])
        first = state.clone()
        outs = []
        for t in range(steps):
            state = state * (1.0 - starts[t]).view(-1, 1, 1)  # begin_episode zeroes the state
            out, state = memory(x[t : t + 1], state, torch.zeros(1, batch))
            outs.append(out)
        whole, last = memory(x, first, starts)
    assert whole.shape == (steps, batch, 8) and last.shape == (batch, *memory.state_shape)
    torch.testing.assert_close(whole, torch.cat(outs), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last, state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("memory", _memories(), ids=["gru", "gtrxl"])
def test_after_an_episode_start_the_memory_forgets_the_steps_before(memory):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(7, 2, 3, generator=gen)
    with torch.no_grad():
        _, used = memory(torch.randn(6, 2, 3, generator=gen), torch.zeros(2, *memory.state_shape), torch.zeros(6, 2))
        starts = torch.zeros(7, 2)
        starts[0] = 1.0
        after_reset, _ = memory(x, used, starts)
        fresh, _ = memory(x, torch.zeros(2, *memory.state_shape), torch.zeros(7, 2))
        carried_on, _ = memory(x, used, torch.zeros(7, 2))
    torch.testing.assert_close(after_reset, fresh)
    assert not torch.allclose(carried_on, fresh)


def test_gtrxl_state_holds_the_window_and_how_much_of_it_is_this_episode():
    agent = _agent(**GTRXL)
    obs = np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32)
    first = agent.decide(obs)
    # Actor then critic: each a count row and memory_layers * memory_length cached inputs.
    assert set(first.extras) == {"values", "log_probs", "memory_states"}
    assert first.extras["memory_states"].shape == (4, 2 * (1 + 2 * 6), 16)
    assert not first.extras["memory_states"].any()
    rng = np.random.default_rng(1)
    for _ in range(8):  # other observations before: attending to copies of this one would change nothing
        step = agent.decide(rng.normal(size=(4, 2)).astype(np.float32))
    assert (step.extras["memory_states"][:, 0, 0] == 6).all()  # the window is full after 8 steps
    agent.begin_episode(np.array([False, True, False, False]))
    fresh = _agent(**GTRXL)
    after = agent.decide(obs, deterministic=True)
    assert not after.extras["memory_states"][1].any()
    # The env that started again acts as in a new agent's first step; the others remember.
    first_fresh = fresh.decide(obs, deterministic=True)
    np.testing.assert_allclose(after.extras["values"][1], first_fresh.extras["values"][1], atol=1e-6)
    assert not np.allclose(after.extras["values"][0], first_fresh.extras["values"][0])


@pytest.mark.parametrize("name", sorted(MEMORIES))
def test_the_update_replays_the_rollout_as_it_was_acted(name):
    agent = _agent(n_steps=48, **MEMORIES[name])
    session = wb.Session(agent, "CartPoleNoVel-v1", seed=0)
    session.run(steps=47 * 4)  # the rollout one step short of full: nothing learned yet
    rollout = agent.rollout
    assert rollout.dones[:-1].any(), "no episode ended inside the rollout"
    starts = torch.zeros(rollout.n_steps, 4)
    starts[1:] = torch.from_numpy(rollout.dones[:-1])
    first = torch.from_numpy(agent.rollout_states[0])
    rows = agent._rows
    filled = rollout.pos
    with torch.no_grad():
        logits, _ = agent.actor(torch.from_numpy(rollout.obs[:filled]), first[:, :rows], starts[:filled])
        values, _ = agent.critic(torch.from_numpy(rollout.obs[:filled]), first[:, rows:], starts[:filled])
    actions = torch.from_numpy(rollout.actions[:filled]).unsqueeze(-1)
    log_p = torch.log_softmax(logits, -1).gather(-1, actions).squeeze(-1)
    np.testing.assert_allclose(log_p.numpy(), rollout.log_probs[:filled], atol=1e-5)
    np.testing.assert_allclose(values.squeeze(-1).numpy(), rollout.values[:filled], atol=1e-5)


@pytest.mark.parametrize("name", sorted(MEMORIES))
def test_save_and_reopen_mid_episode_gives_the_same_next_actions(tmp_path, name):
    agent = _agent(**MEMORIES[name])
    session = wb.Session(agent, "CartPoleNoVel-v1", seed=0)
    session.run(steps=100)  # mid-rollout and mid-episode: the window holds steps of running episodes
    assert "acting/memory_states" in agent.state().tensors
    assert agent._acting_states[True].any()
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run").train()  # wb.load gives play mode; training acts from the saved state
    assert loaded.config.memory == name
    torch.testing.assert_close(loaded._acting_states[True], agent._acting_states[True])
    obs = np.random.default_rng(3).normal(size=(4, 2)).astype(np.float32)
    for _ in range(3):
        a, b = agent.decide(obs), loaded.decide(obs)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_allclose(a.extras["values"], b.extras["values"], atol=1e-6)
    assert loaded.play("CartPoleNoVel-v1", episodes=2, seed=1) == agent.play("CartPoleNoVel-v1", episodes=2, seed=1)
    resumed = wb.Session.reopen(tmp_path / "run", "CartPoleNoVel-v1")
    resumed.run(steps=64)
    assert resumed.status == "finished", resumed.error


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(memory="transformer"), "memory"),
        (dict(memory="gtrxl", memory_length=0), "memory_length"),
        (dict(memory="gtrxl", memory_layers=0), "memory_layers"),
        (dict(memory="gtrxl", attention_heads=3), "attention_heads=3"),
    ],
)
def test_bad_memory_options_are_refused_naming_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        _agent(**options)


def test_gtrxl_on_local_workers():
    agent = _agent(**{**GTRXL, "n_envs": 2})
    session = wb.Session(agent, "CartPoleNoVel-v1", seed=0, num_workers=2, backend="local")
    session.run(steps=96)
    assert session.status == "finished", session.error
    assert agent.num_updates >= 2


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MEMORIES))
def test_remembers_the_cue(name):
    agent = wb.RecurrentPPO(RememberTheCue, seed=0, **{**FAST, "n_steps": 8, "batch_size": 32, **MEMORIES[name]})
    # The GTrXL's gates start near the identity (the paper's b_g = 2): it needs more steps than the LSTM's 3000.
    wb.Session(agent, RememberTheCue, seed=0).run(steps=6000 if name == "gtrxl" else 3000)
    returns = agent.play(RememberTheCue, episodes=20, seed=0)
    assert np.mean(returns) == 1.0, f"memory={name!r} scored {np.mean(returns)}; remembering the cue scores 1"


@pytest.mark.parametrize("dict_obs", [False, True], ids=["image", "dict"])
def test_gtrxl_reads_images_and_dict_observations_through_the_encoder(dict_obs, tmp_path):
    from workbench.envs.testing import SeeTheSide

    def make():
        return SeeTheSide(dict_obs=dict_obs)

    agent = wb.RecurrentPPO(make, seed=0, **{**FAST, "n_envs": 2, "batch_size": 32, "n_epochs": 1, **GTRXL})
    assert "small_cnn" in repr(agent)
    session = wb.Session(agent, make, seed=0)
    session.run(steps=64)
    assert session.status == "finished", session.error
    assert agent.num_updates > 0
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert loaded.play(make(), episodes=1, seed=0) == agent.play(make(), episodes=1, seed=0)
