"""MultiDiscrete and MultiBinary actions for PPO, A2C and RecurrentPPO: independent categorical
(Bernoulli) heads that learn, save, load, play, run in workers and export."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.agents.on_policy import categorical_terms
from workbench.envs.testing import BitMatch, MaskedTarget


def multi_target():
    return MaskedTarget(n_actions=4, n_invalid=0, dims=3, mask_in=None)


FAST = {
    wb.PPO: dict(n_steps=32, n_envs=4, batch_size=64, n_epochs=10),
    wb.A2C: dict(n_envs=4, learning_rate=3e-3),
}
STEPS = {wb.PPO: 3000, wb.A2C: 6000}  # A2C's updates are cheaper, and smaller


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C])
def test_multidiscrete_learns(cls):
    agent = cls(multi_target, seed=0, **FAST[cls])
    assert agent.actor[-1].out_features == 12  # 3 dimensions of 4 logits
    wb.Session(agent, multi_target, seed=0).run(steps=STEPS[cls])
    # Random play scores 2.5 a 10-step episode; every dimension right scores 10.
    assert np.mean(agent.play(multi_target(), episodes=3, seed=3)) >= 9.0


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C])
def test_multibinary_learns(cls):
    agent = cls(BitMatch, seed=0, **FAST[cls])
    wb.Session(agent, BitMatch, seed=0).run(steps=STEPS[cls])
    assert np.mean(agent.play(BitMatch(), episodes=3, seed=3)) >= 9.0  # random play: 5


def test_actions_have_the_space_shape_and_dtype():
    for env, shape in ((multi_target(), (3,)), (BitMatch(n_bits=5), (5,))):
        for cls in (wb.PPO, wb.A2C, wb.RecurrentPPO):
            agent = cls(env, seed=0)
            one = agent.act(env.observation_space.sample())
            assert one.shape == shape and one.dtype == np.int64
            assert env.action_space.contains(one.astype(env.action_space.dtype))
            step = agent.decide(np.stack([env.observation_space.sample()] * 7))
            assert step.actions.shape == (7, *shape)
            assert step.extras["log_probs"].shape == (7,)


def test_log_probs_and_entropies_are_summed_over_dimensions():
    logits = torch.randn(5, 7)
    actions = torch.stack([torch.randint(0, 3, (5,)), torch.randint(0, 4, (5,))], dim=-1)
    log_prob, entropy = categorical_terms(logits, actions, "multidiscrete", (3, 4))
    d0 = torch.distributions.Categorical(logits=logits[:, :3])
    d1 = torch.distributions.Categorical(logits=logits[:, 3:])
    torch.testing.assert_close(log_prob, d0.log_prob(actions[:, 0]) + d1.log_prob(actions[:, 1]))
    torch.testing.assert_close(entropy, d0.entropy() + d1.entropy())
    bits = torch.randint(0, 2, (5, 7))
    log_prob, entropy = categorical_terms(logits, bits, "multibinary", ())
    b = torch.distributions.Bernoulli(logits=logits)
    torch.testing.assert_close(log_prob, b.log_prob(bits.float()).sum(-1))
    torch.testing.assert_close(entropy, b.entropy().sum(-1))


@pytest.mark.parametrize("make", [multi_target, BitMatch], ids=["MultiDiscrete", "MultiBinary"])
def test_save_load_play_and_local_workers(tmp_path, make):
    agent = wb.PPO(make, seed=0, n_steps=16, n_envs=4, batch_size=32, n_epochs=2)
    session = wb.Session(agent, make, seed=0, num_workers=2, backend="local")
    session.run(steps=128)
    assert session.status == "finished", session.error
    session.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    obs = np.stack([make().observation_space.sample() for _ in range(20)])
    np.testing.assert_array_equal(loaded.act(obs), agent.eval().act(obs))
    assert len(loaded.play(make(), episodes=2)) == 2


def test_recurrent_ppo_takes_multidiscrete_and_multibinary():
    for make in (multi_target, BitMatch):
        agent = wb.RecurrentPPO(make, seed=0, n_steps=16, n_envs=2, batch_size=32, n_epochs=2)
        session = wb.Session(agent, make, seed=0)
        session.run(steps=96)
        assert session.status == "finished", session.error


def test_unsupported_multi_spaces_are_refused():
    with pytest.raises(ValueError, match="Agents that fit this space"):
        wb.DQN(observation_space=spaces.Box(0, 1, (2,)), action_space=spaces.MultiDiscrete([2, 3]))
    with pytest.raises(ValueError, match="start 0"):
        wb.PPO(observation_space=spaces.Box(0, 1, (2,)), action_space=spaces.MultiDiscrete([2, 3], start=[1, 0]))
    with pytest.raises(ValueError, match="Discrete or MultiDiscrete"):
        wb.PPO(BitMatch).act(np.zeros(4, np.float32), action_mask=np.ones(4, dtype=bool))


@pytest.mark.parametrize("make", [multi_target, BitMatch], ids=["MultiDiscrete", "MultiBinary"])
def test_onnx_export_matches_the_agent(tmp_path, make):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    agent = wb.A2C(make, seed=0, n_envs=2)
    wb.Session(agent, make, seed=0).run(steps=100)
    path = agent.export(tmp_path / "policy.onnx")
    env = make()
    env.observation_space.seed(0)
    obs = np.stack([env.observation_space.sample() for _ in range(500)]).astype(np.float32)
    got = ort.InferenceSession(path).run(None, {"obs": obs})[0]
    assert got.dtype == np.int64 and got.shape == (500, *env.action_space.shape)
    np.testing.assert_array_equal(got, agent.act(obs, deterministic=True))


@pytest.mark.parametrize(
    "space", [spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(3)], ids=["MultiDiscrete", "MultiBinary"]
)
def test_dqn_family_refuses_multi_actions_naming_the_agents_that_fit(space):
    for cls in (wb.DQN, wb.QRDQN, wb.C51, wb.Rainbow, wb.BCQ):
        with pytest.raises(ValueError, match=r"Agents that fit this space: A2C, APPO, IMPALA, PPO, RecurrentPPO\.$"):
            cls(observation_space=spaces.Box(0, 1, (2,)), action_space=space)


def test_masks_refused_in_one_place_naming_the_agents_that_take_them():
    from workbench.agents.base import ActionMaskError

    obs = np.zeros(4, np.float32)
    # MultiBinary: no mask fits; the error lists the spaces and agents that take masks.
    with pytest.raises(
        ActionMaskError, match=r"MultiBinary\(4\).*MultiDiscrete: A2C, APPO, IMPALA, PPO, RecurrentPPO"
    ) as err:
        wb.PPO(BitMatch).act(obs, action_mask=np.ones(4, dtype=bool))
    assert isinstance(err.value, ValueError) and isinstance(err.value, TypeError)
    # An agent without masks in a Discrete space names the ones that take them there.
    cql = wb.CQL(observation_space=spaces.Box(0, 1, (4,)), action_space=spaces.Discrete(3))
    with pytest.raises(
        TypeError, match=r"CQL does not take action masks.*: A2C, APPO, C51, DQN, IMPALA, PPO, QRDQN, Rainbow, "
    ):
        cql.act(obs, action_mask=np.ones(3, dtype=bool))
