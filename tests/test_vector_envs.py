"""A user's vector env as the session's env: gymnasium's SyncVectorEnv / AsyncVectorEnv /
gym.make_vec and EnvPool (workbench.envs.VectorEnvAdapter, workbench.parallel.vector)."""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import workbench as wb
from workbench.envs import EnvMethodError, EnvOutputError, VecEnv, VectorEnvAdapter, as_env_source
from workbench.envs.testing import MaskedTarget

MODES = ("NextStep", "SameStep")
HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(
    not HAS_ENVPOOL, reason="EnvPool is not installed (pip install 'rl-workbench[envpool]')"
)


def make_vec(env_fn: Any, n: int, mode: str = "NextStep", async_: bool = False) -> gym.vector.VectorEnv:
    cls = gym.vector.AsyncVectorEnv if async_ else gym.vector.SyncVectorEnv
    return cls([env_fn] * n, autoreset_mode=gym.vector.AutoresetMode(mode))


class Counter(gym.Env):
    """Observation: the step within the episode (after reset 0); truncated after ``limit`` steps;
    reward the step number; a method ``set_limit`` and an ``add`` for call_env."""

    observation_space = spaces.Box(0, 100, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, limit: int = 3, nan_at: int | None = None) -> None:
        self.limit, self.nan_at, self.t = limit, nan_at, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        obs = np.array([np.nan if self.t == self.nan_at else self.t], dtype=np.float32)
        return obs, float(self.t), False, self.t >= self.limit, {}

    def set_limit(self, limit: int) -> int:
        """Change the episode length; returns the old one."""
        old, self.limit = self.limit, limit
        return old


# -- the autoreset rules ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", [*MODES, "Disabled"])
def test_final_obs_is_the_last_observation_in_every_autoreset_mode(mode):
    envs = VectorEnvAdapter(make_vec(lambda: Counter(limit=3), 2, mode))
    obs = envs.reset(seed=0)
    assert obs[:, 0].tolist() == [0, 0]
    seen = []
    for _ in range(7):
        obs, rewards, terminated, truncated, final = envs.step(np.zeros(2, dtype=np.int64))
        seen.append((obs[0, 0], final[0, 0], rewards[0], truncated[0]))
    # Same-step autoreset, whatever the vector env's mode: the step that truncates returns the last
    # observation (3) as final_obs and the new episode's first (0) to act on; no step is a reset step.
    assert seen == [
        (1, 1, 1, False),
        (2, 2, 2, False),
        (0, 3, 3, True),
        (1, 1, 1, False),
        (2, 2, 2, False),
        (0, 3, 3, True),
        (1, 1, 1, False),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_steps_match_the_libraries_own_vecenv(mode):
    """Same seeds, same actions: a gymnasium vector env in either mode steps exactly like VecEnv."""
    ours = VecEnv([gym.make("CartPole-v1") for _ in range(3)], seed=5)
    theirs = VectorEnvAdapter(
        gym.make_vec(
            "CartPole-v1",
            num_envs=3,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode(mode)},
        )
    )
    np.testing.assert_array_equal(ours.reset(), theirs.reset(seed=5))
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(120):
        actions = rng.integers(0, 2, size=3)
        mine, yours = ours.step(actions), theirs.step(actions)
        for a, b in zip(mine, yours, strict=True):
            np.testing.assert_array_equal(a, b)
        ended += int((yours[2] | yours[3]).sum())
    assert ended >= 3  # episodes ended, so the autoreset was compared too


@pytest.mark.parametrize("mode", MODES)
def test_session_trains_on_make_vec_with_n_envs_from_it(mode):
    venv = gym.make_vec(
        "CartPole-v1",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode(mode)},
    )
    agent = wb.PPO(venv, seed=0, n_steps=16, batch_size=32, n_epochs=1)
    assert agent.num_envs == 4
    session = wb.Session(agent, venv, seed=0)
    session.run(steps=256)
    assert session.status == "finished" and session.steps == 256
    assert session.episodes > 0 and len(session.signals["episode_reward"].values) == session.episodes


def test_both_modes_give_the_same_run():
    results = []
    for mode in MODES:
        venv = gym.make_vec(
            "CartPole-v1",
            num_envs=2,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode(mode)},
        )
        session = wb.Session(wb.PPO(venv, seed=0, n_steps=16, batch_size=16, n_epochs=1), venv, seed=0)
        session.run(steps=128)
        results.append(list(session.signals["episode_reward"].values))
    assert results[0] == results[1] and len(results[0]) > 0


def test_truncation_bootstraps_from_the_final_observation():
    """The transition of a truncated step carries the last observation, not the reset one."""
    venv = make_vec(lambda: Counter(limit=2), 2, "NextStep")
    agent = wb.PPO(venv, seed=0, n_steps=4, batch_size=8, n_epochs=1)
    seen: list[Any] = []
    observe = agent.observe
    agent.observe = lambda t: (seen.append(t), observe(t))[1]  # type: ignore[method-assign]
    wb.Session(agent, venv, seed=0).run(steps=8)
    truncated = [t for t in seen if t.truncated.any()]
    assert truncated and all((t.next_obs[t.truncated, 0] == 2).all() for t in truncated)
    assert all((t.obs[:, 0] < 2).all() for t in seen)  # the agent always acts on 0 or 1, never the final 2


def test_async_vector_env():
    venv = make_vec(lambda: gym.make("CartPole-v1"), 2, "NextStep", async_=True)
    try:
        session = wb.Session(wb.PPO(venv, seed=0, n_steps=16, batch_size=32, n_epochs=1), venv, seed=0)
        session.run(steps=64)
        assert session.status == "finished" and session.steps == 64
        assert session.call_env("get_wrapper_attr", "spec")[0].id == "CartPole-v1"
    finally:
        venv.close()


# -- what the session checks -------------------------------------------------------------------


def test_n_envs_mismatch_and_workers_are_clear_errors():
    venv = make_vec(lambda: Counter(), 3)
    with pytest.raises(ValueError, match=r"n_envs=8, but the vector env .* steps 3 envs"):
        wb.PPO(venv, n_envs=8)
    other = wb.PPO(Counter(), n_envs=8)
    with pytest.raises(ValueError, match=r"steps 3 envs, but the agent was built with n_envs=8"):
        wb.Session(other, venv)
    agent = wb.PPO(venv)
    with pytest.raises(ValueError, match="num_workers=2"):
        wb.Session(agent, venv, num_workers=2)
    with pytest.raises(ValueError, match="backend='envpool' builds EnvPool envs from a registered id"):
        wb.Session(agent, venv, backend="envpool")
    assert wb.DQN(venv).num_envs == 3  # off-policy agents take it too
    assert as_env_source(venv).spaces() == (Counter.observation_space, Counter.action_space)


def test_nan_and_shape_errors_name_the_env():
    venv = make_vec(lambda: Counter(limit=50), 3)
    venv.envs[2].nan_at = 2
    session = wb.Session(wb.PPO(venv, n_steps=8, batch_size=24), venv)
    with pytest.raises(EnvOutputError, match=r"env.step at step 2 \(env 2 of 3\) returned observation \[nan\]"):
        session.run(steps=30)
    assert session.status == "failed"

    class WrongShape(gym.vector.VectorEnv):
        num_envs = 2
        single_observation_space = Counter.observation_space
        single_action_space = Counter.action_space
        metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

        def reset(self, *, seed=None, options=None):
            return np.zeros((2, 3), dtype=np.float32), {}

    with pytest.raises(EnvOutputError, match=r"shape \(2, 3\), expected \(2, 1\)"):
        VectorEnvAdapter(WrongShape()).reset()


def test_missing_final_obs_in_same_step_mode_is_refused():
    envs = VectorEnvAdapter(make_vec(lambda: Counter(limit=1), 2, "SameStep"))
    envs.reset()
    envs.venv.step = lambda a: (np.zeros((2, 1), np.float32), np.ones(2), np.zeros(2, bool), np.ones(2, bool), {})
    with pytest.raises(EnvOutputError, match=r"env 0 of 2.*final_obs"):
        envs.step(np.zeros(2, dtype=np.int64))


# -- control, calls, masks, evaluation, checkpoints ----------------------------------------------


def test_call_env_pause_and_stop_through_the_vector_env():
    venv = make_vec(lambda: Counter(limit=1000), 2)
    session = wb.Session(wb.PPO(venv, n_steps=8, batch_size=16, n_epochs=1), venv, seed=0)
    assert session.call_env("set_limit", 5) == [1000, 1000]
    with pytest.raises(EnvMethodError, match="no method 'nope'"):
        session.call_env("nope")
    session.start(steps=10**7)
    session.pause()
    assert session.status == "paused"
    session.resume()
    session.stop()
    assert session.status == "stopped" and all(env.limit == 5 for env in venv.envs)
    steps = session.steps
    session.run(steps=16)  # 16 more steps: the same vector env goes on (the runner is persistent)
    assert session.steps == steps + 16
    venv.close()


@pytest.mark.parametrize("mask_in", ["method", "info", "obs"])
@pytest.mark.parametrize("mode", MODES)
def test_masks_from_every_source_in_both_modes(mask_in, mode):
    """MaskedTarget raises on a forbidden action; its episodes end every 4 steps, so the masks of
    new episodes (after the autoreset) are exercised too."""
    venv = make_vec(lambda: MaskedTarget(mask_in=mask_in, episode_length=4), 2, mode)
    session = wb.Session(wb.PPO(venv, seed=0, n_steps=8, batch_size=16, n_epochs=1), venv, seed=0)
    session.run(steps=200)
    assert session.status == "finished", session.error


def test_evaluation_on_a_separate_env_and_resume(tmp_path):
    venv = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    agent = wb.PPO(venv, seed=0, n_steps=16, batch_size=32, n_epochs=1)
    with pytest.raises(ValueError, match="eval_env"):
        wb.Session(agent, venv, eval_every=32)
    session = wb.Session(agent, venv, seed=0, eval_every=32, eval_episodes=1, eval_env="CartPole-v1")
    session.run(steps=64)
    assert len(session.signals["eval_reward"].values) == 2
    with pytest.raises(ValueError, match="eval_env"):
        wb.Session(agent, venv).evaluate()
    with pytest.raises(ValueError, match="vector env .* cannot be copied"):
        agent.play(venv)
    session.save(tmp_path / "run")
    resumed = wb.Session.reopen(tmp_path / "run", venv)
    assert resumed.steps == 64 and resumed.agent.num_envs == 2
    resumed.run(steps=32)
    assert resumed.steps == 96


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_atari_games_from_make_env_inside_a_gymnasium_vector_env(mode):
    """make_env's AtariTraining reports whole games (info["game_end"]; in final_info for same-step): the
    adapter reports the same games, steps and observations as the library's own VecEnv."""
    pytest.importorskip("ale_py")
    from workbench.envs import make_env

    def game() -> gym.Env:
        return make_env("ALE/Breakout-v5", max_episode_steps=120)  # 120 frames: games of a few dozen steps

    ours = VecEnv([game() for _ in range(2)], seed=0)
    envs = VectorEnvAdapter(make_vec(game, 2, mode))
    np.testing.assert_array_equal(ours.reset(), envs.reset(seed=0))
    rng = np.random.default_rng(0)
    games = 0
    for _ in range(50):
        actions = rng.integers(0, 4, size=2)
        for a, b in zip(ours.step(actions), envs.step(actions), strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ours.game_ends, envs.game_ends)
        games += int((~np.isnan(envs.game_ends[:, 0])).sum())
    assert games >= 2
    envs.close()


# -- EnvPool -------------------------------------------------------------------------------------


@needs_envpool
def test_envpool_env_as_the_env():
    import envpool

    venv = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=3, seed=0)
    agent = wb.PPO(venv, seed=0, n_steps=16, batch_size=48, n_epochs=1)
    assert agent.num_envs == 3
    session = wb.Session(agent, venv, seed=0)
    session.run(steps=480)
    assert session.status == "finished" and session.episodes > 3
    with pytest.raises(EnvMethodError, match="no call"):
        session.call_env("anything")


@needs_envpool
def test_envpool_next_step_autoreset_is_made_same_step():
    import envpool

    envs = VectorEnvAdapter(envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=0, max_episode_steps=3))
    envs.reset()
    for t in range(1, 8):
        obs, _, terminated, truncated, final = envs.step(np.zeros(2, dtype=np.int64))
        done = terminated | truncated
        if t % 3 == 0:
            assert done.all() and not np.array_equal(obs, final)
        else:
            assert not done.any() and np.array_equal(obs, final)  # never a reset step in between


@needs_envpool
def test_backend_envpool_builds_envpool_from_an_id():
    agent = wb.PPO("CartPole-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=1)
    session = wb.Session(agent, "CartPole-v1", backend="envpool", seed=0)
    session.run(steps=64)
    assert session.status == "finished" and session._ctx.runner.backend == "envpool"
    with pytest.raises(ValueError, match="EnvPool does not know"):
        wb.Session(wb.PPO("MinAtar/Breakout-v1"), "MinAtar/Breakout-v1", backend="envpool")


@pytest.mark.slow
@needs_envpool
def test_envpool_atari_games_keep_the_raw_score():
    from workbench.envs import make_envpool

    envs = make_envpool("ALE/Breakout-v5", 2, seed=0, max_episode_steps=40)
    assert envs.observation_space == wb.PPO("ALE/Breakout-v5").observation_space
    envs.reset()
    rng = np.random.default_rng(0)
    games, lives_lost = 0, 0
    for _ in range(120):
        _, rewards, terminated, truncated, _ = envs.step(rng.integers(0, 4, size=2))
        assert set(np.unique(rewards)) <= {-1.0, 0.0, 1.0}  # clipped for training
        ended = ~np.isnan(envs.game_ends[:, 0])
        games += int(ended.sum())
        lives_lost += int((terminated & ~truncated).sum())
        assert (envs.game_ends[ended, 1] == 40).all()  # each truncated game is 40 steps long
    assert games == 6  # 120 steps / 40 per game, 2 envs
    envs.close()


@needs_envpool
def test_envpool_with_its_own_episodic_life_is_refused():
    import envpool

    venv = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, episodic_life=True)
    with pytest.raises(ValueError, match="episodic_life=False"):
        VectorEnvAdapter(venv)
