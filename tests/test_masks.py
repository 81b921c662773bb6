"""Action masks: read from the env three ways, honoured when acting, exploring, learning and playing,
in every backend. ``MaskedTarget`` raises on a masked action, so a run that finishes proves none was taken."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.agents.on_policy import categorical_terms
from workbench.checkpoint import read_npz
from workbench.envs import VecEnv
from workbench.envs.masks import check_masks, masked_choice
from workbench.envs.testing import MaskedActionError, MaskedTarget
from workbench.loop import env_step

VARIANTS = ("method", "info", "obs")

# Small settings that learn and act greedily within a few hundred steps.
_DQN_FAST = dict(learning_starts=50, train_freq=8, gradient_steps=2, batch_size=16, target_update_interval=20)
AGENTS = [
    (wb.DQN, _DQN_FAST),
    (wb.DQN, dict(_DQN_FAST, n_step=3, prioritized=True, double_q=False)),
    (wb.QRDQN, dict(_DQN_FAST, n_quantiles=8)),
    (wb.C51, dict(_DQN_FAST, n_atoms=11, v_min=0.0, v_max=10.0)),
    (wb.Rainbow, dict(_DQN_FAST, n_atoms=11, v_min=0.0, v_max=10.0)),
    (wb.PPO, dict(n_steps=16, n_envs=2, batch_size=32, n_epochs=2)),
    (wb.A2C, dict(n_envs=2)),
    (wb.RecurrentPPO, dict(n_steps=16, n_envs=2, batch_size=32, n_epochs=2)),
    (wb.RecurrentPPO, dict(n_steps=16, n_envs=2, batch_size=32, n_epochs=2, memory="gtrxl", attention_heads=2)),
]
IDS = ["DQN", "DQN-nstep-prio", "QRDQN", "C51", "Rainbow", "PPO", "A2C", "RecurrentPPO", "RecurrentPPO-gtrxl"]


def masked(mask_in: str = "info", **kwargs):
    return lambda: MaskedTarget(mask_in=mask_in, **kwargs)


def test_the_env_raises_on_a_masked_action():
    env = MaskedTarget(mask_in="method")
    env.reset(seed=0)
    forbidden = int(np.flatnonzero(~env.action_masks())[0])
    with pytest.raises(MaskedActionError):
        env.step(forbidden)
    assert not hasattr(MaskedTarget(mask_in="info"), "action_masks")  # one source per variant


@pytest.mark.parametrize("mask_in", VARIANTS)
@pytest.mark.parametrize(("cls", "kwargs"), AGENTS, ids=IDS)
def test_no_agent_takes_a_masked_action(cls, kwargs, mask_in):
    env = masked(mask_in)
    agent = cls(env, seed=0, **kwargs)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=300)  # training, exploration included: MaskedTarget raises on a masked action
    assert session.status == "finished", session.error
    returns = agent.play(MaskedTarget(mask_in=mask_in), episodes=2, seed=1)
    assert len(returns) == 2
    assert np.isfinite(session.evaluate(episodes=1))


def _local_run(cls, kwargs, mask_in, steps):
    env = masked(mask_in)
    session = wb.Session(cls(env, seed=0, **kwargs), env, seed=0, num_workers=2, backend="local")
    session.run(steps=steps)
    assert session.status == "finished", (cls.__name__, mask_in, session.error)


@pytest.mark.parametrize(("agent", "mask_in"), [("DQN", "info"), ("PPO", "obs"), ("Rainbow", "method")])
def test_masks_in_local_workers(agent, mask_in):
    cls, kwargs = AGENTS[IDS.index(agent)]
    _local_run(cls, kwargs, mask_in, 200)


@pytest.mark.slow
def test_the_other_agents_with_masks_in_local_workers():
    for agent, mask_in in (("QRDQN", "obs"), ("C51", "info"), ("A2C", "method"), ("RecurrentPPO", "info")):
        cls, kwargs = AGENTS[IDS.index(agent)]
        _local_run(cls, kwargs, mask_in, 100)


def test_dqn_and_ppo_learn_with_masks():
    """The task is learnable only through the allowed target: both reach it."""
    dqn = dict(learning_starts=100, train_freq=4, gradient_steps=4, batch_size=32, target_update_interval=100)
    for cls, kwargs, steps in (
        (wb.DQN, dqn, 1500),
        (wb.PPO, dict(n_steps=32, n_envs=4, batch_size=64, n_epochs=10), 2000),
    ):
        agent = cls(masked("method"), seed=0, **kwargs)
        wb.Session(agent, masked("method"), seed=0).run(steps=steps)
        assert np.mean(agent.play(MaskedTarget(mask_in="method"), episodes=3, seed=5)) >= 9.0, cls.__name__


def test_masks_travel_in_extras_and_the_dict_key_is_not_fed():
    env = MaskedTarget(mask_in="obs")
    agent = wb.PPO(env, n_envs=2)
    assert agent.obs_shape == (6,)  # the "action_mask" key is left out of what the networks see
    vec = VecEnv([MaskedTarget(mask_in="obs") for _ in range(2)], seed=0)
    obs = vec.reset()
    before = vec.masks.copy()
    transitions, _ = env_step(agent, vec, obs)
    np.testing.assert_array_equal(transitions.extras["action_mask"], before)
    np.testing.assert_array_equal(transitions.extras["next_action_mask"], vec.masks)  # no episode ended
    assert transitions.extras["action_mask"].dtype == bool
    assert before[np.arange(2), transitions.actions].all()


def test_act_takes_a_mask_and_a_dict_observation():
    agent = wb.DQN(masked("obs"), seed=0).eval()
    env = MaskedTarget(mask_in="obs")
    obs, _ = env.reset(seed=0)
    greedy = int(agent.act(obs, action_mask=np.ones(6, dtype=bool)))
    only = np.zeros(6, dtype=bool)
    only[(greedy + 1) % 6] = True
    assert int(agent.act(obs, action_mask=only)) == (greedy + 1) % 6
    # The Dict observation's own mask is used when none is given.
    assert obs["action_mask"][int(agent.act(obs))]
    batch = np.stack([obs["obs"]] * 3)
    masks = np.eye(6, dtype=bool)[[1, 3, 5]]
    np.testing.assert_array_equal(agent.act(batch, action_mask=masks), [1, 3, 5])
    ppo = wb.PPO(masked("info"), seed=0)
    for _ in range(20):
        step = ppo.decide(batch, action_mask=masks)
        np.testing.assert_array_equal(step.actions, [1, 3, 5])
        assert step.extras["action_mask"] is not None


def test_exploration_samples_only_valid_actions():
    rng = np.random.default_rng(0)
    masks = np.zeros((1000, 6), dtype=bool)
    masks[:, [1, 4]] = True
    picks = masked_choice(masks, rng)
    assert set(np.unique(picks)) == {1, 4}
    agent = wb.DQN(masked(), seed=0, learning_starts=10**6)  # every action random
    obs = np.zeros((1000, 6), dtype=np.float32)
    assert set(np.unique(agent.decide(obs, action_mask=masks).actions)) == {1, 4}


def test_a_state_with_no_valid_action_is_a_clear_error():
    agent = wb.PPO(masked())
    with pytest.raises(ValueError, match="allows no action"):
        agent.act(np.zeros(6, np.float32), action_mask=np.zeros(6, dtype=bool))
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        agent.act(np.zeros(6, np.float32), action_mask=np.ones(5, dtype=bool))
    md = spaces.MultiDiscrete([2, 3])
    with pytest.raises(ValueError, match="dimension 1"):
        check_masks([1, 0, 0, 0, 0], md)

    class Empty(MaskedTarget):
        def _draw(self):
            super()._draw()
            if self._t == 3:
                self._mask[:] = False

    session = wb.Session(wb.DQN(masked(), **_DQN_FAST), lambda: Empty(mask_in="info"), seed=0)
    with pytest.raises(ValueError, match="allows no action"):
        session.run(steps=20)


def test_box_agents_refuse_masks():
    agent = wb.SAC("Pendulum-v1")
    with pytest.raises(TypeError, match="does not take action masks"):
        agent.act(np.zeros(3, np.float32), action_mask=np.ones(2, dtype=bool))


def test_dqn_target_maxes_over_allowed_next_actions():
    agent = wb.DQN(masked(), seed=0, double_q=False)
    with torch.no_grad():
        for p in agent.q_target.parameters():
            p.zero_()
        agent.q_target[-1].bias.copy_(torch.arange(6, dtype=torch.float32))  # action 5 looks best
    mem = agent.memory
    obs = np.zeros((2, 6), np.float32)
    next_masks = np.array([[True] * 6, [True, True, False, False, False, False]])
    mem.add(obs, np.zeros(2, np.int64), np.zeros(2, np.float32), obs, np.zeros(2, np.float32), 0.9, next_masks)
    batch = mem.gather(np.array([0, 1]), np.ones(2, np.float32))
    next_out = agent._outputs(agent.q_target, batch.next_obs)
    np.testing.assert_array_equal(agent._next_actions(batch, next_out)[:, 0].numpy(), [5, 1])


def test_replay_masks_are_saved_as_bool(tmp_path):
    agent = wb.DQN(masked(), seed=0, **_DQN_FAST)
    session = wb.Session(agent, masked(), seed=0)
    session.run(steps=120)
    session.save(tmp_path / "run", memory=True)
    arrays = read_npz(tmp_path / "run" / "memory.npz")
    assert arrays["next_action_masks"].dtype == bool
    assert arrays["next_action_masks"].shape == (120, 6)
    assert (arrays["next_action_masks"].sum(axis=1) == 3).all()
    resumed = wb.Session.reopen(tmp_path / "run", masked())
    np.testing.assert_array_equal(resumed.agent.memory.next_masks[:120], arrays["next_action_masks"])
    resumed.run(steps=200)
    assert resumed.status == "finished", resumed.error
    loaded = wb.load(tmp_path / "run")
    assert len(loaded.play(MaskedTarget(mask_in="info"), episodes=1)) == 1


def test_masked_policy_terms_give_masked_actions_no_probability():
    logits = torch.zeros(2, 4, requires_grad=True)
    masks = torch.tensor([[True, False, True, False], [False, False, False, True]])
    log_prob, entropy = categorical_terms(logits, torch.tensor([0, 3]), "discrete", (), masks)
    np.testing.assert_allclose(log_prob.detach().numpy(), [np.log(0.5), 0.0], atol=1e-6)
    np.testing.assert_allclose(entropy.detach().numpy(), [np.log(2), 0.0], atol=1e-6)
    (log_prob.sum() + entropy.sum()).backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C, wb.RecurrentPPO])
def test_multidiscrete_masks(cls):
    env = masked("info", dims=2)
    agent = cls(env, seed=0, n_envs=2, n_steps=16, **({} if cls is wb.A2C else dict(batch_size=32, n_epochs=2)))
    session = wb.Session(agent, env, seed=0)
    session.run(steps=300)
    assert session.status == "finished", session.error
    assert agent.rollout.masks.shape[-1] == 12
    assert len(agent.play(MaskedTarget(mask_in="info", dims=2), episodes=1)) == 1


@pytest.mark.slow
@pytest.mark.ray
def test_masks_in_ray_workers():
    ray = pytest.importorskip("ray")
    from workbench.parallel.ray_start import init_private_ray

    # The library's private start (loopback only, lean imports): a plain ray.init can give up under load.
    init_private_ray(ray, {"num_cpus": 2, "include_dashboard": False, "logging_level": "warning"})
    try:
        for agent, mask_in in (("DQN", "method"), ("PPO", "info"), ("RecurrentPPO", "obs")):
            cls, kwargs = AGENTS[IDS.index(agent)]
            env = masked(mask_in)
            session = wb.Session(cls(env, seed=0, **kwargs), env, seed=0, num_workers=2, backend="ray")
            session.run(steps=200)
            assert session.status == "finished", (cls.__name__, mask_in, session.error)
    finally:
        ray.shutdown()


def test_export_leaves_the_dict_mask_out_of_the_input(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    agent = wb.PPO(masked("obs"), seed=0, n_envs=2, n_steps=16)
    path = agent.export(tmp_path / "policy.onnx")
    side = json.loads((tmp_path / "policy.onnx.json").read_text())
    assert [part["path"] for part in side["observation_layout"]] == [["obs"]]
    obs = np.eye(6, dtype=np.float32)
    got = ort.InferenceSession(path).run(None, {"obs": obs})[0]
    np.testing.assert_array_equal(got, agent.eval().act(obs))
