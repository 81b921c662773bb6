"""Hyperparameter sweeps on Optuna, as live objects: :func:`sweep` returns a :class:`Sweep` that trains
its trials as sessions (locally in processes or on Ray Tune, :mod:`.ray_tune`), and ``workbench sweep``
(:mod:`.cli`) runs one from the command line. Importing it imports Optuna.
"""

from .sweep import Sweep, TrialResult, parse_space, sweep

__all__ = ["Sweep", "TrialResult", "parse_space", "sweep"]
