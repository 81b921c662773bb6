"""A person plays an env at the keyboard; every episode is recorded as a :class:`~workbench.Dataset`.

``wb.HumanPlay(env)`` in a notebook shows the env's frames (as the play viewer does) in a box that
takes the keyboard once clicked; the keys held map to an action (:func:`default_mapping`: arrows for
classic control, arrows, space and their combinations for Atari and MinAtar games; ``mapping=``
otherwise), the env steps ``fps`` times a second, and each finished episode joins
:attr:`HumanPlay.dataset`, ready for ``wb.BC(dataset=...)`` or to pre-fill a replay agent
(``wb.Session(wb.DQN(env), env, dataset=...)``). ``workbench play --human ENV`` does the same in a
pygame window. The same object is driven from code (:meth:`HumanPlay.press`, :meth:`HumanPlay.step`),
which is how the tests inject keys.

With ``default=None`` (an env with no "do nothing" action, such as CartPole) the env waits for a key:
it steps while one is held, and a tap shorter than a step still counts once.

A window needs a display: ``workbench play --human`` without one (no ``DISPLAY`` or
``WAYLAND_DISPLAY``) stops at once saying so, instead of waiting for keys no window can take. With
``SDL_VIDEODRIVER=dummy`` set on purpose (off-screen, as the tests play) an env that waits for a key
is refused the same way, since nothing could ever press one.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .envs.actions import env_action_converter
from .envs.core import as_env_source, is_atari_id, is_minatar_id
from .offline.datasets import Dataset
from .video import render_env

if TYPE_CHECKING:
    from gymnasium import spaces

    from .agents.contract import Agent
    from .selfplay import SelfPlay

__all__ = ["BoardPlay", "HumanPlay", "KeyMap", "default_mapping", "normalize_key", "play_in_window"]

# Key names a mapping may use: what the page's keyboard events (KeyboardEvent.key) and pygame's key
# names become under normalize_key, beside any one character ("a", "1", "+").
_KEY_NAMES = frozenset(
    {"left", "right", "up", "down", "space", "enter", "tab", "escape", "backspace", "delete", "insert"}
    | {"home", "end", "pageup", "pagedown", "shift", "control", "alt", "meta"}
    | {f"f{i}" for i in range(1, 13)}
)
_ALIASES = {
    " ": "space",
    "spacebar": "space",
    "arrowleft": "left",
    "arrowright": "right",
    "arrowup": "up",
    "arrowdown": "down",
    "return": "enter",
    "ctrl": "control",
    "esc": "escape",
    "page up": "pageup",
    "page down": "pagedown",
}

# Atari's and MinAtar's action names, built from these parts (gymnasium's play utility does the same).
_PARTS = (("up", "UP"), ("down", "DOWN"), ("right", "RIGHT"), ("left", "LEFT"), ("space", "FIRE"))
_MINATAR_NAMES = ("NOOP", "LEFT", "UP", "RIGHT", "DOWN", "FIRE")  # minatar's full action set, in order

_CLASSIC: dict[str, tuple[dict[Any, Any], Any]] = {
    "CartPole": ({"left": 0, "right": 1}, None),
    "MountainCar": ({"left": 0, "right": 2}, 1),
    "Acrobot": ({"left": 0, "right": 2}, 1),
    "Pendulum": ({"left": [-2.0], "right": [2.0]}, [0.0]),
    "MountainCarContinuous": ({"left": [-1.0], "right": [1.0]}, [0.0]),
    "LunarLander": ({"left": 1, "up": 2, "right": 3}, 0),
}


def normalize_key(key: str) -> str:
    """A key's name as the mappings spell it: ``"ArrowLeft"`` -> ``"left"``, ``" "`` -> ``"space"``,
    ``"A"`` -> ``"a"``."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a key is a non-empty string such as 'left', 'space' or 'a', got {key!r}")
    low = key.lower()
    return _ALIASES.get(low, low) if key != " " else "space"


@dataclasses.dataclass(frozen=True)
class KeyMap:
    """Keys to actions: ``combos`` maps a frozenset of keys to an action; ``default`` is the action
    when no mapped key is held (None: wait for a key)."""

    combos: dict[frozenset[str], Any]
    default: Any

    def action(self, held: set[str] | frozenset[str], recent: str | None = None) -> Any:
        """The action for the keys ``held``: the largest mapped combination they contain (ties: the
        one with the key pressed last), else ``default``."""
        best, best_key = None, (-1, False)
        for combo, action in self.combos.items():
            if combo <= held:
                rank = (len(combo), recent in combo)
                if rank > best_key:
                    best, best_key = action, rank
        return self.default if best is None else best

    def describe(self) -> str:
        """The keys, in words (shown beside the frames)."""
        parts = [f"{'+'.join(sorted(c))}: {a}" for c, a in self.combos.items()]
        tail = "no key: wait" if self.default is None else f"no key: {self.default}"
        return ", ".join([*parts, tail])


def _from_names(names: list[str]) -> KeyMap:
    """A key map for an action list named as Atari's (``NOOP``, ``FIRE``, ``UPLEFT``, ``DOWNRIGHTFIRE``...)."""
    combos: dict[frozenset[str], Any] = {}
    for index, name in enumerate(names):
        keys, rest = set(), name
        for key, part in _PARTS:
            if part in rest:
                keys.add(key)
                rest = rest.replace(part, "", 1)
        if keys and not rest:
            combos.setdefault(frozenset(keys), index)
    default = names.index("NOOP") if "NOOP" in names else None
    return KeyMap(combos, default)


def default_mapping(env: Any) -> KeyMap:
    """The keys of a known env: classic control (CartPole, MountainCar, Acrobot, Pendulum,
    MountainCarContinuous; LunarLander), Atari games (arrows, space for FIRE, combinations for
    diagonals) and MinAtar games. Raises ``ValueError`` asking for ``mapping=`` otherwise."""
    unwrapped = env.unwrapped
    meanings = getattr(unwrapped, "get_action_meanings", None)
    if callable(meanings):
        return _from_names(list(meanings()))
    action_set = getattr(unwrapped, "action_set", None)
    if action_set is not None and type(unwrapped).__module__.startswith("minatar"):
        return _from_names([_MINATAR_NAMES[int(a)] for a in action_set])
    spec_id = getattr(getattr(env, "spec", None), "id", "") or ""
    name = spec_id.split("/")[-1].split("-v")[0]
    if name in _CLASSIC:
        mapping, default = _CLASSIC[name]
        return key_map(mapping, default)
    raise ValueError(
        f"HumanPlay has no default keys for {spec_id or type(unwrapped).__name__}: pass mapping= (a dict of key "
        "to action, e.g. {'left': 0, 'right': 1, ('up', 'space'): 3}) and default= (the action with no key, "
        "or None to wait for one)"
    )


def key_map(mapping: Mapping[Any, Any], default: Any) -> KeyMap:
    """A :class:`KeyMap` from ``{key or tuple of keys: action}``."""
    if not isinstance(mapping, Mapping) or not mapping:
        raise ValueError(f"mapping must be a non-empty dict of key (or tuple of keys) to action, got {mapping!r}")
    combos: dict[frozenset[str], Any] = {}
    for keys, action in mapping.items():
        names = (keys,) if isinstance(keys, str) else tuple(keys)
        if not names:
            raise ValueError(f"mapping has an empty tuple of keys for the action {action!r}: name at least one key")
        combo = frozenset(normalize_key(k) for k in names)
        unknown = sorted(k for k in combo if len(k) != 1 and k not in _KEY_NAMES)
        if unknown:
            raise ValueError(
                f"mapping names the key {unknown[0]!r}, which no keyboard sends: use one character ('a', '1') or "
                f"one of {', '.join(sorted(_KEY_NAMES - {f'f{i}' for i in range(2, 13)}))}, f2..f12"
            )
        combos[combo] = action
    return KeyMap(combos, default)


_MISSING = object()


def _recorded(obs: Any) -> np.ndarray:
    """An observation as a recorded row: a masked env's Dict (``SelfPlay.versus``) gives its observation, the mask
    left out, as a recorded session stores it."""
    if isinstance(obs, dict) and "action_mask" in obs and "observation" in obs:
        return np.asarray(obs["observation"], dtype=np.float32)
    return np.asarray(obs)


class HumanPlay:
    """A person plays ``env`` at the keyboard; the episodes are recorded in :attr:`dataset`.

    Example::

        play = wb.HumanPlay("CartPole-v1")     # in a notebook: click the frame, then use the arrows
        play                                   # shows it (and starts the clock)
        play.dataset                           # a wb.Dataset of the finished episodes
        agent = wb.BC(dataset=play.dataset); wb.Session(agent, dataset=play.dataset).run(steps=2000)

    Parameters:
        env: a registered id (made with ``render_mode="rgb_array"``, with the image preprocessing
            agents train on for Atari and MinAtar ids), a factory, or an env instance that renders
            ``rgb_array`` frames.
        mapping: ``{key or tuple of keys: action}`` (key names as :func:`normalize_key` gives them:
            ``"left"``, ``"space"``, ``"a"``); default: :func:`default_mapping` for the env.
        default: the action when no mapped key is held; None waits for a key. Default: the
            mapping's own (NOOP for games, e.g. no push for MountainCar; waiting for CartPole).
        fps: env steps per second while playing in the notebook or window (default 15; 10 for
            Atari and MinAtar games, whose every step is several frames or a whole move).
        seed: seeds the first episode's reset (``seed + i`` for episode ``i``).
        episodes: stop the clock after this many episodes (None: play on).
        max_steps: cut an episode after this many steps (recorded as truncated).
    """

    def __new__(cls, env: Any = None, *args: Any, **kwargs: Any) -> HumanPlay:
        # A self-play board game (wb.SelfPlay) is played by clicks against the agent: a BoardPlay.
        if cls is HumanPlay and _is_selfplay(env):
            return super().__new__(BoardPlay)
        return super().__new__(cls)

    def __init__(
        self,
        env: Any,
        mapping: Mapping[Any, Any] | None = None,
        *,
        default: Any = _MISSING,
        fps: float | None = None,
        seed: int | None = None,
        episodes: int | None = None,
        max_steps: int | None = None,
    ) -> None:
        source = as_env_source(env)
        self.env, self._owned = render_env(source, "HumanPlay")
        self.env_name = source.name
        keys = default_mapping(self.env) if mapping is None else key_map(mapping, None)
        if default is not _MISSING:
            keys = KeyMap(keys.combos, default)
        elif mapping is not None:
            keys = KeyMap(keys.combos, None)
        self.keys = keys
        if fps is None:
            fps = 15.0 if source.env_id and not (is_atari_id(source.env_id) or is_minatar_id(source.env_id)) else 10.0
        if not 0.5 <= float(fps) <= 120:
            raise ValueError(f"HumanPlay fps must be between 0.5 and 120 env steps a second, got {fps!r}")
        for name, value in (("episodes", episodes), ("max_steps", max_steps), ("seed", seed)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"HumanPlay {name} must be None or an integer >= 0, got {value!r}")
        self.fps = float(fps)
        self.seed, self.max_episodes, self.max_steps = seed, episodes, max_steps
        self._convert = env_action_converter(self.env.action_space)
        self._lock = threading.RLock()
        self.held: set[str] = set()
        """The keys held now."""
        self._tapped: set[str] = set()
        self._recent: str | None = None
        self.returns: list[float] = []
        """The return of each finished episode."""
        self._episodes: list[dict[str, list[Any]]] = []
        self._current: dict[str, list[Any]] = {}
        self.episode_return = 0.0
        self._frame: np.ndarray | None = None
        self._stale = True
        self.steps = 0
        """Env steps played, over all episodes."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._listeners: list[Any] = []
        self._dataset: Dataset | None = None
        self._reset()

    # -- keys -----------------------------------------------------------------------------------

    def key_down(self, key: str) -> None:
        """A key went down (the widget and the window call this)."""
        name = normalize_key(key)
        with self._lock:
            self.held.add(name)
            self._tapped.add(name)
            self._recent = name

    def key_up(self, key: str) -> None:
        """A key went up."""
        with self._lock:
            self.held.discard(normalize_key(key))

    def press(self, *keys: str, steps: int = 1) -> float:
        """Hold ``keys`` for ``steps`` env steps, then let go; returns the reward collected (from code:
        how tests play)."""
        for key in keys:
            self.key_down(key)
        total = 0.0
        try:
            for _ in range(steps):
                total += self.step()
        finally:
            for key in keys:
                self.key_up(key)
        return total

    def action(self) -> Any:
        """The action the keys held (or tapped since the last step) ask for; None: wait."""
        with self._lock:
            return self.keys.action(self.held | self._tapped, self._recent)

    # -- stepping -------------------------------------------------------------------------------

    def _reset(self) -> None:
        seed = None if self.seed is None else self.seed + len(self.returns)
        obs, _ = self.env.reset(seed=seed)
        self.obs = obs
        self.episode_return = 0.0
        self.episode_steps = 0
        self._current = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")}
        self._stale = True

    @property
    def frame(self) -> np.ndarray:
        """The env's frame now (RGB), rendered when first asked for after a step (a test driving
        HumanPlay from code renders nothing)."""
        with self._lock:
            if self._stale:
                self._frame = np.asarray(self.env.render())
                self._stale = False
            return self._frame  # type: ignore[return-value]  # rendered just above when stale

    def step(self) -> float:
        """One env step with the action of the keys (nothing when the mapping waits for a key and
        none is held); a finished episode joins :attr:`dataset` and the next one starts. Returns the reward."""
        with self._lock:
            action = self.keys.action(self.held | self._tapped, self._recent)
            self._tapped.clear()
            if action is None:
                return 0.0
            obs = self.obs
            env_action = self._convert(np.asarray(action))
            next_obs, reward, terminated, truncated, _ = self.env.step(env_action)
            self.episode_steps += 1
            self.steps += 1
            truncated = bool(truncated) or (self.max_steps is not None and self.episode_steps >= self.max_steps)
            c = self._current
            c["obs"].append(_recorded(obs))
            c["actions"].append(np.asarray(action))
            c["rewards"].append(float(reward))
            c["next_obs"].append(_recorded(next_obs))
            c["terminated"].append(bool(terminated))
            c["truncated"].append(truncated and not terminated)
            self.episode_return += float(reward)
            self.obs = next_obs
            self._stale = True
            if terminated or truncated:
                self._episodes.append(c)
                self.returns.append(self.episode_return)
                self._dataset = None
                self._reset()
        for listener in list(self._listeners):
            listener()
        return float(reward)

    @property
    def episodes(self) -> int:
        """Episodes finished (and recorded)."""
        return len(self.returns)

    @property
    def dataset(self) -> Dataset:
        """The finished episodes as a :class:`~workbench.Dataset` (the one in progress is not in it)."""
        return self._episodes_dataset(
            "HumanPlay has recorded no finished episode yet: play one to the end first",
            self.env.observation_space,
            self.env.action_space,
        )

    def _episodes_dataset(
        self, none_yet: str, observation_space: spaces.Space, action_space: spaces.Space, obs_dtype: Any = None
    ) -> Dataset:
        """The finished episodes' columns end to end as a :class:`~workbench.Dataset`, built again only after
        a new episode; ``obs_dtype`` for both observation columns (None: as recorded). Raises ``ValueError``
        saying ``none_yet`` before the first episode ends."""
        with self._lock:
            if not self._episodes:
                raise ValueError(none_yet)
            if self._dataset is None:

                def cat(key: str, dtype: Any = None) -> np.ndarray:
                    return np.asarray([x for e in self._episodes for x in e[key]], dtype=dtype)

                self._dataset = Dataset.from_arrays(
                    cat("obs", obs_dtype),
                    cat("actions"),
                    cat("rewards", np.float64),
                    cat("next_obs", obs_dtype),
                    cat("terminated", bool),
                    cat("truncated", bool),
                    observation_space=observation_space,
                    action_space=action_space,
                    metadata={"source": f"human:{self.env_name}", "episodes": len(self._episodes)},
                )
            return self._dataset

    def save(self, path: str) -> str:
        """Save :attr:`dataset` to the directory ``path`` (``wb.Dataset.load(path)`` reads it)."""
        return self.dataset.save(path)

    # -- the clock ------------------------------------------------------------------------------

    def start(self) -> HumanPlay:
        """Step ``fps`` times a second in a background thread (showing the widget does this)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="workbench-human", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the clock (the env stays open: :meth:`start` continues)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    @property
    def running(self) -> bool:
        """True while the clock steps the env."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        period = 1.0 / self.fps
        next_time = time.monotonic()
        while not self._stop.is_set():
            if self.max_episodes is not None and self.episodes >= self.max_episodes:
                return
            self.step()
            next_time += period
            self._stop.wait(max(0.0, next_time - time.monotonic()))
            next_time = max(next_time, time.monotonic() - period)

    def close(self) -> None:
        """Stop the clock and close the env (when HumanPlay made it)."""
        self.stop()
        if self._owned:
            self.env.close()

    def __repr__(self) -> str:
        return (
            f"<HumanPlay {self.env_name}: {self.episodes} episodes recorded, {self.steps} steps, "
            f"keys {self.keys.describe()}>"
        )

    # -- the notebook ---------------------------------------------------------------------------

    def widget(self) -> Any:
        """The notebook widget (frames, keys, counters); built once."""
        existing = getattr(self, "_widget", None)
        if existing is None:
            from . import views

            existing = self._widget = views.view("human", self)
        return existing

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget())
        self.start()


def _is_selfplay(env: Any) -> bool:
    """Whether ``env`` is a ``wb.SelfPlay`` (without importing self-play, and torch, for other envs)."""
    module = sys.modules.get("workbench.selfplay.env")
    return module is not None and isinstance(env, module.SelfPlay)


class BoardPlay(HumanPlay):
    """A person plays a two-player board game (Tic-Tac-Toe, Connect Four) against the agent or one of its
    past selves, by clicks; ``wb.HumanPlay(selfplay_env)`` makes one. Every game the person plays is recorded
    (:attr:`dataset`) in the learner's observation format, as demonstrations.

    Example::

        play = wb.HumanPlay(env, opponent="snapshot_40")   # env: the wb.SelfPlay of a session
        play                                               # in a notebook: click a square (a column)
        play.move(4)                                       # from code: the person's move, then the reply
        play.results, play.dataset

    Parameters:
        env: the :class:`~workbench.SelfPlay` env (bound to its learner: a session's).
        opponent: ``"latest"`` (the learner's current weights), a snapshot's name, or an agent.
        first: the person moves first in the first game (the seats alternate from game to game).
        deterministic: the opponent plays its policy's best move (False: it samples).
        seed: seeds the game and the fixed players.
    """

    def __init__(
        self,
        env: SelfPlay,
        opponent: str | Agent = "latest",
        *,
        first: bool = True,
        deterministic: bool = True,
        seed: int | None = None,
    ) -> None:
        from .agents.contract import Agent

        if not _is_selfplay(env):
            raise TypeError(f"BoardPlay plays a wb.SelfPlay game, got {type(env).__name__}")
        self.selfplay = env
        self.opponent_name = opponent if isinstance(opponent, str) else type(opponent).__name__
        self.opponent = opponent if isinstance(opponent, Agent) else env.opponent_agent(opponent)
        self.game = env.new_game()
        self.deterministic = bool(deterministic)
        self.seed = seed
        self.env_name = type(self.game.env.unwrapped).__name__
        shape = self.game.inner_space.shape or (int(self.game.action_space.n),)
        self.rows, self.cols = (int(shape[0]), int(shape[1])) if len(shape) >= 2 else (1, int(shape[0]))
        # Connect Four's actions are columns; Tic-Tac-Toe's are squares.
        self.columns = int(self.game.action_space.n) == self.cols and self.rows > 1
        if not self.columns and int(self.game.action_space.n) != self.rows * self.cols:
            self.game.close()
            raise ValueError(
                f"{self.env_name} is no board game whose actions are squares or columns, so it is not played by "
                "clicks: play it by keys against the agent with wb.HumanPlay(selfplay_env.versus('latest'))"
            )
        self._lock = threading.RLock()
        self._listeners: list[Any] = []
        self._episodes: list[dict[str, list[Any]]] = []
        self._dataset: Dataset | None = None
        self.returns: list[float] = []
        """The person's score of each finished game (1 a win, 0.5 a draw, 0 a loss)."""
        self.steps = 0
        """Moves the person made, over all games."""
        self._person_first = bool(first)
        self._games_started = 0
        self.new_game()

    @property
    def results(self) -> dict[str, int]:
        """The person's wins, draws and losses so far."""
        return {
            "wins": sum(r == 1.0 for r in self.returns),
            "draws": sum(r == 0.5 for r in self.returns),
            "losses": sum(r == 0.0 for r in self.returns),
        }

    def new_game(self) -> None:
        """Start a game (the seats swap each game); the agent opens when it moves first."""
        with self._lock:
            seed = None if self.seed is None else self.seed + self._games_started
            first = self._person_first == (self._games_started % 2 == 0)
            self._games_started += 1
            self.game.reset(seed=seed)
            self.person = self.game.players[0 if first else 1]
            self.agent_seat = self.game.players[1 if first else 0]
            self._current = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")}
            self._given = 0.0
            self._recorded = False
            self._reply()
        self._notify()

    def _reply(self) -> None:
        while not self.game.over and self.game.current == self.agent_seat:
            _, flat, mask = self.game.observe(self.agent_seat)
            obs = {"observation": flat, "action_mask": mask}
            self.game.step(int(self.opponent.act(obs, deterministic=self.deterministic)))

    def _obs_row(self) -> np.ndarray:
        # The row the learner's agents see: the observation flattened, the mask left out (as a recorded session).
        return np.asarray(self.game.observe(self.person)[1], dtype=np.float32)

    @property
    def over(self) -> bool:
        """True when the current game has ended."""
        return self.game.over

    @property
    def legal(self) -> np.ndarray:
        """The person's legal moves now (a bool per action; none once the game is over)."""
        if self.game.over:
            return np.zeros(int(self.game.action_space.n), bool)
        return self.game.observe(self.person)[2].astype(bool)

    def board(self) -> np.ndarray:
        """The board as ``rows x cols`` ints: 0 empty, 1 the person's pieces, 2 the agent's."""
        raw = np.asarray(self.game.observe(self.person)[0])
        if raw.ndim == 3 and raw.shape[-1] == 2:
            return (raw[..., 0].astype(int) + 2 * raw[..., 1].astype(int)).reshape(self.rows, self.cols)
        return raw.reshape(self.rows, self.cols).astype(int)

    def action_at(self, row: int, col: int) -> int:
        """The move a click on square (``row``, ``col``) means: the square (Tic-Tac-Toe), its column (Connect Four)."""
        return int(col) if self.columns else int(row) * self.cols + int(col)

    def click(self, row: int, col: int) -> bool:
        """A click on a square: the person's move there when it is legal (then the agent replies). True if moved."""
        action = self.action_at(row, col)
        if self.game.over or not self.legal[action]:
            return False
        self.move(action)
        return True

    def move(self, action: int) -> float:
        """The person's move ``action``, then the agent's reply; a finished game is recorded. Returns the
        person's reward. ``ValueError`` for an illegal move or a move after the game ended."""
        with self._lock:
            if self.game.over:
                raise ValueError("the game is over: call new_game() to play another")
            if not 0 <= int(action) < len(self.legal) or not self.legal[int(action)]:
                raise ValueError(f"move {action} is not legal now; legal moves: {np.flatnonzero(self.legal).tolist()}")
            obs = self._obs_row()
            self.game.step(int(action))
            self._reply()
            total = self.game.returns[self.person]
            reward, self._given = total - self._given, total
            c = self._current
            c["obs"].append(obs)
            c["actions"].append(np.asarray(int(action)))
            c["rewards"].append(float(reward))
            c["next_obs"].append(self._obs_row())
            c["terminated"].append(bool(self.game.over))
            c["truncated"].append(False)
            self.steps += 1
            if self.game.over and not self._recorded:
                self._recorded = True
                self._episodes.append(c)
                self.returns.append(self.game.outcome(self.person))
                self._dataset = None
        self._notify()
        return float(reward)

    def status(self) -> str:
        """The game's state in words (shown above the board)."""
        if self.game.over:
            score = self.game.outcome(self.person)
            said = "you win" if score == 1.0 else "a draw" if score == 0.5 else "the agent wins"
            return f"game over: {said}"
        return f"your move (you play {self.person}, against {self.opponent_name})"

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    @property
    def episodes(self) -> int:
        """Games finished (and recorded)."""
        return len(self.returns)

    @property
    def dataset(self) -> Dataset:
        """The person's finished games as a :class:`~workbench.Dataset` in the learner's observation format
        (ready for ``wb.BC(dataset=...)`` on the same ``SelfPlay`` env)."""
        return self._episodes_dataset(
            "no game was finished yet: play one to the end first",
            self.selfplay.observation_space,
            self.selfplay.action_space,
            np.float32,
        )

    def step(self) -> float:
        """Nothing to step on a clock: a board game moves on clicks (:meth:`move`)."""
        return 0.0

    def start(self) -> BoardPlay:
        """A board game has no clock: nothing to start."""
        return self

    def stop(self) -> None:
        """A board game has no clock: nothing to stop."""

    @property
    def running(self) -> bool:
        """Always False: a board game has no clock."""
        return False

    def close(self) -> None:
        """Close the game's env."""
        self.game.close()

    def __repr__(self) -> str:
        marks = {0: ".", 1: "X", 2: "O"}
        rows = "\n".join("".join(marks[int(v)] for v in row) for row in self.board())
        return f"<BoardPlay {self.env_name} vs {self.opponent_name}: {self.results}; {self.status()}>\n{rows}"

    def widget(self) -> Any:
        """The notebook widget: the board as buttons to click, the game's state, a new-game button."""
        existing = getattr(self, "_widget", None)
        if existing is None:
            from . import views

            existing = self._widget = views.view("board", self)
        return existing


_DISPLAY_DRIVERS = ("kmsdrm", "fbcon", "directfb", "rpi", "vivante", "evdev")  # SDL drivers that need no X/Wayland
_OFF_SCREEN = ("dummy", "offscreen")


def _check_display(driver: str | None) -> bool:
    """Stop at once (``SystemExit``) when no window can be shown; True when the user chose an
    off-screen SDL driver on purpose (``driver``: their ``SDL_VIDEODRIVER``)."""
    if driver in _OFF_SCREEN:
        return True
    if sys.platform in ("win32", "darwin") or driver in _DISPLAY_DRIVERS:
        return False
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise SystemExit(
            "workbench: play --human needs a display to open its window, and this machine has none (neither DISPLAY "
            "nor WAYLAND_DISPLAY is set): run it on a desktop, or over ssh -X, or play in a notebook with "
            "wb.HumanPlay(env)"
        )
    return False


def play_in_window(
    env_id: str, *, record: str | None = None, fps: float | None = None, seed: int | None = None, episodes: int = 1
) -> int:
    """``workbench play --human ENV``: play in a pygame window (arrows, space, Escape to quit) and
    save the episodes as a dataset in ``record``. Returns the exit code."""
    driver = os.environ.get("SDL_VIDEODRIVER")  # the user's, before rendering sets its off-screen default
    off_screen = _check_display(driver)
    try:
        import pygame
    except ImportError as exc:
        raise SystemExit(
            f"workbench: playing in a window needs pygame: pip install 'rl-workbench[human]' (pygame-ce; {exc})"
        ) from None
    play = HumanPlay(env_id, fps=fps, seed=seed, episodes=episodes)
    if off_screen and play.keys.default is None:
        play.close()
        raise SystemExit(
            f"workbench: play --human {env_id} waits for a key, and SDL_VIDEODRIVER={driver} opens no window "
            "to press one in: run it on a desktop (unset SDL_VIDEODRIVER), or play in a notebook (wb.HumanPlay)"
        )
    if driver is None:  # the window goes to the user's display, not to the off-screen driver rendering chose
        os.environ.pop("SDL_VIDEODRIVER", None)
    print(f"{env_id}: {play.keys.describe()}; Escape quits")
    try:
        pygame.init()
        frame = play.frame
        assert frame is not None
        scale = max(1, 480 // max(frame.shape[:2]))
        screen = pygame.display.set_mode((frame.shape[1] * scale, frame.shape[0] * scale))
    except pygame.error as exc:
        pygame.quit()
        play.close()
        raise SystemExit(f"workbench: play --human needs a display, and none could be opened ({exc})") from None
    clock = pygame.time.Clock()
    names = {
        pygame.K_LEFT: "left",
        pygame.K_RIGHT: "right",
        pygame.K_UP: "up",
        pygame.K_DOWN: "down",
        pygame.K_SPACE: "space",
    }
    try:
        while play.episodes < episodes:
            for event in pygame.event.get():
                if event.type == pygame.QUIT or (event.type == pygame.KEYDOWN and event.key == pygame.K_ESCAPE):
                    episodes = play.episodes
                    break
                if event.type in (pygame.KEYDOWN, pygame.KEYUP):
                    key = names.get(event.key) or pygame.key.name(event.key)
                    (play.key_down if event.type == pygame.KEYDOWN else play.key_up)(key)
            play.step()
            surface = pygame.surfarray.make_surface(np.asarray(play.frame).swapaxes(0, 1))
            screen.blit(pygame.transform.scale(surface, screen.get_size()), (0, 0))
            pygame.display.flip()
            clock.tick(play.fps)
    finally:
        pygame.quit()
        play.close()
    for i, r in enumerate(play.returns, 1):
        print(f"episode {i}: return {r:.2f}")
    if record and play.returns:
        print(f"saved {play.episodes} episodes to {play.save(record)}")
    return 0
