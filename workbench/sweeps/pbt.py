"""Population-based training on live sessions, after Jaderberg et al., 2017 (arXiv:1711.09846).

::

    population = wb.pbt(lambda **hp: wb.PPO("Pendulum-v1", **hp), "Pendulum-v1", population=8,
                        space={"learning_rate": (1e-4, 1e-2), "ent_coef": (0.0, 0.05)},
                        steps=200_000, interval=10_000)
    population          # in a notebook: the population dashboard
    population.members[3].pause()                       # each member is a Session
    population.members[3].set(learning_rate=3e-4)       # ... edited by hand
    population.wait(); population.best; population.events

How it runs. Every member is a :class:`~workbench.Session` built from ``make_agent(**values)`` with
values drawn from ``space``; a driver thread per member trains it ``interval`` env steps at a time
(``parallel`` members at once). At each of its boundaries a member is scored (``eval_reward``: the
population evaluates it, ``eval_episodes`` deterministic episodes; another metric: the mean of the
signal's last ``window`` points), saved to ``<directory>/member-<i>/`` in the checkpoint format, and
ranked against the others' latest scores (asynchronous PBT, as Ray Tune's scheduler does; ranking
starts once every member has a score). A member in the bottom ``quantile`` whose score a member of
the top ``quantile`` strictly beats:

* **exploits**: it loads a top-``quantile`` member's last checkpoint (weights, optimizer moments,
  normalizers' statistics and, with ``copy_memory=True``, the replay memory) through
  ``workbench.checkpoint``, never pickle; it keeps its own step counter, random generators, signals
  and events, so its curves go on where they were;
* **explores**: it takes the donor's values of the searched hyperparameters, each multiplied by
  one of ``perturb`` (a choice moves to a neighbouring item), or with probability ``resample_p``
  drawn from ``space`` again, and applies them with ``session.set``. So only live-editable
  hyperparameters can be searched (``wb.pbt`` refuses the others by name at the call).

Each exploit and explore is a :class:`PopulationEvent` in ``population.events``; the members'
hyperparameter edits are also in their own ``session.events`` and ``set/<name>`` signals.
``<directory>/population.json`` (settings, members, scores, lineage, events; strict JSON) and the
members' checkpoints make the population resumable: ``wb.pbt(...)`` with the same ``directory`` (or
``wb.Population.open(directory)``) reopens every member where its last checkpoint left it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import views
from ..agents.base import Agent, AgentState
from ..agents.live import editable, why_fixed
from ..agents.saving import open_saved
from ..checkpoint import MAX_META_BYTES, CheckpointError, json_ready, read_json
from ..files import write_text
from ..run.control import ACTIVE, Controlled, RunControl
from ..run.registry import start_thread
from ..session import Session
from ..validation import ArgumentError, did_you_mean
from .space import is_number as _is_number
from .space import range_bounds

__all__ = ["Population", "PopulationEvent", "pbt"]

_STATE_FILE = "population.json"
_FORMAT = 1
_POLL_S = 0.1
_SIDE_BY_SIDE = r".*other session\(s\) still training in this process"


# -- the search space ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Dim:
    """One searched hyperparameter: a float range (log-uniform when both ends are positive), an
    integer range, or a list of choices."""

    name: str
    kind: str  # "float" | "int" | "choice"
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    @property
    def log(self) -> bool:
        return self.kind == "float" and self.low > 0

    def sample(self, rng: np.random.Generator) -> Any:
        if self.kind == "choice":
            return self.choices[int(rng.integers(len(self.choices)))]
        if self.kind == "int":
            return int(rng.integers(int(self.low), int(self.high) + 1))
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))

    def perturb(self, value: Any, factors: tuple[float, float], rng: np.random.Generator) -> Any:
        """The value moved once: times one of ``factors`` (kept in the range), or a choice moved to a
        neighbouring item (down for the first factor, up for the second)."""
        up = bool(rng.integers(2))
        if self.kind == "choice":
            index = self._index(value)
            if index is None:
                return self.sample(rng)
            index = min(max(index + (1 if up else -1), 0), len(self.choices) - 1)
            return self.choices[index]
        if not _is_number(value):  # a schedule set by hand: start again from the space
            return self.sample(rng)
        factor = factors[1] if up else factors[0]
        moved = value * factor
        if self.kind == "int":
            step = round(moved)
            if step == value:  # an integer too small to move by a factor still moves by one
                step = value + (1 if up else -1)
            return int(min(max(step, int(self.low)), int(self.high)))
        if moved == value and value == 0:  # zero times a factor stays zero: move to a bit of the range
            moved = self.low + (self.high - self.low) * (0.1 if up else 0.0)
        return float(min(max(moved, self.low), self.high))

    def _index(self, value: Any) -> int | None:
        for i, c in enumerate(self.choices):
            if c == value or json_ready(c) == json_ready(value):
                return i
        return None

    def from_saved(self, value: Any) -> Any:
        """A value as a checkpoint's JSON holds it, back as the space's own item (a tuple choice)."""
        if self.kind == "choice":
            index = self._index(value)
            return value if index is None else self.choices[index]
        if self.kind == "int" and _is_number(value):
            return int(value)
        return value

    def describe(self) -> Any:
        """The dimension as JSON data (what population.json records to check a resume)."""
        if self.kind == "choice":
            return {"choices": json_ready(list(self.choices))}
        return {"kind": self.kind, "low": self.low, "high": self.high}


_INT64 = 2**63 - 1


def _check_bounds(name: str, spec: tuple[Any, Any], kind: str) -> None:
    """A range's ends are finite, in order, and ones numpy can draw between (an infinite or huge bound
    would fail deep inside numpy at the first sample, with an OverflowError that names nothing)."""
    low, high = spec
    if kind == "int":
        if not -_INT64 <= low < high <= _INT64:
            raise ArgumentError(
                f"pbt space[{name!r}] = {spec!r}: an integer range needs low < high, both within +-(2**63 - 1)"
            )
        return
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ArgumentError(f"pbt space[{name!r}] = {spec!r}: a range's bounds must be finite numbers (no inf or nan)")
    if not low < high:
        raise ArgumentError(f"pbt space[{name!r}] = {spec!r}: the range needs low < high")
    if not math.isfinite(float(high) - float(low)):
        raise ArgumentError(
            f"pbt space[{name!r}] = {spec!r}: the range is too wide to draw from (high - low overflows)"
        )


def _parse_space(space: Any) -> dict[str, _Dim]:
    if not isinstance(space, Mapping) or not space:
        raise ArgumentError(
            f"pbt needs space= as a non-empty dict of hyperparameter name to (low, high) or [choices], got {space!r}"
        )
    dims: dict[str, _Dim] = {}
    for name, spec in space.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ArgumentError(f"pbt space key {name!r} must be a hyperparameter name such as 'learning_rate'")
        if isinstance(spec, tuple):
            low, high = range_bounds("pbt space", name, spec, ArgumentError)
            kind = "int" if isinstance(low, int) and isinstance(high, int) else "float"
            _check_bounds(name, spec, kind)
            dims[name] = _Dim(
                name, kind, low=low if kind == "int" else float(low), high=high if kind == "int" else float(high)
            )
        elif isinstance(spec, list):
            if not spec:
                raise ArgumentError(f"pbt space[{name!r}] is an empty list: give at least one choice")
            dims[name] = _Dim(name, "choice", choices=tuple(spec))
        else:
            raise ArgumentError(
                f"pbt space[{name!r}] = {spec!r} is not a search range: give (low, high) for a range or "
                "[a, b, ...] for a choice (fixed values belong in make_agent)"
            )
    return dims


def _check_editable(agent_or_class: Any, dims: Mapping[str, _Dim]) -> None:
    """Every searched name is a live-editable hyperparameter of the agent (explore uses session.set)."""
    live = editable(agent_or_class)
    config = agent_or_class.Config
    algorithm = agent_or_class.__name__ if isinstance(agent_or_class, type) else agent_or_class.algorithm
    fields = {f.name for f in dataclasses.fields(config)}
    for name in dims:
        if name in live:
            continue
        if name not in fields:
            raise ArgumentError(
                f"pbt space names {name!r}, which is not a hyperparameter of {algorithm}."
                f"{did_you_mean(name, live)} PBT explores "
                f"through session.set, so space keys are {algorithm}'s live-editable hyperparameters: "
                f"{', '.join(live)}."
            )
        raise ArgumentError(
            f"pbt space names {name!r}, which {algorithm} cannot change while it trains: {why_fixed(name)}. "
            f"PBT explores through session.set, so only live-editable hyperparameters can be searched: "
            f"{', '.join(live)}. Fix {name} in make_agent instead."
        )


# -- records --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PopulationEvent:
    """One step of the population's search.

    ``kind`` is ``"exploit"`` (member ``member`` loaded member ``source``'s checkpoint; ``score``
    and ``source_score`` their scores then) or ``"explore"`` (member ``member``'s hyperparameters
    changed: ``changes`` maps each name to ``[old, new]``, old being the value before the exploit).
    ``step`` is the member's env step, ``time`` seconds since the population first started.
    """

    kind: str
    member: int
    step: int
    time: float
    source: int | None = None
    score: float | None = None
    source_score: float | None = None
    changes: dict[str, list[Any]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON data (what population.json stores)."""
        return json_ready(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PopulationEvent:
        """Read back what :meth:`to_dict` wrote."""
        return cls(
            kind=str(data["kind"]),
            member=int(data["member"]),
            step=int(data["step"]),
            time=float(data.get("time", 0.0)),
            source=None if data.get("source") is None else int(data["source"]),
            score=_float_or_none(data.get("score")),
            source_score=_float_or_none(data.get("source_score")),
            changes={str(k): list(v) for k, v in dict(data.get("changes") or {}).items()},
        )


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class _Member:
    """The population's bookkeeping of one member (the session is the member itself)."""

    def __init__(self, index: int, session: Session) -> None:
        self.index = index
        self.session = session
        self.scores: list[tuple[int, float]] = []  # (env step, score) at each boundary
        self.parents: list[tuple[int, int]] = []  # (env step, source member) of each exploit
        self.user_paused = False
        self.retired = False  # stopped by hand: trains no more, copied from and into no more
        self.failed = False
        self.error: str = ""
        self.thread: threading.Thread | None = None

    @property
    def score(self) -> float | None:
        return self.scores[-1][1] if self.scores else None

    def state(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "scores": [list(p) for p in self.scores],
            "parents": [list(p) for p in self.parents],
            "retired": self.retired,
            "failed": self.failed,
            "error": self.error,
        }


# -- the live object ------------------------------------------------------------------------------


class Population(Controlled):
    """A population-based training run whose members are live Sessions.

    Build it with :func:`pbt` (which also starts it), or ``wb.Population(...)`` and :meth:`start`;
    reopen a saved one with :meth:`Population.open`.

    Example::

        p = wb.Population(make_agent, "CartPole-v1", population=4, space={"learning_rate": (1e-4, 1e-2)},
                          steps=20_000, interval=2_000)
        p.start(); p.pause(); p.resume(); p.stop(); p.start()     # start again: goes on
        p.wait(); p.best, p.table(), p.events

    Parameters:
        make_agent: builds an agent from keyword arguments named as in ``space``
            (``lambda **hp: wb.PPO(env, **hp)``), or an agent class (called as ``cls(env, **values)``).
        env: the env id or zero-argument factory every member's Session trains on.
        population: how many members (at least 2).
        space: ``{"learning_rate": (1e-4, 1e-2), "ent_coef": (0.0, 0.05), "n_epochs": [5, 10, 20]}``: a
            pair of floats is a range (log-uniform when both ends are positive), a pair of integers an
            integer range, a list a choice. Keys are live-editable hyperparameters of the agent
            (``session.set`` applies them); any other is refused by name, listing the editable ones.
        steps: env steps each member trains in all (the budget is ``population * steps``).
        interval: env steps a member trains between two exploit/explore decisions.
        metric: the score: ``eval_reward`` (the population evaluates each member, ``eval_episodes``
            deterministic episodes, at each boundary) or any signal (mean of its last ``window`` points).
        direction: ``maximize`` or ``minimize`` the metric.
        quantile: a member in the bottom ``quantile`` copies one in the top ``quantile`` (at least one).
        perturb: the factors a copied value is multiplied by, one of the two at random (kept in range;
            a choice moves one item down or up).
        resample_p: probability that a copied value is drawn from ``space`` again instead.
        parallel: members training at once (default: all of them), each in a thread of this process.
        backend: ``local`` (the members' envs step in this process, or in ``session_kwargs``'s local
            workers) or ``ray`` (each member's envs step on Ray actors, at ``ray_address`` or a local
            Ray; the learners stay here, so members stay live sessions).
        directory: where the population's state and members' checkpoints go (default
            ``runs/pbt/<name>``); a directory that holds one resumes it.
        seed: seeds the sampling and each member's session (``seed + index``).
        copy_memory: exploit copies the replay memory too (off-policy agents), and checkpoints keep it.
        session_kwargs: more ``Session`` arguments for every member (``num_workers``, ``eval_env``...).
    """

    def __init__(
        self,
        make_agent: Callable[..., Any] | None,
        env: Any,
        *,
        population: int = 8,
        space: Mapping[str, Any] | None = None,
        steps: int = 100_000,
        interval: int = 10_000,
        metric: str = "eval_reward",
        direction: str = "maximize",
        quantile: float = 0.25,
        perturb: tuple[float, float] = (0.8, 1.2),
        resample_p: float = 0.25,
        parallel: int | None = None,
        backend: str = "local",
        directory: str | os.PathLike[str] | None = None,
        name: str | None = None,
        seed: int = 0,
        window: int | None = None,
        eval_episodes: int = 5,
        copy_memory: bool = False,
        session_kwargs: Mapping[str, Any] | None = None,
        ray_address: str | None = None,
    ) -> None:
        for label, value in (
            ("population", population),
            ("steps", steps),
            ("interval", interval),
            ("eval_episodes", eval_episodes),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArgumentError(f"pbt got {label}={value!r}: {label} must be a positive integer")
        if population < 2:
            raise ArgumentError(
                f"pbt got population={population}: a population needs at least 2 members to copy from one another"
            )
        if interval > steps:
            raise ArgumentError(
                f"pbt got interval={interval} > steps={steps}: the interval is how many env steps a "
                "member trains between two exploit/explore decisions; make it smaller than steps"
            )
        if parallel is None:
            parallel = population
        if not isinstance(parallel, int) or isinstance(parallel, bool) or not 1 <= parallel <= population:
            raise ArgumentError(
                f"pbt got parallel={parallel!r}: give the number of members that train at once, "
                f"1 to population ({population})"
            )
        if not isinstance(metric, str) or not metric:
            raise ArgumentError(f"pbt got metric={metric!r}: give a signal name such as 'eval_reward'")
        if direction not in ("maximize", "minimize"):
            raise ArgumentError(f"pbt got direction={direction!r}: use 'maximize' or 'minimize'")
        if not _is_number(quantile) or not 0 < quantile <= 0.5:
            raise ArgumentError(
                f"pbt got quantile={quantile!r}: the fraction of the population that is copied "
                "(and copied from) must be in (0, 0.5]"
            )
        if (
            not isinstance(perturb, tuple | list)
            or len(perturb) != 2
            or not all(_is_number(f) for f in perturb)
            or not all(f > 0 for f in perturb)
        ):
            raise ArgumentError(f"pbt got perturb={perturb!r}: give two positive factors (down, up), e.g. (0.8, 1.2)")
        if not _is_number(resample_p) or not 0 <= resample_p <= 1:
            raise ArgumentError(f"pbt got resample_p={resample_p!r}: a probability from 0 to 1")
        if backend not in ("local", "ray"):
            raise ArgumentError(
                f"pbt got backend={backend!r}: use 'local' (members' envs in this process) or 'ray' "
                "(each member's envs on Ray actors)"
            )
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ArgumentError(f"pbt got window={window!r}: the number of the metric's last points to average, >= 1")
        if ray_address is not None and backend != "ray":
            raise ArgumentError(f"pbt got ray_address={ray_address!r} with backend={backend!r}: pass backend='ray'")
        self.dims = _parse_space(space)
        self.space = dict(space)  # type: ignore[arg-type]
        self.make_agent = make_agent
        self.env = env
        self.population_size = population
        self.steps, self.interval, self.metric, self.direction = steps, interval, metric, direction
        self.quantile, self.resample_p = float(quantile), float(resample_p)
        self.perturb = (float(perturb[0]), float(perturb[1]))
        self.parallel, self.backend, self.seed = parallel, backend, int(seed)
        self.window = window if window is not None else (1 if metric == "eval_reward" else 10)
        self.eval_episodes, self.copy_memory = eval_episodes, bool(copy_memory)
        self.session_kwargs = dict(session_kwargs or {})
        for key in ("seed",):
            if key in self.session_kwargs:
                raise ArgumentError(f"pbt session_kwargs cannot set {key!r}: each member's seed is seed + its index")
        if backend == "ray":
            self.session_kwargs.setdefault("backend", "ray")
            self.session_kwargs.setdefault("num_workers", 1)
            if ray_address is not None:
                self.session_kwargs.setdefault("ray_address", ray_address)
        self.name = name or (
            os.path.basename(os.path.normpath(os.fspath(directory)))
            if directory is not None
            else f"pbt-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        self.directory = os.path.abspath(
            os.fspath(directory) if directory is not None else os.path.join("runs", "pbt", self.name)
        )
        self.events: list[PopulationEvent] = []
        """The exploits and explores so far, oldest first."""
        self._rng = np.random.default_rng(self.seed)
        self._lock = threading.RLock()
        # The lifecycle (workbench.run.control), as a session's: its hooks carry pause, resume and
        # stop to the members' sessions; the drivers read its pause and stop requests.
        self._control = RunControl(
            "population",
            loop_pauses=False,
            on_pause=self._pause_members,
            on_resume=self._resume_members,
            on_stop=self._stop_members,
        )
        self._slots = threading.Semaphore(parallel)
        self._time_offset = 0.0
        self._clock: float | None = None
        if os.path.exists(os.path.join(self.directory, _STATE_FILE)):
            self._members = self._reopen()
        else:
            if not callable(make_agent):
                raise ArgumentError(
                    f"pbt needs make_agent, a function that builds an agent from the searched "
                    f"values (or an agent class such as wb.PPO), got {make_agent!r}"
                )
            self._members = self._build()

    # -- building and reopening -----------------------------------------------------------------

    def _make(self, values: dict[str, Any]) -> Agent:
        if isinstance(self.make_agent, type) and issubclass(self.make_agent, Agent):
            return self.make_agent(self.env, **values)
        agent = self.make_agent(**values)  # type: ignore[misc]  # given (checked at construction) when building
        if not isinstance(agent, Agent):
            raise ArgumentError(
                f"pbt's make_agent must return an agent such as wb.PPO(...), got {type(agent).__name__}"
            )
        return agent

    def _session(self, agent: Agent, index: int) -> Session:
        kwargs = dict(self.session_kwargs)
        kwargs.setdefault("torch_threads", 1)
        return Session(agent, self.env, seed=self.seed + index, **kwargs)

    def _build(self) -> list[_Member]:
        if isinstance(self.make_agent, type) and issubclass(self.make_agent, Agent):
            _check_editable(self.make_agent, self.dims)  # before building anything
        members: list[_Member] = []
        for i in range(self.population_size):
            values = {name: dim.sample(self._rng) for name, dim in self.dims.items()}
            if i == 0:
                try:
                    agent = self._make(values)
                except TypeError:
                    self._check_without_values()  # a make_agent that fixes a searched name itself
                    raise
                _check_editable(type(agent), self.dims)
            else:
                agent = self._make(values)
            agent.total_timesteps = self.steps  # schedules count against the whole budget
            members.append(_Member(i, self._session(agent, i)))
        return members

    def _check_without_values(self) -> None:
        """When ``make_agent(**values)`` failed on a name it fixes itself (``net_arch=`` given twice), the
        agent it builds with no values (if it can) says which searched names are not live-editable."""
        try:
            agent = self.make_agent()  # type: ignore[misc]
        except Exception:
            return
        if isinstance(agent, Agent):
            _check_editable(type(agent), self.dims)

    def _settings(self) -> dict[str, Any]:
        return {
            "population": self.population_size,
            "space": {n: d.describe() for n, d in self.dims.items()},
            "steps": self.steps,
            "interval": self.interval,
            "metric": self.metric,
            "direction": self.direction,
            "quantile": self.quantile,
            "perturb": list(self.perturb),
            "resample_p": self.resample_p,
            "seed": self.seed,
            "window": self.window,
            "eval_episodes": self.eval_episodes,
            "copy_memory": self.copy_memory,
            "env": self.env if isinstance(self.env, str) else None,
        }

    def _reopen(self) -> list[_Member]:
        path = os.path.join(self.directory, _STATE_FILE)
        saved = _read_state(path)
        mine, theirs = self._settings(), saved.get("settings", {})
        differ = [k for k in ("population", "space", "metric", "direction") if mine[k] != json_ready(theirs.get(k))]
        if differ:
            raise ArgumentError(
                f"the population in {self.directory} was run with other settings ({', '.join(differ)} differ): pass "
                "the same ones to resume it (or wb.Population.open(directory)), or another directory for a new one"
            )
        if self.env is None:
            self.env = theirs.get("env")
        members = []
        for data in saved.get("members", []):
            index = int(data["index"])
            mpath = self._member_dir(index)
            kwargs = dict(self.session_kwargs)
            kwargs.setdefault("torch_threads", 1)
            if os.path.exists(mpath):
                session = Session.reopen(mpath, self.env, seed=self.seed + index, **kwargs)
            else:  # stopped before its first checkpoint: a fresh member
                if self.make_agent is None:
                    raise CheckpointError(f"{mpath}: member {index} has no checkpoint; pass make_agent to rebuild it")
                values = {name: dim.sample(self._rng) for name, dim in self.dims.items()}
                agent = self._make(values)
                agent.total_timesteps = self.steps
                session = self._session(agent, index)
            m = _Member(index, session)
            m.scores = [(int(s), float(v)) for s, v in data.get("scores", [])]
            m.parents = [(int(s), int(src)) for s, src in data.get("parents", [])]
            m.retired, m.failed = bool(data.get("retired")), bool(data.get("failed"))
            m.error = str(data.get("error", ""))
            members.append(m)
        self.events = [PopulationEvent.from_dict(e) for e in saved.get("events", [])]
        self._time_offset = float(saved.get("elapsed", 0.0))
        rng_state = saved.get("rng")
        if rng_state:
            try:
                self._rng.bit_generator.state = rng_state
            except (TypeError, ValueError, KeyError) as exc:
                raise CheckpointError(
                    f"{path}: field 'rng' is not a {type(self._rng.bit_generator).__name__} state ({exc})"
                ) from None
        return members

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        env: Any = None,
        make_agent: Callable[..., Any] | None = None,
        **overrides: Any,
    ) -> Population:
        """Reopen a population saved in ``directory`` (not started: call :meth:`start` to go on).

        ``env`` is needed when the population trained on an env factory rather than a registered id;
        ``make_agent`` only when a member was stopped before its first checkpoint. ``overrides`` are
        :func:`pbt`'s other settings (``parallel``, ``session_kwargs``...); the saved ones by default."""
        path = os.path.join(os.fspath(directory), _STATE_FILE)
        settings = dict(_read_state(path, opening=True)["settings"])
        space: dict[str, Any] = {}
        for name, d in settings.get("space", {}).items():
            if "choices" in d:
                space[name] = [tuple(c) if isinstance(c, list) else c for c in d["choices"]]
            else:
                cast = int if d["kind"] == "int" else float
                space[name] = (cast(d["low"]), cast(d["high"]))
        kwargs: dict[str, Any] = {
            "population": settings.get("population"),
            "space": space,
            "steps": settings.get("steps"),
            "interval": settings.get("interval"),
            "metric": settings.get("metric"),
            "direction": settings.get("direction", "maximize"),
            "quantile": settings.get("quantile"),
            "perturb": tuple(settings.get("perturb", (0.8, 1.2))),
            "resample_p": settings.get("resample_p"),
            "seed": settings.get("seed", 0),
            "window": settings.get("window"),
            "eval_episodes": settings.get("eval_episodes", 5),
            "copy_memory": settings.get("copy_memory", False),
        }
        saved = dict(kwargs)
        kwargs.update(overrides)
        try:
            return cls(make_agent, env if env is not None else settings.get("env"), directory=directory, **kwargs)
        except ArgumentError as exc:
            if set(overrides) & set(saved):
                raise  # one of the caller's own settings may be what was refused
            raise CheckpointError(f"{path}: its settings do not make a population: {exc}") from None

    # -- state ----------------------------------------------------------------------------------

    @property
    def members(self) -> list[Session]:
        """The members, each a :class:`~workbench.Session` (pause, edit, save or play any of them)."""
        return [m.session for m in self._members]

    @property
    def elapsed(self) -> float:
        """Seconds of training so far (continues across reopening)."""
        return self._time_offset + (0.0 if self._clock is None else time.perf_counter() - self._clock)

    @property
    def scores(self) -> list[float | None]:
        """Each member's latest score (None before its first boundary)."""
        return [m.score for m in self._members]

    def curves(self) -> list[list[tuple[int, float]]]:
        """Each member's scores so far, as ``(env step, score)`` points."""
        return [list(m.scores) for m in self._members]

    def lineage(self) -> list[list[tuple[int, int]]]:
        """Each member's exploits, as ``(env step, member it copied)`` points, oldest first."""
        return [list(m.parents) for m in self._members]

    def values(self) -> list[dict[str, Any]]:
        """Each member's current values of the searched hyperparameters (read from its agent)."""
        return [{name: getattr(m.session.agent.config, name) for name in self.dims} for m in self._members]

    def member_status(self, index: int) -> str:
        """A member's state as the population sees it: its session's status, or ``retired``
        (stopped by hand) / ``failed``, or ``waiting`` (between intervals, or for a free slot)."""
        m = self._members[index]
        if m.failed:
            return "failed"
        if m.retired:
            return "retired"
        status = m.session.status
        if status in ACTIVE:
            return status
        if m.user_paused:
            return "paused"
        if m.session.steps >= self.steps:
            return "finished"
        return "waiting" if self.is_alive else status

    def _better(self, a: float, b: float) -> bool:
        return a > b if self.direction == "maximize" else a < b

    @property
    def best_index(self) -> int | None:
        """The index of the member with the best latest score (None before any score)."""
        best = None
        for m in self._members:
            if m.score is None or m.failed or math.isnan(m.score):
                continue
            if best is None or self._better(m.score, self._members[best].score):  # type: ignore[arg-type]
                best = m.index
        return best

    @property
    def best(self) -> Session | None:
        """The member (its Session) with the best latest score; None before any member was scored."""
        index = self.best_index
        return None if index is None else self._members[index].session

    @property
    def best_score(self) -> float | None:
        """The best latest score of any member (None before any)."""
        index = self.best_index
        return None if index is None else self._members[index].score

    def table(self) -> Any:
        """The members as a pandas DataFrame: status, steps, latest score, current values, exploits."""
        import pandas as pd

        rows = []
        for m, values in zip(self._members, self.values(), strict=True):
            rows.append(
                {
                    "member": m.index,
                    "status": self.member_status(m.index),
                    "steps": m.session.steps,
                    self.metric: m.score,
                    **{k: _shown(v) for k, v in values.items()},
                    "exploits": len(m.parents),
                    "copied_from": m.parents[-1][1] if m.parents else None,
                    "note": m.error,
                }
            )
        columns = ["member", "status", "steps", self.metric, *self.dims, "exploits", "copied_from", "note"]
        return pd.DataFrame(rows, columns=columns).set_index("member")

    def __repr__(self) -> str:
        best = self.best_index
        best_text = "" if best is None else f", best {self.metric}={self._members[best].score:.4g} (member {best})"
        steps = sum(m.session.steps for m in self._members)
        return (
            f"<Population {self.name!r}: {self.status}, {len(self._members)} members, "
            f"{steps}/{self.steps * len(self._members)} steps, {len(self.events)} events{best_text}>"
        )

    # -- commands -------------------------------------------------------------------------------

    def start(self) -> Population:
        """Train the members in the background and return at once; starting again after a stop goes on.

        Raises ``RuntimeError`` when the population is already running or paused."""

        def launch(thread: threading.Thread) -> None:
            self._clock = time.perf_counter()
            start_thread(self, thread)

        self._control.start(self._supervise, name="workbench-pbt", launch=launch)
        return self

    def run(self) -> Population:
        """Start and block until every member has trained ``steps`` (re-raises an error). Ctrl-C
        stops it cleanly (as :meth:`wait` says), then reaches the caller."""
        if self.status not in ACTIVE:
            self.start()
        self.wait()
        return self

    def pause(self) -> None:
        """Pause every member (their sessions pause) until :meth:`resume`."""
        self._control.pause()

    def resume(self) -> None:
        """Continue after :meth:`pause` (members paused one by one stay paused)."""
        self._control.resume()

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop every member; each is saved to the population's directory, and :meth:`start` goes on."""
        self._control.stop(timeout)

    # The lifecycle's hooks, called under its lock as a command takes effect: a driver that starts a
    # member's interval after the pause request pauses it itself (see _drive).
    def _pause_members(self) -> None:
        with self._lock:
            sessions = [m.session for m in self._members]
        for s in sessions:
            s.pause()

    def _resume_members(self) -> None:
        with self._lock:
            sessions = [m.session for m in self._members if not m.user_paused]
        for s in sessions:
            s.resume()

    def _stop_members(self) -> None:
        for m in self._members:
            m.session.stop()

    def pause_member(self, index: int) -> None:
        """Pause one member (it holds its slot); the others go on."""
        m = self._member(index)
        m.user_paused = True
        m.session.pause()

    def resume_member(self, index: int) -> None:
        """Let a member paused by :meth:`pause_member` (or its session's pause) go on."""
        m = self._member(index)
        m.user_paused = False
        if not self._control.pause_requested:
            m.session.resume()

    def stop_member(self, index: int) -> None:
        """Stop one member for good: it trains no more, and is no longer copied from or into."""
        m = self._member(index)
        m.retired = True
        m.user_paused = False
        m.session.stop()
        if not self.is_alive:
            self._write_state()

    def _member(self, index: int) -> _Member:
        if not isinstance(index, int) or not 0 <= index < len(self._members):
            raise ArgumentError(f"no member {index!r}: members are numbered 0 to {len(self._members) - 1}")
        return self._members[index]

    def dashboard(self) -> Any:
        """The live notebook view of this population (an ipywidgets widget)."""
        return views.view("population", self)

    def _ipython_display_(self) -> None:
        views.display(self)  # as a session does: one live view (one refresh timer) however often it is shown

    # -- the drivers ----------------------------------------------------------------------------

    def _start_ray(self) -> bool:
        """Start Ray for the whole population (True when this call started it). Left to the members'
        runners, the first run to end would shut down the Ray the others still step their envs on."""
        import ray

        from ..parallel.ray_start import start_ray

        kw = self.session_kwargs
        workers = self.parallel * int(kw.get("num_workers", 1))
        return start_ray(ray, workers, float(kw.get("cpus_per_worker", 1.0)), kw.get("ray_address"), kw.get("ray_init"))

    def _supervise(self) -> str:
        """The population's thread (run by its lifecycle): a driver per member, then the final status.
        The population's state is written last, whatever happened (the run's own error matters more
        than one writing it)."""
        owns_ray = False
        failure: BaseException | None = None
        try:
            if self.backend == "ray":
                owns_ray = self._start_ray()
            os.makedirs(self.directory, exist_ok=True)
            with self._lock:
                for m in self._members:  # every member on disk from the start: a stop at once still resumes
                    if not os.path.exists(self._member_dir(m.index)):
                        self._checkpoint(m)
                self._write_state()
            threads = []
            for m in self._members:
                if m.retired or m.failed or m.session.steps >= self.steps:
                    continue
                m.thread = threading.Thread(target=self._drive, args=(m,), name=f"workbench-pbt-{m.index}", daemon=True)
                m.thread.start()
                threads.append(m.thread)
            for t in threads:
                t.join()
            failed = [m for m in self._members if m.failed]
            if failed and len(failed) == len(self._members):
                raise RuntimeError(f"every member of population {self.name!r} failed; the first: {failed[0].error}")
            return "stopped" if self._control.stop_requested else "finished"
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if owns_ray:
                import ray

                ray.shutdown()
            self._time_offset = self.elapsed
            self._clock = None
            try:
                self._write_state()
            except Exception:
                if failure is None:
                    raise

    def _drive(self, m: _Member) -> None:
        """One member's driver: train an interval, score, checkpoint, exploit/explore; again."""
        session = m.session
        control = self._control
        while not control.stop_requested and not m.retired:
            if control.pause_requested or m.user_paused:
                time.sleep(_POLL_S)
                continue
            left = self.steps - session.steps
            if left <= 0:
                break
            with self._slots:
                if control.stop_requested or m.retired:
                    break
                try:
                    with self._lock, warnings.catch_warnings():
                        # A pause is requested before its hook takes this lock to pause the members: a
                        # session started here is paused by one or the other. The members train side by
                        # side by design: not worth the "other sessions" warning.
                        warnings.filterwarnings("ignore", message=_SIDE_BY_SIDE, category=RuntimeWarning)
                        session.start(min(self.interval, left))
                        if control.pause_requested or m.user_paused:
                            session.pause()
                    session.wait()
                except Exception as exc:
                    m.failed, m.error = True, f"{type(exc).__name__}: {exc}"
                    break
                ended_as = session.status
                if ended_as == "finished" and not m.retired:
                    try:
                        score = self._score(session)
                    except Exception as exc:
                        m.failed, m.error = True, f"{type(exc).__name__}: {exc}"
                        break
                else:
                    score = None
            with self._lock:
                self._checkpoint(m)
                if score is not None:
                    m.scores.append((session.steps, score))
                    if session.steps < self.steps and not control.stop_requested:
                        self._exploit_and_explore(m)
                self._write_state()
            if ended_as == "stopped" and not control.stop_requested:
                m.retired = True  # its session was stopped by hand
        if m.failed:
            with self._lock:
                self._write_state()

    def _score(self, session: Session) -> float | None:
        if self.metric == "eval_reward":
            return float(session.evaluate(self.eval_episodes))
        signal = session.signals.get(self.metric)
        if signal is None or len(signal) == 0:
            if self.metric in ("loss", "episode_reward") or session.steps < self.steps:
                return None  # none yet: not ranked this time
            known = ", ".join(session.signals.names()) or "none"
            raise ValueError(
                f"the member never recorded the metric {self.metric!r} (recorded: {known}); "
                "pick one of those, or metric='eval_reward'"
            )
        return float(signal.mean(last=self.window))

    def _member_dir(self, index: int) -> str:
        return os.path.join(self.directory, f"member-{index}")

    def _checkpoint(self, m: _Member) -> None:
        m.session.save(
            self._member_dir(m.index), memory=self.copy_memory and _has_memory(m.session.agent), overwrite=True
        )

    # -- exploit and explore ----------------------------------------------------------------------

    def _ranked(self) -> list[_Member]:
        alive = [
            m
            for m in self._members
            if m.score is not None and not m.failed and not m.retired and not math.isnan(m.score)
        ]
        return sorted(alive, key=lambda m: (m.score, -m.index), reverse=self.direction == "maximize")

    def _exploit_and_explore(self, m: _Member) -> None:
        ranked = self._ranked()
        active = [x for x in self._members if not x.failed and not x.retired]
        if len(ranked) < 2 or m not in ranked or len(ranked) < len(active):
            return  # rank only once every member has been scored: a partial ranking would copy a poor one
        k = max(1, int(len(ranked) * self.quantile))
        if m not in ranked[-k:]:
            return
        # Only a strictly better member is worth copying: among tied scores (a task where every member
        # still scores the minimum) a copy would throw a member's progress away on the index order.
        top = [d for d in ranked[:k] if d is not m and self._better(d.score, m.score)]  # type: ignore[arg-type]
        if not top:
            return
        donor = top[int(self._rng.integers(len(top)))]
        self.exploit(m.index, donor.index)

    def exploit(self, member: int, source: int) -> dict[str, Any]:
        """Copy member ``source``'s last checkpoint into member ``member`` and explore from there;
        returns the new values. What the population does to a bottom member at its boundary; call it
        by hand on a member that is not training (paused by :meth:`pause_member`, or idle)."""
        m, donor = self._member(member), self._member(source)
        if m is donor:
            raise ArgumentError(f"exploit: member {member} cannot copy itself")
        if m.session.status == "running":
            raise RuntimeError(f"member {member} is training: pause_member({member}) first, then exploit it")
        with self._lock:
            path = self._member_dir(donor.index)
            if not os.path.exists(path):
                self._checkpoint(donor)
            before = {name: getattr(m.session.agent.config, name) for name in self.dims}
            donor_values = load_state(
                m.session.agent, path, memory=self.copy_memory, names=list(self.dims), dims=self.dims
            )
            step, now = m.session.steps, self.elapsed
            m.parents.append((step, donor.index))
            self.events.append(
                PopulationEvent(
                    "exploit", m.index, step, now, source=donor.index, score=m.score, source_score=donor.score
                )
            )
            new = self._explore(donor_values)
            applied = _apply(m.session, new, donor_values)
            changes = {n: [json_ready(before[n]), json_ready(applied[n])] for n in self.dims}
            self.events.append(PopulationEvent("explore", m.index, step, now, changes=changes))
            return applied

    def _explore(self, values: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, dim in self.dims.items():
            if self._rng.random() < self.resample_p:
                out[name] = dim.sample(self._rng)
            else:
                out[name] = dim.perturb(values[name], self.perturb, self._rng)
        return out

    # -- persistence ----------------------------------------------------------------------------

    def _write_state(self) -> None:
        with self._lock:
            data = {
                "format": _FORMAT,
                "name": self.name,
                "settings": self._settings(),
                "members": [
                    m.state() | {"steps": m.session.steps, "values": json_ready(v)}
                    for m, v in zip(self._members, self.values(), strict=True)
                ],
                "events": [e.to_dict() for e in self.events],
                "elapsed": self.elapsed,
                "rng": json_ready(self._rng.bit_generator.state),
            }
            path = os.path.join(self.directory, _STATE_FILE)
            text = json.dumps(data, indent=1, allow_nan=False)
            write_text(path, text, owner="the population", kind="a population file it wrote", ours=_is_our_state)


def _is_our_state(path: str) -> bool:
    """Whether ``path`` holds a population's state as :meth:`Population._write_state` writes it."""
    try:
        if os.path.getsize(path) > MAX_META_BYTES:
            return False
        data = read_json(path, path, MAX_META_BYTES)
    except (OSError, ValueError):  # CheckpointError is a ValueError
        return False
    return isinstance(data, dict) and data.get("format") == _FORMAT


# -- population.json read back: every field checked, named in the error ------------------------------

_SETTING_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {
    # field: (the JSON types it may have, whether it must be there)
    "population": ((int,), True),
    "steps": ((int,), True),
    "interval": ((int,), True),
    "metric": ((str,), True),
    "direction": ((str,), False),
    "quantile": ((int, float), False),
    "perturb": ((list,), False),
    "resample_p": ((int, float), False),
    "seed": ((int,), False),
    "window": ((int, type(None)), False),
    "eval_episodes": ((int,), False),
    "copy_memory": ((bool,), False),
    "env": ((str, type(None)), False),
}


def _bad(path: str, field: str, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: field {field!r} {what}; the file is damaged or not a population's state")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_space_field(path: str, space: Any) -> None:
    if not isinstance(space, dict) or not space:
        raise _bad(path, "settings.space", f"is {space!r}, not a non-empty object of hyperparameter name to range")
    for name, d in space.items():
        field = f"settings.space.{name}"
        if not isinstance(d, dict):
            raise _bad(path, field, f"is {d!r}, not an object")
        if "choices" in d:
            if not isinstance(d["choices"], list) or not d["choices"]:
                raise _bad(path, f"{field}.choices", f"is {d['choices']!r}, not a non-empty list")
            continue
        if d.get("kind") not in ("int", "float"):
            raise _bad(path, f"{field}.kind", f"is {d.get('kind')!r}, not 'int' or 'float'")
        for end in ("low", "high"):
            value: Any = d.get(end)
            if not _is_number(value) or not math.isfinite(value) or (d["kind"] == "int" and not _is_int(value)):
                raise _bad(path, f"{field}.{end}", f"is {value!r}, not a finite {d['kind']}")


def _check_members_field(path: str, members: Any, population: int) -> None:
    if not isinstance(members, list):
        raise _bad(path, "members", f"is {type(members).__name__}, not a list")
    seen: set[int] = set()
    for i, data in enumerate(members):
        field = f"members[{i}]"
        if not isinstance(data, dict):
            raise _bad(path, field, f"is {data!r}, not an object")
        index: Any = data.get("index")
        # The index names the member's folder (member-<index>): only an integer of this population may.
        if not _is_int(index) or not 0 <= index < population or index in seen:
            raise _bad(path, f"{field}.index", f"is {index!r}, not a member index from 0 to {population - 1} used once")
        seen.add(index)
        for key, width in (("scores", 2), ("parents", 2)):
            pairs = data.get(key, [])
            ok = isinstance(pairs, list) and all(
                isinstance(p, list) and len(p) == width and all(_is_number(x) and math.isfinite(x) for x in p)
                for p in pairs
            )
            if not ok:
                raise _bad(path, f"{field}.{key}", f"is {pairs!r}, not a list of [step, value] pairs")
        for key, kind in (("retired", bool), ("failed", bool), ("error", str)):
            if key in data and not isinstance(data[key], kind):
                raise _bad(path, f"{field}.{key}", f"is {data[key]!r}, not a {kind.__name__}")


def _read_state(path: str, *, opening: bool = False) -> dict[str, Any]:
    """``population.json`` at ``path``, read and checked field by field: a :class:`CheckpointError` names the
    file and the field for anything a population could not be rebuilt from (``opening``: no file is an error
    that says there is no population there)."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = "no population state to open there" if opening else "cannot read the population's state"
        raise CheckpointError(f"{path}: {where} ({exc})") from None
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        raise CheckpointError(f"{path}: not a population state of format {_FORMAT}")
    settings = saved.get("settings")
    if not isinstance(settings, dict):
        raise _bad(path, "settings", f"is {settings!r}, not an object")
    for key, (kinds, required) in _SETTING_TYPES.items():
        if key not in settings:
            if required:
                raise _bad(path, f"settings.{key}", "is missing")
            continue
        value = settings[key]
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise _bad(path, f"settings.{key}", f"is {value!r}, of the wrong type")
    _check_space_field(path, settings.get("space"))
    if not 1 <= settings["population"] <= 100_000:
        raise _bad(path, "settings.population", f"is {settings['population']!r}, not a population size")
    _check_members_field(path, saved.get("members", []), settings["population"])
    events = saved.get("events", [])
    if not isinstance(events, list):
        raise _bad(path, "events", f"is {type(events).__name__}, not a list")
    for i, event in enumerate(events):
        try:
            PopulationEvent.from_dict(event)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise _bad(path, f"events[{i}]", f"is not an event ({type(exc).__name__}: {exc})") from None
    elapsed = saved.get("elapsed", 0.0)
    if not _is_number(elapsed) or not math.isfinite(elapsed):
        raise _bad(path, "elapsed", f"is {elapsed!r}, not a number of seconds")
    if saved.get("rng") is not None and not isinstance(saved["rng"], dict):
        raise _bad(path, "rng", f"is {saved['rng']!r}, not a generator state")
    return saved


def _shown(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool) or value is None else repr(value)


def _has_memory(agent: Agent) -> bool:
    return agent.memory is not None


def load_state(
    agent: Agent,
    path: str | os.PathLike[str],
    *,
    memory: bool = False,
    names: list[str] | None = None,
    dims: Mapping[str, _Dim] | None = None,
) -> dict[str, Any]:
    """Load a saved run's learned state into a live ``agent`` in place, through the checkpoint
    format (safetensors and JSON, never pickle): its networks' weights, the optimizers' moments
    and settings, the normalizers' statistics and, with ``memory=True``, the replay memory. The
    agent keeps its own step counters and random generators. Returns the saved values of the
    hyperparameters ``names`` (as the saved config holds them). The agent must not be training."""
    with open_saved(path) as run:
        meta = run.meta
        tensors = {k: v for k, v in run.tensors().items() if k != "rng/torch"}
        if str(meta.get("algorithm", "")).lower() != agent.algorithm.lower():
            raise CheckpointError(f"{path}: holds a {meta.get('algorithm')} agent, not {agent.algorithm}")
        own = agent.state().data
        data = {**meta, "counters": own["counters"], "rng": own["rng"], "agent_state": own["agent_state"]}
        try:
            agent.restore(AgentState(tensors, data))
        except (KeyError, RuntimeError, ValueError) as exc:
            raise CheckpointError(f"{path}: {exc}; it does not fit this {agent.algorithm} agent") from None
        replay = agent.memory
        if memory and replay is not None:
            arrays = run.memory(replay.file_budget())
            if arrays is not None:
                replay.load_arrays(arrays, str(path), action_space=agent.action_space)
    hyper = meta.get("hyperparameters", {})
    out = {}
    for name in names or []:
        value = hyper.get(name, getattr(agent.config, name))
        out[name] = dims[name].from_saved(value) if dims and name in dims else value
    return out


def _apply(session: Session, values: dict[str, Any], fallback: dict[str, Any]) -> dict[str, Any]:
    """``session.set(**values)``; a value the agent refuses (a constraint narrower than the space)
    falls back to ``fallback``'s (the donor's) for that name."""
    try:
        session.set(**values)
        return dict(values)
    except ValueError:
        applied = {}
        for name, value in values.items():
            try:
                session.set(**{name: value})
                applied[name] = value
            except ValueError:
                session.set(**{name: fallback[name]})
                applied[name] = fallback[name]
        return applied


def pbt(
    make_agent: Callable[..., Any],
    env: Any,
    population: int = 8,
    space: Mapping[str, Any] | None = None,
    *,
    start: bool = True,
    **options: Any,
) -> Population:
    """Population-based training: ``population`` live sessions that copy the best and perturb.

    Returns the live :class:`Population`, already started (``start=False`` to start it yourself):
    ``population.wait()``, ``.stop()``, ``.pause()``, ``.best`` (the best member's Session),
    ``.members`` (each a Session), ``.events`` (exploits and explores), ``.table()``; in a notebook it
    shows its dashboard. Arguments are checked here, before anything trains.

    The keyword arguments other than ``start`` are :class:`Population`'s, with its defaults.

    Parameters:
        make_agent: builds an agent from keyword arguments named as in ``space``, or an agent class.
        env: the env id or zero-argument factory every member's Session trains on.
        population: how many members (at least 2).
        space: the search space (see :class:`Population`).
        start: start the population before returning it.
        **options: :class:`Population`'s other keyword arguments (``steps``, ``interval``, ``metric``,
            ``backend``, ``directory``...), documented there.
    """
    p = Population(make_agent, env, population=population, space=space, **options)
    return p.start() if start else p
