"""Policy export: the exported model, run by onnxruntime (no workbench code involved), gives the
actions of ``agent.act(obs, deterministic=True)`` on 1,000 observations, for every agent, with and
without observation normalization, for vector, Dict and uint8 image observations; RecurrentPPO's
export, its LSTM state fed back, over whole staggered episodes of several envs; the optional
action_mask input under random masks; the sidecar says how to feed it; the CLI writes the same;
errors say what to do."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.checkpoint import space_to_json
from workbench.cli import main
from workbench.envs.testing import MaskedTarget

ort = pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")

N_OBS = 1000
BOX_ATOL = 1e-5  # float32 matmuls summed in another order; the maths is the same


class SpacesEnv(gym.Env):
    """Observations sampled from any space, episodes of 10 steps, a reward that depends on the action."""

    metadata: dict = {"render_modes": []}

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self._t += 1
        reward = float(np.tanh(np.sum(np.asarray(action, dtype=np.float64))))
        return self.observation_space.sample(), reward, self._t >= 10, False, {}


DICT_OBS = spaces.Dict(
    {
        "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
        "mode": spaces.Discrete(3),
        "flags": spaces.MultiBinary(2),
    }
)
IMAGE_OBS = spaces.Box(0, 255, (8 * 8,), np.uint8)  # an 8x8x1 image as FlattenObservation gives it
PENDULUM_LIKE = spaces.Box(-2.0, 2.0, (1,), np.float32)
HWC_IMAGE = spaces.Box(0, 255, (16, 16, 3), np.uint8)  # the small CNN
CHW_FRAMES = spaces.Box(0, 255, (2, 40, 40), np.uint8)  # the Nature CNN, channels first
DICT_IMAGE = spaces.Dict({"image": HWC_IMAGE, "vector": spaces.Box(-1.0, 1.0, (3,), np.float32)})

ON_POLICY = {"n_steps": 16, "n_epochs": 2, "net_arch": (32, 32)}
OFF_POLICY = {"net_arch": (32, 32), "learning_starts": 100, "batch_size": 32}
DQN_FAST = {**OFF_POLICY, "train_freq": 16, "gradient_steps": 4}

# (id, agent class, env, hyperparameters): a few hundred steps of training each, so the weights
# (and the normalization statistics) are not the initial ones.
CASES = [
    ("ppo-discrete-norm", wb.PPO, "CartPole-v1", {**ON_POLICY, "normalize_observations": True}),
    ("ppo-box", wb.PPO, "Pendulum-v1", ON_POLICY),
    ("ppo-box-gsde-norm", wb.PPO, "Pendulum-v1", {**ON_POLICY, "use_sde": True, "normalize_observations": True}),
    ("a2c-discrete", wb.A2C, "CartPole-v1", {"net_arch": (32, 32)}),
    ("a2c-box-norm", wb.A2C, "Pendulum-v1", {"net_arch": (32, 32), "normalize_observations": True}),
    ("a2c-box-gsde", wb.A2C, "Pendulum-v1", {"net_arch": (32, 32), "use_sde": True}),
    ("dqn", wb.DQN, "CartPole-v1", DQN_FAST),
    ("dqn-dueling-norm", wb.DQN, "CartPole-v1", {**DQN_FAST, "dueling": True, "normalize_observations": True}),
    # The distributional DQN family: the greedy action over each action's expected return.
    ("qrdqn", wb.QRDQN, "CartPole-v1", DQN_FAST),
    ("qrdqn-dueling-norm", wb.QRDQN, "CartPole-v1", {**DQN_FAST, "dueling": True, "normalize_observations": True}),
    ("c51", wb.C51, "CartPole-v1", {**DQN_FAST, "v_min": 0.0, "v_max": 50.0}),
    ("rainbow-noisy", wb.Rainbow, "CartPole-v1", {**DQN_FAST, "v_min": 0.0, "v_max": 50.0}),
    ("rainbow-no-distribution", wb.Rainbow, "CartPole-v1", {**DQN_FAST, "distributional": False}),
    ("sac", wb.SAC, "Pendulum-v1", OFF_POLICY),
    ("sac-gsde-norm", wb.SAC, "Pendulum-v1", {**OFF_POLICY, "use_sde": True, "normalize_observations": True}),
    ("td3-norm", wb.TD3, "Pendulum-v1", {**OFF_POLICY, "normalize_observations": True}),
    ("ddpg", wb.DDPG, "Pendulum-v1", OFF_POLICY),
    # The SAC family: the same squashed mean; CrossQ's batch renormalization exports with its running statistics.
    ("tqc", wb.TQC, "Pendulum-v1", {**OFF_POLICY, "n_quantiles": 5}),
    (
        "crossq-norm",
        wb.CrossQ,
        "Pendulum-v1",
        {**OFF_POLICY, "critic_net_arch": (32, 32), "normalize_observations": True},
    ),
    ("droq", wb.DroQ, "Pendulum-v1", {**OFF_POLICY, "gradient_steps": 2}),
    (
        "ppo-dict-norm",
        wb.PPO,
        lambda: SpacesEnv(DICT_OBS, spaces.Discrete(3)),
        {**ON_POLICY, "normalize_observations": True},
    ),
    ("sac-dict", wb.SAC, lambda: SpacesEnv(DICT_OBS, PENDULUM_LIKE), OFF_POLICY),
    (
        "dqn-image-norm",
        wb.DQN,
        lambda: SpacesEnv(IMAGE_OBS, spaces.Discrete(4)),
        {**DQN_FAST, "normalize_observations": True},
    ),
    ("td3-image", wb.TD3, lambda: SpacesEnv(IMAGE_OBS, PENDULUM_LIKE), OFF_POLICY),
    # Image observations through the CNN encoders (scaling by 1/255 inside the graph).
    ("ppo-cnn-hwc", wb.PPO, lambda: SpacesEnv(HWC_IMAGE, spaces.Discrete(3)), ON_POLICY),
    ("dqn-nature-chw", wb.DQN, lambda: SpacesEnv(CHW_FRAMES, spaces.Discrete(4)), DQN_FAST),
    ("sac-cnn-hwc", wb.SAC, lambda: SpacesEnv(HWC_IMAGE, PENDULUM_LIKE), OFF_POLICY),
    ("ppo-dict-image", wb.PPO, lambda: SpacesEnv(DICT_IMAGE, spaces.Discrete(3)), ON_POLICY),
]


def trained(cls, env, hyper, steps=300):
    agent = cls(env, seed=0, **hyper)
    wb.Session(agent, env, seed=0).run(steps)
    assert agent.num_updates > 0, "the agent should have learned something before it is exported"
    return agent


def observations(space: spaces.Space, n: int = N_OBS) -> np.ndarray:
    """``n`` observations as the exported model takes them: a Box's own dtype, others flattened."""
    space.seed(123)
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, spaces.Box):
        return np.stack(samples).astype(space.dtype)
    return np.stack([spaces.flatten(space, s) for s in samples]).astype(np.float32)


def run_onnx(path, obs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["action"], {"obs": obs})[0]


def assert_same_actions(agent, got: np.ndarray, obs: np.ndarray) -> float:
    """Exported actions equal the agent's deterministic ones: exactly for Discrete (argmax), within
    float tolerance for Box. Returns the largest difference."""
    expected = agent.act(obs, deterministic=True)
    if agent.discrete:
        assert got.dtype == np.int64 and got.shape == (len(obs),)
        np.testing.assert_array_equal(got, expected)
        return 0.0
    assert got.dtype == np.float32 and got.shape == (len(obs), *agent.action_space.shape)
    expected = np.asarray(expected).reshape(got.shape)
    np.testing.assert_allclose(got, expected, rtol=0, atol=BOX_ATOL)
    assert np.all(got >= agent.action_space.low) and np.all(got <= agent.action_space.high)
    return float(np.max(np.abs(got - expected)))


@pytest.mark.parametrize(("cls", "env", "hyper"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_onnx_policy_acts_like_the_agent(tmp_path, cls, env, hyper):
    agent = trained(cls, env, hyper)
    path = agent.export(tmp_path / "policy.onnx")
    assert path == str(tmp_path / "policy.onnx")
    obs = observations(agent.observation_space)
    diff = assert_same_actions(agent, run_onnx(path, obs), obs)
    assert diff <= BOX_ATOL

    # The sidecar describes what the model takes and gives.
    side = json.loads((tmp_path / "policy.onnx.json").read_text())
    assert side["algorithm"] == agent.algorithm and side["model"] == "policy.onnx"
    assert side["input"] == {"name": "obs", "dtype": obs.dtype.name, "shape": ["batch", *obs.shape[1:]]}
    assert side["output"]["name"] == "action"
    assert side["output"]["dtype"] == ("int64" if agent.discrete else "float32")
    assert side["observation_space"] == space_to_json(agent.observation_space)
    assert side["action_space"] == space_to_json(agent.action_space)
    assert (side["baked_in"]["observation_normalization"] is not None) == agent.config.normalize_observations
    assert side["versions"]["workbench"] == wb.__version__ and "onnx" in side["versions"]


def test_exported_policy_is_frozen_and_the_agent_untouched(tmp_path):
    agent = trained(wb.PPO, "Pendulum-v1", {**ON_POLICY, "normalize_observations": True}, steps=200)
    before = {k: v.clone() for k, v in agent.state().tensors.items() if k.startswith("net/")}
    agent.export(tmp_path / "p.onnx")
    after = agent.state().tensors
    assert all(np.array_equal(v.numpy(), after[k].numpy()) for k, v in before.items())
    assert agent.training and all(p.requires_grad for p in agent.actor.parameters())


def test_dict_observations_follow_the_sidecar_layout(tmp_path):
    agent = wb.PPO(lambda: SpacesEnv(DICT_OBS, spaces.Discrete(3)), seed=1, **ON_POLICY)
    agent.export(tmp_path / "p.onnx")
    side = json.loads((tmp_path / "p.onnx.json").read_text())
    layout = side["observation_layout"]
    assert [entry["path"] for entry in layout] == [["flags"], ["mode"], ["position"]]  # gymnasium sorts the keys
    assert sum(entry["size"] for entry in layout) == side["input"]["shape"][1]
    DICT_OBS.seed(5)
    for _ in range(20):
        obs = DICT_OBS.sample()
        # Built from the sidecar alone, as an application without the library would.
        vector = np.zeros(side["input"]["shape"][1], dtype=np.float32)
        for entry in layout:
            value, at = obs[entry["path"][0]], entry["offset"]
            if entry["encoding"].startswith("one-hot"):
                vector[at + int(value)] = 1.0
            else:
                vector[at : at + entry["size"]] = np.asarray(value, dtype=np.float32).reshape(-1)
        np.testing.assert_array_equal(vector, spaces.flatten(DICT_OBS, obs))
        assert run_onnx(tmp_path / "p.onnx", vector[None])[0] == agent.act(obs, deterministic=True)


def test_cli_exports_a_saved_run(tmp_path, capsys):
    agent = trained(wb.DQN, "CartPole-v1", {**DQN_FAST, "normalize_observations": True})
    agent.save(tmp_path / "run")
    out = tmp_path / "out" / "policy.onnx"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert "exported the deterministic DQN policy" in capsys.readouterr().out
    loaded = wb.load(tmp_path / "run")
    obs = observations(loaded.observation_space)
    assert_same_actions(loaded, run_onnx(out, obs), obs)
    assert json.loads(out.with_name("policy.onnx.json").read_text())["num_timesteps"] == agent.num_timesteps

    assert main(["export", str(tmp_path / "run"), str(tmp_path / "policy.h5")]) == 2
    assert ".onnx" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nothing"), str(out)]) == 2


def test_errors_say_what_to_do(tmp_path, monkeypatch):
    agent = wb.DQN("CartPole-v1", seed=0)
    with pytest.raises(ValueError, match=r"\.onnx"):
        agent.export(tmp_path / "policy.h5")
    with pytest.raises(ValueError, match="unknown export format 'tflite'"):
        agent.export(tmp_path / "policy.onnx", format="tflite")
    # A many-dimensional Box that is not an image has no encoder: the error says to flatten it.
    grid = wb.PPO(lambda: SpacesEnv(spaces.Box(0.0, 1.0, (8, 8, 1), np.float32), spaces.Discrete(2)))
    with pytest.raises(ValueError, match="FlattenObservation"):
        grid.export(tmp_path / "grid.onnx")
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if onnx were not installed
    with pytest.raises(ImportError, match=r"rl-workbench\[export\]"):
        agent.export(tmp_path / "policy.onnx")
    assert not (tmp_path / "policy.onnx").exists()


def test_import_workbench_loads_no_onnx():
    code = "import sys, workbench\nprint([m for m in ('onnx', 'onnxruntime') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- recurrent policies: the LSTM state goes in and comes out ------------------------------------

RECURRENT = {"n_envs": 2, "n_steps": 32, "n_epochs": 2, "batch_size": 64, "net_arch": (32,), "lstm_hidden_size": 16}
EPISODE_LIMITS = (13, 29, 47, 200)  # one time limit per env of the batch, so their episodes start at different steps
VECTOR_OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
RECURRENT_CASES = [
    pytest.param("CartPoleNoVel-v1", {"normalize_observations": True}, id="cartpole-novel-norm"),
    pytest.param("PendulumNoVel-v1", {}, id="pendulum-novel"),
    pytest.param("PendulumNoVel-v1", {"normalize_observations": True}, id="pendulum-novel-norm"),
    pytest.param(lambda: SpacesEnv(VECTOR_OBS, spaces.MultiDiscrete([3, 2])), {}, id="multidiscrete"),
    pytest.param(lambda: SpacesEnv(VECTOR_OBS, spaces.MultiBinary(3)), {}, id="multibinary"),
    pytest.param(lambda: SpacesEnv(DICT_OBS, spaces.Discrete(3)), {"normalize_observations": True}, id="dict-norm"),
    pytest.param(lambda: SpacesEnv(DICT_IMAGE, PENDULUM_LIKE), {}, id="dict-image-cnn", marks=pytest.mark.slow),
]


def model_input(space: spaces.Space, observations: list) -> np.ndarray:
    """A batch of raw env observations as the exported model takes them (a Box as is, others flattened)."""
    if isinstance(space, spaces.Box):
        return np.stack(observations).astype(space.dtype)
    return np.stack([spaces.flatten(space, o) for o in observations]).astype(np.float32)


def assert_recurrent_parity(agent, env, path, steps: int = 300, check_extras: bool = False, masks: bool = False) -> int:
    """Run the exported model over ``steps`` steps of len(EPISODE_LIMITS) envs, feeding its state
    back and flagging episode starts, beside the agent acting on the same observations through its
    own recurrent state (``begin_episode`` then ``act`` / ``decide``); ``masks``: feed both each
    env's current action mask (``MaskedTarget.current_mask``). Returns the episode starts seen."""
    maker = wb.envs.as_env_source(env).make
    envs = [gym.wrappers.TimeLimit(maker(), max_episode_steps=limit) for limit in EPISODE_LIMITS]
    side = json.loads(open(str(path) + ".json").read())["recurrent"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    n = len(envs)
    # The state inputs the sidecar names (lstm_h and lstm_c, or one memory_state), fed back from the outputs.
    state = {
        s["name"]: np.zeros([n if d == "batch" else d for d in s["shape"]], np.float32) for s in side["state_inputs"]
    }
    outputs = ["action", *(s["name"] for s in side["state_outputs"])]
    feeds = [s["feeds"] for s in side["state_outputs"]]
    key = "lstm_states" if "lstm_h" in state else "memory_states"
    obs = [e.reset(seed=i)[0] for i, e in enumerate(envs)]
    starts = np.ones(n, dtype=bool)
    seen = 0
    for _ in range(steps):
        x = model_input(agent.observation_space, obs)  # the agent takes the same flat batch
        mask = np.stack([e.unwrapped.current_mask() for e in envs]) if masks else None
        agent.begin_episode(starts)
        if check_extras:
            step = agent.decide(x, deterministic=True, action_mask=mask)
            expected, used = step.actions, step.extras[key]
            # The state the agent's step carries is the state the model used (zeroed at a start).
            keep = (~starts)[:, None].astype(np.float32)
            if key == "lstm_states":
                np.testing.assert_allclose(used[:, 0], state["lstm_h"][0] * keep, rtol=0, atol=1e-5)
                np.testing.assert_allclose(used[:, 1], state["lstm_c"][0] * keep, rtol=0, atol=1e-5)
            else:  # the actor's rows come first
                actor = state["memory_state"] * keep[:, :, None]
                np.testing.assert_allclose(used[:, : actor.shape[1]], actor, rtol=0, atol=1e-5)
        else:
            expected = agent.act(x, deterministic=True, action_mask=mask)
        feed = {"obs": x, **state, "episode_start": starts.astype(np.float32)}
        if mask is not None:
            feed["action_mask"] = mask
        got, *new_state = session.run(outputs, feed)
        state = dict(zip(feeds, new_state, strict=True))
        if isinstance(agent.action_space, spaces.Box):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, np.asarray(expected).reshape(got.shape), rtol=0, atol=BOX_ATOL)
        else:
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, expected)
        for i, e in enumerate(envs):
            obs[i], _, terminated, truncated, _ = e.step(expected[i])
            starts[i] = terminated or truncated
            if starts[i]:
                obs[i] = e.reset()[0]
        seen += int(starts.sum())
    return seen


@pytest.mark.parametrize(("env", "hyper"), RECURRENT_CASES)
def test_recurrent_onnx_policy_acts_like_the_agent_over_episodes(tmp_path, env, hyper):
    agent = trained(wb.RecurrentPPO, env, {**RECURRENT, **hyper})
    path = agent.export(tmp_path / "policy.onnx")
    agent.eval()  # play mode: the agent's own play state, deterministic actions
    assert assert_recurrent_parity(agent, env, path) > len(EPISODE_LIMITS)

    side = json.loads((tmp_path / "policy.onnx.json").read_text())
    hidden = agent.config.lstm_hidden_size
    assert side["input"]["name"] == "obs" and side["output"]["name"] == "action"
    rec = side["recurrent"]
    assert [s["name"] for s in rec["state_inputs"]] == ["lstm_h", "lstm_c"]
    assert [(s["name"], s["feeds"]) for s in rec["state_outputs"]] == [
        ("next_lstm_h", "lstm_h"),
        ("next_lstm_c", "lstm_c"),
    ]
    assert all(s["shape"] == [1, "batch", hidden] for s in rec["state_inputs"] + rec["state_outputs"])
    assert rec["episode_start"]["name"] == "episode_start" and rec["initial_state"] == "zeros"
    assert (side["baked_in"]["observation_normalization"] is not None) == agent.config.normalize_observations


MEMORY_CASES = [
    pytest.param("CartPoleNoVel-v1", {"memory": "gru", "normalize_observations": True}, id="gru-norm"),
    # A window shorter than the episodes, so the cached window slides and is cut at episode starts.
    pytest.param("CartPoleNoVel-v1", {"memory": "gtrxl", "memory_length": 6, "memory_layers": 2}, id="gtrxl"),
    pytest.param("PendulumNoVel-v1", {"memory": "gtrxl", "memory_length": 4, "attention_heads": 2}, id="gtrxl-box"),
]


@pytest.mark.parametrize(("env", "hyper"), MEMORY_CASES)
def test_gru_and_gtrxl_onnx_policies_carry_their_memory_state(tmp_path, env, hyper):
    agent = trained(wb.RecurrentPPO, env, {**RECURRENT, **hyper})
    path = agent.export(tmp_path / "policy.onnx")
    # In training mode: the state each step's extras carry is the one the model was fed.
    assert assert_recurrent_parity(agent, env, path, steps=150, check_extras=True) > len(EPISODE_LIMITS)
    rec = json.loads((tmp_path / "policy.onnx.json").read_text())["recurrent"]
    rows = 1 if hyper["memory"] == "gru" else 1 + hyper.get("memory_layers", 1) * hyper["memory_length"]
    shape = ["batch", rows, RECURRENT["lstm_hidden_size"]]
    assert rec["memory"] == hyper["memory"]
    assert rec["state_inputs"] == [{"name": "memory_state", "dtype": "float32", "shape": shape}]
    assert [(s["name"], s["feeds"]) for s in rec["state_outputs"]] == [("next_memory_state", "memory_state")]


def test_a_head_whose_memory_shape_disagrees_with_its_actor_is_refused(tmp_path, monkeypatch):
    """The file's state inputs are sized by the actor: a subclass whose policy_head() reports another shape
    gets an error naming both, not a file that its clients would feed the wrong state."""
    agent = wb.RecurrentPPO("CartPoleNoVel-v1", memory="gru", n_envs=1, n_steps=8, lstm_hidden_size=8)
    head = agent.policy_head()
    monkeypatch.setattr(agent, "policy_head", lambda: head._replace(memory_state_shape=(3, 8)))
    with pytest.raises(ValueError, match=r"memory_state_shape=\(3, 8\).*\(1, 8\)"):
        agent.export(tmp_path / "policy.onnx")
    assert not (tmp_path / "policy.onnx").exists()


def test_recurrent_export_matches_the_state_in_the_training_steps_extras(tmp_path):
    env = "CartPoleNoVel-v1"
    agent = trained(wb.RecurrentPPO, env, RECURRENT)
    path = agent.export(tmp_path / "policy.onnx")
    assert agent.training
    assert assert_recurrent_parity(agent, env, path, steps=150, check_extras=True) > len(EPISODE_LIMITS)


@pytest.mark.parametrize("memory", ["lstm", "gru", "gtrxl"])
def test_the_acting_export_gives_the_training_steps_extras(tmp_path, memory):
    """``critic=True``: what a served session gives local-inference clients in other languages. Fed the state
    in the extras' layout, it returns the step's value, the logits of its log-probability and the next state,
    as the agent's training decisions carry them, over staggered episodes."""
    from workbench.agents.export import export_policy

    hyper = {**RECURRENT, "memory": memory, "memory_length": 4, "attention_heads": 2, "normalize_observations": True}
    agent = trained(wb.RecurrentPPO, "CartPoleNoVel-v1", hyper)
    path = export_policy(agent, tmp_path / "acting.onnx", critic=True)
    session = ort.InferenceSession(path)
    assert [i.name for i in session.get_inputs()] == ["obs", "state", "episode_start"]
    assert [o.name for o in session.get_outputs()] == ["action", "policy_output", "value", "next_state"]
    key = "lstm_states" if memory == "lstm" else "memory_states"
    rec = json.loads((tmp_path / "acting.onnx.json").read_text())["recurrent"]
    assert rec["extras_key"] == key and rec["state_inputs"][0]["name"] == "state"
    rng = np.random.default_rng(0)
    n = agent.num_envs
    state, starts = None, np.ones(n, np.float32)
    agent.begin_episode(np.ones(n, bool))
    for _ in range(40):
        obs = rng.normal(size=(n, *agent.obs_shape)).astype(np.float32)
        step = agent.decide(obs)
        if state is None:
            state = np.zeros_like(step.extras[key])
        np.testing.assert_allclose(step.extras[key], state * (1 - starts)[:, None, None], rtol=0, atol=1e-5)
        _, logits, value, state = session.run(None, {"obs": obs, "state": state, "episode_start": starts})
        np.testing.assert_allclose(value, step.extras["values"], rtol=0, atol=1e-5)
        log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        np.testing.assert_allclose(log_p[np.arange(n), step.actions], step.extras["log_probs"], rtol=0, atol=1e-5)
        starts = (rng.random(n) < 0.1).astype(np.float32)
        agent.begin_episode(starts.astype(bool))
    assert rec["state_inputs"][0]["shape"] == ["batch", *state.shape[1:]]


ACTING_CASES = [
    case for case in CASES if case[0] in ("ppo-discrete-norm", "ppo-box", "ppo-box-gsde-norm", "a2c-discrete")
]


@pytest.mark.parametrize("name,cls,env_id,hyper", ACTING_CASES, ids=[c[0] for c in ACTING_CASES])
def test_the_feed_forward_acting_export_gives_the_agents_values_and_log_probabilities(
    tmp_path, name, cls, env_id, hyper
):
    """``critic=True`` for PPO and A2C: the acting step a served session gives clients in other languages. Its
    value, and the log-probability its outputs give each action (the logits' softmax; a Box's Gaussian of mean
    ``policy_output`` and ``log_std``, gSDE's depending on the observation), are the agent's own (torch, the
    update's ``_policy_terms``), and its action is the deterministic one."""
    import torch

    from workbench.agents.export import acting_outputs, export_policy

    agent = trained(cls, env_id, hyper)
    path = export_policy(agent, tmp_path / "acting.onnx", critic=True)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    box = isinstance(agent.action_space, spaces.Box)
    names = ["action", "policy_output", "value", *(["log_std"] if box else [])]
    assert acting_outputs(agent) == names[1:]
    assert [i.name for i in session.get_inputs()] == ["obs"] and [o.name for o in session.get_outputs()] == names
    side = json.loads((tmp_path / "acting.onnx.json").read_text())
    assert [o["name"] for o in side["acting"]["other_outputs"]] == names[1:] and "recurrent" not in side
    obs = observations(agent.observation_space, 200)
    outputs = session.run(None, {"obs": obs})
    action, out, value = outputs[:3]
    if not box:
        np.testing.assert_array_equal(action, agent.act(obs, deterministic=True))
    prepared, _ = agent.prepare_obs(obs)
    if agent.config.normalize_observations:
        prepared = agent.obs_normalizer(prepared)
    x = agent._tensor(prepared)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        np.testing.assert_allclose(value, agent._host(agent._values(x)), rtol=0, atol=BOX_ATOL)
        if box:
            np.testing.assert_allclose(action, np.clip(out, agent.action_low, agent.action_high), atol=BOX_ATOL)
            log_std = outputs[3]
            assert log_std.shape == out.shape
            for _ in range(3):
                noise = rng.normal(size=out.shape).astype(np.float32)
                taken = out + np.exp(log_std) * noise  # what a client samples (unclipped)
                mine = (-0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
                theirs, _ = agent._policy_terms(x, torch.as_tensor(taken))
                np.testing.assert_allclose(mine, agent._host(theirs), rtol=0, atol=1e-4)
        else:
            top = out.max(-1, keepdims=True)
            log_p = out - top - np.log(np.exp(out - top).sum(-1, keepdims=True))
            for a in range(int(agent.action_space.n)):
                theirs, _ = agent._policy_terms(x, torch.full((len(obs),), a, dtype=torch.long))
                np.testing.assert_allclose(log_p[:, a], agent._host(theirs), rtol=0, atol=BOX_ATOL)
            # and the training decision's extras: its sampled action's log-probability and its value
            step = agent.decide(obs[:16])
            np.testing.assert_allclose(step.extras["values"], value[:16], rtol=0, atol=BOX_ATOL)
            np.testing.assert_allclose(
                step.extras["log_probs"], log_p[np.arange(16), step.actions], rtol=0, atol=BOX_ATOL
            )


def test_the_acting_export_is_for_on_policy_agents(tmp_path):
    from workbench.agents.export import acting_outputs, export_policy

    agent = wb.DQN("CartPole-v1", seed=0)
    assert acting_outputs(agent) is None
    with pytest.raises(TypeError, match=r"DQN exports no acting step with its critic.*on-policy"):
        export_policy(agent, tmp_path / "acting.onnx", critic=True)
    assert not (tmp_path / "acting.onnx").exists()


def test_cli_exports_a_saved_recurrent_run(tmp_path, capsys):
    agent = trained(wb.RecurrentPPO, "PendulumNoVel-v1", {**RECURRENT, "normalize_observations": True})
    agent.save(tmp_path / "run")
    out = tmp_path / "policy.onnx"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert "exported the deterministic RecurrentPPO policy" in capsys.readouterr().out
    loaded = wb.load(tmp_path / "run").eval()
    assert_recurrent_parity(loaded, "PendulumNoVel-v1", out, steps=150)


# -- the optional action_mask input --------------------------------------------------------------


def random_masks(action_space: spaces.Space, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random bool masks with at least one allowed action (per dimension for MultiDiscrete)."""
    sizes = [int(action_space.n)] if isinstance(action_space, spaces.Discrete) else [int(k) for k in action_space.nvec]
    parts = []
    for size in sizes:
        part = rng.random((n, size)) < 0.5
        part[np.arange(n), rng.integers(0, size, n)] = True
        parts.append(part)
    return np.concatenate(parts, axis=1)


MASK_CASES = [
    pytest.param(wb.PPO, None, ON_POLICY, id="ppo-discrete"),
    pytest.param(wb.PPO, 2, {**ON_POLICY, "normalize_observations": True}, id="ppo-multidiscrete-norm"),
    pytest.param(wb.A2C, 3, {"net_arch": (32, 32)}, id="a2c-multidiscrete"),
    pytest.param(wb.DQN, None, DQN_FAST, id="dqn"),
    pytest.param(wb.QRDQN, None, DQN_FAST, id="qrdqn"),
    pytest.param(wb.Rainbow, None, {**DQN_FAST, "v_min": 0.0, "v_max": 10.0}, id="rainbow"),
]


@pytest.mark.parametrize(("cls", "dims", "hyper"), MASK_CASES)
def test_masked_onnx_policy_chooses_the_best_allowed_action(tmp_path, cls, dims, hyper):
    env = lambda: MaskedTarget(dims=dims)  # noqa: E731
    agent = trained(cls, env, hyper)
    path = agent.export(tmp_path / "policy.onnx", action_mask=True)
    side = json.loads((tmp_path / "policy.onnx.json").read_text())
    size = int(sum(agent.action_space.nvec)) if dims else int(agent.action_space.n)
    assert side["action_mask"]["name"] == "action_mask" and side["action_mask"]["shape"] == ["batch", size]
    obs = observations(agent.observation_space)
    masks = random_masks(agent.action_space, len(obs), np.random.default_rng(0))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["action"], {"obs": obs, "action_mask": masks})[0]
    expected = agent.act(obs, deterministic=True, action_mask=masks)
    np.testing.assert_array_equal(got, expected)
    # The masks matter: without them the exported greedy action differs somewhere.
    assert not np.array_equal(got, run_onnx(agent.export(tmp_path / "plain.onnx"), obs))
    assert json.loads((tmp_path / "plain.onnx.json").read_text())["action_mask"] is None


def test_masked_recurrent_export_over_episodes(tmp_path):
    env = lambda: MaskedTarget(dims=2, episode_length=60)  # noqa: E731 - the limits stagger it
    agent = trained(wb.RecurrentPPO, env, RECURRENT).eval()
    path = agent.export(tmp_path / "policy.onnx", action_mask=True)
    assert assert_recurrent_parity(agent, env, path, steps=150, masks=True) > len(EPISODE_LIMITS)


def test_cli_exports_a_mask_input(tmp_path, capsys):
    wb.PPO(lambda: MaskedTarget(dims=2), seed=0, **ON_POLICY).save(tmp_path / "run")
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "p.onnx"), "--action-mask"]) == 0
    assert json.loads((tmp_path / "p.onnx.json").read_text())["action_mask"]["shape"] == ["batch", 12]
    wb.PPO("Pendulum-v1").save(tmp_path / "box")
    assert main(["export", str(tmp_path / "box"), str(tmp_path / "b.onnx"), "--action-mask"]) == 2
    assert "action_mask=False" in capsys.readouterr().err


def test_mask_input_needs_masked_discrete_actions(tmp_path):
    with pytest.raises(TypeError, match="action_mask=False"):
        wb.PPO("Pendulum-v1").export(tmp_path / "p.onnx", action_mask=True)
    with pytest.raises(TypeError, match="action_mask=False"):
        wb.SAC("Pendulum-v1").export(tmp_path / "p.onnx", action_mask=True)
    assert not (tmp_path / "p.onnx").exists()


def test_masked_logit_agrees_with_the_on_policy_heads():
    from workbench.agents import heads, on_policy

    assert heads.MASKED_LOGIT == on_policy.MASKED_LOGIT
