"""Environments: the one place that knows how gymnasium envs are given, checked, flattened and reset.

A user hands the library an env in one of three forms:

* a ``gymnasium.Env`` instance the application built itself (any constructor arguments);
* a registered id such as ``"CartPole-v1"``;
* a zero-argument factory (``lambda: MyEnv(model, cfg)``) that returns a fresh instance;
* a vector env the user built: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` / ``gym.make_vec``,
  or an EnvPool env (``envpool.make(id, env_type="gymnasium", num_envs=8)``).

:func:`as_env_source` turns any of them into an :class:`EnvSource`. Spaces are read without
stepping: an application's env may be slow or have side effects, so the library never calls
``reset``/``step`` on it outside training and play. :func:`check_env` runs gymnasium's full checker
when the user asks.

:class:`VecEnv` steps several envs in this process with *same-step* autoreset: when an episode
ends, the env is reset at once, the final observation is handed back separately, and the next
action is taken from the new episode's first observation. Agents never see gymnasium's
next-step autoreset rules.

:class:`VectorEnvAdapter` gives a user's vector env the same interface and the same same-step
autoreset, whatever its own autoreset mode (gymnasium's next-step, same-step or disabled, and
EnvPool's next-step): the autoreset rules live here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .actions import env_action_converter
from .atari import GAME_END_KEY, training_wrapper
from .composite import ActionLayout, is_composite
from .masks import MaskReader, check_masks, strip_mask_obs, strip_mask_space

__all__ = [
    "EnvMethodError",
    "EnvOutputError",
    "EnvSource",
    "MinAtarFrames",
    "ObservationCodec",
    "SUCCESS_KEY",
    "VecEnv",
    "as_env_source",
    "byte_columns",
    "call_env_method",
    "check_env",
    "checked_reset",
    "checked_step",
    "describe_space",
    "is_atari_id",
    "is_image_space",
    "is_minatar_id",
    "is_vector_env",
    "make_env",
]

EnvLike = gym.Env | str | Callable[[], gym.Env]


def describe_space(space: spaces.Space) -> str:
    """A short human description of a space, used in error messages and metadata."""
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, spaces.Box):
        return f"Box(shape={space.shape}, dtype={space.dtype})"
    return repr(space)


def _registered_ids() -> list[str]:
    return sorted(gym.registry.keys())


def _unknown_id_error(env_id: str) -> ValueError:
    close = difflib.get_close_matches(env_id, _registered_ids(), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return ValueError(
        f"unknown environment id {env_id!r}.{hint} Pass a registered gymnasium id, "
        "a gymnasium.Env instance, or a zero-argument function that returns one."
    )


# -- Atari and MinAtar ids ------------------------------------------------------------------------


def is_atari_id(env_id: str) -> bool:
    """True for an Atari id of ``ale-py`` (``"ALE/Breakout-v5"``, ``"BreakoutNoFrameskip-v4"``)."""
    return env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4")


def is_minatar_id(env_id: str) -> bool:
    """True for a MinAtar id (``"MinAtar/Breakout-v1"``): 10x10 images, the CPU-sized Atari."""
    return env_id.startswith("MinAtar/")


def _register_image_envs(env_id: str) -> None:
    """Register ale-py's or MinAtar's ids with gymnasium when one is asked for (imported lazily)."""
    if env_id in gym.registry:
        return
    if is_atari_id(env_id):
        try:
            import ale_py
        except ImportError:
            raise ValueError(
                f"{env_id!r} is an Atari game: install ale-py (pip install 'rl-workbench[atari]'; its ROMs ship in it)"
            ) from None
        gym.register_envs(ale_py)
    elif is_minatar_id(env_id):
        import logging

        logging.disable(logging.WARNING)  # MinAtar warns on import that it cannot render without seaborn
        try:
            from minatar.gym import register_envs
        except ImportError:
            raise ValueError(f"{env_id!r} is a MinAtar game: pip install minatar") from None
        finally:
            logging.disable(logging.NOTSET)
        register_envs()


class MinAtarFrames(gym.ObservationWrapper):
    """MinAtar's boolean ``(10, 10, channels)`` state as a ``uint8`` image (0 or 255), so the image
    encoders take it (channels last, a small CNN)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        shape = env.observation_space.shape
        self.observation_space = spaces.Box(0, 255, shape=shape, dtype=np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        """0/1 cells to 0/255 pixels."""
        return np.asarray(observation, dtype=np.uint8) * np.uint8(255)

    def render(self) -> Any:
        """An RGB frame (each channel its colour, cells 16 pixels wide) for ``render_mode="rgb_array"``,
        without MinAtar's own renderer (which needs seaborn)."""
        if self.render_mode != "rgb_array":
            return self.env.render()
        game: Any = self.env.unwrapped.game  # type: ignore[attr-defined]  # MinAtar's env
        state = np.asarray(game.state(), dtype=np.bool_)
        palette = np.array(
            [
                [230, 60, 60],
                [60, 200, 90],
                [70, 120, 240],
                [240, 200, 60],
                [200, 80, 220],
                [60, 210, 210],
                [250, 140, 40],
                [170, 170, 170],
                [255, 255, 255],
                [120, 80, 40],
            ],
            dtype=np.uint8,
        )
        rgb = np.zeros((*state.shape[:2], 3), dtype=np.uint8)
        for c in range(state.shape[2]):
            rgb[state[:, :, c]] = palette[c % len(palette)]
        return np.kron(rgb, np.ones((16, 16, 1), dtype=np.uint8))


def make_env(
    env_id: str,
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    frame_stack: int = 4,
    fire_reset: bool | None = None,
    episodic_life: bool = True,
    clip_rewards: bool = True,
    **kwargs: Any,
) -> gym.Env:
    """``gym.make(env_id)``, with the standard image preprocessing for Atari and MinAtar ids.

    Atari (``"ALE/Breakout-v5"``, ``"BreakoutNoFrameskip-v4"``), as Stable-Baselines3's
    ``AtariWrapper`` for the rl-zoo's presets: the game without frame skipping, then gymnasium's
    ``AtariPreprocessing`` (up to ``noop_max`` no-ops at reset, ``frame_skip`` frames with the last
    two max-pooled, ``screen_size`` square grayscale), :class:`workbench.envs.atari.AtariTraining`
    (``episodic_life``: a lost life ends the training episode, not the game; ``clip_rewards``: the
    agent learns from the rewards' signs; ``episode_reward`` still records each whole game's raw
    score, and play and evaluation see whole games with raw rewards), :class:`workbench.envs.atari.FireReset`
    (``fire_reset``; None: for the games whose action 1 is FIRE) and ``FrameStackObservation`` of
    ``frame_stack`` (0 or 1: no stack): ``uint8`` observations ``(4, 84, 84)``, channels first.
    For ``ALE/*-v5`` ids the sticky actions (repeat probability 0.25) stay. The options apply to
    Atari ids only. MinAtar ids give ``uint8`` images ``(10, 10, channels)`` (:class:`MinAtarFrames`).
    """
    _register_image_envs(env_id)
    if is_atari_id(env_id):
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        from .atari import AtariTraining, FireReset, needs_fire

        env = gym.make(env_id, frameskip=1, **kwargs)
        env = AtariPreprocessing(
            env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size, grayscale_obs=True
        )
        if episodic_life or clip_rewards:
            env = AtariTraining(env, episodic_life=episodic_life, clip_rewards=clip_rewards)
        if fire_reset or (fire_reset is None and needs_fire(env)):
            env = FireReset(env)
        return FrameStackObservation(env, frame_stack) if frame_stack > 1 else env
    if is_minatar_id(env_id):
        return MinAtarFrames(gym.make(env_id, **kwargs))
    return gym.make(env_id, **kwargs)


@dataclass
class EnvSource:
    """Where envs come from: one user-built instance, a user-built vector env, or a way to build
    fresh copies.

    ``instance`` is set when the user passed an env object; ``vector`` when they passed a vector
    env (gymnasium ``VectorEnv`` or EnvPool: it steps its own ``num_envs`` envs); ``factory`` when
    copies can be made (a registered id or a zero-argument function). ``name`` is for messages and
    metadata. A vector source reports the *single* env's spaces, so agents see ordinary spaces.
    """

    name: str
    instance: gym.Env | None = None
    factory: Callable[[], gym.Env] | None = None
    env_id: str | None = None
    vector: Any = None
    parallel: Any = None  # a PettingZoo ParallelEnv: one slot per agent (workbench.envs.multiagent)
    _probed: bool = dataclasses.field(default=False, repr=False, compare=False)  # find_parallel() looked
    _probed_spaces: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def can_copy(self) -> bool:
        """True when fresh copies can be built (an id or a factory)."""
        return self.factory is not None

    @property
    def num_envs(self) -> int | None:
        """The vector env's number of envs, a ParallelEnv's number of agents (None for other sources:
        the agent's ``n_envs`` decides)."""
        if self.parallel is not None:
            return len(self.parallel.possible_agents)
        return None if self.vector is None else int(self.vector.num_envs)

    def make(self, **kwargs: Any) -> gym.Env:
        """A fresh env from the id or factory (``kwargs`` go to ``gym.make`` for ids)."""
        if self.env_id is not None:  # first: a Ray worker receives the id alone, not the factory
            return make_env(self.env_id, **kwargs)
        if self.parallel is not None:
            raise ValueError(
                f"the PettingZoo ParallelEnv {self.name} cannot be copied into a single-agent env: play it with "
                "agent.play(parallel_env) and evaluate with Session(..., eval_env=another_parallel_env)"
            )
        if self.vector is not None:
            raise ValueError(
                f"the vector env {self.name} steps its own {self.num_envs} envs and cannot be copied into one env: "
                "play and evaluate on a single env instead (agent.play(gym.make(...)), Session(..., eval_env=...))"
            )
        if self.factory is None:
            raise ValueError(
                f"cannot build another copy of the env instance {self.name}: pass a registered id "
                "or a zero-argument factory such as `lambda: MyEnv(...)` instead"
            )
        env = self.factory()
        if not isinstance(env, gym.Env):
            raise TypeError(
                f"the env factory {self.name} returned {type(env).__name__}, not a gymnasium.Env; "
                "it must take no arguments and return a new env instance"
            )
        return env

    def spaces(self) -> tuple[spaces.Space, spaces.Space]:
        """``(observation_space, action_space)`` without resetting or stepping anything (a vector
        env's single-env spaces).

        For a factory this builds one instance (building does not step it) and closes it.
        """
        if self.vector is not None:
            return _single_spaces(self.vector)
        if self.parallel is not None:
            from .multiagent import parallel_spaces

            return parallel_spaces(self.parallel)[:2]
        if self.instance is not None:
            return self.instance.observation_space, self.instance.action_space
        if self._probed_spaces is not None:
            return self._probed_spaces
        if self.env_id is None and self.factory is not None:
            env = self.factory()
            from .multiagent import is_parallel_env, parallel_spaces

            if not isinstance(env, gym.Env) and is_parallel_env(env):
                # A factory of PettingZoo ParallelEnvs (for workers): the copy built here stays as the source's
                # probe, for the spaces, the agents and play; workers build their own copies.
                self.parallel = env
                return parallel_spaces(env)[:2]
            if not isinstance(env, gym.Env):
                raise TypeError(
                    f"the env factory {self.name} returned {type(env).__name__}, not a gymnasium.Env; "
                    "it must take no arguments and return a new env instance"
                )
        else:
            env = self.make()
        try:
            return env.observation_space, env.action_space
        finally:
            try:
                env.close()
            except Exception as exc:  # the spaces are read; a failing close is the env's to fix, not fatal here
                warnings.warn(
                    f"the env built by {self.name} to read its spaces raised in close() ({type(exc).__name__}: "
                    f"{exc}); ignored",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def find_parallel(self) -> Any:
        """The source's PettingZoo ParallelEnv, if it has one: for a factory, one copy is built (as
        :meth:`spaces` does) to see whether it returns a ParallelEnv, once per source. None otherwise."""
        if self.parallel is None and self.factory is not None and self.env_id is None and not self._probed:
            self._probed = True
            self._probed_spaces = self.spaces()  # a single-agent factory is not built again for its spaces
        return self.parallel

    def fit_hyperparameters(self, hyperparameters: dict[str, Any], config: Any, owner: str) -> dict[str, Any]:
        """An agent's hyperparameters with ``n_envs`` taken from a vector env (when its ``config``
        dataclass has that field and it was not given); a given ``n_envs`` that differs from the
        vector env's ``num_envs`` is a ``ValueError``. Other sources: ``hyperparameters`` unchanged."""
        n = self.num_envs
        if n is None or "n_envs" not in {f.name for f in dataclasses.fields(config)}:
            return hyperparameters
        given = hyperparameters.get("n_envs")
        if given is not None and given != n:
            raise ValueError(
                f"{owner} got n_envs={given!r}, but the vector env {self.name} steps {n} envs: "
                f"leave n_envs out (it is taken from the vector env) or pass n_envs={n}"
            )
        return {**hyperparameters, "n_envs": n}


def is_vector_env(env: Any) -> bool:
    """True for a vector env: a gymnasium ``VectorEnv`` (``SyncVectorEnv``, ``AsyncVectorEnv``,
    ``gym.make_vec``, a vector wrapper) or an EnvPool env (its gymnasium or gym API)."""
    if isinstance(env, gym.vector.VectorEnv):
        return True
    return _is_envpool(env)


def _is_envpool(env: Any) -> bool:
    return any(c.__module__.startswith("envpool") for c in type(env).__mro__) and hasattr(env, "num_envs")


def _single_spaces(venv: Any) -> tuple[spaces.Space, spaces.Space]:
    """A vector env's spaces of one env (EnvPool before 1.0 calls them ``observation_space``)."""
    obs = getattr(venv, "single_observation_space", None)
    act = getattr(venv, "single_action_space", None)
    if obs is None or act is None:
        obs, act = venv.observation_space, venv.action_space
    return obs, act


def _vector_name(venv: Any) -> str:
    spec = getattr(venv, "spec", None)
    env_id = getattr(spec, "id", None)
    kind = type(venv).__name__
    return f"{kind}({env_id!r}, num_envs={venv.num_envs})" if env_id else f"{kind}(num_envs={venv.num_envs})"


def as_env_source(env: Any) -> EnvSource:
    """Accept an env instance, a registered id, a zero-argument factory or a vector env
    (gymnasium ``VectorEnv``, EnvPool); reject anything else."""
    if isinstance(env, EnvSource):
        return env
    if is_vector_env(env):
        return EnvSource(name=_vector_name(env), vector=env)
    from .multiagent import check_parallel_env, is_aec_env, is_parallel_env

    if is_aec_env(env) or (not isinstance(env, gym.Env) and is_parallel_env(env)):
        check_parallel_env(env)  # an AEC env: says how to convert it
        return EnvSource(name=type(getattr(env, "unwrapped", env)).__name__, parallel=env)
    if isinstance(env, gym.Env):
        spec = getattr(env, "spec", None)
        name = spec.id if spec is not None and spec.id else type(env.unwrapped).__name__
        return EnvSource(name=name, instance=env)
    if isinstance(env, str):
        if is_atari_id(env) or is_minatar_id(env):
            _register_image_envs(env)
        if env not in gym.registry:
            raise _unknown_id_error(env)
        return EnvSource(name=env, factory=lambda: make_env(env), env_id=env)
    if isinstance(env, type) and issubclass(env, gym.Env):
        return EnvSource(name=env.__name__, factory=env)
    if callable(env):
        name = getattr(env, "__qualname__", None) or type(env).__name__
        return EnvSource(name=name, factory=env)
    raise TypeError(
        f"expected a gymnasium.Env instance, a registered id string, a zero-argument factory or a vector env "
        f"(gymnasium VectorEnv, EnvPool), got {type(env).__name__}: {env!r}"
    )


def check_env(env: Any, *, skip_render_check: bool = True) -> None:
    """Run gymnasium's full environment checker (it resets and steps the env).

    The library never does this on its own, since stepping an application's env may be slow or
    have side effects; call it when you want the check. Raises what the checker raises.

    A composite (Dict / Tuple) action space is checked for leaves the agents' heads fit, and the mask its
    first state offers, if any, for mirroring the space (``workbench.envs.composite``): a ``ValueError``
    naming the leaf otherwise.
    """
    from gymnasium.utils.env_checker import check_env as gym_check_env

    source = as_env_source(env)
    instance = source.instance if source.instance is not None else source.make()
    gym_check_env(instance.unwrapped, skip_render_check=skip_render_check)
    if is_composite(instance.action_space):
        ActionLayout(instance.action_space)  # a leaf no head fits is named here
        result = instance.reset(seed=0)
        MaskReader(instance, instance.action_space).read(
            _unpack_reset(result, "env.reset"), result[1]
        )  # a per-head mask that does not fit


# -- observations ----------------------------------------------------------------------------


def is_image_space(space: spaces.Space) -> bool:
    """Stable-Baselines3's rule for an image: a Box of ``uint8`` with three dimensions and bounds 0
    and 255 (any number of channels, first or last, so frame stacks count)."""
    return (
        isinstance(space, spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def _parts(space: spaces.Space) -> list[spaces.Space]:
    if isinstance(space, spaces.Dict):
        return list(space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return list(space.spaces)
    return [space]


def _keeps_uint8(space: spaces.Space) -> bool:
    """True when observations of ``space`` travel as ``uint8``: an image, or a Dict/Tuple of
    ``uint8`` Boxes with at least one image (an encoder then casts them; vectors go to an MLP as float32)."""
    parts = _parts(space)
    return (
        bool(parts)
        and all(isinstance(p, spaces.Box) and p.dtype == np.uint8 for p in parts)
        and any(is_image_space(p) for p in parts)
    )


def flat_observation_space(space: spaces.Space) -> spaces.Box:
    """The Box that observations of ``space`` become: Box as it is (shape kept), Discrete one-hot,
    Dict/Tuple flattened with ``gymnasium.spaces.flatten`` (a Dict's ``"action_mask"`` key left out:
    masks are applied to the actions, never fed to the networks). The dtype is ``uint8`` for an image
    (or a Dict of uint8 parts with an image): frames stay 1 byte a pixel in memory and on the way to
    the network's encoder; else float32."""
    space = strip_mask_space(space)
    dtype = np.uint8 if _keeps_uint8(space) else np.float32
    if isinstance(space, spaces.Box):
        return spaces.Box(low=space.low.astype(dtype), high=space.high.astype(dtype), dtype=dtype)
    if isinstance(space, spaces.Discrete | spaces.MultiBinary | spaces.MultiDiscrete):
        flat: Any = spaces.flatten_space(space)  # a Box for these spaces
        return spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)
    if isinstance(space, spaces.Dict | spaces.Tuple):
        flat = spaces.flatten_space(space)
        if not isinstance(flat, spaces.Box):
            raise ValueError(f"cannot flatten observation space {space} into a vector")
        return spaces.Box(flat.low.astype(dtype), flat.high.astype(dtype), dtype=dtype)
    raise ValueError(
        f"unsupported observation space {describe_space(space)}: use Box, Discrete, "
        "MultiBinary, MultiDiscrete, or a Dict/Tuple of those"
    )


def byte_columns(space: spaces.Space) -> np.ndarray | None:
    """The columns of :func:`flat_observation_space`'s float32 rows that hold ``uint8`` Box parts of a
    Dict/Tuple that mixes them with other parts (an image beside a float vector), so those columns can
    be stored and sent as one byte each, the rest as float32 (:class:`ObservationCodec`, replay memory,
    datasets); None when every column has one dtype (a Box, an image-only Dict: uint8 already)."""
    space = strip_mask_space(space)
    if not isinstance(space, spaces.Dict | spaces.Tuple) or _keeps_uint8(space):
        return None
    columns: list[np.ndarray] = []
    at = 0

    def walk(part: spaces.Space) -> None:
        nonlocal at
        if isinstance(part, spaces.Dict | spaces.Tuple):
            for sub in _parts(part):
                walk(sub)
            return
        width = int(spaces.flatdim(part))
        if isinstance(part, spaces.Box) and part.dtype == np.uint8:
            columns.append(np.arange(at, at + width))
        at += width

    walk(space)
    if not columns:
        return None
    return np.concatenate(columns).astype(np.int64)


def _columns_index(columns: np.ndarray) -> slice | np.ndarray:
    """A slice for a run of consecutive columns, else the index array itself."""
    if len(columns) and int(columns[-1]) - int(columns[0]) == len(columns) - 1:
        return slice(int(columns[0]), int(columns[-1]) + 1)
    return columns


class ObservationCodec:
    """Rows of flat observations of ``space`` as bytes, every column in its own dtype: a uint8 frame
    as one byte a pixel, a Dict's uint8 columns (:func:`byte_columns`) as bytes and the rest as float32.
    Local and Ray workers send their observations with it (``workbench/parallel/_worker.py``)."""

    def __init__(self, space: spaces.Space) -> None:
        flat = flat_observation_space(space)
        self.shape: tuple[int, ...] = tuple(flat.shape)
        self.dtype = np.dtype(flat.dtype)
        self.size = int(np.prod(self.shape))
        self.byte_columns = byte_columns(space)
        if self.byte_columns is None:
            self.float_columns = None
            self.row_bytes = self.size * self.dtype.itemsize
        else:
            keep = np.ones(self.size, dtype=bool)
            keep[self.byte_columns] = False
            self.float_columns = np.flatnonzero(keep)
            self.row_bytes = len(self.byte_columns) + 4 * len(self.float_columns)
            # A run of consecutive columns (one frame key) is a slice: a view, no index array to gather by.
            self._b, self._f = _columns_index(self.byte_columns), _columns_index(self.float_columns)

    def encode(self, rows: np.ndarray) -> bytes:
        """``rows`` (``(k, *shape)``) as bytes."""
        if self.byte_columns is None:
            return np.ascontiguousarray(rows, dtype=self.dtype).tobytes()
        flat = np.asarray(rows).reshape(len(rows), -1)
        return (
            np.ascontiguousarray(flat[:, self._b], dtype=np.uint8).tobytes()
            + np.ascontiguousarray(flat[:, self._f], dtype=np.float32).tobytes()
        )

    def encode_into(self, rows: np.ndarray, buffer: Any, offset: int) -> None:
        """Write :meth:`encode`'s bytes of ``rows`` at ``offset`` of the writable ``buffer`` (a shared
        memory block), without an intermediate copy when every column has the observation's dtype."""
        if self.byte_columns is None:
            count = int(np.prod(np.shape(rows)))
            view = np.frombuffer(buffer, dtype=self.dtype, count=count, offset=offset)
            view.reshape(np.shape(rows))[...] = rows
            return
        data = self.encode(rows)
        buffer[offset : offset + len(data)] = data

    def decode(self, buffer: Any, offset: int, k: int) -> np.ndarray:
        """``k`` rows encoded at ``offset`` of ``buffer``, as an array of ``(k, *shape)`` and the flat dtype."""
        if self.byte_columns is None:
            return np.frombuffer(buffer, dtype=self.dtype, count=k * self.size, offset=offset).reshape(k, *self.shape)
        nb = len(self.byte_columns)
        out = np.empty((k, self.size), dtype=self.dtype)
        out[:, self._b] = np.frombuffer(buffer, dtype=np.uint8, count=k * nb, offset=offset).reshape(k, nb)
        nf = self.size - nb
        floats = np.frombuffer(buffer, dtype=np.float32, count=k * nf, offset=offset + k * nb)
        out[:, self._f] = floats.reshape(k, nf)
        return out.reshape(k, *self.shape)


def observation_flattener(space: spaces.Space) -> Callable[[Any], np.ndarray]:
    """A function turning one raw observation of ``space`` into the array of
    :func:`flat_observation_space` (its dtype: uint8 for images, else float32)."""
    dtype = flat_observation_space(space).dtype
    if isinstance(space, spaces.Box):
        return lambda obs: np.asarray(obs, dtype=dtype)
    stripped = strip_mask_space(space)
    if stripped is not space:
        return lambda obs: np.asarray(spaces.flatten(stripped, strip_mask_obs(obs)), dtype=dtype)
    return lambda obs: np.asarray(spaces.flatten(space, obs), dtype=dtype)


# -- what an env returns ---------------------------------------------------------------------


class EnvOutputError(ValueError):
    """An env returned something training cannot use. The message names the env method
    (``env.step`` / ``env.reset``), the step, the field and the bad value."""


# The types a well-behaved env returns, tested by identity on the hot path; anything else goes
# through the slower checks below, which accept every number and bool-like value and refuse the rest.
SUCCESS_KEY = "is_success"
"""The info key of a goal env's success (gymnasium-robotics' convention): read when an episode ends,
it travels in the step's extras under this name, and the session records ``success_rate`` from it."""

_FAST_REWARDS = frozenset({float, int, np.float64, np.float32})
_FAST_FLAGS = frozenset({bool, np.bool_})
_GYMNASIUM_API = (
    "gymnasium's API is reset() -> (obs, info) and step(action) -> (obs, reward: float, "
    "terminated: bool, truncated: bool, info)"
)


def _show(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    plain = isinstance(value, bool | int | float | np.number | np.bool_)
    return text if plain else f"{text} (a {type(value).__name__})"


def _as_reward(value: Any, where: str) -> float:
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_):
        return float(value)
    raise EnvOutputError(
        f"{where} returned reward {_show(value)}: a reward must be a number (int or float). "
        f"Fix the env's step(); {_GYMNASIUM_API}."
    )


def _as_flag(value: Any, name: str, where: str) -> bool:
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer) and value in (0, 1):
        return bool(value)
    raise EnvOutputError(
        f"{where} returned {name} {_show(value)}: {name} must be True or False "
        f"(a string such as 'False' would count as True). Fix the env's step(); {_GYMNASIUM_API}."
    )


def _unpack_step(result: Any, where: str) -> tuple[Any, Any, Any, Any, Any]:
    """The five values of ``env.step``, or an :class:`EnvOutputError` saying what came instead."""
    if isinstance(result, tuple | list) and len(result) == 5:
        return tuple(result)  # type: ignore[return-value]
    if isinstance(result, tuple | list) and len(result) == 4:
        raise EnvOutputError(
            f"{where} returned 4 values (obs, reward, done, info): that is the old gym API; "
            f"{_GYMNASIUM_API}. Port the env to gymnasium (split done into terminated and truncated)."
        )
    raise EnvOutputError(f"{where} returned {_show(result)}; {_GYMNASIUM_API}.")


def _unpack_reset(result: Any, where: str) -> Any:
    """The observation of ``env.reset``'s ``(obs, info)``; an old-gym bare observation is refused."""
    if isinstance(result, tuple | list) and len(result) == 2 and isinstance(result[1], dict):
        return result[0]
    raise EnvOutputError(
        f"{where} returned {_show(result)} instead of (obs, info): an old-gym reset returns the bare "
        f"observation; {_GYMNASIUM_API}. Return (obs, {{}}) from reset()."
    )


def checked_reset(result: Any, where: str) -> Any:
    """The observation from what one env's ``reset`` returned (``(obs, info)``); raises
    :class:`EnvOutputError` naming ``where`` (``"env.reset at step 0"``) for anything else."""
    return _unpack_reset(result, where)


def checked_step(result: Any, where: str) -> tuple[Any, float, bool, bool, Any]:
    """What one env's ``step`` returned, with the reward a finite float and the flags bools;
    raises :class:`EnvOutputError` naming ``where`` (``"env.step at step 12"``) and the bad field."""
    obs, reward, terminated, truncated, info = _unpack_step(result, where)
    reward = _as_reward(reward, where)
    if not math.isfinite(reward):
        raise EnvOutputError(f"{where} returned reward {reward}: fix the env so it returns finite numbers.")
    return obs, reward, _as_flag(terminated, "terminated", where), _as_flag(truncated, "truncated", where), info


# -- vector env ------------------------------------------------------------------------------


class VecEnv:
    """Several envs stepped in this process, with same-step autoreset.

    ``step(actions)`` returns ``(obs, rewards, terminated, truncated, final_obs)``; for an env
    whose episode just ended, ``obs[i]`` is already the first observation of the next episode and
    ``final_obs[i]`` is the last observation of the one that ended (elsewhere it equals ``obs``).
    Observations are arrays of shape ``(num_envs, *obs_shape)`` (uint8 for images, else float32).

    ``stepping`` is the index of the env whose ``step`` is running now (None between steps), so a
    session can say which env hangs. :meth:`rng_states` / :meth:`set_rng_states` carry every env's
    random stream (``env.np_random``) across a save and resume.

    Action masks (``workbench.envs.masks``): ``masks`` holds the mask of every env's current state
    (the next decision's), ``final_masks`` those of the states the last ``step`` reached (the
    last state of an ended episode); both are None for envs that give no masks.
    """

    stepping: int | None = None
    masks: np.ndarray | None = None
    final_masks: np.ndarray | None = None
    game_ends: np.ndarray | None = None
    successes: np.ndarray | None = None
    """``info["is_success"]`` of the episodes the last step ended (NaN elsewhere); None until an env
    has reported one, then a new array every step."""

    def __init__(self, envs: Sequence[gym.Env], *, seed: int | None = None) -> None:
        if not envs:
            raise ValueError("VecEnv needs at least one env")
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self._flatten = observation_flattener(self.observation_space)
        self._seed = seed
        self.env_action = env_action_converter(self.action_space)
        shape = flat_observation_space(self.observation_space).shape
        self._obs_shape = shape
        self._obs = np.zeros((self.num_envs, *shape), dtype=flat_observation_space(self.observation_space).dtype)
        self.step_count = 0  # steps of each env since it was built, for error messages
        self._rewards = np.zeros(self.num_envs, dtype=np.float32)
        self._terminated = np.zeros(self.num_envs, dtype=bool)
        self._truncated = np.zeros(self.num_envs, dtype=bool)
        # Each env's random stream as it was before its last reset, and whether it has stepped
        # since: a save right after an autoreset restores the stream that drew that episode.
        self._pre_reset: list[dict[str, Any] | None] = [None] * self.num_envs
        self._fresh = [False] * self.num_envs
        self._restore: list[dict[str, Any] | None] | None = None
        self._mask_readers = [MaskReader(env, self.action_space) for env in self.envs]
        # Envs that end training episodes before the game (workbench.envs.atari.AtariTraining) report
        # each whole game's raw score: (score, length) rows, NaN where no game ended this step.
        self._reports_games = any(training_wrapper(env) is not None for env in self.envs)
        if self._reports_games:
            self.game_ends = np.full((self.num_envs, 2), np.nan)

    def _read_mask(self, i: int, obs: Any, info: Any, *, final: bool = False) -> None:
        """Note env ``i``'s mask (after a reset or step) in ``masks`` or ``final_masks``."""
        mask = self._mask_readers[i].read(obs, info, final=final)
        if mask is None:
            return
        if self.masks is None:
            self.masks = np.ones((self.num_envs, len(mask)), dtype=bool)
        (self._final_masks if final else self.masks)[i] = mask

    def reset(self) -> np.ndarray:
        """Reset every env (seeded ``seed + i`` the first time, or continuing the streams given
        to :meth:`set_rng_states`) and return the observations."""
        restore, self._restore = self._restore, None
        for i, env in enumerate(self.envs):
            seed = None if self._seed is None else self._seed + i
            state = restore[i] if restore is not None and i < len(restore) else None
            if state is not None and _set_rng_state(env, state):
                seed = None
            self._pre_reset[i] = _rng_state(env)
            result = env.reset(seed=seed)
            obs = _unpack_reset(result, self._where("env.reset", i))
            if self._mask_readers[i].enabled:
                self._read_mask(i, obs, result[1])
            self._fresh[i] = seed is None
            self._obs[i] = self._flat(obs, "env.reset", i)
        self._seed = None  # later resets continue each env's own random stream
        return self._obs.copy()

    def rng_states(self) -> list[dict[str, Any] | None]:
        """Every env's random stream (its ``np_random`` generator state; None for an env without
        one), at the point an uninterrupted run would continue from: for an env that has not
        stepped since it was reset, the state that drew that reset, so a resumed run redraws it."""
        return [
            self._pre_reset[i] if self._fresh[i] and self._pre_reset[i] is not None else _rng_state(env)
            for i, env in enumerate(self.envs)
        ]

    def set_rng_states(self, states: Sequence[dict[str, Any] | None]) -> None:
        """Continue these streams (from :meth:`rng_states`) at the next :meth:`reset` instead of
        seeding; envs without a state (None, or beyond the list) are seeded as usual."""
        self._restore = list(states)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every env once; see the class docstring for the returned arrays."""
        obs, rewards = self._obs, self._rewards
        terminated, truncated = self._terminated, self._truncated
        if self.masks is not None:
            # New arrays every step: the last ones travel on in the step's extras.
            self.masks = self.masks.copy()
            self._final_masks = np.ones_like(self.masks)
        finals: list[tuple[int, np.ndarray]] = []
        games = self._reports_games
        if games:
            self.game_ends = np.full((self.num_envs, 2), np.nan)  # a new array: it travels in the extras
        fresh = self._fresh
        self.step_count += 1
        if self.successes is not None:
            self.successes = np.full(self.num_envs, np.nan)  # a new array: it travels in the extras
        for i, env in enumerate(self.envs):
            self.stepping = i
            result = env.step(self.env_action(actions[i]))
            if type(result) is not tuple or len(result) != 5:
                result = _unpack_step(result, self._where("env.step", i))
            o, r, term, trunc, info = result
            if type(r) not in _FAST_REWARDS or type(term) not in _FAST_FLAGS or type(trunc) not in _FAST_FLAGS:
                where = self._where("env.step", i)
                r = _as_reward(r, where)
                term, trunc = _as_flag(term, "terminated", where), _as_flag(trunc, "truncated", where)
            rewards[i] = r
            terminated[i] = term
            truncated[i] = trunc
            masked = self.masks is not None
            if masked:
                self._read_mask(i, o, info, final=True)
            if games and GAME_END_KEY in info:
                self.game_ends[i] = info[GAME_END_KEY]  # type: ignore[index]
            if term or trunc:
                if isinstance(info, dict) and SUCCESS_KEY in info:  # a goal env's success, read when its episode ends
                    if self.successes is None:
                        self.successes = np.full(self.num_envs, np.nan)
                    self.successes[i] = float(bool(info[SUCCESS_KEY]))
                finals.append((i, self._flat(o, "env.step", i)))
                self._pre_reset[i] = _rng_state(env)
                reset = env.reset()
                o = _unpack_reset(reset, self._where("env.reset", i))
                if masked:
                    self._read_mask(i, o, reset[1])
                fresh[i] = True
                obs[i] = self._flat(o, "env.reset", i)
            else:
                fresh[i] = False
                obs[i] = self._flat(o, "env.step", i)
                if masked:
                    self.masks[i] = self._final_masks[i]  # type: ignore[index]  # masked: masks is an array
        self.stepping = None
        if self.masks is not None:
            self.final_masks = self._final_masks
            check_masks(self.masks, self.action_space, f"the env's action mask at step {self.step_count}")
        next_obs = obs.copy()
        final_obs = next_obs
        if finals:
            final_obs = next_obs.copy()
            for i, o in finals:
                final_obs[i] = o
        return next_obs, rewards.copy(), terminated.copy(), truncated.copy(), final_obs

    def _where(self, method: str, i: int) -> str:
        which = f" (env {i} of {self.num_envs})" if self.num_envs > 1 else ""
        return f"{method} at step {self.step_count}{which}"

    def _flat(self, obs: Any, method: str, i: int) -> np.ndarray:
        """One observation as the float32 array the agents read (:func:`checked_observation`)."""
        return checked_observation(self._flatten, obs, self._obs_shape, self.observation_space, self._where, method, i)

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()

    def call(self, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Call method ``name`` on every env, in order; the list of results (see :func:`call_env_method`)."""
        return [call_env_method(env, name, args, kwargs) for env in self.envs]


def checked_observation(
    flatten: Callable[[Any], np.ndarray],
    obs: Any,
    shape: tuple[int, ...],
    space: spaces.Space,
    where: Callable[[str, int], str],
    method: str,
    i: int,
) -> np.ndarray:
    """``flatten(obs)``, the float32 row the agents read; an :class:`EnvOutputError` saying
    ``where(method, i)`` (method, step, env; built only on an error: this runs for every env step) when
    the observation is missing or does not fit ``space``. Written once for the library's own
    :class:`VecEnv` and a user's vector env (``workbench.envs.vector``)."""
    try:
        flat = flatten(obs)
    except Exception as exc:
        raise _bad_observation(obs, space, where(method, i), f" ({type(exc).__name__}: {exc})") from exc
    if obs is None or flat.shape != shape:
        raise _bad_observation(obs, space, where(method, i), "")
    return flat


def _bad_observation(obs: Any, space: spaces.Space, where: str, why: str) -> EnvOutputError:
    shape = getattr(obs, "shape", None)
    got = f"an observation of shape {shape}" if shape is not None else f"observation {_show(obs)}"
    return EnvOutputError(
        f"{where} returned {got}{why}, which does not fit the observation space {describe_space(space)}: "
        "return observations of that space from reset() and step()."
    )


class EnvMethodError(AttributeError):
    """``session.call_env(name)`` named a method the env does not have (the message names the env class)."""


def call_env_method(env: Any, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> Any:
    """``env.name(*args, **kwargs)``, looking through gymnasium wrappers (``gym.make`` wraps the
    env, and wrappers do not forward attributes): the outermost object that has ``name`` answers.
    Raises :class:`EnvMethodError` naming the env's class when none has a callable ``name``;
    an exception the method raises propagates unchanged."""
    if name.startswith("_"):
        raise EnvMethodError(f"call_env calls public env methods only, not {name!r}")
    target, method = env, None
    while target is not None:
        if hasattr(type(target), name) or name in getattr(target, "__dict__", {}):
            method = getattr(target, name)
            break
        target = getattr(target, "env", None) if isinstance(target, gym.Wrapper) else None
    if method is None or not callable(method):
        inner = getattr(env, "unwrapped", env)
        what = "no method" if method is None else "an attribute, not a method,"
        raise EnvMethodError(
            f"the env {type(inner).__name__} has {what} {name!r}: define {name}(self, ...) on the env class "
            f"(call_env calls it on every env copy, through gymnasium's wrappers)"
        )
    return method(*args, **(kwargs or {}))


def _rng_state(env: gym.Env) -> dict[str, Any] | None:
    """The state of ``env``'s random generator, or None when it has none yet (reading
    ``env.np_random`` would create one, changing the env, so the attribute behind it is read)."""
    generator = getattr(env.unwrapped, "_np_random", None)
    if not isinstance(generator, np.random.Generator):
        return None
    return dict(generator.bit_generator.state)


def _set_rng_state(env: gym.Env, state: dict[str, Any]) -> bool:
    """Give ``env`` a generator in ``state``; False when the state is not one numpy can rebuild."""
    try:
        bit_generator = getattr(np.random, state["bit_generator"])()
        bit_generator.state = state
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    env.unwrapped.np_random = np.random.Generator(bit_generator)
    return True
