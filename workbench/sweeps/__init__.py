"""Hyperparameter search on live sessions: sweeps on Optuna (:func:`sweep`) and population-based training
(:func:`pbt`).

* :func:`sweep` returns a :class:`Sweep` that trains its trials as sessions on Optuna (locally in
  processes or on Ray Tune, :mod:`.ray_tune`); ``workbench sweep`` (:mod:`.cli`) runs one from the
  command line. They need Optuna.
* :func:`pbt` returns a :class:`Population`: population-based training whose members are live
  sessions (:mod:`.pbt`, no Optuna needed); ``workbench pbt`` runs one from the command line.
"""

from __future__ import annotations

from typing import Any

from .pbt import Population, PopulationEvent, pbt

__all__ = ["Population", "PopulationEvent", "Sweep", "TrialResult", "parse_space", "pbt", "sweep"]

try:
    from .sweep import Sweep, TrialResult, parse_space, sweep
except ImportError as _missing:  # Optuna is not installed: the sweeps need it, population-based training does not
    _WHY = f"{type(_missing).__name__}: {_missing}"

    def __getattr__(name: str) -> Any:
        if name in ("Sweep", "TrialResult", "parse_space", "sweep"):
            raise ImportError(f"workbench.sweeps.{name} needs Optuna: pip install 'rl-workbench[optuna]' ({_WHY})")
        raise AttributeError(f"module 'workbench.sweeps' has no attribute {name!r}")
