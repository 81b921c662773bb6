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

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..envs.core import as_env_source
from ..envs.multiagent import Layout, parallel_spaces
from ..validation import Constraint, checked, choice
from .base import register
from .networks import mlp
from .ppo import PPO, PPOConfig

__all__ = ["IPPO", "IPPOConfig", "MAPPO", "MAPPOConfig", "SlotNet"]


class SlotNet(nn.Module):
    """One network per group; each row goes to its group's network (read from the row's one-hot id
    in ``id_columns``) and is fed only ``columns`` of the row."""

    def __init__(self, nets: list[nn.Module], columns: list[int], id_start: int, slot_group: list[int]) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nets)
        self.register_buffer("columns", torch.tensor(columns, dtype=torch.long), persistent=False)
        self.register_buffer("slot_group", torch.tensor(slot_group, dtype=torch.long), persistent=False)
        self.id_start = id_start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The outputs of each row's group network."""
        inputs = x.index_select(-1, self.columns)
        if len(self.nets) == 1:
            return self.nets[0](inputs)
        group = self.slot_group[x[:, self.id_start :].argmax(-1)]
        outs = [net(inputs) for net in self.nets]  # small nets: every group on every row, then pick
        stacked = torch.stack(outs, dim=0)
        return stacked[group, torch.arange(x.shape[0])]


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

    @property
    def multiagent_layout(self) -> Layout:
        """The row layout this agent reads (the runner builds its rows so)."""
        lay = self.config.layout
        if not _is_layout_dict(lay) or lay is None:
            raise ValueError(f"{type(self).__name__} was built without a ParallelEnv: pass the env")
        return Layout(int(lay["obs_dim"]), len(lay["agents"]), True, lay["state"], int(lay["state_dim"]))

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
        c = self.config
        lay = self.multiagent_layout
        groups, slot_group = self._net_groups()
        n_out = int(self._action_head())
        id_start = lay.obs_dim + lay.state_dim

        def routed(critic: bool) -> SlotNet:
            cols = self._columns(critic)
            nets = [
                mlp(
                    len(cols),
                    c.net_arch,
                    1 if critic else n_out,
                    activation=c.activation,
                    ortho_init=bool(c.ortho_init),
                    output_gain=1.0 if critic else 0.01,
                )
                for _ in groups
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
