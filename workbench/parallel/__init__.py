"""Where env steps happen. Every backend gives the session's loop the same small interface:

``reset() -> obs``, ``step(actions) -> (obs, rewards, terminated, truncated, final_obs)``,
``close()``, plus ``num_envs`` and ``persistent`` (True when the runner may be kept between two
``start`` calls so episodes continue). Agents never know where their env steps ran.
"""

from __future__ import annotations

from typing import Any

from ..envs import EnvSource, VecEnv

__all__ = ["BACKENDS", "make_runner"]

BACKENDS = ("auto", "inprocess")


class InProcessRunner(VecEnv):
    """All envs stepped one after another in the training thread (fastest for cheap envs)."""

    persistent = True

    def __init__(self, source: EnvSource, num_envs: int, seed: int | None) -> None:
        if source.instance is not None:
            envs = [source.instance]
            self._owned = False
        else:
            envs = [source.make() for _ in range(num_envs)]
            self._owned = True
        super().__init__(envs, seed=seed)

    def close(self) -> None:
        # A user-built instance belongs to the application: only close envs built here.
        if self._owned:
            super().close()


def make_runner(
    source: EnvSource,
    num_envs: int,
    *,
    seed: int | None = None,
    num_workers: int = 1,
    backend: str = "auto",
    **options: Any,
) -> InProcessRunner:
    """Build the runner that steps ``num_envs`` envs from ``source`` for a session."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if num_workers != 1:
        raise ValueError(
            f"num_workers={num_workers} needs a parallel backend, which this version does not have: "
            "use num_workers=1"
        )
    return InProcessRunner(source, num_envs, seed)
