"""A user's vector env as the session's env: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` /
``gym.make_vec`` and EnvPool envs, with every autoreset mode made the library's same-step rule
(:class:`VectorEnvAdapter`), EnvPool envs made from an id (``backend="envpool"``) and the checks a
session with a vector env needs (:func:`check_vector_session`). See docs/parallel.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from .atari import GAME_END_KEY, training_wrapper
from .composite import ActionLayout, composite_layout
from .core import (
    EnvMethodError,
    EnvOutputError,
    _is_envpool,
    _show,
    _single_spaces,
    _unpack_reset,
    _unpack_step,
    _vector_name,
    checked_observation,
    describe_space,
    flat_observation_space,
    is_atari_id,
    observation_flattener,
)
from .masks import MASK_KEY, check_masks, mask_size

__all__ = [
    "VectorEnvAdapter",
    "autoreset_mode",
    "check_envpool_spaces",
    "check_vector_session",
    "make_envpool",
]


# -- a user's vector env ---------------------------------------------------------------------

_SAME_STEP, _NEXT_STEP, _DISABLED = "same_step", "next_step", "disabled"


def autoreset_mode(venv: Any) -> str:
    """A vector env's autoreset mode: ``"next_step"`` (gymnasium's default and EnvPool's: the step
    after an episode ends resets that env and ignores its action), ``"same_step"`` (the ending step
    already returns the next episode's first observation, the last one in ``info["final_obs"]``) or
    ``"disabled"`` (the caller resets ended envs). Read from ``metadata["autoreset_mode"]``."""
    mode = getattr(venv, "metadata", None) or {}
    mode = mode.get("autoreset_mode") if isinstance(mode, dict) else None
    if mode is None and _is_envpool(venv):
        return _NEXT_STEP
    text = str(getattr(mode, "value", mode)).replace("_", "").lower()
    found = {"nextstep": _NEXT_STEP, "samestep": _SAME_STEP, "disabled": _DISABLED}.get(text)
    if found is None:
        raise ValueError(
            f"cannot tell the autoreset mode of the vector env {_vector_name(venv)}: its metadata['autoreset_mode'] "
            f"is {mode!r}; build it with gymnasium >= 1.0 (gym.vector.AutoresetMode.NEXT_STEP, SAME_STEP or DISABLED)"
        )
    return found


def _info_rows(info: Any, key: str, n: int) -> tuple[Any, np.ndarray] | None:
    """``info[key]`` of a vector info dict and the envs that have it (gymnasium's ``_key`` flags;
    EnvPool gives every key for every env), or None when no env has it."""
    if not isinstance(info, dict) or key not in info:
        return None
    has = info.get("_" + key)
    has = np.ones(n, dtype=bool) if has is None else np.asarray(has, dtype=bool)
    return info[key], has


class VectorEnvAdapter:
    """A user's vector env (gymnasium ``VectorEnv`` or EnvPool) with :class:`VecEnv`'s interface
    and *same-step* autoreset, so the loop and the agents cannot tell them apart.

    ``step(actions)`` returns ``(obs, rewards, terminated, truncated, final_obs)`` as
    :class:`VecEnv` does. How the user's autoreset mode becomes same-step:

    * ``"same_step"``: the last observation of an ended episode is ``info["final_obs"][i]``;
    * ``"next_step"`` (gymnasium's default, EnvPool) and ``"disabled"``: the step's observation is
      the last one; the ended envs are then reset at once, only those
      (``reset(options={"reset_mask": ...})`` for gymnasium, ``reset(env_id)`` for EnvPool), so no
      step ever feeds the agent a transition whose action the env ignored.

    ``info`` is read per env (gymnasium's ``_key`` flags): action masks (``info["action_mask"]``,
    a Dict observation's ``"action_mask"``, or the envs' ``action_masks`` method through the vector
    env's ``call``), and whole Atari games (``game_ends``): EnvPool's raw ``info["reward"]`` while
    ``reward_clip=True`` clips the step's reward, or the ``workbench.envs.atari.AtariTraining`` wrapper
    inside a gymnasium vector env's envs. ``episodic_life`` / ``clip_rewards`` apply
    :class:`workbench.envs.atari.AtariTraining`'s rules here, for an EnvPool Atari env made without its own
    (``make_envpool`` does that): a lost life ends the training episode and the game goes on.

    What the env returns is checked (one row per env, the observation shape of the single space,
    numbers for rewards, bools for flags); an error names the method, the step and the env index.
    """

    stepping: int | None = None
    masks: np.ndarray | None = None
    final_masks: np.ndarray | None = None
    game_ends: np.ndarray | None = None
    successes: np.ndarray | None = None  # info["is_success"] is not read from a user's vector env (yet)

    def __init__(self, venv: Any, *, episodic_life: bool = False, clip_rewards: bool = False) -> None:
        self.venv = venv
        self.num_envs = n = int(venv.num_envs)
        self.name = _vector_name(venv)
        self.envpool = _is_envpool(venv)
        self.mode = autoreset_mode(venv)
        self.observation_space, self.action_space = _single_spaces(venv)
        self._vector_obs_space = getattr(venv, "observation_space", None)
        flat = flat_observation_space(self.observation_space)
        self._obs_shape, self._obs_dtype = flat.shape, flat.dtype
        self._box = isinstance(self.observation_space, spaces.Box)
        self._flatten = observation_flattener(self.observation_space)
        self._actions = _vector_action_converter(self.action_space, n)
        self.step_count = 0
        config = getattr(venv, "config", None) if self.envpool else None
        config = dict(config) if isinstance(config, dict) else {}
        if self.envpool:
            if int(config.get("batch_size", n) or n) != n:
                raise ValueError(
                    f"the EnvPool env {self.name} runs in async mode (batch_size={config.get('batch_size')} < "
                    f"num_envs={n}): each step returns a different subset of envs. Make it with batch_size=num_envs "
                    "(the default) for a session"
                )
            if config.get("episodic_life"):
                raise ValueError(
                    f"the EnvPool env {self.name} was made with episodic_life=True: EnvPool continues the game after "
                    "a lost life only through its next-step autoreset, whose step ignores the action, and a session "
                    "never learns from such a step. Make it with episodic_life=False, or let the session build it: "
                    "Session(agent, 'ALE/Breakout-v5', backend='envpool') ends training episodes on a lost life itself"
                )
        self.episodic_life, self.clip_rewards = episodic_life, clip_rewards
        self._lives = np.zeros(n, dtype=np.int64)
        # Whole games (workbench.envs.atari): EnvPool's Atari envs give the raw reward and the lives in info;
        # a gymnasium vector env of make_env's Atari envs reports them through AtariTraining.
        self._envpool_games = self.envpool and (episodic_life or clip_rewards or bool(config.get("reward_clip")))
        self._wrapped_games = not self.envpool and _reports_game_ends(venv)
        if self._envpool_games or self._wrapped_games:
            self.game_ends = np.full((n, 2), np.nan)
        self._score = np.zeros(n, dtype=np.float64)
        self._length = np.zeros(n, dtype=np.int64)
        self._mask_source: str | None = None if mask_size(self.action_space) is not None else "none"
        self._methods: set[str] = set()  # env methods known to exist (see _has_method)

    # -- observations ---------------------------------------------------------------------------

    def _where(self, method: str, i: int | None = None) -> str:
        which = f" (env {i} of {self.num_envs})" if i is not None and self.num_envs > 1 else ""
        return f"{method} of the vector env {self.name} at step {self.step_count}{which}"

    def _flat_batch(self, obs: Any, method: str, rows: int | None = None) -> np.ndarray:
        """The batch of observations as the agents read them, ``(rows, *obs_shape)``."""
        rows = self.num_envs if rows is None else rows
        if self._box:
            arr = np.asarray(obs)
            if arr.shape != (rows, *self._obs_shape):
                raise EnvOutputError(
                    f"{self._where(method)} returned observations of shape {getattr(obs, 'shape', None)}, expected "
                    f"{(rows, *self._obs_shape)}: one row per env of the single observation space "
                    f"{describe_space(self.observation_space)}"
                )
            return np.array(arr, dtype=self._obs_dtype)  # a copy: the vector env may reuse its buffer
        from gymnasium.vector.utils import batch_space, iterate

        space = self._vector_obs_space if rows == self.num_envs else batch_space(self.observation_space, rows)
        out = np.empty((rows, *self._obs_shape), dtype=self._obs_dtype)
        for i, one in enumerate(iterate(space, obs)):  # type: ignore[arg-type]  # set in __init__
            out[i] = self._flat_one(one, method, i)
        return out

    def _flat_one(self, obs: Any, method: str, i: int) -> np.ndarray:
        return checked_observation(self._flatten, obs, self._obs_shape, self.observation_space, self._where, method, i)

    # -- masks ----------------------------------------------------------------------------------

    def _read_masks(self, obs: Any, info: Any, rows: np.ndarray | None = None, *, final: bool = False) -> Any:
        """The masks of the envs in ``rows`` (all when None) from this reset's or step's results;
        None when the env gives none. The source is chosen at the first reset, as ``MaskReader`` does."""
        if self._mask_source == "none":
            return None
        n = self.num_envs if rows is None else len(rows)
        if self._mask_source is None:
            if _info_rows(info, MASK_KEY, n) is not None:
                self._mask_source = "info"
            elif isinstance(obs, dict) and MASK_KEY in obs:
                self._mask_source = "obs"
            elif self._has_method("action_masks"):
                self._mask_source = "method"
            else:
                self._mask_source = "none"
                return None
        if self._mask_source == "info":
            found = _info_rows(info, MASK_KEY, n)
            if found is None:
                raise ValueError(
                    f"{self._where('step')}: the envs gave info[{MASK_KEY!r}] at reset but not now: give it every time"
                )
            mask = self._mask_rows(found[0], n)
        elif self._mask_source == "obs":
            mask = self._mask_rows(obs[MASK_KEY], n)
        else:
            mask = self._mask_rows(list(self.call("action_masks")), self.num_envs)
            if rows is not None:
                mask = mask[rows]
        return check_masks(
            mask, self.action_space, f"the env's action mask at step {self.step_count}", allow_empty=final
        )

    def _mask_rows(self, masks: Any, n: int) -> np.ndarray:
        """The envs' masks as rows: a composite space's batched structure (gymnasium's vector infos hold a
        batch per leaf) or list of structures (``action_masks()`` per env) as flat rows, else the array."""
        layout = composite_layout(self.action_space)
        if layout is not None and isinstance(masks, dict | tuple):
            return layout.batched_mask_rows(masks, n, f"the env's action mask at step {self.step_count}")
        if layout is not None and isinstance(masks, list):
            return check_masks(
                masks, self.action_space, f"the env's action mask at step {self.step_count}", allow_empty=True
            )
        return np.asarray(masks)

    def _has_method(self, name: str) -> bool:
        """True when every env has ``name`` (through its wrappers). Asked with ``has_wrapper_attr``, which
        never raises: an exception inside an ``AsyncVectorEnv`` worker shuts that worker down."""
        if name in self._methods:
            return True
        call = getattr(self.venv, "call", None)
        if call is None:
            return False
        try:
            found = all(call("has_wrapper_attr", name))
        except Exception:
            return False
        if found:
            self._methods.add(name)
        return found

    # -- reset and step ---------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (gymnasium: seeded ``seed + i``; EnvPool keeps the seed it was made with)
        and return the observations."""
        result = self.venv.reset() if self.envpool else self.venv.reset(seed=seed)
        obs, info = _unpack_reset(result, self._where("reset")), result[1]
        flat = self._flat_batch(obs, "reset")
        masks = self._read_masks(obs, info)
        if masks is not None:
            self.masks = masks
        self._score[:] = 0.0
        self._length[:] = 0
        if self.episodic_life:
            self._lives = self._info_lives(info, self._lives)
        return flat

    def _info_lives(self, info: Any, default: np.ndarray) -> np.ndarray:
        found = _info_rows(info, "lives", self.num_envs)
        return default.copy() if found is None else np.asarray(found[0], dtype=np.int64).reshape(-1)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every env once; same-step autoreset (see the class docstring)."""
        n = self.num_envs
        self.step_count += 1
        result = self.venv.step(self._actions(actions))
        obs, rewards, terminated, truncated, info = _unpack_step(result, self._where("step"))
        rewards = self._vector_rewards(rewards)
        terminated = self._vector_flags(terminated, "terminated")
        truncated = self._vector_flags(truncated, "truncated")
        if self.envpool:
            obs, rewards, terminated, truncated, info = self._envpool_order(obs, rewards, terminated, truncated, info)
        ended = terminated | truncated
        step_obs = self._flat_batch(obs, "step")
        final_obs = step_obs
        raw = rewards
        if self._envpool_games:
            found = _info_rows(info, "reward", n)
            raw = rewards if found is None else np.asarray(found[0], dtype=np.float64).reshape(-1)
        # The masks read here are of the states the step reached (next-step: an ended episode's last
        # state, which may allow nothing; same-step: the new episode's first); checked in full below.
        masks = self._read_masks(obs, info, final=True)
        final_masks = masks
        if self.mode == _SAME_STEP:
            if ended.any():
                final_obs = step_obs.copy()
                last = info.get("final_obs") if isinstance(info, dict) else None
                for i in np.flatnonzero(ended):
                    if last is None or last[i] is None:
                        raise EnvOutputError(
                            f"{self._where('step', int(i))} ended an episode in same-step autoreset mode without "
                            "info['final_obs']: the last observation is needed to bootstrap a truncated episode"
                        )
                    final_obs[i] = self._flat_one(last[i], "step (final_obs)", int(i))
                if masks is not None:
                    final_masks = masks.copy()
                    final_masks[ended] = self._final_masks(info, ended)
            next_obs = step_obs
        else:
            next_obs = step_obs
            # A lost life (episodic_life) ends the training episode, and the game goes on: no reset.
            lost = self._lost_lives(info, ended) if self.episodic_life else None
            if ended.any():
                next_obs = step_obs.copy()
                reset_obs, reset_info = self._reset_some(ended)
                next_obs[ended] = self._flat_batch(reset_obs, "reset", int(ended.sum()))
                if masks is not None:
                    masks = masks.copy()
                    masks[ended] = self._read_masks(reset_obs, reset_info, np.flatnonzero(ended))
                if self.episodic_life:
                    self._lives[ended] = self._info_lives(reset_info, self._lives[ended])
            if lost is not None and lost.any():
                terminated = terminated | lost
        if self.game_ends is not None:
            self._count_games(raw, ended, info)
        if self.clip_rewards:
            rewards = np.sign(rewards).astype(np.float32)
        if masks is not None:
            self.masks, self.final_masks = masks, final_masks
            check_masks(masks, self.action_space, f"the env's action mask at step {self.step_count}")
        return next_obs, rewards, terminated, truncated, final_obs

    def _final_masks(self, info: dict, ended: np.ndarray) -> np.ndarray:
        """Same-step: the masks of the ended episodes' last states (all allowed where the env does not say:
        nobody acts there; only a truncated episode's bootstrap reads them)."""
        out = np.ones((int(ended.sum()), mask_size(self.action_space) or 0), dtype=bool)
        if self._mask_source == "info":
            found = _info_rows(info.get("final_info"), MASK_KEY, self.num_envs)
            if found is not None:
                out[:] = np.asarray(found[0], dtype=bool)[ended]
        elif self._mask_source == "obs":
            for k, i in enumerate(np.flatnonzero(ended)):
                out[k] = np.asarray(info["final_obs"][i][MASK_KEY], dtype=bool)
        return out

    def _lost_lives(self, info: Any, ended: np.ndarray) -> np.ndarray:
        lives = self._info_lives(info, self._lives)
        lost = (lives < self._lives) & (lives > 0) & ~ended
        self._lives = lives
        return lost

    def _reset_some(self, which: np.ndarray) -> tuple[Any, Any]:
        """Reset the envs in ``which`` (a bool row) only; their observations and info, in env order."""
        if self.envpool:
            ids = np.flatnonzero(which).astype(np.int32)
            result = self.venv.reset(ids)
            obs, info = _unpack_reset(result, self._where("reset")), result[1]
            order = info.get("env_id") if isinstance(info, dict) else None
            if order is not None and not np.array_equal(np.asarray(order), ids):
                idx = np.argsort(np.asarray(order))
                obs = np.asarray(obs)[idx]
                info = {
                    k: (np.asarray(v)[idx] if isinstance(v, np.ndarray) and len(v) == len(idx) else v)
                    for k, v in info.items()
                }
            return obs, info
        result = self.venv.reset(options={"reset_mask": which.copy()})
        obs, info = _unpack_reset(result, self._where("reset")), result[1]
        from gymnasium.vector.utils import iterate

        if self._box:
            obs = np.asarray(obs)[which]
        else:
            obs = [o for o, keep in zip(iterate(self._vector_obs_space, obs), which, strict=True) if keep]  # type: ignore[arg-type]
            from gymnasium.vector.utils import concatenate, create_empty_array

            space = self.observation_space
            obs = concatenate(space, obs, create_empty_array(space, len(obs)))  # type: ignore[arg-type]
        if isinstance(info, dict):
            info = _select_info(info, which)
        return obs, info

    def _count_games(self, raw: np.ndarray, ended: np.ndarray, info: Any) -> None:
        n = self.num_envs
        self.game_ends = games = np.full((n, 2), np.nan)  # a new array: it travels in the extras
        if self._wrapped_games:
            for source in (info, info.get("final_info") if isinstance(info, dict) else None):
                found = _info_rows(source, GAME_END_KEY, n)
                if found is not None:
                    for i in np.flatnonzero(found[1]):
                        games[i] = np.asarray(found[0][i], dtype=np.float64)
            return
        self._score += raw
        self._length += 1
        over = ended  # EnvPool made without episodic_life: an ended episode is a whole game
        if over.any():
            games[over, 0] = self._score[over]
            games[over, 1] = self._length[over]
            self._score[over] = 0.0
            self._length[over] = 0

    def _vector_rewards(self, rewards: Any) -> np.ndarray:
        arr = np.asarray(rewards)
        if arr.shape != (self.num_envs,) or arr.dtype.kind not in "biuf":
            raise EnvOutputError(
                f"{self._where('step')} returned rewards {_show(rewards)}: expected {self.num_envs} numbers, "
                "one per env"
            )
        return np.array(arr, dtype=np.float32)

    def _vector_flags(self, flags: Any, name: str) -> np.ndarray:
        arr = np.asarray(flags)
        if (
            arr.shape != (self.num_envs,)
            or arr.dtype.kind not in "bi"
            or (arr.dtype.kind == "i" and not np.isin(arr, (0, 1)).all())
        ):
            raise EnvOutputError(
                f"{self._where('step')} returned {name} {_show(flags)}: expected {self.num_envs} bools, one per env"
            )
        return np.array(arr, dtype=bool)

    def _envpool_order(
        self, obs: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, info: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        """EnvPool names each row's env in ``info["env_id"]``: rows in env order (they are in sync mode)."""
        ids = info.get("env_id") if isinstance(info, dict) else None
        if ids is None:
            return obs, rewards, terminated, truncated, info
        ids = np.asarray(ids)
        if np.array_equal(ids, np.arange(self.num_envs)):
            return obs, rewards, terminated, truncated, info
        idx = np.argsort(ids)
        info = {
            k: (np.asarray(v)[idx] if isinstance(v, np.ndarray) and len(v) == len(idx) else v) for k, v in info.items()
        }
        return np.asarray(obs)[idx], rewards[idx], terminated[idx], truncated[idx], info

    # -- the rest of the interface ---------------------------------------------------------------

    def call(self, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Call method ``name`` on every env through the vector env's ``call``; the list of results in env
        order. An EnvPool env (C++ envs) has no Python methods: :class:`EnvMethodError`."""
        if name.startswith("_"):
            raise EnvMethodError(f"call_env calls public env methods only, not {name!r}")
        call = getattr(self.venv, "call", None)
        if call is None:
            raise EnvMethodError(
                f"the vector env {self.name} has no call(): its envs have no Python methods to call "
                f"({name!r}); EnvPool's envs are C++ (change them through envpool.make's options)"
            )
        if not self._has_method(name):
            raise EnvMethodError(
                f"the envs of the vector env {self.name} have no method {name!r}: define {name}(self, ...) on the "
                "env class (call_env calls it on every env through the vector env's call)"
            )
        return list(call(name, *args, **(kwargs or {})))

    def close(self) -> None:
        """Close the vector env."""
        self.venv.close()


def _select_info(info: dict, which: np.ndarray) -> dict:
    """The rows ``which`` of a gymnasium vector info dict (nested dicts too)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _select_info(value, which)
        elif isinstance(value, np.ndarray) and value.shape[:1] == which.shape:
            out[key] = value[which]
        else:
            out[key] = value
    return out


def _reports_game_ends(venv: Any) -> bool:
    """True when a gymnasium vector env's envs are wrapped in ``workbench.envs.atari.AtariTraining``."""
    envs = getattr(venv, "envs", None)
    if envs:
        return training_wrapper(envs[0]) is not None
    try:  # has_wrapper_attr never raises (an error would shut an AsyncVectorEnv worker down)
        return bool(venv.call("has_wrapper_attr", "reports_game_ends")[0])
    except Exception:
        return False


def _vector_action_converter(action_space: spaces.Space, n: int) -> Callable[[Any], Any]:
    """A batch of agent actions as a vector env's ``step`` wants it (Box: clipped to the bounds)."""
    if isinstance(action_space, spaces.Discrete):
        return lambda actions: np.asarray(actions).astype(np.int64, copy=False).reshape(n)
    if isinstance(action_space, spaces.Box):
        low, high, dtype = action_space.low, action_space.high, action_space.dtype
        return lambda actions: np.minimum(np.maximum(np.asarray(actions, dtype=dtype), low), high)
    if isinstance(action_space, spaces.MultiDiscrete | spaces.MultiBinary):
        return lambda actions: np.asarray(actions).astype(action_space.dtype, copy=False)
    if (
        composite_layout(action_space) is not None
    ):  # the structure with a batch per leaf, as gymnasium's vector envs take it
        layout = ActionLayout(action_space)
        return lambda actions: layout.structures(actions)
    return lambda actions: actions


# -- EnvPool by id and the session's checks -----------------------------------------------------

# make_env's Atari preprocessing (the zoo's AtariWrapper) in EnvPool's own options. Episodic life and
# reward clipping are applied by VectorEnvAdapter (EnvPool's episodic_life needs its next-step reset).
_ENVPOOL_ATARI = {
    "noop_max": 30,
    "frame_skip": 4,
    "img_height": 84,
    "img_width": 84,
    "stack_num": 4,
    "gray_scale": True,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
}


def envpool_id(env_id: str) -> tuple[str, dict[str, Any]]:
    """EnvPool's id and options for a gymnasium id: ``"ALE/Breakout-v5"`` is ``"Breakout-v5"`` with sticky
    actions (0.25, as ALE's v5), ``"BreakoutNoFrameskip-v4"`` is ``"Breakout-v5"`` without; other ids as they
    are. ``ValueError`` (naming the extra) when EnvPool is not installed or does not know the id."""
    try:
        import envpool
    except ImportError:
        raise ValueError(
            f"backend='envpool' needs EnvPool: pip install 'rl-workbench[envpool]' (wheels for Linux, macOS and "
            f"Windows, Python >= 3.11), or use backend='local' for {env_id!r}"
        ) from None
    options: dict[str, Any] = {}
    name = env_id
    if is_atari_id(env_id):
        game = env_id[4:] if env_id.startswith("ALE/") else env_id
        game = game.replace("NoFrameskip-v4", "").rsplit("-v", 1)[0]
        name = f"{game}-v5"
        options = {**_ENVPOOL_ATARI, "repeat_action_probability": 0.25 if env_id.startswith("ALE/") else 0.0}
    known = envpool.list_all_envs()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Close ones: {', '.join(close)}." if close else ""
        raise ValueError(
            f"EnvPool does not know {env_id!r} (as {name!r}).{hint} Use backend='local' or 'inprocess' for it"
        )
    return name, options


def make_envpool(
    env_id: str, num_envs: int, *, seed: int | None = None, num_threads: int = 0, **kwargs: Any
) -> VectorEnvAdapter:
    """EnvPool's ``num_envs`` envs of ``env_id`` (gymnasium API), with ``make_env``'s preprocessing for Atari
    ids (see ``docs/parallel.md``: EnvPool's options side by side with ``make_env``'s), as a
    :class:`VectorEnvAdapter`. ``kwargs`` go to ``envpool.make``."""
    import envpool

    name, options = envpool_id(env_id)
    atari = is_atari_id(env_id)
    options = {**options, **kwargs}
    venv = envpool.make(
        name,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=num_envs,
        seed=0 if seed is None else int(seed) % 2**31,
        num_threads=num_threads,
        **options,
    )
    return VectorEnvAdapter(venv, episodic_life=atari, clip_rewards=atari)


def check_envpool_spaces(source: Any, envs: Any) -> None:
    """A ``ValueError`` when EnvPool's envs ``envs`` (from ``make_envpool``) have other spaces than gymnasium's
    env of the same id (the agent was built on those)."""
    obs_space, act_space = source.spaces()
    if (envs.observation_space, envs.action_space) != (obs_space, act_space):
        raise ValueError(
            f"EnvPool's {source.env_id!r} has the spaces {envs.observation_space} and {envs.action_space}, "
            f"gymnasium's {obs_space} and {act_space}: use backend='local' for this id"
        )


def check_vector_session(source: Any, n_envs: int, num_workers: int, backend: str, owner: str = "Session") -> None:
    """What a session with a vector env (or ``backend="envpool"``) needs, checked when it is created:
    the agent's ``n_envs`` equal to the vector env's ``num_envs``, one worker (the vector env steps
    its own envs), and for ``backend="envpool"`` an id EnvPool knows. ``ValueError`` saying what to do."""
    vector = getattr(source, "vector", None)
    if backend == "envpool":
        env_id = getattr(source, "env_id", None)
        if vector is not None or env_id is None:
            raise ValueError(
                f"{owner} got backend='envpool' with {getattr(source, 'name', source)}: backend='envpool' builds "
                "EnvPool envs from a registered id such as 'ALE/Breakout-v5'; pass an EnvPool env itself as the env "
                "(with the default backend) to use one you made"
            )
        envpool_id(env_id)
        # Built once here (one env, then closed): an id EnvPool lists but cannot make, or makes with other
        # spaces than gymnasium's, is refused now rather than when the run starts.
        try:
            probe = make_envpool(env_id, 1, num_threads=1)
        except Exception as exc:
            raise ValueError(
                f"{owner} got backend='envpool' with {env_id!r}, which EnvPool cannot make ({type(exc).__name__}: "
                f"{exc}): use backend='local' or 'inprocess' for it"
            ) from exc
        try:
            check_envpool_spaces(source, probe)
        finally:
            probe.close()
        return
    if vector is None:
        return
    n = int(vector.num_envs)
    if n_envs != n:
        raise ValueError(
            f"the vector env {source.name} steps {n} envs, but the agent was built with n_envs={n_envs}: build the "
            f"agent from the vector env (wb.PPO(venv) takes n_envs from it) or with n_envs={n}"
        )
    if num_workers != 1 or backend not in ("auto", "inprocess"):
        raise ValueError(
            f"{owner} got num_workers={num_workers}, backend={backend!r} with the vector env {source.name}, which "
            "steps its own envs (in this process, its subprocesses or EnvPool's threads): leave num_workers and "
            "backend out, or pass an id or a factory to use the session's workers"
        )
