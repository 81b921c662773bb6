"""The layers hold: every import in the package, lazy ones included, points down.

The layers, lowest first, are those of the project's design (its "Layers" section: foundations,
memory, agents, parallel, tracking, the run's machinery in ``run/``, the ``Session`` facade, the
front ends), drawn in docs/architecture.md. Each module is read with ``ast`` (nothing is
imported), every ``import`` and ``from ... import`` anywhere in it (module level or inside
functions: lazy imports count; only ``if TYPE_CHECKING:`` blocks, which never run, are left out) is
resolved to a module of the package, and an import of a higher layer fails the test, as does a
cycle among modules of one layer. The few places allowed to reach up are listed with their reason.

Two seams are checked the same way: no module outside ``session.py`` and ``run/`` reads a
``Session``'s private members, and no runner is probed with ``getattr``/``hasattr`` (the ``Runner``
base class declares every member the loop uses).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"

# Lowest first. A module may import its own layer (without cycles) and the layers below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        (
            "workbench._version",
            "workbench.envs",
            "workbench.testing_envs",
            "workbench.signals",
            "workbench.schedules",
            "workbench.exploration",
            "workbench.normalization",
            "workbench.devices",
            "workbench.files",
            "workbench.checkpoint",
            "workbench.loop",
            "workbench.validation",
            "workbench.video",
            "workbench.views",
            "workbench.offline",
            "workbench.offline.datasets",
        ),
    ),
    ("memory", ("workbench.memory",)),
    ("agents", ("workbench.agents", "workbench.presets", "workbench.offline.ope", "workbench.selfplay")),
    ("parallel", ("workbench.parallel",)),
    ("tracking", ("workbench.tracking",)),
    ("run", ("workbench.run", "workbench.offline.recording", "workbench.offline.source", "workbench.card")),
    ("session", ("workbench.session",)),
    (
        "front ends",
        (
            "workbench.ui",
            "workbench.human",
            "workbench.cli",
            "workbench.__main__",
            "workbench.sweeps",
            "workbench.serve",
        ),
    ),
    ("package", ("workbench",)),
]

# (module, enclosing function) -> why it may import a higher layer, lazily.
ALLOWED_UPWARD = {
    ("workbench.views", "ui"): "the one lazy hook through which every model reaches its views",
    ("workbench.session", "Session.serve"): "a session serves itself over HTTP (workbench.serve, on first use)",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _layer(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # The package itself is only its __init__; every module below it needs a layer of its own.
            inside = module.startswith(prefix + ".") and prefix != "workbench"
            if (module == prefix or inside) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def _resolve(current: str, is_package: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The package modules an import statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "workbench" or a.name.startswith("workbench.")]
    if node.level == 0:
        base = node.module or ""
        if not (base == "workbench" or base.startswith("workbench.")):
            return []
    else:
        parts = current.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    found = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        found.append(sub if sub in MODULES else base)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) without an else branch."""
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> list[tuple[str, str, int]]:
    """(imported module, enclosing function qualname or '', line) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue  # names for type hints only: never imported when the program runs
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _resolve(module, is_package, child):
                    out.append((target, ".".join(scope), child.lineno))
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, [*scope, child.name])
            else:
                visit(child, scope)

    visit(tree, [])
    return out


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if _layer(m) < 0]
    assert not unplaced, f"give these modules a layer in tests/test_boundaries.py: {unplaced}"


def test_imports_point_down():
    upward = []
    for module, path in MODULES.items():
        for target, scope, line in _imports(module, path):
            if _layer(target) > _layer(module) and (module, scope) not in ALLOWED_UPWARD:
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} ({scope or 'module level'}) imports {target}, "
                    f"layer {LAYERS[_layer(target)][0]!r} above {LAYERS[_layer(module)][0]!r}"
                )
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_allowed_upward_imports_still_exist():
    # An exception that is no longer used should be struck off the list, not kept as a loophole.
    used = set()
    for module, path in MODULES.items():
        for target, scope, _ in _imports(module, path):
            if _layer(target) > _layer(module):
                used.add((module, scope))
    assert set(ALLOWED_UPWARD) <= used, set(ALLOWED_UPWARD) - used


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for target, scope, _ in _imports(module, path):
            if (module, scope) in ALLOWED_UPWARD or target == module or target not in graph:
                continue
            graph[module].add(target)
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, f"import cycles (lazy imports counted): {cycles}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteration-free recursion is fine at this size."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            result.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    return result


def test_models_reach_views_only_through_the_one_hook():
    """Nothing outside ``workbench/ui`` imports ``workbench.ui`` (lazily or not) but ``workbench.views``, and
    no module of the views shares an import cycle with a module outside them (the hook's edge left out)."""
    hook = "workbench.views"
    reaching = [
        f"{path.relative_to(PACKAGE.parent)}:{line} ({scope or 'module level'}) imports {target}"
        for module, path in MODULES.items()
        if module != hook and not (module == "workbench.ui" or module.startswith("workbench.ui."))
        for target, scope, line in _imports(module, path)
        if target == "workbench.ui" or target.startswith("workbench.ui.")
    ]
    assert not reaching, "modules reaching the views without workbench.views:\n" + "\n".join(reaching)
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        if module == hook:
            continue
        for target, _, _ in _imports(module, path):
            if target in graph and target != module:
                graph[module].add(target)
    mixed = [
        c
        for c in _strongly_connected(graph)
        if any(m.startswith("workbench.ui") for m in c) and not all(m.startswith("workbench.ui") for m in c)
    ]
    assert not mixed, f"import cycles between views and the modules below them: {mixed}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ..ui import PlayViewer", "workbench.ui"),
        ("from .. import checkpoint", "workbench.checkpoint"),
        ("from .base import Agent", "workbench.agents.base"),
        ("import workbench.session", "workbench.session"),
    ],
)
def test_the_resolver_reads_relative_imports(source, expected):
    node = ast.parse(source).body[0]
    assert _resolve("workbench.agents.saving", False, node) == [expected]


# -- a Session's private state stays in session.py and run/ -------------------------------------

# Expressions that hold a session, by name: parameters and attributes called so.
_SESSION_NAMES = {"session", "sess", "s", "other", "owner", "slow_session"}


def _session_private_names() -> set[str]:
    """Every private member of ``Session``: its methods and class attributes whose names start with
    ``_``, and every ``self._x`` it assigns (protocol names such as ``_ipython_display_`` left out)."""
    tree = ast.parse((PACKAGE / "session.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session")
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_") and not n.endswith("_")}


def _is_session_expr(node: ast.AST) -> bool:
    """``session``, ``s``, ``self.session``, ``x._session``...: an expression naming a session."""
    if isinstance(node, ast.Name):
        return node.id in _SESSION_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr.lstrip("_") in _SESSION_NAMES - {"s"}
    return False


def _private_session_reads(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every read of a session's private member in ``source``: ``x._name`` where
    ``x`` names a session, or ``_name`` is a private member of ``Session`` read on anything but
    ``self``/``cls``; ``getattr``/``setattr``/``hasattr`` with such a name count too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if _is_session_expr(node.value) or (node.attr in private and not on_self):
                found.append((node.lineno, ast.unparse(node)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
            and (
                _is_session_expr(node.args[0])
                or (node.args[1].value in private and ast.unparse(node.args[0]) not in ("self", "cls"))
            )
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _outside_session_and_run() -> dict[str, Path]:
    return {
        m: p
        for m, p in MODULES.items()
        if m != "workbench.session" and m != "workbench.run" and not m.startswith("workbench.run.")
    }


def test_no_module_outside_session_and_run_reads_a_sessions_private_state():
    private = _session_private_names()
    assert {"_ctx", "_resume_paused"} <= private  # the scan knows what it looks for
    reads = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for module, path in _outside_session_and_run().items()
        for line, text in _private_session_reads(path.read_text(encoding="utf-8"), private)
    ]
    assert not reads, "a Session's private state read outside session.py and run/:\n" + "\n".join(reads)


@pytest.mark.parametrize(
    "source",
    [
        "def f(session):\n    return session._runner\n",
        "class A:\n    def f(self):\n        return self.session._ctx.runner\n",
        "def f(s):\n    with s._cond:\n        pass\n",
        "def f(x):\n    return x._ctx\n",  # a private member of Session, whatever the name
        "def f(session):\n    return getattr(session, '_where', None)\n",
        "def f(self):\n    self._session._activity()\n",
    ],
)
def test_the_private_state_scan_catches_reads(source):
    assert _private_session_reads(source, _session_private_names())


def test_the_private_state_scan_lets_public_reads_and_own_state_pass():
    source = "class A:\n    def f(self, session):\n        self._ctx = 1\n        return session.steps, session.run_control\n"
    assert _private_session_reads(source, _session_private_names()) == []


# -- runners: members called, never probed ------------------------------------------------------

# The modules that drive runners: the facade, the run's machinery, live edits, the step function.
_RUNNER_USERS = (
    "workbench.session",
    "workbench.run",
    "workbench.run.live_edits",
    "workbench.loop",
    "workbench.run.registry",
)


def _runner_probes(source: str) -> list[tuple[int, str]]:
    """``getattr``/``hasattr`` calls on an expression that names a runner or envs."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            target = ast.unparse(node.args[0]) if node.args else ""
            if "runner" in target.lower() or "envs" in target.lower():
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_runner_is_probed_with_getattr_or_hasattr():
    probes = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for module, path in MODULES.items()
        if any(module == m or module.startswith(m + ".") for m in _RUNNER_USERS)
        or module.startswith("workbench.parallel")
        for line, text in _runner_probes(path.read_text(encoding="utf-8"))
    ]
    assert not probes, "runners probed instead of called (declare the member on parallel.Runner):\n" + "\n".join(probes)
    assert _runner_probes("def f(runner):\n    return getattr(runner, 'interrupt', None)\n")
    assert _runner_probes("def f(self):\n    return hasattr(self._runner, 'masks')\n")


def test_every_runner_subclasses_runner_and_it_declares_what_the_loop_uses():
    from workbench.parallel import InProcessRunner, LocalRunner, Runner
    from workbench.parallel.external import ExternalRunner
    from workbench.parallel.ray_backend import RayRunner
    from workbench.parallel.ray_envs import RayEnvRunner

    for cls in (InProcessRunner, LocalRunner, RayEnvRunner, RayRunner, ExternalRunner):
        assert issubclass(cls, Runner), cls
    # Every member read on a runner in the run's machinery and live edits is declared on Runner.
    used = set()
    for module, path in MODULES.items():
        if module.startswith("workbench.run") or module in ("workbench.run.live_edits", "workbench.session"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "runner":
                    used.add(node.attr)
    assert {"transitions", "wait_ready", "ended_episodes", "drain_signals", "envs_per_worker"} <= used
    undeclared = sorted(name for name in used if not hasattr(Runner, name) and name not in Runner.__annotations__)
    assert not undeclared, f"members the loop uses that parallel.Runner does not declare: {undeclared}"


def _identifiers(tree: ast.AST) -> set[str]:
    """Every name a module's code uses: names, attributes, parameters, definitions, imports. Not its
    strings: prose (docstrings, messages) may name the facade users know."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
            if node.asname:
                names.add(node.asname)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
    # String annotations ("Session") are code too.
    for node in ast.walk(tree):
        annotation = getattr(node, "annotation", None) or getattr(node, "returns", None)
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            names |= _identifiers(ast.parse(annotation.value, mode="eval"))
    return names


def _names_the_session(source: str) -> list[str]:
    """The identifiers of ``source`` that name the session: ``Session`` in any identifier, the
    ``session`` module, or a ``session`` variable or parameter (prose in strings left out)."""
    return sorted(n for n in _identifiers(ast.parse(source)) if "Session" in n or n == "session")


def test_nothing_under_run_names_the_session():
    # The run's machinery works on its state (run/state.py), its lifecycle and its context; the facade
    # composes it (issue 48): no import of it, no annotation, no parameter holding it.
    found = {
        str(path.relative_to(PACKAGE.parent)): names
        for module, path in MODULES.items()
        if module == "workbench.run" or module.startswith("workbench.run.")
        for names in [_names_the_session(path.read_text(encoding="utf-8"))]
        if names
    }
    assert not found, f"run/ names the session: {found}"


@pytest.mark.parametrize(
    "source",
    [
        "from ..session import Session\n",
        "def f(session):\n    return session.steps\n",
        "def f(x: 'Session') -> None:\n    pass\n",
        "class SessionMedia:\n    pass\n",
        "import workbench.session\n",
    ],
)
def test_the_session_name_scan_catches_each_way_of_naming_it(source):
    assert _names_the_session(source)


def test_the_session_name_scan_lets_prose_pass():
    assert (
        _names_the_session('"""Rebuild a run (see ``Session.reopen``)."""\nx = "pass it: Session.reopen(path)"\n') == []
    )


def test_the_trackers_take_signals_and_run_facts_not_the_session():
    for module, path in MODULES.items():
        if module.startswith("workbench.tracking"):
            names = _identifiers(ast.parse(path.read_text(encoding="utf-8")))
            assert "session" not in names and "Session" not in names, module
    from workbench.tracking.feed import SinkFeed

    assert list(inspect.signature(SinkFeed).parameters)[:2] == ["signals", "sinks"]


def test_the_sessions_state_is_one_typed_object_that_run_owns():
    # Session keeps no run state of its own (issue 48: it was 33 attributes that run/ wrote back):
    # the one thing it assigns is its run's context; what users read comes from RunState.
    import dataclasses

    from workbench.run.state import RunState

    tree = ast.parse((PACKAGE / "session.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session")
    assigned = {
        target.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for target in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }
    assert assigned <= {"_ctx", "_shown_dashboard"}, assigned  # the dashboard shown is a view, not run state
    assert dataclasses.is_dataclass(RunState)
    fields = {f.name for f in dataclasses.fields(RunState)}
    assert {"agent", "signals", "episodes", "best_eval_reward", "target_steps", "events", "counters"} <= fields


def test_sweeps_and_populations_write_no_lifecycle_of_their_own():
    # One lifecycle (run/control.py) for the three run kinds: no status, end flag, thread or Ctrl-C
    # handling of their own in the sweep and population modules.
    for name, kind in (("sweep.py", "Sweep"), ("pbt.py", "Population")):
        module = ast.parse((PACKAGE / "sweeps" / name).read_text(encoding="utf-8"))
        tree = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == kind)
        own = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        }
        assert not own & {"_status", "status", "_ended", "_thread", "_supervisor", "error"}, (name, own)
        handlers = [
            ast.unparse(h.type)
            for h in ast.walk(tree)
            if isinstance(h, ast.ExceptHandler) and h.type is not None and "KeyboardInterrupt" in ast.unparse(h.type)
        ]
        assert not handlers, (name, handlers)
