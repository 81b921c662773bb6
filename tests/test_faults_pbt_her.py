"""PBT and HER inputs checked at the door (issue 49, class 5): search bounds, population.json read back
field by field, and HER's compute_reward checked when the memory is built."""

from __future__ import annotations

import json

import numpy as np
import pytest

import workbench as wb


def tiny_ppo(**hp):
    return wb.PPO("CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, net_arch=(8,), n_envs=1, **hp)


SPACE = {"learning_rate": (1e-4, 1e-2), "ent_coef": (0.0, 0.05)}


@pytest.mark.parametrize(
    ("bounds", "words"),
    [
        ((1e-4, float("inf")), "must be finite"),
        ((float("-inf"), 1e-2), "must be finite"),
        ((float("nan"), 1e-2), "must be finite"),
        ((-1e308, 1e308), "too wide"),
    ],
)
def test_a_range_that_cannot_be_drawn_from_is_refused_naming_the_hyperparameter(tmp_path, bounds, words):
    with pytest.raises(ValueError, match=rf"space\['learning_rate'\].*{words}"):
        wb.pbt(
            tiny_ppo,
            "CartPole-v1",
            population=2,
            space={"learning_rate": bounds},
            steps=128,
            interval=64,
            directory=tmp_path / "p",
            start=False,
        )
    with pytest.raises(ValueError, match=r"space\['n_steps'\].*within"):
        wb.pbt(
            tiny_ppo,
            "CartPole-v1",
            population=2,
            space={"n_steps": (1, 10**30)},
            steps=128,
            interval=64,
            directory=tmp_path / "q",
            start=False,
        )


@pytest.fixture
def saved(tmp_path):
    """A population's directory with its population.json, and the JSON it holds."""
    directory = tmp_path / "p"
    p = wb.Population(tiny_ppo, "CartPole-v1", population=2, space=SPACE, steps=128, interval=64, directory=directory)
    p._write_state()  # what a run writes at each boundary
    path = directory / "population.json"
    assert wb.Population.open(directory, make_agent=tiny_ppo).population_size == 2  # the file as written opens
    return directory, json.loads(path.read_text())


def _damage(data, field, value):
    *parents, last = field
    target = data
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        (("members", 0, "index"), "../../x", "members[0].index"),
        (("members", 0, "index"), -1, "members[0].index"),
        (("members", 1, "index"), 0, "members[1].index"),
        (("members", 0, "index"), KeyError, "members[0].index"),
        (("members", 0, "scores"), [["a", 1]], "members[0].scores"),
        (("members",), {"0": {}}, "'members'"),
        (("settings", "population"), "2", "settings.population"),
        (("settings", "population"), KeyError, "settings.population"),
        (("settings", "space", "learning_rate", "low"), None, "settings.space.learning_rate.low"),
        (("settings", "space", "learning_rate", "kind"), "str", "settings.space.learning_rate.kind"),
        (("settings", "space"), [], "settings.space"),
        (("settings",), None, "'settings'"),
        (("settings", "perturb"), 0.8, "settings.perturb"),
        (("events",), [{"kind": "exploit"}], "events[0]"),
        (("rng",), "state", "'rng'"),
        (("elapsed",), "soon", "'elapsed'"),
    ],
)
def test_a_damaged_population_json_is_a_checkpoint_error_naming_the_file_and_field(saved, field, value, named):
    directory, data = saved
    _damage(data, field, value)
    (directory / "population.json").write_text(json.dumps(data))
    for reopen in (
        lambda: wb.Population.open(directory, make_agent=tiny_ppo),
        lambda: wb.Population(
            tiny_ppo, "CartPole-v1", population=2, space=SPACE, steps=128, interval=64, directory=directory
        ),
    ):
        with pytest.raises(wb.CheckpointError, match="population.json") as e:
            reopen()
        assert named in str(e.value)
    assert not (directory.parent / "x").exists()


def test_a_population_json_with_a_settings_value_out_of_range_is_a_checkpoint_error(saved):
    directory, data = saved
    data["settings"]["interval"] = 10**6  # more than steps
    (directory / "population.json").write_text(json.dumps(data))
    with pytest.raises(wb.CheckpointError, match=r"population.json: its settings.*interval"):
        wb.Population.open(directory, make_agent=tiny_ppo)


# -- HER: compute_reward checked on the first stored step ---------------------------------------------


@pytest.mark.parametrize(
    ("returns", "kind", "words"),
    [
        (lambda n: np.array(["1"] * n), TypeError, "returned <U1 values"),
        (lambda n: [None] * n, TypeError, "returned object values"),
        (lambda n: np.full(n, np.nan, np.float32), ValueError, "returned nan"),
        (lambda n: np.zeros(n + 1, np.float32), ValueError, "returned shape"),
    ],
    ids=["strings", "none", "nan", "shape"],
)
def test_her_compute_reward_that_is_not_one_number_per_row_is_found_at_the_first_stored_step(returns, kind, words):
    from workbench.envs.goals import BitFlippingEnv

    def reward(achieved, desired, info):
        return returns(len(achieved))

    env = BitFlippingEnv(n_bits=3)
    # learning_starts far away: no update runs, so only the check at the first stored step can find it
    agent = wb.DQN(env, replay=wb.HerReplay(compute_reward=reward), learning_starts=10_000, buffer_size=1_000)
    session = wb.Session(agent, env, seed=0)
    with pytest.raises(kind, match=rf"compute_reward \(.*reward\) {words}"):
        session.run(steps=3)
    assert session.steps <= 1
