"""wb.Dataset: building, validation, the pickle-free format, CSV and Minari input, recording a session."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest

import workbench as wb
from workbench.offline.datasets import DatasetError


def _arrays(n=12, episode_len=4, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    actions = rng.integers(0, 2, n)
    rewards = rng.normal(size=n)
    ids = np.repeat(np.arange(n // episode_len), episode_len)
    return obs, actions, rewards, ids


def test_from_arrays_episodes_and_next_observations():
    obs, actions, rewards, ids = _arrays()
    ds = wb.Dataset.from_arrays(obs, actions, rewards, episode_ids=ids, log_probs=np.full(12, np.log(0.5)))
    assert len(ds) == 12 and ds.num_episodes == 3
    assert ds.episode_bounds() == [(0, 4), (4, 8), (8, 12)]
    np.testing.assert_allclose(ds.next_observations[0], obs[1])
    np.testing.assert_allclose(ds.next_observations[3], obs[3])  # the last step of an episode
    assert ds.terminated[[3, 7, 11]].all() and not ds.terminated[[0, 1, 2]].any()
    np.testing.assert_allclose(ds.episode_returns(), [rewards[a:b].sum() for a, b in ds.episode_bounds()], rtol=1e-5)
    assert ds.action_space == gym.spaces.Discrete(2) and ds.discrete


def test_continuous_actions_infer_a_box():
    obs, _, rewards, ids = _arrays()
    ds = wb.Dataset.from_arrays(obs, np.linspace(-2, 2, 12), rewards, episode_ids=ids)
    assert isinstance(ds.action_space, gym.spaces.Box) and ds.action_space.shape == (1,) and ds.actions.shape == (12, 1)
    assert not ds.discrete


def test_an_unfinished_last_episode_is_cut_as_truncated():
    obs, actions, rewards, _ = _arrays()
    ds = wb.Dataset.from_arrays(obs, actions, rewards, terminated=np.zeros(12))
    assert ds.num_episodes == 1 and ds.truncated[-1] and not ds.terminated[-1]


def test_save_load_round_trip_without_pickle(tmp_path):
    obs, actions, rewards, ids = _arrays()
    ds = wb.Dataset.from_arrays(
        obs, actions, rewards, episode_ids=ids, log_probs=np.full(12, -0.7), metadata={"note": "x"}
    )
    path = ds.save(tmp_path / "data")
    meta = json.load(open(os.path.join(path, "dataset.json")))
    assert meta["format"] == "workbench-dataset" and meta["steps"] == 12 and meta["episodes"] == 3
    with np.load(os.path.join(path, "arrays.npz"), allow_pickle=False) as f:
        assert all(f[k].dtype != object for k in f.files)
    back = wb.Dataset.load(path)
    for field in ("observations", "actions", "rewards", "next_observations", "terminated", "truncated", "log_probs"):
        np.testing.assert_array_equal(getattr(back, field), getattr(ds, field))
    assert back.action_space == ds.action_space and back.metadata == {"note": "x"}


def test_clear_errors():
    obs, actions, rewards, ids = _arrays()
    with pytest.raises(DatasetError, match="'rewards' has 11 rows"):
        wb.Dataset.from_arrays(obs, actions, rewards[:11])
    bad = obs.copy()
    bad[5, 1] = np.nan
    with pytest.raises(DatasetError, match="'observations' row 5 is NaN"):
        wb.Dataset.from_arrays(bad, actions, rewards)
    with pytest.raises(DatasetError, match="'actions' is missing"):
        wb.Dataset.from_arrays(obs, None, rewards)
    with pytest.raises(DatasetError, match="positive"):
        wb.Dataset.from_arrays(obs, actions, rewards, log_probs=np.full(12, 0.5))
    with pytest.raises(DatasetError, match="outside Discrete"):
        wb.Dataset.from_arrays(obs, actions + 5, rewards, action_space=gym.spaces.Discrete(2))
    with pytest.raises(DatasetError, match="'next_observations' has shape"):
        wb.Dataset.from_arrays(obs, actions, rewards, next_observations=obs[:, :2])


def test_load_refuses_what_is_not_a_dataset(tmp_path):
    with pytest.raises(DatasetError, match="no dataset.json"):
        wb.Dataset.load(tmp_path)
    (tmp_path / "dataset.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        wb.Dataset.load(tmp_path)
    (tmp_path / "dataset.json").write_text(json.dumps({"format": "workbench-dataset", "version": 1}))
    np.savez(tmp_path / "arrays.npz", obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DatasetError):
        wb.Dataset.load(tmp_path)


def test_split_keeps_whole_episodes():
    obs, actions, rewards, _ = _arrays(n=40)
    ds = wb.Dataset.from_arrays(obs, actions, rewards, episode_ids=np.repeat(np.arange(10), 4))
    train, held = ds.split(0.2, seed=1)
    assert train.num_episodes == 8 and held.num_episodes == 2 and len(train) + len(held) == 40
    with pytest.raises(ValueError, match="fraction"):
        ds.split(1.5)


def test_from_csv(tmp_path):
    path = tmp_path / "log.csv"
    lines = ["episode,x,v,action,reward,prob"]
    for ep in range(3):
        for t in range(5):
            lines.append(f"{ep},{t * 0.1},{-t},{t % 2},{1.0},0.5")
    path.write_text("\n".join(lines) + "\n")
    ds = wb.Dataset.from_csv(
        path, observations=["x", "v"], action="action", reward="reward", episode="episode", probability="prob"
    )
    assert len(ds) == 15 and ds.num_episodes == 3 and ds.action_space == gym.spaces.Discrete(2)
    np.testing.assert_allclose(ds.log_probs, np.log(0.5))
    np.testing.assert_allclose(ds.next_observations[0], [0.1, -1.0])
    with pytest.raises(DatasetError, match="no column 'speed'; the file has columns episode, x, v"):
        wb.Dataset.from_csv(path, observations=["speed"], action="action", reward="reward")


def test_from_minari_local_store(tmp_path):
    pytest.importorskip("minari")
    pytest.importorskip("pyarrow")
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    obs_space = gym.spaces.Box(-10, 10, (3,), np.float32)
    act_space = gym.spaces.Discrete(2)
    root = tmp_path / "store" / "toy" / "random-v0" / "data"
    root.mkdir(parents=True)
    storage = MinariStorage.new(root, observation_space=obs_space, action_space=act_space, data_format="arrow")
    rng = np.random.default_rng(0)
    episodes = []
    for i, length in enumerate((4, 6)):
        episodes.append(
            EpisodeBuffer(
                id=i,
                observations=list(rng.normal(size=(length + 1, 3)).astype(np.float32)),
                actions=list(rng.integers(0, 2, length)),
                rewards=list(np.ones(length)),
                terminations=[False] * (length - 1) + [i == 0],
                truncations=[False] * (length - 1) + [i == 1],
            )
        )
    storage.update_episodes(episodes)
    ds = wb.Dataset.from_minari("toy/random-v0", root=tmp_path / "store")
    assert len(ds) == 10 and ds.num_episodes == 2 and ds.action_space == act_space
    assert ds.terminated[3] and ds.truncated[9]
    np.testing.assert_allclose(ds.next_observations[0], ds.observations[1])
    with pytest.raises(DatasetError, match="no Minari dataset"):
        wb.Dataset.from_minari("toy/missing-v0", root=tmp_path / "store")


def test_session_records_transitions_with_behaviour_probabilities(tmp_path):
    agent = wb.DQN("CartPole-v1", learning_starts=100, seed=0, n_envs=2)
    session = wb.Session(agent, "CartPole-v1", seed=0, record=tmp_path / "data")
    session.run(steps=400)
    ds = wb.Dataset.load(tmp_path / "data")
    assert len(ds) == 400
    assert ds.num_episodes >= session.episodes
    p = np.exp(ds.log_probs)
    assert ((p > 0) & (p <= 1)).all()
    np.testing.assert_allclose(p[:50], 0.5, rtol=1e-5)  # random actions before learning_starts
    # each episode is one env's steps: a terminal step's next observation is not the following row
    for a, b in ds.episode_bounds():
        np.testing.assert_allclose(ds.next_observations[a : b - 1], ds.observations[a + 1 : b])


def test_ppo_records_its_log_probs(tmp_path):
    agent = wb.PPO("CartPole-v1", n_steps=64, seed=0, n_envs=1)
    wb.Session(agent, "CartPole-v1", seed=0, record=tmp_path / "ppo").run(steps=64)
    ds = wb.Dataset.load(tmp_path / "ppo")
    assert ds.log_probs is not None and (ds.log_probs < 0).all()


def test_replay_agent_starts_from_a_dataset():
    obs, actions, rewards, ids = _arrays(n=40)
    env = gym.make("CartPole-v1")
    ds = wb.Dataset.from_arrays(
        np.zeros((40, 4)),
        actions,
        rewards,
        episode_ids=np.repeat(np.arange(10), 4),
        observation_space=env.observation_space,
        action_space=env.action_space,
    )
    agent = wb.DQN(env, learning_starts=0)
    agent.load_dataset(ds)
    assert len(agent.memory) == 40
    session = wb.Session(wb.DQN(env, learning_starts=0, train_freq=4, gradient_steps=1), env, dataset=ds)
    assert len(session.agent.memory) == 40
    session.run(steps=20)
    assert len(session.agent.memory) == 60
    with pytest.raises(DatasetError, match="observations have shape"):
        wb.DQN(env).load_dataset(wb.Dataset.from_arrays(obs, actions, rewards))


# -- issue 32, case 12: Dataset.load trusts nothing, with the limits of a checkpoint ----------------


@pytest.fixture
def saved(tmp_path):
    obs, actions, rewards, ids = _arrays()
    return wb.Dataset.from_arrays(obs, actions, rewards, episode_ids=ids).save(tmp_path / "data")


def _edit(path, edit):
    meta_path = os.path.join(path, "dataset.json")
    meta = json.load(open(meta_path))
    text = edit(meta)
    with open(meta_path, "w") as f:
        f.write(text if isinstance(text, str) else json.dumps(meta))


def _put(key, value):
    def edit(meta):
        node = meta
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return edit


_DELETE = object()
BOX = {"type": "Box", "low": 0.0, "high": 1.0, "dtype": "float32"}


def _nested_dict(depth):
    space = {"type": "Discrete", "n": 2, "start": 0}
    for _ in range(depth):
        space = {"type": "Dict", "spaces": {"a": space}}
    return space


BAD_DATASET_JSON = {
    "a 4 TB observation space": (
        _put("observation_space", {**BOX, "shape": [10**6, 10**6]}),
        "'observation_space.shape'",
    ),
    "a 37 GiB action space": (_put("action_space", {**BOX, "shape": [2**31, 5]}), "'action_space.shape'"),
    "a negative dimension": (_put("observation_space", {**BOX, "shape": [-3]}), "'observation_space.shape'"),
    "a MultiDiscrete of 0 choices": (
        _put("action_space", {"type": "MultiDiscrete", "nvec": [[2, 0]]}),
        "'action_space.nvec'",
    ),
    "an unknown space type": (_put("observation_space.type", "Blob"), "'observation_space.type'"),
    "a space a list": (_put("action_space", [1, 2]), "'action_space'"),
    "bounds of another shape": (_put("observation_space.low", [0.0, 1.0]), "'observation_space.low'"),
    "no observation space": (_put("observation_space", _DELETE), "'observation_space' is missing"),
    "no action space": (_put("action_space", _DELETE), "'action_space' is missing"),
    "version text": (_put("version", "1"), "'version'"),
    "version missing": (_put("version", _DELETE), "'version'"),
    "version a float": (_put("version", 1.5), "'version'"),
    "version newer": (_put("version", 99), "newer than this library reads"),
    "steps text": (_put("steps", "12"), "'steps'"),
    "has_log_probs text": (_put("has_log_probs", "no"), "'has_log_probs'"),
    "metadata a list": (_put("metadata", [1]), "'metadata'"),
    "deep nesting": (
        lambda m: json.dumps(m)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "nested too deeply",
    ),
    "deep space nesting": (_put("observation_space", _nested_dict(60)), "nested deeper"),
    "NaN": (lambda m: json.dumps(m).replace('"steps": ', '"steps": NaN, "x": '), "NaN"),
    "5000-digit integer": (
        lambda m: json.dumps(m).replace('"steps": ', '"steps": ' + "9" * 5000 + ', "x": '),
        "5000 digits",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASET_JSON))
def test_a_crafted_dataset_json_is_a_dataset_error_naming_file_and_field(saved, case):
    edit, expected = BAD_DATASET_JSON[case]
    _edit(saved, edit)
    with pytest.raises(DatasetError) as info:
        wb.Dataset.load(saved)
    message = str(info.value)
    assert "dataset.json" in message and expected in message, message
    assert len(message) < 400  # described, never echoed


def test_a_dataset_json_link_to_dev_zero_is_refused_without_reading(saved):
    os.unlink(os.path.join(saved, "dataset.json"))
    os.symlink("/dev/zero", os.path.join(saved, "dataset.json"))
    with pytest.raises(DatasetError, match="symbolic link"):
        wb.Dataset.load(saved)


def test_a_dataset_loads_as_saved_after_the_checks(saved):
    ds = wb.Dataset.load(saved)
    assert len(ds) == 12 and ds.action_space == gym.spaces.Discrete(2)
    _edit(saved, _put("metadata", {"source": "app", "nested": {"a": [1, 2]}}))
    assert wb.Dataset.load(saved).metadata["nested"] == {"a": [1, 2]}


def test_a_missing_dataset_directory_is_named(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset"):
        wb.Dataset.load(tmp_path / "nothing")


# -- issue 32: CSV from Excel, short rows; arrays that are ragged or text --------------------------


def _csv(path, rows, bom=False, encoding="utf-8"):
    text = "\n".join(rows) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode(encoding))
    return path


def test_from_csv_reads_excels_byte_order_mark(tmp_path):
    rows = ["x,v,action,reward,done", "0.1,1,0,1.0,0", "0.2,2,1,1.0,1", "0.3,3,1,0.5,1"]
    ds = wb.Dataset.from_csv(
        _csv(tmp_path / "excel.csv", rows, bom=True),
        observations=["x", "v"],
        action="action",
        reward="reward",
        terminated="done",
    )
    assert len(ds) == 3 and ds.num_episodes == 2
    np.testing.assert_allclose(ds.observations[:, 0], [0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    ("bad_row", "fields"),
    [("0.2,2,1,1.0", 4), ("0.2,2,1", 3), ("0.2,2,1,1.0,1,7", 6)],
    ids=["no done", "two short", "one long"],
)
def test_a_short_or_long_csv_row_is_an_error_naming_the_row(tmp_path, bad_row, fields):
    rows = ["x,v,action,reward,done", "0.1,1,0,1.0,0", bad_row, "0.3,3,1,0.5,1"]
    with pytest.raises(DatasetError) as info:
        wb.Dataset.from_csv(
            _csv(tmp_path / "log.csv", rows),
            observations=["x", "v"],
            action="action",
            reward="reward",
            terminated="done",
        )
    message = str(info.value)
    assert "log.csv" in message and "row 2" in message and f"has {fields} fields, the header 5" in message, message


def test_an_empty_value_between_commas_is_still_read(tmp_path):
    rows = ["x,v,action,reward,done", "0.1,1,0,1.0,", "0.2,2,1,1.0,1"]
    ds = wb.Dataset.from_csv(
        _csv(tmp_path / "log.csv", rows), observations=["x", "v"], action="action", reward="reward", terminated="done"
    )
    assert ds.terminated.tolist() == [False, True]


def test_a_csv_that_is_not_utf8_is_named(tmp_path):
    rows = ["x,action,reward,note", "0.1,0,1.0,café"]
    with pytest.raises(DatasetError, match=r"log\.csv: not UTF-8 text.*CSV UTF-8"):
        wb.Dataset.from_csv(
            _csv(tmp_path / "log.csv", rows, encoding="latin-1"), observations=["x"], action="action", reward="reward"
        )


RAGGED = [[0.1, 0.2], [0.3], [0.4, 0.5]]


@pytest.mark.parametrize(
    ("kwargs", "name", "what"),
    [
        ({"observations": RAGGED}, "observations", "ragged"),
        ({"observations": [["a", "b"], ["c", "d"], ["e", "f"]]}, "observations", "text"),
        ({"actions": ["left", "right", "left"]}, "actions", "text"),
        ({"actions": [[0.1], [0.2, 0.3], [0.4]]}, "actions", "ragged"),
        ({"rewards": [1.0, None, 2.0]}, "rewards", "row 1 is None"),
        ({"rewards": [1.0, {"x": 1}, 2.0]}, "rewards", "not numbers"),
        ({"rewards": ["1.0", "2.0", "3.0"]}, "rewards", "text"),
        ({"terminated": ["no", "no", "yes"]}, "terminated", "text"),
        ({"truncated": [[0], [0, 1], [1]]}, "truncated", "ragged"),
        ({"next_observations": RAGGED}, "next_observations", "ragged"),
        ({"log_probs": ["-0.7", "-0.7", "-0.7"]}, "log_probs", "text"),
        ({"observations": 5.0}, "observations", "single number"),
        ({"episode_ids": [[0], [0, 1], [1]]}, "episode_ids", "ragged"),
    ],
)
def test_from_arrays_names_a_ragged_or_text_argument(kwargs, name, what):
    args = {
        "observations": [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]],
        "actions": [0, 1, 0],
        "rewards": [1.0, 0.0, 1.0],
        **kwargs,
    }
    with pytest.raises(DatasetError) as info:
        wb.Dataset.from_arrays(**args)
    message = str(info.value)
    assert message.startswith("Dataset.from_arrays:") and f"'{name}'" in message and what in message, message


def test_from_arrays_takes_object_arrays_of_numbers():
    obs = np.array([[0.1, 0.2], [0.3, 0.4]], dtype=object)  # e.g. a pandas column of dtype object
    ds = wb.Dataset.from_arrays(obs, np.array([0, 1], dtype=object), [1.0, 2.0], terminated=[0, 1])
    assert ds.observations.dtype == np.float32 and ds.actions.tolist() == [0, 1]
