"""IPPO and MAPPO: PPO over a PettingZoo ParallelEnv with per-group policies or a centralised critic.

Both are PPO (the same rollout, GAE and clipped loss, ``ppo.py``); what differs is which columns of a
slot's observation row each network reads and which network a row goes to. The rows are laid out by
``workbench.envs.multiagent`` (:class:`~workbench.envs.multiagent.Layout`): the agent's own observation,
then the global state (MAPPO), then the agent's one-hot id, which :class:`SlotNet` uses to route a row
to its group's network.

* ``wb.IPPO(env, groups=None)``: independent PPO, one actor and one critic per group of agents
  (``groups={"red": ["red_0", ...], "blue": [...]}``; default one group per agent), each reading the
  agent's own observation.
* ``wb.MAPPO(env, critic_input="auto")``: one actor shared by all agents reading its own observation
  and id, and a centralised critic reading the global state (``env.state()`` when the env has a
  ``state_space``, else every agent's observation side by side) and the id (Yu et al. 2022).

``wb.PPO(env)`` on a ParallelEnv is plain parameter sharing: one actor and one critic for every agent.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..devices import compiling
from ..envs.core import as_env_source
from ..envs.multiagent import Layout, layout_for, parallel_spaces
from ..validation import Constraint, checked, choice
from .base import register
from .ppo import PPO, PPOConfig

__all__ = ["IPPO", "IPPOConfig", "MAPPO", "MAPPOConfig", "SlotNet", "export_policies"]


class SlotNet(nn.Module):
    """One network per group; each row goes to its group's network only (the group read from the row's
    one-hot id, the columns from ``id_start`` on), which is fed only ``columns`` of the row.

    The rows are sorted by group, each network runs once on its own rows (an empty batch for a group
    with none, so every network's parameters get a gradient, zero when it had no rows), and the outputs
    go back to the rows' places: with ``k`` groups a batch costs about one network pass per row, not
    ``k``. Traced for ONNX export or compiled
    (``compile=True``), every network runs on every row and each row's output is picked: one graph for any batch.
    """

    def __init__(self, nets: list[nn.Module], columns: list[int], id_start: int, slot_group: list[int]) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nets)
        self.register_buffer("columns", torch.tensor(columns, dtype=torch.long), persistent=False)
        self.register_buffer("slot_group", torch.tensor(slot_group, dtype=torch.long), persistent=False)
        self.id_start = id_start

    def groups_of(self, x: torch.Tensor) -> torch.Tensor:
        """The group of each row of ``x`` (``(batch,)``, int64)."""
        return self.slot_group[x[:, self.id_start :].argmax(-1)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The outputs of each row's group network."""
        inputs = x.index_select(-1, self.columns)
        if len(self.nets) == 1:
            return self.nets[0](inputs)
        group = self.groups_of(x)
        if torch.jit.is_tracing() or compiling():
            # ONNX export and compile=True: one graph without data-dependent shapes (a row count per group
            # would end the graph and recompile it for every new split), so every network on every row, then pick.
            stacked = torch.stack([net(inputs) for net in self.nets], dim=0)
            return stacked[group, torch.arange(x.shape[0])]
        order = torch.argsort(group, stable=True)
        counts = torch.bincount(group, minlength=len(self.nets)).tolist()
        parts = inputs.index_select(0, order).split(counts)
        outs = torch.cat([net(part) for net, part in zip(self.nets, parts, strict=True)])
        return outs.new_empty(outs.shape).index_copy(0, order, outs)


def _groups_of(agents: list[str], groups: dict[str, list[str]] | None, owner: str) -> dict[str, list[str]]:
    if groups is None:
        return {a: [a] for a in agents}
    if not isinstance(groups, dict) or not groups:
        raise ValueError(f"{owner}: groups must be a dict of group name to a list of agent names, got {groups!r}")
    seen: list[str] = []
    for name, members in groups.items():
        for a in members:
            if a not in agents:
                raise ValueError(f"{owner}: group {name!r} names {a!r}, which is not one of the env's agents {agents}")
            seen.append(a)
    missing = [a for a in agents if a not in seen]
    twice = sorted({a for a in seen if seen.count(a) > 1})
    if missing or twice:
        raise ValueError(f"{owner}: every agent must be in exactly one group; missing {missing}, in several {twice}")
    return {str(k): [str(a) for a in v] for k, v in groups.items()}


def _is_layout_dict(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and "agents" in value)


_LAYOUT = Constraint(
    "None or the env's layout dict (filled in from the env; leave it out)", lambda v: _is_layout_dict(v)
)


@dataclass
class IPPOConfig(PPOConfig):
    """IPPO's hyperparameters: PPO's, plus the groups."""

    groups: dict | None = checked(
        None,
        Constraint(
            "None or a dict of group name -> list of agent names",
            lambda v: v is None or (isinstance(v, dict) and all(isinstance(a, list | tuple) for a in v.values())),
        ),
    )
    """Group name -> agent names; each group has its own actor and critic (None: one group per agent)."""
    layout: dict | None = checked(None, _LAYOUT)
    """The env's row layout (agents, observation and state sizes), filled in from the env; saved with the run."""


@dataclass
class MAPPOConfig(PPOConfig):
    """MAPPO's hyperparameters: PPO's, plus what the centralised critic reads."""

    critic_input: str = checked("auto", choice("auto", "state", "concat"))
    """The critic's input: "state" (env.state()), "concat" (every agent's observation), "auto" (state when the
    env has a state_space)."""
    layout: dict | None = checked(None, _LAYOUT)
    """The env's row layout (agents, observation and state sizes), filled in from the env; saved with the run."""


class _MultiAgentPPO(PPO):
    """What IPPO and MAPPO share: the layout from the env (or the saved config), routed networks."""

    multi_agent_only = True  # registered in MULTI_AGENTS: never offered for a single-agent env
    _state: str | None = None
    config: Any

    def __init__(self, env: Any = None, *, seed: int | None = None, **hyperparameters: Any) -> None:
        owner = type(self).__name__
        if env is not None:
            source = as_env_source(env)
            if source.find_parallel() is None:
                raise TypeError(
                    f"{owner} trains on a PettingZoo ParallelEnv (several agents), got {source.name}: "
                    "use wb.PPO for a single-agent env"
                )
            penv = source.parallel
            state = self._state_for(penv, hyperparameters)
            obs_space, act_space, lay = parallel_spaces(penv, agent_ids=True, state=state, same_obs=False)
            agents = list(penv.possible_agents)
            if "groups" in {f.name for f in self.Config.__dataclass_fields__.values()}:
                hyperparameters["groups"] = _groups_of(agents, hyperparameters.get("groups"), owner)
            hyperparameters["layout"] = {
                "agents": agents,
                "obs_dim": lay.obs_dim,
                "state": lay.state,
                "state_dim": lay.state_dim,
            }
            hyperparameters.setdefault("n_envs", len(agents))
            super().__init__(observation_space=obs_space, action_space=act_space, seed=seed, **hyperparameters)
            self.env_source = source
        else:
            super().__init__(seed=seed, **hyperparameters)

    def _state_for(self, env: Any, hyperparameters: dict[str, Any]) -> str | None:
        return None

    def export_policies(
        self, directory: str | os.PathLike[str], *, action_mask: bool = False, overwrite: bool = False
    ) -> dict[str, str]:
        """One ONNX file per policy in ``directory`` (IPPO: one per group; MAPPO: its shared actor), each
        named after the agents it serves; returns ``{file stem: path}``. See :func:`export_policies`."""
        return export_policies(self, directory, action_mask=action_mask, overwrite=overwrite)

    @property
    def multiagent_layout(self) -> Layout:
        """The row layout this agent reads (the runner builds its rows so)."""
        lay = self.config.layout
        if not _is_layout_dict(lay) or lay is None:
            raise ValueError(f"{type(self).__name__} was built without a ParallelEnv: pass the env")
        return Layout(int(lay["obs_dim"]), len(lay["agents"]), True, lay["state"], int(lay["state_dim"]))

    @property
    def multiagent_agents(self) -> list[str] | None:
        """The ParallelEnv's agents it was built for, in order (from its saved layout)."""
        lay = self.config.layout
        return list(lay["agents"]) if isinstance(lay, dict) else None

    @property
    def agent_groups(self) -> dict[str, list[str]]:
        """IPPO's groups of agents sharing a policy (MAPPO: none)."""
        return dict(getattr(self.config, "groups", None) or {})

    def _net_groups(self) -> tuple[list[list[str]], list[int]]:
        agents = list(self.config.layout["agents"])
        return [agents], [0] * len(agents)

    def _columns(self, critic: bool) -> list[int]:
        lay = self.multiagent_layout
        return list(range(lay.obs_dim))

    def _build_actor_critic(self) -> list[nn.Parameter]:
        if self.config.layout is None:
            raise TypeError(f"{type(self).__name__} needs a PettingZoo ParallelEnv: {type(self).__name__}(env, ...)")
        if self.config.use_sde:
            raise ValueError(f"{type(self).__name__} does not take use_sde=True")
        params = super()._build_actor_critic()  # the action head, the log std; the networks are replaced below
        lay = self.multiagent_layout
        groups, slot_group = self._net_groups()
        n_out = int(self._action_head())
        id_start = lay.obs_dim + lay.state_dim

        def routed(critic: bool) -> SlotNet:
            cols = self._columns(critic)
            nets = [
                self._network(len(cols), 1 if critic else n_out, output_gain=1.0 if critic else 0.01) for _ in groups
            ]
            return SlotNet(nets, cols, id_start, slot_group)

        self.actor = routed(False)
        self.critic = routed(True)
        params = [*self.actor.parameters(), *self.critic.parameters()]
        if self.log_std is not None:
            params.append(self.log_std)
        self._params = params
        return params


@register
class IPPO(_MultiAgentPPO):
    """Independent PPO on a PettingZoo ParallelEnv: one actor and one critic per group of agents.

    Example::

        agent = wb.IPPO(env, groups={"adversaries": ["adversary_0"], "agents": ["agent_0", "agent_1"]})
        wb.Session(agent, env).run(steps=50_000)
    """

    Config = IPPOConfig
    config: IPPOConfig

    def _net_groups(self) -> tuple[list[list[str]], list[int]]:
        agents = list(self.config.layout["agents"])
        groups = self.config.groups or {a: [a] for a in agents}
        members = list(groups.values())
        slot_group = [next(g for g, m in enumerate(members) if a in m) for a in agents]
        return members, slot_group


@register
class MAPPO(_MultiAgentPPO):
    """MAPPO on a PettingZoo ParallelEnv: one actor shared by every agent (its own observation and id),
    one centralised critic on the global state and the id.

    Example::

        agent = wb.MAPPO(env)                  # critic on env.state() when the env has a state_space
        wb.Session(agent, env).run(steps=50_000)
    """

    Config = MAPPOConfig
    config: MAPPOConfig

    def _state_for(self, env: Any, hyperparameters: dict[str, Any]) -> str | None:
        wanted = hyperparameters.get("critic_input", "auto")
        if wanted == "auto":
            return "state" if getattr(env, "state_space", None) is not None else "concat"
        return wanted

    def _columns(self, critic: bool) -> list[int]:
        lay = self.multiagent_layout
        ids = list(range(lay.obs_dim + lay.state_dim, lay.size))
        if critic:
            return list(range(lay.obs_dim, lay.obs_dim + lay.state_dim)) + ids
        return list(range(lay.obs_dim)) + ids


# -- export: one file per policy ----------------------------------------------------------------------


class _OwnObservation(nn.Module):
    """An agent's own flat observation (and, for a policy that reads agent ids, its index among the
    policy's agents) -> the row the agent's networks read (padded observation, zeros for the state,
    one-hot id), then the exported whole-row policy (normalization, actor, deterministic head)."""

    def __init__(self, policy: nn.Module, layout: Layout, obs_size: int, ids: torch.Tensor | None) -> None:
        super().__init__()
        self.policy = policy
        self.pad = layout.obs_dim - obs_size
        self.state_dim = layout.state_dim
        self.register_buffer("ids", ids if ids is not None else torch.zeros(1, 0))
        self.description = getattr(policy, "description", "")

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Actions for ``(obs[, agent_index][, action_mask])`` (one tensor per leaf for a composite space)."""
        obs, rest = inputs[0].float(), list(inputs[1:])
        parts = [nn.functional.pad(obs, (0, self.pad)) if self.pad else obs]
        if self.state_dim:
            parts.append(obs.new_zeros(obs.shape[0], self.state_dim))  # the actor does not read the state
        if self.ids.shape[1]:
            index = rest.pop(0) if self.ids.shape[0] > 1 else torch.zeros(obs.shape[0], dtype=torch.long)
            parts.append(self.ids[index])
        row = torch.cat(parts, dim=1)
        return self.policy(row, *rest)


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


def _policies(agent: Any, agents: list[str]) -> list[tuple[str, list[str]]]:
    """``(file stem, the agents it serves)`` per policy of ``agent``."""
    groups = getattr(getattr(agent, "config", None), "groups", None)
    if isinstance(agent, IPPO):
        groups = groups or {a: [a] for a in agents}
        return [(_stem(g if list(m) == [g] else f"{g}-{'+'.join(m)}"), list(m)) for g, m in groups.items()]
    return [(_stem(f"{agent.algorithm.lower()}-{'+'.join(agents)}"), list(agents))]


def export_policies(
    agent: Any,
    directory: str | os.PathLike[str],
    env: Any = None,
    *,
    action_mask: bool = False,
    overwrite: bool = False,
) -> dict[str, str]:
    """Write one ONNX policy per policy of a multi-agent ``agent`` into ``directory``, each named after the
    agents it serves: ``wb.IPPO`` one per group (``red-agent_0+agent_1.onnx``; a one-agent group is named
    after its agent, ``agent_2.onnx``), ``wb.MAPPO`` its actor shared by every agent
    (``mappo-agent_0+agent_1.onnx``), a shared-parameter ``wb.PPO`` its one policy (``ppo-...``; ``env``, the
    ParallelEnv it trains on, is needed unless the agent was built on one). Returns ``{stem: model path}``.

    Each model takes an agent's own observation (input ``obs``, float32: ``gymnasium.spaces.flatten`` of it, an
    ``"action_mask"`` key left out; a shorter one is padded with zeros to ``obs`` width), and, for a policy
    shared by several agents that reads their ids (MAPPO; PPO on ``wb.with_agent_ids(env)``), ``agent_index``
    (int64, ``(batch,)``: the agent's place in the sidecar's ``agents``). ``action_mask=True`` adds the
    bool mask input as ``agent.export`` does. Output ``action``: what ``act(row, deterministic=True)`` gives; a
    composite (Dict / Tuple) action space gives one output per leaf instead, named by its path, as ``agent.export``.
    The sidecar (``<model>.json``) is ``agent.export``'s, plus ``agents``, ``policy`` and ``inputs``.
    """
    from . import export as ex

    if env is None and getattr(agent, "env_source", None) is not None:
        env = agent.env_source.parallel
    own = lay = agent.multiagent_layout if isinstance(agent, _MultiAgentPPO) else None
    if lay is None:
        if env is None:
            raise ValueError(
                f"export_policies({agent.algorithm}) needs the ParallelEnv the agent was built for (env=...): "
                "a shared-parameter policy does not know the agents' names otherwise"
            )
        lay = layout_for(agent, env)
    agents = list(agent.config.layout["agents"]) if own is not None else list(env.possible_agents)
    folder = os.fspath(directory)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"{folder}: export_policies writes one file per policy into a directory; got a file")
    ex._check_flags(action_mask, overwrite)
    if action_mask:
        ex._check_maskable(agent)
    ex._require_onnx()
    os.makedirs(folder, exist_ok=True)
    whole = ex.policy_module(agent)
    eye = torch.eye(lay.n_agents)
    out: dict[str, str] = {}
    for stem, members in _policies(agent, agents):
        sizes = {a: _own_size(env, a, lay) for a in members}
        obs_size = max(sizes.values())
        ids = eye[[agents.index(a) for a in members]] if lay.agent_ids else None
        if isinstance(agent, IPPO):
            ids = None if ids is None else ids[:1]  # any member's id routes to the group's network
        module = _OwnObservation(whole, lay, obs_size, ids).eval()
        path = os.path.join(folder, f"{stem}.onnx")
        ex._check_replaceable(path, overwrite)
        example: list[torch.Tensor] = [torch.zeros(2, obs_size)]
        inputs, batch = [ex.INPUT_NAME], {0: "batch"}
        if ids is not None and ids.shape[0] > 1:
            example.append(torch.zeros(2, dtype=torch.long))
            inputs.append("agent_index")
        if action_mask:
            example.append(torch.ones(2, int(ex.mask_size(agent.action_space)), dtype=torch.bool))  # type: ignore[arg-type]
            inputs.append(ex.MASK_NAME)
        sidecar = ex._sidecar(agent, path, "onnx", module.description, action_mask)
        sidecar["input"] = {"name": ex.INPUT_NAME, "dtype": "float32", "shape": ["batch", obs_size]}
        sidecar["observation_space"] = (
            None if env is None else ex.checkpoint.space_to_json(env.observation_space(members[0]))
        )
        sidecar["observation_layout"] = None
        sidecar["policy"] = stem
        sidecar["agents"] = members
        sidecar["observation_sizes"] = sizes
        sidecar["inputs"] = inputs
        if "agent_index" in inputs:
            sidecar["agent_index"] = "int64 (batch,): the agent's place in 'agents'"
        outputs = [ex.OUTPUT_NAME] if agent.action_layout is None else agent.action_layout.paths
        ex.write_model(module, tuple(example), path, sidecar, inputs, outputs, {n: batch for n in [*inputs, *outputs]})
        out[stem] = path
    return out


def _own_size(env: Any, agent_name: str, lay: Layout) -> int:
    if env is None:
        return lay.obs_dim
    from ..envs.multiagent import _flat_dim

    return _flat_dim(env.observation_space(agent_name))
