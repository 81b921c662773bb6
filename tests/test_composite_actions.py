"""Composite (Dict / Tuple) action spaces: one head per leaf for PPO, A2C and RecurrentPPO, hybrid actions whose
unchosen branches stay out of the loss, masks per head, and every place an action goes (sessions, workers,
vector envs, save / load / reopen, play, external and served sessions, recordings, ONNX export)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import workbench as wb
from workbench.agents.composite import composite_terms, head_terms
from workbench.agents.on_policy import MASKED_LOGIT, categorical_terms
from workbench.envs.composite import ActionLayout
from workbench.envs.hybrid import MOVE_OR_SHOOT_OPTIMUM, MoveOrShootEnv
from workbench.envs.masks import check_masks, mask_size
from workbench.envs.testing import DictOfDiscretes, MaskedTarget
from workbench.serve.protocol import action_to_json

NESTED = spaces.Dict(
    {
        "kind": spaces.Discrete(3, start=1),
        "aim": spaces.Tuple((spaces.Box(-2.0, 2.0, (2,), np.float32), spaces.MultiBinary(2))),
        "pick": spaces.MultiDiscrete([2, 3]),
    }
)


class DictEnv(gym.Env):
    """A Dict action of a Discrete "kind" and a Box "amount", with a per-head mask in ``info`` (kind 1 is
    forbidden on odd steps): the env asserts it receives a dict of numpy values and never a masked kind."""

    enforce_mask = True

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = spaces.Dict({"kind": spaces.Discrete(3), "amount": spaces.Box(-2.0, 2.0, (2,), np.float32)})
        self.t = 0

    def _info(self) -> dict:
        return {"action_mask": {"kind": np.array([True, self.t % 2 == 0, True])}}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), self._info()

    def step(self, action):
        assert isinstance(action, dict) and set(action) == {"kind", "amount"}, action
        assert isinstance(action["amount"], np.ndarray) and action["amount"].shape == (2,)
        assert (np.abs(action["amount"]) <= 2.0).all()  # Box leaves clipped to their bounds
        kind = int(action["kind"])
        assert kind != 1 or self.t % 2 == 0 or not self.enforce_mask, "a masked kind reached the env"
        self.t += 1
        reward = float(kind == 2) - float(np.abs(action["amount"] - 0.5).sum())
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), reward, False, self.t >= 6, self._info()


SMALL = dict(n_envs=2, n_steps=8)


# -- the layout ------------------------------------------------------------------------------------


def test_layout_rows_and_structures_round_trip():
    layout = ActionLayout(NESTED)
    assert layout.paths == ["aim/0", "aim/1", "kind", "pick"]  # a Dict's keys sorted, as gymnasium holds them
    assert layout.width == 2 + 2 + 1 + 2 and layout.mask_width == 3 + 5
    action = NESTED.sample()
    back = layout.structure(layout.row(action))
    assert NESTED.contains(back)
    assert int(back["kind"]) == int(action["kind"]) and np.array_equal(back["pick"], action["pick"])
    np.testing.assert_allclose(back["aim"][0], action["aim"][0], rtol=1e-6)
    with pytest.raises(ValueError, match="'kind'"):
        layout.row({**action, "kind": 7})
    with pytest.raises(ValueError, match="no value for the leaf 'pick'"):
        layout.row({k: v for k, v in action.items() if k != "pick"})


def test_the_env_action_converter_makes_the_structure_from_a_row_or_a_structure():
    from workbench.envs.actions import env_action_converter

    space = MoveOrShootEnv().action_space
    convert = env_action_converter(space)
    choice, params = convert(np.array([1.0, -3.0, 0.25], np.float32))
    assert choice == 1 and params["move"].tolist() == [-1.0] and params["shoot"].tolist() == [0.25]  # clipped
    assert space.contains(convert((0, {"move": [0.5], "shoot": [2.0]})))
    with pytest.raises(ValueError, match="'1/shoot'"):
        convert((0, {"move": [0.5]}))


def test_unsupported_leaf_is_refused_by_its_path():
    space = spaces.Dict({"ok": spaces.Discrete(2), "words": spaces.Text(5)})
    with pytest.raises(ValueError, match="'words'"):
        wb.PPO(observation_space=spaces.Box(-1, 1, (2,)), action_space=space)


@pytest.mark.parametrize("cls", [wb.DQN, wb.SAC, wb.TD3, wb.DDPG, wb.QRDQN])
def test_agents_without_composite_heads_refuse_at_construction(cls):
    with pytest.raises(ValueError, match=r"Dict.*Agents that fit this space: A2C, APPO, IMPALA, PPO, RecurrentPPO"):
        cls(DictEnv())


# -- the heads -------------------------------------------------------------------------------------


def test_joint_log_prob_and_entropy_are_sums_over_heads():
    space = spaces.Dict({"a": spaces.Discrete(3), "b": spaces.MultiDiscrete([2, 4]), "c": spaces.Box(-1, 1, (2,))})
    layout = ActionLayout(space)
    out = torch.randn(5, layout.n_outputs)
    log_std = torch.randn(2)
    rows = torch.from_numpy(np.stack([layout.row(space.sample()) for _ in range(5)]))
    log_prob, entropy = composite_terms(out, log_std, rows, layout)
    lp_a, en_a = categorical_terms(out[:, :3], rows[:, 0], "discrete", (3,))
    lp_b, en_b = categorical_terms(out[:, 3:9], rows[:, 1:3], "multidiscrete", (2, 4))
    gauss = torch.distributions.Normal(out[:, 9:11], log_std.exp())
    lp_c, en_c = gauss.log_prob(rows[:, 3:5]).sum(-1), gauss.entropy().sum(-1)
    torch.testing.assert_close(log_prob, lp_a + lp_b + lp_c)
    torch.testing.assert_close(entropy, en_a + en_b + en_c)
    heads = head_terms(out, log_std, rows, layout)
    torch.testing.assert_close(heads[1].entropy, en_b)


def test_hybrid_unchosen_branch_stays_out_of_the_loss():
    layout = ActionLayout(MoveOrShootEnv().action_space)
    assert layout.hybrid and [leaf.branch for leaf in layout.leaves] == [None, 0, 1]
    out = torch.randn(4, layout.n_outputs, requires_grad=True)
    log_std = torch.zeros(2, requires_grad=True)
    rows = torch.tensor([[0, 0.3, 0.9], [0, -0.5, 0.1], [1, 0.2, 0.4], [1, 0.7, 0.6]])
    log_prob, entropy = composite_terms(out, log_std, rows, layout)
    (log_prob.sum() + entropy.sum()).backward()
    grad = out.grad
    assert (grad[:2, 3] == 0).all() and (grad[2:, 2] == 0).all()  # the shoot power when moving, and back
    assert (grad[:2, 2] != 0).all() and (grad[2:, 3] != 0).all()


def test_sampled_log_probs_are_the_joint_log_probs_of_the_draws():
    from workbench.agents.composite import sample_composite

    for space in (MoveOrShootEnv().action_space, NESTED):
        layout = ActionLayout(space)
        out = torch.randn(6, layout.n_outputs)
        log_std = torch.randn(len(layout.box_columns))
        masks = torch.from_numpy(check_masks([{}] * 6, space)) if mask_size(space) else None
        rows, log_prob = sample_composite(out, log_std, layout, masks, False, torch.Generator().manual_seed(0))
        torch.testing.assert_close(log_prob, composite_terms(out, log_std, rows, layout, masks)[0])


def test_masked_logit_matches_on_policy():
    from workbench.agents import composite

    assert composite._MASKED_LOGIT == MASKED_LOGIT


# -- masks -----------------------------------------------------------------------------------------


def test_masks_mirror_the_space_and_mismatches_are_named():
    assert mask_size(NESTED) == 8
    row = check_masks({"kind": [1, 0, 1], "pick": [1, 1, 0, 1, 1]}, NESTED)
    assert row.tolist() == [[True, False, True, True, True, False, True, True]]
    assert check_masks({"kind": [0, 1, 0]}, NESTED)[0, 3:].all()  # leaves left out allow everything
    with pytest.raises(ValueError, match="'size' is not a part"):
        check_masks({"size": [1, 1]}, NESTED)
    with pytest.raises(ValueError, match=r"'kind' .* expected \(3,\)"):
        check_masks({"kind": [1, 0]}, NESTED)
    with pytest.raises(ValueError, match="takes no mask"):
        check_masks({"aim": ([1, 1], None)}, NESTED)
    with pytest.raises(ValueError, match="allows no action for the leaf 'pick'"):
        check_masks({"pick": [0, 0, 1, 1, 1]}, NESTED)
    assert mask_size(spaces.Dict({"x": spaces.Box(0, 1, (1,))})) is None


def test_masked_heads_never_choose_a_masked_action():
    agent = wb.PPO(DictEnv(), seed=0, **SMALL)
    obs = np.zeros((50, 3), np.float32)
    mask = [{"kind": [False, True, False]}] * 50
    step = agent.decide(obs, action_mask=mask)
    assert (step.actions[:, 2] == 1).all()  # the "kind" column (after "amount"'s two)
    actions = agent.act(obs[0], deterministic=True, action_mask={"kind": [True, False, False]})
    assert int(actions["kind"]) == 0


# -- training, everywhere an action goes -----------------------------------------------------------


@pytest.mark.parametrize("cls", [wb.PPO, wb.A2C, wb.RecurrentPPO])
def test_trains_in_a_session_with_a_signal_per_head(cls):
    session = wb.Session(cls(DictEnv(), seed=0, **SMALL), DictEnv, seed=0)
    session.run(steps=48)
    assert {"entropy", "entropy/kind", "entropy/amount"} <= set(session.signals)
    assert np.isfinite(session.signals["entropy/kind"].last)


def test_act_returns_the_structure_and_modes_when_deterministic():
    agent = wb.PPO(DictEnv(), seed=0, **SMALL)
    obs = np.zeros(3, np.float32)
    one = agent.act(obs, deterministic=True)
    assert DictEnv().action_space.contains(one)
    logits = agent.actor(torch.zeros(1, 3))[0]
    assert int(one["kind"]) == int(logits[2:].argmax())  # outputs: "amount" means, then "kind" logits
    np.testing.assert_allclose(one["amount"], logits[:2].detach().numpy(), rtol=1e-5)
    batch = agent.act(np.zeros((4, 3), np.float32))
    assert batch["kind"].shape == (4,) and batch["amount"].shape == (4, 2)


def test_equivalent_multidiscrete_learns_identically():
    """A Dict of Discrete leaves is the MultiDiscrete it spells out: same draws, same losses, same weights."""

    def plain():
        return MaskedTarget(n_actions=3, n_invalid=0, dims=2, mask_in=None)

    weights = []
    for make in (plain, lambda: DictOfDiscretes(plain())):
        agent = wb.PPO(make, seed=3, n_envs=2, n_steps=16, batch_size=16, n_epochs=2)
        wb.Session(agent, make, seed=3).run(steps=64)
        weights.append([p.detach().clone() for p in agent.actor.parameters()])
    for a, b in zip(*weights, strict=True):
        torch.testing.assert_close(a, b)


def test_save_load_reopen_play_and_record(tmp_path):
    session = wb.Session(wb.PPO(DictEnv(), seed=0, **SMALL), DictEnv, seed=0, record=str(tmp_path / "data"))
    session.run(steps=32)
    session.save(str(tmp_path / "run"))
    obs = np.linspace(-1, 1, 3).astype(np.float32)
    loaded = wb.load(str(tmp_path / "run"))
    a, b = session.agent.act(obs, deterministic=True), loaded.act(obs)
    assert int(a["kind"]) == int(b["kind"]) and np.array_equal(a["amount"], b["amount"])
    assert len(loaded.play(DictEnv(), episodes=1)) == 1
    reopened = wb.Session.reopen(str(tmp_path / "run"), DictEnv)
    for name, net in session.agent.networks.items():  # the heads and the Box leaves' log std, exactly
        for x, y in zip(net.state_dict().values(), reopened.agent.networks[name].state_dict().values(), strict=True):
            assert torch.equal(x, y)
    assert reopened.agent.log_std is not None and reopened.agent.log_std.shape == (2,)
    reopened.run(steps=16)
    assert reopened.steps == 48
    data = wb.Dataset.load(str(tmp_path / "data"))
    leaves = data.leaf_actions()
    assert set(leaves) == {"amount", "kind"} and leaves["amount"].shape == (len(data), 2)
    assert json.loads((tmp_path / "data" / "dataset.json").read_text())["action_columns"] == {
        "amount": [0, 2],
        "kind": [2, 3],
    }


def test_vector_env_and_hybrid_task():
    venv = gym.vector.SyncVectorEnv([MoveOrShootEnv, MoveOrShootEnv])
    session = wb.Session(wb.A2C(venv, seed=0, n_steps=4), venv, seed=0)
    session.run(steps=32)
    assert {"entropy/0", "entropy/1/move", "entropy/1/shoot"} <= set(session.signals)
    agent = wb.PPO("MoveOrShoot-v0", seed=0, **SMALL)
    choice, params = agent.act(np.array([0.5], np.float32))
    assert int(choice) in (0, 1) and set(params) == {"move", "shoot"}


def test_move_or_shoot_optimum_is_as_documented():
    env = gym.make("MoveOrShoot-v0")

    def optimal(o: float) -> tuple:
        if abs(o) <= 1.0:
            return 1, {"move": np.zeros(1, np.float32), "shoot": np.array([abs(o)], np.float32)}
        return 0, {"move": np.array([np.sign(o) * 1.0], np.float32), "shoot": np.zeros(1, np.float32)}

    returns = []
    for seed in range(2000):
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(optimal(float(obs[0])))
            total, done = total + r, term or trunc
        returns.append(total)
    assert set(np.round(returns, 6)) == {1.0, 0.9}
    assert abs(np.mean(returns) - MOVE_OR_SHOOT_OPTIMUM) < 0.01


def test_external_session_acts_in_the_structure_and_json():
    session = wb.Session.external(wb.PPO(DictEnv(), seed=0, n_envs=1, n_steps=4))
    action = session.act(np.zeros(3, np.float32), action_mask={"kind": [1, 0, 0]})
    assert int(action["kind"]) == 0 and action["amount"].shape == (2,)
    body = action_to_json(action)
    assert json.loads(json.dumps(body)).keys() == {"amount", "kind"}
    with pytest.warns(RuntimeWarning, match="never started"):
        session.feedback(1.0, np.zeros(3, np.float32), False, False, info={"action_mask": {"kind": [1, 1, 1]}})
    with pytest.raises(ValueError, match="'kind'"):
        session.act(np.zeros(3, np.float32), action_mask={"kind": [1, 1]})


def test_onnx_export_has_an_output_per_leaf(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    agent = wb.PPO(NestedEnv(), seed=0, **SMALL)
    path = agent.export(str(tmp_path / "policy.onnx"), action_mask=True)
    sidecar = json.loads((tmp_path / "policy.onnx.json").read_text())
    assert [o["name"] for o in sidecar["outputs"]] == ["aim/0", "aim/1", "kind", "pick"]
    model = ort.InferenceSession(path)
    assert [o.name for o in model.get_outputs()] == ["aim/0", "aim/1", "kind", "pick"]
    obs = np.random.default_rng(0).uniform(-1, 1, (3, 2)).astype(np.float32)
    mask = check_masks([{"kind": [0, 1, 1]}] * 3, NESTED)
    got = dict(zip(["aim/0", "aim/1", "kind", "pick"], model.run(None, {"obs": obs, "action_mask": mask}), strict=True))
    want = agent.act(obs, deterministic=True, action_mask=mask)
    np.testing.assert_allclose(got["aim/0"], want["aim"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["aim/1"], want["aim"][1])
    np.testing.assert_array_equal(got["kind"], want["kind"])
    assert (got["kind"] != 1).all()  # the start-shifted index 1 is masked
    np.testing.assert_array_equal(got["pick"], want["pick"])


class NestedEnv(gym.Env):
    """Spaces only (export and construction never step an env)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = NESTED


@pytest.mark.slow
def test_local_workers_step_composite_actions():
    session = wb.Session(wb.PPO(DictEnv(), seed=0, **SMALL), DictEnv, num_workers=2, seed=0)
    session.run(steps=32)
    assert session.steps >= 32 and session.status == "finished"


def test_served_session_answers_json_per_leaf_and_checks_masks_at_the_edge():
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    import http.client

    session = wb.Session.external(wb.PPO(DictEnv(), seed=0, n_envs=1, n_steps=4))
    server = session.serve()

    def post(body):
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("POST", "/act", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        out = response.status, json.loads(response.read() or b"{}")
        conn.close()
        return out

    try:
        status, answer = post({"obs": [0, 0, 0], "action_mask": {"kind": [False, False, True]}})
        assert status == 200 and answer["action"]["kind"] == 2 and len(answer["action"]["amount"]) == 2
        status, answer = post({"obs": [0, 0, 0], "episode": "b", "action_mask": {"kind": [True, False]}})
        assert status == 400 and "'kind'" in answer["error"] and answer["field"] == "action_mask"
    finally:
        server.close()
        session.stop()


@pytest.mark.filterwarnings("ignore:.*symmetric and normalized")
def test_check_env_names_a_leaf_or_mask_that_does_not_fit():
    class AllAllowed(DictEnv):  # gymnasium's checker steps random actions, masked or not
        enforce_mask = False

        def _info(self):
            return {"action_mask": {"kind": [True, True, True]}}

    class BadMask(DictEnv):
        enforce_mask = False

        def _info(self):
            return {"action_mask": {"kind": [True, False]}}

    wb.check_env(AllAllowed())
    with pytest.raises(ValueError, match="'kind'"):
        wb.check_env(BadMask())


def test_a_mask_for_a_composite_space_without_discrete_heads_is_refused():
    agent = wb.PPO(observation_space=spaces.Box(-1, 1, (2,)), action_space=spaces.Dict({"x": spaces.Box(-1, 1, (1,))}))
    from workbench.agents.base import ActionMaskError

    with pytest.raises(ActionMaskError, match="no head to mask"):
        agent.act(np.zeros(2, np.float32), action_mask=[True])


def test_recurrent_export_has_the_leaves_then_the_state(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    agent = wb.RecurrentPPO(DictEnv(), seed=0, **SMALL)
    model = ort.InferenceSession(agent.export(str(tmp_path / "r.onnx")))
    assert [o.name for o in model.get_outputs()] == ["amount", "kind", "next_lstm_h", "next_lstm_c"]
    state = np.zeros((1, 2, agent.config.lstm_hidden_size), np.float32)
    feed = {
        "obs": np.zeros((2, 3), np.float32),
        "lstm_h": state,
        "lstm_c": state,
        "episode_start": np.ones(2, np.float32),
    }
    amount, kind, *_ = model.run(None, feed)
    want = agent.eval().act(np.zeros((2, 3), np.float32))
    np.testing.assert_allclose(amount, want["amount"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(kind, want["kind"])


@pytest.mark.ray
def test_ray_workers_step_composite_actions():
    ray = pytest.importorskip("ray")
    try:
        session = wb.Session(
            wb.PPO("MoveOrShoot-v0", seed=0, **SMALL), "MoveOrShoot-v0", num_workers=2, backend="ray", seed=0
        )
        session.run(steps=48)
        assert session.status == "finished" and "entropy/1/move" in session.signals
    finally:
        ray.shutdown()


@pytest.mark.parametrize("cls", [wb.APPO, wb.IMPALA])
def test_the_asynchronous_agents_take_hybrid_actions_with_a_signal_per_head(cls):
    agent = cls("MoveOrShoot-v0", seed=0, n_envs=2, n_steps=8)
    session = wb.Session(agent, "MoveOrShoot-v0", seed=0)
    session.run(steps=48)
    assert agent.num_updates > 0 and np.isfinite(session.signals["loss"].last)
    assert {"entropy/0", "entropy/1/move", "entropy/1/shoot"} <= set(session.signals)
    choice, params = agent.act(np.array([0.5], np.float32))
    assert int(choice) in (0, 1) and set(params) == {"move", "shoot"}


def test_the_dashboard_plots_each_heads_entropy_once_recorded():
    from workbench.ui.view_model import MAX_HEAD_PLOTS, default_signals

    agent = wb.PPO("MoveOrShoot-v0", seed=0, **SMALL)
    assert not any(name.startswith("entropy/") for name in default_signals(agent, ["episode_reward", "loss"]))
    session = wb.Session(agent, "MoveOrShoot-v0", seed=0)
    session.run(steps=32)
    plots = default_signals(agent, session.signals.names())
    assert plots[0] == "episode_reward" and {"entropy/0", "entropy/1/move", "entropy/1/shoot"} <= set(plots)
    many = [f"entropy/{i}" for i in range(9)]
    assert sum(name.startswith("entropy/") for name in default_signals(agent, many)) == MAX_HEAD_PLOTS
