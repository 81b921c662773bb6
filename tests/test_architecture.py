"""docs/architecture.md's picture of the layers is generated from the code, so it cannot go stale.

The layers are tests/test_boundaries.py's ``LAYERS``; the modules and the imports between layers are
read from the package with ``ast`` (as the boundaries test reads them). When a module or an import
between layers changes, this test fails with the new picture; write it with::

    python tests/test_architecture.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_boundaries import ALLOWED_UPWARD, LAYERS, MODULES, PACKAGE, _imports, _layer

DOC = PACKAGE.parent / "docs" / "architecture.md"
BEGIN, END = "<!-- generated: layers begin -->", "<!-- generated: layers end -->"


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    cut = first.find(". ")
    return (first if cut < 0 else first[: cut + 1]).replace("|", "\\|")


def _folder(module: str) -> str:
    """The top-level part of the package a module belongs to (``workbench.agents.ppo`` -> ``agents/``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "workbench/__init__.py"
    path = MODULES[module]
    return f"{parts[1]}/" if len(parts) > 2 or path.name == "__init__.py" else f"{parts[1]}.py"


def render() -> str:
    """The generated part of docs/architecture.md: a mermaid graph of the layers and what each holds."""
    by_layer: dict[int, dict[str, list[str]]] = {}
    for module in sorted(MODULES):
        by_layer.setdefault(_layer(module), {}).setdefault(_folder(module), []).append(module)
    edges: set[tuple[int, int]] = set()
    for module, path in MODULES.items():
        for target, scope, _ in _imports(module, path):
            low, high = _layer(target), _layer(module)
            if target in MODULES and low != high and (module, scope) not in ALLOWED_UPWARD:
                edges.add((high, low))
    lines = ["```mermaid", "flowchart TD"]
    for i in reversed(range(len(LAYERS))):
        folders = ", ".join(sorted(by_layer.get(i, {})))
        lines.append(f'    L{i}["{LAYERS[i][0]}: {folders}"]')
    # Only the arrows that skip no layer in between are drawn; the table lists every module.
    for high, low in sorted(edges, reverse=True):
        if not any((high, mid) in edges and (mid, low) in edges for mid in range(low + 1, high)):
            lines.append(f"    L{high} --> L{low}")
    lines += ["```", "", "| layer | module | what it is for |", "|---|---|---|"]
    for i in reversed(range(len(LAYERS))):
        for _, modules in sorted(by_layer.get(i, {}).items()):
            for module in modules:
                rel = MODULES[module].relative_to(PACKAGE.parent).as_posix()
                lines.append(f"| {LAYERS[i][0]} | `{rel}` | {_summary(MODULES[module])} |")
    return "\n".join(lines)


def _current() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{DOC} lost its generated-section markers {BEGIN!r} / {END!r}"
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")


def test_architecture_doc_shows_the_layers_of_the_code():
    assert _current() == render(), "docs/architecture.md is stale: run `python tests/test_architecture.py`"


def test_every_module_explains_itself():
    missing = [m for m, p in MODULES.items() if not _summary(p)]
    assert not missing, f"modules without a docstring saying what they are for: {missing}"


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    head, tail = text[: text.index(BEGIN) + len(BEGIN)], text[text.index(END) :]
    DOC.write_text(f"{head}\n{render()}\n{tail}", encoding="utf-8")
    print(f"wrote {DOC}")
