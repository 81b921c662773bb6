"""The one module of private PyTorch names (:mod:`.private_torch`), each behind a fallback.

The networks and optimizers run through PyTorch's public calls (``agents/updates.py``); this package
holds only what ``compile=`` needs and a shared encoder's cache key, so that a PyTorch upgrade touches
one file.
"""

from __future__ import annotations

from . import private_torch

__all__ = ["private_torch"]
