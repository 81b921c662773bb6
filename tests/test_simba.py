"""The SimBa network (Lee et al. 2025) as every actor-critic agent's ``network=``: its three spellings, its
blocks, training, save and reload, export, and the refusals that name what to do instead."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import workbench as wb
from workbench.agents.networks import SimBaNetwork
from workbench.envs.multiagent_toy import MatchTarget
from workbench.validation import ArgumentError

OFF_POLICY = dict(learning_starts=32, batch_size=16, buffer_size=500)
ON_POLICY = dict(n_envs=2, n_steps=16)
PPO_SMALL = dict(ON_POLICY, batch_size=8, n_epochs=1)
# (agent class, env, small settings, the networks that must be SimBa networks)
CASES = [
    (wb.SAC, "Pendulum-v1", OFF_POLICY, ("actor", "critic", "critic_target")),
    (wb.TQC, "Pendulum-v1", OFF_POLICY, ("actor", "critic", "critic_target")),
    (wb.TD3, "Pendulum-v1", OFF_POLICY, ("actor", "actor_target", "critic", "critic_target")),
    (wb.DDPG, "Pendulum-v1", OFF_POLICY, ("actor", "actor_target", "critic", "critic_target")),
    (wb.PPO, "CartPole-v1", PPO_SMALL, ("actor", "critic")),
    (wb.PPO, "Pendulum-v1", PPO_SMALL, ("actor", "critic")),
    (wb.A2C, "CartPole-v1", ON_POLICY, ("actor", "critic")),
]


def _simba_networks(module: torch.nn.Module) -> list[SimBaNetwork]:
    return [m for m in module.modules() if isinstance(m, SimBaNetwork)]


@pytest.mark.parametrize(("cls", "env", "settings", "names"), CASES, ids=[f"{c[0].__name__}-{c[1]}" for c in CASES])
def test_every_actor_critic_agent_builds_trains_saves_and_reloads_simba_networks(cls, env, settings, names, tmp_path):
    agent = cls(env, seed=0, network=wb.SimBa(width=16, blocks=3), **settings)
    assert agent.config.network == "simba" and agent.config.net_arch == (16, 16, 16)
    assert agent.config.normalize_observations is True  # the SimBa network's first part
    for name in names:
        nets = _simba_networks(getattr(agent, name))
        assert nets, f"{cls.__name__}.{name} has no SimBa network"
        for net in nets:
            assert len(net.blocks) == 3 and net.embed.out_features == 16 and net.blocks[0].inner.out_features == 64
            assert isinstance(net.norm, torch.nn.LayerNorm)  # the final layer norm before the head
    wb.Session(agent, env, seed=0).run(steps=96)
    assert agent.num_updates > 0
    agent.save(tmp_path / "run")
    loaded = wb.load(tmp_path / "run")
    assert loaded.config.network == "simba" and loaded.config.net_arch == (16, 16, 16)
    obs = np.stack([agent.observation_space.sample() for _ in range(5)]).astype(np.float32)
    np.testing.assert_array_equal(loaded.act(obs, deterministic=True), agent.eval().act(obs, deterministic=True))


def test_a_simba_block_adds_its_residual_to_its_input():
    net = SimBaNetwork(3, (8, 8), 2)
    x = torch.randn(4, 8)
    block = net.blocks[0]
    torch.testing.assert_close(block(x), x + block.outer(torch.relu(block.inner(block.norm(x)))))
    z = torch.randn(5, 3)
    torch.testing.assert_close(net(z), net.head(net.norm(net.blocks(net.embed(z)))))


@pytest.mark.parametrize("cls, env", [(wb.PPO, "Pendulum-v1"), (wb.TD3, "Pendulum-v1"), (wb.SAC, "Pendulum-v1")])
def test_a_simba_policy_exports_and_acts_as_the_agent_does(cls, env, tmp_path):
    agent = cls(env, seed=0, network=wb.SimBa(16, 2), **(PPO_SMALL if cls is wb.PPO else OFF_POLICY))
    wb.Session(agent, env, seed=0).run(steps=64)
    agent.export(tmp_path / "p.onnx")
    obs = np.stack([agent.observation_space.sample() for _ in range(8)]).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    exported = session.run(["action"], {"obs": obs})[0]
    np.testing.assert_allclose(exported, agent.act(obs, deterministic=True), rtol=1e-4, atol=1e-5)


def test_the_three_spellings_build_the_same_agent():
    spelled = [
        wb.SAC("Pendulum-v1", seed=0, network=wb.SimBa()),
        wb.SAC("Pendulum-v1", seed=0, net_arch="simba"),
        wb.SAC("Pendulum-v1", seed=0, network="simba"),
        wb.SAC("Pendulum-v1", seed=0, network="simba", net_arch=(256, 256), normalize_observations=True),
    ]
    assert {(a.config.network, a.config.net_arch, a.config.normalize_observations) for a in spelled} == {
        ("simba", (256, 256), True)
    }
    first = spelled[0].state().tensors
    for other in spelled[1:]:
        assert all(torch.equal(first[k], v) for k, v in other.state().tensors.items() if k.startswith("net/"))
    # PPO's and TD3's own widths (64, 64) and (400, 300) do not decide a SimBa's: wb.SimBa()'s do, unless given.
    assert wb.PPO("CartPole-v1", network="simba").config.net_arch == (256, 256)
    assert wb.TD3("Pendulum-v1", net_arch="simba").config.net_arch == (256, 256)
    assert wb.PPO("CartPole-v1", network="simba", net_arch=(32,)).config.net_arch == (32,)
    assert wb.SimBa(128, 3).net_arch == (128, 128, 128)


def test_simba_normalizes_vector_observations_unless_told_not_to_and_leaves_images_to_the_encoder():
    from workbench.envs.testing import SeeTheSide

    assert wb.SAC("Pendulum-v1", network="simba").config.normalize_observations is True
    assert wb.SAC("Pendulum-v1", network="simba", normalize_observations=False).config.normalize_observations is False
    agent = wb.PPO(SeeTheSide(), network=wb.SimBa(16, 1), n_steps=8, n_envs=2, batch_size=8, seed=0)
    assert agent.config.normalize_observations is False  # the CNN encoder scales the images
    assert _simba_networks(agent.actor) and _simba_networks(agent.critic)
    wb.Session(agent, SeeTheSide(), seed=0).run(steps=32)
    assert agent.num_updates > 0


@pytest.mark.parametrize("cls", [wb.IPPO, wb.MAPPO])
def test_a_team_routes_each_group_through_its_own_simba_networks(cls):
    agent = cls(MatchTarget(n_agents=2, length=4), seed=0, network=wb.SimBa(16, 1), n_steps=8)
    assert _simba_networks(agent.actor) and _simba_networks(agent.critic)
    assert not any(isinstance(m, torch.nn.Tanh) for m in agent.actor.modules())  # no MLP layers left
    wb.Session(agent, MatchTarget(n_agents=2, length=4), seed=0).run(steps=32)
    assert agent.num_updates > 0


def test_simba_is_refused_where_it_does_not_fit_naming_why():
    with pytest.raises(ArgumentError, match=r"net_arch=\(64, 32\)"):
        wb.TQC("Pendulum-v1", network="simba", net_arch=(64, 32))
    with pytest.raises(ArgumentError, match=r"network=SimBa\(width=64, blocks=2\) and net_arch=\(32, 32\)"):
        wb.PPO("CartPole-v1", network=wb.SimBa(64, 2), net_arch=(32, 32))
    with pytest.raises(ArgumentError, match="use_sde=True"):
        wb.PPO("Pendulum-v1", network="simba", use_sde=True)
    with pytest.raises(ArgumentError, match="CrossQ got network='simba'.*batch renormalization"):
        wb.CrossQ("Pendulum-v1", network=wb.SimBa())
    with pytest.raises(ArgumentError, match="DroQ got network='simba'.*dropout"):
        wb.DroQ("Pendulum-v1", net_arch="simba")
    with pytest.raises(ArgumentError, match="RecurrentPPO got network='simba'.*memory"):
        wb.RecurrentPPO("CartPole-v1", network="simba")
    with pytest.raises(ArgumentError, match="DQN has no SimBa network option: A2C, APPO, DDPG, IMPALA, PPO, SAC"):
        wb.DQN("CartPole-v1", network=wb.SimBa())
    with pytest.raises(ArgumentError, match="DQN has no SimBa"):
        wb.DQN("CartPole-v1", net_arch="simba")
    with pytest.raises(ArgumentError, match="network='resnet'"):
        wb.SAC("Pendulum-v1", network="resnet")
    for bad in ({"width": 0}, {"blocks": -1}, {"width": 2.5}, {"blocks": True}):
        with pytest.raises(ArgumentError, match="must be an integer >= 1"):
            wb.SimBa(**bad)
