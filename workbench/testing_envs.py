"""Deprecated spelling of :mod:`workbench.envs.testing`, kept so code written for earlier versions runs."""

import warnings

from .envs.testing import *  # noqa: F403 - the same names
from .envs.testing import __all__  # noqa: F401

warnings.warn(
    "workbench.testing_envs moved to workbench.envs.testing; import that instead",
    DeprecationWarning,
    stacklevel=2,
)
