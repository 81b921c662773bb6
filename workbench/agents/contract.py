"""The ``Agent`` contract: every member a module outside an algorithm's own file may use, with its default.

One loop (``workbench.loop``) drives every agent through four verbs: ``decide(obs) -> Step(actions,
extras)`` (``act`` returns the actions alone), ``observe(transitions)`` with the decision's ``extras``
carried back, ``ready()`` and ``update() -> metrics``. Around them an agent declares here

* what it **decides** and how: ``supports_action_masks``, ``on_policy``, ``per_env_decisions``,
  ``decides_in_parts``, ``offline``, ``multi_agent_only`` and the multi-agent layout (``multiagent_layout``,
  ``multiagent_agents``, ``agent_groups``);
* what it **observes**: its spaces, ``bind_env(source)``, ``takes_dataset`` / ``load_dataset(dataset)``,
  ``memory`` (its replay memory, or None), and ``behaviour_log_probs(t)`` (for recording and off-policy
  evaluation);
* what it **updates** and how edits reach it: ``config``, ``apply_edits(changed)``, the clock
  (``num_timesteps``, ``progress``);
* what it **saves and restores** (``state``/``restore``, :mod:`~workbench.agents.state`), what
  **export** runs (``policy_head()``) and what a dashboard plots first (``default_plots``).

Device, precision and compile are :mod:`~workbench.agents.execution`'s (``agent.device``, ``agent.to()``);
``play`` is :mod:`~workbench.agents.play`'s; both are base classes of :class:`Agent`. Nothing outside an
algorithm's own file asks an agent with ``getattr``/``hasattr``: what it may ask is declared here
(``tests/test_agent_contract.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..devices import DeviceChoice, choose_device, parse_device
from ..envs.composite import ActionLayout, composite_layout
from ..envs.core import as_env_source, describe_space, flat_observation_space, observation_flattener
from ..envs.masks import MASK_KEY, strip_mask_space
from ..loop import NO_EXTRAS, Step, Transitions
from ..normalization import ObservationNormalizer, RewardNormalizer
from ..schedules import Schedule, as_schedule
from ..validation import check_value, integer, optional
from .encoders import describe_encoder
from .execution import Execution, has_image
from .fairlock import FairRLock
from .play import Playing
from .registry import check_action_space, make_config, warn_template_overrides
from .shaping import Shaping
from .state import Persistence

if TYPE_CHECKING:
    from ..envs.core import EnvSource
    from ..envs.multiagent import Layout
    from .heads import PolicyHead

__all__ = ["Agent"]

_SEED = optional(integer(min=0))


class Agent(Execution, Shaping, Persistence, Playing):
    """Base class of every algorithm. Subclasses set ``Config``, ``action_spaces`` and
    ``network_names``, and implement ``_build``, ``_act`` (or ``_decide`` when a step has extras),
    ``_observe``, ``ready`` and ``_update``.

    ``observe()`` and ``update()`` are template methods: the public ones normalize, take the lock and
    advance the clock, then call ``_observe()`` / ``_update()``. To change an algorithm, subclass it and
    override ``_observe``/``_update`` (calling ``super()._update()`` where it helps) or its loss; a
    subclass overriding the public ``observe``/``update`` gets a warning when its class is made, and
    must call ``super().observe(...)`` / ``super().update()`` for normalization, lock and clock to run.

    Build one from an env (instance, registered id or zero-argument factory) or from its spaces,
    with keyword hyperparameters that override the ``Config`` defaults::

        agent = wb.PPO("CartPole-v1", n_steps=64)
        agent = wb.DQN(observation_space=obs_space, action_space=act_space, seed=1)

    The env is only inspected for its spaces: nothing is reset or stepped here.
    """

    Config: ClassVar[type]
    """The hyperparameters dataclass (extends :class:`~workbench.agents.registry.AgentConfig`)."""
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Box)
    """The action spaces it acts in (any other is refused at construction, naming the agents that fit)."""
    network_names: ClassVar[tuple[str, ...]] = ()
    """The attributes holding the agent's torch modules: what it saves and sends to workers."""
    optimizer_names: ClassVar[tuple[str, ...]] = ("optimizer",)
    """The attributes holding its optimizers (saved with their moments)."""
    supports_action_masks: ClassVar[bool] = False
    """True when ``decide``/``act`` honour ``action_mask=`` (``_decide``/``_act`` take ``mask``)."""
    on_policy: ClassVar[bool] = False
    """True when it learns only from data of its current weights (workers then collect whole
    rollouts with the newest weights); False when it learns from a replay memory."""
    offline: ClassVar[bool] = False
    """True when it learns from a dataset (``dataset=``) instead of stepping an env (BC, BCQ, CQL, IQL)."""
    multi_agent_only: ClassVar[bool] = False
    """True when it trains on a PettingZoo ParallelEnv only (IPPO, MAPPO; registered in ``MULTI_AGENTS``)."""
    asynchronous: ClassVar[bool] = False
    """True when it learns from rollouts that envs stepped with slightly older weights, correcting with
    the behaviour log-probabilities in the steps' extras (IMPALA, APPO): a session then keeps its envs
    stepping while it updates (``workbench.parallel.asynchronous``), within :attr:`max_policy_lag`."""
    per_env_decisions: ClassVar[bool] = False
    """True when its decisions carry per-env state between calls (a recurrent policy; ``decide(rows=)``)."""
    takes_dataset: ClassVar[bool] = False
    """True when :meth:`load_dataset` takes a ``wb.Dataset`` (offline agents, and replay agents as a start)."""
    default_plots: ClassVar[tuple[str, ...]] = ()
    """The signals a dashboard plots first; empty: ``episode_reward`` and the losses recorded so far."""

    # What __init__ sets, declared for the modules that read it.
    config: Any
    """The hyperparameters as built (a ``Config``); live edits write it (:meth:`apply_edits`)."""
    observation_space: spaces.Space
    """The env's observation space, as given."""
    action_space: spaces.Space
    """The env's action space, as given."""
    flat_observation_space: spaces.Box
    """The observation space as the networks read it (a Dict or Tuple flattened)."""
    obs_shape: tuple[int, ...]
    """The shape of one (flat) observation."""
    obs_dtype: np.dtype
    """The dtype observations are stored and fed in (uint8 images stay uint8)."""
    discrete: bool
    """True for a Discrete action space."""
    action_low: np.ndarray
    """A Box action space's lower bounds, float32 (Box only)."""
    action_high: np.ndarray
    """A Box action space's upper bounds, float32 (Box only)."""
    action_layout: ActionLayout | None
    """A composite (Dict / Tuple) action space's flat row layout (``workbench.envs.composite``), else None:
    the agents' actions are its rows, and ``act`` returns the structure the env takes."""
    encoder_description: str
    """What turns its observations into features, in words ("mlp", "nature cnn"...)."""
    env_source: EnvSource | None
    """The env it was built from (None when built from spaces)."""
    seed: int | None
    """The seed of its private generators."""
    rng: np.random.Generator
    """Its numpy generator (exploration, sampling)."""
    generator: torch.Generator
    """Its torch generator (network noise, dropout)."""
    num_timesteps: int
    """Env steps observed while training, over all envs: the run's step clock."""
    num_updates: int
    """Updates done."""
    total_timesteps: int | None
    """The training budget schedules count against (None before a run sets it)."""
    training: bool
    """False in play mode: deterministic actions, no exploration, no learning."""
    memory: Any = None
    """Its replay memory (off-policy agents), saved with ``memory=True``; None for the others."""
    data: Any = None
    """The dataset an offline agent learns from (``load_dataset``); None for the others."""
    obs_normalizer: ObservationNormalizer | None = None
    """The running observation statistics (``normalize_observations=True``), else None."""
    reward_normalizer: RewardNormalizer | None = None
    """The running return statistics (``normalize_rewards=True``), else None."""
    intrinsic: Any = None
    """The intrinsic reward plugged in (``intrinsic=wb.RND()``), else None."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        warn_template_overrides(cls)  # observe()/update() replaced outright skip the base's lock and clock

    def __init__(
        self,
        env: Any = None,
        *,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        seed: int | None = None,
        device: Any = "auto",
        **hyperparameters: Any,
    ) -> None:
        self.env_source = None
        if env is not None:
            self.env_source = as_env_source(env)
            observation_space, action_space = self.env_source.spaces()
            hyperparameters = self.env_source.fit_hyperparameters(hyperparameters, self.Config, type(self).__name__)
        if observation_space is None or action_space is None:
            raise TypeError(
                f"{type(self).__name__} needs an env (instance, registered id or factory) or both "
                "observation_space= and action_space="
            )
        check_value(type(self).__name__, "seed", seed, _SEED, None)
        parse_device(device, type(self).__name__)  # an unknown or absent device fails here, before building
        check_action_space(type(self), action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.flat_observation_space = flat_observation_space(observation_space)
        self.obs_shape: tuple[int, ...] = self.flat_observation_space.shape
        self.obs_dtype = np.dtype(self.flat_observation_space.dtype)
        self._flatten = observation_flattener(observation_space)
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.action_layout = composite_layout(action_space)
        if isinstance(action_space, spaces.Box):
            self.action_low = action_space.low.astype(np.float32)
            self.action_high = action_space.high.astype(np.float32)
        self.config = make_config(type(self), hyperparameters, images=has_image(observation_space))
        self._check_precision_fits()
        self._in_observe = False
        self.encoder_description = describe_encoder(
            strip_mask_space(observation_space), self.config.encoder, self.config.encoder_kwargs
        )
        if self.config.normalize_observations and has_image(observation_space):
            raise ValueError(
                "normalize_observations=True standardizes vector observations, but "
                f"{describe_space(observation_space)} holds images, which the CNN encoder scales by 1/255 itself: "
                "drop normalize_observations"
            )
        # decide/act/observe/update hold it: one agent serves act() from many threads (docs/external.md).
        self._lock = FairRLock()  # first come, first served: an act waits for one update at most
        # Running statistics are nn.Modules, so they are saved and loaded with the networks.
        if self.config.normalize_observations:
            self.obs_dtype = np.dtype(np.float32)  # memories hold the standardized observations
            self.obs_normalizer = ObservationNormalizer(self.obs_shape)
        if self.config.normalize_rewards:
            self.reward_normalizer = RewardNormalizer(self.gamma)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(int(seed) if seed is not None else int(self.rng.integers(2**62)))
        self.num_timesteps = 0  # env steps observed while training, over all envs: the run's step clock
        self.num_updates = 0
        self.total_timesteps: int | None = None  # the budget schedules count against
        self.training = True
        self._weights_loaded = False  # set by checkpoint loading; keeps reseed() from rebuilding
        self._init_execution()  # on the CPU (the same initial weights whatever the device), not compiled
        # Build networks under a private seed without disturbing torch's global generator,
        # so a second run in the same kernel is not affected by this one.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.generator.initial_seed()))
            self._build()
            self._build_plug_ins()
        self.device_choice: DeviceChoice = choose_device(
            device, self._device_probe, self._probe_key(), owner=type(self).__name__
        )
        self.device = self.device_choice.device
        self._check_precision_device()
        self._after_build()

    def reseed(self, seed: int) -> None:
        """Reseed the agent's random generators; an agent that has not learned or loaded anything
        yet also rebuilds its networks under ``seed``, so a seeded session is reproducible."""
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        if self.num_timesteps == 0 and self.num_updates == 0 and not self._weights_loaded:
            # On the agent's lock: a served session may publish (acting_weights) from another thread while the
            # run begins, and must see the old networks or the new ones, never a half-built set.
            with self._lock:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(self.seed)
                    self._build()
                    self._build_plug_ins()
                self._after_build()

    def _build(self) -> None:
        """Create networks, optimizers and storage (called under the agent's private seed)."""
        raise NotImplementedError

    def _build_plug_ins(self) -> None:
        """After :meth:`_build`, under the same seed: what a config plugs in on top of the algorithm.
        Here the intrinsic reward (``intrinsic=wb.RND()``, ``workbench.agents.intrinsic``); the off-policy
        agents add their replay memory's kind (``replay=wb.HerReplay()``)."""
        spec = getattr(self.config, "intrinsic", None)
        self.intrinsic = None if spec is None else spec.build(self)

    @property
    def algorithm(self) -> str:
        """The algorithm's name, e.g. ``"PPO"``."""
        return type(self).__name__

    @property
    def networks(self) -> dict[str, nn.Module]:
        """The agent's torch modules by name, as its class declares them (``network_names``, plus
        the normalizers' running statistics): saved in checkpoints, sent to Ray workers."""
        names = (*self.network_names, "obs_normalizer", "reward_normalizer", "intrinsic")
        return {name: getattr(self, name) for name in names if getattr(self, name, None) is not None}

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The agent's optimizers by name, as its class declares them (``optimizer_names``), and an
        intrinsic reward's (``intrinsic_optimizer``)."""
        opts = {name: getattr(self, name) for name in self.optimizer_names if getattr(self, name, None) is not None}
        if getattr(self, "intrinsic", None) is not None:
            opts["intrinsic_optimizer"] = self.intrinsic.optimizer
        return opts

    @property
    def progress(self) -> float:
        """Fraction of the training budget done, for schedules (0 before any budget is set)."""
        if not self.total_timesteps:
            return 0.0
        return min(self.num_timesteps / self.total_timesteps, 1.0)

    @property
    def num_envs(self) -> int:
        """How many envs the agent would like to train on (the session may use fewer)."""
        return int(getattr(self.config, "n_envs", 1))

    # -- the four verbs -----------------------------------------------------------------------

    def decide(
        self, obs: Any, deterministic: bool = False, action_mask: Any = None, rows: Sequence[int] | None = None
    ) -> Step:
        """The :class:`Step` for a batch of observations (one is taken as a batch of one): the
        actions, and the ``extras`` that :meth:`observe` will need with this step's transitions.
        ``deterministic`` (always so in play mode) takes the greedy / mean action, no exploration.
        ``action_mask`` (one bool row per observation, True where allowed; see ``workbench.envs.masks``)
        restricts the actions to the allowed ones and travels on in the extras as ``"action_mask"``;
        a Dict observation's ``"action_mask"`` key is used when it is not given.
        ``rows``: for a ``per_env_decisions`` agent, which of its ``num_envs`` envs the observations
        come from (only their state moves; None: every env in order); other agents ignore it.
        Thread-safe: concurrent calls take turns on the agent's lock (as ``act``, ``observe`` and
        ``update`` do), so they give the actions serial calls would."""
        step, mask, _ = self._locked_decide(obs, deterministic, action_mask, rows)
        return step if mask is None else Step(step.actions, {**step.extras, MASK_KEY: mask})

    def act(self, obs: Any, deterministic: bool = False, action_mask: Any = None) -> Any:
        """Actions for one observation or a batch (the actions of :meth:`decide`, ``action_mask``
        included); thread-safe, so a loaded agent serves concurrent requests
        (``wb.load(path).act(obs)`` from many threads)."""
        step, _, single = self._locked_decide(obs, deterministic, action_mask)
        if self.action_layout is not None:  # the structure the env's step takes (a batch of each leaf)
            layout = self.action_layout
            return layout.structure(step.actions[0]) if single else layout.structures(step.actions)
        return step.actions[0] if single else step.actions

    def _decide(self, obs: np.ndarray, deterministic: bool, mask: np.ndarray | None = None) -> Step:
        """The step for a prepared batch (``mask``: checked bool masks, or None); agents whose steps
        carry extras override this."""
        if mask is None:
            return Step(self._act(obs, deterministic), NO_EXTRAS)
        return Step(self._act(obs, deterministic, mask), NO_EXTRAS)

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def observe(self, transitions: Transitions) -> None:
        """Take one step of every env into memory (with the extras its decision returned).

        Normalizes the observations and rewards (when configured), then calls the algorithm's
        :meth:`_observe` under the agent's lock and advances the step clock (``num_timesteps``) by
        the number of envs. Algorithms override :meth:`_observe`, not this."""
        with self._lock:
            if self._in_observe:  # observe() again from inside _observe(): already normalized and counted
                self._observe(transitions)
                return
            self._in_observe = True
            try:
                t = self._normalize_transitions(transitions)
                if self.intrinsic is not None and self.training:  # the exploration bonus (agents/intrinsic.py)
                    t = self.intrinsic.add_bonus(t, float(self.config.intrinsic_coef))
                self._observe(t)
            finally:
                self._in_observe = False
            self.num_timesteps += len(transitions.rewards)

    def _observe(self, transitions: Transitions) -> None:
        """The algorithm's part of :meth:`observe`: store the (normalized) transitions."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True when enough new data has arrived for :meth:`update`."""
        raise NotImplementedError

    def update(self) -> dict[str, float]:
        """Learn from memory; return metrics (they become the session's signals).

        Calls the algorithm's :meth:`_update` under the agent's lock, so an ``act()`` from another
        thread never sees weights halfway through an update. Algorithms override :meth:`_update`."""
        with self._lock:
            with self._autocast():
                metrics = self._update()
            if self.intrinsic is not None:  # the intrinsic reward learns from the steps since the last update
                metrics.update(self.intrinsic.learn(float(self.config.intrinsic_coef)))
            if self._compile_time_due:  # the compile time once, as its own signal
                self._compile_time_due = False
                metrics = {**metrics, "compile_time": float(self.compile_time or 0.0)}
            return metrics

    def _update(self) -> dict[str, float]:
        """The algorithm's part of :meth:`update`: learn, return the metrics."""
        raise NotImplementedError

    def begin_episode(self, done: np.ndarray) -> None:
        """Called by the loop with the mask of envs whose episode just ended."""

    # -- modes --------------------------------------------------------------------------------

    def eval(self) -> Agent:
        """Play mode: deterministic actions, no exploration, no learning, networks in eval mode."""
        self.training = False
        for net in self.networks.values():
            net.eval()
        return self

    def train(self) -> Agent:
        """Training mode (the default for a new agent)."""
        self.training = True
        for net in self.networks.values():
            net.train()
        return self

    # -- the contract's members with defaults -----------------------------------------------

    @property
    def gamma(self) -> float:
        """The discount its returns use (the config's ``gamma``; 0.99 for an agent without one)."""
        return float(getattr(self.config, "gamma", 0.99))

    @property
    def rollout_steps(self) -> int | None:
        """Steps per env of each rollout it learns from (on-policy ``n_steps``); None for the others."""
        return None

    @property
    def max_policy_lag(self) -> int | None:
        """An asynchronous agent's bound on a rollout's age, in learner updates (older ones are dropped);
        None for the others."""
        return None

    @property
    def decides_in_parts(self) -> bool:
        """True when deciding for some envs' rows at a time (``decide(rows=)``, one call per part) acts as one
        decision for all would: nothing kept per env that ``rows`` does not reach. Local workers'
        ``double_buffer=True`` decides each half of the envs apart and needs it. False where exploration
        keeps a state per env (TD3/DDPG's Ornstein-Uhlenbeck noise)."""
        return True

    @property
    def multiagent_layout(self) -> Layout | None:
        """The row layout it reads on a ParallelEnv (IPPO, MAPPO); None: one observation per row."""
        return None

    @property
    def multiagent_agents(self) -> list[str] | None:
        """The ParallelEnv agents it was built for (IPPO, MAPPO), in order; None when not built for one."""
        return None

    @property
    def agent_groups(self) -> dict[str, list[str]]:
        """Groups of agents that share a policy (IPPO's ``groups=``), by group name; empty for none."""
        return {}

    def bind_env(self, source: EnvSource) -> None:
        """Take what it needs from the session's env before training (HER: the env's ``compute_reward``)."""

    def load_dataset(self, dataset: Any) -> None:
        """Learn from (offline agents) or start the replay memory with ``dataset`` (a ``wb.Dataset``)."""
        raise TypeError(
            f"{self.algorithm} has no replay memory to start from a dataset; use BC, BCQ, CQL, IQL "
            "or a replay agent (DQN, SAC...)"
        )

    @property
    def observes_unordered(self) -> bool:
        """True when :meth:`observe` takes transitions in any number and order (a one-step replay memory)."""
        return False

    @property
    def observe_rows(self) -> int:
        """Batched transitions one :meth:`observe` takes at most (updates as often per step as in process)."""
        return self.num_envs

    def behaviour_log_probs(self, t: Transitions) -> np.ndarray | None:
        """The log-probability with which it (training, before observing ``t``) took each of ``t``'s
        actions, for recording and off-policy evaluation; None when it cannot tell. Here: the step's
        ``log_probs`` extras (PPO, A2C); DQN and SAC compute theirs."""
        if "log_probs" in t.extras:
            return np.asarray(t.extras["log_probs"], dtype=np.float64).reshape(-1)
        return None

    def apply_edits(self, changed: set[str]) -> None:
        """Refresh what it derived at build time from the config fields ``changed`` (their new values
        already in ``config``, checked by ``workbench.agents.live``): schedules, optimizers' rates.
        Algorithms extend it (calling ``super()``); here the reward normalizer's discount."""
        if "gamma" in changed and self.reward_normalizer is not None:
            self.reward_normalizer.gamma = float(self.config.gamma)

    def _set_learning_rates(self, rates: Mapping[str, float]) -> None:
        """The named optimizers' ``param_groups`` at ``rates`` now (an edit shows at once)."""
        for name, opt in self.optimizers.items():
            if name in rates:
                for group in opt.param_groups:
                    group["lr"] = rates[name]

    def _edit_learning_rate(self, changed: set[str], schedule: Schedule) -> Schedule:
        """One schedule for every optimizer (DQN, SAC, on-policy): renewed by an edit, its rate set at once."""
        schedule = as_schedule(self.config.learning_rate) if "learning_rate" in changed else schedule
        self._set_learning_rates(dict.fromkeys(self.optimizers, schedule(self.progress)))
        return schedule

    def policy_head(self) -> PolicyHead:
        """What ``export`` runs after the frozen observation normalization: the deterministic head
        (what ``act(obs, deterministic=True)`` computes), its description, and for a recurrent policy
        its actor (``workbench.agents.heads``). Raises ``TypeError`` for an agent with no export."""
        raise TypeError(
            f"{self.algorithm} has no policy export: an algorithm exports by defining policy_head() "
            "(see workbench.agents.heads)"
        )
