"""Logged transitions on disk: what offline agents learn from and off-policy evaluation reads.

A :class:`Dataset` holds episodes of transitions as flat arrays, one row per step, episodes one
after the other (an episode ends at a row whose ``terminated`` or ``truncated`` is set)::

    ds = wb.Dataset.load("data/cartpole")                       # written by Session(record=...)
    ds = wb.Dataset.from_arrays(observations=obs, actions=act, rewards=rew, terminated=term)
    ds = wb.Dataset.from_csv("app_log.csv", observations=["x", "v"], action="action",
                             reward="reward", episode="episode_id")
    ds = wb.Dataset.from_minari("cartpole/expert-v0")           # Minari's local store, no download
    train, held_out = ds.split(0.1, seed=0)                      # by whole episodes

``log_probs`` (optional) is the behaviour policy's log-probability of each taken action (for Box actions
its log-density, which can be positive), which the importance-sampling estimators of
``workbench.offline.ope`` need. On disk a dataset is a directory with ``dataset.json`` (spaces, counts,
format version) and ``arrays.npz`` written with ``allow_pickle=False``: opening someone else's dataset
cannot run their code.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from ..checkpoint import (
    MAX_META_BYTES,
    CheckpointError,
    FieldChecks,
    check_space,
    read_json,
    read_npz,
    space_to_json,
    write_npz,
)
from ..envs.columns import join_columns, split_columns
from ..envs.composite import composite_layout
from ..envs.core import byte_columns
from ..files import check_replaceable, write_text

__all__ = ["DATASET_FORMAT", "Dataset", "DatasetError"]

DATASET_FORMAT = "workbench-dataset"
_VERSION = 1
_FIELDS = ("observations", "actions", "rewards", "next_observations", "terminated", "truncated")
_KIND = "a file of a workbench dataset"


def _is_our_meta(path: str) -> bool:
    """Whether ``path`` is a regular file holding a ``dataset.json`` this module wrote."""
    try:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > MAX_META_BYTES:
            return False
        meta = read_json(path, path, MAX_META_BYTES)
    except (OSError, CheckpointError):
        return False
    return isinstance(meta, dict) and meta.get("format") == DATASET_FORMAT


def _is_npz(path: str) -> bool:
    """Whether ``path`` holds a zip archive (what ``np.savez`` writes) in a folder whose dataset.json is ours."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head == b"PK\x03\x04" and _is_our_meta(os.path.join(os.path.dirname(path), "dataset.json"))


class DatasetError(ValueError):
    """A dataset that cannot be used: a missing field, mismatched lengths, NaN, a bad file."""


def _numeric(source: str, name: str, value: Any) -> np.ndarray:
    """``value`` as a numeric (bool, integer or float) array, or a :class:`DatasetError` naming
    ``name``: ragged rows, text, or objects that are not numbers."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # numpy >= 1.24 refuses ragged nested sequences
        raise DatasetError(
            f"{source}: {name!r} is ragged (its rows have different lengths or nest differently): pass one row "
            "per step, every row of the same shape"
        ) from None
    if arr.dtype.kind == "O":  # e.g. a pandas column of dtype object: numbers are fine, anything else is not
        flat = arr.reshape(-1)
        missing = [i for i, v in enumerate(flat) if v is None]
        if missing:
            row = missing[0] // max(1, flat.size // max(1, len(arr))) if arr.ndim else 0
            raise DatasetError(
                f"{source}: {name!r} row {row} is None, not a number: fill in the missing values or leave those "
                "steps out"
            )
        try:
            arr = np.array(arr.tolist())  # integers stay integers (actions of a Discrete space)
            if arr.dtype.kind not in "biuf":
                arr = arr.astype(np.float64)
        except (ValueError, TypeError):
            raise DatasetError(
                f"{source}: {name!r} holds values that are not numbers (None, text or rows of different "
                "lengths): pass numbers, one row per step, every row of the same shape"
            ) from None
    if arr.dtype.kind not in "biuf":
        what = "text" if arr.dtype.kind in "USa" else f"values of dtype {arr.dtype}"
        raise DatasetError(
            f"{source}: {name!r} holds {what}, not numbers: convert it first (e.g. encode text labels as "
            "integers, parse numbers written as text)"
        )
    return arr


def _observation_rows(arr: np.ndarray) -> np.ndarray:
    """Observations in their own dtype where it is ``uint8`` (frames stay one byte a pixel), else float32."""
    return arr if arr.dtype == np.uint8 else arr.astype(np.float32)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])


def _infer_observation_space(obs: np.ndarray) -> spaces.Box:
    return spaces.Box(-np.inf, np.inf, shape=obs.shape[1:], dtype=np.float32)


def _action_columns(space: spaces.Space) -> dict[str, list[int]]:
    """Where each leaf of a composite action space sits in the saved action rows: ``[start, stop)``."""
    layout = composite_layout(space)
    return {} if layout is None else {leaf.path: [leaf.start, leaf.stop] for leaf in layout.leaves}


def _infer_action_space(actions: np.ndarray) -> spaces.Space:
    if actions.dtype.kind in "iub" and actions.ndim == 1:
        return spaces.Discrete(int(actions.max()) + 1 if len(actions) else 1)
    lo = actions.min(axis=0) if len(actions) else -np.ones(actions.shape[1:])
    hi = actions.max(axis=0) if len(actions) else np.ones(actions.shape[1:])
    return spaces.Box(lo.astype(np.float32), hi.astype(np.float32), dtype=np.float32)


class Dataset:
    """Episodes of logged transitions (see the module docstring); build one with
    :meth:`from_arrays`, :meth:`from_csv`, :meth:`from_minari`, :meth:`load` or by recording a
    session (``wb.Session(agent, env, record="data/run")``).

    Attributes are numpy arrays with one row per step: ``observations``, ``actions``, ``rewards``,
    ``next_observations``, ``terminated``, ``truncated`` and ``log_probs`` (None when the
    behaviour policy's probabilities are unknown); plus ``observation_space``, ``action_space``
    and ``metadata`` (a JSON-ready dict).
    """

    def __init__(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        log_probs: np.ndarray | None = None,
        *,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        metadata: dict[str, Any] | None = None,
        source: str = "Dataset",
    ) -> None:
        arrays = {
            "observations": observations,
            "actions": actions,
            "rewards": rewards,
            "next_observations": next_observations,
            "terminated": terminated,
            "truncated": truncated,
        }
        for name, value in arrays.items():
            if value is None:
                raise DatasetError(f"{source}: the field {name!r} is missing")
        arrays = {name: _numeric(source, name, value) for name, value in arrays.items()}
        if log_probs is not None:
            log_probs = _numeric(source, "log_probs", log_probs)
        obs = _observation_rows(arrays["observations"])
        if obs.ndim == 0:
            raise DatasetError(f"{source}: 'observations' is a single number; pass one row per step")
        if obs.ndim == 1:
            obs = obs[:, None]
        n = len(obs)
        next_obs = _observation_rows(arrays["next_observations"])
        if obs.dtype != next_obs.dtype:  # one of them not uint8: both as float32
            obs, next_obs = obs.astype(np.float32), next_obs.astype(np.float32)
        if next_obs.ndim == 1:
            next_obs = next_obs[:, None]
        act = arrays["actions"]
        rewards, terminated, truncated = arrays["rewards"], arrays["terminated"], arrays["truncated"]
        if act.ndim == 1 and act.dtype.kind == "f" and not isinstance(action_space, spaces.Discrete):
            act = act[:, None]  # one number per step: a one-dimensional Box action
        if action_space is None:
            action_space = _infer_action_space(act)
        if isinstance(action_space, spaces.Discrete):
            if act.dtype.kind == "f" and len(act) and not np.all(act == np.round(act)):
                raise DatasetError(f"{source}: 'actions' holds fractional numbers, but the action space is Discrete")
            act = act.reshape(n) if act.size == n else act
            act = act.astype(np.int64)
        else:
            act = act.astype(np.float32)
            if act.ndim == 1:
                act = act[:, None]
        arrays = {
            "observations": obs,
            "actions": act,
            "rewards": np.asarray(rewards, dtype=np.float32).reshape(-1),
            "next_observations": next_obs,
            "terminated": np.asarray(terminated).astype(bool).reshape(-1),
            "truncated": np.asarray(truncated).astype(bool).reshape(-1),
        }
        if log_probs is not None:
            arrays["log_probs"] = np.asarray(log_probs, dtype=np.float32).reshape(-1)
        for name, arr in arrays.items():
            if len(arr) != n:
                raise DatasetError(
                    f"{source}: {name!r} has {len(arr)} rows but 'observations' has {n}: "
                    "every field needs one row per step"
                )
            if arr.dtype.kind == "f" and n and not np.isfinite(arr).all():
                kind = "NaN" if np.isnan(arr).any() else "infinite"
                raise DatasetError(f"{source}: {name!r} row {_first(~np.isfinite(arr))} is {kind}")
        if next_obs.shape != obs.shape:
            raise DatasetError(
                f"{source}: 'next_observations' has shape {next_obs.shape}, 'observations' {obs.shape}: they must match"
            )
        if n == 0:
            raise DatasetError(f"{source}: the dataset is empty (no steps)")
        # A probability is at most 1, so a discrete log-probability is <= 0; a density (Box actions) can
        # exceed 1 (a narrow Gaussian), so its log can be positive.
        if isinstance(action_space, spaces.Discrete) and "log_probs" in arrays and (arrays["log_probs"] > 1e-6).any():
            raise DatasetError(
                f"{source}: 'log_probs' row {_first(arrays['log_probs'] > 1e-6)} is positive: pass the "
                "log-probability of each taken action (<= 0), not the probability"
            )
        if observation_space is None:
            observation_space = _infer_observation_space(obs)
        if (
            isinstance(observation_space, spaces.Box)
            and tuple(observation_space.shape) != obs.shape[1:]
            and int(np.prod(observation_space.shape)) != int(np.prod(obs.shape[1:]))
        ):
            raise DatasetError(
                f"{source}: observations have shape {obs.shape[1:]} per step, the observation space {observation_space}"
            )
        if isinstance(action_space, spaces.Discrete):
            bad = (act < 0) | (act >= action_space.n)
            if bad.any():
                row = _first(bad)
                raise DatasetError(f"{source}: 'actions' row {row} is {int(act[row])}, outside {action_space}")
        elif isinstance(action_space, spaces.Box) and act.shape[1:] != action_space.shape:
            raise DatasetError(
                f"{source}: actions have shape {act.shape[1:]} per step, the action space {action_space}"
            )
        elif (layout := composite_layout(action_space)) is not None and act.shape[1:] != (layout.width,):
            raise DatasetError(
                f"{source}: actions have shape {act.shape[1:]} per step; a composite action space's actions are rows "
                f"of {layout.width} numbers, each leaf's columns in turn ({', '.join(layout.paths)}: "
                "workbench.envs.composite)"
            )
        done = arrays["terminated"] | arrays["truncated"]
        if not done[-1]:
            arrays["truncated"][-1] = True  # an unfinished last episode is cut there, like a time limit
        self.observations: np.ndarray = arrays["observations"]
        self.actions: np.ndarray = arrays["actions"]
        self.rewards: np.ndarray = arrays["rewards"]
        self.next_observations: np.ndarray = arrays["next_observations"]
        self.terminated: np.ndarray = arrays["terminated"]
        self.truncated: np.ndarray = arrays["truncated"]
        self.log_probs: np.ndarray | None = arrays.get("log_probs")
        self.observation_space = observation_space
        self.action_space = action_space
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.path: str | None = None
        """The directory this dataset was loaded from or last saved to (None for one built in memory):
        what a saved session names as the data it learned from (:meth:`from_run`)."""

    # -- shape -----------------------------------------------------------------------------------

    def _byte_columns(self) -> np.ndarray | None:
        """The columns of the float32 observation rows that hold a Dict's uint8 parts (saved as bytes)."""
        if self.observations.dtype != np.float32 or self.observations.ndim != 2:
            return None
        try:
            columns = byte_columns(self.observation_space)
        except (ValueError, TypeError):
            return None
        if columns is None or columns.max() >= self.observations.shape[1]:
            return None
        return columns

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def discrete(self) -> bool:
        """True when the actions are indices of a Discrete space."""
        return isinstance(self.action_space, spaces.Discrete)

    def leaf_actions(self) -> dict[str, np.ndarray]:
        """A composite (Dict / Tuple) action space's actions per leaf, by the leaf's path (``"kind"``,
        ``"1/shoot"``): each leaf's columns of the action rows in its own shape and dtype (Discrete: its
        indices, shifted by the space's ``start``; Box values as recorded, before any clipping).
        ``ValueError`` for a space that is not composite."""
        layout = composite_layout(self.action_space)
        if layout is None:
            raise ValueError(
                f"leaf_actions() reads a Dict or Tuple action space's leaves; this one is {self.action_space}"
            )
        out = {}
        for leaf in layout.leaves:
            cols = self.actions[:, leaf.start : leaf.stop]
            if leaf.kind == "discrete":
                out[leaf.path] = cols[:, 0].astype(np.int64) + int(leaf.space.start)  # type: ignore[attr-defined]
            else:
                dtype = np.float32 if leaf.kind == "box" else np.int64
                out[leaf.path] = cols.astype(dtype).reshape(len(cols), *(leaf.space.shape or ()))
        return out

    def episode_bounds(self) -> list[tuple[int, int]]:
        """``(start, stop)`` row ranges of the episodes, in order."""
        ends = np.flatnonzero(self.terminated | self.truncated) + 1
        starts = np.concatenate([[0], ends[:-1]])
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

    @property
    def num_episodes(self) -> int:
        """How many episodes the dataset holds."""
        return int((self.terminated | self.truncated).sum())

    def episode_returns(self, gamma: float = 1.0) -> np.ndarray:
        """The (discounted, with ``gamma`` < 1) return of every episode."""
        out = []
        for a, b in self.episode_bounds():
            out.append(float(np.sum(self.rewards[a:b] * gamma ** np.arange(b - a))))
        return np.asarray(out)

    def episodes(self, indices: Sequence[int] | np.ndarray) -> Dataset:
        """A dataset of the episodes at ``indices`` (in that order; repeats allowed)."""
        bounds = self.episode_bounds()
        rows = np.concatenate([np.arange(*bounds[i]) for i in indices]) if len(indices) else np.arange(0)
        return self._rows(rows)

    def _rows(self, rows: np.ndarray) -> Dataset:
        return Dataset(
            self.observations[rows],
            self.actions[rows],
            self.rewards[rows],
            self.next_observations[rows],
            self.terminated[rows],
            self.truncated[rows],
            None if self.log_probs is None else self.log_probs[rows],
            observation_space=self.observation_space,
            action_space=self.action_space,
            metadata=self.metadata,
        )

    def split(self, holdout: float = 0.1, *, seed: int | None = 0) -> tuple[Dataset, Dataset]:
        """``(train, held_out)``: a random ``holdout`` fraction of whole episodes set aside (at
        least one; at least one stays for training), e.g. for off-policy evaluation."""
        if not 0.0 < float(holdout) < 1.0:
            raise ValueError(f"holdout must be a fraction between 0 and 1, got {holdout!r}")
        n = self.num_episodes
        if n < 2:
            raise DatasetError(f"cannot split a dataset of {n} episode: it needs at least two")
        order = np.random.default_rng(seed).permutation(n)
        k = min(max(1, round(holdout * n)), n - 1)
        return self.episodes(np.sort(order[k:])), self.episodes(np.sort(order[:k]))

    @staticmethod
    def concatenate(datasets: Sequence[Dataset]) -> Dataset:
        """One dataset of all the episodes of ``datasets`` (same spaces)."""
        if not datasets:
            raise ValueError("concatenate needs at least one dataset")
        first = datasets[0]
        has_lp = all(d.log_probs is not None for d in datasets)
        return Dataset(
            *(np.concatenate([getattr(d, f) for d in datasets]) for f in _FIELDS),
            np.concatenate([d.log_probs for d in datasets]) if has_lp else None,  # type: ignore[misc, arg-type]
            observation_space=first.observation_space,
            action_space=first.action_space,
            metadata=first.metadata,
        )

    def __repr__(self) -> str:
        lp = ", log_probs" if self.log_probs is not None else ""
        return (
            f"<Dataset: {len(self)} steps, {self.num_episodes} episodes, obs {self.observations.shape[1:]}, "
            f"actions {self.action_space}{lp}>"
        )

    def check_fits(self, obs_shape: tuple[int, ...], action_space: spaces.Space, owner: str) -> None:
        """Raise :class:`DatasetError` when this dataset's observations or actions do not fit an
        agent's (``owner`` names it in the message)."""
        same_kind = isinstance(action_space, spaces.Discrete) == self.discrete
        if not same_kind or (self.discrete and self.action_space.n > action_space.n):  # type: ignore[attr-defined]
            raise DatasetError(f"the dataset's action space {self.action_space} does not fit {owner}'s {action_space}")
        if not self.discrete and self.actions.shape[1:] != action_space.shape:
            raise DatasetError(
                f"the dataset's actions have shape {self.actions.shape[1:]}, {owner} expects {action_space.shape}"
            )
        if self.observations.shape[1:] != tuple(obs_shape):
            raise DatasetError(
                f"the dataset's observations have shape {self.observations.shape[1:]}, "
                f"{owner} expects {tuple(obs_shape)}"
            )

    # -- building -----------------------------------------------------------------------------

    @classmethod
    def from_arrays(
        cls,
        observations: Any,
        actions: Any,
        rewards: Any,
        next_observations: Any = None,
        terminated: Any = None,
        truncated: Any = None,
        log_probs: Any = None,
        *,
        episode_ids: Any = None,
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Dataset:
        """A dataset from arrays with one row per step, episodes one after the other.

        Episode ends come from ``terminated`` / ``truncated`` or from ``episode_ids`` (a change of
        id ends an episode, which counts as terminated unless ``truncated`` says otherwise).
        Without ``next_observations`` each step's next observation is the episode's following
        row (an episode's last step then repeats its own observation, which a terminal step never
        bootstraps from). Spaces are inferred when not given (a Discrete space from integer actions).
        Raises :class:`DatasetError` naming the field when lengths differ, a value is NaN or a
        field is missing.
        """
        source = "Dataset.from_arrays"
        if observations is None:
            raise DatasetError(f"{source}: the field 'observations' is missing")
        obs = _observation_rows(_numeric(source, "observations", observations))
        if obs.ndim == 0:
            raise DatasetError(f"{source}: 'observations' is a single number; pass one row per step")
        n = len(obs)
        if obs.ndim == 1:
            obs = obs[:, None]
        for name, value in (("actions", actions), ("rewards", rewards)):
            if value is None:
                raise DatasetError(f"{source}: the field {name!r} is missing")
            arr = _numeric(source, name, value)
            if arr.ndim == 0 or len(arr) != n:
                rows = "a single number" if arr.ndim == 0 else f"{len(arr)} rows"
                raise DatasetError(f"{source}: {name!r} has {rows} but 'observations' has {n}")
        term = (
            np.zeros(n, dtype=bool)
            if terminated is None
            else _numeric(source, "terminated", terminated).astype(bool).reshape(-1)
        )
        trunc = (
            np.zeros(n, dtype=bool)
            if truncated is None
            else _numeric(source, "truncated", truncated).astype(bool).reshape(-1)
        )
        if episode_ids is not None:
            try:
                ids = np.asarray(episode_ids).reshape(-1)
            except (ValueError, TypeError):
                raise DatasetError(f"{source}: 'episode_ids' is ragged: pass one id per step") from None
            if len(ids) != n:
                raise DatasetError(f"Dataset.from_arrays: 'episode_ids' has {len(ids)} rows but 'observations' has {n}")
            last = np.append(ids[1:] != ids[:-1], True)
            if terminated is None:
                term = last & ~trunc
            else:
                term = term | (last & ~trunc)
        if len(term) != n or len(trunc) != n:
            raise DatasetError(f"Dataset.from_arrays: 'terminated'/'truncated' need {n} rows, one per step")
        if next_observations is None:
            done = term | trunc
            next_obs = np.empty_like(obs)
            next_obs[:-1] = obs[1:]
            next_obs[-1:] = obs[-1:]
            next_obs[done] = obs[done]
        else:
            next_obs = _observation_rows(_numeric(source, "next_observations", next_observations))
        return cls(
            obs,
            actions,
            rewards,
            next_obs,
            term,
            trunc,
            log_probs,
            observation_space=observation_space,
            action_space=action_space,
            metadata=metadata,
            source="Dataset.from_arrays",
        )

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike[str],
        *,
        observations: Sequence[str],
        action: str | Sequence[str],
        reward: str,
        episode: str | None = None,
        terminated: str | None = None,
        truncated: str | None = None,
        next_observations: Sequence[str] | None = None,
        log_prob: str | None = None,
        probability: str | None = None,
        action_space: spaces.Space | None = None,
        observation_space: spaces.Space | None = None,
    ) -> Dataset:
        """A dataset from a CSV file an application logged, one row per decision, with a header.

        Name the columns: ``observations`` (a list), ``action`` (one column, or a list for a
        vector action), ``reward``; episode ends from ``episode`` (an id column), ``terminated``
        and/or ``truncated`` (0/1 or true/false); optionally ``next_observations``, and the
        behaviour policy's ``log_prob`` or ``probability`` of the taken action. A missing column
        is a :class:`DatasetError` that lists the columns the file has.
        """
        path = os.fspath(path)
        try:
            # utf-8-sig: Excel writes a byte-order mark before the header, which would become part of
            # the first column's name.
            with open(path, newline="", encoding="utf-8-sig") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                rows = list(reader)
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{path}: not UTF-8 text (byte {exc.start}); save the CSV as UTF-8 (Excel: 'CSV UTF-8')"
            ) from None
        except csv.Error as exc:
            raise DatasetError(f"{path}: not a readable CSV file ({exc})") from None
        if not rows:
            raise DatasetError(f"{path}: no rows under the header")
        for i, row in enumerate(rows):
            # DictReader fills a short row's missing fields with None and puts a long row's extra
            # fields under the key None: either is a broken line, never a row to guess at.
            if None in row.values() or None in row:
                fields = len(header) - sum(v is None for v in row.values()) + len(row.get(None) or [])
                raise DatasetError(
                    f"{path}: row {i + 1} has {fields} fields, the header {len(header)}: every row needs one "
                    "value per column (an empty value is written as nothing between two commas)"
                )
        action_cols = [action] if isinstance(action, str) else list(action)
        wanted = [*observations, *action_cols, reward]
        for name in (episode, terminated, truncated, log_prob, probability):
            if name is not None:
                wanted.append(name)
        wanted += list(next_observations or [])
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DatasetError(f"{path}: no column {missing[0]!r}; the file has columns {', '.join(header)}")

        def column(name: str, dtype: Any = np.float64) -> np.ndarray:
            values: list[float | bool] = []
            for i, row in enumerate(rows):
                text = (row[name] or "").strip()
                if dtype is bool:
                    low = text.lower()
                    if low in ("1", "true", "yes", "1.0"):
                        values.append(True)
                    elif low in ("0", "false", "no", "0.0", ""):
                        values.append(False)
                    else:
                        raise DatasetError(f"{path}: column {name!r} row {i + 1} is {text!r}, not 0/1 or true/false")
                    continue
                try:
                    values.append(float(text))
                except ValueError:
                    raise DatasetError(f"{path}: column {name!r} row {i + 1} is {text!r}, not a number") from None
            return np.asarray(values, dtype=dtype)

        obs = np.stack([column(c) for c in observations], axis=1)
        acts = np.stack([column(c) for c in action_cols], axis=1)
        if isinstance(action, str):
            acts = acts[:, 0]
            if action_space is None and np.all(acts == np.round(acts)):
                acts = acts.astype(np.int64)
        lp = None
        if log_prob is not None:
            lp = column(log_prob)
        elif probability is not None:
            p = column(probability)
            if ((p <= 0) | (p > 1)).any():
                bad_row = _first((p <= 0) | (p > 1)) + 1
                raise DatasetError(f"{path}: column {probability!r} row {bad_row} is not in (0, 1]")
            lp = np.log(p)
        return cls.from_arrays(
            obs,
            acts,
            column(reward),
            None if next_observations is None else np.stack([column(c) for c in next_observations], axis=1),
            None if terminated is None else column(terminated, bool),
            None if truncated is None else column(truncated, bool),
            lp,
            episode_ids=None if episode is None else [r[episode] for r in rows],
            observation_space=observation_space,
            action_space=action_space,
            metadata={"source": f"csv:{os.path.basename(path)}"},
        )

    @classmethod
    def from_minari(cls, dataset: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> Dataset:
        """A dataset from Minari's local store (``pip install minari``; nothing is downloaded).

        ``dataset`` is a Minari dataset id (``"cartpole/expert-v0"``, looked up under ``root`` or
        Minari's ``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``) or the path of a dataset
        directory (the one holding ``data/``). Box and Discrete spaces; a Dict observation is
        refused with a clear error.
        """
        try:
            import minari  # noqa: F401
            from minari.dataset.minari_storage import MinariStorage
        except ImportError as exc:
            raise ImportError(f"Dataset.from_minari needs the minari package: pip install minari ({exc})") from None
        path = os.fspath(dataset)
        candidates = [path, os.path.join(path, "data")]
        if root is not None:
            candidates.append(os.path.join(os.fspath(root), path, "data"))
        else:
            from minari.storage.datasets_root_dir import get_dataset_path

            try:
                candidates.append(os.path.join(str(get_dataset_path(path)), "data"))
            except Exception:  # an id that does not parse: only the paths above apply
                pass
        data_path = next((c for c in candidates if os.path.isfile(os.path.join(c, "metadata.json"))), None)
        if data_path is None:
            raise DatasetError(
                f"no Minari dataset at {path!r} (looked for metadata.json in {', '.join(candidates)}); "
                "Minari datasets are read from the local store only: download them beforehand with `minari download`"
            )
        storage = MinariStorage.read(data_path)
        obs_space, act_space = storage.observation_space, storage.action_space
        if not isinstance(obs_space, spaces.Box) or not isinstance(act_space, spaces.Box | spaces.Discrete):
            raise DatasetError(
                f"{path}: Dataset.from_minari reads Box observations and Box or Discrete actions; this one has "
                f"{obs_space} and {act_space}"
            )
        parts: dict[str, list[np.ndarray]] = {f: [] for f in _FIELDS}
        for ep in storage.get_episodes(range(storage.total_episodes)):
            o = np.asarray(ep["observations"], dtype=np.float32)
            parts["observations"].append(o[:-1])
            parts["next_observations"].append(o[1:])
            parts["actions"].append(np.asarray(ep["actions"]))
            parts["rewards"].append(np.asarray(ep["rewards"], dtype=np.float32))
            term = np.asarray(ep["terminations"], dtype=bool)
            trunc = np.asarray(ep["truncations"], dtype=bool)
            if not (term[-1] or trunc[-1]):
                trunc = trunc.copy()
                trunc[-1] = True
            parts["terminated"].append(term)
            parts["truncated"].append(trunc)
        if not parts["rewards"]:
            raise DatasetError(f"{path}: the Minari dataset holds no episodes")
        return cls(
            *(np.concatenate(parts[f]) for f in _FIELDS),
            observation_space=obs_space,
            action_space=act_space,
            metadata={"source": f"minari:{storage.metadata.get('dataset_id', path)}"},
            source=path,
        )

    # -- disk ---------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the dataset to the directory ``path`` (``dataset.json`` + ``arrays.npz``, no
        pickle); returns the path. An existing dataset there is replaced; a directory holding
        anything else, or a link in place of either file, is refused (``workbench.files``)."""
        path = os.fspath(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise DatasetError(f"{path}: exists and is not a directory")
        if os.path.isdir(path) and os.listdir(path) and not _is_our_meta(os.path.join(path, "dataset.json")):
            raise DatasetError(f"{path}: a directory that is not a dataset; choose another path")
        meta_path, arrays_path = os.path.join(path, "dataset.json"), os.path.join(path, "arrays.npz")
        try:  # both files are refused before either is written
            check_replaceable(meta_path, _is_our_meta, owner="Dataset.save", kind=_KIND)
            check_replaceable(arrays_path, _is_npz, owner="Dataset.save", kind=_KIND)
        except OSError as exc:
            raise DatasetError(str(exc)) from None
        os.makedirs(path, exist_ok=True)
        arrays = {f: getattr(self, f) for f in _FIELDS}
        if self.log_probs is not None:
            arrays["log_probs"] = self.log_probs
        # A Dict of an image and a float vector: its frame columns written as uint8 beside the float32 ones.
        columns = self._byte_columns()
        for name in ("observations", "next_observations"):
            arrays = split_columns(arrays, name, columns)
        write_npz(arrays_path, arrays)
        meta = {
            "format": DATASET_FORMAT,
            "version": _VERSION,
            "steps": len(self),
            "episodes": self.num_episodes,
            "observation_space": space_to_json(self.observation_space),
            "action_space": space_to_json(self.action_space),
            "has_log_probs": self.log_probs is not None,
            "metadata": self.metadata,
            **({"action_columns": _action_columns(self.action_space)} if composite_layout(self.action_space) else {}),
        }
        write_text(meta_path, json.dumps(meta, indent=1), owner="Dataset.save", kind=_KIND, ours=_is_our_meta)
        self.path = os.path.abspath(path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset written by :meth:`save` (or by recording a session). Raises
        :class:`DatasetError` naming the file and the field.

        Nothing in the files is trusted, with the limits a checkpoint has (``workbench.checkpoint``):
        ``dataset.json`` is parsed with bounds (size, nesting, no NaN), its version, spaces (at
        most ``MAX_SPACE_ELEMENTS`` elements each, checked before anything is allocated), counts
        and metadata are checked for type, and every array's ``.npy`` header is checked against
        the bytes it holds before anything is read."""
        path = os.fspath(path)
        meta_path = os.path.join(path, "dataset.json")
        if not os.path.isdir(path):
            raise DatasetError(f"{path}: no such dataset (a dataset is a directory holding dataset.json)")
        if not os.path.lexists(meta_path):
            raise DatasetError(f"{path}: no dataset.json, so not a workbench dataset")
        try:
            meta = read_json(meta_path, meta_path, MAX_META_BYTES)
            fields = FieldChecks(meta_path)
            if not isinstance(meta, dict) or meta.get("format") != DATASET_FORMAT:
                raise DatasetError(f"{meta_path}: not a workbench dataset")
            fields.version(meta.get("version"), "version", _VERSION)
            for key in ("observation_space", "action_space"):
                if key not in meta:
                    raise DatasetError(f"{meta_path}: field {key!r} is missing; every dataset.json names its spaces")
            observation_space = check_space(meta["observation_space"], meta_path, "observation_space")
            action_space = check_space(meta["action_space"], meta_path, "action_space")
            for key in ("steps", "episodes"):
                fields.integer(meta.get(key), key, optional=True)
            if not isinstance(meta.get("has_log_probs", False), bool):
                raise fields.fail("has_log_probs", meta.get("has_log_probs"), "true or false")
            metadata = fields.obj(meta.get("metadata"), "metadata", optional=True)
            fields.plain(metadata, "metadata")
            arrays = read_npz(os.path.join(path, "arrays.npz"), f"{path}/arrays.npz")
        except CheckpointError as exc:
            raise DatasetError(str(exc)) from None
        try:
            for name in ("observations", "next_observations"):
                arrays = join_columns(arrays, name, f"{path}/arrays.npz")
        except ValueError as exc:
            raise DatasetError(str(exc)) from None
        missing = [f for f in _FIELDS if f not in arrays]
        if missing:
            raise DatasetError(f"{path}/arrays.npz: lacks the array {missing[0]!r}")
        loaded = cls(  # type: ignore[misc]  # the fields, then log_probs
            *(arrays[f] for f in _FIELDS),
            arrays.get("log_probs"),  # type: ignore[arg-type]
            observation_space=observation_space,
            action_space=action_space,
            metadata=metadata,
            source=path,
        )
        loaded.path = os.path.abspath(path)
        return loaded

    @classmethod
    def from_run(cls, run: str | os.PathLike[str], *, which: str = "dataset") -> Dataset:
        """The dataset a saved session learned from (``which="dataset"``) or estimated on
        (``"ope_dataset"``), as the run names it in ``meta.json`` (the directory it was loaded from or
        saved to), so a loaded run can be evaluated again::

            agent = wb.load("runs/cql")
            wb.evaluate_offline(agent, wb.Dataset.from_run("runs/cql", which="ope_dataset"))

        A :class:`DatasetError` when the run names none (its dataset was built in memory and never
        saved: ``ds.save(path)`` before training names it)."""
        from ..checkpoint import read_meta

        if which not in ("dataset", "ope_dataset"):
            raise ValueError(f"which= is 'dataset' or 'ope_dataset', got {which!r}")
        named = read_meta(run).get("session", {}).get(which)
        if not named:
            raise DatasetError(
                f"{os.fspath(run)}: the run names no {which}: the session's data was built in memory and never saved; "
                "save a dataset (ds.save(path)) before training on it so the run can name it"
            )
        return cls.load(named)
