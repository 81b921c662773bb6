"""The layers of DESIGN.md hold: every import in the package, lazy ones included, points down.

Each module is read with ``ast`` (nothing is imported), every ``import`` and ``from ... import``
anywhere in it (module level or inside functions: lazy imports count; only ``if TYPE_CHECKING:``
blocks, which never run, are left out) is resolved to a module of the package, and an import of a higher layer fails the test, as does a cycle among modules of
one layer. The few places allowed to reach up are listed with their reason.
"""

from __future__ import annotations

import ast
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
            "workbench.atari",
            "workbench.signals",
            "workbench.schedules",
            "workbench.exploration",
            "workbench.normalization",
            "workbench.checkpoint",
            "workbench.loop",
            "workbench.masks",
            "workbench.validation",
            "workbench.testing_envs",
            "workbench.datasets",
        ),
    ),
    ("memory", ("workbench.memory",)),
    ("agents", ("workbench.agents", "workbench.presets", "workbench.ope")),
    ("parallel", ("workbench.parallel",)),
    ("tracking", ("workbench.tracking",)),
    (
        "session",
        (
            "workbench.session",
            "workbench.control",
            "workbench.live_edits",
            "workbench.recording",
            "workbench.offline_loop",
        ),
    ),
    (
        "front ends",
        (
            "workbench.ui",
            "workbench.cli",
            "workbench.__main__",
            "workbench.sweeps",
            "workbench.sweep_trials",
            "workbench.sweeps_ray",
            "workbench.sweep_cli",
            "workbench.serve",
        ),
    ),
    ("package", ("workbench",)),
]

# (module, enclosing function) -> why it may import a higher layer, lazily.
ALLOWED_UPWARD = {
    ("workbench.session", "_views"): "a session shows itself in a notebook (the dashboard, progress)",
    ("workbench.agents.base", "Agent.play"): "play(viewer=True) shows the play viewer in a notebook",
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
