"""Hyperparameter search on live sessions: sweeps on Optuna (:func:`sweep`) and population-based training
(:func:`pbt`).

* :func:`sweep` returns a :class:`Sweep` that trains its trials as sessions on Optuna (locally in
  processes or on Ray Tune, :mod:`.ray_tune`); ``workbench sweep`` (:mod:`.cli`) runs one from the
  command line. They need Optuna.
* :func:`pbt` returns a :class:`Population`: population-based training whose members are live
  sessions (:mod:`.pbt`, no Optuna needed); ``workbench pbt`` runs one from the command line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ below imports these
    from .pbt import Population, PopulationEvent, pbt
    from .sweep import Sweep, TrialResult, parse_space, sweep

__all__ = ["Population", "PopulationEvent", "Sweep", "TrialResult", "parse_space", "pbt", "sweep"]


def __getattr__(name: str) -> Any:
    """The names load on first use, so that ``workbench --help`` (which imports :mod:`.cli`) imports no session."""
    if name in ("Population", "PopulationEvent", "pbt"):
        value = getattr(importlib.import_module(".pbt", __name__), name)
    elif name in ("Sweep", "TrialResult", "parse_space", "sweep"):
        try:
            module = importlib.import_module(".sweep", __name__)
        except (
            ImportError
        ) as missing:  # Optuna is not installed: the sweeps need it, population-based training does not
            why = f"{type(missing).__name__}: {missing}"
            raise ImportError(
                f"workbench.sweeps.{name} needs Optuna: pip install 'rl-workbench[optuna]' ({why})"
            ) from missing
        value = getattr(module, name)
    else:
        raise AttributeError(f"module 'workbench.sweeps' has no attribute {name!r}")
    globals()[name] = value
    return value
