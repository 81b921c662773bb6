"""The ``Agent`` contract (issue 48): what other modules use of an agent is declared on
``workbench.agents.contract.Agent`` with a default, nothing is probed with ``getattr``/``hasattr``, and
each algorithm answers the contract's questions (export head, live edits, plots, behaviour density) itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.agents.contract import Agent
from workbench.loop import Transitions
from workbench.ui.view_model import default_signals

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"

# An algorithm's own files: there an agent reads its own members (and its family's) freely.
ALGORITHM_FILES = {
    "a2c",
    "bc",
    "bcq",
    "c51",
    "cql",
    "crossq",
    "ddpg",
    "dqn",
    "droq",
    "iql",
    "ppo",
    "qrdqn",
    "rainbow",
    "recurrent_ppo",
    "sac",
    "td3",
    "tqc",
    "multiagent",
    "off_policy",
    "on_policy",
    "offline",
}
# An expression that holds an agent, by name: ``agent``, ``self.agent``, ``session.agent``, ``self._agent``...
_AGENT = re.compile(r"(^|\.)_?agent$")
_AGENT_CONFIG = re.compile(r"(^|\.)_?agent\.config$")


def _outside_modules() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (path.parent.name == "agents" and path.stem in ALGORITHM_FILES)
    }


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    """``getattr``/``hasattr`` on an agent, or on its config with a fixed name (a field read by a name
    taken from the config's own fields is a read of a declared field, not a probe)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            target = ast.unparse(node.args[0]) if node.args else ""
            fixed_name = len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            if _AGENT.search(target) or (_AGENT_CONFIG.search(target) and fixed_name):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_agent_is_probed_with_getattr_or_hasattr_outside_its_algorithm():
    probes = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path, tree in _outside_modules().items()
        for line, text in _probes(tree)
    ]
    assert not probes, "agents probed instead of asked (declare the member on agents/contract.py):\n" + "\n".join(
        probes
    )
    # The scan finds what it is for.
    assert _probes(ast.parse("def f(agent):\n    return getattr(agent, 'offline', False)\n"))
    assert _probes(ast.parse("def f(self):\n    return hasattr(self.session.agent, '_lr')\n"))
    assert _probes(ast.parse("def f(agent):\n    return getattr(agent.config, 'gamma', 0.99)\n"))
    assert not _probes(ast.parse("def f(agent, name):\n    return getattr(agent.config, name)\n"))


def _declared() -> set[str]:
    names = set(dir(Agent))
    for cls in Agent.__mro__:
        names |= set(getattr(cls, "__annotations__", {}))
    return names


def test_every_member_read_on_an_agent_outside_its_algorithm_is_declared_on_the_contract():
    declared = _declared()
    used: dict[str, list[str]] = {}
    for path, tree in _outside_modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _AGENT.search(ast.unparse(node.value)):
                if not (node.attr.startswith("__") and node.attr.endswith("__")):
                    used.setdefault(node.attr, []).append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert {"memory", "offline", "policy_head", "apply_edits", "behaviour_log_probs", "bind_env"} <= set(used)
    undeclared = {name: where[:3] for name, where in sorted(used.items()) if name not in declared}
    assert not undeclared, f"members read on an agent that agents/contract.py does not declare: {undeclared}"


def test_the_contract_declares_each_member_with_a_docstring():
    source = (PACKAGE / "agents" / "contract.py").read_text(encoding="utf-8")
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Agent")
    body = cls.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign):  # a declared attribute: a docstring right below it
            below = body[i + 1] if i + 1 < len(body) else None
            assert (
                isinstance(below, ast.Expr)
                and isinstance(below.value, ast.Constant)
                and isinstance(below.value.value, str)
            ), f"Agent.{ast.unparse(node.target)} has no docstring"
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            assert ast.get_docstring(node), f"Agent.{node.name} has no docstring"


@pytest.mark.parametrize("name", ["base.py", "contract.py", "execution.py", "play.py", "state.py", "registry.py"])
def test_the_agent_base_files_stay_short(name):
    lines = (PACKAGE / "agents" / name).read_text(encoding="utf-8").count("\n")
    assert lines < 500, f"agents/{name} has {lines} lines"


def test_base_still_exports_every_name_it_held():
    from workbench.agents import base

    for name in (
        "AGENTS",
        "MULTI_AGENTS",
        "OFFLINE_AGENTS",
        "Agent",
        "AgentConfig",
        "AgentState",
        "EpisodeReturns",
        "Step",
        "Transitions",
        "register",
        "ActionMaskError",
        "mask_refusal",
        "COMPILE_MODES",
        "PRECISIONS",
    ):
        assert hasattr(base, name), name
    assert base.Agent is Agent and issubclass(wb.PPO, base.Agent)


# -- the defaults --------------------------------------------------------------------------------


def test_a_plain_agent_has_the_contract_defaults():
    agent = wb.PPO("CartPole-v1", n_steps=8)
    assert (agent.offline, agent.multi_agent_only, agent.per_env_decisions, agent.takes_dataset) == (
        False,
        False,
        False,
        False,
    )
    assert agent.memory is None and agent.multiagent_layout is None and agent.multiagent_agents is None
    assert agent.agent_groups == {} and agent.rollout_steps == 8 and agent.gamma == agent.config.gamma
    with pytest.raises(TypeError, match="no replay memory"):
        agent.load_dataset(None)
    dqn = wb.DQN("CartPole-v1", buffer_size=100)
    assert dqn.takes_dataset and dqn.memory is not None and dqn.rollout_steps is None
    assert wb.RecurrentPPO.per_env_decisions and wb.BC.offline and wb.IPPO.multi_agent_only


# -- policy_head: what export runs ---------------------------------------------------------------


def _obs(agent, n=16, seed=0):
    space = agent.observation_space
    space.seed(seed)
    return np.stack([space.sample() for _ in range(n)]).astype(np.float32)


@pytest.mark.parametrize(
    "make",
    [
        lambda: wb.PPO("CartPole-v1"),
        lambda: wb.PPO("Pendulum-v1"),
        lambda: wb.DQN("CartPole-v1", buffer_size=100),
        lambda: wb.QRDQN("CartPole-v1", buffer_size=100),
        lambda: wb.C51("CartPole-v1", buffer_size=100),
        lambda: wb.Rainbow("CartPole-v1", buffer_size=100, distributional=False),
        lambda: wb.SAC("Pendulum-v1", buffer_size=100),
        lambda: wb.TD3("Pendulum-v1", buffer_size=100),
        lambda: wb.DDPG("Pendulum-v1", buffer_size=100),
    ],
)
def test_the_policy_head_acts_as_the_agent_does_deterministically(make):
    agent = make()
    head = agent.policy_head()
    assert head.description and head.recurrent_actor is None
    obs = _obs(agent)
    with torch.no_grad():
        exported = head.module(torch.from_numpy(obs)).numpy()
    acted = np.asarray(agent.act(obs, deterministic=True))
    np.testing.assert_allclose(exported.reshape(acted.shape), acted, rtol=1e-5, atol=1e-5)


def test_a_recurrent_policy_head_carries_its_actor_and_an_agent_without_one_refuses_export(tmp_path):
    head = wb.RecurrentPPO("CartPole-v1").policy_head()
    assert head.recurrent_actor is not None and head.description.startswith("LSTM actor")

    class NoExport(wb.PPO):
        def policy_head(self):
            return Agent.policy_head(self)

    with pytest.raises(TypeError, match="no policy export"):
        NoExport("CartPole-v1").export(tmp_path / "p.onnx")


# -- apply_edits: each algorithm refreshes what it derived -----------------------------------------


def _rates(agent):
    return {name: opt.param_groups[0]["lr"] for name, opt in agent.optimizers.items()}


def test_apply_edits_refreshes_each_algorithms_own_state():
    td3 = wb.TD3("Pendulum-v1", buffer_size=100)
    td3.config.actor_lr = 1e-5
    td3.apply_edits({"actor_lr"})
    assert _rates(td3)["actor_optimizer"] == pytest.approx(1e-5)
    assert _rates(td3)["critic_optimizer"] == pytest.approx(td3.config.learning_rate)

    ppo = wb.PPO("CartPole-v1")
    ppo.config.clip_range, ppo.config.learning_rate = 0.05, 2e-4
    ppo.apply_edits({"clip_range", "learning_rate"})
    assert ppo._clip(0.0) == pytest.approx(0.05) and _rates(ppo)["optimizer"] == pytest.approx(2e-4)

    sac = wb.SAC("Pendulum-v1", buffer_size=100)
    assert sac.log_alpha is not None
    sac.config.ent_coef = 0.1
    sac.apply_edits({"ent_coef"})
    assert sac.log_alpha is None and "alpha_optimizer" not in sac.optimizers

    dqn = wb.DQN("CartPole-v1", buffer_size=100, prioritized=True)
    dqn.config.prioritized_beta = 0.9
    dqn.apply_edits({"prioritized_beta"})
    assert dqn._beta(0.0) == pytest.approx(0.9)


def test_live_edits_reach_a_subclass_through_apply_edits():
    seen = []

    class Watched(wb.PPO):
        def apply_edits(self, changed):
            seen.append(set(changed))
            super().apply_edits(changed)

    from workbench.agents.live import apply_edits

    agent = Watched("CartPole-v1", normalize_rewards=True)
    before = agent.config.gamma
    old = apply_edits(agent, {"gamma": 0.9, "learning_rate": 1e-4})
    assert seen == [{"gamma", "learning_rate"}] and old["gamma"] == before != 0.9
    assert agent.reward_normalizer.gamma == pytest.approx(0.9) and _rates(agent)["optimizer"] == pytest.approx(1e-4)


# -- default_plots -------------------------------------------------------------------------------


def test_default_plots_are_the_agents_own():
    assert default_signals(wb.DDPG("Pendulum-v1", buffer_size=100)) == ("episode_reward", "critic_loss", "actor_loss")
    assert default_signals("CQL") == wb.CQL.default_plots == ("eval_reward", "cql_loss", "ope_dr")

    class Mine(wb.PPO):
        default_plots = ("episode_reward", "my_loss")

    assert default_signals(Mine("CartPole-v1")) == ("episode_reward", "my_loss")
    assert Agent.default_plots == ()  # an agent that declares none: the losses it recorded
    assert default_signals("NotAnAgent", ["critic_loss"]) == ("episode_reward", "critic_loss")


# -- behaviour_log_probs: recording and off-policy evaluation ------------------------------------


def _transitions(agent, obs, actions, extras=None):
    n = len(obs)
    zeros = np.zeros(n, dtype=np.float32)
    return Transitions(obs, actions, zeros, obs, zeros.astype(bool), zeros.astype(bool), extras or {})


def test_behaviour_log_probs_come_from_each_algorithm():
    ppo = wb.PPO("CartPole-v1")
    obs = _obs(ppo, 4)
    step = ppo.decide(obs)
    t = _transitions(ppo, obs, step.actions, step.extras)
    np.testing.assert_allclose(ppo.behaviour_log_probs(t), np.asarray(step.extras["log_probs"]).reshape(-1))

    dqn = wb.DQN("CartPole-v1", buffer_size=100, learning_starts=1000)  # before learning starts: uniform
    np.testing.assert_allclose(dqn.behaviour_log_probs(_transitions(dqn, obs, np.zeros(4, int))), np.log(0.5))
    dqn.num_timesteps = 2000
    eps = dqn.epsilon
    greedy = dqn.act(obs, deterministic=True)
    expected = np.log(1 - eps + eps / 2)
    np.testing.assert_allclose(dqn.behaviour_log_probs(_transitions(dqn, obs, greedy)), expected)
    assert wb.Rainbow("CartPole-v1", buffer_size=100).behaviour_log_probs(_transitions(dqn, obs, greedy)) is None

    sac = wb.SAC("Pendulum-v1", buffer_size=100, learning_starts=0)
    pend = _obs(sac, 4)
    actions = sac.act(pend)
    log_probs = sac.behaviour_log_probs(_transitions(sac, pend, actions))
    assert log_probs.shape == (4,) and np.isfinite(log_probs).all()
    np.testing.assert_allclose(log_probs, sac.log_density(pend, actions))

    td3 = wb.TD3("Pendulum-v1", buffer_size=100)
    assert td3.behaviour_log_probs(_transitions(td3, pend, actions)) is None


def test_the_multi_agent_layout_is_declared_by_ippo():
    from workbench.envs.multiagent_toy import MatchTarget

    agent = wb.IPPO(MatchTarget(n_agents=3), groups={"red": ["agent_0"], "blue": ["agent_1", "agent_2"]}, n_steps=8)
    assert agent.multiagent_layout is not None and agent.multiagent_layout.n_agents == 3
    assert agent.multiagent_agents == ["agent_0", "agent_1", "agent_2"]
    assert agent.agent_groups == {"red": ["agent_0"], "blue": ["agent_1", "agent_2"]}
    assert wb.MAPPO(MatchTarget(n_agents=2), n_steps=8).agent_groups == {}
