"""Hyperparameter search on live sessions: sweeps on Optuna (:func:`sweep`) and population-based training
(:func:`pbt`).

* :func:`sweep` returns a :class:`Sweep` that trains its trials as sessions on Optuna (locally in
  processes or on Ray Tune, :mod:`.ray_tune`); ``workbench sweep`` (:mod:`.cli`) runs one from the
  command line. These names import Optuna when first used.
* :func:`pbt` returns a :class:`Population`: population-based training whose members are live
  sessions (:mod:`.pbt`, no Optuna needed); ``workbench pbt`` runs one from the command line.
"""

from __future__ import annotations

import importlib
from typing import Any

from .pbt import Population, PopulationEvent, pbt

__all__ = ["Population", "PopulationEvent", "Sweep", "TrialResult", "parse_space", "pbt", "sweep"]

_ON_OPTUNA = ("Sweep", "TrialResult", "parse_space", "sweep")


def __getattr__(name: str) -> Any:
    if name in _ON_OPTUNA:  # the sweeps load Optuna; population-based training does not
        value = getattr(importlib.import_module(".sweep", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'workbench.sweeps' has no attribute {name!r}")
