"""Multi-agent training on a PettingZoo-style ParallelEnv: shared PPO, IPPO, MAPPO (workbench.envs.multiagent)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import workbench as wb
from workbench.envs.multiagent import ParallelEnvAdapter, parallel_spaces
from workbench.envs.multiagent_toy import MatchTarget

SMALL = {"n_steps": 16, "batch_size": 32, "n_epochs": 4, "net_arch": (16,), "learning_rate": 3e-3}


def test_shared_ppo_learns_and_records_per_agent_and_team_returns():
    env = MatchTarget(n_agents=2, length=8)
    agent = wb.PPO(env, seed=0, **SMALL)
    assert agent.num_envs == 2
    session = wb.Session(agent, env, seed=0)
    session.run(steps=1600)
    names = session.signals.names()
    assert {"episode_reward", "episode_reward/agent_0", "episode_reward/agent_1"} <= set(names)
    team = session.signals["episode_reward"]
    a0, a1 = session.signals["episode_reward/agent_0"], session.signals["episode_reward/agent_1"]
    # The team's return is the sum of the agents' returns, episode by episode.
    assert np.allclose(np.asarray(team.values), np.asarray(a0.values) + np.asarray(a1.values))
    assert session.episodes == len(team.values) == 1600 // (2 * 8)
    assert team.mean(last=5) > 2 * 8 * 0.6  # chance is 1/3 per step


def test_stop_when_and_save_reopen_continue(tmp_path):
    env = MatchTarget(n_agents=2, length=4)
    agent = wb.PPO(env, seed=0, **SMALL)
    session = wb.Session(agent, env, seed=0, stop_when=lambda s: s.episodes >= 3)
    session.run(steps=10_000)
    assert session.stop_reason == "stop_when" and session.episodes == 3
    path = session.save(tmp_path / "run")
    loaded = wb.load(path)
    assert loaded.observation_space == agent.observation_space
    again = wb.Session.reopen(path, env)
    again.run(steps=64)
    assert again.steps == session.steps + 64


def test_pause_and_stop_from_another_thread():
    env = MatchTarget(n_agents=2, length=4)
    session = wb.Session(wb.PPO(env, seed=0, **SMALL), env)
    session.start(steps=10**7)
    session.pause()
    assert session.status == "paused"
    session.resume()
    session.stop()
    assert session.status == "stopped"


@pytest.mark.parametrize("dict_obs", [False, True])
def test_action_masks_from_info_or_dict_observation_are_honoured(dict_obs):
    env = MatchTarget(n_agents=2, length=4, masks=True, dict_obs=dict_obs)  # the env raises on the masked action
    agent = wb.PPO(env, seed=0, **SMALL)
    assert agent.observation_space.shape == (3,)
    wb.Session(agent, env, seed=0).run(steps=256)


def test_agents_leaving_mid_episode_are_masked_out_of_the_update():
    env = MatchTarget(n_agents=3, length=6, leave=True)
    adapter = ParallelEnvAdapter(env, parallel_spaces(env)[2], seed=0)
    adapter.reset()
    for _ in range(3):
        _, rewards, terminated, _, _ = adapter.step(np.zeros(3, dtype=np.int64))
    assert terminated.tolist() == [False, False, True] and not adapter.alive[2]
    obs, rewards, terminated, _, _ = adapter.step(np.zeros(3, dtype=np.int64))
    assert rewards[2] == 0 and terminated[2] and not obs[2].any()  # a dead slot: filler
    agent = wb.PPO(env, seed=0, **SMALL)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=3 * 16)  # one rollout; it holds dead rows
    assert agent.num_updates == 1
    assert agent._alive.min() == 0  # the dead rows were seen and left out


def test_box_actions_train():
    env = MatchTarget(n_agents=2, length=4, box=True)
    agent = wb.PPO(env, seed=0, **SMALL)
    session = wb.Session(agent, env, seed=0)
    session.run(steps=128)
    assert session.episodes == 128 // 8


def test_ippo_groups_have_their_own_networks_and_signals(tmp_path):
    env = MatchTarget(n_agents=3, length=4)
    agent = wb.IPPO(env, groups={"red": ["agent_0"], "blue": ["agent_1", "agent_2"]}, seed=0, **SMALL)
    assert len(agent.actor.nets) == 2 and len(agent.critic.nets) == 2
    session = wb.Session(agent, env, seed=0)
    session.run(steps=3 * 16)
    assert {"episode_reward/red", "episode_reward/blue"} <= set(session.signals.names())
    red = np.asarray(session.signals["episode_reward/red"].values)
    assert np.allclose(red, session.signals["episode_reward/agent_0"].values)
    loaded = wb.load(session.save(tmp_path / "ippo"))
    assert isinstance(loaded, wb.IPPO) and loaded.config.groups == agent.config.groups
    obs = np.zeros((3, agent.obs_shape[0]), np.float32)
    obs[:, -3:] = np.eye(3)
    assert np.array_equal(loaded.act(obs), agent.eval().act(obs))


def test_ippo_rejects_bad_groups():
    env = MatchTarget(n_agents=2)
    with pytest.raises(ValueError, match="not one of the env's agents"):
        wb.IPPO(env, groups={"a": ["agent_0", "nobody"]})
    with pytest.raises(ValueError, match="exactly one group"):
        wb.IPPO(env, groups={"a": ["agent_0"]})


@pytest.mark.parametrize("critic_input", ["state", "concat"])
def test_mappo_critic_reads_the_global_state(critic_input):
    env = MatchTarget(n_agents=2, length=4)
    agent = wb.MAPPO(env, critic_input=critic_input, seed=0, **SMALL)
    lay = agent.multiagent_layout
    assert lay.state == critic_input and lay.state_dim == 6
    # The critic reads the state and the id, the actor the own observation and the id.
    assert agent.critic.columns.tolist() == list(range(3, 3 + 6 + 2))
    assert agent.actor.columns.tolist() == [0, 1, 2, 9, 10]
    wb.Session(agent, env, seed=0).run(steps=64)


def test_clear_errors_for_wrong_input():
    class AEC:
        possible_agents = ["a"]
        agent_selection = "a"

        def last(self):
            return None

    with pytest.raises(TypeError, match="aec_to_parallel"):
        wb.PPO(AEC())
    with pytest.raises(TypeError, match="ParallelEnv"):
        wb.IPPO("CartPole-v1")
    env = MatchTarget(n_agents=2)
    with pytest.raises(ValueError, match="build the agent from the same env"):
        wb.Session(wb.IPPO(MatchTarget(n_agents=3)), env)
    with pytest.raises(ValueError, match="num_workers"):
        wb.Session(wb.PPO(env), env, num_workers=2).run(steps=8)


def test_pettingzoo_parallel_env_is_accepted():
    pytest.importorskip("pettingzoo")
    from pettingzoo.utils.env import ParallelEnv

    class Wrapped(MatchTarget, ParallelEnv):
        pass

    env = Wrapped(n_agents=2, length=4)
    wb.Session(wb.PPO(env, seed=0, **SMALL), env).run(steps=32)


@pytest.mark.parametrize("cls", ["PPO", "IPPO", "MAPPO"])
def test_play_gives_team_and_per_agent_returns_and_frames(cls):
    env = MatchTarget(n_agents=2, length=4, leave=True, render_mode="rgb_array")
    agent = getattr(wb, cls)(env, seed=0, **SMALL)
    result = agent.play(env, episodes=2, seed=1)
    assert result.lengths == [4, 4] and len(result.per_agent) == 2
    assert result == [sum(r.values()) for r in result.per_agent]
    result, frames = agent.play(env, episodes=1, render="rgb_array")
    assert len(frames[0]) == 5 and frames[0][0].shape == (16, 32, 3)


@pytest.mark.parametrize("cls", ["PPO", "IPPO"])
def test_play_viewer_shows_a_parallel_env_frame_by_frame_with_the_team_rewards(cls):
    pytest.importorskip("ipywidgets")
    env = MatchTarget(n_agents=2, length=4, leave=True, render_mode="rgb_array")
    agent = getattr(wb, cls)(env, seed=0, **SMALL)
    expected = agent.play(env, episodes=2, seed=1)
    for source in (env, lambda: MatchTarget(n_agents=2, length=4, leave=True, render_mode="rgb_array")):
        viewer = agent.play(source, episodes=2, seed=1, viewer=True)
        try:
            assert viewer.returns == list(expected)  # the team's returns, as play gives them
            assert len(viewer.frames) == sum(n + 1 for n in expected.lengths)  # the reset's frame and one per step
            assert viewer.frames[0].startswith(b"\x89PNG") and viewer.episode_of[-1] == 1
            assert sum(viewer.rewards) == pytest.approx(sum(expected))
        finally:
            viewer.close()
    cut = agent.play(env, episodes=1, seed=1, max_steps=2, viewer=True)
    assert len(cut.frames) == 3  # max_steps reaches the viewer
    cut.close()


def test_play_viewer_refuses_a_parallel_env_that_does_not_render_frames():
    pytest.importorskip("ipywidgets")
    agent = wb.PPO(MatchTarget(n_agents=2), seed=0, **SMALL)
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        agent.play(MatchTarget(n_agents=2), viewer=True)
    with pytest.raises(ValueError, match="render_mode=None"):
        agent.play(lambda: MatchTarget(n_agents=2), viewer=True)


def test_export_of_a_routed_policy_matches_act(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    env = MatchTarget(n_agents=3)
    agent = wb.IPPO(env, groups={"red": ["agent_0"], "blue": ["agent_1", "agent_2"]}, seed=0, **SMALL)
    path = agent.export(str(tmp_path / "ippo.onnx"))
    session = ort.InferenceSession(path)
    obs = np.random.default_rng(0).random((3, agent.obs_shape[0])).astype(np.float32)
    obs[:, -3:] = np.eye(3)
    out = session.run(None, {session.get_inputs()[0].name: obs})[0]
    assert np.array_equal(out, agent.act(obs, deterministic=True))


@pytest.mark.parametrize("cls", ["PPO", "IPPO", "MAPPO"])
def test_external_session_takes_dicts_of_agents(cls):
    env = MatchTarget(n_agents=2, length=4, masks=True)
    kwargs = {"critic_input": "concat"} if cls == "MAPPO" else {}
    agent = getattr(wb, cls)(env, seed=0, **SMALL, **kwargs)
    session = wb.Session.external(agent)
    session.start(steps=10**6)
    obs, info = env.reset(seed=0)
    for _ in range(2):
        for _t in range(4):
            masks = {a: info[a]["action_mask"] for a in obs}
            actions = session.act(obs, episode="match", action_mask=masks)
            assert set(actions) == set(obs) and all(a in (0, 1) for a in actions.values())  # 2 is masked
            next_obs, rewards, terminated, truncated, info = env.step(actions)
            session.feedback(rewards, next_obs, terminated, truncated, episode="match", info=info)
            obs = next_obs
        obs, info = env.reset()
    deadline = time.monotonic() + 20
    while session.episodes < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    session.stop()
    assert session.episodes == 4  # one per agent and match


def test_shared_ppo_with_agent_ids_sees_which_agent_it_is(tmp_path):
    env = MatchTarget(n_agents=2, length=4)
    agent = wb.PPO(wb.with_agent_ids(env), seed=0, **SMALL)
    assert agent.observation_space.shape == (3 + 2,)
    session = wb.Session(agent, env, seed=0)  # the plain env: the rows follow the agent
    session.run(steps=64)
    reopened = wb.Session.reopen(session.save(tmp_path / "ids"), env)
    reopened.run(steps=32)
    assert reopened.steps == 96


def test_evaluation_plays_on_another_parallel_env():
    env = MatchTarget(n_agents=2, length=4)
    session = wb.Session(wb.PPO(env, seed=0, **SMALL), env, seed=0, eval_env=MatchTarget(n_agents=2, length=4))
    session.run(steps=32)
    mean = session.evaluate(episodes=2)
    assert 0.0 <= mean <= 8.0 and session.signals["eval_reward"].last == mean


def _dense(net, x):
    """What a routed network computes, written the slow way: every group's network on every row, then pick."""
    import torch

    inputs = x.index_select(-1, net.columns)
    stacked = torch.stack([m(inputs) for m in net.nets], dim=0)
    return stacked[net.groups_of(x), torch.arange(x.shape[0])]


def test_ippo_runs_each_group_network_only_on_its_own_rows():
    import torch

    env = MatchTarget(n_agents=3, length=4)
    groups = {"red": ["agent_0"], "blue": ["agent_1", "agent_2"]}
    agent = wb.IPPO(env, groups=groups, seed=0, **SMALL)
    n = agent.obs_shape[0]
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.random((20, n)), dtype=torch.float32)
    slots = torch.as_tensor(rng.integers(0, 3, 20))
    x[:, -3:] = torch.eye(3)[slots]
    group = torch.tensor([0, 1, 1])[slots]  # agent_0 -> red (0), the others -> blue (1)
    with torch.no_grad():
        expected = {name: _dense(getattr(agent, name), x) for name in ("actor", "critic")}
        routed = {name: agent._forward(getattr(agent, name), x) for name in ("actor", "critic")}
    for name in ("actor", "critic"):
        assert torch.allclose(routed[name], expected[name], atol=1e-6)  # each row's output back in its place
    seen: list[tuple[int, torch.Tensor]] = []
    for g, net in enumerate(agent.actor.nets):
        net.register_forward_pre_hook(lambda _m, args, g=g: seen.append((g, args[0].detach().clone())))
    out = agent._forward(agent.actor, x)
    assert torch.allclose(out, expected["actor"], atol=1e-6)
    # One pass per group, each on exactly its own rows: 20 rows in all, not 2 x 20.
    assert [g for g, _ in seen] == [0, 1]
    assert sum(rows.shape[0] for _, rows in seen) == 20
    for g, rows in seen:
        mine = x[group == g][:, : rows.shape[1]]
        assert torch.equal(rows, mine)
    # A batch without a group's rows still runs its network (on no rows), so its parameters get a zero gradient.
    seen.clear()
    only_blue = x[group == 1]
    agent._forward(agent.actor, only_blue).sum().backward()
    assert [rows.shape[0] for _, rows in seen] == [0, only_blue.shape[0]]
    red = agent.actor.nets[0]
    assert all(p.grad is not None and not p.grad.any() for p in red.parameters())


def _after(session, name, step):
    sig = session.signals[name]
    return [(int(s), float(v)) for s, v in zip(sig.steps, sig.values) if s > step]


def test_reopened_run_continues_the_parallel_envs_random_stream(tmp_path):
    # An uninterrupted run writes a checkpoint at agent-step 96 (4 team episodes, 4 rollouts end there); the run
    # reopened from it draws the targets the uninterrupted one draws next, so it learns the same weights.
    kwargs = {**SMALL, "n_steps": 8, "batch_size": 24}
    env = MatchTarget(n_agents=3, length=8)
    agent = wb.IPPO(env, groups={"red": ["agent_0"], "blue": ["agent_1", "agent_2"]}, seed=0, **kwargs)
    straight = wb.Session(agent, env, seed=3, checkpoint_every=96, checkpoint_dir=tmp_path)
    straight.run(steps=144)
    resumed = wb.Session.reopen(tmp_path / "latest", MatchTarget(n_agents=3, length=8))
    assert resumed.steps == 96
    resumed.run(steps=48)
    for name in ("episode_reward", "episode_reward/agent_0", "episode_reward/blue", "loss"):
        assert _after(resumed, name, 96) == _after(straight, name, 96), name
        assert _after(resumed, name, 96)
    for name, net in straight.agent.networks.items():
        for key, value in net.state_dict().items():
            assert np.array_equal(value.numpy(), resumed.agent.networks[name].state_dict()[key].numpy()), key


class _Draws(MatchTarget):
    """Records every set of targets it draws (at each reset and each step)."""

    def __init__(self, *args, **kwargs):
        self.draws: list[dict[str, int]] = []
        super().__init__(*args, **kwargs)

    def _draw(self):
        super()._draw()
        self.draws.append(dict(self._targets))


def test_reopened_run_saved_mid_episode_continues_the_stream_where_the_save_left_it(tmp_path):
    made: list[_Draws] = []

    def factory():
        made.append(_Draws(n_agents=2, length=8))
        return made[-1]

    def stepped(since):  # the copy a session stepped (the others only had their spaces read)
        return max(made[since:], key=lambda e: len(e.draws))

    straight = wb.Session(wb.PPO(factory(), seed=0, **SMALL), factory, seed=5)
    straight.run(steps=160)
    theirs = stepped(0).draws
    mark = len(made)
    first = wb.Session(wb.PPO(factory(), seed=0, **SMALL), factory, seed=5)
    first.run(steps=42)  # 21 env steps: the third team episode is 5 steps in
    before = len(stepped(mark).draws)
    assert stepped(mark).draws == theirs[:before]
    path = first.save(tmp_path / "run")
    mark = len(made)
    resumed = wb.Session.reopen(path, factory)
    resumed.run(steps=40)
    mine = stepped(mark).draws
    # The reopened copy starts a new episode, drawing what the uninterrupted run drew next: its stream
    # went on from the save, it was not seeded again (which would replay the run's first draws).
    assert len(mine) > 10 and mine == theirs[before : before + len(mine)]
    assert mine[:5] != theirs[:5]


def test_parallel_vec_streams_continue_after_a_restore():
    from workbench.envs.multiagent import ParallelVec, parallel_rng_state

    lay = parallel_spaces(MatchTarget(n_agents=2))[2]

    def vec(seed):
        return ParallelVec([MatchTarget(n_agents=2, length=4) for _ in range(2)], lay, seed=seed)

    here = vec(1)
    here.reset()
    for _ in range(6):  # each copy's episode ends at step 4: a same-step reset inside
        here.step(np.zeros(4, np.int64))
    states = here.rng_states()  # copy c's stream in row c * n_agents
    assert states[1] is None and states[3] is None and None not in (states[0], states[2]) and states[0] != states[2]
    assert states[0] == parallel_rng_state(here.copies[0].env)
    later = vec(99)
    later.set_rng_states(states)
    rows = here.reset()
    np.testing.assert_array_equal(later.reset(), rows)  # the same next episodes
    # Right after a reset the saved state is the one that drew it, so a restored copy draws that episode again.
    assert here.rng_states() == states
    again = vec(7)
    again.set_rng_states(here.rng_states())
    np.testing.assert_array_equal(again.reset(), rows)
    assert not np.array_equal(vec(7).reset(), rows)  # seeded instead: other episodes


@pytest.mark.parametrize("cls", ["PPO", "IPPO", "MAPPO"])
def test_play_takes_a_factory_of_parallel_envs_as_training_does(cls):
    built: list[MatchTarget] = []

    def factory():
        env = MatchTarget(n_agents=2, length=4, leave=True, render_mode="rgb_array")
        env.closed = False
        env.close = lambda: setattr(env, "closed", True)  # type: ignore[method-assign]
        built.append(env)
        return env

    agent = getattr(wb, cls)(factory, seed=0, **SMALL)
    built.clear()  # the copy the agent read its spaces from
    result = agent.play(factory, episodes=2, seed=1)
    assert len(built) == 1 and built[0].closed  # one copy, built for this play and closed after it
    assert result == agent.play(MatchTarget(n_agents=2, length=4, leave=True), episodes=2, seed=1)
    assert result.lengths == [4, 4] and len(result.per_agent) == 2
    result, frames = agent.play(factory, episodes=1, render="rgb_array")
    assert len(frames[0]) == 5 and built[-1].closed


def test_play_with_a_wrong_env_says_what_to_pass():
    agent = wb.IPPO(MatchTarget(n_agents=2), seed=0, **SMALL)

    class AEC:
        possible_agents = ["a"]
        agent_selection = "a"

        def last(self):
            return None

    with pytest.raises(TypeError, match="ParallelEnv: pass an instance or a zero-argument factory.*int: 42"):
        agent.play(42)
    with pytest.raises(TypeError, match="ParallelEnv: pass an instance.*'CartPole-v1'"):
        agent.play("CartPole-v1")
    with pytest.raises(TypeError, match=r"needs arguments \(n\)"):
        agent.play(lambda n: MatchTarget(n_agents=n))
    with pytest.raises(TypeError, match="returned int, not a gymnasium.Env or a PettingZoo ParallelEnv"):
        agent.play(lambda: 42)
    with pytest.raises(TypeError, match="aec_to_parallel"):
        agent.play(AEC)
    with pytest.raises(TypeError, match="is a single-agent env"):
        agent.play(lambda: __import__("gymnasium").make("CartPole-v1"))
    shared = wb.PPO(MatchTarget(n_agents=2), seed=0, **SMALL)
    with pytest.raises(TypeError, match="needs arguments"):
        shared.play(lambda n: MatchTarget(n_agents=n))
