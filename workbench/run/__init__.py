"""The run's machinery, composed by :class:`workbench.Session` (the facade users know).

* :mod:`~workbench.run.control`: :class:`RunControl`, the one lifecycle of sessions, sweeps and
  populations: status, start, pause, resume, stop, wait (Ctrl-C and SIGTERM, the error re-raised),
  what the training thread is inside, and the timeouts of control calls;
* :mod:`~workbench.run.state`: :class:`RunState`, the run's state as one typed object (what it
  trains, its settings, signals and counters), which the facade exposes and reads;
* :mod:`~workbench.run.loops`: :class:`EnvLoop`, :class:`ExternalLoop` and :class:`OfflineLoop`
  behind one interface, ``run(ctx, target_steps) -> end reason``; a session's mode is the loop it
  composes;
* :mod:`~workbench.run.context`: :class:`RunContext`, what a loop sees of its session
  (``between_steps``, ``update_once``, ``after_step``, ``ask_stop_when``, the runner) and the
  training thread's body;
* :mod:`~workbench.run.periodic`: evaluation, off-policy estimates and checkpoints every so many steps;
* :mod:`~workbench.run.persistence`: the run's counters, saved beside the agent and read back;
* :mod:`~workbench.run.registry`: the live runs of the process, and the exit hook that stops them;
* :mod:`~workbench.run.interrupts`: Ctrl-C and SIGTERM while a caller waits on a run stop the run first.

Nothing outside ``session.py`` and this package touches a Session's private state
(``tests/test_boundaries.py`` checks it).
"""

from __future__ import annotations

from .context import RunContext
from .control import STATUSES, RunControl
from .loops import EnvLoop, ExternalLoop, Loop, OfflineLoop
from .periodic import Periodic
from .state import RunState

__all__ = [
    "STATUSES",
    "EnvLoop",
    "ExternalLoop",
    "Loop",
    "OfflineLoop",
    "Periodic",
    "RunContext",
    "RunControl",
    "RunState",
]
